//! Replication and high availability (seeds 000, 001, 002; docs/ha.md).
//!
//! Owns: log shipping from a primary to standbys over TCP ([`ReplicatedLog`], a
//! [`RecordLog`](crate::wal::RecordLog) that wraps the local log and adds the standbys' shadow
//! counters to `durable_lsn`/`wait_durable` per [`ReplicationMode`]); the standby
//! ([`Standby`]: receives records, persists them in its [`ReplicaLog`] at the primary's LSNs,
//! acknowledges its persisted position, applies redo continuously, and is promoted into a
//! writable database with a new epoch); data-page mirroring ([`MirrorStorage`]: every data
//! write and sync is also done synchronously on the standby); the wire protocol
//! ([`wire`]: CRC32C-checked frames, each carrying the sender's epoch, and an HMAC-SHA256
//! challenge/response handshake on a shared secret).
//!
//! Invariants:
//! - A commit is acknowledged only when the local log is durable up to it and the shadow
//!   counters satisfy the mode in force (eager: all standbys; quorum k; chain: the last;
//!   lazy: local only). When standbys do not keep up within the policy's timeout, the commit
//!   either fails with [`ReplError::Timeout`] or the log switches to a weaker mode, which is
//!   logged to stderr and shown in [`ReplicatedLog::status`] — never silently.
//! - A shadow counter only reflects positions a standby reported as persisted on the current
//!   connection; on reconnect it is first lowered to what the primary will re-ship from.
//! - Epochs fence: a standby refuses every frame whose epoch is older than its own, so a
//!   demoted primary cannot get acknowledgements (and so cannot acknowledge commits) from a
//!   standby that has seen a newer primary or was promoted.

pub mod coord;
#[cfg(feature = "etcd")]
pub mod etcd;
mod forward;
pub mod ha;
mod mirror;
pub mod node;
mod primary;
mod promote;
pub mod reads;
mod replica_log;
pub(crate) mod seed;
mod standby;
mod state;
pub mod wire;

pub use crate::error::ReplError;
pub use crate::xlog::{LinkState, ReplicationMode};
pub use mirror::{MirrorConfig, MirrorStorage};
pub use primary::{
    AckGate, PrimaryNode, ReplConfig, ReplStatus, ReplicatedLog, ReplicatedLogOpener, StandbyPolicy,
    StandbyStatus,
};
pub use promote::{admin_promote, admin_promote_with, PromoteOptions, PromoteReport};
pub use reads::StandbySnapshot;
pub use replica_log::{ReplicaLog, ReplicaLogHandle, ReplicaLogOpener, ShippedRecord, TailReader};
pub use standby::{admin_status, seed_standby, Standby, StandbyConfig, StandbyDevices, StandbyPositions};
pub use state::{read_cluster, read_epoch, read_history, ClusterView, History, FIRST_EPOCH};

use crate::util::sync::MutexExt;

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

/// Reads a shared secret from a file (trailing whitespace removed); an empty secret is a
/// configuration error naming the file.
pub fn read_secret(path: &std::path::Path) -> crate::error::Result<Vec<u8>> {
    let b = std::fs::read(path).map_err(|e| crate::error::Error::Config {
        key: "secret-file".into(),
        detail: format!("cannot read {}: {e}", path.display()),
    })?;
    let n = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(0, |p| p + 1);
    if n == 0 {
        return Err(crate::error::Error::Config {
            key: "secret-file".into(),
            detail: format!("{} is empty", path.display()),
        });
    }
    Ok(b[..n].to_vec())
}

/// Opens (or creates) the database in directory `path` as a replicating primary: its log is
/// the usual file log (`<path>/wal`, duplexed when [`Options::log_mirror`](crate::Options::log_mirror)
/// names a mirror) — or, in a former standby's directory, its replica log — wrapped in a
/// [`ReplicatedLog`]; with `mirror`, data-file writes are also
/// mirrored synchronously ([`MirrorStorage`]). A standby is seeded from this directory while
/// the database is closed ([`seed_standby`]), or starts empty and takes a base backup from the
/// running primary (as does a standby that cannot follow this primary's log). Mirroring needs eager mode and
/// the fail policy (a page must never reach the standby before its log). The primary runs at
/// the larger of `config.epoch` and the epoch stored in `path` (a promoted standby's directory
/// keeps the epoch it was promoted to), and stores it before shipping anything. Returns the
/// database and the replicated log (for [`ReplicatedLog::status`]).
pub fn open_primary(
    path: &std::path::Path,
    options: crate::Options,
    config: ReplConfig,
    mirror: Option<MirrorConfig>,
) -> crate::error::Result<(crate::Database, std::sync::Arc<ReplicatedLog>)> {
    use crate::io::{DirStorage, FileOptions, Storage};
    use std::sync::Arc;
    let fo = FileOptions::default();
    let storage: Arc<dyn Storage> = Arc::new(DirStorage::new(path, fo)?);
    let file_log = crate::wal::FileLogOpener {
        copies: options.file_log_copies(path)?,
        options: options.wal_options.clone(),
    };
    // A former standby's directory keeps its replica log (the LSNs go on where the standby's
    // left off, so its own standbys can follow it) unless a file log was started since.
    let replica = path.join("standby");
    let log: Box<dyn crate::wal::LogOpener> =
        if replica.join("log.start").exists() && crate::wal::LogOpener::is_empty(&file_log)? {
            Box::new(ReplicaLogOpener(ReplicaLog::open(&replica, 0)?))
        } else {
            Box::new(file_log)
        };
    open_primary_with(storage, log, path, options, config, mirror)
}

/// [`open_primary`] over any storage and local log: `storage` holds the data files (for example
/// an emulated device profile over a directory, which standbys are seeded from), `log` opens
/// the local log (the duplexed file log on any two storages, or the fast log) that is wrapped
/// in a [`ReplicatedLog`], and `state_dir` keeps the primary's epoch. The rules of
/// [`open_primary`] apply: mirroring needs eager mode with the fail policy, and the primary
/// runs at the larger of `config.epoch` and the epoch stored in `state_dir`.
pub fn open_primary_with(
    storage: std::sync::Arc<dyn crate::io::Storage>,
    log: Box<dyn crate::wal::LogOpener>,
    state_dir: &std::path::Path,
    options: crate::Options,
    mut config: ReplConfig,
    mirror: Option<MirrorConfig>,
) -> crate::error::Result<(crate::Database, std::sync::Arc<ReplicatedLog>)> {
    use std::sync::{Arc, Mutex};
    if mirror.is_some()
        && (config.mode != ReplicationMode::Eager || !matches!(config.policy, StandbyPolicy::Fail { .. }))
    {
        // A mirrored page may only reach the standby after the log covering it did, or
        // promotion could find changes it can neither redo nor undo.
        return Err(crate::error::Error::Config {
            key: "repl.mode".into(),
            detail: "data-page mirroring needs eager mode with the fail policy".into(),
        });
    }
    config.epoch = config.epoch.max(state::read_epoch(state_dir)?);
    state::write_epoch(state_dir, config.epoch)?;
    let storage: Arc<dyn crate::io::Storage> = match mirror {
        Some(m) => Arc::new(MirrorStorage::new(storage, m)),
        None => storage,
    };
    let backup = storage.clone();
    let handle = Arc::new(Mutex::new(None));
    let opener = ReplicatedLogOpener {
        inner: log,
        config,
        handle: handle.clone(),
        state_dir: Some(state_dir.to_path_buf()),
        backup: Some(backup),
    };
    let db = crate::Database::open_with_log(storage, Some(Box::new(opener)), options)?;
    let log = handle.locked().take().ok_or_else(|| crate::error::Error::Config {
        key: "wal".into(),
        detail: "replication needs the write-ahead log".into(),
    })?;
    Ok((db, log))
}
