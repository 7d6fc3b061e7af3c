//! `nvmedb lab ha` end to end at a tiny scale: primary and standby each on emulated optane
//! (single, log shipping, mirroring), the replication delay with the file log and with the fast
//! log on both sides, and one failover of a three-node etcd cluster of this crate's `nvmedb`
//! (kill -9 of the primary, lease TTL 1 s). Checks every part produced its numbers, the labels
//! say EMULATED, no standby took over before the killed primary's lease could expire, and the
//! result files are written. Needs `etcd` (Debian's etcd-server).

#[path = "../../nvmedb/tests/support/mod.rs"]
mod support;

use nvmedb_lab::experiment::{self, RunOptions};
use nvmedb_lab::experiments::ha::{FailoverConfig, Ha, HaConfig};
use nvmedb_lab::measure::device::LogChoice;
use nvmedb_lab::measure::DeviceKind;
use std::path::PathBuf;
use support::TmpDir;

#[test]
fn a_tiny_run_measures_overhead_delay_and_failover_on_emulated_devices() {
    if !nvmedb_testkit::needs(nvmedb_testkit::ETCD) {
        return;
    }
    let tmp = TmpDir::new("lab-ha");
    let ram = PathBuf::from(format!("/dev/shm/nvmedb-lab-ha-test-{}", std::process::id()));
    let cfg = HaConfig {
        ram_dir: ram.clone(),
        devices: vec![DeviceKind::Emulated("optane".into())],
        iobench_s: 0.2,
        tables: 1,
        rows: 300,
        buffers: vec![100.0],
        clients: 2,
        warmup_s: 0.1,
        duration_s: 0.4,
        reps: 1,
        delay_s: 0.4,
        delay_logs: vec![LogChoice::Duplexed, LogChoice::Fast],
        failover: FailoverConfig {
            ttls: vec![1],
            trials: 1,
            node_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_nvmedb"))),
        },
        ..HaConfig::default_scale(tmp.join("data"))
    };
    let out = experiment::run::<Ha>(&cfg, &RunOptions { results_root: tmp.join("results"), progress: false })
        .expect("lab ha");
    let r = &out.results;
    assert_eq!(r.devices.len(), 1);
    assert!(r.devices[0].label.contains("EMULATED") && r.devices[0].write_p50_us > 0.0, "{:?}", r.devices);
    assert_eq!(r.summary.len(), 3, "single, ha-log, ha-mirror: {:?}", r.summary);
    for s in &r.summary {
        assert!(s.median_tps > 0.0, "{s:?}");
    }
    for log in ["file", "fast"] {
        let p50 = r.delay.iter().find(|d| d.log == log && d.percentile == 50.0);
        assert!(p50.is_some_and(|d| d.samples > 0 && d.delay_us > 0.0), "{log} log delay: {:?}", r.delay);
    }
    assert_eq!(r.failover_note, None);
    assert_eq!(r.failover.len(), 1);
    let f = &r.failover[0];
    assert_eq!(f.times_ms.len(), 1);
    // The killed primary's lease runs TTL (1 s) from its last renewal, at most one tick
    // ((TTL - margin) / 4 = 0.15 s) before the kill: no standby may lead before that.
    assert!(f.times_ms[0] >= 800.0, "a standby led before the primary's lease could expire: {f:?}");
    for file in ["throughput.csv", "delay.csv", "failover.csv", "summary.txt", "throughput.svg", "delay.svg"]
    {
        assert!(out.dir.join(file).exists(), "{file} in {}", out.dir.display());
    }
    let summary = std::fs::read_to_string(out.dir.join("summary.txt")).unwrap();
    assert!(summary.contains("EMULATED") && summary.contains("lease TTL 1 s"), "{summary}");
    assert!(!ram.exists(), "the RAM copies are removed");
    assert!(!tmp.join("data").exists(), "the scratch directory (template, cluster) is removed");
}
