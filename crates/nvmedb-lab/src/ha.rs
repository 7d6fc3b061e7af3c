//! `nvmedb lab ha`: the cost of high availability on this machine.
//!
//! Owns: seed 000 Case B — primitive single-row UPDATE throughput of a single database vs an HA
//! pair (eager log shipping; eager log shipping plus synchronous data-page mirroring) across
//! table-buffer sizes, standby in the same process over loopback TCP — and seed 002 Fig. 13 —
//! the distribution of the delay from a record's append on the primary to the standby's
//! acknowledgement (shadow-counter update) covering it.
//!
//! Invariants: every point starts from the same loaded template (copied, then the standby is
//! seeded from the copy), so configurations differ only in replication; throughput counts only
//! commits acknowledged inside the measured window; the summary states the machine and that
//! primary and standby share it (loopback, same disk, same CPUs).

use crate::machine::RunContext;
use crate::primitive::workload::{load, prewarm, run_update, table_name};
use crate::report::{LineChart, ResultsDir, Series};
use hdrhistogram::Histogram;
use nvmedb::repl::{
    open_primary, seed_standby, MirrorConfig, ReplConfig, ReplicationMode, Standby, StandbyConfig,
    StandbyPolicy,
};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, Database, Options, Table};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Configuration of the experiment.
#[derive(Debug, Clone, Serialize)]
pub struct HaConfig {
    /// Scratch directory (recreated): the template, the primary and the standby copies.
    pub data_dir: PathBuf,
    /// Results root (`<results>/ha/<time>/`).
    pub results: PathBuf,
    /// Tables.
    pub tables: usize,
    /// Rows per table.
    pub rows: u64,
    /// Table buffer sizes, percent of the data.
    pub buffers: Vec<f64>,
    /// Concurrent clients.
    pub clients: usize,
    /// Seconds of warm-up per point.
    pub warmup_s: f64,
    /// Seconds measured per point.
    pub duration_s: f64,
    /// Repetitions of each point.
    pub reps: usize,
    /// Seconds of the replication-delay run.
    pub delay_s: f64,
}

impl HaConfig {
    /// Default scale: about two to three minutes.
    pub fn default_scale(data_dir: PathBuf, results: PathBuf) -> Self {
        Self {
            data_dir,
            results,
            tables: 4,
            rows: 4000,
            buffers: vec![1.0, 100.0],
            clients: 20,
            warmup_s: 1.0,
            duration_s: 5.0,
            reps: 2,
            delay_s: 5.0,
        }
    }

    /// Full scale (seed 000's 10 tables; longer points, more buffer sizes).
    pub fn full_scale(data_dir: PathBuf, results: PathBuf) -> Self {
        Self {
            tables: 10,
            rows: 50_000,
            buffers: vec![1.0, 10.0, 50.0, 100.0],
            warmup_s: 3.0,
            duration_s: 20.0,
            reps: 3,
            delay_s: 20.0,
            ..Self::default_scale(data_dir, results)
        }
    }
}

/// The three configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum HaKind {
    /// No standby.
    Single,
    /// Eager log shipping to one standby.
    HaLog,
    /// Eager log shipping plus synchronous data-page mirroring.
    HaMirror,
}

impl HaKind {
    fn name(self) -> &'static str {
        match self {
            HaKind::Single => "single",
            HaKind::HaLog => "ha-log",
            HaKind::HaMirror => "ha-mirror",
        }
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct HaPoint {
    /// Configuration name.
    pub config: String,
    /// Table buffer, percent of data.
    pub buffer_pct: f64,
    /// Repetition.
    pub rep: usize,
    /// Commits acknowledged in the window.
    pub commits: u64,
    /// Commits per second.
    pub tps: f64,
}

/// One row of the delay distribution.
#[derive(Debug, Clone, Serialize)]
pub struct DelayRow {
    /// Percentile (0..100).
    pub percentile: f64,
    /// Delay, microseconds.
    pub delay_us: f64,
}

/// What the run produced.
#[derive(Debug, Clone, Serialize)]
pub struct HaResults {
    /// Every point.
    pub points: Vec<HaPoint>,
    /// Median throughput per (config, buffer) and the overhead vs single, percent.
    pub summary: Vec<(String, f64, f64, f64)>,
    /// Delay percentiles.
    pub delay: Vec<DelayRow>,
    /// Delay samples.
    pub delay_samples: u64,
}

fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

fn options(buffer_pct: f64) -> Options {
    Options {
        table_buffer: BufferSize::PercentOfData(buffer_pct),
        index_buffer: BufferSize::Bytes(256 << 20),
        pin_indexes: true,
        ..Options::default()
    }
}

fn copy_data(from: &Path, to: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).map_err(err("create"))?;
    for e in std::fs::read_dir(from).map_err(err("read template"))? {
        let e = e.map_err(err("read template"))?;
        let ft = e.file_type().map_err(err("read template"))?;
        if ft.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).map_err(err("copy template"))?;
        } else if ft.is_dir() {
            // The log (wal/, wal-mirror/): the primary continues the template's log, so the
            // standby seeded from it joins at the template's checkpoint.
            copy_data(&e.path(), &to.join(e.file_name()))?;
        }
    }
    Ok(())
}

const SECRET: &[u8] = b"nvmedb-lab-ha";

fn run_clients(cfg: &HaConfig, tables: &[Table], seed: u64) -> Result<u64, String> {
    let stop = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let commits = AtomicU64::new(0);
    let failed: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for c in 0..cfg.clients {
            let (stop, measuring, commits, failed) = (&stop, &measuring, &commits, &failed);
            s.spawn(move || {
                let mut rng = Rng::new(seed * 1000 + c as u64);
                while !stop.load(Ordering::Relaxed) {
                    let t = &tables[rng.below(tables.len() as u64) as usize];
                    let sid = rng.below(cfg.rows) as i64;
                    let counted = measuring.load(Ordering::Relaxed);
                    match run_update(t, sid, rng.next_u64() as i64 >> 1) {
                        Ok(_) => {
                            if counted && measuring.load(Ordering::Relaxed) {
                                commits.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) if e.is_retryable() => {}
                        Err(e) => {
                            failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e.to_string());
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(cfg.warmup_s));
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs_f64(cfg.duration_s));
        measuring.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(format!("a client failed: {e}"));
    }
    Ok(commits.load(Ordering::Relaxed))
}

/// Runs one point; with `delays`, also returns the replication delays recorded (ns).
fn point(
    cfg: &HaConfig,
    kind: HaKind,
    buffer: f64,
    seed: u64,
    delays: bool,
) -> Result<(u64, Vec<u64>), String> {
    let template = cfg.data_dir.join("template");
    let p = cfg.data_dir.join("primary");
    let s = cfg.data_dir.join("standby");
    copy_data(&template, &p)?;
    let _ = std::fs::remove_dir_all(&s);
    let mut standby = None;
    let (db, log) = match kind {
        HaKind::Single => (Database::open(&p, options(buffer)).map_err(err("open"))?, None),
        HaKind::HaLog | HaKind::HaMirror => {
            seed_standby(&p, &s).map_err(err("seed standby"))?;
            let sb = Standby::start(StandbyConfig {
                listen: "127.0.0.1:0".into(),
                data_dir: s.clone(),
                secret: SECRET.to_vec(),
                apply: kind == HaKind::HaLog,
                options: options(100.0),
            })
            .map_err(err("start standby"))?;
            let addr = sb.addr().to_string();
            let rc = ReplConfig {
                standbys: vec![addr.clone()],
                secret: SECRET.to_vec(),
                mode: ReplicationMode::Eager,
                policy: StandbyPolicy::Fail { timeout: Duration::from_secs(30) },
                record_delays: delays,
                ..ReplConfig::default()
            };
            let mirror =
                (kind == HaKind::HaMirror).then(|| MirrorConfig { addr, secret: SECRET.to_vec(), epoch: 1 });
            let (db, log) = open_primary(&p, options(buffer), rc, mirror).map_err(err("open primary"))?;
            standby = Some(sb);
            (db, Some(log))
        }
    };
    let tables: Vec<Table> =
        (0..cfg.tables).map(|i| db.table(&table_name(i))).collect::<Result<_, _>>().map_err(err("table"))?;
    prewarm(&tables, cfg.rows, buffer / 100.0).map_err(|e| e.to_string())?;
    if let Some(l) = &log {
        l.take_delays();
    }
    let commits = run_clients(cfg, &tables, seed)?;
    let d = log.as_ref().map(|l| l.take_delays()).unwrap_or_default();
    drop(tables);
    drop(db);
    drop(log);
    drop(standby);
    Ok((commits, d))
}

/// Runs the experiment and writes `<results>/ha/<time>/`. Returns the results and the summary.
pub fn run(cfg: &HaConfig) -> Result<(HaResults, String, PathBuf), String> {
    let ctx = RunContext::capture();
    let template = cfg.data_dir.join("template");
    let _ = std::fs::remove_dir_all(&cfg.data_dir);
    {
        let db = Database::open(&template, options(100.0)).map_err(err("create template"))?;
        load(&db, cfg.tables, cfg.rows, 4, true).map_err(|e| e.to_string())?;
        db.close().map_err(err("close template"))?;
    }
    let mut points = Vec::new();
    let mut seed = 1;
    for rep in 0..cfg.reps {
        for &b in &cfg.buffers {
            for kind in [HaKind::Single, HaKind::HaLog, HaKind::HaMirror] {
                seed += 1;
                let (commits, _) = point(cfg, kind, b, seed, false)?;
                let tps = commits as f64 / cfg.duration_s;
                eprintln!("ha: {:<9} buffer {:>5.1}%  rep {rep}  {:>9.0} tx/s", kind.name(), b, tps);
                points.push(HaPoint { config: kind.name().into(), buffer_pct: b, rep, commits, tps });
            }
        }
    }
    // Replication delay (seed 002 Fig. 13): the HA log configuration at the largest buffer.
    let dcfg = HaConfig { duration_s: cfg.delay_s, ..cfg.clone() };
    let top = cfg.buffers.iter().copied().fold(0.0, f64::max);
    let (_, samples) = point(&dcfg, HaKind::HaLog, top, 999, true)?;
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(err("histogram"))?;
    for s in &samples {
        h.saturating_record((*s).max(1));
    }
    let pcts = [1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0];
    let delay: Vec<DelayRow> = if samples.is_empty() {
        Vec::new()
    } else {
        pcts.iter()
            .map(|&p| DelayRow { percentile: p, delay_us: h.value_at_quantile(p / 100.0) as f64 / 1000.0 })
            .collect()
    };
    let median = |kind: &str, b: f64| {
        let mut v: Vec<f64> =
            points.iter().filter(|p| p.config == kind && p.buffer_pct == b).map(|p| p.tps).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        if v.is_empty() {
            0.0
        } else if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
        }
    };
    let mut summary = Vec::new();
    let mut text = format!(
        "nvmedb lab ha — seed 000 Case B and seed 002 Fig. 13 on this machine\nmachine: {}\n\
         primary and standby share this machine (loopback TCP, same disk, same CPUs); {} tables x {} rows, {} clients, {} s per point, {} reps\n\n\
         {:<10} {:>8} {:>12} {:>10}\n",
        ctx.one_line(),
        cfg.tables,
        cfg.rows,
        cfg.clients,
        cfg.duration_s,
        cfg.reps,
        "config",
        "buffer%",
        "median tx/s",
        "overhead%"
    );
    for &b in &cfg.buffers {
        let single = median("single", b);
        for kind in ["single", "ha-log", "ha-mirror"] {
            let m = median(kind, b);
            let over = if single > 0.0 { 100.0 * (1.0 - m / single) } else { 0.0 };
            text.push_str(&format!("{kind:<10} {b:>8.1} {m:>12.0} {over:>10.1}\n"));
            summary.push((kind.to_string(), b, m, over));
        }
    }
    text.push_str(&format!(
        "\nreplication delay (append on primary -> standby's acknowledgement covering it), {} samples:\n",
        samples.len()
    ));
    for d in &delay {
        text.push_str(&format!("  p{:<6} {:>10.1} us\n", d.percentile, d.delay_us));
    }
    let results = HaResults { points: points.clone(), summary, delay, delay_samples: samples.len() as u64 };
    let dir = ResultsDir::create(&cfg.results, "ha").map_err(|e| e.to_string())?;
    dir.write_csv("throughput", &results.points).map_err(|e| e.to_string())?;
    dir.write_csv("delay", &results.delay).map_err(|e| e.to_string())?;
    dir.write_json("ha", &ctx, cfg, &results).map_err(|e| e.to_string())?;
    dir.write_text("summary.txt", &text).map_err(|e| e.to_string())?;
    let mut chart = LineChart::new(
        "Update throughput: single vs HA (seed 000 Case B)",
        "table buffer (% of data)",
        "tx/s",
    )
    .subtitle("primary and standby on one machine over loopback");
    for (i, kind) in ["single", "ha-log", "ha-mirror"].iter().enumerate() {
        let pts: Vec<(f64, f64)> = cfg.buffers.iter().map(|&b| (b, median(kind, b))).collect();
        chart = chart.series(Series::new(*kind, pts).color(i));
    }
    chart.write(dir.path(), "throughput").map_err(|e| e.to_string())?;
    if !results.delay.is_empty() {
        let pts: Vec<(f64, f64)> = results.delay.iter().map(|d| (d.percentile, d.delay_us)).collect();
        LineChart::new("Replication delay (seed 002 Fig. 13)", "percentile", "delay (us)")
            .subtitle("append on primary -> shadow counter covers it")
            .series(Series::new("ha-log, eager", pts))
            .write(dir.path(), "delay")
            .map_err(|e| e.to_string())?;
    }
    let _ = std::fs::remove_dir_all(&cfg.data_dir);
    Ok((results, text, dir.path().to_path_buf()))
}
