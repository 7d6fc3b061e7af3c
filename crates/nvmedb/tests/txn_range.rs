//! Range scans inside transactions: `Transaction::range` (primary key) and
//! `Transaction::index_range` (secondary index, Int and Bytes columns) against a `BTreeMap`
//! model under random bounds; rows are locked as they are visited; a row deleted or moved out
//! of the range while the scan waited for its lock is skipped, and a row whose delete or move
//! is in flight is waited for, not passed over.

use nvmedb::txn::{LockMode, LockOptions};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Error, Options, Schema, Table, Value};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

fn options(lock_timeout: Duration) -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(64 * 4096),
        index_buffer: BufferSize::Bytes(256 * 4096),
        lock_options: LockOptions { lock_timeout, ..LockOptions::default() },
        ..Options::default()
    }
}

/// A database with table `t` (id, grp, name) indexed by grp and by name.
fn open_with(lock_timeout: Duration) -> (Database, Table) {
    let db =
        Database::open_with_storage(Arc::new(nvmedb::io::MemStorage::new()), options(lock_timeout)).unwrap();
    let schema =
        Schema::new(vec![("id", ColumnType::Int), ("grp", ColumnType::Int), ("name", ColumnType::Bytes(12))])
            .with_index("by_grp", "grp")
            .unwrap()
            .with_index("by_name", "name")
            .unwrap();
    let t = db.create_table("t", schema).unwrap();
    (db, t)
}

fn open() -> (Database, Table) {
    open_with(Duration::from_secs(30))
}

fn random_bound<T: Clone>(rng: &mut Rng, v: T) -> Bound<T> {
    match rng.below(3) {
        0 => Bound::Included(v),
        1 => Bound::Excluded(v),
        _ => Bound::Unbounded,
    }
}

fn random_name(rng: &mut Rng) -> Vec<u8> {
    // Short names over a small alphabet with zero bytes, so prefixes and escapes both occur.
    let len = rng.below(4) as usize;
    (0..len).map(|_| [0u8, b'a', b'b', 0xFF][rng.below(4) as usize]).collect()
}

/// Rows: id → (grp, name). Every scan of the engine equals a filter of the model.
#[test]
fn range_and_index_range_match_a_model_under_random_bounds() {
    let (db, t) = open();
    let mut rng = Rng::new(7);
    let mut model: BTreeMap<i64, (i64, Vec<u8>)> = BTreeMap::new();
    for _ in 0..600 {
        let id = rng.below(2000) as i64 - 1000;
        let grp = rng.below(20) as i64 - 10;
        let name = random_name(&mut rng);
        if model.insert(id, (grp, name.clone())).is_some() {
            t.update(&[Value::Int(id), Value::Int(grp), Value::Bytes(name)]).unwrap();
        } else {
            t.insert(&[Value::Int(id), Value::Int(grp), Value::Bytes(name)]).unwrap();
        }
    }
    for round in 0..300 {
        let mut tx = db.begin();
        // Primary key.
        let (a, b) = (rng.below(2200) as i64 - 1100, rng.below(2200) as i64 - 1100);
        let (lo, hi) = (random_bound(&mut rng, Value::Int(a)), random_bound(&mut rng, Value::Int(b)));
        let limit = 1 + rng.below(100) as usize;
        let mut got = Vec::new();
        tx.range(&t, lo.as_ref(), hi.as_ref(), LockMode::Shared, |r| {
            got.push(r.int(0));
            Ok(got.len() < limit)
        })
        .unwrap();
        let as_int = |b: &Bound<Value>| b.as_ref().map(|v| v.as_int().unwrap());
        let want: Vec<i64> = if matches!((&lo, &hi), (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) if x > y)
        {
            Vec::new()
        } else {
            model.range((as_int(&lo), as_int(&hi))).map(|(k, _)| *k).take(limit).collect()
        };
        assert_eq!(got, want, "round {round}: range {lo:?}..{hi:?} limit {limit}");
        // Int secondary index: (grp, id) order.
        let (a, b) = (rng.below(24) as i64 - 12, rng.below(24) as i64 - 12);
        let (lo, hi) = (random_bound(&mut rng, Value::Int(a)), random_bound(&mut rng, Value::Int(b)));
        let mut got = Vec::new();
        tx.index_range(&t, "by_grp", lo.as_ref(), hi.as_ref(), LockMode::Shared, |r| {
            got.push((r.int(1), r.int(0)));
            Ok(true)
        })
        .unwrap();
        let mut want: Vec<(i64, i64)> = model
            .iter()
            .filter(|(_, (g, _))| (as_int(&lo), as_int(&hi)).contains(g))
            .map(|(id, (g, _))| (*g, *id))
            .collect();
        want.sort();
        assert_eq!(got, want, "round {round}: by_grp {lo:?}..{hi:?}");
        // Bytes secondary index: (name, id) order.
        let (a, b) = (random_name(&mut rng), random_name(&mut rng));
        let (lo, hi) = (random_bound(&mut rng, a), random_bound(&mut rng, b));
        let vb = |b: &Bound<Vec<u8>>| b.clone().map(Value::Bytes);
        let mut got = Vec::new();
        tx.index_range(&t, "by_name", vb(&lo).as_ref(), vb(&hi).as_ref(), LockMode::Shared, |r| {
            got.push((r.bytes(2).to_vec(), r.int(0)));
            Ok(true)
        })
        .unwrap();
        let mut want: Vec<(Vec<u8>, i64)> = model
            .iter()
            .filter(|(_, (_, n))| (lo.as_ref(), hi.as_ref()).contains(&n))
            .map(|(id, (_, n))| (n.clone(), *id))
            .collect();
        want.sort();
        assert_eq!(got, want, "round {round}: by_name {lo:?}..{hi:?}");
        tx.commit().unwrap();
    }
}

use std::ops::RangeBounds;

/// A prefix of a Bytes value selects exactly the values that start with it.
#[test]
fn bytes_prefix_selects_exactly_its_extensions() {
    let (db, t) = open();
    let names: [&[u8]; 7] = [b"ab", b"ab\0", b"ab\0\xff", b"abz", b"ac", b"a", b"ab\xff\xff"];
    for (i, n) in names.iter().enumerate() {
        t.insert(&[Value::Int(i as i64), Value::Int(0), Value::Bytes(n.to_vec())]).unwrap();
    }
    let mut tx = db.begin();
    let (lo, hi) = (Value::from("ab"), Value::from("ac"));
    let mut got = Vec::new();
    tx.index_range(&t, "by_name", Bound::Included(&lo), Bound::Excluded(&hi), LockMode::Shared, |r| {
        got.push(r.int(0));
        Ok(true)
    })
    .unwrap();
    assert_eq!(got, [0, 1, 2, 3, 6]); // "ab" < "ab\0" < "ab\0\xff" < "abz" < "ab\xff\xff"
    tx.commit().unwrap();
}

/// Rows visited in Exclusive mode stay locked until the transaction ends; rows the scan has
/// not reached are free; after commit a writer gets through.
#[test]
fn exclusive_scan_locks_what_it_visits_until_the_end() {
    let (db, t) = open_with(Duration::from_millis(100));
    for id in 0..10 {
        t.insert(&[Value::Int(id), Value::Int(id % 3), Value::from("x")]).unwrap();
    }
    let mut tx = db.begin();
    let mut seen = Vec::new();
    tx.range(&t, Bound::Included(&Value::Int(2)), Bound::Unbounded, LockMode::Exclusive, |r| {
        seen.push(r.int(0));
        Ok(seen.len() < 3)
    })
    .unwrap();
    assert_eq!(seen, [2, 3, 4]);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut other = db.begin();
            let e = other.update(&t, &[Value::Int(3), Value::Int(9), Value::from("y")]).unwrap_err();
            assert!(matches!(e, Error::LockTimeout { .. }), "{e}");
            other.abort().unwrap();
            let mut other = db.begin();
            assert!(other.update(&t, &[Value::Int(5), Value::Int(9), Value::from("y")]).unwrap());
            other.commit().unwrap();
        });
    });
    tx.commit().unwrap();
    assert!(t.update(&[Value::Int(3), Value::Int(9), Value::from("y")]).unwrap());
}

/// A scan that waits for a row's lock skips the row if its holder deleted it, and a secondary
/// scan skips a row whose value left the range; both see the rows that are still there.
#[test]
fn rows_deleted_or_moved_while_waiting_are_skipped() {
    let (db, t) = open();
    for id in 0..6 {
        t.insert(&[Value::Int(id), Value::Int(1), Value::from("x")]).unwrap();
    }
    let mut writer = db.begin();
    assert!(writer.delete(&t, &Value::Int(1)).unwrap());
    assert!(writer.update(&t, &[Value::Int(2), Value::Int(7), Value::from("x")]).unwrap());
    let waits_before = db.lock_stats().waits;
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut tx = db.begin();
            let mut by_pk = Vec::new();
            tx.range(&t, Bound::Unbounded, Bound::Unbounded, LockMode::Shared, |r| {
                by_pk.push(r.int(0));
                Ok(true)
            })
            .unwrap();
            let mut by_grp = Vec::new();
            let one = Value::Int(1);
            tx.index_range(
                &t,
                "by_grp",
                Bound::Included(&one),
                Bound::Included(&one),
                LockMode::Shared,
                |r| {
                    by_grp.push(r.int(0));
                    Ok(true)
                },
            )
            .unwrap();
            tx.commit().unwrap();
            (by_pk, by_grp)
        });
        // The scan waits for row 1 (the lock timeout is far away); then its holder commits.
        while db.lock_stats().waits == waits_before {
            std::thread::yield_now();
        }
        writer.commit().unwrap();
        let (by_pk, by_grp) = h.join().unwrap();
        assert_eq!(by_pk, [0, 2, 3, 4, 5]);
        assert_eq!(by_grp, [0, 3, 4, 5]);
    });
}

/// A scan reaches a row whose delete, or whose move out of the range, another transaction has
/// in flight: it waits for the row's lock instead of passing over it, and sees the row when the
/// writer rolls back. (A scan that passed over it would, in TPC-C's Delivery, deliver a
/// district's second-oldest order while the oldest stayed undelivered if the other Delivery
/// then rolled back or was lost in a crash.)
#[test]
fn rows_whose_delete_is_in_flight_are_waited_for_and_seen_after_a_rollback() {
    let (db, t) = open();
    for id in 0..6 {
        t.insert(&[Value::Int(id), Value::Int(1), Value::from("x")]).unwrap();
    }
    let one = Value::Int(1);
    scan_around_a_rolled_back_change(
        &db,
        "range from key 1, first row",
        |w| assert!(w.delete(&t, &one).unwrap()),
        |tx| {
            let mut first = Vec::new();
            tx.range(&t, Bound::Included(&one), Bound::Unbounded, LockMode::Exclusive, |r| {
                first.push(r.int(0));
                Ok(false)
            })
            .unwrap();
            first
        },
        &[1],
    );
    scan_around_a_rolled_back_change(
        &db,
        "index range grp = 1",
        |w| assert!(w.update(&t, &[Value::Int(1), Value::Int(7), Value::from("x")]).unwrap()),
        |tx| {
            let mut rows = Vec::new();
            tx.index_range(
                &t,
                "by_grp",
                Bound::Included(&one),
                Bound::Included(&one),
                LockMode::Exclusive,
                |r| {
                    rows.push(r.int(0));
                    Ok(true)
                },
            )
            .unwrap();
            rows
        },
        &[0, 1, 2, 3, 4, 5],
    );
}

/// Runs `change` in a transaction, then `scan` in another thread's transaction until it waits
/// for a lock (or, the defect, finishes without waiting), then rolls `change` back and checks
/// that the scan saw `want`.
fn scan_around_a_rolled_back_change(
    db: &Database,
    what: &str,
    change: impl FnOnce(&mut nvmedb::Transaction),
    scan: impl FnOnce(&mut nvmedb::Transaction) -> Vec<i64> + Send,
    want: &[i64],
) {
    let mut writer = db.begin();
    change(&mut writer);
    let waits_before = db.lock_stats().waits;
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut tx = db.begin();
            let seen = scan(&mut tx);
            tx.commit().unwrap();
            seen
        });
        while db.lock_stats().waits == waits_before && !h.is_finished() {
            std::thread::yield_now();
        }
        writer.abort().unwrap();
        assert_eq!(
            h.join().unwrap(),
            want,
            "{what}: the scan passed over the row whose change was in flight"
        );
    });
}

/// A secondary range over a nullable `Int32` column and over a `Text` column: the primary key
/// is found after the typed, null-tagged value component, so every row comes back whole, NULLs
/// sort last, and a bounded range never reaches them.
#[test]
fn index_range_over_typed_nullable_columns() {
    let db = Database::open_with_storage(
        Arc::new(nvmedb::io::MemStorage::new()),
        options(Duration::from_secs(30)),
    )
    .unwrap();
    let schema = Schema::new(vec![
        ("id", ColumnType::Int),
        ("score", ColumnType::Int32),
        ("tag", ColumnType::Text(16)),
    ])
    .with_nullable("score")
    .unwrap()
    .with_index("by_score", "score")
    .unwrap()
    .with_index("by_tag", "tag")
    .unwrap();
    let t = db.create_table("t", schema).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = Rng::new(7);
    for id in 0..300i64 {
        let score = if rng.below(5) == 0 { Value::Null } else { Value::Int(rng.below(40) as i64 - 20) };
        let tag = format!("t{}", rng.below(30));
        t.insert(&[Value::Int(id), score.clone(), Value::from(tag.as_str())]).unwrap();
        model.insert(id, (score, tag));
    }
    let mut tx = db.begin();
    for (lo, hi) in [(-5i64, 5i64), (-20, -19), (10, 30)] {
        let mut got = Vec::new();
        tx.index_range(
            &t,
            "by_score",
            Bound::Included(&Value::Int(lo)),
            Bound::Excluded(&Value::Int(hi)),
            LockMode::Shared,
            |row| {
                got.push((row.int(1), row.int(0)));
                Ok(true)
            },
        )
        .unwrap();
        let mut want: Vec<(i64, i64)> = model
            .iter()
            .filter_map(|(id, (s, _))| s.as_int().filter(|s| (lo..hi).contains(s)).map(|s| (s, *id)))
            .collect();
        want.sort();
        assert_eq!(got, want, "score in {lo}..{hi}");
    }
    let mut all = Vec::new();
    tx.index_range(&t, "by_score", Bound::Unbounded, Bound::Unbounded, LockMode::Shared, |row| {
        all.push(row.is_null(1));
        Ok(true)
    })
    .unwrap();
    assert_eq!(all.len(), model.len());
    let first_null = all.iter().position(|n| *n).unwrap_or(all.len());
    assert!(all[first_null..].iter().all(|n| *n), "NULLs sort last");
    let mut tags = Vec::new();
    tx.index_range(
        &t,
        "by_tag",
        Bound::Included(&Value::from("t1")),
        Bound::Included(&Value::from("t2")),
        LockMode::Shared,
        |row| {
            tags.push(String::from_utf8(row.bytes(2).to_vec()).unwrap());
            Ok(true)
        },
    )
    .unwrap();
    let want = model.values().filter(|(_, g)| g.as_str() >= "t1" && g.as_str() <= "t2").count();
    assert_eq!(tags.len(), want);
    assert!(tags.windows(2).all(|w| w[0] <= w[1]));
    tx.commit().unwrap();
}

/// A change outside a transaction (`Table::insert`, `Table::update`) that makes an index entry
/// within a range a serializable scan read waits for the scanning transaction, as a
/// transaction's change does: the scan sees no phantom; once its transaction ends the change
/// goes through. A change outside the ranges read does not wait.
#[test]
fn auto_commit_changes_wait_for_the_ranges_serializable_scans_read() {
    let (db, t) = open_with(Duration::from_millis(100));
    let row = |id: i64, grp: i64, name: &str| [Value::Int(id), Value::Int(grp), Value::from(name)];
    for id in [1, 5, 9] {
        t.insert(&row(id, id % 2, "x")).unwrap();
    }
    let scan = |tx: &mut nvmedb::Transaction| {
        let (mut ids, mut grps) = (Vec::new(), Vec::new());
        tx.range(
            &t,
            Bound::Included(&Value::Int(2)),
            Bound::Included(&Value::Int(8)),
            LockMode::Shared,
            |r| {
                ids.push(r.int(0));
                Ok(true)
            },
        )
        .unwrap();
        let (lo, hi) = (Value::Int(2), Value::Int(3));
        tx.index_range(&t, "by_grp", Bound::Included(&lo), Bound::Included(&hi), LockMode::Shared, |r| {
            grps.push(r.int(0));
            Ok(true)
        })
        .unwrap();
        (ids, grps)
    };
    let mut tx = db.begin();
    assert_eq!(scan(&mut tx), (vec![5], vec![]));
    // Into the primary-key range read: waits for `tx` (which this thread holds open: until the
    // lock timeout).
    let e = t.insert(&row(3, 0, "y")).unwrap_err();
    assert!(e.is_retryable(), "an insert into a range read went ahead or failed otherwise: {e}");
    // Row 9 into the secondary range read.
    let e = t.update(&row(9, 2, "x")).unwrap_err();
    assert!(e.is_retryable(), "an update into a range read went ahead or failed otherwise: {e}");
    // Outside both ranges: no wait.
    t.insert(&row(20, 0, "z")).unwrap();
    assert!(t.update(&row(1, 0, "w")).unwrap());
    assert_eq!(scan(&mut tx), (vec![5], vec![]), "a phantom");
    tx.commit().unwrap();
    t.insert(&row(3, 0, "y")).unwrap();
    assert!(t.update(&row(9, 2, "x")).unwrap());
    let mut tx = db.begin();
    assert_eq!(scan(&mut tx), (vec![3, 5], vec![9]));
    tx.commit().unwrap();
    assert_eq!(t.check_integrity().unwrap(), 5);
}
