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

/// Random point lookups from `threads` threads for `secs`, `batch` keys per call (1: one
/// `Table::read` each; more: `Table::read_many`): lookups per second, and lookups per
/// CPU-second of the client threads.
pub fn lookups(
    db: &Database,
    rows: u64,
    threads: usize,
    batch: usize,
    secs: f64,
    seed: u64,
) -> Result<(f64, f64)> {
    let t = db.table(TABLE).map_err(LabError::engine("opening the table"))?;
    let workers = Workers::new("point lookups", threads, Duration::ZERO, Duration::from_secs_f64(secs));
    let missing = |k: &Value| LabError::MissingRow { table: TABLE.into(), key: format!("{k:?}") };
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
        &mut (),
    )?;
    Ok((run.ops_per_s(), run.ops_per_cpu_s()))
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
                        let (rate, cpu_rate) =
                            lookups(&db, cfg.rows, threads, batch, cfg.duration_s, rep as u64 + 1)?;
                        v.push(rate);
                        per_cpu.push(cpu_rate);
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

/// Part "miss": lookups with a small buffer (raised to two frames per client when the
/// configured share is smaller), interleaved with fio (psync and io_uring) and iobench on the
/// heap file.
pub fn miss(cfg: &EngineConfig, env: &RunEnv, heap: &Path, table_bytes: u64) -> Result<MissLookups> {
    let threads = cfg.miss_threads;
    // Each client pins a page while it reads it, so the buffer needs at least two frames
    // per client; a small table's 1 % has fewer (20 K rows of 100 B: 8 frames for 32).
    let pct_bytes = table_bytes as f64 * cfg.miss_buffer_pct / 100.0;
    let floor_bytes = (2 * threads * cfg.page_size) as f64;
    let miss_buffer = if pct_bytes < floor_bytes {
        env.note(format!(
            "note: {}% of the table is {:.0} KiB, fewer than 2 frames per client; the buffer is raised to {} frames ({:.0} KiB, {:.1}% of the table)",
            cfg.miss_buffer_pct,
            pct_bytes / 1024.0,
            2 * threads,
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
    lookups(&db, cfg.rows, threads, 1, 1.0, 0)?;
    let (mut lk, mut eng, mut fio_p, mut fio_u, mut iob) = (vec![], vec![], vec![], vec![], vec![]);
    let mut hit = 0.0;
    let fio_ok = cfg.use_fio && fio::installed();
    for rep in 0..cfg.reps {
        let before = db.buffer_stats().0;
        let t0 = std::time::Instant::now();
        lk.push(lookups(&db, cfg.rows, threads, 1, cfg.duration_s, rep as u64 + 10)?.0);
        let d = db.buffer_stats().0.since(&before);
        eng.push(d.reads as f64 / t0.elapsed().as_secs_f64());
        hit = d.hit_ratio();
        if fio_ok {
            fio_p.extend(fio::randread_iops(heap, cfg.page_size, threads, 1, "psync", cfg.duration_s));
            fio_u.extend(fio::randread_iops(heap, cfg.page_size, 1, threads, "io_uring", cfg.duration_s));
        }
        iob.push(iobench_sync_iops(heap, cfg, threads, table_bytes)?);
    }
    let eng_s = Spread::of(&eng);
    let (fp, fu) = (Spread::of_some(&fio_p), Spread::of_some(&fio_u));
    let m = MissLookups {
        threads,
        buffer_pct,
        lookups_per_s: Spread::of(&lk),
        engine_read_iops: eng_s,
        hit_ratio: hit,
        ratio_vs_fio_psync: fp.map(|f| eng_s.median / f.median),
        ratio_vs_fio_uring: fu.map(|f| eng_s.median / f.median),
        fio_psync_iops: fp,
        fio_uring_iops: fu,
        iobench_sync_iops: Spread::of(&iob),
    };
    for line in m.lines(cfg) {
        env.note(line);
    }
    Ok(m)
}
