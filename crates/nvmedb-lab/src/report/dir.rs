//! The results directory of one run: `<root>/<experiment>/<UTC timestamp>/`, and finding the
//! latest run of every experiment (`<root>/<experiment>/latest`).
//!
//! Owns: creating that directory, naming files inside it, the `latest` link and
//! [`latest_runs`]. Invariants: a run never writes into another run's directory (a name clash
//! within the same second gets a `-2`, `-3` ... suffix), and the timestamp is UTC in the
//! sortable form `YYYYMMDDTHHMMSSZ`.

use super::summary::{read_summary, write_summary, Figure, SummaryFile};
use super::{ReportError, Result};
use crate::machine::RunContext;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The directory one run writes all its files into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultsDir {
    experiment: String,
    path: PathBuf,
}

impl ResultsDir {
    /// Creates `<root>/<experiment>/<UTC timestamp now>/` (and its parents).
    pub fn create(root: impl AsRef<Path>, experiment: &str) -> Result<Self> {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Self::create_at(root, experiment, secs)
    }

    /// As [`ResultsDir::create`], with the timestamp of `unix_s` (seconds since the epoch).
    pub fn create_at(root: impl AsRef<Path>, experiment: &str, unix_s: u64) -> Result<Self> {
        let parent = root.as_ref().join(experiment);
        std::fs::create_dir_all(&parent).map_err(ReportError::io(&parent, "create directory"))?;
        let stamp = utc_timestamp(unix_s);
        for n in 1u32.. {
            let name = if n == 1 { stamp.clone() } else { format!("{stamp}-{n}") };
            let path = parent.join(name);
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Self { experiment: experiment.to_string(), path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => continue,
                Err(e) => return Err(ReportError::io(&path, "create directory")(e)),
            }
        }
        unreachable!("the loop returns within 1000 tries")
    }

    /// Uses an existing directory as is (for tests and re-plotting old runs).
    pub fn open(path: impl AsRef<Path>, experiment: &str) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        std::fs::create_dir_all(&path).map_err(ReportError::io(&path, "create directory"))?;
        Ok(Self { experiment: experiment.to_string(), path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The experiment name.
    pub fn experiment(&self) -> &str {
        &self.experiment
    }

    /// `file_name` inside the directory.
    pub fn file(&self, file_name: &str) -> PathBuf {
        self.path.join(file_name)
    }

    /// Points `<root>/<experiment>/latest` at this run's directory (a relative symbolic link),
    /// replacing the link an earlier run left. Returns the link's path.
    pub fn link_latest(&self) -> Result<PathBuf> {
        let (Some(parent), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            return Err(ReportError::InvalidData {
                path: self.path.clone(),
                detail: "results directory has no parent to hold a `latest` link".into(),
            });
        };
        let link = parent.join("latest");
        let tmp = parent.join(format!(".latest-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(name, &tmp).map_err(ReportError::io(&tmp, "create symbolic link"))?;
        std::fs::rename(&tmp, &link).map_err(ReportError::io(&link, "replace symbolic link"))?;
        Ok(link)
    }

    /// Writes `rows` to `<name>.csv`.
    pub fn write_csv<T: Serialize>(&self, name: &str, rows: &[T]) -> Result<PathBuf> {
        super::write_csv(self.file(&format!("{name}.csv")), rows)
    }

    /// Writes `<name>.json` with the run context, configuration and results (see
    /// [`super::write_json`]).
    pub fn write_json<C: Serialize, R: Serialize>(
        &self,
        name: &str,
        context: &RunContext,
        config: &C,
        results: &R,
    ) -> Result<PathBuf> {
        super::write_json(self.file(&format!("{name}.json")), &self.experiment, context, config, results)
    }

    /// Writes `summary.json`: the headline figures with the run context and the list of every
    /// file in the directory (so write it last).
    pub fn write_summary(&self, title: &str, context: &RunContext, figures: &[Figure]) -> Result<PathBuf> {
        let mut files: Vec<String> = std::fs::read_dir(&self.path)
            .map_err(ReportError::io(&self.path, "list"))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .chain(std::iter::once(SUMMARY_FILE.to_string()))
            .collect();
        files.sort();
        files.dedup();
        let doc = SummaryFile {
            experiment: self.experiment.clone(),
            title: title.to_string(),
            context: context.clone(),
            figures: figures.to_vec(),
            files,
        };
        write_summary(self.file(SUMMARY_FILE), &doc)
    }

    /// Writes `text` to `file_name` (summaries, notes).
    pub fn write_text(&self, file_name: &str, text: &str) -> Result<PathBuf> {
        let path = self.file(file_name);
        std::fs::write(&path, text).map_err(ReportError::io(&path, "write"))?;
        Ok(path)
    }
}

/// The machine-readable summary of a run, in its directory.
pub const SUMMARY_FILE: &str = "summary.json";

/// The latest run of one experiment: its directory and its summary.
#[derive(Debug, Clone, PartialEq)]
pub struct LatestRun {
    /// The run's directory (`latest` resolved).
    pub dir: PathBuf,
    /// Its `summary.json`.
    pub summary: SummaryFile,
}

/// The latest run of every experiment under `root` (each `<root>/<name>/latest` holding a
/// `summary.json`), sorted by experiment name. Experiments without a finished run are skipped;
/// a summary that cannot be read is an error naming its file.
pub fn latest_runs(root: impl AsRef<Path>) -> Result<Vec<LatestRun>> {
    let root = root.as_ref();
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(ReportError::io(root, "list")(e)),
    };
    for entry in entries {
        let entry = entry.map_err(ReportError::io(root, "list"))?;
        let latest = entry.path().join("latest");
        if !latest.join(SUMMARY_FILE).is_file() {
            continue;
        }
        let dir = std::fs::canonicalize(&latest).map_err(ReportError::io(&latest, "resolve"))?;
        out.push(LatestRun { summary: read_summary(dir.join(SUMMARY_FILE))?, dir });
    }
    out.sort_by(|a, b| a.summary.experiment.cmp(&b.summary.experiment));
    Ok(out)
}

/// `unix_s` as a UTC timestamp `YYYYMMDDTHHMMSSZ`.
pub fn utc_timestamp(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let rem = unix_s % 86_400;
    let (y, m, d) = nvmedb::util::calendar::civil_from_days(days);
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_and_sortable() {
        assert_eq!(utc_timestamp(0), "19700101T000000Z");
        assert_eq!(utc_timestamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_timestamp(1_795_302_168), "20261121T230248Z");
    }

    #[test]
    fn same_second_runs_get_distinct_directories() {
        let root = nvmedb_testkit::TmpDir::path_only("lab-dir");
        let a = ResultsDir::create_at(&root, "exp", 0).expect("first");
        let b = ResultsDir::create_at(&root, "exp", 0).expect("second");
        assert_eq!(a.path(), root.join("exp").join("19700101T000000Z"));
        assert_eq!(b.path(), root.join("exp").join("19700101T000000Z-2"));
        assert_eq!(a.file("x.csv"), a.path().join("x.csv"));
        let link = a.link_latest().expect("link");
        assert_eq!(
            std::fs::canonicalize(&link).expect("resolves"),
            std::fs::canonicalize(a.path()).expect("dir")
        );
        b.link_latest().expect("relink");
        assert_eq!(std::fs::read_link(&link).expect("link"), PathBuf::from("19700101T000000Z-2"));
        // Only runs with a summary are found; the latest one wins.
        assert!(latest_runs(&root).expect("scan").is_empty());
        let ctx = RunContext::capture();
        let fig = Figure::new("a/b", "a b", 1.5, "tps").against("fio", 3.0);
        b.write_text("summary.txt", "text").expect("text");
        b.write_summary("an experiment", &ctx, std::slice::from_ref(&fig)).expect("summary");
        let runs = latest_runs(&root).expect("scan");
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].dir, std::fs::canonicalize(b.path()).expect("dir"));
        assert_eq!(runs[0].summary.experiment, "exp");
        assert_eq!(runs[0].summary.figures, [fig]);
        assert_eq!(runs[0].summary.files, ["summary.json", "summary.txt"]);
        assert!(latest_runs(root.join("missing")).expect("no root").is_empty());
    }
}
