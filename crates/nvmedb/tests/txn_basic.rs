//! Explicit transactions: commit, abort (with secondary indexes), isolation through locks,
//! deadlock as a retryable error, durability across reopen.

use nvmedb::io::MemStorage;
use nvmedb::txn::LockMode;
use nvmedb::{BufferSize, ColumnType, Database, Error, Options, Schema, Value};
use std::ops::Bound;
use std::sync::Arc;

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(16 * 4096),
        index_buffer: BufferSize::Bytes(16 * 4096),
        ..Options::default()
    }
}

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("bal", ColumnType::Int)]).with_index("by_bal", "bal").unwrap()
}

#[test]
fn abort_restores_rows_and_indexes() {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), options()).unwrap();
    let t = db.create_table("acct", schema()).unwrap();
    for i in 0..10 {
        t.insert(&[Value::Int(i), Value::Int(100)]).unwrap();
    }
    let mut tx = db.begin();
    tx.update(&t, &[Value::Int(1), Value::Int(50)]).unwrap();
    tx.delete(&t, &Value::Int(2)).unwrap();
    tx.insert(&t, &[Value::Int(77), Value::Int(5)]).unwrap();
    assert_eq!(tx.get(&t, &Value::Int(1)).unwrap(), Some(vec![Value::Int(1), Value::Int(50)]));
    tx.abort().unwrap();
    assert_eq!(t.get(&Value::Int(1)).unwrap(), Some(vec![Value::Int(1), Value::Int(100)]));
    assert!(t.get(&Value::Int(2)).unwrap().is_some());
    assert!(t.get(&Value::Int(77)).unwrap().is_none());
    assert_eq!(t.lookup("by_bal", &Value::Int(100)).unwrap().len(), 10);
    assert_eq!(t.check_integrity().unwrap(), 10);
    // Dropping without commit aborts too.
    {
        let mut tx = db.begin();
        tx.update(&t, &[Value::Int(3), Value::Int(1)]).unwrap();
    }
    assert_eq!(t.get(&Value::Int(3)).unwrap(), Some(vec![Value::Int(3), Value::Int(100)]));
}

#[test]
fn deadlock_is_a_retryable_error() {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), options()).unwrap();
    let t = db.create_table("acct", schema()).unwrap();
    t.insert(&[Value::Int(1), Value::Int(0)]).unwrap();
    t.insert(&[Value::Int(2), Value::Int(0)]).unwrap();
    let barrier = std::sync::Barrier::new(2);
    let outcomes: Vec<bool> = std::thread::scope(|s| {
        let hs: Vec<_> = [(1i64, 2i64), (2, 1)]
            .into_iter()
            .map(|(a, b)| {
                let (db, t, barrier) = (&db, &t, &barrier);
                s.spawn(move || {
                    let mut tx = db.begin();
                    tx.update(t, &[Value::Int(a), Value::Int(10)]).unwrap();
                    barrier.wait();
                    match tx.update(t, &[Value::Int(b), Value::Int(20)]) {
                        Ok(_) => {
                            tx.commit().unwrap();
                            true
                        }
                        Err(e) => {
                            assert!(e.is_retryable(), "{e}");
                            assert!(matches!(e, Error::Deadlock { .. }), "{e}");
                            tx.abort().unwrap();
                            false
                        }
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(outcomes.iter().filter(|&&ok| ok).count(), 1, "exactly one victim: {outcomes:?}");
    assert_eq!(t.check_integrity().unwrap(), 2);
}

#[test]
fn concurrent_transfers_conserve_money() {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), options()).unwrap();
    let t = db.create_table("acct", schema()).unwrap();
    for i in 0..20 {
        t.insert(&[Value::Int(i), Value::Int(1000)]).unwrap();
    }
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let (db, t) = (&db, &t);
            s.spawn(move || {
                let mut rng = nvmedb::util::Rng::new(th);
                let mut done = 0;
                while done < 300 {
                    let a = rng.below(20) as i64;
                    let b = (a + 1 + rng.below(19) as i64) % 20;
                    let amt = rng.below(50) as i64;
                    let mut tx = db.begin();
                    let r = (|| -> nvmedb::Result<()> {
                        let ra = tx.get_for_update(t, &Value::Int(a))?.unwrap();
                        let rb = tx.get_for_update(t, &Value::Int(b))?.unwrap();
                        tx.update(t, &[Value::Int(a), Value::Int(ra[1].as_int().unwrap() - amt)])?;
                        tx.update(t, &[Value::Int(b), Value::Int(rb[1].as_int().unwrap() + amt)])?;
                        Ok(())
                    })();
                    match r {
                        Ok(()) => {
                            tx.commit().unwrap();
                            done += 1;
                        }
                        Err(e) if e.is_retryable() => tx.abort().unwrap(),
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let mut total = 0;
    t.scan(|r| {
        total += r.int(1);
        Ok(true)
    })
    .unwrap();
    assert_eq!(total, 20 * 1000);
    assert_eq!(t.check_integrity().unwrap(), 20);
}

#[test]
fn committed_transactions_survive_reopen_and_uncommitted_do_not() {
    let dir = nvmedb_testkit::TmpDir::path_only("txn-reopen");
    {
        let db = Database::open(&dir, options()).unwrap();
        let t = db.create_table("acct", schema()).unwrap();
        let mut tx = db.begin();
        for i in 0..50 {
            tx.insert(&t, &[Value::Int(i), Value::Int(i)]).unwrap();
        }
        tx.commit().unwrap();
        let mut tx = db.begin();
        tx.update(&t, &[Value::Int(0), Value::Int(-1)]).unwrap();
        // No close, as if the process died before committing: dropping the database without
        // closing it writes nothing more, and the transaction of a closed database is left to
        // recovery (the data pages may never be written).
        drop(db);
        drop(tx);
    }
    let db = Database::open(&dir, options()).unwrap();
    let t = db.table("acct").unwrap();
    assert_eq!(t.check_integrity().unwrap(), 50);
    assert_eq!(t.get(&Value::Int(0)).unwrap(), Some(vec![Value::Int(0), Value::Int(0)]));
    let rep = db.recovery_report();
    assert!(rep.records > 0, "{rep:?}");
    drop(db);
}

#[test]
fn a_new_log_for_an_existing_database_starts_above_its_page_lsns() {
    use nvmedb::io::Storage;
    let data: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let log = || -> (Arc<dyn Storage>, Arc<dyn Storage>) {
        (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()))
    };
    {
        let db = Database::open_with_storages(data.clone(), Some(log()), options()).unwrap();
        let t = db.create_table("acct", schema()).unwrap();
        for i in 0..200 {
            t.insert(&[Value::Int(i), Value::Int(i)]).unwrap();
        }
        db.close().unwrap();
    }
    for round in 0..3 {
        // Each round brings a brand-new, empty log.
        let db = Database::open_with_storages(data.clone(), Some(log()), options()).unwrap();
        let start = db.engine_log().unwrap().record_log().recovered().end_lsn;
        assert!(start > 0, "round {round}: the new log must start above the pages' LSNs");
        let t = db.table("acct").unwrap();
        for i in 0..200 {
            assert!(t.update(&[Value::Int(i), Value::Int(i + round)]).unwrap());
        }
        assert_eq!(t.check_integrity().unwrap(), 200);
        db.close().unwrap();
    }
}

/// A database whose log asks for checkpoints by volume keeps its log bounded through many
/// updates (the checkpoints truncate it), and nothing committed is lost across a reopen.
#[test]
fn log_volume_checkpoints_bound_the_log_and_lose_nothing() {
    use nvmedb::wal::WalOptions;
    let dir = nvmedb_testkit::TmpDir::path_only("ckpt-volume");
    let opts = nvmedb::Options {
        table_page_size: 4096,
        index_page_size: 4096,
        wal_options: WalOptions {
            segment_bytes: 64 * 1024,
            max_batch_bytes: 16 * 1024,
            keep_free_segments: 1,
            checkpoint_after_bytes: 256 * 1024,
            ..WalOptions::default()
        },
        ..nvmedb::Options::default()
    };
    let schema =
        || nvmedb::Schema::new(vec![("id", nvmedb::ColumnType::Int), ("v", nvmedb::ColumnType::Int)]);
    let segments = |d: &std::path::Path| std::fs::read_dir(d.join("wal")).map(|r| r.count()).unwrap_or(0);
    let mut max_segments = 0;
    let written;
    {
        let db = nvmedb::Database::open(&dir, opts.clone()).unwrap();
        let t = db.create_table("t", schema()).unwrap();
        for id in 0..200 {
            t.insert(&[nvmedb::Value::Int(id), nvmedb::Value::Int(0)]).unwrap();
        }
        for round in 1..=20i64 {
            for id in 0..200 {
                t.update_int(&nvmedb::Value::Int(id), 1, round).unwrap();
            }
            max_segments = max_segments.max(segments(&dir));
        }
        written = db.engine_log().expect("a logged database").record_log().stats().bytes_written;
        db.close().unwrap();
    }
    // Without checkpoints by volume the log would keep every segment until close: what was
    // written must be well beyond the bound for the bound to show anything.
    assert!(written > 24 * 64 * 1024, "only {written} log bytes written: the test proves nothing");
    // Checkpoints come every 4 segments' worth; segments are released by the log's own threads,
    // so a loaded machine may see a few more at a time.
    assert!(max_segments <= 16, "the log grew to {max_segments} segment files ({written} bytes written)");
    let db = nvmedb::Database::open(&dir, opts).unwrap();
    let t = db.table("t").unwrap();
    for id in 0..200 {
        assert_eq!(t.read(&nvmedb::Value::Int(id), |r| r.int(1)).unwrap(), Some(20), "row {id}");
    }
    drop(db);
}

/// A change that follows the transaction's read of the same row for update takes that read's
/// row (where it is, its before-image) instead of looking for it again: updates (one that grows
/// the row until it moves to another page), a second change of the key, a read for update of
/// another key in between, deletes; rolled back and committed, the rows, their index entries
/// and what a committed reader sees meanwhile are as with a change that looks the row up.
#[test]
fn changes_after_a_read_for_update_keep_rows_indexes_and_before_images() {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), options()).unwrap();
    let s = Schema::new(vec![
        ("id", ColumnType::Int),
        ("bal", ColumnType::Int),
        ("note", ColumnType::Bytes(2000)),
    ])
    .with_index("by_bal", "bal")
    .unwrap();
    let t = db.create_table("acct", s).unwrap();
    let original = |i: i64| vec![Value::Int(i), Value::Int(100), Value::Bytes(vec![i as u8; 150])];
    for i in 0..20 {
        t.insert(&original(i)).unwrap();
    }
    for commit in [false, true] {
        let mut tx = db.begin();
        // Read for update, then an update that no longer fits its page: the row moves.
        let before = tx.get_for_update(&t, &Value::Int(1)).unwrap().unwrap();
        let grown = vec![Value::Int(1), Value::Int(50), Value::Bytes(vec![9; 1500])];
        assert!(tx.update(&t, &grown).unwrap());
        // A committed reader sees the before-image the change published.
        assert_eq!(t.get(&Value::Int(1)).unwrap(), Some(before));
        // The key read for update again (already changed): the transaction's own row.
        let mut row = Vec::new();
        assert!(tx.get_for_update_into(&t, &Value::Int(1), &mut row).unwrap());
        assert_eq!(row, grown);
        row[1] = Value::Int(60);
        assert!(tx.update(&t, &row).unwrap());
        // A read for update of key 2, then a change of key 3: 2's row is not taken for it.
        assert!(tx.get_for_update_into(&t, &Value::Int(2), &mut row).unwrap());
        assert!(tx.update(&t, &[Value::Int(3), Value::Int(3), Value::Bytes(b"three".to_vec())]).unwrap());
        row[1] = Value::Int(2);
        assert!(tx.update(&t, &row).unwrap());
        // Read for update, then delete.
        assert!(tx.get_for_update_into(&t, &Value::Int(4), &mut row).unwrap());
        assert!(tx.delete(&t, &Value::Int(4)).unwrap());
        assert_eq!(t.get(&Value::Int(4)).unwrap(), Some(original(4)));
        // An exclusive scan of every key (more rows than a transaction keeps for their
        // changes), one of keys 6..=9, then a change of each row the second one visited, of
        // one the first one visited, and a delete.
        let mut rows = Vec::new();
        for (lo, hi) in [(0, 19), (6, 9)] {
            rows.clear();
            let (lo, hi) = (Value::Int(lo), Value::Int(hi));
            tx.range(&t, Bound::Included(&lo), Bound::Included(&hi), LockMode::Exclusive, |r| {
                rows.push(r.try_values()?);
                Ok(true)
            })
            .unwrap();
        }
        assert_eq!(rows.len(), 4);
        for r in &mut rows {
            r[1] = Value::Int(7);
            r[2] = Value::Bytes(vec![7; 700]);
            assert!(tx.update(&t, r).unwrap());
        }
        assert!(tx.update(&t, &[Value::Int(12), Value::Int(7), Value::Bytes(vec![])]).unwrap());
        assert!(tx.delete(&t, &Value::Int(9)).unwrap());
        // Read for update of a row, then an insert of that key fails as the key is taken.
        assert!(tx.get_for_update_into(&t, &Value::Int(5), &mut row).unwrap());
        assert!(matches!(tx.insert(&t, &original(5)), Err(Error::AlreadyExists(_))));
        if commit {
            tx.commit().unwrap();
        } else {
            tx.abort().unwrap();
        }
        assert_eq!(t.check_integrity().unwrap(), if commit { 18 } else { 20 });
        if !commit {
            for i in 0..20 {
                assert_eq!(t.get(&Value::Int(i)).unwrap(), Some(original(i)), "row {i} after the rollback");
            }
        }
    }
    let bal = |i: i64| t.get(&Value::Int(i)).unwrap().map(|r| r[1].as_int().unwrap());
    assert_eq!((bal(1), bal(2), bal(3), bal(4), bal(5)), (Some(60), Some(2), Some(3), None, Some(100)));
    assert_eq!((bal(6), bal(8), bal(9), bal(12), bal(13)), (Some(7), Some(7), None, Some(7), Some(100)));
    assert_eq!(t.get(&Value::Int(8)).unwrap().unwrap()[2], Value::Bytes(vec![7; 700]));
    assert_eq!(t.lookup("by_bal", &Value::Int(100)).unwrap().len(), 11);
    assert_eq!(t.lookup("by_bal", &Value::Int(7)).unwrap().len(), 4);
    assert_eq!(t.lookup("by_bal", &Value::Int(60)).unwrap().len(), 1);
    assert_eq!(t.get(&Value::Int(1)).unwrap().unwrap()[2], Value::Bytes(vec![9; 1500]));
}
