//! Lock manager and transaction counters.
//!
//! Owns: the live atomic counters ([`Counters`], [`TxnCounters`]) and their snapshots
//! ([`LockStats`], [`TxnStats`]).
//! Invariant: `waits == spin_grants + parked_waits` once no wait is in progress, and every
//! finished wait is counted in exactly one histogram bucket.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Number of log2 buckets in the wait-time histogram (bucket `i` counts waits of
/// `[2^i, 2^(i+1))` ns; bucket 0 also holds 0 ns).
pub const WAIT_BUCKETS: usize = 40;

/// A snapshot of the lock manager's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockStats {
    /// Lock requests (`lock` and `try_lock` calls).
    pub requests: u64,
    /// Requests granted at once, without waiting (includes re-entrant ones).
    pub immediate: u64,
    /// Requests that found the lock already held in a covering mode.
    pub reentrant: u64,
    /// Requests that waited.
    pub waits: u64,
    /// Waits that were granted while still spinning.
    pub spin_grants: u64,
    /// Waits not granted while spinning: they ran the deadlock check and parked (whether
    /// they ended granted, as victim or timed out).
    pub parked_waits: u64,
    /// Park calls (a parked wait may park several slices).
    pub park_calls: u64,
    /// Total time spent waiting, ns.
    pub wait_ns_total: u64,
    /// Deadlock victims chosen.
    pub deadlocks: u64,
    /// Waits that timed out.
    pub timeouts: u64,
    /// Wait-time histogram, log2 ns buckets (see [`WAIT_BUCKETS`]).
    pub wait_hist: [u64; WAIT_BUCKETS],
}

impl LockStats {
    /// The `q`-quantile (0..=1) of wait times, as the upper bound of its histogram bucket
    /// (so within a factor of two). `None` when nothing waited.
    pub fn wait_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.wait_hist.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &n) in self.wait_hist.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_nanos(1u64 << (i + 1).min(63)));
            }
        }
        None
    }

    /// Mean wait time of the requests that waited.
    pub fn mean_wait(&self) -> Option<Duration> {
        (self.waits > 0).then(|| Duration::from_nanos(self.wait_ns_total / self.waits))
    }

    /// Counter differences `self - earlier` (for measuring an interval).
    pub fn since(&self, earlier: &LockStats) -> LockStats {
        let mut hist = [0; WAIT_BUCKETS];
        for (i, h) in hist.iter_mut().enumerate() {
            *h = self.wait_hist[i].saturating_sub(earlier.wait_hist[i]);
        }
        LockStats {
            requests: self.requests.saturating_sub(earlier.requests),
            immediate: self.immediate.saturating_sub(earlier.immediate),
            reentrant: self.reentrant.saturating_sub(earlier.reentrant),
            waits: self.waits.saturating_sub(earlier.waits),
            spin_grants: self.spin_grants.saturating_sub(earlier.spin_grants),
            parked_waits: self.parked_waits.saturating_sub(earlier.parked_waits),
            park_calls: self.park_calls.saturating_sub(earlier.park_calls),
            wait_ns_total: self.wait_ns_total.saturating_sub(earlier.wait_ns_total),
            deadlocks: self.deadlocks.saturating_sub(earlier.deadlocks),
            timeouts: self.timeouts.saturating_sub(earlier.timeouts),
            wait_hist: hist,
        }
    }
}

/// Live counters of one lock-table shard (requests are counted per shard so the uncontended
/// path does not bounce one global cache line between cores).
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct ShardCounters {
    pub requests: AtomicU64,
    pub immediate: AtomicU64,
    pub reentrant: AtomicU64,
}

/// Live counters of the wait path (only touched by requests that wait).
pub(crate) struct Counters {
    pub waits: AtomicU64,
    pub spin_grants: AtomicU64,
    pub parked_waits: AtomicU64,
    pub park_calls: AtomicU64,
    pub wait_ns_total: AtomicU64,
    pub deadlocks: AtomicU64,
    pub timeouts: AtomicU64,
    pub wait_hist: [AtomicU64; WAIT_BUCKETS],
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            waits: AtomicU64::new(0),
            spin_grants: AtomicU64::new(0),
            parked_waits: AtomicU64::new(0),
            park_calls: AtomicU64::new(0),
            wait_ns_total: AtomicU64::new(0),
            deadlocks: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            wait_hist: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Counters {
    pub fn record_wait(&self, ns: u64) {
        self.wait_ns_total.fetch_add(ns, Relaxed);
        let bucket = (63 - ns.max(1).leading_zeros() as usize).min(WAIT_BUCKETS - 1);
        self.wait_hist[bucket].fetch_add(1, Relaxed);
    }

    pub fn snapshot<'a>(&self, shards: impl Iterator<Item = &'a ShardCounters>) -> LockStats {
        let (mut requests, mut immediate, mut reentrant) = (0, 0, 0);
        for s in shards {
            requests += s.requests.load(Relaxed);
            immediate += s.immediate.load(Relaxed);
            reentrant += s.reentrant.load(Relaxed);
        }
        LockStats {
            requests,
            immediate,
            reentrant,
            waits: self.waits.load(Relaxed),
            spin_grants: self.spin_grants.load(Relaxed),
            parked_waits: self.parked_waits.load(Relaxed),
            park_calls: self.park_calls.load(Relaxed),
            wait_ns_total: self.wait_ns_total.load(Relaxed),
            deadlocks: self.deadlocks.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            wait_hist: std::array::from_fn(|i| self.wait_hist[i].load(Relaxed)),
        }
    }
}

/// A snapshot of the transaction counters ([`crate::Database::txn_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnStats {
    /// Transactions committed (explicit ones and auto-commit changes; read-only included).
    pub commits: u64,
    /// Transactions rolled back (explicitly, dropped uncommitted, failed auto-commit changes,
    /// deadlock victims and lock timeouts among them).
    pub aborts: u64,
    /// Latency of commits that wrote: from the commit call (or, for an auto-commit change, the
    /// append of its commit record) until it was acknowledged durable, in nanoseconds.
    pub commit_ns: crate::util::hist::HistogramSnapshot,
}

/// Live transaction counters (relaxed atomics: one `fetch_add` per commit or abort, next to a
/// log flush wait).
pub(crate) struct TxnCounters {
    pub commits: AtomicU64,
    pub aborts: AtomicU64,
    pub commit_ns: crate::util::hist::AtomicHistogram,
}

impl Default for TxnCounters {
    fn default() -> Self {
        Self {
            commits: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
            commit_ns: crate::util::hist::AtomicHistogram::new(&crate::util::hist::NANOS_BOUNDS),
        }
    }
}

impl TxnCounters {
    /// Counts the end of a transaction: a commit when `committed`, else an abort; `durable_since`
    /// is when a writing commit started waiting for its acknowledgement.
    pub fn ended(&self, committed: bool, durable_since: Option<std::time::Instant>) {
        if committed {
            self.commits.fetch_add(1, Relaxed);
            if let Some(t) = durable_since {
                self.commit_ns.record(t.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64);
            }
        } else {
            self.aborts.fetch_add(1, Relaxed);
        }
    }

    pub fn snapshot(&self) -> TxnStats {
        TxnStats {
            commits: self.commits.load(Relaxed),
            aborts: self.aborts.load(Relaxed),
            commit_ns: self.commit_ns.snapshot(),
        }
    }
}
