//! `lab peers` end to end at a tiny scale (built only with the `peers` feature): every engine
//! loads both tables, serves checked lookups and durable updates, and the report writes its
//! table, ratios and bar chart. No timing is asserted.
#![cfg(feature = "peers")]

use nvmedb_lab::experiment::{self, RunOptions};
use nvmedb_lab::experiments::peers::engines::{Kind, KINDS};
use nvmedb_lab::experiments::peers::{PeersBench, PeersConfig, TableSpec};

#[test]
fn tiny_peer_comparison_measures_every_engine_on_every_part() {
    let dir = std::env::temp_dir().join(format!("nvmedb-peers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = PeersConfig {
        data_dir: dir.join("data"),
        tables: vec![TableSpec { rows: 3000, value_bytes: 200 }, TableSpec { rows: 2000, value_bytes: 40 }],
        duration_s: 0.2,
        reps: 1,
        commit_threads: vec![1, 3],
        miss_threads: 4,
        ..PeersConfig::default()
    };
    let opts = RunOptions { results_root: dir.join("results"), progress: false };
    let out = experiment::run::<PeersBench>(&cfg, &opts).expect("peers bench");
    let r = &out.results;
    for k in KINDS {
        let has = |rates: &[nvmedb_lab::experiments::peers::Rate], n: usize| {
            rates.iter().filter(|x| x.engine == k && x.per_s.median > 0.0).count() == n
        };
        assert!(has(&r.load_s, 1), "{k:?} load");
        assert!(has(&r.memory, 4), "{k:?}: single and batched lookups on both tables");
        assert!(has(&r.commits, 2), "{k:?}: updates at 1 and 3 threads");
        assert!(has(&r.miss, 3), "{k:?}: lookups through the small cache: 4 threads, 1 thread, batches");
    }
    assert!(r.miss.iter().all(|x| x.cpu_us_per_op.is_some_and(|c| c.median > 0.0)), "CPU per lookup");
    assert_eq!(r.miss_fio.len(), 3, "fio beside each 1 %-cache workload");
    assert_eq!(r.miss_page_bytes, nvmedb::Options::default().table_page_size);
    let ratios = r.ratios();
    assert_eq!(ratios.len(), 3 * (1 + 4 + 2 + 3), "one ratio per peer and workload");
    assert!(ratios
        .iter()
        .all(|x| x.nvmedb_over_peer.is_finite() && x.nvmedb_over_peer > 0.0 && x.peer != Kind::Nvmedb));
    for f in ["results.json", "summary.txt", "ratios.csv", "ratios.png", "ratios.svg"] {
        assert!(out.dir.join(f).exists(), "{f} written");
    }
    assert!(out.summary.text.contains("nvmedb/RocksDB") && out.summary.text.contains("configuration:"));
    assert!(!cfg.data_dir.join("nvmedb-3000x200").exists(), "data removed");
    let _ = std::fs::remove_dir_all(&dir);
}
