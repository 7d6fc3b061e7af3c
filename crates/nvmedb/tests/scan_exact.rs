//! Scans, ranges, counts and secondary-index lookups that take no lock are exact under
//! concurrent writers: every row committed when the read passes its key is seen exactly once,
//! as last committed, and no uncommitted row is seen.
//!
//! The committed state of every key is known at every moment, so each read checks it whole:
//! - "stable" keys `0..STABLE` always have a committed row whose `bal` is `bal(key)` and whose
//!   indexed `grp` is `key % GROUPS`; committed changes only rewrite their padding (growing
//!   rows move to other pages), while transactions that abort change them every way at once:
//!   delete them, grow them, change `bal` and the indexed `grp` (the index entry moves), and
//!   insert "ghost" keys that never commit;
//! - "churn" keys are inserted and deleted by committed auto-commit changes: a read may see
//!   them or not, but only as committed rows (group [`CHURN_GROUP`], `bal` 0).
//!
//! Each full scan, range and count must then see exactly the stable keys, each once, in key
//! order, with the constant sum of their `bal`; each lookup of a group exactly its stable
//! keys. Before the reads merged the writers' before-images into each index leaf they passed,
//! a scan missed a stable row whose delete was in flight and saw a moved row twice.

mod support;

use nvmedb::io::MemStorage;
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Table, Value};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const STABLE: i64 = 96;
const GROUPS: i64 = 6;
const CHURN_GROUP: i64 = 100;
const GHOST_GROUP: i64 = 2;

fn ghost(i: i64) -> i64 {
    10_000 + 2 * i
}

fn churn(i: i64) -> i64 {
    10_001 + 2 * i
}

fn bal(key: i64) -> i64 {
    1_000 + key * 7
}

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(256 * 4096),
        index_buffer: BufferSize::Bytes(256 * 4096),
        ..Options::default()
    }
}

fn open() -> (Database, Table) {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), options()).unwrap();
    let schema = Schema::new(vec![
        ("id", ColumnType::Int),
        ("grp", ColumnType::Int),
        ("bal", ColumnType::Int),
        ("pad", ColumnType::Bytes(900)),
    ])
    .with_index("by_grp", "grp")
    .unwrap();
    let t = db.create_table("t", schema).unwrap();
    for k in 0..STABLE {
        t.insert(&row(k, k % GROUPS, bal(k), 10)).unwrap();
    }
    (db, t)
}

fn row(id: i64, grp: i64, bal: i64, len: usize) -> [Value; 4] {
    [Value::Int(id), Value::Int(grp), Value::Int(bal), Value::Bytes(vec![id as u8; len])]
}

/// One writer's transaction; returns true if it committed.
fn write_once(db: &Database, t: &Table, rng: &mut Rng) -> bool {
    let k = rng.below(STABLE as u64) as i64;
    let len = rng.range(1, 900) as usize;
    match rng.below(8) {
        // Committed: the row's padding rewritten (it moves when it grows).
        0 => t.update(&row(k, k % GROUPS, bal(k), len)).unwrap(),
        // Committed: two rows rewritten in one transaction.
        1 => {
            let mut tx = db.begin();
            let k2 = (k + 1 + rng.below(STABLE as u64 - 1) as i64) % STABLE;
            let r = tx
                .update(t, &row(k, k % GROUPS, bal(k), len))
                .and_then(|_| tx.update(t, &row(k2, k2 % GROUPS, bal(k2), 900 - len)));
            match r {
                Ok(_) => tx.commit().map(|()| true).unwrap(),
                Err(e) if e.is_retryable() => false,
                Err(e) => panic!("{e}"),
            }
        }
        // Committed churn: a row inserted or deleted on its own.
        2 => {
            let c = churn(rng.below(16) as i64);
            if t.delete(&Value::Int(c)).unwrap() {
                return true;
            }
            match t.insert(&row(c, CHURN_GROUP, 0, len)) {
                Ok(()) => true,
                Err(nvmedb::Error::AlreadyExists(_)) => false,
                Err(e) => panic!("{e}"),
            }
        }
        // Aborted: every kind of change held in flight for a moment.
        n => {
            let mut tx = db.begin();
            let r = (|| -> nvmedb::Result<()> {
                let k2 = (k + 1) % STABLE;
                match n {
                    // The indexed column and the balance change; the row grows or shrinks.
                    3 => {
                        tx.update(t, &row(k, (k + 1 + rng.below(3) as i64) % GROUPS, -1, len))?;
                    }
                    4 => {
                        tx.delete(t, &Value::Int(k))?;
                    }
                    5 => {
                        tx.insert(t, &row(ghost(rng.below(16) as i64), GHOST_GROUP, 5, len))?;
                    }
                    6 => {
                        // A row deleted and its key inserted again with other values.
                        tx.delete(t, &Value::Int(k))?;
                        tx.insert(t, &row(k, (k + 2) % GROUPS, 3, len))?;
                    }
                    _ => {
                        tx.update(t, &row(k, k % GROUPS, bal(k), 900))?;
                        tx.update(t, &row(k, (k + 3) % GROUPS, 7, 5))?;
                        tx.delete(t, &Value::Int(k2))?;
                        tx.insert(t, &row(ghost(rng.below(16) as i64), k % GROUPS, 9, len))?;
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                assert!(e.is_retryable(), "{e}");
            }
            // Let readers meet the state in flight.
            std::thread::yield_now();
            tx.abort().unwrap();
            false
        }
    }
}

/// Checks the rows of a full read, as (key, grp, bal) in the order the read passed them.
fn check_full(what: &str, rows: &[(i64, i64, i64)]) {
    let mut expect = 0;
    let mut sum = 0;
    let mut last = i64::MIN;
    for &(k, g, b) in rows {
        assert!(k > last, "{what}: key {k} after key {last} (twice, or out of order)");
        last = k;
        if k < STABLE {
            assert_eq!(k, expect, "{what}: stable key {expect} missing");
            assert_eq!((g, b), (k % GROUPS, bal(k)), "{what}: key {k} showed an uncommitted change");
            expect += 1;
            sum += b;
        } else {
            assert_eq!(k % 2, 1, "{what}: ghost key {k} showed an uncommitted insert");
            assert_eq!((g, b), (CHURN_GROUP, 0), "{what}: churn key {k}");
        }
    }
    assert_eq!(expect, STABLE, "{what}: stable keys from {expect} on missing");
    assert_eq!(sum, (0..STABLE).map(bal).sum::<i64>(), "{what}: the sum of balances");
}

/// One read of a kind picked at random, checked whole; returns the rows it saw.
fn read_once(t: &Table, rng: &mut Rng) -> u64 {
    let fields = |r: nvmedb::RowView<'_>| (r.int(0), r.int(1), r.int(2));
    match rng.below(5) {
        0 => {
            let mut rows = Vec::new();
            t.scan(|r| {
                rows.push(fields(r));
                Ok(true)
            })
            .unwrap();
            check_full("scan", &rows);
            rows.len() as u64
        }
        1 => {
            // A range over the stable keys and beyond.
            let lo = rng.below(STABLE as u64) as i64;
            let mut rows: Vec<_> = (0..lo).map(|k| (k, k % GROUPS, bal(k))).collect();
            t.range(Bound::Included(&Value::Int(lo)), Bound::Unbounded, |r| {
                rows.push(fields(r));
                Ok(true)
            })
            .unwrap();
            check_full("range", &rows);
            rows.len() as u64
        }
        2 => {
            // A count by primary keys (the index only).
            let mut stable = 0;
            let mut last = None;
            t.primary_keys(Bound::Unbounded, Bound::Excluded(&Value::Int(STABLE)), |k| {
                assert!(last.as_deref() < Some(k), "count: a key twice");
                last = Some(k.to_vec());
                stable += 1;
                Ok(true)
            })
            .unwrap();
            assert_eq!(stable, STABLE, "count of the stable keys");
            stable as u64
        }
        3 => {
            // A lookup by the secondary index: exactly the group's stable keys.
            let g = rng.below(GROUPS as u64) as i64;
            let rows = t.lookup("by_grp", &Value::Int(g)).unwrap();
            let got: Vec<(i64, i64, i64)> = rows
                .iter()
                .map(|r| (r[0].as_int().unwrap(), r[1].as_int().unwrap(), r[2].as_int().unwrap()))
                .collect();
            let expect: Vec<_> = (0..STABLE).filter(|k| k % GROUPS == g).map(|k| (k, g, bal(k))).collect();
            assert_eq!(got, expect, "lookup of group {g}");
            rows.len() as u64
        }
        _ => {
            // A secondary range over every stable group: each stable key once.
            let mut keys = Vec::new();
            t.index_keys(0, Bound::Included(&Value::Int(0)), Bound::Excluded(&Value::Int(GROUPS)), |k| {
                keys.push(nvmedb::btree::key::decode_i64(k).unwrap());
                Ok(true)
            })
            .unwrap();
            let n = keys.len() as u64;
            keys.sort_unstable();
            assert_eq!(keys, (0..STABLE).collect::<Vec<_>>(), "secondary range over the stable groups");
            n
        }
    }
}

#[test]
fn scans_ranges_counts_and_lookups_are_exact_under_writers_that_abort() {
    let seed = support::seed(11);
    let ms = support::iters(1500);
    let (db, t) = open();
    let stop = AtomicBool::new(false);
    let (committed, aborted, reads, rows) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let (db, t, stop, committed, aborted) = (&db, &t, &stop, &committed, &aborted);
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((w + 1) * 0x9E37));
                while !stop.load(Ordering::Relaxed) {
                    let c = if write_once(db, t, &mut rng) { committed } else { aborted };
                    c.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for r in 0..2u64 {
            let (t, stop, reads, rows) = (&t, &stop, &reads, &rows);
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((r + 100) * 0x51ED));
                while !stop.load(Ordering::Relaxed) {
                    rows.fetch_add(read_once(t, &mut rng), Ordering::Relaxed);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(ms));
        stop.store(true, Ordering::Relaxed);
    });
    let (c, a, r, n) = (committed.into_inner(), aborted.into_inner(), reads.into_inner(), rows.into_inner());
    eprintln!("{ms} ms: {c} commits, {a} aborts, {r} reads of {n} rows ({})", support::replay(seed, ms));
    assert!(a > 10 && c > 10 && r > 10, "the race ran: {c} commits, {a} aborts, {r} reads");
    let stable = t.check_integrity().unwrap();
    assert!(stable >= STABLE as u64, "{stable} rows");
    let mut rows = Vec::new();
    t.scan(|r| {
        rows.push((r.int(0), r.int(1), r.int(2)));
        Ok(true)
    })
    .unwrap();
    check_full("final scan", &rows);
}

/// Every kind of change held in flight at once, with the reads run in between: each read
/// sees exactly the committed rows; after the rollback and after a commit, likewise.
#[test]
fn reads_merge_the_before_images_of_every_kind_of_change_in_flight() {
    let (db, t) = open();
    let full = |t: &Table| {
        let mut rows = Vec::new();
        t.scan(|r| {
            rows.push((r.int(0), r.int(1), r.int(2)));
            Ok(true)
        })
        .unwrap();
        check_full("scan", &rows);
        let mut ranged = Vec::new();
        t.range(Bound::Unbounded, Bound::Unbounded, |r| {
            ranged.push((r.int(0), r.int(1), r.int(2)));
            Ok(true)
        })
        .unwrap();
        assert_eq!(rows, ranged, "range and scan agree");
        for g in 0..GROUPS {
            let got: Vec<i64> =
                t.lookup("by_grp", &Value::Int(g)).unwrap().iter().map(|r| r[0].as_int().unwrap()).collect();
            assert_eq!(got, (0..STABLE).filter(|k| k % GROUPS == g).collect::<Vec<_>>(), "group {g}");
        }
        let mut n = 0;
        t.index_keys(0, Bound::Unbounded, Bound::Unbounded, |_| {
            n += 1;
            Ok(true)
        })
        .unwrap();
        n
    };
    assert_eq!(full(&t), STABLE);
    let mut tx = db.begin();
    // Deletes (the rows leave their pages and every index), growing updates that move the
    // row and its index entry, a key deleted and inserted again elsewhere, ghost inserts.
    for k in 0..6 {
        assert!(tx.delete(&t, &Value::Int(k)).unwrap());
    }
    for k in 6..16 {
        tx.update(&t, &row(k, (k + 1) % GROUPS, -5, 900)).unwrap();
    }
    tx.insert(&t, &row(3, 1, 4, 800)).unwrap();
    for g in 0..8 {
        tx.insert(&t, &row(ghost(g), (g % GROUPS).max(1), 1, 50)).unwrap();
    }
    assert_eq!(full(&t), STABLE, "with every kind of change in flight");
    tx.abort().unwrap();
    assert_eq!(full(&t), STABLE, "after the rollback");
    // Committed: the churn rows appear, the stable ones are as before.
    let mut tx = db.begin();
    tx.insert(&t, &row(churn(0), CHURN_GROUP, 0, 10)).unwrap();
    tx.update(&t, &row(7, 7 % GROUPS, bal(7), 899)).unwrap();
    assert_eq!(full(&t), STABLE);
    tx.commit().unwrap();
    assert_eq!(full(&t), STABLE + 1);
    assert_eq!(t.check_integrity().unwrap(), STABLE as u64 + 1);
}
