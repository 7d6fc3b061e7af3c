//! The measurements of `lab peers`, each engine in turn inside every repetition (A B C D A B C D
//! …), so a noisy moment of the shared machine hits every engine alike.
//!
//! Owns: [`run`]: load every table into every engine (timed: the bulk-load figures), in-memory
//! point lookups (single and batched) on every table, durable single-row updates at each
//! thread count beside fio's fdatasync rate, and random lookups through a 1 % cache with many
//! threads beside fio's random reads. Invariants: every lookup checks its row; every update is
//! durable when it returns; the data directories are removed at the end unless kept.

use super::engines::{drop_from_page_cache, value, Cache, Kind, Peer, KINDS, MANY};
use super::{MissFio, PeersConfig, PeersResults, Rate, Ratio, TableSpec};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::measure::{fio, Spread, Workers};
use nvmedb::util::Rng;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn dir_of(cfg: &PeersConfig, kind: Kind, t: &TableSpec) -> PathBuf {
    cfg.data_dir.join(format!("{}-{}x{}", kind.name().to_lowercase(), t.rows, t.value_bytes))
}

/// How a window of client threads uses an engine.
#[derive(Clone, Copy)]
enum Op {
    Get,
    GetMany,
    Update,
}

/// Runs `threads` clients of `peer` for `secs`: operations per second.
fn window(peer: &Peer, t: &TableSpec, op: Op, threads: usize, secs: f64, seed: u64) -> Result<f64> {
    Ok(window_cpu(peer, t, op, threads, secs, seed)?.0)
}

/// [`window`], with the CPU time of the whole process per operation, µs (every engine runs in
/// this process; user and system time, so each engine's reads through the kernel count).
fn window_cpu(
    peer: &Peer,
    t: &TableSpec,
    op: Op,
    threads: usize,
    secs: f64,
    seed: u64,
) -> Result<(f64, f64)> {
    let what = format!("{} clients of {}", threads, peer.kind().name());
    let workers = Workers::new(what, threads, Duration::from_millis(200), Duration::from_secs_f64(secs));
    let rows = t.rows;
    let width = t.value_bytes;
    let run = workers.run(
        |th| Ok((peer.client()?, Rng::new(seed.wrapping_mul(7919) + th as u64), [0u64; MANY])),
        |(c, rng, keys), _| match op {
            Op::Get => {
                for _ in 0..16 {
                    c.get(rng.below(rows))?;
                }
                Ok(16)
            }
            Op::GetMany => {
                for k in keys.iter_mut() {
                    *k = rng.below(rows);
                }
                c.get_many(keys)?;
                Ok(MANY as u64)
            }
            Op::Update => {
                let k = rng.below(rows);
                c.update(k, &value(k, width, rng.next_u64()))?;
                Ok(1)
            }
        },
        &mut (),
    )?;
    Ok((run.ops_per_s(), run.process_cpu_ns as f64 / 1e3 / run.ops.max(1) as f64))
}

/// Collects per-engine repetitions of one measurement.
struct Reps(Vec<(Kind, Vec<f64>, Vec<f64>)>);

impl Reps {
    fn new(kinds: &[Kind]) -> Self {
        Self(kinds.iter().map(|&k| (k, Vec::new(), Vec::new())).collect())
    }
    fn push(&mut self, kind: Kind, v: f64) {
        if let Some((_, vs, _)) = self.0.iter_mut().find(|(k, _, _)| *k == kind) {
            vs.push(v);
        }
    }
    /// A rate with the CPU it took per operation, µs.
    fn push_cpu(&mut self, kind: Kind, (v, cpu_us): (f64, f64)) {
        if let Some((_, vs, cpu)) = self.0.iter_mut().find(|(k, _, _)| *k == kind) {
            vs.push(v);
            cpu.push(cpu_us);
        }
    }
    fn rates(&self, workload: &str) -> Vec<Rate> {
        self.0
            .iter()
            .filter(|(_, v, _)| !v.is_empty())
            .map(|(k, v, cpu)| Rate {
                workload: workload.to_string(),
                engine: *k,
                per_s: Spread::of(v),
                cpu_us_per_op: Spread::of_some(cpu),
            })
            .collect()
    }
}

/// One 1 %-cache workload's repetitions: every engine's, and fio's beside them.
struct ShapeReps {
    engines: Reps,
    fio_page: Vec<f64>,
    fio_cpu: Vec<f64>,
    fio_4k: Vec<f64>,
}

impl ShapeReps {
    fn new(kinds: &[Kind]) -> Self {
        Self { engines: Reps::new(kinds), fio_page: Vec::new(), fio_cpu: Vec::new(), fio_4k: Vec::new() }
    }
}

/// The name of a miss-part workload: "lookup 1% cache 1M×1024B, 32 thr" or "lookup×16 …, 1 thr".
pub fn miss_workload(t: &TableSpec, threads: usize, keys: usize) -> String {
    let what = if keys > 1 { format!("lookup×{keys}") } else { "lookup".into() };
    format!("{what} 1% cache {}, {threads} thr", t.label())
}

/// Ratios of nvmedb's median to every peer's, per workload.
pub fn ratios(rates: &[Rate], lower_is_better: bool) -> Vec<Ratio> {
    let mut out = Vec::new();
    for r in rates.iter().filter(|r| r.engine != Kind::Nvmedb) {
        let Some(n) = rates.iter().find(|n| n.engine == Kind::Nvmedb && n.workload == r.workload) else {
            continue;
        };
        let (a, b) = (n.per_s.median, r.per_s.median);
        let ratio = if lower_is_better { b / a.max(1e-12) } else { a / b.max(1e-12) };
        out.push(Ratio { workload: r.workload.clone(), peer: r.engine, nvmedb_over_peer: ratio });
    }
    out
}

/// Runs the parts `cfg` asks for, after loading every table into every engine.
pub fn run(cfg: &PeersConfig, env: &RunEnv) -> Result<PeersResults> {
    let kinds: Vec<Kind> = KINDS.iter().copied().filter(|k| cfg.engines.contains(k)).collect();
    let mut res = PeersResults::default();
    std::fs::create_dir_all(&cfg.data_dir).map_err(LabError::io(&cfg.data_dir, "create directory"))?;
    load_all(cfg, env, &kinds, &mut res)?;
    if cfg.wants("memory") {
        memory(cfg, env, &kinds, &mut res)?;
    }
    if cfg.wants("commits") {
        commits(cfg, env, &kinds, &mut res)?;
    }
    if cfg.wants("miss") {
        misses(cfg, env, &kinds, &mut res)?;
    }
    if !cfg.keep_data {
        for t in &cfg.tables {
            for &k in &kinds {
                let d = dir_of(cfg, k, t);
                if d.exists() {
                    std::fs::remove_dir_all(&d).map_err(LabError::io(&d, "remove"))?;
                }
            }
        }
    }
    Ok(res)
}

/// 1. Loads every table into every engine (interleaved by table), timed.
fn load_all(cfg: &PeersConfig, env: &RunEnv, kinds: &[Kind], res: &mut PeersResults) -> Result<()> {
    let mut load = Reps::new(kinds);
    for t in &cfg.tables {
        for &k in kinds {
            let dir = dir_of(cfg, k, t);
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(LabError::io(&dir, "remove"))?;
            }
            let mut p = Peer::open(k, &dir, t, Cache::Whole, cfg.table_page_size)?;
            let bar = crate::measure::progress::bar(
                env.progress,
                t.rows,
                format!("loading {} rows × {} B into {}", t.rows, t.value_bytes, k.name()),
            );
            let t0 = Instant::now();
            p.load(t.rows, t.value_bytes, |n| bar.set_position(n))?;
            let s = t0.elapsed().as_secs_f64();
            bar.finish_and_clear();
            env.note(format!("load {} into {}: {:.1} s", t.label(), k.name(), s));
            if t.is_load_table(cfg) {
                load.push(k, s);
            }
        }
    }
    if let Some(t) = cfg.tables.iter().find(|t| t.is_load_table(cfg)) {
        res.load_s = load.rates(&format!("bulk load {}", t.label()));
    }
    Ok(())
}

/// 2. In-memory point lookups, one thread (per core), single and batched.
fn memory(cfg: &PeersConfig, env: &RunEnv, kinds: &[Kind], res: &mut PeersResults) -> Result<()> {
    for t in &cfg.tables {
        let peers: Vec<Peer> = kinds
            .iter()
            .map(|&k| Peer::open(k, &dir_of(cfg, k, t), t, Cache::Whole, cfg.table_page_size))
            .collect::<Result<_>>()?;
        // Warm every cache with one pass over the keys.
        for p in &peers {
            let mut c = p.client()?;
            for key in 0..t.rows {
                c.get(key)?;
            }
        }
        let (mut one, mut many) = (Reps::new(kinds), Reps::new(kinds));
        for rep in 0..cfg.reps {
            for p in &peers {
                let r1 = window(p, t, Op::Get, 1, cfg.duration_s, rep as u64)?;
                let rm = window(p, t, Op::GetMany, 1, cfg.duration_s, rep as u64 + 100)?;
                env.note(format!(
                    "{} {}: {:.0} lookups/s, read_many {:.0}/s",
                    t.label(),
                    p.kind().name(),
                    r1,
                    rm
                ));
                one.push(p.kind(), r1);
                many.push(p.kind(), rm);
            }
        }
        res.memory.extend(one.rates(&format!("lookup {}", t.label())));
        res.memory.extend(many.rates(&format!("lookup×{MANY} {}", t.label())));
    }
    Ok(())
}

/// 3. Durable single-row updates beside fio's fdatasync rate, on the smallest table.
fn commits(cfg: &PeersConfig, env: &RunEnv, kinds: &[Kind], res: &mut PeersResults) -> Result<()> {
    let t = cfg.tables.iter().min_by_key(|t| t.data_bytes()).expect("validated: a table");
    let peers: Vec<Peer> = kinds
        .iter()
        .map(|&k| Peer::open(k, &dir_of(cfg, k, t), t, Cache::Whole, cfg.table_page_size))
        .collect::<Result<_>>()?;
    let mut fio_v = Vec::new();
    let mut by_threads: Vec<(usize, Reps)> =
        cfg.commit_threads.iter().map(|&n| (n, Reps::new(kinds))).collect();
    for rep in 0..cfg.reps {
        fio_v.extend(fio::fdatasync_iops(&cfg.data_dir, cfg.duration_s));
        for (threads, reps) in by_threads.iter_mut() {
            for p in &peers {
                let r = window(p, t, Op::Update, *threads, cfg.duration_s, rep as u64 + 200)?;
                env.note(format!("{} threads, {}: {:.0} durable updates/s", threads, p.kind().name(), r));
                reps.push(p.kind(), r);
            }
        }
    }
    res.fio_fdatasync_iops = Spread::of_some(&fio_v);
    for (threads, reps) in &by_threads {
        res.commits.extend(reps.rates(&format!("updates {threads} thr")));
    }
    Ok(())
}

/// Random lookups through a 1 % cache (part 4), beside fio's random reads on nvmedb's data
/// file at its page size and at 4 KiB in the same shape: many threads of one read each, one
/// thread, and one thread's batches of MANY keys (fio: one job with MANY reads in flight).
fn misses(cfg: &PeersConfig, env: &RunEnv, kinds: &[Kind], res: &mut PeersResults) -> Result<()> {
    let t = cfg.tables.iter().max_by_key(|t| t.data_bytes()).expect("validated: a table");
    // At least four 16 KiB pages per client (each pins a page while it reads).
    let floor = (cfg.miss_threads.max(MANY) * 4 * 16384) as u64;
    let cache = ((t.data_bytes() as f64 * cfg.miss_cache_pct / 100.0) as u64).max(floor);
    let dirs: Vec<PathBuf> = kinds.iter().map(|&k| dir_of(cfg, k, t)).collect();
    let peers: Vec<Peer> = kinds
        .iter()
        .zip(&dirs)
        .map(|(&k, d)| Peer::open(k, d, t, Cache::Bytes(cache), cfg.table_page_size))
        .collect::<Result<_>>()?;
    let heap = peers.iter().zip(&dirs).find_map(|(p, d)| p.data_file(d));
    let page = peers.iter().find_map(Peer::data_page_size).unwrap_or(4096);
    res.miss_page_bytes = page;
    // (threads, keys per call, fio jobs, fio depth, fio engine)
    let shapes = [
        (cfg.miss_threads, 1, cfg.miss_threads, 1, "psync"),
        (1, 1, 1, 1, "psync"),
        (1, MANY, 1, MANY, "io_uring"),
    ];
    let mut by_shape: Vec<ShapeReps> = shapes.iter().map(|_| ShapeReps::new(kinds)).collect();
    for rep in 0..cfg.reps {
        for (&(threads, keys, jobs, depth, engine), sr) in shapes.iter().zip(by_shape.iter_mut()) {
            let ShapeReps { engines: reps, fio_page, fio_cpu, fio_4k } = sr;
            if let Some(heap) = &heap {
                if let Some(f) = fio::randread(heap, page, jobs, depth, engine, cfg.duration_s) {
                    fio_page.push(f.iops);
                    fio_cpu.push(f.cpu_us_per_read);
                }
                if page != 4096 {
                    fio_4k.extend(fio::randread_iops(heap, 4096, jobs, depth, engine, cfg.duration_s));
                }
            }
            let op = if keys > 1 { Op::GetMany } else { Op::Get };
            for (p, d) in peers.iter().zip(&dirs) {
                drop_from_page_cache(&p.cached_files(d))?;
                let r = window_cpu(p, t, op, threads, cfg.duration_s, rep as u64 + 300)?;
                env.note(format!(
                    "1 % cache, {threads} thread(s), {keys} key(s) per call, {}: {:.0} lookups/s, {:.1} CPU µs per lookup",
                    p.kind().name(),
                    r.0,
                    r.1
                ));
                reps.push_cpu(p.kind(), r);
            }
        }
    }
    for (&(threads, keys, jobs, depth, engine), sr) in shapes.iter().zip(&by_shape) {
        let ShapeReps { engines: reps, fio_page, fio_cpu, fio_4k } = sr;
        let workload = miss_workload(t, threads, keys);
        res.miss.extend(reps.rates(&workload));
        let fio_page = Spread::of_some(fio_page);
        res.miss_fio.push(MissFio {
            workload,
            shape: format!("{jobs} job(s) × {depth} in flight, {engine}"),
            page_iops: fio_page,
            page_cpu_us_per_read: Spread::of_some(fio_cpu),
            iops_4k: if page == 4096 { fio_page } else { Spread::of_some(fio_4k) },
        });
    }
    res.miss_cache_bytes = cache;
    Ok(())
}
