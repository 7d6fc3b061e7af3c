//! `nvmedb lab cost`: seed 000 §5.4 / Fig. 11 — the cost and cost-performance of the HA server
//! configurations (on-memory, low-latency SSD, mid-latency SSD, SAN) for the seed's 1.5 TB
//! database, with the throughput each configuration gets taken from a `nvmedb lab tpcc` run
//! (`--case-c`: HA on emulated optane, nand and san at 5 % and 100 % buffer), next to the
//! paper's 1.4×.
//!
//! Owns: [`CostConfig`] (the run to read, the database size, the component prices), the
//! [`Prices`] the seed implies, the result types and the [`Cost`] experiment. Invariants: every
//! price is relative to seed 000's on-memory server (cost 1.00), derived from the seed's own
//! numbers where it gives them (memory is 77 % of the on-memory server; the low-latency server
//! costs 51 % of it), from seed 003's prices per GB for the ratio of an Optane SSD to DRAM, and
//! an assumption for the SAN that is printed as one; throughputs are the TPC-C run's medians,
//! named with their EMULATED device labels.

use crate::error::{LabError, Result};
use crate::experiment::{Experiment, RunEnv, Summary};
use crate::experiments::tpcc::{SummaryRow, TpccConfig, TpccResults};
use crate::report::{read_json, Figure, LegendPosition, LineChart, Series, SeriesStyle, TextTable};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Seed 000 §5.4: the low-latency SSD configuration's cost performance over the on-memory one.
pub const PAPER_COST_PERFORMANCE: f64 = 1.4;
/// Seed 000 §5.4: the low-latency SSD server costs 51 % of the on-memory one.
pub const PAPER_COST_SHARE: f64 = 0.51;
/// Seed 000 §5.4: memory is 77 % of the on-memory server's cost.
pub const PAPER_MEMORY_SHARE: f64 = 0.77;
/// Seed 000 §5.4 (from Case B): the low-latency configuration at 5 % buffer keeps 70 % of the
/// 100 % buffer throughput.
pub const PAPER_THROUGHPUT_SHARE: f64 = 0.70;

/// Component prices relative to seed 000's on-memory server (Table 2 (a) = 1.00).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    /// The server with its OS disks (2 × 480 GB M.2), CPUs and NIC.
    pub server: f64,
    /// DRAM per GiB.
    pub dram_per_gib: f64,
    /// Low-latency (Optane) SSD per GB.
    pub optane_per_gb: f64,
    /// Mid-latency (NAND NVMe) SSD per GB.
    pub nand_per_gb: f64,
    /// External SAN storage per GB.
    pub san_per_gb: f64,
}

impl Prices {
    /// What seed 000 implies: memory (1536 GiB) is 77 % of server (a); server (b) — 196 GiB and
    /// four 375 GB low-latency SSDs — costs 51 % of (a); an Optane SSD costs 20.27 / 43.75 of
    /// DRAM per GB (seed 003 Table 1); then the server is what (b) leaves, and the two 800 GB
    /// NAND SSDs what (a) leaves. The SAN is our assumption: twice NAND per GB (seed 000 gives no
    /// price for its external storage).
    pub fn from_seed() -> Self {
        let dram_per_gib = PAPER_MEMORY_SHARE / 1536.0;
        let dram_per_gb = dram_per_gib / 1.073_741_824;
        let optane_per_gb = dram_per_gb * 20.27 / 43.75;
        let server = PAPER_COST_SHARE - 196.0 * dram_per_gib - 1500.0 * optane_per_gb;
        let nand_per_gb = (1.0 - PAPER_MEMORY_SHARE - server) / 1600.0;
        Self { server, dram_per_gib, optane_per_gb, nand_per_gb, san_per_gb: 2.0 * nand_per_gb }
    }
}

/// The experiment's configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostConfig {
    /// The `nvmedb lab tpcc` run whose throughputs are used (its directory).
    pub tpcc_run: PathBuf,
    /// Component prices.
    pub prices: Prices,
}

impl Default for CostConfig {
    fn default() -> Self {
        Self { tpcc_run: PathBuf::from("results/tpcc/latest"), prices: Prices::from_seed() }
    }
}

/// One server configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostRow {
    /// Name.
    pub name: String,
    /// Seed 000's description of it.
    pub hardware: String,
    /// The TPC-C device its throughput comes from (label).
    pub device: String,
    /// Buffer, % of the data.
    pub buffer_pct: f64,
    /// Measured throughput, txn/s (median).
    pub tps: f64,
    /// Cost relative to the on-memory server.
    pub cost: f64,
    /// Throughput relative to the on-memory server's.
    pub relative_tps: f64,
    /// Cost performance relative to the on-memory server's.
    pub cost_performance: f64,
}

/// Everything `results.json` holds besides context and configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostResults {
    /// The TPC-C run read.
    pub tpcc_run: String,
    /// Its HA mode, warehouses and terminals.
    pub tpcc_setup: String,
    /// The configurations.
    pub rows: Vec<CostRow>,
}

/// The server configurations: name, hardware, device, buffer %, memory GiB, storage cost.
fn servers(p: &Prices) -> Vec<(&'static str, &'static str, &'static str, f64, f64, f64)> {
    let mid = 1600.0 * p.nand_per_gb;
    vec![
        (
            "on-memory",
            "1536 GiB DRAM, 2 × 800 GB mid-latency SSD (seed 000 Table 2 (a))",
            "nand",
            100.0,
            1536.0,
            mid,
        ),
        (
            "low-latency SSD",
            "196 GiB DRAM, 4 × 375 GB low-latency SSD (seed 000 Table 2 (b))",
            "optane",
            5.0,
            196.0,
            1500.0 * p.optane_per_gb,
        ),
        ("mid-latency SSD", "196 GiB DRAM, 2 × 800 GB mid-latency SSD", "nand", 5.0, 196.0, mid),
        ("SAN", "196 GiB DRAM, 1.5 TB external SAN storage", "san", 5.0, 196.0, 1500.0 * p.san_per_gb),
        (
            "SAN, full buffer",
            "1536 GiB DRAM, 1.5 TB external SAN storage",
            "san",
            100.0,
            1536.0,
            1500.0 * p.san_per_gb,
        ),
    ]
}

fn row_of<'a>(r: &'a [SummaryRow], device: &str, pct: f64) -> Option<&'a SummaryRow> {
    r.iter().find(|s| s.device == device && s.buffer_pct == pct)
}

/// The cost rows from a TPC-C run's summary rows.
pub fn cost_rows(r: &[SummaryRow], p: &Prices) -> Result<Vec<CostRow>> {
    let missing = |d: &str, pct: f64| {
        LabError::config(
            "tpcc-run",
            format!("the TPC-C run has no {d} point at {pct} % buffer: run `nvmedb lab tpcc --case-c` first"),
        )
    };
    let base = row_of(r, "nand", 100.0).ok_or_else(|| missing("nand", 100.0))?;
    let base_cost = p.server + 1536.0 * p.dram_per_gib + 1600.0 * p.nand_per_gb;
    servers(p)
        .into_iter()
        .map(|(name, hw, dev, pct, gib, storage)| {
            let s = row_of(r, dev, pct).ok_or_else(|| missing(dev, pct))?;
            let cost = (p.server + gib * p.dram_per_gib + storage) / base_cost;
            let relative_tps = s.tps_median / base.tps_median.max(1e-9);
            Ok(CostRow {
                name: name.into(),
                hardware: hw.into(),
                device: s.device_label.clone(),
                buffer_pct: pct,
                tps: s.tps_median,
                cost,
                relative_tps,
                cost_performance: relative_tps / cost,
            })
        })
        .collect()
}

/// The `nvmedb lab cost` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Cost;

impl Experiment for Cost {
    const NAME: &'static str = "cost";
    const TITLE: &'static str =
        "Cost performance of HA servers (seed 000 §5.4, Fig. 11) from the TPC-C Case C run and the seed's prices";
    type Config = CostConfig;
    type Results = CostResults;

    fn validate(cfg: &CostConfig) -> Result<()> {
        let p = &cfg.prices;
        for (k, v) in [
            ("server", p.server),
            ("dram", p.dram_per_gib),
            ("optane", p.optane_per_gb),
            ("nand", p.nand_per_gb),
            ("san", p.san_per_gb),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(LabError::config("prices", format!("{k}: {v} must be > 0")));
            }
        }
        Ok(())
    }

    fn run(cfg: &CostConfig, _env: &RunEnv) -> Result<CostResults> {
        let path = cfg.tpcc_run.join("results.json");
        if !path.exists() {
            return Err(LabError::config(
                "tpcc-run",
                format!("{} does not exist: run `nvmedb lab tpcc --case-c` first", path.display()),
            ));
        }
        let doc = read_json::<TpccConfig, TpccResults>(&path)?;
        let dir = std::fs::canonicalize(&cfg.tpcc_run).unwrap_or_else(|_| cfg.tpcc_run.clone());
        Ok(CostResults {
            tpcc_run: dir.display().to_string(),
            tpcc_setup: format!(
                "{} ({}), {} warehouses, {} terminals, {}",
                doc.config.ha.name(),
                doc.config.ha.describe(),
                doc.results.load.scale.warehouses,
                doc.config.clients,
                doc.config.log.describe()
            ),
            rows: cost_rows(&doc.results.summary, &cfg.prices)?,
        })
    }

    fn report(cfg: &CostConfig, r: &CostResults, env: &RunEnv) -> Result<Summary> {
        env.dir.write_csv("costs", &r.rows)?;
        let p = &cfg.prices;
        let mut chart = LineChart::new(
            "Server cost against TPC-C throughput (seed 000 Fig. 11)",
            "server cost (on-memory server = 1)",
            "throughput (on-memory server = 1)",
        )
        .subtitle(r.tpcc_setup.clone())
        .x_range(0.0, 1.2)
        .y_range(0.0, 1.3)
        .legend(LegendPosition::LowerRight)
        .footnote("devices EMULATED (achieved latencies in the TPC-C run's summary); SAN price assumed")
        .footnote(env.context.one_line())
        .series(
            Series::new("equal cost performance", vec![(0.0, 0.0), (1.2, 1.2)])
                .style(SeriesStyle::Dashed)
                .color(7),
        )
        .series(
            Series::new(
                "seed 000: low-latency SSD (0.51, 0.70)",
                vec![(PAPER_COST_SHARE, PAPER_THROUGHPUT_SHARE)],
            )
            .style(SeriesStyle::Markers)
            .color(6),
        );
        for (i, row) in r.rows.iter().enumerate() {
            chart = chart.series(
                Series::new(
                    format!("{} ({:.2}×)", row.name, row.cost_performance),
                    vec![(row.cost, row.relative_tps)],
                )
                .style(SeriesStyle::Markers)
                .color(i),
            );
        }
        chart.write(env.dir.path(), "cost_performance")?;
        let mut t = TextTable::new([
            "configuration",
            "hardware",
            "throughput from",
            "buffer %",
            "txn/s",
            "cost",
            "throughput",
            "cost performance",
        ])
        .title("HA server configurations for a 1.5 TB database, relative to the on-memory server");
        for row in &r.rows {
            t.row([
                row.name.clone(),
                row.hardware.clone(),
                row.device.clone(),
                format!("{}", row.buffer_pct),
                format!("{:.0}", row.tps),
                format!("{:.2}", row.cost),
                format!("{:.2}", row.relative_tps),
                format!("{:.2}", row.cost_performance),
            ]);
        }
        t.note(format!(
            "prices relative to the on-memory server: server {:.3}, DRAM {:.5}/GiB, low-latency SSD {:.5}/GB, mid-latency SSD {:.5}/GB, SAN {:.5}/GB (assumed: 2 × mid-latency)",
            p.server, p.dram_per_gib, p.optane_per_gb, p.nand_per_gb, p.san_per_gb
        ));
        let mut text = format!(
            "nvmedb lab cost — {}\nmachine: {}\nthroughput from {} ({})\n\n{}",
            Self::TITLE,
            env.context.one_line(),
            r.tpcc_run,
            r.tpcc_setup,
            t
        );
        let mut figures = Vec::new();
        if let Some(low) = r.rows.iter().find(|x| x.name == "low-latency SSD") {
            text.push_str(&format!(
                "\nlow-latency SSD at 5 % buffer over on-memory: cost {:.2} (paper {PAPER_COST_SHARE}), throughput {:.2} (paper {PAPER_THROUGHPUT_SHARE}), cost performance {:.2}× (paper {PAPER_COST_PERFORMANCE}×)\n",
                low.cost, low.relative_tps, low.cost_performance
            ));
            figures.push(
                Figure::new(
                    "cost/low_latency_cost_performance",
                    "low-latency SSD (5 % buffer) cost performance over on-memory",
                    low.cost_performance,
                    "x",
                )
                .against("seed 000 §5.4", PAPER_COST_PERFORMANCE),
            );
            figures.push(
                Figure::new(
                    "cost/low_latency_relative_tps",
                    "low-latency SSD (5 % buffer) throughput over on-memory",
                    low.relative_tps,
                    "x",
                )
                .against("seed 000 §5.4", PAPER_THROUGHPUT_SHARE),
            );
        }
        Ok(Summary { text, figures })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derived prices give back the seed's own shares: memory 77 % of (a), (b) 51 % of (a),
    /// and with the seed's 70 % throughput the seed's 1.4×.
    #[test]
    fn seed_prices_reproduce_the_seeds_shares() {
        let p = Prices::from_seed();
        let a = p.server + 1536.0 * p.dram_per_gib + 1600.0 * p.nand_per_gb;
        let b = p.server + 196.0 * p.dram_per_gib + 1500.0 * p.optane_per_gb;
        assert!((a - 1.0).abs() < 1e-9, "{a}");
        assert!((b - PAPER_COST_SHARE).abs() < 1e-9, "{b}");
        assert!((1536.0 * p.dram_per_gib - PAPER_MEMORY_SHARE).abs() < 1e-9);
        assert!(p.server > 0.0 && p.nand_per_gb > 0.0 && p.nand_per_gb < p.optane_per_gb);
        let cp = PAPER_THROUGHPUT_SHARE / b;
        assert!((cp - PAPER_COST_PERFORMANCE).abs() < 0.05, "{cp}");
    }

    #[test]
    fn rows_need_the_case_c_points() {
        let r = fake_summary(&[("nand", 100.0, 1000.0)]);
        let e = cost_rows(&r, &Prices::from_seed()).unwrap_err().to_string();
        assert!(e.contains("--case-c"), "{e}");
        let r = fake_summary(&[
            ("nand", 100.0, 1000.0),
            ("nand", 5.0, 400.0),
            ("optane", 5.0, 700.0),
            ("san", 5.0, 100.0),
            ("san", 100.0, 900.0),
        ]);
        let rows = cost_rows(&r, &Prices::from_seed()).unwrap();
        let low = rows.iter().find(|x| x.name == "low-latency SSD").unwrap();
        assert!((low.relative_tps - 0.7).abs() < 1e-9 && (low.cost - 0.51).abs() < 1e-9);
        assert!((rows[0].cost_performance - 1.0).abs() < 1e-9);
    }

    fn fake_summary(points: &[(&str, f64, f64)]) -> Vec<SummaryRow> {
        points
            .iter()
            .map(|(d, pct, tps)| {
                serde_json::from_str(&format!(
                    r#"{{"device":"{d}","device_label":"{d} (EMULATED)","ha":"HA","buffer_pct":{pct},"n":1,"tps_min":{tps},"tps_median":{tps},"tps_max":{tps},"tpmc_median":0,"relative_pct":null,"hit_ratio":1,"page_reads_per_txn":0,"log_bytes_per_txn":0,"io_us_per_read":0,"cpu_us_per_txn":0,"process_cpu_cores":0,"rollbacks":0,"deadlock_retries":0,"lock_timeout_retries":0,"p50_us":[0,0,0,0,0],"p90_us":[0,0,0,0,0],"p99_us":[0,0,0,0,0],"limit":""}}"#
                ))
                .expect("a summary row")
            })
            .collect()
    }
}
