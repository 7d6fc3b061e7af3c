//! The I/O layer: every byte the engine stores goes through the [`Device`] trait.
//!
//! Owns: the `Device` seam (positional, aligned, batched reads and writes of whole blocks, plus
//! sync), the queue interface used for deep asynchronous I/O ([`IoQueue`]), aligned buffers, and
//! the typed [`IoError`]. Implementations: [`MemDevice`] (RAM), [`FileDevice`] (O_DIRECT files
//! through io_uring or pread/pwrite, [`DirStorage`] for a directory of them),
//! [`EmulatedDevice`] (latency of a [`DeviceProfile`]: `dram`, `optane`, `nand`, `san`, `hdd`),
//! [`FaultyDevice`] (seeded EIO, ENOSPC, latency spikes) and [`CrashSimDevice`] (power loss
//! with torn writes).
//!
//! Invariants every implementation keeps: offsets, lengths and buffer addresses are multiples of
//! [`Device::alignment`] or the call fails with [`IoError::Misaligned`] before touching the
//! medium; a read of bytes never written returns zeroes; after `sync` returns `Ok`, every write
//! that returned `Ok` before the call is durable to the degree the device offers.

pub(crate) mod aligned;
mod crashsim;
mod emulated;
mod emulated_storage;
mod error;
mod faulty;
mod file;
mod hooked;
mod mem;
pub mod profile;
mod storage;

pub use aligned::{AlignedBuf, DIRECT_IO_ALIGN};
pub use crashsim::{CrashOutcome, CrashSimDevice, CrashSimStorage, WriteFate, SECTOR_BYTES};
pub use emulated::{
    lateness, open_emulated, wait_until, EmuQueue, EmulatedDevice, EmulatedMedium, Lateness, LATE_THRESHOLD,
};
pub use emulated_storage::EmulatedStorage;
pub use error::{IoError, IoOpKind, IoResult};
pub use faulty::{FaultAction, FaultPlan, FaultRule, FaultyDevice, InjectedFault};
pub use file::{
    thread_submissions, Backend, DirStorage, FileDevice, FileOptions, SingleOpPath, UringQueue, BACKEND_ENV,
};
pub use hooked::{HookedDevice, HookedStorage, IoHook};
pub use mem::MemDevice;
pub use profile::{Backing, DeviceProfile, ProfileError, PROFILE_NAMES};
pub use storage::{MemStorage, Storage, LOCK_FILE};

/// What a device is, for reports and error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// File path or profile name; the name used in error messages.
    pub name: String,
    /// How I/O is performed: `"io_uring"`, `"pread"`, `"memory"`, or a wrapper's description.
    pub backend: String,
    /// `Some(profile)` when the latency is emulated; every report must label it as such.
    pub emulated_profile: Option<String>,
}

/// One request of a batch passed to [`Device::submit_batch`].
#[derive(Debug)]
pub enum IoRequest<'a> {
    /// Read `buf.len()` bytes at `offset` into `buf`.
    Read {
        /// Byte offset on the device.
        offset: u64,
        /// Destination; aligned.
        buf: &'a mut [u8],
    },
    /// Write `buf` at `offset`.
    Write {
        /// Byte offset on the device.
        offset: u64,
        /// Source; aligned.
        buf: &'a [u8],
    },
}

impl IoRequest<'_> {
    /// Byte offset of the request.
    pub fn offset(&self) -> u64 {
        match self {
            IoRequest::Read { offset, .. } | IoRequest::Write { offset, .. } => *offset,
        }
    }
    /// Length of the request in bytes.
    pub fn len(&self) -> usize {
        match self {
            IoRequest::Read { buf, .. } => buf.len(),
            IoRequest::Write { buf, .. } => buf.len(),
        }
    }
    /// True for a zero-length request (always rejected as misaligned).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Direction of a queued operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuedOpKind {
    /// Read into the operation's buffer.
    Read,
    /// Write the operation's buffer.
    Write,
}

/// An operation handed to an [`IoQueue`]; the queue owns the buffer until completion.
#[derive(Debug)]
pub struct QueuedOp {
    /// Caller's identifier, returned in the completion.
    pub tag: u64,
    /// Read or write.
    pub kind: QueuedOpKind,
    /// Byte offset on the device.
    pub offset: u64,
    /// Data buffer (source for writes, destination for reads).
    pub buf: AlignedBuf,
}

/// A finished [`QueuedOp`].
#[derive(Debug)]
pub struct Completion {
    /// The tag given at submission.
    pub tag: u64,
    /// The buffer given at submission (filled for reads).
    pub buf: AlignedBuf,
    /// Outcome of the operation.
    pub result: IoResult<()>,
}

/// A per-thread submission/completion queue for keeping many operations in flight.
///
/// A queue is used by one thread; create one per thread with [`Device::open_queue`].
pub trait IoQueue: Send {
    /// Hands operations to the device. The number in flight must stay at or below the depth the
    /// queue was opened with.
    fn submit(&mut self, ops: Vec<QueuedOp>) -> IoResult<()>;
    /// Like [`submit`](IoQueue::submit), but hands all of `ops` to the device together (one
    /// system call on io_uring, whatever the queue's usual batching), for a caller that tops a
    /// window up in chunks. The default submits them as `submit` does.
    fn submit_all(&mut self, ops: Vec<QueuedOp>) -> IoResult<()> {
        self.submit(ops)
    }
    /// Waits until at least `min` operations have completed (or none are in flight), and appends
    /// every completed one to `out`.
    fn reap(&mut self, min: usize, out: &mut Vec<Completion>) -> IoResult<()>;
    /// Number of submitted operations not yet reaped.
    fn in_flight(&self) -> usize;

    /// [`submit`](IoQueue::submit) then [`reap`](IoQueue::reap), which an implementation may do
    /// in one system call (io_uring submits and waits with a single `io_uring_enter`).
    fn submit_and_reap(&mut self, ops: Vec<QueuedOp>, min: usize, out: &mut Vec<Completion>) -> IoResult<()> {
        self.submit(ops)?;
        self.reap(min, out)
    }
}

/// Positional block storage: a file, RAM, an emulated device, or a fault-injecting wrapper.
///
/// Implementations are shared between threads (`&self` methods) and must allow concurrent
/// operations on different offsets.
pub trait Device: Send + Sync {
    /// Describes the device for reports.
    fn info(&self) -> DeviceInfo;

    /// Required alignment of offsets, lengths and buffer addresses, in bytes.
    fn alignment(&self) -> usize;

    /// Current size in bytes.
    fn capacity(&self) -> u64;

    /// Makes the device at least `len` bytes long (new bytes read as zero).
    fn ensure_capacity(&self, len: u64) -> IoResult<()>;

    /// Makes the device at least `offset + len` bytes long with every byte of
    /// `[offset, offset + len)` backed by storage, durably, so that later writes there
    /// overwrite instead of allocating. For a file this matters: a write into a hole makes the
    /// next `fdatasync` also write the file's allocation metadata, a second synchronous device
    /// write on every log flush. The contents do not change (holes read as zero, and zeroes are
    /// what fills them), but no other write may target the range meanwhile. The log prepares
    /// its segments this way a little ahead of its writes. Default:
    /// [`Device::ensure_capacity`] (RAM and emulated devices allocate nothing a write could
    /// save).
    fn preallocate(&self, offset: u64, len: u64) -> IoResult<()> {
        self.ensure_capacity(offset + len)
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()>;

    /// Writes all of `buf` at `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()>;

    /// Issues every request together and returns when all have completed. Returns the first
    /// error (in request order); the other requests were still attempted.
    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        let mut first_err = None;
        for req in reqs.iter_mut() {
            let r = match req {
                IoRequest::Read { offset, buf } => self.read_at(*offset, buf),
                IoRequest::Write { offset, buf } => self.write_at(*offset, buf),
            };
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Makes every completed write durable.
    fn sync(&self) -> IoResult<()>;

    /// True when [`Device::start_write`] returns before the write completes (an emulated
    /// device: the data reaches its medium at once, the completion is a modelled time), so one
    /// thread can overlap writes to several devices. The default is false.
    fn overlaps_writes(&self) -> bool {
        false
    }

    /// Starts writing `buf` at `offset`: hands the data to the device and returns when the
    /// write will have completed (`None`: it already has); [`Device::finish_write`] waits for
    /// that. The default writes synchronously.
    fn start_write(&self, offset: u64, buf: &[u8]) -> IoResult<Option<std::time::Instant>> {
        self.write_at(offset, buf).map(|()| None)
    }

    /// Waits for the completion of a write [`Device::start_write`] started (`due`: what it
    /// returned).
    fn finish_write(&self, due: Option<std::time::Instant>) {
        let _ = due;
    }

    /// Opens a queue that keeps up to `depth` operations in flight. The default executes each
    /// operation synchronously at submission (depth is accepted but not exploited).
    fn open_queue(&self, depth: usize) -> IoResult<Box<dyn IoQueue + '_>> {
        Ok(Box::new(SyncQueue { device: self, depth, done: Vec::new() }))
    }
}

/// Checks that `offset`, `len` and `addr` are multiples of `align`.
pub fn check_alignment(device: &str, align: usize, offset: u64, len: usize, addr: usize) -> IoResult<()> {
    let mis =
        |what, value: u64| IoError::Misaligned { device: device.to_string(), what, value, required: align };
    if !offset.is_multiple_of(align as u64) {
        return Err(mis("offset", offset));
    }
    if len == 0 || !len.is_multiple_of(align) {
        return Err(mis("length", len as u64));
    }
    if !addr.is_multiple_of(align) {
        return Err(mis("buffer address", addr as u64));
    }
    Ok(())
}

/// A queue that performs each operation synchronously when it is submitted.
struct SyncQueue<'d, D: Device + ?Sized> {
    device: &'d D,
    depth: usize,
    done: Vec<Completion>,
}

impl<D: Device + ?Sized> IoQueue for SyncQueue<'_, D> {
    fn submit(&mut self, ops: Vec<QueuedOp>) -> IoResult<()> {
        assert!(self.done.len() + ops.len() <= self.depth.max(1), "queue depth {} exceeded", self.depth);
        for mut op in ops {
            let result = match op.kind {
                QueuedOpKind::Read => self.device.read_at(op.offset, &mut op.buf),
                QueuedOpKind::Write => self.device.write_at(op.offset, &op.buf),
            };
            self.done.push(Completion { tag: op.tag, buf: op.buf, result });
        }
        Ok(())
    }

    fn reap(&mut self, _min: usize, out: &mut Vec<Completion>) -> IoResult<()> {
        out.append(&mut self.done);
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }
}

impl<T: Device + ?Sized> Device for std::sync::Arc<T> {
    fn info(&self) -> DeviceInfo {
        (**self).info()
    }
    fn alignment(&self) -> usize {
        (**self).alignment()
    }
    fn capacity(&self) -> u64 {
        (**self).capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        (**self).ensure_capacity(len)
    }
    fn preallocate(&self, offset: u64, len: u64) -> IoResult<()> {
        (**self).preallocate(offset, len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        (**self).write_at(offset, buf)
    }
    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        (**self).submit_batch(reqs)
    }
    fn sync(&self) -> IoResult<()> {
        (**self).sync()
    }
    fn overlaps_writes(&self) -> bool {
        (**self).overlaps_writes()
    }
    fn start_write(&self, offset: u64, buf: &[u8]) -> IoResult<Option<std::time::Instant>> {
        (**self).start_write(offset, buf)
    }
    fn finish_write(&self, due: Option<std::time::Instant>) {
        (**self).finish_write(due)
    }
    fn open_queue(&self, depth: usize) -> IoResult<Box<dyn IoQueue + '_>> {
        (**self).open_queue(depth)
    }
}
