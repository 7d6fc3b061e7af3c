//! Real files: an O_DIRECT file device doing its I/O through io_uring, with a pread/pwrite
//! fallback, and [`DirStorage`], a directory of such files.
//!
//! Owns: [`FileDevice`], [`FileOptions`], [`Backend`], [`SingleOpPath`], [`DirStorage`], the
//! per-thread io_uring used by synchronous calls and batches, and [`UringQueue`] (one ring per
//! open queue, for deep asynchronous I/O; a closed queue's ring, idle, is kept by its thread
//! for the thread's next queue of the same depth).
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
    check_alignment, AlignedBuf, Completion, Device, DeviceInfo, IoError, IoOpKind, IoQueue, IoRequest,
    IoResult, QueuedOp, QueuedOpKind, Storage, DIRECT_IO_ALIGN,
};
use crate::util::sync::MutexExt;
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    name: String,
    file: File,
    uring: bool,
    direct: bool,
    single_op: SingleOpPath,
    queue_submit_batch: usize,
}

thread_local! {
    /// The calling thread's ring for synchronous calls and batches (any device, any fd).
    static THREAD_RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
    /// Idle rings of this thread's closed [`UringQueue`]s, reused by its next queues: a scan
    /// opens a queue per table, and each ring set up and torn down (the kernel frees it in a
    /// worker after an RCU grace period) is CPU spent per scan; reusing them cut the CPU per
    /// page of TPC-H Q3's scans by about a tenth (`docs/tpch.md`).
    static IDLE_QUEUE_RINGS: RefCell<Vec<IoUring>> = const { RefCell::new(Vec::new()) };
}

/// Idle queue rings a thread keeps for reuse.
const IDLE_QUEUE_RINGS_KEPT: usize = 4;

fn uring_available() -> bool {
    IoUring::new(4).is_ok()
}

fn last_os_error() -> std::io::Error {
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
            oo.read(true).write(true).create(opts.create);
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

    fn err(&self, op: IoOpKind, offset: u64, len: usize, e: std::io::Error) -> IoError {
        IoError::os(&self.name, op, offset, len, e)
    }

    /// pread until `buf` is full; bytes past end of file read as zero.
    fn pread_full(&self, offset: u64, buf: &mut [u8], mut done: usize) -> IoResult<()> {
        let fd = self.file.as_raw_fd();
        while done < buf.len() {
            let rest = &mut buf[done..];
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
    fn finish(&self, req: &mut IoRequest<'_>, res: i32) -> IoResult<()> {
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
                    Ok(_) => {}
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

/// An io_uring of its own that keeps up to `depth` operations of one thread in flight.
pub struct UringQueue<'d> {
    device: &'d FileDevice,
    /// Taken out only in `Drop` (to be kept for reuse or freed).
    ring: std::mem::ManuallyDrop<IoUring>,
    depth: usize,
    /// In-flight operations by slot; the slot index is the entry's user data.
    slots: Vec<Option<QueuedOp>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Scratch space for completions copied out of the ring (reused, no allocation per reap).
    cqes: Vec<(u64, i32)>,
}

impl<'d> UringQueue<'d> {
    fn new(device: &'d FileDevice, depth: usize) -> IoResult<Self> {
        let depth = depth.max(1);
        let entries = (depth as u32).next_power_of_two().max(2);
        let idle = IDLE_QUEUE_RINGS.with(|r| {
            let mut r = r.borrow_mut();
            let i = r.iter().position(|ring| ring.params().sq_entries() == entries)?;
            Some(r.swap_remove(i))
        });
        if let Some(ring) = idle {
            return Ok(Self::with_ring(device, ring, depth));
        }
        // Cooperative task running: completions are processed when this thread enters the
        // kernel anyway (it waits in io_uring_enter), which saves an interrupt per completion.
        // Older kernels refuse the flag; then the ring is built without it.
        let ring = match IoUring::builder().setup_cqsize(entries * 2).setup_coop_taskrun().build(entries) {
            Ok(r) => r,
            Err(_) => IoUring::builder()
                .setup_cqsize(entries * 2)
                .build(entries)
                .map_err(|e| device.err(IoOpKind::Setup, 0, 0, e))?,
        };
        Ok(Self::with_ring(device, ring, depth))
    }

    fn with_ring(device: &'d FileDevice, ring: IoUring, depth: usize) -> Self {
        Self {
            device,
            ring: std::mem::ManuallyDrop::new(ring),
            depth,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            in_flight: 0,
            cqes: Vec::with_capacity(depth),
        }
    }

    fn enter(&mut self, want: usize) -> IoResult<()> {
        loop {
            let r = if want == 0 { self.ring.submit() } else { self.ring.submit_and_wait(want) };
            match r {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    // Interrupted: submit again; a wait returns to the caller, which loops.
                    if want == 0 {
                        continue;
                    }
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EAGAIN) => {
                    // Completion queue is full: the caller must reap first.
                    return Ok(());
                }
                Err(e) => return Err(self.device.err(IoOpKind::Setup, 0, 0, e)),
            }
        }
    }

    fn drain(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut n = 0;
        let mut done = std::mem::take(&mut self.cqes);
        done.extend(self.ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
        for (slot, res) in done.drain(..) {
            let Some(mut op) = self.slots[slot as usize].take() else { continue };
            self.free.push(slot as usize);
            self.in_flight -= 1;
            n += 1;
            let offset = op.offset;
            let result = {
                let mut req = match op.kind {
                    QueuedOpKind::Read => IoRequest::Read { offset, buf: &mut op.buf },
                    QueuedOpKind::Write => IoRequest::Write { offset, buf: &op.buf },
                };
                self.device.finish(&mut req, res)
            };
            out.push(Completion { tag: op.tag, buf: op.buf, result });
        }
        self.cqes = done;
        n
    }
}

impl UringQueue<'_> {
    /// Pushes one operation into the submission ring without entering the kernel.
    fn push_one(&mut self, op: QueuedOp) {
        let slot = self.free.pop().unwrap_or_else(|| unreachable!("depth checked by the caller"));
        let fd = types::Fd(self.device.file.as_raw_fd());
        let stored = self.slots[slot].insert(op);
        let len = stored.buf.len() as u32;
        let e = match stored.kind {
            QueuedOpKind::Read => {
                opcode::Read::new(fd, stored.buf.as_mut_ptr(), len).offset(stored.offset).build()
            }
            QueuedOpKind::Write => {
                opcode::Write::new(fd, stored.buf.as_ptr(), len).offset(stored.offset).build()
            }
        }
        .user_data(slot as u64);
        // SAFETY: the buffer lives in `self.slots` (heap memory that does not move while the
        // AlignedBuf value is moved) until its completion is reaped, and Drop waits for every
        // in-flight entry. The ring has at least `depth` entries and at most `depth` are in
        // flight, so the push cannot overflow.
        if unsafe { self.ring.submission().push(&e) }.is_err() {
            unreachable!("submission queue overflow below depth");
        }
        self.in_flight += 1;
    }

    /// Checks every op (nothing is submitted if one is misaligned), then pushes them, entering
    /// the kernel after every `batch`; the last chunk is left for the caller to
    /// submit when `keep_last` (it enters right after, submitting and waiting in one call).
    fn submit_chunks(&mut self, ops: Vec<QueuedOp>, keep_last: bool, batch: usize) -> IoResult<()> {
        assert!(self.in_flight + ops.len() <= self.depth, "queue depth {} exceeded", self.depth);
        for op in &ops {
            check_alignment(
                &self.device.name,
                DIRECT_IO_ALIGN,
                op.offset,
                op.buf.len(),
                op.buf.as_ptr() as usize,
            )?;
        }
        let n = ops.len();
        for (i, op) in ops.into_iter().enumerate() {
            self.push_one(op);
            let last = i + 1 == n;
            if (last && !keep_last) || (!last && (i + 1) % batch == 0) {
                self.enter(0)?;
            }
        }
        Ok(())
    }
}

impl IoQueue for UringQueue<'_> {
    fn submit(&mut self, ops: Vec<QueuedOp>) -> IoResult<()> {
        self.submit_chunks(ops, false, self.device.queue_submit_batch)
    }

    fn submit_all(&mut self, ops: Vec<QueuedOp>) -> IoResult<()> {
        self.submit_chunks(ops, false, usize::MAX)
    }

    fn submit_and_reap(&mut self, ops: Vec<QueuedOp>, min: usize, out: &mut Vec<Completion>) -> IoResult<()> {
        self.submit_chunks(ops, true, self.device.queue_submit_batch)?;
        let mut got = self.drain(out);
        if got >= min {
            return self.enter(0);
        }
        // One io_uring_enter submits the new entries and waits for the completions still needed.
        while got < min && self.in_flight > 0 {
            let want = (min - got).min(self.in_flight);
            self.enter(want)?;
            got += self.drain(out);
        }
        Ok(())
    }

    fn reap(&mut self, min: usize, out: &mut Vec<Completion>) -> IoResult<()> {
        let mut got = self.drain(out);
        while got < min && self.in_flight > 0 {
            let want = (min - got).min(self.in_flight);
            self.enter(want)?;
            got += self.drain(out);
        }
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for UringQueue<'_> {
    fn drop(&mut self) {
        let mut sink = Vec::new();
        while self.in_flight > 0 {
            if let Err(e) = self.reap(self.in_flight, &mut sink) {
                eprintln!("io_uring queue on {} could not reap in-flight I/O: {e}", self.device.name);
                std::process::abort();
            }
            sink.clear();
        }
        // SAFETY: taken once, here; `self.ring` is not used after this.
        let mut ring = unsafe { std::mem::ManuallyDrop::take(&mut self.ring) };
        // Nothing in flight and both queues empty: the next queue of this thread may use it.
        if ring.submission().is_empty() && ring.completion().is_empty() {
            // During the thread's exit the cache may be gone: the ring is then freed.
            let _ = IDLE_QUEUE_RINGS.try_with(|r| {
                let mut r = r.borrow_mut();
                if r.len() < IDLE_QUEUE_RINGS_KEPT {
                    r.push(ring);
                }
            });
        }
    }
}

/// A directory of [`FileDevice`]s: the engine's data files and log segments on a real disk.
#[derive(Debug)]
pub struct DirStorage {
    dir: PathBuf,
    /// The directory is on tmpfs (RAM).
    tmpfs: bool,
    opts: FileOptions,
    open: Mutex<BTreeMap<String, Arc<FileDevice>>>,
    /// The lock file, flocked, once [`Storage::lock`] took it; closing it releases the lock.
    lock: Mutex<Option<File>>,
}

impl DirStorage {
    /// Uses (and creates if missing) the directory `dir`.
    pub fn new(dir: impl AsRef<Path>, opts: FileOptions) -> IoResult<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)
            .map_err(|e| IoError::os(&dir.display().to_string(), IoOpKind::Setup, 0, 0, e))?;
        let tmpfs = is_tmpfs(&dir);
        Ok(Self { dir, tmpfs, opts, open: Mutex::new(BTreeMap::new()), lock: Mutex::new(None) })
    }

    fn path_of(&self, name: &str) -> IoResult<PathBuf> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
            return Err(IoError::os(
                name,
                IoOpKind::Setup,
                0,
                0,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "device names are plain file names (no '/', not '.' or '..')",
                ),
            ));
        }
        Ok(self.dir.join(name))
    }

    /// Takes the directory's lock: exclusive (a writer: the lock file then names its process)
    /// or shared (a read-only opener; several may hold it). Held until the storage is dropped.
    fn flock(&self, shared: bool) -> IoResult<()> {
        use std::io::{Read, Seek, Write};
        let mut held = self.lock.locked();
        if held.is_some() {
            return Ok(());
        }
        let path = self.dir.join(super::LOCK_FILE);
        let name = path.display().to_string();
        let setup = |e: std::io::Error| IoError::os(&name, IoOpKind::Setup, 0, 0, e);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(setup)?;
        let mode = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
        // SAFETY: flock on a valid descriptor has no memory-safety preconditions.
        if unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(setup(e));
            }
            // A writer refused while a shared lock is still free: read-only openers hold it.
            // SAFETY: as above.
            if !shared && unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
                let holder = "read-only openers (Options::read_only)".to_string();
                return Err(IoError::Locked { path: self.location(), holder });
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let pid = text.trim().strip_prefix("pid ").and_then(|p| p.parse::<u32>().ok());
            let holder = match pid {
                Some(p) if p == std::process::id() => format!(
                    "this process (pid {p}): it is already open here; share that Database (it is cheap \
                     to clone), or drop it and every Table and Transaction of it first"
                ),
                Some(p) => format!("process {p}"),
                None => "another process".to_string(),
            };
            return Err(IoError::Locked { path: self.location(), holder });
        }
        if !shared {
            file.set_len(0).map_err(setup)?;
            file.seek(std::io::SeekFrom::Start(0)).map_err(setup)?;
            writeln!(file, "pid {}", std::process::id()).map_err(setup)?;
        }
        *held = Some(file);
        Ok(())
    }

    /// Makes creations and removals in the directory durable (fsync of the directory).
    pub fn sync_dir(&self) -> IoResult<()> {
        let name = self.dir.display().to_string();
        let d = File::open(&self.dir).map_err(|e| IoError::os(&name, IoOpKind::Sync, 0, 0, e))?;
        d.sync_all().map_err(|e| IoError::os(&name, IoOpKind::Sync, 0, 0, e))
    }
}

impl Storage for DirStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let path = self.path_of(name)?;
        let mut map = self.open.locked();
        if let Some(d) = map.get(name) {
            return Ok(d.clone());
        }
        let opts = FileOptions { create, ..self.opts.clone() };
        let dev = Arc::new(FileDevice::open_with(&path, &opts)?);
        map.insert(name.to_string(), dev.clone());
        Ok(dev)
    }

    fn exists(&self, name: &str) -> bool {
        self.path_of(name).map(|p| p.exists()).unwrap_or(false)
    }

    fn list(&self) -> IoResult<Vec<String>> {
        let loc = self.location();
        let rd = std::fs::read_dir(&self.dir).map_err(|e| IoError::os(&loc, IoOpKind::Setup, 0, 0, e))?;
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| IoError::os(&loc, IoOpKind::Setup, 0, 0, e))?;
            if entry.file_type().map(|t| t.is_file()).unwrap_or(false)
                && entry.file_name() != super::LOCK_FILE
            {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn remove(&self, name: &str) -> IoResult<()> {
        let path = self.path_of(name)?;
        self.open.locked().remove(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(IoError::os(&path.display().to_string(), IoOpKind::Setup, 0, 0, e)),
        }
    }

    fn lock(&self) -> IoResult<()> {
        self.flock(false)
    }

    fn lock_shared(&self) -> IoResult<()> {
        self.flock(true)
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn in_ram(&self) -> bool {
        self.tmpfs
    }
}

/// True if `dir` is on tmpfs (its files live in RAM).
fn is_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs is a plain C struct of integers, for which all-zero bytes are a value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a statfs we own; statfs writes only into it.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == TMPFS_MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{AlignedBuf, Device, QueuedOp, QueuedOpKind};

    #[test]
    fn a_closed_queue_lends_its_ring_to_the_threads_next_queue() {
        let path = std::env::temp_dir().join(format!("nvmedb-ring-reuse-{}.db", std::process::id()));
        let dev = FileDevice::open(&path).unwrap();
        if !dev.uring {
            return; // io_uring refused here: queues are synchronous, there is no ring to keep
        }
        let mut page = AlignedBuf::new(4096);
        page[..5].copy_from_slice(b"hello");
        dev.write_at(0, &page).unwrap();
        let p = path.clone();
        std::thread::spawn(move || {
            let read_back = |q: &mut UringQueue<'_>| {
                let op = QueuedOp { tag: 7, kind: QueuedOpKind::Read, offset: 0, buf: AlignedBuf::new(4096) };
                q.submit(vec![op]).unwrap();
                let mut done = Vec::new();
                q.reap(1, &mut done).unwrap();
                assert_eq!(&done[0].buf[..5], b"hello");
            };
            let mut first = UringQueue::new(&dev, 8).unwrap();
            read_back(&mut first);
            let fd = first.ring.as_raw_fd();
            drop(first);
            // Had the ring been closed, this file would take its descriptor number.
            let _blocker = File::open(&p).unwrap();
            let mut second = UringQueue::new(&dev, 8).unwrap();
            assert_eq!(second.ring.as_raw_fd(), fd, "the second queue set up a ring of its own");
            read_back(&mut second);
            // A queue of another depth needs a ring of another size.
            let third = UringQueue::new(&dev, 64).unwrap();
            assert_ne!(third.ring.as_raw_fd(), second.ring.as_raw_fd());
        })
        .join()
        .unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
