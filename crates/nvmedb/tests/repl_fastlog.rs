//! A primary over the fast log, replicating eagerly, with a conventional ring so small that a
//! checkpoint comes every few hundred commits and writers run out of ring space while one is
//! under way. Three waits once closed a circle there: a writer blocked for ring space kept the
//! shipper from the standby (the checkpoint's page flush waits for it); the checkpoint's record
//! waited for ring space behind such writers; and a writer blocked for ring space held the page
//! latches of its mini-transaction, which the checkpoint's flush waits for. Shippers now never
//! wait for a local append, and mini-transactions pass the fast log's space gate before they
//! latch anything, so the checkpoint always finds its pages and its record's space. Every commit
//! returns, reaches the standby and is there after promotion.
//!
//! Iterations: `NVMEDB_TEST_ITERS` (default 1; a hang fails after 120 s with both sides'
//! status).

mod repl_common;

use nvmedb::io::{DirStorage, FileOptions, Storage};
use nvmedb::repl::{open_primary_with, seed_standby, ReplicationMode};
use nvmedb::wal::{LogOpener, RecordLog};
use nvmedb::xlog::XLogOpener;
use nvmedb::{BufferSize, ColumnType, Database, FastLogOptions, Options, Schema, Value};
use repl_common::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const CLIENTS: i64 = 8;
const UPDATES: i64 = 600;

/// The fast log of the database in `dir`: 64 KiB ring, 96-page (384 KiB) conventional ring.
fn fast_log(dir: &Path) -> Box<dyn LogOpener> {
    let mut config = FastLogOptions {
        ring_bytes: 64 << 10,
        queue_bytes: 8 << 10,
        conv_pages: 96,
        ..FastLogOptions::default()
    }
    .xlog_config(dir);
    config.retention_timeout = Duration::from_secs(60);
    Box::new(XLogOpener { storage: storage(&dir.join("xlog")), config })
}

fn storage(dir: &Path) -> Arc<dyn Storage> {
    Arc::new(DirStorage::new(dir, FileOptions::default()).unwrap())
}

#[test]
fn a_fast_log_primary_replicates_through_checkpoints_while_writers_wait_for_ring_space() {
    let iters: usize = std::env::var("NVMEDB_TEST_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    for i in 0..iters {
        let gate_waits = one_run();
        eprintln!("iteration {i}: {gate_waits} space-gate waits");
    }
}

/// One run; returns how often a mini-transaction waited at the space gate.
fn one_run() -> u64 {
    let (p, s) = (tmp("fastlog-p"), tmp("fastlog-s"));
    // Every page stays in the buffer: each checkpoint flushes all of them.
    let opts = Options { table_buffer: BufferSize::Bytes(1 << 20), ..options() };
    {
        let db = Database::open(&p, Options { wal: false, ..opts.clone() }).unwrap();
        let schema = Schema::new(vec![
            ("sid", ColumnType::Int),
            ("c1", ColumnType::Int),
            ("data", ColumnType::Char(200)),
        ]);
        let t = db.create_table("t", schema).unwrap();
        for i in 0..ROWS {
            t.insert(&[Value::Int(i), Value::Int(0), Value::from("x")]).unwrap();
        }
        drop(t);
        db.close().unwrap();
    }
    // The copy gets its fast log before the standby is seeded from it.
    Database::open_with_log(storage(&p), Some(fast_log(&p)), opts.clone()).unwrap().close().unwrap();
    seed_standby(&p, &s).unwrap();
    let sb = standby(&s, true);
    let (db, rlog) = open_primary_with(
        storage(&p),
        fast_log(&p),
        &p,
        opts,
        config(vec![sb.addr().to_string()], ReplicationMode::Eager, fail_after(60_000)),
        None,
    )
    .unwrap();
    let db = Arc::new(db);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut threads = Vec::new();
    for c in 0..CLIENTS {
        let (db, tx) = (db.clone(), tx.clone());
        threads.push(std::thread::spawn(move || {
            let t = db.table("t").unwrap();
            let r = (0..UPDATES).try_for_each(|i| {
                let k = c + CLIENTS * (i % (ROWS / CLIENTS));
                t.update_int(&Value::Int(k), 1, i).map(drop)
            });
            let _ = tx.send((c, r));
        }));
    }
    drop(tx);
    for _ in 0..CLIENTS {
        // A hang is the defect: say so with the state of both sides instead of waiting forever.
        let (c, r) = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("clients hang: {}\nstandby: {}", rlog.status(), sb.status()));
        r.unwrap_or_else(|e| panic!("client {c}: {e}"));
    }
    for th in threads {
        th.join().unwrap();
    }
    let gate_waits = rlog.stats().space_gate_waits;
    let st = rlog.status();
    assert!(st.standbys[0].shadow >= st.durable, "eager: {st}");
    let db = Arc::into_inner(db).expect("the clients are done");
    drop(rlog);
    db.close().unwrap();
    let (db2, _) = sb.promote().unwrap();
    for k in 0..ROWS {
        let last = (0..UPDATES).filter(|i| k % CLIENTS + CLIENTS * (i % (ROWS / CLIENTS)) == k).max();
        assert_eq!(c1(&db2, k), last.unwrap_or(0), "row {k} after promotion");
    }
    db2.table("t").unwrap().check_integrity().unwrap();
    db2.close().unwrap();
    let _ = std::fs::remove_file(XLogOpener::default_ring_path(&p));
    let _ = std::fs::remove_dir_all(&p);
    let _ = std::fs::remove_dir_all(&s);
    gate_waits
}
