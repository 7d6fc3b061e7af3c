//! Crash recovery on a simulated disk: a database with a duplexed log runs the crash workload
//! with a buffer of a few frames (dirty pages are written back all the time), the power is cut
//! at a random device write (every later write and sync fails, unsynced writes are dropped or
//! torn), and the database is reopened. Every acknowledged commit must be there, every
//! transaction all there or not at all, and heap and indexes must agree. Seeded; a failure
//! prints the seed that replays it.

mod support;

use nvmedb::io::{Device, IoHook, Storage};
use nvmedb::txn::LockOptions;
use nvmedb::util::Rng;
use nvmedb::wal::WalOptions;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Transaction, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::workload::{self, Bounds, ClientModel, Plan, Tables};
use support::{PowerCut, SimDisks};

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

/// The disks with every device behind the power cut.
struct Disks(SimDisks);

impl Disks {
    fn new() -> Self {
        Self(SimDisks::new())
    }
    fn open(&self, cut: &Arc<PowerCut>, options: Options) -> nvmedb::Result<Database> {
        let hook: Arc<dyn IoHook> = cut.clone();
        self.0.open(Some(hook.clone()), Some(hook), options)
    }
    fn crash(&self, rng: &mut Rng) {
        self.0.crash(rng);
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

/// Options of the simulated clients: a lock conflict waits only a few microseconds (all
/// clients run on one thread, so the holder cannot release while another waits), then fails
/// with a retryable lock timeout like a deadlock would.
fn sim_options() -> Options {
    Options {
        lock_options: LockOptions {
            spin: Duration::ZERO,
            park: Duration::from_micros(5),
            lock_timeout: Duration::from_micros(5),
            ..LockOptions::default()
        },
        ..options()
    }
}

/// A client of the simulation: its model, its transaction in progress and the next step.
struct SimClient {
    model: ClientModel,
    plan: Plan,
    tx: Option<Transaction>,
    step: usize,
}

/// The crash workload (`support::workload`) on a simulated disk: 2–4 clients, interleaved by
/// the seed on one thread (so the seed replays the run), run multi-table transactions against
/// a buffer of a few frames; the power is cut at a random device write (every later write and
/// sync fails, unsynced writes are dropped or torn), and the database is reopened. Integrity,
/// every acknowledged commit, and every table's exact content (all or nothing per transaction)
/// are checked, twice per seed. Seeds: `NVMEDB_TEST_SEED` (first, default 0) and
/// `NVMEDB_TEST_ITERS` (count, default 300); `scripts/soak.sh` runs 10 000.
#[test]
fn every_acknowledged_change_survives_a_power_cut() {
    let seeds = support::iters(300);
    let first = support::seed(0);
    let mut stats = (0u64, 0u64, 0u64, 0u64, 0u64);
    // Torn pages restored from the double-write area, and full page images applied.
    let mut torn = (0u64, 0u64);
    for seed in first..first + seeds {
        let ctx = format!(
            "seed {seed} ({} cargo test -p nvmedb --test recovery_crash -- every_acknowledged)",
            support::replay(seed, 1)
        );
        let mut rng = Rng::new(seed);
        let disks = Disks::new();
        let cut = Arc::new(PowerCut { countdown: AtomicI64::new(i64::MAX) });
        let countdown = &cut.countdown;
        {
            let db = disks.open(&cut, sim_options()).unwrap();
            workload::create(&db).unwrap();
        }
        let mut committed: BTreeMap<u64, u64> = BTreeMap::new();
        for round in 0..2 {
            let db = disks
                .open(&cut, sim_options())
                .unwrap_or_else(|e| panic!("{ctx} round {round}: reopen: {e}"));
            let t = Tables::open(&db).unwrap();
            let clients = rng.range(2, 5);
            let mut sims: Vec<SimClient> = (0..clients)
                .map(|c| {
                    let (model, _) = workload::replay(seed, c, committed.get(&c).copied().unwrap_or(0));
                    let plan = workload::plan(seed, c, &model);
                    SimClient { model, plan, tx: None, step: 0 }
                })
                .collect();
            countdown.store(rng.range(5, 600) as i64, Ordering::SeqCst);
            let mut committing = None;
            for _ in 0..400 {
                let c = rng.below(clients) as usize;
                let sc = &mut sims[c];
                let tx = sc.tx.get_or_insert_with(|| db.begin());
                let r = if sc.step < sc.plan.steps.len() {
                    workload::exec(tx, &t, &sc.plan, &sc.plan.steps[sc.step])
                } else {
                    committing = Some(c as u64);
                    let r = sc.tx.take().expect("open").commit();
                    if r.is_ok() {
                        committing = None;
                        workload::apply(&sc.plan, &mut sc.model);
                        sc.plan = workload::plan(seed, c as u64, &sc.model);
                        sc.step = 0;
                        stats.3 += 1;
                        continue;
                    }
                    r
                };
                match r {
                    Ok(()) => sc.step += 1,
                    Err(e) if e.is_retryable() => {
                        stats.4 += 1;
                        if sc.tx.take().expect("open").abort().is_err() {
                            break; // the power went out during the abort
                        }
                        sc.step = 0;
                    }
                    Err(e) => {
                        assert!(
                            countdown.load(Ordering::SeqCst) <= 0,
                            "{ctx} round {round}: client {c} failed with the power on: {e}"
                        );
                        break;
                    }
                }
            }
            let acked: BTreeMap<u64, u64> =
                sims.iter().enumerate().map(|(c, s)| (c as u64, s.model.committed)).collect();
            drop(sims);
            drop(t);
            drop(db);
            countdown.store(i64::MAX, Ordering::SeqCst);
            disks.crash(&mut rng);
            let db = disks
                .open(&cut, sim_options())
                .unwrap_or_else(|e| panic!("{ctx} round {round}: recovery: {e}"));
            let rep = db.recovery_report().clone();
            stats.0 += rep.pages_redone;
            stats.1 += rep.losers;
            stats.2 += rep.ops_undone;
            torn.0 += rep.pages_restored;
            torn.1 += rep.full_images_applied;
            let bounds: BTreeMap<u64, Bounds> = acked
                .iter()
                .map(|(&c, &n)| (c, Bounds { floor: n, ceil: n + u64::from(committing == Some(c)) }))
                .chain(
                    committed
                        .iter()
                        .filter(|(c, _)| !acked.contains_key(c))
                        .map(|(&c, &n)| (c, Bounds { floor: n, ceil: n })),
                )
                .collect();
            committed = workload::verify(&db, seed, &bounds)
                .unwrap_or_else(|e| panic!("{ctx} round {round} after recovery: {e}"));
        }
    }
    eprintln!(
        "{seeds} seeds: {} commits, {} lock conflicts retried; {} page changes redone, {} unfinished transactions, \
         {} operations undone; {} torn pages restored from the double-write area, {} full page images applied",
        stats.3, stats.4, stats.0, stats.1, stats.2, torn.0, torn.1
    );
    assert!(stats.0 > 0 && stats.1 > 0, "recovery never had work to do: {stats:?}");
    assert!(seeds < 50 || torn.0 > 0, "no crash tore a page the double-write area had to restore");
    assert_eq!(torn.1, 0, "the default protection logs no full page images");
}

#[test]
fn losing_one_log_copy_loses_no_acknowledged_change() {
    for (seed, damage) in [(1u64, "remove"), (2, "corrupt"), (3, "remove-mirror"), (4, "corrupt-mirror")] {
        let ctx = format!("seed {seed}, {damage}");
        let mut rng = Rng::new(seed);
        let disks = Disks::new();
        let cut = Arc::new(PowerCut { countdown: AtomicI64::new(i64::MAX) });
        let mut model: BTreeMap<i64, Row> = BTreeMap::new();
        {
            let db = disks.open(&cut, options()).unwrap();
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
        let victim = if damage.ends_with("mirror") { &disks.0.log_b } else { &disks.0.log_a };
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
        if damage == "remove-mirror" {
            // A log that was duplexed remembers its mirror: with the mirror gone, the open
            // refuses (naming it) rather than going on with one copy unnoticed.
            let e = disks
                .open(&cut, options())
                .err()
                .unwrap_or_else(|| panic!("{ctx}: opened without its mirror"));
            assert!(e.to_string().contains("log_mirror_dir"), "{ctx}: {e}");
            // The remedy the error names: the mirror restored from the surviving copy.
            let (a, b) = (&disks.0.log_a, &disks.0.log_b);
            for name in a.list().unwrap().into_iter().filter(|n| n != "mirror") {
                let src = a.device(&name).unwrap();
                let dst = b.open(&name, true).unwrap();
                dst.ensure_capacity(src.capacity()).unwrap();
                let mut buf = nvmedb::io::AlignedBuf::new(4096);
                for block in 0..src.capacity() / 4096 {
                    src.read_at(block * 4096, &mut buf).unwrap();
                    dst.write_at(block * 4096, &buf).unwrap();
                }
                dst.sync().unwrap();
            }
        }
        let db = disks.open(&cut, options()).unwrap_or_else(|e| panic!("{ctx}: recovery: {e}"));
        check(&db, &model, None, &ctx);
    }
}
