//! `nvmedb lab commit`: durable single-row update transactions from several threads against
//! fio's 4 KiB write + fdatasync rate on the same disk, the log alone (append + wait for
//! durability on the duplexed file log, part `log`) as the engine's own ceiling, and the
//! recovery time of a large log.
//!
//! Owns: [`CommitConfig`], [`CommitResults`] and the [`CommitBench`] experiment. Submodules:
//! `parts` (the measurements). Invariants: the thread counts are configuration, never fixed in
//! code; each repetition runs fio, then every thread count of every commit part, so the
//! references and the engine interleave; every figure is printed beside fio's rate.

mod parts;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::Spread;
use crate::report::{Figure, TextTable};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The parts, in the order they run.
pub const PARTS: [&str; 3] = ["commits", "log", "recovery"];

/// Commit benchmark settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitConfig {
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
    /// Parts to run: any of [`PARTS`].
    #[serde(default = "default_parts")]
    pub parts: Vec<String>,
    /// Bytes per record of the `log` part.
    #[serde(default = "default_log_payload")]
    pub log_payload_bytes: usize,
}

fn default_parts() -> Vec<String> {
    vec!["commits".into(), "recovery".into()]
}
fn default_log_payload() -> usize {
    100
}

impl Default for CommitConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("nvmedb-data/commitbench"),
            rows: 100_000,
            duration_s: 5.0,
            threads: vec![1, 4, 20],
            reps: 3,
            recovery_log_bytes: 1 << 30,
            group_commit_wait_us: nvmedb::wal::WalOptions::default().group_commit_wait_us,
            targeted_wakeups: true,
            parts: default_parts(),
            log_payload_bytes: default_log_payload(),
        }
    }
}

impl CommitConfig {
    fn wants(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

/// Commits at one thread count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitPoint {
    /// Client threads.
    pub threads: usize,
    /// Commits per second over the repetitions.
    pub commits_per_s: Spread,
    /// Mean commits per log flush (group commit), last repetition.
    pub commits_per_flush: f64,
    /// Commit latency p50, µs, last repetition.
    pub p50_us: f64,
    /// Commit latency p99, µs, last repetition.
    pub p99_us: f64,
}

/// What the recovery part measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecoveryResult {
    /// Log bytes written without a checkpoint, then replayed.
    pub log_bytes: u64,
    /// Time to open the database (redo + undo), s.
    pub open_s: f64,
    /// Records read by recovery.
    pub records: u64,
    /// Page changes redone.
    pub pages_redone: u64,
    /// Redo time as recovery reports it, s.
    pub redo_s: f64,
}

/// Commit benchmark results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitResults {
    /// fio: 4 KiB sequential write + fdatasync per write, one job, IOPS (one run per repetition).
    pub fio_fdatasync_iops: Option<Spread>,
    /// Durable single-row updates through the engine, per thread count.
    pub engine: Vec<CommitPoint>,
    /// Append + wait for durability on the duplexed file log alone, per thread count.
    pub log: Vec<CommitPoint>,
    /// The recovery part.
    pub recovery: Option<RecoveryResult>,
}

/// The `nvmedb lab commit` experiment.
#[derive(Debug, Clone, Copy)]
pub struct CommitBench;

impl Experiment for CommitBench {
    const NAME: &'static str = "commit";
    const TITLE: &'static str = "durable commits vs fio's fdatasync rate, the log alone, and recovery time";
    type Config = CommitConfig;
    type Results = CommitResults;

    fn validate(cfg: &CommitConfig) -> Result<()> {
        experiment::known_parts("--parts", &cfg.parts, &PARTS)?;
        experiment::non_empty("--threads", &cfg.threads)?;
        if cfg.threads.contains(&0) || cfg.reps == 0 || cfg.rows == 0 {
            return Err(LabError::config("--threads/--reps/--rows", "must be at least 1"));
        }
        experiment::seconds("--duration", cfg.duration_s, false)
    }

    fn run(cfg: &CommitConfig, env: &RunEnv) -> Result<CommitResults> {
        parts::run(cfg, env)
    }

    fn report(cfg: &CommitConfig, r: &CommitResults, env: &RunEnv) -> Result<Summary> {
        let fio = r.fio_fdatasync_iops;
        let mut t = TextTable::new([
            "path",
            "threads",
            "commits/s",
            "commits/flush",
            "p50 µs",
            "p99 µs",
            "x fio fdatasync",
        ])
        .title(format!(
            "Durable commits: {} rows, {} s per point, {} repetitions, group-commit wait ≤ {} µs",
            cfg.rows, cfg.duration_s, cfg.reps, cfg.group_commit_wait_us
        ));
        let mut figures = Vec::new();
        for (path, points) in [("engine", &r.engine), ("log alone", &r.log)] {
            for p in points {
                t.row([
                    path.to_string(),
                    p.threads.to_string(),
                    p.commits_per_s.to_string(),
                    format!("{:.1}", p.commits_per_flush),
                    format!("{:.1}", p.p50_us),
                    format!("{:.1}", p.p99_us),
                    fio.map_or("-".into(), |f| format!("{:.2}", p.commits_per_s.median / f.median)),
                ]);
                let key = if path == "engine" { "engine" } else { "log" };
                let mut f = Figure::repeated(
                    format!("{key}/threads{}/commits_per_s", p.threads),
                    format!("{path}: durable commits from {} threads", p.threads),
                    p.commits_per_s,
                    "commits/s",
                );
                if let Some(fio) = fio {
                    f = f.against("fio 4 KiB write + fdatasync, 1 job, same disk", fio.median);
                }
                figures.push(f);
            }
        }
        if let Some(f) = fio {
            t.note(format!("fio 4 KiB write + fdatasync, 1 job, same disk, same run: {f} IOPS"));
        }
        t.note(format!("machine: {}", env.context.one_line()));
        let mut text = t.to_string();
        if let Some(rec) = &r.recovery {
            text.push_str(&format!(
                "recovery of {:.0} MiB of log: {:.2} s to open ({} records, {} page changes redone, redo {:.2} s)\n",
                rec.log_bytes as f64 / (1 << 20) as f64,
                rec.open_s,
                rec.records,
                rec.pages_redone,
                rec.redo_s
            ));
            figures.push(Figure::new(
                "recovery/open_s",
                format!("open after a crash with {:.0} MiB of log", rec.log_bytes as f64 / (1 << 20) as f64),
                rec.open_s,
                "s",
            ));
        }
        Ok(Summary { text, figures })
    }
}
