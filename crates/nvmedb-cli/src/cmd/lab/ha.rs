//! `nvmedb lab ha`: the flags of the high-availability experiment.
//!
//! Owns: [`HaArgs`] and its translation into an [`HaConfig`] (default or full scale, then the
//! flags that override it).

use super::LabArgs;
use crate::cmd::args::{device_list, with_default, CommonArgs, DevicesArg, DurationArg, RepsArg};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::ha::{Ha, HaConfig};
use nvmedb_lab::measure::device::LogChoice;
use std::path::PathBuf;

/// Flags of `nvmedb lab ha`. The defaults shown are the default scale's; `--full` chooses its
/// own, which the other flags then override.
#[derive(Args, Debug)]
#[command(mut_arg("devices", |a| with_default(
    a.help("Devices, comma-separated: each point puts the primary on one and the standby on another of the same kind (`optane`, `nand`, `san`, ... emulated over tmpfs; `disk`: the real disk, both nodes on it; `memory`)"),
    device_list(&HaConfig::default_scale(PathBuf::new()).devices)
)))]
#[command(mut_arg("duration", |a| with_default(a, HaConfig::default_scale(PathBuf::new()).duration_s)))]
#[command(mut_arg("reps", |a| with_default(a, HaConfig::default_scale(PathBuf::new()).reps)))]
pub struct HaArgs {
    /// Scratch directory on the disk under test (recreated, removed at the end).
    #[arg(long, default_value = "nvmedb-data/ha")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub devices: DevicesArg,
    /// Directory on tmpfs for the emulated devices' copies.
    #[arg(long)]
    pub ram_dir: Option<PathBuf>,
    /// Lease TTLs of the failover part, seconds, comma-separated (`0`: no failover part).
    #[arg(long, value_delimiter = ',')]
    pub failover_ttls: Option<Vec<u64>>,
    /// Logs (on both sides) the replication delay is measured with, comma-separated: `file`,
    /// `fast` (default: both).
    #[arg(long, value_delimiter = ',')]
    pub delay_logs: Option<Vec<String>>,
    /// Failovers (kill -9 of the primary) per lease TTL.
    #[arg(long)]
    pub failover_trials: Option<usize>,
    /// CPU placement: `split` (default): each node on its own half of the CPUs, as seed 000's
    /// two servers (the primary with its clients on one half, the standby on the other, single
    /// on the primary's half); `shared`: every thread on every CPU.
    #[arg(long, value_parser = ["split", "shared"])]
    pub cpus: Option<String>,
    /// Full scale (10 tables x 50k rows, 4 buffer sizes, 20 s points, 3 reps, 20 failovers
    /// per TTL at 1, 2 and 4 s).
    #[arg(long)]
    pub full: bool,
    #[command(flatten)]
    pub duration: DurationArg,
    #[command(flatten)]
    pub reps: RepsArg,
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
        if let Some(d) = self.duration.duration {
            cfg.duration_s = d;
            cfg.delay_s = d;
        }
        self.reps.apply(&mut cfg.reps);
        self.devices.apply(&mut cfg.devices)?;
        if let Some(r) = &self.ram_dir {
            cfg.ram_dir = r.clone();
        }
        if let Some(t) = &self.failover_ttls {
            cfg.failover.ttls = t.iter().copied().filter(|&t| t > 0).collect();
        }
        if let Some(l) = &self.delay_logs {
            cfg.delay_logs = l
                .iter()
                .map(|s| {
                    LogChoice::parse(s)
                        .ok_or_else(|| CliError::flag("--delay-logs", format!("`{s}` is not file or fast")))
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(c) = &self.cpus {
            cfg.split_cpus = c == "split";
        }
        if let Some(n) = self.failover_trials {
            cfg.failover.trials = n;
        }
        // The nodes of the failover part are this executable (`nvmedb node`).
        cfg.failover.node_exe = std::env::current_exe().ok();
        Ok(cfg)
    }
}
