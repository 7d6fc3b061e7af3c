//! The one shape of an experiment, and the driver that runs any of them.
//!
//! Owns: the [`Experiment`] trait (a configuration, results, `run`, `report`), [`RunEnv`] (what
//! a running experiment may use: its results directory, the run context, whether to show
//! progress), [`Summary`] and [`run`], which every experiment goes through. Invariants: every run
//! writes into its own `<results root>/<name>/<UTC time>/` directory `results.json` (the
//! experiment's name, the [`RunContext`] — command, git commit, machine, time — the
//! configuration and the results), `summary.txt` (what was printed) and `summary.json` (the
//! headline [`Figure`]s and the list of files), then points `<name>/latest` at it; the results
//! are written before the report is drawn, so a failing plot never loses the numbers.
//!
//! A new experiment is one module under `experiments/<name>/` with a unit struct implementing
//! [`Experiment`]; the CLI runs it with one generic function, and `report::latest_runs` finds
//! its latest run's figures.

use crate::error::{LabError, Result};
use crate::machine::RunContext;
use crate::report::{read_doc, read_json, Figure, ResultFile, ResultsDir};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

/// An experiment: a configuration in, results out, and a report of them.
pub trait Experiment {
    /// Name: the results directory (`results/<NAME>/`), the `experiment` field of the result
    /// files and the `nvmedb lab` subcommand.
    const NAME: &'static str;
    /// One line saying what the experiment measures and which seed figure it reproduces.
    const TITLE: &'static str;
    /// Everything the experiment needs to know; stored in `results.json`.
    type Config: Serialize + DeserializeOwned + Clone + Debug;
    /// Everything it measured; stored in `results.json`.
    type Results: Serialize + DeserializeOwned + Debug;

    /// Checks the configuration before anything runs; errors name the field.
    fn validate(_config: &Self::Config) -> Result<()> {
        Ok(())
    }

    /// Measures. Large artefacts that do not belong in the results (a trace's intervals) may be
    /// written into `env.dir` through `report/` as they are produced.
    fn run(config: &Self::Config, env: &RunEnv) -> Result<Self::Results>;

    /// Writes the tables and plots of `results` into `env.dir` (through `report/`) and returns
    /// the printed summary with its headline figures.
    fn report(config: &Self::Config, results: &Self::Results, env: &RunEnv) -> Result<Summary>;
}

/// What a running experiment may use.
#[derive(Debug)]
pub struct RunEnv {
    /// Provenance, captured when the run started.
    pub context: RunContext,
    /// The run's results directory.
    pub dir: ResultsDir,
    /// Show progress bars and interim lines.
    pub progress: bool,
}

impl RunEnv {
    /// Prints an interim result line (a measurement as soon as it is known) on stderr, with
    /// the progress bars, unless progress is off. The summary, on stdout, repeats what matters
    /// at the end.
    pub fn note(&self, line: impl AsRef<str>) {
        if self.progress {
            eprintln!("{}", line.as_ref());
        }
    }
}

/// What a report returns: the text printed at the end (also `summary.txt`) and the headline
/// figures (`summary.json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// The printed summary.
    pub text: String,
    /// The headline figures, each with its reference where it has one.
    pub figures: Vec<Figure>,
}

/// How [`run`] runs an experiment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Root of the results directories.
    pub results_root: PathBuf,
    /// Show progress bars and interim lines.
    pub progress: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self { results_root: PathBuf::from("results"), progress: true }
    }
}

/// What [`run`] returns.
#[derive(Debug)]
pub struct Outcome<E: Experiment> {
    /// The results (as in `results.json`).
    pub results: E::Results,
    /// The summary (as in `summary.txt` and `summary.json`).
    pub summary: Summary,
    /// The run's results directory.
    pub dir: PathBuf,
}

/// Runs experiment `E` with `config`: validates, creates its results directory, runs, writes
/// `results.json`, reports (`summary.txt`, `summary.json`, plots) and links `latest`.
pub fn run<E: Experiment>(config: &E::Config, opts: &RunOptions) -> Result<Outcome<E>> {
    E::validate(config)?;
    let context = RunContext::capture();
    let dir = ResultsDir::create_at(&opts.results_root, E::NAME, context.started_unix_s)?;
    let env = RunEnv { context, dir, progress: opts.progress };
    let results = match E::run(config, &env) {
        Ok(r) => r,
        Err(e) => {
            // Leave no empty directory behind (one with partial files stays, to look at).
            let _ = std::fs::remove_dir(env.dir.path());
            return Err(e);
        }
    };
    env.dir.write_json("results", &env.context, config, &results)?;
    let summary = E::report(config, &results, &env)?;
    env.dir.write_text("summary.txt", &summary.text)?;
    env.dir.write_summary(E::TITLE, &env.context, &summary.figures)?;
    env.dir.link_latest()?;
    Ok(Outcome { results, summary, dir: env.dir.path().to_path_buf() })
}

/// Draws the report of an earlier run of `E` in `dir` again, from its `results.json`, with the
/// current code: the tables, plots, `summary.txt` and `summary.json` are rewritten (artefacts
/// drawn while the run measured, such as trace charts, are kept as they are).
pub fn replot<E: Experiment>(dir: &Path) -> Result<Summary> {
    let doc: ResultFile<E::Config, E::Results> = read_json(dir.join("results.json"))?;
    if doc.experiment != E::NAME {
        return Err(LabError::config(
            "results.json",
            format!("{} holds a run of `{}`, not `{}`", dir.display(), doc.experiment, E::NAME),
        ));
    }
    let env = RunEnv { context: doc.context, dir: ResultsDir::open(dir, E::NAME)?, progress: false };
    let summary = E::report(&doc.config, &doc.results, &env)?;
    env.dir.write_text("summary.txt", &summary.text)?;
    env.dir.write_summary(E::TITLE, &env.context, &summary.figures)?;
    Ok(summary)
}

/// The experiment whose run `dir` holds (the `experiment` field of its `results.json`).
pub fn recorded_experiment(dir: &Path) -> Result<String> {
    #[derive(serde::Deserialize)]
    struct Header {
        experiment: String,
    }
    Ok(read_doc::<Header>(dir.join("results.json"))?.experiment)
}

/// Checks that `values` is not empty: `field` names the list.
pub fn non_empty<T>(field: &str, values: &[T]) -> Result<()> {
    if values.is_empty() {
        return Err(LabError::config(field, "needs at least one value"));
    }
    Ok(())
}

/// Checks that every name in `parts` is one of `known`; `field` names the list (`--parts`).
pub fn known_parts(field: &str, parts: &[String], known: &[&str]) -> Result<()> {
    match parts.iter().find(|p| !known.contains(&p.as_str())) {
        Some(p) => Err(LabError::config(field, format!("unknown part `{p}` ({})", known.join(", ")))),
        None => Ok(()),
    }
}

/// Checks that a duration in seconds is finite and positive (or, with `zero_ok`, zero).
pub fn seconds(field: &str, value: f64, zero_ok: bool) -> Result<()> {
    if !value.is_finite() || value < 0.0 || (value == 0.0 && !zero_ok) {
        let want = if zero_ok { ">= 0" } else { "> 0" };
        return Err(LabError::config(field, format!("{value} s: must be {want}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::latest_runs;
    use serde::Deserialize;

    #[derive(Debug)]
    struct Doubling;

    #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
    struct Cfg {
        x: f64,
    }

    impl Experiment for Doubling {
        const NAME: &'static str = "doubling";
        const TITLE: &'static str = "doubles a number";
        type Config = Cfg;
        type Results = Vec<f64>;

        fn validate(c: &Cfg) -> Result<()> {
            seconds("x", c.x, false)
        }
        fn run(c: &Cfg, _env: &RunEnv) -> Result<Vec<f64>> {
            Ok(vec![c.x, 2.0 * c.x])
        }
        fn report(_c: &Cfg, r: &Vec<f64>, env: &RunEnv) -> Result<Summary> {
            env.dir.write_csv("points", &r.iter().map(|v| (v,)).collect::<Vec<_>>())?;
            Ok(Summary {
                text: format!("doubled: {}\n", r[1]),
                figures: vec![Figure::new("doubled", "the double", r[1], "1").against("input", r[0])],
            })
        }
    }

    #[test]
    fn a_run_writes_results_summary_and_latest() {
        let root = nvmedb_testkit::TmpDir::path_only("lab-experiment");
        let opts = RunOptions { results_root: root.to_path_buf(), progress: false };
        let out = run::<Doubling>(&Cfg { x: 1.5 }, &opts).expect("runs");
        assert_eq!(out.results, [1.5, 3.0]);
        assert_eq!(out.dir.parent(), Some(root.join("doubling").as_path()));
        let doc: ResultFile<Cfg, Vec<f64>> = read_json(out.dir.join("results.json")).expect("results.json");
        assert_eq!((doc.experiment.as_str(), doc.config.x, doc.results.len()), ("doubling", 1.5, 2));
        assert!(!doc.context.command.is_empty());
        assert_eq!(std::fs::read_to_string(out.dir.join("summary.txt")).unwrap(), "doubled: 3\n");
        let latest = latest_runs(&root).expect("latest");
        assert_eq!(latest.len(), 1);
        assert_eq!(latest[0].summary.title, "doubles a number");
        assert_eq!(latest[0].summary.figures[0].value, 3.0);
        assert_eq!(latest[0].summary.figures[0].reference.as_ref().map(|r| r.value), Some(1.5));
        assert!(latest[0].summary.files.iter().any(|f| f == "points.csv"));
        // The report of a finished run can be drawn again from its results.json.
        std::fs::remove_file(out.dir.join("points.csv")).unwrap();
        assert_eq!(recorded_experiment(&out.dir).unwrap(), "doubling");
        assert_eq!(replot::<Doubling>(&out.dir).unwrap().text, "doubled: 3\n");
        assert!(out.dir.join("points.csv").exists());
        // A bad configuration fails before any directory is made.
        let e = run::<Doubling>(&Cfg { x: -1.0 }, &opts).unwrap_err();
        assert!(e.to_string().starts_with("x: "), "{e}");
        assert_eq!(std::fs::read_dir(root.join("doubling")).unwrap().count(), 2, "the run and `latest`");
    }
}
