//! `nvmedb lab tpch`: the flags of seed 004's TPC-H Q3 experiment.
//!
//! Owns: [`TpchArgs`] and its translation into a [`TpchConfig`].

use super::LabArgs;
use crate::cmd::args::{list, parse_size, with_default, CommonArgs, DevicesArg, RepsArg};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::tpch::{TpchBench, TpchConfig};
use nvmedb_lab::workload::tpch::Q3Params;
use std::path::PathBuf;

/// Flags of `nvmedb lab tpch`.
#[derive(Args, Debug)]
#[command(mut_arg("devices", |a| with_default(
    a.help("Devices (comma-separated): disk, a profile (optane, nand, ...), or <profile>-x<N> for N emulated devices striped together (seed 004: ten P4800X)"),
    list(&TpchConfig::default().devices)
)))]
#[command(mut_arg("reps", |a| with_default(a, TpchConfig::default().reps)))]
pub struct TpchArgs {
    /// Directory of the loaded databases on the disk under test (one per scale factor and page
    /// size, reused across runs when it matches).
    #[arg(long, default_value = "nvmedb-data/tpch")]
    pub data_dir: PathBuf,
    /// TPC-H scale factor (seed 004: 100; SF 0.2 loads in about a minute on 2 cores).
    #[arg(long, default_value_t = 0.2)]
    pub sf: f64,
    /// Table page size (bytes or with a K suffix; seed 004: 16K).
    #[arg(long, default_value = "16k")]
    pub page_size: String,
    /// Loader threads (default: the number of CPUs).
    #[arg(long)]
    pub load_threads: Option<usize>,
    /// Load again even if a matching database exists.
    #[arg(long)]
    pub reload: bool,
    /// Query worker counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    pub workers: Vec<usize>,
    /// Page reads each worker keeps in flight ahead of the page it processes (its I/O depth;
    /// the engine's default for scans unless given).
    #[arg(long, default_value_t = nvmedb::table::heap::READ_AHEAD_PAGES)]
    pub read_ahead: u64,
    /// Buffer policies (comma-separated): shr-<k>, sep.
    #[arg(long, value_delimiter = ',', default_value = "shr-1,shr-16,shr-512,sep")]
    pub policies: Vec<String>,
    /// Table buffer as a size (e.g. 64M); default: seed 004's 1 GB per SF 100.
    #[arg(long, conflicts_with = "buffer_pct")]
    pub buffer: Option<String>,
    /// Table buffer as a percentage of the three tables.
    #[arg(long)]
    pub buffer_pct: Option<f64>,
    #[command(flatten)]
    pub devices: DevicesArg,
    #[command(flatten)]
    pub reps: RepsArg,
    /// Q3's market segment.
    #[arg(long, default_value = "BUILDING")]
    pub segment: String,
    /// Q3's date (YYYY-MM-DD).
    #[arg(long, default_value = "1995-03-15")]
    pub date: String,
    /// Passes of the scans' read pattern (same files, partitions and batches as the query)
    /// each device-limit probe reads, through the engine's Device and with fio.
    #[arg(long, default_value_t = 3)]
    pub probe_passes: u32,
    /// Skip the fio reference runs.
    #[arg(long)]
    pub no_fio: bool,
    /// Take the page-table lock on every buffer hit, as seed 004's SHR-k buffers did (the
    /// engine's default serves hits lock-free).
    #[arg(long)]
    pub locked_hits: bool,
    /// Read ahead in synchronous batches (submit `--read-ahead` reads together, wait for all,
    /// process those pages with nothing in flight) instead of the engine's default window
    /// (kept in flight, topped up half a window at a time while the scan processes the half
    /// that arrived); for comparisons.
    #[arg(long)]
    pub sync_read_ahead: bool,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for TpchArgs {
    type Exp = TpchBench;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<TpchConfig, CliError> {
        let d = TpchConfig::default();
        Ok(TpchConfig {
            data_dir: self.data_dir.clone(),
            sf: self.sf,
            page_size: parse_size("--page-size", &self.page_size)? as usize,
            load_threads: self.load_threads.unwrap_or(d.load_threads),
            reload: self.reload,
            workers: self.workers.clone(),
            read_ahead: self.read_ahead,
            policies: self.policies.clone(),
            buffer_bytes: self.buffer.as_deref().map(|b| parse_size("--buffer", b)).transpose()?,
            buffer_pct: self.buffer_pct,
            devices: self.devices.devices.clone().unwrap_or_else(|| d.devices.clone()),
            reps: self.reps.reps.unwrap_or(d.reps),
            params: Q3Params { segment: self.segment.clone(), date: self.date.clone() },
            probe_passes: self.probe_passes,
            use_fio: !self.no_fio,
            lock_free_hits: !self.locked_hits,
            async_read_ahead: !self.sync_read_ahead,
        })
    }
}
