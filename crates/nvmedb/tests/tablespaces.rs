//! Tablespaces: creating them, placing tables in them, reopening, moving tables between them
//! while transactions run (and a kill -9 in the middle of moves), and the per-table access
//! statistics adding up to the buffer pools' totals.
//!
//! Kill iterations: `NVMEDB_TEST_ITERS` (default 4); seed: `NVMEDB_TEST_SEED`.

mod support;

use nvmedb::db::{heap_name, index_name};
use nvmedb::io::{MemStorage, Storage};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, TablespaceSpec, Tablespaces, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use support::workload;
use support::{kill, TmpDir};

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int), ("pad", ColumnType::Bytes(200))])
        .with_index("by_v", "v")
        .expect("schema")
}

fn row(k: i64, v: i64) -> Vec<Value> {
    vec![Value::Int(k), Value::Int(v), Value::Bytes(vec![k as u8; 150])]
}

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| nvmedb::table::files::parse_table_file(n).is_some())
        .collect();
    v.sort();
    v
}

#[test]
fn tables_are_created_in_tablespaces_moved_and_reopened() {
    let (dir, side) = (TmpDir::new("ts-main"), TmpDir::new("ts-side"));
    std::fs::remove_dir_all(side.path()).ok();
    let db = Database::open(dir.path(), Options::default()).unwrap();
    db.create_tablespace("side", &TablespaceSpec { dir: side.path().to_path_buf(), profile: None }).unwrap();
    assert!(db.create_tablespace("side", &TablespaceSpec { dir: side.join("x"), profile: None }).is_err());
    assert!(db.create_table_in("bad", schema(), "nowhere", "default").is_err());
    let a = db.create_table_in("a", schema(), "side", "default").unwrap();
    let b = db.create_table("b", schema()).unwrap();
    for k in 0..500 {
        a.insert(&row(k, k * 2)).unwrap();
        b.insert(&row(k, k * 3)).unwrap();
    }
    assert_eq!(files(side.path()), ["t0.heap"]);
    assert_eq!(files(dir.path()), ["t0.idx", "t1.heap", "t1.idx"]);
    let described = nvmedb::inspect::describe_database(&db).unwrap();
    assert!(described.contains("tablespace `side`"), "{described}");
    drop((a, b));
    db.close().unwrap();

    // Reopened from the catalog's record of the tablespace.
    let db = Database::open(dir.path(), Options::default()).unwrap();
    // The first session's statistics were saved at its close (what `nvmedb inspect --stats` shows).
    let saved = db.access_stats_total().unwrap();
    let a_saved = saved.iter().find(|s| s.table == "a").unwrap();
    assert!(a_saved.heap.hits + a_saved.heap.misses >= 500, "{a_saved:?}");
    assert!(nvmedb::inspect::describe_access(&saved).contains("side"));
    let a = db.table("a").unwrap();
    assert_eq!(a.get(&Value::Int(7)).unwrap().unwrap()[1], Value::Int(14));
    let cat = db.catalog();
    let meta = cat.tables.iter().find(|t| t.name == "a").unwrap();
    assert_eq!((meta.heap_space.as_str(), meta.index_space.as_str()), ("side", "default"));

    // Swap a's placement (heap home, indexes away) while its handle stays usable.
    db.move_table("a", "default", "side").unwrap();
    assert_eq!(files(side.path()), ["t0.idx"]);
    assert_eq!(files(dir.path()), ["t0.heap", "t1.heap", "t1.idx"]);
    for k in 500..700 {
        a.insert(&row(k, k * 2)).unwrap();
    }
    a.delete(&Value::Int(3)).unwrap();
    assert_eq!(a.lookup("by_v", &Value::Int(20)).unwrap().len(), 1);
    assert!(db.move_table("a", "nowhere", "default").is_err());
    drop(a);
    db.close().unwrap();

    let db = Database::open(dir.path(), Options::default()).unwrap();
    let a = db.table("a").unwrap();
    assert_eq!(a.check_integrity().unwrap(), 699);
    assert_eq!(db.table("b").unwrap().check_integrity().unwrap(), 500);
    assert_eq!(a.get(&Value::Int(650)).unwrap().unwrap()[1], Value::Int(1300));
    drop(a);
    db.drop_table("a").unwrap();
    assert!(files(side.path()).is_empty());
    db.close().unwrap();
}

#[test]
fn a_tablespace_in_memory_must_be_supplied_again() {
    let main: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let fast: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(main.clone(), Options::default()).unwrap();
    db.create_tablespace_on("fast", fast.clone(), "optane").unwrap();
    db.create_table_in("t", schema(), "fast", "fast").unwrap().insert(&row(1, 1)).unwrap();
    db.close().unwrap();
    let err = Database::open_with_storage(main.clone(), Options::default()).unwrap_err();
    assert!(err.to_string().contains("tablespace `fast`"), "{err}");
    let opts = Options { tablespaces: Tablespaces::new().with("fast", fast), ..Options::default() };
    let db = Database::open_with_storage(main, opts).unwrap();
    assert_eq!(db.table("t").unwrap().get(&Value::Int(1)).unwrap().unwrap()[1], Value::Int(1));
}

/// Every hit, miss, read, write and nanosecond of I/O wait a pool counts belongs to one table.
#[test]
fn access_statistics_add_up_to_the_buffer_pools_totals() {
    let fast: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let opts = Options {
        table_page_size: 4096,
        table_buffer: BufferSize::Bytes(24 * 4096),
        index_buffer: BufferSize::Bytes(64 * 4096),
        pin_indexes: false,
        ..Options::default()
    };
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), opts).unwrap();
    db.create_tablespace_on("fast", fast, "").unwrap();
    let tables = [
        db.create_table("a", schema()).unwrap(),
        db.create_table_in("b", schema(), "fast", "default").unwrap(),
        db.create_table_in("c", schema(), "default", "fast").unwrap(),
    ];
    let before = db.access_stats().unwrap();
    let mut rng = Rng::new(support::seed(3));
    for (i, t) in tables.iter().enumerate() {
        for k in 0..(300 * (i as i64 + 1)) {
            t.insert(&row(k, k)).unwrap();
        }
    }
    for _ in 0..3000 {
        let t = &tables[rng.below(3) as usize];
        let k = rng.below(300) as i64;
        if rng.chance(0.3) {
            t.update(&row(k, k + 1)).unwrap();
        } else {
            t.get(&Value::Int(k)).unwrap();
        }
    }
    db.checkpoint().unwrap();
    let stats = db.access_stats().unwrap();
    let (tp, ip) = db.buffer_stats();
    let sum = |f: &dyn Fn(&nvmedb::TableAccess) -> u64| stats.iter().map(f).sum::<u64>();
    assert_eq!(sum(&|s| s.heap.hits), tp.hits);
    assert_eq!(sum(&|s| s.heap.misses), tp.misses);
    assert_eq!(sum(&|s| s.heap.reads), tp.reads);
    assert_eq!(sum(&|s| s.heap.writes), tp.writes);
    assert_eq!(sum(&|s| s.heap.io_wait_ns), tp.io_wait_ns);
    assert_eq!(sum(&|s| s.index.hits), ip.hits);
    assert_eq!(sum(&|s| s.index.misses), ip.misses);
    assert_eq!(sum(&|s| s.index.writes), ip.writes);
    assert_eq!(sum(&|s| s.index.io_wait_ns), ip.io_wait_ns);
    // The buffer is small: table pages were read back, and written.
    assert!(tp.misses > 0 && tp.writes > 0, "{tp:?}");
    // The table with three times a's rows is read and written more than a.
    let by = |n: &str| {
        let was = before.iter().find(|s| s.table == n).unwrap();
        stats.iter().find(|s| s.table == n).unwrap().since(was)
    };
    assert!(by("c").heap.hits + by("c").heap.misses > by("a").heap.hits + by("a").heap.misses);
    assert_eq!(by("b").heap_space, "fast");
    assert_eq!(by("b").heap_bytes_written(), by("b").heap.writes * 4096);
}

/// Options of the kill test: a buffer of a few frames, so dirty pages are evicted (and written
/// to whichever device a table is on) all the time.
fn kill_options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(16 * 4096),
        index_buffer: BufferSize::Bytes(24 * 4096),
        pin_indexes: false,
        ..Options::default()
    }
}

/// Child mode: two workload clients, and a mover sending `events` and `items` back and forth
/// between the two tablespaces (heap and indexes in opposite places half the time).
#[test]
fn kill9_move_child_entry() {
    let Some(dir) = kill::child_role() else { return };
    let seed: u64 = std::env::var("NVMEDB_KILL_WORKLOAD_SEED").unwrap().parse().unwrap();
    let db = Database::open(&dir, kill_options()).expect("child opens the database");
    let mover = |say: &dyn Fn(String)| {
        let places = [("side", "side"), ("default", "side"), ("default", "default"), ("side", "default")];
        for i in 0.. {
            for (k, table) in ["events", "items"].into_iter().enumerate() {
                let (h, x) = places[(i + k) % places.len()];
                db.move_table(table, h, x).unwrap_or_else(|e| panic!("child: moving {table}: {e}"));
                say(format!("MOVED {table} {h} {x}"));
            }
            // Commits between moves (a move holds every change back while it copies).
            std::thread::sleep(Duration::from_millis(15));
        }
    };
    workload::run_clients(&db, seed, 2, Some(&mover));
}

#[test]
fn kill9_during_moves_loses_nothing_and_keeps_each_file_in_one_tablespace() {
    let iters = support::iters(4);
    let seed = support::seed(11);
    let mut rng = Rng::new(seed);
    let (dir, side) = (TmpDir::new("ts-kill"), TmpDir::new("ts-kill-side"));
    std::fs::remove_dir_all(side.path()).ok();
    let workload_seed = rng.next_u64() % 1_000_000;
    {
        let db = Database::open(dir.path(), kill_options()).unwrap();
        db.create_tablespace("side", &TablespaceSpec { dir: side.path().to_path_buf(), profile: None })
            .unwrap();
        workload::create(&db).unwrap();
        db.close().unwrap();
    }
    let mut committed: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut acks, mut moves) = (0u64, 0u64);
    for iter in 0..iters {
        let ctx = format!(
            "iteration {iter} ({} cargo test -p nvmedb --test tablespaces -- kill9_during)",
            support::replay(seed, iter + 1)
        );
        let kill_after = rng.range(2, 12);
        let child = kill::spawn(
            "kill9_move_child_entry",
            dir.path().to_str().unwrap(),
            &[("NVMEDB_KILL_WORKLOAD_SEED", workload_seed.to_string())],
        );
        let mut acked = workload::Acks::default();
        let mut moved = 0;
        child
            .kill_after(kill_after, |line| {
                acked.note(line);
                moved += u64::from(line.starts_with("MOVED "));
                moved
            })
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        acks += acked.n;
        moves += moved;
        let bounds = acked.bounds(&committed, 4, 2);
        let db = Database::open(
            dir.path(),
            Options { table_buffer: BufferSize::Bytes(64 << 20), ..kill_options() },
        )
        .unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
        committed = workload::verify(&db, workload_seed, &bounds).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        // Each file is in exactly the tablespace the catalog names.
        let (home, away) = (files(dir.path()), files(side.path()));
        for t in db.catalog().tables {
            for (f, space) in [(heap_name(t.id), &t.heap_space), (index_name(t.id), &t.index_space)] {
                let (in_home, in_side) = (home.contains(&f), away.contains(&f));
                assert!(
                    in_home == (space == "default") && in_side == (space == "side"),
                    "{ctx}: {f} of `{}` placed in `{space}` but found at home {in_home}, side {in_side}",
                    t.name
                );
            }
        }
        db.close().unwrap();
    }
    eprintln!("kill -9 during moves: {iters} kills, {acks} acknowledged commits and {moves} moves verified");
}
