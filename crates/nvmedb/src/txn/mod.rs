//! Transactions: the lock manager for strict two-phase locking (2PL), the writers in flight
//! that lock-free readers consult, and the state every transaction of a database shares.
//!
//! Owns: [`LockManager`] (the sharded lock table, per-transaction lock lists, the wait
//! protocol and deadlock detection, and the key-range locks of `lock_range`), its options ([`LockOptions`]) and counters ([`LockStats`]),
//! [`PendingWriters`] (keys with a writer in flight and their last committed images),
//! `TxnShared` with the auto-commit protocol (`shared`), and the vocabulary types [`TxnId`],
//! [`LockKey`], [`LockMode`].
//!
//! # Protocol and what it guarantees
//! The transaction layer takes a [`LockMode::Shared`] lock on every key it reads and a
//! [`LockMode::Exclusive`] lock on every key it writes (upgrading S→X when it writes a key it
//! read), *before* touching the key, and releases every lock at once with
//! [`LockManager::release_all`] only after commit (or abort) is complete. That is strict
//! two-phase locking: every schedule of committed transactions is conflict-serializable, in the
//! order of their commits, and no transaction reads or overwrites uncommitted data. Phantoms
//! — rows inserted into a range another transaction scanned — are kept out by key-range
//! locks (`lock_range`): a serializable scan holds a shared lock on the interval of index
//! keys it read, and every new index entry is checked against those intervals
//! ([`LockManager`]'s insert-intention check) and waits for their holders.
//!
//! How the transaction layer uses it:
//! 1. `begin`: assign a [`TxnId`] larger than every earlier one;
//! 2. before reading a key: `lock(txn, table, key, Shared)`; before writing it:
//!    `lock(txn, table, key, Exclusive)`;
//! 3. if a `lock` fails with an error for which [`Error::is_retryable`](crate::Error::is_retryable)
//!    is true ([`Error::Deadlock`](crate::Error::Deadlock) or
//!    [`Error::LockTimeout`](crate::Error::LockTimeout)): roll the transaction back, then
//!    `release_all(txn)`, then run it again (keeping its id keeps its age, so it is not chosen
//!    as victim forever under [`VictimPolicy::Youngest`]);
//! 4. `commit`: make the commit record durable, *then* `release_all(txn)` (releasing before
//!    the commit is durable would let others read data a crash could still undo).
//!
//! Deadlocks are detected, not avoided: when a waiter stops spinning it searches the wait-for
//! graph (edges: a waiter → the holders it conflicts with and the conflicting requests queued
//! ahead of it) for a cycle through itself, and marks one member the victim (the youngest by
//! default). The victim's request fails with `Error::Deadlock` naming the cycle; its other
//! locks stay until its caller aborts it. The lock timeout backs this up.
//!
//! Invariants of the lock table (asserted in debug builds):
//! - the holders of a key are pairwise compatible (many S, or exactly one X);
//! - a transaction appears at most once among the holders of a key and waits on at most one
//!   key at a time; its waiters are bounded by the number of live transactions;
//! - a key with no holder and no waiter has no entry (memory is bounded by locks in use);
//! - waiters are granted in FIFO order (upgraders first), so a stream of S requests cannot
//!   starve an X waiter;
//! - a wait ends in exactly one of: granted, deadlock victim, timeout.
//!
//! Waits spin first (lock hold times are a few µs on 10 µs storage, seed 000) and then park
//! the thread until a release wakes it; see [`LockOptions`].

mod lock;
mod lock_range;
mod options;
pub mod pending;
mod shared;
mod stats;

#[cfg(test)]
mod tests;

pub use crate::ids::{LockKey, LockMode, TxnId};
pub(crate) use lock::MixHasher;
pub use lock::{LockManager, LockOutcome};
pub(crate) use lock_range::RangeCover;
pub use options::{LockOptions, VictimPolicy};
pub use pending::PendingWriters;
pub(crate) use shared::TxnShared;
pub(crate) use stats::TxnCounters;
pub use stats::{LockStats, TxnStats, WAIT_BUCKETS};

/// 64-bit hash of a lock key (FxHash-style multiply-rotate, finished with a MurmurHash3 mix
/// so every bit depends on every input bit: the low bits index the shard's table, the high
/// bits pick the shard).
pub(crate) fn key_hash(table: u32, key: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = u64::from(table).wrapping_mul(K) ^ key.len() as u64;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}
