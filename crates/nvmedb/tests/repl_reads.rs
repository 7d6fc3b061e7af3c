//! Reads on a standby: snapshots taken while the primary commits transfers (updates), history
//! rows (inserts) and their removal (deletes) hold a prefix of its commits — never part of a
//! transaction — stay unchanged while the standby goes on applying, refuse changes, and, after
//! waiting for a commit's position, hold it (read-your-writes).

mod repl_common;

use nvmedb::repl::{open_primary, seed_standby, ReplicatedLog, ReplicationMode, Standby, StandbySnapshot};
use nvmedb::{ColumnType, Database, Error, Schema, Value};
use nvmedb_testkit::seed;
use repl_common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ACCOUNTS: i64 = 40;
const START: i64 = 1000;
const CLIENTS: u64 = 4;

/// What a snapshot holds: the balances' sum, per account its `cnt` and its history rows.
#[derive(Debug, PartialEq)]
struct Seen {
    sum: i64,
    cnt: BTreeMap<i64, i64>,
    hist: BTreeMap<i64, i64>,
}

fn look(db: &Database) -> Seen {
    let acct = db.table("acct").unwrap();
    let hist = db.table("hist").unwrap();
    let (mut sum, mut cnt, mut rows) = (0, BTreeMap::new(), BTreeMap::new());
    acct.scan(|r| {
        sum += r.int(1);
        cnt.insert(r.int(0), r.int(2));
        Ok(true)
    })
    .unwrap();
    hist.scan(|r| {
        rows.insert(r.int(0), r.int(1));
        Ok(true)
    })
    .unwrap();
    acct.check_integrity().unwrap();
    hist.check_integrity().unwrap();
    Seen { sum, cnt, hist: rows }
}

/// The consistency conditions: money is conserved, and each account's `cnt` is the number of
/// its history rows (every transaction changes both together).
fn check(s: &Seen, what: &str) {
    assert_eq!(s.sum, ACCOUNTS * START, "{what}: the balances' sum");
    let mut by_acct: BTreeMap<i64, i64> = BTreeMap::new();
    for a in s.hist.values() {
        *by_acct.entry(*a).or_default() += 1;
    }
    for (a, c) in &s.cnt {
        assert_eq!(by_acct.get(a).copied().unwrap_or(0), *c, "{what}: account {a}'s history rows");
    }
}

#[derive(Default)]
struct Acks {
    /// History id -> the primary's durable position after its insert committed.
    inserted: BTreeMap<i64, u64>,
    /// Ids whose row a later transaction deleted (committed or not).
    deleted: BTreeSet<i64>,
    /// Ids of transactions that rolled back (never visible anywhere).
    aborted: BTreeSet<i64>,
}

/// Creates the accounts (`acct`) and their history (`hist`) in a new database at `p`.
fn create(p: &std::path::Path) {
    {
        let db = Database::open(p, options()).unwrap();
        let acct = db
            .create_table(
                "acct",
                Schema::new(vec![
                    ("id", ColumnType::Int),
                    ("bal", ColumnType::Int),
                    ("cnt", ColumnType::Int),
                ]),
            )
            .unwrap();
        for a in 0..ACCOUNTS {
            acct.insert(&[Value::Int(a), Value::Int(START), Value::Int(0)]).unwrap();
        }
        let hist =
            Schema::new(vec![("id", ColumnType::Int), ("acct", ColumnType::Int), ("amt", ColumnType::Int)])
                .with_index("by_acct", "acct")
                .unwrap();
        db.create_table("hist", hist).unwrap();
        db.close().unwrap();
    }
}

/// Moves `amt` from account `a` to `b` in `tx` and adds history row `id` for it.
fn transfer(
    db: &Database,
    tx: &mut nvmedb::Transaction,
    id: i64,
    a: i64,
    b: i64,
    amt: i64,
) -> nvmedb::Result<()> {
    let (acct, hist) = (db.table("acct")?, db.table("hist")?);
    for (k, dbal, dcnt) in [(a, -amt, 1), (b, amt, 0)] {
        let row = tx.get_for_update(&acct, &Value::Int(k))?.expect("account");
        let (bal, cnt) = (row[1].as_int().unwrap(), row[2].as_int().unwrap());
        tx.update(&acct, &[Value::Int(k), Value::Int(bal + dbal), Value::Int(cnt + dcnt)])?;
    }
    tx.insert(&hist, &[Value::Int(id), Value::Int(a), Value::Int(amt)])?;
    Ok(())
}

/// A primary (in `p`) with the accounts, replicating eagerly to a standby (in `s`) that writes
/// its pages back every `write_back`.
fn cluster(
    p: &std::path::Path,
    s: &std::path::Path,
    write_back: Duration,
) -> (Standby, Database, Arc<ReplicatedLog>) {
    create(p);
    seed_standby(p, s).unwrap();
    let sb = standby(s, true);
    sb.set_write_back_interval(write_back);
    let (db, log) = open_primary(
        p,
        options(),
        config(vec![sb.addr().to_string()], ReplicationMode::Eager, fail_after(30_000)),
        None,
    )
    .unwrap();
    (sb, db, log)
}

#[test]
fn standby_snapshots_hold_a_prefix_of_the_commits_and_read_your_writes() {
    let (p, s) = (tmp("reads-p"), tmp("reads-s"));
    // Pages written back (and restartpoints taken) often, while snapshots live.
    let (sb, db, log) = cluster(&p, &s, Duration::from_millis(20));
    let stop = AtomicBool::new(false);
    let acks = Mutex::new(Acks::default());
    let base = seed(42);
    let mut kept: Option<(StandbySnapshot, Seen)> = None;
    let mut snapshots = Vec::new();
    std::thread::scope(|scope| {
        // The clients stop however the reader ends (a failed check too).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _stop = StopOnDrop(&stop);
        for c in 0..CLIENTS {
            let (db, log, stop, acks) = (&db, &log, &stop, &acks);
            scope.spawn(move || {
                let acct = db.table("acct").unwrap();
                let hist = db.table("hist").unwrap();
                let mut rng = nvmedb::util::Rng::new(base ^ (c + 1));
                let mut mine: Vec<(i64, i64)> = Vec::new();
                let mut n = 0i64;
                while !stop.load(Ordering::Acquire) {
                    n += 1;
                    let id = (c as i64) << 32 | n;
                    let (a, b) = (rng.below(ACCOUNTS as u64) as i64, rng.below(ACCOUNTS as u64) as i64);
                    let amt = 1 + rng.below(50) as i64;
                    let drop_one = n % 3 == 0 && !mine.is_empty();
                    let r = (|| -> nvmedb::Result<Option<i64>> {
                        let mut tx = db.begin();
                        let bump = |tx: &mut nvmedb::Transaction, k: i64, dbal: i64, dcnt: i64| {
                            let row = tx.get_for_update(&acct, &Value::Int(k))?.expect("account");
                            let (bal, cnt) = (row[1].as_int().unwrap(), row[2].as_int().unwrap());
                            tx.update(
                                &acct,
                                &[Value::Int(k), Value::Int(bal + dbal), Value::Int(cnt + dcnt)],
                            )?;
                            Ok::<_, Error>(())
                        };
                        bump(&mut tx, a, -amt, 1)?;
                        bump(&mut tx, b, amt, 0)?;
                        tx.insert(&hist, &[Value::Int(id), Value::Int(a), Value::Int(amt)])?;
                        let mut gone = None;
                        if drop_one {
                            let (old, old_acct) = mine[0];
                            assert!(tx.delete(&hist, &Value::Int(old))?);
                            bump(&mut tx, old_acct, 0, -1)?;
                            gone = Some(old);
                        }
                        tx.commit()?;
                        Ok(gone)
                    })();
                    match r {
                        Ok(gone) => {
                            let durable = log.status().durable;
                            let mut k = acks.lock().unwrap();
                            k.inserted.insert(id, durable);
                            mine.push((id, a));
                            if let Some(g) = gone {
                                k.deleted.insert(g);
                                mine.remove(0);
                            }
                        }
                        Err(e) if e.is_retryable() => {
                            acks.lock().unwrap().aborted.insert(id);
                        }
                        Err(e) => panic!("client {c}: {e}"),
                    }
                }
            });
        }
        // The reader: snapshots while the clients commit.
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(2500) || snapshots.len() < 4 {
            let snap = sb.read_snapshot().unwrap();
            let seen = look(snap.db());
            check(&seen, &format!("snapshot at LSN {}", snap.lsn()));
            let k = acks.lock().unwrap();
            for id in seen.hist.keys() {
                assert!(!k.aborted.contains(id), "a rolled-back transaction's row {id} is in {snap:?}");
            }
            for (id, d) in &k.inserted {
                if *d <= snap.lsn() && !k.deleted.contains(id) {
                    assert!(seen.hist.contains_key(id), "row {id}, durable at {d}, is missing from {snap:?}");
                }
            }
            drop(k);
            snapshots.push((snap.lsn(), snap.lag_bytes(), snap.build_time(), seen.hist.len()));
            if kept.is_none() && !seen.hist.is_empty() {
                kept = Some((snap, seen));
            }
        }
        // Read-your-writes: after waiting for the position of a commit it saw, a snapshot holds it.
        let (id, d) = {
            let k = acks.lock().unwrap();
            let (id, d) = k.inserted.iter().rev().find(|(id, _)| !k.deleted.contains(id)).unwrap();
            (*id, *d)
        };
        assert!(sb.wait_applied(d, Duration::from_secs(60)), "{}", sb.status());
        let snap = sb.read_snapshot().unwrap();
        assert!(snap.lsn() >= d);
        assert!(look(snap.db()).hist.contains_key(&id), "row {id} (durable at {d}) after waiting: {snap:?}");
        stop.store(true, Ordering::Release);
    });
    // The first snapshot did not move while the standby applied everything since.
    let (snap, seen) = kept.expect("a snapshot with history rows");
    assert!(sb.wait_applied(log.status().durable, Duration::from_secs(60)), "{}", sb.status());
    assert!(sb.applied() > snap.lsn());
    assert_eq!(look(snap.db()), seen, "the snapshot at LSN {} changed", snap.lsn());
    // Changes are refused.
    let e =
        snap.db().table("acct").unwrap().insert(&[Value::Int(-1), Value::Int(0), Value::Int(0)]).unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    drop(snap);
    // The last snapshot agrees with the primary once the standby has applied all of it.
    let end = sb.read_snapshot().unwrap();
    assert_eq!(look(end.db()), look(&db), "a snapshot of the caught-up standby vs the primary");
    drop(end);
    for (lsn, lag, took, rows) in &snapshots {
        eprintln!("snapshot at LSN {lsn}: lag {lag} bytes, built in {took:?}, {rows} history rows");
    }
    assert!(snapshots.windows(2).all(|w| w[0].0 <= w[1].0), "snapshots move forward: {snapshots:?}");
    let k = acks.lock().unwrap();
    assert!(
        k.inserted.len() > 100 && !k.deleted.is_empty(),
        "the workload ran: {} commits",
        k.inserted.len()
    );
    drop(k);
    db.close().unwrap();
    drop(log);
    drop(sb);
}

/// A transaction whose changes the standby has applied but whose commit it has not seen is
/// undone in a snapshot (the snapshot's pages come from the apply thread's memory: nothing is
/// written back meanwhile); once committed it is in the next snapshot, all of it, while the
/// earlier snapshot, whose pages the apply thread changed since, still shows the state before.
#[test]
fn a_transaction_in_flight_is_undone_in_a_snapshot_and_whole_in_the_next() {
    let (p, s) = (tmp("reads-inflight-p"), tmp("reads-inflight-s"));
    let (sb, db, log) = cluster(&p, &s, Duration::from_secs(600));
    let commit = |id: i64, a: i64, b: i64| {
        let mut tx = db.begin();
        transfer(&db, &mut tx, id, a, b, 7).unwrap();
        tx.commit().unwrap();
        assert!(sb.wait_applied(log.status().durable, Duration::from_secs(60)), "{}", sb.status());
    };
    commit(1, 5, 6);
    // In flight: account 0 pays 300 to account 1; then a commit of another transaction makes
    // the log durable (and shipped) past the unfinished one's changes.
    let mut open = db.begin();
    transfer(&db, &mut open, 2, 0, 1, 300).unwrap();
    commit(3, 7, 8);
    let before = sb.read_snapshot().unwrap();
    let seen = look(before.db());
    check(&seen, "the snapshot with a transaction in flight");
    assert!(before.undone() >= 1, "nothing in flight was undone in {before:?}");
    assert!(seen.hist.contains_key(&1) && seen.hist.contains_key(&3), "{seen:?}");
    assert!(!seen.hist.contains_key(&2), "the unfinished transaction's row is visible: {seen:?}");
    assert_eq!((seen.cnt[&0], seen.cnt[&1]), (0, 0), "{seen:?}");
    // It commits, and another changes the same pages.
    open.commit().unwrap();
    commit(4, 0, 1);
    let after = sb.read_snapshot().unwrap();
    let now = look(after.db());
    check(&now, "the snapshot after the commit");
    assert!(after.lsn() > before.lsn());
    assert!(now.hist.contains_key(&2) && now.hist.contains_key(&4), "{now:?}");
    assert_eq!((now.cnt[&0], now.cnt[&1]), (2, 0), "{now:?}");
    assert_eq!(look(after.db()), look(&db), "the caught-up snapshot vs the primary");
    // The first snapshot did not move.
    assert_eq!(look(before.db()), seen, "the snapshot at LSN {} changed", before.lsn());
    drop((before, after));
    db.close().unwrap();
    drop(log);
    drop(sb);
}
