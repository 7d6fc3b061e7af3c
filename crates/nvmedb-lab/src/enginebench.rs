//! Engine micro-benchmarks for the buffer manager and tables (issue "Buffer manager, B+tree
//! tables and the embedded API"): in-memory point lookups, point lookups with a 1 % buffer
//! against the device's random-read limit (fio and iobench on the same file, page size and
//! concurrency, in the same run), and full scans under SHR-1/16/512 and SEP.
//!
//! Owns: the benchmark driver and its JSON result. Invariant: every figure it prints is
//! measured in this run, and every engine figure is printed beside the device figure it is
//! compared with.

use crate::iobench::{self, Engine, IoBenchConfig, Pattern};
use crate::machine::RunContext;
use indicatif::{ProgressBar, ProgressStyle};
use nvmedb::buffer::BufferPolicy;
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct EngineBenchConfig {
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
    /// Threads (= outstanding reads) for the 1 % buffer lookup test.
    pub miss_threads: usize,
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
    /// Parts to run: any of "memory", "miss", "scan".
    pub parts: Vec<String>,
    /// Huge-page settings the in-memory test compares (each run in turn, same data).
    pub memory_huge_pages: Vec<bool>,
    /// Lock-free-hit settings the in-memory test compares.
    pub memory_lock_free: Vec<bool>,
    /// Keys per call the in-memory test compares: 1 is one `Table::read` per lookup; more is
    /// one `Table::read_many` per that many keys (lookups interleaved to overlap cache misses).
    pub memory_batch: Vec<usize>,
}

impl Default for EngineBenchConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("nvmedb-data/enginebench"),
            rows: 1_000_000,
            payload_bytes: 1000,
            page_size: 16384,
            duration_s: 5.0,
            memory_threads: vec![1, 2],
            miss_threads: 32,
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
        }
    }
}

/// min / median / max of repeated measurements.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Summarises `v` (not empty).
    pub fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Self { min: v[0], median: v[v.len() / 2], max: v[v.len() - 1] }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.0} [{:.0}..{:.0}]", self.median, self.min, self.max)
    }
}

/// In-memory lookup result for one thread count.
#[derive(Debug, Clone, Serialize)]
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

/// 1 % buffer lookup result with its device references.
#[derive(Debug, Clone, Serialize)]
pub struct MissLookups {
    /// Client threads (outstanding reads).
    pub threads: usize,
    /// Table buffer, percent of the table (the configured share, or more when that is under
    /// two frames per client).
    pub buffer_pct: f64,
    /// Lookups per second.
    pub lookups_per_s: Spread,
    /// Table page reads per second achieved by the engine.
    pub engine_read_iops: Spread,
    /// Table buffer hit ratio achieved.
    pub hit_ratio: f64,
    /// fio on the heap file: psync with `threads` jobs (same concurrency, blocking reads).
    pub fio_psync_iops: Option<Spread>,
    /// fio on the heap file: io_uring with depth `threads` (same number in flight).
    pub fio_uring_iops: Option<Spread>,
    /// iobench on the heap file, sync engine with `threads` threads.
    pub iobench_sync_iops: Spread,
    /// Engine read IOPS / fio psync IOPS.
    pub ratio_vs_fio_psync: Option<f64>,
    /// Engine read IOPS / fio io_uring IOPS.
    pub ratio_vs_fio_uring: Option<f64>,
}

/// Scan result for one policy.
#[derive(Debug, Clone, Serialize)]
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

/// Everything the benchmark measured.
#[derive(Debug, Clone, Serialize)]
pub struct EngineBenchReport {
    /// Provenance.
    pub context: RunContext,
    /// Configuration.
    pub config: EngineBenchConfig,
    /// Heap file size in bytes.
    pub table_bytes: u64,
    /// In-memory lookups.
    pub memory: Vec<MemoryLookups>,
    /// 1 % buffer lookups.
    pub miss: Option<MissLookups>,
    /// Device limit for scans: iobench sequential read, page size, depth 32.
    pub device_limit_iops: Option<f64>,
    /// Scans per policy.
    pub scans: Vec<ScanResult>,
}

fn schema(payload: u32) -> Schema {
    Schema::new(vec![
        ("id", ColumnType::Int),
        ("c1", ColumnType::Int),
        ("payload", ColumnType::Char(payload)),
    ])
}

fn options(cfg: &EngineBenchConfig, table_buffer: BufferSize, policy: BufferPolicy) -> Options {
    Options {
        table_page_size: cfg.page_size,
        index_page_size: cfg.page_size,
        table_buffer,
        // Indexes stay cached (seeds 000/001); frame memory is only touched when used.
        index_buffer: BufferSize::Bytes(1 << 30),
        policy,
        pin_indexes: true,
        background_writer: None,
        create_if_missing: true,
        // Read-only benchmarks: no log (the load would otherwise sync every row).
        wal: false,
        ..Options::default()
    }
}

fn progress(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb
}

/// Loads the table unless the directory already holds it with the right row count.
fn load(cfg: &EngineBenchConfig) -> Result<(), String> {
    let opts = options(cfg, BufferSize::Bytes(256 << 20), BufferPolicy::Shared { stripes: 16 });
    if cfg.data_dir.join("catalog.nvdb").exists() {
        let db = Database::open(&cfg.data_dir, opts.clone()).map_err(|e| e.to_string())?;
        if let Ok(t) = db.table("bench") {
            let have = t.read(&Value::Int(cfg.rows as i64 - 1), |_| ()).map_err(|e| e.to_string())?.is_some()
                && t.read(&Value::Int(cfg.rows as i64), |_| ()).map_err(|e| e.to_string())?.is_none();
            if have {
                return Ok(());
            }
        }
        drop(db);
        std::fs::remove_dir_all(&cfg.data_dir).map_err(|e| format!("{}: {e}", cfg.data_dir.display()))?;
    }
    let db = Database::open(&cfg.data_dir, opts).map_err(|e| e.to_string())?;
    let t = db.create_table("bench", schema(cfg.payload_bytes)).map_err(|e| e.to_string())?;
    let pb = progress(cfg.rows, "loading");
    let payload = vec![b'x'; cfg.payload_bytes as usize];
    for id in 0..cfg.rows {
        t.insert(&[Value::Int(id as i64), Value::Int(id as i64), Value::Bytes(payload.clone())])
            .map_err(|e| e.to_string())?;
        if id % 4096 == 0 {
            pb.set_position(id);
        }
    }
    pb.finish_and_clear();
    db.close().map_err(|e| e.to_string())
}

/// Runs random point lookups from `threads` threads for `secs`; returns lookups/s.
/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Random point lookups from `threads` threads for `secs`, `batch` keys per call (1: one
/// `Table::read` each; more: `Table::read_many`): lookups per second, and lookups per
/// CPU-second of the client threads.
fn lookups(
    db: &Database,
    rows: u64,
    threads: usize,
    batch: usize,
    secs: f64,
    seed: u64,
) -> Result<(f64, f64), String> {
    let t = db.table("bench").map_err(|e| e.to_string())?;
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let cpu_ns = AtomicU64::new(0);
    let errors = std::sync::Mutex::new(None);
    let fail = |e: String| {
        *errors.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        stop.store(true, Ordering::Relaxed);
    };
    let start = Instant::now();
    std::thread::scope(|s| {
        for th in 0..threads {
            let (t, stop, done, cpu_ns, fail) = (&t, &stop, &done, &cpu_ns, &fail);
            s.spawn(move || {
                let mut rng = Rng::new(seed.wrapping_mul(1000) + th as u64);
                let cpu0 = thread_cpu_time();
                let mut n = 0u64;
                let mut keys = Vec::with_capacity(batch);
                while !stop.load(Ordering::Relaxed) {
                    if batch <= 1 {
                        for _ in 0..64 {
                            let k = rng.below(rows) as i64;
                            match t.read(&Value::Int(k), |r| r.int(1)) {
                                Ok(Some(v)) => debug_assert_eq!(v, k),
                                Ok(None) => fail(format!("row {k} missing")),
                                Err(e) => fail(e.to_string()),
                            }
                        }
                        n += 64;
                        continue;
                    }
                    keys.clear();
                    keys.extend((0..batch).map(|_| Value::Int(rng.below(rows) as i64)));
                    let mut missing = None;
                    let r = t.read_many(&keys, |i, row| match row {
                        Some(r) => debug_assert_eq!(Value::Int(r.int(1)), keys[i]),
                        None => missing = Some(i),
                    });
                    match (r, missing) {
                        (Err(e), _) => fail(e.to_string()),
                        (Ok(()), Some(i)) => fail(format!("row {:?} missing", keys[i])),
                        (Ok(()), None) => {}
                    }
                    n += batch as u64;
                }
                cpu_ns.fetch_add((thread_cpu_time() - cpu0).as_nanos() as u64, Ordering::Relaxed);
                done.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(e) = errors.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed) as f64;
    let cpu_s = cpu_ns.load(Ordering::Relaxed) as f64 / 1e9;
    Ok((n / elapsed, n / cpu_s.max(1e-9)))
}

fn iobench_file(
    file: &std::path::Path,
    bs: usize,
    threads: usize,
    depth: usize,
    engine: Engine,
    secs: f64,
    size: u64,
) -> Result<f64, String> {
    let cfg = IoBenchConfig {
        device: file.display().to_string(),
        pattern: Pattern::Random,
        read_pct: 100,
        block_bytes: bs,
        depth,
        threads,
        duration_s: secs,
        warmup_s: 0.5,
        size_bytes: size / bs as u64 * bs as u64,
        engine,
        progress: false,
        out: Some(
            std::env::temp_dir().join(format!("nvmedb-enginebench-iobench-{}.json", std::process::id())),
        ),
        ..IoBenchConfig::default()
    };
    Ok(iobench::run(&cfg)?.iops)
}

fn iobench_seq(file: &std::path::Path, bs: usize, secs: f64, size: u64) -> Result<f64, String> {
    let cfg = IoBenchConfig {
        device: file.display().to_string(),
        pattern: Pattern::Sequential,
        read_pct: 100,
        block_bytes: bs,
        depth: 32,
        threads: 1,
        duration_s: secs,
        warmup_s: 0.5,
        size_bytes: size / bs as u64 * bs as u64,
        engine: Engine::Queue,
        progress: false,
        out: Some(
            std::env::temp_dir().join(format!("nvmedb-enginebench-iobench-{}.json", std::process::id())),
        ),
        ..IoBenchConfig::default()
    };
    Ok(iobench::run(&cfg)?.iops)
}

/// Runs the whole benchmark.
pub fn run(cfg: &EngineBenchConfig) -> Result<EngineBenchReport, String> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    load(cfg)?;
    let heap = cfg.data_dir.join("t0.heap");
    let table_bytes = std::fs::metadata(&heap).map_err(|e| format!("{}: {e}", heap.display()))?.len();
    let mut report = EngineBenchReport {
        context: RunContext::capture(),
        config: cfg.clone(),
        table_bytes,
        memory: Vec::new(),
        miss: None,
        device_limit_iops: None,
        scans: Vec::new(),
    };

    let wants = |p: &str| cfg.parts.iter().any(|x| x == p);
    // 1. In-memory lookups: the whole table cached.
    let mut memory_runs: Vec<(bool, bool)> = Vec::new();
    if wants("memory") {
        for &hp in &cfg.memory_huge_pages {
            memory_runs.extend(cfg.memory_lock_free.iter().map(|&lf| (hp, lf)));
        }
    }
    for (huge_pages, lock_free_hits) in memory_runs {
        let mut opts = options(cfg, BufferSize::PercentOfData(110.0), BufferPolicy::Shared { stripes: 16 });
        opts.huge_pages = huge_pages;
        opts.lock_free_hits = lock_free_hits;
        let db = Database::open(&cfg.data_dir, opts).map_err(|e| e.to_string())?;
        // Warm-up: every heap and index page into the buffer.
        let t = db.table("bench").map_err(|e| e.to_string())?;
        t.range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_| Ok(true))
            .map_err(|e| e.to_string())?;
        for &threads in &cfg.memory_threads {
            for &batch in &cfg.memory_batch {
                lookups(&db, cfg.rows, threads, batch, 0.5, 0)?;
                let before = db.buffer_stats().0;
                let (mut v, mut per_cpu) = (Vec::new(), Vec::new());
                for rep in 0..cfg.reps {
                    let (rate, cpu_rate) =
                        lookups(&db, cfg.rows, threads, batch, cfg.duration_s, rep as u64 + 1)?;
                    v.push(rate);
                    per_cpu.push(cpu_rate);
                }
                let d = db.buffer_stats().0.since(&before);
                let s = Spread::of(v);
                let c = Spread::of(per_cpu);
                report.memory.push(MemoryLookups {
                    threads,
                    huge_pages,
                    lock_free_hits,
                    batch,
                    lookups_per_s: s,
                    lookups_per_cpu_s: c,
                    lookups_per_s_per_core: s.median / threads.min(cores) as f64,
                    hit_ratio: d.hit_ratio(),
                });
                println!(
                    "in-memory lookups, {threads} thread(s), {}, huge pages {}, lock-free hits {}: {s} lookups/s ({:.2} M/s per core by wall clock, {:.2} M per CPU-second [{:.2}..{:.2}]), hit ratio {:.4}",
                    if batch > 1 { format!("read_many of {batch} keys") } else { "one read per key".to_string() },
                    if huge_pages { "on" } else { "off" },
                    if lock_free_hits { "on" } else { "off" },
                    s.median / threads.min(cores) as f64 / 1e6,
                    c.median / 1e6,
                    c.min / 1e6,
                    c.max / 1e6,
                    d.hit_ratio()
                );
            }
        }
    }

    // 2. Lookups with a 1 % buffer, interleaved with fio and iobench on the same file.
    if wants("miss") {
        let threads = cfg.miss_threads;
        // Each client pins a page while it reads it, so the buffer needs at least two frames
        // per client; a small table's 1 % has fewer (20 K rows of 100 B: 8 frames for 32).
        let pct_bytes = table_bytes as f64 * cfg.miss_buffer_pct / 100.0;
        let floor_bytes = (2 * threads * cfg.page_size) as f64;
        let miss_buffer = if pct_bytes < floor_bytes {
            println!(
                "note: {}% of the table is {:.0} KiB, fewer than 2 frames per client; the buffer is raised to {} frames ({:.0} KiB, {:.1}% of the table)",
                cfg.miss_buffer_pct,
                pct_bytes / 1024.0,
                2 * threads,
                floor_bytes / 1024.0,
                100.0 * floor_bytes / table_bytes as f64
            );
            BufferSize::Bytes(floor_bytes as u64)
        } else {
            BufferSize::PercentOfData(cfg.miss_buffer_pct)
        };
        let buffer_pct = 100.0 * pct_bytes.max(floor_bytes) / table_bytes as f64;
        let db =
            Database::open(&cfg.data_dir, options(cfg, miss_buffer, BufferPolicy::Shared { stripes: 512 }))
                .map_err(|e| e.to_string())?;
        lookups(&db, cfg.rows, threads, 1, 1.0, 0)?;
        let (mut lk, mut eng, mut fio_p, mut fio_u, mut iob) = (vec![], vec![], vec![], vec![], vec![]);
        let mut hit = 0.0;
        let fio_ok = cfg.use_fio && Command::new("fio").arg("--version").output().is_ok();
        for rep in 0..cfg.reps {
            let before = db.buffer_stats().0;
            let t0 = Instant::now();
            lk.push(lookups(&db, cfg.rows, threads, 1, cfg.duration_s, rep as u64 + 10)?.0);
            let d = db.buffer_stats().0.since(&before);
            eng.push(d.reads as f64 / t0.elapsed().as_secs_f64());
            hit = d.hit_ratio();
            if fio_ok {
                if let Some(x) =
                    crate::fio::randread_iops(&heap, cfg.page_size, threads, 1, "psync", cfg.duration_s)
                {
                    fio_p.push(x);
                }
                if let Some(x) =
                    crate::fio::randread_iops(&heap, cfg.page_size, 1, threads, "io_uring", cfg.duration_s)
                {
                    fio_u.push(x);
                }
            }
            iob.push(iobench_file(
                &heap,
                cfg.page_size,
                threads,
                1,
                Engine::Sync,
                cfg.duration_s,
                table_bytes,
            )?);
        }
        let eng_s = Spread::of(eng);
        let fp = (!fio_p.is_empty()).then(|| Spread::of(fio_p));
        let fu = (!fio_u.is_empty()).then(|| Spread::of(fio_u));
        let m = MissLookups {
            threads,
            buffer_pct,
            lookups_per_s: Spread::of(lk),
            engine_read_iops: eng_s,
            hit_ratio: hit,
            ratio_vs_fio_psync: fp.map(|f| eng_s.median / f.median),
            ratio_vs_fio_uring: fu.map(|f| eng_s.median / f.median),
            fio_psync_iops: fp,
            fio_uring_iops: fu,
            iobench_sync_iops: Spread::of(iob),
        };
        println!(
            "{}% buffer lookups, {threads} threads: {} lookups/s, engine reads {} IOPS, hit ratio {:.3}",
            if buffer_pct > cfg.miss_buffer_pct {
                format!("{buffer_pct:.1}")
            } else {
                cfg.miss_buffer_pct.to_string()
            },
            m.lookups_per_s,
            m.engine_read_iops,
            m.hit_ratio
        );
        println!(
            "  same file, {} KiB random reads: fio psync x{threads}: {} IOPS (engine/fio {}), fio io_uring QD{threads}: {} IOPS (engine/fio {}), iobench sync x{threads}: {} IOPS",
            cfg.page_size / 1024,
            m.fio_psync_iops.map_or("n/a".into(), |s| s.to_string()),
            m.ratio_vs_fio_psync.map_or("n/a".into(), |r| format!("{:.1} %", r * 100.0)),
            m.fio_uring_iops.map_or("n/a".into(), |s| s.to_string()),
            m.ratio_vs_fio_uring.map_or("n/a".into(), |r| format!("{:.1} %", r * 100.0)),
            m.iobench_sync_iops
        );
        report.miss = Some(m);
    }

    // 3. Full scans per policy.
    if !wants("scan") {
        return Ok(report);
    }
    let limit = iobench_seq(&heap, cfg.page_size, cfg.duration_s, table_bytes)?;
    report.device_limit_iops = Some(limit);
    println!("device limit: iobench {} KiB sequential read QD32: {limit:.0} IOPS", cfg.page_size / 1024);
    for name in &cfg.scan_policies {
        let policy =
            BufferPolicy::parse(name, cfg.scan_threads).ok_or_else(|| format!("unknown policy `{name}`"))?;
        let db = Database::open(
            &cfg.data_dir,
            options(cfg, BufferSize::PercentOfData(cfg.scan_buffer_pct), policy),
        )
        .map_err(|e| e.to_string())?;
        let t = db.table("bench").map_err(|e| e.to_string())?;
        let (mut secs, mut iops) = (vec![], vec![]);
        for _ in 0..cfg.reps {
            let before = db.buffer_stats().0;
            let t0 = Instant::now();
            let rows = AtomicU64::new(0);
            let err = std::sync::Mutex::new(None);
            std::thread::scope(|s| {
                for part in 0..cfg.scan_threads {
                    let (t, rows, err) = (&t, &rows, &err);
                    s.spawn(move || {
                        let mut n = 0u64;
                        let r = t.scan_partition(part, cfg.scan_threads, |row| {
                            n += u64::from(row.int(0) >= 0);
                            Ok(true)
                        });
                        if let Err(e) = r {
                            *err.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                        }
                        rows.fetch_add(n, Ordering::Relaxed);
                    });
                }
            });
            if let Some(e) = err.into_inner().unwrap_or_else(|e| e.into_inner()) {
                return Err(e);
            }
            if rows.load(Ordering::Relaxed) != cfg.rows {
                return Err(format!(
                    "scan saw {} rows, table has {}",
                    rows.load(Ordering::Relaxed),
                    cfg.rows
                ));
            }
            let el = t0.elapsed().as_secs_f64();
            let d = db.buffer_stats().0.since(&before);
            secs.push(el);
            iops.push(d.reads as f64 / el);
        }
        let iops = Spread::of(iops);
        let r = ScanResult {
            policy: policy.label(),
            seconds: Spread::of(secs),
            read_iops: iops,
            mib_per_s: iops.median * cfg.page_size as f64 / (1 << 20) as f64,
            share_of_device_limit: iops.median / limit,
        };
        println!(
            "scan {:>7}, {} threads: {:.2} s [{:.2}..{:.2}], {} read IOPS, {:.0} MiB/s, {:.0} % of the device limit",
            r.policy,
            cfg.scan_threads,
            r.seconds.median,
            r.seconds.min,
            r.seconds.max,
            r.read_iops,
            r.mib_per_s,
            r.share_of_device_limit * 100.0
        );
        report.scans.push(r);
    }
    Ok(report)
}

/// Commit benchmark settings (issue "Transactions, WAL ..."): durable single-row update
/// transactions from 1, 4 and 20 threads against fio's single-thread write + fdatasync rate,
/// and recovery time of a large log.
#[derive(Debug, Clone, Serialize)]
pub struct CommitBenchConfig {
    /// Database directory (real disk).
    pub data_dir: PathBuf,
    /// Rows in the table.
    pub rows: u64,
    /// Seconds per measurement.
    pub duration_s: f64,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Repetitions.
    pub reps: usize,
    /// Log bytes to write before the recovery measurement (0: skip).
    pub recovery_log_bytes: u64,
    /// Group-commit wait bound of the log, µs.
    pub group_commit_wait_us: u64,
    /// Wake only the committers a flush covered, plus the next leader (the log's
    /// `targeted_wakeups`); false wakes every waiter.
    pub targeted_wakeups: bool,
}

/// Commit benchmark results.
#[derive(Debug, Clone, Serialize)]
pub struct CommitBenchReport {
    /// Provenance.
    pub context: RunContext,
    /// Settings.
    pub config: CommitBenchConfig,
    /// fio: 4 KiB sequential write + fdatasync per write, one job, IOPS.
    pub fio_fdatasync_iops: Option<Spread>,
    /// Commits per second per thread count.
    pub commits_per_s: Vec<(usize, Spread)>,
    /// Mean transactions per log flush per thread count (group commit).
    pub commits_per_flush: Vec<(usize, f64)>,
    /// Log bytes replayed by the recovery measurement.
    pub recovery_log_bytes: u64,
    /// Recovery (redo + undo) time in seconds.
    pub recovery_s: Option<f64>,
}

fn commit_options(cfg: &CommitBenchConfig) -> Options {
    Options {
        wal_options: nvmedb::wal::WalOptions {
            group_commit_wait_us: cfg.group_commit_wait_us,
            targeted_wakeups: cfg.targeted_wakeups,
            // The recovery part grows the log to a set size without checkpoints.
            checkpoint_after_bytes: 0,
            ..Default::default()
        },
        table_page_size: 16384,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(64 << 20),
        index_buffer: BufferSize::Bytes(64 << 20),
        ..Options::default()
    }
}

/// Runs the commit benchmark.
pub fn run_commit(cfg: &CommitBenchConfig) -> Result<CommitBenchReport, String> {
    let e = |x: nvmedb::Error| x.to_string();
    let _ = std::fs::remove_dir_all(&cfg.data_dir);
    {
        let db = Database::open(&cfg.data_dir, Options { wal: false, ..commit_options(cfg) }).map_err(e)?;
        let t = db.create_table("bench", schema(100)).map_err(e)?;
        for id in 0..cfg.rows {
            t.insert(&[Value::Int(id as i64), Value::Int(0), Value::Bytes(vec![b'x'; 100])]).map_err(e)?;
        }
        db.close().map_err(e)?;
    }
    let mut report = CommitBenchReport {
        context: RunContext::capture(),
        config: cfg.clone(),
        fio_fdatasync_iops: None,
        commits_per_s: Vec::new(),
        commits_per_flush: Vec::new(),
        recovery_log_bytes: 0,
        recovery_s: None,
    };
    let db = Database::open(&cfg.data_dir, commit_options(cfg)).map_err(e)?;
    let t = db.table("bench").map_err(e)?;
    let mut fio = Vec::new();
    let mut per: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut per_flush: BTreeMap<usize, f64> = BTreeMap::new();
    for rep in 0..cfg.reps {
        if let Some(x) = crate::fio::fdatasync_iops(&cfg.data_dir, cfg.duration_s) {
            fio.push(x);
        }
        for &threads in &cfg.threads {
            let log = db.engine_log().ok_or("the database has no log")?;
            let before = log.record_log().stats();
            let stop = AtomicBool::new(false);
            let done = AtomicU64::new(0);
            let t0 = Instant::now();
            std::thread::scope(|s| {
                for th in 0..threads {
                    let (t, stop, done) = (&t, &stop, &done);
                    s.spawn(move || {
                        let mut rng = Rng::new((rep * 1000 + th) as u64);
                        let mut n = 0;
                        while !stop.load(Ordering::Relaxed) {
                            let k = rng.below(cfg.rows) as i64;
                            if t.update_int(&Value::Int(k), 1, rng.next_u64() as i64).is_ok() {
                                n += 1;
                            }
                        }
                        done.fetch_add(n, Ordering::Relaxed);
                    });
                }
                std::thread::sleep(Duration::from_secs_f64(cfg.duration_s));
                stop.store(true, Ordering::Relaxed);
            });
            let el = t0.elapsed().as_secs_f64();
            let after = log.record_log().stats();
            let flushes = (after.flushes - before.flushes).max(1);
            let commits = done.load(Ordering::Relaxed);
            per.entry(threads).or_default().push(commits as f64 / el);
            per_flush.insert(threads, commits as f64 / flushes as f64);
        }
    }
    report.fio_fdatasync_iops = (!fio.is_empty()).then(|| Spread::of(fio));
    for (th, v) in per {
        let s = Spread::of(v);
        println!(
            "{th:>2} thread(s): {s} commits/s, {:.1} commits per log flush{}",
            per_flush[&th],
            report.fio_fdatasync_iops.map_or(String::new(), |f| format!(
                ", {:.2}x fio's 1-thread fdatasync rate",
                s.median / f.median
            ))
        );
        report.commits_per_s.push((th, s));
        report.commits_per_flush.push((th, per_flush[&th]));
    }
    if let Some(f) = report.fio_fdatasync_iops {
        println!("fio 4 KiB write + fdatasync, 1 job: {f} IOPS");
    }
    if cfg.recovery_log_bytes > 0 {
        // Grow the log without checkpoints, then reopen as after a crash.
        let log = db.engine_log().ok_or("the database has no log")?;
        let start = log.record_log().end_lsn();
        let pb = progress(cfg.recovery_log_bytes >> 20, "log MiB");
        let big = schema(8000);
        let tb = db.create_table("big", big).map_err(e)?;
        std::thread::scope(|s| -> Result<(), String> {
            let hs: Vec<_> = (0..8)
                .map(|th| {
                    let (tb, log) = (&tb, &log);
                    s.spawn(move || -> Result<(), String> {
                        let mut i = th as i64;
                        while log.record_log().end_lsn() - start < cfg.recovery_log_bytes {
                            tb.insert(&[
                                Value::Int(i),
                                Value::Int(i),
                                Value::Bytes(vec![(i % 251) as u8; 8000]),
                            ])
                            .map_err(|x| x.to_string())?;
                            i += 8;
                        }
                        Ok(())
                    })
                })
                .collect();
            while hs.iter().any(|h| !h.is_finished()) {
                pb.set_position((log.record_log().end_lsn() - start) >> 20);
                std::thread::sleep(Duration::from_millis(200));
            }
            for h in hs {
                h.join().map_err(|_| "writer panicked".to_string())??;
            }
            Ok(())
        })?;
        pb.finish_and_clear();
        report.recovery_log_bytes = log.record_log().end_lsn() - start;
        drop(tb);
        drop(t);
        // Leave without a checkpoint, like a crash (dropping an open database writes nothing).
        drop(db);
        let t0 = Instant::now();
        let db = Database::open(&cfg.data_dir, commit_options(cfg)).map_err(e)?;
        let secs = t0.elapsed().as_secs_f64();
        let rep = db.recovery_report().clone();
        println!(
            "recovery of {:.0} MiB of log: {secs:.2} s to open ({} records, {} page changes redone, redo {:.2} s)",
            report.recovery_log_bytes as f64 / (1 << 20) as f64,
            rep.records,
            rep.pages_redone,
            rep.micros as f64 / 1e6
        );
        report.recovery_s = Some(secs);
        db.close().map_err(e)?;
        return Ok(report);
    }
    drop(t);
    db.close().map_err(e)?;
    Ok(report)
}
