//! `nvmedb lab tpcc`: TPC-C (the mixed workload of seeds 000, 002 and 003) across table-buffer
//! sizes, devices, log kinds and HA, with seed 000 Case C (Fig. 7) as one preset.
//!
//! Owns: [`TpccConfig`] (scale, sweep, devices, log, HA, timing), the result types and the
//! [`Tpcc`] experiment: load the database once (log off, then a checkpoint), characterise each
//! device, run every (repetition, device, buffer) point from a fresh copy of the loaded
//! database, check the consistency conditions after every point, trace one window, report.
//! Submodules: `setup` (templates, devices, opening a point single or HA), `point` (the
//! terminals of one measured point), `report` (tables, CSV, plots, the Case C comparison, the
//! trace chart), `check` (`--check DIR`). The workload itself is [`crate::workload::tpcc`].
//!
//! Invariants: every point starts from the same loaded database, copied; points are
//! interleaved (repetition → device → buffer) and summarised by min/median/max; every emulated
//! device is labelled EMULATED with the read latency iobench achieved on it in this run and the
//! one the engine saw; a point whose database fails a consistency condition fails the run.

mod check;
pub(crate) mod point;
pub(crate) mod report;
pub(crate) mod setup;

pub use check::check_dir;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
pub use crate::measure::device::LogChoice;
use crate::measure::{progress, DeviceKind};
use crate::workload::tpcc::{LoadReport, Scale};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Table page size of the experiment (see [`TpccConfig::default`] for why not the engine's).
pub const TPCC_TABLE_PAGE: usize = 4096;

/// Seed 000's TPC-C scale: 800 warehouses, 30 clients.
pub const FULL_SCALE: (u32, usize) = (800, 30);

/// Seed 000 Case C's figures (Fig. 7): HA on low-latency SSDs keeps 70 % of its 100 %-buffer
/// throughput at 5 % buffer, and runs 6.1× faster than external SAN storage and 1.4× faster
/// than mid-latency SSDs there.
pub const PAPER_SHARE_PCT: f64 = 70.0;
/// Optane over SAN at 5 % buffer in seed 000 Fig. 7.
pub const PAPER_OPTANE_OVER_SAN: f64 = 6.1;
/// Optane over NAND at 5 % buffer in seed 000 Fig. 7.
pub const PAPER_OPTANE_OVER_NAND: f64 = 1.4;

/// High availability of the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HaMode {
    /// A single database.
    Off,
    /// Eager log shipping to one standby over loopback.
    Log,
    /// Eager log shipping plus synchronous data-page mirroring (seed 000's HA configuration).
    On,
}

impl HaMode {
    /// Parses `off`, `log` and `on` (`mirror`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "off" | "no" | "single" => Some(Self::Off),
            "log" => Some(Self::Log),
            "on" | "mirror" | "yes" => Some(Self::On),
            _ => None,
        }
    }
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "single",
            Self::Log => "HA log",
            Self::On => "HA",
        }
    }
    /// What it is, for summaries.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Off => "no standby",
            Self::Log => "eager log shipping to a standby over loopback",
            Self::On => "eager log shipping and synchronous data-page mirroring to a standby over loopback (seed 000's HA)",
        }
    }
}

/// The experiment's configuration (stored in results.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TpccConfig {
    /// Warehouses.
    pub warehouses: u32,
    /// Terminals (client threads): bound round robin to a home warehouse when there are at
    /// least as many as warehouses, else drawing a warehouse per transaction.
    pub clients: usize,
    /// Use the reduced cardinalities of tests (1 000 items, 30 customers per district) instead
    /// of the specification's.
    pub reduced: bool,
    /// Table buffer sizes, % of the table data (indexes are cached in a separate pool).
    pub buffer_pcts: Vec<f64>,
    /// Devices, in the order they run within each repetition.
    pub devices: Vec<DeviceKind>,
    /// The log.
    pub log: LogChoice,
    /// HA.
    pub ha: HaMode,
    /// Warm-up per point, s.
    pub warmup_s: f64,
    /// Measured window per point, s.
    pub duration_s: f64,
    /// Repetitions of every point (interleaved).
    pub repetitions: usize,
    /// Table page size, bytes ([`TPCC_TABLE_PAGE`]).
    pub table_page_size: usize,
    /// Index page size, bytes (the engine's default, 4 KiB).
    pub index_page_size: usize,
    /// Directory on the real disk: the loaded database (kept between runs of the same scale)
    /// and the disk points.
    pub data_dir: PathBuf,
    /// Directory on tmpfs: the RAM copies the emulated devices wrap, and their standbys.
    pub ram_dir: PathBuf,
    /// Load again even if a loaded database of this scale exists.
    pub reload: bool,
    /// Seed of the load, the terminals and the emulators.
    pub seed: u64,
    /// Trace one window and draw its chart.
    pub trace: bool,
    /// Device to trace (default: optane if listed, else the first).
    pub trace_device: Option<String>,
    /// Shortest charted trace window, ms (widened until every client shows whole
    /// transactions).
    pub trace_window_ms: f64,
    /// Seconds of each iobench reference measurement per device (0 skips them).
    pub iobench_s: f64,
    /// `key=value` overrides applied to every emulated profile.
    pub profile_overrides: Vec<String>,
    /// The seed 000 Case C preset: print the optane/san and optane/nand ratios at 5 % and each
    /// device's 5 %/100 % share next to the paper's.
    pub case_c: bool,
    /// Early lock release ([`nvmedb::txn::LockOptions::early_release`]; the engine's default,
    /// on): `false` measures the engine holding every lock until its commit is durable.
    pub early_lock_release: bool,
    /// Profile every point's measured window with `perf` (a flame graph and the top functions
    /// per point; needs the `perf` command).
    #[serde(default)]
    pub profile: bool,
}

impl Default for TpccConfig {
    /// The default scale: 4 warehouses (about 400 MB of tables and 110 MB of indexes) and 4
    /// terminals, one per warehouse; buffers 5/20/100 %; disk and the optane, nand and san
    /// profiles; 2 repetitions of 1 s warm-up and 3 s measured. Table pages of 4 KiB rather
    /// than the engine's default 8 KiB: TPC-C reads rows of 60 to 700 bytes at random, and a
    /// 5 % buffer of 16 KiB pages caches a quarter as many of the hot rows (on emulated optane
    /// at 5 %, 2 warehouses: hit ratio 0.79 and 13.5 page reads per transaction with 16 KiB
    /// pages, 0.86 and 8.9 with 4 KiB).
    fn default() -> Self {
        let o = nvmedb::Options::default();
        Self {
            warehouses: 4,
            clients: 4,
            reduced: false,
            buffer_pcts: vec![5.0, 20.0, 100.0],
            devices: vec![
                DeviceKind::Disk,
                DeviceKind::Emulated("optane".into()),
                DeviceKind::Emulated("nand".into()),
                DeviceKind::Emulated("san".into()),
            ],
            log: LogChoice::Duplexed,
            ha: HaMode::Off,
            warmup_s: 1.0,
            duration_s: 3.0,
            repetitions: 2,
            table_page_size: TPCC_TABLE_PAGE,
            index_page_size: o.index_page_size,
            data_dir: PathBuf::from("nvmedb-data"),
            ram_dir: PathBuf::from("/dev/shm/nvmedb-tpcc"),
            reload: false,
            seed: 1,
            trace: true,
            trace_device: None,
            trace_window_ms: 5.0,
            iobench_s: 0.5,
            profile_overrides: Vec::new(),
            case_c: false,
            early_lock_release: o.lock_options.early_release,
            profile: false,
        }
    }
}

impl TpccConfig {
    /// Seed 000's scale: 800 warehouses (about 75 GB) and 30 clients, on the real disk only
    /// (emulated devices need the database in RAM).
    pub fn full_scale() -> Self {
        Self {
            warehouses: FULL_SCALE.0,
            clients: FULL_SCALE.1,
            devices: vec![DeviceKind::Disk],
            buffer_pcts: vec![5.0, 10.0, 25.0, 50.0, 100.0],
            warmup_s: 30.0,
            duration_s: 60.0,
            repetitions: 3,
            ..Self::default()
        }
    }

    /// Seed 000 Case C: HA (log shipping and data mirroring) on emulated optane, nand and san at
    /// 5 % and 100 % buffer.
    pub fn case_c() -> Self {
        Self {
            devices: ["optane", "nand", "san"].iter().map(|d| DeviceKind::Emulated((*d).into())).collect(),
            buffer_pcts: vec![5.0, 100.0],
            ha: HaMode::On,
            case_c: true,
            repetitions: 3,
            ..Self::default()
        }
    }

    /// The cardinalities.
    pub fn scale(&self) -> Scale {
        if self.reduced {
            Scale::reduced(self.warehouses)
        } else {
            Scale::standard(self.warehouses)
        }
    }

    /// Checks the values; errors name the field.
    pub fn validate(&self) -> Result<()> {
        self.scale().validate()?;
        if self.clients == 0 || self.repetitions == 0 {
            return Err(LabError::config("clients/repetitions", "must be at least 1"));
        }
        if self.buffer_pcts.iter().any(|&p| !(p > 0.0 && p <= 100.0)) {
            return Err(LabError::config(
                "buffers",
                format!("{:?}: need values in (0, 100]", self.buffer_pcts),
            ));
        }
        experiment::non_empty("buffers", &self.buffer_pcts)?;
        experiment::non_empty("devices", &self.devices)?;
        experiment::seconds("duration", self.duration_s, false)?;
        experiment::seconds("warmup", self.warmup_s, true)?;
        for d in &self.devices {
            if let DeviceKind::Emulated(p) = d {
                crate::measure::device::profile(p, &self.profile_overrides)?;
            }
        }
        if self.case_c && !self.buffer_pcts.contains(&5.0) {
            return Err(LabError::config("buffers", "seed 000 Case C compares the devices at 5 % buffer"));
        }
        Ok(())
    }
}

/// One measured point (one row of points.csv).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Device short name.
    pub device: String,
    /// Device label (EMULATED with achieved latency where it applies).
    pub device_label: String,
    /// `single`, `HA log` or `HA`.
    pub ha: String,
    /// Table buffer, % of table data.
    pub buffer_pct: f64,
    /// Table buffer, bytes.
    pub buffer_bytes: u64,
    /// Repetition (0-based).
    pub repetition: usize,
    /// `sweep` or `trace`.
    pub phase: String,
    /// Measured window, s.
    pub window_s: f64,
    /// Transactions completed in the window (all five types, rollbacks included).
    pub transactions: u64,
    /// Transactions per second.
    pub tps: f64,
    /// New-Orders per minute (the 1 % that roll back on an unused item included).
    pub tpmc: f64,
    /// Completed transactions per type: New-Order, Payment, Order-Status, Delivery, Stock-Level.
    pub per_type: [u64; 5],
    /// New-Orders rolled back (unused item id).
    pub rollbacks: u64,
    /// Attempts that were a deadlock's victim (retried).
    pub deadlock_retries: u64,
    /// Attempts that timed out waiting for a lock (retried).
    pub lock_timeout_retries: u64,
    /// Latency p50 per type, µs (from the first attempt to the commit).
    pub p50_us: [f64; 5],
    /// Latency p90 per type, µs.
    pub p90_us: [f64; 5],
    /// Latency p99 per type, µs.
    pub p99_us: [f64; 5],
    /// Table-buffer hit ratio in the window.
    pub hit_ratio: f64,
    /// Index-buffer hit ratio in the window.
    pub index_hit_ratio: f64,
    /// Table pages read per transaction.
    pub page_reads_per_txn: f64,
    /// Table pages written back per transaction.
    pub page_writes_per_txn: f64,
    /// Evictions per transaction that waited for a write-back on the terminal's thread (the
    /// rest found a clean victim, cleaned by the background writer).
    #[serde(default)]
    pub eviction_writes_per_txn: f64,
    /// Device wait per table-page read (read and write-back), µs: the latency the engine saw.
    pub io_us_per_read: f64,
    /// Log bytes per transaction: the log stream's growth (its records; what it keeps, ships
    /// and recovers).
    pub log_bytes_per_txn: f64,
    /// Log bytes written to the device per transaction and copy: the whole blocks each flush
    /// writes (the re-written start of its first block, zeroes after its end).
    #[serde(default)]
    pub log_device_bytes_per_txn: f64,
    /// Client CPU per transaction, µs (the terminals' threads).
    pub cpu_us_per_txn: f64,
    /// The whole process's CPU per transaction, µs (terminals, log flusher, background writer,
    /// emulated devices' pacing).
    #[serde(default)]
    pub process_cpu_us_per_txn: f64,
    /// Terminal thread CPU per transaction of each type (New-Order, Payment, Order-Status,
    /// Delivery, Stock-Level), µs.
    #[serde(default)]
    pub cpu_us_per_type: [f64; 5],
    /// Log bytes each type's transactions appended, per transaction (record headers included).
    #[serde(default)]
    pub log_bytes_per_type: [f64; 5],
    /// Log bytes per transaction by record kind (every record the engine appended in the window).
    #[serde(default)]
    pub log_bytes_by_kind: Vec<(String, f64)>,
    /// Lock waits per transaction.
    pub lock_waits_per_txn: f64,
    /// Time waiting for locks per transaction, µs.
    pub lock_wait_us_per_txn: f64,
    /// Wall time per transaction per client (clients × window ÷ transactions), µs.
    pub client_us_per_txn: f64,
    /// Process CPU in the window, cores.
    pub process_cpu_cores: f64,
    /// What limited the point (see `report::limit`).
    pub limit: String,
    /// Mean time the device's emulated operations completed past their modelled completion in
    /// the window, µs (`nvmedb::io::lateness`; 0 for a real device): the machine's share of the
    /// latency the engine saw.
    #[serde(default)]
    pub emulator_late_us: f64,
    /// Share of the device's emulated operations in the window that completed more than
    /// `nvmedb::io::LATE_THRESHOLD` late.
    #[serde(default)]
    pub emulator_late_share: f64,
}

/// What iobench achieved on one device, and the database's size there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Short name.
    pub device: String,
    /// Label (EMULATED with achieved latency where it applies).
    pub label: String,
    /// Where the points' data lived.
    pub location: String,
    /// Where the standby lived (HA only).
    pub standby_location: Option<String>,
    /// iobench: table-page random reads one at a time, p50 and mean latency, µs (0 if not run).
    pub read_qd1_p50_us: f64,
    /// Mean of the above.
    pub read_qd1_mean_us: f64,
    /// iobench: table-page random reads at queue depth 32, IOPS (0 if not run).
    pub read_qd32_iops: f64,
    /// Emulated profile parameters (None for real devices).
    pub profile: Option<Vec<(String, String)>>,
}

/// min/median/max over repetitions of one (device, buffer) point, with the medians of its
/// other measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    /// Device short name.
    pub device: String,
    /// Device label.
    pub device_label: String,
    /// HA mode.
    pub ha: String,
    /// Buffer %.
    pub buffer_pct: f64,
    /// Repetitions.
    pub n: usize,
    /// Transactions per second: min.
    pub tps_min: f64,
    /// Median.
    pub tps_median: f64,
    /// Max.
    pub tps_max: f64,
    /// Median tpmC.
    pub tpmc_median: f64,
    /// Median throughput as a share of this device's 100 % median, % (None without a 100 %
    /// point).
    pub relative_pct: Option<f64>,
    /// Median hit ratio.
    pub hit_ratio: f64,
    /// Median table-page reads per transaction.
    pub page_reads_per_txn: f64,
    /// Median log bytes per transaction.
    pub log_bytes_per_txn: f64,
    /// Median device wait per read the engine saw, µs.
    pub io_us_per_read: f64,
    /// Median CPU per transaction, µs.
    pub cpu_us_per_txn: f64,
    /// Median process CPU, cores.
    pub process_cpu_cores: f64,
    /// Rollbacks, deadlock retries and lock-timeout retries summed over the repetitions.
    pub rollbacks: u64,
    /// Deadlock retries over the repetitions.
    pub deadlock_retries: u64,
    /// Lock-timeout retries over the repetitions.
    pub lock_timeout_retries: u64,
    /// Median per-type p50, µs.
    pub p50_us: [f64; 5],
    /// Median per-type p90, µs.
    pub p90_us: [f64; 5],
    /// Median per-type p99, µs.
    pub p99_us: [f64; 5],
    /// What limited the median repetition.
    pub limit: String,
}

/// The traced window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRun {
    /// Device label.
    pub device_label: String,
    /// Buffer %.
    pub buffer_pct: f64,
    /// Throughput with the tracer on, txn/s.
    pub tps_traced: f64,
    /// The sweep's median at the same point, txn/s.
    pub tps_untraced: f64,
    /// Intervals recorded.
    pub intervals: usize,
    /// Intervals dropped (buffers full).
    pub dropped: u64,
    /// Per-kind share of the clients' time in the traced window, % (CPU, reads, write-backs,
    /// log writes, log waits, lock waits).
    pub shares_pct: Vec<(String, f64)>,
    /// Chart (PNG).
    pub chart_png: String,
}

/// Seed 000 Case C next to the paper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseC {
    /// Each device's 5 % median as a share of its 100 % median, %.
    pub share_pct: Vec<(String, f64)>,
    /// optane / san at 5 %.
    pub optane_over_san: Option<f64>,
    /// optane / nand at 5 %.
    pub optane_over_nand: Option<f64>,
}

/// Everything `results.json` holds besides context and configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TpccResults {
    /// The load (or the cached load this run reused).
    pub load: LoadReport,
    /// Table bytes and index bytes of the loaded database.
    pub table_bytes: u64,
    /// Index bytes.
    pub index_bytes: u64,
    /// Every measured point.
    pub points: Vec<PointResult>,
    /// min/median/max per (device, buffer).
    pub summary: Vec<SummaryRow>,
    /// Device references.
    pub devices: Vec<DeviceReport>,
    /// The traced window.
    pub trace: Option<TraceRun>,
    /// Seed 000 Case C, when the devices and buffers allow it.
    pub case_c: Option<CaseC>,
    /// Consistency checks passed (one per point).
    pub checks_passed: usize,
    /// The machine's load average (1 min) when the run started and when it ended: other work
    /// on a shared machine takes CPU from the terminals.
    pub load_average: (f64, f64),
    /// The CPU profiles of the measured windows (`--profile`), one per point.
    #[serde(default)]
    pub profiles: Vec<ProfileRun>,
}

/// The CPU profile of one point's measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileRun {
    /// Device label.
    pub device_label: String,
    /// Buffer %.
    pub buffer_pct: f64,
    /// Repetition.
    pub repetition: usize,
    /// Samples (perf at `measure::profile::SAMPLE_HZ` per CPU, the window only).
    pub samples: u64,
    /// The flame graph (SVG) and the folded stacks it was drawn from, file names in the run's
    /// directory.
    pub flame_svg: String,
    /// Folded stacks file.
    pub folded: String,
    /// The functions with the most self samples.
    pub top: Vec<crate::report::FunctionShare>,
    /// Self samples by engine layer or library, %.
    pub layers: Vec<(String, f64)>,
}

/// The 1-minute load average (0 if unknown).
pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// The `nvmedb lab tpcc` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Tpcc;

impl Experiment for Tpcc {
    const NAME: &'static str = "tpcc";
    const TITLE: &'static str =
        "TPC-C (seeds 000/002/003): throughput across buffer sizes, devices, log kinds and HA; seed 000 Case C";
    type Config = TpccConfig;
    type Results = TpccResults;

    fn validate(cfg: &TpccConfig) -> Result<()> {
        cfg.validate()
    }

    fn run(cfg: &TpccConfig, env: &RunEnv) -> Result<TpccResults> {
        let load_before = load_average();
        let template = setup::template(cfg, env)?;
        env.note(template.load.describe());
        let mut devices = Vec::new();
        for kind in &cfg.devices {
            devices.push(
                setup::prepare(cfg, &template, kind, env)
                    .map_err(LabError::in_part(format!("preparing {}", kind.label())))?,
            );
        }
        let total = cfg.repetitions * cfg.devices.len() * cfg.buffer_pcts.len();
        let bar = progress::bar(env.progress, total as u64, "tpcc");
        let mut points = Vec::new();
        let mut profiles = Vec::new();
        let mut n = 0u64;
        for rep in 0..cfg.repetitions {
            for dev in &devices {
                for &pct in &cfg.buffer_pcts {
                    n += 1;
                    bar.set_message(format!("{} {pct} % rep {rep}", dev.kind.name()));
                    let part = format!("{} at {pct} % (rep {rep})", dev.kind.name());
                    let name = format!("profile-{}-{pct}pct-rep{rep}", dev.kind.name());
                    let observe = point::Observe {
                        traced: false,
                        profile: cfg.profile.then(|| env.dir.file(&format!("{name}.perf.data"))),
                    };
                    let p = point::run(cfg, &template, dev, pct, rep, cfg.seed.wrapping_add(n), &observe)
                        .map_err(LabError::in_part(part.clone()))?;
                    if let Some(folded) = &p.profile {
                        profiles.push(
                            report::profile(env, &name, &dev.report.label, pct, rep, &p.result, folded)
                                .map_err(LabError::in_part(part))?,
                        );
                    }
                    bar.suspend(|| {
                        env.note(format!(
                            "tpcc: {:<22} {:>5.1} %  rep {rep}  {:>8.0} txn/s  tpmC {:>9.0}  hit {:.3}  limit: {}",
                            dev.report.label, pct, p.result.tps, p.result.tpmc, p.result.hit_ratio, p.result.limit
                        ))
                    });
                    points.push(p.result);
                    bar.inc(1);
                }
            }
        }
        bar.finish_and_clear();
        let summary = report::summarise(&points);
        let trace =
            if cfg.trace { report::trace_run(cfg, env, &template, &devices, &summary)? } else { None };
        let case_c = report::case_c(&summary);
        let checks_passed = points.len();
        setup::clean_up(cfg, &devices);
        Ok(TpccResults {
            load: template.load.clone(),
            table_bytes: template.table_bytes,
            index_bytes: template.index_bytes,
            points,
            summary,
            devices: devices.into_iter().map(|d| d.report).collect(),
            trace,
            case_c,
            checks_passed,
            load_average: (load_before, load_average()),
            profiles,
        })
    }

    fn report(cfg: &TpccConfig, r: &TpccResults, env: &RunEnv) -> Result<Summary> {
        report::write(cfg, r, env)
    }
}
