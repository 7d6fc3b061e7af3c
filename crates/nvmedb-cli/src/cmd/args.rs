//! Flag values shared by several commands: sizes with K/M/G suffixes and the flags every lab
//! command has.
//!
//! Owns: [`parse_size`], [`parse_devices`] and [`CommonArgs`]. Invariant: a bad value is an error naming the flag.

use super::CliError;
use clap::Args;
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
