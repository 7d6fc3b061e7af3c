//! A partition of the pool: a set of frames with its own page table (striped locks), clock
//! hand and counters; SHR-k has one, SEP one per thread slot.
//!
//! Owns: `Partition`, its page-table stripes, and the hit counters sharded by thread.
//!
//! Invariants:
//! - an owned hit-counter shard is written by its owning thread only (see [`HitShard`]);
//! - `sticky_frames` counts the frames whose sticky flag is set: the flag changes only
//!   through [`Partition::set_sticky`];
//! - a waited-for page-table lock or page latch is counted in `latch_waits`/`latch_wait_ns`.

use super::THREAD_SLOT;
use crate::buffer::frames::{stripe_of, FrameArena, PageKeyBuild, Xlate};
use crate::error::Result;
use crate::util::sync::{MutexExt, RwLockExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, RwLockReadGuard};
use std::time::Instant;

/// Per-file hit counters: `FILE_HIT_SHARDS` shards (chosen by the thread's [`HitShard`], so
/// threads rarely share a cache line) of `FILE_HIT_SLOTS` counters (chosen by file id modulo
/// the slots: files whose ids are congruent share a counter). The first [`OWNED_SHARDS`] shards
/// each belong to one thread at a time; the rest are shared.
pub(super) const FILE_HIT_SHARDS: usize = 2 * OWNED_SHARDS;
/// See [`FILE_HIT_SHARDS`].
pub const FILE_HIT_SLOTS: usize = 1024;

/// One page-table lock (padded against false sharing).
#[repr(align(128))]
pub(super) struct Stripe {
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
pub(super) struct PaddedCounter(pub(super) AtomicU64);

/// A set of frames with its own page table and clock hand.
pub(super) struct Partition {
    pub(super) arena: FrameArena,
    /// Lock-free page → frame hints for the hit path (see [`Xlate`]).
    pub(super) xlate: Xlate,
    pub(super) stripes: Box<[Stripe]>,
    pub(super) hand: AtomicUsize,
    pub(super) hits: Box<[PaddedCounter]>,
    pub(super) misses: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) background_writes: AtomicU64,
    /// Write-backs an evicting thread did itself (see [`BufferStats::eviction_writes`]).
    ///
    /// [`BufferStats::eviction_writes`]: crate::buffer::BufferStats::eviction_writes
    pub(super) eviction_writes: AtomicU64,
    pub(super) evictions: AtomicU64,
    pub(super) io_wait_ns: AtomicU64,
    /// Acquisitions of a page-table lock or a page latch that found it held and waited.
    pub(super) latch_waits: AtomicU64,
    /// Nanoseconds spent in those waits.
    pub(super) latch_wait_ns: AtomicU64,
    /// Reads ahead still in flight when the scan was handed an earlier page (see
    /// [`BufferStats::reads_overlapped`]).
    ///
    /// [`BufferStats::reads_overlapped`]: crate::buffer::BufferStats::reads_overlapped
    pub(super) reads_overlapped: AtomicU64,
    /// Frames currently being written back (at most one write-back per frame at a time).
    pub(super) writing: Box<[AtomicBool]>,
    /// Frames whose `sticky` flag is set (kept by [`Partition::set_sticky`]).
    pub(super) sticky_frames: AtomicUsize,
}

impl Partition {
    pub(super) fn new(page_size: usize, frames: usize, stripes: usize, huge_pages: bool) -> Result<Self> {
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
    pub(super) fn set_sticky(&self, i: usize, sticky: bool) {
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
    pub(super) fn sticky_evictable(&self) -> bool {
        let n = self.arena.len();
        self.sticky_frames.load(Relaxed) >= n - n / 8
    }

    fn stripe(&self, key: u64) -> &Stripe {
        &self.stripes[stripe_of(key, self.stripes.len())]
    }

    /// Locks the page-table stripe of `key`; a lock found held is waited for and the wait
    /// counted (seed 004's SHR-k contention).
    pub(super) fn lock_stripe(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, u32, PageKeyBuild>> {
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
    pub(super) fn read_latch(&self, i: usize) -> RwLockReadGuard<'_, ()> {
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
    pub(super) fn count_hit(&self, file_hits: &[AtomicU64], file: u32) {
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

    pub(super) fn unpin(&self, i: usize) {
        let prev = self.arena.frames[i].pins.fetch_sub(1, AcqRel);
        assert!(prev > 0, "unpin of unpinned frame {i}");
    }
}

thread_local! {
    /// This thread's hit-counter shard.
    static HIT_SHARD: HitShard = HitShard::claim();
}
