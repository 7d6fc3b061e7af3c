//! CSV files of result rows.
//!
//! Owns: `CsvWriter` (rows from any `Serialize` struct, header from its field names) and the
//! matching reader. Invariant: the writer flushes on `finish`, and errors name the file.

use super::{ReportError, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Writes rows (structs deriving `Serialize`, flat fields only) to a CSV file with a header.
pub struct CsvWriter {
    path: PathBuf,
    inner: ::csv::Writer<File>,
}

impl CsvWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path).map_err(ReportError::io(&path, "create"))?;
        Ok(Self { inner: ::csv::Writer::from_writer(file), path })
    }

    /// Appends one row. The first row also writes the header.
    pub fn write<T: Serialize>(&mut self, row: &T) -> Result<()> {
        self.inner.serialize(row).map_err(|source| ReportError::Csv { path: self.path.clone(), source })
    }

    /// Appends one row of raw string fields (for tables without a struct). The caller writes the
    /// header the same way first.
    pub fn write_record<I, S>(&mut self, fields: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<[u8]>,
    {
        self.inner.write_record(fields).map_err(|source| ReportError::Csv { path: self.path.clone(), source })
    }

    /// Flushes and closes the file; returns its path.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.inner.flush().map_err(ReportError::io(&self.path, "flush"))?;
        Ok(self.path)
    }
}

/// Writes all `rows` to `path` with a header row.
pub fn write_csv<T: Serialize>(path: impl AsRef<Path>, rows: &[T]) -> Result<PathBuf> {
    let mut w = CsvWriter::create(path)?;
    for r in rows {
        w.write(r)?;
    }
    w.finish()
}

/// Reads every row of a CSV file with a header into `T`.
pub fn read_csv<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<Vec<T>> {
    let path = path.as_ref();
    let mut r = ::csv::Reader::from_path(path)
        .map_err(|source| ReportError::Csv { path: path.to_path_buf(), source })?;
    r.deserialize()
        .collect::<Result<Vec<T>, _>>()
        .map_err(|source| ReportError::Csv { path: path.to_path_buf(), source })
}
