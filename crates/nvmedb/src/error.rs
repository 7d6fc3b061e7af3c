//! The engine's umbrella error type.
//!
//! Owns: `Error`, into which every layer's typed error folds. Invariant: I/O failures and
//! corruption are distinct variants (a checksum mismatch is never reported as an I/O error and
//! vice versa), and each variant names the file, offset, page, table or key at fault.

use crate::io::IoError;
use std::fmt;

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
