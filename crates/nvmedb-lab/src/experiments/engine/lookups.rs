//! Point lookups: in memory (the whole table cached) and with a 1 % buffer against the device's
//! random-read limit (fio and iobench on the same file, page size and concurrency, interleaved
//! in the same run).
//!
//! Owns: [`lookups`] (random point lookups from worker threads, one `read` or one `read_many`
//! per call), [`memory`] and [`miss`], the two parts. Invariants: every lookup checks that it
//! found its row; rates are per second of the measured window, and per CPU-second of the
//! workers.

use super::data::{options, TABLE};
use super::{EngineConfig, MemoryLookups, MissLookups};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::experiments::iobench::{self, Engine, IoBenchConfig};
use crate::measure::{fio, Spread, Workers};
use nvmedb::buffer::BufferPolicy;
use nvmedb::util::Rng;
use nvmedb::{BufferSize, Database, Value};
use std::path::Path;
use std::time::Duration;

/// What one window of [`lookups`] measured.
#[derive(Debug, Clone, Copy)]
pub struct LookupWindow {
    /// Lookups per second.
    pub per_s: f64,
    /// Lookups per CPU-second of the client threads.
    pub per_cpu_s: f64,
    /// Length of the window, seconds.
    pub window_s: f64,
    /// CPU time of the whole process in the window, ns.
    pub process_cpu_ns: u64,
    /// Table pages read from the device in the window.
    pub reads: u64,
    /// The table buffer's hit ratio in the window.
    pub hit_ratio: f64,
}

/// Snapshots the table buffer's counters when the window opens and closes.
struct WindowStats<'a> {
    db: &'a Database,
    opened: Option<nvmedb::buffer::BufferStats>,
    closed: Option<nvmedb::buffer::BufferStats>,
}

impl crate::measure::WindowHooks for WindowStats<'_> {
    fn opened(&mut self) {
        self.opened = Some(self.db.buffer_stats().0);
    }
    fn closed(&mut self) {
        self.closed = Some(self.db.buffer_stats().0);
    }
}

/// Random point lookups from `threads` threads for `secs`, `batch` keys per call (1: one
/// `Table::read` each; more: `Table::read_many`), with the table buffer's reads in the window.
pub fn lookups(
    db: &Database,
    rows: u64,
    threads: usize,
    batch: usize,
    secs: f64,
    seed: u64,
) -> Result<LookupWindow> {
    let t = db.table(TABLE).map_err(LabError::engine("opening the table"))?;
    let workers = Workers::new("point lookups", threads, Duration::ZERO, Duration::from_secs_f64(secs));
    let missing = |k: &Value| LabError::MissingRow { table: TABLE.into(), key: format!("{k:?}") };
    let mut stats = WindowStats { db, opened: None, closed: None };
    let run = workers.run(
        |th| Ok((Rng::new(seed.wrapping_mul(1000) + th as u64), Vec::with_capacity(batch))),
        |(rng, keys), _| {
            if batch <= 1 {
                for _ in 0..64 {
                    let k = rng.below(rows) as i64;
                    match t.read(&Value::Int(k), |r| r.int(1)) {
                        Ok(Some(v)) => debug_assert_eq!(v, k),
                        Ok(None) => return Err(missing(&Value::Int(k))),
                        Err(e) => return Err(LabError::engine("a point lookup")(e)),
                    }
                }
                return Ok(64);
            }
            keys.clear();
            keys.extend((0..batch).map(|_| Value::Int(rng.below(rows) as i64)));
            let mut absent = None;
            t.read_many(keys, |i, row| match row {
                Some(r) => debug_assert_eq!(Value::Int(r.int(1)), keys[i]),
                None => absent = Some(i),
            })
            .map_err(LabError::engine("a batched lookup"))?;
            match absent {
                Some(i) => Err(missing(&keys[i])),
                None => Ok(batch as u64),
            }
        },
        &mut stats,
    )?;
    let d = match (stats.opened, stats.closed) {
        (Some(a), Some(b)) => b.since(&a),
        _ => Default::default(),
    };
    Ok(LookupWindow {
        per_s: run.ops_per_s(),
        per_cpu_s: run.ops_per_cpu_s(),
        window_s: run.window.as_secs_f64(),
        process_cpu_ns: run.process_cpu_ns,
        reads: d.reads,
        hit_ratio: d.hit_ratio(),
    })
}

/// Part "memory": the whole table cached, each huge-page × lock-free-hit setting in turn, each
/// thread count and batch size.
pub fn memory(cfg: &EngineConfig, env: &RunEnv) -> Result<Vec<MemoryLookups>> {
    let cores = env.context.cpus.max(1);
    let mut out = Vec::new();
    for &huge_pages in &cfg.memory_huge_pages {
        for &lock_free_hits in &cfg.memory_lock_free {
            let mut opts =
                options(cfg, BufferSize::PercentOfData(110.0), BufferPolicy::Shared { stripes: 16 });
            opts.huge_pages = huge_pages;
            opts.lock_free_hits = lock_free_hits;
            let db = Database::open(&cfg.data_dir, opts).map_err(LabError::engine("opening the database"))?;
            // Warm-up: every heap and index page into the buffer.
            let t = db.table(TABLE).map_err(LabError::engine("opening the table"))?;
            t.range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_| Ok(true))
                .map_err(LabError::engine("reading the table into the buffer"))?;
            for &threads in &cfg.memory_threads {
                for &batch in &cfg.memory_batch {
                    lookups(&db, cfg.rows, threads, batch, 0.5, 0)?;
                    let before = db.buffer_stats().0;
                    let (mut v, mut per_cpu) = (Vec::new(), Vec::new());
                    for rep in 0..cfg.reps {
                        let w = lookups(&db, cfg.rows, threads, batch, cfg.duration_s, rep as u64 + 1)?;
                        v.push(w.per_s);
                        per_cpu.push(w.per_cpu_s);
                    }
                    let m = MemoryLookups {
                        threads,
                        huge_pages,
                        lock_free_hits,
                        batch,
                        lookups_per_s: Spread::of(&v),
                        lookups_per_cpu_s: Spread::of(&per_cpu),
                        lookups_per_s_per_core: Spread::of(&v).median / threads.min(cores) as f64,
                        hit_ratio: db.buffer_stats().0.since(&before).hit_ratio(),
                    };
                    env.note(m.line());
                    out.push(m);
                }
            }
        }
    }
    Ok(out)
}

fn iobench_sync_iops(file: &Path, cfg: &EngineConfig, threads: usize, table_bytes: u64) -> Result<f64> {
    let c = IoBenchConfig {
        threads,
        engine: Engine::Sync,
        ..IoBenchConfig::file_reads(file, cfg.page_size, table_bytes, cfg.duration_s)
    };
    Ok(iobench::measure(&c, false).map_err(LabError::in_part(format!("iobench on {}", file.display())))?.iops)
}

/// The lookups of one point of the miss part: `threads` clients, `batch` keys per call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MissPoint {
    /// Client threads.
    pub threads: usize,
    /// Keys per call (1: `Table::read`; more: `Table::read_many`).
    pub batch: usize,
}

impl MissPoint {
    /// The points of `cfg`: one thread, `cfg.miss_threads` threads, and `read_many` of
    /// `cfg.miss_batch` keys on one thread (when above 1).
    pub fn of(cfg: &EngineConfig) -> Vec<MissPoint> {
        let mut v = vec![MissPoint { threads: 1, batch: 1 }];
        if cfg.miss_threads > 1 {
            v.push(MissPoint { threads: cfg.miss_threads, batch: 1 });
        }
        if cfg.miss_batch > 1 {
            v.push(MissPoint { threads: 1, batch: cfg.miss_batch });
        }
        v
    }

    /// fio's shape of the same I/O: `threads` psync jobs of one read each, or for a batch one
    /// io_uring job of `batch` reads in flight. (jobs, depth, engine)
    fn fio_shape(self) -> (usize, usize, &'static str) {
        if self.batch > 1 {
            (1, self.batch, "io_uring")
        } else {
            (self.threads, 1, "psync")
        }
    }
}

/// Medians and spreads gathered over the repetitions of one point.
#[derive(Default)]
struct PointReps {
    lookups: Vec<f64>,
    reads: Vec<f64>,
    cpu_us: Vec<f64>,
    hit: Vec<f64>,
    fio: Vec<f64>,
    fio_cpu_us: Vec<f64>,
    fio_4k: Vec<f64>,
    fio_uring: Vec<f64>,
    iobench: Vec<f64>,
}

/// Part "miss": lookups with a small buffer (raised to two frames per client when the
/// configured share is smaller) at each [`MissPoint`], interleaved with fio on the heap file at
/// the same page size and concurrency (and at 4 KiB, the device's smallest read), and iobench.
pub fn miss(cfg: &EngineConfig, env: &RunEnv, heap: &Path, table_bytes: u64) -> Result<Vec<MissLookups>> {
    let points = MissPoint::of(cfg);
    let clients = points.iter().map(|p| p.threads * p.batch).max().unwrap_or(1);
    // Each client pins a page while it reads it (a batch pins its pages while they load), so
    // the buffer needs at least two frames per page in flight; a small table's 1 % has fewer
    // (20 K rows of 100 B: 8 frames for 32).
    let pct_bytes = table_bytes as f64 * cfg.miss_buffer_pct / 100.0;
    let floor_bytes = (2 * clients * cfg.page_size) as f64;
    let miss_buffer = if pct_bytes < floor_bytes {
        env.note(format!(
            "note: {}% of the table is {:.0} KiB, fewer than 2 frames per page in flight; the buffer is raised to {} frames ({:.0} KiB, {:.1}% of the table)",
            cfg.miss_buffer_pct,
            pct_bytes / 1024.0,
            2 * clients,
            floor_bytes / 1024.0,
            100.0 * floor_bytes / table_bytes as f64
        ));
        BufferSize::Bytes(floor_bytes as u64)
    } else {
        BufferSize::PercentOfData(cfg.miss_buffer_pct)
    };
    let buffer_pct = 100.0 * pct_bytes.max(floor_bytes) / table_bytes as f64;
    let db = Database::open(&cfg.data_dir, options(cfg, miss_buffer, BufferPolicy::Shared { stripes: 512 }))
        .map_err(LabError::engine("opening the database"))?;
    // Warm-up: the index into its buffer, the table buffer full.
    lookups(&db, cfg.rows, cfg.miss_threads.max(1), 1, 1.0, 0)?;
    let fio_ok = cfg.use_fio && fio::installed();
    let mut reps: Vec<PointReps> = points.iter().map(|_| PointReps::default()).collect();
    for rep in 0..cfg.reps {
        for (p, r) in points.iter().zip(reps.iter_mut()) {
            let w = lookups(&db, cfg.rows, p.threads, p.batch, cfg.duration_s, rep as u64 + 10)?;
            r.lookups.push(w.per_s);
            r.reads.push(w.reads as f64 / w.window_s.max(1e-9));
            r.cpu_us.push(w.process_cpu_ns as f64 / 1e3 / w.reads.max(1) as f64);
            r.hit.push(w.hit_ratio);
            if fio_ok {
                let (jobs, depth, engine) = p.fio_shape();
                if let Some(f) = fio::randread(heap, cfg.page_size, jobs, depth, engine, cfg.duration_s) {
                    r.fio.push(f.iops);
                    r.fio_cpu_us.push(f.cpu_us_per_read);
                }
                if cfg.page_size != 4096 {
                    r.fio_4k.extend(fio::randread_iops(heap, 4096, jobs, depth, engine, cfg.duration_s));
                }
                if p.threads > 1 {
                    r.fio_uring.extend(fio::randread_iops(
                        heap,
                        cfg.page_size,
                        1,
                        p.threads,
                        "io_uring",
                        cfg.duration_s,
                    ));
                }
            }
            if p.threads > 1 {
                r.iobench.push(iobench_sync_iops(heap, cfg, p.threads, table_bytes)?);
            }
        }
    }
    let mut out = Vec::new();
    for (p, r) in points.iter().zip(&reps) {
        let lk = Spread::of(&r.lookups);
        let fio = Spread::of_some(&r.fio);
        let m = MissLookups {
            threads: p.threads,
            batch: p.batch,
            buffer_pct,
            lookups_per_s: lk,
            engine_read_iops: Spread::of(&r.reads),
            hit_ratio: crate::measure::median(&r.hit),
            cpu_us_per_miss: Spread::of(&r.cpu_us),
            fio_iops: fio,
            fio_cpu_us_per_read: Spread::of_some(&r.fio_cpu_us),
            fio_4k_iops: if cfg.page_size == 4096 { fio } else { Spread::of_some(&r.fio_4k) },
            fio_uring_iops: Spread::of_some(&r.fio_uring),
            iobench_sync_iops: Spread::of_some(&r.iobench),
            lookups_over_fio: fio.map(|f| lk.median / f.median),
        };
        for line in m.lines(cfg) {
            env.note(line);
        }
        out.push(m);
    }
    Ok(out)
}
