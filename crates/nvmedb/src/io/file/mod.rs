//! Real files: an O_DIRECT file device doing its I/O through io_uring, with a pread/pwrite
//! fallback, and [`DirStorage`], a directory of such files.
//!
//! Owns: [`FileDevice`], [`FileOptions`], [`Backend`], [`SingleOpPath`], and the per-thread
//! io_uring used by synchronous calls and batches. By seam: `queue.rs` ([`UringQueue`]: one
//! ring per open queue, for deep asynchronous I/O; a closed queue's ring, idle, is kept by its
//! thread for the thread's next queue of the same depth), `dir.rs` ([`DirStorage`]).
//!
//! Invariants:
//! - the kernel never holds a pointer into a buffer after the call that lent it returns: a batch
//!   waits for every completion it submitted (retrying interrupted waits), and a queue waits for
//!   all its in-flight operations when dropped (so a ring kept for reuse has nothing in it);
//! - a read of bytes past the end of the file returns zeroes (like [`MemDevice`](super::MemDevice));
//!   a short transfer in the middle of the file is finished with pread/pwrite;
//! - `info().backend` says which path is in use (`io_uring` or `pread`) and whether the file is
//!   really O_DIRECT.

use super::{
    check_alignment, AlignedBuf, Device, DeviceInfo, IoError, IoOpKind, IoQueue, IoRequest, IoResult,
    DIRECT_IO_ALIGN,
};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

mod dir;
mod queue;

pub use dir::DirStorage;
pub use queue::UringQueue;

/// Environment variable that forces the I/O backend of files opened with [`Backend::Auto`]:
/// `pread` or `io_uring`.
pub const BACKEND_ENV: &str = "NVMEDB_IO_BACKEND";

/// Bytes of zeroes per write when [`FileDevice`] fills a file's holes
/// ([`Device::preallocate`]).
pub const PREALLOCATE_CHUNK: usize = 4 << 20;

/// Entries of the per-thread ring used by synchronous calls and batches.
const THREAD_RING_ENTRIES: u32 = 128;

/// Which kernel interface a [`FileDevice`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// io_uring when it can be set up, else pread/pwrite; [`BACKEND_ENV`] may force either.
    Auto,
    /// io_uring, or fail to open if it cannot be set up.
    IoUring,
    /// pread/pwrite only (queues run each operation synchronously).
    Pread,
}

impl Backend {
    /// Parses `auto`, `io_uring` (or `uring`) and `pread` (or `psync`).
    pub fn parse(s: &str) -> Option<Backend> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(Backend::Auto),
            "io_uring" | "uring" | "io-uring" => Some(Backend::IoUring),
            "pread" | "psync" | "pwrite" => Some(Backend::Pread),
            _ => None,
        }
    }
}

/// How a single synchronous `read_at`/`write_at` reaches the kernel on the io_uring backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SingleOpPath {
    /// One pread/pwrite system call (no shared state; measured fastest at depth 1).
    Pread,
    /// The calling thread's own ring (one submit-and-wait system call).
    ThreadRing,
}

/// How to open a [`FileDevice`].
#[derive(Debug, Clone)]
pub struct FileOptions {
    /// Create the file when missing.
    pub create: bool,
    /// Open for reading only (a read-only database open, `nvmedb inspect`): works on a
    /// read-only file system or files the process may not write; writes fail.
    pub read_only: bool,
    /// Open with O_DIRECT (bypass the page cache). When the file system refuses it (tmpfs), the
    /// file is opened buffered and `info().backend` says so.
    pub direct: bool,
    /// Kernel interface.
    pub backend: Backend,
    /// Path of single synchronous calls on the io_uring backend.
    pub single_op: SingleOpPath,
    /// How many operations an [`UringQueue`] hands the kernel per `io_uring_enter` (at least 1).
    /// 1 (fio's default) was measured fastest on a virtio disk at depth 32: submitting a whole
    /// refill at once keeps the operations in lock-step and cost ~20 % of the IOPS.
    pub queue_submit_batch: usize,
}

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            create: true,
            read_only: false,
            direct: true,
            backend: Backend::Auto,
            single_op: SingleOpPath::Pread,
            queue_submit_batch: 1,
        }
    }
}

/// A file on a real file system, read and written in aligned blocks.
#[derive(Debug)]
pub struct FileDevice {
    pub(super) name: String,
    pub(super) file: File,
    pub(super) uring: bool,
    pub(super) direct: bool,
    pub(super) single_op: SingleOpPath,
    pub(super) queue_submit_batch: usize,
}

thread_local! {
    /// The calling thread's ring for synchronous calls and batches (any device, any fd).
    static THREAD_RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
    /// System calls of this thread that handed I/O to the kernel (see [`thread_submissions`]).
    static SUBMISSIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many system calls that hand I/O to the kernel the calling thread has made through
/// [`FileDevice`]s and their queues since it started: one per `pread`/`pwrite`, one per
/// `io_uring_enter` that submitted entries (however many). A batch of reads issued together
/// counts once; the same reads issued one at a time count once each. Tests and the lab count
/// with it (submissions per miss).
pub fn thread_submissions() -> u64 {
    SUBMISSIONS.with(|c| c.get())
}

/// Counts one submitting system call of this thread (see [`thread_submissions`]).
pub(super) fn count_submission() {
    // During the thread's exit the counter may be gone: nothing is counted then.
    let _ = SUBMISSIONS.try_with(|c| c.set(c.get() + 1));
}

fn uring_available() -> bool {
    IoUring::new(4).is_ok()
}

pub(super) fn last_os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl FileDevice {
    /// Opens (or creates) `path` with the default options: O_DIRECT, io_uring when available.
    pub fn open(path: impl AsRef<Path>) -> IoResult<Self> {
        Self::open_with(path, &FileOptions::default())
    }

    /// Opens `path` as `opts` say.
    pub fn open_with(path: impl AsRef<Path>, opts: &FileOptions) -> IoResult<Self> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let setup_err = |e: std::io::Error| IoError::os(&name, IoOpKind::Setup, 0, 0, e);
        let mut backend = opts.backend;
        if backend == Backend::Auto {
            if let Ok(v) = std::env::var(BACKEND_ENV) {
                backend = Backend::parse(&v).ok_or_else(|| {
                    setup_err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{BACKEND_ENV}={v:?}: expected `pread`, `io_uring` or `auto`"),
                    ))
                })?;
            }
        }
        let uring = match backend {
            Backend::Pread => false,
            Backend::Auto => uring_available(),
            Backend::IoUring => {
                IoUring::new(4).map_err(setup_err)?;
                true
            }
        };
        let open = |direct: bool| {
            let mut oo = OpenOptions::new();
            oo.read(true).write(!opts.read_only).create(opts.create && !opts.read_only);
            if direct {
                oo.custom_flags(libc::O_DIRECT);
            }
            oo.open(path)
        };
        let (file, direct) = match open(opts.direct) {
            Ok(f) => (f, opts.direct),
            // tmpfs and a few others refuse O_DIRECT with EINVAL: fall back to buffered I/O.
            Err(e) if opts.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                (open(false).map_err(setup_err)?, false)
            }
            Err(e) => return Err(setup_err(e)),
        };
        Ok(Self {
            name,
            file,
            uring,
            direct,
            single_op: opts.single_op,
            queue_submit_batch: opts.queue_submit_batch.max(1),
        })
    }

    /// True when the file really bypasses the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// True when I/O goes through io_uring.
    pub fn uses_io_uring(&self) -> bool {
        self.uring
    }

    pub(super) fn err(&self, op: IoOpKind, offset: u64, len: usize, e: std::io::Error) -> IoError {
        IoError::os(&self.name, op, offset, len, e)
    }

    /// pread until `buf` is full; bytes past end of file read as zero.
    fn pread_full(&self, offset: u64, buf: &mut [u8], mut done: usize) -> IoResult<()> {
        let fd = self.file.as_raw_fd();
        while done < buf.len() {
            let rest = &mut buf[done..];
            count_submission();
            // SAFETY: `rest` is a valid writable region of rest.len() bytes for the whole call.
            let n = unsafe {
                libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), (offset + done as u64) as libc::off_t)
            };
            if n < 0 {
                let e = last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(self.err(IoOpKind::Read, offset, buf.len(), e));
            }
            if n == 0 {
                // End of file: the rest was never written.
                buf[done..].fill(0);
                return Ok(());
            }
            done += n as usize;
        }
        Ok(())
    }

    fn pwrite_full(&self, offset: u64, buf: &[u8], mut done: usize) -> IoResult<()> {
        let fd = self.file.as_raw_fd();
        while done < buf.len() {
            let rest = &buf[done..];
            count_submission();
            // SAFETY: `rest` is a valid readable region of rest.len() bytes for the whole call.
            let n = unsafe {
                libc::pwrite(fd, rest.as_ptr().cast(), rest.len(), (offset + done as u64) as libc::off_t)
            };
            if n < 0 {
                let e = last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(self.err(IoOpKind::Write, offset, buf.len(), e));
            }
            if n == 0 {
                return Err(self.err(
                    IoOpKind::Write,
                    offset,
                    buf.len(),
                    std::io::Error::new(std::io::ErrorKind::WriteZero, "pwrite wrote 0 bytes"),
                ));
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Turns one io_uring completion result into the request's outcome, finishing short
    /// transfers synchronously.
    pub(super) fn finish(&self, req: &mut IoRequest<'_>, res: i32) -> IoResult<()> {
        let (offset, len) = (req.offset(), req.len());
        let kind = if matches!(req, IoRequest::Read { .. }) { IoOpKind::Read } else { IoOpKind::Write };
        if res < 0 {
            if res == -libc::EAGAIN || res == -libc::EINTR {
                return match req {
                    IoRequest::Read { offset, buf } => self.pread_full(*offset, buf, 0),
                    IoRequest::Write { offset, buf } => self.pwrite_full(*offset, buf, 0),
                };
            }
            return Err(self.err(kind, offset, len, std::io::Error::from_raw_os_error(-res)));
        }
        let n = res as usize;
        if n >= len {
            return Ok(());
        }
        match req {
            IoRequest::Read { buf, .. } if n == 0 => {
                buf.fill(0);
                Ok(())
            }
            IoRequest::Read { offset, buf } => self.pread_full(*offset, buf, n),
            IoRequest::Write { offset, buf } => self.pwrite_full(*offset, buf, n),
        }
    }

    fn sqe_for(&self, req: &mut IoRequest<'_>, user_data: u64) -> io_uring::squeue::Entry {
        let fd = types::Fd(self.file.as_raw_fd());
        match req {
            IoRequest::Read { offset, buf } => opcode::Read::new(fd, buf.as_mut_ptr(), buf.len() as u32)
                .offset(*offset)
                .build()
                .user_data(user_data),
            IoRequest::Write { offset, buf } => opcode::Write::new(fd, buf.as_ptr(), buf.len() as u32)
                .offset(*offset)
                .build()
                .user_data(user_data),
        }
    }

    /// Runs `reqs` through `ring`, at most the ring's size at a time; waits for every completion.
    fn batch_on_ring(&self, ring: &mut IoUring, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        let mut first_err: Option<(usize, IoError)> = None;
        let cap = ring.params().sq_entries() as usize;
        let mut results = vec![0i32; cap];
        let mut base = 0;
        for chunk in reqs.chunks_mut(cap) {
            {
                let mut sq = ring.submission();
                for (i, req) in chunk.iter_mut().enumerate() {
                    let sqe = self.sqe_for(req, i as u64);
                    // SAFETY: the buffer behind the entry is borrowed by `chunk` for this whole
                    // function, and we wait below for every entry's completion before returning.
                    // The ring is empty (chunk.len() <= capacity), so push cannot fail.
                    if unsafe { sq.push(&sqe) }.is_err() {
                        unreachable!(
                            "submission queue of {cap} entries overflowed by {} entries",
                            chunk.len()
                        );
                    }
                }
            }
            let mut reaped = 0;
            while reaped < chunk.len() {
                match ring.submit_and_wait(chunk.len() - reaped) {
                    Ok(submitted) => {
                        if submitted > 0 {
                            count_submission();
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                    Err(e) => {
                        // The kernel may still own buffers we lent it: returning now would be
                        // unsound, so this is fatal.
                        eprintln!("io_uring wait failed with buffers in flight on {}: {e}", self.name);
                        std::process::abort();
                    }
                }
                for cqe in ring.completion() {
                    results[cqe.user_data() as usize] = cqe.result();
                    reaped += 1;
                }
            }
            for (i, req) in chunk.iter_mut().enumerate() {
                if let Err(e) = self.finish(req, results[i]) {
                    if first_err.is_none() {
                        first_err = Some((base + i, e));
                    }
                }
            }
            base += chunk.len();
        }
        first_err.map_or(Ok(()), |(_, e)| Err(e))
    }

    /// Runs `f` with this thread's ring, or returns `None` when it cannot be had (setup failed
    /// or the ring is already in use further up this thread's stack).
    fn with_thread_ring<R>(&self, f: impl FnOnce(&mut IoUring) -> R) -> Option<R> {
        THREAD_RING.with(|cell| {
            let mut slot = cell.try_borrow_mut().ok()?;
            if slot.is_none() {
                *slot = Some(IoUring::new(THREAD_RING_ENTRIES).ok()?);
            }
            slot.as_mut().map(f)
        })
    }

    fn single(&self, req: &mut IoRequest<'_>) -> IoResult<()> {
        if self.uring && self.single_op == SingleOpPath::ThreadRing {
            if let Some(r) = self.with_thread_ring(|ring| self.batch_on_ring(ring, std::slice::from_mut(req)))
            {
                return r;
            }
        }
        match req {
            IoRequest::Read { offset, buf } => self.pread_full(*offset, buf, 0),
            IoRequest::Write { offset, buf } => self.pwrite_full(*offset, buf, 0),
        }
    }
}

impl Device for FileDevice {
    fn info(&self) -> DeviceInfo {
        let mut backend = if self.uring { "io_uring".to_string() } else { "pread".to_string() };
        backend.push_str(if self.direct { "+O_DIRECT" } else { "+buffered (O_DIRECT refused)" });
        DeviceInfo { name: self.name.clone(), backend, emulated_profile: None }
    }

    fn alignment(&self) -> usize {
        DIRECT_IO_ALIGN
    }

    fn capacity(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0)
    }

    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        let cur = self.file.metadata().map_err(|e| self.err(IoOpKind::Setup, 0, 0, e))?.len();
        if cur < len {
            self.file.set_len(len).map_err(|e| self.err(IoOpKind::Setup, len, 0, e))?;
        }
        Ok(())
    }

    /// Fills every hole in `[offset, offset + len)` (found with `SEEK_HOLE`/`SEEK_DATA`) with
    /// zeroes, in writes of at most [`PREALLOCATE_CHUNK`], then syncs if it wrote anything: a
    /// range that is already allocated (a recycled log segment) costs an `lseek` or two.
    fn preallocate(&self, offset: u64, len: u64) -> IoResult<()> {
        let end = offset + len;
        self.ensure_capacity(end)?;
        let fd = self.file.as_raw_fd();
        let seek = |off: u64, whence: libc::c_int| -> IoResult<Option<u64>> {
            // SAFETY: lseek on a file descriptor we own.
            let r = unsafe { libc::lseek(fd, off as libc::off_t, whence) };
            if r >= 0 {
                return Ok(Some(r as u64));
            }
            let e = last_os_error();
            // ENXIO: no data (or no hole) at or after `off`; EINVAL: the file system cannot
            // tell holes (then nothing is filled).
            if matches!(e.raw_os_error(), Some(libc::ENXIO) | Some(libc::EINVAL)) {
                return Ok(None);
            }
            Err(self.err(IoOpKind::Setup, off, 0, e))
        };
        let mut wrote = false;
        let mut off = offset;
        while off < end {
            let Some(hole) = seek(off, libc::SEEK_HOLE)?.filter(|&h| h < end) else { break };
            let hole_end = seek(hole, libc::SEEK_DATA)?.map_or(end, |d| d.min(end));
            // One zeroed buffer for the whole process (allocating and zeroing 4 MiB per call
            // cost as much CPU as the writes).
            static ZEROS: std::sync::OnceLock<AlignedBuf> = std::sync::OnceLock::new();
            let zeros = ZEROS.get_or_init(|| AlignedBuf::new(PREALLOCATE_CHUNK));
            wrote = true;
            // Holes start and end on file-system blocks, which DIRECT_IO_ALIGN divides.
            let mut at = hole - hole % DIRECT_IO_ALIGN as u64;
            while at < hole_end {
                // Whole aligned blocks only, never past the hole (a partial block at its end,
                // which a file system with blocks smaller than DIRECT_IO_ALIGN could leave, is
                // skipped rather than overwritten).
                let n = (hole_end - at).min(PREALLOCATE_CHUNK as u64) as usize;
                let n = n - n % DIRECT_IO_ALIGN;
                if n == 0 {
                    break;
                }
                self.pwrite_full(at, &zeros[..n], 0)?;
                at += n as u64;
            }
            off = hole_end.max(at);
        }
        if wrote {
            self.sync()?;
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        check_alignment(&self.name, DIRECT_IO_ALIGN, offset, buf.len(), buf.as_ptr() as usize)?;
        self.single(&mut IoRequest::Read { offset, buf })
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        check_alignment(&self.name, DIRECT_IO_ALIGN, offset, buf.len(), buf.as_ptr() as usize)?;
        self.single(&mut IoRequest::Write { offset, buf })
    }

    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        for req in reqs.iter() {
            let addr = match req {
                IoRequest::Read { buf, .. } => buf.as_ptr() as usize,
                IoRequest::Write { buf, .. } => buf.as_ptr() as usize,
            };
            check_alignment(&self.name, DIRECT_IO_ALIGN, req.offset(), req.len(), addr)?;
        }
        if self.uring && reqs.len() > 1 {
            if let Some(r) = self.with_thread_ring(|ring| self.batch_on_ring(ring, reqs)) {
                return r;
            }
        }
        let mut first_err = None;
        for req in reqs.iter_mut() {
            if let Err(e) = self.single(req) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn sync(&self) -> IoResult<()> {
        loop {
            // SAFETY: fdatasync on a file descriptor we own.
            let r = unsafe { libc::fdatasync(self.file.as_raw_fd()) };
            if r == 0 {
                return Ok(());
            }
            let e = last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(self.err(IoOpKind::Sync, 0, 0, e));
            }
        }
    }

    fn open_queue(&self, depth: usize) -> IoResult<Box<dyn IoQueue + '_>> {
        if !self.uring {
            return Ok(Box::new(super::SyncQueue { device: self, depth, done: Vec::new() }));
        }
        Ok(Box::new(UringQueue::new(self, depth)?))
    }
}
