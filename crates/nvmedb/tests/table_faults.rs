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
    let mut poisoned_seeds = 0;
    for seed in 0..10u64 {
        let faults = Arc::new(RandomEio { rng: Mutex::new(Rng::new(seed)), rate_ppm: AtomicU64::new(0) });
        let rate = &faults.rate_ppm;
        let storage = Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), faults.clone()));
        let opts = Options {
            table_page_size: 4096,
            index_page_size: 4096,
            table_buffer: BufferSize::Bytes(8 * 4096),
            index_buffer: BufferSize::Bytes(10 * 4096),
            pin_indexes: false,
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
        assert!(failures > 10, "seed {seed}: only {failures} injected failures surfaced");
        if poisoned {
            poisoned_seeds += 1;
            continue;
        }
        assert_eq!(t.check_integrity().unwrap(), model.len() as u64, "seed {seed}");
        for (id, grp) in &model {
            assert_eq!(t.read(&Value::Int(*id), |r| r.int(1)).unwrap(), Some(*grp), "seed {seed} id {id}");
        }
    }
    assert!(poisoned_seeds <= 2, "{poisoned_seeds} of 10 seeds ended poisoned");
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
/// a write-back would make permanent).
#[test]
fn a_failed_insert_leaves_no_row_on_a_new_page() {
    let fail = Arc::new(WritesFail(std::sync::atomic::AtomicBool::new(false)));
    let log = |_| -> Arc<dyn nvmedb::io::Storage> {
        Arc::new(HookedStorage::new(Arc::new(MemStorage::new()), fail.clone()))
    };
    let opts = Options { table_page_size: 4096, index_page_size: 4096, ..Options::default() };
    let db = Database::open_with_storages(Arc::new(MemStorage::new()), Some((log(0), log(1))), opts).unwrap();
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
    empty
        .scan(|r| {
            scanned.push(r.int(0));
            Ok(true)
        })
        .unwrap();
    assert!(scanned.is_empty(), "the failed insert left its row in the heap: {scanned:?}");
    assert_eq!(empty.check_integrity().unwrap(), 0);
}
