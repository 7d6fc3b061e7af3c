//! `nvmedb lab ops` end to end at a tiny scale: a replicating primary with writers, its
//! standby in a child process serving pgbench readers, backups beside fio, restores from the
//! archive. The numbers it reports are sane: commits, reads, backup and restore rates are
//! positive, every apply-lag sample is non-negative, the reads ran on the standby (its process
//! worked harder while they ran, and the primary has no SQL server at all), and the scratch
//! directory is gone afterwards.
//!
//! Needs pgbench (`postgresql-15` on Debian) and fio. Without them the test says so and passes,
//! unless `CI` or the program's `NVMEDB_REQUIRE_*` is set (`nvmedb_testkit::needs`).

use nvmedb_lab::experiments::ops::{OpsConfig, OpsResults};
use nvmedb_lab::report::{read_json, ResultFile};
use std::path::Path;
use std::process::Command;

const PGBENCH: &str = "/usr/lib/postgresql/15/bin/pgbench";

#[test]
fn a_tiny_ops_run_reports_sane_numbers() {
    if !nvmedb_testkit::needs(nvmedb_testkit::POSTGRES) || !nvmedb_testkit::needs(nvmedb_testkit::FIO) {
        return;
    }
    assert!(Path::new(PGBENCH).is_file(), "{PGBENCH} missing although PostgreSQL 15 is installed");
    let root = nvmedb_testkit::TmpDir::path_only("lab-ops");
    let (results, scratch) = (root.join("results"), root.join("scratch"));
    let out = Command::new(env!("CARGO_BIN_EXE_nvmedb"))
        .args(["lab", "ops", "--tables", "2", "--rows", "1200", "--writers", "2", "--readers", "2"])
        .args(["--reader-threads", "1", "--warmup", "0", "--duration", "1", "--reps", "1"])
        .args(["--fio-secs", "1", "--restore-log-mib", "70", "--no-progress", "--results"])
        .arg(&results)
        .arg("--data-dir")
        .arg(&scratch)
        .output()
        .expect("nvmedb runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lab ops failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    assert!(stdout.contains("no emulation"), "the device is labelled:\n{stdout}");
    let dir = results.join("ops").join("latest");
    let doc: ResultFile<OpsConfig, OpsResults> = read_json(dir.join("results.json")).expect("results.json");
    let r = doc.results;

    assert_eq!(r.reads.len(), 2, "one point without readers, one with: {:?}", r.reads);
    let without = r.reads.iter().find(|p| !p.with_reads).expect("a point without readers");
    let with = r.reads.iter().find(|p| p.with_reads).expect("a point with readers");
    for p in [without, with] {
        assert!(p.commits > 0 && p.tps > 0.0, "the primary committed: {p:?}");
        assert!(!p.lag.is_empty(), "the lag was sampled: {p:?}");
        for s in &p.lag {
            assert!(s.bytes >= 0 && s.ms >= 0.0 && s.t_s >= 0.0, "a lag sample is negative: {s:?}");
        }
    }
    assert!(
        with.reads > 0 && with.read_tps > 0.0 && with.read_latency_ms > 0.0,
        "the standby answered reads: {with:?}"
    );
    assert_eq!((without.reads, without.read_tps), (0, 0.0), "no readers, no reads: {without:?}");
    // The readers' SELECTs ran on the standby: its process worked harder while they ran.
    assert!(
        with.standby_cores > without.standby_cores,
        "the standby's CPU did not grow with readers: {:.3} vs {:.3} cores",
        with.standby_cores,
        without.standby_cores
    );

    assert_eq!((r.backups.len(), r.fio.len(), r.restores.len()), (1, 1, 1));
    let b = &r.backups[0];
    assert!(b.bytes >= r.data_bytes / 2 && b.mib_s > 0.0 && b.files > 0, "{b:?}");
    let f = &r.fio[0];
    assert!(f.read_mib_s.is_some_and(|v| v > 0.0) && f.write_mib_s.is_some_and(|v| v > 0.0), "{f:?}");
    let x = &r.restores[0];
    assert!(x.log_bytes >= 64 << 20, "the restore replayed the log written after the backup: {x:?}");
    assert!(x.archived_segments > 0 && x.s_per_gib > 0.0 && x.log_mib_s > 0.0, "{x:?}");

    for file in ["summary.txt", "summary.json", "reads.csv", "backups.csv", "restores.csv"] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    for plot in ["commits", "apply_lag", "backup"] {
        assert!(dir.join(format!("{plot}.svg")).is_file(), "{plot}.svg missing");
    }
    assert!(!scratch.exists(), "the scratch directory was left behind");
}
