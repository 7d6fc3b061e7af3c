//! The tier experiment's tables, plots and headline figures.
//!
//! Owns: [`config_result`] (a configuration's measured spread, cost and prediction) and
//! [`write`] (configs.csv, workload.csv, the cost-benefit plot of seed 003 Fig. 6, predicted vs
//! measured, the printed summary with seed 003's ratios next to ours). Invariants: every tier
//! is named with its EMULATED label and achieved latency; the paper's figures are printed next
//! to the measured ones.

use super::place::{DISK, TIER_NAMES};
use super::{
    ConfigResult, TierConfig, TierResults, PAPER_DRAM_OVER_HDD, PAPER_H1_OVER_DRAM_PER_COST,
    PAPER_H1_OVER_HDD, PAPER_SSD_OVER_HDD,
};
use crate::advisor::{self, Workload};
use crate::error::Result;
use crate::experiment::{RunEnv, Summary};
use crate::experiments::tpcc::PointResult;
use crate::measure::Spread;
use crate::report::{Figure, LegendPosition, LineChart, Series, SeriesStyle, TextTable};
use crate::workload::tpcc::schema::TABLE_NAMES;
use serde::Serialize;

/// A configuration's row: the measured spread, cost, throughput per cost, and the advisor's
/// prediction for its placement (the real disk predicted as a tier of its own).
pub fn config_result(
    w: &Workload,
    tiers: &[advisor::Tier],
    disk: Option<&advisor::Tier>,
    name: String,
    how: String,
    placement: &[usize],
    points: Vec<PointResult>,
) -> ConfigResult {
    let mut all = tiers.to_vec();
    if let Some(d) = disk {
        all.push(d.clone());
    }
    debug_assert!(placement.iter().all(|&k| k < all.len() || k == DISK));
    let predicted = advisor::predict(w, &all, placement);
    let tps = Spread::of(&points.iter().map(|p| p.tps).collect::<Vec<_>>());
    let names = |k: usize| all.get(k).map_or("disk".to_string(), |t| t.name.clone());
    ConfigResult {
        name,
        how,
        placement: TABLE_NAMES.iter().zip(placement).map(|(t, &k)| ((*t).to_string(), names(k))).collect(),
        points,
        tps,
        cost: predicted.cost,
        tps_per_cost: tps.median / predicted.cost.max(1e-12),
        error_pct: 100.0 * (predicted.txn_per_s - tps.median) / tps.median.max(1e-9),
        predicted,
    }
}

/// One placement, shortest first: `dram: warehouse district customer | optane: ...`.
fn placement_text(c: &ConfigResult) -> String {
    let mut parts = Vec::new();
    for t in TIER_NAMES.iter().rev().chain(std::iter::once(&"disk")) {
        let on: Vec<&str> = c.placement.iter().filter(|(_, k)| k == t).map(|(n, _)| n.as_str()).collect();
        if on.len() == TABLE_NAMES.len() {
            return format!("all {t}");
        }
        if !on.is_empty() {
            parts.push(format!("{t}: {}", on.join(" ")));
        }
    }
    parts.join(" | ")
}

#[derive(Serialize)]
struct ConfigRow<'a> {
    config: &'a str,
    placement: String,
    tps_median: f64,
    tps_min: f64,
    tps_max: f64,
    predicted_tps: f64,
    error_pct: f64,
    cost: f64,
    tps_per_cost: f64,
    hit_ratio: f64,
    reads_per_txn: f64,
    limit: &'a str,
}

fn ratio(r: &TierResults, a: &str, b: &str, per_cost: bool) -> Option<f64> {
    let (x, y) = (r.config(a)?, r.config(b)?);
    let v = if per_cost { x.tps_per_cost / y.tps_per_cost } else { x.tps.median / y.tps.median };
    v.is_finite().then_some(v)
}

/// The configuration with the best measured throughput per cost (the real disk excluded: its
/// price is an assumption).
pub fn best_per_cost(r: &TierResults) -> Option<&ConfigResult> {
    r.configs.iter().filter(|c| c.name != "disk").max_by(|a, b| a.tps_per_cost.total_cmp(&b.tps_per_cost))
}

/// Writes the CSVs and plots and returns the printed summary with its headline figures.
pub fn write(cfg: &TierConfig, r: &TierResults, env: &RunEnv) -> Result<Summary> {
    let mut ordered: Vec<&ConfigResult> = r.configs.iter().collect();
    ordered.sort_by_key(|c| super::CONFIG_NAMES.iter().position(|n| *n == c.name));
    let rows: Vec<ConfigRow> = ordered
        .iter()
        .map(|c| ConfigRow {
            config: &c.name,
            placement: placement_text(c),
            tps_median: c.tps.median,
            tps_min: c.tps.min,
            tps_max: c.tps.max,
            predicted_tps: c.predicted.txn_per_s,
            error_pct: c.error_pct,
            cost: c.cost,
            tps_per_cost: c.tps_per_cost,
            hit_ratio: c.points.first().map_or(0.0, |p| p.hit_ratio),
            reads_per_txn: c.points.first().map_or(0.0, |p| p.page_reads_per_txn),
            limit: c.points.first().map_or("", |p| p.limit.as_str()),
        })
        .collect();
    env.dir.write_csv("configs", &rows)?;
    env.dir.write_csv("workload", &r.workload.tables)?;
    charts(cfg, r, &ordered, env)?;
    let mut text = tables_text(cfg, r, &ordered, env);
    let figures = against_paper(r, &mut text);
    Ok(Summary { text, figures })
}

/// The two plots: throughput against the database's cost, and measured against predicted.
fn charts(cfg: &TierConfig, r: &TierResults, ordered: &[&ConfigResult], env: &RunEnv) -> Result<()> {
    let sub = format!(
        "TPC-C {} warehouses, {} terminals, table buffer {} %, log on {}",
        r.load.scale.warehouses, cfg.clients, cfg.buffer_pct, cfg.log_device
    );
    let mut cost_chart = LineChart::new(
        "Throughput against the database's cost (seed 003 Fig. 6)",
        "database cost (tables and indexes at the tiers' prices per GB, R$)",
        "transactions per second (median)",
    )
    .subtitle(sub.clone())
    .log_x(true)
    .legend(LegendPosition::UpperLeft)
    .footnote("hdd, nand, optane EMULATED over tmpfs (see the summary for achieved latencies); dram = tmpfs")
    .footnote(env.context.one_line());
    for (i, c) in ordered.iter().enumerate() {
        cost_chart = cost_chart.series(
            Series::new(
                format!("{} ({:.0} txn/s per R$)", c.name, c.tps_per_cost),
                vec![(c.cost, c.tps.median)],
            )
            .style(SeriesStyle::Markers)
            .color(i),
        );
    }
    cost_chart.write(env.dir.path(), "cost_benefit")?;

    let top = ordered.iter().map(|c| c.tps.median.max(c.predicted.txn_per_s)).fold(1.0, f64::max) * 1.1;
    let mut pred_chart = LineChart::new(
        "The advisor's predicted throughput against the measured",
        "predicted transactions per second (seed 000's model, all-DRAM run's statistics)",
        "measured transactions per second (median)",
    )
    .subtitle(sub)
    .x_range(0.0, top)
    .y_range(0.0, top)
    .legend(LegendPosition::UpperLeft)
    .footnote(env.context.one_line())
    .series(Series::new("measured = predicted", vec![(0.0, 0.0), (top, top)]).style(SeriesStyle::Line))
    .series(Series::new("±25 %", vec![(0.0, 0.0), (top, top / 1.25)]).style(SeriesStyle::Dashed).color(7))
    .series(Series::new("", vec![(0.0, 0.0), (top / 1.25, top)]).style(SeriesStyle::Dashed).color(7));
    for (i, c) in ordered.iter().enumerate() {
        pred_chart = pred_chart.series(
            Series::new(c.name.clone(), vec![(c.predicted.txn_per_s, c.tps.median)])
                .style(SeriesStyle::Markers)
                .color(i),
        );
    }
    pred_chart.write(env.dir.path(), "predicted")?;
    Ok(())
}

/// The summary's header and its three tables: the tiers, the advisor's workload and the
/// placements.
fn tables_text(cfg: &TierConfig, r: &TierResults, ordered: &[&ConfigResult], env: &RunEnv) -> String {
    let mut text = crate::experiments::tpcc::report::header(
        "tier",
        <super::Tier as crate::experiment::Experiment>::TITLE,
        env,
        &r.load,
        r.load_average,
    );
    text.push_str(&format!(
        "database: {:.0} MB of tables in {} KiB pages, {:.0} MB of indexes (cached in their own pool); table buffer {} % of the tables; {} terminals; {} s warm-up, {} s measured, {} repetition(s)\nlog: {}\n",
        r.table_bytes as f64 / 1e6,
        cfg.table_page_size / 1024,
        r.index_bytes as f64 / 1e6,
        cfg.buffer_pct,
        cfg.clients,
        cfg.warmup_s,
        cfg.duration_s,
        cfg.repetitions,
        r.log_label
    ));
    let mut dev = TextTable::new([
        "tier",
        "iobench read p50 µs",
        "mean µs",
        "QD32 IOPS",
        "write µs (model)",
        "IOPS limit (model)",
        "price / GB",
    ])
    .title("Tiers (iobench random table-page reads in this run)");
    for d in &r.devices {
        dev.row([
            d.label.clone(),
            format!("{:.1}", d.read_p50_us),
            format!("{:.1}", d.read_mean_us),
            format!("{:.0}", d.read_qd32_iops),
            format!("{:.1}", d.write_us),
            d.iops_limit.map_or("-".into(), |v| format!("{v:.0}")),
            format!("{:.2}", d.price_per_gb),
        ]);
    }
    text.push('\n');
    text.push_str(&dev.to_string());
    let mut wl =
        TextTable::new(["table", "MB", "reads/txn", "writes/txn", "page accesses/txn"]).title(format!(
            "The advisor's workload (all-DRAM run): {:.0} µs per transaction besides device I/O, {} clients",
            r.workload.t_cpu_us, r.workload.clients
        ));
    for t in &r.workload.tables {
        wl.row([
            t.name.clone(),
            format!("{:.1}", t.bytes as f64 / 1e6),
            format!("{:.3}", t.reads_per_txn),
            format!("{:.3}", t.writes_per_txn),
            format!("{:.1}", t.accesses_per_txn),
        ]);
    }
    text.push('\n');
    text.push_str(&wl.to_string());
    let hdd = r.config("all-hdd").map(|c| c.tps.median);
    let mut t = TextTable::new([
        "config",
        "placement",
        "txn/s median [min..max]",
        "predicted",
        "error %",
        "cost R$",
        "txn/s per R$",
        "× all-hdd",
        "limited by",
    ])
    .title("TPC-C per placement (seed 003 Figs. 4 and 6)");
    for c in ordered {
        t.row([
            c.name.clone(),
            placement_text(c),
            format!("{}", c.tps),
            format!("{:.0}", c.predicted.txn_per_s),
            format!("{:+.0}", c.error_pct),
            format!("{:.3}", c.cost),
            format!("{:.0}", c.tps_per_cost),
            hdd.map_or("-".into(), |h| format!("{:.1}", c.tps.median / h.max(1e-9))),
            c.points.first().map_or(String::new(), |p| p.limit.clone()),
        ]);
    }
    t.note("cost: the database's bytes at seed 003's prices per GB (R$; nand's 8.00 is our assumption, the disk is priced as nand); the log and the buffer are not counted");
    text.push('\n');
    text.push_str(&t.to_string());
    text
}

/// Seed 003's ratios next to this run's, and the advisor's standing, appended to `text`;
/// returns them as figures.
fn against_paper(r: &TierResults, text: &mut String) -> Vec<Figure> {
    let mut figures = Vec::new();
    text.push_str("\nSeed 003 next to this run:\n");
    let fmt = |v: Option<f64>| v.map_or("not measured".to_string(), |x| format!("{x:.1}x"));
    for (key, label, a, b, per_cost, paper) in [
        ("h1_over_hdd", "H1 / all-HDD throughput", "H1", "all-hdd", false, PAPER_H1_OVER_HDD),
        ("dram_over_hdd", "all-DRAM / all-HDD throughput", "all-dram", "all-hdd", false, PAPER_DRAM_OVER_HDD),
        (
            "optane_over_hdd",
            "all-Optane / all-HDD throughput",
            "all-optane",
            "all-hdd",
            false,
            PAPER_SSD_OVER_HDD,
        ),
        (
            "h1_over_dram_per_cost",
            "H1 / all-DRAM throughput per cost",
            "H1",
            "all-dram",
            true,
            PAPER_H1_OVER_DRAM_PER_COST,
        ),
    ] {
        let v = ratio(r, a, b, per_cost);
        text.push_str(&format!("  {label:<36} {:>12}   (paper: {paper}x)\n", fmt(v)));
        if let Some(v) = v {
            figures.push(Figure::new(format!("tier/{key}"), label, v, "x").against("seed 003", paper));
        }
    }
    if let (Some(best), Some(adv)) = (best_per_cost(r), r.config("advisor")) {
        text.push_str(&format!(
            "\nbest measured throughput per cost: {} ({:.0} txn/s per R$); the advisor's placement: {:.0} txn/s per R$ ({}), predicted {:.0} txn/s vs measured {:.0} ({:+.0} %, goal within ±25 %)\n",
            best.name,
            best.tps_per_cost,
            adv.tps_per_cost,
            if best.name == "advisor" { "the best".to_string() } else { format!("{:.0} % of the best", 100.0 * adv.tps_per_cost / best.tps_per_cost) },
            adv.predicted.txn_per_s,
            adv.tps.median,
            adv.error_pct
        ));
        figures.push(
            Figure::new(
                "tier/advisor_per_cost_share",
                "advisor's throughput per cost, % of the best measured",
                100.0 * adv.tps_per_cost / best.tps_per_cost,
                "%",
            )
            .against("goal", 100.0),
        );
        figures.push(
            Figure::new(
                "tier/advisor_error_pct",
                "advisor's predicted − measured throughput, %",
                adv.error_pct,
                "%",
            )
            .against("goal (±)", 25.0),
        );
    }
    let within = r.configs.iter().filter(|c| c.error_pct.abs() <= 25.0).count();
    text.push_str(&format!(
        "predictions within ±25 % of the measured throughput: {within} of {} configurations\n",
        r.configs.len()
    ));
    text.push_str(&format!(
        "consistency conditions 1-4 of TPC-C §3.3.2 held after every one of the {} points\n",
        r.checks_passed
    ));
    figures
}
