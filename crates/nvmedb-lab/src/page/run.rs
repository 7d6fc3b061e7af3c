//! One finished run as the page sees it: its summary, its results file, its plots and where it
//! came from.
//!
//! Owns: [`Run`]. Invariant: every value an extractor shows comes through here, from the run's
//! `summary.json` (figures by their stable names) or `results.json` (typed results); nothing is
//! cached between builds of the page.

use crate::error::Result;
use crate::machine::RunContext;
use crate::report::{read_json, utc_timestamp, Figure, LatestRun, ResultFile, SummaryFile};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// The latest run of one experiment.
#[derive(Debug, Clone)]
pub struct Run {
    /// The run's directory.
    pub dir: PathBuf,
    /// Its `summary.json`.
    pub summary: SummaryFile,
}

impl From<LatestRun> for Run {
    fn from(r: LatestRun) -> Self {
        Self { dir: r.dir, summary: r.summary }
    }
}

impl Run {
    /// The experiment's name.
    pub fn experiment(&self) -> &str {
        &self.summary.experiment
    }

    /// What ran where.
    pub fn context(&self) -> &RunContext {
        &self.summary.context
    }

    /// The headline figure called `name` in `summary.json`.
    pub fn figure(&self, name: &str) -> Option<&Figure> {
        self.summary.figures.iter().find(|f| f.name == name)
    }

    /// The configuration and results in `results.json`, as the experiment's types; an error
    /// names the file (a run written by older code whose results no longer parse).
    pub fn results<C: DeserializeOwned, R: DeserializeOwned>(&self) -> Result<ResultFile<C, R>> {
        Ok(read_json(self.dir.join("results.json"))?)
    }

    /// The SVG file of plot `stem`, if the run wrote it.
    pub fn plot(&self, stem: &str) -> Option<PathBuf> {
        let name = format!("{stem}.svg");
        self.summary.files.contains(&name).then(|| self.dir.join(name))
    }

    /// Those of `stems` whose SVG plot the run wrote, in the order given.
    pub fn plots_present(&self, stems: &[&str]) -> Vec<String> {
        stems.iter().filter(|s| self.plot(s).is_some()).map(|s| s.to_string()).collect()
    }

    /// The stems of every SVG plot of the run whose name starts with `prefix`, sorted.
    pub fn plots_starting(&self, prefix: &str) -> Vec<String> {
        self.summary
            .files
            .iter()
            .filter(|f| f.starts_with(prefix))
            .filter_map(|f| f.strip_suffix(".svg"))
            .map(str::to_string)
            .collect()
    }

    /// When the run started, `YYYY-MM-DD HH:MM:SS UTC`.
    pub fn date(&self) -> String {
        pretty_utc(self.context().started_unix_s)
    }

    /// The run's directory relative to `root` when inside it.
    pub fn dir_under<'a>(&'a self, root: &Path) -> &'a Path {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        self.dir.strip_prefix(&root).unwrap_or(&self.dir)
    }
}

/// `unix_s` as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn pretty_utc(unix_s: u64) -> String {
    let t = utc_timestamp(unix_s); // YYYYMMDDTHHMMSSZ
    format!("{}-{}-{} {}:{}:{} UTC", &t[0..4], &t[4..6], &t[6..8], &t[9..11], &t[11..13], &t[13..15])
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_read_well() {
        assert_eq!(super::pretty_utc(951_782_400), "2000-02-29 00:00:00 UTC");
    }
}
