//! `nvmedb lab xlog`: the flags of the seed 002 §6 experiment.
//!
//! Owns: [`XlogArgs`] and its translation into an [`XlogConfig`] (the default or long scale,
//! then the flags that override it).

use super::LabArgs;
use crate::cmd::args::CommonArgs;
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::xlog::{Xlog, XlogConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab xlog`.
#[derive(Args, Debug)]
pub struct XlogArgs {
    /// Working directory on the disk under test (databases, conventional rings; cleaned up).
    #[arg(long, default_value = "nvmedb-data/xloglab")]
    pub data_dir: PathBuf,
    /// Directory of the fast side's ring files (default /dev/shm: tmpfs, kill -9 safe only).
    #[arg(long)]
    pub ring_dir: Option<PathBuf>,
    /// Parts to run (comma-separated): fig9, fig10, fig11, fig12.
    #[arg(long, value_delimiter = ',', default_value = "fig9,fig10,fig11,fig12")]
    pub parts: Vec<String>,
    /// Longer runs with more points (about 10 minutes).
    #[arg(long)]
    pub long: bool,
    /// Seconds per measured point (overrides the scale's).
    #[arg(long)]
    pub secs: Option<f64>,
    /// Worker counts of Fig. 9 (comma-separated; overrides the scale's).
    #[arg(long, value_delimiter = ',')]
    pub workers: Option<Vec<usize>>,
    /// Skip the fio reference.
    #[arg(long)]
    pub no_fio: bool,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for XlogArgs {
    type Exp = Xlog;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<XlogConfig, CliError> {
        let mut cfg = XlogConfig::default_scale(self.data_dir.clone());
        if self.long {
            cfg = cfg.long();
        }
        if let Some(d) = &self.ring_dir {
            cfg.ring_dir = d.clone();
        }
        if let Some(s) = self.secs {
            cfg.secs = s;
        }
        if let Some(w) = &self.workers {
            cfg.workers = w.clone();
        }
        cfg.parts = self.parts.clone();
        cfg.use_fio = !self.no_fio;
        Ok(cfg)
    }
}
