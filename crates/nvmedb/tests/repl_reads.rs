//! Reads on a standby: snapshots taken while the primary commits transfers (updates), history
//! rows (inserts) and their removal (deletes) hold a prefix of its commits — never part of a
//! transaction — stay unchanged while the standby goes on applying, refuse changes, and, after
//! waiting for a commit's position, hold it (read-your-writes). Snapshots kept while the
//! standby writes the same pages back many times hold exactly, row by row, what was committed
//! at their position, and those write-backs read nothing back from the data files.

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

/// What the standby's apply thread does to its data files (heap and index), seen by a hook
/// below its storage.
#[derive(Default)]
struct ApplyIo {
    /// The blocks it has written.
    written: Mutex<BTreeSet<(String, u64)>>,
    /// Its reads of a block it had written before: it holds every page it wrote (its cache is
    /// far from full here), so only keeping a block for a snapshot reads one back.
    read_back: std::sync::atomic::AtomicU64,
    /// Its writes of blocks.
    writes: std::sync::atomic::AtomicU64,
    /// Its syncs of heap files (each write-back syncs every file it wrote).
    syncs: std::sync::atomic::AtomicU64,
}

impl nvmedb::io::IoHook for ApplyIo {
    fn before(
        &self,
        device: &str,
        op: nvmedb::io::IoOpKind,
        offset: u64,
        len: usize,
    ) -> nvmedb::io::IoResult<()> {
        let heap = device.ends_with(".heap");
        if !(heap || device.ends_with(".idx"))
            || std::thread::current().name() != Some("nvmedb-standby-apply")
        {
            return Ok(());
        }
        let mut blocks = offset / 4096..(offset + len as u64).div_ceil(4096);
        match op {
            nvmedb::io::IoOpKind::Read => {
                let w = self.written.lock().unwrap();
                if blocks.any(|b| w.contains(&(device.to_string(), b))) {
                    self.read_back.fetch_add(1, Ordering::SeqCst);
                }
            }
            nvmedb::io::IoOpKind::Write => {
                let mut w = self.written.lock().unwrap();
                for b in blocks {
                    w.insert((device.to_string(), b));
                    self.writes.fetch_add(1, Ordering::SeqCst);
                }
            }
            nvmedb::io::IoOpKind::Sync if heap => {
                self.syncs.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        Ok(())
    }
}

/// [`cluster`] with the standby's data files behind an [`ApplyIo`] hook, writing back only
/// when [`write_back`] asks.
fn hooked_cluster(
    p: &std::path::Path,
    s: &std::path::Path,
) -> (Standby, Database, Arc<ReplicatedLog>, Arc<ApplyIo>) {
    create(p);
    seed_standby(p, s).unwrap();
    let io = Arc::new(ApplyIo::default());
    let dir: Arc<dyn nvmedb::io::Storage> =
        Arc::new(nvmedb::io::DirStorage::new(s, nvmedb::io::FileOptions::default()).unwrap());
    let data = Arc::new(nvmedb::io::HookedStorage::new(dir, io.clone()));
    let sb = Standby::start_on(
        nvmedb::repl::StandbyConfig {
            listen: "127.0.0.1:0".into(),
            data_dir: s.to_path_buf(),
            secret: SECRET.to_vec(),
            apply: true,
            options: options(),
        },
        nvmedb::repl::StandbyDevices { data, log: None },
    )
    .unwrap();
    sb.set_write_back_interval(Duration::from_secs(3600));
    let (db, log) = open_primary(
        p,
        options(),
        config(vec![sb.addr().to_string()], ReplicationMode::Eager, fail_after(30_000)),
        None,
    )
    .unwrap();
    (sb, db, log, io)
}

/// The committed state a single client keeps: per account (balance, cnt), per history row
/// (account, amount).
#[derive(Clone, Debug, PartialEq, Default)]
struct Model {
    acct: BTreeMap<i64, (i64, i64)>,
    hist: BTreeMap<i64, (i64, i64)>,
}

/// Every row of `db`, as a [`Model`].
fn rows(db: &Database) -> Model {
    let mut m = Model::default();
    db.table("acct")
        .unwrap()
        .scan(|r| {
            m.acct.insert(r.int(0), (r.int(1), r.int(2)));
            Ok(true)
        })
        .unwrap();
    db.table("hist")
        .unwrap()
        .scan(|r| {
            m.hist.insert(r.int(0), (r.int(1), r.int(2)));
            Ok(true)
        })
        .unwrap();
    db.table("acct").unwrap().check_integrity().unwrap();
    db.table("hist").unwrap().check_integrity().unwrap();
    m
}

/// Commits transaction `n` of the single client (a transfer with its history row, and every
/// third one deletes the oldest history row and its count) and updates `m`.
fn commit_one(db: &Database, m: &mut Model, rng: &mut nvmedb::util::Rng, n: i64) {
    let (a, b) = (rng.below(ACCOUNTS as u64) as i64, rng.below(ACCOUNTS as u64) as i64);
    let amt = 1 + rng.below(50) as i64;
    let mut tx = db.begin();
    transfer(db, &mut tx, n, a, b, amt).unwrap();
    let old = if n % 3 == 0 { m.hist.iter().next().map(|(id, (acct, _))| (*id, *acct)) } else { None };
    if let Some((id, acct)) = old {
        let t = db.table("acct").unwrap();
        assert!(tx.delete(&db.table("hist").unwrap(), &Value::Int(id)).unwrap());
        let row = tx.get_for_update(&t, &Value::Int(acct)).unwrap().expect("account");
        tx.update(&t, &[Value::Int(acct), row[1].clone(), Value::Int(row[2].as_int().unwrap() - 1)]).unwrap();
    }
    tx.commit().unwrap();
    for (k, dbal, dcnt) in [(a, -amt, 1), (b, amt, 0)] {
        let e = m.acct.get_mut(&k).unwrap();
        *e = (e.0 + dbal, e.1 + dcnt);
    }
    m.hist.insert(n, (a, amt));
    if let Some((id, acct)) = old {
        m.hist.remove(&id);
        m.acct.get_mut(&acct).unwrap().1 -= 1;
    }
}

/// Makes the standby write its pages back once (it does not otherwise: see [`hooked_cluster`])
/// and waits until it has.
fn write_back(sb: &Standby, io: &ApplyIo) {
    let before = io.syncs.load(Ordering::SeqCst);
    sb.set_write_back_interval(Duration::from_millis(1));
    assert!(wait_for(|| io.syncs.load(Ordering::SeqCst) > before), "no write-back: {}", sb.status());
    sb.set_write_back_interval(Duration::from_secs(3600));
}

/// Commits 20 more transactions of the single client (`*n` counts them) and waits until the
/// standby has applied them.
fn commit_some(
    db: &Database,
    log: &ReplicatedLog,
    sb: &Standby,
    m: &mut Model,
    rng: &mut nvmedb::util::Rng,
    n: &mut i64,
) {
    for _ in 0..20 {
        *n += 1;
        commit_one(db, m, rng, *n);
    }
    assert!(sb.wait_applied(log.status().durable, Duration::from_secs(60)), "{}", sb.status());
}

/// A model of the accounts as [`create`] makes them, with no history.
fn start_model() -> Model {
    let mut m = Model::default();
    for a in 0..ACCOUNTS {
        m.acct.insert(a, (START, 0));
    }
    m
}

/// Snapshots taken at quiet points (some while the apply thread held the pages unwritten,
/// some just after it wrote them back) are kept while the standby changes and writes back the
/// same pages many times, then read: each holds exactly, row by row, what was committed at its
/// position.
#[test]
fn snapshots_kept_across_write_backs_hold_exactly_the_commits_at_their_position() {
    let (p, s) = (tmp("reads-kept-p"), tmp("reads-kept-s"));
    let (sb, db, log, io) = hooked_cluster(&p, &s);
    let mut m = start_model();
    let mut rng = nvmedb::util::Rng::new(seed(7));
    let mut n = 0i64;
    let mut kept: Vec<(StandbySnapshot, Model)> = Vec::new();
    for k in 0..4 {
        commit_some(&db, &log, &sb, &mut m, &mut rng, &mut n);
        // Odd: the pages are clean at the registration (their first changes since keep them);
        // even: the snapshot holds the changed ones as they are in the apply thread's memory.
        if k % 2 == 1 {
            write_back(&sb, &io);
        }
        let snap = sb.read_snapshot().unwrap();
        assert!(snap.lsn() >= log.status().durable, "{snap:?} taken at a quiet point");
        assert_eq!(snap.undone(), 0, "nothing was in flight: {snap:?}");
        kept.push((snap, m.clone()));
        if k % 2 == 0 {
            write_back(&sb, &io);
        }
    }
    for _ in 0..6 {
        commit_some(&db, &log, &sb, &mut m, &mut rng, &mut n);
        write_back(&sb, &io);
    }
    for (snap, then) in &kept {
        assert_eq!(&rows(snap.db()), then, "{snap:?} vs what was committed at its position");
    }
    assert_eq!(rows(&db), m, "the primary vs its client's record");
    drop(kept);
    db.close().unwrap();
    drop(log);
    drop(sb);
}

/// While snapshots live, the apply thread's write-backs of the pages it changed read nothing
/// back from the data files (the images the snapshots need are kept from its memory).
#[test]
fn write_back_with_live_snapshots_reads_nothing_back() {
    let (p, s) = (tmp("reads-noread-p"), tmp("reads-noread-s"));
    let (sb, db, log, io) = hooked_cluster(&p, &s);
    let mut m = start_model();
    let mut rng = nvmedb::util::Rng::new(seed(11));
    let mut n = 0i64;
    commit_some(&db, &log, &sb, &mut m, &mut rng, &mut n);
    write_back(&sb, &io);
    let (writes, read_back) = (io.writes.load(Ordering::SeqCst), io.read_back.load(Ordering::SeqCst));
    // Registered while every page is clean, and while some are not.
    let first = sb.read_snapshot().unwrap();
    commit_some(&db, &log, &sb, &mut m, &mut rng, &mut n);
    let second = sb.read_snapshot().unwrap();
    for _ in 0..3 {
        write_back(&sb, &io);
        commit_some(&db, &log, &sb, &mut m, &mut rng, &mut n);
    }
    write_back(&sb, &io);
    let written = io.writes.load(Ordering::SeqCst) - writes;
    assert!(written >= 4, "the standby wrote {written} blocks back in 4 write-backs");
    assert_eq!(
        io.read_back.load(Ordering::SeqCst) - read_back,
        0,
        "blocks the apply thread read back while it wrote {written} blocks with {first:?} and {second:?} live"
    );
    drop((first, second));
    db.close().unwrap();
    drop(log);
    drop(sb);
}
