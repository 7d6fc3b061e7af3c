//! `nvmedb backup` and `nvmedb restore`: online base backups and point-in-time restore (the
//! engine's `nvmedb::backup`), with a progress bar and a closing line of figures.
//!
//! Owns: the two commands' flags and the parsing of `--until` (an LSN, or a UTC time).
//! Invariant: a restore target that cannot be parsed is an error naming the flag and both
//! accepted forms.

use super::CliError;
use clap::Args;
use nvmedb::backup::{self, Target};
use nvmedb::util::calendar::days_from_civil;
use std::path::{Path, PathBuf};

/// Flags of `nvmedb backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The database directory to back up (the database may be running: the copy is online).
    #[arg(long)]
    pub from: String,
    /// The new backup directory (must not exist, or be empty).
    #[arg(long)]
    pub to: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// Flags of `nvmedb restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup directory (`nvmedb backup --to`).
    #[arg(long)]
    pub backup: PathBuf,
    /// The log archive (`--archive` of the database backed up); without it only the backup's
    /// own log is replayed.
    #[arg(long)]
    pub archive: Option<PathBuf>,
    /// The new database directory (must not exist, or be empty).
    #[arg(long)]
    pub to: PathBuf,
    /// Stop at this LSN (a number) or this UTC time (`2026-11-27 23:40:00.5`, `...T...Z`, or
    /// `@<Unix seconds>`); default: the end of the archive.
    #[arg(long)]
    pub until: Option<String>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `--until`: digits are an LSN; `@<seconds>` a Unix time; else `YYYY-MM-DD[ T]HH:MM:SS[.f][Z]`
/// in UTC.
pub fn parse_until(s: &str) -> Result<Target, CliError> {
    let bad = || {
        CliError::flag(
            "--until",
            format!("`{s}` is neither an LSN (digits) nor a UTC time (2026-11-27 23:40:00[.5], or @<Unix seconds>)"),
        )
    };
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(Target::Lsn).map_err(|_| bad());
    }
    if let Some(secs) = s.strip_prefix('@') {
        let v: f64 = secs.parse().map_err(|_| bad())?;
        return Ok(Target::Time((v * 1e6) as i64));
    }
    let s = s.trim_end_matches('Z');
    let (date, time) = s.split_once(['T', ' ']).ok_or_else(bad)?;
    let d: Vec<i64> = date.split('-').map(|p| p.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|p| p.parse().map_err(|_| bad())).collect::<Result<_, _>>()?;
    if d.len() != 3 || t.len() != 3 || !(1..=12).contains(&d[1]) || !(1..=31).contains(&d[2]) {
        return Err(bad());
    }
    let frac_us: i64 = format!("{:0<6}", &frac[..frac.len().min(6)]).parse().map_err(|_| bad())?;
    let secs = days_from_civil(d[0], d[1], d[2]) * 86_400 + t[0] * 3600 + t[1] * 60 + t[2];
    Ok(Target::Time(secs * 1_000_000 + frac_us))
}

/// Takes the backup.
pub fn run_backup(a: &BackupArgs) -> Result<(), CliError> {
    let from = PathBuf::from(&a.from);
    if !from.is_dir() {
        return Err(CliError::flag(
            "--from",
            format!(
                "{} is not a database directory on this machine (backups are taken from the directory)",
                a.from
            ),
        ));
    }
    let bar = nvmedb_lab::measure::progress::bytes_bar(!a.no_progress, dir_bytes(&from), "backup");
    let r = backup::backup(&from, &a.to, &mut |name, n| {
        bar.inc(n);
        bar.set_message(name.to_string());
    })
    .map_err(CliError::engine(format!("backing up {} to {}", from.display(), a.to.display())))?;
    bar.finish_and_clear();
    println!(
        "backup of {} in {}: {} files, {:.1} MiB in {:.2} s ({:.1} MiB/s); redo from LSN {} to at least {}",
        from.display(),
        a.to.display(),
        r.manifest.files.len(),
        r.bytes as f64 / (1 << 20) as f64,
        r.seconds,
        r.bytes as f64 / (1 << 20) as f64 / r.seconds.max(1e-9),
        r.manifest.start_lsn,
        r.manifest.end_lsn
    );
    Ok(())
}

/// Restores a backup.
pub fn run_restore(a: &RestoreArgs) -> Result<(), CliError> {
    let target = a.until.as_deref().map(parse_until).transpose()?.unwrap_or(Target::End);
    let total = dir_bytes(&a.backup) + a.archive.as_deref().map_or(0, dir_bytes);
    let bar = nvmedb_lab::measure::progress::bytes_bar(!a.no_progress, total, "restore");
    let r = backup::restore(&a.backup, a.archive.as_deref(), &a.to, target, &mut |name, n| {
        bar.inc(n);
        bar.set_message(name.to_string());
    })
    .map_err(CliError::engine(format!("restoring {} to {}", a.backup.display(), a.to.display())))?;
    bar.finish_and_clear();
    let gib = r.log_bytes as f64 / (1u64 << 30) as f64;
    println!(
        "restored {} to {}: log to LSN {} ({} archived segments, {:.1} MiB of log replayed); copy {:.2} s, \
         recovery {:.2} s ({:.1} s per GiB of log); it opens as an ordinary database",
        a.backup.display(),
        a.to.display(),
        r.end_lsn,
        r.archived_segments,
        r.log_bytes as f64 / (1 << 20) as f64,
        r.copy_seconds,
        r.recovery_seconds,
        if gib > 0.0 { (r.copy_seconds + r.recovery_seconds) / gib } else { 0.0 }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_takes_an_lsn_or_a_utc_time() {
        assert_eq!(parse_until("123456").unwrap(), Target::Lsn(123_456));
        assert_eq!(parse_until("@1.5").unwrap(), Target::Time(1_500_000));
        assert_eq!(parse_until("1970-01-02 00:00:01.25").unwrap(), Target::Time(86_401_250_000));
        assert_eq!(parse_until("2026-11-27T23:40:00Z").unwrap(), Target::Time(1_795_822_800_000_000));
        assert!(parse_until("yesterday").is_err());
        assert!(parse_until("2026-13-01 00:00:00").is_err());
    }
}
