//! Fencing at promotion, over loopback in one process: an old primary that keeps running
//! cannot acknowledge a commit once promotion has returned (quorum and eager), a promoted
//! standby that was behind a peer takes the peer's records, the operator's promote call learns
//! of a successful promotion, epochs are never reused, and a wrong secret fails at open with an
//! authentication error naming the standby.

mod repl_common;

use nvmedb::repl::{
    admin_promote, open_primary, read_epoch, PromoteOptions, ReplConfig, ReplError, ReplicationMode,
};
use nvmedb::{Error, Value};
use repl_common::*;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// Quorum 1 of 2: promoting s0 while the old primary runs must fence enough of the old
/// synchronous set (here both standbys) that the old primary cannot complete a commit after
/// promotion returns; everything it acknowledged before is on the promoted standby.
#[test]
fn quorum_promotion_fences_the_old_primary() {
    let (p, dirs) = setup_n("splitq", 2);
    let s0 = standby(&dirs[0], true);
    let s1 = standby(&dirs[1], true);
    let addrs = vec![s0.addr().to_string(), s1.addr().to_string()];
    let (db, log) =
        open_primary(&p, options(), config(addrs, ReplicationMode::Quorum(1), fail_after(5_000)), None)
            .unwrap();
    let stop = AtomicBool::new(false);
    let count = AtomicI64::new(0);
    let (acked, promoted_at, db2) = std::thread::scope(|s| {
        let w = s.spawn(|| write_until(&db, 4, &stop, &count));
        // Let commits flow through both standbys, then promote s0 while the writers run.
        let deadline = Instant::now() + Duration::from_secs(60);
        while count.load(Ordering::Acquire) < 300 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let (db2, rep) = s0.promote().unwrap();
        let promoted_at = Instant::now();
        assert!(rep.epoch >= 2, "{rep:?}");
        // Give the old primary time to (wrongly) acknowledge more, then stop the writers.
        let until = promoted_at + Duration::from_secs(2);
        while Instant::now() < until && !w.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Release);
        (w.join().unwrap(), promoted_at, db2)
    });
    assert!(acked.len() >= 300, "only {} commits before promotion", acked.len());
    let late: Vec<i64> = acked.iter().filter(|(_, t)| *t > promoted_at).map(|(id, _)| *id).collect();
    assert!(
        late.is_empty(),
        "the old primary acknowledged {} commits after promotion returned (split brain); status:\n{}",
        late.len(),
        log.status()
    );
    let present = ack_ids(&db2);
    let lost: Vec<i64> = acked.iter().map(|(id, _)| *id).filter(|id| !present.contains(id)).collect();
    assert!(lost.is_empty(), "{} acknowledged commits missing on the promoted standby", lost.len());
    db2.table("acks").unwrap().check_integrity().unwrap();
    let st = log.status();
    assert!(st.fenced.is_some() && st.to_string().contains("FENCED"), "{st}");
    db2.close().unwrap();
    drop(s1);
}

/// Quorum 1 of 2, s0 down for a while: commits are acknowledged through s1 only. Promoting s0
/// afterwards must not lose them: promotion takes the records it lacks from the fenced peer.
#[test]
fn a_promoted_standby_takes_what_a_fenced_peer_has_beyond_it() {
    let (p, dirs) = setup_n("behind", 2);
    let s0 = standby(&dirs[0], true);
    let s0_addr = s0.addr().to_string();
    let s1 = standby(&dirs[1], true);
    let addrs = vec![s0_addr.clone(), s1.addr().to_string()];
    let cfg = ReplConfig {
        reconnect_delay: Duration::from_millis(20),
        ..config(addrs, ReplicationMode::Quorum(1), fail_after(10_000))
    };
    let (db, log) = open_primary(&p, options(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    t.update_int(&Value::Int(1), 1, 1).unwrap();
    // s0 has met the primary; now it goes away.
    let deadline = Instant::now() + Duration::from_secs(60);
    while log.status().standbys[0].shadow < log.status().durable && Instant::now() < deadline {
        t.update_int(&Value::Int(1), 1, 1).unwrap();
    }
    drop(s0);
    for k in 0..ROWS {
        t.update_int(&Value::Int(k), 1, 500 + k).unwrap();
    }
    // The primary dies; s0 comes back and is promoted.
    drop(t);
    drop(db);
    drop(log);
    let s0 = standby_at(&dirs[0], &s0_addr, true);
    let (db2, _) = s0.promote().unwrap();
    for k in 0..ROWS {
        assert_eq!(c1(&db2, k), 500 + k, "row {k}: an acknowledged commit was lost at promotion");
    }
    db2.table("t").unwrap().check_integrity().unwrap();
    db2.close().unwrap();
    drop(s1);
}

/// `admin_promote` (what `nvmedb promote` calls) must learn of a successful promotion even when
/// the standby's process shuts down as soon as it sees itself promoted (as `nvmedb standby`
/// does).
#[test]
fn the_promote_reply_is_sent_before_the_standby_shuts_down() {
    for round in 0..3 {
        let (_p, s) = setup(&format!("reply{round}"));
        let sb = standby(&s, true);
        let addr = sb.addr().to_string();
        let (r, ()) = std::thread::scope(|sc| {
            let watcher = sc.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(60);
                while sb.promotion().is_none() && Instant::now() < deadline {
                    std::thread::yield_now();
                }
                sb.shutdown();
            });
            let r = admin_promote(&addr, SECRET);
            (r, watcher.join().unwrap())
        });
        let (epoch, _) = r.unwrap_or_else(|e| panic!("round {round}: promotion reported as failed: {e}"));
        assert!(epoch >= 2);
        assert_eq!(sb.promotion().map(|p| p.epoch), Some(epoch));
    }
}

/// A standby that never had a primary connect promotes past the epoch of the primary it was
/// seeded from, and a promoted directory keeps its epoch when it runs as a primary.
#[test]
fn epochs_are_never_reused() {
    let (p, s) = setup("epochs");
    let sb = standby(&s, true);
    let (db2, rep) = sb.promote().unwrap();
    assert!(rep.epoch >= 2, "promoted to epoch {}, the old primary's own epoch is 1", rep.epoch);
    db2.close().unwrap();
    drop(sb);
    assert_eq!(read_epoch(&s).unwrap(), rep.epoch);
    // A standby seeded from the promoted directory starts at its epoch.
    let s2 = tmp("epochs-s2");
    nvmedb::repl::seed_standby(&s, &s2).unwrap();
    assert_eq!(read_epoch(&s2).unwrap(), rep.epoch);
    // The promoted directory, opened as a replicating primary with the default configuration
    // (epoch 1), runs at its own epoch.
    let (db3, log) = open_primary(
        &s,
        options(),
        config(vec![dead_addr()], ReplicationMode::Lazy, fail_after(1_000)),
        None,
    )
    .unwrap();
    assert_eq!(log.status().epoch, rep.epoch, "{}", log.status());
    db3.close().unwrap();
    // The old primary's directory was never promoted: still epoch 1.
    assert_eq!(read_epoch(&p).unwrap(), 1);
}

/// A primary configured with the wrong secret fails at open with an authentication error that
/// names the standby (not a timeout).
#[test]
fn a_wrong_secret_fails_open_with_an_authentication_error() {
    let (p, s) = setup("badsecret");
    let sb = standby(&s, true);
    let addr = sb.addr().to_string();
    let cfg = ReplConfig {
        secret: b"wrong".to_vec(),
        ..config(vec![addr.clone()], ReplicationMode::Eager, fail_after(20_000))
    };
    let e = open_primary(&p, options(), cfg, None).unwrap_err();
    match &e {
        Error::Replication(ReplError::AuthFailed { peer, .. }) => assert_eq!(peer, &addr),
        _ => panic!("expected an authentication error naming {addr}, got: {e}"),
    }
    assert!(e.to_string().contains(&addr), "{e}");
}

/// Eager, one standby, promoted while the old primary runs and then shut down at once (as
/// `nvmedb standby` exits after promotion): the old primary learns it is fenced by epoch, not
/// merely that its standby vanished, and its status says FENCED.
#[test]
fn an_eager_old_primary_is_fenced_by_epoch() {
    let (p, s) = setup("eagerfence");
    let sb = standby(&s, true);
    let cfg = ReplConfig {
        reconnect_delay: Duration::from_secs(5),
        ..config(vec![sb.addr().to_string()], ReplicationMode::Eager, fail_after(2_000))
    };
    let (db, log) = open_primary(&p, options(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    t.update_int(&Value::Int(1), 1, 11).unwrap();
    let (db2, rep) = sb.promote().unwrap();
    db2.close().unwrap();
    drop(sb);
    let e = t.update_int(&Value::Int(2), 1, 22).unwrap_err();
    assert!(
        matches!(e, Error::Replication(ReplError::Fenced { our_epoch: 1, their_epoch, .. }) if their_epoch == rep.epoch),
        "{e}"
    );
    let st = log.status();
    assert!(st.fenced.is_some() && st.to_string().contains("FENCED"), "{st}");
}

/// Quorum 1 of 2 with s1 down: promoting s0 cannot fence s1, so the old primary might still
/// commit through s1 once it is back. Promotion refuses, naming s1, and s0 stays a standby (at
/// the new epoch, refusing the old primary); forced, it promotes.
#[test]
fn promotion_refuses_when_the_synchronous_set_cannot_be_fenced() {
    let (p, dirs) = setup_n("unfenced", 2);
    let s0 = standby(&dirs[0], true);
    let s1 = standby(&dirs[1], true);
    let s1_addr = s1.addr().to_string();
    let addrs = vec![s0.addr().to_string(), s1_addr.clone()];
    let (db, log) =
        open_primary(&p, options(), config(addrs, ReplicationMode::Quorum(1), fail_after(10_000)), None)
            .unwrap();
    db.table("t").unwrap().update_int(&Value::Int(4), 1, 44).unwrap();
    // s0 holds the commit (quorum 1 may have acknowledged it through s1 alone).
    assert!(wait_for(|| s0.cluster().is_some() && s0.position() >= log.status().durable));
    drop(s1);
    let e = s0
        .promote_with(&PromoteOptions {
            peer_timeout: Duration::from_millis(500),
            ..PromoteOptions::default()
        })
        .unwrap_err();
    assert!(matches!(e, Error::Replication(ReplError::NotFenced { .. })), "{e}");
    assert!(e.to_string().contains(&s1_addr), "{e}");
    assert!(!s0.is_promoted());
    let (db2, rep) = s0
        .promote_with(&PromoteOptions {
            force: true,
            peer_timeout: Duration::from_millis(500),
            ..PromoteOptions::default()
        })
        .unwrap();
    assert!(rep.notes.iter().any(|n| n.starts_with("forced")), "{rep:?}");
    assert_eq!(c1(&db2, 4), 44);
    db2.close().unwrap();
    drop(db);
    drop(log);
}

/// A promotion that fails after fencing (here: the promoted primary's first commit cannot reach
/// its standby) leaves a standby that accepts fences and primaries again: a peer promoting next
/// (quorum 1 of 2 must fence both) can fence it. Before, the standby stayed "being promoted" and
/// refused every later fence and primary, so no one could ever promote.
#[test]
fn a_promotion_that_fails_after_fencing_leaves_a_working_standby() {
    let (p, dirs) = setup_n("failedpromo", 2);
    let s0 = standby(&dirs[0], true);
    let s1 = standby(&dirs[1], true);
    let addrs = vec![s0.addr(), s1.addr()];
    let (db, log) =
        open_primary(&p, options(), config(addrs, ReplicationMode::Quorum(1), fail_after(30_000)), None)
            .unwrap();
    let t = db.table("t").unwrap();
    for k in 0..20 {
        t.update_int(&Value::Int(k), 1, 500 + k).unwrap();
    }
    drop(t);
    drop(db);
    drop(log);
    // s0 fences s1 (and itself), then opens as a primary of a standby nobody runs: its first
    // commit times out, and the promotion fails.
    let cfg = config(vec![dead_addr()], ReplicationMode::Eager, fail_after(300));
    let e = s0
        .promote_to_primary(
            &PromoteOptions { peer_timeout: Duration::from_secs(2), ..Default::default() },
            cfg,
        )
        .unwrap_err();
    assert!(!matches!(e, Error::Replication(ReplError::NotFenced { .. })), "fencing itself succeeded: {e}");
    assert!(!s0.is_promoted(), "a failed promotion leaves a standby");
    // s1 promotes next and must fence s0 too.
    let (db2, rep) = s1
        .promote_with(&PromoteOptions { peer_timeout: Duration::from_secs(2), ..Default::default() })
        .unwrap_or_else(|e| panic!("s0 refused the fence: {e}\n{}", s0.status()));
    assert_eq!(rep.fenced.len(), 1, "{rep:?}");
    for k in 0..20 {
        assert_eq!(c1(&db2, k), 500 + k, "row {k}");
    }
    db2.close().unwrap();
}
