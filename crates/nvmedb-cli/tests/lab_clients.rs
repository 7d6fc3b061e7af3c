//! `nvmedb lab clients` end to end at a tiny scale: it loads `nvmedb serve` and a private
//! PostgreSQL 15 cluster with sysbench's tables and the TPC-C kit's, runs
//! oltp_point_select, oltp_read_write and the kit against both in memory and with a 5 % buffer
//! for a second each, checks the kit's consistency conditions on both, and writes its files;
//! every run committed transactions on both servers, and the scratch directory is gone
//! afterwards.
//!
//! Needs PostgreSQL 15, sysbench and python3-psycopg2. Without them the test says so and
//! passes, unless `CI` (or the `NVMEDB_REQUIRE_*` variable it names) is set.

use std::path::{Path, PathBuf};
use std::process::Command;

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

struct Dir(PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The rows of a CSV file as header → value maps (the lab's CSVs hold no quoted commas).
fn csv_rows(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().expect("a header").split(',').map(str::to_string).collect();
    lines.map(|l| header.iter().cloned().zip(l.split(',').map(str::to_string)).collect()).collect()
}

#[test]
fn sysbench_and_the_tpcc_kit_run_on_both_servers_and_the_files_are_written() {
    if !(nvmedb_testkit::needs(nvmedb_testkit::POSTGRES)
        && ["initdb", "postgres"].iter().all(|p| Path::new(PG_BIN).join(p).is_file())
        && nvmedb_testkit::needs(nvmedb_testkit::SYSBENCH)
        && nvmedb_testkit::needs_python(&["psycopg2"]))
    {
        return;
    }
    let root = Dir(std::env::temp_dir().join(format!("nvmedb-lab-clients-{}", std::process::id())));
    let (results, scratch) = (root.0.join("results"), root.0.join("scratch"));
    let out = Command::new(env!("CARGO_BIN_EXE_nvmedb"))
        .args(["lab", "clients", "--tables", "1", "--table-size", "1000", "--threads", "2"])
        .args(["--items", "500", "--customers", "30", "--terminals", "2", "--secs", "1", "--reps", "1"])
        .arg("--results")
        .arg(&results)
        .arg("--scratch-dir")
        .arg(&scratch)
        .arg("--no-progress")
        .output()
        .expect("nvmedb runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lab clients failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    assert!(stdout.contains("nvmedb/PG") && stdout.contains("PostgreSQL) 15"), "{stdout}");
    assert!(stdout.contains(
        "consistency conditions 1-4 held on both servers after every buffer configuration (4 checks)"
    ));
    let dir = results.join("clients").join("latest");
    for f in
        ["results.json", "summary.txt", "samples.csv", "points.csv", "ratios.csv", "ratio.png", "ratio.svg"]
    {
        let meta = std::fs::metadata(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(meta.len() > 0, "{f} is empty");
    }
    // 2 buffers x 3 workloads x 2 servers, one repetition.
    let samples = csv_rows(&dir.join("samples.csv"));
    assert_eq!(samples.len(), 12, "{samples:?}");
    for s in &samples {
        let (tps, txns): (f64, u64) = (s["tps"].parse().unwrap(), s["transactions"].parse().unwrap());
        assert!(tps > 0.0 && txns > 0, "no transactions: {s:?}");
        assert!(s["server_cpu_ms"].parse::<f64>().unwrap() > 0.0, "the server's CPU was not measured: {s:?}");
        let tpmc: f64 = s["tpmc"].parse().unwrap();
        assert_eq!(tpmc > 0.0, s["workload"] == "tpcc", "tpmC only and always for the kit: {s:?}");
    }
    let ratios = csv_rows(&dir.join("ratios.csv"));
    assert_eq!(ratios.len(), 6);
    for r in &ratios {
        let (nv, pg, ratio): (f64, f64, f64) = (
            r["nvmedb_tps"].parse().unwrap(),
            r["postgres_tps"].parse().unwrap(),
            r["tps_ratio"].parse().unwrap(),
        );
        assert!((ratio - nv / pg).abs() < 1e-6 * ratio.max(1.0), "{r:?}");
    }
    let left: Vec<_> =
        std::fs::read_dir(&scratch).map(|d| d.filter_map(Result::ok).collect()).unwrap_or_default();
    assert!(left.is_empty(), "scratch data left behind: {left:?}");
}
