//! Options of the lock manager.
//!
//! Owns: [`LockOptions`] and its validation. Invariant: a validated `LockOptions` has a
//! power-of-two shard count and a non-zero park slice and lock timeout.

use crate::error::{Error, Result};
use std::time::Duration;

/// Which transaction of a wait-for cycle is aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VictimPolicy {
    /// The transaction whose lock request closed (detected) the cycle.
    Requester,
    /// The youngest transaction (largest [`TxnId`](super::TxnId)) in the cycle, so that old
    /// transactions, which have done the most work, are not starved by repeated aborts.
    Youngest,
}

/// How the lock manager waits and detects deadlocks.
///
/// A waiter first **spins** for up to `spin` (re-reading a flag private to it, touching no
/// shared cache line), then **parks** its thread. A release that grants the lock unparks the
/// waiter at once (`wake_on_release`), and the waiter then parks until its deadline; without
/// `wake_on_release` the park is cut into slices of at most `park` (the legacy poll). Seed 000 retuned these from "poll, then sleep 1 ms" (sized
/// for 100 µs I/O) to O(10 µs) for 10 µs storage: with lock hold times of a few µs most waits
/// end while spinning, and a parked thread costs a futex wake-up and a context switch
/// (20–30 µs) — longer than the I/O it waits behind.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// Number of lock-table shards (a power of two); each has its own mutex.
    pub shards: usize,
    /// How long a waiter spins before parking. Zero parks at once.
    pub spin: Duration,
    /// While spinning, yield the CPU (`sched_yield`) every ~1 µs instead of only pausing, so
    /// that a lock holder preempted on this core can run and release. Matters when runnable
    /// threads outnumber cores; costs a system call per yield.
    pub spin_yield: bool,
    /// With `wake_on_release` off, the longest single park before the waiter re-checks
    /// whether it was granted (the legacy poll-sleep interval). With it on, unused: a waiter
    /// parks until it is woken or its deadline passes.
    pub park: Duration,
    /// A lock wait longer than this fails with [`Error::LockTimeout`] (retryable).
    pub lock_timeout: Duration,
    /// Run the wait-for-graph cycle check when a waiter stops spinning.
    pub deadlock_detection: bool,
    /// Which transaction of a cycle is aborted.
    pub victim: VictimPolicy,
    /// Unpark a waiter when it is granted. `false` reproduces the legacy poll-and-sleep wait
    /// (the waiter only notices the grant when its `park` slice ends); kept as a baseline for
    /// benchmarks, not for production.
    pub wake_on_release: bool,
    /// Early lock release: a committing transaction releases its locks (and lets lock-free
    /// readers see its changes) once its commit record is in the log, then waits for the log
    /// flush before the commit returns. A transaction or auto-commit read that saw such a
    /// change is not acknowledged before it is durable (see `TxnShared`). Transactions that
    /// change the same rows (pgbench's branches) then no longer serialise on the flush.
    /// On by default; `false` keeps every lock until the commit is durable.
    ///
    /// Recovery is exact with it: a transaction that changes a row released early logs that
    /// change after the releasing commit record, so the log's order keeps every unfinished
    /// transaction's changes apart; and a checkpoint waits until every commit appended before
    /// its undo start is durable (`tests/txn_early_release.rs`, `tests/recovery_crash.rs`).
    pub early_release: bool,
}

impl Default for LockOptions {
    /// Tuned for 10 µs storage: spin 10 µs (yielding every ~1 µs), then park until woken on
    /// grant (100 µs poll slices only without `wake_on_release`), deadlock detection on,
    /// youngest victim, 1 s timeout, early lock release on.
    ///
    /// Why yield while spinning: a pure spin assumes the lock holder is running on another
    /// core. When runnable threads outnumber cores the spinner instead sits on the core the
    /// preempted holder needs (`nvmedb lab engine --parts locks`, 2 cores, 20 threads: pure spin 24–29 k txn/s, spin
    /// with yield 150–160 k, park at once 47–90 k).
    fn default() -> Self {
        Self {
            shards: 64,
            spin: Duration::from_micros(10),
            spin_yield: true,
            park: Duration::from_micros(100),
            lock_timeout: Duration::from_secs(1),
            deadlock_detection: true,
            victim: VictimPolicy::Youngest,
            wake_on_release: true,
            early_release: true,
        }
    }
}

impl LockOptions {
    /// The legacy setting seed 000 started from: a short poll, then sleep 1 ms and poll again
    /// (no wake-up on release). For comparison only.
    pub fn legacy_sleep_1ms() -> Self {
        Self {
            spin: Duration::from_micros(1),
            park: Duration::from_millis(1),
            wake_on_release: false,
            ..Self::default()
        }
    }

    /// Park at once (no spinning), woken on release; `park` slices of 1 ms.
    pub fn park_only() -> Self {
        Self { spin: Duration::ZERO, park: Duration::from_millis(1), ..Self::default() }
    }

    /// Checks the values; errors name the bad option.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &str, detail: &str| Err(Error::Config { key: key.into(), detail: detail.into() });
        if self.shards == 0 || !self.shards.is_power_of_two() || self.shards > 1 << 16 {
            return bad("lock.shards", "must be a power of two in 1..=65536");
        }
        if self.park.is_zero() {
            return bad("lock.park", "must be > 0");
        }
        if self.lock_timeout.is_zero() {
            return bad("lock.lock_timeout", "must be > 0");
        }
        Ok(())
    }
}
