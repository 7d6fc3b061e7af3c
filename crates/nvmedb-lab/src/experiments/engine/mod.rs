//! `nvmedb lab engine`: micro-benchmarks of the buffer manager, tables and lock manager —
//! in-memory point lookups, point lookups with a 1 % buffer against the device's random-read
//! limit (fio and iobench on the same file, page size and concurrency, in the same run), full
//! scans under SHR-1/16/512 and SEP, and (part `locks`) lock/release costs and contended
//! transactions under each lock-wait policy.
//!
//! Owns: [`EngineConfig`], [`EngineResults`] and the [`EngineBench`] experiment. Submodules:
//! `data` (schema, options, load), `lookups` (parts memory and miss), `scan`, `locks`.
//! Invariant: every figure it prints is measured in this run, and every engine figure is
//! printed beside the device figure it is compared with.

mod data;
mod locks;
mod lookups;
mod scan;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::Spread;
use crate::report::{Figure, TextTable};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The parts, in the order they run.
pub const PARTS: [&str; 4] = ["memory", "miss", "scan", "locks"];

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngineConfig {
    /// Directory of the database (real disk; must not be tmpfs).
    pub data_dir: PathBuf,
    /// Rows in the table.
    pub rows: u64,
    /// Bytes of the payload column of each row.
    pub payload_bytes: u32,
    /// Table and index page size.
    pub page_size: usize,
    /// Seconds per measurement.
    pub duration_s: f64,
    /// Threads for the in-memory lookup test.
    pub memory_threads: Vec<usize>,
    /// Threads (= outstanding reads) of the many-client point of the 1 % buffer lookups (one
    /// thread is always measured too).
    pub miss_threads: usize,
    /// Keys per `read_many` of the 1 % buffer lookups' batched point (one thread; 0 or 1: none).
    #[serde(default = "default_miss_batch")]
    pub miss_batch: usize,
    /// Table buffer for the miss test, percent of the table.
    pub miss_buffer_pct: f64,
    /// Threads for the scan test.
    pub scan_threads: usize,
    /// Table buffer for the scan test, percent of the table.
    pub scan_buffer_pct: f64,
    /// Policies compared by the scan test.
    pub scan_policies: Vec<String>,
    /// Repetitions of each measurement.
    pub reps: usize,
    /// Run fio as the reference where it is installed.
    pub use_fio: bool,
    /// Parts to run: any of [`PARTS`].
    pub parts: Vec<String>,
    /// Huge-page settings the in-memory test compares (each run in turn, same data).
    pub memory_huge_pages: Vec<bool>,
    /// Lock-free-hit settings the in-memory test compares.
    pub memory_lock_free: Vec<bool>,
    /// Keys per call the in-memory test compares: 1 is one `Table::read` per lookup; more is
    /// one `Table::read_many` per that many keys (lookups interleaved to overlap cache misses).
    pub memory_batch: Vec<usize>,
    /// Thread counts of the contended lock test.
    #[serde(default = "default_lock_threads")]
    pub lock_threads: Vec<usize>,
    /// Keys of the lock test's hot set (each transaction locks two of them).
    #[serde(default = "default_lock_hot_keys")]
    pub lock_hot_keys: u64,
    /// CPU work while holding the two locks, ns.
    #[serde(default = "default_lock_hold_ns")]
    pub lock_hold_ns: u64,
}

fn default_miss_batch() -> usize {
    nvmedb::READ_BATCH
}
fn default_lock_threads() -> Vec<usize> {
    vec![2, 4, 20]
}
fn default_lock_hot_keys() -> u64 {
    8
}
fn default_lock_hold_ns() -> u64 {
    2000
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("nvmedb-data/enginebench"),
            rows: 1_000_000,
            payload_bytes: 1000,
            page_size: nvmedb::Options::default().table_page_size,
            duration_s: 5.0,
            memory_threads: vec![1, 2],
            miss_threads: 32,
            miss_batch: default_miss_batch(),
            miss_buffer_pct: 1.0,
            scan_threads: 2,
            scan_buffer_pct: 5.0,
            scan_policies: vec!["shr-1".into(), "shr-16".into(), "shr-512".into(), "sep".into()],
            reps: 3,
            use_fio: true,
            parts: vec!["memory".into(), "miss".into(), "scan".into()],
            memory_huge_pages: vec![true],
            memory_lock_free: vec![true],
            memory_batch: vec![1, nvmedb::READ_BATCH],
            lock_threads: default_lock_threads(),
            lock_hot_keys: default_lock_hot_keys(),
            lock_hold_ns: default_lock_hold_ns(),
        }
    }
}

impl EngineConfig {
    fn wants(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

/// In-memory lookup result for one thread count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryLookups {
    /// Client threads.
    pub threads: usize,
    /// Buffer memory advised for transparent huge pages.
    pub huge_pages: bool,
    /// Hits served through the lock-free page → frame table.
    pub lock_free_hits: bool,
    /// Keys per call: 1 = `Table::read`, more = `Table::read_many`.
    pub batch: usize,
    /// Lookups per second.
    pub lookups_per_s: Spread,
    /// Lookups per CPU-second the client threads consumed (a per-core rate that holds on a
    /// shared machine, where wall-clock rates also count time other processes took).
    pub lookups_per_cpu_s: Spread,
    /// Lookups per second per core used (threads capped at the cores available).
    pub lookups_per_s_per_core: f64,
    /// Buffer hit ratio achieved.
    pub hit_ratio: f64,
}

impl MemoryLookups {
    fn line(&self) -> String {
        let c = self.lookups_per_cpu_s;
        format!(
            "in-memory lookups, {} thread(s), {}, huge pages {}, lock-free hits {}: {} lookups/s ({:.2} M/s per core by wall clock, {:.2} M per CPU-second [{:.2}..{:.2}]), hit ratio {:.4}",
            self.threads,
            if self.batch > 1 { format!("read_many of {} keys", self.batch) } else { "one read per key".to_string() },
            if self.huge_pages { "on" } else { "off" },
            if self.lock_free_hits { "on" } else { "off" },
            self.lookups_per_s,
            self.lookups_per_s_per_core / 1e6,
            c.median / 1e6,
            c.min / 1e6,
            c.max / 1e6,
            self.hit_ratio
        )
    }
}

/// The 1 % buffer lookups of one point (client threads × keys per call) with its device
/// references, each measured on the heap file in the same repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MissLookups {
    /// Client threads.
    pub threads: usize,
    /// Keys per call: 1 = `Table::read`, more = `Table::read_many` (its misses read together).
    pub batch: usize,
    /// Table buffer, percent of the table (the configured share, or more when that is under
    /// two frames per page in flight).
    pub buffer_pct: f64,
    /// Lookups per second.
    pub lookups_per_s: Spread,
    /// Table page reads per second achieved by the engine.
    pub engine_read_iops: Spread,
    /// Table buffer hit ratio achieved.
    pub hit_ratio: f64,
    /// CPU time of the whole process per page read, µs (every thread: clients, background
    /// writer; user and system, so the kernel's read path is in it as it is in fio's figure).
    pub cpu_us_per_miss: Spread,
    /// fio on the heap file at the page size and the same concurrency: `threads` psync jobs, or
    /// for a batch one io_uring job with `batch` reads in flight.
    pub fio_iops: Option<Spread>,
    /// CPU of fio's processes per read in those runs, µs.
    pub fio_cpu_us_per_read: Option<Spread>,
    /// The same fio shape with 4 KiB reads (the device's smallest, what a 4 KiB-block engine
    /// such as RocksDB reads per miss).
    pub fio_4k_iops: Option<Spread>,
    /// fio io_uring with `threads` in flight from one job at the page size (threads > 1).
    pub fio_uring_iops: Option<Spread>,
    /// iobench on the heap file, sync engine with `threads` threads (threads > 1).
    pub iobench_sync_iops: Option<Spread>,
    /// Lookups per second / fio's IOPS at the page size (median over median).
    pub lookups_over_fio: Option<f64>,
}

impl MissLookups {
    /// What the point runs, in words.
    pub fn label(&self) -> String {
        if self.batch > 1 {
            format!("{} thread(s), read_many of {} keys", self.threads, self.batch)
        } else {
            format!("{} thread(s), one read per key", self.threads)
        }
    }

    fn lines(&self, cfg: &EngineConfig) -> [String; 2] {
        let pct = if self.buffer_pct > cfg.miss_buffer_pct {
            format!("{:.1}", self.buffer_pct)
        } else {
            cfg.miss_buffer_pct.to_string()
        };
        let spread = |s: Option<Spread>| s.map_or("n/a".into(), |s| s.to_string());
        let us = |s: Option<Spread>| s.map_or("n/a".into(), |s| format!("{:.1}", s.median));
        let shape = if self.batch > 1 {
            format!("fio io_uring QD{}", self.batch)
        } else {
            format!("fio psync x{}", self.threads)
        };
        let mut refs = format!(
            "  same file: {shape} {} KiB: {} IOPS ({} CPU µs per read; lookups/fio {}), 4 KiB: {} IOPS",
            cfg.page_size / 1024,
            spread(self.fio_iops),
            us(self.fio_cpu_us_per_read),
            self.lookups_over_fio.map_or("n/a".into(), |r| format!("{r:.2}")),
            spread(self.fio_4k_iops),
        );
        if self.threads > 1 {
            refs.push_str(&format!(
                "; fio io_uring QD{} {} KiB: {} IOPS; iobench sync x{}: {} IOPS",
                self.threads,
                cfg.page_size / 1024,
                spread(self.fio_uring_iops),
                self.threads,
                spread(self.iobench_sync_iops)
            ));
        }
        [
            format!(
                "{pct}% buffer lookups, {}: {} lookups/s, engine reads {} IOPS, {:.1} CPU µs per miss, hit ratio {:.3}",
                self.label(),
                self.lookups_per_s,
                self.engine_read_iops,
                self.cpu_us_per_miss.median,
                self.hit_ratio
            ),
            refs,
        ]
    }
}

/// Scan result for one policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScanResult {
    /// Policy label (SHR-k or SEP).
    pub policy: String,
    /// Seconds per full scan.
    pub seconds: Spread,
    /// Page reads per second.
    pub read_iops: Spread,
    /// MiB/s read.
    pub mib_per_s: f64,
    /// Share of the device's sequential-read limit (iobench, page size, depth 32) reached.
    pub share_of_device_limit: f64,
}

impl ScanResult {
    fn line(&self, threads: usize) -> String {
        format!(
            "scan {:>7}, {threads} threads: {:.2} s [{:.2}..{:.2}], {} read IOPS, {:.0} MiB/s, {:.0} % of the device limit",
            self.policy,
            self.seconds.median,
            self.seconds.min,
            self.seconds.max,
            self.read_iops,
            self.mib_per_s,
            self.share_of_device_limit * 100.0
        )
    }
}

/// Contended lock transactions under one wait setting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockContention {
    /// Wait setting (sleep-1ms, park, spin-10us, spin+yield).
    pub setting: String,
    /// Client threads.
    pub threads: usize,
    /// Transactions (two X locks, hold, release) per second.
    pub txn_per_s: f64,
    /// Transaction latency p50, µs.
    pub txn_p50_us: f64,
    /// Transaction latency p99, µs.
    pub txn_p99_us: f64,
    /// Lock requests that waited.
    pub waits: u64,
    /// Waits granted while spinning, %.
    pub spin_granted_pct: f64,
    /// Waits that parked.
    pub parked_waits: u64,
    /// Park calls.
    pub park_calls: u64,
    /// Mean wait, µs (None: nothing waited).
    pub mean_wait_us: Option<f64>,
    /// Upper bound of the median wait's histogram bucket, µs.
    pub wait_p50_below_us: Option<f64>,
    /// Upper bound of the p99 wait's bucket, µs.
    pub wait_p99_below_us: Option<f64>,
    /// Upper bound of the p99.9 wait's bucket, µs.
    pub wait_p999_below_us: Option<f64>,
}

impl LockContention {
    fn line(&self) -> String {
        let q = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} µs"));
        format!(
            "locks {} {} threads: {:.0} txn/s | txn p50 {:.1} µs p99 {:.1} µs | waits {} (spin-granted {:.1}%, parked {}, park calls {}) mean wait {} wait p50 <{} p99 <{} p99.9 <{}",
            self.setting,
            self.threads,
            self.txn_per_s,
            self.txn_p50_us,
            self.txn_p99_us,
            self.waits,
            self.spin_granted_pct,
            self.parked_waits,
            self.park_calls,
            q(self.mean_wait_us),
            q(self.wait_p50_below_us),
            q(self.wait_p99_below_us),
            q(self.wait_p999_below_us),
        )
    }
}

/// The lock manager part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockResults {
    /// One thread: lock X + release_all, ns.
    pub uncontended_x_release_ns: f64,
    /// One thread: lock S + re-entrant S + upgrade X + release_all, ns per transaction.
    pub uncontended_s_s_x_release_ns: f64,
    /// One thread: 8 X locks + release_all, ns per lock.
    pub uncontended_8x_per_lock_ns: f64,
    /// Contended transactions per setting and thread count.
    pub contended: Vec<LockContention>,
}

impl LockResults {
    fn uncontended_line(&self) -> String {
        format!(
            "locks uncontended: X + release_all {:.0} ns ({:.2} M/s); S + re-entrant S + upgrade X + release_all {:.0} ns; 8 X + release_all {:.0} ns per lock",
            self.uncontended_x_release_ns,
            1e3 / self.uncontended_x_release_ns,
            self.uncontended_s_s_x_release_ns,
            self.uncontended_8x_per_lock_ns
        )
    }
}

/// Everything the benchmark measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngineResults {
    /// Heap file size in bytes.
    pub table_bytes: u64,
    /// In-memory lookups.
    pub memory: Vec<MemoryLookups>,
    /// 1 % buffer lookups, one entry per point (one thread, many threads, `read_many`).
    #[serde(default)]
    pub misses: Vec<MissLookups>,
    /// Device limit for scans: iobench sequential read, page size, depth 32.
    pub device_limit_iops: Option<f64>,
    /// Scans per policy.
    pub scans: Vec<ScanResult>,
    /// The lock manager (part `locks`).
    #[serde(default)]
    pub locks: Option<LockResults>,
}

/// The `nvmedb lab engine` experiment.
#[derive(Debug, Clone, Copy)]
pub struct EngineBench;

impl Experiment for EngineBench {
    const NAME: &'static str = "engine";
    const TITLE: &'static str =
        "buffer manager, tables and locks: in-memory lookups, 1 % buffer lookups vs fio, scans per policy";
    type Config = EngineConfig;
    type Results = EngineResults;

    fn validate(cfg: &EngineConfig) -> Result<()> {
        experiment::known_parts("--parts", &cfg.parts, &PARTS)?;
        if cfg.rows == 0 || cfg.reps == 0 || cfg.miss_threads == 0 || cfg.scan_threads == 0 {
            return Err(LabError::config(
                "--rows/--reps/--miss-threads/--scan-threads",
                "must be at least 1",
            ));
        }
        if cfg.page_size == 0 || !cfg.page_size.is_multiple_of(4096) {
            return Err(LabError::config(
                "--page-size",
                format!("{}: must be a multiple of 4096", cfg.page_size),
            ));
        }
        experiment::non_empty("--memory-batch", &cfg.memory_batch)?;
        experiment::seconds("--duration", cfg.duration_s, false)
    }

    fn run(cfg: &EngineConfig, env: &RunEnv) -> Result<EngineResults> {
        let needs_table = ["memory", "miss", "scan"].iter().any(|p| cfg.wants(p));
        let heap = cfg.data_dir.join(nvmedb::db::heap_name(0));
        let table_bytes = if needs_table {
            data::load(cfg, env.progress)?;
            std::fs::metadata(&heap).map_err(LabError::io(&heap, "read the size of"))?.len()
        } else {
            0
        };
        let mut r = EngineResults {
            table_bytes,
            memory: Vec::new(),
            misses: Vec::new(),
            device_limit_iops: None,
            scans: Vec::new(),
            locks: None,
        };
        if cfg.wants("memory") {
            r.memory = lookups::memory(cfg, env)?;
        }
        if cfg.wants("miss") {
            r.misses = lookups::miss(cfg, env, &heap, table_bytes)?;
        }
        if cfg.wants("scan") {
            let limit = scan::device_limit(cfg, &heap, table_bytes)?;
            env.note(format!(
                "device limit: iobench {} KiB sequential read QD32: {limit:.0} IOPS",
                cfg.page_size / 1024
            ));
            r.device_limit_iops = Some(limit);
            r.scans = scan::scans(cfg, env, limit)?;
        }
        if cfg.wants("locks") {
            r.locks = Some(locks::locks(cfg, env)?);
        }
        Ok(r)
    }

    fn report(cfg: &EngineConfig, r: &EngineResults, env: &RunEnv) -> Result<Summary> {
        let mut text = format!("# nvmedb lab engine — {}\n", env.context.one_line());
        let mut figures = Vec::new();
        for m in &r.memory {
            text.push_str(&format!("{}\n", m.line()));
            let key = format!(
                "memory/threads{}/batch{}/hp{}/lf{}",
                m.threads, m.batch, m.huge_pages, m.lock_free_hits
            );
            figures.push(Figure::repeated(
                format!("{key}/lookups_per_s"),
                format!("in-memory lookups, {} threads, {} keys per call", m.threads, m.batch),
                m.lookups_per_s,
                "lookups/s",
            ));
            figures.push(Figure::repeated(
                format!("{key}/lookups_per_cpu_s"),
                "in-memory lookups per CPU-second",
                m.lookups_per_cpu_s,
                "lookups/CPU-s",
            ));
        }
        for m in &r.misses {
            for line in m.lines(cfg) {
                text.push_str(&format!("{line}\n"));
            }
            let key = format!("miss/threads{}/batch{}", m.threads, m.batch);
            let mut f = Figure::repeated(
                format!("{key}/lookups_per_s"),
                format!("lookups at a {:.1} % buffer, {}", m.buffer_pct, m.label()),
                m.lookups_per_s,
                "lookups/s",
            );
            if let Some(fio) = m.fio_iops {
                let shape = if m.batch > 1 {
                    format!("io_uring QD{}", m.batch)
                } else {
                    format!("psync x{}", m.threads)
                };
                f = f.against(
                    format!("fio {shape} on the heap file, {} KiB", cfg.page_size / 1024),
                    fio.median,
                );
            }
            figures.push(f);
            figures.push(Figure::repeated(
                format!("{key}/cpu_us_per_miss"),
                format!("CPU per miss, {}", m.label()),
                m.cpu_us_per_miss,
                "µs",
            ));
        }
        if let Some(limit) = r.device_limit_iops {
            text.push_str(&format!(
                "device limit: iobench {} KiB sequential read QD32: {limit:.0} IOPS\n",
                cfg.page_size / 1024
            ));
        }
        for s in &r.scans {
            text.push_str(&format!("{}\n", s.line(cfg.scan_threads)));
            let mut f = Figure::repeated(
                format!("scan/{}/read_iops", s.policy),
                format!("full scan under {}", s.policy),
                s.read_iops,
                "IOPS",
            );
            if let Some(limit) = r.device_limit_iops {
                f = f.against("iobench sequential read QD32 on the heap file", limit);
            }
            figures.push(f);
        }
        if let Some(l) = &r.locks {
            locks_report(l, &mut text, &mut figures);
        }
        Ok(Summary { text, figures })
    }
}

/// The lock manager's part of the report: the uncontended cost, and a table of the contended
/// runs (adding their figures).
fn locks_report(l: &LockResults, text: &mut String, figures: &mut Vec<Figure>) {
    text.push_str(&format!("{}\n", l.uncontended_line()));
    figures.push(Figure::new(
        "locks/uncontended_x_release_ns",
        "lock X + release_all, one thread",
        l.uncontended_x_release_ns,
        "ns",
    ));
    let mut t = TextTable::new([
        "locks: waits by",
        "threads",
        "txn/s",
        "txn p50 µs",
        "txn p99 µs",
        "waits",
        "spin-granted %",
        "parked",
        "park calls",
        "mean wait µs",
        "wait p50 < µs",
        "p99 < µs",
        "p99.9 < µs",
    ]);
    let q = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for c in &l.contended {
        t.row([
            c.setting.clone(),
            c.threads.to_string(),
            format!("{:.0}", c.txn_per_s),
            format!("{:.1}", c.txn_p50_us),
            format!("{:.1}", c.txn_p99_us),
            c.waits.to_string(),
            format!("{:.1}", c.spin_granted_pct),
            c.parked_waits.to_string(),
            c.park_calls.to_string(),
            q(c.mean_wait_us),
            q(c.wait_p50_below_us),
            q(c.wait_p99_below_us),
            q(c.wait_p999_below_us),
        ]);
        figures.push(Figure::new(
            format!("locks/{}/threads{}/txn_per_s", c.setting, c.threads),
            format!("lock transactions, {} waits, {} threads", c.setting, c.threads),
            c.txn_per_s,
            "txn/s",
        ));
    }
    if !t.is_empty() {
        text.push_str(&t.to_string());
    }
}
