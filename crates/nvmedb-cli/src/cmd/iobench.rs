//! `nvmedb iobench`: the fio-like device benchmark (fio's flag names where fio has one).
//!
//! Owns: the flags and their translation into an [`IoBenchConfig`]. Invariant: every flag
//! value is checked here or by the experiment's validation, and a bad one names the flag.

use super::args::{parse_size, CommonArgs};
use super::lab::LabArgs;
use super::CliError;
use clap::Args;
use nvmedb::io::{Backend, SingleOpPath};
use nvmedb_lab::experiments::iobench::{Engine, IoBench, IoBenchConfig, Pattern};
use std::path::PathBuf;

/// Flags of `nvmedb iobench` (fio's names where fio has one).
#[derive(Args, Debug)]
pub struct IobenchArgs {
    /// A file path (O_DIRECT), or an emulated profile: dram, optane, nand, san, hdd.
    #[arg(long, default_value = "optane")]
    pub device: String,
    /// randread, randwrite, randrw, read, write or rw (read/write/rw are sequential).
    #[arg(long, default_value = "randread")]
    pub rw: String,
    /// Percentage of reads for randrw/rw (fio's rwmixread).
    #[arg(long = "read-pct", alias = "rwmixread", default_value_t = 50)]
    pub read_pct: u8,
    /// Block size: bytes or with a K/M suffix (a multiple of 4K).
    #[arg(long, default_value = "4k")]
    pub bs: String,
    /// Operations in flight per thread.
    #[arg(long, alias = "iodepth", default_value_t = 1)]
    pub depth: usize,
    /// Worker threads (fio's numjobs).
    #[arg(long, alias = "numjobs", default_value_t = 1)]
    pub threads: usize,
    /// Measured seconds (after the warm-up).
    #[arg(long, alias = "runtime", default_value_t = 5.0)]
    pub duration: f64,
    /// Warm-up seconds, not measured.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Bytes of the device the workload covers (K/M/G suffixes). Files shorter than this are
    /// first written to this size.
    #[arg(long, default_value = "1G")]
    pub size: String,
    /// queue: keep --depth operations in flight through the device's queue (io_uring for files);
    /// sync: one read_at/write_at at a time (like fio's psync; --depth must be 1).
    #[arg(long, default_value = "queue")]
    pub engine: String,
    /// Kernel interface for files: auto, io_uring or pread (also NVMEDB_IO_BACKEND).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// How the sync engine's single calls reach an io_uring file: pread or ring.
    #[arg(long = "single-op", default_value = "pread")]
    pub single_op: String,
    /// For file-backed profiles (nand, san, hdd): the file under the emulation (RAM otherwise).
    #[arg(long = "backing-file")]
    pub backing_file: Option<PathBuf>,
    /// Override a profile parameter, e.g. --profile-set read_latency_us=12 (repeatable).
    #[arg(long = "profile-set")]
    pub profile_set: Vec<String>,
    /// A profile config file: `key = value` lines, optional `[profile]` sections.
    #[arg(long = "profile-config")]
    pub profile_config: Option<PathBuf>,
    /// Operations per io_uring_enter when a file queue submits (fio's iodepth_batch_submit).
    #[arg(long = "submit-batch", alias = "iodepth_batch_submit", default_value_t = 1)]
    pub submit_batch: usize,
    /// Seed of offsets, the read/write choice and emulated jitter.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

fn to_config(a: &IobenchArgs) -> Result<IoBenchConfig, CliError> {
    let (pattern, read_pct) = match a.rw.as_str() {
        "randread" => (Pattern::Random, 100),
        "randwrite" => (Pattern::Random, 0),
        "randrw" => (Pattern::Random, a.read_pct),
        "read" => (Pattern::Sequential, 100),
        "write" => (Pattern::Sequential, 0),
        "rw" | "readwrite" => (Pattern::Sequential, a.read_pct),
        other => {
            return Err(CliError::flag(
                "--rw",
                format!("{other}: expected randread, randwrite, randrw, read, write or rw"),
            ))
        }
    };
    let engine = match a.engine.as_str() {
        "queue" | "io_uring" => Engine::Queue,
        "sync" | "psync" => Engine::Sync,
        other => return Err(CliError::flag("--engine", format!("{other}: expected queue or sync"))),
    };
    let backend = Backend::parse(&a.backend).ok_or_else(|| {
        CliError::flag("--backend", format!("{}: expected auto, io_uring or pread", a.backend))
    })?;
    let single_op = match a.single_op.as_str() {
        "pread" => SingleOpPath::Pread,
        "ring" | "thread_ring" => SingleOpPath::ThreadRing,
        other => return Err(CliError::flag("--single-op", format!("{other}: expected pread or ring"))),
    };
    Ok(IoBenchConfig {
        device: a.device.clone(),
        backing_file: a.backing_file.clone(),
        profile_overrides: a.profile_set.clone(),
        profile_config: a.profile_config.clone(),
        pattern,
        read_pct,
        block_bytes: parse_size("--bs", &a.bs)? as usize,
        depth: a.depth,
        threads: a.threads,
        duration_s: a.duration,
        warmup_s: a.warmup,
        size_bytes: parse_size("--size", &a.size)?,
        engine,
        backend,
        single_op,
        submit_batch: a.submit_batch,
        seed: a.seed,
    })
}

impl LabArgs for IobenchArgs {
    type Exp = IoBench;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<IoBenchConfig, CliError> {
        to_config(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: IobenchArgs,
    }

    #[test]
    fn iobench_flags_map_to_a_config() {
        let cli = Cli::try_parse_from([
            "iobench",
            "--device",
            "nand",
            "--rw",
            "randrw",
            "--read-pct",
            "70",
            "--bs",
            "16k",
            "--iodepth",
            "32",
            "--profile-set",
            "read_latency_us=80",
        ])
        .unwrap();
        let c = to_config(&cli.args).unwrap();
        assert_eq!((c.pattern, c.read_pct, c.block_bytes, c.depth), (Pattern::Random, 70, 16384, 32));
        assert_eq!(c.profile_overrides, vec!["read_latency_us=80".to_string()]);
        let bad = Cli::try_parse_from(["iobench", "--rw", "sideways"]).unwrap();
        assert!(to_config(&bad.args).unwrap_err().to_string().contains("--rw: sideways"));
    }
}
