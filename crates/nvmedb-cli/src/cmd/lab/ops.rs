//! `nvmedb lab ops`: the flags of the operations benchmark (standby reads, backup, restore).
//!
//! Owns: [`OpsArgs`] and its translation into an [`OpsConfig`] (default or full scale, then the
//! flags that override it).

use super::LabArgs;
use crate::cmd::args::{with_default, CommonArgs, WindowArgs};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::ops::{Ops, OpsConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab ops`. The defaults shown are the default scale's; `--full` chooses its
/// own, which the other flags then override.
#[derive(Args, Debug)]
#[command(mut_arg("warmup", |a| with_default(a, OpsConfig::default_scale(PathBuf::new()).warmup_s)))]
#[command(mut_arg("duration", |a| with_default(a, OpsConfig::default_scale(PathBuf::new()).duration_s)))]
#[command(mut_arg("reps", |a| with_default(a, OpsConfig::default_scale(PathBuf::new()).reps)))]
pub struct OpsArgs {
    /// Scratch directory on the disk under test (recreated, removed at the end).
    #[arg(long, default_value = "nvmedb-data/ops")]
    pub data_dir: PathBuf,
    /// Parts, comma-separated: `reads` (primary commits with and without standby reads, the
    /// standby's reads and apply lag), `backup` (backup beside fio, then restores).
    #[arg(long, value_delimiter = ',')]
    pub parts: Option<Vec<String>>,
    /// Full scale (8 tables x 32k rows = 1 GiB, 20 s points, 5 reps, a 2 GiB log to restore).
    #[arg(long)]
    pub full: bool,
    /// Tables (overrides the scale's value).
    #[arg(long)]
    pub tables: Option<usize>,
    /// Rows per table (overrides the scale's value).
    #[arg(long)]
    pub rows: Option<u64>,
    /// Committing clients on the primary.
    #[arg(long)]
    pub writers: Option<usize>,
    /// pgbench clients reading from the standby.
    #[arg(long)]
    pub readers: Option<usize>,
    /// pgbench threads.
    #[arg(long)]
    pub reader_threads: Option<usize>,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Seconds of each fio run.
    #[arg(long)]
    pub fio_secs: Option<f64>,
    /// MiB of log each restore replays from the archive.
    #[arg(long)]
    pub restore_log_mib: Option<u64>,
    /// CPU placement: `split` (default): the primary with its writers on one half of the CPUs,
    /// the standby with its readers on the other, as two servers; `shared`: every process on
    /// every CPU.
    #[arg(long, value_parser = ["split", "shared"])]
    pub cpus: Option<String>,
    /// Niceness of pgbench, the readers' load generator (default 19: it takes only the CPU
    /// the standby leaves, as clients on their own machines would; 0: normal priority).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub reader_nice: Option<i32>,
    /// pgbench (PostgreSQL 15's client programs).
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin/pgbench")]
    pub pgbench: PathBuf,
    /// The `nvmedb` program that runs the standby (default: this one).
    #[arg(long)]
    pub nvmedb_bin: Option<PathBuf>,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for OpsArgs {
    type Exp = Ops;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<OpsConfig, CliError> {
        let mut cfg = if self.full {
            OpsConfig::full_scale(self.data_dir.clone())
        } else {
            OpsConfig::default_scale(self.data_dir.clone())
        };
        if let Some(p) = &self.parts {
            cfg.parts = p.clone();
        }
        let set = |v: Option<usize>, to: &mut usize| {
            if let Some(v) = v {
                *to = v;
            }
        };
        set(self.tables, &mut cfg.tables);
        set(self.writers, &mut cfg.writers);
        set(self.readers, &mut cfg.readers);
        set(self.reader_threads, &mut cfg.reader_threads);
        if let Some(v) = self.reader_nice {
            cfg.reader_nice = v;
        }
        if let Some(v) = self.rows {
            cfg.rows = v;
        }
        self.window.apply(&mut cfg.warmup_s, &mut cfg.duration_s, &mut cfg.reps);
        if let Some(v) = self.fio_secs {
            cfg.fio_s = v;
        }
        if let Some(v) = self.restore_log_mib {
            cfg.restore_log_mib = v;
        }
        if let Some(c) = &self.cpus {
            cfg.split_cpus = c == "split";
        }
        cfg.pgbench_bin = self.pgbench.clone();
        cfg.nvmedb_bin = self.nvmedb_bin.clone();
        Ok(cfg)
    }
}
