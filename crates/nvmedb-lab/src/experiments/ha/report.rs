//! The summary, CSVs and plots of `nvmedb lab ha`.
//!
//! Owns: the text tables (throughput per point, replication delay, failover), the figures
//! compared with seeds 000 and 002, `throughput.csv`, `delay.csv`, `failover.csv` and the two
//! plots. Writes only through the run's [`RunEnv`] directory.

use super::{tps_of, HaConfig, HaKind, HaResults, PAPER_DELAY_US, PAPER_OVERHEAD_PCT};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::measure::median;
use crate::report::{Align, Figure, LineChart, Series, TextTable};
use serde::Serialize;

/// One failover, as a CSV row.
#[derive(Debug, Serialize)]
struct FailoverCsv {
    ttl_s: u64,
    trial: usize,
    ms: f64,
}

pub(super) fn report(cfg: &HaConfig, r: &HaResults, env: &RunEnv) -> Result<Summary> {
    let mut text = format!(
        "nvmedb lab ha — seed 000 Case B, seed 002 Fig. 13 and failover on this machine\nmachine: {}\n\
         primary and standby each on its own device of one kind, in one process over loopback TCP; {}; \
         {} tables x {} rows, {} clients, {} s per point after {} s warm-up, {} reps interleaved; throughput with the {}\n",
        env.context.one_line(),
        r.cpu_placement,
        cfg.tables,
        cfg.rows,
        cfg.clients,
        cfg.duration_s,
        cfg.warmup_s,
        cfg.reps,
        cfg.log.describe(),
    );
    for d in &r.devices {
        text.push_str(&format!("device: {}\n", d.label));
    }
    let mut figures = Vec::new();
    text.push('\n');
    text.push_str(&points_table(r, &mut figures).to_string());
    let groups = delay_groups(r);
    text.push_str(&delays_table(r, &groups, &mut figures).to_string());
    failover_text(r, &mut text, &mut figures);
    write_csvs(r, env)?;
    charts(cfg, r, &groups, env)?;
    Ok(Summary { text, figures })
}

/// Throughput per point, with the overhead figures against seed 000.
fn points_table(r: &HaResults, figures: &mut Vec<Figure>) -> TextTable {
    let mut points = TextTable::new([
        "device",
        "config",
        "buffer%",
        "min tx/s",
        "median",
        "max",
        "overhead%",
        "per rep %",
        "CPU µs/commit",
        "in clients",
        "cores",
    ])
    .align(1, Align::Left)
    .align(7, Align::Left);
    for s in &r.summary {
        let reps: Vec<String> = s.rep_overheads_pct.iter().map(|o| format!("{o:.0}")).collect();
        points.row([
            s.device.clone(),
            s.config.clone(),
            format!("{:.1}", s.buffer_pct),
            format!("{:.0}", s.min_tps),
            format!("{:.0}", s.median_tps),
            format!("{:.0}", s.max_tps),
            format!("{:.1}", s.overhead_pct),
            reps.join(" "),
            format!("{:.1}", s.cpu_us_per_commit),
            format!("{:.1}", s.client_cpu_us_per_commit),
            format!("{:.2}", s.cpu_cores),
        ]);
        let mut f = Figure::new(
            format!("{}/{}/buffer{}/tps", s.device, s.config, s.buffer_pct),
            format!("{} on {} at {} % buffer, median", s.config, s.device, s.buffer_pct),
            s.median_tps,
            "tx/s",
        );
        if s.config != HaKind::Single.name() {
            f = f.against(
                "single on the same device at the same buffer",
                median(&tps_of(&r.points, &s.device, HaKind::Single.name(), s.buffer_pct)),
            );
            figures.push(
                Figure::new(
                    format!("{}/{}/buffer{}/overhead_pct", s.device, s.config, s.buffer_pct),
                    format!("HA overhead, {} on {} at {} % buffer", s.config, s.device, s.buffer_pct),
                    s.overhead_pct,
                    "%",
                )
                .against("seed 000 Case B at 100 % buffer", PAPER_OVERHEAD_PCT),
            );
        }
        figures.push(f);
    }
    points
}

/// The (device, log) pairs whose replication delay was measured, in run order.
fn delay_groups(r: &HaResults) -> Vec<(String, String)> {
    let mut groups: Vec<(String, String)> =
        r.delay.iter().map(|d| (d.device.clone(), d.log.clone())).collect();
    groups.dedup();
    groups
}

/// Replication delay percentiles per (device, log), with figures against seed 002 Fig. 13.
fn delays_table(r: &HaResults, groups: &[(String, String)], figures: &mut Vec<Figure>) -> TextTable {
    let mut delays = TextTable::new(["device", "log", "samples", "p10 µs", "p50 µs", "p99 µs", "p99.9 µs"])
        .title(format!(
            "\nreplication delay (append on the primary -> the standby's acknowledgement covering it), log shipping at the largest buffer; seed 002 Fig. 13: {}-{} µs",
            PAPER_DELAY_US.0, PAPER_DELAY_US.1
        ))
        .align(1, Align::Left);
    let at = |dev: &str, log: &str, p: f64| {
        r.delay
            .iter()
            .find(|d| d.device == dev && d.log == log && d.percentile == p)
            .map_or(0.0, |d| d.delay_us)
    };
    for (dev, log) in groups {
        let n = r.delay.iter().find(|d| d.device == *dev && d.log == *log).map_or(0, |d| d.samples);
        delays.row([
            dev.clone(),
            log.clone(),
            n.to_string(),
            format!("{:.1}", at(dev, log, 10.0)),
            format!("{:.1}", at(dev, log, 50.0)),
            format!("{:.1}", at(dev, log, 99.0)),
            format!("{:.1}", at(dev, log, 99.9)),
        ]);
        for p in [50.0, 99.0] {
            figures.push(
                Figure::new(
                    format!("delay/{dev}/{log}/p{p}"),
                    format!("replication delay p{p}, {log} log on {dev}"),
                    at(dev, log, p),
                    "µs",
                )
                .against("seed 002 Fig. 13 (upper end)", PAPER_DELAY_US.1),
            );
        }
    }
    delays
}

/// The failover times per lease TTL.
fn failover_text(r: &HaResults, text: &mut String, figures: &mut Vec<Figure>) {
    text.push_str("\nfailover: kill -9 of the primary -> the first commit the new primary acknowledges (three etcd members, three `nvmedb node` processes, quorum 1 of 2, margin 0.4 x TTL)\n");
    if let Some(n) = &r.failover_note {
        text.push_str(&format!("  not measured: {n}\n"));
    }
    for f in &r.failover {
        text.push_str(&format!(
            "  lease TTL {} s: {} failovers, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms\n",
            f.ttl_s,
            f.times_ms.len(),
            f.p50_ms,
            f.p99_ms,
            f.max_ms
        ));
        figures.push(
            Figure::new(
                format!("failover/ttl{}/p50_ms", f.ttl_s),
                format!("failover time p50, lease TTL {} s", f.ttl_s),
                f.p50_ms,
                "ms",
            )
            .against("the lease TTL", f.ttl_s as f64 * 1000.0),
        );
    }
}

/// `throughput.csv`, `delay.csv` and `failover.csv`.
fn write_csvs(r: &HaResults, env: &RunEnv) -> Result<()> {
    env.dir.write_csv("throughput", &r.points)?;
    env.dir.write_csv("delay", &r.delay)?;
    let rows: Vec<FailoverCsv> = r
        .failover
        .iter()
        .flat_map(|f| {
            f.times_ms.iter().enumerate().map(|(i, &t)| FailoverCsv { ttl_s: f.ttl_s, trial: i, ms: t })
        })
        .collect();
    env.dir.write_csv("failover", &rows)?;
    Ok(())
}

/// The throughput plot (single vs HA per buffer size) and the delay plot.
fn charts(cfg: &HaConfig, r: &HaResults, groups: &[(String, String)], env: &RunEnv) -> Result<()> {
    let mut chart = LineChart::new(
        "Update throughput: single vs HA (seed 000 Case B)",
        "table buffer (% of data)",
        "tx/s",
    )
    .subtitle("primary and standby each on its own device, one machine, loopback")
    .footnote(format!(
        "{} | {}",
        env.context.one_line(),
        r.devices.iter().map(|d| d.label.as_str()).collect::<Vec<_>>().join("; ")
    ));
    let mut i = 0;
    for d in &r.devices {
        for kind in HaKind::ALL {
            let pts: Vec<(f64, f64)> = cfg
                .buffers
                .iter()
                .map(|&b| (b, median(&tps_of(&r.points, &d.device, kind.name(), b))))
                .collect();
            chart = chart.series(Series::new(format!("{} on {}", kind.name(), d.device), pts).color(i));
            i += 1;
        }
    }
    chart.write(env.dir.path(), "throughput")?;
    if !groups.is_empty() {
        let mut c = LineChart::new("Replication delay (seed 002 Fig. 13)", "percentile", "delay (µs)")
            .subtitle("append on the primary -> the standby's acknowledgement covers it")
            .footnote(env.context.one_line());
        for (i, (dev, log)) in groups.iter().enumerate() {
            let pts: Vec<(f64, f64)> = r
                .delay
                .iter()
                .filter(|d| d.device == *dev && d.log == *log)
                .map(|d| (d.percentile, d.delay_us))
                .collect();
            c = c.series(Series::new(format!("{log} log on {dev}"), pts).color(i));
        }
        c.write(env.dir.path(), "delay")?;
    }
    Ok(())
}
