//! `nvmedb lab commit` end to end at a tiny scale: the commit points and the recovery part run,
//! the result files parse back, and the recovery part counts the log recovery replays (from the
//! last checkpoint to the end of the log, which includes what the commit part logged before it),
//! not only the log it grew itself. Nothing about speed is asserted.

use nvmedb_lab::experiment::{self, RunOptions};
use nvmedb_lab::experiments::commit::{CommitBench, CommitConfig, CommitResults};
use nvmedb_lab::report::read_json;

fn tiny(root: &std::path::Path, parts: &[&str]) -> CommitConfig {
    CommitConfig {
        data_dir: root.join("data"),
        rows: 2_000,
        duration_s: 0.3,
        threads: vec![1, 4],
        reps: 1,
        recovery_log_bytes: 8 << 20,
        parts: parts.iter().map(|p| p.to_string()).collect(),
        ..CommitConfig::default()
    }
}

#[test]
fn commit_lab_counts_the_log_recovery_replays() {
    let root = nvmedb_testkit::TmpDir::path_only("commitlab");
    let opts = RunOptions { results_root: root.join("results"), progress: false };

    // Recovery alone: the log replayed is the log the part grew (the database was opened
    // after a checkpoint), give or take the records around it.
    let cfg = tiny(&root, &["recovery"]);
    let out = experiment::run::<CommitBench>(&cfg, &opts).expect("lab commit --parts recovery runs");
    let alone = out.results.recovery.clone().expect("the recovery part ran");
    assert!(alone.log_bytes >= cfg.recovery_log_bytes, "grew {} bytes", alone.log_bytes);
    assert!(
        alone.replayed_bytes >= alone.log_bytes && alone.replayed_bytes < alone.log_bytes + (1 << 20),
        "replayed {} bytes after growing the log by {}",
        alone.replayed_bytes,
        alone.log_bytes
    );
    assert!(alone.records > 0 && alone.open_s > 0.0);
    assert!(out.results.engine.is_empty());

    // Commits first, then recovery: recovery also replays the commit part's updates, and the
    // figure per GiB divides by what it replayed.
    let cfg = tiny(&root, &["commits", "recovery"]);
    let out = experiment::run::<CommitBench>(&cfg, &opts).expect("lab commit runs");
    let r = &out.results;
    assert_eq!(r.engine.len(), cfg.threads.len());
    let committed: f64 = r.engine.iter().map(|p| p.commits_per_s.median * cfg.duration_s).sum();
    assert!(r.engine.iter().all(|p| p.commits_per_s.median > 0.0));
    let rec = r.recovery.as_ref().expect("the recovery part ran");
    assert!(
        rec.replayed_bytes > rec.log_bytes,
        "{} bytes replayed, {} grown by the part, after about {committed:.0} logged updates",
        rec.replayed_bytes,
        rec.log_bytes
    );
    let per_gib = rec.open_s / (rec.replayed_bytes as f64 / (1u64 << 30) as f64);
    assert!((rec.s_per_gib() - per_gib).abs() < 1e-9 * per_gib.max(1.0));
    assert!(out.summary.text.contains("MiB replayed"), "{}", out.summary.text);

    // The results file holds the same.
    let json = read_json::<CommitConfig, CommitResults>(out.dir.join("results.json")).unwrap();
    assert_eq!(json.experiment, "commit");
    let back = json.results.recovery.expect("recovery in results.json");
    assert_eq!((back.log_bytes, back.replayed_bytes), (rec.log_bytes, rec.replayed_bytes));
    assert_eq!(std::fs::read_to_string(out.dir.join("summary.txt")).unwrap(), out.summary.text);
}
