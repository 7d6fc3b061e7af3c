//! `nvmedb lab ha`: the flags of the high-availability experiment.
//!
//! Owns: [`HaArgs`] and its translation into an [`HaConfig`] (default or full scale, then the
//! flags that override it).

use super::LabArgs;
use crate::cmd::args::CommonArgs;
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::ha::{Ha, HaConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab ha`.
#[derive(Args, Debug)]
pub struct HaArgs {
    /// Scratch directory on the disk under test (recreated, removed at the end).
    #[arg(long, default_value = "nvmedb-data/ha")]
    pub data_dir: PathBuf,
    /// Full scale (10 tables x 50k rows, 4 buffer sizes, 20 s points, 3 reps).
    #[arg(long)]
    pub full: bool,
    /// Seconds per measured point (overrides the scale's value).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Repetitions (overrides the scale's value).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for HaArgs {
    type Exp = Ha;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<HaConfig, CliError> {
        let mut cfg = if self.full {
            HaConfig::full_scale(self.data_dir.clone())
        } else {
            HaConfig::default_scale(self.data_dir.clone())
        };
        if let Some(d) = self.duration {
            cfg.duration_s = d;
            cfg.delay_s = d;
        }
        if let Some(r) = self.reps {
            cfg.reps = r;
        }
        Ok(cfg)
    }
}
