//! `nvmedb lab xlog`: the experiments of seed 002 §6 on this machine, and the commit benchmark
//! of the fast log against the duplexed fdatasync file log.
//!
//! Owns: [`XlogConfig`], [`XlogResults`] and the [`Xlog`] experiment. Parts, one submodule each:
//! - **fig9** (`fig9`): transaction latency (p50/p99/p99.9) and throughput vs workers through
//!   the engine's `Database` with four logs — none, a memory-only log (`memlog`), the fast log
//!   (tmpfs ring), the duplexed file log (fdatasync) — on single-row update transactions; fio's
//!   4 KiB write + fdatasync rate is measured in the same run as the device reference.
//! - **fig10** (`commits`): write-size effect: 1 writer, `x_pwrite` + `x_fsync` (tmpfs ring;
//!   and a ring in a disk file msynced per frame) vs O_DIRECT pwrite + fdatasync, per size.
//! - **fig11** (`commits`): queue size vs group-commit (write) size on the fast side.
//! - **fig12** (`fig12`): destage priority vs a conventional workload under the three scheduler
//!   modes, on an *emulated* device with a bandwidth cap (labelled so everywhere).
//!
//! `report` writes the tables and plots. Every result row carries the durability statement of
//! its log. Invariant: every number printed is measured in this run; speed is reported, never
//! asserted.

mod commits;
mod fig12;
mod fig9;
mod memlog;
mod report;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::{fio, progress, LatencyHistogram, Workers};
use nvmedb::util::Rng;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The parts, in the order they run.
pub const PARTS: [&str; 4] = ["fig9", "fig10", "fig11", "fig12"];

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XlogConfig {
    /// Working directory on the real disk (databases, conventional rings, fio file).
    pub data_dir: PathBuf,
    /// Directory of the fast side's ring files (tmpfs: `/dev/shm`).
    pub ring_dir: PathBuf,
    /// Seconds per measured point.
    pub secs: f64,
    /// Worker counts of fig9.
    pub workers: Vec<usize>,
    /// Rows of the fig9 table.
    pub rows: u64,
    /// Commit sizes of fig10, bytes.
    pub fig10_sizes: Vec<usize>,
    /// Queue sizes of fig11, bytes.
    pub fig11_queues: Vec<usize>,
    /// Write sizes of fig11, bytes.
    pub fig11_sizes: Vec<usize>,
    /// Fast-side offered load of fig12, percent of the emulated device bandwidth.
    pub fig12_fast_pcts: Vec<f64>,
    /// Parts to run: any of [`PARTS`].
    pub parts: Vec<String>,
    /// Measure fio's fdatasync rate in the run (when fio is installed).
    pub use_fio: bool,
}

impl XlogConfig {
    /// The default scale (about two minutes on a 2-vCPU VM).
    pub fn default_scale(data_dir: PathBuf) -> Self {
        let ring_dir =
            if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { data_dir.clone() };
        Self {
            data_dir,
            ring_dir,
            secs: 2.0,
            workers: vec![1, 4, 20],
            rows: 10_000,
            fig10_sizes: vec![16, 256, 1024, 4096, 16384],
            fig11_queues: vec![4 << 10, 16 << 10, 32 << 10, 64 << 10],
            fig11_sizes: vec![1024, 4096, 16384],
            fig12_fast_pcts: vec![30.0, 45.0, 60.0],
            parts: vec!["fig9".into(), "fig10".into(), "fig11".into(), "fig12".into()],
            use_fio: true,
        }
    }

    /// Longer runs with more points.
    pub fn long(mut self) -> Self {
        self.secs = 10.0;
        self.workers = vec![1, 2, 4, 8, 16, 20, 32];
        self.rows = 100_000;
        self.fig10_sizes = vec![16, 64, 256, 1024, 4096, 16384, 65536];
        self.fig11_queues = vec![4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10];
        self.fig11_sizes = vec![512, 1024, 4096, 16384, 65536];
        self.fig12_fast_pcts = vec![20.0, 30.0, 45.0, 60.0, 75.0];
        self
    }

    /// A tiny scale for the end-to-end test (seconds, not minutes).
    pub fn tiny(mut self) -> Self {
        self.secs = 0.15;
        self.workers = vec![1, 2];
        self.rows = 200;
        self.fig10_sizes = vec![64, 4096];
        self.fig11_queues = vec![4 << 10, 32 << 10];
        self.fig11_sizes = vec![1024];
        self.fig12_fast_pcts = vec![30.0];
        self.use_fio = false;
        self
    }
}

/// One fig9 point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TxnPoint {
    /// Log kind: none, memory, fast, file.
    pub log: String,
    /// Worker threads.
    pub workers: usize,
    /// Transactions committed.
    pub txns: u64,
    /// Seconds measured.
    pub secs: f64,
    /// Transactions per second.
    pub txn_per_s: f64,
    /// Latency percentiles, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// What a committed transaction survives with this log.
    pub durability: String,
}

/// One fig10 / fig11 point (raw commits of `bytes`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitPoint {
    /// Path: fast (x_pwrite + x_fsync, tmpfs ring), fast-msync (ring in a disk file, msync per
    /// frame) or fdatasync (O_DIRECT pwrite + fdatasync).
    pub path: String,
    /// Negotiated queue size (fast side), bytes; 0 for fdatasync.
    pub queue_bytes: usize,
    /// Bytes per commit.
    pub bytes: usize,
    /// Commits per second.
    pub commits_per_s: f64,
    /// MB/s committed.
    pub mb_per_s: f64,
    /// Latency percentiles, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// What a commit survives.
    pub durability: String,
}

/// One fig12 point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SchedPoint {
    /// Scheduler mode.
    pub mode: String,
    /// Conventional workload offered, % of the emulated bandwidth.
    pub conventional_offered_pct: f64,
    /// Fast-side workload offered, %.
    pub fast_offered_pct: f64,
    /// Conventional workload achieved, %.
    pub conventional_pct: f64,
    /// Fast-side writes achieved, %.
    pub fast_pct: f64,
    /// Destaged to the device, %.
    pub destaged_pct: f64,
    /// The device (emulated).
    pub device: String,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XlogResults {
    /// fio: 4 KiB sequential write + fdatasync, one job, IOPS (same run, same disk).
    pub fio_fdatasync_iops: Option<f64>,
    /// fig9 points.
    pub fig9: Vec<TxnPoint>,
    /// fig10 points.
    pub fig10: Vec<CommitPoint>,
    /// fig11 points.
    pub fig11: Vec<CommitPoint>,
    /// fig12 points.
    pub fig12: Vec<SchedPoint>,
    /// Durability statement of each log kind used.
    pub durability: Vec<(String, String)>,
    /// fig9: file-log p99 / fast-log p99 per worker count.
    pub p99_ratio_file_over_fast: Vec<(usize, f64)>,
}

impl XlogConfig {
    fn on(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }

    /// The ring file of part `tag` (unique per process).
    fn ring_path(&self, tag: &str) -> PathBuf {
        self.ring_dir.join(format!("nvmedb-xloglab-{tag}-{}.ring", std::process::id()))
    }
}

/// Removes a scratch file or directory if it exists (the experiment cleans up after itself).
fn remove(path: &Path) {
    let _ = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
}

/// Runs `threads` closed-loop committers for `secs`: commits, seconds and latencies.
fn run_threads<F>(what: &str, threads: usize, secs: f64, commit: F) -> Result<(u64, f64, LatencyHistogram)>
where
    F: Fn(&mut Rng) -> nvmedb::Result<()> + Sync,
{
    let workers = Workers::new(what, threads, Duration::ZERO, Duration::from_secs_f64(secs)).with_latency();
    let run = workers.run(
        |t| Ok(Rng::new(t as u64 * 7919 + 1)),
        |rng, _| {
            commit(rng).map_err(LabError::engine(format!("{what}: a commit")))?;
            Ok(1)
        },
        &mut (),
    )?;
    Ok((run.ops, run.window.as_secs_f64(), run.latency))
}

/// The `nvmedb lab xlog` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Xlog;

impl Experiment for Xlog {
    const NAME: &'static str = "xlog";
    const TITLE: &'static str =
        "seed 002 §6: Fig. 9 (transactions by log), Fig. 10 (write size), Fig. 11 (queue size), Fig. 12 (scheduler)";
    type Config = XlogConfig;
    type Results = XlogResults;

    fn validate(cfg: &XlogConfig) -> Result<()> {
        experiment::known_parts("--parts", &cfg.parts, &PARTS)?;
        if cfg.on("fig9") {
            experiment::non_empty("--workers", &cfg.workers)?;
        }
        experiment::seconds("--secs", cfg.secs, false)
    }

    fn run(cfg: &XlogConfig, env: &RunEnv) -> Result<XlogResults> {
        std::fs::create_dir_all(&cfg.data_dir).map_err(LabError::io(&cfg.data_dir, "create directory"))?;
        let mut out = XlogResults {
            fio_fdatasync_iops: None,
            fig9: Vec::new(),
            fig10: Vec::new(),
            fig11: Vec::new(),
            fig12: Vec::new(),
            durability: Vec::new(),
            p99_ratio_file_over_fast: Vec::new(),
        };
        let steps = cfg.on("fig9") as usize * fig9::LOGS.len() * cfg.workers.len()
            + cfg.on("fig10") as usize * cfg.fig10_sizes.len()
            + cfg.on("fig11") as usize * cfg.fig11_queues.len() * cfg.fig11_sizes.len()
            + cfg.on("fig12") as usize * fig12::MODES.len() * cfg.fig12_fast_pcts.len();
        let pb = progress::bar(env.progress, steps as u64, "xlog lab");
        if cfg.use_fio && cfg.on("fig9") {
            pb.set_message("fio fdatasync reference");
            out.fio_fdatasync_iops = fio::fdatasync_iops(&cfg.data_dir, cfg.secs.max(1.0));
        }
        if cfg.on("fig9") {
            fig9::run(cfg, &pb, &mut out).map_err(LabError::in_part("fig9"))?;
        }
        if cfg.on("fig10") {
            commits::fig10(cfg, &pb, &mut out).map_err(LabError::in_part("fig10"))?;
        }
        if cfg.on("fig11") {
            commits::fig11(cfg, &pb, &mut out).map_err(LabError::in_part("fig11"))?;
        }
        if cfg.on("fig12") {
            fig12::run(cfg, &pb, &mut out).map_err(LabError::in_part("fig12"))?;
        }
        pb.finish_and_clear();
        Ok(out)
    }

    fn report(cfg: &XlogConfig, r: &XlogResults, env: &RunEnv) -> Result<Summary> {
        report::write(cfg, r, env)
    }
}
