//! Seeding and rejoining, over loopback in one process: an empty standby takes a base backup
//! from a primary that keeps committing (fuzzy copy plus the log from its start) and, once
//! promoted, holds every acknowledged commit; a failed primary restarts as a standby of its
//! successor and drops what it wrote after the fork point (eager: its pages hold nothing past
//! it, the log is cut); a lazy primary whose pages went past the fork takes a base backup; a
//! candidate promotes past an old primary that rejoined without following and holds a long
//! tail of records no one acknowledged.

mod repl_common;

use nvmedb::repl::{open_primary, PromoteOptions, ReplConfig, ReplicationMode, StandbyPolicy};
use nvmedb::Value;
use repl_common::*;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

#[test]
fn an_empty_standby_seeds_itself_from_a_running_primary() {
    let (p, dirs) = setup_n("online", 1);
    let s0 = standby(&dirs[0], true);
    let s1_dir = tmp("online-s1");
    let s1_addr = dead_addr();
    let cfg = ReplConfig {
        reconnect_delay: Duration::from_millis(20),
        ..config(vec![s0.addr().to_string(), s1_addr.clone()], ReplicationMode::Quorum(1), fail_after(30_000))
    };
    let (db, log) = open_primary(&p, options(), cfg, None).unwrap();
    let stop = AtomicBool::new(false);
    let count = AtomicI64::new(0);
    let (acked, s1) = std::thread::scope(|sc| {
        let w = sc.spawn(|| write_until(&db, 3, &stop, &count));
        // The table grows (and its pages are written back: the buffer is 16 pages) while the
        // new standby copies it.
        assert!(wait_for(|| count.load(Ordering::Acquire) >= 300));
        let s1 = standby_at(&s1_dir, &s1_addr, true);
        assert!(wait_for(|| s1.status().contains("base backups 1")), "{}", s1.status());
        let seen = count.load(Ordering::Acquire);
        assert!(wait_for(|| count.load(Ordering::Acquire) >= seen + 300));
        stop.store(true, Ordering::Release);
        (w.join().unwrap(), s1)
    });
    assert!(wait_for(|| s1.position() >= log.status().durable), "{}\n{}", log.status(), s1.status());
    drop(db);
    drop(log);
    // Only s1's own copy counts: s0 is gone, so the promotion is forced (s1 holds everything
    // acknowledged: its position covers the primary's last acknowledged LSN).
    drop(s0);
    let (db2, _) = s1
        .promote_with(&PromoteOptions {
            force: true,
            peer_timeout: Duration::from_millis(300),
            ..Default::default()
        })
        .unwrap();
    let present = ack_ids(&db2);
    let lost = acked.iter().filter(|(id, _)| !present.contains(id)).count();
    assert_eq!(
        lost,
        0,
        "{lost} of {} acknowledged commits missing on the base-backed-up standby",
        acked.len()
    );
    db2.table("acks").unwrap().check_integrity().unwrap();
    db2.table("t").unwrap().check_integrity().unwrap();
    for k in 0..ROWS {
        assert_eq!(c1(&db2, k), 0);
    }
    db2.close().unwrap();
}

/// The configuration a promoted standby replicates with here: eager, degrading to lazy while
/// the old primary (its only standby) is away.
fn successor_config(addr: &str) -> ReplConfig {
    ReplConfig {
        reconnect_delay: Duration::from_millis(20),
        ..config(
            vec![addr.to_string()],
            ReplicationMode::Eager,
            StandbyPolicy::Degrade { timeout: Duration::from_millis(300), to: ReplicationMode::Lazy },
        )
    }
}

/// Commits on `t` until the degraded log is back in eager mode (its standby caught up).
fn until_restored(t: &nvmedb::Table, log: &nvmedb::repl::ReplicatedLog) {
    let mut i = 0;
    assert!(
        wait_for(|| {
            i += 1;
            t.update_int(&Value::Int(ROWS - 1), 1, -i).unwrap();
            log.status().effective == ReplicationMode::Eager
        }),
        "{}",
        log.status()
    );
}

/// Eager: the old primary P keeps running after s0's promotion and appends commits that fail
/// (fenced); their records are in P's log only. P crashes and restarts as a standby of s0 (a
/// replicating primary since its promotion), drops those records (its log is cut at the fork
/// point, no base backup), follows, and — promoted in turn — holds exactly what was
/// acknowledged.
#[test]
fn a_failed_primary_rejoins_as_a_standby_of_its_successor() {
    let (p, s) = setup("rejoin");
    let s0 = standby(&s, true);
    let p_addr = dead_addr();
    let cfg = ReplConfig {
        reconnect_delay: Duration::from_secs(5),
        ..config(vec![s0.addr().to_string()], ReplicationMode::Eager, fail_after(2_000))
    };
    let (db, log) = open_primary(&p, options(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    for k in 0..100 {
        t.update_int(&Value::Int(k), 1, 1000 + k).unwrap();
    }
    let (db2, log2, rep) =
        s0.promote_to_primary(&PromoteOptions::default(), successor_config(&p_addr)).unwrap();
    assert_eq!((rep.epoch, log2.status().epoch), (2, 2));
    // The old primary writes on: fenced, nothing is acknowledged, but its log holds the records.
    for k in 0..50 {
        assert!(t.update_int(&Value::Int(k), 1, -7).is_err());
    }
    drop(t);
    drop(db);
    drop(log);
    let t2 = db2.table("t").unwrap();
    for k in 50..100 {
        t2.update_int(&Value::Int(k), 1, 2000 + k).unwrap();
    }
    // P comes back as a standby of s0.
    let psb = standby_at(&p, &p_addr, true);
    until_restored(&t2, &log2);
    for k in 0..10 {
        t2.update_int(&Value::Int(k), 1, 3000 + k).unwrap();
    }
    assert!(psb.position() >= log2.status().durable);
    let st = psb.status();
    assert!(st.contains("base backups 0"), "the fork should have been cut, not re-copied: {st}");
    assert!(st.contains(&format!("2 from {}", rep.log_end)), "{st}");
    assert_eq!(psb.epoch(), 2);
    drop(t2);
    drop(db2);
    drop(log2);
    drop(s0);
    let (db4, rep4) = psb.promote().unwrap();
    assert_eq!(rep4.epoch, 3);
    for k in 0..ROWS - 1 {
        let want = match k {
            0..10 => 3000 + k,
            10..50 => 1000 + k,
            50..100 => 2000 + k,
            _ => 0,
        };
        assert_eq!(c1(&db4, k), want, "row {k}");
    }
    db4.table("t").unwrap().check_integrity().unwrap();
    db4.close().unwrap();
}

/// Lazy: the old primary's pages went past what its standby had (lazy acknowledges locally),
/// so after the standby's promotion it cannot just cut its log: it takes a base backup from its
/// successor and ends with the successor's data.
#[test]
fn a_lazy_primary_whose_pages_passed_the_fork_takes_a_base_backup() {
    let (p, s) = setup("rejoin-lazy");
    let s0 = standby(&s, true);
    let s0_addr = s0.addr().to_string();
    let p_addr = dead_addr();
    let cfg = ReplConfig {
        reconnect_delay: Duration::from_millis(20),
        ..config(vec![s0_addr.clone()], ReplicationMode::Lazy, fail_after(2_000))
    };
    let (db, log) = open_primary(&p, options(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    for k in 0..ROWS {
        t.update_int(&Value::Int(k), 1, 1).unwrap();
    }
    assert!(wait_for(|| s0.position() >= log.status().appended), "{}", log.status());
    drop(s0);
    for k in 0..ROWS {
        t.update_int(&Value::Int(k), 1, 500 + k).unwrap();
    }
    // Enough rows that the 16-page table buffer writes pages back (lazy: at once).
    let acks = db.table("acks").unwrap();
    for i in 0..1500 {
        acks.insert(&[Value::Int(i), Value::Int(i % 7)]).unwrap();
    }
    drop(acks);
    drop(t);
    drop(db);
    drop(log);
    let s0 = standby_at(&s, &s0_addr, true);
    let (db2, log2, _) =
        s0.promote_to_primary(&PromoteOptions::default(), successor_config(&p_addr)).unwrap();
    let t2 = db2.table("t").unwrap();
    for k in 0..10 {
        t2.update_int(&Value::Int(k), 1, 9000 + k).unwrap();
    }
    let psb = standby_at(&p, &p_addr, true);
    until_restored(&t2, &log2);
    let st = psb.status();
    assert!(st.contains("base backups 1") && st.contains("past the fork point"), "{st}");
    drop(t2);
    drop(db2);
    drop(log2);
    drop(s0);
    let (db4, _) = psb.promote().unwrap();
    for k in 0..ROWS - 1 {
        let want = if k < 10 { 9000 + k } else { 1 };
        assert_eq!(c1(&db4, k), want, "row {k}");
    }
    assert!(ack_ids(&db4).is_empty(), "the old primary's lazy inserts were never on its successor");
    db4.table("t").unwrap().check_integrity().unwrap();
    db4.close().unwrap();
}

/// Quorum 1 of 2: P leads epoch 1 with s0 and s1; both go away and P writes a long
/// transaction that no one acknowledges (its records stay in P's log only); P stops, s0 and s1
/// return and s0 promotes (epoch 2, its set s1 and P's address); s1 follows it and s0
/// acknowledges more commits; s0 stops, and P comes back as a standby without ever following
/// s0. P's log now ends far past s1's, but forks from it where epoch 2 began: s1 must still
/// promote (fencing P, taking none of P's tail) and hold every acknowledged commit. (Found on
/// real network partitions: the candidate took the old primary's longer log for one it had to
/// copy, was refused because the logs diverge, and no node could ever lead again.)
#[test]
fn a_candidate_promotes_past_an_old_primary_whose_longer_log_forked() {
    let (p, dirs) = setup_n("forked-tail", 2);
    let (s0_addr, s1_addr, p_addr) = (dead_addr(), dead_addr(), dead_addr());
    let s0 = standby_at(&dirs[0], &s0_addr, true);
    let s1 = standby_at(&dirs[1], &s1_addr, true);
    let cfg = ReplConfig {
        reconnect_delay: Duration::from_millis(20),
        ..config(vec![s0_addr.clone(), s1_addr.clone()], ReplicationMode::Quorum(1), fail_after(300))
    };
    let (db, log) = open_primary(&p, options(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    for k in 0..50 {
        t.update_int(&Value::Int(k), 1, 1000 + k).unwrap();
    }
    assert!(wait_for(|| s0.position() >= log.status().durable && s1.position() >= log.status().durable));
    drop(s0);
    drop(s1);
    // The standbys are gone: P's long transaction reaches only its own log.
    let acks = db.table("acks").unwrap();
    let mut tx = db.begin();
    let mut failed = false;
    for i in 0..1000 {
        // A page split's own commit may wait for the standbys and fail first: its records,
        // and the transaction's, are in P's log all the same.
        if tx.insert(&acks, &[Value::Int(-1 - i), Value::Int(i % ROWS)]).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed || tx.commit().is_err(), "no standby confirmed it: not acknowledged");
    drop((t, acks));
    drop(db);
    drop(log);
    let s0 = standby_at(&dirs[0], &s0_addr, true);
    let s1 = standby_at(&dirs[1], &s1_addr, true);
    let cfg2 = ReplConfig {
        reconnect_delay: Duration::from_millis(20),
        ..config(vec![s1_addr.clone(), p_addr.clone()], ReplicationMode::Quorum(1), fail_after(5_000))
    };
    let (db2, log2, rep) = s0.promote_to_primary(&PromoteOptions::default(), cfg2).unwrap();
    assert_eq!(rep.epoch, 2);
    // s1 follows s0 (epoch 2), which acknowledges more commits.
    let t2 = db2.table("t").unwrap();
    for k in 50..100 {
        t2.update_int(&Value::Int(k), 1, 2000 + k).unwrap();
    }
    assert!(wait_for(|| s1.position() >= log2.status().durable), "{}", s1.status());
    drop(t2);
    drop(db2);
    drop(log2);
    drop(s0);
    // P returns as a standby, never followed by anyone.
    let psb = standby_at(&p, &p_addr, true);
    assert!(
        psb.position() > s1.position(),
        "the test needs P's log to end past s1's: P {} s1 {}",
        psb.position(),
        s1.position()
    );
    let (db3, rep3) = s1
        .promote_with(&PromoteOptions { peer_timeout: Duration::from_secs(5), ..Default::default() })
        .unwrap();
    assert_eq!(rep3.epoch, 3);
    assert!(rep3.fenced.iter().any(|(a, _)| *a == p_addr), "P must be fenced: {:?}", rep3.fenced);
    assert!(rep3.taken.is_empty(), "nothing of P's forked tail may be taken: {:?}", rep3.taken);
    assert!(rep3.notes.iter().any(|n| n.contains("forks")), "{:?}", rep3.notes);
    for k in 0..ROWS {
        let want = match k {
            0..50 => 1000 + k,
            50..100 => 2000 + k,
            _ => 0,
        };
        assert_eq!(c1(&db3, k), want, "row {k}");
    }
    assert!(ack_ids(&db3).is_empty(), "P's unacknowledged transaction must not appear");
    db3.table("t").unwrap().check_integrity().unwrap();
    db3.table("acks").unwrap().check_integrity().unwrap();
    db3.close().unwrap();
    drop(psb);
}
