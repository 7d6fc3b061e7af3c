//! Model tests of lock compatibility.
//!
//! 1. Sequential, fully deterministic: random seeded schedules of `try_lock` / `release_all`
//!    by several transactions, each result compared against a reference model of the S/X
//!    compatibility matrix (with re-entrancy and upgrades), and the whole lock table compared
//!    after every step.
//! 2. Concurrent: threads run random seeded lock sequences with blocking `lock`; per-key
//!    reader/writer counters, maintained only while a lock is held, must never show a
//!    conflicting pair (two writers, or a writer with readers).

use nvmedb::txn::{LockManager, LockMode, LockOptions, LockOutcome};
use nvmedb::util::Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const TXNS: u64 = 5;
const KEYS: u32 = 4;

fn key(k: u32) -> [u8; 4] {
    k.to_le_bytes()
}

/// Reference model: who holds what.
#[derive(Default)]
struct Model {
    held: BTreeMap<u32, BTreeMap<u64, LockMode>>,
}

impl Model {
    fn try_lock(&mut self, txn: u64, k: u32, mode: LockMode) -> Option<LockOutcome> {
        let holders = self.held.entry(k).or_default();
        if let Some(&m) = holders.get(&txn) {
            if m.covers(mode) {
                return Some(LockOutcome::AlreadyHeld);
            }
            if holders.len() == 1 {
                holders.insert(txn, LockMode::Exclusive);
                return Some(LockOutcome::Upgraded);
            }
            return None;
        }
        if holders.values().all(|m| m.compatible(mode)) {
            holders.insert(txn, mode);
            Some(LockOutcome::Granted)
        } else {
            None
        }
    }

    fn release_all(&mut self, txn: u64) -> usize {
        let mut n = 0;
        for holders in self.held.values_mut() {
            n += usize::from(holders.remove(&txn).is_some());
        }
        self.held.retain(|_, h| !h.is_empty());
        n
    }
}

#[test]
fn sequential_model_random_schedules() {
    let run = nvmedb_testkit::Replay::from_env(0, 300);
    for seed in run.seed..run.seed + run.iters {
        let mut rng = Rng::new(seed);
        let lm = LockManager::new(LockOptions::default()).unwrap();
        let mut model = Model::default();
        for step in 0..200 {
            let txn = rng.below(TXNS);
            if rng.chance(0.15) {
                assert_eq!(lm.release_all(txn), model.release_all(txn), "seed {seed} step {step}");
            } else {
                let k = rng.below(u64::from(KEYS)) as u32;
                let mode = if rng.chance(0.5) { LockMode::Shared } else { LockMode::Exclusive };
                let got = lm.try_lock(txn, 0, &key(k), mode).unwrap();
                let want = model.try_lock(txn, k, mode);
                assert_eq!(got, want, "seed {seed} step {step}: txn {txn} {mode:?} key {k}");
            }
            for t in 0..TXNS {
                for k in 0..KEYS {
                    let want = model.held.get(&k).and_then(|h| h.get(&t)).copied();
                    assert_eq!(lm.held_mode(t, 0, &key(k)), want, "seed {seed} step {step}");
                }
            }
            assert_eq!(lm.entry_count(), model.held.len(), "seed {seed} step {step}");
        }
        for t in 0..TXNS {
            lm.release_all(t);
        }
        assert_eq!(lm.entry_count(), 0);
    }
}

/// Per-key occupancy: readers count, writers count.
struct Occupancy {
    readers: AtomicI64,
    writers: AtomicI64,
}

fn check(o: &Occupancy, what: &str) {
    let (r, w) = (o.readers.load(SeqCst), o.writers.load(SeqCst));
    assert!(w == 0 || (w == 1 && r == 0), "{what}: {r} readers, {w} writers at once");
}

#[test]
fn concurrent_compatibility_random_schedules() {
    let run =
        nvmedb_testkit::Replay { seed: nvmedb_testkit::seed_or_random(), iters: nvmedb_testkit::iters(3) };
    let seed = run.seed;
    for round in 0..run.iters {
        let lm = Arc::new(
            LockManager::new(LockOptions {
                lock_timeout: Duration::from_secs(10),
                spin: Duration::from_micros(5 * round),
                spin_yield: round != 1,
                ..Default::default()
            })
            .unwrap(),
        );
        let occ: Arc<Vec<Occupancy>> = Arc::new(
            (0..KEYS).map(|_| Occupancy { readers: AtomicI64::new(0), writers: AtomicI64::new(0) }).collect(),
        );
        let next = Arc::new(AtomicU64::new(1));
        let threads: Vec<_> = (0..4u64)
            .map(|i| {
                let (lm, occ, next) = (lm.clone(), occ.clone(), next.clone());
                let mut rng = Rng::new(seed ^ (round << 32) ^ i);
                thread::spawn(move || {
                    for _ in 0..400 {
                        let txn = next.fetch_add(1, Relaxed);
                        let ops: Vec<(u32, LockMode)> = (0..rng.range(1, 5))
                            .map(|_| {
                                let m = if rng.chance(0.4) { LockMode::Exclusive } else { LockMode::Shared };
                                (rng.below(u64::from(KEYS)) as u32, m)
                            })
                            .collect();
                        // What this transaction has counted in `occ`, per key.
                        let mut mine: BTreeMap<u32, LockMode> = BTreeMap::new();
                        let mut ok = true;
                        for &(k, m) in &ops {
                            match lm.lock(txn, 0, &key(k), m) {
                                Ok(LockOutcome::Granted) => {
                                    let o = &occ[k as usize];
                                    match m {
                                        LockMode::Shared => o.readers.fetch_add(1, SeqCst),
                                        LockMode::Exclusive => o.writers.fetch_add(1, SeqCst),
                                    };
                                    mine.insert(k, m);
                                    check(o, "grant");
                                }
                                Ok(LockOutcome::Upgraded) => {
                                    let o = &occ[k as usize];
                                    assert_eq!(mine.insert(k, LockMode::Exclusive), Some(LockMode::Shared));
                                    o.writers.fetch_add(1, SeqCst);
                                    o.readers.fetch_sub(1, SeqCst);
                                    check(o, "upgrade");
                                }
                                Ok(LockOutcome::AlreadyHeld) => {
                                    assert!(mine[&k].covers(m));
                                }
                                Err(e) => {
                                    assert!(e.is_retryable(), "{e}");
                                    assert!(matches!(e, nvmedb::Error::Deadlock { .. }), "{e}");
                                    ok = false;
                                    break;
                                }
                            }
                        }
                        if ok && rng.chance(0.5) {
                            thread::yield_now();
                        }
                        for (k, m) in mine {
                            let o = &occ[k as usize];
                            check(o, "before release");
                            match m {
                                LockMode::Shared => o.readers.fetch_sub(1, SeqCst),
                                LockMode::Exclusive => o.writers.fetch_sub(1, SeqCst),
                            };
                        }
                        lm.release_all(txn);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(lm.entry_count(), 0);
        let st = lm.stats();
        assert_eq!(st.timeouts, 0, "a timeout means a missed deadlock");
        println!("round {round}: {st:?}");
    }
}
