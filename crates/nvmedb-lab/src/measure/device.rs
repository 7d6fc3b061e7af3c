//! Where an experiment's data lives: the real disk, RAM, or RAM behind an emulated device
//! profile, and how each is named in tables and plots.
//!
//! Owns: [`DeviceKind`] and [`profile`]. Invariant: an emulated device's label says EMULATED
//! (experiments add the latency it achieved in the run).

use crate::error::{LabError, Result};
use nvmedb::io::DeviceProfile;
use serde::{Deserialize, Serialize};

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
