//! Early lock release keeps durability exact: a committing transaction's locks go once its
//! commit record is in the log, before the flush, and nothing that saw its changes is
//! acknowledged before that flush. The log's flush is held (its devices' syncs block) while
//! a transaction commits; then a serializable reader, a read-only transaction's commit, an
//! auto-commit read and a writer that overwrites the early-released row run. The reader sees
//! the new row at once (the lock went early), but none of the four is acknowledged while the
//! flush is held; then either the flush goes on (all are acknowledged, and survive a crash) or
//! the power is cut first (none is acknowledged, and after recovery none of the changes is
//! there). And a checkpoint taken while such a commit is not durable does not let a crash
//! keep its change; and point reads of other keys are not held up by that flush.

mod support;

use nvmedb::io::{IoError, IoHook, IoOpKind, IoResult};
use nvmedb::{ColumnType, Database, Options, Schema, Table, Value};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use support::SimDisks;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Every operation passes.
    Pass,
    /// Syncs block until the mode changes.
    Hold,
    /// The power is cut: every write and sync fails.
    Cut,
}

/// The log devices' hook: holds their syncs, or cuts the power.
struct LogFlush {
    mode: Mutex<(Mode, usize)>,
    changed: Condvar,
}

impl LogFlush {
    fn new() -> Arc<Self> {
        Arc::new(Self { mode: Mutex::new((Mode::Pass, 0)), changed: Condvar::new() })
    }
    fn set(&self, mode: Mode) {
        self.mode.lock().unwrap().0 = mode;
        self.changed.notify_all();
    }
    /// Waits until at least one sync is held.
    fn wait_held(&self) {
        let mut m = self.mode.lock().unwrap();
        while m.1 == 0 {
            m = self.changed.wait(m).unwrap();
        }
    }
}

impl IoHook for LogFlush {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        let mut m = self.mode.lock().unwrap();
        if op == IoOpKind::Sync && m.0 == Mode::Hold {
            m.1 += 1;
            self.changed.notify_all();
            while m.0 == Mode::Hold {
                m = self.changed.wait(m).unwrap();
            }
            m.1 -= 1;
        }
        if op != IoOpKind::Read && m.0 == Mode::Cut {
            return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

/// The disks (`support::SimDisks`), opened behind the log-flush hook.
struct Disks(SimDisks);

impl Disks {
    fn new() -> Self {
        Self(SimDisks::new())
    }
    /// Opens with the log's devices behind `hook` (the data's too, so a cut power fails all).
    fn open(&self, hook: &Arc<LogFlush>) -> Database {
        self.open_hooked(hook, true)
    }
    /// Opens with only the log's devices behind `hook`.
    fn open_log_hooked(&self, hook: &Arc<LogFlush>) -> Database {
        self.open_hooked(hook, false)
    }
    fn open_hooked(&self, hook: &Arc<LogFlush>, data_too: bool) -> Database {
        let hook: Arc<dyn IoHook> = hook.clone();
        self.0.open(data_too.then(|| hook.clone()), Some(hook), elr_options()).unwrap()
    }
    /// Opens what the devices hold (after [`Disks::crash`]: recovery runs).
    fn reopen(&self) -> Database {
        self.0.open(None, None, elr_options()).unwrap()
    }
    /// The power goes: every write not synced is lost.
    fn crash(&self) {
        self.0.crash_dropping_unsynced();
    }
}

fn value(t: &Table, id: i64) -> Option<i64> {
    t.read(&Value::Int(id), |r| r.int(1)).unwrap()
}

/// What each client reports: its name and what it was acknowledged (`Ok` with the value it
/// read, if any) or the error it got.
type Report = (&'static str, nvmedb::Result<Option<i64>>);

/// The writer the clients depend on: one transaction setting rows 1 and 2 to 1; reports its
/// commit as "writer".
fn commit_rows_1_and_2(db: &Database, t: &Table, report: &mpsc::Sender<Report>) {
    let mut tx = db.begin();
    tx.update(t, &[Value::Int(1), Value::Int(1)]).unwrap();
    tx.update(t, &[Value::Int(2), Value::Int(1)]).unwrap();
    report.send(("writer", tx.commit().map(|()| None))).unwrap();
}

/// Sets up rows 1..=3 with value 0, holds the log's flush, commits a transaction setting rows
/// 1 and 2 to 1, and runs the four clients that depend on it; checks the reader saw the new
/// row while the commit was not durable and that no client is acknowledged while the flush is
/// held; then `end` ends the hold (`Pass` or `Cut`) and the reports are returned.
fn run_held(disks: &Disks, hook: &Arc<LogFlush>, end: Mode) -> Vec<Report> {
    let db = disks.open(hook);
    let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)])).unwrap();
    for id in 1..=3 {
        t.insert(&[Value::Int(id), Value::Int(0)]).unwrap();
    }
    hook.set(Mode::Hold);
    let (tx_report, reports) = mpsc::channel::<Report>();
    let reports = std::thread::scope(|s| {
        let (report, db1, t1) = (tx_report.clone(), db.clone(), t.clone());
        s.spawn(move || commit_rows_1_and_2(&db1, &t1, &report));
        hook.wait_held();
        // A serializable transaction's shared lock is granted once the writer's commit record
        // is logged, although its flush is held: it sees the new row.
        let mut reader = db.begin();
        let seen = reader.get(&t, &Value::Int(1)).unwrap().map(|r| r[1].clone());
        assert_eq!(
            seen,
            Some(Value::Int(1)),
            "the lock was released early and the reader sees the committed row"
        );
        let report = tx_report.clone();
        s.spawn(move || report.send(("read-only transaction", reader.commit().map(|()| None))).unwrap());
        let (report, t2) = (tx_report.clone(), t.clone());
        s.spawn(move || report.send(("auto-commit read", t2.read(&Value::Int(1), |r| r.int(1)))).unwrap());
        let (report, db3, t3) = (tx_report.clone(), db.clone(), t.clone());
        s.spawn(move || {
            let mut tx = db3.begin();
            let r = tx.update(&t3, &[Value::Int(2), Value::Int(2)]).and_then(|_| tx.commit()).map(|()| None);
            report.send(("overwriting writer", r)).unwrap();
        });
        drop(tx_report);
        // Held flush: nobody is acknowledged, however long it is held.
        match reports.recv_timeout(Duration::from_millis(300)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            got => panic!("acknowledged while the commit it depends on is not durable: {got:?}"),
        }
        hook.set(end);
        reports.iter().collect::<Vec<_>>()
    });
    assert_eq!(reports.len(), 4);
    drop((t, db));
    reports
}

/// `Options::default()`, with early lock release on as it is by default (said here so that
/// these tests keep testing it if the default changes).
fn elr_options() -> Options {
    let mut o = Options::default();
    o.lock_options.early_release = true;
    o
}

#[test]
fn reads_of_an_early_released_commit_wait_for_its_flush() {
    let (disks, hook) = (Disks::new(), LogFlush::new());
    for (who, r) in run_held(&disks, &hook, Mode::Pass) {
        let got = r.unwrap_or_else(|e| panic!("{who}: {e}"));
        if who == "auto-commit read" {
            assert_eq!(got, Some(1), "{who}");
        }
    }
    disks.crash();
    let db = disks.reopen();
    let t = db.table("t").unwrap();
    assert_eq!([value(&t, 1), value(&t, 2), value(&t, 3)], [Some(1), Some(2), Some(0)]);
    assert_eq!(t.check_integrity().unwrap(), 3);
}

#[test]
fn a_crash_before_the_flush_acknowledges_nothing_that_saw_the_commit() {
    let (disks, hook) = (Disks::new(), LogFlush::new());
    for (who, r) in run_held(&disks, &hook, Mode::Cut) {
        assert!(r.is_err(), "{who} was acknowledged although the commit it saw was lost: {r:?}");
    }
    disks.crash();
    let db = disks.reopen();
    let t = db.table("t").unwrap();
    assert_eq!(
        [value(&t, 1), value(&t, 2), value(&t, 3)],
        [Some(0), Some(0), Some(0)],
        "no change is visible"
    );
    assert_eq!(t.check_integrity().unwrap(), 3);
}

/// A checkpoint taken while a transaction's commit record is appended but not durable (its
/// flush failed here; with early lock release its locks are already gone). The transaction has
/// left the active set, so the checkpoint's undo start can lie past its operations: the
/// checkpoint must not name that start (nor its redo start) in the catalog before the commit
/// record is durable, or after a crash the catalog points past the durable log: the database
/// does not open (without the wait it fails so), or the change, never committed, stays on disk
/// with nothing left in the log to undo it.
#[test]
fn a_checkpoint_does_not_skip_a_commit_that_is_not_durable() {
    let disks = Disks::new();
    let hook = LogFlush::new();
    let db = disks.open_log_hooked(&hook);
    let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)])).unwrap();
    for id in 1..=3 {
        t.insert(&[Value::Int(id), Value::Int(0)]).unwrap();
    }
    let mut tx = db.begin();
    tx.update(&t, &[Value::Int(1), Value::Int(10)]).unwrap();
    // Another commit makes the log durable past the transaction's change.
    t.insert(&[Value::Int(4), Value::Int(0)]).unwrap();
    hook.set(Mode::Cut);
    assert!(tx.commit().is_err(), "the commit's flush failed");
    // The data devices still work: a checkpoint could write the pages and the catalog.
    let _ = db.checkpoint();
    drop((t, db));
    disks.crash();
    let db = disks.reopen();
    let t = db.table("t").unwrap();
    assert_eq!(
        [value(&t, 1), value(&t, 2), value(&t, 3), value(&t, 4)],
        [Some(0), Some(0), Some(0), Some(0)],
        "the change whose commit was lost is undone ({:?})",
        db.recovery_report()
    );
    assert_eq!(t.check_integrity().unwrap(), 4);
}

/// A point read waits only for the early-released commits of writers of its key's stripe:
/// while a transaction's commit of rows 1 and 2 waits for its held flush, auto-commit reads
/// and `read_many` of other rows are acknowledged at once (they cannot have seen the
/// change), and a read of row 1 still waits for the flush.
#[test]
fn reads_of_other_keys_do_not_wait_for_an_early_released_commit() {
    let (disks, hook) = (Disks::new(), LogFlush::new());
    let db = disks.open(&hook);
    let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)])).unwrap();
    let stripe = |id: i64| nvmedb::txn::PendingWriters::stripe(t.id(), &nvmedb::btree::key::encode_i64(id));
    // Rows whose stripes are not those of rows 1 and 2.
    let others: Vec<i64> =
        (3..100).filter(|&id| stripe(id) != stripe(1) && stripe(id) != stripe(2)).take(8).collect();
    for id in [1, 2].iter().chain(&others) {
        t.insert(&[Value::Int(*id), Value::Int(0)]).unwrap();
    }
    hook.set(Mode::Hold);
    let (tx_report, reports) = mpsc::channel::<Report>();
    std::thread::scope(|s| {
        let (report, db1, t1) = (tx_report.clone(), db.clone(), t.clone());
        s.spawn(move || commit_rows_1_and_2(&db1, &t1, &report));
        hook.wait_held();
        let (report, t2, others2) = (tx_report.clone(), t.clone(), others.clone());
        s.spawn(move || {
            let mut r = Ok(Some(0));
            for id in &others2 {
                r = r.and_then(|_| t2.read(&Value::Int(*id), |r| r.int(1)));
            }
            let keys: Vec<Value> = others2.iter().map(|&id| Value::Int(id)).collect();
            let mut seen = 0;
            r = r.and_then(|v| t2.read_many(&keys, |_, row| seen += row.map_or(0, |_| 1)).map(|()| v));
            assert_eq!(seen, others2.len(), "read_many found every row");
            report.send(("reads of other rows", r)).unwrap();
        });
        let (report, t3) = (tx_report.clone(), t.clone());
        s.spawn(move || report.send(("read of row 1", t3.read(&Value::Int(1), |r| r.int(1)))).unwrap());
        drop(tx_report);
        // The reads of other rows come back while the flush is held; nothing else does. (The
        // hold ends before any check, so a failure does not leave the threads blocked.)
        let first = reports.recv_timeout(Duration::from_secs(30));
        let next = reports.recv_timeout(Duration::from_millis(300));
        hook.set(Mode::Pass);
        let first = first.expect("the reads of other rows return while the flush is held");
        assert_eq!(first.0, "reads of other rows", "{first:?}");
        assert_eq!(first.1.as_ref().ok(), Some(&Some(0)), "{first:?}");
        match next {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            got => panic!("acknowledged while the commit it depends on is not durable: {got:?}"),
        }
        let rest: Vec<Report> = reports.iter().collect();
        assert_eq!(rest.len(), 2, "{rest:?}");
        for (who, r) in rest {
            let got = r.unwrap_or_else(|e| panic!("{who}: {e}"));
            if who == "read of row 1" {
                assert_eq!(got, Some(1), "{who}");
            }
        }
    });
}
