//! `nvmedb lab tpch`: seed 004's experiment — TPC-H Q3 (customer, orders, lineitem from
//! `tpchgen`) as parallel scans through the buffer manager under shared buffers with 1, 16 and
//! 512 page-table locks (SHR-1/16/512) and separated per-thread buffers (SEP), on the real disk
//! and on emulated Optane (one device or several striped), with each device's limit measured
//! in the same run, interleaved with the queries, by replaying the scans' own reads (same files,
//! partitions, page size and read-ahead batches) through the engine's `Device` and with fio.
//!
//! Owns: [`TpchConfig`], [`TpchResults`], [`Point`] and the [`TpchBench`] experiment.
//! Submodules: `devices` (the loaded database, emulated copies, device limits), `probe` (the
//! scans' read pattern and its replays), `report` (tables and plots). Invariants: every query's
//! answer equals the reference evaluation over the generator's rows and every query scans every
//! row, or the run fails; repetitions are interleaved (for each repetition, each worker count,
//! each device: the limit probe and every policy in turn, the probe before the queries in even
//! repetitions and after them in odd ones, so probe and queries see the host's cache alike);
//! every query starts with a cold buffer (the database is opened afresh).

mod devices;
mod probe;
mod report;

pub use devices::{DeviceSpec, Limit, LoadInfo};
pub use probe::{fio as fio_scan_pattern, replay as replay_scan_pattern, Replay, ScanFile, ScanPattern};

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::{process_cpu_ns, progress, Spread};
use crate::workload::tpch::{self, Q3Params, Q3Row};
use nvmedb::buffer::BufferPolicy;
use nvmedb::Database;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Bytes of buffer per unit of scale factor in seed 004: 1 GB at SF 100.
pub const SEED_BUFFER_PER_SF: f64 = (1u64 << 30) as f64 / 100.0;

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TpchConfig {
    /// Directory of the loaded databases on the disk (one per scale factor and page size).
    pub data_dir: PathBuf,
    /// TPC-H scale factor (seed 004: 100).
    pub sf: f64,
    /// Table page size (seed 004: 16 KiB).
    pub page_size: usize,
    /// Loader threads.
    pub load_threads: usize,
    /// Load again even if a matching database exists.
    pub reload: bool,
    /// Query worker counts.
    pub workers: Vec<usize>,
    /// Page reads each worker keeps in flight ahead of the page it processes (its I/O depth).
    pub read_ahead: u64,
    /// Buffer policies: shr-<k>, sep.
    pub policies: Vec<String>,
    /// Table buffer in bytes; `None` with no `buffer_pct`: seed 004's 1 GB per SF 100.
    pub buffer_bytes: Option<u64>,
    /// Table buffer as a percentage of the three heap files.
    pub buffer_pct: Option<f64>,
    /// Devices: `disk`, `optane`, `optane-x10` (ten striped).
    pub devices: Vec<String>,
    /// Repetitions of every point.
    pub reps: usize,
    /// Q3's parameters.
    pub params: Q3Params,
    /// Passes of the scans' read pattern each device-limit probe reads (engine replay and fio).
    pub probe_passes: u32,
    /// Run fio as the disk's reference.
    pub use_fio: bool,
    /// Lock-free buffer hits (the engine's default); off takes the page-table lock on every hit
    /// as seed 004's SHR-k buffers did.
    pub lock_free_hits: bool,
    /// Asynchronous read-ahead (the engine's default: the window kept in flight, topped up half
    /// a window at a time while the scan processes the half that arrived); off reads ahead in
    /// synchronous batches (submit a window, wait for all of it, process it).
    pub async_read_ahead: bool,
}

impl Default for TpchConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("nvmedb-data/tpch"),
            sf: 0.2,
            page_size: 16384,
            load_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            reload: false,
            workers: vec![1, 2, 4, 8, 16, 32],
            read_ahead: nvmedb::table::heap::READ_AHEAD_PAGES,
            policies: vec!["shr-1".into(), "shr-16".into(), "shr-512".into(), "sep".into()],
            buffer_bytes: None,
            buffer_pct: None,
            devices: vec!["disk".into(), "optane".into(), "optane-x10".into()],
            reps: 3,
            params: Q3Params::default(),
            probe_passes: 3,
            use_fio: true,
            lock_free_hits: true,
            async_read_ahead: true,
        }
    }
}

impl TpchConfig {
    /// The table buffer for `workers` workers over `heap_bytes` of data: the configured size
    /// (seed ratio by default), raised to 8 read-ahead batches per worker so every worker's
    /// read-ahead fits its share (an eighth of a partition); returns (bytes, raised).
    pub fn buffer_for(&self, heap_bytes: u64, workers: usize) -> (u64, bool) {
        let want = match (self.buffer_bytes, self.buffer_pct) {
            (Some(b), _) => b,
            (None, Some(p)) => (heap_bytes as f64 * p / 100.0) as u64,
            (None, None) => (SEED_BUFFER_PER_SF * self.sf) as u64,
        };
        let floor = 8 * self.read_ahead * workers as u64 * self.page_size as u64;
        if want < floor {
            (floor, true)
        } else {
            (want, false)
        }
    }
}

/// One (device, policy, workers) point over the repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Device (short name).
    pub device: String,
    /// REAL or EMULATED.
    pub kind: String,
    /// SHR-k or SEP.
    pub policy: String,
    /// Query workers.
    pub workers: usize,
    /// Table buffer, bytes.
    pub buffer_bytes: u64,
    /// The buffer was raised above the configured size for read-ahead.
    pub buffer_raised: bool,
    /// Query seconds.
    pub seconds: Spread,
    /// Pages read from the device per second of query.
    pub pages_per_s: Spread,
    /// MiB/s read (median).
    pub mib_per_s: f64,
    /// Share of page fixes served without a device read: 1 − reads / pages scanned, at least 0
    /// (median; pages read again after an eviction show in `reads_per_page`).
    pub hit_ratio: f64,
    /// Pages read / pages in the three tables (1 = each page once; more = read again after
    /// an eviction; median).
    pub reads_per_page: f64,
    /// Share of the reads that were still in flight when their worker was handed an earlier
    /// page: reads overlapped with processing (0 with synchronous read-ahead; median; absent
    /// from results written before it was measured).
    #[serde(default)]
    pub overlapped: f64,
    /// Waits on page-table locks and page latches per query (median).
    pub latch_waits: f64,
    /// Milliseconds spent in those waits per query, all workers together (median).
    pub latch_wait_ms: f64,
    /// Latch wait as a share of the workers' time (wait / (workers × query time), median).
    pub latch_wait_share: f64,
    /// Process CPU during the query, in cores (median).
    pub cpu_cores: f64,
    /// Pages read per CPU-second of the process (median).
    pub pages_per_cpu_s: f64,
    /// Pages read per CPU-second net of the emulator's measured cost (emulated devices only).
    pub pages_per_engine_cpu_s: Option<f64>,
    /// The device's limit at this concurrency: the median over the repetitions of the higher of
    /// fio and the engine replaying the scans' reads, pages/s.
    pub limit_iops: f64,
    /// That median over the repetitions whose probe ran before their queries.
    #[serde(default)]
    pub limit_probe_first_iops: Option<f64>,
    /// That median over the repetitions whose probe ran after their queries.
    #[serde(default)]
    pub limit_probe_after_iops: Option<f64>,
    /// Median pages/s / limit.
    pub share_of_limit: f64,
    /// Pages per second of each phase of the query (customer, orders, lineitem): the table's
    /// pages over the phase's wall time, from the workers' meeting before its scan to their
    /// meeting after it (the phase's hash build included; median).
    #[serde(default)]
    pub phase_pages_per_s: [f64; 3],
    /// The engine replay's pages/s over the same table's file, timed the same way (median over
    /// the repetitions): where in the query the rate falls short of the device.
    #[serde(default)]
    pub phase_limit_iops: [f64; 3],
    /// Process CPU of each phase in cores (its CPU seconds over its wall seconds; median): a
    /// phase near the machine's cores is bound by CPU, not by the device.
    #[serde(default)]
    pub phase_cpu_cores: [f64; 3],
}

/// Everything the run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TpchResults {
    /// The database.
    pub load: LoadInfo,
    /// The read pattern of the device-limit probes, in words (at the first worker count).
    pub probe_pattern: String,
    /// Q3's answer (the reference evaluation; every query returned exactly this).
    pub answer: Vec<Q3Row>,
    /// Device labels (with EMULATED and achieved latency where emulated), in config order.
    pub device_labels: Vec<(String, String)>,
    /// Device limits per device, worker count and repetition.
    pub limits: Vec<Limit>,
    /// The measured points.
    pub points: Vec<Point>,
}

/// One query's raw measurement.
struct Sample {
    seconds: f64,
    /// Wall seconds of Q3's three phases.
    phase_s: [f64; 3],
    /// Process CPU seconds of the three phases.
    phase_cpu_s: [f64; 3],
    reads: u64,
    reads_overlapped: u64,
    latch_waits: u64,
    latch_wait_ns: u64,
    cpu_ns: u64,
}

/// The `nvmedb lab tpch` experiment.
#[derive(Debug, Clone, Copy)]
pub struct TpchBench;

impl Experiment for TpchBench {
    const NAME: &'static str = "tpch";
    const TITLE: &'static str =
        "TPC-H Q3 through the buffer manager: SHR-1/16/512 vs SEP at the device's limit (seed 004)";
    type Config = TpchConfig;
    type Results = TpchResults;

    fn validate(cfg: &TpchConfig) -> Result<()> {
        if !(cfg.sf > 0.0 && cfg.sf <= 100.0) {
            return Err(LabError::config("--sf", format!("{}: must be in (0, 100]", cfg.sf)));
        }
        if !cfg.page_size.is_multiple_of(4096) || !(4096..=65536).contains(&cfg.page_size) {
            return Err(LabError::config(
                "--page-size",
                format!("{}: a multiple of 4 KiB up to 64 KiB", cfg.page_size),
            ));
        }
        experiment::non_empty("--workers", &cfg.workers)?;
        experiment::non_empty("--policies", &cfg.policies)?;
        experiment::non_empty("--devices", &cfg.devices)?;
        if cfg.workers.contains(&0)
            || cfg.reps == 0
            || cfg.read_ahead == 0
            || cfg.load_threads == 0
            || cfg.probe_passes == 0
        {
            return Err(LabError::config(
                "--workers/--reps/--read-ahead/--load-threads/--probe-passes",
                "must be at least 1",
            ));
        }
        for p in &cfg.policies {
            BufferPolicy::parse(p, 1).ok_or_else(|| {
                LabError::config("--policies", format!("unknown policy `{p}` (shr-<k>, sep)"))
            })?;
        }
        for d in &cfg.devices {
            DeviceSpec::parse(d)?;
        }
        cfg.params.date_days()?;
        Ok(())
    }

    fn run(cfg: &TpchConfig, env: &RunEnv) -> Result<TpchResults> {
        let note = |s: String| env.note(s);
        let load = devices::disk_database(cfg, env.progress, &note)?;
        env.note(format!(
            "tables: {:?} rows, {:?} pages of {} KiB ({:.0} MiB)",
            load.rows,
            load.pages,
            cfg.page_size / 1024,
            load.heap_bytes as f64 / (1 << 20) as f64
        ));
        let answer = tpch::q3_reference(cfg.sf, &cfg.params)?;
        let specs: Vec<DeviceSpec> =
            cfg.devices.iter().map(|d| DeviceSpec::parse(d)).collect::<Result<_>>()?;
        let mut prepared = Vec::new();
        let mut limits = Vec::new();
        for spec in &specs {
            let p = devices::prepare(cfg, spec, &load)?;
            env.note(format!("device {}", p.label));
            prepared.push(p);
        }
        let probe_pattern = devices::pattern(cfg, &load, cfg.workers[0]).describe();
        env.note(format!(
            "device limit: {} passes of {probe_pattern} (worker count as the query's), replayed by the engine's Device and by fio (disk), before the queries in even repetitions and after them in odd ones",
            cfg.probe_passes
        ));
        let total = (cfg.reps * cfg.workers.len() * prepared.len() * (cfg.policies.len() + 1)) as u64;
        let bar = progress::bar(env.progress, total, "Q3 queries and limit probes");
        // samples[(device, policy, workers)] in config order.
        let mut samples: Vec<Vec<Sample>> = Vec::new();
        let idx = |d: usize, p: usize, w: usize| (d * cfg.policies.len() + p) * cfg.workers.len() + w;
        samples.resize_with(prepared.len() * cfg.policies.len() * cfg.workers.len(), Vec::new);
        let probe = |dev: &devices::Prepared, w: usize, rep: usize, probe_first: bool| -> Result<Limit> {
            bar.set_message(format!("{} limit x{w}", dev.spec.short()));
            let l = devices::limit(cfg, dev, &load, w, rep, probe_first)?;
            bar.inc(1);
            Ok(l)
        };
        for rep in 0..cfg.reps {
            let probe_first = rep % 2 == 0;
            for (wi, &w) in cfg.workers.iter().enumerate() {
                for (di, dev) in prepared.iter().enumerate() {
                    if probe_first {
                        limits.push(probe(dev, w, rep, true)?);
                    }
                    for (pi, pname) in cfg.policies.iter().enumerate() {
                        let policy = BufferPolicy::parse(pname, w)
                            .ok_or_else(|| LabError::config("--policies", pname.clone()))?;
                        let (buffer, _) = cfg.buffer_for(load.heap_bytes, w);
                        bar.set_message(format!("{} {} x{w}", dev.spec.short(), policy.label()));
                        let s = query(cfg, dev, policy, buffer, w, &load, &answer)?;
                        samples[idx(di, pi, wi)].push(s);
                        bar.inc(1);
                    }
                    if !probe_first {
                        limits.push(probe(dev, w, rep, false)?);
                    }
                }
            }
        }
        for l in &limits {
            env.note(format!(
                "limit of {} x{} (repetition {}, probe {} the queries): engine {:.0} pages/s ({:.1} CPU µs/read), fio {}",
                l.device,
                l.workers,
                l.rep,
                if l.probe_first { "before" } else { "after" },
                l.engine_iops,
                l.engine_cpu_us_per_read,
                l.fio_iops.map_or("n/a".into(), |v| format!("{v:.0} pages/s"))
            ));
        }
        bar.finish_and_clear();
        let mut points = Vec::new();
        for (di, dev) in prepared.iter().enumerate() {
            for (pi, pname) in cfg.policies.iter().enumerate() {
                for (wi, &w) in cfg.workers.iter().enumerate() {
                    let ss = &samples[idx(di, pi, wi)];
                    let lims: Vec<&Limit> =
                        limits.iter().filter(|l| l.device == dev.spec.short() && l.workers == w).collect();
                    let p = point(cfg, dev, pname, w, ss, &load.pages, load.heap_bytes, &lims);
                    env.note(report::point_line(&p));
                    points.push(p);
                }
            }
        }
        Ok(TpchResults {
            load,
            probe_pattern,
            answer,
            device_labels: prepared.iter().map(|p| (p.spec.short(), p.label.clone())).collect(),
            limits,
            points,
        })
    }

    fn report(cfg: &TpchConfig, r: &TpchResults, env: &RunEnv) -> Result<Summary> {
        report::report(cfg, r, env)
    }
}

/// One Q3 execution on a freshly opened (cold) database; checks the answer and the rows.
fn query(
    cfg: &TpchConfig,
    dev: &devices::Prepared,
    policy: BufferPolicy,
    buffer: u64,
    workers: usize,
    load: &LoadInfo,
    answer: &[Q3Row],
) -> Result<Sample> {
    let what = format!("Q3 on {} under {} with {workers} workers", dev.spec.short(), policy.label());
    let db = Database::open_with_storage(dev.storage.clone(), devices::options(cfg, buffer, policy))
        .map_err(LabError::engine(format!("opening the database for {what}")))?;
    // The table buffer's memory is faulted in before the clock starts, as a server's is long
    // before its queries: the database is opened afresh for every query (to start it cold),
    // and without this the first read into each frame would stop to allocate and zero memory.
    db.table_pool()
        .prefault()
        .map_err(LabError::engine(format!("faulting in the table buffer for {what}")))?;
    let before = db.buffer_stats().0;
    let cpu0 = process_cpu_ns();
    let out = tpch::q3(&db, &cfg.params, workers, cfg.read_ahead)?;
    let cpu_ns = process_cpu_ns().saturating_sub(cpu0);
    let d = db.buffer_stats().0.since(&before);
    drop(db);
    if out.top != answer {
        return Err(LabError::Inconsistent {
            what,
            detail: format!("answer {:?} differs from the reference {:?}", out.top, answer),
        });
    }
    if out.rows_scanned != load.rows {
        return Err(LabError::Inconsistent {
            what,
            detail: format!("scanned {:?} rows, the tables hold {:?}", out.rows_scanned, load.rows),
        });
    }
    Ok(Sample {
        seconds: out.seconds,
        phase_s: out.phase_s,
        phase_cpu_s: out.phase_cpu_s,
        reads: d.reads,
        reads_overlapped: d.reads_overlapped,
        latch_waits: d.latch_waits,
        latch_wait_ns: d.latch_wait_ns,
        cpu_ns,
    })
}

#[allow(clippy::too_many_arguments)]
fn point(
    cfg: &TpchConfig,
    dev: &devices::Prepared,
    pname: &str,
    workers: usize,
    ss: &[Sample],
    table_pages: &[u64],
    heap_bytes: u64,
    limits: &[&Limit],
) -> Point {
    let pages_total: u64 = table_pages.iter().sum();
    let med = |f: &dyn Fn(&Sample) -> f64| Spread::of(&ss.iter().map(f).collect::<Vec<_>>()).median;
    let pages_per_s = Spread::of(&ss.iter().map(|s| s.reads as f64 / s.seconds).collect::<Vec<_>>());
    let (buffer_bytes, buffer_raised) = cfg.buffer_for(heap_bytes, workers);
    let lim_med = |keep: &dyn Fn(&Limit) -> bool, f: &dyn Fn(&Limit) -> f64| {
        let v: Vec<f64> = limits.iter().filter(|l| keep(l)).map(|l| f(l)).collect();
        (!v.is_empty()).then(|| Spread::of(&v).median)
    };
    let limit_iops = lim_med(&|_| true, &Limit::best).unwrap_or(0.0);
    let emulator_us =
        dev.spec.profile.as_ref().and_then(|_| lim_med(&|_| true, &|l| l.engine_cpu_us_per_read));
    Point {
        device: dev.spec.short(),
        kind: if dev.spec.profile.is_some() { "EMULATED".into() } else { "REAL".into() },
        policy: BufferPolicy::parse(pname, workers).map_or(pname.to_string(), |p| p.label()),
        workers,
        buffer_bytes,
        buffer_raised,
        seconds: Spread::of(&ss.iter().map(|s| s.seconds).collect::<Vec<_>>()),
        pages_per_s,
        mib_per_s: pages_per_s.median * cfg.page_size as f64 / (1 << 20) as f64,
        hit_ratio: med(&|s| (1.0 - s.reads as f64 / pages_total as f64).max(0.0)),
        reads_per_page: med(&|s| s.reads as f64 / pages_total as f64),
        overlapped: med(&|s| s.reads_overlapped as f64 / (s.reads as f64).max(1.0)),
        latch_waits: med(&|s| s.latch_waits as f64),
        latch_wait_ms: med(&|s| s.latch_wait_ns as f64 / 1e6),
        latch_wait_share: med(&|s| s.latch_wait_ns as f64 / 1e9 / (workers as f64 * s.seconds)),
        cpu_cores: med(&|s| s.cpu_ns as f64 / 1e9 / s.seconds),
        pages_per_cpu_s: med(&|s| s.reads as f64 / (s.cpu_ns as f64 / 1e9).max(1e-9)),
        pages_per_engine_cpu_s: emulator_us.map(|us| {
            med(&|s| {
                let engine_s = (s.cpu_ns as f64 / 1e9 - s.reads as f64 * us / 1e6).max(1e-9);
                s.reads as f64 / engine_s
            })
        }),
        limit_iops,
        limit_probe_first_iops: lim_med(&|l| l.probe_first, &Limit::best),
        limit_probe_after_iops: lim_med(&|l| !l.probe_first, &Limit::best),
        share_of_limit: pages_per_s.median / limit_iops.max(1e-9),
        phase_pages_per_s: std::array::from_fn(|t| {
            let pages = table_pages.get(t).copied().unwrap_or(0) as f64;
            med(&|s| pages / s.phase_s[t].max(1e-9))
        }),
        phase_limit_iops: std::array::from_fn(|t| {
            lim_med(&|_| true, &|l| l.engine_table_iops()[t]).unwrap_or(0.0)
        }),
        phase_cpu_cores: std::array::from_fn(|t| med(&|s| s.phase_cpu_s[t] / s.phase_s[t].max(1e-9))),
    }
}
