//! The `nvmedb` command: a thin layer over `nvmedb-lab` and the engine.

use clap::{Args, Parser, Subcommand};
use nvmedb::io::{Backend, SingleOpPath};
use nvmedb_lab::iobench::{self, Engine, IoBenchConfig, Pattern};
use nvmedb_lab::primitive::{self, DeviceKind, PrimitiveConfig, Workload};
use std::path::PathBuf;

/// nvmedb: a storage engine for microsecond-latency NVMe storage, and its laboratory.
#[derive(Parser, Debug)]
#[command(name = "nvmedb", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Print facts about this machine as the lab records them.
    Machine,
    /// An fio-like micro-benchmark of a file (O_DIRECT) or an emulated device profile.
    Iobench(Box<IobenchArgs>),
    /// Laboratory experiments.
    #[command(subcommand)]
    Lab(LabCommand),
    /// Show a database's catalog and page counts, or decode one page.
    Inspect(InspectArgs),
    /// Run a standby: receive a primary's log, persist and apply it, until promoted.
    Standby(StandbyArgs),
    /// Promote the standby at an address: it bumps the epoch, fences the old primary's
    /// synchronous set, takes what a fenced standby has beyond it, finishes redo, undoes losers
    /// and closes cleanly (its directory then opens as an ordinary database).
    Promote(PromoteArgs),
    /// Show a standby's replication status (role, epoch, positions, counters).
    Status(AdminArgs),
}

/// Flags of `nvmedb standby`.
#[derive(Args, Debug)]
struct StandbyArgs {
    /// Address to listen on (loopback by default; give e.g. 0.0.0.0:7700 to accept other hosts).
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: String,
    /// The standby's database directory.
    #[arg(long)]
    data: PathBuf,
    /// File holding the shared secret.
    #[arg(long)]
    secret_file: PathBuf,
    /// Seed the data directory from this (closed) primary database first. Without it, an
    /// empty directory takes a base backup from the primary when it connects, and a former
    /// primary's directory rejoins as a standby.
    #[arg(long)]
    seed_from: Option<PathBuf>,
    /// Do not apply redo continuously (data-page mirroring mode: pages arrive written).
    #[arg(long)]
    no_apply: bool,
    /// Seconds between status lines.
    #[arg(long, default_value_t = 10.0)]
    status_every: f64,
}

/// Flags of `nvmedb promote` and `nvmedb status`.
#[derive(Args, Debug)]
struct AdminArgs {
    /// The standby's address.
    #[arg(long, default_value = "127.0.0.1:7700")]
    addr: String,
    /// File holding the shared secret.
    #[arg(long)]
    secret_file: PathBuf,
}

/// Flags of `nvmedb promote`.
#[derive(Args, Debug)]
struct PromoteArgs {
    #[command(flatten)]
    admin: AdminArgs,
    /// Promote even if too few standbys of the old synchronous set can be fenced: only when the
    /// old primary is known to be down (it could otherwise still acknowledge commits).
    #[arg(long)]
    force: bool,
}

fn run_standby(a: &StandbyArgs) -> Result<(), String> {
    use nvmedb::repl::{read_secret, seed_standby, Standby, StandbyConfig};
    let secret = read_secret(&a.secret_file).map_err(|e| e.to_string())?;
    if let Some(p) = &a.seed_from {
        seed_standby(p, &a.data).map_err(|e| e.to_string())?;
        println!("seeded {} from {}", a.data.display(), p.display());
    }
    let sb = Standby::start(StandbyConfig {
        listen: a.listen.clone(),
        data_dir: a.data.clone(),
        secret,
        apply: !a.no_apply,
        options: nvmedb::Options::default(),
    })
    .map_err(|e| e.to_string())?;
    println!("standby listening on {} for {}", sb.addr(), a.data.display());
    let every = std::time::Duration::from_secs_f64(a.status_every.max(0.1));
    let mut last = std::time::Instant::now();
    loop {
        if let Some(r) = sb.promotion() {
            println!(
                "promoted: epoch {}, log end {}, redo {} pages, {} unfinished transactions undone; fenced {:?}; took {:?}; {} now opens as a primary",
                r.epoch,
                r.log_end,
                r.recovery.pages_redone,
                r.recovery.losers,
                r.fenced,
                r.taken,
                a.data.display()
            );
            for n in &r.notes {
                println!("note: {n}");
            }
            sb.shutdown();
            return Ok(());
        }
        if last.elapsed() >= every {
            print!("{}", sb.status());
            last = std::time::Instant::now();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Flags of `nvmedb inspect`.
#[derive(Args, Debug)]
struct InspectArgs {
    /// Database directory.
    dir: PathBuf,
    /// Table whose page to decode (with --heap-page or --index-page).
    #[arg(long)]
    table: Option<String>,
    /// Decode this page of the table's heap file.
    #[arg(long)]
    heap_page: Option<u64>,
    /// Decode this page of the table's index file.
    #[arg(long)]
    index_page: Option<u64>,
    /// Decode the write-ahead log (segments and records).
    #[arg(long)]
    log: bool,
    /// With --log: the LSN of the first record to show.
    #[arg(long)]
    from: Option<u64>,
    /// With --log: how many records to show.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// With --log: the log mirror directory (default <dir>/wal-mirror).
    #[arg(long)]
    log_mirror_dir: Option<PathBuf>,
}

/// Writes a lab report as JSON (default `results/<name>-<time>.json`) and says where.
fn save_report<T: serde::Serialize>(
    out: Option<PathBuf>,
    name: &str,
    report: &T,
    context: &nvmedb_lab::machine::RunContext,
) -> Result<(), String> {
    let path =
        out.unwrap_or_else(|| PathBuf::from(format!("results/{name}-{}.json", context.started_unix_s)));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    std::fs::write(&path, json).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("machine: {}", context.one_line());
    println!("result file: {}", path.display());
    Ok(())
}

fn inspect(a: &InspectArgs) -> Result<String, String> {
    use nvmedb::io::{DirStorage, FileOptions, Storage};
    use std::sync::Arc;
    if !a.dir.join(nvmedb::db::CATALOG_FILE).exists() {
        return Err(format!(
            "{} is not an nvmedb database (no {})",
            a.dir.display(),
            nvmedb::db::CATALOG_FILE
        ));
    }
    if a.log {
        let fo = FileOptions::default();
        let p: Arc<dyn Storage> =
            Arc::new(DirStorage::new(a.dir.join("wal"), fo.clone()).map_err(|e| e.to_string())?);
        let mirror = a.log_mirror_dir.clone().unwrap_or_else(|| a.dir.join("wal-mirror"));
        let m: Arc<dyn Storage> = Arc::new(DirStorage::new(mirror, fo).map_err(|e| e.to_string())?);
        return nvmedb::inspect::describe_log(p, m, a.from, a.limit).map_err(|e| e.to_string());
    }
    // Opened without the log: inspection changes nothing (no recovery, no checkpoint).
    let storage: Arc<dyn Storage> =
        Arc::new(DirStorage::new(&a.dir, FileOptions::default()).map_err(|e| e.to_string())?);
    let opts = nvmedb::Options {
        create_if_missing: false,
        table_buffer: nvmedb::BufferSize::Bytes(1 << 20),
        index_buffer: nvmedb::BufferSize::Bytes(1 << 20),
        ..Default::default()
    };
    let db = nvmedb::Database::open_with_storage(storage.clone(), opts).map_err(|e| e.to_string())?;
    let cat = db.catalog();
    let Some(name) = &a.table else {
        return nvmedb::inspect::describe_database(&db, storage.as_ref()).map_err(|e| e.to_string());
    };
    let t = cat
        .tables
        .iter()
        .find(|t| &t.name == name)
        .ok_or_else(|| format!("no table `{name}` in {}", a.dir.display()))?;
    match (a.heap_page, a.index_page) {
        (Some(p), None) => nvmedb::inspect::describe_page(
            storage.as_ref(),
            &format!("t{}.heap", t.id),
            cat.table_page_size as usize,
            p,
            Some(&t.schema),
        ),
        (None, Some(p)) => nvmedb::inspect::describe_page(
            storage.as_ref(),
            &format!("t{}.idx", t.id),
            cat.index_page_size as usize,
            p,
            None,
        ),
        _ => return Err("give exactly one of --heap-page N or --index-page N with --table".into()),
    }
    .map_err(|e| e.to_string())
}

/// `nvmedb lab …` experiments.
#[derive(Subcommand, Debug)]
enum LabCommand {
    /// Seed 000/001 primitive workload: single-row SELECT/UPDATE across buffer sizes and devices.
    /// A flag given twice takes its last value (the main job's defaults can be overridden).
    #[command(args_override_self = true)]
    Primitive(Box<PrimitiveArgs>),
    /// Buffer manager and table micro-benchmarks: in-memory lookups, 1 % buffer lookups vs
    /// fio on the same file, and full scans under SHR-1/16/512 and SEP.
    Engine(EngineArgs),
    /// Durable commits from 1, 4 and 20 threads vs fio's fdatasync rate, and recovery time
    /// of a large log.
    Commit(CommitArgs),
    /// Seed 002 §6 on this machine: Fig. 9 (transactions vs workers with no log, a memory log,
    /// the fast log and the fdatasync file log — also the commit benchmark at 1/4/20 clients
    /// with fio's fdatasync rate), Fig. 10 (write size), Fig. 11 (queue size), Fig. 12
    /// (scheduler modes, emulated device). About two minutes; `--long` for longer runs.
    Xlog(XlogArgs),
    /// Seed 000 Case B (update throughput single vs HA log shipping vs HA data mirroring
    /// across buffer sizes, standby over loopback) and seed 002 Fig. 13 (replication delay).
    Ha(HaArgs),
}

/// Flags of `nvmedb lab xlog`.
#[derive(Args, Debug)]
struct XlogArgs {
    /// Working directory on the disk under test (databases, conventional rings; cleaned up).
    #[arg(long, default_value = "nvmedb-data/xloglab")]
    data_dir: PathBuf,
    /// Directory of the fast side's ring files (default /dev/shm: tmpfs, kill -9 safe only).
    #[arg(long)]
    ring_dir: Option<PathBuf>,
    /// Root of the results directories.
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// Parts to run (comma-separated): fig9, fig10, fig11, fig12.
    #[arg(long, value_delimiter = ',', default_value = "fig9,fig10,fig11,fig12")]
    parts: Vec<String>,
    /// Longer runs with more points (about 10 minutes).
    #[arg(long)]
    long: bool,
    /// Seconds per measured point (overrides the scale's).
    #[arg(long)]
    secs: Option<f64>,
    /// Worker counts of Fig. 9 (comma-separated; overrides the scale's).
    #[arg(long, value_delimiter = ',')]
    workers: Option<Vec<usize>>,
    /// Skip the fio reference.
    #[arg(long)]
    no_fio: bool,
}

/// Flags of `nvmedb lab ha`.
#[derive(Args, Debug)]
struct HaArgs {
    /// Scratch directory on the disk under test (recreated, removed at the end).
    #[arg(long, default_value = "nvmedb-data/ha")]
    data_dir: PathBuf,
    /// Results root.
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// Full scale (10 tables x 50k rows, 4 buffer sizes, 20 s points, 3 reps).
    #[arg(long)]
    full: bool,
    /// Seconds per measured point (overrides the scale's value).
    #[arg(long)]
    duration: Option<f64>,
    /// Repetitions (overrides the scale's value).
    #[arg(long)]
    reps: Option<usize>,
}

/// Flags of `nvmedb lab commit`.
#[derive(Args, Debug)]
struct CommitArgs {
    /// Database directory on the disk under test (recreated).
    #[arg(long, default_value = "nvmedb-data/commitbench")]
    data_dir: PathBuf,
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    rows: u64,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Repetitions.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Log size for the recovery measurement (e.g. 1G; 0 skips it).
    #[arg(long, default_value = "1G")]
    recovery_log: String,
    /// Upper bound of the group-commit wait, µs (the log's `group_commit_wait_us`).
    #[arg(long, default_value_t = 200)]
    group_commit_wait_us: u64,
    /// Wake only the committers a flush covered plus the next leader (false: wake all).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    targeted_wakeups: bool,
    /// JSON result file (default results/commitbench-<time>.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Flags of `nvmedb lab engine`.
#[derive(Args, Debug)]
struct EngineArgs {
    /// Database directory on the disk under test (reused across runs when it matches).
    #[arg(long, default_value = "nvmedb-data/enginebench")]
    data_dir: PathBuf,
    /// Rows in the table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Payload bytes per row.
    #[arg(long, default_value_t = 1000)]
    payload: u32,
    /// Page size of table and index files (bytes or with a K suffix).
    #[arg(long, default_value = "16k")]
    page_size: String,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Threads for the 1 % buffer lookups.
    #[arg(long, default_value_t = 32)]
    miss_threads: usize,
    /// Threads for the scans.
    #[arg(long, default_value_t = 2)]
    scan_threads: usize,
    /// Repetitions of each measurement.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Skip the fio reference runs.
    #[arg(long)]
    no_fio: bool,
    /// Parts to run (comma-separated): memory, miss, scan.
    #[arg(long, default_value = "memory,miss,scan", value_delimiter = ',')]
    parts: Vec<String>,
    /// Huge-page settings the in-memory lookups compare, run in turn (comma-separated
    /// true/false; buffer memory is advised MADV_HUGEPAGE when true).
    #[arg(long, value_delimiter = ',', default_value = "true")]
    memory_huge_pages: Vec<bool>,
    /// Lock-free-hit settings the in-memory lookups compare (comma-separated true/false).
    #[arg(long, value_delimiter = ',', default_value = "true")]
    memory_lock_free: Vec<bool>,
    /// Keys per call the in-memory lookups compare (comma-separated): 1 is one `read` per key,
    /// more is one `read_many` of that many keys, whose lookups overlap their cache misses.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    memory_batch: Vec<usize>,
    /// JSON result file (default results/enginebench-<time>.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Flags of `nvmedb lab primitive`.
#[derive(Args, Debug)]
struct PrimitiveArgs {
    /// Rows per table (default 10000: ~480 MiB of tables per device).
    #[arg(long)]
    rows: Option<u64>,
    /// The papers' scale: 500 000 rows per table (24 GB per device; needs the disk and RAM).
    #[arg(long = "full-scale")]
    full_scale: bool,
    /// Number of tables.
    #[arg(long, default_value_t = 10)]
    tables: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 20)]
    clients: usize,
    /// Table buffer sizes, % of table size (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,25,50,100")]
    buffers: Vec<f64>,
    /// Devices: disk (O_DIRECT files in --data-dir), memory, or emulated profiles (optane, nand, san, hdd, dram).
    #[arg(long, value_delimiter = ',', default_value = "disk,optane,nand,san")]
    devices: Vec<String>,
    /// Workloads (comma-separated): select, update.
    #[arg(long, value_delimiter = ',', default_value = "select,update")]
    workloads: Vec<String>,
    /// Warm-up seconds per point.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Measured seconds per point.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Repetitions per point (interleaved; min/median/max are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Table page size (bytes or K suffix).
    #[arg(long = "table-page", default_value = "24k")]
    table_page: String,
    /// Index page size (bytes or K suffix).
    #[arg(long = "index-page", default_value = "4k")]
    index_page: String,
    /// Table buffer policy: SHR-n or SEP-n.
    #[arg(long, default_value = "SHR-16")]
    policy: String,
    /// Directory for the real-disk database (not tmpfs). Reused across runs of the same scale.
    #[arg(long = "data-dir", default_value = "nvmedb-data")]
    data_dir: PathBuf,
    /// Reload the disk database even if one of this scale exists.
    #[arg(long)]
    reload: bool,
    /// Root of the results directories (results/primitive/<time>/).
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// Seed of the key choices and the emulators.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip the traced runs and trace charts.
    #[arg(long = "no-trace")]
    no_trace: bool,
    /// Device to trace (default optane if listed, else the first).
    #[arg(long = "trace-device")]
    trace_device: Option<String>,
    /// Seconds of each iobench reference run per device (0 skips them).
    #[arg(long = "iobench-seconds", default_value_t = 2.0)]
    iobench_seconds: f64,
    /// Do not run fio on the disk even if it is installed.
    #[arg(long = "no-fio")]
    no_fio: bool,
    /// Override a parameter of every emulated profile, e.g. --profile-set spin_us=0 (repeatable).
    #[arg(long = "profile-set")]
    profile_set: Vec<String>,
    /// Extra CPU burnt per transaction, µs, standing in for the SQL layer and client round trip
    /// in the papers' t_cpu (100–150 µs); 0 measures the engine alone.
    #[arg(long = "app-cpu-us", default_value_t = 0.0)]
    app_cpu_us: f64,
    /// Hide progress bars.
    #[arg(long = "no-progress")]
    no_progress: bool,
}

fn to_primitive_config(a: &PrimitiveArgs) -> Result<PrimitiveConfig, String> {
    let rows = match (a.rows, a.full_scale) {
        (Some(_), true) => return Err("--rows and --full-scale exclude each other".into()),
        (Some(r), false) => r,
        (None, true) => primitive::FULL_SCALE_ROWS,
        (None, false) => primitive::DEFAULT_ROWS,
    };
    let devices = a
        .devices
        .iter()
        .map(|d| {
            DeviceKind::parse(d).ok_or_else(|| format!("--devices: `{d}` is not disk, memory or a profile"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let workloads = a
        .workloads
        .iter()
        .map(|w| Workload::parse(w).ok_or_else(|| format!("--workloads: `{w}` is not select or update")))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = PrimitiveConfig {
        tables: a.tables,
        rows_per_table: rows,
        table_page_size: parse_size(&a.table_page).map_err(|e| format!("--table-page: {e}"))? as usize,
        index_page_size: parse_size(&a.index_page).map_err(|e| format!("--index-page: {e}"))? as usize,
        clients: a.clients,
        buffer_pcts: a.buffers.clone(),
        workloads,
        devices,
        warmup_s: a.warmup,
        duration_s: a.duration,
        repetitions: a.reps,
        policy: a.policy.clone(),
        data_dir: a.data_dir.clone(),
        reload: a.reload,
        results_root: a.results.clone(),
        seed: a.seed,
        trace: !a.no_trace,
        trace_device: a.trace_device.clone(),
        iobench_s: a.iobench_seconds,
        fio: !a.no_fio,
        profile_overrides: a.profile_set.clone(),
        app_cpu_us: a.app_cpu_us,
        progress: !a.no_progress,
        ..PrimitiveConfig::default()
    };
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// Flags of `nvmedb iobench` (fio's names where fio has one).
#[derive(Args, Debug)]
struct IobenchArgs {
    /// A file path (O_DIRECT), or an emulated profile: dram, optane, nand, san, hdd.
    #[arg(long, default_value = "optane")]
    device: String,
    /// randread, randwrite, randrw, read, write or rw (read/write/rw are sequential).
    #[arg(long, default_value = "randread")]
    rw: String,
    /// Percentage of reads for randrw/rw (fio's rwmixread).
    #[arg(long = "read-pct", alias = "rwmixread", default_value_t = 50)]
    read_pct: u8,
    /// Block size: bytes or with a K/M suffix (a multiple of 4K).
    #[arg(long, default_value = "4k")]
    bs: String,
    /// Operations in flight per thread.
    #[arg(long, alias = "iodepth", default_value_t = 1)]
    depth: usize,
    /// Worker threads (fio's numjobs).
    #[arg(long, alias = "numjobs", default_value_t = 1)]
    threads: usize,
    /// Measured seconds (after the warm-up).
    #[arg(long, alias = "runtime", default_value_t = 5.0)]
    duration: f64,
    /// Warm-up seconds, not measured.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Bytes of the device the workload covers (K/M/G suffixes). Files shorter than this are
    /// first written to this size.
    #[arg(long, default_value = "1G")]
    size: String,
    /// queue: keep --depth operations in flight through the device's queue (io_uring for files);
    /// sync: one read_at/write_at at a time (like fio's psync; --depth must be 1).
    #[arg(long, default_value = "queue")]
    engine: String,
    /// Kernel interface for files: auto, io_uring or pread (also NVMEDB_IO_BACKEND).
    #[arg(long, default_value = "auto")]
    backend: String,
    /// How the sync engine's single calls reach an io_uring file: pread or ring.
    #[arg(long = "single-op", default_value = "pread")]
    single_op: String,
    /// For file-backed profiles (nand, san, hdd): the file under the emulation (RAM otherwise).
    #[arg(long = "backing-file")]
    backing_file: Option<PathBuf>,
    /// Override a profile parameter, e.g. --profile-set read_latency_us=12 (repeatable).
    #[arg(long = "profile-set")]
    profile_set: Vec<String>,
    /// A profile config file: `key = value` lines, optional `[profile]` sections.
    #[arg(long = "profile-config")]
    profile_config: Option<PathBuf>,
    /// Operations per io_uring_enter when a file queue submits (fio's iodepth_batch_submit).
    #[arg(long = "submit-batch", alias = "iodepth_batch_submit", default_value_t = 1)]
    submit_batch: usize,
    /// Seed of offsets, the read/write choice and emulated jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hide the progress bar.
    #[arg(long = "no-progress")]
    no_progress: bool,
    /// JSON result file (default results/iobench-<time>.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.trim_end_matches("ib").trim_end_matches('b');
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        Some('t') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a size (e.g. 4096, 4k, 1G)"))?;
    Ok((v * mult as f64) as u64)
}

fn to_config(a: &IobenchArgs) -> Result<IoBenchConfig, String> {
    let (pattern, read_pct) = match a.rw.as_str() {
        "randread" => (Pattern::Random, 100),
        "randwrite" => (Pattern::Random, 0),
        "randrw" => (Pattern::Random, a.read_pct),
        "read" => (Pattern::Sequential, 100),
        "write" => (Pattern::Sequential, 0),
        "rw" | "readwrite" => (Pattern::Sequential, a.read_pct),
        other => {
            return Err(format!("--rw {other}: expected randread, randwrite, randrw, read, write or rw"))
        }
    };
    let engine = match a.engine.as_str() {
        "queue" | "io_uring" => Engine::Queue,
        "sync" | "psync" => Engine::Sync,
        other => return Err(format!("--engine {other}: expected queue or sync")),
    };
    let backend = Backend::parse(&a.backend)
        .ok_or_else(|| format!("--backend {}: expected auto, io_uring or pread", a.backend))?;
    let single_op = match a.single_op.as_str() {
        "pread" => SingleOpPath::Pread,
        "ring" | "thread_ring" => SingleOpPath::ThreadRing,
        other => return Err(format!("--single-op {other}: expected pread or ring")),
    };
    Ok(IoBenchConfig {
        device: a.device.clone(),
        backing_file: a.backing_file.clone(),
        profile_overrides: a.profile_set.clone(),
        profile_config: a.profile_config.clone(),
        pattern,
        read_pct,
        block_bytes: parse_size(&a.bs).map_err(|e| format!("--bs: {e}"))? as usize,
        depth: a.depth,
        threads: a.threads,
        duration_s: a.duration,
        warmup_s: a.warmup,
        size_bytes: parse_size(&a.size).map_err(|e| format!("--size: {e}"))?,
        engine,
        backend,
        single_op,
        submit_batch: a.submit_batch,
        seed: a.seed,
        progress: !a.no_progress,
        out: a.out.clone(),
    })
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Commands::Machine => {
            let ctx = nvmedb_lab::machine::RunContext::capture();
            println!("{}", ctx.one_line());
        }
        Commands::Lab(LabCommand::Primitive(args)) => {
            let outcome = to_primitive_config(&args).and_then(|cfg| {
                let out = primitive::run(&cfg).map_err(|e| e.to_string())?;
                println!("{}", out.summary_text);
                println!("results: {}", out.dir.display());
                Ok(())
            });
            if let Err(e) = outcome {
                eprintln!("nvmedb lab primitive: {e}");
                std::process::exit(2);
            }
        }
        Commands::Iobench(args) => {
            let outcome = to_config(&args).and_then(|cfg| iobench::run(&cfg)).and_then(|report| {
                println!("{}", report.table());
                let path = report.save()?;
                println!("{}", report.result_line());
                println!("result file: {}", path.display());
                Ok(())
            });
            if let Err(e) = outcome {
                eprintln!("nvmedb iobench: {e}");
                std::process::exit(2);
            }
        }
        Commands::Standby(a) => {
            if let Err(e) = run_standby(&a) {
                eprintln!("nvmedb standby: {e}");
                std::process::exit(2);
            }
        }
        Commands::Promote(a) => {
            let opts = nvmedb::repl::PromoteOptions { force: a.force, ..Default::default() };
            let r =
                nvmedb::repl::read_secret(&a.admin.secret_file).map_err(|e| e.to_string()).and_then(|s| {
                    nvmedb::repl::admin_promote_with(&a.admin.addr, &s, &opts).map_err(|e| e.to_string())
                });
            match r {
                Ok((epoch, end)) => println!("promoted {}: epoch {epoch}, log end {end}", a.admin.addr),
                Err(e) => {
                    eprintln!("nvmedb promote: {e}");
                    std::process::exit(2);
                }
            }
        }
        Commands::Status(a) => {
            let r = nvmedb::repl::read_secret(&a.secret_file)
                .map_err(|e| e.to_string())
                .and_then(|s| nvmedb::repl::admin_status(&a.addr, &s).map_err(|e| e.to_string()));
            match r {
                Ok(t) => print!("{t}"),
                Err(e) => {
                    eprintln!("nvmedb status: {e}");
                    std::process::exit(2);
                }
            }
        }
        Commands::Lab(LabCommand::Ha(a)) => {
            let mut cfg = if a.full {
                nvmedb_lab::ha::HaConfig::full_scale(a.data_dir.clone(), a.results.clone())
            } else {
                nvmedb_lab::ha::HaConfig::default_scale(a.data_dir.clone(), a.results.clone())
            };
            if let Some(d) = a.duration {
                cfg.duration_s = d;
                cfg.delay_s = d;
            }
            if let Some(r) = a.reps {
                cfg.reps = r;
            }
            match nvmedb_lab::ha::run(&cfg) {
                Ok((_, text, dir)) => {
                    print!("{text}");
                    println!("results: {}", dir.display());
                }
                Err(e) => {
                    eprintln!("nvmedb lab ha: {e}");
                    std::process::exit(2);
                }
            }
        }
        Commands::Inspect(a) => match inspect(&a) {
            Ok(text) => print!("{text}"),
            Err(e) => {
                eprintln!("nvmedb inspect: {e}");
                std::process::exit(2);
            }
        },
        Commands::Lab(LabCommand::Commit(a)) => {
            let outcome = parse_size(&a.recovery_log).and_then(|bytes| {
                let cfg = nvmedb_lab::enginebench::CommitBenchConfig {
                    data_dir: a.data_dir.clone(),
                    rows: a.rows,
                    duration_s: a.duration,
                    threads: vec![1, 4, 20],
                    reps: a.reps,
                    recovery_log_bytes: bytes,
                    group_commit_wait_us: a.group_commit_wait_us,
                    targeted_wakeups: a.targeted_wakeups,
                };
                let report = nvmedb_lab::enginebench::run_commit(&cfg)?;
                save_report(a.out.clone(), "commitbench", &report, &report.context)
            });
            if let Err(e) = outcome {
                eprintln!("nvmedb lab commit: {e}");
                std::process::exit(2);
            }
        }
        Commands::Lab(LabCommand::Xlog(a)) => {
            let mut cfg =
                nvmedb_lab::xloglab::XlogLabConfig::default_scale(a.data_dir.clone(), a.results.clone());
            if a.long {
                cfg = cfg.long();
            }
            if let Some(d) = &a.ring_dir {
                cfg.ring_dir = d.clone();
            }
            if let Some(s) = a.secs {
                cfg.secs = s;
            }
            if let Some(w) = &a.workers {
                cfg.workers = w.clone();
            }
            cfg.parts = a.parts.clone();
            cfg.use_fio = !a.no_fio;
            match nvmedb_lab::xloglab::run(&cfg) {
                Ok(out) => {
                    println!("{}", out.summary);
                    println!("results: {}", out.dir.display());
                }
                Err(e) => {
                    eprintln!("nvmedb lab xlog: {e}");
                    std::process::exit(2);
                }
            }
        }
        Commands::Lab(LabCommand::Engine(a)) => {
            let outcome = parse_size(&a.page_size).and_then(|ps| {
                let cfg = nvmedb_lab::enginebench::EngineBenchConfig {
                    data_dir: a.data_dir.clone(),
                    rows: a.rows,
                    payload_bytes: a.payload,
                    page_size: ps as usize,
                    duration_s: a.duration,
                    miss_threads: a.miss_threads,
                    scan_threads: a.scan_threads,
                    reps: a.reps,
                    use_fio: !a.no_fio,
                    parts: a.parts.clone(),
                    memory_huge_pages: a.memory_huge_pages.clone(),
                    memory_lock_free: a.memory_lock_free.clone(),
                    memory_batch: a.memory_batch.clone(),
                    ..Default::default()
                };
                let report = nvmedb_lab::enginebench::run(&cfg)?;
                save_report(a.out.clone(), "enginebench", &report, &report.context)
            });
            if let Err(e) = outcome {
                eprintln!("nvmedb lab engine: {e}");
                std::process::exit(2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("24K"), Ok(24576));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn primitive_flags_map_to_a_config() {
        let cli = Cli::try_parse_from([
            "nvmedb",
            "lab",
            "primitive",
            "--rows",
            "50",
            "--devices",
            "memory,optane",
            "--buffers",
            "1,100",
        ])
        .unwrap();
        let Commands::Lab(LabCommand::Primitive(a)) = cli.command else { panic!("not lab primitive") };
        let c = to_primitive_config(&a).unwrap();
        assert_eq!((c.rows_per_table, c.table_page_size, c.index_page_size), (50, 24576, 4096));
        assert_eq!(c.devices, vec![DeviceKind::Memory, DeviceKind::Emulated("optane".into())]);
        assert_eq!(c.buffer_pcts, vec![1.0, 100.0]);
        let full = Cli::try_parse_from(["nvmedb", "lab", "primitive", "--full-scale"]).unwrap();
        let Commands::Lab(LabCommand::Primitive(a)) = full.command else { panic!("not lab primitive") };
        assert_eq!(to_primitive_config(&a).unwrap().rows_per_table, primitive::FULL_SCALE_ROWS);
        let twice =
            Cli::try_parse_from(["nvmedb", "lab", "primitive", "--rows", "5", "--rows", "7"]).unwrap();
        let Commands::Lab(LabCommand::Primitive(a)) = twice.command else { panic!("not lab primitive") };
        assert_eq!(a.rows, Some(7));
        let bad = Cli::try_parse_from(["nvmedb", "lab", "primitive", "--devices", "floppy"]).unwrap();
        let Commands::Lab(LabCommand::Primitive(a)) = bad.command else { panic!("not lab primitive") };
        assert!(to_primitive_config(&a).unwrap_err().contains("floppy"));
    }

    #[test]
    fn iobench_flags_map_to_a_config() {
        let cli = Cli::try_parse_from([
            "nvmedb",
            "iobench",
            "--device",
            "nand",
            "--rw",
            "randrw",
            "--read-pct",
            "70",
            "--bs",
            "16k",
            "--iodepth",
            "32",
            "--profile-set",
            "read_latency_us=80",
        ])
        .unwrap();
        let Commands::Iobench(a) = cli.command else { panic!("not iobench") };
        let c = to_config(&a).unwrap();
        assert_eq!((c.pattern, c.read_pct, c.block_bytes, c.depth), (Pattern::Random, 70, 16384, 32));
        assert_eq!(c.profile_overrides, vec!["read_latency_us=80".to_string()]);
        let bad = Cli::try_parse_from(["nvmedb", "iobench", "--rw", "sideways"]).unwrap();
        let Commands::Iobench(a) = bad.command else { panic!("not iobench") };
        assert!(to_config(&a).unwrap_err().contains("--rw sideways"));
    }
}
