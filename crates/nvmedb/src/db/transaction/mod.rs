//! Explicit transactions.
//!
//! Owns: [`Transaction`]: strict two-phase locking through the database's lock manager
//! (shared locks on keys read, exclusive on keys written, all released after commit or
//! abort), an in-memory undo list, and commit/abort. With a log, commit appends a commit
//! record and waits until it is durable (group commit shares the flush); with early lock
//! release (the default) its locks go between the two (see `txn::shared`); abort undoes the
//! changes newest first through the tables (the undo is logged like any change) and logs an
//! abort record. A transaction dropped without commit is aborted.
//!
//! Isolation: [`Isolation::Serializable`] (the default, [`Database::begin`]) is the strict
//! 2PL above. [`Isolation::ReadCommitted`] ([`Database::begin_with`]) locks only what it
//! writes (and what it reads `for_update` or scans in exclusive mode); its plain reads and
//! shared scans, like auto-commit reads, take no lock and never wait: they see each row as
//! last committed (a row another transaction is changing, as it was before that change), and
//! the transaction's own changes; a row read twice may differ.
//!
//! A transaction's first change of a key, under the key's exclusive lock and before any page
//! changes, publishes the key's committed row (its before-image) in the pending writers
//! ([`crate::txn::PendingWriters`]); the transaction withdraws them all once its commit is
//! logged (durable, without early lock release) or its rollback complete, before its locks go.
//!
//! Guarantees: serializable transactions are serializable in commit order; a deadlock or lock
//! timeout is a typed error (`Error::is_retryable`) after which the caller aborts and retries.
//! Their range scans ([`Transaction::range`], [`Transaction::index_range`],
//! [`Transaction::index_keys`]) lock every row they visit and hold a key-range lock on the
//! keys they read (`txn::lock_range`): the whole range for a scan that runs to its end (an
//! empty range, and past the last key, included), up to the last row taken for one stopped
//! early. Every insert, and every update that gives a row a new secondary-index entry, of any
//! transaction, checks the range locks after its page change and waits for (or deadlocks
//! with) a transaction whose range holds its new entry; a serializable scan waits for the
//! writers of entries in flight in its range. So no phantom: a row inserted into a scanned
//! range commits after the scanner. A point read of an absent key locks the key (the lock
//! manager locks key values, not rows), so an insert of that key waits too. A row whose
//! delete is in flight is visited and waited for.

use super::Database;
use crate::error::Result;
use crate::table::LockedRow;
use crate::table::{RowView, Table, Value};
use crate::txn::{LockMode, MixHasher, TxnShared};
use crate::wal::engine::TxnOp;
use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

mod scan;

/// Keys a range scan collects from an index before it locks and reads their rows.
const SCAN_BATCH: usize = 32;

/// Rows a transaction keeps from its reads for update for the changes that follow them (see
/// `Transaction::locked_rows`): a Delivery's order lines, read by one scan, then changed.
const LOCKED_ROWS: usize = 16;

/// Changes a transaction's undo list and keys entered have room for at its first change (an
/// OLTP transaction's few dozen, without growing by doubling from one).
const FIRST_CHANGES: usize = 32;

/// A key a transaction entered in the pending writers: its table id and encoded primary key,
/// hashed once (`txn::key_hash`).
#[derive(PartialEq, Eq)]
struct Entered {
    table: u32,
    pk: Vec<u8>,
    hash: u64,
}

impl Entered {
    fn new(table: u32, pk: Vec<u8>) -> Self {
        Self { hash: crate::txn::key_hash(table, &pk), table, pk }
    }
}

impl Hash for Entered {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The buffers a transaction grows (its undo list, the keys it entered, the rows it kept, the
/// keys it leaves), handed by a finished transaction to the next one its thread begins: a
/// thread that runs transaction after transaction allocates them once, not once each.
#[derive(Default)]
struct Buffers {
    undo: Vec<(Table, TxnOp)>,
    entered: HashSet<Entered, BuildHasherDefault<MixHasher>>,
    locked_rows: Vec<(u32, Vec<u8>, LockedRow)>,
    leaving: Vec<(u32, Vec<u8>)>,
}

/// Changes beyond which a finished transaction's buffers are freed rather than handed on (a
/// bulk change's would keep their memory for good).
const KEEP_CHANGES: usize = 1024;

thread_local! {
    /// The buffers of this thread's last finished transaction, emptied, for its next one.
    static SPARE_BUFFERS: RefCell<Option<Buffers>> = const { RefCell::new(None) };
}

/// How a transaction's plain reads are isolated; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Strict two-phase locking: a shared lock on every key read, kept until the end.
    #[default]
    Serializable,
    /// Reads see only committed rows and take no lock while no writer of the key is in
    /// flight; writes lock as under `Serializable`.
    ReadCommitted,
}

/// A transaction; see the module documentation.
pub struct Transaction {
    shared: Arc<TxnShared>,
    id: u64,
    isolation: Isolation,
    undo: Vec<(Table, TxnOp)>,
    /// Keys (table id, encoded primary key) this transaction has entered in the pending
    /// writers, each once, with their before-images.
    entered: HashSet<Entered, BuildHasherDefault<MixHasher>>,
    /// The rows its latest reads for update found (table id, encoded primary key, the row;
    /// at most [`LOCKED_ROWS`], one per key, oldest first), read under the key's exclusive
    /// lock: the next change of the key takes its row instead of looking for it again (and,
    /// as the key's first change, publishes it as the before-image). Every change of a key
    /// takes the key's row out first, so a row kept is the key's row as it is now.
    locked_rows: Vec<(u32, Vec<u8>, LockedRow)>,
    /// The keys entered, taken out at the end to leave them (see [`Buffers`]).
    leaving: Vec<(u32, Vec<u8>)>,
    done: bool,
    /// Its commit record is logged and its locks are (being) released: it can no longer roll
    /// back.
    released: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Transaction({}, {} changes)", self.id, self.undo.len())
    }
}

impl Database {
    /// Starts a serializable transaction (strict two-phase locking).
    pub fn begin(&self) -> Transaction {
        self.begin_with(Isolation::Serializable)
    }

    /// Starts a transaction with the given isolation of its reads.
    pub fn begin_with(&self, isolation: Isolation) -> Transaction {
        // A log short of space (the fast log's conventional ring) asks for a checkpoint; take
        // it here, before this transaction holds anything.
        self.txn_shared().checkpoint_if_wanted();
        let shared = self.txn_shared().clone();
        let id = shared.begin();
        let b = SPARE_BUFFERS.try_with(|s| s.borrow_mut().take()).ok().flatten().unwrap_or_default();
        Transaction {
            shared,
            id,
            isolation,
            undo: b.undo,
            entered: b.entered,
            locked_rows: b.locked_rows,
            leaving: b.leaving,
            done: false,
            released: false,
        }
    }

    /// Transaction counters since open: commits, aborts, commit latency (the operational
    /// metrics, `nvmedb::metrics`).
    pub fn txn_stats(&self) -> crate::txn::TxnStats {
        self.txn_shared().counters.snapshot()
    }
}

impl Transaction {
    /// The transaction's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The transaction's isolation.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    fn lock(&self, table: &Table, key: &Value, mode: LockMode) -> Result<Vec<u8>> {
        let k = table.lock_key(key)?;
        self.shared.locks.lock(self.id, table.id(), &k, mode)?;
        Ok(k)
    }

    /// Keeps `op`, a change of `table`, for a rollback.
    fn push_undo(&mut self, table: &Table, op: TxnOp) {
        if self.undo.capacity() == 0 {
            self.undo.reserve(FIRST_CHANGES);
        }
        self.undo.push((table.clone(), op));
    }

    /// Enters key `id` (table id, encoded primary key) as changed by this transaction.
    fn enter_key(&mut self, id: Entered) {
        if self.entered.capacity() == 0 {
            self.entered.reserve(FIRST_CHANGES);
        }
        self.entered.insert(id);
    }

    /// Locks `key` exclusively for a change and, on the transaction's first change of it,
    /// publishes its committed row for lock-free readers (before the change touches a page).
    /// Returns true when it found the key without a row just now (its first change: nobody
    /// else can give it one while the lock is held), and the row the transaction's last read
    /// for update found when that read was of this key (the lock is held since, the key not
    /// yet entered: its row is the before-image, and the change need not look for it again).
    fn lock_for_change(&mut self, table: &Table, key: &Value) -> Result<(bool, Option<LockedRow>)> {
        let k = table.lock_key(key)?;
        let known = self.take_locked_row(table.id(), &k);
        if known.is_none() {
            self.shared.locks.lock(self.id, table.id(), &k, LockMode::Exclusive)?;
        }
        let id = Entered::new(table.id(), k);
        if self.entered.contains(&id) {
            return Ok((false, known));
        }
        let before = match &known {
            Some(l) => Some(l.row.clone()),
            None => table.before_image(&id.pk)?,
        };
        let absent = before.is_none();
        self.shared.pending.enter(id.table, &id.pk, self.id, before);
        self.enter_key(id);
        Ok((absent, known))
    }

    /// Keeps `row`, read just now under the exclusive lock of key `pk` of table `table`, for
    /// the key's next change (see `locked_rows`).
    fn keep_locked_row(&mut self, table: u32, pk: Vec<u8>, row: LockedRow) {
        if let Some(at) = self.locked_rows.iter().position(|(t, k, _)| *t == table && *k == pk) {
            self.locked_rows.remove(at);
        } else if self.locked_rows.len() == LOCKED_ROWS {
            self.locked_rows.remove(0);
        }
        self.locked_rows.push((table, pk, row));
    }

    /// Takes the row kept for key `pk` of table `table`, if any.
    fn take_locked_row(&mut self, table: u32, pk: &[u8]) -> Option<LockedRow> {
        let at = self.locked_rows.iter().position(|(t, k, _)| *t == table && k == pk)?;
        Some(self.locked_rows.remove(at).2)
    }

    /// A plain read of encoded key `k`: under a shared lock (serializable), or committed
    /// without a lock while no writer is in flight (read committed).
    fn plain_read<R>(&self, table: &Table, k: &[u8], f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        match self.isolation {
            Isolation::Serializable => {
                self.shared.locks.lock(self.id, table.id(), k, LockMode::Shared)?;
                table.txn_read(k, f)
            }
            Isolation::ReadCommitted => table.txn_read_committed(self.id, k, f),
        }
    }

    /// Reads the row with primary key `key`: under a shared lock kept until the transaction
    /// ends ([`Isolation::Serializable`]), or as committed ([`Isolation::ReadCommitted`]).
    pub fn read<R>(
        &mut self,
        table: &Table,
        key: &Value,
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.shared.check_open()?;
        let k = table.lock_key(key)?;
        self.plain_read(table, &k, f)
    }

    /// [`Transaction::read`] by encoded primary key (as [`Table::primary_keys`] and
    /// [`Table::index_keys`] give them).
    pub fn read_encoded<R>(
        &mut self,
        table: &Table,
        key: &[u8],
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.shared.check_open()?;
        self.plain_read(table, key, f)
    }

    /// Like [`Transaction::read_encoded`] but takes the key's exclusive lock, for a row about
    /// to be changed.
    pub fn read_encoded_for_update<R>(
        &mut self,
        table: &Table,
        key: &[u8],
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.shared.locks.lock(self.id, table.id(), key, LockMode::Exclusive)?;
        table.txn_read(key, f)
    }

    /// Reads the row for update under the exclusive lock, passing a zero-copy view to `f`.
    pub fn read_for_update<R>(
        &mut self,
        table: &Table,
        key: &Value,
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        let k = self.lock(table, key, LockMode::Exclusive)?;
        table.txn_read(&k, f)
    }

    /// Reads and decodes the row with primary key `key` (as [`Transaction::read`]).
    pub fn get(&mut self, table: &Table, key: &Value) -> Result<Option<Vec<Value>>> {
        self.read(table, key, |r| r.try_values())?.transpose()
    }

    /// Reads the row for update (exclusive lock at once, avoiding S→X upgrade deadlocks).
    pub fn get_for_update(&mut self, table: &Table, key: &Value) -> Result<Option<Vec<Value>>> {
        let mut row = Vec::new();
        Ok(self.get_for_update_into(table, key, &mut row)?.then_some(row))
    }

    /// [`Transaction::get_for_update`] into `row`, reusing the buffers it holds (see
    /// [`RowView::values_into`]): a caller that reads many rows into one vector allocates
    /// nothing per row. Returns false, `row` unchanged, when there is no such row.
    pub fn get_for_update_into(&mut self, table: &Table, key: &Value, row: &mut Vec<Value>) -> Result<bool> {
        self.shared.check_open()?;
        let k = self.lock(table, key, LockMode::Exclusive)?;
        // The key's change is likely next: keep where the row is and its bytes for it.
        let Some((decoded, locked)) = table.txn_read_locked(&k, |r| r.values_into(row))? else {
            return Ok(false);
        };
        decoded?;
        self.keep_locked_row(table.id(), k, locked);
        Ok(true)
    }

    /// Inserts a row.
    pub fn insert(&mut self, table: &Table, row: &[Value]) -> Result<()> {
        let shared = self.shared.clone();
        let _open = shared.enter_change("an insert")?;
        let pk = table.pk_of(row)?;
        let (absent, _) = self.lock_for_change(table, pk)?;
        // Wait for the ranges read that hold the new entries before making them, and check
        // again after (a scan that read their leaves meanwhile).
        let mut entries = None;
        self.check_new_entries(table, row, true, None, &mut entries)?;
        if let Some(mut op) = table.txn_insert(self.id, row, absent)? {
            // Undoing an insert finds the row through its key: keep only the key in memory
            // (the log record keeps the whole row for recovery), so a large load stays small.
            op.after = None;
            self.push_undo(table, op);
            self.check_new_entries(table, row, true, None, &mut entries)?;
        }
        Ok(())
    }

    /// True when an update of `table` must check range locks: one lives on the table and the
    /// table has secondary indexes (an update never moves its row's primary key).
    fn update_checks_ranges(&self, table: &Table) -> bool {
        self.shared.locks.ranges_live(table.id()) && !table.schema().indexes.is_empty()
    }

    /// The insert-intention checks of a change (see `txn::lock_range`), made before its page
    /// change and again after it: waits for the transactions whose range locks hold an index
    /// entry the change makes (`entries`, computed on first use from `row` and `before`, the
    /// row's bytes before an update). One relaxed load while no range lock lives on the table.
    fn check_new_entries(
        &self,
        table: &Table,
        row: &[Value],
        insert: bool,
        before: Option<&[u8]>,
        entries: &mut Option<Vec<(u32, Vec<u8>)>>,
    ) -> Result<()> {
        let locks = &self.shared.locks;
        if !locks.ranges_live(table.id()) {
            return Ok(());
        }
        let entries = match entries {
            Some(e) => e,
            None => {
                let pk = table.lock_key(table.pk_of(row)?)?;
                entries.insert(table.new_entries(row, &pk, insert, before)?)
            }
        };
        for (index, key) in entries.iter() {
            locks.check_insert(self.id, table.id(), *index, key)?;
        }
        Ok(())
    }

    /// Replaces the row with the same primary key; false if there is none.
    pub fn update(&mut self, table: &Table, row: &[Value]) -> Result<bool> {
        let shared = self.shared.clone();
        let _open = shared.enter_change("an update")?;
        let pk = table.pk_of(row)?;
        let (_, known) = self.lock_for_change(table, pk)?;
        let mut entries = None;
        if self.update_checks_ranges(table) {
            // As an insert: wait before the change for the ranges read that hold its new entries.
            let read;
            let now = match &known {
                Some(k) => Some(&k.row[..]),
                None => {
                    read = table.txn_read(&table.lock_key(pk)?, |v| v.raw().to_vec())?;
                    read.as_deref()
                }
            };
            if let Some(now) = now {
                self.check_new_entries(table, row, false, Some(now), &mut entries)?;
            }
        }
        let (changed, op) = table.txn_update(self.id, row, known.as_ref())?;
        if let Some(op) = op {
            // Asked again: a scan may have taken a range lock on the table meanwhile.
            let ranges = self.update_checks_ranges(table);
            let before = match (ranges && entries.is_none(), &op.before) {
                (false, _) => None,
                (true, Some(b)) => Some(b.clone()),
                // A row patch: its row before the change, from the row now.
                (true, None) => {
                    let now = table.txn_read(&op.pk, |v| v.raw().to_vec())?;
                    op.resolve(now.as_deref()).and_then(|o| o.before.clone())
                }
            };
            self.push_undo(table, op);
            if ranges {
                self.check_new_entries(table, row, false, before.as_deref(), &mut entries)?;
            }
        }
        Ok(changed)
    }

    /// Sets one integer column of the row with primary key `key`; false if there is none.
    pub fn update_int(&mut self, table: &Table, key: &Value, column: usize, value: i64) -> Result<bool> {
        let Some(mut row) = self.get_for_update(table, key)? else { return Ok(false) };
        if column >= row.len() {
            return Err(crate::error::Error::InvalidArgument(format!(
                "table `{}` has no column {column}",
                table.name()
            )));
        }
        row[column] = Value::Int(value);
        self.update(table, &row)
    }

    /// Deletes the row with primary key `key`; false if there is none.
    pub fn delete(&mut self, table: &Table, key: &Value) -> Result<bool> {
        let shared = self.shared.clone();
        let _open = shared.enter_change("a delete")?;
        let (_, known) = self.lock_for_change(table, key)?;
        let (changed, op) = table.txn_delete(self.id, key, known.as_ref())?;
        if let Some(op) = op {
            self.push_undo(table, op);
        }
        Ok(changed)
    }

    /// Commits: durable when this returns (with a log). The locks go once the commit record
    /// is in the log, before its flush, with early lock release (the default,
    /// [`LockOptions::early_release`](crate::txn::LockOptions::early_release)), else after
    /// it. A transaction that changed nothing returns once everything it can have seen is
    /// durable.
    pub fn commit(mut self) -> Result<()> {
        // Closed: nothing can be made durable any more; the drop rolls the changes back.
        let shared = self.shared.clone();
        let _open = shared.enter()?;
        self.done = true;
        let started = std::time::Instant::now();
        let wrote = shared.log.is_some() && !self.undo.is_empty();
        let r = self.commit_inner(&shared);
        shared.counters.ended(r.is_ok(), wrote.then_some(started));
        r
    }

    fn commit_inner(&mut self, shared: &Arc<TxnShared>) -> Result<()> {
        match &shared.log {
            Some(log) if !self.undo.is_empty() => match shared.log_commit(log, self.id) {
                Ok(lsn) => {
                    // From here on the transaction cannot roll back: its commit record is in
                    // the log and, once its locks go, others may read and overwrite its rows.
                    self.undo.clear();
                    self.released = true;
                    self.finish(lsn);
                    shared.wait_commit(lsn)
                }
                Err(e) => {
                    self.finish(0);
                    Err(e)
                }
            },
            Some(log) => {
                log.forget(self.id);
                self.finish(0);
                shared.wait_released()
            }
            None => {
                self.finish(0);
                Ok(())
            }
        }
    }

    /// Undoes the changes (newest first), logs the abort, releases the locks. Once the
    /// database is closed this fails with `Closed` and changes nothing (recovery undoes the
    /// transaction at the next open).
    pub fn abort(mut self) -> Result<()> {
        self.shared.check_open()?;
        self.done = true;
        let r = self.roll_back();
        self.finish(0);
        self.shared.counters.ended(false, None);
        r
    }

    fn roll_back(&mut self) -> Result<()> {
        assert!(
            !self.released,
            "transaction {} rolled back after its locks were released at commit",
            self.id
        );
        let mut first_err = None;
        for (table, op) in self.undo.drain(..).rev() {
            if let Err(e) = table.restore(&op) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(log) = &self.shared.log {
            if let Err(e) = log.abort(self.id) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Leaves every key entered and releases the locks; `commit_lsn`: the commit's LSN when
    /// it is not yet durable (0: rolled back, or nothing to wait for), for the readers of the
    /// keys (see [`PendingWriters::leave`](crate::txn::PendingWriters::leave)).
    fn finish(&mut self, commit_lsn: u64) {
        // Committed or rolled back: lock-free readers see these keys' pages again.
        if !self.entered.is_empty() {
            self.leaving.extend(self.entered.drain().map(|e| (e.table, e.pk)));
            self.shared.pending.leave_all(&mut self.leaving, commit_lsn);
            self.leaving.clear();
        }
        self.shared.locks.release_all(self.id);
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            // A closed database changes nothing any more: recovery undoes this transaction.
            if self.shared.check_open().is_ok() {
                let _ = self.roll_back();
            }
            self.finish(0);
            self.shared.counters.ended(false, None);
        }
        // Finished: its emptied buffers go to the thread's next transaction.
        self.undo.clear();
        self.entered.clear();
        self.locked_rows.clear();
        self.leaving.clear();
        if self.undo.capacity().max(self.entered.capacity()).max(self.leaving.capacity()) <= KEEP_CHANGES {
            let b = Buffers {
                undo: std::mem::take(&mut self.undo),
                entered: std::mem::take(&mut self.entered),
                locked_rows: std::mem::take(&mut self.locked_rows),
                leaving: std::mem::take(&mut self.leaving),
            };
            let _ = SPARE_BUFFERS.try_with(|s| *s.borrow_mut() = Some(b));
        }
    }
}
