//! Writers in flight, for readers that take no lock.
//!
//! Owns: [`PendingWriters`], a fixed array of stripes (one `AtomicU64` each) hashed by table
//! and primary key. A writer *enters* the stripe of every key it changes before its first page
//! change of that key and *leaves* it only once the change is final: committed durably, or
//! rolled back completely. A stripe packs the number of writers inside it (low
//! [`ACTIVE_BITS`] bits) and the number that have left (the bits above), so every enter and
//! every leave changes its value.
//!
//! How a reader uses it to see only committed data without taking a lock:
//! - A row found under its heap page's shared latch with its stripe idle (no writer inside)
//!   is committed: every writer that changed it entered before changing the page, and the
//!   latch hand-over makes that enter visible to the reader; a writer still inside would show,
//!   and one that left had finished (committed, or restored the before-image).
//! - An absence (no index entry, or a slot that holds another key) is committed if the stripe
//!   was idle before the index lookup and still has the same value after it (a seqlock: any
//!   writer that entered or left in between changes the value).
//! - Otherwise the reader falls back to the lock manager's shared lock, which waits for the
//!   writer's exclusive lock, held until the writer is done.
//!
//! Stripes are shared by many keys, so a busy stripe can send a reader to the locked path for
//! a key nobody is writing (correct, just slower). Invariant: enters and leaves of a stripe
//! balance (a writer leaves exactly the stripes it entered, once each).

use std::sync::atomic::{AtomicU64, Ordering};

/// Stripes in the table (a power of two).
pub const STRIPES: usize = 1 << 14;
/// Bits of a stripe's value that count the writers inside it.
pub const ACTIVE_BITS: u32 = 20;
const ACTIVE_MASK: u64 = (1 << ACTIVE_BITS) - 1;
/// Added by a leave: one more writer left, one fewer inside.
const LEAVE: u64 = (1u64 << ACTIVE_BITS).wrapping_sub(1);

/// The stripes of keys with a writer in flight (see the module documentation).
pub struct PendingWriters {
    stripes: Box<[AtomicU64]>,
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
        Self { stripes: (0..STRIPES).map(|_| AtomicU64::new(0)).collect() }
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

    /// A writer enters stripe `s` (before its first page change of a key in it).
    pub fn enter(&self, s: usize) {
        let prev = self.stripes[s].fetch_add(1, Ordering::SeqCst);
        assert!(prev & ACTIVE_MASK < ACTIVE_MASK, "more than {ACTIVE_MASK} writers in one stripe");
    }

    /// A writer leaves stripe `s` (its changes there are committed or rolled back).
    pub fn leave(&self, s: usize) {
        let prev = self.stripes[s].fetch_add(LEAVE, Ordering::SeqCst);
        debug_assert!(prev & ACTIVE_MASK > 0, "leaving stripe {s} nobody is inside");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_enter_and_leave_changes_the_value_and_balance_restores_idle() {
        let p = PendingWriters::new();
        let s = PendingWriters::stripe(3, &7i64.to_be_bytes());
        let v0 = p.load(s);
        assert!(PendingWriters::idle(v0));
        p.enter(s);
        let v1 = p.load(s);
        assert!(!PendingWriters::idle(v1));
        p.enter(s);
        p.leave(s);
        let v2 = p.load(s);
        assert!(!PendingWriters::idle(v2) && v2 != v1);
        p.leave(s);
        let v3 = p.load(s);
        assert!(PendingWriters::idle(v3));
        assert_ne!(v3, v0, "an enter and a leave in between are seen by a seqlock reader");
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
}
