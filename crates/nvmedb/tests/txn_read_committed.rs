//! Reads that take no lock see only committed rows: auto-commit `read`, `get`, `read_many`,
//! `range`, `scan` and read-committed transactions, under concurrent writers whose
//! transactions insert, update (growing rows so they move) and delete, and mostly abort.
//!
//! The committed state is known at every moment: "stable" keys always have a row whose `tag`
//! is CLEAN (writers commit only CLEAN rows, and delete stable keys only in transactions that
//! abort); "ghost" keys never have a committed row (only inserted by transactions that abort).
//! A reader that ever sees a DIRTY tag, a ghost row, or a stable key without a row saw
//! uncommitted data. A second test checks that the lock-free path is the one taken: reads of
//! keys nobody writes make no lock request even while a transaction is open. A third holds a
//! transaction's inserts, updates and deletes in flight while every read kind runs: none
//! waits or takes a lock, and each sees the committed rows (the before-images); a
//! read-committed transaction's range scans lock nothing and see its own changes.

mod support;

use nvmedb::io::MemStorage;
use nvmedb::txn::LockMode;
use nvmedb::util::Rng;
use nvmedb::{ColumnType, Database, Isolation, Schema, Table, Value};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const STABLE: i64 = 64;
const GHOSTS: i64 = 32;
const CLEAN: i64 = 0;
const DIRTY: i64 = 1;

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("tag", ColumnType::Int), ("pad", ColumnType::Bytes(600))])
}

fn row(id: i64, tag: i64, len: usize) -> [Value; 3] {
    [Value::Int(id), Value::Int(tag), Value::Bytes(vec![id as u8; len])]
}

fn ghost(i: i64) -> i64 {
    1_000 + i
}

/// One writer's transaction: mostly dirty changes that abort, some clean commits.
fn write_once(db: &Database, t: &Table, rng: &mut Rng, committed: &AtomicU64, aborted: &AtomicU64) {
    let k = rng.below(STABLE as u64) as i64;
    let len = rng.range(1, 600) as usize;
    match rng.below(6) {
        // Auto-commit: a clean update that may move the row.
        0 => {
            t.update(&row(k, CLEAN, len)).unwrap();
            committed.fetch_add(1, Ordering::Relaxed);
        }
        // A clean update in a transaction that commits.
        1 => {
            let mut tx = db.begin();
            match tx.update(t, &row(k, CLEAN, len)) {
                Ok(_) => {
                    tx.commit().unwrap();
                    committed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.is_retryable() => drop(tx),
                Err(e) => panic!("{e}"),
            }
        }
        // Dirty changes that abort: an update, a delete, a ghost insert, several at once.
        n => {
            let mut tx = db.begin();
            let r = (|| -> nvmedb::Result<()> {
                if n == 2 || n == 5 {
                    tx.update(t, &row(k, DIRTY, len))?;
                }
                if n == 3 || n == 5 {
                    tx.delete(t, &Value::Int((k + 1) % STABLE))?;
                }
                if n == 4 || n == 5 {
                    let g = ghost(rng.below(GHOSTS as u64) as i64);
                    tx.insert(t, &row(g, DIRTY, len))?;
                }
                Ok(())
            })();
            if let Err(e) = r {
                assert!(e.is_retryable(), "{e}");
            }
            // Let readers meet the dirty state for a moment.
            std::thread::yield_now();
            tx.abort().unwrap();
            aborted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Checks one row a reader saw (`None`: the key had no row).
fn check(what: &str, key: i64, tag: Option<i64>) {
    let stable = (0..STABLE).contains(&key);
    match tag {
        Some(DIRTY) => panic!("{what}: key {key} showed an uncommitted row"),
        Some(_) if !stable => panic!("{what}: ghost key {key} showed an uncommitted insert"),
        None if stable => panic!("{what}: stable key {key} showed an uncommitted delete"),
        _ => {}
    }
}

fn read_once(db: &Database, t: &Table, rng: &mut Rng) -> u64 {
    let k = if rng.chance(0.7) {
        rng.below(STABLE as u64) as i64
    } else {
        ghost(rng.below(GHOSTS as u64) as i64)
    };
    match rng.below(5) {
        0 => {
            let tag = t.read(&Value::Int(k), |r| r.int(1)).unwrap();
            check("read", k, tag);
            1
        }
        1 => {
            let tag = t.get(&Value::Int(k)).unwrap().map(|r| r[1].as_int().unwrap());
            check("get", k, tag);
            1
        }
        2 => {
            let keys: Vec<Value> =
                (0..40).map(|i| Value::Int(if i % 3 == 0 { ghost(i) } else { i })).collect();
            t.read_many(&keys, |i, r| check("read_many", keys[i].as_int().unwrap(), r.map(|r| r.int(1))))
                .unwrap();
            keys.len() as u64
        }
        3 => {
            // Scans: no row they pass is uncommitted (scan_exact.rs checks that they miss none).
            let mut n = 0;
            t.range(Bound::Included(&Value::Int(0)), Bound::Unbounded, |r| {
                check("range", r.int(0), Some(r.int(1)));
                n += 1;
                Ok(true)
            })
            .unwrap();
            t.scan(|r| {
                check("scan", r.int(0), Some(r.int(1)));
                n += 1;
                Ok(true)
            })
            .unwrap();
            n
        }
        _ => {
            let mut tx = db.begin_with(Isolation::ReadCommitted);
            let tag = tx.read(t, &Value::Int(k), |r| r.int(1)).unwrap();
            check("read-committed transaction", k, tag);
            tx.commit().unwrap();
            1
        }
    }
}

#[test]
fn lock_free_readers_never_see_uncommitted_rows() {
    let seed = support::seed(7);
    let ms = support::iters(1500);
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), support::small_page_options()).unwrap();
    let t = db.create_table("t", schema()).unwrap();
    for k in 0..STABLE {
        t.insert(&row(k, CLEAN, 20)).unwrap();
    }
    let stop = AtomicBool::new(false);
    let (committed, aborted, reads) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let (db, t, stop, committed, aborted) = (&db, &t, &stop, &committed, &aborted);
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((w + 1) * 0x9E37));
                while !stop.load(Ordering::Relaxed) {
                    write_once(db, t, &mut rng, committed, aborted);
                }
            });
        }
        for r in 0..2u64 {
            let (db, t, stop, reads) = (&db, &t, &stop, &reads);
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((r + 100) * 0x51ED));
                while !stop.load(Ordering::Relaxed) {
                    reads.fetch_add(read_once(db, t, &mut rng), Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(ms));
        stop.store(true, Ordering::Relaxed);
    });
    let (c, a, r) = (committed.into_inner(), aborted.into_inner(), reads.into_inner());
    eprintln!("{} ms: {c} commits, {a} aborts, {r} rows read ({})", ms, support::replay(seed, ms));
    assert!(a > 10 && c > 10 && r > 100, "the race ran: {c} commits, {a} aborts, {r} reads");
    assert_eq!(t.check_integrity().unwrap(), STABLE as u64);
    for k in 0..STABLE {
        assert_eq!(t.read(&Value::Int(k), |r| r.int(1)).unwrap(), Some(CLEAN));
    }
}

#[test]
fn reads_of_keys_nobody_writes_take_no_lock_while_a_transaction_is_open() {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), support::small_page_options()).unwrap();
    let t = db.create_table("t", schema()).unwrap();
    for k in 0..STABLE {
        t.insert(&row(k, CLEAN, 20)).unwrap();
    }
    let mut tx = db.begin();
    tx.update(&t, &row(0, DIRTY, 20)).unwrap();
    let before = db.lock_stats().requests;
    // Keys whose stripe key 0's writer does not share: read without a lock request.
    let mut quiet = 0;
    for k in 1..STABLE {
        assert_eq!(t.read(&Value::Int(k), |r| r.int(1)).unwrap(), Some(CLEAN));
        quiet += 1;
    }
    let keys: Vec<Value> = (1..STABLE).map(Value::Int).collect();
    t.read_many(&keys, |_, r| assert_eq!(r.map(|r| r.int(1)), Some(CLEAN))).unwrap();
    let mut rc = db.begin_with(Isolation::ReadCommitted);
    assert_eq!(rc.read(&t, &Value::Int(5), |r| r.int(1)).unwrap(), Some(CLEAN));
    let after = db.lock_stats().requests;
    // At most a stripe collision or two sends a read to the lock.
    assert!(after - before <= 4, "{quiet} reads made {} lock requests", after - before);
    // The key being written: the read does not wait for the writer; it sees the committed
    // row (the before-image) until the commit, and the new row after it.
    assert_eq!(t.read(&Value::Int(0), |r| (r.int(1), r.bytes(2).len())).unwrap(), Some((CLEAN, 20)));
    assert_eq!(db.lock_stats().requests, after, "the read of a key in flight took no lock");
    tx.update(&t, &row(0, CLEAN, 300)).unwrap();
    assert_eq!(t.read(&Value::Int(0), |r| (r.int(1), r.bytes(2).len())).unwrap(), Some((CLEAN, 20)));
    tx.commit().unwrap();
    assert_eq!(t.read(&Value::Int(0), |r| (r.int(1), r.bytes(2).len())).unwrap(), Some((CLEAN, 300)));
    // A read-committed transaction sees its own change.
    rc.update(&t, &row(9, CLEAN, 77)).unwrap();
    assert_eq!(rc.read(&t, &Value::Int(9), |r| r.bytes(2).len()).unwrap(), Some(77));
    rc.commit().unwrap();
}

/// The rows a read sees while `tx`'s changes are in flight, as (key, tag, pad length).
fn seen_rows(db: &Database, t: &Table) -> Vec<(i64, i64, usize)> {
    let mut v = Vec::new();
    t.scan(|r| {
        v.push((r.int(0), r.int(1), r.bytes(2).len()));
        Ok(true)
    })
    .unwrap();
    v.sort_unstable();
    let mut ranged = Vec::new();
    t.range(Bound::Unbounded, Bound::Unbounded, |r| {
        ranged.push((r.int(0), r.int(1), r.bytes(2).len()));
        Ok(true)
    })
    .unwrap();
    let mut by_key = Vec::new();
    let keys: Vec<Value> = (0..STABLE).chain((0..GHOSTS).map(ghost)).map(Value::Int).collect();
    for k in &keys {
        if let Some(r) = t.read(k, |r| (r.int(0), r.int(1), r.bytes(2).len())).unwrap() {
            by_key.push(r);
        }
    }
    let mut many = Vec::new();
    t.read_many(&keys, |_, r| many.extend(r.map(|r| (r.int(0), r.int(1), r.bytes(2).len())))).unwrap();
    let mut rc_rows = Vec::new();
    let mut rc = db.begin_with(Isolation::ReadCommitted);
    for k in &keys {
        rc_rows.extend(rc.read(t, k, |r| (r.int(0), r.int(1), r.bytes(2).len())).unwrap());
    }
    // Its range scans too (shared mode takes no lock in a read-committed transaction).
    let mut rc_ranged = Vec::new();
    rc.range(t, Bound::Unbounded, Bound::Unbounded, LockMode::Shared, |r| {
        rc_ranged.push((r.int(0), r.int(1), r.bytes(2).len()));
        Ok(true)
    })
    .unwrap();
    rc.commit().unwrap();
    assert_eq!(by_key, many, "read_many agrees with read");
    assert_eq!(by_key, rc_ranged, "a read-committed transaction's range scan agrees with read");
    assert_eq!(by_key, rc_rows, "a read-committed transaction agrees with read");
    // Scans and ranges see exactly the committed rows, each once (a row whose delete is in
    // flight, off its page and the index, as its before-image).
    assert_eq!(v, by_key, "scan");
    assert_eq!(ranged, by_key, "range");
    by_key
}

#[test]
fn reads_and_scans_see_committed_rows_without_waiting_for_a_transaction_in_flight() {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), support::small_page_options()).unwrap();
    let t = db.create_table("t", schema()).unwrap();
    for k in 0..STABLE {
        t.insert(&row(k, CLEAN, 20)).unwrap();
    }
    let committed: Vec<_> = (0..STABLE).map(|k| (k, CLEAN, 20)).collect();
    assert_eq!(seen_rows(&db, &t), committed);
    // A transaction with changes of every kind in flight: updates in place and growing (rows
    // move), deletes, inserts, a key changed twice, a key inserted then deleted.
    let mut tx = db.begin();
    for k in 0..8 {
        tx.update(&t, &row(k, DIRTY, if k % 2 == 0 { 20 } else { 590 })).unwrap();
    }
    tx.update(&t, &row(3, DIRTY, 100)).unwrap();
    for k in 8..12 {
        assert!(tx.delete(&t, &Value::Int(k)).unwrap());
    }
    for g in 0..4 {
        tx.insert(&t, &row(ghost(g), DIRTY, 30)).unwrap();
    }
    assert!(tx.delete(&t, &Value::Int(ghost(0))).unwrap());
    let (requests, waits) = (db.lock_stats().requests, db.lock_stats().waits);
    // Every read kind sees the committed rows, and none takes a lock (so none can wait or
    // time out behind the transaction).
    assert_eq!(seen_rows(&db, &t), committed);
    let mut count = 0;
    t.scan(|_| {
        count += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(count, STABLE, "a count by scan (deletes in flight are counted as committed)");
    let stats = db.lock_stats();
    assert_eq!((stats.requests, stats.waits), (requests, waits), "reads took or waited for locks");
    // The transaction sees its own changes; other readers still see the committed rows.
    assert_eq!(tx.read(&t, &Value::Int(3), |r| (r.int(1), r.bytes(2).len())).unwrap(), Some((DIRTY, 100)));
    assert_eq!(tx.read(&t, &Value::Int(8), |r| r.int(1)).unwrap(), None);
    assert_eq!(seen_rows(&db, &t), committed);
    // Rolled back: the same rows, now from the pages.
    tx.abort().unwrap();
    assert_eq!(seen_rows(&db, &t), committed);
    // Committed: the new rows, at once.
    let mut tx = db.begin_with(Isolation::ReadCommitted);
    tx.update(&t, &row(1, CLEAN, 400)).unwrap();
    tx.delete(&t, &Value::Int(2)).unwrap();
    tx.insert(&t, &row(ghost(1), CLEAN, 10)).unwrap();
    assert_eq!(seen_rows(&db, &t), committed);
    let mut now: Vec<_> = committed.iter().copied().filter(|r| r.0 != 2).collect();
    now[1] = (1, CLEAN, 400);
    now.push((ghost(1), CLEAN, 10));
    // The transaction's own range scan sees its changes, and locks nothing more.
    let requests = db.lock_stats().requests;
    let mut own = Vec::new();
    tx.range(&t, Bound::Unbounded, Bound::Unbounded, LockMode::Shared, |r| {
        own.push((r.int(0), r.int(1), r.bytes(2).len()));
        Ok(true)
    })
    .unwrap();
    assert_eq!(own, now, "a read-committed range scan sees its own transaction's changes");
    assert_eq!(db.lock_stats().requests, requests, "a read-committed range scan took locks");
    tx.commit().unwrap();
    assert_eq!(seen_rows(&db, &t), now);
    assert_eq!(t.check_integrity().unwrap(), STABLE as u64);
}
