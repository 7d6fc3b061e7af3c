//! `lab engine` end to end at a tiny scale: single and batched in-memory lookups, the 1 %
//! buffer part (one thread, many threads, `read_many` on one thread) on a table so small that
//! its 1 % is under two frames per client (the buffer is raised, and said so, instead of
//! failing with "no evictable frame"), full scans under each
//! buffer policy, and the lock manager part; the whole-lab page reads the run. Every result
//! file is written. No timing is asserted.

use nvmedb_lab::experiment::{self, RunOptions};
use nvmedb_lab::experiments::engine::{EngineBench, EngineConfig};
use nvmedb_lab::report::latest_runs;

#[test]
fn tiny_engine_bench_runs_lookups_a_raised_miss_buffer_and_locks() {
    let dir = nvmedb_testkit::TmpDir::path_only("engine-bench");
    let cfg = EngineConfig {
        data_dir: dir.join("data"),
        rows: 3000,
        payload_bytes: 100,
        page_size: 4096,
        duration_s: 0.2,
        memory_threads: vec![1],
        miss_threads: 8,
        reps: 1,
        use_fio: false,
        parts: vec!["memory".into(), "miss".into(), "scan".into(), "locks".into()],
        memory_batch: vec![1, 16],
        lock_threads: vec![2],
        ..EngineConfig::default()
    };
    let opts = RunOptions { results_root: dir.join("results"), progress: false };
    let out = experiment::run::<EngineBench>(&cfg, &opts).expect("engine bench");
    let r = &out.results;
    let batches: Vec<usize> = r.memory.iter().map(|m| m.batch).collect();
    assert_eq!(batches, [1, 16]);
    for m in &r.memory {
        assert_eq!(m.hit_ratio, 1.0, "batch {}: the whole table is cached", m.batch);
        assert!(m.lookups_per_s.median > 0.0 && m.lookups_per_cpu_s.median > 0.0);
    }
    let points: Vec<(usize, usize)> = r.misses.iter().map(|m| (m.threads, m.batch)).collect();
    assert_eq!(points, [(1, 1), (8, 1), (1, 16)], "one thread, many threads, read_many");
    for miss in &r.misses {
        assert!(miss.buffer_pct > cfg.miss_buffer_pct, "1 % of 3000 rows is under 2 frames per client");
        assert!(miss.hit_ratio < 1.0 && miss.engine_read_iops.median > 0.0, "{miss:?}");
        assert!(miss.cpu_us_per_miss.median > 0.0, "{miss:?}");
    }
    let locks = r.locks.as_ref().expect("locks part ran");
    assert_eq!(locks.contended.len(), 4, "four wait settings at one thread count");
    assert!(locks.uncontended_x_release_ns > 0.0 && locks.contended.iter().all(|c| c.txn_per_s > 0.0));
    assert!(out.summary.text.contains("raised") || out.summary.text.contains("% buffer lookups"));
    let latest = latest_runs(dir.join("results")).expect("latest");
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].summary.experiment, "engine");
    assert!(latest[0].summary.figures.iter().any(|f| f.name == "miss/threads8/batch1/lookups_per_s"));
    assert!(latest[0].summary.figures.iter().any(|f| f.name == "miss/threads1/batch16/cpu_us_per_miss"));
    // The whole-lab page compares the scan part with seed 004's buffer policies.
    let page = nvmedb_lab::page::build(&dir.join("results")).expect("lab page");
    let row = page.rows.iter().find(|r| r.id == "seed004-scan").expect("row");
    assert!(row.ours.contains("SEP / SHR-1 = "), "{row:?}");
}
