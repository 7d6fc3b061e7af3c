//! Serializable transactions against the classic anomaly histories, and read-committed ones
//! where that level allows them: phantom inserts into a scanned range (primary key, secondary
//! index, an empty range, the range past the last key, an update that moves a row into a
//! scanned range, an insert of a key a point read found absent), write skew built on a range
//! predicate (both book the same free slot), lost update, and read skew.
//!
//! Every wait is observed, not slept for: the writer runs in its own thread and the test
//! watches the lock manager's wait counter (`Database::lock_stats().waits`) until the writer is
//! parked, checking that it has not finished; then the scanner ends and the writer must go on.

use nvmedb::txn::{LockMode, LockOptions};
use nvmedb::{BufferSize, ColumnType, Database, Error, Isolation, Options, Schema, Table, Value};
use std::ops::Bound;
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn open() -> (Arc<Database>, Table) {
    let opts = Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(64 * 4096),
        index_buffer: BufferSize::Bytes(64 * 4096),
        lock_options: LockOptions { lock_timeout: Duration::from_secs(60), ..LockOptions::default() },
        ..Options::default()
    };
    let db = Database::open_with_storage(Arc::new(nvmedb::io::MemStorage::new()), opts).unwrap();
    let schema = Schema::new(vec![("id", ColumnType::Int), ("grp", ColumnType::Int)])
        .with_index("by_grp", "grp")
        .unwrap();
    let t = db.create_table("t", schema).unwrap();
    // ids 10, 20, .., 100 with grp = id / 10.
    for id in (10..=100).step_by(10) {
        t.insert(&[Value::Int(id), Value::Int(id / 10)]).unwrap();
    }
    (Arc::new(db), t)
}

fn row(id: i64, grp: i64) -> [Value; 2] {
    [Value::Int(id), Value::Int(grp)]
}

/// Runs `change` in a new transaction at `level` in a thread and commits it; the receiver
/// gets its result once it is done.
fn spawn_writer(
    db: &Arc<Database>,
    t: &Table,
    level: Isolation,
    change: impl FnOnce(&mut nvmedb::Transaction, &Table) -> nvmedb::Result<()> + Send + 'static,
) -> (Receiver<nvmedb::Result<()>>, std::thread::JoinHandle<()>) {
    let (tx, rx) = channel();
    let (db, t) = (db.clone(), t.clone());
    let h = std::thread::spawn(move || {
        let mut w = db.begin_with(level);
        let r = change(&mut w, &t).and_then(|()| w.commit());
        tx.send(r).unwrap();
    });
    (rx, h)
}

/// Waits until a lock wait has started since `waits0` (the writer is blocked), failing if the
/// writer finishes first.
fn wait_until_blocked(db: &Database, waits0: u64, done: &Receiver<nvmedb::Result<()>>) {
    loop {
        if db.lock_stats().waits > waits0 {
            return;
        }
        match done.try_recv() {
            Ok(r) => panic!("the writer did not wait for the range lock: {r:?}"),
            Err(TryRecvError::Empty) => std::thread::yield_now(),
            Err(TryRecvError::Disconnected) => panic!("writer thread died"),
        }
    }
}

fn ids_in(tx: &mut nvmedb::Transaction, t: &Table, lo: Bound<i64>, hi: Bound<i64>) -> Vec<i64> {
    let (lo, hi) = (lo.map(Value::Int), hi.map(Value::Int));
    let mut ids = Vec::new();
    tx.range(t, lo.as_ref(), hi.as_ref(), LockMode::Shared, |r| {
        ids.push(r.int(0));
        Ok(true)
    })
    .unwrap();
    ids
}

fn grps_in(tx: &mut nvmedb::Transaction, t: &Table, lo: i64, hi: i64) -> Vec<i64> {
    let mut ids = Vec::new();
    let (lo, hi) = (Value::Int(lo), Value::Int(hi));
    tx.index_range(t, "by_grp", Bound::Included(&lo), Bound::Included(&hi), LockMode::Shared, |r| {
        ids.push(r.int(0));
        Ok(true)
    })
    .unwrap();
    ids
}

/// A phantom history: the scanner reads, the writer's `change` lands in what it read and must
/// wait until the scanner commits; the scanner's second read equals its first.
fn assert_phantom_prevented(
    read: impl Fn(&mut nvmedb::Transaction, &Table) -> Vec<i64>,
    change: impl FnOnce(&mut nvmedb::Transaction, &Table) -> nvmedb::Result<()> + Send + 'static,
) {
    let (db, t) = open();
    let mut scanner = db.begin();
    let first = read(&mut scanner, &t);
    let waits0 = db.lock_stats().waits;
    let (done, h) = spawn_writer(&db, &t, Isolation::ReadCommitted, change);
    wait_until_blocked(&db, waits0, &done);
    assert_eq!(read(&mut scanner, &t), first, "the scanner saw a phantom");
    assert!(db.lock_stats().deadlocks == 0);
    scanner.commit().unwrap();
    done.recv().unwrap().unwrap();
    h.join().unwrap();
    assert_eq!(db.range_lock_count(), 0, "range locks outlive their transactions");
}

#[test]
fn an_insert_into_a_scanned_primary_range_waits_for_the_scanner() {
    assert_phantom_prevented(
        |tx, t| ids_in(tx, t, Bound::Included(20), Bound::Included(50)),
        |w, t| w.insert(t, &row(35, 7)),
    );
}

#[test]
fn an_insert_into_a_scanned_empty_range_waits() {
    assert_phantom_prevented(
        |tx, t| ids_in(tx, t, Bound::Excluded(20), Bound::Excluded(30)),
        |w, t| w.insert(t, &row(25, 0)),
    );
}

#[test]
fn an_insert_past_the_last_key_of_a_scan_to_the_end_waits() {
    assert_phantom_prevented(
        |tx, t| ids_in(tx, t, Bound::Included(90), Bound::Unbounded),
        |w, t| w.insert(t, &row(1000, 0)),
    );
}

#[test]
fn an_insert_into_a_scanned_secondary_range_waits() {
    // Key 5 is outside any primary range read; grp 3 is inside the scanned 2..=4.
    assert_phantom_prevented(|tx, t| grps_in(tx, t, 2, 4), |w, t| w.insert(t, &row(5, 3)));
}

#[test]
fn an_update_that_moves_a_row_into_a_scanned_secondary_range_waits() {
    assert_phantom_prevented(|tx, t| grps_in(tx, t, 2, 4), |w, t| w.update(t, &row(90, 3)).map(|_| ()));
}

#[test]
fn an_insert_of_a_key_a_point_read_found_absent_waits() {
    assert_phantom_prevented(
        |tx, t| tx.get(t, &Value::Int(42)).unwrap().map(|r| r.len() as i64).into_iter().collect(),
        |w, t| w.insert(t, &row(42, 4)),
    );
}

#[test]
fn inserts_outside_what_a_scan_read_do_not_wait() {
    let (db, t) = open();
    let mut scanner = db.begin();
    assert_eq!(ids_in(&mut scanner, &t, Bound::Included(20), Bound::Included(50)), [20, 30, 40, 50]);
    // A scan stopped after its first row read only up to it.
    let mut first = None;
    scanner
        .range(&t, Bound::Included(&Value::Int(60)), Bound::Unbounded, LockMode::Shared, |r| {
            first = Some(r.int(0));
            Ok(false)
        })
        .unwrap();
    assert_eq!(first, Some(60));
    assert_eq!(grps_in(&mut scanner, &t, 2, 3), [20, 30]);
    let waits0 = db.lock_stats().waits;
    for (id, grp) in [(15, 1), (55, 9), (65, 9), (1000, 9)] {
        let mut w = db.begin();
        w.insert(&t, &row(id, grp)).unwrap();
        w.commit().unwrap();
    }
    assert_eq!(db.lock_stats().waits, waits0, "an insert outside the ranges read waited");
    scanner.commit().unwrap();
}

/// Write skew over a range predicate: two transactions each check that a slot is free (an
/// empty range) and book it. Serializable: one of them is a deadlock victim, the other commits,
/// and one booking exists. Read committed allows both.
#[test]
fn write_skew_over_a_range_is_prevented_at_serializable_and_allowed_at_read_committed() {
    for level in [Isolation::Serializable, Isolation::ReadCommitted] {
        let (db, t) = open();
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (db, t, start) = (db.clone(), t.clone(), start.clone());
                std::thread::spawn(move || -> nvmedb::Result<()> {
                    let mut tx = db.begin_with(level);
                    let (lo, hi) = (Value::Int(77), Value::Int(77));
                    let mut taken = false;
                    tx.index_range(
                        &t,
                        "by_grp",
                        Bound::Included(&lo),
                        Bound::Included(&hi),
                        LockMode::Shared,
                        |_| {
                            taken = true;
                            Ok(false)
                        },
                    )?;
                    assert!(!taken);
                    start.wait(); // both have found slot 77 free
                    tx.insert(&t, &row(1000 + i, 77))?;
                    tx.commit()
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|h| h.join().unwrap()).collect();
        let booked = t.lookup("by_grp", &Value::Int(77)).unwrap().len();
        match level {
            Isolation::Serializable => {
                let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
                assert_eq!(failed.len(), 1, "{results:?}");
                assert!(matches!(failed[0], Error::Deadlock { .. }), "{results:?}");
                assert_eq!(booked, 1);
            }
            Isolation::ReadCommitted => {
                assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
                assert_eq!(booked, 2, "read committed books the slot twice");
            }
        }
    }
}

/// Lost update: both read a counter, both write it plus one. Serializable: the second writer
/// deadlocks with the first (both hold the read lock), so no increment is lost. Read committed
/// (plain reads, no FOR UPDATE) loses one.
#[test]
fn lost_update_is_prevented_at_serializable_and_allowed_at_read_committed() {
    let (db, t) = open();
    let key = Value::Int(10);
    // Read committed, one thread: both read 1 before either writes.
    let (mut a, mut b) = (db.begin_with(Isolation::ReadCommitted), db.begin_with(Isolation::ReadCommitted));
    let va = a.get(&t, &key).unwrap().unwrap()[1].as_int().unwrap();
    let vb = b.get(&t, &key).unwrap().unwrap()[1].as_int().unwrap();
    a.update(&t, &row(10, va + 1)).unwrap();
    a.commit().unwrap();
    b.update(&t, &row(10, vb + 1)).unwrap();
    b.commit().unwrap();
    assert_eq!(t.get(&key).unwrap().unwrap()[1], Value::Int(2), "read committed lost an update");

    // Serializable: both read under shared locks, then both write.
    let start = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (db, t, start) = (db.clone(), t.clone(), start.clone());
            std::thread::spawn(move || -> nvmedb::Result<()> {
                let mut tx = db.begin();
                let v = tx.get(&t, &Value::Int(10))?.unwrap()[1].as_int().unwrap();
                start.wait();
                tx.update(&t, &row(10, v + 1))?;
                tx.commit()
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(results.iter().any(|r| matches!(r, Err(Error::Deadlock { .. }))), "{results:?}");
    assert_eq!(t.get(&key).unwrap().unwrap()[1], Value::Int(3), "one increment, none lost");
}

/// Read skew: a reader reads x, a writer moves one unit from x to y and commits, the reader
/// reads y. Read committed sees the sum change; serializable makes the writer wait for the
/// reader (its lock on x), so the reader sees the old sum.
#[test]
fn read_skew_is_prevented_at_serializable_and_allowed_at_read_committed() {
    for level in [Isolation::Serializable, Isolation::ReadCommitted] {
        let (db, t) = open();
        let (x, y) = (Value::Int(10), Value::Int(20));
        let mut reader = db.begin_with(level);
        let vx = reader.get(&t, &x).unwrap().unwrap()[1].as_int().unwrap();
        let waits0 = db.lock_stats().waits;
        let (done, h) = spawn_writer(&db, &t, Isolation::ReadCommitted, |w, t| {
            w.update(t, &row(20, 3))?;
            w.update(t, &row(10, 0))?;
            Ok(())
        });
        if level == Isolation::Serializable {
            wait_until_blocked(&db, waits0, &done);
            // The writer holds y: the reader's read of y waits for it, and the writer waits
            // for the reader's x: one of them is the deadlock victim, never a skewed read.
            match reader.get(&t, &y) {
                Ok(vy) => {
                    assert_eq!(vx + vy.unwrap()[1].as_int().unwrap(), 3);
                    reader.commit().unwrap();
                    assert!(matches!(done.recv().unwrap(), Err(Error::Deadlock { .. })));
                }
                Err(e) => {
                    assert!(matches!(e, Error::Deadlock { .. }), "{e:?}");
                    drop(reader);
                    done.recv().unwrap().unwrap();
                }
            }
        } else {
            done.recv().unwrap().unwrap();
            let vy = reader.get(&t, &y).unwrap().unwrap()[1].as_int().unwrap();
            assert_eq!(vx + vy, 4, "read committed reads x before and y after the transfer");
            reader.commit().unwrap();
        }
        h.join().unwrap();
    }
}

/// Racing bookings: threads repeatedly count the rows of a slot through the secondary index
/// and, while fewer than `CAP`, insert one, in serializable transactions retried on deadlock.
/// Serializability keeps every slot at or below `CAP` (each booking's count must see the
/// bookings before it), whatever the interleaving of scans' leaf reads with the inserts.
#[test]
fn racing_range_checked_inserts_never_overbook() {
    const CAP: usize = 3;
    const SLOTS: i64 = 4;
    let (db, t) = open();
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4i64)
        .map(|th| {
            let (db, t, start) = (db.clone(), t.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut rng = nvmedb::util::Rng::new(th as u64 + 1);
                for n in 0..150i64 {
                    let slot = 200 + rng.below(SLOTS as u64) as i64;
                    loop {
                        let mut tx = db.begin();
                        let booked = grps_in_result(&mut tx, &t, slot);
                        let r = booked.and_then(|b| {
                            if b < CAP {
                                tx.insert(&t, &row(10_000 + th * 1_000 + n, slot))?;
                            }
                            tx.commit()
                        });
                        match r {
                            Ok(()) => break,
                            Err(e) if e.is_retryable() => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
    for slot in 200..200 + SLOTS {
        let n = t.lookup("by_grp", &Value::Int(slot)).unwrap().len();
        assert!(n <= CAP, "slot {slot} booked {n} times (cap {CAP})");
    }
    assert_eq!(db.range_lock_count(), 0);
}

fn grps_in_result(tx: &mut nvmedb::Transaction, t: &Table, slot: i64) -> nvmedb::Result<usize> {
    let mut n = 0;
    let v = Value::Int(slot);
    tx.index_range(t, "by_grp", Bound::Included(&v), Bound::Included(&v), LockMode::Shared, |_| {
        n += 1;
        Ok(true)
    })?;
    Ok(n)
}
