//! Latency histograms: the one HDR-histogram set-up of the lab.
//!
//! Owns: [`LatencyHistogram`] (nanoseconds, 1 ns .. 100 s, 3 significant digits) and
//! [`LatencySummary`] (count, mean, min, p50, p99, p99.9, max in µs). Invariants: values outside
//! the bounds are clamped, not dropped; an empty histogram summarises to zeros with count 0.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Largest value tracked, ns (100 s).
pub const MAX_NS: u64 = 100_000_000_000;

/// A histogram of latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Histogram<u64>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self(Histogram::new_with_bounds(1, MAX_NS, 3).unwrap_or_else(|e| unreachable!("valid bounds: {e}")))
    }

    /// Records one latency of `ns` nanoseconds (clamped to 1 ns .. [`MAX_NS`]).
    pub fn record_ns(&mut self, ns: u64) {
        self.0.saturating_record(ns.max(1));
    }

    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        self.record_ns(d.as_nanos().min(u128::from(MAX_NS)) as u64);
    }

    /// Adds every value of `other`.
    pub fn add(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at quantile `q` (0..=1), µs; 0 when empty.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(q) as f64 / 1e3
    }

    /// Count, mean, min, p50, p99, p99.9 and max, µs.
    pub fn summary(&self) -> LatencySummary {
        if self.0.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.0.len(),
            mean_us: self.0.mean() / 1e3,
            min_us: self.0.min() as f64 / 1e3,
            p50_us: self.quantile_us(0.50),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            max_us: self.0.max() as f64 / 1e3,
        }
    }
}

/// Latency percentiles in µs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Values recorded.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Minimum.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_in_microseconds() {
        let mut h = LatencyHistogram::new();
        assert_eq!(h.summary(), LatencySummary::default());
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let mut other = LatencyHistogram::new();
        other.record_ns(0);
        other.record_ns(u64::MAX);
        h.add(&other);
        let s = h.summary();
        assert_eq!(s.count, 1002);
        assert!((s.p50_us - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_us - 990.0).abs() < 1.5, "{s:?}");
        assert_eq!(s.min_us, 0.001, "0 ns is clamped to 1 ns");
        assert!(s.max_us >= MAX_NS as f64 / 1e3 * 0.999, "huge values are clamped, not dropped");
    }
}
