//! The xlog experiment's report: one table, CSV and plot per figure, and the summary's headline
//! figures.
//!
//! Owns: [`write`]. Invariants: every table and plot of Fig. 12 says its device is EMULATED;
//! the summary opens with the machine, the command and each log's durability statement.

use super::fig12::BANDWIDTH_MB_S;
use super::{XlogConfig, XlogResults};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::report::{Figure, LineChart, ResultsDir, Series, TextTable};

fn f0(x: f64) -> String {
    format!("{x:.0}")
}
fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn fig9(r: &XlogResults, dir: &ResultsDir, machine: &str, figures: &mut Vec<Figure>) -> Result<String> {
    let mut t = TextTable::new(["log", "workers", "txn/s", "p50 µs", "p99 µs", "p99.9 µs"])
        .title("Fig. 9 — single-row update transactions through the engine, by log");
    for p in &r.fig9 {
        t.row([
            p.log.clone(),
            p.workers.to_string(),
            f0(p.txn_per_s),
            f1(p.p50_us),
            f1(p.p99_us),
            f1(p.p999_us),
        ]);
        let mut f = Figure::new(
            format!("fig9/{}/workers{}/txn_per_s", p.log, p.workers),
            format!("update transactions, {} log, {} workers", p.log, p.workers),
            p.txn_per_s,
            "txn/s",
        );
        if let Some(fio) = r.fio_fdatasync_iops {
            f = f.against("fio 4 KiB write + fdatasync, 1 job, same disk", fio);
        }
        figures.push(f);
    }
    for (w, x) in &r.p99_ratio_file_over_fast {
        t.note(format!("{w} workers: file-log p99 / fast-log p99 = {x:.1}x"));
    }
    dir.write_csv("fig9", &r.fig9)?;
    let mut tput = LineChart::new("Fig. 9 — throughput vs workers", "workers", "transactions/s")
        .subtitle("single-row update transactions; fast = tmpfs ring (kill -9 safe, not power-loss safe)")
        .footnote(machine);
    let mut lat = LineChart::new("Fig. 9 — p99 commit latency vs workers", "workers", "p99 latency (µs)")
        .subtitle("single-row update transactions")
        .footnote(machine);
    for (i, k) in super::fig9::LOGS.iter().enumerate() {
        let pts: Vec<_> = r.fig9.iter().filter(|p| p.log == *k).collect();
        if pts.is_empty() {
            continue;
        }
        tput = tput
            .series(Series::new(*k, pts.iter().map(|p| (p.workers as f64, p.txn_per_s)).collect()).color(i));
        lat =
            lat.series(Series::new(*k, pts.iter().map(|p| (p.workers as f64, p.p99_us)).collect()).color(i));
    }
    tput.write(dir.path(), "fig9_throughput")?;
    lat.write(dir.path(), "fig9_p99")?;
    Ok(format!("{t}\n"))
}

fn fig10(r: &XlogResults, dir: &ResultsDir, machine: &str) -> Result<String> {
    let mut t = TextTable::new(["path", "bytes", "commits/s", "MB/s", "p50 µs", "p99 µs"])
        .title("Fig. 10 — write-size effect, 1 writer, closed loop");
    for p in &r.fig10 {
        t.row([
            p.path.clone(),
            p.bytes.to_string(),
            f0(p.commits_per_s),
            f1(p.mb_per_s),
            f1(p.p50_us),
            f1(p.p99_us),
        ]);
    }
    dir.write_csv("fig10", &r.fig10)?;
    let mut c = LineChart::new("Fig. 10 — commit rate vs write size", "bytes per commit", "commits/s")
        .log_x(true)
        .footnote(machine);
    for (i, k) in ["fast", "fast-msync", "fdatasync"].iter().enumerate() {
        let pts =
            r.fig10.iter().filter(|p| p.path == *k).map(|p| (p.bytes as f64, p.commits_per_s)).collect();
        c = c.series(Series::new(*k, pts).color(i));
    }
    c.write(dir.path(), "fig10")?;
    Ok(format!("{t}\n"))
}

fn fig11(cfg: &XlogConfig, r: &XlogResults, dir: &ResultsDir, machine: &str) -> Result<String> {
    let mut t = TextTable::new(["queue B", "write B", "commits/s", "MB/s", "p50 µs", "p99 µs"])
        .title("Fig. 11 — queue size vs group-commit size (fast side, 1 writer)");
    for p in &r.fig11 {
        t.row([
            p.queue_bytes.to_string(),
            p.bytes.to_string(),
            f0(p.commits_per_s),
            f1(p.mb_per_s),
            f1(p.p50_us),
            f1(p.p99_us),
        ]);
    }
    dir.write_csv("fig11", &r.fig11)?;
    let mut c = LineChart::new("Fig. 11 — fast-side bandwidth vs queue size", "queue size (bytes)", "MB/s")
        .log_x(true)
        .footnote(machine);
    for (i, &b) in cfg.fig11_sizes.iter().enumerate() {
        let pts =
            r.fig11.iter().filter(|p| p.bytes == b).map(|p| (p.queue_bytes as f64, p.mb_per_s)).collect();
        c = c.series(Series::new(format!("{b} B writes"), pts).color(i));
    }
    c.write(dir.path(), "fig11")?;
    Ok(format!("{t}\n"))
}

fn fig12(r: &XlogResults, dir: &ResultsDir, machine: &str) -> Result<String> {
    let mut t =
        TextTable::new(["mode", "fast offered %", "conventional %", "fast %", "destaged %"]).title(format!(
        "Fig. 12 — destage vs a conventional workload at 50 % (EMULATED device, {BANDWIDTH_MB_S:.0} MB/s)"
    ));
    for p in &r.fig12 {
        t.row([
            p.mode.clone(),
            f0(p.fast_offered_pct),
            f1(p.conventional_pct),
            f1(p.fast_pct),
            f1(p.destaged_pct),
        ]);
    }
    t.note(format!("device: {}", r.fig12[0].device));
    dir.write_csv("fig12", &r.fig12)?;
    let mut c = LineChart::new(
        "Fig. 12 — achieved share of an emulated device",
        "fast-side offered load (% of bandwidth)",
        "achieved (% of bandwidth)",
    )
    .subtitle(format!(
        "conventional workload offered at 50 %; EMULATED device: RAM with a {BANDWIDTH_MB_S:.0} MB/s bandwidth cap"
    ))
    .footnote(machine);
    for (i, m) in ["Neutral", "ConventionalPriority", "DestagePriority"].iter().enumerate() {
        let pts: Vec<_> = r.fig12.iter().filter(|p| p.mode == *m).collect();
        let series = |what: &str, y: fn(&super::SchedPoint) -> f64| {
            Series::new(format!("{m} {what}"), pts.iter().map(|p| (p.fast_offered_pct, y(p))).collect())
        };
        c = c.series(series("conventional", |p| p.conventional_pct).color(2 * i));
        c = c.series(series("destaged", |p| p.destaged_pct).color(2 * i + 1));
    }
    c.write(dir.path(), "fig12")?;
    Ok(format!("{t}\n"))
}

/// Writes every table, CSV and plot of the parts that ran; returns the summary.
pub fn write(cfg: &XlogConfig, r: &XlogResults, env: &RunEnv) -> Result<Summary> {
    let (ctx, dir) = (&env.context, &env.dir);
    let machine = ctx.one_line();
    let mut text = format!("# nvmedb lab xlog — {machine}\n# command: {}\n", ctx.command);
    for (k, d) in &r.durability {
        text.push_str(&format!("# durability [{k}]: {d}\n"));
    }
    if let Some(f) = r.fio_fdatasync_iops {
        text.push_str(&format!("# fio 4 KiB write + fdatasync, 1 job, same disk, same run: {f:.0} IOPS\n"));
    }
    let mut figures = Vec::new();
    if !r.fig9.is_empty() {
        text.push_str(&fig9(r, dir, &machine, &mut figures)?);
    }
    if !r.fig10.is_empty() {
        text.push_str(&fig10(r, dir, &machine)?);
    }
    if !r.fig11.is_empty() {
        text.push_str(&fig11(cfg, r, dir, &machine)?);
    }
    if !r.fig12.is_empty() {
        text.push_str(&fig12(r, dir, &machine)?);
    }
    for (w, x) in &r.p99_ratio_file_over_fast {
        figures.push(Figure::new(
            format!("fig9/workers{w}/p99_file_over_fast"),
            format!("file-log p99 / fast-log p99, {w} workers"),
            *x,
            "x",
        ));
    }
    Ok(Summary { text, figures })
}
