//! Shared helpers of the `repl_*` integration tests.
//!
//! Owns: the small-page options the replication tests run with, per-test scratch
//! directories (`nvmedb-testkit`'s, removed when the test passes), a closed primary with table `t` (and optionally `acks`) plus standbys seeded
//! from it, standby start-up on a given address, and an address nothing listens on.
#![allow(dead_code)]

use nvmedb::repl::{seed_standby, ReplConfig, ReplicationMode, Standby, StandbyConfig, StandbyPolicy};
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;

pub use nvmedb_testkit::TmpDir;
use std::time::{Duration, Instant};

pub const SECRET: &[u8] = b"test-secret";
pub const ROWS: i64 = 200;

pub fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(16 * 4096),
        index_buffer: BufferSize::Bytes(64 * 4096),
        ..Options::default()
    }
}

/// A fresh path (not created yet) for this test process, removed when the guard drops.
pub fn tmp(name: &str) -> TmpDir {
    TmpDir::path_only(&format!("repl-{name}"))
}

/// A closed primary with table `t` (ROWS rows, c1 = 0) and table `acks` (id, k; index on k).
pub fn create_primary(p: &Path) {
    let db = Database::open(p, options()).unwrap();
    let schema =
        Schema::new(vec![("sid", ColumnType::Int), ("c1", ColumnType::Int), ("data", ColumnType::Char(200))]);
    let t = db.create_table("t", schema).unwrap();
    for i in 0..ROWS {
        t.insert(&[Value::Int(i), Value::Int(0), Value::from("x")]).unwrap();
    }
    db.create_table(
        "acks",
        Schema::new(vec![("id", ColumnType::Int), ("k", ColumnType::Int)]).with_index("by_k", "k").unwrap(),
    )
    .unwrap();
    db.close().unwrap();
}

/// A closed primary (see [`create_primary`]) and `n` standby directories seeded from it.
pub fn setup_n(name: &str, n: usize) -> (TmpDir, Vec<TmpDir>) {
    let p = tmp(&format!("{name}-p"));
    create_primary(&p);
    let dirs = (0..n)
        .map(|i| {
            let s = tmp(&format!("{name}-s{i}"));
            seed_standby(&p, &s).unwrap();
            s
        })
        .collect();
    (p, dirs)
}

/// A closed primary and one standby seeded from it.
pub fn setup(name: &str) -> (TmpDir, TmpDir) {
    let (p, mut s) = setup_n(name, 1);
    (p, s.remove(0))
}

/// Starts a standby of `dir` listening on `listen`.
pub fn standby_at(dir: &Path, listen: &str, apply: bool) -> Standby {
    Standby::start(StandbyConfig {
        listen: listen.into(),
        data_dir: dir.to_path_buf(),
        secret: SECRET.to_vec(),
        apply,
        options: options(),
    })
    .unwrap()
}

/// Starts a standby of `dir` on a free loopback port.
pub fn standby(dir: &Path, apply: bool) -> Standby {
    standby_at(dir, "127.0.0.1:0", apply)
}

pub fn config(addrs: Vec<String>, mode: ReplicationMode, policy: StandbyPolicy) -> ReplConfig {
    ReplConfig { standbys: addrs, secret: SECRET.to_vec(), mode, policy, ..ReplConfig::default() }
}

pub fn fail_after(ms: u64) -> StandbyPolicy {
    StandbyPolicy::Fail { timeout: Duration::from_millis(ms) }
}

pub fn c1(db: &Database, k: i64) -> i64 {
    db.table("t").unwrap().read(&Value::Int(k), |r| r.int(1)).unwrap().unwrap()
}

/// The ids in table `acks`.
pub fn ack_ids(db: &Database) -> std::collections::BTreeSet<i64> {
    let mut ids = std::collections::BTreeSet::new();
    db.table("acks")
        .unwrap()
        .scan(|r| {
            ids.insert(r.int(0));
            Ok(true)
        })
        .unwrap();
    ids
}

/// An address nothing listens on.
pub fn dead_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap().to_string();
    drop(l);
    a
}

/// Polls `cond` until it holds or 60 s pass (a bound, not a timing assumption); returns whether
/// it held.
pub fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Commits (auto-commit inserts into `acks`) from `threads` threads until `stop` or an error;
/// returns every acknowledged id with the instant its commit returned.
pub fn write_until(
    db: &Database,
    threads: i64,
    stop: &AtomicBool,
    started: &AtomicI64,
) -> Vec<(i64, Instant)> {
    let acks = db.table("acks").unwrap();
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for th in 0..threads {
            let (acks, out) = (&acks, &out);
            s.spawn(move || {
                for seq in 0.. {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let id = th * 1_000_000_000 + seq;
                    match acks.insert(&[Value::Int(id), Value::Int(seq % 100)]) {
                        Ok(()) => {
                            out.lock().unwrap().push((id, Instant::now()));
                            started.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(_) => return,
                    }
                }
            });
        }
    });
    out.into_inner().unwrap()
}
