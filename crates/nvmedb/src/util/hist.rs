//! Live histograms for the engine's operational metrics: fixed upper bounds, one relaxed atomic
//! per bucket, so recording on a hot path costs a short scan of the bounds and one `fetch_add`.
//!
//! Owns: [`AtomicHistogram`] (live) and [`HistogramSnapshot`] (a copy for export).
//! Invariants: a value is counted in exactly one bucket (the first bound it does not exceed,
//! else the overflow bucket), and `sum` grows by exactly the value recorded; a snapshot taken
//! while others record may be a few values behind, never ahead, in each counter.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds in nanoseconds from 1 µs to ~34 s, ×2 apart: latencies of commits, checkpoints
/// and waits.
pub const NANOS_BOUNDS: [u64; 26] = {
    let mut b = [0u64; 26];
    let mut i = 0;
    while i < 26 {
        b[i] = 1_000 << i;
        i += 1;
    }
    b
};

/// Upper bounds for counts (group sizes): 1, 2, 4, ... 1024.
pub const COUNT_BOUNDS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// A histogram with fixed upper bounds and atomic buckets.
#[derive(Debug)]
pub struct AtomicHistogram {
    bounds: &'static [u64],
    /// `bounds.len() + 1` buckets, the last one for values above every bound.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl AtomicHistogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [u64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "histogram bounds must ascend");
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Counts `v`.
    pub fn record(&self, v: u64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i].fetch_add(1, Relaxed);
        self.sum.fetch_add(v, Relaxed);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds.to_vec(),
            counts: self.counts.iter().map(|c| c.load(Relaxed)).collect(),
            sum: self.sum.load(Relaxed),
        }
    }
}

/// A histogram's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds (inclusive), ascending.
    pub bounds: Vec<u64>,
    /// Per bucket (not cumulative): `bounds.len() + 1` entries, the last for values above all.
    pub counts: Vec<u64>,
    /// Sum of the values recorded.
    pub sum: u64,
}

impl HistogramSnapshot {
    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds `other`'s counts (same bounds) into this one; an empty snapshot takes `other`'s.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        if self.bounds.is_empty() {
            *self = other.clone();
            return;
        }
        assert_eq!(self.bounds, other.bounds, "merging histograms of different bounds");
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum += other.sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_lands_in_the_first_bucket_it_fits() {
        let h = AtomicHistogram::new(&COUNT_BOUNDS);
        for v in [0, 1, 2, 3, 1024, 1025, 5000] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts[0], 2, "0 and 1 are <= 1");
        assert_eq!(s.counts[1], 1);
        assert_eq!(s.counts[2], 1, "3 is <= 4");
        assert_eq!(s.counts[10], 1, "1024 is <= 1024");
        assert_eq!(s.counts[11], 2, "above every bound");
        assert_eq!((s.count(), s.sum), (7, 1 + 2 + 3 + 1024 + 1025 + 5000));
        let mut m = HistogramSnapshot::default();
        m.merge(&s);
        m.merge(&s);
        assert_eq!((m.count(), m.sum), (14, 2 * s.sum));
        assert_eq!(NANOS_BOUNDS[0], 1_000);
        assert!(NANOS_BOUNDS[25] > 30_000_000_000);
    }
}
