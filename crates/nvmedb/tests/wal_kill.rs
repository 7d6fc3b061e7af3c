//! Scenario: kill -9. The test re-runs its own binary as a child process that commits records
//! from 4 threads to a duplexed log in real O_DIRECT files and prints each acknowledgement; the
//! parent kills the child with SIGKILL after a seeded number of acknowledgements, reopens the
//! log, and checks that every acknowledged record is present and intact. The log accumulates
//! across iterations, so every iteration also recovers the previous ones' crashes.
//! `NVMEDB_WAL_KILL_ITERS` (default 20) and `NVMEDB_WAL_SEED` control it.

mod wal_common;

use nvmedb::io::Storage;
use nvmedb::io::{DirStorage, FileOptions};
use nvmedb::util::Rng;
use nvmedb::wal::{FileLog, LogReader, LogSink, WalOptions};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use wal_common::payload;

const CHILD_ENV: &str = "NVMEDB_WAL_KILL_CHILD_DIR";

fn storages(dir: &Path) -> (Arc<dyn Storage>, Arc<dyn Storage>) {
    let a: Arc<dyn Storage> =
        Arc::new(DirStorage::new(dir.join("copy-a"), FileOptions::default()).expect("copy-a"));
    let b: Arc<dyn Storage> =
        Arc::new(DirStorage::new(dir.join("copy-b"), FileOptions::default()).expect("copy-b"));
    (a, b)
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
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let iter: u64 = std::env::var("NVMEDB_WAL_KILL_ITER").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let (a, b) = storages(Path::new(&dir));
    let log = Arc::new(FileLog::open(a, b, opts()).expect("child open"));
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
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let iters: u64 = std::env::var("NVMEDB_WAL_KILL_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let seed: u64 = std::env::var("NVMEDB_WAL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut rng = Rng::new(seed);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("wal-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    // lsn -> (iteration, thread, index, len)
    let mut acked: BTreeMap<u64, (u64, u64, u64, usize)> = BTreeMap::new();
    for iter in 0..iters {
        let kill_after = rng.range(1, 400);
        let mut child = Command::new(&exe)
            .args(["--exact", "wal_kill_child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .env("NVMEDB_WAL_KILL_ITER", iter.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        let mut killed = false;
        while let Some(Ok(line)) = lines.next() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.first() == Some(&"ack") && f.len() == 5 {
                let v: Vec<u64> = f[1..].iter().map(|x| x.parse().unwrap()).collect();
                acked.insert(v[0], (iter, v[1], v[2], v[3] as usize));
                seen += 1;
                if seen == kill_after && !killed {
                    child.kill().unwrap(); // SIGKILL
                    killed = true;
                }
            }
        }
        child.wait().unwrap();
        let (a, b) = storages(&dir);
        let got: BTreeMap<u64, Vec<u8>> = LogReader::open(a, b, 0)
            .unwrap_or_else(|e| panic!("seed {seed} iter {iter}: open reader: {e}"))
            .map(|r| r.map(|r| (r.lsn, r.payload)))
            .collect::<nvmedb::Result<_>>()
            .unwrap_or_else(|e| panic!("seed {seed} iter {iter}: read: {e}"));
        for (lsn, (it, t, i, len)) in &acked {
            let p = got
                .get(lsn)
                .unwrap_or_else(|| panic!("seed {seed} iter {iter}: acknowledged LSN {lsn} lost"));
            assert!(*p == payload(it << 8 | t, *i, *len), "seed {seed} iter {iter}: LSN {lsn} corrupted");
        }
    }
    eprintln!("kill -9: {iters} iterations, {} acknowledged records verified", acked.len());
    assert!(acked.len() as u64 >= iters, "the children acknowledged too little to test anything");
    let _ = std::fs::remove_dir_all(&dir);
}
