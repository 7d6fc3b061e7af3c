//! Tables: rows in a heap file, a B+tree primary index, secondary indexes, and the catalog.
//!
//! Owns: `Table` (insert, get, update, delete, scans, range and secondary lookups) and the
//! catalog format. Invariants: every live row has exactly one primary-index entry pointing at
//! it and one entry per secondary index; modifications of one primary key are serialised by a
//! striped key lock, so the row and its index entries change together with respect to other
//! writers. (Isolation against readers and atomicity across crashes arrive with transactions
//! and the WAL.)

pub mod catalog;
pub mod files;
pub mod heap;
mod scan;
pub mod schema;

pub use heap::{HeapFile, RowId};
pub(crate) use scan::KeyRange;

pub use schema::{Column, ColumnType, IndexDef, RowView, Schema, Value};

use crate::btree::BTree;
use crate::buffer::mtr::{annotate_next_commit, take_annotation};
use crate::error::{Error, Result};
use crate::txn::{LockManager, LockMode, LockOptions};
use crate::util::sync::{MutexExt, RwLockExt};
use crate::wal::engine::{TxnLog, TxnOp};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

const KEY_LOCK_STRIPES: usize = 256;
/// Attempts at a compensating step before the table is poisoned.
const UNDO_ATTEMPTS: usize = 16;
/// Attempts at following an index entry that a concurrent writer keeps moving.
/// Keys whose lookups [`Table::read_many`] interleaves.
pub const READ_BATCH: usize = 16;

const READ_RETRIES: usize = 10_000;
/// Added to a table id to name the lock space of its unique-index values.
const UNIQUE_LOCK_SPACE: u32 = 0x8000_0000;

/// A compensating action that reverses one completed step of a multi-structure change.
enum Undo {
    HeapDelete(RowId),
    PrimaryDelete(Vec<u8>),
    PrimaryInsert(Vec<u8>, RowId),
    SecondaryDelete(usize, Vec<u8>),
    SecondaryInsert(usize, Vec<u8>, RowId),
}

/// Shared state of an open table.
pub(crate) struct TableInner {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) schema: Schema,
    pub(crate) heap: HeapFile,
    pub(crate) primary: BTree,
    pub(crate) secondaries: Vec<BTree>,
    key_locks: Box<[Mutex<()>]>,
    /// Set when a failed change could not be reversed; every later call reports it.
    poisoned: Mutex<Option<String>>,
    /// Fast check of `poisoned` for the read path.
    is_poisoned: std::sync::atomic::AtomicBool,
    /// Transactions: the log (when the database is durable), locks, ids.
    txn: Arc<TxnShared>,
}

/// Transaction machinery shared by every table of a database.
pub(crate) struct TxnShared {
    /// The log; `None` for a database without durability.
    pub(crate) log: Option<Arc<TxnLog>>,
    /// Key locks for strict two-phase locking.
    pub(crate) locks: LockManager,
    next_id: std::sync::atomic::AtomicU64,
    /// Explicit transactions in progress (auto-commit reads then take shared locks).
    pub(crate) explicit_active: std::sync::atomic::AtomicUsize,
    /// Takes a checkpoint if none is running; installed by the database, called when the log
    /// asks for one ([`RecordLog::wants_checkpoint`](crate::wal::RecordLog::wants_checkpoint)).
    pub(crate) checkpointer: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The database's storage, locked for this opener: it stays locked while any handle
    /// (database, table, transaction) lives, so no second opener can write the files a
    /// leftover handle still holds.
    storage: Arc<dyn crate::io::Storage>,
    /// Set when the last `Database` handle goes; every later change fails with `Closed`.
    closed: std::sync::atomic::AtomicBool,
    /// Changes hold it shared; closing takes it exclusively, so no change is half-way when the
    /// database reports itself closed.
    gate: std::sync::RwLock<()>,
    /// The database was opened read-only: every change is refused.
    pub(crate) read_only: bool,
}

/// Held while a change runs (see [`TxnShared::enter`]).
pub(crate) type ChangeGuard<'a> = std::sync::RwLockReadGuard<'a, ()>;

impl TxnShared {
    pub(crate) fn new(
        log: Option<Arc<TxnLog>>,
        lock_options: LockOptions,
        storage: Arc<dyn crate::io::Storage>,
        read_only: bool,
    ) -> Result<Self> {
        Ok(Self {
            log,
            locks: LockManager::new(lock_options)?,
            next_id: std::sync::atomic::AtomicU64::new(1),
            explicit_active: std::sync::atomic::AtomicUsize::new(0),
            checkpointer: std::sync::OnceLock::new(),
            storage,
            closed: std::sync::atomic::AtomicBool::new(false),
            gate: std::sync::RwLock::new(()),
            read_only,
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
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
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
        self.closed.store(true, std::sync::atomic::Ordering::Release);
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
            None => self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn forget(&self, txn: u64) {
        if let Some(l) = &self.log {
            l.forget(txn);
        }
    }
}

/// A handle to a table; cheap to clone and safe to share between threads.
#[derive(Clone)]
pub struct Table {
    pub(crate) inner: Arc<TableInner>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({})", self.inner.name)
    }
}

impl Table {
    pub(crate) fn new(
        id: u32,
        name: String,
        schema: Schema,
        heap: HeapFile,
        primary: BTree,
        secondaries: Vec<BTree>,
        txn: Arc<TxnShared>,
    ) -> Self {
        Self {
            inner: Arc::new(TableInner {
                id,
                name,
                schema,
                heap,
                primary,
                secondaries,
                key_locks: (0..KEY_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
                poisoned: Mutex::new(None),
                is_poisoned: std::sync::atomic::AtomicBool::new(false),
                txn,
            }),
        }
    }

    /// Table name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Table id (names its files).
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Schema.
    pub fn schema(&self) -> &Schema {
        &self.inner.schema
    }

    /// Number of heap pages.
    pub fn heap_pages(&self) -> Result<u64> {
        self.inner.heap.pages()
    }

    fn key_lock(&self, pk: &[u8]) -> std::sync::MutexGuard<'_, ()> {
        let h = pk
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        self.inner.key_locks[(h % KEY_LOCK_STRIPES as u64) as usize].locked()
    }

    /// Runs one change as its own transaction: an exclusive lock on the key, the key's
    /// physical lock, the change (its undo information rides in the first page change it
    /// logs), and — with a log — a durable commit before either lock is released.
    fn auto_commit<R>(
        &self,
        pk: &[u8],
        row: Option<&[Value]>,
        body: impl FnOnce(u64, bool, &mut Option<TxnOp>) -> Result<R>,
    ) -> Result<R> {
        let shared = &self.inner.txn;
        shared.check_writable("a change")?;
        shared.checkpoint_if_wanted();
        let _open = shared.enter()?;
        let txn = shared.begin();
        let locked = shared
            .locks
            .lock(txn, self.inner.id, pk, LockMode::Exclusive)
            .and_then(|_| row.map_or(Ok(()), |r| self.lock_unique_values(txn, r)));
        if let Err(e) = locked {
            shared.locks.release_all(txn);
            shared.forget(txn);
            return Err(e);
        }
        let result = {
            let _k = self.key_lock(pk);
            let mut rec = None;
            let r = body(txn, shared.log.is_some(), &mut rec);
            // An annotation still pending means the change logged nothing.
            let logged = take_annotation().is_none();
            match (&shared.log, r, logged) {
                (Some(log), Ok(v), true) => log.commit(txn).map(|()| v),
                (Some(log), Err(e), true) => {
                    // The change was reversed step by step (or the table is poisoned).
                    let _ = log.abort(txn);
                    Err(e)
                }
                (_, r, _) => {
                    shared.forget(txn);
                    r
                }
            }
        };
        shared.locks.release_all(txn);
        result
    }

    /// Runs one change inside explicit transaction `txn` (which already holds the key's
    /// exclusive lock) and returns its undo record.
    fn in_txn<R>(
        &self,
        txn: u64,
        pk: &[u8],
        body: impl FnOnce(u64, bool, &mut Option<TxnOp>) -> Result<R>,
    ) -> Result<(R, Option<TxnOp>)> {
        let _k = self.key_lock(pk);
        let mut rec = None;
        let r = body(txn, self.inner.txn.log.is_some(), &mut rec);
        take_annotation();
        Ok((r?, rec))
    }

    /// Takes the exclusive locks that serialise writers of the same value of each unique
    /// index (so two transactions cannot both find a value free and both take it).
    fn lock_unique_values(&self, txn: u64, row: &[Value]) -> Result<()> {
        let s = &self.inner.schema;
        for (n, ix) in s.indexes.iter().enumerate() {
            if !ix.unique || row[ix.column].is_null() {
                continue;
            }
            let mut k = vec![n as u8];
            s.secondary_prefix(ix.column, &row[ix.column], &mut k);
            self.inner.txn.locks.lock(txn, self.inner.id | UNIQUE_LOCK_SPACE, &k, LockMode::Exclusive)?;
        }
        Ok(())
    }

    /// Fails with `AlreadyExists` if unique index `n` holds `value` for a row other than `pk`.
    fn check_unique(&self, n: usize, value: &Value, pk: &[u8]) -> Result<()> {
        let s = &self.inner.schema;
        let ix = &s.indexes[n];
        if !ix.unique || value.is_null() {
            return Ok(());
        }
        let mut prefix = Vec::new();
        s.secondary_prefix(ix.column, value, &mut prefix);
        let mut taken = false;
        self.inner.secondaries[n].range(Bound::Included(&prefix), Bound::Unbounded, |k, _| {
            if !k.starts_with(&prefix) {
                return Ok(false);
            }
            taken = &k[prefix.len()..] != pk;
            Ok(!taken)
        })?;
        if taken {
            return Err(Error::AlreadyExists(format!(
                "table `{}`, unique index `{}`: value {value} of column `{}`",
                self.inner.name, ix.name, s.columns[ix.column].name
            )));
        }
        Ok(())
    }

    /// Makes every later use of this handle (and its clones) fail: the table was dropped or
    /// replaced by a rebuild.
    pub(crate) fn mark_dropped(&self) {
        self.poison("the table was dropped or rebuilt; open it again by name".into());
    }

    /// Inserts a row into a table nobody else can see yet (a rebuild's new table): no lock,
    /// no undo list; the change is logged as part of `txn`, which the caller commits once.
    pub(crate) fn bulk_insert(&self, txn: u64, row: &[Value]) -> Result<()> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.in_txn(txn, &pk, |txn, log, rec| self.insert_locked(txn, log, rec, row, &pk, &bytes))?;
        Ok(())
    }

    /// The largest primary key (`None` for an empty table), e.g. to continue a sequence of
    /// generated keys after a restart.
    pub fn last_key(&self) -> Result<Option<Value>> {
        self.check_poisoned()?;
        let Some(k) = self.inner.primary.last_key()? else { return Ok(None) };
        let s = &self.inner.schema;
        let ty = s.columns[s.primary_key].ty;
        Ok(Some(match ty {
            ColumnType::Int | ColumnType::Int32 | ColumnType::Int16 => {
                Value::Int(crate::btree::key::decode_i64(&k).ok_or_else(|| self.bad_key(&k))?)
            }
            ColumnType::Timestamp => {
                Value::Timestamp(crate::btree::key::decode_i64(&k).ok_or_else(|| self.bad_key(&k))?)
            }
            _ => {
                // Other key types: the row holds the value.
                let v = self.read_pk(&k, |r| r.value(s.primary_key))?;
                v.ok_or_else(|| self.bad_key(&k))?
            }
        }))
    }

    fn bad_key(&self, k: &[u8]) -> Error {
        Error::Corruption {
            file: files::index_name(self.inner.id),
            offset: 0,
            detail: format!("primary index of `{}` holds key {k:02x?} of the wrong shape", self.inner.name),
        }
    }

    /// Encoded primary keys of the rows whose primary key lies within the bounds, in key
    /// order, until `f` returns `Ok(false)`. Only the index is read (no rows, no locks): the
    /// caller reads each row with [`Table::read_encoded`] or in a transaction.
    pub fn primary_keys(
        &self,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.check_poisoned()?;
        self.primary_range(lo, hi)?.for_each(self, f)
    }

    /// Encoded primary keys of the rows whose value in the column of secondary index `index`
    /// (its position in the schema) lies within the bounds, in index order (NULLs last), until
    /// `f` returns `Ok(false)`. Only the index is read; the caller reads the rows (and
    /// re-checks the value: a row may change after its entry was read).
    pub fn index_keys(
        &self,
        index: usize,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.check_poisoned()?;
        if index >= self.inner.schema.indexes.len() {
            return Err(Error::NotFound(format!("index number {index} on table `{}`", self.inner.name)));
        }
        self.secondary_range(index, lo, hi)?.for_each(self, f)
    }

    /// [`Table::read`] by encoded primary key (as [`Table::primary_keys`] and
    /// [`Table::index_keys`] give them).
    pub fn read_encoded<R>(&self, pk: &[u8], f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        self.check_poisoned()?;
        let shared = &self.inner.txn;
        if shared.explicit_active.load(std::sync::atomic::Ordering::Acquire) > 0 {
            let txn = shared.begin();
            let r =
                shared.locks.lock(txn, self.inner.id, pk, LockMode::Shared).and_then(|_| self.read_pk(pk, f));
            shared.locks.release_all(txn);
            shared.forget(txn);
            return r;
        }
        if shared.log.is_some() {
            drop(self.key_lock(pk));
        }
        self.read_pk(pk, f)
    }

    /// Explicit-transaction insert (the caller holds the key's exclusive lock).
    pub(crate) fn txn_insert(&self, txn: u64, row: &[Value]) -> Result<Option<TxnOp>> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.lock_unique_values(txn, row)?;
        Ok(self.in_txn(txn, &pk, |txn, log, rec| self.insert_locked(txn, log, rec, row, &pk, &bytes))?.1)
    }

    /// Explicit-transaction update.
    pub(crate) fn txn_update(&self, txn: u64, row: &[Value]) -> Result<(bool, Option<TxnOp>)> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.lock_unique_values(txn, row)?;
        self.in_txn(txn, &pk, |txn, log, rec| self.update_locked(txn, log, rec, row, &pk, &bytes))
    }

    /// Explicit-transaction delete.
    pub(crate) fn txn_delete(&self, txn: u64, key: &Value) -> Result<(bool, Option<TxnOp>)> {
        self.check_poisoned()?;
        let pk = self.pk_bytes(key)?;
        self.in_txn(txn, &pk, |txn, log, rec| self.delete_locked(txn, log, rec, &pk))
    }

    /// The primary-key value of `row` (an error if the row is too short to have one).
    pub(crate) fn pk_of<'r>(&self, row: &'r [Value]) -> Result<&'r Value> {
        let s = &self.inner.schema;
        row.get(s.primary_key).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "table `{}` has {} columns, the row has {} values",
                self.inner.name,
                s.columns.len(),
                row.len()
            ))
        })
    }

    /// Encoded primary key of `key` (for lock keys).
    pub(crate) fn lock_key(&self, key: &Value) -> Result<Vec<u8>> {
        self.pk_bytes(key)
    }

    /// Reads a row inside a transaction (the caller holds at least a shared lock on the key).
    pub(crate) fn txn_read<R>(
        &self,
        key_bytes: &[u8],
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.read_pk(key_bytes, f)
    }

    /// Undo of one logged operation (recovery's undo pass, and a transaction's abort): makes
    /// the table's state for the key what it was before `op` (absent, or the `before` row),
    /// whatever part of `op` — and of later operations on the key — had happened. Idempotent.
    ///
    /// The key has at most one row in the heap at any moment (a change frees a slot before it
    /// fills another), but that row may not be where the primary index points: a delete cut
    /// between its index steps and its heap step leaves the row with no index entry, an insert
    /// cut before its index step likewise, and a row that moved may not have been re-pointed
    /// yet. So the row is looked for where the primary index points and where the log says
    /// (`op.rid`, and the destination a move logs as an operation of its own), and a row this
    /// undo writes elsewhere is logged the same way, so a crash during the undo is undone too.
    pub(crate) fn restore(&self, op: &TxnOp) -> Result<()> {
        let s = &self.inner.schema;
        let pk = &op.pk;
        let _k = self.key_lock(pk);
        let holds_key = |rid: RowId| -> Result<bool> {
            Ok(self
                .inner
                .heap
                .read(rid, |b| self.has_pk(&RowView::new(s, b), pk))?
                .transpose()?
                .unwrap_or(false))
        };
        let cur_rid = self.rid_for(pk)?;
        let logged_rid = (op.rid != u64::MAX).then(|| RowId::from_bytes(&op.rid.to_le_bytes())).flatten();
        // The key's row, if any: where the index points, else where the log says.
        let mut found = None;
        for rid in [cur_rid, logged_rid].into_iter().flatten() {
            if found != Some(rid) && holds_key(rid)? {
                match found {
                    None => found = Some(rid),
                    // Two rows of one key cannot happen; if it did, keep one.
                    Some(_) => {
                        self.inner.heap.delete(rid, |_| {})?;
                    }
                }
            }
        }
        let cur_row = match found {
            Some(rid) => self.inner.heap.read(rid, |b| b.to_vec())?,
            None => None,
        };
        // An update logged lean: its rows are the key's row with the patch's bytes.
        let op = &*op.resolve(cur_row.as_deref()).ok_or_else(|| Error::Corruption {
            file: files::heap_name(self.inner.id),
            offset: op.rid,
            detail: format!(
                "table `{}`: the logged update of a row cannot be undone: the key's row is missing or has another length",
                self.inner.name
            ),
        })?;
        let value_of = |row: &[u8], col: usize| RowView::new(s, row).try_value(col);
        // 1. Secondary entries the operation or a later state left that `before` lacks.
        for (ix, tree) in s.indexes.iter().zip(&self.inner.secondaries) {
            let want = op.before.as_deref().map(|b| value_of(b, ix.column)).transpose()?;
            for row in [op.after.as_deref(), cur_row.as_deref()].into_iter().flatten() {
                let v = value_of(row, ix.column)?;
                if Some(&v) != want.as_ref() {
                    tree.delete(&s.secondary_key_bytes(ix.column, &v, pk))?;
                }
            }
        }
        let Some(before) = &op.before else {
            // 2a. Undo of an insert: no row, no primary entry.
            if let Some(rid) = found {
                self.inner.heap.delete(rid, |_| {})?;
            }
            if cur_rid.is_some() {
                self.inner.primary.delete(pk)?;
            }
            return Ok(());
        };
        // 2b. The `before` row, in place where possible; a row written elsewhere is logged with
        //     where it went.
        let log = self.inner.txn.log.is_some();
        let mut note_rid = |rid: RowId| {
            if log {
                let rid = u64::from_le_bytes(rid.to_bytes());
                let op = TxnOp { rid, after: op.before.clone(), ..op.clone() };
                annotate_next_commit(op.encode());
            }
        };
        let rid = match found {
            Some(rid) => {
                self.inner.heap.update(rid, before, &mut note_rid)?.ok_or_else(|| self.dangling(rid))?
            }
            None => self.inner.heap.insert_annotated(before, &mut note_rid)?,
        };
        take_annotation();
        if cur_rid != Some(rid) {
            self.inner.primary.upsert(pk, &rid.to_bytes())?;
        }
        for (ix, tree) in s.indexes.iter().zip(&self.inner.secondaries) {
            tree.upsert(
                &s.secondary_key_bytes(ix.column, &value_of(before, ix.column)?, pk),
                &rid.to_bytes(),
            )?;
        }
        Ok(())
    }

    fn check_poisoned(&self) -> Result<()> {
        if !self.inner.is_poisoned.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        match &*self.inner.poisoned.locked() {
            Some(why) => Err(Error::Poisoned(format!("table `{}`: {why}", self.inner.name))),
            None => Ok(()),
        }
    }

    fn poison(&self, why: String) {
        *self.inner.poisoned.locked() = Some(why);
        self.inner.is_poisoned.store(true, std::sync::atomic::Ordering::Release);
    }

    fn apply_undo(&self, u: &Undo) -> Result<()> {
        let i = &self.inner;
        match u {
            Undo::HeapDelete(rid) => i.heap.delete(*rid, |_| {}).map(|_| ()),
            Undo::PrimaryDelete(pk) => i.primary.delete(pk).map(|_| ()),
            Undo::PrimaryInsert(pk, rid) => i.primary.upsert(pk, &rid.to_bytes()).map(|_| ()),
            Undo::SecondaryDelete(ix, k) => i.secondaries[*ix].delete(k).map(|_| ()),
            Undo::SecondaryInsert(ix, k, rid) => i.secondaries[*ix].upsert(k, &rid.to_bytes()).map(|_| ()),
        }
    }

    /// Reverses completed steps (newest first) after `err`, retrying each a bounded number of
    /// times; if one cannot be reversed the table is poisoned. Returns `err` either way.
    fn roll_back(&self, undo: Vec<Undo>, err: Error) -> Error {
        for u in undo.iter().rev() {
            if !(0..UNDO_ATTEMPTS).any(|_| self.apply_undo(u).is_ok()) {
                let why = format!("a failed change could not be reversed after: {err}; reopen the database");
                self.poison(why.clone());
                return Error::Poisoned(format!("table `{}`: {why}", self.inner.name));
            }
        }
        err
    }

    fn pk_bytes(&self, key: &Value) -> Result<Vec<u8>> {
        self.inner.schema.primary_key_bytes(&self.inner.name, key)
    }

    fn rid_for(&self, pk: &[u8]) -> Result<Option<RowId>> {
        self.inner.primary.get_with(pk, RowId::from_bytes)?.map_or(Ok(None), |r| {
            r.map(Some).ok_or_else(|| Error::Corruption {
                file: files::index_name(self.inner.id),
                offset: 0,
                detail: format!("primary index of `{}` holds a malformed row id", self.inner.name),
            })
        })
    }

    fn dangling(&self, rid: RowId) -> Error {
        Error::Corruption {
            file: files::heap_name(self.inner.id),
            offset: rid.page,
            detail: format!(
                "table `{}`: index points at empty slot {} of page {}",
                self.inner.name, rid.slot, rid.page
            ),
        }
    }

    /// Validates and encodes a row for a change: `(row bytes, encoded primary key)`.
    fn prepare_row(&self, row: &[Value]) -> Result<(Vec<u8>, Vec<u8>)> {
        self.check_poisoned()?;
        let s = &self.inner.schema;
        let mut bytes = Vec::new();
        s.encode_row(&self.inner.name, row, &mut bytes)?;
        let pk = self.pk_bytes(self.pk_of(row)?)?;
        self.check_index_entries(row, &pk)?;
        Ok((bytes, pk))
    }

    /// Keeps `op` as the change's undo record and, with a log, attaches it to the change's
    /// first logged page change.
    fn record_op(log: bool, rec: &mut Option<TxnOp>, op: TxnOp) {
        if log {
            annotate_next_commit(op.encode());
        }
        *rec = Some(op);
    }

    /// Inserts a row. Fails with `AlreadyExists` if the primary key is taken. On an I/O error
    /// the steps already done are reversed, so the table is as before.
    pub fn insert(&self, row: &[Value]) -> Result<()> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.auto_commit(&pk, Some(row), |txn, log, rec| self.insert_locked(txn, log, rec, row, &pk, &bytes))
    }

    fn insert_locked(
        &self,
        txn: u64,
        log: bool,
        rec: &mut Option<TxnOp>,
        row: &[Value],
        pk: &[u8],
        bytes: &[u8],
    ) -> Result<()> {
        let s = &self.inner.schema;
        let pk = pk.to_vec();
        if self.rid_for(&pk)?.is_some() {
            return Err(Error::AlreadyExists(format!(
                "table `{}`: primary key {:?}",
                self.inner.name, row[s.primary_key]
            )));
        }
        for n in 0..s.indexes.len() {
            self.check_unique(n, &row[s.indexes[n].column], &pk)?;
        }
        let table = self.inner.id;
        let rid = self.inner.heap.insert_annotated(bytes, &mut |rid| {
            let rid = u64::from_le_bytes(rid.to_bytes());
            let op = TxnOp {
                txn,
                table,
                pk: pk.clone(),
                rid,
                before: None,
                after: Some(bytes.to_vec()),
                patch: None,
            };
            Self::record_op(log, rec, op);
        })?;
        let mut undo = vec![Undo::HeapDelete(rid)];
        if let Err(e) = self.inner.primary.insert(&pk, &rid.to_bytes()) {
            return Err(self.roll_back(undo, e));
        }
        undo.push(Undo::PrimaryDelete(pk.clone()));
        for (n, (ix, tree)) in s.indexes.iter().zip(&self.inner.secondaries).enumerate() {
            let k = s.secondary_key_bytes(ix.column, &row[ix.column], &pk);
            if let Err(e) = tree.insert(&k, &rid.to_bytes()) {
                return Err(self.roll_back(undo, e));
            }
            undo.push(Undo::SecondaryDelete(n, k));
        }
        Ok(())
    }

    fn check_index_entries(&self, row: &[Value], pk: &[u8]) -> Result<()> {
        let s = &self.inner.schema;
        let max = self.inner.primary.max_entry_bytes();
        if pk.len() + 8 > max {
            return Err(Error::InvalidArgument(format!(
                "table `{}`: primary key of {} bytes exceeds the {} bytes an index entry allows",
                self.inner.name,
                pk.len(),
                max - 8
            )));
        }
        for ix in &s.indexes {
            let k = s.secondary_key_bytes(ix.column, &row[ix.column], pk);
            if k.len() + 8 > max {
                return Err(Error::InvalidArgument(format!(
                    "table `{}`, index `{}`: key of {} bytes exceeds the {} bytes an index entry allows",
                    self.inner.name,
                    ix.name,
                    k.len(),
                    max - 8
                )));
            }
        }
        Ok(())
    }

    /// Reads the row with primary key `key`, passing a zero-copy view to `f`.
    ///
    /// The read sees only committed data: it waits for a change of the same key that is still
    /// committing, and, while explicit transactions run, takes a shared lock on the key. That
    /// lock wait can fail like a transaction's: with [`Error::LockTimeout`] or
    /// [`Error::Deadlock`] (both [`Error::is_retryable`]) when a transaction holds the key
    /// exclusively for longer than the lock timeout; retry the read. Once the database is
    /// closed it fails with [`Error::Closed`].
    pub fn read<R>(&self, key: &Value, f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        // Integer keys are encoded on the stack: a point read allocates nothing.
        let (int_pk, owned_pk);
        let pk: &[u8] = match key {
            Value::Int(x) if self.inner.schema.columns[self.inner.schema.primary_key].ty.is_integer() => {
                int_pk = crate::btree::key::encode_i64(*x);
                &int_pk
            }
            _ => {
                owned_pk = self.pk_bytes(key)?;
                &owned_pk
            }
        };
        let shared = &self.inner.txn;
        if shared.explicit_active.load(std::sync::atomic::Ordering::Acquire) > 0 {
            let txn = shared.begin();
            let r =
                shared.locks.lock(txn, self.inner.id, pk, LockMode::Shared).and_then(|_| self.read_pk(pk, f));
            shared.locks.release_all(txn);
            shared.forget(txn);
            return r;
        }
        if shared.log.is_some() {
            // Wait for a change of this key that is still committing.
            drop(self.key_lock(pk));
        }
        self.read_pk(pk, f)
    }

    /// Reads the rows of several primary keys: calls `f(i, row)` for each `keys[i]` in turn,
    /// with `None` for a key that has no row. Each read is exactly a [`Table::read`] (it sees
    /// only committed data); it is faster when many rows are in memory, because the lookups of
    /// up to [`READ_BATCH`] keys are interleaved so that their cache misses overlap: the index
    /// leaves of all of them are prefetched, then their rows, then the rows are read.
    ///
    /// ```
    /// # use nvmedb::{ColumnType, Database, Options, Schema, Value};
    /// # fn main() -> nvmedb::Result<()> {
    /// # let db = Database::open_with_storage(std::sync::Arc::new(nvmedb::io::MemStorage::new()), Options::default())?;
    /// let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]))?;
    /// t.insert(&[Value::Int(1), Value::Int(10)])?;
    /// let mut got = vec![];
    /// t.read_many(&[Value::Int(1), Value::Int(2)], |i, row| got.push((i, row.map(|r| r.int(1)))))?;
    /// assert_eq!(got, [(0, Some(10)), (1, None)]);
    /// # Ok(()) }
    /// ```
    pub fn read_many(&self, keys: &[Value], f: impl FnMut(usize, Option<RowView<'_>>)) -> Result<()> {
        self.read_many_staged(keys, f, &mut || {})
    }

    /// [`Table::read_many`], calling `between_stages` after each batch has located its leaves
    /// and before it reads them (tests change the table there).
    fn read_many_staged(
        &self,
        keys: &[Value],
        mut f: impl FnMut(usize, Option<RowView<'_>>),
        between_stages: &mut dyn FnMut(),
    ) -> Result<()> {
        self.inner.txn.check_open()?;
        self.check_poisoned()?;
        let shared = &self.inner.txn;
        let mut pks = Vec::with_capacity(READ_BATCH * 8);
        let mut ends = [0usize; READ_BATCH];
        let mut rids = [None; READ_BATCH];
        let mut leaves = [None; READ_BATCH];
        for (b, batch) in keys.chunks(READ_BATCH).enumerate() {
            if shared.explicit_active.load(std::sync::atomic::Ordering::Acquire) > 0 {
                // Explicit transactions run: every read takes its shared key lock.
                for (j, k) in batch.iter().enumerate() {
                    if self.read(k, |v| f(b * READ_BATCH + j, Some(v)))?.is_none() {
                        f(b * READ_BATCH + j, None);
                    }
                }
                continue;
            }
            pks.clear();
            for (j, k) in batch.iter().enumerate() {
                match k {
                    Value::Int(x)
                        if self.inner.schema.columns[self.inner.schema.primary_key].ty.is_integer() =>
                    {
                        pks.extend_from_slice(&crate::btree::key::encode_i64(*x))
                    }
                    _ => pks.extend_from_slice(&self.pk_bytes(k)?),
                }
                ends[j] = pks.len();
            }
            let pk = |j: usize| &pks[if j == 0 { 0 } else { ends[j - 1] }..ends[j]];
            // 1. The leaves of all keys.
            for (j, leaf) in leaves[..batch.len()].iter_mut().enumerate() {
                *leaf = self.inner.primary.locate_leaf(pk(j))?;
            }
            between_stages();
            // 2. The row ids, and a prefetch of every row.
            for (j, (leaf, rid)) in leaves.iter().zip(rids.iter_mut()).take(batch.len()).enumerate() {
                if shared.log.is_some() {
                    // Wait for a change of this key that is still committing.
                    drop(self.key_lock(pk(j)));
                }
                let in_leaf = match *leaf {
                    Some(hint) => self.inner.primary.get_in_leaf_with(hint, pk(j), RowId::from_bytes)?,
                    None => None,
                };
                *rid = match in_leaf {
                    Some(Some(found)) => Some(found),
                    // Not in that leaf (or the tree changed): from the root.
                    _ => self.rid_for(pk(j))?,
                };
                if let Some(r) = *rid {
                    self.inner.heap.prefetch_row(r);
                }
            }
            // 3. The rows. One that moved since its index entry was read is looked up again.
            let s = &self.inner.schema;
            for (j, &rid) in rids[..batch.len()].iter().enumerate() {
                let i = b * READ_BATCH + j;
                let Some(rid) = rid else {
                    f(i, None);
                    continue;
                };
                let found = self.inner.heap.read(rid, |bytes| {
                    let v = RowView::new(s, bytes);
                    Ok::<_, Error>(self.has_pk(&v, pk(j))?.then(|| f(i, Some(v))).is_some())
                })?;
                let found = found.transpose()?;
                if found != Some(true) && self.read_pk(pk(j), |v| f(i, Some(v)))?.is_none() {
                    f(i, None);
                }
            }
        }
        Ok(())
    }

    /// True if the row `v` has primary key `pk` (encoded); an error for a row that does not
    /// match the schema.
    fn has_pk(&self, v: &RowView<'_>, pk: &[u8]) -> Result<bool> {
        let s = &self.inner.schema;
        Ok(match s.columns[s.primary_key].ty {
            ColumnType::Int | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Timestamp => {
                crate::btree::key::encode_i64(v.try_int(s.primary_key)?) == pk
            }
            ColumnType::Char(_) | ColumnType::Bytes(_) | ColumnType::Text(_) => {
                v.try_bytes(s.primary_key)? == pk
            }
            _ => {
                let mut k = Vec::with_capacity(16);
                s.try_primary_key_of(v, &mut k)?;
                k == pk
            }
        })
    }

    /// Follows the primary index to the row and checks it is the row asked for. Readers take
    /// no key lock, so a writer may move or delete the row between the index lookup and the
    /// heap read (and the slot may even hold another row by then): look again, a bounded
    /// number of times.
    fn read_pk<R>(&self, pk: &[u8], f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        let s = &self.inner.schema;
        let mut f = Some(f);
        let mut last = None;
        for _ in 0..READ_RETRIES {
            let Some(rid) = self.rid_for(pk)? else { return Ok(None) };
            let got = self.inner.heap.read(rid, |b| {
                let v = RowView::new(s, b);
                Ok::<_, Error>(self.has_pk(&v, pk)?.then(|| (f.take().expect("called once"))(v)))
            })?;
            if let Some(Some(r)) = got.transpose()? {
                return Ok(Some(r));
            }
            last = Some(rid);
            std::thread::yield_now();
        }
        Err(self.dangling(last.expect("at least one attempt")))
    }

    /// The row with primary key `key`, decoded. Like [`Table::read`], it can fail with a
    /// retryable lock error ([`Error::is_retryable`]) while explicit transactions run; a row
    /// that does not match the schema is [`Error::Corruption`].
    pub fn get(&self, key: &Value) -> Result<Option<Vec<Value>>> {
        self.read(key, |r| r.try_values())?.transpose()
    }

    /// Replaces the row with the same primary key. Returns false if there is none. On an I/O
    /// error the steps already done are reversed.
    pub fn update(&self, row: &[Value]) -> Result<bool> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.auto_commit(&pk, Some(row), |txn, log, rec| self.update_locked(txn, log, rec, row, &pk, &bytes))
    }

    fn update_locked(
        &self,
        txn: u64,
        log: bool,
        rec: &mut Option<TxnOp>,
        row: &[Value],
        pk: &[u8],
        bytes: &[u8],
    ) -> Result<bool> {
        let s = &self.inner.schema;
        let pk = pk.to_vec();
        let Some(rid) = self.rid_for(&pk)? else { return Ok(false) };
        let Some(old_row) = self.inner.heap.read(rid, |b| b.to_vec())? else {
            return Err(self.dangling(rid));
        };
        let old_values: Vec<Value> = {
            let v = RowView::new(s, &old_row);
            s.indexes.iter().map(|ix| v.try_value(ix.column)).collect::<Result<_>>()?
        };
        for (n, old) in old_values.iter().enumerate() {
            if *old != row[s.indexes[n].column] {
                self.check_unique(n, &row[s.indexes[n].column], &pk)?;
            }
        }
        let op = TxnOp {
            txn,
            table: self.inner.id,
            pk: pk.clone(),
            rid: u64::from_le_bytes(rid.to_bytes()),
            before: Some(old_row),
            after: Some(bytes.to_vec()),
            patch: None,
        };
        Self::record_op(log, rec, op);
        let bytes = bytes.to_vec();
        // 1. New secondary entries first (pointing at the current row), so a failure later
        //    only has to remove them.
        let mut undo = Vec::new();
        let mut changed = Vec::new();
        for (n, ((ix, tree), old)) in
            s.indexes.iter().zip(&self.inner.secondaries).zip(&old_values).enumerate()
        {
            if *old != row[ix.column] {
                let k = s.secondary_key_bytes(ix.column, &row[ix.column], &pk);
                if let Err(e) = tree.insert(&k, &rid.to_bytes()) {
                    return Err(self.roll_back(undo, e));
                }
                undo.push(Undo::SecondaryDelete(n, k));
                changed.push(n);
            }
        }
        // 2. The row itself. A row that moves logs where it went (with the insert that puts it
        //    there), so recovery finds it before its index entries are re-pointed.
        let mut moved = |new: RowId| {
            if log {
                let op = TxnOp {
                    txn,
                    table: self.inner.id,
                    pk: pk.clone(),
                    rid: u64::from_le_bytes(new.to_bytes()),
                    before: rec.as_ref().and_then(|r| r.before.clone()),
                    after: Some(bytes.clone()),
                    patch: None,
                };
                annotate_next_commit(op.encode());
            }
        };
        let new_rid = match self.inner.heap.update(rid, &bytes, &mut moved) {
            Ok(Some(r)) => r,
            Ok(None) => return Err(self.roll_back(undo, self.dangling(rid))),
            Err(e) => return Err(self.roll_back(undo, e)),
        };
        // 3. A moved row: re-point every index entry (rare: only when the row grew). A failure
        //    here cannot be reversed step by step, so it poisons the table.
        let poison = |e: Error| -> Error {
            let why = format!("an update that moved a row failed half-way: {e}; reopen the database");
            self.poison(why.clone());
            Error::Poisoned(format!("table `{}`: {why}", self.inner.name))
        };
        if new_rid != rid {
            self.inner.primary.upsert(&pk, &new_rid.to_bytes()).map_err(poison)?;
            for (ix, tree) in s.indexes.iter().zip(&self.inner.secondaries) {
                let k = s.secondary_key_bytes(ix.column, &row[ix.column], &pk);
                tree.upsert(&k, &new_rid.to_bytes()).map_err(poison)?;
            }
        }
        // 4. Old secondary entries go last.
        for &n in &changed {
            let k = s.secondary_key_bytes(s.indexes[n].column, &old_values[n], &pk);
            self.inner.secondaries[n].delete(&k).map_err(poison)?;
        }
        Ok(true)
    }

    /// Sets one integer column of the row with primary key `key` (the primitive workload's
    /// UPDATE of C1). Returns false if there is no such row.
    pub fn update_int(&self, key: &Value, column: usize, value: i64) -> Result<bool> {
        let Some(mut row) = self.get(key)? else { return Ok(false) };
        if column >= row.len() {
            return Err(Error::InvalidArgument(format!(
                "table `{}` has no column {column}",
                self.inner.name
            )));
        }
        row[column] = Value::Int(value);
        self.update(&row)
    }

    /// Deletes the row with primary key `key`. Returns false if there is none. On an I/O
    /// error the steps already done are reversed.
    pub fn delete(&self, key: &Value) -> Result<bool> {
        self.check_poisoned()?;
        let pk = self.pk_bytes(key)?;
        self.auto_commit(&pk, None, |txn, log, rec| self.delete_locked(txn, log, rec, &pk))
    }

    fn delete_locked(&self, txn: u64, log: bool, rec: &mut Option<TxnOp>, pk: &[u8]) -> Result<bool> {
        let s = &self.inner.schema;
        let pk = pk.to_vec();
        let Some(rid) = self.rid_for(&pk)? else { return Ok(false) };
        let Some(old_row) = self.inner.heap.read(rid, |b| b.to_vec())? else {
            return Err(self.dangling(rid));
        };
        let old_values: Vec<Value> = {
            let v = RowView::new(s, &old_row);
            s.indexes.iter().map(|ix| v.try_value(ix.column)).collect::<Result<_>>()?
        };
        let rid_bytes = u64::from_le_bytes(rid.to_bytes());
        let op = TxnOp {
            txn,
            table: self.inner.id,
            pk: pk.clone(),
            rid: rid_bytes,
            before: Some(old_row),
            after: None,
            patch: None,
        };
        Self::record_op(log, rec, op);
        let mut undo = Vec::new();
        for (n, (tree, old)) in self.inner.secondaries.iter().zip(&old_values).enumerate() {
            let k = s.secondary_key_bytes(s.indexes[n].column, old, &pk);
            if let Err(e) = tree.delete(&k) {
                return Err(self.roll_back(undo, e));
            }
            undo.push(Undo::SecondaryInsert(n, k, rid));
        }
        if let Err(e) = self.inner.primary.delete(&pk) {
            return Err(self.roll_back(undo, e));
        }
        undo.push(Undo::PrimaryInsert(pk.clone(), rid));
        match self.inner.heap.delete(rid, |_| {}) {
            Ok(true) => Ok(true),
            Ok(false) => Err(self.roll_back(undo, self.dangling(rid))),
            Err(e) => Err(self.roll_back(undo, e)),
        }
    }

    /// Full table scan in heap order until `f` returns `Ok(false)`. The row's page is latched
    /// while `f` runs: `f` must not modify this table.
    pub fn scan(&self, mut f: impl FnMut(RowView<'_>) -> Result<bool>) -> Result<()> {
        self.inner.txn.check_open()?;
        let s = &self.inner.schema;
        self.inner.heap.scan(|_, b| f(RowView::new(s, b)))
    }

    /// Part `part` of `parts` of a full scan: a contiguous share of the heap pages, so `parts`
    /// threads together scan the table once (seed 004's parallel scan).
    pub fn scan_partition(
        &self,
        part: usize,
        parts: usize,
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.scan_partition_ahead(part, parts, heap::READ_AHEAD_PAGES, f)
    }

    /// Like [`Table::scan_partition`], keeping `read_ahead` page reads in flight ahead of the
    /// page being processed (the I/O depth of one scanning thread; at least 1, at most an eighth
    /// of the pool's frames, or of the thread's partition under SEP).
    pub fn scan_partition_ahead(
        &self,
        part: usize,
        parts: usize,
        read_ahead: u64,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.inner.txn.check_open()?;
        if parts == 0 || part >= parts {
            return Err(Error::InvalidArgument(format!("scan partition {part} of {parts}")));
        }
        let pages = self.inner.heap.pages()?;
        let per = pages.div_ceil(parts as u64);
        let start = (part as u64 * per).min(pages);
        let end = (start + per).min(pages);
        let s = &self.inner.schema;
        self.inner.heap.scan_pages_ahead(start..end, read_ahead, |_, b| f(RowView::new(s, b)))
    }

    /// Rows with primary key within the bounds, in key order, until `f` returns `Ok(false)`.
    pub fn range(
        &self,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.inner.txn.check_open()?;
        let enc = |b: Bound<&Value>| -> Result<Bound<Vec<u8>>> {
            Ok(match b {
                Bound::Included(v) => Bound::Included(self.pk_bytes(v)?),
                Bound::Excluded(v) => Bound::Excluded(self.pk_bytes(v)?),
                Bound::Unbounded => Bound::Unbounded,
            })
        };
        let (lo, hi) = (enc(lo)?, enc(hi)?);
        self.inner.primary.range(lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice), |pk, _| {
            // Resolve through the primary index again: the row may have moved since the
            // entry was copied. A row deleted meanwhile is skipped.
            Ok(self.read_pk(pk, &mut f)?.transpose()?.unwrap_or(true))
        })
    }

    /// All rows whose column indexed by `index` equals `value`, in primary-key order.
    pub fn lookup(&self, index: &str, value: &Value) -> Result<Vec<Vec<Value>>> {
        self.inner.txn.check_open()?;
        let s = &self.inner.schema;
        let pos = s
            .indexes
            .iter()
            .position(|ix| ix.name == index)
            .ok_or_else(|| Error::NotFound(format!("index `{index}` on table `{}`", self.inner.name)))?;
        s.check_value(&self.inner.name, s.indexes[pos].column, value)?;
        let mut prefix = Vec::new();
        s.secondary_prefix(s.indexes[pos].column, value, &mut prefix);
        let mut pks = Vec::new();
        self.inner.secondaries[pos].range(Bound::Included(&prefix), Bound::Unbounded, |k, _| {
            if !k.starts_with(&prefix) {
                return Ok(false);
            }
            pks.push(k[prefix.len()..].to_vec());
            Ok(true)
        })?;
        let col = s.indexes[pos].column;
        let mut rows = Vec::with_capacity(pks.len());
        for pk in pks {
            // The row may have changed since the index entry was copied: keep it only if it
            // still has the value looked for.
            let row = self.read_pk(&pk, |r| match r.try_value(col) {
                Ok(v) if v == *value => Some(r.try_values()),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })?;
            if let Some(Some(r)) = row {
                rows.push(r?);
            }
        }
        Ok(rows)
    }

    /// Checks that the heap and every index agree: each row has its primary and secondary
    /// entries, each entry points at a row with the right key, and every tree is well formed.
    /// Returns the number of rows.
    pub fn check_integrity(&self) -> Result<u64> {
        self.inner.txn.check_open()?;
        let s = &self.inner.schema;
        let bad = |d: String| Error::Corruption {
            file: format!("t{}", self.inner.id),
            offset: 0,
            detail: format!("table `{}`: {d}", self.inner.name),
        };
        let pshape = self.inner.primary.check()?;
        let mut rows = 0u64;
        let mut problems: Option<Error> = None;
        self.inner.heap.scan(|rid, b| {
            rows += 1;
            let v = RowView::new(s, b);
            let pk = s.primary_key_bytes(&self.inner.name, &v.try_value(s.primary_key)?)?;
            if self.inner.primary.get_with(&pk, RowId::from_bytes)?.flatten() != Some(rid) {
                problems = Some(bad(format!("row at {rid:?} has no matching primary index entry")));
                return Ok(false);
            }
            for (ix, tree) in s.indexes.iter().zip(&self.inner.secondaries) {
                let k = s.secondary_key_bytes(ix.column, &v.try_value(ix.column)?, &pk);
                if tree.get_with(&k, RowId::from_bytes)?.flatten() != Some(rid) {
                    problems = Some(bad(format!("row at {rid:?} has no entry in index `{}`", ix.name)));
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        if let Some(e) = problems {
            return Err(e);
        }
        if pshape.entries != rows {
            return Err(bad(format!("primary index has {} entries for {rows} rows", pshape.entries)));
        }
        for (ix, tree) in s.indexes.iter().zip(&self.inner.secondaries) {
            let shape = tree.check()?;
            if shape.entries != rows {
                return Err(bad(format!(
                    "index `{}` has {} entries for {rows} rows",
                    ix.name, shape.entries
                )));
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::MemStorage;
    use crate::{BufferSize, Database, Options};

    /// Between a batch's stages, the leaves it located split (new keys around its own) and its
    /// rows move to other heap pages (they grow): every row is still found, and is the right
    /// one.
    #[test]
    fn read_many_survives_splits_and_moves_between_its_stages() {
        let opts = Options {
            table_page_size: 4096,
            index_page_size: 4096,
            table_buffer: BufferSize::Bytes(16 * 4096),
            index_buffer: BufferSize::Bytes(1024 * 4096),
            wal: false,
            ..Options::default()
        };
        let db = Database::open_with_storage(Arc::new(MemStorage::new()), opts).unwrap();
        let t = db
            .create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Bytes(900))]))
            .unwrap();
        let row = |id: i64, len: usize| [Value::Int(id), Value::Bytes(vec![id as u8; len])];
        // Keys 1000 apart; a 4 KiB leaf holds about 126 of them.
        for id in (0..2000i64).map(|i| i * 1000) {
            t.insert(&row(id, 8)).unwrap();
        }
        let leaves_before = t.inner.primary.check().unwrap().leaves;
        let keys: Vec<Value> = (0..2000i64).map(|i| Value::Int(i * 1000)).collect();
        let mut got = vec![None; keys.len()];
        let mut batch = 0i64;
        t.read_many_staged(&keys, |i, r| got[i] = r.map(|r| (r.int(0), r.bytes(1).len())), &mut || {
            let first = batch * READ_BATCH as i64 * 1000;
            // 150 keys just below the batch's first key split its leaf so that the batch's
            // keys go to the new right half; then the batch's rows grow and move.
            for id in first - 150..first {
                t.insert(&row(id, 8)).unwrap();
            }
            for id in (0..READ_BATCH as i64).map(|j| first + j * 1000).filter(|&id| id < 2_000_000) {
                assert!(t.update(&row(id, 900)).unwrap(), "row {id} exists");
            }
            batch += 1;
        })
        .unwrap();
        let leaves_after = t.inner.primary.check().unwrap().leaves;
        assert!(leaves_after > leaves_before * 3 / 2, "leaves split: {leaves_before} → {leaves_after}");
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(got[i], Some((k.as_int().unwrap(), 900)), "key {k:?}");
        }
    }
}
