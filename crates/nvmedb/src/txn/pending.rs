//! Writers in flight, and the last committed image of every key they change, for readers
//! that take no lock.
//!
//! Owns: [`PendingWriters`]: a fixed array of stripes (one `AtomicU64` each) hashed by table
//! and primary key, and an ordered map per table (sharded by table) from each key a writer
//! has in flight to the key's last committed image (its *before-image*: the row, or its absence). A writer *enters* a key
//! ([`PendingWriters::enter`]) under the key's exclusive lock, before its first page change of
//! the key: the before-image is published first, then the stripe counts the writer. It
//! *leaves* ([`PendingWriters::leave`]) only once the change is final, committed (its commit
//! record logged; with early lock release readers then wait for its flush before they return,
//! see `txn::shared`) or rolled back completely: the image is withdrawn first, then the stripe forgets the writer.
//! A stripe packs the number of writers inside it (low [`ACTIVE_BITS`] bits) and the number
//! that have left (the bits above), so every enter and every leave changes its value.
//!
//! How a reader sees only committed data without taking a lock or waiting:
//! - A row found under its heap page's shared latch with its stripe idle (no writer inside)
//!   is committed: every writer that changed it entered before changing the page, and the
//!   latch hand-over makes that enter visible to the reader; a writer still inside would show,
//!   and one that left had finished (committed, or restored the before-image).
//! - An absence (no index entry) is committed if the stripe was idle before the index lookup
//!   and still has the same value after it (a seqlock: any writer that entered or left in
//!   between changes the value).
//! - Otherwise (the stripe is busy) the reader asks for the key's before-image
//!   ([`PendingWriters::before_image`]): if another transaction has the key in flight, that
//!   image is the key's last committed state (the writer holds the key exclusively, and its
//!   changes become visible only when it withdraws the image). If none does, the row the
//!   reader found under the page latch is committed: a writer publishes its image before it
//!   changes a page and withdraws it only after its commit or rollback, which needs that
//!   latch. An absence with no image is committed if the stripe's value (read with the images,
//!   which change together with it) is still the one from before the index lookup; otherwise
//!   the reader looks again.
//!
//! Scans: the images are kept in key order per table ([`PendingWriters::images_in`]), and
//! [`PendingWriters::any_in_flight`] lets a scan skip them when its table has no key in
//! flight; under an index leaf's latch the images and the leaf agree (see the `table`
//! module's documentation for how scans merge them).
//!
//! A commit becomes visible to lock-free readers at the moment its writer withdraws its
//! before-images, after its commit record is logged (and, without early lock release, durable)
//! and before the commit call returns. Stripes are
//! shared by many keys, so a busy stripe only costs a reader one map lookup. Invariants:
//! enters and leaves of a stripe balance (a writer leaves exactly the keys it entered, once
//! each); a key has at most one before-image (its writer holds it exclusively).

use crate::util::sync::MutexExt;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Stripes in the table (a power of two).
pub const STRIPES: usize = 1 << 14;
/// Bits of a stripe's value that count the writers inside it.
pub const ACTIVE_BITS: u32 = 20;
const ACTIVE_MASK: u64 = (1 << ACTIVE_BITS) - 1;
/// Added by a leave: one more writer left, one fewer inside.
const LEAVE: u64 = (1u64 << ACTIVE_BITS).wrapping_sub(1);
/// Shards of the before-image map (a power of two; a key's shard is its table's low bits, so
/// the keys in flight of one table are in one ordered map, for scans).
const IMAGE_SHARDS: usize = 64;

/// A key's last committed state: its row's bytes, or `None` when the key has no row.
pub type BeforeImage = Option<Arc<[u8]>>;

/// One key in flight: its writer and its last committed state.
struct InFlight {
    txn: u64,
    before: BeforeImage,
}

/// The keys in flight of one table, by encoded primary key.
type TableKeys = BTreeMap<Box<[u8]>, InFlight>;

/// Keys in flight of the tables of one shard: by table, then in encoded primary-key order.
#[derive(Default)]
struct ImageShard {
    tables: Vec<(u32, TableKeys)>,
}

impl ImageShard {
    fn table(&self, table: u32) -> Option<&TableKeys> {
        self.tables.iter().find(|(t, _)| *t == table).map(|(_, m)| m)
    }

    fn table_mut(&mut self, table: u32) -> &mut TableKeys {
        let at = match self.tables.iter().position(|(t, _)| *t == table) {
            Some(at) => at,
            None => {
                self.tables.push((table, BTreeMap::new()));
                self.tables.len() - 1
            }
        };
        &mut self.tables[at].1
    }
}

/// The stripes of keys with a writer in flight and those keys' last committed images (see
/// the module documentation).
pub struct PendingWriters {
    stripes: Box<[AtomicU64]>,
    /// Per stripe, the highest commit LSN of a writer that left it before its commit was
    /// durable (early lock release): what a point read of a key of the stripe waits for before
    /// it returns ([`PendingWriters::released`]).
    released: Box<[AtomicU64]>,
    images: Box<[Mutex<ImageShard>]>,
    /// Keys in flight per image shard (changed under the shard's mutex): a scan whose table's
    /// shard has none skips the mutex.
    in_flight: Box<[AtomicUsize]>,
}

impl Default for PendingWriters {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PendingWriters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let busy = self.stripes.iter().filter(|s| s.load(Ordering::Relaxed) & ACTIVE_MASK != 0).count();
        write!(f, "PendingWriters({busy} of {STRIPES} stripes busy)")
    }
}

impl PendingWriters {
    /// An empty table (every stripe idle).
    pub fn new() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            released: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            images: (0..IMAGE_SHARDS).map(|_| Mutex::new(ImageShard::default())).collect(),
            in_flight: (0..IMAGE_SHARDS).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// The stripe of primary key `pk` (encoded) of table `table`.
    #[inline]
    pub fn stripe(table: u32, pk: &[u8]) -> usize {
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ u64::from(table).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut chunks = pk.chunks_exact(8);
        for c in &mut chunks {
            h = (h ^ u64::from_le_bytes(c.try_into().expect("8 bytes"))).wrapping_mul(0x100_0000_01b3);
            h ^= h >> 29;
        }
        for &b in chunks.remainder() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        h = (h ^ (h >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - STRIPES.trailing_zeros())) as usize
    }

    /// Transaction `txn`, holding key `pk` of table `table` exclusively, enters it before its
    /// first page change of the key, publishing `before`, the key's committed state (read
    /// under that lock). Returns the key's stripe. Call once per key and transaction, and
    /// [`PendingWriters::leave`] once the change is committed or rolled back.
    pub fn enter(&self, table: u32, pk: &[u8], txn: u64, before: BeforeImage) -> usize {
        let s = Self::stripe(table, pk);
        {
            let sh = Self::shard(table);
            let mut shard = self.images[sh].locked();
            let old = shard.table_mut(table).insert(pk.into(), InFlight { txn, before });
            assert!(old.is_none(), "a key of table {table} entered twice (transaction {txn})");
            self.in_flight[sh].fetch_add(1, Ordering::SeqCst);
            // Under the shard's mutex: a reader that finds no image there also reads a stripe
            // value that matches the images it saw (see `before_image`).
            let prev = self.stripes[s].fetch_add(1, Ordering::SeqCst);
            assert!(prev & ACTIVE_MASK < ACTIVE_MASK, "more than {ACTIVE_MASK} writers in one stripe");
        }
        s
    }

    /// The writer of key `pk` of table `table` leaves it: its change is committed or rolled
    /// back. Its before-image is withdrawn and the stripe forgets it, together (from then on
    /// readers see the pages). `commit_lsn`: the writer's commit LSN when that commit is not
    /// yet durable (early lock release; 0 otherwise, and for a rollback): recorded in the
    /// stripe first, so that a reader that sees the change also finds the LSN it must wait for.
    pub fn leave(&self, table: u32, pk: &[u8], commit_lsn: u64) {
        let s = Self::stripe(table, pk);
        if commit_lsn > 0 {
            self.released[s].fetch_max(commit_lsn, Ordering::SeqCst);
        }
        {
            let sh = Self::shard(table);
            let mut shard = self.images[sh].locked();
            shard.table_mut(table).remove(pk).expect("a key left was entered");
            self.in_flight[sh].fetch_sub(1, Ordering::SeqCst);
            let prev = self.stripes[s].fetch_add(LEAVE, Ordering::SeqCst);
            debug_assert!(prev & ACTIVE_MASK > 0, "leaving stripe {s} nobody is inside");
        }
    }

    /// [`PendingWriters::leave`] for every key of `keys` (table id, encoded primary key), each
    /// shard's mutex taken once for all its keys: a transaction's commit or rollback. Sorts
    /// `keys` by shard.
    pub fn leave_all(&self, keys: &mut [(u32, Vec<u8>)], commit_lsn: u64) {
        if commit_lsn > 0 {
            // Every key's LSN first: a reader that sees any of the changes finds it.
            for (table, pk) in keys.iter() {
                self.released[Self::stripe(*table, pk)].fetch_max(commit_lsn, Ordering::SeqCst);
            }
        }
        keys.sort_unstable_by_key(|(table, _)| Self::shard(*table));
        for group in keys.chunk_by(|a, b| Self::shard(a.0) == Self::shard(b.0)) {
            let sh = Self::shard(group[0].0);
            let mut shard = self.images[sh].locked();
            for (table, pk) in group {
                shard.table_mut(*table).remove(&pk[..]).expect("a key left was entered");
                let s = Self::stripe(*table, pk);
                let prev = self.stripes[s].fetch_add(LEAVE, Ordering::SeqCst);
                debug_assert!(prev & ACTIVE_MASK > 0, "leaving stripe {s} nobody is inside");
            }
            self.in_flight[sh].fetch_sub(group.len(), Ordering::SeqCst);
        }
    }

    /// The last committed state of key `pk` of table `table` (in stripe `stripe`) if another
    /// transaction than `me` has it in flight: `Some(None)` for a committed absence. `None`
    /// when no other writer has the key in flight: then the pages hold its committed state
    /// (checked under the page latch, see the module documentation).
    pub fn before_image(&self, stripe: usize, table: u32, pk: &[u8], me: Option<u64>) -> Option<BeforeImage> {
        self.before_image_at(stripe, table, pk, me).0
    }

    /// [`PendingWriters::before_image`], and the stripe's value at that moment (enters and
    /// leaves change the images and the stripe together): a reader that found no index entry
    /// for the key, and no image, knows the absence is committed if the stripe still has the
    /// value it had before the index lookup (no writer entered or left in between: a writer
    /// that rolled back a delete and left meanwhile would have changed it).
    pub fn before_image_at(
        &self,
        stripe: usize,
        table: u32,
        pk: &[u8],
        me: Option<u64>,
    ) -> (Option<BeforeImage>, u64) {
        let shard = self.images[Self::shard(table)].locked();
        let image = shard
            .table(table)
            .and_then(|keys| keys.get(pk))
            .and_then(|k| (Some(k.txn) != me).then(|| k.before.clone()));
        (image, self.stripes[stripe].load(Ordering::Acquire))
    }

    fn shard(table: u32) -> usize {
        table as usize % IMAGE_SHARDS
    }

    /// True if some key of `table` (or of a table sharing its image shard) may have a writer
    /// in flight. Read under a page latch, it sees every writer whose page change the latch
    /// shows (writers enter before their first page change).
    #[inline]
    pub fn any_in_flight(&self, table: u32) -> bool {
        self.in_flight[Self::shard(table)].load(Ordering::Acquire) != 0
    }

    /// Appends to `out`, in key order, every key of `table` within `lo..hi` that a transaction
    /// other than `me` has in flight, with its before-image.
    pub fn images_in(
        &self,
        table: u32,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        me: Option<u64>,
        out: &mut Vec<(Box<[u8]>, BeforeImage)>,
    ) {
        if interval_is_empty(lo, hi) {
            return;
        }
        let shard = self.images[Self::shard(table)].locked();
        if let Some(keys) = shard.table(table) {
            out.extend(
                keys.range::<[u8], _>((lo, hi))
                    .filter(|(_, k)| Some(k.txn) != me)
                    .map(|(pk, k)| (pk.clone(), k.before.clone())),
            );
        }
    }

    /// The highest commit LSN that a writer of stripe `s` left before it was durable (0: none):
    /// a point read of a key of the stripe returns only once the log is durable up to it.
    /// Loaded after the read saw its data, it covers every change the read can have seen: a
    /// writer records its LSN before it leaves, and a reader sees the change only after the
    /// leave (or reads the before-image, which a writer that left earlier made, after
    /// recording its own LSN).
    #[inline]
    pub fn released(&self, s: usize) -> u64 {
        self.released[s].load(Ordering::SeqCst)
    }

    /// The stripe's current value, for [`PendingWriters::idle`] and a seqlock comparison.
    #[inline]
    pub fn load(&self, s: usize) -> u64 {
        self.stripes[s].load(Ordering::Acquire)
    }

    /// True if value `v` (from [`PendingWriters::load`]) has no writer inside.
    #[inline]
    pub fn idle(v: u64) -> bool {
        v & ACTIVE_MASK == 0
    }
}

/// True if `k` lies within `lo..hi`.
pub fn in_interval(lo: Bound<&[u8]>, hi: Bound<&[u8]>, k: &[u8]) -> bool {
    let above = match lo {
        Bound::Included(a) => k >= a,
        Bound::Excluded(a) => k > a,
        Bound::Unbounded => true,
    };
    above
        && match hi {
            Bound::Included(b) => k <= b,
            Bound::Excluded(b) => k < b,
            Bound::Unbounded => true,
        }
}

/// True if no byte string lies within `lo..hi`.
pub fn interval_is_empty(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_enter_and_leave_changes_the_value_and_balance_restores_idle() {
        let p = PendingWriters::new();
        let (a, b) = (7i64.to_be_bytes(), 8i64.to_be_bytes());
        let s = PendingWriters::stripe(3, &a);
        let v0 = p.load(s);
        assert!(PendingWriters::idle(v0));
        assert_eq!(p.enter(3, &a, 1, Some(Arc::from(&b"row"[..]))), s);
        let v1 = p.load(s);
        assert!(!PendingWriters::idle(v1));
        assert_eq!(p.before_image(s, 3, &a, None), Some(Some(Arc::from(&b"row"[..]))));
        p.leave(3, &a, 0);
        let v3 = p.load(s);
        assert!(PendingWriters::idle(v3));
        assert_ne!(v3, v0, "an enter and a leave in between are seen by a seqlock reader");
        assert_eq!(p.before_image(PendingWriters::stripe(3, &b), 3, &b, None), None);
    }

    #[test]
    fn before_images_are_shown_to_other_transactions_until_the_writer_leaves() {
        let p = PendingWriters::new();
        let k = b"key".as_slice();
        let s = PendingWriters::stripe(9, k);
        assert_eq!(p.before_image(s, 9, k, None), None);
        p.enter(9, k, 5, Some(Arc::from(&b"old"[..])));
        assert_eq!(p.before_image(s, 9, k, None), Some(Some(Arc::from(&b"old"[..]))));
        assert_eq!(p.before_image(s, 9, k, Some(6)), Some(Some(Arc::from(&b"old"[..]))));
        assert_eq!(p.before_image(s, 9, k, Some(5)), None, "the writer reads its own changes");
        assert_eq!(p.before_image(PendingWriters::stripe(10, k), 10, k, None), None, "another table");
        p.leave(9, k, 0);
        assert_eq!(p.before_image(s, 9, k, None), None);
        p.enter(9, k, 7, None);
        assert_eq!(p.before_image(s, 9, k, None), Some(None), "an insert in flight: absent");
        p.leave(9, k, 0);
    }

    #[test]
    fn leave_all_leaves_every_key_of_every_table_and_records_the_commit_lsn() {
        let p = PendingWriters::new();
        let k = |i: i64| i.to_be_bytes().to_vec();
        let mut keys = Vec::new();
        for (table, i) in [(1, 5), (2, 5), (1 + IMAGE_SHARDS as u32, 5), (1, 9), (3, 1)] {
            p.enter(table, &k(i), 7, Some(Arc::from(&b"old"[..])));
            keys.push((table, k(i)));
        }
        let before: Vec<u64> = keys.iter().map(|(t, pk)| p.load(PendingWriters::stripe(*t, pk))).collect();
        p.leave_all(&mut keys, 42);
        for (t, pk) in &keys {
            let s = PendingWriters::stripe(*t, pk);
            assert!(PendingWriters::idle(p.load(s)), "table {t} key {pk:?} left");
            assert_eq!(p.before_image(s, *t, pk, None), None);
            assert_eq!(p.released(s), 42);
        }
        assert!(before.iter().all(|v| !PendingWriters::idle(*v)));
        assert!(!p.any_in_flight(1) && !p.any_in_flight(2) && !p.any_in_flight(3));
    }

    #[test]
    fn keys_spread_over_the_stripes() {
        let mut hit = vec![0u32; STRIPES];
        for k in 0..(STRIPES as i64 * 4) {
            hit[PendingWriters::stripe(1, &k.to_be_bytes())] += 1;
        }
        let max = *hit.iter().max().unwrap();
        assert!(max <= 20, "sequential keys crowd one stripe: {max} of {}", STRIPES * 4);
        assert_ne!(PendingWriters::stripe(1, b"abc"), PendingWriters::stripe(2, b"abc"));
    }

    #[test]
    fn images_in_gives_the_keys_in_flight_of_a_table_within_bounds_in_key_order() {
        let p = PendingWriters::new();
        let k = |i: i64| i.to_be_bytes();
        assert!(!p.any_in_flight(4));
        for (i, txn) in [(5, 1), (1, 2), (9, 1), (3, 3)] {
            p.enter(4, &k(i), txn, (i != 3).then(|| Arc::from(&k(i)[..])));
        }
        p.enter(4 + IMAGE_SHARDS as u32, &k(2), 9, None); // another table of the same shard
        assert!(p.any_in_flight(4));
        let mut out = Vec::new();
        p.images_in(4, Bound::Included(&k(1)[..]), Bound::Excluded(&k(9)[..]), Some(2), &mut out);
        let keys: Vec<_> = out.iter().map(|(pk, img)| (pk.to_vec(), img.is_some())).collect();
        assert_eq!(keys, [(k(3).to_vec(), false), (k(5).to_vec(), true)], "me's key and bounds excluded");
        out.clear();
        p.images_in(4, Bound::Excluded(&k(5)[..]), Bound::Excluded(&k(5)[..]), None, &mut out);
        p.images_in(4, Bound::Included(&k(6)[..]), Bound::Included(&k(5)[..]), None, &mut out);
        assert!(out.is_empty(), "empty intervals");
        for i in [5, 1, 9, 3] {
            p.leave(4, &k(i), 0);
        }
        p.leave(4 + IMAGE_SHARDS as u32, &k(2), 0);
        assert!(!p.any_in_flight(4));
    }
}
