//! Seed 000 Fig. 7 (Case C) and Figs. 8/10 (its traces), from a run of `nvmedb lab tpcc`.
//!
//! Owns: [`fig7`], [`traces`]. Ratios come from the run's `case_c/optane_over_san` and
//! `case_c/optane_over_nand` figures (`summary.json`), each with the paper's value as its
//! reference; optane's 5 %/100 % share from `optane/HA/share_at_5pct` (against the paper's
//! 70 %); the devices from `results.json`.

use super::{figure_rows, num, pct, ratio, Finding, Run, Status, TOLERANCE_POINTS};
use crate::error::Result;
use crate::experiments::tpcc::{TpccConfig, TpccResults, PAPER_SHARE_PCT};

/// How far (relative) a speed-up may be from the paper's and still count as reproduced.
const TOLERANCE: f64 = 0.25;

fn devices(run: &Run) -> Vec<String> {
    match run.results::<TpccConfig, TpccResults>() {
        Ok(doc) => doc
            .results
            .devices
            .iter()
            .map(|d| format!("{}: page read QD1 p50 {} µs ({})", d.label, num(d.read_qd1_p50_us), d.location))
            .collect(),
        Err(e) => vec![format!("devices unreadable: {e}")],
    }
}

/// Seed 000 Fig. 7: optane over san and over nand at 5 % buffer, and optane's 5 %/100 % share.
pub fn fig7(run: &Run) -> Result<Finding> {
    let pairs: Vec<(&str, f64, f64)> =
        [("san", "case_c/optane_over_san", 6.1), ("nand", "case_c/optane_over_nand", 1.4)]
            .into_iter()
            .filter_map(|(dev, name, paper)| {
                run.figure(name).map(|f| (dev, f.value, f.reference.as_ref().map_or(paper, |r| r.value)))
            })
            .collect();
    if pairs.is_empty() {
        let mut f = Finding::new(
            "—",
            "",
            Status::NotRun("the run did not measure Case C (optane, nand and san at 5 %)".into()),
        );
        f.details = figure_rows(run);
        return Ok(f);
    }
    // Optane's 5 %/100 % share with HA (seed 000's 70 %), when the run measured both points.
    let share = run
        .figure("optane/HA/share_at_5pct")
        .map(|f| (f.value, f.reference.as_ref().map_or(PAPER_SHARE_PCT, |r| r.value)));
    let mut ours = pairs.iter().map(|(d, v, _)| format!("optane / {d} {v:.2}×")).collect::<Vec<_>>();
    let mut comparison = pairs
        .iter()
        .map(|(d, v, p)| format!("optane / {d}: {v:.2}× vs {p}× ({})", ratio(*v, *p)))
        .collect::<Vec<_>>();
    let mut misses: Vec<String> = pairs
        .iter()
        .filter(|(_, v, p)| (v / p - 1.0).abs() > TOLERANCE)
        .map(|(d, v, p)| format!("optane / {d} is {v:.2}× here vs {p}× in the paper"))
        .collect();
    if let Some((v, p)) = share {
        ours.push(format!("optane 5 %/100 % {}", pct(v)));
        comparison.push(format!("optane 5 %/100 %: {} vs {}", pct(v), pct(p)));
        if (v - p).abs() > TOLERANCE_POINTS {
            misses.push(format!(
                "optane keeps {} of its 100 % throughput at 5 % vs {} in the paper",
                pct(v),
                pct(p)
            ));
        }
    }
    let (ours, comparison) = (ours.join("; "), comparison.join("; "));
    let status = if misses.is_empty() {
        Status::Reproduced
    } else {
        Status::Differs(format!(
            "{}; {} CPUs, emulated devices (achieved latencies below)",
            misses.join("; "),
            run.context().cpus
        ))
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = figure_rows(run);
    f.devices = devices(run);
    f.plots = run.plots_present(&["throughput", "relative"]);
    Ok(f)
}

/// Seed 000 Figs. 8/10: the run's trace charts of the mixed workload.
pub fn traces(run: &Run) -> Result<Finding> {
    let plots = run.plots_starting("trace_");
    if plots.is_empty() {
        return Ok(Finding::new("—", "", Status::NotRun("the run traced nothing".into())));
    }
    let mut f = Finding::new(
        format!("{} trace charts", plots.len()),
        "compare the share of data reads (red) and log waits (deep blue) at each buffer size with the paper's",
        Status::Shown,
    );
    f.devices = devices(run);
    f.plots = plots;
    Ok(f)
}
