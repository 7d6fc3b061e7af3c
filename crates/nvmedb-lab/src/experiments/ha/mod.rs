//! `nvmedb lab ha`: the cost of high availability on this machine.
//!
//! Owns: seed 000 Case B — primitive single-row UPDATE throughput of a single database vs an HA
//! pair (eager log shipping; eager log shipping plus synchronous data-page mirroring) across
//! table-buffer sizes, standby in the same process over loopback TCP — and seed 002 Fig. 13 —
//! the distribution of the delay from a record's append on the primary to the standby's
//! acknowledgement (shadow-counter update) covering it: [`HaConfig`], [`HaResults`] and the
//! [`Ha`] experiment. Submodule `point` runs one configuration.
//!
//! Invariants: every point starts from the same loaded template (copied, then the standby is
//! seeded from the copy), so configurations differ only in replication; throughput counts only
//! commits of transactions started inside the measured window; the summary states the machine
//! and that primary and standby share it (loopback, same disk, same CPUs).

mod point;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::{median, LatencyHistogram};
use crate::report::{Figure, LineChart, Series};
use crate::workload::primitive::load;
use nvmedb::Database;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Configuration of the experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaConfig {
    /// Scratch directory (recreated): the template, the primary and the standby copies.
    pub data_dir: PathBuf,
    /// Tables.
    pub tables: usize,
    /// Rows per table.
    pub rows: u64,
    /// Table buffer sizes, percent of the data.
    pub buffers: Vec<f64>,
    /// Concurrent clients.
    pub clients: usize,
    /// Seconds of warm-up per point.
    pub warmup_s: f64,
    /// Seconds measured per point.
    pub duration_s: f64,
    /// Repetitions of each point.
    pub reps: usize,
    /// Seconds of the replication-delay run.
    pub delay_s: f64,
}

impl HaConfig {
    /// Default scale: about two to three minutes.
    pub fn default_scale(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            tables: 4,
            rows: 4000,
            buffers: vec![1.0, 100.0],
            clients: 20,
            warmup_s: 1.0,
            duration_s: 5.0,
            reps: 2,
            delay_s: 5.0,
        }
    }

    /// Full scale (seed 000's 10 tables; longer points, more buffer sizes).
    pub fn full_scale(data_dir: PathBuf) -> Self {
        Self {
            tables: 10,
            rows: 50_000,
            buffers: vec![1.0, 10.0, 50.0, 100.0],
            warmup_s: 3.0,
            duration_s: 20.0,
            reps: 3,
            delay_s: 20.0,
            ..Self::default_scale(data_dir)
        }
    }
}

/// The three configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HaKind {
    /// No standby.
    Single,
    /// Eager log shipping to one standby.
    HaLog,
    /// Eager log shipping plus synchronous data-page mirroring.
    HaMirror,
}

impl HaKind {
    /// All three, in the order they run.
    pub const ALL: [HaKind; 3] = [HaKind::Single, HaKind::HaLog, HaKind::HaMirror];

    /// Name in tables and files.
    pub fn name(self) -> &'static str {
        match self {
            HaKind::Single => "single",
            HaKind::HaLog => "ha-log",
            HaKind::HaMirror => "ha-mirror",
        }
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaPoint {
    /// Configuration name.
    pub config: String,
    /// Table buffer, percent of data.
    pub buffer_pct: f64,
    /// Repetition.
    pub rep: usize,
    /// Commits acknowledged in the window.
    pub commits: u64,
    /// Commits per second.
    pub tps: f64,
}

/// Median throughput of one configuration at one buffer size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaSummaryRow {
    /// Configuration name.
    pub config: String,
    /// Table buffer, percent of data.
    pub buffer_pct: f64,
    /// Median commits per second over the repetitions.
    pub median_tps: f64,
    /// Throughput lost against `single` at the same buffer, %.
    pub overhead_pct: f64,
}

/// One row of the delay distribution.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DelayRow {
    /// Percentile (0..100).
    pub percentile: f64,
    /// Delay, microseconds.
    pub delay_us: f64,
}

/// What the run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaResults {
    /// Every point.
    pub points: Vec<HaPoint>,
    /// Median throughput per (config, buffer) and the overhead vs single.
    pub summary: Vec<HaSummaryRow>,
    /// Delay percentiles.
    pub delay: Vec<DelayRow>,
    /// Delay samples.
    pub delay_samples: u64,
}

fn median_tps(points: &[HaPoint], kind: &str, buffer: f64) -> f64 {
    let v: Vec<f64> =
        points.iter().filter(|p| p.config == kind && p.buffer_pct == buffer).map(|p| p.tps).collect();
    median(&v)
}

fn summarise(cfg: &HaConfig, points: &[HaPoint]) -> Vec<HaSummaryRow> {
    let mut out = Vec::new();
    for &b in &cfg.buffers {
        let single = median_tps(points, HaKind::Single.name(), b);
        for kind in HaKind::ALL {
            let m = median_tps(points, kind.name(), b);
            let overhead_pct = if single > 0.0 { 100.0 * (1.0 - m / single) } else { 0.0 };
            out.push(HaSummaryRow { config: kind.name().into(), buffer_pct: b, median_tps: m, overhead_pct });
        }
    }
    out
}

fn delay_rows(samples: &[u64]) -> Vec<DelayRow> {
    if samples.is_empty() {
        return Vec::new();
    }
    let mut h = LatencyHistogram::new();
    for &s in samples {
        h.record_ns(s);
    }
    [1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0]
        .iter()
        .map(|&p| DelayRow { percentile: p, delay_us: h.quantile_us(p / 100.0) })
        .collect()
}

/// The `nvmedb lab ha` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Ha;

impl Experiment for Ha {
    const NAME: &'static str = "ha";
    const TITLE: &'static str =
        "seed 000 Case B (update throughput, single vs HA) and seed 002 Fig. 13 (replication delay)";
    type Config = HaConfig;
    type Results = HaResults;

    fn validate(cfg: &HaConfig) -> Result<()> {
        experiment::non_empty("buffers", &cfg.buffers)?;
        if cfg.tables == 0 || cfg.rows == 0 || cfg.clients == 0 || cfg.reps == 0 {
            return Err(LabError::config("tables/rows/clients/reps", "must be at least 1"));
        }
        experiment::seconds("--duration", cfg.duration_s, false)?;
        experiment::seconds("warmup_s", cfg.warmup_s, true)
    }

    fn run(cfg: &HaConfig, env: &RunEnv) -> Result<HaResults> {
        let template = cfg.data_dir.join("template");
        let _ = std::fs::remove_dir_all(&cfg.data_dir);
        {
            let db = Database::open(&template, point::options(100.0))
                .map_err(LabError::engine("creating the template"))?;
            load(&db, cfg.tables, cfg.rows, 4, env.progress)?;
            db.close().map_err(LabError::engine("closing the template"))?;
        }
        let mut points = Vec::new();
        let mut seed = 1;
        for rep in 0..cfg.reps {
            for &b in &cfg.buffers {
                for kind in HaKind::ALL {
                    seed += 1;
                    let (commits, tps, _) = point::run(cfg, kind, b, seed, false)
                        .map_err(LabError::in_part(format!("{} at {b} % buffer, rep {rep}", kind.name())))?;
                    env.note(format!(
                        "ha: {:<9} buffer {:>5.1}%  rep {rep}  {:>9.0} tx/s",
                        kind.name(),
                        b,
                        tps
                    ));
                    points.push(HaPoint { config: kind.name().into(), buffer_pct: b, rep, commits, tps });
                }
            }
        }
        // Replication delay (seed 002 Fig. 13): the HA log configuration at the largest buffer.
        let dcfg = HaConfig { duration_s: cfg.delay_s, ..cfg.clone() };
        let top = cfg.buffers.iter().copied().fold(0.0, f64::max);
        let (_, _, samples) = point::run(&dcfg, HaKind::HaLog, top, 999, true)
            .map_err(LabError::in_part("the replication-delay run"))?;
        let _ = std::fs::remove_dir_all(&cfg.data_dir);
        Ok(HaResults {
            summary: summarise(cfg, &points),
            points,
            delay: delay_rows(&samples),
            delay_samples: samples.len() as u64,
        })
    }

    fn report(cfg: &HaConfig, r: &HaResults, env: &RunEnv) -> Result<Summary> {
        let mut text = format!(
            "nvmedb lab ha — seed 000 Case B and seed 002 Fig. 13 on this machine\nmachine: {}\n\
             primary and standby share this machine (loopback TCP, same disk, same CPUs); {} tables x {} rows, {} clients, {} s per point, {} reps\n\n\
             {:<10} {:>8} {:>12} {:>10}\n",
            env.context.one_line(),
            cfg.tables,
            cfg.rows,
            cfg.clients,
            cfg.duration_s,
            cfg.reps,
            "config",
            "buffer%",
            "median tx/s",
            "overhead%"
        );
        let mut figures = Vec::new();
        for s in &r.summary {
            text.push_str(&format!(
                "{:<10} {:>8.1} {:>12.0} {:>10.1}\n",
                s.config, s.buffer_pct, s.median_tps, s.overhead_pct
            ));
            let mut f = Figure::new(
                format!("{}/buffer{}/tps", s.config, s.buffer_pct),
                format!("{} at {} % buffer, median", s.config, s.buffer_pct),
                s.median_tps,
                "tx/s",
            );
            if s.config != HaKind::Single.name() {
                f = f.against(
                    "single at the same buffer",
                    median_tps(&r.points, HaKind::Single.name(), s.buffer_pct),
                );
            }
            figures.push(f);
        }
        text.push_str(&format!(
            "\nreplication delay (append on primary -> standby's acknowledgement covering it), {} samples:\n",
            r.delay_samples
        ));
        for d in &r.delay {
            text.push_str(&format!("  p{:<6} {:>10.1} us\n", d.percentile, d.delay_us));
            if [50.0, 99.0].contains(&d.percentile) {
                figures.push(Figure::new(
                    format!("delay/p{}", d.percentile),
                    format!("replication delay p{}", d.percentile),
                    d.delay_us,
                    "µs",
                ));
            }
        }
        env.dir.write_csv("throughput", &r.points)?;
        env.dir.write_csv("delay", &r.delay)?;
        let mut chart = LineChart::new(
            "Update throughput: single vs HA (seed 000 Case B)",
            "table buffer (% of data)",
            "tx/s",
        )
        .subtitle("primary and standby on one machine over loopback")
        .footnote(env.context.one_line());
        for (i, kind) in HaKind::ALL.iter().enumerate() {
            let pts: Vec<(f64, f64)> =
                cfg.buffers.iter().map(|&b| (b, median_tps(&r.points, kind.name(), b))).collect();
            chart = chart.series(Series::new(kind.name(), pts).color(i));
        }
        chart.write(env.dir.path(), "throughput")?;
        if !r.delay.is_empty() {
            let pts: Vec<(f64, f64)> = r.delay.iter().map(|d| (d.percentile, d.delay_us)).collect();
            LineChart::new("Replication delay (seed 002 Fig. 13)", "percentile", "delay (us)")
                .subtitle("append on primary -> shadow counter covers it")
                .footnote(env.context.one_line())
                .series(Series::new("ha-log, eager", pts))
                .write(env.dir.path(), "delay")?;
        }
        Ok(Summary { text, figures })
    }
}
