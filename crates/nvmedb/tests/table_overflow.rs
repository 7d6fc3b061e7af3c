//! Rows larger than a page (overflow pages): rows of 1, 3 and 100 pages are read whole by every
//! read path (point read, `get`, `read_many`, scans, range scans, secondary-index lookups, a
//! transaction's reads), updated (grow, shrink, small to overflow and back), deleted and rolled
//! back; a bulk load stores them too; their pages are reused once freed; a power cut with
//! overflow rows in flight leaves every acknowledged row and no row half written or leaked.

mod repl_common;
mod support;

use nvmedb::io::{Device, IoHook, MemStorage, Storage};
use nvmedb::page::overflow;
use nvmedb::page::{PageHeader, PageType};
use nvmedb::util::Rng;
use nvmedb::wal::WalOptions;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Table, Value};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use support::PowerCut;

const PAGE: usize = 4096;

fn options() -> Options {
    Options {
        table_page_size: PAGE,
        index_page_size: PAGE,
        // Room for a 100-page row (a row's pages stay latched while it is written) and little
        // more: the rows' pages are evicted and read back.
        table_buffer: BufferSize::Bytes(512 * PAGE as u64),
        index_buffer: BufferSize::Bytes(256 * PAGE as u64),
        ..Options::default()
    }
}

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("grp", ColumnType::Int), ("body", ColumnType::Text(u32::MAX))])
        .with_index("by_grp", "grp")
        .unwrap()
}

/// A body of `len` bytes that differs by key and version, so a read of another row's or an
/// older version's pages shows.
fn body(id: i64, version: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(id as u64 * 1_000_003 + version);
    (0..len).map(|_| b'a' + r.below(26) as u8).collect()
}

fn row(id: i64, b: &[u8]) -> Vec<Value> {
    vec![Value::Int(id), Value::Int(id % 3), Value::Bytes(b.to_vec())]
}

/// Checks the table holds exactly `model` (key → body) through every read path.
fn check_all_paths(db: &Database, t: &Table, model: &BTreeMap<i64, Vec<u8>>, ctx: &str) {
    check_reads(t, model, ctx);
    let mut tx = db.begin();
    for (id, b) in model {
        assert_eq!(
            tx.get(t, &Value::Int(*id)).unwrap(),
            Some(row(*id, b)),
            "{ctx}: transaction's read of {id}"
        );
    }
    tx.commit().unwrap();
}

/// Checks the table holds exactly `model` through every read path but a transaction's.
fn check_reads(t: &Table, model: &BTreeMap<i64, Vec<u8>>, ctx: &str) {
    assert_eq!(t.check_integrity().unwrap(), model.len() as u64, "{ctx}: integrity");
    for (id, b) in model {
        let got = t.read(&Value::Int(*id), |r| r.bytes(2).to_vec()).unwrap();
        assert!(got.as_deref() == Some(&b[..]), "{ctx}: point read of {id}");
        assert_eq!(t.get(&Value::Int(*id)).unwrap(), Some(row(*id, b)), "{ctx}: get of {id}");
    }
    // read_many, with keys that are absent in between.
    let keys: Vec<Value> = (-1..=model.keys().max().copied().unwrap_or(0) + 1).map(Value::Int).collect();
    let mut seen = 0;
    t.read_many(&keys, |i, r| {
        let id = i as i64 - 1;
        assert_eq!(r.map(|r| r.bytes(2).to_vec()).as_ref(), model.get(&id), "{ctx}: read_many of {id}");
        seen += 1;
    })
    .unwrap();
    assert_eq!(seen, keys.len(), "{ctx}");
    // Full scan: each row once, whole; never a page of a row as a row.
    let mut scanned = BTreeMap::new();
    t.scan(|r| {
        assert!(scanned.insert(r.int(0), r.bytes(2).to_vec()).is_none(), "{ctx}: a row scanned twice");
        Ok(true)
    })
    .unwrap();
    assert!(scanned == *model, "{ctx}: full scan");
    let mut ranged = BTreeMap::new();
    t.range(Bound::Unbounded, Bound::Unbounded, |r| {
        ranged.insert(r.int(0), r.bytes(2).to_vec());
        Ok(true)
    })
    .unwrap();
    assert!(ranged == *model, "{ctx}: range scan");
    for g in 0..3 {
        let mut got: Vec<(i64, Vec<u8>)> = t
            .lookup("by_grp", &Value::Int(g))
            .unwrap()
            .into_iter()
            .map(|r| match (&r[0], &r[2]) {
                (Value::Int(i), Value::Bytes(b)) => (*i, b.clone()),
                other => panic!("{ctx}: {other:?}"),
            })
            .collect();
        got.sort();
        let want: Vec<(i64, Vec<u8>)> =
            model.iter().filter(|(i, _)| *i % 3 == g).map(|(i, b)| (*i, b.clone())).collect();
        assert!(got == want, "{ctx}: index lookup of group {g}");
    }
}

#[test]
fn rows_of_one_three_and_a_hundred_pages_are_whole_through_every_read_update_delete_and_abort() {
    let data: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let logs: (Arc<dyn Storage>, Arc<dyn Storage>) =
        (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()));
    let open = || Database::open_with_storages(data.clone(), Some(logs.clone()), options()).unwrap();
    let db = open();
    let t = db.create_table("t", schema()).unwrap();
    let sizes = [10, PAGE, 3 * PAGE, 100 * PAGE, 200, 3 * PAGE + 17];
    let mut model = BTreeMap::new();
    for (i, &len) in sizes.iter().enumerate() {
        let b = body(i as i64, 0, len);
        t.insert(&row(i as i64, &b)).unwrap();
        model.insert(i as i64, b);
    }
    check_all_paths(&db, &t, &model, "inserted");

    // Updates: grow, shrink, small to overflow, overflow to small, overflow to overflow.
    for (id, len) in
        [(0, 5 * PAGE), (1, 2 * PAGE), (2, 100), (3, 99 * PAGE), (4, PAGE + 1), (5, 3 * PAGE + 16)]
    {
        let b = body(id, 1, len);
        assert!(t.update(&row(id, &b)).unwrap(), "update of {id}");
        model.insert(id, b);
    }
    check_all_paths(&db, &t, &model, "updated");

    // Aborted changes of overflow rows leave them as they were.
    let mut tx = db.begin();
    tx.insert(&t, &row(10, &body(10, 0, 50 * PAGE))).unwrap();
    tx.update(&t, &row(0, &body(0, 9, 20))).unwrap();
    tx.update(&t, &row(2, &body(2, 9, 7 * PAGE))).unwrap();
    tx.update(&t, &row(3, &body(3, 9, 100 * PAGE))).unwrap();
    assert!(tx.delete(&t, &Value::Int(1)).unwrap());
    assert_eq!(tx.get(&t, &Value::Int(10)).unwrap(), Some(row(10, &body(10, 0, 50 * PAGE))));
    tx.abort().unwrap();
    check_all_paths(&db, &t, &model, "aborted");

    // Deletes free the pages, and the pages are reused: writing the 100-page row again and
    // again does not grow the heap by 100 pages each time.
    assert!(t.delete(&Value::Int(1)).unwrap());
    model.remove(&1);
    let pages = t.heap_pages().unwrap();
    for v in 2..8 {
        let b = body(3, v, 99 * PAGE);
        assert!(t.update(&row(3, &b)).unwrap());
        model.insert(3, b);
    }
    let grown = t.heap_pages().unwrap() - pages;
    assert!(grown <= 100, "six rewrites of a 99-page row grew the heap by {grown} pages");
    check_all_paths(&db, &t, &model, "deleted and rewritten");

    // Too large: a clear error naming the table, the column and the size.
    let e = t.insert(&row(99, &vec![b'x'; nvmedb::table::heap::MAX_ROW_BYTES])).unwrap_err().to_string();
    assert!(e.contains("`t`") && e.contains("`body`") && e.contains("row limit"), "{e}");

    // Reopened: the rows come from the device.
    drop(t);
    drop(db);
    let db = open();
    let t = db.table("t").unwrap();
    check_all_paths(&db, &t, &model, "reopened");
}

#[test]
fn a_bulk_load_stores_rows_larger_than_a_page_and_inspect_shows_their_pages() {
    let data: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let logs: (Arc<dyn Storage>, Arc<dyn Storage>) =
        (Arc::new(MemStorage::new()), Arc::new(MemStorage::new()));
    let db = Database::open_with_storages(data.clone(), Some(logs.clone()), options()).unwrap();
    let mut model = BTreeMap::new();
    let rows: Vec<Vec<Value>> = (0..40i64)
        .map(|id| {
            let len = [5, PAGE, 3 * PAGE, 100 * PAGE][id as usize % 4];
            let b = body(id, 0, len);
            model.insert(id, b.clone());
            row(id, &b)
        })
        .collect();
    let t = db.load_table("t", schema(), rows, |_| {}).unwrap();
    check_all_paths(&db, &t, &model, "loaded");
    // The loaded pages are on the device: `inspect` shows where each overflow row starts and
    // how it continues.
    let heap = data.list().unwrap().into_iter().find(|f| f.ends_with(".heap")).expect("a heap file");
    let pages = t.heap_pages().unwrap();
    let described: Vec<String> = (0..pages)
        .map(|p| nvmedb::inspect::describe_page(&*data, &heap, PAGE, p, Some(&schema())).unwrap())
        .collect();
    let starts = described.iter().filter(|d| d.contains("overflow row of")).count();
    let hundred =
        described.iter().filter(|d| d.contains(&format!("overflow row of {} B", 20 + 100 * PAGE))).count();
    assert_eq!((starts, hundred), (30, 10), "rows of 1, 3 and 100 pages, 10 each");
    assert!(described.iter().any(|d| d.contains("overflow row continued")));
    assert!(described.iter().all(|d| d.contains("checksum: ok")));
    let b = body(1, 1, 4 * PAGE);
    assert!(t.update(&row(1, &b)).unwrap());
    model.insert(1, b);
    assert!(t.delete(&Value::Int(3)).unwrap());
    model.remove(&3);
    check_all_paths(&db, &t, &model, "loaded, then changed");
}

/// Every overflow row in the heap file `file` of `data` as (first page, row bytes), after
/// checking that every page of a row is reached from exactly one first page: no page of a row
/// that is not the row of a first page (leaked or half written).
fn overflow_rows(data: &dyn Storage, file: &str) -> BTreeMap<u64, Vec<u8>> {
    let dev = data.open(file, false).unwrap();
    let n = dev.capacity() / PAGE as u64;
    let mut pages = Vec::new();
    for p in 0..n {
        let mut buf = nvmedb::io::AlignedBuf::new(PAGE);
        dev.read_at(p * PAGE as u64, &mut buf).unwrap();
        pages.push(buf.to_vec());
    }
    let is = |p: &[u8], s| {
        PageHeader::page_type_of(p) == Some(PageType::Overflow) && overflow::state(p) == Some(s)
    };
    let mut reached = 0;
    let mut rows = BTreeMap::new();
    for (first, p) in pages.iter().enumerate().filter(|(_, p)| is(p, overflow::State::First)) {
        let mut row = overflow::chunk(p).unwrap().to_vec();
        let mut next = overflow::next(p);
        reached += 1;
        while next != overflow::NO_PAGE {
            let c = &pages[next as usize];
            assert!(
                is(c, overflow::State::Next),
                "page {next} of the row at page {first} is not one of its pages"
            );
            row.extend_from_slice(overflow::chunk(c).unwrap());
            next = overflow::next(c);
            reached += 1;
        }
        assert_eq!(row.len() as u64, overflow::total_len(p), "row at page {first}");
        rows.insert(first as u64, row);
    }
    let in_rows =
        pages.iter().filter(|p| is(p, overflow::State::First) || is(p, overflow::State::Next)).count();
    assert_eq!(in_rows, reached, "pages of rows that no row reaches");
    rows
}

/// A single client inserts, updates (across the page limit both ways) and deletes rows of up
/// to 40 pages, alone or in transactions of up to three changes, with a buffer that writes
/// pages back all the time; the power is cut at a random device write and unsynced writes are
/// dropped, kept or torn. After recovery every acknowledged row is there whole, the
/// transaction in flight is all before or all after, the indexes agree,
/// and (after a clean close) the heap file holds exactly the overflow rows of the table: none
/// leaked, none half written. Seeds: `NVMEDB_TEST_SEED`, `NVMEDB_TEST_ITERS` (default 12).
#[test]
fn a_power_cut_with_overflow_rows_in_flight_keeps_every_acknowledged_row_whole() {
    let seeds = support::iters(12);
    let first = support::seed(0);
    let opts = || Options {
        table_buffer: BufferSize::Bytes(200 * PAGE as u64),
        wal_options: WalOptions { segment_bytes: 4 << 20, ..WalOptions::default() },
        ..options()
    };
    // Seeds whose power cut hit a change, overflow rows checked after recovery, pages redone,
    // operations of unfinished transactions undone.
    let mut stats = (0u64, 0usize, 0u64, 0u64);
    for seed in first..first + seeds {
        let ctx = format!(
            "seed {seed} ({} cargo test -p nvmedb --test table_overflow -- a_power_cut)",
            support::replay(seed, 1)
        );
        let mut rng = Rng::new(seed);
        let disks = support::SimDisks::new();
        let cut = Arc::new(PowerCut { countdown: AtomicI64::new(i64::MAX) });
        let hook: Arc<dyn IoHook> = cut.clone();
        let db = disks.open(Some(hook.clone()), Some(hook.clone()), opts()).unwrap();
        let t = db.create_table("t", schema()).unwrap();
        let mut model: BTreeMap<i64, Vec<u8>> = BTreeMap::new();
        cut.countdown.store(rng.range(20, 400) as i64, Ordering::SeqCst);
        // The changes of the transaction the power cut hit: (key, row after), all or none.
        let mut in_flight: Option<Vec<(i64, Option<Vec<u8>>)>> = None;
        for step in 0..200u64 {
            // A transaction of 1-3 changes of distinct keys; auto-commit for a single one half
            // of the time.
            let n = rng.range(1, 4) as usize;
            let mut changes: Vec<(i64, Option<Vec<u8>>)> = Vec::new();
            while changes.len() < n {
                let id = rng.below(12) as i64;
                if changes.iter().any(|c| c.0 == id) {
                    continue;
                }
                let len = match rng.below(4) {
                    0 => rng.range(1, 300) as usize,
                    1 => rng.range(PAGE as u64 - 100, 2 * PAGE as u64) as usize,
                    2 => rng.range(2, 6) as usize * PAGE,
                    _ => rng.range(10, 40) as usize * PAGE,
                };
                let after = (rng.below(5) != 0).then(|| body(id, step, len));
                changes.push((id, after));
            }
            let exists = |id: i64| model.contains_key(&id);
            let r = if n == 1 && rng.below(2) == 0 {
                match &changes[0] {
                    (id, None) => t.delete(&Value::Int(*id)).map(|_| ()),
                    (id, Some(b)) if exists(*id) => t.update(&row(*id, b)).map(|_| ()),
                    (id, Some(b)) => t.insert(&row(*id, b)),
                }
            } else {
                let mut tx = db.begin();
                let mut r = Ok(());
                for (id, after) in &changes {
                    r = match after {
                        None => tx.delete(&t, &Value::Int(*id)).map(|_| ()),
                        Some(b) if exists(*id) => tx.update(&t, &row(*id, b)).map(|_| ()),
                        Some(b) => tx.insert(&t, &row(*id, b)),
                    };
                    if r.is_err() {
                        break;
                    }
                }
                match r {
                    Ok(()) => tx.commit(),
                    Err(e) => {
                        let _ = tx.abort();
                        Err(e)
                    }
                }
            };
            match r {
                Ok(()) => {
                    for (id, after) in changes {
                        match after {
                            Some(b) => model.insert(id, b),
                            None => model.remove(&id),
                        };
                    }
                }
                Err(e) => {
                    assert!(
                        cut.countdown.load(Ordering::SeqCst) <= 0,
                        "{ctx}: failed with the power on: {e}"
                    );
                    in_flight = Some(changes);
                    break;
                }
            }
        }
        std::mem::forget(t);
        std::mem::forget(db);
        cut.countdown.store(i64::MAX, Ordering::SeqCst);
        disks.crash(&mut rng);
        let db = disks.open(None, None, opts()).unwrap_or_else(|e| panic!("{ctx}: recovery: {e}"));
        let t = db.table("t").unwrap();
        stats.0 += u64::from(in_flight.is_some());
        stats.2 += db.recovery_report().pages_redone;
        stats.3 += db.recovery_report().ops_undone;
        if let Some(changes) = &in_flight {
            let got: Vec<Option<Vec<u8>>> = changes
                .iter()
                .map(|(id, _)| t.read(&Value::Int(*id), |r| r.bytes(2).to_vec()).unwrap())
                .collect();
            let before = changes.iter().zip(&got).all(|((id, _), g)| g.as_ref() == model.get(id));
            let after = changes.iter().zip(&got).all(|((_, a), g)| g == a);
            assert!(before || after, "{ctx}: the transaction in flight is neither all before nor all after");
            for ((id, _), g) in changes.iter().zip(got) {
                match g {
                    Some(b) => model.insert(*id, b),
                    None => model.remove(id),
                };
            }
        }
        check_all_paths(&db, &t, &model, &ctx);
        drop(t);
        drop(db);
        let heap =
            disks.data.list().unwrap().into_iter().find(|f| f.ends_with(".heap")).expect("a heap file");
        let rows = overflow_rows(&*disks.data, &heap);
        // Encoded rows: id and grp (8 bytes each), then the body's length and bytes.
        let inline = nvmedb::page::slotted::max_record_len(PAGE);
        let mut want: Vec<&Vec<u8>> = model.values().filter(|b| 20 + b.len() > inline).collect();
        want.sort();
        let mut have: Vec<Vec<u8>> = rows
            .into_values()
            .map(|r| {
                let n = u32::from_le_bytes(r[16..20].try_into().unwrap()) as usize;
                r[20..20 + n].to_vec()
            })
            .collect();
        have.sort();
        assert_eq!(have.len(), want.len(), "{ctx}: overflow rows in the heap file vs the table's");
        assert!(have.iter().zip(&want).all(|(a, b)| a == *b), "{ctx}: overflow rows' bodies");
        stats.1 += have.len();
    }
    eprintln!(
        "{seeds} seeds: {} power cuts during a change, {} overflow rows checked, {} pages redone, {} operations undone",
        stats.0, stats.1, stats.2, stats.3
    );
    assert!(
        stats.0 * 2 >= seeds && stats.1 > 0 && stats.2 > 0,
        "the cuts did not exercise recovery: {stats:?}"
    );
}

/// A primary shipping its log to a standby: overflow rows inserted, loaded (a load whose log
/// ships writes its heap pages through the log), updated across the page limit, deleted and
/// rolled back on the primary are read whole on the standby, by every read path.
#[test]
fn a_standby_applies_and_reads_overflow_rows() {
    use nvmedb::repl::{open_primary, seed_standby, ReplicationMode};
    let (p, s) = (repl_common::tmp("overflow-p"), repl_common::tmp("overflow-s"));
    {
        let db = Database::open(&p, repl_common::options()).unwrap();
        db.create_table("t", schema()).unwrap();
        db.close().unwrap();
    }
    seed_standby(&p, &s).unwrap();
    let sb = repl_common::standby(&s, true);
    let cfg = repl_common::config(
        vec![sb.addr().to_string()],
        ReplicationMode::Eager,
        repl_common::fail_after(30_000),
    );
    let (db, log) = open_primary(&p, repl_common::options(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    // The standby's pool is 16 frames: rows of up to 3 pages (a row takes at most a quarter).
    let mut model = BTreeMap::new();
    for id in 0..9i64 {
        let b = body(id, 0, [10, PAGE, 3 * PAGE - 100][id as usize % 3]);
        t.insert(&row(id, &b)).unwrap();
        model.insert(id, b);
    }
    for (id, len) in [(0, 2 * PAGE), (1, 50), (2, PAGE + 7)] {
        let b = body(id, 1, len);
        assert!(t.update(&row(id, &b)).unwrap());
        model.insert(id, b);
    }
    assert!(t.delete(&Value::Int(4)).unwrap());
    model.remove(&4);
    let mut tx = db.begin();
    tx.update(&t, &row(5, &body(5, 9, 20))).unwrap();
    tx.insert(&t, &row(30, &body(30, 9, 3 * PAGE - 100))).unwrap();
    tx.abort().unwrap();
    let mut loaded = BTreeMap::new();
    let rows: Vec<Vec<Value>> = (0..12i64)
        .map(|id| {
            let b = body(id, 5, [PAGE, 7, 2 * PAGE][id as usize % 3]);
            loaded.insert(id, b.clone());
            row(id, &b)
        })
        .collect();
    let l = db.load_table("loaded", schema(), rows, |_| {}).unwrap();
    check_all_paths(&db, &t, &model, "primary");
    check_all_paths(&db, &l, &loaded, "primary, loaded");
    assert!(sb.wait_applied(log.status().durable, std::time::Duration::from_secs(60)), "{}", sb.status());
    let snap = sb.read_snapshot().unwrap();
    check_reads(&snap.db().table("t").unwrap(), &model, "standby");
    check_reads(&snap.db().table("loaded").unwrap(), &loaded, "standby, loaded");
    drop(snap);
    drop((t, l));
    db.close().unwrap();
    drop(log);
    drop(sb);
}
