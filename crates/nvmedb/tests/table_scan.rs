//! Partitioned scans with read-ahead under each buffer policy: every row is seen exactly once,
//! and a cold pass reads every heap page (exactly once under SEP, where each thread reads into
//! its own partition, and with one thread; counted by the pool), whatever the number of
//! scanning threads, the read-ahead depth and the policy.

use nvmedb::buffer::BufferPolicy;
use nvmedb::io::{MemStorage, Storage};
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
        ..Options::default()
    }
}

#[test]
fn a_cold_pass_reads_every_page_under_every_policy() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let schema = Schema::new(vec![("id", ColumnType::Int), ("pad", ColumnType::Char(200))]);
    {
        let db =
            Database::open_with_storage(storage.clone(), options(BufferPolicy::Shared { stripes: 4 }, 64))
                .unwrap();
        let t = db.create_table("t", schema).unwrap();
        for id in 0..ROWS {
            t.insert(&[Value::Int(id), Value::Bytes(vec![b'p'; 200])]).unwrap();
        }
        db.close().unwrap();
    }
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
fn a_bad_partition_is_refused() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(storage, options(BufferPolicy::Shared { stripes: 1 }, 16)).unwrap();
    let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int)])).unwrap();
    assert!(t.scan_partition_ahead(2, 2, 4, |_| Ok(true)).is_err());
    assert!(t.scan_partition_ahead(0, 0, 4, |_| Ok(true)).is_err());
}
