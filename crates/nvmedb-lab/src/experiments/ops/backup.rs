//! The backup part of `lab ops`: base backups of the primary (`nvmedb::backup::backup`, what
//! `nvmedb backup` runs) beside fio's sequential read and write rates on the same disk, run
//! back to back in every repetition; then a log of a set size written after the last backup
//! and archived (`open_archiving`, what `nvmedb serve --archive` runs), and restores of that
//! backup with the archive (`nvmedb::backup::restore`, what `nvmedb restore` runs).
//!
//! Owns: [`FioRun`], [`BackupRun`], [`RestoreRun`] and [`run`]. Invariants: the database is
//! open (archiving) and idle while it is backed up; fio reads the primary's largest data file
//! read-only and writes a scratch file it removes; a missing fio is a note, not a failure;
//! every restore starts from an empty directory, and each is removed after it is measured.

use super::OpsConfig;
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::measure::{fio, progress};
use crate::workload::primitive::{table_name, DATA1_BYTES};
use nvmedb::backup::{self, archive::open_archiving, Target};
use nvmedb::util::Rng;
use nvmedb::{Database, Options, Table, Value};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const MIB: f64 = (1u64 << 20) as f64;

/// fio's sequential rates on the disk, measured next to a backup.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct FioRun {
    /// Repetition.
    pub rep: usize,
    /// 4 MiB O_DIRECT reads of the primary's largest data file, MiB/s (`None`: fio missing or
    /// failed).
    pub read_mib_s: Option<f64>,
    /// 4 MiB O_DIRECT writes of a scratch file, fsync at the end, MiB/s.
    pub write_mib_s: Option<f64>,
}

impl FioRun {
    /// The rate a copy on one disk could reach if it read and wrote one after the other at
    /// fio's rates: 1 / (1/read + 1/write), MiB/s.
    pub fn copy_mib_s(&self) -> Option<f64> {
        Some(1.0 / (1.0 / self.read_mib_s? + 1.0 / self.write_mib_s?))
    }
}

/// One base backup.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct BackupRun {
    /// Repetition.
    pub rep: usize,
    /// Bytes copied (data files and log).
    pub bytes: u64,
    /// Files in its manifest.
    pub files: usize,
    /// Wall seconds.
    pub seconds: f64,
    /// MiB/s.
    pub mib_s: f64,
}

/// One restore of the last backup with the archive, to its end.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RestoreRun {
    /// Repetition.
    pub rep: usize,
    /// Log bytes replayed (the backup's and the archived segments').
    pub log_bytes: u64,
    /// Segments taken from the archive.
    pub archived_segments: usize,
    /// Seconds copying and checking the backup and the segments.
    pub copy_s: f64,
    /// Seconds of the first open (redo, undo, checkpoint).
    pub recovery_s: f64,
    /// Total seconds per GiB of log replayed.
    pub s_per_gib: f64,
    /// Log replayed per second of the whole restore, MiB/s.
    pub log_mib_s: f64,
}

/// What the part produced.
#[derive(Debug, Default)]
pub struct BackupPart {
    /// Every fio run.
    pub fio: Vec<FioRun>,
    /// Every backup.
    pub backups: Vec<BackupRun>,
    /// Every restore.
    pub restores: Vec<RestoreRun>,
    /// What was not measured.
    pub notes: Vec<String>,
}

/// The largest table (heap) file in `dir`: fio's read reference, a data file as the backup
/// reads it.
fn largest_file(dir: &Path) -> Result<PathBuf> {
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(dir).map_err(LabError::io(dir, "list"))? {
        let e = e.map_err(LabError::io(dir, "list"))?;
        let len = e.metadata().map_err(LabError::io(e.path(), "stat"))?.len();
        let heap = e.file_name().to_string_lossy().ends_with(".heap");
        if heap && best.as_ref().is_none_or(|(b, _)| len > *b) {
            best = Some((len, e.path()));
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| LabError::config("data_dir", format!("{} holds no table file", dir.display())))
}

/// Writes about `bytes` of log: `cfg.writers` threads replacing rows' 4 KiB column (each
/// update logs the changed bytes before and after) until the log stream (what a restore
/// replays; not the device's bytes, which count re-written blocks) has grown by `bytes`.
fn write_log(cfg: &OpsConfig, env: &RunEnv, db: &Database, bytes: u64) -> Result<u64> {
    let log_bytes = || db.engine_log().map_or(0, |l| l.record_log().stats().durable_bytes);
    let start = log_bytes();
    let tables: Vec<Table> = (0..cfg.tables)
        .map(|i| db.table(&table_name(i)))
        .collect::<nvmedb::Result<_>>()
        .map_err(LabError::engine("opening the tables"))?;
    let bar = progress::bytes_bar(env.progress, bytes, "writing the log to restore");
    let done = AtomicBool::new(false);
    let commits = AtomicU64::new(0);
    let first_error = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for w in 0..cfg.writers {
            let (tables, done, commits, first_error) = (&tables, &done, &commits, &first_error);
            s.spawn(move || {
                let mut rng = Rng::new(0x0b5 ^ (w as u64 + 1));
                while !done.load(Ordering::Relaxed) {
                    let t = &tables[rng.below(tables.len() as u64) as usize];
                    let sid = rng.below(cfg.rows) as i64;
                    let fill = b'a' + rng.below(26) as u8;
                    let row = [
                        Value::Int(sid),
                        Value::Int(rng.next_u64() as i64 >> 1),
                        Value::Bytes(vec![fill; DATA1_BYTES as usize]),
                    ];
                    match t.update(&row) {
                        Ok(_) => {
                            commits.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.is_retryable() => {}
                        Err(e) => {
                            *first_error.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(LabError::engine("a writer's UPDATE")(e));
                            done.store(true, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        while !done.load(Ordering::Relaxed) {
            let grown = log_bytes().saturating_sub(start);
            bar.set_position(grown.min(bytes));
            if grown >= bytes {
                done.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    bar.finish_and_clear();
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(commits.into_inner())
}

/// Runs the part on the loaded, closed primary in `primary`.
pub fn run(cfg: &OpsConfig, env: &RunEnv, primary: &Path) -> Result<BackupPart> {
    let dir = &cfg.data_dir;
    let archive = dir.join("archive");
    let mut part = BackupPart::default();
    let fio_ok = fio::installed();
    if !fio_ok {
        part.notes.push("fio is not installed (Debian: apt-get install fio): no reference rates".into());
    }
    let reference = largest_file(primary)?;
    let reference_len = std::fs::metadata(&reference).map_err(LabError::io(&reference, "stat"))?.len();
    if fio_ok && reference_len < 4 << 20 {
        part.notes.push(format!(
            "{} has {reference_len} bytes, less than one of fio's 4 MiB reads: no read rate",
            reference.display()
        ));
    }
    let db = open_archiving(primary, Options::default(), &archive)
        .map_err(LabError::engine("opening the primary with its log archived"))?;
    let write_size = crate::files::dir_bytes(primary)?.max(64 << 20);
    let mut last = None;
    for rep in 0..cfg.reps {
        if fio_ok {
            let f = FioRun {
                rep,
                read_mib_s: fio::seqread_mib_s(&reference, cfg.fio_s),
                write_mib_s: fio::seqwrite_mib_s(dir, write_size, cfg.fio_s),
            };
            if (f.read_mib_s.is_none() && reference_len >= 4 << 20) || f.write_mib_s.is_none() {
                part.notes.push(format!("rep {rep}: a fio run failed"));
            }
            part.fio.push(f);
        }
        let to = dir.join(format!("backup-{rep}"));
        if let Some(prev) = last.replace(to.clone()) {
            let _ = std::fs::remove_dir_all(prev);
        }
        let bar = progress::bytes_bar(env.progress, crate::files::dir_bytes(primary)?, "backup");
        let r = backup::backup(primary, &to, &mut |_, n| bar.inc(n)).map_err(LabError::engine(format!(
            "backing up {} to {}",
            primary.display(),
            to.display()
        )))?;
        bar.finish_and_clear();
        let b = BackupRun {
            rep,
            bytes: r.bytes,
            files: r.manifest.files.len(),
            seconds: r.seconds,
            mib_s: r.bytes as f64 / MIB / r.seconds.max(1e-9),
        };
        env.note(format!(
            "ops: backup {rep}: {:.1} MiB in {:.2} s = {:.1} MiB/s; fio sequential read {}, write {} MiB/s",
            b.bytes as f64 / MIB,
            b.seconds,
            b.mib_s,
            part.fio.last().and_then(|f| f.read_mib_s).map_or("-".into(), |v| format!("{v:.1}")),
            part.fio.last().and_then(|f| f.write_mib_s).map_or("-".into(), |v| format!("{v:.1}")),
        ));
        part.backups.push(b);
    }
    let commits = write_log(cfg, env, &db, cfg.restore_log_mib << 20)?;
    env.note(format!("ops: {commits} commits wrote the log to restore"));
    db.close().map_err(LabError::engine("closing the archiving primary"))?;
    let backup_dir = last.ok_or_else(|| LabError::config("--reps", "no backup was taken"))?;
    for rep in 0..cfg.reps {
        let to = dir.join(format!("restored-{rep}"));
        let bar = progress::bytes_bar(
            env.progress,
            crate::files::dir_bytes(&backup_dir)? + crate::files::dir_bytes(&archive)?,
            "restore",
        );
        let r = backup::restore(&backup_dir, Some(&archive), &to, Target::End, &mut |_, n| bar.inc(n))
            .map_err(LabError::engine(format!("restoring {} to {}", backup_dir.display(), to.display())))?;
        bar.finish_and_clear();
        let total = r.copy_seconds + r.recovery_seconds;
        let gib = r.log_bytes as f64 / (1u64 << 30) as f64;
        let run = RestoreRun {
            rep,
            log_bytes: r.log_bytes,
            archived_segments: r.archived_segments,
            copy_s: r.copy_seconds,
            recovery_s: r.recovery_seconds,
            s_per_gib: if gib > 0.0 { total / gib } else { 0.0 },
            log_mib_s: r.log_bytes as f64 / MIB / total.max(1e-9),
        };
        env.note(format!(
            "ops: restore {rep}: {:.1} MiB of log ({} archived segments), copy {:.2} s, recovery {:.2} s: {:.1} s per GiB of log",
            run.log_bytes as f64 / MIB,
            run.archived_segments,
            run.copy_s,
            run.recovery_s,
            run.s_per_gib
        ));
        part.restores.push(run);
        std::fs::remove_dir_all(&to).map_err(LabError::io(&to, "remove"))?;
    }
    Ok(part)
}
