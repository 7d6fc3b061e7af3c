//! Where an experiment's data lives: the real disk, RAM, or RAM behind an emulated device
//! profile, and how each is named in tables and plots.
//!
//! Owns: [`DeviceKind`], [`profile`], [`LogChoice`], and opening a directory's data ([`storage`])
//! and log ([`log_opener`]) on a device. Invariants: an emulated device's label says EMULATED
//! (experiments add the latency it achieved in the run); an emulated device wraps a directory
//! in RAM (tmpfs), and each log copy is a device of its own.

use crate::error::{LabError, Result};
use nvmedb::io::{DeviceProfile, DirStorage, EmulatedStorage, FileOptions, Storage};
use nvmedb::wal::{FileLogOpener, LogOpener};
use nvmedb::xlog::XLogOpener;
use nvmedb::FastLogOptions;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// Where a device's data lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The real disk: O_DIRECT files in the data directory.
    Disk,
    /// Plain RAM, no latency (for tests and as an in-memory reference).
    Memory,
    /// RAM behind an emulated profile.
    Emulated(String),
}

impl DeviceKind {
    /// Parses `disk`, `memory` or a built-in profile name.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "disk" | "real" => Some(Self::Disk),
            "memory" | "mem" => Some(Self::Memory),
            p if DeviceProfile::builtin(p).is_some() => Some(Self::Emulated(p.to_string())),
            _ => None,
        }
    }
    /// Short name (`disk`, `memory`, or the profile).
    pub fn name(&self) -> String {
        match self {
            Self::Disk => "disk".into(),
            Self::Memory => "memory".into(),
            Self::Emulated(p) => p.clone(),
        }
    }
    /// Name with the emulation label, for tables and legends.
    pub fn label(&self) -> String {
        match self {
            Self::Disk => "disk (real)".into(),
            Self::Memory => "memory (no device)".into(),
            Self::Emulated(p) => format!("{p} (EMULATED)"),
        }
    }
}

/// The built-in profile `name` with `key=value` overrides applied; errors name the field
/// (`devices` for an unknown profile, `profile_overrides` for a bad override).
pub fn profile(name: &str, overrides: &[String]) -> Result<DeviceProfile> {
    let mut p = DeviceProfile::builtin(name)
        .ok_or_else(|| LabError::config("devices", format!("unknown device profile `{name}`")))?;
    for o in overrides {
        p.apply_override(o).map_err(|e| LabError::config("profile_overrides", e.to_string()))?;
    }
    Ok(p)
}

/// Which log the database keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogChoice {
    /// The duplexed file log: both copies on the device under test, commit = both synced.
    Duplexed,
    /// The fast log (software X-SSD): the ring on tmpfs, its conventional side on the device.
    Fast,
}

impl LogChoice {
    /// Parses `duplexed` (or `file`) and `fast`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "duplexed" | "file" => Some(Self::Duplexed),
            "fast" | "xlog" => Some(Self::Fast),
            _ => None,
        }
    }
    /// Short name for tables and files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Duplexed => "file",
            Self::Fast => "fast",
        }
    }
    /// What the log is, for summaries.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Duplexed => "duplexed file log on the device under test (commit = both copies synced)",
            Self::Fast => {
                "fast log: ring on tmpfs (survives kill -9, not power loss), destaged to the device"
            }
        }
    }
}

/// The files of directory `dir` (created if missing) on `kind`: the directory itself for the
/// disk and memory, behind profile `p` (with `overrides`) for an emulated device, which then
/// must be in RAM (tmpfs). `seed` drives the emulator's jitter.
pub fn storage(kind: &DeviceKind, dir: &Path, overrides: &[String], seed: u64) -> Result<Arc<dyn Storage>> {
    let inner: Arc<dyn Storage> = Arc::new(
        DirStorage::new(dir, FileOptions::default())
            .map_err(LabError::engine(format!("opening directory {}", dir.display())))?,
    );
    match kind {
        DeviceKind::Emulated(p) => Ok(Arc::new(
            EmulatedStorage::new(inner, profile(p, overrides)?, seed)
                .map_err(LabError::engine(format!("putting {} behind the {p} profile", dir.display())))?,
        )),
        _ => Ok(inner),
    }
}

/// The log of the database in `dir` on `kind`: the duplexed file log (`wal/` and `wal-mirror/`,
/// each copy a device of its own) or the fast log (its ring on tmpfs, its conventional side in
/// `xlog/` on the device).
pub fn log_opener(
    kind: &DeviceKind,
    log: LogChoice,
    dir: &Path,
    overrides: &[String],
    seed: u64,
) -> Result<Box<dyn LogOpener>> {
    Ok(match log {
        LogChoice::Duplexed => Box::new(FileLogOpener {
            copies: vec![
                storage(kind, &dir.join("wal"), overrides, seed ^ 1)?,
                storage(kind, &dir.join("wal-mirror"), overrides, seed ^ 2)?,
            ],
            options: Default::default(),
        }),
        LogChoice::Fast => Box::new(XLogOpener {
            storage: storage(kind, &dir.join("xlog"), overrides, seed ^ 1)?,
            config: FastLogOptions::default().xlog_config(dir),
        }),
    })
}
