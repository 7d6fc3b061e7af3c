//! Crash recovery on a simulated disk: a database with a duplexed log runs random changes with
//! a buffer of a few frames (dirty pages are written back all the time), the power is cut at a
//! random device write (every later write and sync fails, unsynced writes are dropped or torn),
//! and the database is reopened. Every acknowledged change must be there, the change in flight
//! must be all there or not at all, and heap and indexes must agree. Seeded; the seed is printed.

use nvmedb::io::{CrashSimStorage, Device, HookedStorage, IoError, IoHook, IoOpKind, IoResult, Storage};
use nvmedb::util::Rng;
use nvmedb::wal::WalOptions;
use nvmedb::{BufferSize, ColumnType, Database, Error, Options, Schema, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Fails every write, sync and resize once the shared countdown reaches zero (the power is
/// cut); reads still work.
struct PowerCut {
    countdown: AtomicI64,
}

impl IoHook for PowerCut {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        if op != IoOpKind::Read && self.countdown.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(8 * 4096),
        index_buffer: BufferSize::Bytes(10 * 4096),
        pin_indexes: false,
        wal_options: WalOptions {
            segment_bytes: 256 * 1024,
            max_batch_bytes: 64 * 1024,
            ..WalOptions::default()
        },
        ..Options::default()
    }
}

struct Disks {
    data: Arc<CrashSimStorage>,
    log_a: Arc<CrashSimStorage>,
    log_b: Arc<CrashSimStorage>,
}

impl Disks {
    fn open(&self, cut: &Arc<PowerCut>) -> nvmedb::Result<Database> {
        let wrap = |s: &Arc<CrashSimStorage>| -> Arc<dyn Storage> {
            Arc::new(HookedStorage::new(s.clone(), cut.clone()))
        };
        Database::open_with_storages(
            wrap(&self.data),
            Some((wrap(&self.log_a), wrap(&self.log_b))),
            options(),
        )
    }
    fn crash(&self, rng: &mut Rng) {
        self.data.crash(rng);
        self.log_a.crash(rng);
        self.log_b.crash(rng);
    }
}

type Row = (i64, Vec<u8>);

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("grp", ColumnType::Int), ("pad", ColumnType::Bytes(600))])
        .with_index("by_grp", "grp")
        .unwrap()
}

fn check(db: &Database, model: &BTreeMap<i64, Row>, in_flight: Option<(i64, Option<Row>)>, ctx: &str) {
    let t = db.table("t").unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let rows = t.check_integrity().unwrap_or_else(|e| panic!("{ctx}: integrity: {e}"));
    let mut found = 0;
    for id in 0..300i64 {
        let got = t.read(&Value::Int(id), |r| (r.int(1), r.bytes(2).to_vec())).unwrap();
        found += u64::from(got.is_some());
        let want = model.get(&id).cloned();
        match &in_flight {
            Some((k, after)) if *k == id => {
                assert!(
                    got == want || got == *after,
                    "{ctx}: key {id} is neither before nor after the change in flight"
                )
            }
            _ => assert_eq!(got, want, "{ctx}: key {id}"),
        }
    }
    assert_eq!(rows, found, "{ctx}");
}

#[test]
fn every_acknowledged_change_survives_a_power_cut() {
    let seeds: u64 = std::env::var("NVMEDB_CRASH_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let first: u64 = std::env::var("NVMEDB_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut stats = (0u64, 0u64, 0u64);
    for seed in first..first + seeds {
        let ctx = format!("seed {seed} (replay: NVMEDB_CRASH_SEED={seed} NVMEDB_CRASH_SEEDS=1)");
        let mut rng = Rng::new(seed);
        let disks = Disks {
            data: Arc::new(CrashSimStorage::new()),
            log_a: Arc::new(CrashSimStorage::new()),
            log_b: Arc::new(CrashSimStorage::new()),
        };
        let cut = Arc::new(PowerCut { countdown: AtomicI64::new(i64::MAX) });
        let countdown = &cut.countdown;
        let mut model: BTreeMap<i64, Row> = BTreeMap::new();
        {
            let db = disks.open(&cut).unwrap();
            db.create_table("t", schema()).unwrap();
        }
        // Two rounds of work, power cut, recovery per seed.
        for round in 0..2 {
            let db = disks.open(&cut).unwrap_or_else(|e| panic!("{ctx} round {round}: reopen: {e}"));
            check(&db, &model, None, &format!("{ctx} round {round} after reopen"));
            let t = db.table("t").unwrap();
            countdown.store(rng.range(5, 400) as i64, Ordering::SeqCst);
            let mut in_flight = None;
            for _ in 0..200 {
                let id = rng.below(300) as i64;
                let row: Row = (rng.below(5) as i64, vec![b'x'; rng.below(600) as usize]);
                let vals = [Value::Int(id), Value::Int(row.0), Value::Bytes(row.1.clone())];
                let (r, after) = match rng.below(3) {
                    0 => (t.insert(&vals).map(|()| true), Some(row.clone())),
                    1 => (t.update(&vals), Some(row.clone())),
                    _ => (t.delete(&Value::Int(id)), None),
                };
                match r {
                    Ok(changed) => {
                        if changed {
                            match &after {
                                Some(a) => model.insert(id, a.clone()),
                                None => model.remove(&id),
                            };
                        }
                    }
                    Err(Error::AlreadyExists(_)) => {}
                    Err(_) => {
                        // The power went out during this change.
                        in_flight = Some((id, after));
                        break;
                    }
                }
            }
            drop(t);
            drop(db);
            countdown.store(i64::MAX, Ordering::SeqCst);
            disks.crash(&mut rng);
            let db = disks.open(&cut).unwrap_or_else(|e| panic!("{ctx} round {round}: recovery: {e}"));
            let rep = db.recovery_report().clone();
            stats.0 += rep.pages_redone;
            stats.1 += rep.losers;
            stats.2 += rep.ops_undone;
            check(&db, &model, in_flight.clone(), &format!("{ctx} round {round} after recovery"));
            // The change in flight is now settled one way or the other.
            if let Some((id, _)) = in_flight {
                let t = db.table("t").unwrap();
                match t.read(&Value::Int(id), |r| (r.int(1), r.bytes(2).to_vec())).unwrap() {
                    Some(r) => model.insert(id, r),
                    None => model.remove(&id),
                };
            }
        }
    }
    eprintln!(
        "{seeds} seeds: {} page changes redone, {} unfinished transactions, {} operations undone",
        stats.0, stats.1, stats.2
    );
    assert!(stats.0 > 0 && stats.1 > 0, "recovery never had work to do: {stats:?}");
}

#[test]
fn losing_one_log_copy_loses_no_acknowledged_change() {
    for (seed, damage) in [(1u64, "remove"), (2, "corrupt"), (3, "remove-mirror"), (4, "corrupt-mirror")] {
        let ctx = format!("seed {seed}, {damage}");
        let mut rng = Rng::new(seed);
        let disks = Disks {
            data: Arc::new(CrashSimStorage::new()),
            log_a: Arc::new(CrashSimStorage::new()),
            log_b: Arc::new(CrashSimStorage::new()),
        };
        let cut = Arc::new(PowerCut { countdown: AtomicI64::new(i64::MAX) });
        let mut model: BTreeMap<i64, Row> = BTreeMap::new();
        {
            let db = disks.open(&cut).unwrap();
            let t = db.create_table("t", schema()).unwrap();
            for _ in 0..300 {
                let id = rng.below(300) as i64;
                let row: Row = (rng.below(5) as i64, vec![b'y'; rng.below(600) as usize]);
                let vals = [Value::Int(id), Value::Int(row.0), Value::Bytes(row.1.clone())];
                let done = t.update(&vals).unwrap() || t.insert(&vals).is_ok();
                assert!(done, "{ctx}: neither update nor insert of key {id}");
                model.insert(id, row);
            }
            // Crash without a checkpoint: the log holds everything since the last one.
            std::mem::forget(db);
        }
        disks.crash(&mut rng);
        let victim = if damage.ends_with("mirror") { &disks.log_b } else { &disks.log_a };
        for name in victim.list().unwrap() {
            if damage.starts_with("remove") {
                victim.remove(&name).unwrap();
            } else {
                let dev = victim.device(&name).unwrap();
                let mut buf = nvmedb::io::AlignedBuf::new(4096);
                for block in (1..dev.capacity() / 4096).step_by(3) {
                    dev.read_at(block * 4096, &mut buf).unwrap();
                    buf[100] ^= 0x5A;
                    dev.write_at(block * 4096, &buf).unwrap();
                }
                dev.sync().unwrap();
            }
        }
        let db = disks.open(&cut).unwrap_or_else(|e| panic!("{ctx}: recovery: {e}"));
        check(&db, &model, None, &ctx);
    }
}
