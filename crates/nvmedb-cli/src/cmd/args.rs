//! Flag values shared by several commands: sizes with K/M/G suffixes, the flags every lab
//! command has, and the measuring flags the lab's experiments share.
//!
//! Owns: [`parse_size`], [`parse_devices`], [`CommonArgs`], and the one definition of each
//! shared experiment flag ([`RepsArg`], [`DurationArg`], [`WarmupArg`], together
//! [`WindowArgs`], [`DevicesArg`], [`BuffersArg`]) with [`with_default`]. Invariants: a bad value is an error naming the flag;
//! a shared flag is declared only here (a test of `lab` checks the experiments' sources), it
//! is optional, and a flag left out keeps the experiment's own value (its configuration's
//! `Default`, or the preset a scale flag chose), so no default is written twice.

use super::CliError;
use clap::{Arg, Args};
use nvmedb_lab::measure::DeviceKind;
use nvmedb_lab::RunOptions;
use std::path::PathBuf;

/// `4096`, `4k`, `24K`, `1G`, `2GiB` as bytes; `flag` names the flag in the error.
pub fn parse_size(flag: &'static str, s: &str) -> Result<u64, CliError> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.trim_end_matches("ib").trim_end_matches('b');
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        Some('t') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| CliError::flag(flag, format!("`{s}` is not a size (e.g. 4096, 4k, 1G)")))?;
    Ok((v * mult as f64) as u64)
}

/// `disk`, `memory` or emulated profile names as devices; `flag` names the flag in the error.
pub fn parse_devices(flag: &'static str, names: &[String]) -> Result<Vec<DeviceKind>, CliError> {
    names
        .iter()
        .map(|d| {
            DeviceKind::parse(d)
                .ok_or_else(|| CliError::flag(flag, format!("`{d}` is not disk, memory or a profile")))
        })
        .collect()
}

/// `arg` with the experiment's default value appended to its help (`[default: v]`), for the
/// shared flags, which carry no default of their own:
/// `#[command(mut_arg("reps", |a| with_default(a, Config::default().reps)))]`.
pub fn with_default(arg: Arg, value: impl std::fmt::Display) -> Arg {
    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    arg.help(format!("{help} [default: {value}]"))
}

/// `values` joined with commas, for [`with_default`] of a list flag.
pub fn list<T: std::fmt::Display>(values: &[T]) -> String {
    values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")
}

/// Device names joined with commas, for [`with_default`] of `--devices`.
pub fn device_list(devices: &[DeviceKind]) -> String {
    devices.iter().map(DeviceKind::name).collect::<Vec<_>>().join(",")
}

/// `--reps`: how many times each point is measured.
#[derive(Args, Debug, Clone, Default)]
pub struct RepsArg {
    /// Repetitions of each point (interleaved; min/median/max are reported).
    #[arg(long)]
    pub reps: Option<usize>,
}

impl RepsArg {
    /// Sets `reps` if the flag was given.
    pub fn apply(&self, reps: &mut usize) {
        if let Some(r) = self.reps {
            *reps = r;
        }
    }
}

/// `--duration`: the measured window of each point.
#[derive(Args, Debug, Clone, Default)]
pub struct DurationArg {
    /// Measured seconds per point.
    #[arg(long)]
    pub duration: Option<f64>,
}

impl DurationArg {
    /// Sets `seconds` if the flag was given.
    pub fn apply(&self, seconds: &mut f64) {
        if let Some(d) = self.duration {
            *seconds = d;
        }
    }
}

/// `--warmup`: the unmeasured run before each point.
#[derive(Args, Debug, Clone, Default)]
pub struct WarmupArg {
    /// Warm-up seconds per point.
    #[arg(long)]
    pub warmup: Option<f64>,
}

impl WarmupArg {
    /// Sets `seconds` if the flag was given.
    pub fn apply(&self, seconds: &mut f64) {
        if let Some(w) = self.warmup {
            *seconds = w;
        }
    }
}

/// `--warmup`, `--duration` and `--reps` together: the measuring window of the experiments
/// that have all three.
#[derive(Args, Debug, Clone, Default)]
pub struct WindowArgs {
    /// Warm-up.
    #[command(flatten)]
    pub warmup: WarmupArg,
    /// Measured window.
    #[command(flatten)]
    pub duration: DurationArg,
    /// Repetitions.
    #[command(flatten)]
    pub reps: RepsArg,
}

impl WindowArgs {
    /// Sets each value whose flag was given.
    pub fn apply(&self, warmup_s: &mut f64, duration_s: &mut f64, reps: &mut usize) {
        self.warmup.apply(warmup_s);
        self.duration.apply(duration_s);
        self.reps.apply(reps);
    }
}

/// `--devices`: the devices the experiment's points run on.
#[derive(Args, Debug, Clone, Default)]
pub struct DevicesArg {
    /// Devices, comma-separated: disk (the real disk, in --data-dir), memory (tmpfs), or
    /// emulated profiles (optane, nand, san, hdd, dram).
    #[arg(long, value_delimiter = ',')]
    pub devices: Option<Vec<String>>,
}

impl DevicesArg {
    /// Sets `devices` if the flag was given; a name that is no device is an error naming it.
    pub fn apply(&self, devices: &mut Vec<DeviceKind>) -> Result<(), CliError> {
        if let Some(d) = &self.devices {
            *devices = parse_devices("--devices", d)?;
        }
        Ok(())
    }
}

/// `--buffers`: the table buffer sizes the experiment's points run with.
#[derive(Args, Debug, Clone, Default)]
pub struct BuffersArg {
    /// Table buffer sizes, % of the table data (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub buffers: Option<Vec<f64>>,
}

impl BuffersArg {
    /// Sets `pcts` if the flag was given.
    pub fn apply(&self, pcts: &mut Vec<f64>) {
        if let Some(b) = &self.buffers {
            pcts.clone_from(b);
        }
    }
}

/// The flags of every lab command (and `iobench`).
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Root of the results directories (`<root>/<experiment>/<UTC time>/`, `<root>/<experiment>/latest`).
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Hide progress bars and interim lines.
    #[arg(long = "no-progress")]
    pub no_progress: bool,
}

impl CommonArgs {
    /// How the lab runs the experiment.
    pub fn options(&self) -> RunOptions {
        RunOptions { results_root: self.results.clone(), progress: !self.no_progress }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        let size = |s| parse_size("--size", s).ok();
        assert_eq!(size("4k"), Some(4096));
        assert_eq!(size("24K"), Some(24576));
        assert_eq!(size("1G"), Some(1 << 30));
        assert_eq!(size("2GiB"), Some(2 << 30));
        assert_eq!(size("512"), Some(512));
        let e = parse_size("--bs", "lots").unwrap_err().to_string();
        assert!(e.starts_with("--bs: `lots` is not a size"), "{e}");
    }
}
