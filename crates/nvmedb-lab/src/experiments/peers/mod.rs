//! `nvmedb lab peers`: nvmedb against RocksDB, LMDB and SQLite on the same machine, in the same
//! run — in-memory point lookups (single and batched) on each table, durable single-row updates
//! at each thread count beside fio's 4 KiB write + fdatasync rate, bulk-load time, and random
//! lookups from many threads through a 1 % cache beside fio's random reads on nvmedb's data
//! file. Built only with the `peers` cargo feature (RocksDB links the system's librocksdb; see
//! the README).
//!
//! Owns: [`PeersConfig`], [`PeersResults`] and the [`PeersBench`] experiment. Submodules:
//! `engines` (the four engines behind one interface, and how each is configured), `parts`
//! (the measurements). Invariants: engines alternate inside every repetition; every figure is
//! printed with its spread and as a ratio nvmedb / peer (for load time: peer / nvmedb, so above
//! 1 always means nvmedb is ahead); every engine's configuration is printed with the results.

pub mod engines;
mod parts;
mod report;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::Spread;

use engines::{Kind, KINDS};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The parts, in the order they run (the load always runs: the others need the tables).
pub const PARTS: [&str; 3] = ["memory", "commits", "miss"];

/// One table: rows of `value_bytes`-byte values under 64-bit integer keys.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TableSpec {
    /// Rows.
    pub rows: u64,
    /// Bytes per value.
    pub value_bytes: usize,
}

impl TableSpec {
    /// Payload bytes (keys and values).
    pub fn data_bytes(&self) -> u64 {
        self.rows * (self.value_bytes as u64 + 8)
    }

    /// "1000000×1024B".
    pub fn label(&self) -> String {
        let rows = if self.rows.is_multiple_of(1_000_000) {
            format!("{}M", self.rows / 1_000_000)
        } else if self.rows.is_multiple_of(1000) {
            format!("{}K", self.rows / 1000)
        } else {
            self.rows.to_string()
        };
        format!("{rows}×{}B", self.value_bytes)
    }

    /// The table whose load time is reported: the largest.
    fn is_load_table(&self, cfg: &PeersConfig) -> bool {
        cfg.tables.iter().map(TableSpec::data_bytes).max() == Some(self.data_bytes())
    }
}

/// `lab peers` settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeersConfig {
    /// Directory for the engines' data (one subdirectory each, on the disk under test).
    pub data_dir: PathBuf,
    /// The tables (every engine loads each).
    pub tables: Vec<TableSpec>,
    /// Engines to run (nvmedb is always among them: the ratios need it).
    pub engines: Vec<Kind>,
    /// Parts to run: any of [`PARTS`].
    pub parts: Vec<String>,
    /// Seconds per measured window.
    pub duration_s: f64,
    /// Repetitions (engines interleaved in each).
    pub reps: usize,
    /// Client threads of the durable-update part.
    pub commit_threads: Vec<usize>,
    /// Client threads of the 1 %-cache part.
    pub miss_threads: usize,
    /// Cache of the miss part, percent of the largest table's data.
    pub miss_cache_pct: f64,
    /// Keep the data directories afterwards.
    pub keep_data: bool,
    /// nvmedb's table page size, bytes (`None`: `Options::default()`'s).
    #[serde(default)]
    pub table_page_size: Option<usize>,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("nvmedb-data/peers"),
            tables: vec![
                TableSpec { rows: 1_000_000, value_bytes: 1024 },
                TableSpec { rows: 200_000, value_bytes: 100 },
            ],
            engines: KINDS.to_vec(),
            parts: PARTS.iter().map(|p| p.to_string()).collect(),
            duration_s: 2.0,
            reps: 3,
            commit_threads: vec![1, 20],
            miss_threads: 32,
            miss_cache_pct: 1.0,
            keep_data: false,
            table_page_size: None,
        }
    }
}

impl PeersConfig {
    fn wants(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }
}

/// One engine's rate on one workload, over the repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rate {
    /// The workload ("lookup 1M×1024B", "updates 20 thr").
    pub workload: String,
    /// The engine.
    pub engine: Kind,
    /// Operations per second (for the load: seconds).
    pub per_s: Spread,
    /// CPU time of the whole process per operation, µs (the 1 %-cache part).
    #[serde(default)]
    pub cpu_us_per_op: Option<Spread>,
}

/// fio's random reads on nvmedb's data file in the shape of one 1 %-cache workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MissFio {
    /// The workload it stands beside.
    pub workload: String,
    /// fio's shape ("32 job(s) × 1 in flight, psync").
    pub shape: String,
    /// IOPS at nvmedb's table page size.
    pub page_iops: Option<Spread>,
    /// CPU of fio's processes per read at that size, µs.
    pub page_cpu_us_per_read: Option<Spread>,
    /// IOPS at 4 KiB (RocksDB's block size).
    pub iops_4k: Option<Spread>,
}

/// nvmedb against one peer on one workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ratio {
    /// The workload.
    pub workload: String,
    /// The peer.
    pub peer: Kind,
    /// nvmedb's median rate over the peer's (for load time: the peer's time over nvmedb's);
    /// above 1: nvmedb is ahead.
    pub nvmedb_over_peer: f64,
}

/// `lab peers` results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeersResults {
    /// Bulk-load time of the largest table, seconds.
    pub load_s: Vec<Rate>,
    /// In-memory lookups per second, one thread.
    pub memory: Vec<Rate>,
    /// Durable single-row updates per second, per thread count.
    pub commits: Vec<Rate>,
    /// fio: 4 KiB sequential write + fdatasync each, one job, IOPS.
    pub fio_fdatasync_iops: Option<Spread>,
    /// Lookups per second through a 1 % cache: many threads, one thread, and one thread's
    /// batches (`read_many` and its peers' equivalents).
    pub miss: Vec<Rate>,
    /// The cache of the miss part, bytes.
    pub miss_cache_bytes: u64,
    /// nvmedb's table page size in the miss part, bytes.
    #[serde(default)]
    pub miss_page_bytes: usize,
    /// fio on nvmedb's data file beside each 1 %-cache workload.
    #[serde(default)]
    pub miss_fio: Vec<MissFio>,
}

impl PeersResults {
    /// Every rate with its ratios (load: lower is better).
    pub fn ratios(&self) -> Vec<Ratio> {
        let mut v = parts::ratios(&self.load_s, true);
        for rates in [&self.memory, &self.commits, &self.miss] {
            v.extend(parts::ratios(rates, false));
        }
        v
    }
}

/// The `nvmedb lab peers` experiment.
#[derive(Debug, Clone, Copy)]
pub struct PeersBench;

impl Experiment for PeersBench {
    const NAME: &'static str = "peers";
    const TITLE: &'static str =
        "nvmedb vs RocksDB, LMDB and SQLite: lookups in memory and through a 1 % cache, durable updates, bulk load";
    type Config = PeersConfig;
    type Results = PeersResults;

    fn validate(cfg: &PeersConfig) -> Result<()> {
        experiment::known_parts("--parts", &cfg.parts, &PARTS)?;
        experiment::non_empty("--tables", &cfg.tables)?;
        experiment::non_empty("--commit-threads", &cfg.commit_threads)?;
        if !cfg.engines.contains(&Kind::Nvmedb) {
            return Err(LabError::config("--engines", "must include nvmedb (every ratio is against it)"));
        }
        if cfg.tables.iter().any(|t| t.rows == 0 || t.value_bytes < 8 || t.value_bytes > 4096) {
            return Err(LabError::config("--tables", "each table needs rows ≥ 1 and 8–4096 value bytes"));
        }
        if cfg.reps == 0 || cfg.miss_threads == 0 || cfg.commit_threads.contains(&0) {
            return Err(LabError::config("--reps/--miss-threads/--commit-threads", "must be at least 1"));
        }
        if !(cfg.miss_cache_pct > 0.0 && cfg.miss_cache_pct <= 100.0) {
            return Err(LabError::config("--miss-cache-pct", "must be in (0, 100]"));
        }
        experiment::seconds("--duration", cfg.duration_s, false)
    }

    fn run(cfg: &PeersConfig, env: &RunEnv) -> Result<PeersResults> {
        parts::run(cfg, env)
    }

    fn report(cfg: &PeersConfig, r: &PeersResults, env: &RunEnv) -> Result<Summary> {
        report::report(cfg, r, env)
    }
}
