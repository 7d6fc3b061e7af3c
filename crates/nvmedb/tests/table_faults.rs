//! Tables under injected I/O errors: every failure is a typed error, a failed operation
//! leaves the table as it was, and when the faults stop the table matches the model and its
//! indexes agree with its heap.

use nvmedb::io::{HookedStorage, IoError, IoHook, IoOpKind, IoResult, MemStorage};
use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Error, Options, Schema, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Fails each read or write with probability `rate_ppm / 1e6` (seeded).
struct RandomEio {
    rng: Mutex<Rng>,
    rate_ppm: AtomicU64,
}

impl IoHook for RandomEio {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        let rate = self.rate_ppm.load(Ordering::SeqCst);
        let hit = matches!(op, IoOpKind::Read | IoOpKind::Write)
            && rate > 0
            && self.rng.lock().unwrap().below(1_000_000) < rate;
        if hit {
            return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

#[test]
fn failed_operations_change_nothing() {
    // NVMEDB_TEST_ITERS: seeds to run (default 10); NVMEDB_TEST_SEED0: the first seed.
    let iters: u64 = std::env::var("NVMEDB_TEST_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let seed0: u64 = std::env::var("NVMEDB_TEST_SEED0").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut poisoned_seeds = 0;
    let mut total_failures = 0u64;
    for seed in seed0..seed0 + iters {
        let faults = Arc::new(RandomEio { rng: Mutex::new(Rng::new(seed)), rate_ppm: AtomicU64::new(0) });
        let rate = &faults.rate_ppm;
        let storage = Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), faults.clone()));
        let opts = Options {
            table_page_size: 4096,
            index_page_size: 4096,
            table_buffer: BufferSize::Bytes(8 * 4096),
            index_buffer: BufferSize::Bytes(10 * 4096),
            // Odd seeds keep index pages resident (the default), in an index buffer the
            // indexes outgrow: kept-resident pages are then evicted and written back too.
            pin_indexes: seed % 2 == 1,
            ..Options::default()
        };
        let db = Database::open_with_storage(storage, opts).unwrap();
        let schema = Schema::new(vec![
            ("id", ColumnType::Int),
            ("grp", ColumnType::Int),
            ("pad", ColumnType::Bytes(400)),
        ])
        .with_index("by_grp", "grp")
        .unwrap();
        let t = db.create_table("t", schema).unwrap();
        rate.store(50_000, Ordering::SeqCst); // 5 % of reads and writes fail
        let mut rng = Rng::new(seed ^ 0xABCD);
        let mut model: BTreeMap<i64, i64> = BTreeMap::new();
        let mut failures = 0;
        let mut poisoned = false;
        for step in 0..3000 {
            let id = rng.below(400) as i64;
            let grp = rng.below(6) as i64;
            let pad = Value::Bytes(vec![b'p'; rng.below(400) as usize]);
            let r = match rng.below(3) {
                0 => t.insert(&[Value::Int(id), Value::Int(grp), pad]).map(|()| {
                    model.insert(id, grp);
                }),
                1 => t.update(&[Value::Int(id), Value::Int(grp), pad]).map(|done| {
                    if done {
                        model.insert(id, grp);
                    }
                }),
                _ => t.delete(&Value::Int(id)).map(|done| {
                    if done {
                        model.remove(&id);
                    }
                }),
            };
            match r {
                Ok(()) | Err(Error::AlreadyExists(_)) => {}
                Err(Error::Io(e)) => {
                    assert_eq!(e.raw_os_error(), Some(5), "seed {seed} step {step}");
                    failures += 1;
                }
                Err(Error::Poisoned(_)) => {
                    poisoned = true;
                    break;
                }
                Err(e) => panic!("seed {seed} step {step}: unexpected error {e}"),
            }
        }
        rate.store(0, Ordering::SeqCst);
        eprintln!(
            "seed {seed}: {failures} operations failed with injected EIO, poisoned: {poisoned}, rows {}",
            model.len()
        );
        // How many surface depends on how many I/Os the operations themselves wait for (the
        // background writer's are retried out of their sight), so the floor is on the sum.
        assert!(failures > 0, "seed {seed}: no injected failure surfaced");
        total_failures += failures;
        if poisoned {
            poisoned_seeds += 1;
            continue;
        }
        assert_eq!(t.check_integrity().unwrap(), model.len() as u64, "seed {seed}");
        for (id, grp) in &model {
            assert_eq!(t.read(&Value::Int(*id), |r| r.int(1)).unwrap(), Some(*grp), "seed {seed} id {id}");
        }
    }
    assert!(poisoned_seeds * 5 <= iters.max(10), "{poisoned_seeds} of {iters} seeds ended poisoned");
    assert!(total_failures > 10 * iters, "only {total_failures} injected failures surfaced in {iters} seeds");
}

/// Fails every write while switched on.
struct WritesFail(std::sync::atomic::AtomicBool);

impl IoHook for WritesFail {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        if op == IoOpKind::Write && self.0.load(Ordering::SeqCst) {
            return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

/// An insert that needs a new heap page while the log fails: the page cannot be
/// un-allocated, but it must not keep a row that no index knows (which a scan would return and
/// a write-back would make permanent). With early lock release and without it.
#[test]
fn a_failed_insert_leaves_no_row_on_a_new_page() {
    for early_release in [false, true] {
        let fail = Arc::new(WritesFail(std::sync::atomic::AtomicBool::new(false)));
        let log = |_| -> Arc<dyn nvmedb::io::Storage> {
            Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), fail.clone()))
        };
        let mut opts = Options { table_page_size: 4096, index_page_size: 4096, ..Options::default() };
        opts.lock_options.early_release = early_release;
        let db =
            Database::open_with_storages(Arc::new(MemStorage::new()), Some((log(0), log(1))), opts).unwrap();
        let schema = || Schema::new(vec![("id", ColumnType::Int), ("pad", ColumnType::Bytes(3000))]);
        let t = db.create_table("t", schema()).unwrap();
        let empty = db.create_table("empty", schema()).unwrap();
        let row = |id: i64| [Value::Int(id), Value::Bytes(vec![7; 3000])];
        t.insert(&row(1)).unwrap();
        // A commit's flush fails, which poisons the log; then the first insert into the empty
        // table (which allocates its first heap page) fails while logging its page changes.
        fail.0.store(true, Ordering::SeqCst);
        assert!(t.insert(&row(2)).is_err());
        fail.0.store(false, Ordering::SeqCst);
        assert!(empty.insert(&row(3)).is_err());
        let mut scanned = Vec::new();
        let scan = empty.scan(|r| {
            scanned.push(r.int(0));
            Ok(true)
        });
        assert!(
            scanned.is_empty(),
            "early release {early_release}: the failed insert left its row in the heap: {scanned:?}"
        );
        match (early_release, scan) {
            (false, r) => r.unwrap(),
            // The failed commit's locks went early: a read that may have seen it cannot be
            // answered once its flush failed.
            (true, Err(nvmedb::Error::Poisoned(_))) => {}
            (true, r) => panic!("a read after an early-released commit whose flush failed returned {r:?}"),
        }
        assert_eq!(empty.check_integrity().unwrap(), 0, "early release {early_release}");
    }
}

/// Fails reads of one page of the heap files while armed (`u64::MAX`: none).
struct HeapPageReadFails(AtomicU64);

impl IoHook for HeapPageReadFails {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        if op == IoOpKind::Read && device.ends_with(".heap") && offset == self.0.load(Ordering::SeqCst) {
            return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

/// An update that grows a row past its page moves it; when the insert of the moved row fails
/// (here: the insert page cannot be read), the row must still be where its index entries
/// point, unchanged, and a later update must succeed.
#[test]
fn a_failed_move_keeps_the_row_where_its_index_points() {
    let fail = Arc::new(HeapPageReadFails(AtomicU64::new(u64::MAX)));
    let storage = Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), fail.clone()));
    let opts = || Options { table_page_size: 4096, index_page_size: 4096, ..Options::default() };
    let schema = Schema::new(vec![
        ("id", ColumnType::Int),
        ("grp", ColumnType::Int),
        ("pad", ColumnType::Bytes(3500)),
    ])
    .with_index("by_grp", "grp")
    .unwrap();
    let row =
        |id: i64, grp: i64, len: usize| [Value::Int(id), Value::Int(grp), Value::Bytes(vec![id as u8; len])];
    {
        let db = Database::open_with_storage(storage.clone(), opts()).unwrap();
        let t = db.create_table("t", schema).unwrap();
        for id in 0..9 {
            t.insert(&row(id, 1, 1000)).unwrap();
        }
        db.close().unwrap();
    }
    // Reopened, nothing of the heap is resident; reading row 0 brings in its page only.
    let db = Database::open_with_storage(storage.clone(), opts()).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(t.read(&Value::Int(0), |r| r.int(1)).unwrap(), Some(1));
    let pages = t.heap_pages().unwrap();
    assert!(pages >= 3, "{pages} heap pages");
    // The last page (where inserts go) cannot be read: row 0, grown to 3000 bytes, fits
    // neither its own page nor that one.
    fail.0.store((pages - 1) * 4096, Ordering::SeqCst);
    match t.update(&row(0, 2, 3000)) {
        Err(Error::Io(e)) => assert_eq!(e.raw_os_error(), Some(5)),
        other => panic!("the update should fail with the injected EIO, got {other:?}"),
    }
    fail.0.store(u64::MAX, Ordering::SeqCst);
    let got = t.get(&Value::Int(0)).unwrap();
    assert_eq!(got.as_deref(), Some(&row(0, 1, 1000)[..]), "row 0 after the failed move");
    assert_eq!(t.lookup("by_grp", &Value::Int(1)).unwrap().len(), 9);
    assert!(t.lookup("by_grp", &Value::Int(2)).unwrap().is_empty());
    assert_eq!(t.check_integrity().unwrap(), 9);
    // With the faults gone the move goes through.
    assert!(t.update(&row(0, 2, 3000)).unwrap());
    assert_eq!(t.get(&Value::Int(0)).unwrap().as_deref(), Some(&row(0, 2, 3000)[..]));
    assert_eq!(t.check_integrity().unwrap(), 9);
}
