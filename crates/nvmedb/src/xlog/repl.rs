//! Replication seam of the fast side (seed 002 §4.2): mirrors and shadow counters.
//!
//! Owns: the [`Mirror`] trait (the transport receives a copy of every completed frame of the
//! write stream), [`ShadowCounters`] (the primary's copies of the secondaries' credit counters,
//! updated by the transport) and [`ReplicationMode`] with [`combine`], which turns the local
//! counter and the shadows into the counter the writer sees. The transport itself belongs to
//! the replication layer (`repl/`).
//!
//! Invariants: a shadow counter never goes backwards (stale or reordered updates are ignored);
//! the combined counter never exceeds the local counter (a byte is never acknowledged as
//! replicated before it is persisted locally) and is monotone because its inputs are.

use crate::error::Result;
pub use crate::ids::ReplicationMode;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Receives the write stream of the fast side, to ship it to one secondary.
///
/// `on_frame` is called by the writer that completes a frame, after the frame is persisted
/// locally and before the local counter may cover it; frames of different writers can arrive out
/// of stream order (as TLPs do on the device), each exactly once. It must not block for long: a
/// transport queues the bytes and ships them from its own thread. An error from mirror `i`
/// marks secondary `i`'s link [`LinkState::Failed`] in the status register; the local write
/// still completes (its shadow counter simply stops advancing).
pub trait Mirror: Send + Sync {
    /// A frame's payload occupying stream positions `[stream_pos, stream_pos + bytes.len())`.
    fn on_frame(&self, stream_pos: u64, bytes: &[u8]) -> Result<()>;
}

/// Health of one secondary's link, as the status register reports it (seed 002 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Updates arrive.
    Up,
    /// The transport suspects the counter is stale (no update for a while).
    Stale,
    /// The transport gave up; the database must reconfigure.
    Failed,
}

/// Combines the local counter with the shadow counters according to `mode`.
///
/// With no secondaries every mode degenerates to the local counter. A quorum larger than the
/// number of secondaries can never be reached and yields 0 (nothing acknowledged).
pub fn combine(mode: ReplicationMode, local: u64, shadows: &[u64]) -> u64 {
    if shadows.is_empty() {
        return local;
    }
    let remote = match mode {
        ReplicationMode::Lazy => return local,
        ReplicationMode::Eager => shadows.iter().copied().min().unwrap_or(local),
        ReplicationMode::Chain => shadows[shadows.len() - 1],
        ReplicationMode::Quorum(k) => {
            if k == 0 {
                return local;
            }
            if k > shadows.len() {
                return 0;
            }
            let mut v = shadows.to_vec();
            v.sort_unstable_by(|a, b| b.cmp(a));
            v[k - 1]
        }
    };
    remote.min(local)
}

/// The primary's copies of the secondaries' counters, in chain order.
#[derive(Debug)]
pub struct ShadowCounters {
    mode: ReplicationMode,
    counters: Vec<AtomicU64>,
    links: Vec<AtomicU8>,
}

impl ShadowCounters {
    /// `n` shadows, all at `start`, combined by `mode`.
    pub fn new(mode: ReplicationMode, n: usize, start: u64) -> Self {
        Self {
            mode,
            counters: (0..n).map(|_| AtomicU64::new(start)).collect(),
            links: (0..n).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    /// The replication mode.
    pub fn mode(&self) -> ReplicationMode {
        self.mode
    }

    /// Number of secondaries.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// True when there are no secondaries.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// Applies a counter update from secondary `i`; older values are ignored. Returns the
    /// shadow's value after the update.
    ///
    /// # Panics
    /// If `i` is out of range (a transport bug).
    pub fn update(&self, i: usize, pos: u64) -> u64 {
        self.links[i].store(0, Ordering::Relaxed);
        let prev = self.counters[i].fetch_max(pos, Ordering::AcqRel);
        prev.max(pos)
    }

    /// Marks secondary `i`'s link state.
    pub fn set_link(&self, i: usize, state: LinkState) {
        let v = match state {
            LinkState::Up => 0,
            LinkState::Stale => 1,
            LinkState::Failed => 2,
        };
        self.links[i].store(v, Ordering::Relaxed);
    }

    /// Link states of all secondaries.
    pub fn links(&self) -> Vec<LinkState> {
        self.links
            .iter()
            .map(|l| match l.load(Ordering::Relaxed) {
                0 => LinkState::Up,
                1 => LinkState::Stale,
                _ => LinkState::Failed,
            })
            .collect()
    }

    /// Current shadow values.
    pub fn values(&self) -> Vec<u64> {
        self.counters.iter().map(|c| c.load(Ordering::Acquire)).collect()
    }

    /// The counter the writer sees, given the local counter.
    pub fn combined(&self, local: u64) -> u64 {
        let mut buf = [0u64; 8];
        if self.counters.len() <= buf.len() {
            for (b, c) in buf.iter_mut().zip(&self.counters) {
                *b = c.load(Ordering::Acquire);
            }
            combine(self.mode, local, &buf[..self.counters.len()])
        } else {
            combine(self.mode, local, &self.values())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::Rng;

    #[test]
    fn modes_pick_the_right_counter() {
        let s = [50, 80, 30, 70];
        assert_eq!(combine(ReplicationMode::Lazy, 100, &s), 100);
        assert_eq!(combine(ReplicationMode::Eager, 100, &s), 30);
        assert_eq!(combine(ReplicationMode::Quorum(1), 100, &s), 80);
        assert_eq!(combine(ReplicationMode::Quorum(2), 100, &s), 70);
        assert_eq!(combine(ReplicationMode::Quorum(4), 100, &s), 30);
        assert_eq!(combine(ReplicationMode::Quorum(5), 100, &s), 0);
        assert_eq!(combine(ReplicationMode::Chain, 100, &s), 70);
        // Never ahead of the local counter.
        assert_eq!(combine(ReplicationMode::Quorum(1), 60, &s), 60);
        assert_eq!(combine(ReplicationMode::Eager, 10, &[]), 10);
    }

    /// Model check: the combined value equals a brute-force definition and never exceeds local.
    #[test]
    fn combination_matches_definition() {
        let seed = Rng::seed_from_time();
        let mut rng = Rng::new(seed);
        for _ in 0..2000 {
            let n = rng.below(6) as usize;
            let local = rng.below(1000);
            let shadows: Vec<u64> = (0..n).map(|_| rng.below(1200)).collect();
            let k = rng.below(7) as usize;
            for mode in [
                ReplicationMode::Lazy,
                ReplicationMode::Eager,
                ReplicationMode::Chain,
                ReplicationMode::Quorum(k),
            ] {
                let got = combine(mode, local, &shadows);
                assert!(got <= local, "seed {seed}: {mode:?} {local} {shadows:?} -> {got}");
                if n == 0 || mode == ReplicationMode::Lazy {
                    assert_eq!(got, local, "seed {seed}");
                    continue;
                }
                let want = match mode {
                    ReplicationMode::Eager => *shadows.iter().min().unwrap_or(&local),
                    ReplicationMode::Chain => shadows[n - 1],
                    ReplicationMode::Quorum(0) => local,
                    ReplicationMode::Quorum(k) => {
                        // Largest p such that at least k shadows are >= p (0 if impossible).
                        (0..=1200u64)
                            .rev()
                            .find(|&p| shadows.iter().filter(|&&s| s >= p).count() >= k)
                            .unwrap_or(0)
                    }
                    ReplicationMode::Lazy => local,
                };
                assert_eq!(got, want.min(local), "seed {seed}: {mode:?} {local} {shadows:?}");
            }
        }
    }

    #[test]
    fn shadows_never_go_backwards() {
        let s = ShadowCounters::new(ReplicationMode::Eager, 2, 0);
        s.update(0, 10);
        s.update(0, 5);
        s.update(1, 7);
        assert_eq!(s.values(), vec![10, 7]);
        assert_eq!(s.combined(100), 7);
        assert_eq!(s.combined(3), 3);
    }
}
