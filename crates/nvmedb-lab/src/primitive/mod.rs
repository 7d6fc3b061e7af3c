//! `nvmedb lab primitive`: the primitive select/update workload of seed 000 §4.3 (and seed 001
//! §3.3) across table-buffer sizes and devices, with the relative-performance model and trace
//! charts.
//!
//! Owns: [`PrimitiveConfig`] (scale, sweep, devices, timing), [`run`] (prepare each device's
//! data once, measure the iobench reference on it, sweep the buffer with interleaved
//! repetitions, trace a short window, write every result file) and the result types.
//! Submodules: `workload` (schema, load, clients, transactions), `output` (summary tables,
//! CSV/JSON, plots, model, trace charts).
//!
//! Invariants: every emulated device is labelled EMULATED with the latency iobench achieved on
//! that profile in the same run; each (device, buffer %, workload) point is measured
//! `repetitions` times, interleaved (rep → buffer % → workload), and summarised by min, median
//! and max; a device's data is loaded once and reused across the sweep (the database is
//! reopened with another table buffer). Until the WAL exists, UPDATE results carry
//! [`WAL_STATUS`].

pub mod output;
pub mod workload;

use crate::iobench::{self, Engine, IoBenchConfig, Pattern};
use crate::machine::RunContext;
use crate::report::{ReportError, ResultsDir};
use nvmedb::io::{
    Backend, DeviceProfile, DirStorage, EmulatedStorage, FileOptions, MemStorage, SingleOpPath, Storage,
};
use nvmedb::{BufferPolicy, BufferSize, Database, Options, Table};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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

/// An error of the primitive experiment, naming what went wrong.
#[derive(Debug)]
pub enum PrimitiveError {
    /// A bad configuration value.
    Config(String),
    /// The engine failed while doing `context`.
    Engine {
        /// What the experiment was doing.
        context: String,
        /// The engine's error.
        source: nvmedb::Error,
    },
    /// A row the workload expected is missing.
    Missing {
        /// Table name.
        table: String,
        /// The key.
        sid: i64,
    },
    /// A device benchmark (iobench or fio) failed.
    DeviceBench(String),
    /// Writing a result file failed.
    Report(ReportError),
    /// A file-system operation on the data directory failed.
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl PrimitiveError {
    /// A closure wrapping an engine error with what the experiment was doing.
    pub fn engine(context: &'static str) -> impl Fn(nvmedb::Error) -> PrimitiveError {
        move |source| PrimitiveError::Engine { context: context.to_string(), source }
    }
}

impl std::fmt::Display for PrimitiveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(d) => write!(f, "primitive: bad configuration: {d}"),
            Self::Engine { context, source } => write!(f, "primitive: {context}: {source}"),
            Self::Missing { table, sid } => write!(f, "primitive: table `{table}` has no row with SID {sid}"),
            Self::DeviceBench(d) => write!(f, "primitive: device benchmark: {d}"),
            Self::Report(e) => write!(f, "primitive: {e}"),
            Self::Io { path, source } => write!(f, "primitive: {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for PrimitiveError {}

impl From<ReportError> for PrimitiveError {
    fn from(e: ReportError) -> Self {
        Self::Report(e)
    }
}

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

/// Where a device's data lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The real disk: O_DIRECT files in the data directory.
    Disk,
    /// Plain RAM, no latency (for tests and as an in-memory reference).
    Memory,
    /// RAM behind an emulated profile.
    Emulated(String),
}

impl DeviceKind {
    /// Parses `disk`, `memory` or a built-in profile name.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "disk" | "real" => Some(Self::Disk),
            "memory" | "mem" => Some(Self::Memory),
            p if DeviceProfile::builtin(p).is_some() => Some(Self::Emulated(p.to_string())),
            _ => None,
        }
    }
    /// Short name (`disk`, `memory`, or the profile).
    pub fn name(&self) -> String {
        match self {
            Self::Disk => "disk".into(),
            Self::Memory => "memory".into(),
            Self::Emulated(p) => p.clone(),
        }
    }
    /// Name with the emulation label, for tables and legends.
    pub fn label(&self) -> String {
        match self {
            Self::Disk => "disk (real)".into(),
            Self::Memory => "memory (no device)".into(),
            Self::Emulated(p) => format!("{p} (EMULATED)"),
        }
    }
}

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
    /// Root of the results directories.
    pub results_root: PathBuf,
    /// Seed of the clients' key choices and of the emulators' jitter.
    pub seed: u64,
    /// Trace a window and draw trace charts (and measure tracing overhead).
    pub trace: bool,
    /// Device to trace (default: `optane` if in the list, else the first device).
    pub trace_device: Option<String>,
    /// Length of the charted trace window, ms.
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
    /// Show progress bars.
    pub progress: bool,
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
            results_root: PathBuf::from("results"),
            seed: 1,
            trace: true,
            trace_device: None,
            trace_window_ms: 3.0,
            iobench_s: 2.0,
            fio: true,
            profile_overrides: Vec::new(),
            app_cpu_us: 0.0,
            progress: true,
        }
    }
}

impl PrimitiveConfig {
    /// Checks the values; errors name the field.
    pub fn validate(&self) -> Result<(), PrimitiveError> {
        let bad = |s: String| Err(PrimitiveError::Config(s));
        if self.tables == 0 || self.rows_per_table == 0 || self.clients == 0 || self.repetitions == 0 {
            return bad("tables, rows_per_table, clients and repetitions must be at least 1".into());
        }
        if self.buffer_pcts.is_empty() || self.buffer_pcts.iter().any(|&p| !(p > 0.0 && p <= 100.0)) {
            return bad(format!("buffer_pcts {:?}: need values in (0, 100]", self.buffer_pcts));
        }
        if self.workloads.is_empty() || self.devices.is_empty() {
            return bad("need at least one workload and one device".into());
        }
        if !self.app_cpu_us.is_finite() || self.app_cpu_us < 0.0 {
            return bad(format!("app_cpu_us {} must be >= 0", self.app_cpu_us));
        }
        if !self.duration_s.is_finite()
            || self.duration_s <= 0.0
            || !self.warmup_s.is_finite()
            || self.warmup_s < 0.0
        {
            return bad(format!(
                "duration_s {} must be > 0 and warmup_s {} >= 0",
                self.duration_s, self.warmup_s
            ));
        }
        self.parsed_policy()?;
        for d in &self.devices {
            if let DeviceKind::Emulated(p) = d {
                self.profile(p)?;
            }
        }
        Ok(())
    }

    fn parsed_policy(&self) -> Result<BufferPolicy, PrimitiveError> {
        BufferPolicy::parse(&self.policy, 2).ok_or_else(|| {
            PrimitiveError::Config(format!("policy `{}`: expected SHR-n or SEP-n", self.policy))
        })
    }

    /// The emulated profile `name` with the configured overrides.
    pub fn profile(&self, name: &str) -> Result<DeviceProfile, PrimitiveError> {
        let mut p = DeviceProfile::builtin(name)
            .ok_or_else(|| PrimitiveError::Config(format!("unknown device profile `{name}`")))?;
        for o in &self.profile_overrides {
            p.apply_override(o).map_err(|e| PrimitiveError::Config(e.to_string()))?;
        }
        Ok(p)
    }

    /// Name of the disk database directory for this scale.
    pub fn disk_db_dir(&self) -> PathBuf {
        self.data_dir.join(format!(
            "primitive-t{}-r{}-p{}-i{}",
            self.tables, self.rows_per_table, self.table_page_size, self.index_page_size
        ))
    }

    fn options(&self, table_buffer_bytes: u64, index_buffer_bytes: u64) -> Result<Options, PrimitiveError> {
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
    /// Log bytes written per transaction in the window, KiB (0 without a log): an UPDATE's
    /// row images (before and after) and page changes, where the first change of a page after
    /// a checkpoint logs the whole page (torn-page protection).
    #[serde(default)]
    pub log_kib_per_txn: f64,
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
    /// Median log KiB per transaction.
    #[serde(default)]
    pub log_kib_per_txn: f64,
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

/// A target of issue 5 and whether this run met it.
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
    /// Issue 5 targets.
    pub targets: Vec<TargetRow>,
}

/// What [`run`] returns: the results and where they were written.
#[derive(Debug)]
pub struct PrimitiveOutcome {
    /// The results.
    pub results: PrimitiveResults,
    /// The run's results directory.
    pub dir: PathBuf,
    /// The printed summary.
    pub summary_text: String,
}

/// A device prepared for the sweep.
struct PreparedDevice {
    kind: DeviceKind,
    storage: Arc<dyn Storage>,
    /// The two copies of the write-ahead log, on the same kind of device as the data.
    logs: (Arc<dyn Storage>, Arc<dyn Storage>),
    report: DeviceReport,
}

/// Shared RAM image of the database, loaded once for `memory` and every emulated profile.
fn ram_image(
    cfg: &PrimitiveConfig,
    cache: &mut Option<(Arc<MemStorage>, f64)>,
) -> Result<(Arc<MemStorage>, f64), PrimitiveError> {
    if let Some(c) = cache {
        return Ok((c.0.clone(), 0.0));
    }
    let mem = Arc::new(MemStorage::new());
    let t0 = std::time::Instant::now();
    let db = Database::open_with_storage(mem.clone(), cfg.options(256 << 20, 256 << 20)?)
        .map_err(PrimitiveError::engine("creating the RAM database"))?;
    workload::load(&db, cfg.tables, cfg.rows_per_table, cpu_count(), cfg.progress)?;
    db.close().map_err(PrimitiveError::engine("closing the loaded RAM database"))?;
    let load_s = t0.elapsed().as_secs_f64();
    *cache = Some((mem.clone(), load_s));
    Ok((mem, load_s))
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

/// Opens (loading it first if needed) the disk database; returns its storage and load time.
fn disk_database(cfg: &PrimitiveConfig) -> Result<(Arc<dyn Storage>, f64), PrimitiveError> {
    let dir = cfg.disk_db_dir();
    let marker = dir.with_extension("loaded");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PrimitiveError::Io { path, source }
    };
    let mut load_s = 0.0;
    if cfg.reload || !marker.exists() {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        let _ = std::fs::remove_file(&marker);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let t0 = std::time::Instant::now();
        let storage: Arc<dyn Storage> = Arc::new(
            DirStorage::new(&dir, FileOptions::default())
                .map_err(|e| PrimitiveError::engine("opening the data directory")(e.into()))?,
        );
        let db = Database::open_with_storage(storage, cfg.options(256 << 20, 256 << 20)?)
            .map_err(PrimitiveError::engine("creating the disk database"))?;
        workload::load(&db, cfg.tables, cfg.rows_per_table, cpu_count(), cfg.progress)?;
        db.close().map_err(PrimitiveError::engine("closing the loaded disk database"))?;
        load_s = t0.elapsed().as_secs_f64();
        std::fs::write(&marker, format!("{} tables x {} rows\n", cfg.tables, cfg.rows_per_table))
            .map_err(io(&marker))?;
    }
    let storage: Arc<dyn Storage> = Arc::new(
        DirStorage::new(&dir, FileOptions::default())
            .map_err(|e| PrimitiveError::engine("opening the data directory")(e.into()))?,
    );
    Ok((storage, load_s))
}

/// Table and index bytes of the database in `storage`, and the table handles' sanity.
fn sizes(cfg: &PrimitiveConfig, storage: &Arc<dyn Storage>) -> Result<(u64, u64), PrimitiveError> {
    let db = Database::open_with_storage(storage.clone(), cfg.options(1 << 20, 1 << 20)?)
        .map_err(PrimitiveError::engine("opening the database to size it"))?;
    let mut table_bytes = 0;
    let mut index_bytes = 0;
    for i in 0..cfg.tables {
        let t = db.table(&workload::table_name(i)).map_err(PrimitiveError::engine("opening a table"))?;
        table_bytes +=
            t.heap_pages().map_err(PrimitiveError::engine("sizing a table"))? * cfg.table_page_size as u64;
        index_bytes +=
            db.index_pool().file_pages(t.id()).map_err(PrimitiveError::engine("sizing an index"))?
                * cfg.index_page_size as u64;
    }
    Ok((table_bytes, index_bytes))
}

fn iobench_cfg(
    cfg: &PrimitiveConfig,
    device: String,
    engine: Engine,
    depth: usize,
    threads: usize,
    size: u64,
) -> IoBenchConfig {
    IoBenchConfig {
        device,
        backing_file: None,
        profile_overrides: cfg.profile_overrides.clone(),
        profile_config: None,
        pattern: Pattern::Random,
        read_pct: 100,
        block_bytes: cfg.table_page_size,
        depth,
        threads,
        duration_s: cfg.iobench_s,
        warmup_s: (cfg.iobench_s / 4.0).min(0.5),
        size_bytes: size,
        engine,
        backend: Backend::Auto,
        single_op: SingleOpPath::Pread,
        seed: cfg.seed,
        progress: false,
        out: None,
        ..IoBenchConfig::default()
    }
}

/// Measures the device's reference numbers with iobench (and fio on the disk).
fn characterise(
    cfg: &PrimitiveConfig,
    kind: &DeviceKind,
    report: &mut DeviceReport,
) -> Result<(), PrimitiveError> {
    if cfg.iobench_s <= 0.0 || *kind == DeviceKind::Memory {
        return Ok(());
    }
    let (device, size) = match kind {
        DeviceKind::Disk => {
            let f = cfg.disk_db_dir().join("t0.heap");
            let len =
                std::fs::metadata(&f).map_err(|source| PrimitiveError::Io { path: f.clone(), source })?.len();
            let size = len / cfg.table_page_size as u64 * cfg.table_page_size as u64;
            (f.display().to_string(), size)
        }
        DeviceKind::Emulated(p) => (p.clone(), 256 << 20),
        DeviceKind::Memory => return Ok(()),
    };
    let bench = |c: IoBenchConfig| {
        iobench::run(&c).map_err(|e| PrimitiveError::DeviceBench(format!("iobench on {}: {e}", c.device)))
    };
    let qd1 = bench(iobench_cfg(cfg, device.clone(), Engine::Sync, 1, 1, size))?;
    report.read_qd1_mean_us = qd1.read_latency.mean_us;
    report.read_qd1_p50_us = qd1.read_latency.p50_us;
    report.read_qd1_p99_us = qd1.read_latency.p99_us;
    let qdc = bench(iobench_cfg(cfg, device.clone(), Engine::Sync, 1, cfg.clients, size))?;
    report.read_qd_clients_iops = qdc.iops;
    let qd32 = bench(iobench_cfg(cfg, device.clone(), Engine::Queue, 32, 1, size))?;
    report.read_qd32_iops = qd32.iops;
    if let (DeviceKind::Disk, true) = (kind, cfg.fio) {
        report.fio_read_qd32_iops = crate::fio::randread_iops(
            std::path::Path::new(&device),
            cfg.table_page_size,
            1,
            32,
            "io_uring",
            cfg.iobench_s,
        );
    }
    Ok(())
}

fn prepare(
    cfg: &PrimitiveConfig,
    kind: &DeviceKind,
    ram: &mut Option<(Arc<MemStorage>, f64)>,
) -> Result<PreparedDevice, PrimitiveError> {
    let (storage, load_s): (Arc<dyn Storage>, f64) = match kind {
        DeviceKind::Disk => disk_database(cfg)?,
        DeviceKind::Memory => {
            let (m, s) = ram_image(cfg, ram)?;
            (m, s)
        }
        DeviceKind::Emulated(p) => {
            let (m, s) = ram_image(cfg, ram)?;
            let emu = EmulatedStorage::new(m, cfg.profile(p)?, cfg.seed)
                .map_err(|e| PrimitiveError::engine("wrapping RAM in an emulated profile")(e.into()))?;
            (Arc::new(emu), s)
        }
    };
    let (table_bytes, index_bytes) = sizes(cfg, &storage)?;
    let mut report = DeviceReport {
        device: kind.name(),
        label: kind.label(),
        location: storage.location(),
        table_bytes,
        index_bytes,
        load_s,
        read_qd1_mean_us: 0.0,
        read_qd1_p50_us: 0.0,
        read_qd1_p99_us: 0.0,
        read_qd_clients_iops: 0.0,
        read_qd32_iops: 0.0,
        fio_read_qd32_iops: None,
        profile: match kind {
            DeviceKind::Emulated(p) => Some(cfg.profile(p)?.to_pairs()),
            _ => None,
        },
    };
    characterise(cfg, kind, &mut report)?;
    if let DeviceKind::Emulated(_) = kind {
        report.label = format!("{} (EMULATED, read p50 {:.1} µs)", kind.name(), report.read_qd1_p50_us);
    }
    let logs: (Arc<dyn Storage>, Arc<dyn Storage>) = match kind {
        DeviceKind::Disk => {
            let dir = cfg.disk_db_dir();
            let open = |d: std::path::PathBuf| -> Result<Arc<dyn Storage>, PrimitiveError> {
                Ok(Arc::new(
                    DirStorage::new(&d, FileOptions::default())
                        .map_err(|e| PrimitiveError::engine("opening the log directory")(e.into()))?,
                ))
            };
            (open(dir.join("wal"))?, open(dir.join("wal-mirror"))?)
        }
        DeviceKind::Memory => (Arc::new(MemStorage::new()), Arc::new(MemStorage::new())),
        DeviceKind::Emulated(p) => (
            Arc::new(EmulatedStorage::in_memory(cfg.profile(p)?, cfg.seed ^ 1)),
            Arc::new(EmulatedStorage::in_memory(cfg.profile(p)?, cfg.seed ^ 2)),
        ),
    };
    Ok(PreparedDevice { kind: kind.clone(), storage, logs, report })
}

/// An open database at one buffer size, with its tables.
struct OpenDb {
    db: Database,
    tables: Vec<Table>,
    buffer_bytes: u64,
}

fn open_at(cfg: &PrimitiveConfig, dev: &PreparedDevice, pct: f64) -> Result<OpenDb, PrimitiveError> {
    // At least 4 frames per client, so every client can hold a page while others evict.
    let min_frames = (4 * cfg.clients).max(8) as u64;
    let buffer_bytes =
        ((dev.report.table_bytes as f64 * pct / 100.0) as u64).max(cfg.table_page_size as u64 * min_frames);
    // All index pages cached: twice the index size, at least 16 MiB.
    let index_bytes = (dev.report.index_bytes * 2).max(16 << 20);
    let db = Database::open_with_storages(
        dev.storage.clone(),
        Some((dev.logs.0.clone(), dev.logs.1.clone())),
        cfg.options(buffer_bytes, index_bytes)?,
    )
    .map_err(PrimitiveError::engine("opening the database"))?;
    let tables = (0..cfg.tables)
        .map(|i| db.table(&workload::table_name(i)).map_err(PrimitiveError::engine("opening a table")))
        .collect::<Result<Vec<_>, _>>()?;
    // Index pages first (pinned), then as much of the tables as the buffer holds.
    for t in &tables {
        let _ = t.range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_| Ok(false));
    }
    workload::prewarm(&tables, cfg.rows_per_table, pct / 100.0)?;
    Ok(OpenDb { db, tables, buffer_bytes })
}

#[allow(clippy::too_many_arguments)]
fn point_result(
    cfg: &PrimitiveConfig,
    dev: &PreparedDevice,
    w: Workload,
    pct: f64,
    rep: usize,
    phase_trace: bool,
    tracing: bool,
    open: &OpenDb,
    m: &workload::PointMeasurement,
) -> PointResult {
    let per_s = |n: u64| n as f64 / m.window_s.max(1e-9);
    let ts = &m.table_stats;
    PointResult {
        device: dev.kind.name(),
        device_label: dev.report.label.clone(),
        workload: w.name().into(),
        buffer_pct: pct,
        buffer_bytes: open.buffer_bytes,
        repetition: rep,
        phase: if phase_trace { "trace".into() } else { "sweep".into() },
        tracing,
        clients: cfg.clients,
        window_s: m.window_s,
        transactions: m.transactions,
        tps: per_s(m.transactions),
        hit_ratio: ts.hit_ratio(),
        index_hit_ratio: m.index_stats.hit_ratio(),
        data_reads_per_s: per_s(ts.reads),
        data_writes_per_s: per_s(ts.writes),
        io_us_per_read: if ts.reads > 0 { ts.io_wait_ns as f64 / ts.reads as f64 / 1e3 } else { 0.0 },
        cpu_us_per_txn: if m.transactions > 0 {
            m.client_cpu_ns as f64 / m.transactions as f64 / 1e3
        } else {
            0.0
        },
        log_kib_per_txn: if m.transactions > 0 {
            m.log_bytes as f64 / m.transactions as f64 / 1024.0
        } else {
            0.0
        },
        process_cpu_cores: m.process_cpu_cores,
        latency_p50_us: m.latency_us.0,
        latency_p99_us: m.latency_us.1,
        wal: if w == Workload::Update { WAL_STATUS.into() } else { "read only (no log)".into() },
    }
}

fn plan(cfg: &PrimitiveConfig, w: Workload, seed: u64, trace_spans: bool) -> workload::PointPlan {
    workload::PointPlan {
        workload: w,
        clients: cfg.clients,
        rows: cfg.rows_per_table,
        warmup: Duration::from_secs_f64(cfg.warmup_s),
        duration: Duration::from_secs_f64(cfg.duration_s),
        seed,
        trace_spans,
        app_cpu_ns: (cfg.app_cpu_us * 1e3) as u64,
    }
}

/// Runs the whole experiment and writes its result files.
pub fn run(cfg: &PrimitiveConfig) -> Result<PrimitiveOutcome, PrimitiveError> {
    cfg.validate()?;
    let ctx = RunContext::capture();
    let dir = ResultsDir::create(&cfg.results_root, "primitive")?;
    let mut ram = None;
    let mut devices = Vec::new();
    let mut points = Vec::new();
    let total_points = cfg.devices.len() * cfg.repetitions * cfg.buffer_pcts.len() * cfg.workloads.len();
    let bar = if cfg.progress {
        indicatif::ProgressBar::new(total_points as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("sweep {pos}/{len} [{wide_bar}] eta {eta} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut point_no = 0u64;
    for kind in &cfg.devices {
        bar.set_message(format!("preparing {}", kind.label()));
        let dev = prepare(cfg, kind, &mut ram)?;
        for rep in 0..cfg.repetitions {
            for &pct in &cfg.buffer_pcts {
                let open = open_at(cfg, &dev, pct)?;
                for &w in &cfg.workloads {
                    bar.set_message(format!("{} {} {pct}% rep {rep}", dev.kind.name(), w.name()));
                    point_no += 1;
                    let m = workload::measure(
                        &open.db,
                        &open.tables,
                        &plan(cfg, w, cfg.seed.wrapping_add(point_no), false),
                        &mut |_| {},
                    )?;
                    points.push(point_result(cfg, &dev, w, pct, rep, false, false, &open, &m));
                    bar.inc(1);
                }
                open.db.close().map_err(PrimitiveError::engine("closing the database"))?;
            }
        }
        devices.push(dev);
    }
    bar.finish_and_clear();
    let traces = if cfg.trace { output::trace_runs(cfg, &dir, &devices, &mut points)? } else { Vec::new() };
    let reports: Vec<DeviceReport> = devices.iter().map(|d| d.report.clone()).collect();
    let results = output::assemble(cfg, points, reports, traces);
    let summary_text = output::write_all(cfg, &ctx, &dir, &results)?;
    let _ = dir.link_latest();
    Ok(PrimitiveOutcome { results, dir: dir.path().to_path_buf(), summary_text })
}

/// Runs the tracing measurements at one point (used by `output::trace_runs`): tracing off,
/// on, off; returns the three measurements and the trace of the traced window.
fn traced_point(
    cfg: &PrimitiveConfig,
    dev: &PreparedDevice,
    w: Workload,
    pct: f64,
    points: &mut Vec<PointResult>,
) -> Result<(f64, f64, nvmedb::trace::Trace), PrimitiveError> {
    let open = open_at(cfg, dev, pct)?;
    let mut off = Vec::new();
    let mut on = 0.0;
    let mut trace = None;
    for (i, traced) in [false, true, false].into_iter().enumerate() {
        let seed = cfg.seed.wrapping_add(1_000_000 + i as u64);
        let mut hook = |open_window: bool| {
            if !traced {
                return;
            }
            if open_window {
                nvmedb::trace::start(nvmedb::trace::TraceConfig { capacity_per_thread: 1 << 17 });
            } else {
                nvmedb::trace::stop();
            }
        };
        let m = workload::measure(&open.db, &open.tables, &plan(cfg, w, seed, traced), &mut hook)?;
        let r = point_result(cfg, dev, w, pct, i, true, traced, &open, &m);
        if traced {
            on = r.tps;
            trace = Some(nvmedb::trace::collect());
        } else {
            off.push(r.tps);
        }
        points.push(r);
    }
    open.db.close().map_err(PrimitiveError::engine("closing the database"))?;
    let off_mean = off.iter().sum::<f64>() / off.len().max(1) as f64;
    Ok((off_mean, on, trace.unwrap_or_default()))
}
