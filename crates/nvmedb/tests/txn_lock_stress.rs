//! Concurrent bank transfers guarded only by the lock manager's locks.
//!
//! Balances are `AtomicI64`s read and written with separate relaxed load and store (a
//! read-modify-write that loses updates unless the X lock really excludes everyone else).
//! Transactions lock accounts in random order (so they deadlock), some read first under S and
//! then upgrade (upgrade deadlocks), and an auditor S-locks every account and checks the total
//! (serializability: it must never see a transfer half done). Victims abort and retry with the
//! same transaction id, so they age and eventually win under the youngest-victim policy.

use nvmedb::txn::{LockManager, LockMode, LockOptions, VictimPolicy};
use nvmedb::util::Rng;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const ACCOUNTS: usize = 12;
const INITIAL: i64 = 1_000;
const TABLE: u32 = 7;

fn key(a: usize) -> [u8; 8] {
    (a as u64).to_be_bytes()
}

struct Bank {
    lm: LockManager,
    balances: Vec<AtomicI64>,
    next_txn: AtomicU64,
}

/// Runs one transfer to completion (retrying on retryable errors); returns (retries, a, b, amount).
fn transfer(bank: &Bank, rng: &mut Rng) -> (u64, usize, usize, i64) {
    let a = rng.below(ACCOUNTS as u64) as usize;
    let b = (a + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
    let amount = rng.range(1, 100) as i64;
    let read_first = rng.chance(0.3);
    let txn = bank.next_txn.fetch_add(1, Relaxed);
    let mut retries = 0;
    loop {
        let attempt = (|| -> nvmedb::Result<()> {
            if read_first {
                bank.lm.lock(txn, TABLE, &key(a), LockMode::Shared)?;
                bank.lm.lock(txn, TABLE, &key(b), LockMode::Shared)?;
            }
            bank.lm.lock(txn, TABLE, &key(a), LockMode::Exclusive)?;
            bank.lm.lock(txn, TABLE, &key(b), LockMode::Exclusive)?;
            Ok(())
        })();
        match attempt {
            Ok(()) => break,
            Err(e) => {
                assert!(e.is_retryable(), "unexpected error {e}");
                assert!(matches!(e, nvmedb::Error::Deadlock { .. }), "timeout means a missed deadlock: {e}");
                bank.lm.release_all(txn); // abort (nothing written yet)
                retries += 1;
            }
        }
    }
    // Unprotected read-modify-write: only the X locks make it correct.
    let va = bank.balances[a].load(Relaxed);
    if rng.chance(0.2) {
        thread::yield_now(); // widen the window a lost update would need
    }
    bank.balances[a].store(va - amount, Relaxed);
    let vb = bank.balances[b].load(Relaxed);
    bank.balances[b].store(vb + amount, Relaxed);
    bank.lm.release_all(txn); // commit
    (retries, a, b, amount)
}

/// Runs the bank with a seed from `NVMEDB_TEST_SEED` (else the clock), printed with any failure.
fn run(opts: LockOptions, threads: usize, per_thread: usize) {
    let seed = nvmedb_testkit::seed_or_random();
    let _replay = nvmedb_testkit::Replay { seed, iters: 1 };
    println!("seed {seed} opts {opts:?}");
    let bank = Arc::new(Bank {
        lm: LockManager::new(opts).unwrap(),
        balances: (0..ACCOUNTS).map(|_| AtomicI64::new(INITIAL)).collect(),
        next_txn: AtomicU64::new(1),
    });
    let done = Arc::new(AtomicBool::new(false));
    let auditor = {
        let (bank, done) = (bank.clone(), done.clone());
        thread::spawn(move || {
            let mut rng = Rng::new(seed ^ 0xa0d1);
            let mut audits = 0u64;
            while !done.load(Relaxed) {
                let txn = bank.next_txn.fetch_add(1, Relaxed);
                let mut order: Vec<usize> = (0..ACCOUNTS).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.below(i as u64 + 1) as usize);
                }
                loop {
                    let r = order
                        .iter()
                        .try_for_each(|&a| bank.lm.lock(txn, TABLE, &key(a), LockMode::Shared).map(|_| ()));
                    match r {
                        Ok(()) => break,
                        Err(e) => {
                            assert!(matches!(e, nvmedb::Error::Deadlock { .. }), "{e}");
                            bank.lm.release_all(txn);
                        }
                    }
                }
                let total: i64 = bank.balances.iter().map(|b| b.load(Relaxed)).sum();
                assert_eq!(total, INITIAL * ACCOUNTS as i64, "auditor saw a transfer half done");
                bank.lm.release_all(txn);
                audits += 1;
            }
            audits
        })
    };
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let bank = bank.clone();
            thread::spawn(move || {
                let mut rng = Rng::new(seed.wrapping_add(i as u64 * 7919));
                let mut deltas = vec![0i64; ACCOUNTS];
                let mut retries = 0;
                for _ in 0..per_thread {
                    let (r, a, b, amount) = transfer(&bank, &mut rng);
                    retries += r;
                    deltas[a] -= amount;
                    deltas[b] += amount;
                }
                (deltas, retries)
            })
        })
        .collect();
    let mut expected = vec![INITIAL; ACCOUNTS];
    let mut retries = 0;
    for w in workers {
        let (deltas, r) = w.join().unwrap();
        retries += r;
        for (e, d) in expected.iter_mut().zip(deltas) {
            *e += d;
        }
    }
    done.store(true, Relaxed);
    let audits = auditor.join().unwrap();
    let actual: Vec<i64> = bank.balances.iter().map(|b| b.load(Relaxed)).collect();
    assert_eq!(actual, expected, "lost update");
    assert_eq!(actual.iter().sum::<i64>(), INITIAL * ACCOUNTS as i64);
    assert_eq!(bank.lm.entry_count(), 0, "lock entries leaked");
    assert_eq!(bank.lm.active_txns(), 0, "transaction slots leaked");
    let st = bank.lm.stats();
    println!(
        "transfers {} retries {retries} audits {audits} | waits {} spin-grants {} parked {} deadlocks {} timeouts {} p50 {:?} p99 {:?}",
        threads * per_thread,
        st.waits,
        st.spin_grants,
        st.parked_waits,
        st.deadlocks,
        st.timeouts,
        st.wait_quantile(0.5),
        st.wait_quantile(0.99)
    );
    assert_eq!(st.timeouts, 0);
    assert!(st.deadlocks >= retries, "every retry was a deadlock victim (auditor victims come on top)");
}

fn opts(victim: VictimPolicy, spin: Duration) -> LockOptions {
    LockOptions { victim, spin, lock_timeout: Duration::from_secs(10), ..LockOptions::default() }
}

#[test]
fn bank_transfers_youngest_victim_spin_then_park() {
    run(opts(VictimPolicy::Youngest, Duration::from_micros(10)), 4, 2_000);
}

#[test]
fn bank_transfers_requester_victim_park_only() {
    run(opts(VictimPolicy::Requester, Duration::ZERO), 3, 1_500);
}

#[test]
fn bank_transfers_many_threads_one_shard() {
    let o = LockOptions { shards: 1, ..opts(VictimPolicy::Youngest, Duration::from_micros(20)) };
    run(o, 8, 500);
}
