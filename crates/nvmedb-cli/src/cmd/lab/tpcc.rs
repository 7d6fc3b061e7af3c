//! `nvmedb lab tpcc`: the flags of the TPC-C experiment, and `--check DIR`.
//!
//! Owns: [`TpccArgs`], its translation into a [`TpccConfig`] (the default scale, `--full-scale`
//! or `--case-c`, then the flags that override it) and [`run`]. Invariant: a flag given twice
//! takes its last value.

use super::LabArgs;
use crate::cmd::args::{
    device_list, list, parse_size, with_default, BuffersArg, CommonArgs, DevicesArg, WindowArgs,
};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::tpcc::{check_dir, HaMode, LogChoice, Tpcc, TpccConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab tpcc`. The defaults shown are the default scale's; `--full-scale` and
/// `--case-c` choose their own, which the other flags then override.
#[derive(Args, Debug)]
#[command(mut_arg("buffers", |a| with_default(a, list(&TpccConfig::default().buffer_pcts))))]
#[command(mut_arg("devices", |a| with_default(a, device_list(&TpccConfig::default().devices))))]
#[command(mut_arg("warmup", |a| with_default(a, TpccConfig::default().warmup_s)))]
#[command(mut_arg("duration", |a| with_default(a, TpccConfig::default().duration_s)))]
#[command(mut_arg("reps", |a| with_default(a, TpccConfig::default().repetitions)))]
pub struct TpccArgs {
    /// Check the TPC-C database in DIR (consistency conditions 1-4 of §3.3.2 and every index)
    /// instead of running the experiment.
    #[arg(long, value_name = "DIR")]
    pub check: Option<PathBuf>,
    /// Warehouses (default 4: about 400 MB of tables and 110 MB of indexes).
    #[arg(long)]
    pub warehouses: Option<u32>,
    /// Terminals (client threads; default 4).
    #[arg(long)]
    pub clients: Option<usize>,
    /// Seed 000's scale: 800 warehouses (about 75 GB) and 30 clients, on the real disk.
    #[arg(long = "full-scale")]
    pub full_scale: bool,
    /// Seed 000 Case C (Fig. 7): HA on emulated optane, nand and san at 5 % and 100 % buffer,
    /// with the paper's ratios next to the measured ones.
    #[arg(long = "case-c")]
    pub case_c: bool,
    #[command(flatten)]
    pub buffers: BuffersArg,
    #[command(flatten)]
    pub devices: DevicesArg,
    /// The log: duplexed (two copies on the device under test) or fast (the software X-SSD).
    #[arg(long)]
    pub log: Option<String>,
    /// HA: off, log (eager log shipping) or on (eager log shipping and data-page mirroring).
    #[arg(long)]
    pub ha: Option<String>,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Table page size (bytes or K suffix; default 4 KiB, see the summary).
    #[arg(long = "table-page")]
    pub table_page: Option<String>,
    /// Directory on the real disk for the loaded database (kept between runs) and disk points.
    #[arg(long = "data-dir", default_value = "nvmedb-data")]
    pub data_dir: PathBuf,
    /// Directory on tmpfs for the emulated devices' RAM copies.
    #[arg(long = "ram-dir", default_value = "/dev/shm/nvmedb-tpcc")]
    pub ram_dir: PathBuf,
    /// Load again even if a loaded database of this scale exists.
    #[arg(long)]
    pub reload: bool,
    /// Seed of the load, the terminals and the emulators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip the traced window and its chart.
    #[arg(long = "no-trace")]
    pub no_trace: bool,
    /// Device to trace (default optane if listed, else the first).
    #[arg(long = "trace-device")]
    pub trace_device: Option<String>,
    /// Seconds of each iobench reference run per device (0 skips them).
    #[arg(long = "iobench-seconds")]
    pub iobench_seconds: Option<f64>,
    /// Override a parameter of every emulated profile, e.g. --profile-set spin_us=0 (repeatable).
    #[arg(long = "profile-set")]
    pub profile_set: Vec<String>,
    /// Early lock release (`LockOptions::early_release`): `on`, the engine's default, releases a
    /// committing transaction's locks once its commit record is logged; `off` holds them until
    /// the commit is durable (to measure what early release changes).
    #[arg(long = "early-lock-release", default_value = "on", value_parser = ["on", "off"])]
    pub early_lock_release: String,
    /// Profile each point's measured window with `perf` (only the window: not the load, the
    /// warm-up or the checks): a flame graph (SVG), the folded stacks and the top functions per
    /// point, and the top functions in the summary.
    #[arg(long)]
    pub profile: bool,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

fn to_config(a: &TpccArgs) -> Result<TpccConfig, CliError> {
    let mut cfg = match (a.full_scale, a.case_c) {
        (true, true) => {
            return Err(CliError::flag("--case-c", "--case-c and --full-scale exclude each other"))
        }
        (true, false) => TpccConfig::full_scale(),
        (false, true) => TpccConfig::case_c(),
        (false, false) => TpccConfig::default(),
    };
    if let Some(w) = a.warehouses {
        cfg.warehouses = w;
    }
    if let Some(c) = a.clients {
        cfg.clients = c;
    }
    a.buffers.apply(&mut cfg.buffer_pcts);
    a.devices.apply(&mut cfg.devices)?;
    if let Some(l) = &a.log {
        cfg.log = LogChoice::parse(l)
            .ok_or_else(|| CliError::flag("--log", format!("`{l}` is not duplexed or fast")))?;
    }
    if let Some(h) = &a.ha {
        cfg.ha =
            HaMode::parse(h).ok_or_else(|| CliError::flag("--ha", format!("`{h}` is not off, log or on")))?;
    }
    a.window.apply(&mut cfg.warmup_s, &mut cfg.duration_s, &mut cfg.repetitions);
    if let Some(p) = &a.table_page {
        cfg.table_page_size = parse_size("--table-page", p)? as usize;
    }
    if let Some(s) = a.iobench_seconds {
        cfg.iobench_s = s;
    }
    cfg.data_dir = a.data_dir.clone();
    cfg.ram_dir = a.ram_dir.clone();
    cfg.reload = a.reload;
    cfg.seed = a.seed;
    cfg.trace = !a.no_trace;
    cfg.trace_device = a.trace_device.clone();
    cfg.profile_overrides = a.profile_set.clone();
    cfg.early_lock_release = a.early_lock_release == "on";
    cfg.profile = a.profile;
    cfg.validate()?;
    Ok(cfg)
}

impl LabArgs for TpccArgs {
    type Exp = Tpcc;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<TpccConfig, CliError> {
        to_config(self)
    }
}

/// Runs the experiment, or with `--check DIR` checks that database.
pub fn run(a: &TpccArgs) -> Result<(), CliError> {
    match &a.check {
        Some(dir) => {
            print!("{}", check_dir(dir)?);
            Ok(())
        }
        None => super::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::LabCommand;
    use super::*;
    use nvmedb_lab::measure::DeviceKind;

    fn config(args: &[&str]) -> Result<TpccConfig, CliError> {
        let LabCommand::Tpcc(a) = parse(&[&["tpcc"], args].concat()) else { panic!("not lab tpcc") };
        to_config(&a)
    }

    #[test]
    fn tpcc_flags_map_to_a_config() {
        let c =
            config(&["--warehouses", "3", "--devices", "memory,optane", "--buffers", "5,100", "--ha", "on"])
                .unwrap();
        assert_eq!((c.warehouses, c.clients, c.ha, c.table_page_size), (3, 4, HaMode::On, 4096));
        assert_eq!(c.devices, vec![DeviceKind::Memory, DeviceKind::Emulated("optane".into())]);
        assert_eq!(c.buffer_pcts, vec![5.0, 100.0]);
        let full = config(&["--full-scale"]).unwrap();
        assert_eq!((full.warehouses, full.clients, full.devices.clone()), (800, 30, vec![DeviceKind::Disk]));
        let cc = config(&["--case-c"]).unwrap();
        assert!(cc.case_c && cc.ha == HaMode::On && cc.buffer_pcts == [5.0, 100.0]);
        assert_eq!(cc.devices.iter().map(DeviceKind::name).collect::<Vec<_>>(), ["optane", "nand", "san"]);
        assert_eq!(config(&["--log", "fast"]).unwrap().log, LogChoice::Fast);
        assert!(config(&["--ha", "maybe"]).unwrap_err().to_string().starts_with("--ha:"));
        assert!(config(&["--case-c", "--full-scale"]).is_err());
        assert!(config(&["--case-c", "--buffers", "10,100"]).unwrap_err().to_string().contains("5 %"));
    }
}
