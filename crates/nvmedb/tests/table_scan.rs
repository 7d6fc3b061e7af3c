//! Partitioned scans with read-ahead under each buffer policy: every row is seen exactly once,
//! and a cold pass reads every heap page (exactly once under SEP, where each thread reads into
//! its own partition, and with one thread; counted by the pool), whatever the number of
//! scanning threads, the read-ahead depth and the policy. Read-ahead is asynchronous: on a
//! device with a deep queue, the reads of the following pages are in flight while the scan
//! processes a page; scans that look rows up in each other's tables never wait for one
//! another's reads; and a scan passes the before-images of rows a transaction has in flight.

use nvmedb::buffer::BufferPolicy;
use nvmedb::io::{DeviceProfile, EmulatedStorage, MemStorage, Storage};
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const ROWS: i64 = 3000;

fn options(policy: BufferPolicy, frames: u64) -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(frames * 4096),
        index_buffer: BufferSize::Bytes(64 * 4096),
        policy,
        wal: false,
        // The tests of reads kept in flight need the asynchronous window (off by default).
        async_read_ahead: true,
        ..Options::default()
    }
}

/// A database in memory holding tables `names`, each with ids 0..ROWS and 200-byte pads.
fn loaded(names: &[&str]) -> Arc<dyn Storage> {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(storage.clone(), options(BufferPolicy::Shared { stripes: 4 }, 64))
        .unwrap();
    for name in names {
        let schema = Schema::new(vec![("id", ColumnType::Int), ("pad", ColumnType::Char(200))]);
        let t = db.create_table(name, schema).unwrap();
        for id in 0..ROWS {
            t.insert(&[Value::Int(id), Value::Bytes(vec![b'p'; 200])]).unwrap();
        }
    }
    db.close().unwrap();
    storage
}

#[test]
fn a_cold_pass_reads_every_page_under_every_policy() {
    let storage = loaded(&["t"]);
    for threads in [1usize, 3, 4] {
        for policy in [
            BufferPolicy::Shared { stripes: 1 },
            BufferPolicy::Shared { stripes: 16 },
            BufferPolicy::Separated { partitions: threads },
        ] {
            for read_ahead in [1u64, 8] {
                // Opened afresh: the pass is cold. 24 frames per thread, smaller than the table.
                let db = Database::open_with_storage(storage.clone(), options(policy, 24 * threads as u64))
                    .unwrap();
                let t = db.table("t").unwrap();
                let pages = t.heap_pages().unwrap();
                assert!(pages > 100, "{pages} pages");
                let before = db.buffer_stats().0;
                let (seen, sum) = (AtomicU64::new(0), AtomicU64::new(0));
                std::thread::scope(|s| {
                    for part in 0..threads {
                        let (t, seen, sum) = (&t, &seen, &sum);
                        s.spawn(move || {
                            t.scan_partition_ahead(part, threads, read_ahead, |row| {
                                seen.fetch_add(1, Ordering::Relaxed);
                                sum.fetch_add(row.int(0) as u64, Ordering::Relaxed);
                                Ok(true)
                            })
                            .unwrap();
                        });
                    }
                });
                let what = format!("{threads} threads, {policy:?}, read-ahead {read_ahead}");
                assert_eq!(seen.load(Ordering::Relaxed), ROWS as u64, "{what}");
                assert_eq!(sum.load(Ordering::Relaxed), (ROWS * (ROWS - 1) / 2) as u64, "{what}");
                let d = db.buffer_stats().0.since(&before);
                if matches!(policy, BufferPolicy::Separated { .. }) || threads == 1 {
                    assert_eq!(d.reads, pages, "{what}: every page read exactly once");
                } else {
                    // In a shared pool a page read ahead for a thread that is off the CPU can be
                    // evicted by the others before it is used, and is then read again.
                    assert!(d.reads >= pages, "{what}: {} reads of {pages} pages", d.reads);
                }
                db.close().unwrap();
            }
        }
    }
}

#[test]
fn work_before_a_partition_scan_overlaps_its_first_reads_and_runs_once() {
    let storage = loaded(&["t"]);
    let db =
        Database::open_with_storage(storage, options(BufferPolicy::Separated { partitions: 1 }, 64)).unwrap();
    let t = db.table("t").unwrap();
    let before = db.buffer_stats().0;
    let calls = std::cell::Cell::new(0);
    let (mut rows, mut reads_started) = (0, 0);
    t.scan_partition_after(
        0,
        2,
        8,
        || {
            calls.set(calls.get() + 1);
            reads_started = db.buffer_stats().0.since(&before).reads;
        },
        |_| {
            assert_eq!(calls.get(), 1, "a row passed before `before` ran");
            rows += 1;
            Ok(true)
        },
    )
    .unwrap();
    assert_eq!(calls.get(), 1);
    assert_eq!(reads_started, 8, "the first window's reads were started before it ran");
    assert!(rows > 0 && rows < ROWS, "{rows} rows in the first of two partitions");
    // A scan that fails before it starts still runs it (a worker waiting for others must not
    // be left out), once.
    let mut calls = 0;
    assert!(t.scan_partition_after(3, 2, 8, || calls += 1, |_| Ok(true)).is_err());
    assert_eq!(calls, 1);
}

#[test]
fn a_bad_partition_is_refused() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(storage, options(BufferPolicy::Shared { stripes: 1 }, 16)).unwrap();
    let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int)])).unwrap();
    assert!(t.scan_partition_ahead(2, 2, 4, |_| Ok(true)).is_err());
    assert!(t.scan_partition_ahead(0, 0, 4, |_| Ok(true)).is_err());
}

/// On an emulated Optane (its queue completes each read 10 µs after submission), the reads of
/// the pages after the one being processed are in flight while it is processed: nearly every
/// read was submitted before the scan was handed an earlier page and reaped after (counted by
/// the pool), and still every page is read exactly once.
#[test]
fn reads_are_in_flight_while_earlier_pages_are_processed() {
    let mem = loaded(&["t"]);
    let optane = DeviceProfile::builtin("optane").unwrap();
    let storage: Arc<dyn Storage> = Arc::new(EmulatedStorage::new(mem, optane, 7).unwrap());
    for (policy, threads) in
        [(BufferPolicy::Separated { partitions: 1 }, 1usize), (BufferPolicy::Shared { stripes: 16 }, 1)]
    {
        let db = Database::open_with_storage(storage.clone(), options(policy, 64)).unwrap();
        let t = db.table("t").unwrap();
        let pages = t.heap_pages().unwrap();
        let before = db.buffer_stats().0;
        let mut seen = 0u64;
        t.scan_partition_ahead(0, threads, 8, |_| {
            seen += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen, ROWS as u64);
        let d = db.buffer_stats().0.since(&before);
        assert_eq!(d.reads, pages, "{policy:?}: every page read exactly once");
        // Only the first window's reads can be submitted and reaped before the scan has been
        // handed its first page; a synchronous read-ahead overlaps none.
        assert!(
            d.reads_overlapped + 8 >= pages,
            "{policy:?}: {} of {pages} reads overlapped the processing of an earlier page",
            d.reads_overlapped
        );
        db.close().unwrap();
    }
}

/// Two threads each scan one table and look every row up in the other's table (its heap page
/// may be in the other thread's read-ahead window at that moment), in a shared pool smaller
/// than the data: both finish with every row found, and no page is seen half-read.
#[test]
fn crossed_scans_with_lookups_do_not_wait_for_each_other() {
    let mem = loaded(&["a", "b"]);
    let optane = DeviceProfile::builtin("optane").unwrap();
    let storage: Arc<dyn Storage> = Arc::new(EmulatedStorage::new(mem, optane, 3).unwrap());
    let db = Database::open_with_storage(storage, options(BufferPolicy::Shared { stripes: 4 }, 96)).unwrap();
    let (a, b) = (db.table("a").unwrap(), db.table("b").unwrap());
    std::thread::scope(|s| {
        for (scanned, looked_up) in [(&a, &b), (&b, &a)] {
            s.spawn(move || {
                let mut found = 0i64;
                scanned
                    .scan_partition_ahead(0, 1, 16, |row| {
                        let id = row.int(0);
                        let other = looked_up.get(&Value::Int(id))?.expect("row in the other table");
                        assert_eq!(other[0], Value::Int(id));
                        found += 1;
                        Ok(true)
                    })
                    .unwrap();
                assert_eq!(found, ROWS);
            });
        }
    });
    db.close().unwrap();
}

/// A partitioned scan passes committed rows only: while a transaction has in-place updates of
/// some rows in flight, the scan passes those rows' before-images (checked per row), and with
/// no writer of the table in flight (before the transaction, after its rollback, after its
/// commit) it passes the rows on the pages, each once.
#[test]
fn a_partitioned_scan_passes_before_images_of_rows_in_flight() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let opts = Options { wal: true, ..options(BufferPolicy::Shared { stripes: 4 }, 64) };
    let db = Database::open_with_storage(storage, opts).unwrap();
    let schema = Schema::new(vec![("id", ColumnType::Int), ("tag", ColumnType::Int)]);
    let t = db.create_table("t", schema).unwrap();
    for id in 0..ROWS {
        t.insert(&[Value::Int(id), Value::Int(0)]).unwrap();
    }
    let seen = || {
        let mut v = Vec::new();
        for part in 0..2 {
            t.scan_partition_ahead(part, 2, 4, |r| {
                v.push((r.int(0), r.int(1)));
                Ok(true)
            })
            .unwrap();
        }
        v.sort_unstable();
        v
    };
    let tagged = |changed: &dyn Fn(i64) -> bool| -> Vec<(i64, i64)> {
        (0..ROWS).map(|id| (id, i64::from(changed(id)))).collect()
    };
    assert_eq!(seen(), tagged(&|_| false));
    let changed = |id: i64| id % 7 == 3;
    for round in 0..2 {
        let mut tx = db.begin();
        for id in (0..ROWS).filter(|&id| changed(id)) {
            tx.update(&t, &[Value::Int(id), Value::Int(1)]).unwrap();
        }
        assert_eq!(seen(), tagged(&|_| false), "round {round}: the updates in flight are not seen");
        if round == 0 {
            tx.abort().unwrap();
            assert_eq!(seen(), tagged(&|_| false), "after the rollback");
        } else {
            tx.commit().unwrap();
            assert_eq!(seen(), tagged(&changed), "after the commit");
        }
    }
}
