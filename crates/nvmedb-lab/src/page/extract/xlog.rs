//! Seed 002 Figs. 9–12, from a run of `nvmedb lab xlog`.
//!
//! Owns: [`fig9`], [`fig10`], [`fig11`], [`fig12`]. Every value comes from the run's
//! `results.json` (the points of each figure). The paper's shapes are compared, not its
//! absolute numbers: its fast side is an FPGA with SRAM/DRAM behind PCIe, ours a software ring
//! (tmpfs by default) whose durability the run states.

use super::{num, pct, Finding, Run, Status};
use crate::error::Result;
use crate::experiments::xlog::{CommitPoint, XlogConfig, XlogResults};
use crate::report::ResultFile;

type Doc = ResultFile<XlogConfig, XlogResults>;

fn durability(doc: &Doc) -> Vec<String> {
    doc.results.durability.iter().map(|(k, v)| format!("{k}: {v}")).collect()
}

fn kib(bytes: usize) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

/// Seed 002 Fig. 9: throughput per log kind at the most workers measured.
pub fn fig9(run: &Run) -> Result<Finding> {
    let doc: Doc = run.results()?;
    let pts = &doc.results.fig9;
    let Some(w) = pts.iter().map(|p| p.workers).max() else {
        return Ok(Finding::new("—", "", Status::NotRun("the run skipped fig9 (--parts)".into())));
    };
    let at = |log: &str| pts.iter().find(|p| p.log == log && p.workers == w).map(|p| p.txn_per_s);
    let details = pts
        .iter()
        .map(|p| {
            (
                format!("{} log, {} workers", p.log, p.workers),
                format!("{} txn/s, p50 {} µs, p99 {} µs", num(p.txn_per_s), num(p.p50_us), num(p.p99_us)),
            )
        })
        .collect();
    let (none, fast, file) =
        (at("none").unwrap_or(0.0), at("fast").unwrap_or(0.0), at("file").unwrap_or(0.0));
    let share = |v: f64| if none > 0.0 { 100.0 * v / none } else { 0.0 };
    let ours = format!(
        "{w} workers: fast {} txn/s ({} of no log), file {} txn/s",
        num(fast),
        pct(share(fast)),
        num(file)
    );
    let comparison = format!(
        "fast side / conventional side = {:.2}× at {w} workers (the paper: the conventional side falls behind at 8 workers while the fast side keeps up with no log)",
        if file > 0.0 { fast / file } else { 0.0 }
    );
    let status = if share(fast) >= 80.0 && fast >= file {
        Status::Reproduced
    } else {
        let mut s =
            format!("the fast log keeps {} of the no-log throughput at {w} workers", pct(share(fast)));
        if fast < file {
            s.push_str(&format!(", below the file log's {} txn/s", num(file)));
        }
        if let Some(f) = doc.results.fio_fdatasync_iops {
            s.push_str(&format!("; fio fdatasync rate on this disk {} /s", num(f)));
        }
        s.push_str(&format!("; {} CPUs for {w} workers", doc.context.cpus));
        Status::Differs(s)
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = details;
    f.devices = durability(&doc);
    f.plots = run.plots_present(&["fig9_throughput", "fig9_p99"]);
    Ok(f)
}

fn best(points: &[&CommitPoint]) -> Option<f64> {
    points.iter().map(|p| p.mb_per_s).fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

/// Seed 002 Fig. 10: the fast side's throughput across write sizes, normalised to its best.
pub fn fig10(run: &Run) -> Result<Finding> {
    let doc: Doc = run.results()?;
    let fast: Vec<&CommitPoint> = doc.results.fig10.iter().filter(|p| p.path == "fast").collect();
    let Some(top) = best(&fast).filter(|b| *b > 0.0) else {
        return Ok(Finding::new("—", "", Status::NotRun("the run skipped fig10 (--parts)".into())));
    };
    let details = doc
        .results
        .fig10
        .iter()
        .map(|p| {
            (
                format!("{} path, {} per commit", p.path, kib(p.bytes)),
                format!(
                    "{} MB/s, {} commits/s, p50 {} µs",
                    num(p.mb_per_s),
                    num(p.commits_per_s),
                    num(p.p50_us)
                ),
            )
        })
        .collect();
    let small = fast.iter().min_by_key(|p| p.bytes).expect("non-empty");
    let large = fast.iter().max_by_key(|p| p.bytes).expect("non-empty");
    let top_at = fast.iter().find(|p| p.mb_per_s == top).map_or(0, |p| p.bytes);
    let ours = format!(
        "fast path: {} of best at {}, best at {}",
        pct(100.0 * small.mb_per_s / top),
        kib(small.bytes),
        kib(top_at)
    );
    let comparison = format!(
        "throughput rises with write size as in the paper; ours peaks at {} per commit (the paper's x axis is bytes per PCIe write, best at 64 B)",
        kib(top_at)
    );
    let status = if small.mb_per_s < top && large.mb_per_s >= 0.5 * top {
        Status::Reproduced
    } else {
        Status::Differs(format!(
            "{} per commit reaches {} of the best and {} reaches {}: the per-commit cost, not the write size, sets the rate",
            kib(small.bytes),
            pct(100.0 * small.mb_per_s / top),
            kib(large.bytes),
            pct(100.0 * large.mb_per_s / top)
        ))
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = details;
    f.devices = durability(&doc);
    f.plots = run.plots_present(&["fig10"]);
    Ok(f)
}

/// Seed 002 Fig. 11: which queue size gives the best throughput at each group-commit size.
pub fn fig11(run: &Run) -> Result<Finding> {
    let doc: Doc = run.results()?;
    let pts = &doc.results.fig11;
    let mut sizes: Vec<usize> = pts.iter().map(|p| p.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return Ok(Finding::new("—", "", Status::NotRun("the run skipped fig11 (--parts)".into())));
    }
    let mut ours = Vec::new();
    let mut misses = Vec::new();
    for &b in &sizes {
        let at: Vec<&CommitPoint> = pts.iter().filter(|p| p.bytes == b).collect();
        let top = best(&at).unwrap_or(0.0);
        let winner = at.iter().find(|p| p.mb_per_s == top).map_or(0, |p| p.queue_bytes);
        ours.push(format!("{}: best queue {}", kib(b), kib(winner)));
        if let Some(q32) = at.iter().find(|p| p.queue_bytes == 32 << 10) {
            if q32.mb_per_s < 0.9 * top {
                misses.push(format!(
                    "at {} per commit the 32 KiB queue gives {} MB/s, {} of the best ({} queue)",
                    kib(b),
                    num(q32.mb_per_s),
                    pct(100.0 * q32.mb_per_s / top),
                    kib(winner)
                ));
            }
        } else {
            misses.push(format!("no 32 KiB queue was measured at {} per commit", kib(b)));
        }
    }
    let status = if misses.is_empty() { Status::Reproduced } else { Status::Differs(misses.join("; ")) };
    let mut f = Finding::new(
        ours.join("; "),
        "a 32 KiB queue within 10 % of the best throughput at every group-commit size counts as the paper's result",
        status,
    );
    f.details = pts
        .iter()
        .map(|p| {
            (
                format!("queue {}, {} per commit", kib(p.queue_bytes), kib(p.bytes)),
                format!("{} MB/s, p50 {} µs, p99 {} µs", num(p.mb_per_s), num(p.p50_us), num(p.p99_us)),
            )
        })
        .collect();
    f.devices = durability(&doc);
    f.plots = run.plots_present(&["fig11"]);
    Ok(f)
}

/// Seed 002 Fig. 12: the conventional workload's share under neutral and conventional
/// priority at the largest fast workload.
pub fn fig12(run: &Run) -> Result<Finding> {
    let doc: Doc = run.results()?;
    let pts = &doc.results.fig12;
    let Some(top_fast) = pts
        .iter()
        .map(|p| p.fast_offered_pct)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    else {
        return Ok(Finding::new("—", "", Status::NotRun("the run skipped fig12 (--parts)".into())));
    };
    let at = |mode: &str| pts.iter().find(|p| p.mode == mode && p.fast_offered_pct == top_fast);
    let mut f = match (at("Neutral"), at("ConventionalPriority")) {
        (Some(n), Some(c)) => {
            let ours = format!(
                "fast {} offered: conventional keeps {} (neutral) vs {} (conventional priority) of {} offered",
                pct(top_fast),
                pct(n.conventional_pct),
                pct(c.conventional_pct),
                pct(c.conventional_offered_pct)
            );
            let kept = c.conventional_pct >= 0.9 * c.conventional_offered_pct;
            let status = if kept && n.conventional_pct <= c.conventional_pct {
                Status::Reproduced
            } else if !kept {
                Status::Differs(format!(
                    "under conventional priority the conventional workload got {} of the {} it offered on {}",
                    pct(c.conventional_pct),
                    pct(c.conventional_offered_pct),
                    c.device
                ))
            } else {
                Status::Differs(format!(
                    "neutral priority kept more conventional bandwidth ({}) than conventional priority ({}) on {}",
                    pct(n.conventional_pct),
                    pct(c.conventional_pct),
                    c.device
                ))
            };
            let mut f = Finding::new(
                ours,
                "conventional priority protects the conventional side, as in the paper",
                status,
            );
            f.devices = vec![c.device.clone()];
            f
        }
        _ => Finding::new(
            "—",
            "",
            Status::NotRun("the run lacks neutral or conventional-priority points".into()),
        ),
    };
    f.details = pts
        .iter()
        .map(|p| {
            (
                format!("{}, fast {} offered", p.mode, pct(p.fast_offered_pct)),
                format!(
                    "conventional {} of {} offered, fast {}, destaged {}",
                    pct(p.conventional_pct),
                    pct(p.conventional_offered_pct),
                    pct(p.fast_pct),
                    pct(p.destaged_pct)
                ),
            )
        })
        .collect();
    f.plots = run.plots_present(&["fig12"]);
    Ok(f)
}
