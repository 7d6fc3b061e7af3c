//! `nvmedb lab xlog` end to end at a tiny scale: every part runs, and every result file is
//! produced and parses back (CSV rows, the JSON with its run context, PNG and SVG plots, the
//! summary with the durability statements). Nothing about speed is asserted.

use nvmedb_lab::experiment::{self, RunOptions};
use nvmedb_lab::experiments::xlog::{CommitPoint, SchedPoint, TxnPoint, Xlog, XlogConfig, XlogResults};
use nvmedb_lab::report::{read_csv, read_json};
use std::path::Path;

fn check_plot(dir: &Path, stem: &str) {
    let png = std::fs::read(dir.join(format!("{stem}.png"))).expect("png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{stem}.png is a PNG");
    let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).expect("svg");
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{stem}.svg is an SVG");
}

#[test]
fn xlog_lab_tiny_run_produces_every_file() {
    let root = nvmedb_testkit::TmpDir::path_only("xloglab");
    let mut cfg = XlogConfig::default_scale(root.join("data")).tiny();
    cfg.ring_dir = root.join("rings");
    std::fs::create_dir_all(&cfg.ring_dir).unwrap();
    let opts = RunOptions { results_root: root.join("results"), progress: false };
    let out = experiment::run::<Xlog>(&cfg, &opts).expect("lab xlog runs");
    let d = &out.dir;
    let fig9: Vec<TxnPoint> = read_csv(d.join("fig9.csv")).unwrap();
    assert_eq!(fig9.len(), 4 * cfg.workers.len());
    for kind in ["none", "memory", "fast", "file"] {
        assert!(fig9.iter().any(|p| p.log == kind && p.txns > 0), "fig9 has committed {kind} points");
    }
    assert!(fig9.iter().filter(|p| p.log == "fast").all(|p| p.durability.contains("process crash")));
    let fig10: Vec<CommitPoint> = read_csv(d.join("fig10.csv")).unwrap();
    assert_eq!(fig10.len(), 3 * cfg.fig10_sizes.len());
    let fig11: Vec<CommitPoint> = read_csv(d.join("fig11.csv")).unwrap();
    assert_eq!(fig11.len(), cfg.fig11_queues.len() * cfg.fig11_sizes.len());
    let fig12: Vec<SchedPoint> = read_csv(d.join("fig12.csv")).unwrap();
    assert_eq!(fig12.len(), 3 * cfg.fig12_fast_pcts.len());
    assert!(fig12.iter().all(|p| p.device.contains("emulated")));
    let json = read_json::<XlogConfig, XlogResults>(d.join("results.json")).unwrap();
    assert_eq!(json.experiment, "xlog");
    assert!(!json.context.git_commit.is_empty());
    assert_eq!(json.results.fig9.len(), fig9.len());
    assert_eq!(json.config.workers, cfg.workers);
    for stem in ["fig9_throughput", "fig9_p99", "fig10", "fig11", "fig12"] {
        check_plot(d, stem);
    }
    let summary = std::fs::read_to_string(d.join("summary.txt")).unwrap();
    assert_eq!(summary, out.summary.text);
    assert!(d.join("summary.json").exists());
    assert!(summary.contains("NOT a power loss"), "the summary states the fast side's durability");
    assert!(summary.contains("Fig. 12") && summary.contains("EMULATED"));
    // The whole-lab page compares every figure of the run with the paper.
    let page = nvmedb_lab::page::build(&root.join("results")).expect("lab page");
    for id in ["seed002-fig9", "seed002-fig10", "seed002-fig11", "seed002-fig12"] {
        let row = page.rows.iter().find(|r| r.id == id).expect("row");
        assert!(
            matches!(row.status, nvmedb_lab::page::Status::Reproduced | nvmedb_lab::page::Status::Differs(_)),
            "{id}: {:?} {}",
            row.status,
            row.ours
        );
    }
    assert!(page.html.contains("data-plot=\"fig12\""));
    // The working files are cleaned up (databases, conventional rings, ring files).
    let left: Vec<_> = std::fs::read_dir(&cfg.ring_dir).unwrap().collect();
    assert!(left.is_empty(), "ring files left behind: {left:?}");
}
