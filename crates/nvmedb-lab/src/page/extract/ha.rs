//! Seed 000 Fig. 6 (Case B) and seed 002 Fig. 13 (replication delay), from a run of
//! `nvmedb lab ha`.
//!
//! Owns: [`fig6`], [`fig13`]. The paper's HA configuration duplicates data and log
//! synchronously, which is our `ha-mirror` (log shipping plus data-page mirroring); `ha-log`
//! (log shipping only) is shown beside it. Fig. 6 compares on the run's first device (each node
//! on its own device of that kind); Fig. 13 compares the fast log's delay when the run measured
//! it (the seed's X-SSD is a fast log), else the file log's. Throughputs come from
//! `results.json`'s summary rows, the delay percentiles from `summary.json`.

use super::{buffer, num, pct, ratio, Finding, Run, Status, TOLERANCE_POINTS};
use crate::error::Result;
use crate::experiments::ha::{HaConfig, HaResults};
use crate::report::ResultFile;

/// The configuration standing for the paper's HA (data and log duplicated).
const PAPER_HA: &str = "ha-mirror";

/// Where the numbers come from: the machine, the device each node had, the scale.
fn where_it_ran(doc: &ResultFile<HaConfig, HaResults>) -> String {
    let devices: Vec<String> = doc
        .results
        .devices
        .iter()
        .map(|d| {
            if d.device == "disk" {
                format!("both on the same {}", d.label)
            } else {
                format!("each on its own {}", d.label)
            }
        })
        .collect();
    format!(
        "primary and standby on one machine ({} CPUs, loopback TCP), {}; {} tables × {} rows, {} clients",
        doc.context.cpus,
        devices.join(" / "),
        doc.config.tables,
        doc.config.rows,
        doc.config.clients
    )
}

/// The device the comparison is made on: the run's first.
fn main_device(doc: &ResultFile<HaConfig, HaResults>) -> Option<String> {
    doc.results.devices.first().map(|d| d.device.clone())
}

/// Seed 000 Fig. 6: HA throughput as a share of single at 100 % and at the smallest buffer.
pub fn fig6(run: &Run) -> Result<Finding> {
    let doc: ResultFile<HaConfig, HaResults> = run.results()?;
    let r = &doc.results;
    let dev = main_device(&doc).unwrap_or_default();
    let tps = |config: &str, b: f64| {
        r.summary
            .iter()
            .find(|s| s.device == dev && s.config == config && s.buffer_pct == b)
            .map(|s| s.median_tps)
    };
    let small = doc.config.buffers.iter().copied().fold(f64::INFINITY, f64::min);
    let mut details = Vec::new();
    for s in &r.summary {
        details.push((
            format!("{} on {} at {} % buffer", s.config, s.device, buffer(s.buffer_pct)),
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
    let dev = main_device(&doc).unwrap_or_default();
    let at = |log: &str, p: &str| run.figure(&format!("delay/{dev}/{log}/{p}")).map(|f| f.value);
    let measured: Vec<(&str, f64, f64)> = ["fast", "file"]
        .into_iter()
        .filter_map(|log| Some((log, at(log, "p50")?, at(log, "p99")?)))
        .collect();
    let Some(&(log, p50, _)) = measured.first() else {
        return Ok(Finding::new("—", "", Status::NotRun("the run measured no replication delay".into())));
    };
    let (lo, hi) = (4.5, 5.2);
    let ours = measured
        .iter()
        .map(|(l, p50, p99)| format!("{l} log p50 {} µs, p99 {} µs", num(*p50), num(*p99)))
        .collect::<Vec<_>>()
        .join("; ");
    let comparison = format!(
        "{log} log median {} the paper's 4.5–5.2 µs band (p50 / 5.2 µs = {})",
        if p50 > hi {
            "above"
        } else if p50 < lo {
            "below"
        } else {
            "inside"
        },
        ratio(p50, hi)
    );
    let samples = doc.results.delay.iter().find(|d| d.device == dev && d.log == log).map_or(0, |d| d.samples);
    let status = if p50 <= hi * 1.5 {
        Status::Reproduced
    } else {
        Status::Differs(format!(
            "the acknowledgement here is a TCP message over loopback after the standby's write, not a PCIe counter write: {log} log p50 {} µs over {} samples; {}",
            num(p50),
            num(samples as f64),
            where_it_ran(&doc)
        ))
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = doc
        .results
        .delay
        .iter()
        .map(|d| {
            (
                format!("{} log on {}, p{}", d.log, d.device, num(d.percentile)),
                format!("{} µs", num(d.delay_us)),
            )
        })
        .collect();
    f.devices = vec![where_it_ran(&doc)];
    f.plots = run.plots_present(&["delay"]);
    Ok(f)
}
