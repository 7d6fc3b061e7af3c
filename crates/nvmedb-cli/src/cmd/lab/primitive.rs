//! `nvmedb lab primitive`: the flags of the primitive experiment.
//!
//! Owns: [`PrimitiveArgs`] and its translation into a [`PrimitiveConfig`]. Invariant: a flag
//! given twice takes its last value, so the main job's defaults can be overridden.

use super::LabArgs;
use crate::cmd::args::{
    device_list, list, parse_size, with_default, BuffersArg, CommonArgs, DevicesArg, WindowArgs,
};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::primitive::{
    Primitive, PrimitiveConfig, Workload, DEFAULT_ROWS, FULL_SCALE_ROWS,
};
use std::path::PathBuf;

/// Flags of `nvmedb lab primitive`.
#[derive(Args, Debug)]
#[command(mut_arg("buffers", |a| with_default(a, list(&PrimitiveConfig::default().buffer_pcts))))]
#[command(mut_arg("devices", |a| with_default(a, device_list(&PrimitiveConfig::default().devices))))]
#[command(mut_arg("warmup", |a| with_default(a, PrimitiveConfig::default().warmup_s)))]
#[command(mut_arg("duration", |a| with_default(a, PrimitiveConfig::default().duration_s)))]
#[command(mut_arg("reps", |a| with_default(a, PrimitiveConfig::default().repetitions)))]
pub struct PrimitiveArgs {
    /// Rows per table (default 10000: ~480 MiB of tables per device).
    #[arg(long)]
    pub rows: Option<u64>,
    /// The papers' scale: 500 000 rows per table (24 GB per device; needs the disk and RAM).
    #[arg(long = "full-scale")]
    pub full_scale: bool,
    /// Number of tables.
    #[arg(long, default_value_t = 10)]
    pub tables: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 20)]
    pub clients: usize,
    #[command(flatten)]
    pub buffers: BuffersArg,
    #[command(flatten)]
    pub devices: DevicesArg,
    /// Workloads (comma-separated): select, update.
    #[arg(long, value_delimiter = ',', default_value = "select,update")]
    pub workloads: Vec<String>,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Table page size (bytes or K suffix).
    #[arg(long = "table-page", default_value = "24k")]
    pub table_page: String,
    /// Index page size (bytes or K suffix).
    #[arg(long = "index-page", default_value = "4k")]
    pub index_page: String,
    /// Table buffer policy: SHR-n or SEP-n.
    #[arg(long, default_value = "SHR-16")]
    pub policy: String,
    /// Directory for the real-disk database (not tmpfs). Reused across runs of the same scale.
    #[arg(long = "data-dir", default_value = "nvmedb-data")]
    pub data_dir: PathBuf,
    /// Reload the disk database even if one of this scale exists.
    #[arg(long)]
    pub reload: bool,
    /// Seed of the key choices and the emulators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip the traced runs and trace charts.
    #[arg(long = "no-trace")]
    pub no_trace: bool,
    /// Device to trace (default optane if listed, else the first).
    #[arg(long = "trace-device")]
    pub trace_device: Option<String>,
    /// Seconds of each iobench reference run per device (0 skips them).
    #[arg(long = "iobench-seconds", default_value_t = 2.0)]
    pub iobench_seconds: f64,
    /// Do not run fio on the disk even if it is installed.
    #[arg(long = "no-fio")]
    pub no_fio: bool,
    /// Override a parameter of every emulated profile, e.g. --profile-set spin_us=0 (repeatable).
    #[arg(long = "profile-set")]
    pub profile_set: Vec<String>,
    /// Extra CPU burnt per transaction, µs, standing in for the SQL layer and client round trip
    /// in the papers' t_cpu (100–150 µs); 0 measures the engine alone.
    #[arg(long = "app-cpu-us", default_value_t = 0.0)]
    pub app_cpu_us: f64,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

fn to_config(a: &PrimitiveArgs) -> Result<PrimitiveConfig, CliError> {
    let rows = match (a.rows, a.full_scale) {
        (Some(_), true) => {
            return Err(CliError::flag("--rows", "--rows and --full-scale exclude each other"))
        }
        (Some(r), false) => r,
        (None, true) => FULL_SCALE_ROWS,
        (None, false) => DEFAULT_ROWS,
    };
    let workloads = a
        .workloads
        .iter()
        .map(|w| {
            Workload::parse(w)
                .ok_or_else(|| CliError::flag("--workloads", format!("`{w}` is not select or update")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let d = PrimitiveConfig::default();
    let (mut buffer_pcts, mut devices) = (d.buffer_pcts.clone(), d.devices.clone());
    let (mut warmup_s, mut duration_s, mut repetitions) = (d.warmup_s, d.duration_s, d.repetitions);
    a.buffers.apply(&mut buffer_pcts);
    a.devices.apply(&mut devices)?;
    a.window.apply(&mut warmup_s, &mut duration_s, &mut repetitions);
    let cfg = PrimitiveConfig {
        tables: a.tables,
        rows_per_table: rows,
        table_page_size: parse_size("--table-page", &a.table_page)? as usize,
        index_page_size: parse_size("--index-page", &a.index_page)? as usize,
        clients: a.clients,
        buffer_pcts,
        workloads,
        devices,
        warmup_s,
        duration_s,
        repetitions,
        policy: a.policy.clone(),
        data_dir: a.data_dir.clone(),
        reload: a.reload,
        seed: a.seed,
        trace: !a.no_trace,
        trace_device: a.trace_device.clone(),
        iobench_s: a.iobench_seconds,
        fio: !a.no_fio,
        profile_overrides: a.profile_set.clone(),
        app_cpu_us: a.app_cpu_us,
        ..d
    };
    cfg.validate()?;
    Ok(cfg)
}

impl LabArgs for PrimitiveArgs {
    type Exp = Primitive;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<PrimitiveConfig, CliError> {
        to_config(self)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;
    use super::super::LabCommand;
    use super::*;
    use nvmedb_lab::measure::DeviceKind;

    fn config(args: &[&str]) -> Result<PrimitiveConfig, CliError> {
        let LabCommand::Primitive(a) = parse(&[&["primitive"], args].concat()) else {
            panic!("not lab primitive")
        };
        to_config(&a)
    }

    #[test]
    fn primitive_flags_map_to_a_config() {
        let c = config(&["--rows", "50", "--devices", "memory,optane", "--buffers", "1,100"]).unwrap();
        assert_eq!((c.rows_per_table, c.table_page_size, c.index_page_size), (50, 24576, 4096));
        assert_eq!(c.devices, vec![DeviceKind::Memory, DeviceKind::Emulated("optane".into())]);
        assert_eq!(c.buffer_pcts, vec![1.0, 100.0]);
        assert_eq!(config(&["--full-scale"]).unwrap().rows_per_table, FULL_SCALE_ROWS);
        assert_eq!(config(&["--rows", "5", "--rows", "7"]).unwrap().rows_per_table, 7, "the last value wins");
        assert!(config(&["--devices", "floppy"]).unwrap_err().to_string().contains("floppy"));
    }
}
