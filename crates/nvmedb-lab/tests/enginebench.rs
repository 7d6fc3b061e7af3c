//! `lab engine` end to end at a tiny scale: single and batched in-memory lookups, and the 1 %
//! buffer part on a table so small that its 1 % is under two frames per client (the buffer is
//! raised, and said so, instead of failing with "no evictable frame"). No timing is asserted.

use nvmedb_lab::enginebench::{run, EngineBenchConfig};

#[test]
fn tiny_engine_bench_runs_single_and_batched_lookups_and_a_raised_miss_buffer() {
    let dir = std::env::temp_dir().join(format!("nvmedb-eb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = EngineBenchConfig {
        data_dir: dir.clone(),
        rows: 3000,
        payload_bytes: 100,
        page_size: 4096,
        duration_s: 0.2,
        memory_threads: vec![1],
        miss_threads: 8,
        reps: 1,
        use_fio: false,
        parts: vec!["memory".into(), "miss".into()],
        memory_batch: vec![1, 16],
        ..EngineBenchConfig::default()
    };
    let r = run(&cfg).expect("engine bench");
    let batches: Vec<usize> = r.memory.iter().map(|m| m.batch).collect();
    assert_eq!(batches, [1, 16]);
    for m in &r.memory {
        assert_eq!(m.hit_ratio, 1.0, "batch {}: the whole table is cached", m.batch);
        assert!(m.lookups_per_s.median > 0.0 && m.lookups_per_cpu_s.median > 0.0);
    }
    let miss = r.miss.expect("miss part ran");
    assert!(miss.buffer_pct > cfg.miss_buffer_pct, "1 % of 3000 rows is under 2 frames per client");
    assert!(miss.hit_ratio < 1.0 && miss.engine_read_iops.median > 0.0, "{miss:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
