//! The TPC-C experiment's summaries, tables, plots and traced window.
//!
//! Owns: [`summarise`] (min/median/max per device and buffer), [`limit`] (what bounded a point,
//! from its counters), [`case_c`] (seed 000 Fig. 7's ratios), [`trace_run`] (one traced point
//! and its chart) and [`write`] (points.csv, summary.csv, latency.csv, the plots, the printed
//! summary and the headline figures). Invariants: every table and plot names emulated devices
//! as EMULATED (the device label carries the latency achieved), the HA mode, the log and the
//! machine; the paper's figures are printed next to the measured ones, never instead.

use super::point;
use super::setup::{PreparedDevice, Template};
use super::{
    CaseC, SummaryRow, TpccConfig, TpccResults, TraceRun, PAPER_OPTANE_OVER_NAND, PAPER_OPTANE_OVER_SAN,
    PAPER_SHARE_PCT,
};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::measure::{median, Spread};
use crate::report::{
    trace_summary, transaction_window, write_trace_csv, CsvWriter, Figure, LegendPosition, LineChart, Series,
    TextTable, TraceChart,
};
use crate::workload::tpcc::TxnKind;
use nvmedb::trace::TraceKind;
use nvmedb::BufferStats;

/// Whole transactions every client shows in the trace chart.
pub const WHOLE_TXNS: usize = 3;

/// What limited a point, from its counters: the CPU when the process kept the machine's cores
/// busy, else the largest share of a transaction's wall time per client among device reads
/// (and write-backs), lock waits, and the rest (log and commit waits, replication included, and
/// time runnable but not running when other processes take the CPU).
pub fn limit(r: &super::PointResult, table: &BufferStats) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    if r.process_cpu_cores >= 0.85 * cores {
        return format!("CPU ({:.1} of {cores:.0} cores busy)", r.process_cpu_cores);
    }
    let txns = r.transactions.max(1) as f64;
    let reads = table.io_wait_ns as f64 / 1e3 / txns;
    let locks = r.lock_wait_us_per_txn;
    let rest = (r.client_us_per_txn - r.cpu_us_per_txn - reads - locks).max(0.0);
    let total = r.client_us_per_txn.max(1e-9);
    let (what, us) =
        [("device reads", reads), ("lock waits", locks), ("log/commit waits or CPU queueing", rest)]
            .into_iter()
            .fold(("CPU", r.cpu_us_per_txn), |best, x| if x.1 > best.1 { x } else { best });
    format!("{what} ({:.0} % of a client's time; {:.1} cores busy)", 100.0 * us / total, r.process_cpu_cores)
}

/// min/median/max per (device, HA, buffer) over the sweep's repetitions.
pub fn summarise(points: &[super::PointResult]) -> Vec<SummaryRow> {
    let mut keys: Vec<(String, String, f64)> = Vec::new();
    for p in points.iter().filter(|p| p.phase == "sweep") {
        let k = (p.device.clone(), p.ha.clone(), p.buffer_pct);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut rows: Vec<SummaryRow> = keys
        .iter()
        .map(|(d, ha, pct)| {
            let ps: Vec<&super::PointResult> = points
                .iter()
                .filter(|p| p.phase == "sweep" && p.device == *d && p.ha == *ha && p.buffer_pct == *pct)
                .collect();
            let m =
                |f: &dyn Fn(&super::PointResult) -> f64| median(&ps.iter().map(|p| f(p)).collect::<Vec<_>>());
            let tps = Spread::of(&ps.iter().map(|p| p.tps).collect::<Vec<_>>());
            // The repetition closest to the median speaks for the point's limit.
            let mid = ps
                .iter()
                .min_by(|a, b| (a.tps - tps.median).abs().total_cmp(&(b.tps - tps.median).abs()))
                .map_or(String::new(), |p| p.limit.clone());
            let per_type = |f: &dyn Fn(&super::PointResult) -> [f64; 5]| {
                TxnKind::ALL.map(|k| median(&ps.iter().map(|p| f(p)[k.index()]).collect::<Vec<_>>()))
            };
            SummaryRow {
                device: d.clone(),
                device_label: ps[0].device_label.clone(),
                ha: ha.clone(),
                buffer_pct: *pct,
                n: ps.len(),
                tps_min: tps.min,
                tps_median: tps.median,
                tps_max: tps.max,
                tpmc_median: m(&|p| p.tpmc),
                relative_pct: None,
                hit_ratio: m(&|p| p.hit_ratio),
                page_reads_per_txn: m(&|p| p.page_reads_per_txn),
                log_bytes_per_txn: m(&|p| p.log_bytes_per_txn),
                io_us_per_read: m(&|p| p.io_us_per_read),
                cpu_us_per_txn: m(&|p| p.cpu_us_per_txn),
                process_cpu_cores: m(&|p| p.process_cpu_cores),
                rollbacks: ps.iter().map(|p| p.rollbacks).sum(),
                deadlock_retries: ps.iter().map(|p| p.deadlock_retries).sum(),
                lock_timeout_retries: ps.iter().map(|p| p.lock_timeout_retries).sum(),
                p50_us: per_type(&|p| p.p50_us),
                p90_us: per_type(&|p| p.p90_us),
                p99_us: per_type(&|p| p.p99_us),
                limit: mid,
            }
        })
        .collect();
    let full: Vec<(String, String, f64)> = rows
        .iter()
        .filter(|r| r.buffer_pct == 100.0)
        .map(|r| (r.device.clone(), r.ha.clone(), r.tps_median))
        .collect();
    for r in &mut rows {
        if let Some((_, _, f)) = full.iter().find(|(d, ha, _)| *d == r.device && *ha == r.ha) {
            r.relative_pct = (*f > 0.0).then(|| 100.0 * (r.tps_median / f));
        }
    }
    rows
}

fn median_at<'a>(summary: &'a [SummaryRow], device: &str, pct: f64) -> Option<&'a SummaryRow> {
    summary.iter().find(|r| r.device == device && r.buffer_pct == pct)
}

/// Seed 000 Case C's comparisons, when the run has optane and san or nand at 5 %.
pub fn case_c(summary: &[SummaryRow]) -> Option<CaseC> {
    let at5 = |d: &str| median_at(summary, d, 5.0).map(|r| r.tps_median);
    let share_pct: Vec<(String, f64)> = summary
        .iter()
        .filter(|r| r.buffer_pct == 5.0)
        .filter_map(|r| r.relative_pct.map(|p| (r.device_label.clone(), p)))
        .collect();
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let optane_over_san = ratio(at5("optane"), at5("san"));
    let optane_over_nand = ratio(at5("optane"), at5("nand"));
    (optane_over_san.is_some() || optane_over_nand.is_some()).then_some(CaseC {
        share_pct,
        optane_over_san,
        optane_over_nand,
    })
}

/// Traces one point (the smallest buffer on the trace device) and draws its chart.
pub fn trace_run(
    cfg: &TpccConfig,
    env: &RunEnv,
    t: &Template,
    devices: &[PreparedDevice],
    summary: &[SummaryRow],
) -> Result<Option<TraceRun>> {
    let want = cfg.trace_device.as_deref().unwrap_or("optane");
    let Some(dev) = devices.iter().find(|d| d.kind.name() == want).or(devices.first()) else {
        return Ok(None);
    };
    let pct = cfg.buffer_pcts.iter().copied().fold(f64::INFINITY, f64::min);
    env.note(format!("tpcc: tracing {} at {pct} %", dev.report.label));
    let out = point::run(
        cfg,
        t,
        dev,
        pct,
        0,
        cfg.seed.wrapping_add(1_000_000),
        &point::Observe { traced: true, profile: None },
    )
    .map_err(crate::LabError::in_part(format!("tracing {} at {pct} %", dev.kind.name())))?;
    let trace = out.trace.unwrap_or_default();
    let win = transaction_window(&trace, TraceKind::Cpu, WHOLE_TXNS, (cfg.trace_window_ms * 1e6) as u64);
    let stem = format!("trace_{}", dev.kind.name());
    write_trace_csv(env.dir.file(&format!("{stem}.csv")), &trace.window(win.from_ns, win.to_ns))?;
    let rows = trace_summary(&trace);
    env.dir.write_csv(&format!("{stem}_summary"), &rows)?;
    let untraced = median_at(summary, &dev.kind.name(), pct).map_or(0.0, |r| r.tps_median);
    let shown = if win.short.is_empty() {
        format!("every client shows at least {} whole transactions", win.min_whole)
    } else {
        format!("{} client(s) completed fewer than {WHOLE_TXNS} transactions (below)", win.short.len())
    };
    let first =
        trace.threads.iter().flat_map(|th| th.intervals.first()).map(|iv| iv.start_ns).min().unwrap_or(0);
    let mut chart = TraceChart::from_trace(
        format!("TPC-C at {pct} % buffer on {}, {}: one row per terminal", dev.report.label, cfg.ha.name()),
        &trace.window(win.from_ns, win.to_ns),
    )
    .subtitle(format!(
        "{:.2} ms from {:.1} ms into a {:.1} s traced run at {:.0} txn/s ({shown})",
        win.len_ns() as f64 / 1e6,
        win.from_ns.saturating_sub(first) as f64 / 1e6,
        trace.span_ns() as f64 / 1e9,
        out.result.tps,
    ))
    .annotate_durations(true);
    chart.duration_ns = win.len_ns();
    for s in win.short {
        chart = chart.footnote(s);
    }
    let chart = chart
        .footnote("a transaction is a CPU span (purple) with its reads, write-backs, log and lock waits drawn over it")
        .footnote(format!("{}; {}", cfg.ha.describe(), cfg.log.describe()))
        .footnote(env.context.one_line());
    let files = chart.write(env.dir.path(), &stem)?;
    Ok(Some(TraceRun {
        device_label: dev.report.label.clone(),
        buffer_pct: pct,
        tps_traced: out.result.tps,
        tps_untraced: untraced,
        intervals: trace.threads.iter().map(|th| th.intervals.len()).sum(),
        dropped: trace.dropped(),
        shares_pct: rows.iter().map(|r| (r.kind.clone(), 100.0 * r.utilisation)).collect(),
        chart_png: files.png.display().to_string(),
    }))
}

const SHORT: [&str; 5] = ["NO", "P", "OS", "D", "SL"];

fn write_points_csv(env: &RunEnv, r: &TpccResults) -> Result<()> {
    let mut w = CsvWriter::create(env.dir.file("points.csv"))?;
    let mut header: Vec<String> = [
        "device",
        "device_label",
        "ha",
        "buffer_pct",
        "buffer_bytes",
        "repetition",
        "phase",
        "window_s",
        "transactions",
        "tps",
        "tpmc",
        "rollbacks",
        "deadlock_retries",
        "lock_timeout_retries",
        "hit_ratio",
        "index_hit_ratio",
        "page_reads_per_txn",
        "page_writes_per_txn",
        "eviction_writes_per_txn",
        "io_us_per_read",
        "log_bytes_per_txn",
        "log_device_bytes_per_txn",
        "cpu_us_per_txn",
        "process_cpu_us_per_txn",
        "lock_waits_per_txn",
        "lock_wait_us_per_txn",
        "client_us_per_txn",
        "process_cpu_cores",
        "limit",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for k in SHORT {
        for f in ["count", "p50_us", "p90_us", "p99_us", "cpu_us", "log_bytes"] {
            header.push(format!("{k}_{f}"));
        }
    }
    w.write_record(&header)?;
    for p in &r.points {
        let mut row: Vec<String> = vec![
            p.device.clone(),
            p.device_label.clone(),
            p.ha.clone(),
            p.buffer_pct.to_string(),
            p.buffer_bytes.to_string(),
            p.repetition.to_string(),
            p.phase.clone(),
            format!("{:.3}", p.window_s),
            p.transactions.to_string(),
            format!("{:.1}", p.tps),
            format!("{:.1}", p.tpmc),
            p.rollbacks.to_string(),
            p.deadlock_retries.to_string(),
            p.lock_timeout_retries.to_string(),
            format!("{:.4}", p.hit_ratio),
            format!("{:.4}", p.index_hit_ratio),
            format!("{:.3}", p.page_reads_per_txn),
            format!("{:.3}", p.page_writes_per_txn),
            format!("{:.3}", p.eviction_writes_per_txn),
            format!("{:.1}", p.io_us_per_read),
            format!("{:.0}", p.log_bytes_per_txn),
            format!("{:.0}", p.log_device_bytes_per_txn),
            format!("{:.1}", p.cpu_us_per_txn),
            format!("{:.1}", p.process_cpu_us_per_txn),
            format!("{:.3}", p.lock_waits_per_txn),
            format!("{:.1}", p.lock_wait_us_per_txn),
            format!("{:.1}", p.client_us_per_txn),
            format!("{:.2}", p.process_cpu_cores),
            p.limit.clone(),
        ];
        for k in 0..5 {
            row.push(p.per_type[k].to_string());
            row.extend(
                [p.p50_us[k], p.p90_us[k], p.p99_us[k], p.cpu_us_per_type[k]].map(|v| format!("{v:.1}")),
            );
            row.push(format!("{:.0}", p.log_bytes_per_type[k]));
        }
        w.write_record(&row)?;
    }
    w.finish()?;
    Ok(())
}

fn throughput_chart(cfg: &TpccConfig, env: &RunEnv, r: &TpccResults, relative: bool) -> LineChart {
    let (title, y) = if relative {
        (
            "TPC-C throughput relative to 100 % buffer (seed 000 Fig. 7)",
            "throughput (% of the device's 100 % value)",
        )
    } else {
        (
            "TPC-C throughput vs table buffer size (seed 000 Fig. 7)",
            "transactions per second (all five types)",
        )
    };
    let mut chart = LineChart::new(title, "table buffer (% of table data; indexes cached)", y)
        .subtitle(format!(
            "{} warehouses, {} terminals, {}, {} log; median of {}",
            r.load.scale.warehouses,
            cfg.clients,
            cfg.ha.name(),
            match cfg.log {
                super::LogChoice::Duplexed => "duplexed",
                super::LogChoice::Fast => "fast",
            },
            cfg.repetitions
        ))
        .log_x(true)
        .x_ticks(cfg.buffer_pcts.clone())
        .legend(if relative { LegendPosition::UpperLeft } else { LegendPosition::LowerRight })
        .footnote(format!("{}; {}", cfg.ha.describe(), cfg.log.describe()))
        .footnote(env.context.one_line());
    if relative {
        chart = chart.y_range(0.0, 110.0);
    }
    let mut devs: Vec<(String, String)> = Vec::new();
    for row in &r.summary {
        if !devs.iter().any(|(d, _)| *d == row.device) {
            devs.push((row.device.clone(), row.device_label.clone()));
        }
    }
    for (i, (d, label)) in devs.iter().enumerate() {
        let pts: Vec<(f64, f64)> =
            r.summary.iter().filter(|x| x.device == *d).map(|x| (x.buffer_pct, x.tps_median)).collect();
        let s = Series::new(label.clone(), pts).color(i);
        if let Some(s) = if relative { s.normalised_at(100.0) } else { Some(s) } {
            chart = chart.series(s);
        }
    }
    if relative && cfg.case_c {
        chart = chart.series(Series::new(
            "seed 000 Fig. 7: HA on low-latency SSD at 5 %",
            vec![(5.0, PAPER_SHARE_PCT)],
        ));
    }
    chart
}

fn summary_table(cfg: &TpccConfig, r: &TpccResults) -> TextTable {
    let mut t = TextTable::new([
        "device",
        "buffer %",
        "txn/s median [min..max]",
        "tpmC",
        "% of 100 %",
        "hit ratio",
        "reads/txn",
        "log KiB/txn",
        "µs/read",
        "CPU µs/txn",
        "rollbacks",
        "deadlocks",
        "timeouts",
        "limited by",
    ])
    .title(format!(
        "TPC-C, {} warehouses, {} terminals, {} ({}), {}",
        r.load.scale.warehouses,
        cfg.clients,
        cfg.ha.name(),
        cfg.ha.describe(),
        cfg.log.describe()
    ));
    for s in &r.summary {
        t.row([
            s.device_label.clone(),
            format!("{}", s.buffer_pct),
            format!("{}", Spread { min: s.tps_min, median: s.tps_median, max: s.tps_max }),
            format!("{:.0}", s.tpmc_median),
            s.relative_pct.map_or("-".into(), |p| format!("{p:.0}")),
            format!("{:.3}", s.hit_ratio),
            format!("{:.2}", s.page_reads_per_txn),
            format!("{:.1}", s.log_bytes_per_txn / 1024.0),
            format!("{:.1}", s.io_us_per_read),
            format!("{:.0}", s.cpu_us_per_txn),
            s.rollbacks.to_string(),
            s.deadlock_retries.to_string(),
            s.lock_timeout_retries.to_string(),
            s.limit.clone(),
        ]);
    }
    t
}

fn latency_table(r: &TpccResults) -> TextTable {
    let mut header = vec!["device".to_string(), "buffer %".into()];
    for k in TxnKind::ALL {
        header.push(format!("{} p50/p90/p99 µs", k.name()));
    }
    let mut t = TextTable::new(header).title("Latency per transaction type (median over repetitions)");
    for s in &r.summary {
        let mut row = vec![s.device_label.clone(), format!("{}", s.buffer_pct)];
        for k in 0..5 {
            row.push(format!("{:.0}/{:.0}/{:.0}", s.p50_us[k], s.p90_us[k], s.p99_us[k]));
        }
        t.row(row);
    }
    t
}

fn case_c_text(c: &CaseC) -> String {
    let mut s = String::from("\nSeed 000 Case C (Fig. 7) next to this run:\n");
    let fmt = |v: Option<f64>| v.map_or("not measured".into(), |x| format!("{x:.2}x"));
    s.push_str(&format!(
        "  optane / san  at 5 % buffer: {:>12}   (paper: {PAPER_OPTANE_OVER_SAN}x)\n",
        fmt(c.optane_over_san)
    ));
    s.push_str(&format!(
        "  optane / nand at 5 % buffer: {:>12}   (paper: {PAPER_OPTANE_OVER_NAND}x)\n",
        fmt(c.optane_over_nand)
    ));
    for (d, p) in &c.share_pct {
        s.push_str(&format!(
            "  5 % / 100 % on {d}: {p:.0} %   (paper, HA on low-latency SSD: {PAPER_SHARE_PCT} %)\n"
        ));
    }
    s
}

/// The first lines of a TPC-C summary: the command and title, the machine, the load, and the
/// machine's load average at the run's start and end.
pub(crate) fn header(
    command: &str,
    title: &str,
    env: &RunEnv,
    load: &crate::workload::tpcc::LoadReport,
    load_average: (f64, f64),
) -> String {
    format!(
        "nvmedb lab {command} — {title}\nmachine: {}\n{}\nload average (1 min) {:.1} at the start, {:.1} at the end, on {} CPUs\n",
        env.context.one_line(),
        load.describe(),
        load_average.0,
        load_average.1,
        env.context.cpus
    )
}

/// Writes the CSVs and plots, and returns the printed summary with its headline figures.
pub fn write(cfg: &TpccConfig, r: &TpccResults, env: &RunEnv) -> Result<Summary> {
    write_points_csv(env, r)?;
    throughput_chart(cfg, env, r, false).write(env.dir.path(), "throughput")?;
    if r.summary.iter().any(|s| s.buffer_pct == 100.0) {
        throughput_chart(cfg, env, r, true).write(env.dir.path(), "relative")?;
    }
    let mut text =
        header("tpcc", <super::Tpcc as crate::experiment::Experiment>::TITLE, env, &r.load, r.load_average);
    text.push_str(&format!(
        "database: {:.0} MB of tables in {} KiB pages (the engine's default is {} KiB; TPC-C's small rows cache better in small pages), {:.0} MB of indexes (cached); {} terminals with zero think time, {}; {} s warm-up, {} s measured per point; early lock release {}\n",
        r.table_bytes as f64 / 1e6,
        cfg.table_page_size / 1024,
        nvmedb::Options::default().table_page_size / 1024,
        r.index_bytes as f64 / 1e6,
        cfg.clients,
        if cfg.clients >= r.load.scale.warehouses as usize {
            "each bound to a home warehouse"
        } else {
            "each drawing its warehouse per transaction"
        },
        cfg.warmup_s,
        cfg.duration_s,
        if cfg.early_lock_release { "on (the engine's default)" } else { "off (--early-lock-release off)" }
    ));
    for d in &r.devices {
        let reference = if d.read_qd32_iops > 0.0 {
            format!(
                "iobench {} B random reads QD1 p50 {:.1} µs (mean {:.1}), QD32 {:.0} IOPS",
                cfg.table_page_size, d.read_qd1_p50_us, d.read_qd1_mean_us, d.read_qd32_iops
            )
        } else {
            "no device reference measured".into()
        };
        let standby = d.standby_location.as_ref().map_or(String::new(), |s| format!("; standby in {s}"));
        text.push_str(&format!("device {}: {reference}{standby}\n", d.label));
    }
    text.push('\n');
    text.push_str(&summary_table(cfg, r).to_string());
    text.push('\n');
    text.push_str(&latency_table(r).to_string());
    text.push('\n');
    text.push_str(&cost_table(r).to_string());
    for p in &r.profiles {
        text.push_str(&format!(
            "\nCPU profile of the measured window, {} at {} % (rep {}): {} samples; flame graph {}\n",
            p.device_label, p.buffer_pct, p.repetition, p.samples, p.flame_svg
        ));
        let mut t = TextTable::new(["self %", "total %", "function"]).align(2, crate::report::Align::Left);
        for f in p.top.iter().take(PROFILE_TOP_PRINTED) {
            t.row([format!("{:.1}", f.self_pct), format!("{:.1}", f.total_pct), f.function.clone()]);
        }
        text.push_str(&t.to_string());
        text.push_str(&format!(
            "by layer (self): {}\n",
            p.layers.iter().take(10).map(|(l, v)| format!("{l} {v:.1} %")).collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(c) = &r.case_c {
        text.push_str(&case_c_text(c));
    }
    if let Some(t) = &r.trace {
        text.push_str(&format!(
            "\ntrace: {} at {} %: {:.0} txn/s traced vs {:.0} untraced; share of the terminals' time: {}; chart {}\n",
            t.device_label,
            t.buffer_pct,
            t.tps_traced,
            t.tps_untraced,
            t.shares_pct.iter().map(|(k, p)| format!("{k} {p:.0} %")).collect::<Vec<_>>().join(", "),
            t.chart_png
        ));
    }
    text.push_str(&lateness_text(&r.points, &r.devices));
    text.push_str(&format!(
        "\nconsistency conditions 1-4 of TPC-C §3.3.2 held after every one of the {} points\n",
        r.checks_passed
    ));
    Ok(Summary { text, figures: figures(r) })
}

/// Functions of each profile printed in the summary (the profile's `.txt` file has more).
const PROFILE_TOP_PRINTED: usize = 15;
/// Functions kept in the results and written to the profile's `.txt` file.
const PROFILE_TOP_KEPT: usize = 40;

/// Writes one point's profile (flame graph, folded stacks, top functions) into the run's
/// directory as `<name>.svg`, `<name>.folded` and `<name>.txt`.
pub fn profile(
    env: &RunEnv,
    name: &str,
    device_label: &str,
    pct: f64,
    rep: usize,
    point: &super::PointResult,
    folded: &[String],
) -> Result<super::ProfileRun> {
    let svg = format!("{name}.svg");
    let title = format!("TPC-C measured window, {device_label} at {pct} % buffer (rep {rep})");
    let subtitle = format!(
        "{} txn/s, {:.0} µs terminal CPU and {:.0} µs process CPU per transaction, {:.1} KiB of log per transaction; {}",
        point.tps.round(),
        point.cpu_us_per_txn,
        point.process_cpu_us_per_txn,
        point.log_bytes_per_txn / 1024.0,
        env.context.one_line()
    );
    crate::report::write_flame_graph(&env.dir.file(&svg), &title, &subtitle, folded)?;
    let folded_file = format!("{name}.folded");
    env.dir.write_text(&folded_file, &(folded.join("\n") + "\n"))?;
    env.dir.write_text(
        &format!("{name}.txt"),
        &format!("{title}\n{subtitle}\n\n{}", crate::report::profile_tables(folded, PROFILE_TOP_KEPT)),
    )?;
    Ok(super::ProfileRun {
        device_label: device_label.to_string(),
        buffer_pct: pct,
        repetition: rep,
        samples: crate::report::sample_count(folded),
        flame_svg: svg,
        folded: folded_file,
        top: crate::report::top_functions(folded, PROFILE_TOP_KEPT),
        layers: crate::report::layer_shares(folded),
    })
}

/// What a transaction costs: CPU and log per type (medians over repetitions), the process's
/// CPU, transactions per busy core-second, and the log by record kind.
fn cost_table(r: &TpccResults) -> TextTable {
    let mut header: Vec<String> = vec!["device".into(), "buffer %".into()];
    for k in SHORT {
        header.push(format!("{k} CPU µs / log B"));
    }
    header.extend([
        "all: terminal / process CPU µs".into(),
        "txn per busy core-s".into(),
        "log B by kind".into(),
    ]);
    let mut t = TextTable::new(header)
        .title("Cost per transaction (terminal-thread CPU and log bytes each type appended; medians over repetitions)");
    for s in &r.summary {
        let pts: Vec<&super::PointResult> = r
            .points
            .iter()
            .filter(|p| {
                p.phase == "sweep" && p.device == s.device && p.ha == s.ha && p.buffer_pct == s.buffer_pct
            })
            .collect();
        let med =
            |f: &dyn Fn(&super::PointResult) -> f64| median(&pts.iter().map(|p| f(p)).collect::<Vec<_>>());
        let mut row = vec![s.device_label.clone(), format!("{}", s.buffer_pct)];
        for k in 0..5 {
            row.push(format!(
                "{:.0} / {:.0}",
                med(&|p| p.cpu_us_per_type[k]),
                med(&|p| p.log_bytes_per_type[k])
            ));
        }
        let process = med(&|p| p.process_cpu_us_per_txn);
        row.push(format!("{:.0} / {:.0}", med(&|p| p.cpu_us_per_txn), process));
        row.push(if process > 0.0 { format!("{:.0}", 1e6 / process) } else { "-".into() });
        let mut kinds: Vec<String> = Vec::new();
        if let Some(first) = pts.first() {
            for (name, _) in &first.log_bytes_by_kind {
                let v = med(&|p| p.log_bytes_by_kind.iter().find(|(n, _)| n == name).map_or(0.0, |x| x.1));
                kinds.push(format!("{name} {v:.0}"));
            }
        }
        row.push(kinds.join(", "));
        t.row(row);
    }
    t
}

/// Headline figures: every device's 100 % throughput, its 5 %/100 % share (against the
/// paper's 70 %) and the Case C ratios (against 6.1× and 1.4×).
fn figures(r: &TpccResults) -> Vec<Figure> {
    let mut out = Vec::new();
    for s in &r.summary {
        if s.buffer_pct == 100.0 {
            out.push(Figure::repeated(
                format!("{}/{}/tps_at_100pct", s.device, s.ha),
                format!("TPC-C txn/s at 100 % buffer on {} ({})", s.device_label, s.ha),
                Spread { min: s.tps_min, median: s.tps_median, max: s.tps_max },
                "txn/s",
            ));
        }
        if let (Some(p), true) = (s.relative_pct, s.buffer_pct < 100.0) {
            out.push(
                Figure::new(
                    format!("{}/{}/share_at_{}pct", s.device, s.ha, s.buffer_pct),
                    format!(
                        "TPC-C at {} % buffer on {} ({}), % of its 100 % throughput",
                        s.buffer_pct, s.device_label, s.ha
                    ),
                    p,
                    "%",
                )
                .against("seed 000 Fig. 7, HA on low-latency SSD at 5 %", PAPER_SHARE_PCT),
            );
        }
    }
    if let Some(c) = &r.case_c {
        if let Some(v) = c.optane_over_san {
            out.push(
                Figure::new("case_c/optane_over_san", "optane / san at 5 % buffer", v, "x")
                    .against("seed 000 Fig. 7", PAPER_OPTANE_OVER_SAN),
            );
        }
        if let Some(v) = c.optane_over_nand {
            out.push(
                Figure::new("case_c/optane_over_nand", "optane / nand at 5 % buffer", v, "x")
                    .against("seed 000 Fig. 7", PAPER_OPTANE_OVER_NAND),
            );
        }
    }
    out
}

/// Mean lateness, as a share of the device's own QD1 read latency (iobench in the same run),
/// past which a point is flagged: its latencies are the machine's load more than the model's.
const LATE_FLAG_SHARE: f64 = 0.25;

/// The emulated devices' lateness per device and buffer (worst repetition), and a warning on
/// the points whose mean lateness exceeds [`LATE_FLAG_SHARE`] of the device's latency.
fn lateness_text(points: &[super::PointResult], devices: &[super::DeviceReport]) -> String {
    let mut rows: Vec<(&str, &str, f64, f64, f64)> = Vec::new();
    for p in points.iter().filter(|p| p.emulator_late_us > 0.0 || p.emulator_late_share > 0.0) {
        match rows.iter_mut().find(|r| r.1 == p.device_label && r.2 == p.buffer_pct) {
            Some(r) => {
                r.3 = r.3.max(p.emulator_late_us);
                r.4 = r.4.max(p.emulator_late_share);
            }
            None => rows.push((
                &p.device,
                &p.device_label,
                p.buffer_pct,
                p.emulator_late_us,
                p.emulator_late_share,
            )),
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nemulated operations past their modelled completion (worst repetition; the machine's share of the latency):\n",
    );
    for (device, label, pct, mean, share) in rows {
        let own = devices.iter().find(|d| d.device == device).map_or(0.0, |d| d.read_qd1_p50_us);
        let flag = if own > 0.0 && mean > LATE_FLAG_SHARE * own {
            format!(
                "  <- more than {:.0} % of the device's {own:.1} µs: the machine, not the model",
                LATE_FLAG_SHARE * 100.0
            )
        } else {
            String::new()
        };
        s.push_str(&format!(
            "  {label} at {pct} %: mean {mean:.1} µs late, {:.1} % of operations > {} µs late{flag}\n",
            share * 100.0,
            nvmedb::io::LATE_THRESHOLD.as_micros()
        ));
    }
    s
}
