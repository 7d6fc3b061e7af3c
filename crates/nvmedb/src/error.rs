//! The engine's umbrella error type.
//!
//! Owns: `Error`, into which every layer's typed error folds. Invariant: I/O failures and
//! corruption are distinct variants (a checksum mismatch is never reported as an I/O error and
//! vice versa), and each variant names the file, offset, page, table or key at fault.

use crate::io::IoError;
use crate::txn::{LockKey, LockMode, TxnId};
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
    Replication(crate::repl::ReplError),
    /// The database this handle belongs to was closed (its last `Database` handle was closed
    /// or dropped): a `Table` or `Transaction` kept past that refuses work instead of
    /// acknowledging changes nobody will recover. Open the database again.
    Closed(String),
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

/// Result type of engine operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
