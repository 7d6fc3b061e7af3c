//! Lock manager behaviour: compatibility, upgrade, re-entrancy, wake-ups, FIFO, deadlocks,
//! timeouts, bounded memory. Threads synchronise on `waiting_for` (no sleeps).

use nvmedb::txn::{LockManager, LockMode, LockOptions, LockOutcome, VictimPolicy};
use nvmedb::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use LockMode::{Exclusive as X, Shared as S};

fn lm() -> Arc<LockManager> {
    Arc::new(
        LockManager::new(LockOptions { lock_timeout: Duration::from_secs(20), ..Default::default() })
            .unwrap(),
    )
}

/// Blocks until `txn` is queued on a lock (the only synchronisation the tests need).
fn until_waiting(lm: &LockManager, txn: u64) {
    while lm.waiting_for(txn).is_none() {
        thread::yield_now();
    }
}

#[test]
fn shared_shared_compatible_shared_exclusive_conflict() {
    let lm = lm();
    assert_eq!(lm.lock(1, 1, b"k", S).unwrap(), LockOutcome::Granted);
    assert_eq!(lm.lock(2, 1, b"k", S).unwrap(), LockOutcome::Granted);
    assert_eq!(lm.try_lock(3, 1, b"k", X).unwrap(), None);
    // Other keys and other tables are independent.
    assert_eq!(lm.try_lock(3, 1, b"k2", X).unwrap(), Some(LockOutcome::Granted));
    assert_eq!(lm.try_lock(3, 2, b"k", X).unwrap(), Some(LockOutcome::Granted));
    lm.release_all(1);
    lm.release_all(2);
    assert_eq!(lm.try_lock(3, 1, b"k", X).unwrap(), Some(LockOutcome::Granted));
    assert_eq!(lm.try_lock(4, 1, b"k", S).unwrap(), None);
    assert_eq!(lm.try_lock(4, 1, b"k", X).unwrap(), None);
    assert_eq!(lm.held_mode(3, 1, b"k"), Some(X));
    assert_eq!(lm.release_all(3), 3);
    assert_eq!(lm.entry_count(), 0);
}

#[test]
fn reentrant_and_upgrade() {
    let lm = lm();
    assert_eq!(lm.lock(1, 0, b"a", S).unwrap(), LockOutcome::Granted);
    assert_eq!(lm.lock(1, 0, b"a", S).unwrap(), LockOutcome::AlreadyHeld);
    assert_eq!(lm.lock(1, 0, b"a", X).unwrap(), LockOutcome::Upgraded);
    assert_eq!(lm.lock(1, 0, b"a", S).unwrap(), LockOutcome::AlreadyHeld);
    assert_eq!(lm.lock(1, 0, b"a", X).unwrap(), LockOutcome::AlreadyHeld);
    assert_eq!(lm.held_mode(1, 0, b"a"), Some(X));
    assert_eq!(lm.held_count(1), 1);
    assert_eq!(lm.try_lock(2, 0, b"a", S).unwrap(), None);
    assert_eq!(lm.release_all(1), 1);
    assert_eq!(lm.release_all(1), 0);
    assert_eq!(lm.held_count(1), 0);
    let st = lm.stats();
    assert_eq!(st.reentrant, 3);
}

#[test]
fn upgrade_waits_for_other_readers_then_goes_first() {
    let lm = lm();
    lm.lock(1, 0, b"a", S).unwrap();
    lm.lock(2, 0, b"a", S).unwrap();
    // 3 queues an X request; 1's upgrade must still go ahead of it.
    let l3 = lm.clone();
    let t3 = thread::spawn(move || l3.lock(3, 0, b"a", X));
    until_waiting(&lm, 3);
    let l1 = lm.clone();
    let t1 = thread::spawn(move || l1.lock(1, 0, b"a", X));
    until_waiting(&lm, 1);
    lm.release_all(2);
    assert_eq!(t1.join().unwrap().unwrap(), LockOutcome::Upgraded);
    assert_eq!(lm.held_mode(1, 0, b"a"), Some(X));
    assert!(lm.waiting_for(3).is_some());
    lm.release_all(1);
    assert_eq!(t3.join().unwrap().unwrap(), LockOutcome::Granted);
    lm.release_all(3);
    assert_eq!(lm.entry_count(), 0);
}

#[test]
fn release_wakes_all_compatible_waiters_in_fifo_order() {
    let lm = lm();
    lm.lock(1, 0, b"k", X).unwrap();
    let granted = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for t in [2u64, 3] {
        let l = lm.clone();
        readers.push(thread::spawn(move || l.lock(t, 0, b"k", S)));
        until_waiting(&lm, t);
    }
    let (l, g) = (lm.clone(), granted.clone());
    let writer = thread::spawn(move || {
        let r = l.lock(4, 0, b"k", X);
        g.store(true, Ordering::SeqCst);
        r
    });
    until_waiting(&lm, 4);
    // FIFO: a later S request queues behind the X waiter instead of joining the readers.
    let l = lm.clone();
    let late_reader = thread::spawn(move || l.lock(5, 0, b"k", S));
    until_waiting(&lm, 5);
    lm.release_all(1);
    for r in readers {
        assert_eq!(r.join().unwrap().unwrap(), LockOutcome::Granted);
    }
    assert!(!granted.load(Ordering::SeqCst), "X granted while readers hold S");
    assert!(lm.waiting_for(5).is_some(), "late reader overtook the X waiter");
    lm.release_all(2);
    lm.release_all(3);
    assert_eq!(writer.join().unwrap().unwrap(), LockOutcome::Granted);
    lm.release_all(4);
    assert_eq!(late_reader.join().unwrap().unwrap(), LockOutcome::Granted);
    lm.release_all(5);
    assert_eq!(lm.entry_count(), 0);
    let st = lm.stats();
    assert_eq!(st.waits, 4);
    assert_eq!(st.waits, st.spin_grants + st.parked_waits);
    assert_eq!(st.wait_hist.iter().sum::<u64>(), 4);
}

fn two_cycle(policy: VictimPolicy, first_waiter: u64) {
    let lm = Arc::new(
        LockManager::new(LockOptions {
            victim: policy,
            lock_timeout: Duration::from_secs(20),
            ..Default::default()
        })
        .unwrap(),
    );
    lm.lock(1, 0, b"a", X).unwrap();
    lm.lock(2, 0, b"b", X).unwrap();
    let want = |t: u64| if t == 1 { b"b" } else { b"a" };
    let second = 3 - first_waiter;
    let l = lm.clone();
    let first = thread::spawn(move || {
        let r = l.lock(first_waiter, 0, want(first_waiter), X);
        if r.is_err() {
            l.release_all(first_waiter); // abort
        }
        r
    });
    until_waiting(&lm, first_waiter);
    let r2 = lm.lock(second, 0, want(second), X);
    if r2.is_err() {
        lm.release_all(second);
    }
    let r1 = first.join().unwrap();
    let (victim, victim_err, survivor) = match (r1, r2) {
        (Err(e), Ok(o)) => (first_waiter, e, o),
        (Ok(o), Err(e)) => (second, e, o),
        other => panic!("expected exactly one victim, got {other:?}"),
    };
    // Youngest: always 2. Requester: whichever of the two ran its cycle check (after
    // spinning) once both were queued — normally the second, but a preempted first waiter
    // may finish spinning later.
    if policy == VictimPolicy::Youngest {
        assert_eq!(victim, 2);
    }
    assert_eq!(survivor, LockOutcome::Granted);
    assert!(victim_err.is_retryable());
    match victim_err {
        Error::Deadlock { txn, key, mut cycle } => {
            assert_eq!(txn, victim);
            assert_eq!(&*key.key, want(victim));
            cycle.sort();
            assert_eq!(cycle, vec![1, 2]);
        }
        e => panic!("not a deadlock error: {e}"),
    }
    assert_eq!(lm.stats().deadlocks, 1);
    lm.release_all(1);
    lm.release_all(2);
    assert_eq!(lm.entry_count(), 0);
}

#[test]
fn two_transaction_deadlock_youngest_victim_requester_closes() {
    two_cycle(VictimPolicy::Youngest, 1);
}

#[test]
fn two_transaction_deadlock_youngest_victim_is_parked_other() {
    two_cycle(VictimPolicy::Youngest, 2);
}

#[test]
fn two_transaction_deadlock_requester_victim() {
    two_cycle(VictimPolicy::Requester, 1);
    two_cycle(VictimPolicy::Requester, 2);
}

#[test]
fn upgrade_deadlock_two_readers() {
    let lm = lm();
    lm.lock(1, 0, b"a", S).unwrap();
    lm.lock(2, 0, b"a", S).unwrap();
    let l = lm.clone();
    let t1 = thread::spawn(move || l.lock(1, 0, b"a", X));
    until_waiting(&lm, 1);
    let e = lm.lock(2, 0, b"a", X).unwrap_err();
    assert!(matches!(e, Error::Deadlock { txn: 2, .. }), "{e}");
    // The victim keeps its locks until the caller aborts it; the survivor still waits.
    assert_eq!(lm.held_mode(2, 0, b"a"), Some(S));
    assert!(lm.waiting_for(1).is_some());
    lm.release_all(2);
    assert_eq!(t1.join().unwrap().unwrap(), LockOutcome::Upgraded);
    lm.release_all(1);
    assert_eq!(lm.entry_count(), 0);
}

#[test]
fn three_cycle_one_victim_others_proceed() {
    let lm = lm();
    let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
    for t in 0..3u64 {
        lm.lock(t + 1, 0, keys[t as usize], X).unwrap();
    }
    // 1 waits for b (held by 2), 2 for c (held by 3), 3 for a (held by 1).
    let mut handles = Vec::new();
    for t in 1..=3u64 {
        let l = lm.clone();
        let want = keys[(t % 3) as usize];
        handles.push(thread::spawn(move || {
            let r = l.lock(t, 0, want, X);
            // Commit or abort: either way release everything.
            l.release_all(t);
            r
        }));
        if t < 3 {
            until_waiting(&lm, t);
        }
    }
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let victims: Vec<usize> =
        results.iter().enumerate().filter(|(_, r)| r.is_err()).map(|(i, _)| i).collect();
    assert_eq!(victims, vec![2], "results {results:?}");
    match &results[2] {
        Err(Error::Deadlock { txn: 3, cycle, .. }) => {
            let mut c = cycle.clone();
            c.sort();
            assert_eq!(c, vec![1, 2, 3]);
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(lm.stats().deadlocks, 1);
    assert_eq!(lm.entry_count(), 0);
}

#[test]
fn timeout_is_typed_and_leaves_queue_clean() {
    let lm = Arc::new(
        LockManager::new(LockOptions {
            lock_timeout: Duration::from_millis(20),
            deadlock_detection: false,
            ..Default::default()
        })
        .unwrap(),
    );
    lm.lock(1, 5, b"k", X).unwrap();
    let e = lm.lock(2, 5, b"k", S).unwrap_err();
    assert!(e.is_retryable());
    assert_eq!(lm.active_txns(), 1, "a timed-out transaction holding nothing leaves no trace");
    match e {
        Error::LockTimeout { txn: 2, key, mode: S, waited } => {
            assert_eq!(key.table, 5);
            assert!(waited >= Duration::from_millis(20));
        }
        e => panic!("{e}"),
    }
    // Deadlock without detection: the timeout is the safety net.
    lm.lock(2, 5, b"j", X).unwrap();
    let l = lm.clone();
    let t = thread::spawn(move || l.lock(1, 5, b"j", X));
    let e2 = lm.lock(2, 5, b"k", X);
    let e1 = t.join().unwrap();
    assert!(e1.is_err() || e2.is_err());
    lm.release_all(1);
    lm.release_all(2);
    assert_eq!(lm.entry_count(), 0);
    assert_eq!(lm.active_txns(), 0);
    assert!(lm.stats().timeouts >= 2);
}

#[test]
fn legacy_poll_mode_still_grants() {
    let lm = Arc::new(LockManager::new(LockOptions::legacy_sleep_1ms()).unwrap());
    lm.lock(1, 0, b"k", X).unwrap();
    let l = lm.clone();
    let t = thread::spawn(move || l.lock(2, 0, b"k", X));
    until_waiting(&lm, 2);
    lm.release_all(1);
    assert_eq!(t.join().unwrap().unwrap(), LockOutcome::Granted);
    lm.release_all(2);
    assert_eq!(lm.stats().waits, 1);
}

#[test]
fn many_keys_memory_is_freed() {
    let lm = lm();
    for t in 0..50u64 {
        for k in 0..100u32 {
            let mode = if k % 2 == 0 { S } else { X };
            lm.lock(t, k % 4, &(k + 1000 * t as u32).to_be_bytes(), mode).unwrap();
            lm.lock(t, 99, &k.to_be_bytes(), S).unwrap(); // shared by everyone
        }
    }
    assert_eq!(lm.entry_count(), 50 * 100 + 100);
    for t in 0..50u64 {
        assert_eq!(lm.release_all(t), 200);
    }
    assert_eq!(lm.entry_count(), 0);
}
