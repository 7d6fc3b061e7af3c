//! Extractors: what each seed figure's section reads from its experiment's latest run.
//!
//! Owns: one file per experiment ([`primitive`], [`ha`], [`xlog`], [`engine`], [`tpcc`]), the generic
//! view of a run no extractor compares ([`generic`]) and the number formatting every extractor
//! uses ([`num`], [`pct`]). Invariant: an extractor only reads the run (its `summary.json`
//! figures and its typed `results.json`) and the paper's constants; a status of "reproduced"
//! is decided by a stated tolerance, and "differs" always carries a reason built from measured
//! values.

pub mod engine;
pub mod ha;
pub mod primitive;
pub mod tpcc;
pub mod xlog;

use super::{Finding, Run, Status};

/// How far (percentage points) a share of throughput may be from the paper's and still count
/// as reproduced.
pub const TOLERANCE_POINTS: f64 = 10.0;

/// A number with as many digits as it deserves: `123 456`, `12.3`, `1.23`, `0.012`.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a >= 1000.0 {
        let s = format!("{:.0}", a);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push('\u{202f}'); // narrow no-break space between thousands
            }
            out.push(c);
        }
        if v < 0.0 {
            out.insert(0, '-');
        }
        out
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A buffer size in % of the data as configured: `1`, `12.5`, `100`.
pub fn buffer(pct: f64) -> String {
    format!("{pct}")
}

/// A percentage: `87.4 %`.
pub fn pct(v: f64) -> String {
    format!("{} %", num(v))
}

/// `ours / paper` as `0.97×`.
pub fn ratio(ours: f64, paper: f64) -> String {
    if paper == 0.0 {
        return "—".into();
    }
    format!("{:.2}×", ours / paper)
}

/// A run whose section has no extractor yet: its headline figures as they are.
pub fn generic(run: &Run) -> Finding {
    let mut f = Finding::new(
        format!("{} headline figures", run.summary.figures.len()),
        "no extractor compares this run with the paper yet; its headline figures follow",
        Status::Shown,
    );
    f.details = figure_rows(run);
    f.plots = run.plots_starting("");
    f
}

/// Every headline figure of `run` as (label, value unit [vs reference]) rows.
pub fn figure_rows(run: &Run) -> Vec<(String, String)> {
    run.summary
        .figures
        .iter()
        .map(|f| {
            let mut v = format!("{} {}", num(f.value), f.unit);
            if let Some(s) = &f.spread {
                v.push_str(&format!(" (min {}, max {})", num(s.min), num(s.max)));
            }
            if let Some(r) = &f.reference {
                v.push_str(&format!("; {}: {} {}", r.label, num(r.value), f.unit));
            }
            (f.label.clone(), v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(1_234_567.0), "1\u{202f}234\u{202f}567");
        assert_eq!(num(123.4), "123");
        assert_eq!(num(12.345), "12.3");
        assert_eq!(num(1.234), "1.23");
        assert_eq!(num(0.01234), "0.012");
        assert_eq!(num(0.0), "0.0");
        assert_eq!(pct(87.44), "87.4 %");
        assert_eq!(ratio(45.0, 90.0), "0.50×");
    }
}
