//! What a primary reports about its replication: [`ReplStatus`] and [`StandbyStatus`], and
//! their text form for `nvmedb status`.
//!
//! Owns: the status types and their `Display`; no state (the primary fills them in
//! `ReplicatedLog::status`).

use crate::wal::Lsn;
use crate::xlog::{LinkState, ReplicationMode};
use std::time::Duration;

/// Where one standby stands, for status output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandbyStatus {
    /// Its address.
    pub addr: String,
    /// Link health.
    pub link: LinkState,
    /// Last error or note.
    pub detail: String,
    /// Its shadow counter (persisted position it reported).
    pub shadow: Lsn,
    /// Successful connections so far.
    pub connects: u64,
    /// Its log was given up (`max_retained_bytes`): it needs a base backup.
    pub given_up: bool,
    /// Bytes of log appended here that it has not acknowledged (appended end − shadow).
    pub lag_bytes: u64,
    /// How long ago the first record it has not acknowledged was appended (zero when it has
    /// everything; at least this long when that record already left the shipping queue).
    pub lag: Duration,
}

/// The replication state of a primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplStatus {
    /// The configured mode.
    pub configured: ReplicationMode,
    /// The mode in force (differs while degraded).
    pub effective: ReplicationMode,
    /// Why the mode is degraded, if it is.
    pub degraded: Option<String>,
    /// Set when a standby fenced this primary.
    pub fenced: Option<String>,
    /// Its acknowledgement gate (leadership lease) is closed.
    pub lease_lost: bool,
    /// This primary's epoch.
    pub epoch: u64,
    /// Local durable LSN.
    pub local_durable: Lsn,
    /// End of the last record appended (the local durable position may lie past it, in
    /// filler that is never shipped).
    pub appended: Lsn,
    /// Durable LSN the engine sees.
    pub durable: Lsn,
    /// Per standby.
    pub standbys: Vec<StandbyStatus>,
    /// Mode changes, oldest first.
    pub events: Vec<String>,
}

impl std::fmt::Display for ReplStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "role primary  epoch {}  mode {:?} (configured {:?}){}{}{}",
            self.epoch,
            self.effective,
            self.configured,
            self.degraded.as_ref().map(|d| format!("  DEGRADED: {d}")).unwrap_or_default(),
            self.fenced.as_ref().map(|d| format!("  FENCED: {d}")).unwrap_or_default(),
            if self.lease_lost { "  NOT ACKNOWLEDGING: leadership lease not renewed" } else { "" }
        )?;
        writeln!(f, "local durable {}  acknowledged durable {}", self.local_durable, self.durable)?;
        for s in &self.standbys {
            writeln!(
                f,
                "  standby {:<22} link {:?}{}  shadow {}  lag {} B  connects {}  {}",
                s.addr,
                s.link,
                if s.given_up { "  GAVE UP (needs a base backup)" } else { "" },
                s.shadow,
                self.local_durable.saturating_sub(s.shadow),
                s.connects,
                s.detail
            )?;
        }
        for e in &self.events {
            writeln!(f, "  event: {e}")?;
        }
        Ok(())
    }
}
