//! Transaction machinery shared by every table and transaction of an open database.
//!
//! Owns: [`TxnShared`] (the log handle, the lock manager, transaction ids, the writers in
//! flight with their keys' before-images, the open/closed gate and the read-only flag) and
//! the auto-commit protocol ([`TxnShared::auto_commit`]) by which a single change outside a
//! transaction runs as its own transaction.
//!
//! Invariants: a change runs only while the gate is held shared (closing takes it
//! exclusively, so no change is half-way when the database reports itself closed); every
//! writer holds its key's exclusive lock and is entered in [`PendingWriters`] from before its
//! first page change until it is committed or rolled back, and only then releases its locks;
//! a read-only database refuses every change.
//!
//! Early lock release ([`LockOptions::early_release`], on by default; Johnson et al.,
//! "Aether"): "committed" above means the commit record is in the log, not yet that it is
//! durable. The writer raises the *released* watermark to its commit LSN, then withdraws its
//! before-images and releases its locks, then waits for the flush before its commit returns.
//! Durability stays exact because nothing that saw its changes is acknowledged earlier:
//! - a writer that read or overwrote them logs its own commit record after that LSN (it got
//!   the lock or saw the page only after the release), and its own flush covers both;
//! - a read-only transaction's commit and every auto-commit scan ([`TxnShared::wait_released`])
//!   wait until the log is durable up to the watermark they find at their end (it was raised
//!   before anything they saw became visible); this costs two atomic loads when no
//!   early-released commit is waiting for its flush;
//! - an auto-commit point read ([`TxnShared::wait_released_in`]) waits the same way for the
//!   watermark of its key's stripe of [`PendingWriters`] only, which every writer of the
//!   stripe raises to its commit LSN before it leaves the stripe (before its change becomes
//!   visible to lock-free readers): a point read can have seen no other writer's change, so
//!   it does not wait for the flushes of commits of unrelated keys.
//!
//! A transaction whose locks went early can no longer roll back (its commit record is in the
//! log, and others may have built on it): `Transaction` asserts it. With synchronous
//! replication the log's durable position includes the standbys', so every wait above also
//! waits for them, as the commit itself does.

use super::{LockManager, LockMode, LockOptions, PendingWriters};
use crate::buffer::mtr::take_annotation;
use crate::error::{Error, Result};
use crate::util::sync::RwLockExt;
use crate::wal::engine::{TxnLog, TxnOp};
use crate::wal::Lsn;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// Transaction machinery shared by every table of a database.
pub(crate) struct TxnShared {
    /// The log; `None` for a database without durability.
    pub(crate) log: Option<Arc<TxnLog>>,
    /// Key locks for strict two-phase locking.
    pub(crate) locks: LockManager,
    next_id: AtomicU64,
    /// Keys with a writer in flight and their last committed images, for reads that take no
    /// lock.
    pub(crate) pending: PendingWriters,
    /// Takes a checkpoint if none is running; installed by the database, called when the log
    /// asks for one ([`RecordLog::wants_checkpoint`](crate::wal::RecordLog::wants_checkpoint)).
    pub(crate) checkpointer: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The database's storage, locked for this opener: it stays locked while any handle
    /// (database, table, transaction) lives, so no second opener can write the files a
    /// leftover handle still holds.
    storage: Arc<dyn crate::io::Storage>,
    /// Set when the last `Database` handle goes; every later change fails with `Closed`.
    closed: AtomicBool,
    /// Changes hold it shared; closing takes it exclusively, so no change is half-way when the
    /// database reports itself closed.
    gate: RwLock<()>,
    /// The database was opened read-only: every change is refused.
    pub(crate) read_only: bool,
    /// Bytes the tables' row-id hints may still allocate ([`Options::row_hint_bytes`]): each
    /// table's map takes from it as it grows and gives back when its handle goes.
    ///
    /// [`Options::row_hint_bytes`]: crate::Options::row_hint_bytes
    pub(crate) row_hint_budget: Arc<std::sync::atomic::AtomicUsize>,
    /// Early lock release is on ([`LockOptions::early_release`], and there is a log).
    early_release: bool,
    /// The highest commit LSN whose locks were released before it was durable.
    released: AtomicU64,
    /// A log position known durable (raised after each wait for the log): the watermark check
    /// reads it instead of asking the log.
    durable_seen: AtomicU64,
    /// Commits, aborts and commit latency (the operational metrics).
    pub(crate) counters: super::TxnCounters,
}

/// Held while a change runs (see [`TxnShared::enter`]).
pub(crate) type ChangeGuard<'a> = std::sync::RwLockReadGuard<'a, ()>;

impl TxnShared {
    pub(crate) fn new(
        log: Option<Arc<TxnLog>>,
        lock_options: LockOptions,
        storage: Arc<dyn crate::io::Storage>,
        read_only: bool,
        row_hint_bytes: usize,
    ) -> Result<Self> {
        let early_release = lock_options.early_release && log.is_some();
        Ok(Self {
            log,
            early_release,
            released: AtomicU64::new(0),
            durable_seen: AtomicU64::new(0),
            locks: LockManager::new(lock_options)?,
            next_id: AtomicU64::new(1),
            pending: PendingWriters::new(),
            checkpointer: OnceLock::new(),
            storage,
            closed: AtomicBool::new(false),
            gate: RwLock::new(()),
            read_only,
            row_hint_budget: Arc::new(std::sync::atomic::AtomicUsize::new(row_hint_bytes)),
            counters: super::TxnCounters::default(),
        })
    }

    /// Fails with [`Error::ReadOnly`] naming `what` when the database was opened read-only.
    pub(crate) fn check_writable(&self, what: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(format!(
                "{what} refused: the database at {} was opened read-only (Options::read_only)",
                self.storage.location()
            )));
        }
        Ok(())
    }

    /// Admits one change ([`TxnShared::enter`]) after checking that the database is writable.
    pub(crate) fn enter_change(&self, what: &str) -> Result<ChangeGuard<'_>> {
        self.check_writable(what)?;
        self.enter()
    }

    fn closed_error(&self) -> Error {
        Error::Closed(format!(
            "the database at {} was closed (its last Database handle was closed or dropped); open it again",
            self.storage.location()
        ))
    }

    /// Fails with `Closed` once the database is closed (reads: a cheap check).
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.closed_error());
        }
        Ok(())
    }

    /// Admits one change: fails with `Closed` once the database is closed, and keeps it from
    /// closing until the returned guard is dropped.
    pub(crate) fn enter(&self) -> Result<ChangeGuard<'_>> {
        let g = self.gate.read_locked();
        self.check_open()?;
        Ok(g)
    }

    /// Keeps every change out until the guard is dropped (the changes in progress finish
    /// first): a table moving between tablespaces must have no page dirtied while its file is
    /// copied. Fails with `Closed` once the database is closed.
    pub(crate) fn quiesce(&self) -> Result<std::sync::RwLockWriteGuard<'_, ()>> {
        let g = self.gate.write_locked();
        self.check_open()?;
        Ok(g)
    }

    /// Marks the database closed once the changes in progress have finished.
    pub(crate) fn close(&self) {
        let _all = self.gate.write_locked();
        self.closed.store(true, Ordering::Release);
    }

    /// Checkpoints when the log asks for it (the fast log's conventional ring is filling with
    /// records the last checkpoint still needs). Called before a transaction holds anything.
    pub(crate) fn checkpoint_if_wanted(&self) {
        if let (Some(log), Some(f)) = (&self.log, self.checkpointer.get()) {
            if log.log().record_log().wants_checkpoint() {
                f();
            }
        }
    }

    /// A new transaction id (registered with the log when there is one).
    pub(crate) fn begin(&self) -> u64 {
        match &self.log {
            Some(l) => l.begin(),
            None => self.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Tells the log that transaction `txn` ends having logged nothing.
    pub(crate) fn forget(&self, txn: u64) {
        if let Some(l) = &self.log {
            l.forget(txn);
        }
    }

    /// Appends transaction `txn`'s commit record and, with early lock release, raises the
    /// released watermark to it: the caller may then make its changes visible (withdraw its
    /// before-images, release its locks) and must call [`TxnShared::wait_commit`] with the
    /// returned LSN before it acknowledges the commit. Without early release the commit is
    /// durable when this returns (and the returned LSN is already waited for).
    pub(crate) fn log_commit(&self, log: &TxnLog, txn: u64) -> Result<Lsn> {
        let lsn = log.append_commit(txn)?;
        if self.early_release {
            self.released.fetch_max(lsn, Ordering::SeqCst);
        } else {
            self.wait_commit(lsn)?;
        }
        Ok(lsn)
    }

    /// Waits until the log is durable up to `lsn` (a commit's, from [`TxnShared::log_commit`]).
    pub(crate) fn wait_commit(&self, lsn: Lsn) -> Result<()> {
        if self.durable_seen.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        if let Some(log) = &self.log {
            log.log().wait_durable(lsn)?;
            self.durable_seen.fetch_max(lsn, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Waits until every commit whose locks were released early so far is durable: called by
    /// a read-only transaction's commit and at the end of every auto-commit read, after the
    /// read saw its data (see the module documentation). Free while no such commit waits for
    /// its flush.
    pub(crate) fn wait_released(&self) -> Result<()> {
        if !self.early_release {
            return Ok(());
        }
        let released = self.released.load(Ordering::SeqCst);
        self.wait_commit(released)
    }

    /// [`TxnShared::wait_released`] for a read that saw only keys of stripe `stripe` of
    /// [`PendingWriters`]: waits only for the commits released early by writers of that
    /// stripe ([`PendingWriters::released`]), not for every commit in flight. Call after the
    /// read saw its data.
    pub(crate) fn wait_released_in(&self, stripe: usize) -> Result<()> {
        self.wait_released_upto(self.pending.released(stripe))
    }

    /// Waits until the log is durable up to `lsn`, the highest [`PendingWriters::released`]
    /// of the stripes a read saw (loaded after it saw its data); free without early release.
    pub(crate) fn wait_released_upto(&self, lsn: Lsn) -> Result<()> {
        if !self.early_release {
            return Ok(());
        }
        self.wait_commit(lsn)
    }

    /// Runs one change of key `pk` (encoded) of table `table` as its own transaction:
    /// 1. the key's exclusive lock, then `lock_more(txn)` (e.g. unique-index values);
    /// 2. the key's committed state read by `before` under that lock, published as its
    ///    before-image ([`PendingWriters::enter`]) before any page changes, so lock-free
    ///    readers see it instead of waiting;
    /// 3. `check(txn, before)`, the insert-intention check of the index entries the change
    ///    makes (see `txn::lock_range`; `before`: the key's committed row): waits for the
    ///    serializable scans whose range locks hold them;
    /// 4. `body(txn, logged)` under the guard `physical()` returns (the table's physical key
    ///    lock); its undo information rides in the first page change it logs;
    /// 5. `check` again, the guard released and the key still in flight (a scan that read the
    ///    leaves between the first check and the change); if that wait fails (a deadlock with
    ///    the scan, or the lock timeout), `undo` reverses the change from its undo record, as
    ///    a transaction's rollback does;
    /// 6. with a log, the commit record (or, when `body` failed after logging or the change
    ///    was undone, an abort record); then the key leaves the pending writers and the locks
    ///    go; then, with early lock release, the wait for the commit's flush.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn auto_commit<R, G>(
        &self,
        table: u32,
        pk: &[u8],
        lock_more: impl FnOnce(u64) -> Result<()>,
        before: impl FnOnce() -> Result<super::pending::BeforeImage>,
        check: impl Fn(u64, Option<&[u8]>) -> Result<()>,
        physical: impl FnOnce() -> G,
        body: impl FnOnce(u64, bool, &mut Option<TxnOp>) -> Result<R>,
        undo: impl FnOnce(&TxnOp) -> Result<()>,
    ) -> Result<R> {
        self.check_writable("a change")?;
        self.checkpoint_if_wanted();
        let _open = self.enter()?;
        let txn = self.begin();
        let before = self
            .locks
            .lock(txn, table, pk, LockMode::Exclusive)
            .and_then(|_| lock_more(txn))
            .and_then(|()| before());
        let before = match before {
            Ok(b) => b,
            Err(e) => {
                self.locks.release_all(txn);
                self.forget(txn);
                self.counters.ended(false, None);
                return Err(e);
            }
        };
        let committed = before.clone();
        self.pending.enter(table, pk, txn, before);
        let mut flush = None;
        let mut logged_at = None;
        let result = match check(txn, committed.as_deref()) {
            Err(e) => {
                self.forget(txn);
                Err(e)
            }
            Ok(()) => {
                let mut rec = None;
                let (r, logged) = {
                    let _k = physical();
                    let r = body(txn, self.log.is_some(), &mut rec);
                    // An annotation still pending means the change logged nothing.
                    (r, take_annotation().is_none())
                };
                let r = match r {
                    Ok(v) => match check(txn, committed.as_deref()) {
                        Ok(()) => Ok(v),
                        Err(e) => Err(match rec.as_ref().map(undo) {
                            Some(Err(u)) => u,
                            _ => e,
                        }),
                    },
                    Err(e) => Err(e),
                };
                self.finish_auto_commit(txn, r, logged, &mut flush, &mut logged_at)
            }
        };
        // Committed (its record logged) or reversed: lock-free readers see the pages again.
        self.pending.leave(table, pk, flush.filter(|_| self.early_release).unwrap_or(0));
        self.locks.release_all(txn);
        let r = match flush {
            Some(lsn) => self.wait_commit(lsn).and(result),
            None => result,
        };
        self.counters.ended(r.is_ok(), logged_at);
        r
    }

    /// The end of an auto-commit change with result `r` (`logged`: it logged page changes):
    /// its commit record (`flush`: the LSN to wait for), or its abort record, or nothing.
    fn finish_auto_commit<R>(
        &self,
        txn: u64,
        r: Result<R>,
        logged: bool,
        flush: &mut Option<Lsn>,
        logged_at: &mut Option<std::time::Instant>,
    ) -> Result<R> {
        match (&self.log, r, logged) {
            (Some(log), Ok(v), true) => {
                *logged_at = Some(std::time::Instant::now());
                self.log_commit(log, txn).map(|lsn| {
                    *flush = Some(lsn);
                    v
                })
            }
            (Some(log), Err(e), true) => {
                let _ = log.abort(txn);
                Err(e)
            }
            (_, r, _) => {
                self.forget(txn);
                r
            }
        }
    }
}
