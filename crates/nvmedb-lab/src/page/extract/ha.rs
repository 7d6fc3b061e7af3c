//! Seed 000 Fig. 6 (Case B) and seed 002 Fig. 13 (replication delay), from a run of
//! `nvmedb lab ha`.
//!
//! Owns: [`fig6`], [`fig13`]. The paper's HA configuration duplicates data and log
//! synchronously, which is our `ha-mirror` (log shipping plus data-page mirroring); `ha-log`
//! (log shipping only) is shown beside it. Throughputs come from `results.json`'s summary rows,
//! the delay percentiles from `summary.json`.

use super::{buffer, num, pct, ratio, Finding, Run, Status, TOLERANCE_POINTS};
use crate::error::Result;
use crate::experiments::ha::{HaConfig, HaResults};
use crate::report::ResultFile;

/// The configuration standing for the paper's HA (data and log duplicated).
const PAPER_HA: &str = "ha-mirror";

fn where_it_ran(doc: &ResultFile<HaConfig, HaResults>) -> String {
    format!(
        "primary and standby on one machine ({} CPUs, the same disk, loopback TCP); {} tables × {} rows, {} clients",
        doc.context.cpus, doc.config.tables, doc.config.rows, doc.config.clients
    )
}

/// Seed 000 Fig. 6: HA throughput as a share of single at 100 % and at the smallest buffer.
pub fn fig6(run: &Run) -> Result<Finding> {
    let doc: ResultFile<HaConfig, HaResults> = run.results()?;
    let r = &doc.results;
    let tps = |config: &str, b: f64| {
        r.summary.iter().find(|s| s.config == config && s.buffer_pct == b).map(|s| s.median_tps)
    };
    let small = doc.config.buffers.iter().copied().fold(f64::INFINITY, f64::min);
    let mut details = Vec::new();
    for s in &r.summary {
        details.push((
            format!("{} at {} % buffer", s.config, buffer(s.buffer_pct)),
            format!("{} tx/s (median; {} below single)", num(s.median_tps), pct(s.overhead_pct)),
        ));
    }
    let mut ours = Vec::new();
    let mut compared = Vec::new();
    let mut misses = Vec::new();
    for (b, paper) in [(100.0, 88.0), (small, 93.0)] {
        let (Some(single), Some(ha)) = (tps("single", b), tps(PAPER_HA, b)) else { continue };
        if single <= 0.0 {
            continue;
        }
        let share = 100.0 * ha / single;
        ours.push(format!("{PAPER_HA}/single {} at {} %", pct(share), buffer(b)));
        compared.push(format!(
            "{} vs {} at {} % buffer ({})",
            pct(share),
            pct(paper),
            buffer(b),
            ratio(share, paper)
        ));
        if (share - paper).abs() > TOLERANCE_POINTS {
            misses.push(format!(
                "{} of single at {} % buffer vs the paper's {}",
                pct(share),
                buffer(b),
                pct(paper)
            ));
        }
    }
    let status = if ours.is_empty() {
        Status::NotRun("the run has no single and ha-mirror points at the same buffer".into())
    } else if misses.is_empty() {
        Status::Reproduced
    } else {
        Status::Differs(format!("{}: {}", misses.join("; "), where_it_ran(&doc)))
    };
    let mut f = Finding::new(ours.join("; "), compared.join("; "), status);
    f.details = details;
    f.devices = vec![where_it_ran(&doc)];
    f.plots = run.plots_present(&["throughput"]);
    Ok(f)
}

/// Seed 002 Fig. 13: the replication delay percentiles.
pub fn fig13(run: &Run) -> Result<Finding> {
    let doc: ResultFile<HaConfig, HaResults> = run.results()?;
    let (Some(p50), Some(p99)) = (run.figure("delay/p50"), run.figure("delay/p99")) else {
        return Ok(Finding::new("—", "", Status::NotRun("the run measured no replication delay".into())));
    };
    let (lo, hi) = (4.5, 5.2);
    let ours = format!("p50 {} µs, p99 {} µs", num(p50.value), num(p99.value));
    let comparison = format!(
        "median {} the paper's 4.5–5.2 µs band (p50 / 5.2 µs = {})",
        if p50.value > hi {
            "above"
        } else if p50.value < lo {
            "below"
        } else {
            "inside"
        },
        ratio(p50.value, hi)
    );
    let status = if p50.value <= hi * 1.5 {
        Status::Reproduced
    } else {
        Status::Differs(format!(
            "the acknowledgement here is a TCP message over loopback after the standby's fdatasync, not a PCIe counter write: p50 {} µs over {} samples; {}",
            num(p50.value),
            r_samples(&doc),
            where_it_ran(&doc)
        ))
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = doc
        .results
        .delay
        .iter()
        .map(|d| (format!("p{}", num(d.percentile)), format!("{} µs", num(d.delay_us))))
        .collect();
    f.devices = vec![where_it_ran(&doc)];
    f.plots = run.plots_present(&["delay"]);
    Ok(f)
}

fn r_samples(doc: &ResultFile<HaConfig, HaResults>) -> String {
    num(doc.results.delay_samples as f64)
}
