//! The persistent-memory region that backs the fast side.
//!
//! Owns: [`PmemRegion`], a shared memory mapping of a file, and [`Backing`], the honest answer
//! to "what survives what". The mapping is tried, in order, as a DAX mapping
//! (`MAP_SHARED_VALIDATE | MAP_SYNC`, only accepted by the kernel on a DAX file system over
//! persistent memory), then as a plain shared mapping; a plain mapping is classified as tmpfs
//! (by `statfs`) or as a disk file.
//!
//! Invariants: one process (one handle) maps a region at a time (exclusive `flock`); the
//! mapping's length equals the file's length and never changes while mapped;
//! [`PmemRegion::persist`] returns only after the bytes in the range are as durable as the
//! backing can make them (cache lines flushed for DAX, `msync(MS_SYNC)` for a disk file when
//! msync is on, a store fence otherwise); the region is unmapped exactly once, on drop.

use crate::error::{Error, Result};
use crate::io::{IoError, IoOpKind};
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

/// What kind of memory backs the ring, and therefore what a persisted byte survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// A DAX mapping of persistent memory (`MAP_SYNC` accepted); persistence by cache-line
    /// flush. Survives process crash and power loss.
    Dax,
    /// A file on tmpfs (RAM). Survives a process crash (SIGKILL), not a power loss or reboot.
    Tmpfs,
    /// A file on a disk file system, mapped through the page cache. With `msync` on, every
    /// persisted range is written to the disk before it is counted (survives power loss); with
    /// it off, only a process crash is survived.
    DiskFile {
        /// Whether each persisted range is `msync`ed before the credit counter covers it.
        msync: bool,
    },
}

impl Backing {
    /// One plain sentence saying what an acknowledged (credited) byte survives.
    pub fn durability(&self) -> &'static str {
        match self {
            Backing::Dax => {
                "DAX persistent memory (MAP_SYNC), cache lines flushed before credit: \
                 survives process crash and power loss"
            }
            Backing::Tmpfs => {
                "file on tmpfs (RAM): survives a process crash (kill -9), NOT a power loss or \
                 reboot"
            }
            Backing::DiskFile { msync: true } => {
                "mapped disk file, msync(MS_SYNC) before credit: survives process crash and \
                 power loss (each commit pays an msync)"
            }
            Backing::DiskFile { msync: false } => {
                "mapped disk file without msync: survives a process crash, NOT a power loss \
                 (dirty pages may still be in the page cache)"
            }
        }
    }

    /// Short label for reports and CSV columns.
    pub fn label(&self) -> &'static str {
        match self {
            Backing::Dax => "dax",
            Backing::Tmpfs => "tmpfs",
            Backing::DiskFile { msync: true } => "diskfile+msync",
            Backing::DiskFile { msync: false } => "diskfile",
        }
    }
}

/// Whether to `msync` a disk-file mapping (ignored for DAX and tmpfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsyncPolicy {
    /// msync every persisted range (power-loss safe, slow).
    Always,
    /// Never msync (process-crash safe only).
    Never,
}

/// A shared, writable mapping of a whole file.
pub struct PmemRegion {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    path: PathBuf,
    page: usize,
    /// Kept open: it holds the exclusive `flock` that keeps a second process out.
    _file: std::fs::File,
}

// SAFETY: the region is plain shared memory; all concurrent access goes through raw-pointer
// copies on ranges the callers (the xlog) keep disjoint between writers, and through atomics.
unsafe impl Send for PmemRegion {}
// SAFETY: as above; `&PmemRegion` only hands out raw pointers and performs syscalls.
unsafe impl Sync for PmemRegion {}

fn os_err(path: &Path, op: IoOpKind, e: std::io::Error) -> Error {
    Error::Io(IoError::os(&path.display().to_string(), op, 0, 0, e))
}

impl PmemRegion {
    /// Opens (creating if missing) `path`, sizes it to `len` bytes and maps it shared.
    ///
    /// A file that exists with another length is a configuration error (the ring size is part
    /// of the on-media format).
    pub fn open(path: &Path, len: usize, msync: MsyncPolicy) -> Result<Self> {
        assert!(len > 0, "region length must be positive");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| os_err(path, IoOpKind::Setup, e))?;
        let cur = file.metadata().map_err(|e| os_err(path, IoOpKind::Setup, e))?.len();
        if cur == 0 {
            file.set_len(len as u64).map_err(|e| os_err(path, IoOpKind::Setup, e))?;
        } else if cur != len as u64 {
            return Err(Error::Config {
                key: "xlog.ring_bytes".into(),
                detail: format!(
                    "{} holds a region of {cur} bytes but the configuration asks for {len}",
                    path.display()
                ),
            });
        }
        let fd = file.as_raw_fd();
        // SAFETY: flock on a valid fd has no memory-safety preconditions.
        if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(Error::InvalidArgument(format!(
                "{} is in use by another process or handle (flock: {e}); one XLog per region",
                path.display()
            )));
        }
        // SAFETY: a fresh mapping of a valid fd for `len` bytes; the kernel picks the address.
        let dax = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                fd,
                0,
            )
        };
        let (raw, backing) = if dax != libc::MAP_FAILED {
            (dax, Backing::Dax)
        } else {
            // SAFETY: as above, without MAP_SYNC.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(os_err(path, IoOpKind::Setup, std::io::Error::last_os_error()));
            }
            (
                raw,
                if is_tmpfs(&file) {
                    Backing::Tmpfs
                } else {
                    Backing::DiskFile { msync: msync == MsyncPolicy::Always }
                },
            )
        };
        let ptr = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| Error::InvalidArgument("mmap returned null".into()))?;
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        Ok(Self { ptr, len, backing, path: path.to_path_buf(), page, _file: file })
    }

    /// What backs the mapping.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (regions have a positive length); present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Raw pointer to byte `offset`. Callers keep concurrent writes to disjoint ranges.
    ///
    /// # Panics
    /// If `offset + len` exceeds the region.
    pub fn ptr_at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "range {offset}+{len} outside region"
        );
        // SAFETY: in bounds per the assertion.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    /// Copies `src` into the region at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) {
        let dst = self.ptr_at(offset, src.len());
        // SAFETY: dst is valid for src.len() bytes (checked); src is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
    }

    /// Copies region bytes at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        let src = self.ptr_at(offset, dst.len());
        // SAFETY: src is valid for dst.len() bytes (checked); dst is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
    }

    /// Makes `[offset, offset + len)` durable to the degree the backing offers.
    pub fn persist(&self, offset: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let _ = self.ptr_at(offset, len);
        match self.backing {
            Backing::Dax => {
                flush_cache_lines(self.ptr_at(offset, len), len);
                Ok(())
            }
            Backing::Tmpfs | Backing::DiskFile { msync: false } => {
                fence(Ordering::SeqCst);
                Ok(())
            }
            Backing::DiskFile { msync: true } => {
                let start = offset / self.page * self.page;
                let end = (offset + len).div_ceil(self.page) * self.page;
                let end = end.min(self.len);
                // SAFETY: [start, end) lies within the mapping and start is page aligned.
                let rc = unsafe {
                    libc::msync(self.ptr_at(start, end - start).cast(), end - start, libc::MS_SYNC)
                };
                if rc != 0 {
                    return Err(Error::Io(IoError::os(
                        &self.path.display().to_string(),
                        IoOpKind::Sync,
                        start as u64,
                        end - start,
                        std::io::Error::last_os_error(),
                    )));
                }
                Ok(())
            }
        }
    }
}

impl Drop for PmemRegion {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping created in `open`, unmapped only here.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

impl std::fmt::Debug for PmemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PmemRegion {{ path: {}, len: {}, backing: {:?} }}",
            self.path.display(),
            self.len,
            self.backing
        )
    }
}

fn is_tmpfs(file: &std::fs::File) -> bool {
    // SAFETY: statfs is plain old data; zeroed is a valid initial value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and a valid out-pointer.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    #[allow(clippy::unnecessary_cast)] // the field and constant types differ between targets
    let tmpfs = st.f_type as i64 == libc::TMPFS_MAGIC as i64;
    rc == 0 && tmpfs
}

#[cfg(target_arch = "x86_64")]
fn flush_cache_lines(ptr: *mut u8, len: usize) {
    const LINE: usize = 64;
    let start = ptr as usize / LINE * LINE;
    let end = ptr as usize + len;
    let mut a = start;
    while a < end {
        // SAFETY: `a` lies within (the cache lines of) the mapped range; clflush only needs a
        // mapped address and SSE2, which every x86_64 has.
        unsafe { std::arch::x86_64::_mm_clflush(a as *const u8) };
        a += LINE;
    }
    // SAFETY: sfence has no preconditions.
    unsafe { std::arch::x86_64::_mm_sfence() };
}

#[cfg(not(target_arch = "x86_64"))]
fn flush_cache_lines(_ptr: *mut u8, _len: usize) {
    // No portable user-space cache flush: a DAX mapping is only detected where MAP_SYNC works,
    // which on other architectures we treat conservatively with a full fence.
    fence(Ordering::SeqCst);
}
