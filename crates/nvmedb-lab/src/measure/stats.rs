//! Statistics of repeated measurements: the median and min/median/max.
//!
//! Owns: [`median`], [`percentile`] and [`Spread`], the one place the lab summarises repetitions. Invariants:
//! the median of an even count is the mean of the middle two; NaN inputs sort last (total
//! order) rather than panicking; an empty input gives zeros, never a panic.

use serde::{Deserialize, Serialize};

/// Median of `values`: the middle value, or the mean of the middle two for an even count; 0 for
/// an empty slice.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile `p` (0..=1) of `values` (values that are not latencies recorded in a
/// histogram, such as failover times); 0 for an empty slice.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(((s.len() as f64 * p).ceil() as usize).clamp(1, s.len().max(1)) - 1).copied().unwrap_or(0.0)
}

/// min / median / max of repeated measurements.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median ([`median`]).
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Summarises `values` (all zeros when empty).
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Self { min, median: median(values), max }
    }

    /// `Some(spread)` of `values`, or `None` when there are none (a reference that did not run).
    pub fn of_some(values: &[f64]) -> Option<Self> {
        (!values.is_empty()).then(|| Self::of(values))
    }

    /// Each of min, median and max multiplied by `factor` (a change of unit).
    pub fn scaled(self, factor: f64) -> Self {
        Self { min: self.min * factor, median: self.median * factor, max: self.max * factor }
    }
}

impl std::fmt::Display for Spread {
    /// `median [min..max]`, with the formatter's precision (0 decimals by default).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = f.precision().unwrap_or(0);
        write!(f, "{:.p$} [{:.p$}..{:.p$}]", self.median, self.min, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 0.99), 5.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 0.2), 1.0);
        assert_eq!(percentile(&v, 0.21), 2.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5, "mean of the middle two, not the upper one");
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn spread_and_its_text() {
        let s = Spread::of(&[900.0, 920.0, 910.0, 1000.0]);
        assert_eq!((s.min, s.median, s.max), (900.0, 915.0, 1000.0));
        assert_eq!(s.to_string(), "915 [900..1000]");
        assert_eq!(format!("{:.1}", Spread::of(&[1.25])), "1.2 [1.2..1.2]");
        assert_eq!(Spread::of(&[]), Spread::default());
        assert_eq!(Spread::of_some(&[]), None);
        assert_eq!(Spread::of(&[2.0, 4.0]).scaled(0.5).median, 1.5);
    }
}
