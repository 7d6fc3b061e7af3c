//! Undo of an unfinished transaction, cut at every record: a transaction changes rows of a
//! table with a secondary index (updates that grow rows until they move to another page,
//! updates that shrink them, deletes, inserts, and several changes of one key), its records
//! reach the log but its commit does not, and the process dies. For every prefix of the
//! transaction's records — each a moment the log could have been cut at, such as a delete whose
//! index steps are durable but whose heap step is not — recovery must bring the table back to
//! exactly what it was before the transaction, with every heap row holding exactly its index
//! entries. Seeds: `NVMEDB_TEST_SEED` (first, default 0) and `NVMEDB_TEST_ITERS` (default 12).

mod support;

use nvmedb::io::MemStorage;
use nvmedb::util::Rng;
use nvmedb::wal::{LogReader, WalOptions};
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        // Roomy: nothing is written back between the checkpoint and the crash, so the data
        // files hold the checkpoint and only the log moves on.
        table_buffer: BufferSize::Bytes(1 << 20),
        index_buffer: BufferSize::Bytes(1 << 20),
        wal_options: WalOptions {
            segment_bytes: 1 << 20,
            max_batch_bytes: 256 << 10,
            ..WalOptions::default()
        },
        ..Options::default()
    }
}

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("grp", ColumnType::Int), ("pad", ColumnType::Bytes(3000))])
        .with_index("by_grp", "grp")
        .unwrap()
}

type Rows = BTreeMap<i64, (i64, usize)>;

fn row(id: i64, grp: i64, len: usize) -> [Value; 3] {
    [Value::Int(id), Value::Int(grp), Value::Bytes(vec![id as u8; len])]
}

fn check(db: &Database, want: &Rows, ctx: &str) {
    let t = db.table("t").unwrap();
    let n = t.check_integrity().unwrap_or_else(|e| panic!("{ctx}: integrity: {e}"));
    let mut got = Rows::new();
    t.scan(|r| {
        let dup = got.insert(r.int(0), (r.int(1), r.bytes(2).len()));
        assert!(dup.is_none(), "{ctx}: key {} twice in the heap", r.int(0));
        Ok(true)
    })
    .unwrap();
    assert_eq!(n, got.len() as u64, "{ctx}");
    for (k, w) in want {
        assert_eq!(got.get(k), Some(w), "{ctx}: key {k}");
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{ctx}: rows that the transaction left: {:?}",
        got.keys().filter(|k| !want.contains_key(k)).collect::<Vec<_>>()
    );
}

#[test]
fn every_cut_of_an_unfinished_transaction_rolls_back() {
    let first = support::seed(0);
    let seeds = support::iters(12);
    let mut cuts_checked = 0;
    for seed in first..first + seeds {
        let ctx =
            format!("seed {seed} ({} cargo test -p nvmedb --test recovery_undo)", support::replay(seed, 1));
        let mut rng = Rng::new(seed);
        let (data, log_a, log_b) =
            (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()), Arc::new(MemStorage::new()));
        let open = |d: &Arc<MemStorage>, a: &Arc<MemStorage>, b: &Arc<MemStorage>| {
            Database::open_with_storages(d.clone(), Some((a.clone(), b.clone())), options())
        };
        let db = open(&data, &log_a, &log_b).unwrap();
        let t = db.create_table("t", schema()).unwrap();
        let mut before = Rows::new();
        for id in 0..40 {
            let (grp, len) = (rng.below(4) as i64, rng.range(100, 900) as usize);
            t.insert(&row(id, grp, len)).unwrap();
            before.insert(id, (grp, len));
        }
        db.checkpoint().unwrap();
        let log = db.engine_log().unwrap().clone();
        let start = log.record_log().end_lsn();
        // The transaction: every kind of change, several on some keys.
        let mut tx = db.begin();
        let mut now = before.clone();
        let mut next_id = 1000;
        for _ in 0..rng.range(4, 12) {
            let keys: Vec<i64> = now.keys().copied().collect();
            let id = keys[rng.below(keys.len() as u64) as usize];
            match rng.below(5) {
                0 | 1 => {
                    // Grow (moves the row once its page is full) or shrink.
                    let (grp, len) = (
                        rng.below(4) as i64,
                        if rng.chance(0.6) { 3000 } else { rng.range(10, 200) as usize },
                    );
                    assert!(tx.update(&t, &row(id, grp, len)).unwrap());
                    now.insert(id, (grp, len));
                }
                2 => {
                    assert!(tx.delete(&t, &Value::Int(id)).unwrap());
                    now.remove(&id);
                }
                3 => {
                    let (grp, len) = (rng.below(4) as i64, rng.range(10, 3000) as usize);
                    tx.insert(&t, &row(next_id, grp, len)).unwrap();
                    now.insert(next_id, (grp, len));
                    next_id += 1;
                }
                _ => {
                    // Delete and insert the same key again.
                    assert!(tx.delete(&t, &Value::Int(id)).unwrap());
                    let (grp, len) = (rng.below(4) as i64, rng.range(10, 3000) as usize);
                    tx.insert(&t, &row(id, grp, len)).unwrap();
                    now.insert(id, (grp, len));
                }
            }
        }
        // Its records reach the log; its commit never does.
        log.wait_durable(log.record_log().end_lsn()).unwrap();
        let (data_img, a_img, b_img) =
            (support::snapshot(&*data), support::snapshot(&*log_a), support::snapshot(&*log_b));
        drop(tx);
        drop(t);
        drop(db);
        let mut ends = vec![start];
        let reader = LogReader::open(a_img.clone(), b_img.clone(), start).unwrap();
        for r in reader {
            ends.push(r.unwrap().end_lsn);
        }
        assert!(ends.len() > 5, "{ctx}: the transaction logged only {} records", ends.len() - 1);
        for (k, &end) in ends.iter().enumerate() {
            let (d, a, b) =
                (support::snapshot(&*data_img), support::snapshot(&*a_img), support::snapshot(&*b_img));
            support::cut_log(a.as_ref(), b.as_ref(), end);
            let ctx = format!(
                "{ctx}: log cut after {k} of the transaction's {} records (LSN {end})",
                ends.len() - 1
            );
            let db = open(&d, &a, &b).unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
            assert!(
                db.recovery_report().log_end == end,
                "{ctx}: the log was not cut: {:?}",
                db.recovery_report()
            );
            check(&db, &before, &ctx);
            db.close().unwrap();
            // And once more: the undo itself was logged and checkpointed.
            let db = open(&d, &a, &b).unwrap_or_else(|e| panic!("{ctx}: second open failed: {e}"));
            check(&db, &before, &format!("{ctx}, reopened"));
            cuts_checked += 1;
        }
    }
    eprintln!("{seeds} seeds: {cuts_checked} cuts of unfinished transactions rolled back exactly");
}
