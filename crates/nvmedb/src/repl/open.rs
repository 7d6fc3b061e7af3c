//! Opening a replicating primary: the database over its storage with its local log wrapped in
//! a [`ReplicatedLog`], optionally with data-page mirroring; and reading the shared secret.
//!
//! Owns: [`open_primary`], [`open_primary_with`], [`read_secret`]. Invariants: mirroring runs
//! only in eager mode with the fail policy (a mirrored page must never reach the standby before
//! its log); the primary's epoch is stored in its directory before anything is shipped.

use super::disk::{DirDisk, Disk};
use super::mirror::{MirrorConfig, MirrorStorage};
use super::primary::{ReplConfig, ReplicatedLog, ReplicatedLogOpener, StandbyPolicy};
use super::replica_log::{ReplicaLog, ReplicaLogOpener};
use super::state;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::util::sync::MutexExt;
use crate::wal::{FileLogOpener, LogOpener};
use crate::xlog::ReplicationMode;
use crate::{Database, Options};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Reads a shared secret from a file (trailing whitespace removed); an empty secret is a
/// configuration error naming the file.
pub fn read_secret(path: &Path) -> Result<Vec<u8>> {
    let b = std::fs::read(path).map_err(|e| Error::Config {
        key: "secret-file".into(),
        detail: format!("cannot read {}: {e}", path.display()),
    })?;
    let n = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(0, |p| p + 1);
    if n == 0 {
        return Err(Error::Config {
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
/// the database is closed ([`seed_standby`](super::seed_standby)), or starts empty and takes a base backup from the
/// running primary (as does a standby that cannot follow this primary's log). Mirroring needs eager mode and
/// the fail policy (a page must never reach the standby before its log). The primary runs at
/// the larger of `config.epoch` and the epoch stored in `path` (a promoted standby's directory
/// keeps the epoch it was promoted to), and stores it before shipping anything. Returns the
/// database and the replicated log (for [`ReplicatedLog::status`]).
pub fn open_primary(
    path: &Path,
    options: Options,
    config: ReplConfig,
    mirror: Option<MirrorConfig>,
) -> Result<(Database, Arc<ReplicatedLog>)> {
    open_primary_on(&DirDisk::new(path), options, config, mirror)
}

/// [`open_primary`] on a node's disk (a directory, or the simulator's disk of a node).
pub fn open_primary_on(
    disk: &dyn Disk,
    options: Options,
    config: ReplConfig,
    mirror: Option<MirrorConfig>,
) -> Result<(Database, Arc<ReplicatedLog>)> {
    let storage = disk.data()?;
    let file_log = FileLogOpener { copies: disk.file_log(&options)?, options: options.wal_options.clone() };
    // A former standby's directory keeps its replica log (the LSNs go on where the standby's
    // left off, so its own standbys can follow it) unless a file log was started since.
    let replica = disk.replica()?;
    let log: Box<dyn LogOpener> = if ReplicaLog::exists(replica.as_ref()) && file_log.is_empty()? {
        Box::new(ReplicaLogOpener(ReplicaLog::open(replica, 0)?))
    } else {
        Box::new(file_log)
    };
    open_primary_inner(storage, log, disk.state()?, options, config, mirror)
}

/// [`open_primary`] over any storage and local log: `storage` holds the data files (for example
/// an emulated device profile over a directory, which standbys are seeded from), `log` opens
/// the local log (the duplexed file log on any two storages, or the fast log) that is wrapped
/// in a [`ReplicatedLog`], and `state_dir` keeps the primary's epoch (in `state_dir/repl/`). The rules of
/// [`open_primary`] apply: mirroring needs eager mode with the fail policy, and the primary
/// runs at the larger of `config.epoch` and the epoch stored in `state_dir`.
pub fn open_primary_with(
    storage: Arc<dyn Storage>,
    log: Box<dyn LogOpener>,
    state_dir: &Path,
    options: Options,
    config: ReplConfig,
    mirror: Option<MirrorConfig>,
) -> Result<(Database, Arc<ReplicatedLog>)> {
    open_primary_inner(storage, log, DirDisk::new(state_dir).state()?, options, config, mirror)
}

fn open_primary_inner(
    storage: Arc<dyn Storage>,
    log: Box<dyn LogOpener>,
    state: Arc<dyn Storage>,
    options: Options,
    mut config: ReplConfig,
    mirror: Option<MirrorConfig>,
) -> Result<(Database, Arc<ReplicatedLog>)> {
    if mirror.is_some()
        && (config.mode != ReplicationMode::Eager || !matches!(config.policy, StandbyPolicy::Fail { .. }))
    {
        // A mirrored page may only reach the standby after the log covering it did, or
        // promotion could find changes it can neither redo nor undo.
        return Err(Error::Config {
            key: "repl.mode".into(),
            detail: "data-page mirroring needs eager mode with the fail policy".into(),
        });
    }
    config.epoch = config.epoch.max(state::epoch_in(state.as_ref())?);
    state::write_epoch(state.as_ref(), config.epoch)?;
    let storage: Arc<dyn Storage> = match mirror {
        Some(m) => Arc::new(MirrorStorage::new_in(storage, m, config.env.clone())),
        None => storage,
    };
    let backup = storage.clone();
    let handle = Arc::new(Mutex::new(None));
    let opener = ReplicatedLogOpener {
        inner: log,
        config,
        handle: handle.clone(),
        state: Some(state),
        backup: Some(backup),
    };
    let db = Database::open_with_log(storage, Some(Box::new(opener)), options)?;
    let log = handle.locked().take().ok_or_else(|| Error::Config {
        key: "wal".into(),
        detail: "replication needs the write-ahead log".into(),
    })?;
    Ok((db, log))
}
