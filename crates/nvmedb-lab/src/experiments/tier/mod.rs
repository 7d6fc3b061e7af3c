//! `nvmedb lab tier`: TPC-C with its nine tables placed on storage tiers (seed 003 Figs. 4 and
//! 6): all on an emulated HDD, NAND SSD, Optane SSD or in DRAM, seed 003's hybrid
//! configurations H1–H5, the placement advisor's choice, and the real disk; throughput, the
//! database's cost and throughput per cost, with the advisor's predicted throughput next to the
//! measured one.
//!
//! Owns: [`TierConfig`], the result types and the [`Tier`] experiment. A run loads (or reuses)
//! the TPC-C database of `nvmedb lab tpcc`, measures each emulated tier with iobench, runs the
//! all-DRAM configuration first (its per-table access statistics are the advisor's workload),
//! asks the advisor (`crate::advisor`) for the best throughput per cost, then runs every other
//! configuration: a fresh copy of the database whose tables are moved into tablespaces on the
//! emulated tiers while it is open (`Database::move_table`), measured by the TPC-C experiment's
//! terminals. Submodules: `place` (the configurations and opening a placed point), `report`.
//!
//! Invariants: every configuration starts from the same loaded database and uses the same
//! buffer, log device and terminals, so only where the tables live differs; every emulated tier
//! is labelled EMULATED with the read latency iobench achieved on it in the run; the
//! consistency conditions are checked after every point; the paper's figures are printed next
//! to ours, never instead.

mod place;
mod report;

pub use place::{hybrid, CONFIG_NAMES, TIER_NAMES};

use crate::advisor::{self, Prediction, TableLoad, Workload};
use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::experiments::tpcc::{self, setup, PointResult, TpccConfig};
use crate::measure::{progress, DeviceKind, Spread};
use crate::workload::tpcc::schema::TABLE_NAMES;
use crate::workload::tpcc::LoadReport;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Seed 003 Fig. 4: H1 runs about 20× faster than all-HDD.
pub const PAPER_H1_OVER_HDD: f64 = 20.0;
/// Seed 003 Fig. 4: DRAM runs up to 24× faster than HDD.
pub const PAPER_DRAM_OVER_HDD: f64 = 24.0;
/// Seed 003 Fig. 4: the SSD (Optane) runs 7× faster than HDD.
pub const PAPER_SSD_OVER_HDD: f64 = 7.0;
/// Seed 003 §4.3: H1's cost-benefit is 6 where DRAM's is 4 (1.5×).
pub const PAPER_H1_OVER_DRAM_PER_COST: f64 = 1.5;

/// The experiment's configuration (stored in results.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TierConfig {
    /// Warehouses.
    pub warehouses: u32,
    /// Terminals (client threads).
    pub clients: usize,
    /// The reduced cardinalities of tests.
    pub reduced: bool,
    /// Table buffer, % of the table data (indexes are cached in their own pool).
    pub buffer_pct: f64,
    /// Configurations to run ([`CONFIG_NAMES`]).
    pub configs: Vec<String>,
    /// Emulated profile of the log's device (the same for every configuration).
    pub log_device: String,
    /// Warm-up per point, s.
    pub warmup_s: f64,
    /// Measured window per point, s.
    pub duration_s: f64,
    /// Repetitions of every configuration (interleaved).
    pub repetitions: usize,
    /// Table page size, bytes.
    pub table_page_size: usize,
    /// Index page size, bytes.
    pub index_page_size: usize,
    /// Directory on the real disk: the loaded database and the disk configuration's points.
    pub data_dir: PathBuf,
    /// Directory on tmpfs: the RAM copies the tiers are emulated over.
    pub ram_dir: PathBuf,
    /// Load again even if a loaded database of this scale exists.
    pub reload: bool,
    /// Seed of the load, the terminals and the emulators.
    pub seed: u64,
    /// Seconds of each iobench measurement per tier.
    pub iobench_s: f64,
    /// `key=value` overrides applied to every emulated profile.
    pub profile_overrides: Vec<String>,
    /// Price per GB of each tier (`hdd`, `nand`, `optane`, `dram`, and `disk` for the real disk).
    pub prices: Vec<(String, f64)>,
    /// The advisor's budget for the database's cost (`None`: no limit).
    pub budget: Option<f64>,
}

impl Default for TierConfig {
    /// 4 warehouses and 4 terminals (the TPC-C experiment's default database), a table buffer of
    /// 2.5 % (seed 003 ran PostgreSQL's default 128 MB buffer on a 5 GB database), the log on an
    /// emulated Optane SSD in every configuration, 1 s warm-up and 4 s measured, one repetition:
    /// a few minutes.
    fn default() -> Self {
        let t = TpccConfig::default();
        let mut prices: Vec<(String, f64)> =
            advisor::SEED_PRICES.iter().map(|(n, p)| ((*n).to_string(), *p)).collect();
        prices.push(("disk".into(), advisor::seed_price("nand").unwrap_or(8.0)));
        Self {
            warehouses: t.warehouses,
            clients: t.clients,
            reduced: false,
            buffer_pct: 2.5,
            configs: CONFIG_NAMES.iter().map(|s| (*s).to_string()).collect(),
            log_device: "optane".into(),
            warmup_s: 1.0,
            duration_s: 4.0,
            repetitions: 1,
            table_page_size: t.table_page_size,
            index_page_size: t.index_page_size,
            data_dir: t.data_dir,
            ram_dir: PathBuf::from("/dev/shm/nvmedb-tier"),
            reload: false,
            seed: 1,
            iobench_s: 0.5,
            profile_overrides: Vec::new(),
            prices,
            budget: None,
        }
    }
}

impl TierConfig {
    /// Seed 003's scale: TPC-C scale factor 50 (50 warehouses, about 5 GB), 5 s warm-up; we
    /// measure 60 s and repeat three times (the paper averaged ten runs).
    pub fn paper_scale() -> Self {
        Self {
            warehouses: 50,
            clients: 10,
            warmup_s: 5.0,
            duration_s: 60.0,
            repetitions: 3,
            ..Self::default()
        }
    }

    /// The TPC-C experiment's configuration this run shares its database, terminals and
    /// options with.
    pub fn tpcc(&self) -> TpccConfig {
        let mut devices = vec![DeviceKind::Emulated(self.log_device.clone())];
        if self.configs.iter().any(|c| c == "disk") {
            devices.push(DeviceKind::Disk);
        }
        TpccConfig {
            warehouses: self.warehouses,
            clients: self.clients,
            reduced: self.reduced,
            buffer_pcts: vec![self.buffer_pct],
            devices,
            warmup_s: self.warmup_s,
            duration_s: self.duration_s,
            repetitions: self.repetitions,
            table_page_size: self.table_page_size,
            index_page_size: self.index_page_size,
            data_dir: self.data_dir.clone(),
            ram_dir: self.ram_dir.clone(),
            reload: self.reload,
            seed: self.seed,
            trace: false,
            iobench_s: self.iobench_s,
            profile_overrides: self.profile_overrides.clone(),
            ..TpccConfig::default()
        }
    }

    /// The price per GB of tier `name`.
    pub fn price(&self, name: &str) -> Result<f64> {
        self.prices
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, p)| *p)
            .ok_or_else(|| LabError::config("prices", format!("no price for tier `{name}`")))
    }

    /// Checks the values; errors name the field.
    pub fn validate(&self) -> Result<()> {
        self.tpcc().validate()?;
        experiment::non_empty("configs", &self.configs)?;
        experiment::known_parts("configs", &self.configs, &CONFIG_NAMES)?;
        if !self.configs.iter().any(|c| c == "all-dram") {
            return Err(LabError::config(
                "configs",
                "all-dram must run: its access statistics are the advisor's workload",
            ));
        }
        crate::measure::device::profile(&self.log_device, &self.profile_overrides)
            .map_err(|_| LabError::config("log-device", format!("unknown profile `{}`", self.log_device)))?;
        for t in TIER_NAMES.iter().chain(std::iter::once(&"disk")) {
            let p = self.price(t)?;
            if !(p.is_finite() && p > 0.0) {
                return Err(LabError::config("prices", format!("{t}: {p} per GB must be > 0")));
            }
        }
        if self.budget.is_some_and(|b| !(b.is_finite() && b > 0.0)) {
            return Err(LabError::config("budget", "must be > 0"));
        }
        Ok(())
    }
}

/// A tier as this run measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierDevice {
    /// Short name (`hdd`, `nand`, `optane`, `dram`, `disk`).
    pub name: String,
    /// Label (EMULATED with the achieved read latency where it applies).
    pub label: String,
    /// iobench random page reads one at a time: p50, µs.
    pub read_p50_us: f64,
    /// Their mean, µs (the advisor's read latency).
    pub read_mean_us: f64,
    /// iobench queue depth 32: IOPS.
    pub read_qd32_iops: f64,
    /// Write latency, µs (the profile's; the disk's: its read mean).
    pub write_us: f64,
    /// The advisor's IOPS limit (a one-arm disk: 1 / latency; else none).
    pub iops_limit: Option<f64>,
    /// Price per GB.
    pub price_per_gb: f64,
}

impl TierDevice {
    /// The advisor's view of this tier.
    pub fn as_advisor_tier(&self) -> advisor::Tier {
        advisor::Tier {
            name: self.name.clone(),
            read_us: self.read_mean_us,
            write_us: self.write_us,
            price_per_gb: self.price_per_gb,
            capacity_bytes: None,
            iops: self.iops_limit,
        }
    }
}

/// One configuration's measurements and prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    /// Name ([`CONFIG_NAMES`]).
    pub name: String,
    /// How the placement was chosen.
    pub how: String,
    /// Tier per table, in TPC-C's table order.
    pub placement: Vec<(String, String)>,
    /// Every repetition's point.
    pub points: Vec<PointResult>,
    /// Throughput over the repetitions, txn/s.
    pub tps: Spread,
    /// The database's cost (tables and indexes at their tiers' prices per GB).
    pub cost: f64,
    /// Median throughput per cost.
    pub tps_per_cost: f64,
    /// The advisor's prediction for this placement.
    pub predicted: Prediction,
    /// (predicted − measured) / measured, %.
    pub error_pct: f64,
}

/// Everything `results.json` holds besides context and configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierResults {
    /// The load (or the cached load this run reused).
    pub load: LoadReport,
    /// Table bytes.
    pub table_bytes: u64,
    /// Index bytes.
    pub index_bytes: u64,
    /// The tiers as measured.
    pub devices: Vec<TierDevice>,
    /// The log's device label.
    pub log_label: String,
    /// The advisor's workload (from the all-DRAM configuration's first repetition).
    pub workload: Workload,
    /// Every configuration run, in run order.
    pub configs: Vec<ConfigResult>,
    /// Consistency checks passed (one per point).
    pub checks_passed: usize,
    /// The machine's 1-minute load average at the start and the end.
    pub load_average: (f64, f64),
}

impl TierResults {
    /// The configuration called `name`.
    pub fn config(&self, name: &str) -> Option<&ConfigResult> {
        self.configs.iter().find(|c| c.name == name)
    }
}

/// The advisor's workload from one measured point: per-table device reads, write-backs and page
/// accesses per transaction (in TPC-C's table order), sizes, and the time per transaction that
/// is not device I/O (`clients / throughput` less the I/O the model charges on the point's
/// placement `placed`).
pub fn workload_of(
    point: &PointResult,
    tables: &[nvmedb::TableAccess],
    clients: usize,
    tiers: &[advisor::Tier],
    placed: &[usize],
) -> Result<Workload> {
    let txns = point.transactions.max(1) as f64;
    let loads = TABLE_NAMES
        .iter()
        .map(|name| {
            let t = tables.iter().find(|t| t.table == *name).ok_or_else(|| LabError::Inconsistent {
                what: "the access statistics".into(),
                detail: format!("no statistics for table `{name}`"),
            })?;
            Ok(TableLoad {
                name: t.table.clone(),
                bytes: t.heap_pages * t.heap_page_size + t.index_pages * t.index_page_size,
                reads_per_txn: (t.heap.reads + t.index.reads) as f64 / txns,
                writes_per_txn: (t.heap.writes + t.index.writes) as f64 / txns,
                accesses_per_txn: (t.heap.hits + t.heap.misses + t.index.hits + t.index.misses) as f64 / txns,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut w = Workload { t_cpu_us: 0.0, clients: clients as u32, cores: clients as u32, tables: loads };
    let io = advisor::predict(&w, tiers, placed).io_us;
    let per_client_us = clients as f64 * 1e6 / point.tps.max(1e-9);
    w.t_cpu_us = (per_client_us - io).max(1.0);
    Ok(w)
}

/// The `nvmedb lab tier` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Tier;

impl Experiment for Tier {
    const NAME: &'static str = "tier";
    const TITLE: &'static str =
        "TPC-C on storage tiers (seed 003 Figs. 4 and 6): all-HDD/NAND/Optane/DRAM, H1-H5, the advisor's placement, the real disk; throughput, cost, throughput per cost, predicted vs measured";
    type Config = TierConfig;
    type Results = TierResults;

    fn validate(cfg: &TierConfig) -> Result<()> {
        cfg.validate()
    }

    fn run(cfg: &TierConfig, env: &RunEnv) -> Result<TierResults> {
        let load_before = tpcc::load_average();
        let tc = cfg.tpcc();
        let template = setup::template(&tc, env)?;
        env.note(template.load.describe());
        let (devices, disk_dev) = place::measure_tiers(cfg, &tc, &template, env)?;
        let tiers: Vec<advisor::Tier> =
            devices.iter().filter(|d| d.name != "disk").map(TierDevice::as_advisor_tier).collect();
        let log_label = format!(
            "{} (EMULATED; the log of every configuration but disk)",
            devices
                .iter()
                .find(|d| d.name == cfg.log_device)
                .map_or(cfg.log_device.clone(), |d| d.label.clone())
        );
        let order: Vec<String> = std::iter::once("all-dram".to_string())
            .chain(cfg.configs.iter().filter(|c| *c != "all-dram").cloned())
            .collect();
        let bar = progress::bar(env.progress, (cfg.repetitions * order.len()) as u64, "tier");
        let mut runs: Vec<(String, String, Vec<usize>, Vec<PointResult>)> = Vec::new();
        let mut workload: Option<Workload> = None;
        let mut n = 0u64;
        for rep in 0..cfg.repetitions {
            for name in &order {
                n += 1;
                let (how, placement) = match &workload {
                    None => place::fixed(name).ok_or_else(|| LabError::Inconsistent {
                        what: "the tier configurations".into(),
                        detail: format!("{name} needs the advisor's workload"),
                    })?,
                    Some(w) => place::choose(name, w, &tiers, cfg.budget)?,
                };
                bar.set_message(format!("{name} rep {rep}"));
                let seed = cfg.seed.wrapping_add(n);
                let out =
                    place::run_point(cfg, &tc, &template, name, &placement, disk_dev.as_ref(), rep, seed)
                        .map_err(LabError::in_part(format!("configuration {name} (rep {rep})")))?;
                if workload.is_none() {
                    workload = Some(workload_of(&out.result, &out.tables, cfg.clients, &tiers, &placement)?);
                }
                bar.suspend(|| {
                    env.note(format!(
                        "tier: {name:<11} rep {rep}  {:>8.0} txn/s  hit {:.3}  reads/txn {:.2}  limit: {}",
                        out.result.tps, out.result.hit_ratio, out.result.page_reads_per_txn, out.result.limit
                    ))
                });
                match runs.iter_mut().find(|r| r.0 == *name) {
                    Some(r) => r.3.push(out.result),
                    None => runs.push((name.clone(), how, placement, vec![out.result])),
                }
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        place::clean_up(cfg, disk_dev.as_ref());
        let workload = workload.ok_or_else(|| LabError::Inconsistent {
            what: "the tier run".into(),
            detail: "no all-DRAM point measured".into(),
        })?;
        let checks_passed = runs.iter().map(|r| r.3.len()).sum();
        let disk = devices.iter().find(|d| d.name == "disk").map(TierDevice::as_advisor_tier);
        let configs = runs
            .into_iter()
            .map(|(name, how, placement, points)| {
                report::config_result(&workload, &tiers, disk.as_ref(), name, how, &placement, points)
            })
            .collect();
        Ok(TierResults {
            load: template.load.clone(),
            table_bytes: template.table_bytes,
            index_bytes: template.index_bytes,
            devices,
            log_label,
            workload,
            configs,
            checks_passed,
            load_average: (load_before, tpcc::load_average()),
        })
    }

    fn report(cfg: &TierConfig, r: &TierResults, env: &RunEnv) -> Result<Summary> {
        report::write(cfg, r, env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_validate() {
        let c = TierConfig::default();
        c.validate().unwrap();
        assert_eq!(c.tpcc().buffer_pcts, [2.5]);
        let bad = TierConfig { configs: vec!["H9".into()], ..TierConfig::default() };
        assert!(bad.validate().unwrap_err().to_string().starts_with("configs"));
        let no_dram = TierConfig { configs: vec!["H1".into()], ..TierConfig::default() };
        assert!(no_dram.validate().unwrap_err().to_string().contains("all-dram"));
        let mut priced = TierConfig::default();
        priced.prices.push(("hdd".into(), 3.0));
        assert_eq!(priced.price("hdd").unwrap(), 3.0, "the last price given wins");
        priced.prices.push(("nand".into(), -1.0));
        assert!(priced.validate().is_err());
    }
}
