//! JSON result files: provenance, configuration and results in one document.
//!
//! Owns: `ResultFile` and its writer/reader, and the one pretty-JSON writer and reader every
//! JSON file of the lab goes through. Invariant: a JSON result file always carries the
//! `RunContext` (command, git commit, machine, time) next to the configuration it ran with.

use super::{ReportError, Result};
use crate::machine::RunContext;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The document written to `<name>.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResultFile<C, R> {
    /// Experiment name.
    pub experiment: String,
    /// What ran where.
    pub context: RunContext,
    /// The configuration the experiment ran with.
    pub config: C,
    /// The results.
    pub results: R,
}

/// Writes `{experiment, context, config, results}` as pretty JSON to `path`.
pub fn write_json<C: Serialize, R: Serialize>(
    path: impl AsRef<Path>,
    experiment: &str,
    context: &RunContext,
    config: &C,
    results: &R,
) -> Result<PathBuf> {
    #[derive(Serialize)]
    struct Borrowed<'a, C, R> {
        experiment: &'a str,
        context: &'a RunContext,
        config: &'a C,
        results: &'a R,
    }
    write_pretty(path, &Borrowed { experiment, context, config, results })
}

/// Writes `doc` as pretty JSON (and a final newline) to `path`: the one JSON writer of the lab.
pub fn write_pretty<T: Serialize>(path: impl AsRef<Path>, doc: &T) -> Result<PathBuf> {
    let path = path.as_ref().to_path_buf();
    let mut bytes =
        serde_json::to_vec_pretty(doc).map_err(|source| ReportError::Json { path: path.clone(), source })?;
    bytes.push(b'\n');
    let mut f = std::fs::File::create(&path).map_err(ReportError::io(&path, "create"))?;
    f.write_all(&bytes).map_err(ReportError::io(&path, "write"))?;
    Ok(path)
}

/// Reads a JSON document written by [`write_pretty`].
pub fn read_doc<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(ReportError::io(path, "read"))?;
    serde_json::from_slice(&bytes).map_err(|source| ReportError::Json { path: path.to_path_buf(), source })
}

/// Reads a result file written by [`write_json`].
pub fn read_json<C: DeserializeOwned, R: DeserializeOwned>(
    path: impl AsRef<Path>,
) -> Result<ResultFile<C, R>> {
    read_doc(path)
}
