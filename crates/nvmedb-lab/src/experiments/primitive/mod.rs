//! `nvmedb lab primitive`: the primitive select/update workload of seed 000 §4.3 (and seed 001
//! §3.3) across table-buffer sizes and devices, with the relative-performance model and trace
//! charts.
//!
//! Owns: [`PrimitiveConfig`] (scale, sweep, devices, timing), the result types, and the
//! [`Primitive`] experiment: prepare each device's data once, measure the iobench reference on
//! it, sweep the buffer with interleaved repetitions, trace a window, report. Submodules:
//! `devices` (loading and characterising each device, opening it at a buffer size), `point`
//! (one measured point: the clients), `summary` (min/median/max, model, targets), `text` (the
//! printed tables), `plots`, `trace` (the traced runs and their charts). The table and the
//! transactions are [`crate::workload::primitive`].
//!
//! Invariants: every emulated device is labelled EMULATED with the latency iobench achieved on
//! that profile in the same run; each (device, buffer %, workload) point is measured
//! `repetitions` times, interleaved (rep → buffer % → workload), and summarised by min, median
//! and max; a device's data is loaded once and reused across the sweep (the database is
//! reopened with another table buffer). UPDATE results carry [`WAL_STATUS`].

mod devices;
mod plots;
mod point;
pub mod summary;
mod text;
mod trace;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::progress;
use crate::report::Figure;
use nvmedb::io::DeviceProfile;
use nvmedb::{BufferPolicy, BufferSize, Options};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How UPDATE runs today; printed in the summary and stored in every result.
pub const WAL_STATUS: &str =
    "WAL on: each UPDATE is a durable transaction (group commit on a duplexed log on the same device)";

/// The papers' buffer sweep, % of table size.
pub const DEFAULT_BUFFER_PCTS: [f64; 6] = [1.0, 5.0, 10.0, 25.0, 50.0, 100.0];

/// The papers' rows per table (5 M rows, 24 GB in all).
pub const FULL_SCALE_ROWS: u64 = 500_000;

/// Default rows per table here: 10 × 10 000 rows ≈ 480 MiB of table pages per device, which
/// loads in seconds and keeps a sweep to minutes on two cores.
pub const DEFAULT_ROWS: u64 = 10_000;

/// SELECT or UPDATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Single-row select by random SID.
    Select,
    /// Single-row update of C1 by random SID.
    Update,
}

impl Workload {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Select => "select",
            Self::Update => "update",
        }
    }
    /// Upper-case name for tables and plots.
    pub fn title(self) -> &'static str {
        match self {
            Self::Select => "SELECT",
            Self::Update => "UPDATE",
        }
    }
    /// Parses `select` or `update`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "select" => Some(Self::Select),
            "update" => Some(Self::Update),
            _ => None,
        }
    }
}

pub use crate::measure::DeviceKind;

/// The experiment's configuration (stored in results.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrimitiveConfig {
    /// Number of tables (10 in the papers).
    pub tables: usize,
    /// Rows per table (500 000 in the papers).
    pub rows_per_table: u64,
    /// Table page size, bytes (24 KiB in seed 000).
    pub table_page_size: usize,
    /// Index page size, bytes (4 KiB in seed 000).
    pub index_page_size: usize,
    /// Concurrent clients (20 in the papers).
    pub clients: usize,
    /// Table buffer sizes, % of the table size.
    pub buffer_pcts: Vec<f64>,
    /// Workloads, in the order they run at each point.
    pub workloads: Vec<Workload>,
    /// Devices, in the order they run.
    pub devices: Vec<DeviceKind>,
    /// Warm-up per point, s.
    pub warmup_s: f64,
    /// Measured window per point, s.
    pub duration_s: f64,
    /// Repetitions of every point (interleaved).
    pub repetitions: usize,
    /// Table-buffer sharing policy (SHR-n or SEP-n).
    pub policy: String,
    /// Directory of the real-disk database (must not be tmpfs for a real measurement).
    pub data_dir: PathBuf,
    /// Reload the disk database even if a matching one exists.
    pub reload: bool,
    /// Seed of the clients' key choices and of the emulators' jitter.
    pub seed: u64,
    /// Trace a window and draw trace charts (and measure tracing overhead).
    pub trace: bool,
    /// Device to trace (default: `optane` if in the list, else the first device).
    pub trace_device: Option<String>,
    /// Shortest charted trace window, ms; the chart widens it until every client shows
    /// [`trace::WHOLE_TXNS`] whole transactions (or says why one could not).
    pub trace_window_ms: f64,
    /// Seconds of each iobench reference measurement (0 skips them).
    pub iobench_s: f64,
    /// Also run fio on the real disk when it is installed.
    pub fio: bool,
    /// `key=value` overrides applied to every emulated profile (e.g. `spin_us=0`).
    pub profile_overrides: Vec<String>,
    /// Extra CPU per transaction, µs, standing in for the SQL layer and client round trip that
    /// the papers' t_cpu (100–150 µs) includes; 0 measures the engine alone.
    pub app_cpu_us: f64,
}

impl Default for PrimitiveConfig {
    fn default() -> Self {
        Self {
            tables: 10,
            rows_per_table: DEFAULT_ROWS,
            table_page_size: 24 * 1024,
            index_page_size: 4 * 1024,
            clients: 20,
            buffer_pcts: DEFAULT_BUFFER_PCTS.to_vec(),
            workloads: vec![Workload::Select, Workload::Update],
            devices: vec![
                DeviceKind::Disk,
                DeviceKind::Emulated("optane".into()),
                DeviceKind::Emulated("nand".into()),
                DeviceKind::Emulated("san".into()),
            ],
            warmup_s: 1.0,
            duration_s: 2.0,
            repetitions: 3,
            policy: "SHR-16".into(),
            data_dir: PathBuf::from("nvmedb-data"),
            reload: false,
            seed: 1,
            trace: true,
            trace_device: None,
            trace_window_ms: 3.0,
            iobench_s: 2.0,
            fio: true,
            profile_overrides: Vec::new(),
            app_cpu_us: 0.0,
        }
    }
}

impl PrimitiveConfig {
    /// A tiny scale for end-to-end tests (seconds, not minutes): 3 tables × 60 rows, 4 clients,
    /// buffers 10 % and 100 %, RAM and emulated optane, 2 repetitions of 0.1 s, no fio; data in
    /// `data_dir`.
    pub fn tiny(data_dir: PathBuf) -> Self {
        Self {
            tables: 3,
            rows_per_table: 60,
            clients: 4,
            buffer_pcts: vec![10.0, 100.0],
            devices: vec![DeviceKind::Memory, DeviceKind::Emulated("optane".into())],
            warmup_s: 0.05,
            duration_s: 0.1,
            repetitions: 2,
            data_dir,
            trace_window_ms: 1.0,
            iobench_s: 0.05,
            fio: false,
            ..Self::default()
        }
    }

    /// Checks the values; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if self.tables == 0 || self.rows_per_table == 0 || self.clients == 0 || self.repetitions == 0 {
            return Err(LabError::config("tables/rows_per_table/clients/repetitions", "must be at least 1"));
        }
        if self.buffer_pcts.is_empty() || self.buffer_pcts.iter().any(|&p| !(p > 0.0 && p <= 100.0)) {
            return Err(LabError::config(
                "buffer_pcts",
                format!("{:?}: need values in (0, 100]", self.buffer_pcts),
            ));
        }
        experiment::non_empty("workloads", &self.workloads)?;
        experiment::non_empty("devices", &self.devices)?;
        if !self.app_cpu_us.is_finite() || self.app_cpu_us < 0.0 {
            return Err(LabError::config("app_cpu_us", format!("{} must be >= 0", self.app_cpu_us)));
        }
        experiment::seconds("duration_s", self.duration_s, false)?;
        experiment::seconds("warmup_s", self.warmup_s, true)?;
        self.parsed_policy()?;
        for d in &self.devices {
            if let DeviceKind::Emulated(p) = d {
                self.profile(p)?;
            }
        }
        Ok(())
    }

    fn parsed_policy(&self) -> Result<BufferPolicy> {
        BufferPolicy::parse(&self.policy, 2)
            .ok_or_else(|| LabError::config("policy", format!("`{}`: expected SHR-n or SEP-n", self.policy)))
    }

    /// The emulated profile `name` with the configured overrides.
    pub fn profile(&self, name: &str) -> Result<DeviceProfile> {
        crate::measure::device::profile(name, &self.profile_overrides)
    }

    /// Name of the disk database directory for this scale.
    pub fn disk_db_dir(&self) -> PathBuf {
        self.data_dir.join(format!(
            "primitive-t{}-r{}-p{}-i{}",
            self.tables, self.rows_per_table, self.table_page_size, self.index_page_size
        ))
    }

    fn options(&self, table_buffer_bytes: u64, index_buffer_bytes: u64) -> Result<Options> {
        Ok(Options {
            table_page_size: self.table_page_size,
            index_page_size: self.index_page_size,
            table_buffer: BufferSize::Bytes(table_buffer_bytes),
            index_buffer: BufferSize::Bytes(index_buffer_bytes),
            policy: self.parsed_policy()?,
            pin_indexes: true,
            background_writer: None,
            create_if_missing: true,
            ..Options::default()
        })
    }
}

/// One measured point (one row of results.csv).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Device short name (`disk`, `optane`, ...).
    pub device: String,
    /// Device label with EMULATED where it applies.
    pub device_label: String,
    /// `select` or `update`.
    pub workload: String,
    /// Table buffer, % of table size.
    pub buffer_pct: f64,
    /// Table buffer, bytes.
    pub buffer_bytes: u64,
    /// Repetition number (0-based).
    pub repetition: usize,
    /// `sweep` (enters the summary) or `trace` (the tracing-cost runs).
    pub phase: String,
    /// Tracing on during the window.
    pub tracing: bool,
    /// Concurrent clients.
    pub clients: usize,
    /// Window length, s.
    pub window_s: f64,
    /// Transactions in the window.
    pub transactions: u64,
    /// Transactions per second.
    pub tps: f64,
    /// Table-buffer hit ratio achieved in the window.
    pub hit_ratio: f64,
    /// Index-buffer hit ratio achieved in the window.
    pub index_hit_ratio: f64,
    /// Table pages read per second.
    pub data_reads_per_s: f64,
    /// Table pages written per second (dirty write-backs).
    pub data_writes_per_s: f64,
    /// Device time per table-page read (read and write-back wait), µs.
    pub io_us_per_read: f64,
    /// Client thread CPU per transaction, µs (includes any emulator spinning).
    pub cpu_us_per_txn: f64,
    /// Log record bytes written per transaction in the window, KiB (0 without a log): an
    /// UPDATE's row patch (its changed bytes, before and after), commit and page changes (diffs:
    /// torn pages are repaired from the double-write area, not from page images in the log).
    #[serde(default)]
    pub log_kib_per_txn: f64,
    /// Log device bytes beyond the records per transaction, KiB: each group-commit write covers
    /// whole blocks (it re-writes the start of its first block, the end of the write before,
    /// and zeroes the rest of its last one).
    #[serde(default)]
    pub log_pad_kib_per_txn: f64,
    /// Process CPU during the window, cores.
    pub process_cpu_cores: f64,
    /// Transaction latency p50, µs.
    pub latency_p50_us: f64,
    /// Transaction latency p99, µs.
    pub latency_p99_us: f64,
    /// WAL status ([`WAL_STATUS`] for updates today).
    pub wal: String,
}

/// What iobench (and fio) achieved on one device in this run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Short name.
    pub device: String,
    /// Label (EMULATED where it applies).
    pub label: String,
    /// Where the data lived.
    pub location: String,
    /// Table bytes (heap pages × page size).
    pub table_bytes: u64,
    /// Index bytes.
    pub index_bytes: u64,
    /// Seconds spent loading (0 when reused or shared).
    pub load_s: f64,
    /// iobench: page-size random reads, one at a time: mean, p50, p99 latency (µs) and IOPS.
    pub read_qd1_mean_us: f64,
    /// p50 of the above.
    pub read_qd1_p50_us: f64,
    /// p99 of the above.
    pub read_qd1_p99_us: f64,
    /// iobench: page-size random reads with `clients` in flight (the workload's concurrency), IOPS.
    pub read_qd_clients_iops: f64,
    /// iobench: page-size random reads at queue depth 32, IOPS (fio's usual limit test).
    pub read_qd32_iops: f64,
    /// fio (io_uring, depth 32, O_DIRECT) page-size random read IOPS, when fio ran.
    pub fio_read_qd32_iops: Option<f64>,
    /// Emulated profile parameters (None for real devices).
    pub profile: Option<Vec<(String, String)>>,
}

/// min/median/max over repetitions of one (device, workload, buffer %) point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    /// Device short name.
    pub device: String,
    /// Device label.
    pub device_label: String,
    /// Workload.
    pub workload: String,
    /// Buffer %.
    pub buffer_pct: f64,
    /// Repetitions.
    pub n: usize,
    /// Throughput min, tps.
    pub tps_min: f64,
    /// Throughput median, tps.
    pub tps_median: f64,
    /// Throughput max, tps.
    pub tps_max: f64,
    /// Median throughput relative to this device's 100 % median, % (None without a 100 % point).
    pub relative_pct: Option<f64>,
    /// Median hit ratio.
    pub hit_ratio: f64,
    /// Median table-page reads per second.
    pub data_reads_per_s: f64,
    /// Median write-backs per second.
    pub data_writes_per_s: f64,
    /// Median device time per read, µs.
    pub io_us_per_read: f64,
    /// Median CPU per transaction, µs.
    pub cpu_us_per_txn: f64,
    /// Median log record KiB per transaction.
    #[serde(default)]
    pub log_kib_per_txn: f64,
    /// Median log device KiB beyond the records per transaction (whole-block writes).
    #[serde(default)]
    pub log_pad_kib_per_txn: f64,
    /// Median p99 latency, µs.
    pub latency_p99_us: f64,
}

/// The model's inputs and outcome for one (device, workload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRow {
    /// Device label.
    pub device_label: String,
    /// Workload.
    pub workload: String,
    /// t_cpu: client CPU per transaction at 100 % buffer (no I/O), µs.
    pub t_cpu_us: f64,
    /// t_io: device time per table-page read at the smallest buffer, µs.
    pub t_io_us: f64,
    /// Hit ratio at the smallest buffer.
    pub hit_ratio: f64,
    /// Model (t_cpu + t_mem)/(t_cpu + t_io), %.
    pub model_pct: f64,
    /// Model at the achieved hit ratio, %.
    pub model_at_hit_ratio_pct: f64,
    /// Measured smallest-buffer / 100 % throughput, %.
    pub measured_pct: f64,
    /// The device's unloaded page-read latency (iobench QD1 mean in this run), µs; 0 if not
    /// measured.
    pub t_io_device_us: f64,
    /// Model with `t_io_device_us` as t_io, % (None without an iobench measurement).
    pub model_device_pct: Option<f64>,
}

/// Throughput with and without the tracer at one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRun {
    /// Device label.
    pub device_label: String,
    /// Workload.
    pub workload: String,
    /// Buffer %.
    pub buffer_pct: f64,
    /// Mean throughput of the untraced runs around the traced one, tps.
    pub tps_tracing_off: f64,
    /// Throughput with tracing on, tps.
    pub tps_tracing_on: f64,
    /// Intervals recorded.
    pub intervals: usize,
    /// Intervals dropped (buffers full).
    pub dropped: u64,
    /// Model inputs from the trace: exclusive CPU per data read, µs.
    pub trace_t_cpu_us: Option<f64>,
    /// Model inputs from the trace: I/O time per data read, µs.
    pub trace_t_io_us: Option<f64>,
    /// Chart files (PNG).
    pub chart_png: String,
}

/// A target of seed 000 Fig. 5 and whether this run met it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetRow {
    /// Device label.
    pub device_label: String,
    /// Workload.
    pub workload: String,
    /// Smallest / 100 % median throughput, %.
    pub measured_pct: f64,
    /// Target, % (None: report only).
    pub target_pct: Option<f64>,
    /// The paper's value on a comparable device, %.
    pub paper_pct: Option<f64>,
    /// Device reads/s achieved at the smallest buffer as a share of the page-size QD32 limit, %.
    pub iops_share_of_limit_pct: Option<f64>,
    /// The most of the 100 % throughput the smallest buffer could keep if the device's
    /// page-size read rate measured in the run (fio or iobench at QD32) were the only limit:
    /// limit ÷ (100 % throughput × table-page reads per transaction at the smallest buffer),
    /// capped at 100, %. A target above it cannot be met on this device, however fast the
    /// engine.
    #[serde(default)]
    pub device_ceiling_pct: Option<f64>,
}

/// Everything `results.json` holds besides context and configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrimitiveResults {
    /// [`WAL_STATUS`].
    pub wal: String,
    /// Every measured point.
    pub points: Vec<PointResult>,
    /// min/median/max per point.
    pub summary: Vec<SummaryRow>,
    /// Device references measured in the run.
    pub devices: Vec<DeviceReport>,
    /// Model vs measured.
    pub model: Vec<ModelRow>,
    /// Tracing runs.
    pub traces: Vec<TraceRun>,
    /// Seed 000 Fig. 5 targets.
    pub targets: Vec<TargetRow>,
}

/// The `nvmedb lab primitive` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Primitive;

impl Experiment for Primitive {
    const NAME: &'static str = "primitive";
    const TITLE: &'static str =
        "seed 000/001 primitive workload: single-row SELECT/UPDATE across buffer sizes and devices";
    type Config = PrimitiveConfig;
    type Results = PrimitiveResults;

    fn validate(cfg: &PrimitiveConfig) -> Result<()> {
        cfg.validate()
    }

    fn run(cfg: &PrimitiveConfig, env: &RunEnv) -> Result<PrimitiveResults> {
        let mut ram = None;
        let mut devices = Vec::new();
        let mut points = Vec::new();
        let total = cfg.devices.len() * cfg.repetitions * cfg.buffer_pcts.len() * cfg.workloads.len();
        let bar = progress::bar(env.progress, total as u64, "sweep");
        let mut point_no = 0u64;
        for kind in &cfg.devices {
            bar.set_message(format!("preparing {}", kind.label()));
            let dev = devices::prepare(cfg, kind, &mut ram, env.progress)
                .map_err(LabError::in_part(format!("preparing {}", kind.label())))?;
            for rep in 0..cfg.repetitions {
                for &pct in &cfg.buffer_pcts {
                    let open = devices::open_at(cfg, &dev, pct)?;
                    for &w in &cfg.workloads {
                        bar.set_message(format!("{} {} {pct}% rep {rep}", dev.kind.name(), w.name()));
                        point_no += 1;
                        let plan = point::plan(cfg, w, cfg.seed.wrapping_add(point_no), false);
                        let m = point::measure(&open.db, &open.tables, &plan, &mut ()).map_err(
                            LabError::in_part(format!("{} {} at {pct} %", dev.kind.name(), w.name())),
                        )?;
                        points.push(point::result(cfg, &dev, w, pct, rep, point::Phase::Sweep, &open, &m));
                        bar.inc(1);
                    }
                    open.db.close().map_err(LabError::engine("closing the database"))?;
                }
            }
            devices.push(dev);
        }
        bar.finish_and_clear();
        let traces = if cfg.trace { trace::trace_runs(cfg, env, &devices, &mut points)? } else { Vec::new() };
        let reports: Vec<DeviceReport> = devices.into_iter().map(|d| d.report).collect();
        Ok(summary::assemble(points, reports, traces))
    }

    fn report(cfg: &PrimitiveConfig, r: &PrimitiveResults, env: &RunEnv) -> Result<Summary> {
        env.dir.write_csv("results", &r.points)?;
        env.dir.write_csv("summary", &r.summary)?;
        plots::write(cfg, &env.context, &env.dir, r)?;
        Ok(Summary { text: text::summary_text(cfg, &env.context, r), figures: figures(r) })
    }
}

/// The headline figures: every device's smallest-buffer share of its 100 % throughput (with the
/// seed's target or the device ceiling as reference), and the 100 % throughput itself.
fn figures(r: &PrimitiveResults) -> Vec<Figure> {
    let mut out = Vec::new();
    for t in &r.targets {
        let dev = r
            .devices
            .iter()
            .find(|d| d.label == t.device_label)
            .map_or(t.device_label.as_str(), |d| &d.device);
        let mut f = Figure::new(
            format!("{}/{}/smallest_over_full_pct", t.workload, dev),
            format!(
                "{} at the smallest buffer on {}, % of its 100 % throughput",
                t.workload.to_uppercase(),
                t.device_label
            ),
            t.measured_pct,
            "%",
        );
        if let Some(target) = t.target_pct {
            f = f.against("seed 000 Fig. 5 target", target);
        } else if let Some(c) = t.device_ceiling_pct {
            f = f.against("device ceiling (its QD32 page-read rate as the only limit)", c);
        }
        out.push(f);
    }
    for s in r.summary.iter().filter(|s| s.buffer_pct == 100.0) {
        out.push(Figure::repeated(
            format!("{}/{}/tps_at_100pct", s.workload, s.device),
            format!("{} at 100 % buffer on {}", s.workload.to_uppercase(), s.device_label),
            crate::measure::Spread { min: s.tps_min, median: s.tps_median, max: s.tps_max },
            "tps",
        ));
    }
    out
}
