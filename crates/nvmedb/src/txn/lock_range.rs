//! Key-range locks: the ranges of an index that serializable scans have read, and the check
//! an insert makes against them.
//!
//! Owns: [`RangeLocks`] (the registry of range locks, 64 shards by table), [`RangeCover`]
//! (one scan's range lock, grown as the scan advances), and the per-table count of live
//! range locks that lets writers of tables nobody range-scans skip the check.
//!
//! A range lock is a shared lock on every key of an interval of one index of one table, held
//! by its transaction until it ends, whether or not a row has that key: it is the predicate
//! lock of the scan `lo..hi`. It starts empty and covers `lo..=upto` once the scan has
//! passed `upto` (its cover is raised under the latch of the leaf whose keys it is about to
//! read, and lowered to the last key the scan's caller took when it stops early), so it
//! covers exactly the keys the scan read (an empty range, and the end of a range past the
//! last key, included). It is the next-key locking of ARIES/KVL with the gaps named by the
//! interval's ends instead of by the keys that bound them: an insert lands in a locked gap
//! exactly when its key lies in a cover.
//!
//! Conflicts, and the argument that they catch every phantom:
//! - A writer that has made a new index entry `k` (an insert, or an update that moves the
//!   row in an index) checks, after its page change and before it commits, whether another
//!   transaction's cover holds `k`; if so it waits, through the lock manager (so the wait is
//!   in the wait-for graph and a cycle is a deadlock), for a shared lock on that
//!   transaction's *owner key*, which the range holder keeps exclusive until it ends: the
//!   insert-intention lock, of instant duration.
//! - A scan raises its cover before it reads a leaf, under the leaf's latch; a writer makes
//!   its entry under the same latch. So either the writer's entry came first, and the scan
//!   sees it (a serializable scan also visits the entries of keys in flight, and waits for
//!   their exclusive locks), or the scan's latch came first, and the writer's check, which
//!   follows its latch, sees the raised cover (and the count that made the check run). In a
//!   race both may happen: each then waits for the other, and the deadlock detector aborts
//!   one.
//! - Deletes need no check: a scan locks every row it visits, and a delete in flight is
//!   visited (as its before-image) and waited for.
//!
//! Invariants: a cover is changed only by its own transaction's scan and read under its
//! shard's mutex; every live range lock is counted in its table's slot; a transaction's
//! range locks are dropped by [`RangeLocks::release`] before its owner key is released.

use super::{LockManager, LockMode, LockOutcome, TxnId};
use crate::error::Result;
use crate::util::sync::MutexExt;
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Number of registry shards (and of per-table count slots): a table's slot is its id's low
/// six bits.
pub(crate) const RANGE_SHARDS: usize = 64;

/// The lock-manager table id of range holders' owner keys (the key is the holder's id).
pub(crate) const OWNER_SPACE: u32 = u32::MAX;

/// The shard of table `table`.
pub(crate) fn slot_of(table: u32) -> usize {
    table as usize & (RANGE_SHARDS - 1)
}

/// One live range lock.
struct Range {
    id: u64,
    txn: TxnId,
    table: u32,
    /// 0: the primary index; `n + 1`: secondary index `n`.
    index: u32,
    lo: Bound<Vec<u8>>,
    /// How far the scan has read: `None` before its first leaf, else the upper end.
    cover: Option<Bound<Vec<u8>>>,
}

impl Range {
    fn holds(&self, key: &[u8]) -> bool {
        let above_lo = match &self.lo {
            Bound::Included(l) => key >= l.as_slice(),
            Bound::Excluded(l) => key > l.as_slice(),
            Bound::Unbounded => true,
        };
        above_lo
            && match &self.cover {
                None => false,
                Some(Bound::Included(h)) => key <= h.as_slice(),
                Some(Bound::Excluded(h)) => key < h.as_slice(),
                Some(Bound::Unbounded) => true,
            }
    }
}

/// The registry of live range locks; see the module documentation.
pub(crate) struct RangeLocks {
    shards: Box<[Mutex<Vec<Range>>]>,
    /// Live range locks per table slot.
    live: Box<[AtomicU32]>,
    next_id: AtomicU64,
}

impl Default for RangeLocks {
    fn default() -> Self {
        Self {
            shards: (0..RANGE_SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
            live: (0..RANGE_SHARDS).map(|_| AtomicU32::new(0)).collect(),
            next_id: AtomicU64::new(1),
        }
    }
}

impl RangeLocks {
    /// True if some transaction may hold a range lock on a table of `table`'s slot. A writer
    /// that calls this after its page change sees every range lock whose scan read the
    /// writer's leaf after the change (see the module documentation).
    #[inline]
    pub(crate) fn any(&self, table: u32) -> bool {
        self.live[slot_of(table)].load(Relaxed) != 0
    }

    /// Registers an empty range lock of `txn` on `lo..` of index `index` of `table`.
    pub(crate) fn add(&self, txn: TxnId, table: u32, index: u32, lo: Bound<&[u8]>) -> RangeCover {
        let id = self.next_id.fetch_add(1, Relaxed);
        let slot = slot_of(table);
        let lo = lo.map(<[u8]>::to_vec);
        let mut shard = self.shards[slot].locked();
        self.live[slot].fetch_add(1, Relaxed);
        shard.push(Range { id, txn, table, index, lo, cover: None });
        RangeCover { slot, id }
    }

    fn with<R>(&self, c: &RangeCover, f: impl FnOnce(&mut Range) -> R) -> Option<R> {
        let mut shard = self.shards[c.slot].locked();
        shard.iter_mut().find(|r| r.id == c.id).map(f)
    }

    /// Raises the cover of `c` to `upto` (a scan about to read the keys up to it).
    pub(crate) fn raise(&self, c: &RangeCover, upto: Bound<&[u8]>) {
        self.with(c, |r| {
            let higher = match (&r.cover, upto) {
                (None, _) | (_, Bound::Unbounded) => true,
                (Some(Bound::Unbounded), _) => false,
                (Some(Bound::Included(h) | Bound::Excluded(h)), Bound::Included(u) | Bound::Excluded(u)) => {
                    u > h.as_slice() || (u == h.as_slice() && matches!(upto, Bound::Included(_)))
                }
            };
            if higher {
                r.cover = Some(upto.map(<[u8]>::to_vec));
            }
        });
    }

    /// Lowers the cover of `c` to `last` (the scan stopped after taking the key `last`).
    pub(crate) fn lower(&self, c: &RangeCover, last: &[u8]) {
        self.with(c, |r| r.cover = Some(Bound::Included(last.to_vec())));
    }

    /// The transactions other than `txn` whose range locks on index `index` of `table` hold
    /// `key`, each once.
    pub(crate) fn holders(&self, txn: TxnId, table: u32, index: u32, key: &[u8]) -> Vec<TxnId> {
        let shard = self.shards[slot_of(table)].locked();
        let mut out: Vec<TxnId> = Vec::new();
        for r in shard.iter() {
            if r.txn != txn && r.table == table && r.index == index && !out.contains(&r.txn) && r.holds(key) {
                out.push(r.txn);
            }
        }
        out
    }

    /// Drops every range lock of `txn` in the shards of bitmask `slots`.
    pub(crate) fn release(&self, txn: TxnId, mut slots: u64) {
        while slots != 0 {
            let slot = slots.trailing_zeros() as usize;
            slots &= slots - 1;
            let mut shard = self.shards[slot].locked();
            let before = shard.len();
            shard.retain(|r| r.txn != txn);
            let gone = (before - shard.len()) as u32;
            self.live[slot].fetch_sub(gone, Relaxed);
        }
    }

    /// Number of live range locks (all tables).
    pub(crate) fn count(&self) -> usize {
        self.shards.iter().map(|s| s.locked().len()).sum()
    }
}

/// One scan's range lock (see [`LockManager::lock_range`](super::LockManager::lock_range)):
/// raised as the scan reads, lowered where it stops, released with its transaction's locks.
#[derive(Debug)]
pub(crate) struct RangeCover {
    slot: usize,
    id: u64,
}

impl RangeCover {
    /// The registry shard bit of this range lock.
    pub(crate) fn slot_bit(&self) -> u64 {
        1u64 << self.slot
    }
}

impl LockManager {
    /// Takes a range lock for `txn` on the keys from `lo` of index `index` (0: primary,
    /// `n + 1`: secondary `n`) of `table`, empty until [`LockManager::cover_range`] raises it,
    /// held until [`LockManager::release_all`]. Takes `txn`'s owner key exclusively first
    /// (inserters wait on it), so it can fail like [`LockManager::lock`].
    pub(crate) fn lock_range(
        &self,
        txn: TxnId,
        table: u32,
        index: u32,
        lo: Bound<&[u8]>,
    ) -> Result<RangeCover> {
        self.lock(txn, OWNER_SPACE, &txn.to_le_bytes(), LockMode::Exclusive)?;
        let c = self.ranges.add(txn, table, index, lo);
        self.note_ranges(txn, c.slot_bit());
        Ok(c)
    }

    /// Raises range lock `c` to cover the keys up to `upto`; called under the latch of the
    /// leaf whose keys up to `upto` the scan is about to read.
    pub(crate) fn cover_range(&self, c: &RangeCover, upto: Bound<&[u8]>) {
        self.ranges.raise(c, upto);
    }

    /// Lowers range lock `c` to end at `last`, the last key its scan took.
    pub(crate) fn cover_back(&self, c: &RangeCover, last: &[u8]) {
        self.ranges.lower(c, last);
    }

    /// The insert-intention check of a new entry `key` of index `index` of `table`, made by
    /// `txn` after its page change and before it commits: waits until every other
    /// transaction whose range lock holds `key` has ended. Free (one relaxed load) while no
    /// range lock lives on the table's slot. Fails like [`LockManager::lock`] (a deadlock
    /// with the range holder, or the lock timeout).
    #[inline]
    pub(crate) fn check_insert(&self, txn: TxnId, table: u32, index: u32, key: &[u8]) -> Result<()> {
        if !self.ranges.any(table) {
            return Ok(());
        }
        self.wait_for_ranges(txn, table, index, key)
    }

    #[cold]
    fn wait_for_ranges(&self, txn: TxnId, table: u32, index: u32, key: &[u8]) -> Result<()> {
        for holder in self.ranges.holders(txn, table, index, key) {
            let owner = holder.to_le_bytes();
            // Instant duration: held only to wait for the range holder's end.
            if self.lock(txn, OWNER_SPACE, &owner, LockMode::Shared)? == LockOutcome::Granted {
                self.release_one(txn, OWNER_SPACE, &owner);
            }
        }
        Ok(())
    }

    /// True if a range lock may live on `table` (a table of its slot): the fast path of the
    /// insert-intention check.
    #[inline]
    pub(crate) fn ranges_live(&self, table: u32) -> bool {
        self.ranges.any(table)
    }

    /// Number of live key-range locks (held by serializable scans until their transactions
    /// end). Zero when no transaction holds one.
    pub fn range_lock_count(&self) -> usize {
        self.ranges.count()
    }
}
