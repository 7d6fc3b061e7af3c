//! Tables against a `BTreeMap` model: random operations (seeded; the seed is printed on
//! failure) with buffers of a few frames so eviction is constant, reopening the database, and
//! integrity checks of heap and indexes.

use nvmedb::io::{MemStorage, Storage};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Error, Options, Schema, Value};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

fn tiny_options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(8 * 4096),
        index_buffer: BufferSize::Bytes(12 * 4096),
        pin_indexes: false,
        ..Options::default()
    }
}

/// [`tiny_options`] with index pages kept resident (the default, and what TPC-C and the lab's
/// cached-index experiments use): the indexes outgrow the 12-frame index buffer, which must
/// then evict index pages like any others instead of failing.
fn tiny_pinned_options() -> Options {
    Options { pin_indexes: true, ..tiny_options() }
}

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("grp", ColumnType::Int), ("name", ColumnType::Bytes(300))])
        .with_index("by_grp", "grp")
        .unwrap()
        .with_index("by_name", "name")
        .unwrap()
}

fn row(id: i64, grp: i64, name: &[u8]) -> Vec<Value> {
    vec![Value::Int(id), Value::Int(grp), Value::Bytes(name.to_vec())]
}

#[test]
fn random_operations_match_the_model_across_reopens() {
    random_operations(tiny_options);
}

#[test]
fn indexes_larger_than_a_pinned_index_buffer_evict() {
    random_operations(tiny_pinned_options);
}

fn random_operations(tiny_options: fn() -> Options) {
    for seed in 0..8u64 {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let mut db = Database::open_with_storage(storage.clone(), tiny_options()).unwrap();
        let mut t = db.create_table("items", schema()).unwrap();
        let mut rng = Rng::new(seed);
        let mut model: BTreeMap<i64, (i64, Vec<u8>)> = BTreeMap::new();
        let mut evictions = (0, 0);
        for step in 0..2500 {
            let id = rng.below(600) as i64 - 100;
            let grp = rng.below(7) as i64;
            let name = format!("n{}", rng.below(50)).repeat(rng.below(60) as usize + 1).into_bytes();
            let ctx = format!("seed {seed} step {step} id {id}");
            match rng.below(10) {
                0..=3 => match t.insert(&row(id, grp, &name)) {
                    Ok(()) => assert!(model.insert(id, (grp, name)).is_none(), "{ctx}"),
                    Err(Error::AlreadyExists(_)) => assert!(model.contains_key(&id), "{ctx}"),
                    Err(e) => panic!("{ctx}: {e}"),
                },
                4..=5 => {
                    let updated = t.update(&row(id, grp, &name)).unwrap();
                    assert_eq!(updated, model.contains_key(&id), "{ctx}");
                    if updated {
                        model.insert(id, (grp, name));
                    }
                }
                6 => assert_eq!(t.delete(&Value::Int(id)).unwrap(), model.remove(&id).is_some(), "{ctx}"),
                7 => {
                    let got = t.get(&Value::Int(id)).unwrap();
                    assert_eq!(got, model.get(&id).map(|(g, n)| row(id, *g, n)), "{ctx}");
                    // A batch of lookups (more than one interleaved group, present and absent
                    // keys, repeats) agrees with the model key by key.
                    let keys: Vec<Value> =
                        (0..rng.below(40)).map(|_| Value::Int(rng.below(600) as i64 - 100)).collect();
                    let mut got = Vec::new();
                    t.read_many(&keys, |i, r| got.push((i, r.map(|r| r.to_values())))).unwrap();
                    let want: Vec<_> = keys
                        .iter()
                        .enumerate()
                        .map(|(i, k)| {
                            let id = k.as_int().unwrap();
                            (i, model.get(&id).map(|(g, n)| row(id, *g, n)))
                        })
                        .collect();
                    assert_eq!(got, want, "{ctx}: read_many of {keys:?}");
                }
                8 => {
                    let got: Vec<i64> = t
                        .lookup("by_grp", &Value::Int(grp))
                        .unwrap()
                        .iter()
                        .map(|r| r[0].as_int().unwrap())
                        .collect();
                    let want: Vec<i64> =
                        model.iter().filter(|(_, (g, _))| *g == grp).map(|(k, _)| *k).collect();
                    assert_eq!(got, want, "{ctx}");
                }
                _ => {
                    let (lo, hi) = (id, id + rng.below(80) as i64);
                    let mut got = Vec::new();
                    t.range(Bound::Included(&Value::Int(lo)), Bound::Excluded(&Value::Int(hi)), |r| {
                        got.push(r.int(0));
                        Ok(true)
                    })
                    .unwrap();
                    let want: Vec<i64> = model.range(lo..hi).map(|(k, _)| *k).collect();
                    assert_eq!(got, want, "{ctx}");
                }
            }
            if step % 800 == 799 {
                assert_eq!(t.check_integrity().unwrap(), model.len() as u64, "{ctx}");
                let (ts, is) = db.buffer_stats();
                evictions = (evictions.0 + ts.evictions, evictions.1 + is.evictions);
                db.close().unwrap();
                db = Database::open_with_storage(storage.clone(), tiny_options()).unwrap();
                t = db.table("items").unwrap();
            }
        }
        assert_eq!(t.check_integrity().unwrap(), model.len() as u64, "seed {seed}");
        let mut scanned = BTreeMap::new();
        t.scan(|r| {
            scanned.insert(r.int(0), (r.int(1), r.bytes(2).to_vec()));
            Ok(true)
        })
        .unwrap();
        assert_eq!(scanned, model, "seed {seed}: full scan differs");
        let (ts, is) = db.buffer_stats();
        evictions = (evictions.0 + ts.evictions, evictions.1 + is.evictions);
        assert!(evictions.0 > 0 && evictions.1 > 0, "seed {seed}: pools never evicted: {evictions:?}");
    }
}

#[test]
fn concurrent_writers_keep_heap_and_indexes_consistent() {
    concurrent_writers(tiny_options());
}

#[test]
fn concurrent_writers_with_indexes_larger_than_a_pinned_index_buffer() {
    concurrent_writers(tiny_pinned_options());
}

fn concurrent_writers(options: Options) {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), options).unwrap();
    let t = db.create_table("items", schema()).unwrap();
    std::thread::scope(|s| {
        for th in 0..4u64 {
            let t = t.clone();
            s.spawn(move || {
                let mut rng = Rng::new(th + 100);
                for _ in 0..1500 {
                    let id = rng.below(300) as i64;
                    let grp = rng.below(5) as i64;
                    match rng.below(4) {
                        0 => match t.insert(&row(id, grp, b"x")) {
                            Ok(()) | Err(Error::AlreadyExists(_)) => {}
                            Err(e) => panic!("thread {th}: {e}"),
                        },
                        1 => {
                            t.update(&row(id, grp, &vec![b'y'; rng.below(200) as usize])).unwrap();
                        }
                        2 => {
                            t.delete(&Value::Int(id)).unwrap();
                        }
                        _ => {
                            if let Some(r) = t.get(&Value::Int(id)).unwrap() {
                                assert_eq!(r[0], Value::Int(id));
                            }
                        }
                    }
                }
            });
        }
    });
    let rows = t.check_integrity().unwrap();
    let mut n = 0;
    t.scan(|_| {
        n += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(rows, n);
}

/// `read_many` while writers split leaves (ascending inserts) and move rows (growing updates)
/// under it: every row it returns is the one asked for, and a key committed before the batch
/// started is always found.
#[test]
fn read_many_during_splits_and_row_moves_finds_every_committed_row() {
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), tiny_options()).unwrap();
    let t = db.create_table("items", schema()).unwrap();
    let committed = std::sync::atomic::AtomicI64::new(0);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tw, committed_w, done_w) = (t.clone(), &committed, &done);
        s.spawn(move || {
            let mut rng = Rng::new(7);
            for id in 0..3000i64 {
                tw.insert(&row(id, id % 5, b"x")).unwrap();
                committed_w.store(id + 1, std::sync::atomic::Ordering::Release);
                // Grow an earlier row so that it moves to another heap page.
                let old = rng.below(id as u64 + 1) as i64;
                tw.update(&row(old, old % 5, &vec![b'y'; 1 + rng.below(280) as usize])).unwrap();
            }
            done_w.store(true, std::sync::atomic::Ordering::Release);
        });
        for th in 0..2u64 {
            let (t, committed, done) = (t.clone(), &committed, &done);
            s.spawn(move || {
                let mut rng = Rng::new(th);
                let mut batches = 0;
                while !done.load(std::sync::atomic::Ordering::Acquire) || batches < 20 {
                    let known = committed.load(std::sync::atomic::Ordering::Acquire);
                    let keys: Vec<Value> = (0..1 + rng.below(50))
                        .map(|_| Value::Int(rng.below(known as u64 + 10) as i64))
                        .collect();
                    t.read_many(&keys, |i, r| {
                        let want = keys[i].as_int().unwrap();
                        match r {
                            Some(r) => {
                                assert_eq!(r.int(0), want, "batch {batches}: wrong row for key {want}")
                            }
                            None => assert!(want >= known, "batch {batches}: committed key {want} not found"),
                        }
                    })
                    .unwrap();
                    batches += 1;
                }
            });
        }
    });
    assert_eq!(t.check_integrity().unwrap(), 3000);
}

#[test]
fn bad_input_gets_clear_errors() {
    let storage = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(storage.clone(), tiny_options()).unwrap();
    let e = db.table("nope").unwrap_err().to_string();
    assert!(e.contains("table `nope`"), "{e}");
    // Rows larger than a page are stored (in overflow pages), up to the row limit.
    let big = Schema::new(vec![("id", ColumnType::Int), ("blob", ColumnType::Bytes(20 << 20))]);
    let e = db.create_table("big", big).unwrap_err().to_string();
    assert!(e.contains("`big`") && e.contains("`blob`") && e.contains("row limit"), "{e}");
    let wide = Schema::new(vec![("id", ColumnType::Int), ("blob", ColumnType::Char(5000))]);
    db.create_table("wide", wide).unwrap();
    let t = db.create_table("items", schema()).unwrap();
    assert!(matches!(db.create_table("items", schema()), Err(Error::AlreadyExists(_))));
    let e = t.insert(&[Value::Int(1)]).unwrap_err().to_string();
    assert!(e.contains("3 columns"), "{e}");
    let e = t.insert(&[Value::from("x"), Value::Int(1), Value::from("n")]).unwrap_err().to_string();
    assert!(e.contains("`id`") && e.contains("expected Int"), "{e}");
    let e = t.insert(&row(1, 1, &[b'z'; 301])).unwrap_err().to_string();
    assert!(e.contains("`name`") && e.contains("301 bytes"), "{e}");
    let e = t.lookup("by_nothing", &Value::Int(1)).unwrap_err().to_string();
    assert!(e.contains("index `by_nothing`"), "{e}");

    // A storage holding other files but no catalog is not a database.
    let foreign = Arc::new(MemStorage::new());
    foreign.open("notes.txt", true).unwrap();
    let e = Database::open_with_storage(foreign, tiny_options()).unwrap_err().to_string();
    assert!(e.contains("not an nvmedb database") && e.contains("notes.txt"), "{e}");
    let empty = Arc::new(MemStorage::new());
    let opts = Options { create_if_missing: false, ..tiny_options() };
    assert!(matches!(Database::open_with_storage(empty, opts), Err(Error::NotFound(_))));
    let opts = Options { table_page_size: 5000, ..tiny_options() };
    let e = Database::open_with_storage(Arc::new(MemStorage::new()), opts).unwrap_err();
    assert!(matches!(e, Error::Config { ref key, .. } if key == "table_page_size"), "{e}");
}

#[test]
fn corrupted_heap_page_is_reported_with_file_and_page() {
    let storage = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(storage.clone(), tiny_options()).unwrap();
    let t = db.create_table("items", schema()).unwrap();
    for id in 0..200 {
        t.insert(&row(id, id % 3, &[b'a'; 200])).unwrap();
    }
    db.close().unwrap();
    let dev = storage.mem_device("t0.heap").unwrap();
    let mut img = dev.snapshot();
    img[3 * 4096 + 777] ^= 0x08;
    dev.restore(img);
    // The double-write area still holds the page as last written, and an open would repair it
    // from there (as after a torn write): the flip here hits a page it no longer has a copy of.
    let dw = storage.mem_device(nvmedb::buffer::doublewrite::DOUBLEWRITE_FILE).unwrap();
    let blank = vec![0u8; dw.snapshot().len()];
    dw.restore(blank);
    let db = Database::open_with_storage(storage.clone(), tiny_options()).unwrap();
    let t = db.table("items").unwrap();
    let err = t.check_integrity().unwrap_err();
    match err {
        Error::Corruption { file, offset, detail } => {
            assert_eq!(file, "t0.heap");
            assert_eq!(offset, 3 * 4096);
            assert!(detail.contains("page 3") && detail.contains("checksum"), "{detail}");
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn database_on_a_real_directory_survives_close_and_reopen() {
    let dir = nvmedb_testkit::TmpDir::path_only("dir-test");
    {
        let db = Database::open(&dir, tiny_options()).unwrap();
        let t = db.create_table("items", schema()).unwrap();
        for id in 0..500 {
            t.insert(&row(id, id % 4, format!("name-{id}").as_bytes())).unwrap();
        }
        db.close().unwrap();
    }
    let db = Database::open(&dir, Options { create_if_missing: false, ..tiny_options() }).unwrap();
    let t = db.table("items").unwrap();
    assert_eq!(t.check_integrity().unwrap(), 500);
    assert_eq!(t.lookup("by_grp", &Value::Int(3)).unwrap().len(), 125);
    drop(db);
    // A directory with foreign files is refused.
    let foreign = nvmedb_testkit::TmpDir::new("foreign");
    std::fs::write(foreign.join("README"), b"not a database").unwrap();
    let e = Database::open(&foreign, tiny_options()).unwrap_err().to_string();
    assert!(e.contains("not an nvmedb database"), "{e}");
}

/// `BufferSize::PercentOfData` on a database that starts empty: each pool gets the documented
/// floor of frames, the data (and, with index pages kept resident as by default, the indexes)
/// outgrow it and everything still works by evicting; reopened, the pools are sized from the
/// data then present.
#[test]
fn percent_of_data_buffers_on_an_empty_then_growing_database() {
    let opts = || Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::PercentOfData(50.0),
        index_buffer: BufferSize::PercentOfData(50.0),
        ..Options::default()
    };
    let frames = |db: &Database| (db.table_pool().config().frames, db.index_pool().config().frames);
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(storage.clone(), opts()).unwrap();
    assert_eq!(frames(&db), (nvmedb::db::MIN_PERCENT_FRAMES, nvmedb::db::MIN_PERCENT_FRAMES));
    let t = db.create_table("items", schema()).unwrap();
    const ROWS: i64 = 6000;
    for id in 0..ROWS {
        t.insert(&row(id, id % 7, &[id as u8; 100])).unwrap();
    }
    assert_eq!(t.check_integrity().unwrap(), ROWS as u64);
    assert_eq!(t.lookup("by_grp", &Value::Int(3)).unwrap().len(), (ROWS / 7) as usize);
    let (ts, is) = db.buffer_stats();
    assert!(ts.evictions > 0 && is.evictions > 0, "the data never outgrew the pools: {ts:?} {is:?}");
    db.close().unwrap();
    let db = Database::open_with_storage(storage, opts()).unwrap();
    let t = db.table("items").unwrap();
    // Half the files as they are now (at least half the heap pages in use).
    let (heap, (table_frames, index_frames)) = (t.heap_pages().unwrap() as usize, frames(&db));
    assert!(heap / 2 > nvmedb::db::MIN_PERCENT_FRAMES, "{heap} heap pages");
    assert!(table_frames >= heap / 2, "table pool of {table_frames} frames for {heap} heap pages");
    assert!(index_frames > nvmedb::db::MIN_PERCENT_FRAMES, "index pool of {index_frames} frames");
    let last = ROWS - 1;
    assert_eq!(t.get(&Value::Int(last)).unwrap(), Some(row(last, last % 7, &[last as u8; 100])));
}
