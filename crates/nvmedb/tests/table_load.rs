//! Bulk loading (`Database::load_table`): a loaded table holds exactly the rows given, with
//! every index entry (sorted and shuffled input, secondary, unique and nullable indexes, rows
//! of varying length), takes ordinary changes afterwards, survives a crash once loaded, and a
//! failed load (duplicate key, bad row, taken name) leaves no table and no files. A kill -9 at
//! a random moment of a load leaves the table absent or complete.

mod support;

use nvmedb::io::{MemStorage, Storage};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Error, Options, Schema, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use support::{kill, TmpDir};

fn options(wal: bool) -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        // A small table pool: loads evict the heap pages they build.
        table_buffer: BufferSize::Bytes(64 * 4096),
        // Index pages are pinned by default: room for every index page of these tables.
        index_buffer: BufferSize::Bytes(1024 * 4096),
        wal,
        ..Options::default()
    }
}

struct Disk {
    data: Arc<dyn Storage>,
    log_a: Arc<dyn Storage>,
    log_b: Arc<dyn Storage>,
    wal: bool,
}

impl Disk {
    fn new(wal: bool) -> Self {
        Self {
            data: Arc::new(MemStorage::new()),
            log_a: Arc::new(MemStorage::new()),
            log_b: Arc::new(MemStorage::new()),
            wal,
        }
    }
    fn open(&self) -> Database {
        let logs = self.wal.then(|| (self.log_a.clone(), self.log_b.clone()));
        Database::open_with_storages(self.data.clone(), logs, options(self.wal)).unwrap()
    }
    fn table_files(&self) -> Vec<String> {
        self.data.list().unwrap().into_iter().filter(|f| f.starts_with('t')).collect()
    }
}

/// id, a non-unique indexed group, a unique code, a nullable indexed tag and a text payload.
fn schema() -> Schema {
    Schema::new(vec![
        ("id", ColumnType::Int),
        ("grp", ColumnType::Int32),
        ("code", ColumnType::Int),
        ("tag", ColumnType::Int),
        ("pad", ColumnType::Text(600)),
    ])
    .with_nullable("tag")
    .unwrap()
    .with_index("by_grp", "grp")
    .unwrap()
    .with_unique_index("by_code", "code")
    .unwrap()
    .with_index("by_tag", "tag")
    .unwrap()
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

fn row(id: i64, rng: &mut Rng) -> Vec<Value> {
    let tag = if id % 3 == 0 { Value::Null } else { Value::Int(id % 11) };
    let pad = vec![b'a' + (id % 26) as u8; rng.range(0, 600) as usize];
    vec![Value::Int(id), Value::Int(id % 17), Value::Int(1_000_000 - id * 3), tag, Value::Bytes(pad)]
}

/// Checks `t` against the model: every row, index lookups, key order and integrity.
fn check(t: &nvmedb::Table, model: &BTreeMap<i64, Vec<Value>>) {
    assert_eq!(t.check_integrity().unwrap(), model.len() as u64);
    for (k, r) in model {
        assert_eq!(t.get(&Value::Int(*k)).unwrap().as_ref(), Some(r), "row {k}");
    }
    for g in 0..17 {
        let want = model.values().filter(|r| r[1] == Value::Int(g)).count();
        assert_eq!(t.lookup("by_grp", &Value::Int(g)).unwrap().len(), want, "grp {g}");
    }
    for r in model.values().take(50) {
        assert_eq!(t.lookup("by_code", &r[2]).unwrap(), vec![r.clone()]);
    }
    let tagged = model.values().filter(|r| r[3] == Value::Int(5)).count();
    assert_eq!(t.lookup("by_tag", &Value::Int(5)).unwrap().len(), tagged);
    let mut keys = Vec::new();
    t.scan(|r| {
        keys.push(r.int(0));
        Ok(true)
    })
    .unwrap();
    keys.sort_unstable();
    assert_eq!(keys, model.keys().copied().collect::<Vec<_>>());
}

/// Ordinary changes on a loaded table: inserts between and after the loaded keys, updates
/// that grow rows (they move), deletes.
/// (`round` makes the inserted keys new each time.)
fn change(t: &nvmedb::Table, model: &mut BTreeMap<i64, Vec<Value>>, rng: &mut Rng, round: i64) {
    for i in 0..300 {
        let id = if i % 2 == 0 { i * 14 + 1 + 2 * round } else { 10_000 + 1000 * round + i };
        let r = row(id, rng);
        t.insert(&r).unwrap();
        model.insert(id, r);
    }
    for &id in model.keys().copied().collect::<Vec<_>>().iter().step_by(5) {
        let mut r = model[&id].clone();
        r[1] = Value::Int((id + 1) % 17);
        r[4] = Value::Bytes(vec![b'z'; 599]);
        assert!(t.update(&r).unwrap());
        model.insert(id, r);
    }
    for &id in model.keys().copied().collect::<Vec<_>>().iter().step_by(7) {
        assert!(t.delete(&Value::Int(id)).unwrap());
        model.remove(&id);
    }
}

#[test]
fn loaded_tables_hold_every_row_and_index_entry_and_survive_a_crash() {
    let seed = support::seed(7);
    for (case, (n, shuffled, wal)) in
        [(0, false, true), (1, false, true), (2000, false, true), (2000, true, true), (1500, true, false)]
            .into_iter()
            .enumerate()
    {
        let ctx =
            format!("case {case}: {n} rows, shuffled {shuffled}, log {wal}, {}", support::replay(seed, 1));
        let mut rng = Rng::new(seed + case as u64);
        let mut ids: Vec<i64> = (0..n).map(|i| i * 2).collect();
        if shuffled {
            shuffle(&mut rng, &mut ids);
        }
        let rows: Vec<Vec<Value>> = ids.iter().map(|&i| row(i, &mut rng)).collect();
        let mut model: BTreeMap<i64, Vec<Value>> =
            rows.iter().map(|r| (r[0].as_int().unwrap(), r.clone())).collect();
        let disk = Disk::new(wal);
        {
            let db = disk.open();
            let mut calls = Vec::new();
            let t = db
                .load_table("t", schema(), rows, |c| calls.push(c))
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(calls.last().copied(), Some(n as u64), "{ctx}: progress ends with the row count");
            assert!(calls.windows(2).all(|w| w[0] <= w[1]), "{ctx}: progress only grows");
            check(&t, &model);
            if wal {
                change(&t, &mut model, &mut rng, 0);
                check(&t, &model);
            }
            // Crash: no close, no checkpoint (without a log, only what load_table made durable
            // survives: the loaded table).
        }
        let db = disk.open();
        let t = db.table("t").unwrap();
        check(&t, &model);
        change(&t, &mut model, &mut rng, 1);
        check(&t, &model);
    }
}

/// A load writes its heap pages around the log (the log ships to no standby), so they must be
/// synced before the table appears: a power cut right after `load_table` returns, losing
/// every write not yet synced on every disk, leaves the whole table, and ordinary changes
/// after the cut work. The log holds fewer bytes than the heap pages (they are not in it).
#[test]
fn a_power_cut_after_a_load_keeps_the_whole_table_whose_heap_pages_are_not_logged() {
    use nvmedb::io::{CrashSimStorage, WriteFate};
    let seed = support::seed(11);
    let ctx = support::replay(seed, 1);
    let mut rng = Rng::new(seed);
    let (data, log_a, log_b) = (
        Arc::new(CrashSimStorage::new()),
        Arc::new(CrashSimStorage::new()),
        Arc::new(CrashSimStorage::new()),
    );
    let open = || {
        let logs: (Arc<dyn Storage>, Arc<dyn Storage>) = (log_a.clone(), log_b.clone());
        Database::open_with_storages(data.clone(), Some(logs), options(true)).unwrap()
    };
    let mut ids: Vec<i64> = (0..3000).map(|i| i * 2).collect();
    shuffle(&mut rng, &mut ids);
    let rows: Vec<Vec<Value>> = ids.iter().map(|&i| row(i, &mut rng)).collect();
    let mut model: BTreeMap<i64, Vec<Value>> =
        rows.iter().map(|r| (r[0].as_int().unwrap(), r.clone())).collect();
    {
        let db = open();
        let log = db.engine_log().expect("a log").record_log().clone();
        let before = log.end_lsn();
        let t = db.load_table("t", schema(), rows, |_| {}).unwrap();
        let heap_bytes = db.buffer_stats().0.writes * 4096;
        let logged = log.end_lsn() - before;
        assert!(heap_bytes > 100 * 4096, "{ctx}: the heap pages were written ({heap_bytes} bytes)");
        // The index pages are logged as images; the heap pages alone would take more.
        assert!(
            logged < heap_bytes,
            "{ctx}: {logged} log bytes for {heap_bytes} bytes of heap pages: the heap pages were logged"
        );
        check(&t, &model);
        // No close, no checkpoint (dropping stops the background writers).
    }
    // The power goes out: nothing unsynced survives, on any disk.
    for disk in [&data, &log_a, &log_b] {
        disk.crash_with(|_, _, _| WriteFate::Dropped);
    }
    let db = open();
    let t = db.table("t").unwrap();
    check(&t, &model);
    change(&t, &mut model, &mut rng, 0);
    check(&t, &model);
}

#[test]
fn a_failed_load_leaves_no_table_and_no_files() {
    let disk = Disk::new(true);
    let db = disk.open();
    let mut rng = Rng::new(support::seed(3));
    let good = |n: i64, rng: &mut Rng| (0..n).map(|i| row(i, rng)).collect::<Vec<_>>();
    // A primary key twice, in sorted input and in shuffled input.
    let mut dup = good(500, &mut rng);
    dup.insert(300, row(299, &mut rng));
    let e = db.load_table("t", schema(), dup.clone(), |_| {}).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)) && e.to_string().contains("primary key"), "{e}");
    shuffle(&mut rng, &mut dup);
    assert!(matches!(db.load_table("t", schema(), dup, |_| {}), Err(Error::AlreadyExists(_))));
    // A unique value twice.
    let mut rows = good(500, &mut rng);
    rows[400][2] = rows[10][2].clone();
    let e = db.load_table("t", schema(), rows, |_| {}).unwrap_err();
    assert!(e.to_string().contains("by_code"), "{e}");
    // A row that does not match the schema.
    let mut rows = good(500, &mut rng);
    rows[250].pop();
    assert!(matches!(db.load_table("t", schema(), rows, |_| {}), Err(Error::InvalidArgument(_))));
    assert!(db.table_names().is_empty());
    assert!(disk.table_files().is_empty(), "{:?}", disk.table_files());
    // A taken name.
    db.load_table("t", schema(), good(10, &mut rng), |_| {}).unwrap();
    let e = db.load_table("t", schema(), good(10, &mut rng), |_| {}).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    assert_eq!(disk.table_files().len(), 2, "{:?}", disk.table_files());
    // NULLs do not collide in a unique index.
    let s = Schema::new(vec![("id", ColumnType::Int), ("u", ColumnType::Int)])
        .with_nullable("u")
        .unwrap()
        .with_unique_index("by_u", "u")
        .unwrap();
    let rows = (0..100).map(|i| vec![Value::Int(i), if i % 2 == 0 { Value::Null } else { Value::Int(i) }]);
    assert_eq!(db.load_table("n", s, rows, |_| {}).unwrap().check_integrity().unwrap(), 100);
}

/// Rows of the killed load (child and parent agree on them).
const KILL_ROWS: i64 = 20_000;

fn kill_row(i: i64) -> Vec<Value> {
    vec![
        Value::Int(i),
        Value::Int(i % 17),
        Value::Int(-i),
        Value::Int(i % 5),
        Value::Bytes(vec![b'k'; (i % 300) as usize]),
    ]
}

/// Child mode: loads a table into the directory its role names, printing progress, then
/// "loaded"; then waits to be killed.
#[test]
fn load_kill_child_entry() {
    let Some(dir) = kill::child_role() else { return };
    let db = Database::open(&dir, options(true)).unwrap();
    // Unsorted input half of the time (the sort and the tree build are part of what a kill may cut).
    let shuffled = std::env::var("LOAD_SHUFFLED").is_ok();
    let mut ids: Vec<i64> = (0..KILL_ROWS).collect();
    if shuffled {
        shuffle(&mut Rng::new(5), &mut ids);
    }
    db.load_table("t", schema(), ids.into_iter().map(kill_row), |n| println!("progress {n}")).unwrap();
    println!("loaded");
    loop {
        std::thread::park();
    }
}

#[test]
fn a_load_killed_at_any_moment_leaves_the_table_absent_or_complete() {
    if kill::child_role().is_some() {
        return;
    }
    let seed = support::seed_or_random();
    let iters = support::iters(6);
    let mut rng = Rng::new(seed);
    let (mut absent, mut complete) = (0, 0);
    for iter in 0..iters {
        let dir = TmpDir::new("load-kill");
        let shuffled = iter % 2 == 1;
        let mut envs = Vec::new();
        if shuffled {
            envs.push(("LOAD_SHUFFLED", "1".to_string()));
        }
        // Kill after a random number of progress lines (the last count means after "loaded").
        let steps = KILL_ROWS as u64 / nvmedb::LOAD_PROGRESS_EVERY + 2;
        let at = rng.range(1, steps + 1);
        let ctx = format!("iteration {iter} (kill after {at} lines), {}", support::replay(seed, iters));
        let child = kill::spawn("load_kill_child_entry", dir.path().to_str().unwrap(), &envs);
        let mut lines = 0u64;
        let mut loaded = false;
        child
            .kill_after(at, |l| {
                if l.starts_with("progress") || l == "loaded" {
                    lines += 1;
                }
                loaded |= l == "loaded";
                lines
            })
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let db = Database::open(dir.path(), options(true)).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        match db.table("t") {
            Err(Error::NotFound(_)) => {
                assert!(!loaded, "{ctx}: the load returned, yet the table is gone");
                absent += 1;
            }
            Ok(t) => {
                assert_eq!(t.check_integrity().unwrap(), KILL_ROWS as u64, "{ctx}");
                for i in (0..KILL_ROWS).step_by(97) {
                    assert_eq!(t.get(&Value::Int(i)).unwrap(), Some(kill_row(i)), "{ctx}: row {i}");
                }
                assert_eq!(
                    t.lookup("by_grp", &Value::Int(3)).unwrap().len(),
                    (0..KILL_ROWS).filter(|i| i % 17 == 3).count()
                );
                complete += 1;
            }
            Err(e) => panic!("{ctx}: {e}"),
        }
        drop(db);
        // A database that came back from the kill loads again.
        let db = Database::open(dir.path(), options(true)).unwrap();
        if db.table("t").is_err() {
            let t = db.load_table("t", schema(), (0..100).map(kill_row), |_| {}).unwrap();
            assert_eq!(t.check_integrity().unwrap(), 100, "{ctx}");
        }
    }
    println!("load kill -9: {iters} kills, table absent {absent} times, complete {complete} times");
}
