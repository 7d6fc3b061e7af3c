//! The whole-lab page (`nvmedb lab report`): one self-contained HTML file that sets every seed
//! figure the lab reproduces beside the paper's, from the latest run of every experiment under a
//! results root.
//!
//! Owns: [`build`] and [`write`], what a section found ([`Finding`], [`Status`]) and the summary
//! rows ([`PageRow`]). Parts: `registry` (one [`Section`] per seed figure or table: the paper's
//! numbers, the experiment, the command, the extractor), `run` ([`Run`]: a run's summary,
//! results and plots), `extract/` (one file of extractors per experiment), `render` (the HTML).
//!
//! Invariants: every number of ours on the page is read from a run's `summary.json` or
//! `results.json` when the page is built (the paper's numbers are the registry's, quoted from the
//! seeds); a figure whose experiment has no run is a "not run" row, and a run whose results do
//! not parse is shown with the error, never dropped; experiments with a run but no section are
//! listed with their headline figures; plots are inline SVG and the page loads nothing.

mod extract;
mod registry;
mod render;
mod run;

pub use extract::{num, pct};
pub use registry::{Extractor, Section, SECTIONS};
pub use run::{pretty_utc, Run};

use crate::error::Result;
use crate::report::{latest_runs, write_html};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The page's file name inside the results root when `--out` is not given.
pub const DEFAULT_FILE: &str = "lab-report.html";

/// How a seed figure stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Our run shows the paper's number or shape.
    Reproduced,
    /// Our run differs; the reason, from what the run measured (device ceiling, cores,
    /// emulation, the model's inputs).
    Differs(String),
    /// No run of the experiment under the results root (or the run skipped this part).
    NotRun(String),
    /// The run's result files could not be read (the error, naming the file).
    Unreadable(String),
    /// A run exists but nothing compares it with the paper yet: its figures are shown as they
    /// are.
    Shown,
}

impl Status {
    /// The word in the summary table.
    pub fn label(&self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::Differs(_) => "differs",
            Status::NotRun(_) => "not yet run",
            Status::Unreadable(_) => "unreadable",
            Status::Shown => "shown, not compared",
        }
    }

    /// The reason or detail, if any.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Status::Differs(s) | Status::NotRun(s) | Status::Unreadable(s) => Some(s),
            Status::Reproduced | Status::Shown => None,
        }
    }

    /// The CSS class of the status cell.
    pub fn class(&self) -> &'static str {
        match self {
            Status::Reproduced => "ok",
            Status::Differs(_) => "differs",
            Status::NotRun(_) => "notrun",
            Status::Unreadable(_) => "bad",
            Status::Shown => "shown",
        }
    }
}

/// What an extractor read from a run for one seed figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Our number(s), short, for the summary table.
    pub ours: String,
    /// The ratio to the paper's number or the shape comparison, in one sentence.
    pub comparison: String,
    /// Reproduced or differs (with the measured reason).
    pub status: Status,
    /// The breakdown: (what, value) rows, every value read from the run.
    pub details: Vec<(String, String)>,
    /// Devices the numbers were measured on, emulated ones labelled with the latency they
    /// achieved.
    pub devices: Vec<String>,
    /// Stems of the run's SVG plots to embed.
    pub plots: Vec<String>,
}

impl Finding {
    /// A finding with no breakdown, devices or plots yet.
    pub fn new(ours: impl Into<String>, comparison: impl Into<String>, status: Status) -> Self {
        Self {
            ours: ours.into(),
            comparison: comparison.into(),
            status,
            details: Vec::new(),
            devices: Vec::new(),
            plots: Vec::new(),
        }
    }
}

/// One row of the summary table (and one section of the page).
#[derive(Debug, Clone, PartialEq)]
pub struct PageRow {
    /// The section's anchor.
    pub id: String,
    /// "Seed 000 Fig. 5".
    pub figure: String,
    /// The paper's number(s).
    pub paper: String,
    /// Ours, or "—" when not run.
    pub ours: String,
    /// How it stands.
    pub status: Status,
    /// The experiment that reproduces it.
    pub experiment: String,
}

/// A built page: its rows and its HTML.
#[derive(Debug, Clone)]
pub struct LabPage {
    /// The summary table, one row per seed figure, in the registry's order.
    pub rows: Vec<PageRow>,
    /// Experiments with a run under the root that no section covers.
    pub other_runs: Vec<String>,
    /// The self-contained HTML document.
    pub html: String,
}

/// A section with what its run showed (or why it shows nothing).
#[derive(Debug)]
pub(crate) struct Filled<'a> {
    pub section: &'static Section,
    pub run: Option<&'a Run>,
    pub finding: Finding,
}

/// Builds the page from the latest run of every experiment under `root` (an empty or missing
/// root gives a page of "not run" rows).
pub fn build(root: &Path) -> Result<LabPage> {
    let runs: BTreeMap<String, Run> =
        latest_runs(root)?.into_iter().map(|r| (r.summary.experiment.clone(), Run::from(r))).collect();
    let filled: Vec<Filled> = SECTIONS.iter().map(|s| fill(s, runs.get(s.experiment))).collect();
    let other: Vec<&Run> =
        runs.values().filter(|r| !SECTIONS.iter().any(|s| s.experiment == r.experiment())).collect();
    let rows = filled
        .iter()
        .map(|f| PageRow {
            id: f.section.id.to_string(),
            figure: f.section.figure_name(),
            paper: f.section.paper.to_string(),
            ours: f.finding.ours.clone(),
            status: f.finding.status.clone(),
            experiment: f.section.experiment.to_string(),
        })
        .collect();
    let html = render::page(root, &filled, &other)?;
    Ok(LabPage { rows, other_runs: other.iter().map(|r| r.experiment().to_string()).collect(), html })
}

/// Builds the page from `root` and writes it to `out` (default `<root>/lab-report.html`).
/// Returns the page and the file written.
pub fn write(root: &Path, out: Option<&Path>) -> Result<(LabPage, PathBuf)> {
    let page = build(root)?;
    let path = out.map_or_else(|| root.join(DEFAULT_FILE), Path::to_path_buf);
    let path = write_html(&path, &page.html)?;
    Ok((page, path))
}

fn fill<'a>(section: &'static Section, run: Option<&'a Run>) -> Filled<'a> {
    let finding = match (run, section.extract) {
        (None, _) => Finding::new(
            "—",
            "",
            Status::NotRun(format!("no run of `{}` under the results root", section.experiment)),
        ),
        (Some(r), Some(extract)) => {
            extract(r).unwrap_or_else(|e| Finding::new("—", "", Status::Unreadable(e.to_string())))
        }
        (Some(r), None) => extract::generic(r),
    };
    Filled { section, run, finding }
}
