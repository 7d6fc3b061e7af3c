//! `nvmedb lab cost`: the flags of the cost-performance experiment (seed 000 §5.4, Fig. 11).
//!
//! Owns: [`CostArgs`] and its translation into a [`CostConfig`]. Invariant: a price given as a
//! flag replaces the one derived from the seed.

use super::LabArgs;
use crate::cmd::args::CommonArgs;
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::cost::{Cost, CostConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab cost`.
#[derive(Args, Debug)]
pub struct CostArgs {
    /// The `nvmedb lab tpcc --case-c` run to take the throughputs from (default: the latest
    /// tpcc run under --results).
    #[arg(long = "tpcc-run")]
    pub tpcc_run: Option<PathBuf>,
    /// SAN storage per GB, relative to the on-memory server (default: twice the mid-latency
    /// SSD's, an assumption: seed 000 gives no SAN price).
    #[arg(long = "san-per-gb")]
    pub san_per_gb: Option<f64>,
    /// Low-latency SSD per GB, relative to the on-memory server (default from seed 003's
    /// Optane/DRAM price ratio).
    #[arg(long = "optane-per-gb")]
    pub optane_per_gb: Option<f64>,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for CostArgs {
    type Exp = Cost;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<CostConfig, CliError> {
        let mut c = CostConfig {
            tpcc_run: self
                .tpcc_run
                .clone()
                .unwrap_or_else(|| self.common.results.join("tpcc").join("latest")),
            ..CostConfig::default()
        };
        if let Some(v) = self.san_per_gb {
            c.prices.san_per_gb = v;
        }
        if let Some(v) = self.optane_per_gb {
            c.prices.optane_per_gb = v;
        }
        Ok(c)
    }
}
