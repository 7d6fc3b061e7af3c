//! `nvmedb lab pgbench`: the flags of the pgbench comparison of `nvmedb serve` with PostgreSQL 15.
//!
//! Owns: [`PgbenchArgs`] and its translation into a [`PgbenchConfig`].

use super::LabArgs;
use crate::cmd::args::{with_default, CommonArgs, RepsArg};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::pgbench::{PgbenchBench, PgbenchConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab pgbench`.
#[derive(Args, Debug)]
#[command(mut_arg("reps", |a| with_default(a, PgbenchConfig::default().reps)))]
#[command(mut_arg("buffers", |a| with_default(a, PgbenchConfig::default().buffers.join(","))))]
pub struct PgbenchArgs {
    /// pgbench scale factor (100 000 accounts each). The default runs in a few minutes; the
    /// comparison the documentation reports uses 10.
    #[arg(long, default_value_t = 2)]
    pub scale: u32,
    /// Seconds of each measured pgbench run.
    #[arg(long, default_value_t = 5)]
    pub secs: u32,
    /// Seconds of a select-only warm-up on each server after it starts (0: none).
    #[arg(long, default_value_t = 2)]
    pub warmup_secs: u32,
    #[command(flatten)]
    pub reps: RepsArg,
    /// pgbench clients.
    #[arg(long, default_value_t = 20)]
    pub clients: usize,
    /// pgbench threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Buffer configurations (comma-separated): memory, or nvmedb's table buffer as a
    /// percentage of its table data (PostgreSQL's shared_buffers gets the same memory).
    #[arg(long, value_delimiter = ',')]
    pub buffers: Option<Vec<String>>,
    /// Workloads (comma-separated): select-only (-S), tpcb-like.
    #[arg(long, value_delimiter = ',', default_value = "select-only,tpcb-like")]
    pub workloads: Vec<String>,
    /// Query protocols (comma-separated): simple, prepared.
    #[arg(long, value_delimiter = ',', default_value = "simple,prepared")]
    pub modes: Vec<String>,
    /// pgbench --max-tries (retries of transactions failing with a deadlock or serialization error).
    #[arg(long, default_value_t = 10)]
    pub max_tries: u32,
    /// Where the run's scratch directory (both servers' data, deleted at the end) is made: put it
    /// on the disk under test.
    #[arg(long, default_value = "nvmedb-data/pgbench")]
    pub scratch_dir: PathBuf,
    /// PostgreSQL 15's bin directory (initdb, postgres, pgbench).
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin")]
    pub pg_bin: PathBuf,
    /// The `nvmedb` program to serve with (default: this one), e.g. another build to compare.
    #[arg(long)]
    pub nvmedb_bin: Option<PathBuf>,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for PgbenchArgs {
    type Exp = PgbenchBench;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<PgbenchConfig, CliError> {
        Ok(PgbenchConfig {
            scratch_dir: self.scratch_dir.clone(),
            pg_bin: self.pg_bin.clone(),
            nvmedb_bin: self.nvmedb_bin.clone(),
            scale: self.scale,
            clients: self.clients,
            threads: self.threads,
            secs: self.secs,
            warmup_secs: self.warmup_secs,
            reps: self.reps.reps.unwrap_or(PgbenchConfig::default().reps),
            buffers: self.buffers.clone().unwrap_or_else(|| PgbenchConfig::default().buffers),
            workloads: self.workloads.clone(),
            modes: self.modes.clone(),
            max_tries: self.max_tries,
        })
    }
}
