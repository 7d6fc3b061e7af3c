//! The CLI's error type.
//!
//! Owns: [`CliError`]. Invariant: every variant names what failed — the flag and what it
//! expects, the directory or table, the engine operation — so `main` prints it as it is.

use nvmedb_lab::LabError;
use std::fmt;
use std::path::PathBuf;

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// A flag's value is not what it expects.
    Flag {
        /// The flag (`--bs`).
        flag: &'static str,
        /// What is wrong and what is expected.
        detail: String,
    },
    /// An experiment failed.
    Lab(LabError),
    /// The engine failed while the command was doing `context`.
    Engine {
        /// What the command was doing.
        context: String,
        /// The engine's error.
        source: nvmedb::Error,
    },
    /// A directory is not a database.
    NotADatabase {
        /// The directory.
        dir: PathBuf,
    },
    /// A database has no such table.
    NoSuchTable {
        /// The table asked for.
        table: String,
        /// The database directory.
        dir: PathBuf,
    },
    /// The PostgreSQL server over `data` failed.
    Server {
        /// The database directory.
        data: PathBuf,
        /// The server's error.
        source: Box<nvmedb_sql::ServeError>,
    },
}

impl CliError {
    /// A bad value of `flag`.
    pub fn flag(flag: &'static str, detail: impl Into<String>) -> Self {
        Self::Flag { flag, detail: detail.into() }
    }

    /// A closure wrapping an engine error with what the command was doing.
    pub fn engine<E: Into<nvmedb::Error>>(context: impl Into<String>) -> impl FnOnce(E) -> Self {
        let context = context.into();
        move |e| Self::Engine { context, source: e.into() }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag { flag, detail } => write!(f, "{flag}: {detail}"),
            Self::Lab(e) => write!(f, "{e}"),
            Self::Engine { context, source } => write!(f, "{context}: {source}"),
            Self::NotADatabase { dir } => {
                write!(f, "{} is not an nvmedb database (no {})", dir.display(), nvmedb::db::CATALOG_FILE)
            }
            Self::NoSuchTable { table, dir } => write!(f, "no table `{table}` in {}", dir.display()),
            Self::Server { data, source } => write!(f, "serving {}: {source}", data.display()),
        }
    }
}

impl std::error::Error for CliError {}

impl From<LabError> for CliError {
    fn from(e: LabError) -> Self {
        Self::Lab(e)
    }
}
