//! Chain mode forwards: the primary ships to the first standby only, each standby ships what it
//! holds to the next and relays the rest of the chain's positions back; a commit waits for the
//! last standby, so the last standby, promoted, holds every acknowledged commit.

mod repl_common;

use nvmedb::repl::{open_primary, LinkState, ReplicationMode};
use nvmedb::Value;
use repl_common::*;

#[test]
fn chain_mode_forwards_records_along_the_chain() {
    let (p, dirs) = setup_n("chain", 3);
    let sbs: Vec<_> = dirs.iter().map(|d| standby(d, true)).collect();
    let addrs: Vec<String> = sbs.iter().map(|s| s.addr().to_string()).collect();
    let (db, log) =
        open_primary(&p, options(), config(addrs, ReplicationMode::Chain, fail_after(30_000)), None).unwrap();
    let t = db.table("t").unwrap();
    for round in 1..=3 {
        for k in 0..ROWS {
            t.update_int(&Value::Int(k), 1, round * 1000 + k).unwrap();
        }
    }
    let st = log.status();
    // Only the first standby is connected to the primary; the last acknowledged every commit.
    assert_eq!(st.standbys[0].connects, 1, "{st}");
    assert_eq!((st.standbys[1].connects, st.standbys[2].connects), (0, 0), "{st}");
    assert_eq!(st.standbys[2].link, LinkState::Up, "{st}");
    assert!(st.standbys[2].shadow >= st.durable, "{st}");
    assert!(sbs[2].position() >= st.durable, "{}", sbs[2].status());
    for s in &sbs[1..] {
        assert!(s.status().contains("chain:3 over") || s.status().contains("chain over"), "{}", s.status());
    }
    drop(t);
    drop(db);
    drop(log);
    // The last standby holds every acknowledged commit; promoting it fences the chain.
    let (db2, rep) = sbs[2].promote().unwrap();
    assert_eq!(rep.fenced.len(), 2, "{rep:?}");
    for k in 0..ROWS {
        assert_eq!(c1(&db2, k), 3000 + k, "row {k}");
    }
    db2.table("t").unwrap().check_integrity().unwrap();
    db2.close().unwrap();
}

/// A chain member with no copy of the database gets its base backup from the standby before
/// it (a forwarder sends its own), then follows; promoted, it holds every acknowledged commit.
#[test]
fn a_chain_member_without_a_copy_is_seeded_by_the_standby_before_it() {
    let (p, dirs) = setup_n("chain-seed", 1);
    let empty = tmp("chain-seed-empty");
    std::fs::create_dir_all(&empty).unwrap();
    let first = standby(&dirs[0], true);
    let last = standby(&empty, true);
    assert!(!last.is_seeded());
    let addrs = vec![first.addr(), last.addr()];
    let (db, log) =
        open_primary(&p, options(), config(addrs, ReplicationMode::Chain, fail_after(60_000)), None).unwrap();
    let t = db.table("t").unwrap();
    for k in 0..ROWS {
        t.update_int(&Value::Int(k), 1, 7000 + k).unwrap();
    }
    let st = log.status();
    assert!(last.is_seeded(), "{}", last.status());
    assert!(last.status().contains("base backups 1"), "{}", last.status());
    assert!(st.standbys[1].shadow >= st.durable, "{st}");
    drop(t);
    drop(db);
    drop(log);
    let (db2, _) = last.promote().unwrap();
    for k in 0..ROWS {
        assert_eq!(c1(&db2, k), 7000 + k, "row {k}");
    }
    db2.table("t").unwrap().check_integrity().unwrap();
    db2.close().unwrap();
}
