//! Row-id hints: an in-memory map from primary keys to the row ids their rows were last found
//! at, so that a point read goes straight to the heap page instead of descending the primary
//! index (three or four page fixes and their key searches). InnoDB's adaptive hash index plays
//! the same part.
//!
//! Owns: [`RowHints`] (one per open table) and the database-wide byte budget they draw from.
//! Invariants:
//! - A hint is never trusted. A reader checks, under the heap page's latch, that the row at the
//!   hinted id holds the primary key it looks for, and applies the same committed-state checks
//!   as after an index lookup; a stale, torn or colliding hint costs only the index descent it
//!   would have saved, and any failure of a hinted read falls back to the index. So the map
//!   needs no coordination with writers: rows that move or go leave hints that fail the check.
//! - Entries are written without locks, as two relaxed atomic words (key tag, row id); a reader
//!   may see one word of an old entry and one of a new one, which the check above rejects.
//! - The map starts at 64 KiB and doubles in place (each entry moves to one of two buckets)
//!   when a store has to evict another key's entry while half the entries are in use (with
//!   random keys about 4 % of them then overflow their 4-way bucket), as long as the
//!   database's budget allows. Its memory is reserved at open as one mapping as large as the
//!   budget then left; only the buckets in use are ever touched.

use super::heap::RowId;
use crate::io::aligned::Mapping;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};

/// Entries per bucket: one bucket is one 64-byte cache line.
const WAYS: usize = 4;
/// Buckets a table's map starts with (64 KiB).
const FIRST_BUCKETS: usize = 1024;

/// Four entries: their key tags, then their row ids, each stored inverted (`!packed`, see
/// [`RowId::to_bytes`]) so that zeroed memory is a bucket of unused entries (0 = unused).
#[repr(C, align(64))]
struct Bucket {
    tags: [AtomicU64; WAYS],
    rids: [AtomicU64; WAYS],
}

/// The bytes of memory the row-id hints of a database's tables may take (see
/// [`Options::row_hint_bytes`](crate::Options::row_hint_bytes)), shared by its tables: a map
/// grows only by what is left, and gives its bytes back when its table handle goes.
pub(crate) type HintBudget = Arc<AtomicUsize>;

/// The row-id hints of one table (see the module comment).
pub(crate) struct RowHints {
    /// Room for every bucket the map may grow to; only the first ones in use are touched (the
    /// kernel provides the rest zero-filled on first use). `None`: the budget had no room.
    map: Option<Mapping>,
    /// Buckets `map` holds (a power of two).
    max_buckets: usize,
    /// `64 - log2(buckets in use)`: a tag's bucket is the top bits of its mixed value.
    shift: AtomicU32,
    /// Entries stored into an unused way: the entries in use.
    used: AtomicUsize,
    /// One growth at a time.
    growing: Mutex<()>,
    budget: HintBudget,
    /// Bytes taken from `budget`.
    taken: AtomicUsize,
}

impl RowHints {
    /// An empty map drawing from `budget` (sized to what it holds now).
    pub(crate) fn new(budget: HintBudget) -> Self {
        let size = std::mem::size_of::<Bucket>();
        let fits = budget.load(Relaxed) / size;
        let max_buckets = if fits >= FIRST_BUCKETS { 1 << fits.ilog2() } else { 0 };
        let map = (max_buckets > 0).then(|| Mapping::new(max_buckets * size, false).ok()).flatten();
        let hints = Self {
            max_buckets: if map.is_some() { max_buckets } else { 0 },
            map,
            shift: AtomicU32::new(64),
            used: AtomicUsize::new(0),
            growing: Mutex::new(()),
            budget,
            taken: AtomicUsize::new(0),
        };
        hints.grow(0);
        hints
    }

    /// The tag of an encoded primary key: the key itself when it is 8 bytes (integer keys:
    /// exact), else a 64-bit hash of it.
    fn tag(pk: &[u8]) -> u64 {
        match <[u8; 8]>::try_from(pk) {
            Ok(b) => u64::from_be_bytes(b),
            Err(_) => crate::util::fnv1a64(pk),
        }
    }

    /// The bucket of `tag` when `64 - shift` bits pick it (`shift < 64`), or `None` with no map.
    #[inline]
    fn bucket(&self, tag: u64, shift: u32) -> Option<&Bucket> {
        self.bucket_at((tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize)
    }

    /// Bucket `i` of the mapping, or `None` with no map.
    #[inline]
    fn bucket_at(&self, i: usize) -> Option<&Bucket> {
        let map = self.map.as_ref()?;
        assert!(i < self.max_buckets, "row-id hint bucket {i} beyond the {} mapped", self.max_buckets);
        // SAFETY: the mapping holds `max_buckets` buckets, 64-byte aligned (it is page-aligned);
        // zeroed memory is a valid bucket of atomics, and buckets are only accessed atomically.
        Some(unsafe { &*map.base().cast::<Bucket>().add(i) })
    }

    /// The buckets in use (0: none).
    fn buckets(&self, shift: u32) -> usize {
        if shift >= 64 {
            0
        } else {
            1 << (64 - shift)
        }
    }

    /// Where the row of `pk` was last seen, if the map remembers: a hint to check.
    #[inline]
    pub(crate) fn get(&self, pk: &[u8]) -> Option<RowId> {
        let shift = self.shift.load(Acquire);
        if shift >= 64 {
            return None;
        }
        let tag = Self::tag(pk);
        let b = self.bucket(tag, shift)?;
        let rid = (0..WAYS).find_map(|w| {
            (b.tags[w].load(Relaxed) == tag).then(|| b.rids[w].load(Relaxed)).filter(|&r| r != 0)
        })?;
        RowId::from_bytes(&(!rid).to_le_bytes())
    }

    /// Remembers that the row of `pk` was found at `rid`.
    pub(crate) fn put(&self, pk: &[u8], rid: RowId) {
        let shift = self.shift.load(Acquire);
        if shift >= 64 {
            return;
        }
        let tag = Self::tag(pk);
        let Some(b) = self.bucket(tag, shift) else { return };
        if Self::store(b, tag, !u64::from_le_bytes(rid.to_bytes()), &self.used)
            && self.used.load(Relaxed) >= self.buckets(shift) * WAYS / 2
        {
            self.grow(self.buckets(shift));
        }
    }

    /// Stores `tag → rid` (inverted) in `b`, counting a use of an unused way in `used`; true if
    /// it evicted another key's entry.
    fn store(b: &Bucket, tag: u64, rid: u64, used: &AtomicUsize) -> bool {
        let mut free = None;
        for w in 0..WAYS {
            let r = b.rids[w].load(Relaxed);
            if r != 0 && b.tags[w].load(Relaxed) == tag {
                if r != rid {
                    b.rids[w].store(rid, Relaxed);
                }
                return false;
            }
            if r == 0 && free.is_none() {
                free = Some(w);
            }
        }
        let (w, evicts) = match free {
            Some(w) => {
                used.fetch_add(1, Relaxed);
                (w, false)
            }
            // A way picked by the tag's low bits: which entry goes is spread over the ways.
            None => ((tag as usize) % WAYS, true),
        };
        b.tags[w].store(tag, Relaxed);
        b.rids[w].store(rid, Relaxed);
        evicts
    }

    /// Doubles the buckets in use from `from` (0: none yet, to [`FIRST_BUCKETS`]) if the
    /// mapping and the budget have room and no other thread is growing the map, moving each
    /// entry of bucket `i` to bucket `2i` or `2i + 1` (one more bit of its mixed tag). Buckets
    /// are moved from the last down, so each target was emptied before it is filled; readers
    /// meanwhile may miss entries (they then use the index), never see wrong ones unchecked.
    fn grow(&self, from: usize) {
        let Ok(_one) = self.growing.try_lock() else { return };
        let shift = self.shift.load(Acquire);
        let to = if from == 0 { FIRST_BUCKETS } else { from * 2 };
        if self.buckets(shift) != from || to > self.max_buckets {
            return;
        }
        let bytes = (to - from) * std::mem::size_of::<Bucket>();
        if self.budget.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(bytes)).is_err() {
            return;
        }
        self.taken.fetch_add(bytes, Relaxed);
        let next = 64 - to.trailing_zeros();
        if from > 0 {
            let ignored = AtomicUsize::new(0);
            for i in (0..from).rev() {
                let b = self.bucket_at(i).expect("a map that grows is mapped");
                let entries: [(u64, u64); WAYS] =
                    std::array::from_fn(|w| (b.tags[w].swap(0, Relaxed), b.rids[w].swap(0, Relaxed)));
                for (tag, rid) in entries.into_iter().filter(|&(_, r)| r != 0) {
                    let target = self.bucket(tag, next).expect("a map that grows is mapped");
                    Self::store(target, tag, rid, &ignored);
                }
            }
        }
        self.shift.store(next, Release);
    }

    /// Bytes in use (taken from the budget).
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.taken.load(Relaxed)
    }
}

impl Drop for RowHints {
    fn drop(&mut self) {
        self.budget.fetch_add(self.taken.load(Relaxed), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rid(n: u64) -> RowId {
        RowId { page: n / 100, slot: (n % 100) as u16 }
    }

    #[test]
    fn remembers_and_replaces_hints() {
        let h = RowHints::new(Arc::new(AtomicUsize::new(1 << 30)));
        assert_eq!(h.get(&7u64.to_be_bytes()), None);
        h.put(&7u64.to_be_bytes(), rid(1));
        h.put(b"a longer key", rid(2));
        assert_eq!(h.get(&7u64.to_be_bytes()), Some(rid(1)));
        assert_eq!(h.get(b"a longer key"), Some(rid(2)));
        h.put(&7u64.to_be_bytes(), rid(3));
        assert_eq!(h.get(&7u64.to_be_bytes()), Some(rid(3)));
        assert_eq!(h.get(&8u64.to_be_bytes()), None);
    }

    #[test]
    fn grows_within_its_budget_and_gives_the_bytes_back() {
        let first = FIRST_BUCKETS * 64;
        // Room for the first size and one doubling (2 units), not the next.
        let budget = Arc::new(AtomicUsize::new(first * 2 + first / 2));
        let h = RowHints::new(budget.clone());
        let keys = (FIRST_BUCKETS * WAYS * 4) as u64;
        for k in 0..keys {
            h.put(&k.to_be_bytes(), rid(k));
        }
        assert_eq!(h.bytes(), first * 2, "grew once, then the budget stopped it");
        assert_eq!(budget.load(Relaxed), first / 2);
        // The map holds at most its capacity, and every hint it gives is right (those moved by
        // the doubling too).
        let found =
            (0..keys).filter(|&k| h.get(&k.to_be_bytes()).inspect(|&r| assert_eq!(r, rid(k))).is_some());
        let found = found.count();
        assert!(found <= FIRST_BUCKETS * 2 * WAYS && found > FIRST_BUCKETS * WAYS, "{found} hints kept");
        drop(h);
        assert_eq!(budget.load(Relaxed), first * 2 + first / 2);
    }

    /// Keys read again and again (a hint stored at each miss, as reads do) end up nearly all
    /// kept, at no more than 64 bytes per key: dense keys and scattered ones.
    #[test]
    fn the_map_grows_to_keep_the_keys_read() {
        let n = 200_000u64;
        for scatter in [1u64, 0x2545_F491_4F6C_DD1D] {
            let h = RowHints::new(Arc::new(AtomicUsize::new(64 << 20)));
            let pk = |k: u64| crate::btree::key::encode_i64(k.wrapping_mul(scatter) as i64);
            for _ in 0..3 {
                for k in 0..n {
                    if h.get(&pk(k)).is_none() {
                        h.put(&pk(k), rid(k));
                    }
                }
            }
            let kept =
                (0..n).filter(|&k| h.get(&pk(k)).inspect(|&r| assert_eq!(r, rid(k))).is_some()).count();
            assert!(kept as u64 >= n * 98 / 100, "scatter {scatter:#x}: {kept} of {n} keys kept");
            assert!(h.bytes() as u64 <= n * 64, "scatter {scatter:#x}: {} bytes for {n} keys", h.bytes());
        }
    }

    #[test]
    fn a_budget_too_small_for_one_generation_keeps_nothing() {
        let h = RowHints::new(Arc::new(AtomicUsize::new(100)));
        h.put(&1u64.to_be_bytes(), rid(1));
        assert_eq!(h.get(&1u64.to_be_bytes()), None);
        assert_eq!(h.bytes(), 0);
    }
}
