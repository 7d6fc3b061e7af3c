//! The lab's error type.
//!
//! Owns: [`LabError`], into which every failure of an experiment folds (a bad configuration
//! value, an engine call, a file, a result file, a worker thread, a missing row, an external
//! program). Invariant: every variant names what failed — the configuration field or flag, what
//! the experiment was doing when the engine failed, the file and the action, the program — so a
//! failed run says where to look.

use crate::report::ReportError;
use std::fmt;
use std::path::PathBuf;

/// Why an experiment failed.
#[derive(Debug)]
pub enum LabError {
    /// A configuration value is invalid.
    Config {
        /// The field or flag as the user wrote it (`--bs`, `buffer_pcts`).
        field: String,
        /// What is wrong with it and what is expected.
        detail: String,
    },
    /// The engine failed while the experiment was doing `context`.
    Engine {
        /// What the experiment was doing ("opening the database", "loading rows").
        context: String,
        /// The engine's error.
        source: nvmedb::Error,
    },
    /// A file-system operation failed.
    Io {
        /// File or directory concerned.
        path: PathBuf,
        /// What was being done ("create directory", "remove").
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A result file could not be written or read.
    Report(ReportError),
    /// A row the workload needs is missing.
    MissingRow {
        /// Table name.
        table: String,
        /// The key, as text.
        key: String,
    },
    /// A measurement contradicts the data it ran on (a scan saw the wrong number of rows...).
    Inconsistent {
        /// What was checked.
        what: String,
        /// What was found instead.
        detail: String,
    },
    /// A worker thread panicked.
    WorkerPanicked {
        /// What the thread was doing.
        what: String,
    },
    /// An external program the experiment runs (a peer server, its client) failed or is missing.
    Tool {
        /// The program and what it was asked to do ("pgbench -i -s 10 against PostgreSQL").
        tool: String,
        /// What went wrong: the exit status and the end of its output, or how to install it.
        detail: String,
    },
    /// A peer engine (RocksDB, LMDB, SQLite) failed while the experiment was doing `context`.
    Peer {
        /// The engine.
        engine: &'static str,
        /// What the experiment was doing ("loading rows", "a point lookup").
        context: String,
        /// The engine's error message.
        detail: String,
    },
    /// A part of an experiment failed; `part` names it ("iobench on optane", "fig9 file log").
    Part {
        /// The part.
        part: String,
        /// The cause.
        source: Box<LabError>,
    },
}

impl LabError {
    /// A bad configuration value: `field` names it as the user wrote it.
    pub fn config(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Config { field: field.into(), detail: detail.into() }
    }

    /// A closure wrapping an engine error (or anything that folds into one, like an
    /// [`nvmedb::io::IoError`]) with what the experiment was doing.
    pub fn engine<E: Into<nvmedb::Error>>(context: impl Into<String>) -> impl FnOnce(E) -> Self {
        let context = context.into();
        move |e| Self::Engine { context, source: e.into() }
    }

    /// A closure wrapping a peer engine's error with the engine and what the experiment was
    /// doing.
    pub fn peer<E: std::fmt::Display>(
        engine: &'static str,
        context: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        let context = context.into();
        move |e| Self::Peer { engine, context, detail: e.to_string() }
    }

    /// A closure wrapping an OS error with the path and the action.
    pub fn io(path: impl Into<PathBuf>, action: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, action, source }
    }

    /// An external program failed: `tool` names it and what it was doing.
    pub fn tool(tool: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Tool { tool: tool.into(), detail: detail.into() }
    }

    /// A closure wrapping an error of a named part of the experiment.
    pub fn in_part(part: impl Into<String>) -> impl FnOnce(LabError) -> Self {
        let part = part.into();
        move |e| Self::Part { part, source: Box::new(e) }
    }

    /// The engine error at the root of this one, if any (to ask, e.g., whether it is retryable).
    pub fn engine_error(&self) -> Option<&nvmedb::Error> {
        match self {
            Self::Engine { source, .. } => Some(source),
            Self::Part { source, .. } => source.engine_error(),
            _ => None,
        }
    }
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config { field, detail } => write!(f, "{field}: {detail}"),
            Self::Engine { context, source } => write!(f, "{context}: {source}"),
            Self::Io { path, action, source } => write!(f, "cannot {action} {}: {source}", path.display()),
            Self::Report(e) => write!(f, "{e}"),
            Self::MissingRow { table, key } => write!(f, "table `{table}` has no row with key {key}"),
            Self::Inconsistent { what, detail } => write!(f, "{what}: {detail}"),
            Self::WorkerPanicked { what } => write!(f, "a worker thread panicked while {what}"),
            Self::Tool { tool, detail } => write!(f, "{tool}: {detail}"),
            Self::Peer { engine, context, detail } => write!(f, "{engine}, {context}: {detail}"),
            Self::Part { part, source } => write!(f, "{part}: {source}"),
        }
    }
}

impl std::error::Error for LabError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Engine { source, .. } => Some(source),
            Self::Io { source, .. } => Some(source),
            Self::Report(e) => Some(e),
            Self::Part { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<ReportError> for LabError {
    fn from(e: ReportError) -> Self {
        Self::Report(e)
    }
}

/// Result type of the lab.
pub type Result<T, E = LabError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_failed() {
        let e = LabError::config("--bs", "must be a multiple of 4096");
        assert_eq!(e.to_string(), "--bs: must be a multiple of 4096");
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = LabError::in_part("fig9 file log")(LabError::io("/x/y", "remove")(io));
        assert_eq!(e.to_string(), "fig9 file log: cannot remove /x/y: gone");
        let e = LabError::engine("opening the database")(nvmedb::Error::NotFound("table `t`".into()));
        assert!(e.to_string().starts_with("opening the database: "), "{e}");
        assert!(LabError::in_part("p")(e).engine_error().is_some());
    }
}
