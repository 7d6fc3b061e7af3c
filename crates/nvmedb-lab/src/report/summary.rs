//! The machine-readable summary of one run (`summary.json`): its headline figures, each with the
//! reference it is compared with, and the files the run wrote.
//!
//! Owns: [`Figure`], [`Reference`], [`SummaryFile`] and their writer/reader. Invariants: a
//! summary carries the run's [`RunContext`]; figure names are stable keys (a whole-lab report
//! finds the same figure in every run by its name); units are spelled out.

use super::json::{read_doc, write_pretty};
use super::Result;
use crate::machine::RunContext;
use crate::measure::Spread;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a figure is compared with in the same run (the device's limit, a peer, a target).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// What the reference is ("fio 24 KiB QD32 on the same file").
    pub label: String,
    /// Its value, in the figure's unit.
    pub value: f64,
}

/// One headline number of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Stable key, `/`-separated from general to particular (`select/optane/relative_at_1pct`).
    pub name: String,
    /// What a person reads ("SELECT at 1 % buffer on optane (EMULATED), % of 100 %").
    pub label: String,
    /// The value (the median when repeated).
    pub value: f64,
    /// Unit (`tps`, `%`, `µs`, `IOPS`, `commits/s`).
    pub unit: String,
    /// min / median / max over repetitions, when repeated.
    #[serde(default)]
    pub spread: Option<Spread>,
    /// What it is compared with.
    #[serde(default)]
    pub reference: Option<Reference>,
}

impl Figure {
    /// A figure without spread or reference.
    pub fn new(
        name: impl Into<String>,
        label: impl Into<String>,
        value: f64,
        unit: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            label: label.into(),
            value,
            unit: unit.into(),
            spread: None,
            reference: None,
        }
    }

    /// A repeated measurement: its median is the value.
    pub fn repeated(
        name: impl Into<String>,
        label: impl Into<String>,
        spread: Spread,
        unit: impl Into<String>,
    ) -> Self {
        Self { spread: Some(spread), ..Self::new(name, label, spread.median, unit) }
    }

    /// Adds what the figure is compared with.
    pub fn against(mut self, label: impl Into<String>, value: f64) -> Self {
        self.reference = Some(Reference { label: label.into(), value });
        self
    }
}

/// The document written to `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryFile {
    /// Experiment name (the results directory's parent).
    pub experiment: String,
    /// What the experiment measures (one line).
    pub title: String,
    /// What ran where.
    pub context: RunContext,
    /// The headline figures.
    pub figures: Vec<Figure>,
    /// Every file of the run's directory (sorted), e.g. to show its plots.
    pub files: Vec<String>,
}

/// Writes `summary` as pretty JSON to `path`.
pub fn write_summary(path: impl AsRef<Path>, summary: &SummaryFile) -> Result<PathBuf> {
    write_pretty(path, summary)
}

/// Reads a summary written by [`write_summary`].
pub fn read_summary(path: impl AsRef<Path>) -> Result<SummaryFile> {
    read_doc(path)
}
