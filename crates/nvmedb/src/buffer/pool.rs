//! The buffer pool proper: page table, fix/unfix, GCLOCK victim selection, write-back.
//!
//! Owns: `BufferPool`, its partitions (one for SHR-k, one per thread slot for SEP), the
//! registered files, and the page guards. See the module invariants in `buffer/mod.rs`.

use super::frames::{stripe_of, FrameArena, PageKeyBuild, Xlate, EVICTING, NO_PAGE};
use super::mtr::{change_for, encode_page_change, PageLogger};
use super::writer::{Signal, WriterHandle};
use super::{BufferPolicy, BufferStats, PageClass, PageId, PoolConfig, WalGate};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, IoRequest};
use crate::page::{PageHeader, PageType};
use crate::util::sync::{MutexExt, RwLockExt};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

mod readahead;
pub use readahead::ReadAhead;

/// A registered file.
struct FileEntry {
    /// Replaced only by [`BufferPool::replace_device`] (a table moved to another tablespace).
    device: RwLock<Arc<dyn Device>>,
    name: String,
    /// This file's share of the pool's I/O counters (hits are in `BufferPool::file_hits`).
    io: FileIo,
    /// The next page number to hand out (allocation reserves numbers here first).
    next_page: AtomicU64,
    /// Pages readers may see: every page below it is mapped or on the device. An allocation
    /// raises it past its page only once the page is mapped, in page order, so a scan reading
    /// up to the file's end never reaches a reserved page that is not mapped yet (it would read
    /// zeroes from the device and map the page under the allocator).
    published: AtomicU64,
    /// Set by [`BufferPool::drop_file`]: its pages are discarded instead of written back, and
    /// reads of it fail.
    dropped: std::sync::atomic::AtomicBool,
}

/// Device I/O of one file: the per-file share of the partitions' counters.
#[derive(Default)]
struct FileIo {
    misses: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    background_writes: AtomicU64,
    io_wait_ns: AtomicU64,
}

impl FileEntry {
    fn device(&self) -> Arc<dyn Device> {
        self.device.read_locked().clone()
    }
}

/// Per-file hit counters: `FILE_HIT_SHARDS` shards (chosen by the thread's [`HitShard`], so
/// threads rarely share a cache line) of `FILE_HIT_SLOTS` counters (chosen by file id modulo
/// the slots: files whose ids are congruent share a counter). The first [`OWNED_SHARDS`] shards
/// each belong to one thread at a time; the rest are shared.
const FILE_HIT_SHARDS: usize = 2 * OWNED_SHARDS;
/// See [`FILE_HIT_SHARDS`].
pub const FILE_HIT_SLOTS: usize = 1024;

/// Dirty pages per batch of [`BufferPool::flush_all`] (a flush or a checkpoint): one log
/// wait and one device submission per file for up to this many pages.
pub const FLUSH_BATCH_PAGES: usize = 64;

/// One page-table lock (padded against false sharing).
#[repr(align(128))]
struct Stripe {
    map: Mutex<HashMap<u64, u32, PageKeyBuild>>,
}

/// Hit counters sharded by thread (see [`HitShard`]), so counting a hit writes a cache line no
/// other thread writes.
const HIT_SHARDS: usize = 64;

/// Hit-counter shards (of both [`HIT_SHARDS`] and [`FILE_HIT_SHARDS`]) that a thread can own
/// alone: their owner counts with a plain load and store, no locked instruction (a hit is
/// counted on every fix, several times per point read).
const OWNED_SHARDS: usize = 16;

/// Which [`OWNED_SHARDS`] are owned by a live thread.
static SHARD_OWNED: [AtomicBool; OWNED_SHARDS] = [const { AtomicBool::new(false) }; OWNED_SHARDS];

/// A thread's hit-counter shard: one it owns alone while it lives (the first [`OWNED_SHARDS`]
/// threads alive at once), else a shared one counted with atomic adds. Invariant: an owned
/// shard's counters are written by its owner only, so the owner's load-and-store loses no
/// count; the claim (acquire) and the release at thread exit (release) order one owner's
/// stores before the next owner's.
struct HitShard {
    /// Index into the per-partition hit shards.
    hits: usize,
    /// Index of the per-file hit shard.
    files: usize,
    owned: bool,
}

impl HitShard {
    fn claim() -> Self {
        for (i, o) in SHARD_OWNED.iter().enumerate() {
            if !o.load(Relaxed) && o.compare_exchange(false, true, Acquire, Relaxed).is_ok() {
                return Self { hits: i, files: i, owned: true };
            }
        }
        let slot = THREAD_SLOT.with(|s| *s);
        Self {
            hits: OWNED_SHARDS + slot % (HIT_SHARDS - OWNED_SHARDS),
            files: OWNED_SHARDS + slot % (FILE_HIT_SHARDS - OWNED_SHARDS),
            owned: false,
        }
    }

    /// Adds one to `c`, a counter of this thread's shard.
    #[inline]
    fn bump(&self, c: &AtomicU64) {
        if self.owned {
            c.store(c.load(Relaxed) + 1, Relaxed);
        } else {
            c.fetch_add(1, Relaxed);
        }
    }
}

impl Drop for HitShard {
    fn drop(&mut self) {
        if self.owned {
            SHARD_OWNED[self.hits].store(false, Release);
        }
    }
}

#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

/// A set of frames with its own page table and clock hand.
struct Partition {
    arena: FrameArena,
    /// Lock-free page → frame hints for the hit path (see [`Xlate`]).
    xlate: Xlate,
    stripes: Box<[Stripe]>,
    hand: AtomicUsize,
    hits: Box<[PaddedCounter]>,
    misses: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    background_writes: AtomicU64,
    /// Write-backs an evicting thread did itself (see [`BufferStats::eviction_writes`]).
    eviction_writes: AtomicU64,
    evictions: AtomicU64,
    io_wait_ns: AtomicU64,
    /// Acquisitions of a page-table lock or a page latch that found it held and waited.
    latch_waits: AtomicU64,
    /// Nanoseconds spent in those waits.
    latch_wait_ns: AtomicU64,
    /// Reads ahead still in flight when the scan was handed an earlier page (see
    /// [`BufferStats::reads_overlapped`]).
    reads_overlapped: AtomicU64,
    /// Frames currently being written back (at most one write-back per frame at a time).
    writing: Box<[AtomicBool]>,
    /// Frames whose `sticky` flag is set (kept by [`Partition::set_sticky`]).
    sticky_frames: AtomicUsize,
}

impl Partition {
    fn new(page_size: usize, frames: usize, stripes: usize, huge_pages: bool) -> Result<Self> {
        Ok(Self {
            arena: FrameArena::new(page_size, frames, huge_pages)?,
            xlate: Xlate::new(),
            stripes: (0..stripes).map(|_| Stripe { map: Mutex::new(HashMap::default()) }).collect(),
            hand: AtomicUsize::new(0),
            hits: (0..HIT_SHARDS).map(|_| PaddedCounter::default()).collect(),
            misses: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            background_writes: AtomicU64::new(0),
            eviction_writes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            io_wait_ns: AtomicU64::new(0),
            latch_waits: AtomicU64::new(0),
            latch_wait_ns: AtomicU64::new(0),
            reads_overlapped: AtomicU64::new(0),
            writing: (0..frames).map(|_| AtomicBool::new(false)).collect(),
            sticky_frames: AtomicUsize::new(0),
        })
    }

    /// Sets frame `i`'s sticky flag (its owner holds its write latch or owns it privately),
    /// keeping the count of sticky frames.
    fn set_sticky(&self, i: usize, sticky: bool) {
        if self.arena.frames[i].sticky.swap(sticky, AcqRel) != sticky {
            if sticky {
                self.sticky_frames.fetch_add(1, Relaxed);
            } else {
                self.sticky_frames.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Whether sticky frames are victims like any other: once they fill all but an eighth of
    /// the partition (an index that outgrew the buffer meant to hold it whole), keeping them
    /// resident would leave the other pages too few frames, or none.
    fn sticky_evictable(&self) -> bool {
        let n = self.arena.len();
        self.sticky_frames.load(Relaxed) >= n - n / 8
    }

    fn stripe(&self, key: u64) -> &Stripe {
        &self.stripes[stripe_of(key, self.stripes.len())]
    }

    /// Locks the page-table stripe of `key`; a lock found held is waited for and the wait
    /// counted (seed 004's SHR-k contention).
    fn lock_stripe(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, u32, PageKeyBuild>> {
        let m = &self.stripe(key).map;
        match m.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let t0 = Instant::now();
                let g = m.locked();
                self.count_latch_wait(t0);
                g
            }
        }
    }

    /// Latches frame `i` shared; a latch found held exclusively (a load or change in
    /// progress) is waited for and the wait counted.
    fn read_latch(&self, i: usize) -> RwLockReadGuard<'_, ()> {
        let l = &self.arena.frames[i].latch;
        match l.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let t0 = Instant::now();
                let g = l.read_locked();
                self.count_latch_wait(t0);
                g
            }
        }
    }

    fn count_latch_wait(&self, since: Instant) {
        self.latch_waits.fetch_add(1, Relaxed);
        self.latch_wait_ns.fetch_add(since.elapsed().as_nanos() as u64, Relaxed);
    }

    /// Counts a buffer hit in this thread's shard.
    #[inline]
    fn count_hit(&self, file_hits: &[AtomicU64], file: u32) {
        let counted = HIT_SHARD.try_with(|h| {
            h.bump(&self.hits[h.hits].0);
            h.bump(&file_hits[h.files * FILE_HIT_SLOTS + file as usize % FILE_HIT_SLOTS]);
        });
        if counted.is_err() {
            // A fix from a thread-local destructor, after this thread's shard is gone.
            self.hits[HIT_SHARDS - 1].0.fetch_add(1, Relaxed);
            file_hits[(FILE_HIT_SHARDS - 1) * FILE_HIT_SLOTS + file as usize % FILE_HIT_SLOTS]
                .fetch_add(1, Relaxed);
        }
    }

    fn unpin(&self, i: usize) {
        let prev = self.arena.frames[i].pins.fetch_sub(1, AcqRel);
        assert!(prev > 0, "unpin of unpinned frame {i}");
    }
}

/// Prefetches the cache line holding `p` into all cache levels (a no-op off x86-64).
#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

thread_local! {
    /// Private copy buffer for write-back (sealing must not modify a page others may read).
    static SCRATCH: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
    /// This thread's copy buffer for batched write-back (grown to the largest batch seen).
    static BATCH_SCRATCH: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
    /// This thread's slot for SEP partition choice.
    static THREAD_SLOT: usize = NEXT_THREAD_SLOT.fetch_add(1, Relaxed);
    /// This thread's hit-counter shard.
    static HIT_SHARD: HitShard = HitShard::claim();
}
static NEXT_THREAD_SLOT: AtomicUsize = AtomicUsize::new(0);

/// A buffer pool over one or more files of the same page size.
pub struct BufferPool {
    config: PoolConfig,
    parts: Box<[Partition]>,
    files: RwLock<Vec<Option<Arc<FileEntry>>>>,
    /// Hits per file (see [`FILE_HIT_SHARDS`]).
    file_hits: Box<[AtomicU64]>,
    gate: RwLock<Option<Arc<dyn WalGate>>>,
    writer: Mutex<Option<WriterHandle>>,
    /// Wakes the background writer (`None`: the pool has none).
    writer_signal: Option<Arc<Signal>>,
    /// The WAL hook receiving page changes, and this pool's tag in the log.
    logger: std::sync::OnceLock<(Arc<dyn PageLogger>, u8)>,
    /// Set when a page change could not be logged outside a mini-transaction.
    log_failure: Mutex<Option<String>>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool").field("config", &self.config).finish_non_exhaustive()
    }
}

/// A shared (read) fix of a page. The page stays resident and unchanged while the guard lives.
pub struct PageRef<'a> {
    part: &'a Partition,
    frame: usize,
    pid: PageId,
    /// False for a kept-resident (sticky) index page fixed through the fast path: the shared
    /// latch alone keeps it in its frame (eviction unmaps a frame only under its write latch).
    pinned: bool,
    latch: Option<RwLockReadGuard<'a, ()>>,
}

/// An exclusive (write) fix of a page. Mutable access marks the page dirty.
pub struct PageMut<'a> {
    pool: &'a BufferPool,
    part: &'a Partition,
    frame: usize,
    pid: PageId,
    modified: bool,
    /// Copy of the page as fixed (only while the pool logs changes; `None` for a new page).
    before: Option<Box<[u8]>>,
    latch: Option<RwLockWriteGuard<'a, ()>>,
}

impl PageRef<'_> {
    /// The page this guard fixes.
    pub fn page_id(&self) -> PageId {
        self.pid
    }
}

impl Deref for PageRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: we hold the frame's latch shared (and a pin, or the frame is sticky: it is
        // unmapped only under its write latch).
        unsafe { self.part.arena.bytes(self.frame) }
    }
}

impl Drop for PageRef<'_> {
    fn drop(&mut self) {
        self.latch.take();
        if self.pinned {
            self.part.unpin(self.frame);
        }
    }
}

impl PageMut<'_> {
    /// The page this guard fixes.
    pub fn page_id(&self) -> PageId {
        self.pid
    }

    /// Records the LSN of the change just made (the WAL rule uses it at write-back).
    pub fn set_lsn(&mut self, lsn: u64) {
        PageHeader::set_lsn(self, lsn);
    }
}

impl Deref for PageMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: we hold the frame's latch exclusively and a pin.
        unsafe { self.part.arena.bytes(self.frame) }
    }
}

impl DerefMut for PageMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.modified = true;
        // SAFETY: we hold the frame's latch exclusively and a pin; &mut self prevents aliasing.
        unsafe { self.part.arena.bytes_mut(self.frame) }
    }
}

impl Drop for PageMut<'_> {
    fn drop(&mut self) {
        if self.modified && self.pool.logger.get().is_some() {
            let latch = self.latch.take().expect("latch held until drop");
            // SAFETY (lifetime erasure): the guard borrows a latch inside `self.pool`. It is
            // stored in this thread's open mini-transaction for that pool, which borrows the
            // pool too and releases every stored guard when it ends, so the latch outlives it.
            let latch: RwLockWriteGuard<'static, ()> = unsafe { std::mem::transmute(latch) };
            let d = Deferred {
                part: self.part as *const Partition,
                frame: self.frame,
                pid: self.pid,
                before: self.before.take(),
                latch,
            };
            self.pool.defer_change(d);
            return;
        }
        if self.modified {
            // Set before the pin is released so an evictor that sees pins == 0 sees dirty too.
            self.part.arena.frames[self.frame].dirty.store(true, Release);
        }
        self.latch.take();
        self.part.unpin(self.frame);
    }
}

enum FixMode {
    Shared,
    Exclusive,
}

enum Fixed<'a> {
    Shared(PageRef<'a>),
    Exclusive(PageMut<'a>),
}

impl BufferPool {
    /// Creates a pool; allocates all frame memory now.
    pub fn new(config: PoolConfig) -> Result<Arc<Self>> {
        config.validate()?;
        let parts: Box<[Partition]> = match config.policy {
            BufferPolicy::Shared { stripes } => {
                vec![Partition::new(config.page_size, config.frames, stripes, config.huge_pages)?]
                    .into_boxed_slice()
            }
            BufferPolicy::Separated { partitions } => (0..partitions)
                .map(|_| Partition::new(config.page_size, config.frames / partitions, 1, config.huge_pages))
                .collect::<Result<_>>()?,
        };
        let pool = Arc::new(Self {
            writer_signal: config.background_writer.map(|_| Arc::new(Signal::new())),
            config,
            parts,
            files: RwLock::new(Vec::new()),
            file_hits: (0..FILE_HIT_SHARDS * FILE_HIT_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            gate: RwLock::new(None),
            writer: Mutex::new(None),
            logger: std::sync::OnceLock::new(),
            log_failure: Mutex::new(None),
        });
        if let (Some(bw), Some(signal)) = (pool.config.background_writer, &pool.writer_signal) {
            *pool.writer.locked() = Some(WriterHandle::start(Arc::downgrade(&pool), signal.clone(), bw));
        }
        Ok(pool)
    }

    /// The configuration the pool was created with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.config.page_size
    }

    /// Bytes of frame memory allocated.
    pub fn memory_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.arena.bytes_total()).sum()
    }

    /// Makes `device` available as file `file_id`. Its current size decides how many pages
    /// exist; [`BufferPool::allocate`] appends more.
    pub fn register_file(&self, file_id: u32, device: Arc<dyn Device>) -> Result<()> {
        let pages = device.capacity() / self.config.page_size as u64;
        let name = device.info().name;
        let mut files = self.files.write_locked();
        let idx = file_id as usize;
        if files.len() <= idx {
            files.resize_with(idx + 1, || None);
        }
        if files[idx].is_some() {
            return Err(Error::AlreadyExists(format!("file id {file_id} is already registered")));
        }
        files[idx] = Some(Arc::new(FileEntry {
            device: RwLock::new(device),
            name,
            io: FileIo::default(),
            next_page: AtomicU64::new(pages),
            published: AtomicU64::new(pages),
            dropped: std::sync::atomic::AtomicBool::new(false),
        }));
        Ok(())
    }

    /// Forgets file `file_id` (its table was dropped): its buffered pages are discarded as
    /// they are evicted or flushed, never written, and later reads of it fail. The caller
    /// makes sure nothing uses the file any more; the id must not be registered again.
    pub fn drop_file(&self, file_id: u32) -> Result<()> {
        self.file(file_id)?.dropped.store(true, Release);
        Ok(())
    }

    /// Puts file `file_id` on `device`, which must hold the same pages (a table moved to another
    /// tablespace: the caller wrote every dirty page, copied the file and synced the copy, and
    /// keeps changes away until this returns). Later reads and writes go to `device`.
    pub fn replace_device(&self, file_id: u32, device: Arc<dyn Device>) -> Result<()> {
        let file = self.file(file_id)?;
        let pages = file.next_page.load(Acquire);
        let have = device.capacity() / self.config.page_size as u64;
        if have < pages {
            return Err(Error::InvalidArgument(format!(
                "{} has {have} pages but file {file_id} ({}) has {pages}: not a copy of it",
                device.info().name,
                file.name
            )));
        }
        *file.device.write_locked() = device;
        Ok(())
    }

    /// The device behind file `file_id`.
    pub fn file_device(&self, file_id: u32) -> Result<Arc<dyn Device>> {
        Ok(self.file(file_id)?.device())
    }

    /// File `file_id`'s share of [`BufferPool::stats`]: hits, misses, reads, writes, background
    /// writes and I/O wait of its pages (evictions are counted per pool only). Summed over every
    /// file ever registered, each counter equals the pool's. Hits of files whose ids are
    /// congruent modulo [`FILE_HIT_SLOTS`] are counted together.
    pub fn file_stats(&self, file_id: u32) -> Result<BufferStats> {
        let file = self.file(file_id)?;
        let slot = file_id as usize % FILE_HIT_SLOTS;
        let hits =
            (0..FILE_HIT_SHARDS).map(|s| self.file_hits[s * FILE_HIT_SLOTS + slot].load(Relaxed)).sum();
        Ok(BufferStats {
            hits,
            misses: file.io.misses.load(Relaxed),
            reads: file.io.reads.load(Relaxed),
            writes: file.io.writes.load(Relaxed),
            evictions: 0,
            io_wait_ns: file.io.io_wait_ns.load(Relaxed),
            background_writes: file.io.background_writes.load(Relaxed),
            // Latch waits are counted per pool only.
            ..BufferStats::default()
        })
    }

    /// Number of pages file `file_id` has (including allocated pages not yet written).
    pub fn file_pages(&self, file_id: u32) -> Result<u64> {
        Ok(self.file(file_id)?.published.load(Acquire))
    }

    /// A page just read must not be newer than the durable log (see [`WalGate::page_lsn_limit`]):
    /// if it is, log records it depends on were lost.
    fn check_page_lsn(&self, bytes: &[u8], file: &str, offset: u64, pid: PageId) -> Result<()> {
        let gate = self.gate.read_locked().clone();
        let Some(gate) = gate else { return Ok(()) };
        let lsn = PageHeader::lsn_of(bytes);
        let limit = gate.page_lsn_limit();
        if lsn > limit {
            return Err(Error::Corruption {
                file: file.to_string(),
                offset,
                detail: format!(
                    "page {} has LSN {lsn}, beyond the end of the log ({limit}): log records this page \
                     depends on were lost (Options::accept_lost_log opens anyway, accepting the loss)",
                    pid.page
                ),
            });
        }
        Ok(())
    }

    /// Installs the WAL rule hook consulted before every write-back.
    pub fn set_wal_gate(&self, gate: Arc<dyn WalGate>) {
        *self.gate.write_locked() = Some(gate);
    }

    fn file(&self, file_id: u32) -> Result<Arc<FileEntry>> {
        let files = self.files.read_locked();
        files.get(file_id as usize).and_then(|f| f.clone()).ok_or_else(|| {
            Error::NotFound(format!("file id {file_id} is not registered with the buffer pool"))
        })
    }

    fn partition(&self) -> &Partition {
        if self.parts.len() == 1 {
            &self.parts[0]
        } else {
            &self.parts[THREAD_SLOT.with(|s| *s) % self.parts.len()]
        }
    }

    /// Counts a hit on frame `f` and raises its GCLOCK usage to the class weight.
    fn record_hit(&self, part: &Partition, f: &super::frames::Frame, class: PageClass, file: u32) {
        let w = self.weight(class);
        if f.usage.load(Relaxed) < w {
            f.usage.store(w, Relaxed);
        }
        part.count_hit(&self.file_hits, file);
    }

    /// A hint that the caller is about to fix `pid` and read the bytes at `offsets` of it: if
    /// the page is resident, its frame metadata and those cache lines are prefetched, so their
    /// memory latencies overlap instead of adding up. Never blocks, never fails.
    #[inline]
    pub fn prefetch_lines(&self, pid: PageId, offsets: &[usize]) {
        if !self.config.lock_free_hits {
            return;
        }
        let part = self.partition();
        if let Some(i) = part.xlate.get(pid.key()) {
            self.prefetch_frame(part, i, offsets);
        }
    }

    /// Prefetches frame `i`'s metadata and the lines at `offsets` of its bytes.
    #[inline]
    fn prefetch_frame(&self, part: &Partition, i: usize, offsets: &[usize]) {
        prefetch_line((&part.arena.frames[i] as *const super::frames::Frame).cast());
        let page = self.config.page_size;
        // SAFETY: only an address is computed (in range: i < frames, offset < page size);
        // a prefetch never faults and reads nothing the program observes.
        let base = unsafe { part.arena.frame_ptr(i) };
        for &o in offsets {
            if o < page {
                prefetch_line(base.wrapping_add(o));
            }
        }
    }

    /// Whether pages of `class` are kept resident (sticky) when loaded.
    fn sticky_class(&self, class: PageClass) -> bool {
        class == PageClass::Index && self.config.pin_index_pages
    }

    fn weight(&self, class: PageClass) -> u32 {
        match class {
            PageClass::Data => self.config.data_weight,
            PageClass::Index => self.config.index_weight,
        }
    }

    fn check_writable(&self) -> Result<()> {
        if let BufferPolicy::Separated { .. } = self.config.policy {
            return Err(Error::InvalidArgument(
                "the SEP buffer policy is read-only (seed 004 uses it for scans); use SHR-k to modify pages"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Fixes a page for reading.
    pub fn fix(&self, pid: PageId, class: PageClass) -> Result<PageRef<'_>> {
        self.fix_prefetching(pid, class, &[])
    }

    /// [`BufferPool::fix`] for a caller that reads the bytes at `offsets` of the page next: if
    /// the page is resident, those cache lines are prefetched together with the frame's
    /// metadata (see [`BufferPool::prefetch_lines`]), with one translation for both.
    pub fn fix_prefetching(&self, pid: PageId, class: PageClass, offsets: &[usize]) -> Result<PageRef<'_>> {
        match self.fix_mode(pid, class, FixMode::Shared, offsets)? {
            Fixed::Shared(g) => Ok(g),
            Fixed::Exclusive(_) => unreachable!("shared fix returned an exclusive guard"),
        }
    }

    /// Fixes a page for writing.
    pub fn fix_mut(&self, pid: PageId, class: PageClass) -> Result<PageMut<'_>> {
        self.check_writable()?;
        match self.fix_mode(pid, class, FixMode::Exclusive, &[])? {
            Fixed::Exclusive(g) => Ok(g),
            Fixed::Shared(_) => unreachable!("exclusive fix returned a shared guard"),
        }
    }

    fn fix_mode(
        &self,
        pid: PageId,
        class: PageClass,
        mode: FixMode,
        prefetch: &[usize],
    ) -> Result<Fixed<'_>> {
        let part = self.partition();
        let key = pid.key();
        // Where the page probably is: a hint the paths below check after pinning or latching.
        let hint = if self.config.lock_free_hits { part.xlate.get(key) } else { None };
        if let Some(i) = hint.filter(|_| !prefetch.is_empty()) {
            self.prefetch_frame(part, i, prefetch);
        }
        if matches!(mode, FixMode::Shared) && class == PageClass::Index {
            // Fast path for index pages kept resident: no page-table lock, no pin. A sticky
            // frame changes page only under its write latch (see `claim_frame_once`), which
            // the shared latch taken here excludes: the page key checked under it stays.
            if let Some(i) = hint {
                let f = &part.arena.frames[i];
                if f.sticky.load(Acquire) && f.page_key.load(Acquire) == key {
                    let g = f.latch.read_locked();
                    if f.valid.load(Acquire) && f.page_key.load(Acquire) == key {
                        // Raises the GCLOCK usage like any hit (a load, and a store only once
                        // the hand aged it): an index larger than its buffer keeps its hot
                        // upper levels resident.
                        self.record_hit(part, f, class, pid.file);
                        return Ok(Fixed::Shared(PageRef {
                            part,
                            frame: i,
                            pid,
                            pinned: false,
                            latch: Some(g),
                        }));
                    }
                }
            }
        }
        let mut hint = hint;
        loop {
            let i = self.pin_page(part, pid, class, hint.take())?;
            let f = &part.arena.frames[i];
            let fixed = match mode {
                FixMode::Shared => {
                    let g = part.read_latch(i);
                    Fixed::Shared(PageRef { part, frame: i, pid, pinned: true, latch: Some(g) })
                }
                FixMode::Exclusive => {
                    let g = f.latch.write_locked();
                    let before = self.logger.get().map(|_| {
                        // SAFETY: we hold the frame's write latch.
                        Box::<[u8]>::from(unsafe { part.arena.bytes(i) })
                    });
                    Fixed::Exclusive(PageMut {
                        pool: self,
                        part,
                        frame: i,
                        pid,
                        modified: false,
                        before,
                        latch: Some(g),
                    })
                }
            };
            // A failed load leaves the frame invalid; the guard's drop unpins it. Retry.
            if f.valid.load(Acquire) && f.page_key.load(Acquire) == key {
                return Ok(fixed);
            }
        }
    }

    /// Returns a pinned frame holding `pid` (possibly still being loaded by another thread:
    /// latch it and check `valid`).
    /// `hint`: the frame the page→frame table gave for `pid` (`None`: look it up here).
    fn pin_page(
        &self,
        part: &Partition,
        pid: PageId,
        class: PageClass,
        hint: Option<usize>,
    ) -> Result<usize> {
        let key = pid.key();
        if self.config.lock_free_hits {
            if let Some(i) = hint.or_else(|| part.xlate.get(key)) {
                // Pin first, then check the frame still holds the page: an evictor claims a
                // frame only by moving its pins from 0 to EVICTING, so a pin taken without it
                // keeps the frame's page until unpinned.
                let f = &part.arena.frames[i];
                let prev = f.pins.fetch_add(1, AcqRel);
                if prev & EVICTING == 0 && f.page_key.load(Acquire) == key {
                    self.record_hit(part, f, class, pid.file);
                    return Ok(i);
                }
                part.unpin(i);
            }
        }
        loop {
            {
                let map = part.lock_stripe(key);
                if let Some(&i) = map.get(&key) {
                    let f = &part.arena.frames[i as usize];
                    f.pins.fetch_add(1, AcqRel);
                    drop(map);
                    self.record_hit(part, f, class, pid.file);
                    return Ok(i as usize);
                }
            }
            let file = self.file(pid.file)?;
            if file.dropped.load(Acquire) {
                return Err(Error::NotFound(format!("{} belongs to a dropped table", file.name)));
            }
            let pages = file.published.load(Acquire);
            if pid.page >= pages {
                return Err(Error::InvalidArgument(format!(
                    "page {} does not exist in {} (file {} has {pages} pages)",
                    pid.page, file.name, pid.file
                )));
            }
            let victim = self.claim_frame(part)?;
            let f = &part.arena.frames[victim];
            let wl = f.latch.write_locked();
            {
                let mut map = part.lock_stripe(key);
                if map.contains_key(&key) {
                    // Another thread loaded it meanwhile: give the frame back and take the hit.
                    drop(map);
                    drop(wl);
                    part.unpin(victim);
                    continue;
                }
                map.insert(key, victim as u32);
                f.page_key.store(key, Release);
                part.xlate.set(key, victim);
            }
            part.misses.fetch_add(1, Relaxed);
            let offset = pid.page * self.config.page_size as u64;
            // SAFETY: we hold the write latch of a frame we claimed.
            let bytes = unsafe { part.arena.bytes_mut(victim) };
            let start = Instant::now();
            let loaded = file.device().read_at(offset, bytes).map_err(Error::from).and_then(|()| {
                PageHeader::verify(bytes, &file.name, offset, pid.file, pid.page)?;
                self.check_page_lsn(bytes, &file.name, offset, pid)
            });
            let end = Instant::now();
            crate::trace::record(crate::trace::TraceKind::DataRead, start, end);
            part.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
            part.reads.fetch_add(1, Relaxed);
            file.io.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
            file.io.reads.fetch_add(1, Relaxed);
            file.io.misses.fetch_add(1, Relaxed);
            match loaded {
                Ok(()) => {
                    f.usage.store(self.weight(class), Relaxed);
                    part.set_sticky(victim, self.sticky_class(class));
                    f.dirty.store(false, Relaxed);
                    f.valid.store(true, Release);
                    drop(wl);
                    return Ok(victim);
                }
                Err(e) => {
                    {
                        let mut map = part.lock_stripe(key);
                        map.remove(&key);
                        part.xlate.clear(key, victim);
                        f.page_key.store(NO_PAGE, Release);
                    }
                    f.valid.store(false, Release);
                    drop(wl);
                    part.unpin(victim);
                    return Err(e);
                }
            }
        }
    }

    /// Finds a frame to reuse (GCLOCK) and returns it pinned once, mapped to no page. Pins are
    /// short-lived (a fix, or a write-back in flight, which on a slow or loaded device can take
    /// many milliseconds), so when every frame is pinned it yields and sweeps again for up to
    /// [`Self::CLAIM_PATIENCE`] before reporting the pool exhausted. Sticky frames are passed
    /// over while they leave the partition room ([`Partition::sticky_evictable`]); a sweep that
    /// found no other victim is followed by sweeps that take them too.
    fn claim_frame(&self, part: &Partition) -> Result<usize> {
        let mut started = None;
        for attempt in 0u32.. {
            match self.claim_frame_once_with(part, attempt > 0) {
                Err(Error::ResourceExhausted(_)) => {
                    if attempt == 0 {
                        continue; // at once: the next sweep may take sticky frames
                    }
                    let since = *started.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() >= Self::CLAIM_PATIENCE {
                        return Err(self.exhausted(part));
                    }
                    if attempt < 10 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                }
                other => return other,
            }
        }
        unreachable!("the claim loop returns")
    }

    /// How long [`Self::claim_frame`] keeps sweeping a partition whose frames are all pinned.
    const CLAIM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

    /// The error of a partition in which no frame can be evicted: names the pool, its size and
    /// what holds its frames.
    fn exhausted(&self, part: &Partition) -> Error {
        let n = part.arena.len();
        let (mut pinned, mut writing, mut latched, mut sticky) = (0, 0, 0, 0);
        for (i, f) in part.arena.frames.iter().enumerate() {
            if part.writing[i].load(Relaxed) {
                writing += 1;
            } else if f.pins.load(Relaxed) != 0 {
                pinned += 1;
            } else if f.latch.try_write().is_err() {
                latched += 1;
            } else if f.sticky.load(Relaxed) {
                sticky += 1;
            }
        }
        let page_size = self.config.page_size;
        let whole = match self.config.policy {
            BufferPolicy::Separated { partitions } if partitions > 1 => {
                format!(" (one of {partitions} SEP partitions, {} frames in all)", self.config.frames)
            }
            _ => String::new(),
        };
        Error::ResourceExhausted(format!(
            "{}: no frame can be evicted among its {n} frames of {page_size} B ({} KiB){whole}: \
             {pinned} pinned by page fixes in progress (page guards held by scans, lookups, open \
             mini-transactions or loads), {writing} being written back, {latched} latched by \
             readers, {sticky} kept resident; the working set of the threads running now does \
             not fit: give the {} more memory or run fewer threads at once",
            self.config.name,
            n * page_size / 1024,
            self.config.name,
        ))
    }

    /// One GCLOCK sweep of [`BufferPool::claim_frame`] (read-ahead takes no more: it is advice).
    fn claim_frame_once(&self, part: &Partition) -> Result<usize> {
        self.claim_frame_once_with(part, false)
    }

    /// One sweep; `take_sticky`: sticky frames are victims too, whatever their number.
    ///
    /// A frame is unmapped only while the evicting thread holds its pin word at `EVICTING`, the
    /// page-table stripe of its page and its write latch (taken with `try_write`, never waited
    /// for): a reader holding the latch without a pin (the sticky fast path of `fix_mode`)
    /// keeps its frame, and one that latches it afterwards finds the page key changed.
    fn claim_frame_once_with(&self, part: &Partition, take_sticky: bool) -> Result<usize> {
        let n = part.arena.len();
        let max_weight = self.config.data_weight.max(self.config.index_weight) as usize;
        let limit = n * (max_weight + 2) * 2 + 64;
        let take_sticky = take_sticky || part.sticky_evictable();
        // With a background writer, pass over a few dirty victims (waking it) before writing
        // one on this thread: a clean frame is usually a little further on.
        let writer = self.config.background_writer;
        let mut dirty_skips = writer.map_or(0, |bw| bw.eviction_dirty_skips.min(n));
        for _ in 0..limit {
            let i = part.hand.fetch_add(1, Relaxed) % n;
            let f = &part.arena.frames[i];
            if f.pins.load(Acquire) != 0 {
                continue;
            }
            let key = f.page_key.load(Acquire);
            if key == NO_PAGE {
                if f.pins.compare_exchange(0, 1, AcqRel, Acquire).is_ok() {
                    if f.page_key.load(Acquire) == NO_PAGE {
                        part.set_sticky(i, false);
                        return Ok(i);
                    }
                    part.unpin(i);
                }
                continue;
            }
            if !take_sticky && f.sticky.load(Relaxed) {
                continue;
            }
            let u = f.usage.load(Relaxed);
            if u > 0 {
                f.usage.store(u - 1, Relaxed);
                continue;
            }
            if f.dirty.load(Acquire) {
                if dirty_skips > 0 {
                    dirty_skips -= 1;
                    if let Some(signal) = &self.writer_signal {
                        signal.request();
                    }
                    continue;
                }
                if let Some(bw) = writer {
                    // The writer is behind: help it with one batch ahead of the hand (one log
                    // wait and one mirrored round trip for up to `batch_pages` pages), then
                    // look on for a clean victim. A failed batch leaves its pages dirty and is
                    // not this eviction's error: it then writes this victim alone, as without
                    // a writer, and reports that write's outcome.
                    // The batch takes at most a quarter of the partition, as the writer's
                    // rounds do: its frames stay pinned while they are written, and other
                    // evictions must still find frames to claim meanwhile.
                    dirty_skips = bw.eviction_dirty_skips.min(n);
                    let help = bw.batch_pages.min(n / 4).max(1);
                    if let Ok(written) = self.clean_part(part, help, help, false) {
                        if written > 0 {
                            part.eviction_writes.fetch_add(1, Relaxed);
                            continue;
                        }
                    }
                }
                // Write it here, then take it if it is still clean and unpinned.
                if !self.write_back(part, i, key, false)? {
                    continue;
                }
                part.eviction_writes.fetch_add(1, Relaxed);
            }
            let mut map = part.lock_stripe(key);
            if f.page_key.load(Acquire) == key
                && !f.dirty.load(Acquire)
                && (take_sticky || !f.sticky.load(Relaxed))
                && map.get(&key) == Some(&(i as u32))
                && f.pins.compare_exchange(0, EVICTING | 1, AcqRel, Acquire).is_ok()
            {
                // A writer may have dirtied the page and unpinned it between the check above and
                // the claim; its dirty flag is visible now (set before its unpin). A reader may
                // hold the latch without a pin (sticky fast path): leave the frame to it.
                let latch = match f.latch.try_write() {
                    Ok(g) if !f.dirty.load(Acquire) => g,
                    _ => {
                        f.pins.fetch_sub(EVICTING | 1, AcqRel);
                        continue;
                    }
                };
                map.remove(&key);
                part.xlate.clear(key, i);
                f.page_key.store(NO_PAGE, Release);
                f.valid.store(false, Release);
                part.set_sticky(i, false);
                drop(latch);
                // Keep our pin; lock-free pinners that saw EVICTING have backed off (or will),
                // later ones find the page key changed.
                f.pins.fetch_and(!EVICTING, AcqRel);
                drop(map);
                part.evictions.fetch_add(1, Relaxed);
                return Ok(i);
            }
        }
        Err(Error::ResourceExhausted(format!("{}: no evictable frame in one sweep of {n}", self.config.name)))
    }

    /// Writes frame `i` (holding `key`) back if it is dirty. Returns whether it wrote.
    fn write_back(&self, part: &Partition, i: usize, key: u64, background: bool) -> Result<bool> {
        let f = &part.arena.frames[i];
        {
            let map = part.lock_stripe(key);
            if f.page_key.load(Acquire) != key || map.get(&key) != Some(&(i as u32)) {
                return Ok(false);
            }
            f.pins.fetch_add(1, AcqRel);
        }
        if part.writing[i].swap(true, AcqRel) {
            part.unpin(i);
            return Ok(false);
        }
        let result = self.write_back_pinned(part, i, key, background);
        part.writing[i].store(false, Release);
        part.unpin(i);
        result
    }

    fn write_back_pinned(&self, part: &Partition, i: usize, key: u64, background: bool) -> Result<bool> {
        let f = &part.arena.frames[i];
        let pid = PageId::new((key >> 40) as u32, key & ((1 << 40) - 1));
        let file = self.file(pid.file)?;
        let page_size = self.config.page_size;
        SCRATCH.with(|cell| {
            let mut slot = cell.borrow_mut();
            let scratch = slot.get_or_insert_with(|| AlignedBuf::new(65536));
            let copy = &mut scratch[..page_size];
            {
                // try_read: a thread holding this page exclusively may itself be waiting for a
                // frame; never block on it (the caller moves on or retries).
                let _rl = match f.latch.try_read() {
                    Ok(g) => g,
                    Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
                };
                if !f.dirty.swap(false, AcqRel) {
                    return Ok(false);
                }
                // SAFETY: we hold the latch shared and a pin.
                copy.copy_from_slice(unsafe { part.arena.bytes(i) });
            }
            if file.dropped.load(Acquire) {
                return Ok(true); // a dropped table's page: nothing to keep
            }
            let lsn = PageHeader::lsn_of(copy);
            let gate = self.gate.read_locked().clone();
            if let Some(gate) = gate {
                if let Err(e) = gate.ensure_durable(lsn) {
                    f.dirty.store(true, Release);
                    return Err(e);
                }
            }
            PageHeader::seal(copy);
            let offset = pid.page * page_size as u64;
            let start = Instant::now();
            let r = file.device().write_at(offset, copy);
            let end = Instant::now();
            crate::trace::record(crate::trace::TraceKind::DataWrite, start, end);
            part.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
            file.io.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
            match r {
                Ok(()) => {
                    part.writes.fetch_add(1, Relaxed);
                    file.io.writes.fetch_add(1, Relaxed);
                    if background {
                        part.background_writes.fetch_add(1, Relaxed);
                        file.io.background_writes.fetch_add(1, Relaxed);
                    }
                    Ok(true)
                }
                Err(e) => {
                    f.dirty.store(true, Release);
                    Err(e.into())
                }
            }
        })
    }

    /// The most pages one [`BufferPool::prefetch`] call of this thread reads: an eighth of the
    /// frames of the thread's partition (the whole pool under SHR-k, its own part under SEP).
    pub fn read_ahead_limit(&self) -> usize {
        (self.partition().arena.len() / 8).max(1)
    }

    /// Reads the non-resident pages among `pages` of file `file_id` with one batched device
    /// submission (many reads in flight), so that later fixes hit. Pages already resident are
    /// skipped; pages past the end of the file are ignored. Returns how many pages were read.
    ///
    /// Used by scans for read-ahead; under SEP it fills the calling thread's partition.
    pub fn prefetch(&self, file_id: u32, pages: std::ops::Range<u64>, class: PageClass) -> Result<usize> {
        let file = self.file(file_id)?;
        let end = pages.end.min(file.published.load(Acquire));
        let part = self.partition();
        // Claim and map a frame for every missing page; hold each frame's write latch until
        // its read is verified so concurrent fixes of those pages wait for the data.
        let mut claimed: Vec<(usize, PageId, RwLockWriteGuard<'_, ()>)> = Vec::new();
        let mut failure = None;
        for page in pages.start..end {
            let pid = PageId::new(file_id, page);
            let key = pid.key();
            if part.lock_stripe(key).contains_key(&key) {
                continue;
            }
            // Leave most of the pool to other threads: read ahead into at most an eighth.
            if claimed.len() >= self.read_ahead_limit() {
                break;
            }
            // One sweep, no waiting: read-ahead is advice.
            let victim = match self.claim_frame_once(part) {
                Ok(v) => v,
                // Out of frames: read-ahead is advice, read what we have.
                Err(Error::ResourceExhausted(_)) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            let f = &part.arena.frames[victim];
            let wl = f.latch.write_locked();
            let mut map = part.lock_stripe(key);
            if map.contains_key(&key) {
                drop(map);
                drop(wl);
                part.unpin(victim);
                continue;
            }
            map.insert(key, victim as u32);
            f.page_key.store(key, Release);
            part.xlate.set(key, victim);
            drop(map);
            claimed.push((victim, pid, wl));
        }
        let page_size = self.config.page_size as u64;
        let start = Instant::now();
        let io_result = {
            let mut reqs: Vec<crate::io::IoRequest<'_>> = claimed
                .iter()
                .map(|(i, pid, _)| crate::io::IoRequest::Read {
                    offset: pid.page * page_size,
                    // SAFETY: we hold the write latch of each claimed frame, and frames are
                    // distinct, so these slices do not alias.
                    buf: unsafe { part.arena.bytes_mut(*i) },
                })
                .collect();
            if reqs.is_empty() {
                Ok(())
            } else {
                file.device().submit_batch(&mut reqs)
            }
        };
        let end_t = Instant::now();
        crate::trace::record(crate::trace::TraceKind::DataRead, start, end_t);
        part.io_wait_ns.fetch_add((end_t - start).as_nanos() as u64, Relaxed);
        part.reads.fetch_add(claimed.len() as u64, Relaxed);
        part.misses.fetch_add(claimed.len() as u64, Relaxed);
        file.io.io_wait_ns.fetch_add((end_t - start).as_nanos() as u64, Relaxed);
        file.io.reads.fetch_add(claimed.len() as u64, Relaxed);
        file.io.misses.fetch_add(claimed.len() as u64, Relaxed);
        let mut first_err: Option<Error> = io_result.err().map(Error::from);
        let read = claimed.len();
        for (i, pid, wl) in claimed {
            let f = &part.arena.frames[i];
            let offset = pid.page * page_size;
            // SAFETY: we still hold the frame's write latch.
            let bytes = unsafe { part.arena.bytes(i) };
            let verified = if first_err.is_some() {
                Err(None)
            } else {
                PageHeader::verify(bytes, &file.name, offset, pid.file, pid.page)
                    .and_then(|_| self.check_page_lsn(bytes, &file.name, offset, pid))
                    .map_err(Some)
            };
            match verified {
                Ok(_) => {
                    f.usage.store(self.weight(class), Relaxed);
                    part.set_sticky(i, self.sticky_class(class));
                    f.dirty.store(false, Relaxed);
                    f.valid.store(true, Release);
                }
                Err(e) => {
                    if let Some(e) = e {
                        first_err.get_or_insert(e);
                    }
                    let key = pid.key();
                    let mut map = part.lock_stripe(key);
                    map.remove(&key);
                    part.xlate.clear(key, i);
                    f.page_key.store(NO_PAGE, Release);
                    f.valid.store(false, Release);
                }
            }
            drop(wl);
            part.unpin(i);
        }
        match (first_err, failure) {
            (Some(e), _) | (None, Some(e)) => Err(e),
            (None, None) => Ok(read),
        }
    }

    /// Appends a new page to file `file_id`, initialised with a header of `page_type`, and
    /// returns it fixed for writing (already dirty).
    pub fn allocate(&self, file_id: u32, class: PageClass, page_type: PageType) -> Result<PageMut<'_>> {
        self.check_writable()?;
        let file = self.file(file_id)?;
        let part = self.partition();
        let victim = self.claim_frame(part)?;
        let page_no = file.next_page.fetch_add(1, AcqRel);
        let pid = PageId::new(file_id, page_no);
        let key = pid.key();
        let f = &part.arena.frames[victim];
        let wl = f.latch.write_locked();
        // SAFETY: we hold the write latch of a frame we claimed.
        let bytes = unsafe { part.arena.bytes_mut(victim) };
        bytes.fill(0);
        PageHeader::init(bytes, page_type, file_id, page_no);
        {
            let mut map = part.lock_stripe(key);
            let prev = map.insert(key, victim as u32);
            assert!(prev.is_none(), "new page {pid} was already mapped");
            f.page_key.store(key, Release);
            part.xlate.set(key, victim);
        }
        // Publish in page order: an allocation of an earlier page that has not mapped it yet
        // holds nothing this one holds, so the wait is short and cannot deadlock.
        while file.published.compare_exchange_weak(page_no, page_no + 1, AcqRel, Acquire).is_err() {
            std::thread::yield_now();
        }
        f.usage.store(self.weight(class), Relaxed);
        part.set_sticky(victim, self.sticky_class(class));
        f.valid.store(true, Release);
        Ok(PageMut { pool: self, part, frame: victim, pid, modified: true, before: None, latch: Some(wl) })
    }

    /// Appends a new page of `page_type` to `file` holding the body of `image` (a page
    /// composed elsewhere: the bytes between the page header and trailer; the header is the
    /// new page's own), in a mini-transaction (with a log, a new page is logged whole).
    /// Returns the page number. How a bulk load writes the pages it builds.
    pub fn append_page(
        &self,
        file_id: u32,
        class: PageClass,
        page_type: PageType,
        image: &[u8],
    ) -> Result<u64> {
        if image.len() != self.page_size() {
            return Err(Error::InvalidArgument(format!(
                "page image of {} bytes for a pool of {}-byte pages",
                image.len(),
                self.page_size()
            )));
        }
        let body =
            crate::page::header::PAGE_HEADER_BYTES..image.len() - crate::page::header::PAGE_TRAILER_BYTES;
        let mtr = self.begin_mtr();
        let mut g = self.allocate(file_id, class, page_type)?;
        g[body.clone()].copy_from_slice(&image[body]);
        let page = g.page_id().page;
        drop(g);
        mtr.commit()?;
        Ok(page)
    }

    /// Reserves `n` new page numbers at the end of file `file_id` for
    /// [`BufferPool::write_new_pages`]; returns the first. Every reservation must be written,
    /// in reservation order: until it is, later allocations in the file wait.
    pub fn reserve_new_pages(&self, file_id: u32, n: u64) -> Result<u64> {
        self.check_writable()?;
        Ok(self.file(file_id)?.next_page.fetch_add(n, AcqRel))
    }

    /// Writes `pages` (whole pages composed elsewhere, back to back, in a buffer aligned for
    /// the device) to the pages of file `file_id` that [`BufferPool::reserve_new_pages`]
    /// reserved from `first`, with one device write, bypassing the frames and the log: each
    /// page gets its header (type `page_type`, its file and page number, LSN 0) and its
    /// checksum here. The pages are then published (in page order, waiting for earlier
    /// reservations), even when the write fails: a failed write leaves pages that read as
    /// never written, for a caller that discards the file. A length that is not a whole
    /// number of pages is an error before anything is written or published.
    ///
    /// The pages are not durable until [`BufferPool::sync_file`]. They have no log record, so
    /// a caller must make them durable before anything that survives a crash refers to them,
    /// and must not use this for a file that a standby rebuilds from the log. How a bulk load
    /// writes its heap pages when its log ships to no standby. Nobody may read the new pages
    /// before this returns (a new file no table names yet).
    pub fn write_new_pages(
        &self,
        file_id: u32,
        first: u64,
        page_type: PageType,
        pages: &mut [u8],
    ) -> Result<()> {
        let page_size = self.page_size();
        if pages.is_empty() || pages.len() % page_size != 0 {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of new pages is not a whole number of {page_size}-byte pages",
                pages.len()
            )));
        }
        let file = self.file(file_id)?;
        let n = (pages.len() / page_size) as u64;
        for (k, page) in pages.chunks_mut(page_size).enumerate() {
            PageHeader::init(page, page_type, file_id, first + k as u64);
            PageHeader::seal(page);
        }
        let start = Instant::now();
        let written = file.device().write_at(first * page_size as u64, pages);
        let ns = start.elapsed().as_nanos() as u64;
        let part = self.partition();
        part.io_wait_ns.fetch_add(ns, Relaxed);
        file.io.io_wait_ns.fetch_add(ns, Relaxed);
        if written.is_ok() {
            part.writes.fetch_add(n, Relaxed);
            file.io.writes.fetch_add(n, Relaxed);
        }
        while file.published.compare_exchange_weak(first, first + n, AcqRel, Acquire).is_err() {
            std::thread::yield_now();
        }
        Ok(written?)
    }

    /// Makes every completed write of file `file_id` durable (its device's sync).
    pub fn sync_file(&self, file_id: u32) -> Result<()> {
        Ok(self.file(file_id)?.device().sync()?)
    }

    /// Writes every dirty page, then syncs every registered file. Dirty pages go out in
    /// batches of [`FLUSH_BATCH_PAGES`] (one log wait and one device submission per file per
    /// batch, as the background writer writes); pages a batch had to pass over (latched
    /// exclusively, being written by another thread, or dirtied again meanwhile) are then
    /// written one at a time, waiting for the thread that holds them.
    pub fn flush_all(&self) -> Result<()> {
        let mut batch: Vec<(usize, u64)> = Vec::with_capacity(FLUSH_BATCH_PAGES);
        for part in self.parts.iter() {
            for i in 0..part.arena.len() {
                let f = &part.arena.frames[i];
                let key = f.page_key.load(Acquire);
                if key != NO_PAGE && f.dirty.load(Acquire) {
                    batch.push((i, key));
                    if batch.len() == FLUSH_BATCH_PAGES {
                        self.write_batch(part, &mut batch, false)?;
                    }
                }
            }
            self.write_batch(part, &mut batch, false)?;
            for i in 0..part.arena.len() {
                loop {
                    let f = &part.arena.frames[i];
                    let key = f.page_key.load(Acquire);
                    if key == NO_PAGE {
                        break;
                    }
                    if !f.dirty.load(Acquire) {
                        // A write-back in flight (background or eviction) cleared the flag
                        // before writing: the sync below must come after it.
                        if !part.writing[i].load(Acquire) {
                            break;
                        }
                        std::thread::yield_now();
                        continue;
                    }
                    if !self.write_back(part, i, key, false)? {
                        // Another thread is writing it (or it moved): wait for that to finish.
                        std::thread::yield_now();
                    }
                }
            }
        }
        let files: Vec<Arc<FileEntry>> = self.files.read_locked().iter().flatten().cloned().collect();
        for file in files.iter().filter(|f| !f.dropped.load(Acquire)) {
            file.device().sync()?;
        }
        Ok(())
    }

    /// Every frame of every partition (tests age or inspect frames through it).
    #[cfg(test)]
    pub(crate) fn frames_for_tests(&self) -> impl Iterator<Item = &super::frames::Frame> {
        self.parts.iter().flat_map(|p| p.arena.frames.iter())
    }

    /// One background-writer round: in each partition, walks ahead of the clock hand until it
    /// has passed `clean_target` evictable frames (clean, free, or made clean here), writing the
    /// dirty ones among them in batches of `batch_pages`. Frames the hand will only age this
    /// pass (usage above zero), pinned frames, and sticky ones while they are not victims
    /// ([`Partition::sticky_evictable`]) are left alone. Returns pages written.
    pub(crate) fn clean_ahead(&self, cfg: &super::BackgroundWriter) -> Result<usize> {
        let mut written = 0;
        for part in self.parts.iter() {
            let target = cfg.clean_target.min(part.arena.len() / 4).max(1);
            written += self.clean_part(part, target, cfg.batch_pages, true)?;
        }
        Ok(written)
    }

    /// [`BufferPool::clean_ahead`] in one partition: walks ahead of the hand until `target`
    /// evictable frames, writing the dirty ones in batches of `batch_pages`. `background`: the
    /// writer's thread (else an eviction helping it). Returns pages written.
    fn clean_part(
        &self,
        part: &Partition,
        target: usize,
        batch_pages: usize,
        background: bool,
    ) -> Result<usize> {
        let batch_pages = batch_pages.max(1);
        let mut batch: Vec<(usize, u64)> = Vec::with_capacity(batch_pages);
        let mut written = 0;
        let n = part.arena.len();
        let hand = part.hand.load(Relaxed);
        let mut evictable = 0;
        let take_sticky = part.sticky_evictable();
        for k in 0..n {
            let i = (hand + k) % n;
            let f = &part.arena.frames[i];
            if f.pins.load(Acquire) != 0
                || (!take_sticky && f.sticky.load(Relaxed))
                || f.usage.load(Relaxed) > 0
            {
                continue;
            }
            let key = f.page_key.load(Acquire);
            if key != NO_PAGE && f.dirty.load(Acquire) {
                batch.push((i, key));
                if batch.len() == batch_pages {
                    written += self.write_batch(part, &mut batch, background)?;
                }
            }
            evictable += 1;
            if evictable >= target {
                break;
            }
        }
        written += self.write_batch(part, &mut batch, background)?;
        Ok(written)
    }

    /// Writes the dirty frames of `batch` (frame, page key; emptied) back: pins each, copies it
    /// under its shared latch, waits once for the log to cover the highest page LSN, then
    /// submits one write batch per file. Frames that moved, are latched exclusively, or are
    /// already being written are skipped. Returns pages written.
    fn write_batch(
        &self,
        part: &Partition,
        batch: &mut Vec<(usize, u64)>,
        background: bool,
    ) -> Result<usize> {
        if batch.is_empty() {
            return Ok(0);
        }
        let page_size = self.config.page_size;
        let mut bufs = BATCH_SCRATCH
            .with(|c| c.borrow_mut().take())
            .filter(|b| b.len() >= page_size * batch.len())
            .unwrap_or_else(|| AlignedBuf::large(page_size * batch.len()));
        // (frame, page id, file) of every copy taken, pinned and marked as being written.
        let mut taken: Vec<(usize, PageId, Arc<FileEntry>)> = Vec::with_capacity(batch.len());
        let mut max_lsn = 0;
        let mut failure = None;
        for &(i, key) in batch.iter() {
            let f = &part.arena.frames[i];
            {
                let map = part.lock_stripe(key);
                if f.page_key.load(Acquire) != key || map.get(&key) != Some(&(i as u32)) {
                    continue;
                }
                f.pins.fetch_add(1, AcqRel);
            }
            let pid = PageId::new((key >> 40) as u32, key & ((1 << 40) - 1));
            let file = match self.file(pid.file) {
                Ok(file) => file,
                Err(e) => {
                    part.unpin(i);
                    failure = Some(e);
                    break;
                }
            };
            if part.writing[i].swap(true, AcqRel) {
                part.unpin(i);
                continue;
            }
            let slot = taken.len();
            let copy = &mut bufs[slot * page_size..(slot + 1) * page_size];
            let copied = {
                // try_read: never wait for a thread that holds the page exclusively.
                match f.latch.try_read() {
                    Ok(_rl) => {
                        let dirty = f.dirty.swap(false, AcqRel);
                        if dirty {
                            // SAFETY: we hold the latch shared and a pin.
                            copy.copy_from_slice(unsafe { part.arena.bytes(i) });
                        }
                        dirty
                    }
                    Err(std::sync::TryLockError::Poisoned(_)) | Err(std::sync::TryLockError::WouldBlock) => {
                        false
                    }
                }
            };
            if !copied {
                part.writing[i].store(false, Release);
                part.unpin(i);
                continue;
            }
            max_lsn = max_lsn.max(PageHeader::lsn_of(copy));
            taken.push((i, pid, file));
        }
        batch.clear();
        let result = self.write_taken(part, &mut bufs, &taken, max_lsn, background);
        for &(i, _, _) in &taken {
            if result.is_err() {
                part.arena.frames[i].dirty.store(true, Release);
            }
            part.writing[i].store(false, Release);
            part.unpin(i);
        }
        BATCH_SCRATCH.with(|c| *c.borrow_mut() = Some(bufs));
        match (failure, result) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(())) => Ok(taken.len()),
        }
    }

    /// The device half of [`BufferPool::write_batch`]: the WAL rule for the batch, then one
    /// submission per file. On error every copy is treated as unwritten.
    fn write_taken(
        &self,
        part: &Partition,
        bufs: &mut AlignedBuf,
        taken: &[(usize, PageId, Arc<FileEntry>)],
        max_lsn: u64,
        background: bool,
    ) -> Result<()> {
        if taken.is_empty() {
            return Ok(());
        }
        let gate = self.gate.read_locked().clone();
        if let Some(gate) = gate {
            gate.ensure_durable(max_lsn)?;
        }
        let page_size = self.config.page_size;
        let mut chunks: Vec<&mut [u8]> = bufs.chunks_mut(page_size).take(taken.len()).collect();
        for c in chunks.iter_mut() {
            PageHeader::seal(c);
        }
        let mut by_file: Vec<(u32, Vec<IoRequest<'_>>)> = Vec::new();
        for ((_, pid, file), buf) in taken.iter().zip(chunks) {
            if file.dropped.load(Acquire) {
                continue; // a dropped table's page: nothing to keep
            }
            let req = IoRequest::Write { offset: pid.page * page_size as u64, buf };
            match by_file.iter_mut().find(|(id, _)| *id == pid.file) {
                Some((_, reqs)) => reqs.push(req),
                None => by_file.push((pid.file, vec![req])),
            }
        }
        for (id, mut reqs) in by_file {
            let file = &taken.iter().find(|(_, p, _)| p.file == id).expect("file of a request").2;
            let start = Instant::now();
            let r = file.device().submit_batch(&mut reqs);
            let end = Instant::now();
            if !background {
                crate::trace::record(crate::trace::TraceKind::DataWrite, start, end);
            }
            let ns = (end - start).as_nanos() as u64;
            part.io_wait_ns.fetch_add(ns, Relaxed);
            file.io.io_wait_ns.fetch_add(ns, Relaxed);
            r?;
            let k = reqs.len() as u64;
            part.writes.fetch_add(k, Relaxed);
            file.io.writes.fetch_add(k, Relaxed);
            if background {
                part.background_writes.fetch_add(k, Relaxed);
                file.io.background_writes.fetch_add(k, Relaxed);
            }
        }
        Ok(())
    }

    /// Faults the memory of every frame in now, as a server does at start, so that the first
    /// read into each frame does not stop to allocate and zero it (the pool maps its memory
    /// lazily: a pool of gigabytes costs nothing until it is used). Contents are unchanged, so
    /// this may run while the pool is in use. On a kernel older than 5.14 (no
    /// `MADV_POPULATE_WRITE`) it does nothing; out of memory is an error naming the pool.
    pub fn prefault(&self) -> Result<()> {
        for (i, p) in self.parts.iter().enumerate() {
            match p.arena.populate() {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(()),
                Err(e) => {
                    return Err(Error::ResourceExhausted(format!(
                        "faulting in the {} B of frame memory of {} partition {i}: {e}",
                        p.arena.len() * self.config.page_size,
                        self.config.name
                    )))
                }
            }
        }
        Ok(())
    }

    /// Share of each partition's frame memory resident now (tests).
    #[cfg(test)]
    pub(crate) fn frame_memory_resident(&self) -> Vec<f64> {
        self.parts.iter().map(|p| p.arena.resident_share()).collect()
    }

    /// Counters summed over partitions.
    pub fn stats(&self) -> BufferStats {
        let mut s = BufferStats::default();
        for p in self.parts.iter() {
            s.hits += p.hits.iter().map(|c| c.0.load(Relaxed)).sum::<u64>();
            s.misses += p.misses.load(Relaxed);
            s.reads += p.reads.load(Relaxed);
            s.writes += p.writes.load(Relaxed);
            s.background_writes += p.background_writes.load(Relaxed);
            s.eviction_writes += p.eviction_writes.load(Relaxed);
            s.evictions += p.evictions.load(Relaxed);
            s.io_wait_ns += p.io_wait_ns.load(Relaxed);
            s.latch_waits += p.latch_waits.load(Relaxed);
            s.latch_wait_ns += p.latch_wait_ns.load(Relaxed);
            s.reads_overlapped += p.reads_overlapped.load(Relaxed);
        }
        s
    }

    /// Number of frames currently holding a page.
    pub fn resident_pages(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.arena.frames.iter().filter(|f| f.page_key.load(Relaxed) != NO_PAGE).count())
            .sum()
    }

    /// The last error the background writer hit, if any.
    pub fn background_writer_error(&self) -> Option<String> {
        self.writer.locked().as_ref().and_then(|w| w.last_error())
    }
}

/// A page changed inside a mini-transaction, still latched and pinned.
struct Deferred {
    part: *const Partition,
    frame: usize,
    pid: PageId,
    before: Option<Box<[u8]>>,
    latch: RwLockWriteGuard<'static, ()>,
}

struct OpenMtr {
    pool: *const BufferPool,
    depth: usize,
    pages: Vec<Deferred>,
}

thread_local! {
    static OPEN_MTRS: RefCell<Vec<OpenMtr>> = const { RefCell::new(Vec::new()) };
}

/// An open mini-transaction on one pool: every page changed while it is open is logged in one
/// record when it commits, and restored if it ends without committing. Nested scopes on the
/// same pool join the outermost one.
#[must_use = "a mini-transaction must be committed, or its changes are rolled back"]
pub struct Mtr<'a> {
    pool: &'a BufferPool,
    done: bool,
}

impl Mtr<'_> {
    /// Logs the changes (when this is the outermost scope) and releases the pages.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        self.pool.end_mtr(true)
    }
}

impl Drop for Mtr<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.pool.end_mtr(false);
        }
    }
}

impl BufferPool {
    /// Installs the WAL hook: from now on every page change is logged (see [`Mtr`]). `tag`
    /// names this pool in the log. Can be set once.
    pub fn set_page_logger(&self, logger: Arc<dyn PageLogger>, tag: u8) -> Result<()> {
        self.logger
            .set((logger, tag))
            .map_err(|_| Error::InvalidArgument("the buffer pool already has a page logger".into()))
    }

    /// True when page changes are logged.
    pub fn is_logging(&self) -> bool {
        self.logger.get().is_some()
    }

    /// Opens (or joins) this thread's mini-transaction on this pool. The thread's outermost
    /// mini-transaction (none open on any pool) first passes the logger's space gate
    /// ([`PageLogger::wait_for_space`]): call it before latching the pages it will change.
    pub fn begin_mtr(&self) -> Mtr<'_> {
        let me = self as *const BufferPool;
        if let Some((logger, _)) = self.logger.get() {
            if OPEN_MTRS.with(|m| m.borrow().is_empty()) {
                logger.wait_for_space();
            }
        }
        OPEN_MTRS.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter_mut().find(|o| o.pool == me) {
                Some(o) => o.depth += 1,
                None => m.push(OpenMtr { pool: me, depth: 1, pages: Vec::new() }),
            }
        });
        Mtr { pool: self, done: false }
    }

    /// The failure that poisoned logging outside a mini-transaction, if any.
    pub fn log_failure(&self) -> Option<String> {
        self.log_failure.locked().clone()
    }

    fn defer_change(&self, d: Deferred) {
        let me = self as *const BufferPool;
        let orphan = OPEN_MTRS.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter_mut().find(|o| o.pool == me) {
                Some(o) => {
                    o.pages.push(d);
                    None
                }
                None => Some(d),
            }
        });
        if let Some(d) = orphan {
            // A change outside any mini-transaction: log it on its own.
            if let Err(e) = self.finish_changes(vec![d], true) {
                *self.log_failure.locked() = Some(e.to_string());
            }
        }
    }

    fn end_mtr(&self, commit: bool) -> Result<()> {
        let me = self as *const BufferPool;
        let pages = OPEN_MTRS.with(|m| {
            let mut m = m.borrow_mut();
            let idx = m.iter().position(|o| o.pool == me).expect("mini-transaction scope is open");
            m[idx].depth -= 1;
            if m[idx].depth > 0 {
                return None;
            }
            Some(m.remove(idx).pages)
        });
        match pages {
            None if commit => Ok(()),
            None => Err(Error::InvalidArgument("inner mini-transaction scope ended without commit".into())),
            Some(pages) => self.finish_changes(pages, commit),
        }
    }

    /// Logs (or rolls back) deferred changes, then releases their latches and pins.
    fn finish_changes(&self, pages: Vec<Deferred>, commit: bool) -> Result<()> {
        if pages.is_empty() {
            return Ok(());
        }
        let result =
            if commit { self.log_changes(&pages) } else { Err(Error::InvalidArgument("rolled back".into())) };
        for d in pages {
            // SAFETY: `d.part` points into `self.parts`, alive while `self` is.
            let part = unsafe { &*d.part };
            let f = &part.arena.frames[d.frame];
            match (&result, &d.before) {
                (Ok(lsn), _) => {
                    // SAFETY: the deferred guard still holds the frame's write latch.
                    PageHeader::set_lsn(unsafe { part.arena.bytes_mut(d.frame) }, *lsn);
                    f.dirty.store(true, Release);
                }
                (Err(_), Some(before)) => {
                    // SAFETY: as above.
                    unsafe { part.arena.bytes_mut(d.frame) }.copy_from_slice(before);
                }
                // A new page cannot be un-allocated: it stays, unreferenced and unlogged.
                (Err(_), None) => f.dirty.store(true, Release),
            }
            drop(d.latch);
            part.unpin(d.frame);
        }
        match result {
            Ok(_) => Ok(()),
            Err(e) if commit => Err(e),
            Err(_) => Ok(()),
        }
    }

    fn log_changes(&self, pages: &[Deferred]) -> Result<u64> {
        let (logger, tag) = self.logger.get().expect("changes are deferred only while logging");
        let annotation = super::mtr::take_annotation();
        let mut build = |horizon: u64| {
            let mut payload = Vec::with_capacity(64 + pages.len() * 64);
            payload.extend_from_slice(&(self.config.page_size as u32).to_le_bytes());
            payload.extend_from_slice(&(pages.len() as u32).to_le_bytes());
            for d in pages {
                // SAFETY: `d.part` is alive (see finish_changes); the latch is held.
                let after = unsafe { (*d.part).arena.bytes(d.frame) };
                encode_page_change(&mut payload, d.pid, &change_for(d.before.as_deref(), after, horizon));
            }
            super::mtr::encode_annotation(&mut payload, annotation.as_deref());
            payload
        };
        logger.log_page_changes(*tag, &mut build)
    }
}

impl BufferPool {
    /// Stops the background writer and waits for its round in progress to end, so that no
    /// page of this pool is written after this returns (unless an eviction writes it). Called
    /// when the database closes: a writer that outlived its database could write a stale page
    /// over a file the next opener has already recovered. Idempotent.
    pub(crate) fn stop_writer(&self) {
        let w = self.writer.locked().take();
        if let Some(w) = w {
            w.stop();
        }
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        self.stop_writer();
    }
}
