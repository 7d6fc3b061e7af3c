//! The engine's umbrella error type.
//!
//! Owns: `Error`, into which every layer's typed error folds, and [`ReplError`], the
//! replication layer's (re-exported as `repl::ReplError`). Invariants: I/O failures and
//! corruption are distinct variants (a checksum mismatch is never reported as an I/O error and
//! vice versa), and each variant names the file, offset, page, table or key at fault. This
//! module imports only `io` and the shared vocabulary in [`crate::ids`], so every layer above
//! `io` can return it without an import cycle (`tests/layers.rs` checks the order).

use crate::ids::{LockKey, LockMode, ReplicationMode, TxnId};
use crate::io::IoError;
use std::fmt;
use std::time::Duration;

/// Any error the engine returns.
#[derive(Debug)]
pub enum Error {
    /// The device failed an operation.
    Io(IoError),
    /// Stored bytes are not what was written: bad checksum, wrong page id, impossible header.
    Corruption {
        /// File (or device) holding the bad bytes.
        file: String,
        /// Byte offset of the bad structure in that file.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
    /// A configuration value is invalid; `key` names the option.
    Config {
        /// Option name, as a user would write it.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The caller passed something the engine cannot accept (too-large key, wrong schema...).
    InvalidArgument(String),
    /// A named object (table, key, database) does not exist.
    NotFound(String),
    /// The object already exists (table name, unique key).
    AlreadyExists(String),
    /// A bounded resource ran out (all buffer frames pinned, a queue full...).
    ResourceExhausted(String),
    /// The handle failed earlier with an I/O error and refuses further work until reopened.
    Poisoned(String),
    /// The transaction was chosen as the victim of a lock deadlock. Retryable: abort the
    /// transaction (its other locks are still held until then) and run it again.
    Deadlock {
        /// The victim: the transaction that must abort.
        txn: TxnId,
        /// The lock it was waiting for when chosen.
        key: LockKey,
        /// The wait-for cycle, starting at the transaction that detected it.
        cycle: Vec<TxnId>,
    },
    /// A lock wait exceeded the lock timeout (the safety net behind deadlock detection).
    /// Retryable: abort the transaction and run it again.
    LockTimeout {
        /// The transaction that gave up.
        txn: TxnId,
        /// The lock it was waiting for.
        key: LockKey,
        /// The mode it asked for.
        mode: LockMode,
        /// How long it waited.
        waited: Duration,
    },
    /// Replication failed: a standby link, the handshake, fencing, or a commit that the
    /// standbys did not confirm in time.
    Replication(ReplError),
    /// The database this handle belongs to was closed (its last `Database` handle was closed
    /// or dropped): a `Table` or `Transaction` kept past that refuses work instead of
    /// acknowledging changes nobody will recover. Open the database again.
    Closed(String),
    /// The database was opened with [`Options::read_only`](crate::Options::read_only): a change
    /// (insert, update, delete, DDL, a bulk load) is refused; the message names the database and
    /// the operation.
    ReadOnly(String),
}

impl Error {
    /// True when the operation failed only because of concurrency (deadlock victim, lock
    /// timeout): the caller should abort the transaction and retry it. False for every
    /// error that a retry would not cure (I/O, corruption, bad arguments...).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Deadlock { .. } | Error::LockTimeout { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Corruption { file, offset, detail } => {
                write!(f, "corruption in {file} at offset {offset}: {detail}")
            }
            Error::Config { key, detail } => write!(f, "invalid configuration `{key}`: {detail}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::NotFound(m) => write!(f, "not found: {m}"),
            Error::AlreadyExists(m) => write!(f, "already exists: {m}"),
            Error::ResourceExhausted(m) => write!(f, "resource exhausted: {m}"),
            Error::Poisoned(m) => write!(f, "handle poisoned by an earlier failure: {m}"),
            Error::Deadlock { txn, key, cycle } => {
                write!(f, "deadlock: transaction {txn} chosen as victim waiting for {key} (cycle {cycle:?})")
            }
            Error::LockTimeout { txn, key, mode, waited } => {
                write!(f, "lock timeout: transaction {txn} waited {waited:?} for {mode:?} lock on {key}")
            }
            Error::Replication(e) => write!(f, "replication: {e}"),
            Error::Closed(m) => write!(f, "closed: {m}"),
            Error::ReadOnly(m) => write!(f, "read-only: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<IoError> for Error {
    fn from(e: IoError) -> Self {
        Error::Io(e)
    }
}

/// What went wrong in replication. Every variant names the peer (address) at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplError {
    /// A frame failed its checksum, had an impossible length, or an unknown type. The
    /// connection is dropped.
    Corrupt {
        /// Peer address.
        peer: String,
        /// What was wrong.
        detail: String,
    },
    /// The handshake failed: the peer does not know the shared secret (or we do not).
    AuthFailed {
        /// Peer address.
        peer: String,
        /// What was wrong.
        detail: String,
    },
    /// The peer has a newer epoch: this node was demoted and may not ship or acknowledge.
    Fenced {
        /// Peer address.
        peer: String,
        /// This node's epoch.
        our_epoch: u64,
        /// The peer's epoch.
        their_epoch: u64,
    },
    /// The logs of primary and standby cannot be joined (standby behind the primary's oldest
    /// log, or holding records the primary does not have): reseed the standby.
    Diverged {
        /// Peer address.
        peer: String,
        /// What was found.
        detail: String,
    },
    /// The peer broke the protocol (unexpected frame).
    Protocol {
        /// Peer address.
        peer: String,
        /// What was unexpected.
        detail: String,
    },
    /// The connection failed (refused, reset, closed).
    Disconnected {
        /// Peer address.
        peer: String,
        /// The I/O error.
        detail: String,
    },
    /// Promotion could not fence enough of the old primary's synchronous set (or could not take
    /// the records a fenced standby holds beyond the promoted one), so the old primary might
    /// still complete commits the new one would not have.
    NotFenced {
        /// Which standbys could not be fenced or read, and why.
        detail: String,
    },
    /// This primary may not acknowledge: its leadership lease (held in the coordination store)
    /// was not renewed in time, so another node may be taking over.
    LeaseLost {
        /// Since when, and why.
        detail: String,
    },
    /// A commit waited for the standbys longer than the policy allows.
    Timeout {
        /// The commit's LSN.
        lsn: u64,
        /// The mode that was not satisfied.
        mode: ReplicationMode,
        /// How long it waited.
        waited: Duration,
        /// Standby positions when it gave up.
        shadows: Vec<u64>,
    },
}

impl ReplError {
    pub(crate) fn io(peer: &str, what: &str, e: std::io::Error) -> Self {
        ReplError::Disconnected { peer: peer.into(), detail: format!("{what}: {e}") }
    }
}

impl fmt::Display for ReplError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplError::Corrupt { peer, detail } => write!(f, "corrupt replication frame from {peer}: {detail}"),
            ReplError::AuthFailed { peer, detail } => {
                write!(f, "replication authentication with {peer} failed: {detail}")
            }
            ReplError::Fenced { peer, our_epoch, their_epoch } => write!(
                f,
                "fenced: {peer} is at epoch {their_epoch}, this node at epoch {our_epoch} (demoted; it may not ship or acknowledge)"
            ),
            ReplError::Diverged { peer, detail } => write!(f, "logs diverged with {peer}: {detail}"),
            ReplError::Protocol { peer, detail } => write!(f, "replication protocol error with {peer}: {detail}"),
            ReplError::Disconnected { peer, detail } => write!(f, "replication link to {peer} down: {detail}"),
            ReplError::LeaseLost { detail } => write!(f, "not acknowledging: leadership lease lost: {detail}"),
            ReplError::NotFenced { detail } => write!(
                f,
                "not promoted: the old primary's synchronous set could not be fenced: {detail} (bring those standbys up, or promote with force once the old primary is known to be down)"
            ),
            ReplError::Timeout { lsn, mode, waited, shadows } => write!(
                f,
                "commit at LSN {lsn} not replicated in {mode:?} mode within {waited:?} (standby positions {shadows:?})"
            ),
        }
    }
}

impl std::error::Error for ReplError {}

impl From<ReplError> for Error {
    fn from(e: ReplError) -> Self {
        Error::Replication(e)
    }
}

/// Result type of engine operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
