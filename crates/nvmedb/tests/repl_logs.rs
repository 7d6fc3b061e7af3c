//! Log space on both sides: a standby takes restartpoints (the primary's checkpoints, once its
//! pages are written back) and releases the log before them, surviving restarts and promotion;
//! a primary keeps log for an absent standby only up to `max_retained_bytes`, says when it
//! gives one up, and that standby takes a base backup when it returns; a local log that fails
//! its flush fails the replicated commits with its own error.

mod repl_common;
mod wal_common;

use nvmedb::repl::{open_primary, ReplConfig, ReplicationMode};
use nvmedb::{Options, Value};
use repl_common::*;
use std::time::Duration;

/// Options whose file log asks for a checkpoint every 256 KiB.
fn checkpointing() -> Options {
    let mut o = options();
    o.wal_options.checkpoint_after_bytes = 256 << 10;
    o
}

/// Updates every row of `t`, round after round, until `done` (bounded by `wait_for`).
fn update_rounds_until(t: &nvmedb::Table, mut done: impl FnMut() -> bool) -> bool {
    let mut round = 0;
    wait_for(|| {
        round += 1;
        for k in 0..ROWS {
            t.update_int(&Value::Int(k), 1, round * 1000 + k).unwrap();
        }
        done()
    })
}

#[test]
fn standbys_take_restartpoints_and_release_their_log() {
    let (p, s) = setup("restartpoints");
    let s0 = standby(&s, true);
    let addr = s0.addr().to_string();
    s0.set_write_back_interval(Duration::from_millis(20));
    let first = s0.log_start();
    let (db, log) = open_primary(
        &p,
        checkpointing(),
        config(vec![addr.clone()], ReplicationMode::Eager, fail_after(30_000)),
        None,
    )
    .unwrap();
    let t = db.table("t").unwrap();
    // Commit until the standby has moved its log start.
    assert!(update_rounds_until(&t, || s0.log_start() > first), "{}", s0.status());
    assert!(s0.status().contains("restartpoints "), "{}", s0.status());
    // Restarted, the standby opens its shortened log and follows on.
    drop(s0);
    let s0 = standby_at(&s, &addr, true);
    assert!(s0.log_start() > first);
    for k in 0..ROWS {
        t.update_int(&Value::Int(k), 1, -k).unwrap();
    }
    drop(t);
    drop(db);
    drop(log);
    let (db2, rep) = s0.promote().unwrap();
    assert!(
        rep.recovery.redo_from > first,
        "promotion redid from {} (log start {first})",
        rep.recovery.redo_from
    );
    for k in 0..ROWS {
        assert_eq!(c1(&db2, k), -k, "row {k}");
    }
    db2.table("t").unwrap().check_integrity().unwrap();
    db2.close().unwrap();
}

#[test]
fn a_primary_gives_up_an_absent_standby_past_its_bound_and_it_reseeds() {
    let (p, s) = setup("giveup");
    let s0 = standby(&s, true);
    let addr = s0.addr().to_string();
    let cfg = ReplConfig {
        max_retained_bytes: 128 << 10,
        reconnect_delay: Duration::from_millis(20),
        ..config(vec![addr.clone()], ReplicationMode::Lazy, fail_after(30_000))
    };
    let (db, log) = open_primary(&p, checkpointing(), cfg, None).unwrap();
    let t = db.table("t").unwrap();
    t.update_int(&Value::Int(0), 1, 1).unwrap();
    drop(s0);
    assert!(update_rounds_until(&t, || log.status().standbys[0].given_up), "{}", log.status());
    let st = log.status();
    assert!(st.events.iter().any(|e| e.contains("gave up standby")), "{st}");
    assert!(st.to_string().contains("GAVE UP"), "{st}");
    for k in 0..ROWS {
        t.update_int(&Value::Int(k), 1, 7 + k).unwrap();
    }
    // It comes back (no commits meanwhile, so no checkpoint gives it up again while it copies).
    let s0 = standby_at(&s, &addr, true);
    assert!(wait_for(|| s0.position() >= log.status().appended), "{}\n{}", log.status(), s0.status());
    assert!(s0.status().contains("base backups 1"), "{}", s0.status());
    assert!(!log.status().standbys[0].given_up);
    drop(t);
    drop(db);
    drop(log);
    let (db2, _) = s0.promote().unwrap();
    for k in 0..ROWS {
        assert_eq!(c1(&db2, k), 7 + k, "row {k}");
    }
    db2.close().unwrap();
}

/// A local log that fails its flush fails the replicated commits waiting on it, with the local
/// log's error and without waiting out the standby timeout (the local flusher, not the
/// committer, runs the flush): in lazy mode after commits that succeeded, and in eager mode
/// while the standby is unreachable.
#[test]
fn a_failed_local_flush_fails_replicated_commits_with_its_error() {
    use nvmedb::wal::{RecordLog, KIND_DATA};
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Arc;
    use wal_common::{dynp, sim_pair, small_opts, CutStorage};
    for mode in [ReplicationMode::Lazy, ReplicationMode::Eager] {
        let (a, b) = sim_pair();
        let budget = Arc::new(AtomicI64::new(i64::MAX));
        let local = nvmedb::wal::FileLog::open(
            Arc::new(CutStorage::new(dynp(&a), budget.clone())),
            dynp(&b),
            small_opts(),
        )
        .unwrap();
        // The standby is unreachable; the timeout is far beyond the test's check below.
        let timeout = Duration::from_secs(600);
        let log = nvmedb::repl::ReplicatedLog::start(
            Arc::new(local),
            config(vec![dead_addr()], mode, nvmedb::repl::StandbyPolicy::Fail { timeout }),
        )
        .unwrap();
        if mode == ReplicationMode::Lazy {
            for i in 0..20u8 {
                let (_, end) = log.append_record(KIND_DATA, &[i; 100]).unwrap();
                assert!(log.wait_durable(end).unwrap() >= end, "{mode:?}: commit {i}");
            }
        }
        budget.store(0, Ordering::SeqCst);
        let (_, end) = log.append_record(KIND_DATA, b"doomed").unwrap();
        let started = std::time::Instant::now();
        match log.wait_durable(end) {
            Err(nvmedb::Error::Io(_)) | Err(nvmedb::Error::Poisoned(_)) => {}
            other => panic!("{mode:?}: expected the local log's error, got {other:?}"),
        }
        assert!(started.elapsed() < timeout / 10, "{mode:?}: the commit waited for the standby timeout");
        assert!(log.wait_durable(end).is_err(), "{mode:?}: a later wait fails too");
        log.shutdown();
    }
}
