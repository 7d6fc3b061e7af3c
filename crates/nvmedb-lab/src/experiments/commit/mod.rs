//! `nvmedb lab commit`: durable single-row update transactions from several threads against
//! fio's 4 KiB write + fdatasync rate on the same disk, the log alone (append + wait for
//! durability on the file log, part `log`) as the engine's own ceiling, and the recovery time
//! of a large log — for one or more log set-ups ([`LogSetup`]: the default single log, the log
//! duplexed into a second directory, group-commit variants) compared in the same run.
//!
//! Owns: [`CommitConfig`], [`LogSetup`], [`CommitResults`] and the [`CommitBench`] experiment.
//! Submodules: `parts` (the measurements). Invariants: the thread counts and log set-ups are
//! configuration, never fixed in code; each repetition runs fio, then every thread count of
//! every log set-up of every commit part, so the references and the set-ups interleave; every
//! figure is printed beside fio's rate.

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
    /// The log set-ups compared (the first one also runs the recovery part).
    #[serde(default = "default_logs")]
    pub logs: Vec<LogSetup>,
    /// Parts to run: any of [`PARTS`].
    #[serde(default = "default_parts")]
    pub parts: Vec<String>,
    /// Bytes per record of the `log` part.
    #[serde(default = "default_log_payload")]
    pub log_payload_bytes: usize,
}

fn default_logs() -> Vec<LogSetup> {
    vec![LogSetup::default()]
}

/// One log configuration the benchmark measures: a set-up of [`Options::default()`]'s file log
/// (`nvmedb::Options`) with at most these changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSetup {
    /// Its name in tables and figures (the spec it was parsed from).
    pub name: String,
    /// Duplexed into a second directory (`wal-mirror` beside `wal`, on the same disk here); else
    /// the default single log.
    pub duplexed: bool,
    /// The log's `group_commit_wait_us`.
    pub group_commit_wait_us: u64,
    /// The log's `targeted_wakeups` (false: wake every waiter after a flush).
    pub targeted_wakeups: bool,
}

impl Default for LogSetup {
    /// The default options' log: single, default group commit.
    fn default() -> Self {
        let d = nvmedb::wal::WalOptions::default();
        Self {
            name: "single".into(),
            duplexed: false,
            group_commit_wait_us: d.group_commit_wait_us,
            targeted_wakeups: d.targeted_wakeups,
        }
    }
}

impl LogSetup {
    /// Parses `single` or `duplexed`, optionally followed by `+wait<µs>` (the group-commit wait
    /// bound, default: the log's default) and `+wakeall` (targeted wake-ups off), e.g.
    /// `duplexed+wait200` (the file log as it was configured before it became single by default).
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |d: String| LabError::config("--logs", d);
        let mut parts = spec.split('+');
        let mut s = LogSetup { name: spec.to_string(), ..LogSetup::default() };
        match parts.next() {
            Some("single") => {}
            Some("duplexed") => s.duplexed = true,
            other => {
                return Err(bad(format!(
                    "`{}`: a set-up starts with single or duplexed",
                    other.unwrap_or("")
                )))
            }
        }
        for p in parts {
            if let Some(us) = p.strip_prefix("wait") {
                s.group_commit_wait_us =
                    us.parse().map_err(|_| bad(format!("`{p}` in `{spec}`: wait<µs>, e.g. wait200")))?;
            } else if p == "wakeall" {
                s.targeted_wakeups = false;
            } else {
                return Err(bad(format!("`{p}` in `{spec}`: the modifiers are wait<µs> and wakeall")));
            }
        }
        Ok(s)
    }

    /// How it differs from the default options' log, for notes.
    pub fn describe(&self) -> String {
        let d = LogSetup::default();
        let mut v = vec![if self.duplexed {
            "duplexed into a second directory on the same disk (commit = both copies synced)".to_string()
        } else {
            "single log (Options::default())".to_string()
        }];
        if self.group_commit_wait_us != d.group_commit_wait_us {
            v.push(format!("group-commit wait ≤ {} µs", self.group_commit_wait_us));
        }
        if self.targeted_wakeups != d.targeted_wakeups {
            v.push("every waiter woken after a flush".into());
        }
        v.join(", ")
    }
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
            logs: default_logs(),
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

/// Commits at one thread count with one log set-up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitPoint {
    /// The log set-up's name ([`LogSetup::name`]).
    #[serde(default)]
    pub log: String,
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
    /// Log bytes the recovery part wrote without a checkpoint.
    pub log_bytes: u64,
    /// Log bytes recovery replayed: from the last checkpoint's redo position to the end of the
    /// log (the part's own log plus whatever earlier parts of the run logged since that
    /// checkpoint).
    #[serde(default)]
    pub replayed_bytes: u64,
    /// Time to open the database (redo + undo), s.
    pub open_s: f64,
    /// Records read by recovery.
    pub records: u64,
    /// Page changes redone.
    pub pages_redone: u64,
    /// Redo time as recovery reports it, s.
    pub redo_s: f64,
    /// Of the redo time: waiting for the log reader, reading pages, writing pages back, s
    /// (the rest is applying changes).
    #[serde(default)]
    pub redo_split_s: [f64; 3],
    /// fio's sequential read rate of one of the log's segment files, same disk, same run, just
    /// before the reopen (MiB/s; `None` when fio did not run).
    pub fio_seq_read_mib_s: Option<f64>,
}

impl RecoveryResult {
    /// Log bytes replayed ([`RecoveryResult::log_bytes`] for results that predate the count).
    pub fn replayed(&self) -> u64 {
        if self.replayed_bytes > 0 {
            self.replayed_bytes
        } else {
            self.log_bytes
        }
    }

    /// Seconds to open per GiB of log replayed.
    pub fn s_per_gib(&self) -> f64 {
        self.open_s / (self.replayed().max(1) as f64 / (1u64 << 30) as f64)
    }
}

/// Commit benchmark results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitResults {
    /// fio: 4 KiB sequential write + fdatasync per write, one job, IOPS (one run per repetition).
    pub fio_fdatasync_iops: Option<Spread>,
    /// Durable single-row updates through the engine, per thread count.
    pub engine: Vec<CommitPoint>,
    /// Append + wait for durability on the file log alone, per thread count.
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
        experiment::non_empty("--logs", &cfg.logs)?;
        for (i, l) in cfg.logs.iter().enumerate() {
            if cfg.logs[..i].iter().any(|o| o.name == l.name) {
                return Err(LabError::config("--logs", format!("`{}` is listed twice", l.name)));
            }
        }
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
            "log",
            "threads",
            "commits/s",
            "commits/flush",
            "p50 µs",
            "p99 µs",
            "x fio fdatasync",
        ])
        .title(format!(
            "Durable commits: {} rows, {} s per point, {} repetitions, interleaved",
            cfg.rows, cfg.duration_s, cfg.reps
        ));
        let mut figures = Vec::new();
        for (path, points) in [("engine", &r.engine), ("log alone", &r.log)] {
            for p in points {
                t.row([
                    path.to_string(),
                    p.log.clone(),
                    p.threads.to_string(),
                    p.commits_per_s.to_string(),
                    format!("{:.1}", p.commits_per_flush),
                    format!("{:.1}", p.p50_us),
                    format!("{:.1}", p.p99_us),
                    fio.map_or("-".into(), |f| format!("{:.2}", p.commits_per_s.median / f.median)),
                ]);
                let key = if path == "engine" { "engine" } else { "log" };
                // The default set-up keeps the figure names of runs that had only it.
                let log = if p.log.is_empty() || p.log == LogSetup::default().name {
                    String::new()
                } else {
                    format!("/{}", p.log)
                };
                let mut f = Figure::repeated(
                    format!("{key}{log}/threads{}/commits_per_s", p.threads),
                    format!("{path} ({} log): durable commits from {} threads", p.log, p.threads),
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
        for l in &cfg.logs {
            t.note(format!("log {}: {}", l.name, l.describe()));
        }
        t.note(format!("machine: {}", env.context.one_line()));
        let mut text = t.to_string();
        if let Some(rec) = &r.recovery {
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            text.push_str(&format!(
                "recovery after {:.0} MiB of log without a checkpoint ({} log): {:.0} MiB replayed (everything \
                 since the last checkpoint), {:.2} s to open = {:.2} s per GiB replayed ({} records, {} page \
                 changes redone, redo {:.2} s: waiting for the log reader {:.2} s, reading pages {:.2} s, \
                 writing pages back {:.2} s, applying changes the rest)\n",
                mib(rec.log_bytes),
                cfg.logs[0].name,
                mib(rec.replayed()),
                rec.open_s,
                rec.s_per_gib(),
                rec.records,
                rec.pages_redone,
                rec.redo_s,
                rec.redo_split_s[0],
                rec.redo_split_s[1],
                rec.redo_split_s[2],
            ));
            if let Some(mib_s) = rec.fio_seq_read_mib_s {
                let read_s = mib(rec.replayed()) / mib_s;
                text.push_str(&format!(
                    "fio sequential read of a log segment (4 MiB O_DIRECT reads, depth 1), same disk, same \
                     run: {mib_s:.0} MiB/s, so reading the log alone takes {read_s:.2} s; the open took \
                     {:.2}x that\n",
                    rec.open_s / read_s
                ));
            }
            figures.push(Figure::new(
                "recovery/open_s",
                format!("open after a crash with {:.0} MiB of log to replay", mib(rec.replayed())),
                rec.open_s,
                "s",
            ));
            figures.push(Figure::new(
                "recovery/s_per_gib",
                "recovery time per GiB of log replayed (open after a crash)",
                rec.s_per_gib(),
                "s/GiB",
            ));
        }
        Ok(Summary { text, figures })
    }
}
