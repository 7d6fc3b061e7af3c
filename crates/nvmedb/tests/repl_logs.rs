//! Log space on both sides: a standby takes restartpoints (the primary's checkpoints, once its
//! pages are written back) and releases the log before them, surviving restarts and promotion;
//! a primary keeps log for an absent standby only up to `max_retained_bytes`, says when it
//! gives one up, and that standby takes a base backup when it returns.

mod repl_common;

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
