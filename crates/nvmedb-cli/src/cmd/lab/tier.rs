//! `nvmedb lab tier`: the flags of the tiered-placement experiment (seed 003 Figs. 4 and 6).
//!
//! Owns: [`TierArgs`] and its translation into a [`TierConfig`] (the default scale or
//! `--paper-scale`, then the flags that override it), and `parse_prices` (shared with `nvmedb
//! advise`). Invariant: a flag given twice takes its last value.

use super::LabArgs;
use crate::cmd::args::{parse_size, with_default, CommonArgs, WindowArgs};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::tier::{Tier, TierConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab tier`.
#[derive(Args, Debug)]
#[command(args_override_self = true)]
#[command(mut_arg("warmup", |a| with_default(a, TierConfig::default().warmup_s)))]
#[command(mut_arg("duration", |a| with_default(a, TierConfig::default().duration_s)))]
#[command(mut_arg("reps", |a| with_default(a, TierConfig::default().repetitions)))]
pub struct TierArgs {
    /// Seed 003's scale: TPC-C scale factor 50 (about 5 GB), 10 terminals, 5 s warm-up, 60 s
    /// measured, 3 repetitions (needs about 12 GB free on tmpfs).
    #[arg(long = "paper-scale")]
    pub paper_scale: bool,
    /// Warehouses (default 4).
    #[arg(long)]
    pub warehouses: Option<u32>,
    /// Terminals (client threads; default 4).
    #[arg(long)]
    pub clients: Option<usize>,
    /// Table buffer, % of the table data (default 2.5, as PostgreSQL's default buffer on seed
    /// 003's database).
    #[arg(long)]
    pub buffer: Option<f64>,
    /// Configurations to run, comma-separated (all-hdd, all-nand, all-optane, all-dram, H1..H5,
    /// advisor, disk; all-dram always runs first).
    #[arg(long, value_delimiter = ',')]
    pub configs: Option<Vec<String>>,
    /// Emulated profile of the log's device in every configuration (default optane).
    #[arg(long = "log-device")]
    pub log_device: Option<String>,
    /// Price per GB of a tier, e.g. --price nand=6.5 (repeatable; defaults: seed 003's R$/GB).
    #[arg(long = "price")]
    pub prices: Vec<String>,
    /// The advisor's budget for the database's cost.
    #[arg(long)]
    pub budget: Option<f64>,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Table page size (bytes or K suffix; default 4 KiB).
    #[arg(long = "table-page")]
    pub table_page: Option<String>,
    /// Directory on the real disk for the loaded database (kept between runs, shared with
    /// `lab tpcc`) and the disk configuration.
    #[arg(long = "data-dir", default_value = "nvmedb-data")]
    pub data_dir: PathBuf,
    /// Directory on tmpfs for the copies the tiers are emulated over.
    #[arg(long = "ram-dir", default_value = "/dev/shm/nvmedb-tier")]
    pub ram_dir: PathBuf,
    /// Load again even if a loaded database of this scale exists.
    #[arg(long)]
    pub reload: bool,
    /// Seed of the load, the terminals and the emulators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds of each iobench measurement per tier.
    #[arg(long = "iobench-seconds")]
    pub iobench_seconds: Option<f64>,
    /// Override a parameter of every emulated profile, e.g. --profile-set jitter_us=0 (repeatable).
    #[arg(long = "profile-set")]
    pub profile_set: Vec<String>,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `tier=price` pairs; `flag` names the flag in the error.
pub fn parse_prices(flag: &'static str, pairs: &[String]) -> Result<Vec<(String, f64)>, CliError> {
    pairs
        .iter()
        .map(|p| {
            let (k, v) =
                p.split_once('=').ok_or_else(|| CliError::flag(flag, format!("`{p}` is not tier=price")))?;
            let v: f64 = v
                .trim()
                .parse()
                .map_err(|_| CliError::flag(flag, format!("`{v}` in `{p}` is not a number")))?;
            Ok((k.trim().to_string(), v))
        })
        .collect()
}

fn to_config(a: &TierArgs) -> Result<TierConfig, CliError> {
    let mut c = if a.paper_scale { TierConfig::paper_scale() } else { TierConfig::default() };
    if let Some(w) = a.warehouses {
        c.warehouses = w;
    }
    if let Some(n) = a.clients {
        c.clients = n;
    }
    if let Some(b) = a.buffer {
        c.buffer_pct = b;
    }
    if let Some(v) = &a.configs {
        c.configs = v.clone();
        if !c.configs.iter().any(|x| x == "all-dram") {
            c.configs.insert(0, "all-dram".into());
        }
    }
    if let Some(l) = &a.log_device {
        c.log_device = l.clone();
    }
    c.prices.extend(parse_prices("--price", &a.prices)?);
    c.budget = a.budget;
    a.window.apply(&mut c.warmup_s, &mut c.duration_s, &mut c.repetitions);
    if let Some(p) = &a.table_page {
        c.table_page_size = parse_size("--table-page", p)? as usize;
    }
    if let Some(s) = a.iobench_seconds {
        c.iobench_s = s;
    }
    c.data_dir = a.data_dir.clone();
    c.ram_dir = a.ram_dir.clone();
    c.reload = a.reload;
    c.seed = a.seed;
    c.profile_overrides = a.profile_set.clone();
    c.validate()?;
    Ok(c)
}

impl LabArgs for TierArgs {
    type Exp = Tier;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<TierConfig, CliError> {
        to_config(self)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::LabCommand;
    use super::*;

    fn config(args: &[&str]) -> Result<TierConfig, CliError> {
        let LabCommand::Tier(a) = parse(&[&["tier"], args].concat()) else { panic!("not lab tier") };
        to_config(&a)
    }

    #[test]
    fn tier_flags_map_to_a_config() {
        let c = config(&["--configs", "H1,advisor", "--price", "nand=6.5", "--budget", "3", "--buffer", "5"])
            .unwrap();
        assert_eq!(c.configs, ["all-dram", "H1", "advisor"]);
        assert_eq!((c.price("nand").unwrap(), c.budget, c.buffer_pct), (6.5, Some(3.0), 5.0));
        let p = config(&["--paper-scale"]).unwrap();
        assert_eq!((p.warehouses, p.repetitions), (50, 3));
        assert!(config(&["--price", "nand"]).unwrap_err().to_string().starts_with("--price:"));
        assert!(config(&["--configs", "H9"]).unwrap_err().to_string().contains("H9"));
        assert!(config(&["--log-device", "floppy"]).is_err());
    }
}
