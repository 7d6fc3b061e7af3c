//! `nvmedb lab pgbench` end to end at a small scale: it loads `nvmedb serve` and a private
//! PostgreSQL 15 cluster with `pgbench -i`, runs every workload, protocol and buffer
//! configuration against both for a second, and writes its files; every run completed
//! transactions on both servers, and the scratch directory is gone afterwards.
//!
//! Needs PostgreSQL 15 (`postgresql-15` on Debian). Without it the test says so and passes,
//! unless `NVMEDB_REQUIRE_POSTGRES` or `CI` is set (`nvmedb_testkit::needs`).

use std::path::{Path, PathBuf};
use std::process::Command;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

fn postgres_installed() -> bool {
    nvmedb_testkit::needs(nvmedb_testkit::POSTGRES)
        && ["initdb", "postgres", "pgbench"].iter().all(|p| Path::new(PG_BIN).join(p).is_file())
}

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn nvmedb(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nvmedb")).args(args).output().expect("nvmedb runs")
}

/// The rows of a CSV file as header → value maps (the lab's CSVs hold no quoted commas).
fn csv_rows(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().expect("a header").split(',').map(str::to_string).collect();
    lines.map(|l| header.iter().cloned().zip(l.split(',').map(str::to_string)).collect()).collect()
}

#[test]
fn both_servers_run_every_workload_and_the_files_are_written() {
    if !postgres_installed() {
        return;
    }
    let root = Dir(std::env::temp_dir().join(format!("nvmedb-lab-pgbench-{}", std::process::id())));
    let results = root.0.join("results");
    let scratch = root.0.join("scratch");
    let out = nvmedb(&[
        "lab",
        "pgbench",
        "--scale",
        "1",
        "--secs",
        "1",
        "--warmup-secs",
        "0",
        "--reps",
        "1",
        "--clients",
        "4",
        "--results",
        results.to_str().unwrap(),
        "--scratch-dir",
        scratch.to_str().unwrap(),
        "--no-progress",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lab pgbench failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    assert!(stdout.contains("nvmedb/PG") && stdout.contains("PostgreSQL 15"), "{stdout}");
    // What each server's misses read from: PostgreSQL's files in the OS page cache, measured
    // per buffer configuration and within 0..=100 %.
    let cached: Vec<f64> = stdout
        .lines()
        .filter_map(|l| {
            l.split("after its runs ").nth(1)?.split(" % of PostgreSQL's data files").next()?.parse().ok()
        })
        .collect();
    assert_eq!(cached.len(), 2, "one page-cache line per buffer configuration:\n{stdout}");
    assert!(cached.iter().all(|p| (0.0..=100.0).contains(p)), "{cached:?}");
    let dir = results.join("pgbench").join("latest");
    for f in [
        "results.json",
        "summary.txt",
        "summary.json",
        "samples.csv",
        "points.csv",
        "ratios.csv",
        "tps_memory.png",
        "tps_memory.svg",
        "tps_buffer5.png",
        "tps_buffer5.svg",
        "ratio.png",
        "ratio.svg",
    ] {
        let meta = std::fs::metadata(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(meta.len() > 0, "{f} is empty");
    }
    // 2 buffers x 2 workloads x 2 modes x 2 servers, one repetition.
    let samples = csv_rows(&dir.join("samples.csv"));
    assert_eq!(samples.len(), 16, "{samples:?}");
    for s in &samples {
        let tps: f64 = s["tps"].parse().unwrap();
        let txns: u64 = s["transactions"].parse().unwrap();
        let cpu: f64 = s["server_cpu_ms"].parse().unwrap();
        assert!(tps > 0.0 && txns > 0, "no transactions: {s:?}");
        assert!(cpu > 0.0, "the server's CPU time was not measured: {s:?}");
    }
    for server in ["nvmedb", "PostgreSQL"] {
        for w in ["select-only", "tpcb-like"] {
            assert_eq!(
                samples.iter().filter(|s| s["server"] == server && s["workload"] == w).count(),
                4,
                "{server} {w}: 2 buffers x 2 modes"
            );
        }
    }
    let ratios = csv_rows(&dir.join("ratios.csv"));
    assert_eq!(ratios.len(), 8);
    for r in &ratios {
        let (nv, pg, ratio): (f64, f64, f64) = (
            r["nvmedb_tps"].parse().unwrap(),
            r["postgres_tps"].parse().unwrap(),
            r["tps_ratio"].parse().unwrap(),
        );
        assert!((ratio - nv / pg).abs() < 1e-6 * ratio.max(1.0), "{r:?}");
    }
    // Both servers stopped and their data deleted.
    let left: Vec<_> =
        std::fs::read_dir(&scratch).map(|d| d.filter_map(Result::ok).collect()).unwrap_or_default();
    assert!(left.is_empty(), "scratch data left behind: {left:?}");
}

#[test]
fn a_missing_postgresql_is_named_with_how_to_install_it() {
    let root = Dir(std::env::temp_dir().join(format!("nvmedb-lab-pgbench-missing-{}", std::process::id())));
    let out = nvmedb(&[
        "lab",
        "pgbench",
        "--pg-bin",
        root.0.join("no-such-bin").to_str().unwrap(),
        "--results",
        root.0.join("results").to_str().unwrap(),
        "--scratch-dir",
        root.0.join("scratch").to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("initdb") && err.contains("apt-get install postgresql-15"), "{err}");
    assert!(!root.0.join("scratch").exists(), "nothing is created before the programs are found");
}
