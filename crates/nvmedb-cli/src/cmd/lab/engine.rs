//! `nvmedb lab engine`: the flags of the engine micro-benchmarks.
//!
//! Owns: [`EngineArgs`] and its translation into an [`EngineConfig`].

use super::LabArgs;
use crate::cmd::args::{parse_size, with_default, CommonArgs, DurationArg, RepsArg};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::engine::{EngineBench, EngineConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab engine`.
#[derive(Args, Debug)]
#[command(mut_arg("duration", |a| with_default(a, EngineConfig::default().duration_s)))]
#[command(mut_arg("reps", |a| with_default(a, EngineConfig::default().reps)))]
pub struct EngineArgs {
    /// Database directory on the disk under test (reused across runs when it matches).
    #[arg(long, default_value = "nvmedb-data/enginebench")]
    pub data_dir: PathBuf,
    /// Rows in the table.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Payload bytes per row.
    #[arg(long, default_value_t = 1000)]
    pub payload: u32,
    /// Page size of table and index files (bytes or with a K suffix; default: the engine's
    /// default table page size).
    #[arg(long)]
    pub page_size: Option<String>,
    #[command(flatten)]
    pub duration: DurationArg,
    /// Threads of the many-client point of the 1 % buffer lookups (one thread is measured too).
    #[arg(long, default_value_t = 32)]
    pub miss_threads: usize,
    /// Keys per `read_many` of the 1 % buffer lookups' batched point, on one thread (0: none).
    #[arg(long, default_value_t = nvmedb::READ_BATCH)]
    pub miss_batch: usize,
    /// Threads for the scans.
    #[arg(long, default_value_t = 2)]
    pub scan_threads: usize,
    #[command(flatten)]
    pub reps: RepsArg,
    /// Skip the fio reference runs.
    #[arg(long)]
    pub no_fio: bool,
    /// Parts to run (comma-separated): memory, miss, scan, locks.
    #[arg(long, default_value = "memory,miss,scan", value_delimiter = ',')]
    pub parts: Vec<String>,
    /// Huge-page settings the in-memory lookups compare, run in turn (comma-separated
    /// true/false; buffer memory is advised MADV_HUGEPAGE when true).
    #[arg(long, value_delimiter = ',', default_value = "true")]
    pub memory_huge_pages: Vec<bool>,
    /// Lock-free-hit settings the in-memory lookups compare (comma-separated true/false).
    #[arg(long, value_delimiter = ',', default_value = "true")]
    pub memory_lock_free: Vec<bool>,
    /// Keys per call the in-memory lookups compare (comma-separated): 1 is one `read` per key,
    /// more is one `read_many` of that many keys, whose lookups overlap their cache misses.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub memory_batch: Vec<usize>,
    /// Thread counts of the contended lock test (part `locks`, comma-separated).
    #[arg(long = "lock-threads", value_delimiter = ',', default_value = "2,4,20")]
    pub lock_threads: Vec<usize>,
    /// Keys of the lock test's hot set (each transaction X-locks two of them).
    #[arg(long = "lock-hot-keys", default_value_t = 8)]
    pub lock_hot_keys: u64,
    /// CPU work while holding the two locks, ns.
    #[arg(long = "lock-hold-ns", default_value_t = 2000)]
    pub lock_hold_ns: u64,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for EngineArgs {
    type Exp = EngineBench;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<EngineConfig, CliError> {
        let d = EngineConfig::default();
        let (mut duration_s, mut reps) = (d.duration_s, d.reps);
        self.duration.apply(&mut duration_s);
        self.reps.apply(&mut reps);
        Ok(EngineConfig {
            data_dir: self.data_dir.clone(),
            rows: self.rows,
            payload_bytes: self.payload,
            page_size: match &self.page_size {
                Some(p) => parse_size("--page-size", p)? as usize,
                None => nvmedb::Options::default().table_page_size,
            },
            duration_s,
            miss_threads: self.miss_threads,
            miss_batch: self.miss_batch,
            scan_threads: self.scan_threads,
            reps,
            use_fio: !self.no_fio,
            parts: self.parts.clone(),
            memory_huge_pages: self.memory_huge_pages.clone(),
            memory_lock_free: self.memory_lock_free.clone(),
            memory_batch: self.memory_batch.clone(),
            lock_threads: self.lock_threads.clone(),
            lock_hot_keys: self.lock_hot_keys,
            lock_hold_ns: self.lock_hold_ns,
            ..EngineConfig::default()
        })
    }
}
