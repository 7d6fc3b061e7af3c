//! `nvmedb lab ops`: what operating nvmedb costs — reads served by a standby, base backups and
//! point-in-time restore — measured on this machine's disk beside its own limits.
//!
//! Owns: [`OpsConfig`], [`OpsResults`] and the [`Ops`] experiment. Submodules: `reads` (the
//! primary's commit throughput with and without 8 pgbench clients reading from a standby that
//! `nvmedb standby --serve` runs, the standby's read throughput, and the standby's apply lag
//! sampled through its admin port), `backup` (`nvmedb::backup::backup` beside fio's
//! sequential read and write rates on the same disk, interleaved; restores of the last backup
//! with a log archive of a set size, per GiB of log), `report` (tables, plots, figures).
//!
//! Invariants: every number comes from one run on one loaded copy of the primitive workload's
//! tables, with `Options::default()` on both nodes (what `nvmedb standby` and an embedded
//! primary get); the points with and without readers alternate in order between repetitions;
//! both nodes write to the real disk (no device is emulated, and every output says so); the
//! scratch directory is removed at the end, also when the run fails, and no child process
//! outlives the run.

mod backup;
mod reads;
mod report;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::workload::primitive::load;
use nvmedb::{Database, Options};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use backup::{BackupRun, FioRun, RestoreRun};
pub use reads::{LagSample, ReadPoint};

/// The parts a run can measure.
pub const PARTS: [&str; 2] = ["reads", "backup"];

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpsConfig {
    /// Scratch directory on the disk under test (recreated, removed at the end): the primary,
    /// the standby, the backups, the archive and the restored copies.
    pub data_dir: PathBuf,
    /// The `nvmedb` program that runs the standby (`None`: this program).
    pub nvmedb_bin: Option<PathBuf>,
    /// pgbench, the standby's SQL clients.
    pub pgbench_bin: PathBuf,
    /// Parts to run: `reads`, `backup` (with the restores).
    pub parts: Vec<String>,
    /// Tables of the primitive workload (4 KiB rows).
    pub tables: usize,
    /// Rows per table.
    pub rows: u64,
    /// Committing clients on the primary (single-row UPDATEs).
    pub writers: usize,
    /// pgbench clients reading from the standby (point SELECTs).
    pub readers: usize,
    /// pgbench threads.
    pub reader_threads: usize,
    /// Seconds of warm-up per point (the readers run through it).
    pub warmup_s: f64,
    /// Seconds measured per point.
    pub duration_s: f64,
    /// Repetitions (of each reads point, backup and restore).
    pub reps: usize,
    /// Milliseconds between two samples of the standby's applied position.
    pub lag_every_ms: u64,
    /// The primary (with its writers) on the first half of the CPUs, the standby (with its
    /// readers) on the other half, as two servers; `false`: every process on every CPU.
    pub split_cpus: bool,
    /// Niceness of pgbench, the readers' load generator (0: normal priority). In a deployment
    /// the clients run on their own machines; here they share the standby's CPU, and at 19
    /// they take only what the standby leaves, so the point measures what serving the reads
    /// costs the standby (and through its acknowledgements the primary), not what generating
    /// them costs.
    pub reader_nice: i32,
    /// Seconds of each fio run.
    pub fio_s: f64,
    /// MiB of log written after the backup, which each restore replays from the archive (in
    /// whole 64 MiB segments).
    pub restore_log_mib: u64,
}

impl OpsConfig {
    /// Default scale: a few minutes on a 2-core machine.
    pub fn default_scale(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            nvmedb_bin: None,
            pgbench_bin: PathBuf::from("/usr/lib/postgresql/15/bin/pgbench"),
            parts: PARTS.iter().map(|p| p.to_string()).collect(),
            tables: 4,
            rows: 8000,
            writers: 8,
            readers: 8,
            reader_threads: 2,
            warmup_s: 1.0,
            duration_s: 5.0,
            reps: 3,
            lag_every_ms: 50,
            split_cpus: true,
            reader_nice: 19,
            fio_s: 3.0,
            restore_log_mib: 256,
        }
    }

    /// Larger scale: 1 GiB of table data, longer points, a 2 GiB log to restore.
    pub fn full_scale(data_dir: PathBuf) -> Self {
        Self {
            tables: 8,
            rows: 32_000,
            duration_s: 20.0,
            warmup_s: 3.0,
            reps: 5,
            fio_s: 10.0,
            restore_log_mib: 2048,
            ..Self::default_scale(data_dir)
        }
    }

    fn has(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

/// What the run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpsResults {
    /// The device everything ran on, as labelled in every output.
    pub device: String,
    /// Bytes of the primary's files after the load (tables, indexes, catalog; not its log).
    pub data_bytes: u64,
    /// Where the nodes ran (their own CPUs, or shared).
    pub cpu_placement: String,
    /// Every reads point.
    pub reads: Vec<ReadPoint>,
    /// Every fio reference run.
    pub fio: Vec<FioRun>,
    /// Every backup.
    pub backups: Vec<BackupRun>,
    /// Every restore.
    pub restores: Vec<RestoreRun>,
    /// What could not be measured, and why.
    pub notes: Vec<String>,
}

/// The `nvmedb lab ops` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Ops;

impl Experiment for Ops {
    const NAME: &'static str = "ops";
    const TITLE: &'static str = "Operations: primary commits with and without standby reads, the standby's reads and apply lag, backup rate beside fio, restore time per GiB of log";
    type Config = OpsConfig;
    type Results = OpsResults;

    fn validate(cfg: &OpsConfig) -> Result<()> {
        experiment::non_empty("--parts", &cfg.parts)?;
        experiment::known_parts("--parts", &cfg.parts, &PARTS)?;
        experiment::seconds("--warmup", cfg.warmup_s, true)?;
        experiment::seconds("--duration", cfg.duration_s, false)?;
        experiment::seconds("--fio-secs", cfg.fio_s, false)?;
        let positive = [
            ("--tables", cfg.tables as u64),
            ("--rows", cfg.rows),
            ("--writers", cfg.writers as u64),
            ("--readers", cfg.readers as u64),
            ("--reader-threads", cfg.reader_threads as u64),
            ("--reps", cfg.reps as u64),
            ("--lag-every-ms", cfg.lag_every_ms),
            ("--restore-log-mib", cfg.restore_log_mib),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(LabError::config(field, "must be at least 1"));
            }
        }
        if !(0..=19).contains(&cfg.reader_nice) {
            return Err(LabError::config("--reader-nice", format!("{} is outside 0..=19", cfg.reader_nice)));
        }
        if cfg.reader_threads > cfg.readers {
            return Err(LabError::config(
                "--reader-threads",
                format!(
                    "{} threads for {} clients: pgbench needs at least one client per thread",
                    cfg.reader_threads, cfg.readers
                ),
            ));
        }
        if cfg.has("reads") && !cfg.pgbench_bin.is_file() {
            return Err(LabError::tool(
                "pgbench",
                format!(
                    "{} not found: install PostgreSQL 15's client programs (Debian 12: apt-get install postgresql-15) or point --pgbench at it",
                    cfg.pgbench_bin.display()
                ),
            ));
        }
        Ok(())
    }

    fn run(cfg: &OpsConfig, env: &RunEnv) -> Result<OpsResults> {
        let dir = &cfg.data_dir;
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(LabError::io(dir, "remove"))?;
        }
        std::fs::create_dir_all(dir).map_err(LabError::io(dir, "create directory"))?;
        let out = run_parts(cfg, env);
        let _ = std::fs::remove_dir_all(dir);
        out
    }

    fn report(cfg: &OpsConfig, r: &OpsResults, env: &RunEnv) -> Result<Summary> {
        report::report(cfg, r, env)
    }
}

/// The primary's directory in the scratch directory.
fn primary_dir(cfg: &OpsConfig) -> PathBuf {
    cfg.data_dir.join("primary")
}

/// Bytes of the files directly in `dir` (the tables, not the log's preallocated segments).
fn top_level_bytes(dir: &std::path::Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).map_err(LabError::io(dir, "list"))? {
        let m = e.and_then(|e| e.metadata()).map_err(LabError::io(dir, "list"))?;
        if m.is_file() {
            n += m.len();
        }
    }
    Ok(n)
}

fn run_parts(cfg: &OpsConfig, env: &RunEnv) -> Result<OpsResults> {
    let primary = primary_dir(cfg);
    // Loaded without the log (a bulk load), then opened once with it: the standby seeded from
    // the closed copy follows the primary's log from its start.
    {
        let db = Database::open(&primary, Options { wal: false, ..Options::default() })
            .map_err(LabError::engine("creating the primary"))?;
        load(&db, cfg.tables, cfg.rows, 4, env.progress)?;
        db.close().map_err(LabError::engine("closing the loaded primary"))?;
        Database::open(&primary, Options::default())
            .and_then(Database::close)
            .map_err(LabError::engine("giving the primary its log"))?;
    }
    let data_bytes = top_level_bytes(&primary)?;
    let device = format!(
        "the real disk under {} (no emulation; the primary, the standby, backups and restores share it)",
        cfg.data_dir.display()
    );
    env.note(format!("ops: {} MiB of table data on {device}", data_bytes >> 20));
    let mut results = OpsResults {
        device,
        data_bytes,
        cpu_placement: String::new(),
        reads: Vec::new(),
        fio: Vec::new(),
        backups: Vec::new(),
        restores: Vec::new(),
        notes: Vec::new(),
    };
    if cfg.has("reads") {
        let part = reads::run(cfg, env, &primary).map_err(LabError::in_part("standby reads"))?;
        results.reads = part.points;
        results.cpu_placement = part.placement;
    }
    if cfg.has("backup") {
        let part = backup::run(cfg, env, &primary).map_err(LabError::in_part("backup and restore"))?;
        results.fio = part.fio;
        results.backups = part.backups;
        results.restores = part.restores;
        results.notes.extend(part.notes);
    }
    Ok(results)
}
