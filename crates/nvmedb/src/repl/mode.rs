//! The names of the replication modes (`lazy`, `eager`, `chain`, `quorum:K`), as the command
//! line, the cluster view and the coordination store spell them.
//!
//! Owns: [`parse_mode`] and [`mode_name`], each the other's inverse.

use crate::xlog::ReplicationMode;

/// Parses a mode name: `lazy`, `eager`, `chain`, `quorum:K`.
pub fn parse_mode(s: &str) -> Option<ReplicationMode> {
    match s {
        "lazy" => Some(ReplicationMode::Lazy),
        "eager" => Some(ReplicationMode::Eager),
        "chain" => Some(ReplicationMode::Chain),
        _ => s.strip_prefix("quorum:").and_then(|k| k.parse().ok()).map(ReplicationMode::Quorum),
    }
}

/// The name [`parse_mode`] reads back.
pub fn mode_name(mode: ReplicationMode) -> String {
    match mode {
        ReplicationMode::Lazy => "lazy".into(),
        ReplicationMode::Eager => "eager".into(),
        ReplicationMode::Chain => "chain".into(),
        ReplicationMode::Quorum(k) => format!("quorum:{k}"),
    }
}
