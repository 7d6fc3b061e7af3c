//! Scenario: kill -9. The test re-runs its own binary as a child process that commits records
//! from 4 threads to a log in real O_DIRECT files (duplexed in one test, single in the other)
//! and prints each acknowledgement; the
//! parent kills the child with SIGKILL after a seeded number of acknowledgements, reopens the
//! log, and checks that every acknowledged record is present and intact. The log accumulates
//! across iterations, so every iteration also recovers the previous ones' crashes.
//! `NVMEDB_TEST_ITERS` (default 20) and `NVMEDB_TEST_SEED` control it.

mod support;
mod wal_common;

use nvmedb::io::Storage;
use nvmedb::io::{DirStorage, FileOptions};
use nvmedb::util::Rng;
use nvmedb::wal::{FileLog, LogReader, LogSink, WalOptions};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use support::kill;
use wal_common::payload;

/// The log's copies in `dir`: `copy-a`, and `copy-b` when duplexed.
fn storages(dir: &Path, copies: usize) -> Vec<Arc<dyn Storage>> {
    ["copy-a", "copy-b"][..copies]
        .iter()
        .map(|c| Arc::new(DirStorage::new(dir.join(c), FileOptions::default()).expect(c)) as Arc<dyn Storage>)
        .collect()
}

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: 256 * 1024,
        max_batch_bytes: 32 * 1024,
        keep_free_segments: 1,
        ..WalOptions::default()
    }
}

/// The child: commits until killed (or a bound, if the parent died).
#[test]
fn wal_kill_child_entry() {
    let Some(dir) = kill::child_role() else { return };
    let iter: u64 = std::env::var("NVMEDB_WAL_KILL_ITER").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let copies: usize =
        std::env::var("NVMEDB_WAL_KILL_COPIES").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let log = Arc::new(FileLog::open_copies(storages(Path::new(&dir), copies), opts()).expect("child open"));
    let out = Arc::new(Mutex::new(std::io::stdout()));
    println!("open {}", log.recovered().end_lsn);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (log, out) = (log.clone(), out.clone());
            std::thread::spawn(move || {
                for i in 0..5000u64 {
                    let len = ((t * 7919 + i * 104_729) % 1500) as usize;
                    let p = payload(iter << 8 | t, i, len);
                    let (s, e) = log.append(&p).expect("append");
                    log.wait_durable(e).expect("wait");
                    let mut o = out.lock().unwrap();
                    writeln!(o, "ack {s} {t} {i} {len}").unwrap();
                    o.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn wal_acknowledged_records_survive_kill_9() {
    if kill::child_role().is_some() {
        return;
    }
    kill_9_run(2, "wal_acknowledged_records_survive_kill_9");
}

#[test]
fn wal_single_log_acknowledged_records_survive_kill_9() {
    if kill::child_role().is_some() {
        return;
    }
    kill_9_run(1, "wal_single_log_acknowledged_records_survive_kill_9");
}

/// Kills children committing to a log of `copies` copies and checks every acknowledged record.
fn kill_9_run(copies: usize, test: &str) {
    let iters = support::iters(20);
    let seed = support::seed(1);
    let mut rng = Rng::new(seed);
    let tmp = support::TmpDir::new(&format!("wal-kill-{copies}"));
    let dir = tmp.path().to_path_buf();
    // lsn -> (iteration, thread, index, len)
    let mut acked: BTreeMap<u64, (u64, u64, u64, usize)> = BTreeMap::new();
    for iter in 0..iters {
        let ctx = format!(
            "{copies}-copy log, iteration {iter} ({} cargo test -p nvmedb --test wal_kill -- {test})",
            support::replay(seed, iter + 1)
        );
        let kill_after = rng.range(1, 400) as usize;
        let child = kill::spawn(
            "wal_kill_child_entry",
            dir.to_str().expect("utf-8 path"),
            &[("NVMEDB_WAL_KILL_ITER", iter.to_string()), ("NVMEDB_WAL_KILL_COPIES", copies.to_string())],
        );
        let mut seen = 0;
        let note = |line: &str| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.first() == Some(&"ack") && f.len() == 5 {
                let v: Vec<u64> = f[1..].iter().map(|x| x.parse().unwrap()).collect();
                acked.insert(v[0], (iter, v[1], v[2], v[3] as usize));
                seen += 1;
            }
            seen
        };
        child.kill_after(kill_after, note).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let got: BTreeMap<u64, Vec<u8>> = LogReader::open_copies(storages(&dir, copies), 0)
            .unwrap_or_else(|e| panic!("{ctx}: open reader: {e}"))
            .map(|r| r.map(|r| (r.lsn, r.payload)))
            .collect::<nvmedb::Result<_>>()
            .unwrap_or_else(|e| panic!("{ctx}: read: {e}"));
        for (lsn, (it, t, i, len)) in &acked {
            let p = got.get(lsn).unwrap_or_else(|| panic!("{ctx}: acknowledged LSN {lsn} lost"));
            assert!(*p == payload(it << 8 | t, *i, *len), "{ctx}: LSN {lsn} corrupted");
        }
    }
    eprintln!(
        "kill -9 ({copies}-copy log): {iters} iterations, {} acknowledged records verified",
        acked.len()
    );
    assert!(acked.len() as u64 >= iters, "the children acknowledged too little to test anything");
}
