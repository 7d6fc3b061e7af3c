//! The report layer's error type.
//!
//! Owns: `ReportError`. Invariant: every variant names the file (or font file) at fault, so a
//! failed run says what it could not write or read.

use std::fmt;
use std::path::PathBuf;

/// Why a report file could not be written or read.
#[derive(Debug)]
pub enum ReportError {
    /// A file-system operation failed.
    Io {
        /// File or directory concerned.
        path: PathBuf,
        /// What was being done ("create directory", "write", ...).
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// CSV encoding or decoding failed.
    Csv {
        /// File concerned.
        path: PathBuf,
        /// The CSV error.
        source: ::csv::Error,
    },
    /// JSON encoding or decoding failed.
    Json {
        /// File concerned.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// The font needed to draw text in plots could not be loaded.
    Font {
        /// Font file that was tried.
        path: PathBuf,
        /// What went wrong and how to fix it.
        detail: String,
    },
    /// Drawing a plot failed.
    Plot {
        /// Plot file concerned.
        path: PathBuf,
        /// The backend's error.
        detail: String,
    },
    /// The data given cannot be reported (empty chart, NaN coordinates...).
    InvalidData {
        /// File that would have been written.
        path: PathBuf,
        /// What is wrong with the data.
        detail: String,
    },
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Io { path, action, source } => {
                write!(f, "cannot {action} {}: {source}", path.display())
            }
            ReportError::Csv { path, source } => write!(f, "CSV error in {}: {source}", path.display()),
            ReportError::Json { path, source } => write!(f, "JSON error in {}: {source}", path.display()),
            ReportError::Font { path, detail } => write!(f, "font {}: {detail}", path.display()),
            ReportError::Plot { path, detail } => write!(f, "cannot draw {}: {detail}", path.display()),
            ReportError::InvalidData { path, detail } => {
                write!(f, "cannot report {}: {detail}", path.display())
            }
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Io { source, .. } => Some(source),
            ReportError::Csv { source, .. } => Some(source),
            ReportError::Json { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ReportError {
    pub(crate) fn io(path: impl Into<PathBuf>, action: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| ReportError::Io { path, action, source }
    }
}
