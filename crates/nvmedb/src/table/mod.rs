//! Tables: rows in a heap file, a B+tree primary index, secondary indexes, and the catalog.
//!
//! Owns: `Table` (insert, get, update, delete, scans, range and secondary lookups) and the
//! catalog format. Invariants: every live row has exactly one primary-index entry pointing at
//! it and one entry per secondary index; modifications of one primary key are serialised by a
//! striped key lock, so the row and its index entries change together with respect to other
//! writers. Every writer holds the key's exclusive lock (lock manager) and is entered in
//! [`PendingWriters`] with the key's committed row (its before-image) from before its first
//! page change until its change is committed or rolled back; reads outside serializable
//! transactions take no lock and never wait: they see the row under its page latch when no
//! writer of it is in flight, and its before-image when one is (see `read_committed`).
//!
//! Isolation of the reads here: each row is read as last committed (read committed, row by
//! row). Scans, ranges, counts (`primary_keys`) and secondary lookups (`lookup`,
//! `index_keys`) are also exact: every key is decided once, and a row committed when the walk
//! passes its key is seen exactly once, as last committed; no uncommitted row is seen. They
//! are not snapshots: a transaction that commits while a scan runs shows in the keys the scan
//! reaches after the commit and not in those before. The transaction API (`db::transaction`)
//! adds serializable reads under locks.
//!
//! Why the lock-free walks are exact (`scan::KeyRange::for_each_committed`). The index is
//! walked a leaf at a time; each visit accounts for an interval of keys, the intervals tile
//! the range, and every key of the tree inside a visit's interval is in the leaf the visit
//! holds latched. Under that latch the walk takes the keys of the table that other
//! transactions have in flight, with their before-images. A writer publishes the image (read
//! under the key's exclusive lock) before its first page change of the key and withdraws it
//! only after its commit is durable or its rollback complete; the latch hand-over orders
//! every page change the leaf shows after the image that preceded it. So under the latch:
//! - a key with no image has no change in flight that the leaf shows: its entry, or its
//!   absence, is committed (a writer that left had finished; one entering now has not yet
//!   touched this leaf and cannot while the latch is held);
//! - a key with an image is decided by the image alone, wherever its entries are: a delete
//!   in flight (the entry and the heap row already gone: the image is passed, so the row is
//!   not missed); an insert in flight (an entry present: skipped, the image says absent); an
//!   update that grows the row (it moves to another page; the entry is re-pointed) or changes
//!   an indexed column (a new secondary entry before the old one goes: both skipped, the
//!   image is passed once at the position of its committed value, inside the one visit whose
//!   interval holds that position); a key deleted and inserted again, or a rollback half-way
//!   (entries come and go): skipped, the image stands. The image is merged in key order with
//!   the entries, so a walk stays in index order.
//!
//! A key not in flight at its visit is read afterwards through its row id: under the heap
//! page latch, a row holding the key with an idle stripe is committed; otherwise (the row
//! moved, went, or a writer entered since) it is read as `Table::read` reads it, which gives
//! the committed state at that moment (the image of a writer that entered since the visit).
//! Either way the key is decided once. For secondary walks, a row read that way is kept only
//! if it still has the value looked for; a committed change of an indexed value while the
//! walk runs moves the row's position, so the row may then show at both values or at none.
//! `scan_partition` goes in heap order for parallel analytic scans and is not exact: a row
//! moved between heap pages while it runs may be seen twice or missed.

pub mod catalog;
pub mod files;
pub mod heap;
mod hints;
mod scan;
pub mod schema;

pub use heap::{HeapFile, RowId};
pub(crate) use scan::KeyRange;

use schema::RowLayout;
pub use schema::{Column, ColumnType, IndexDef, RowView, Schema, Value};

use crate::btree::BTree;
use crate::buffer::mtr::{annotate_next_commit, take_annotation};
use crate::error::{Error, Result};
use crate::txn::pending::BeforeImage;
use crate::txn::{LockMode, PendingWriters, TxnShared};
use crate::util::sync::MutexExt;
use crate::wal::engine::TxnOp;
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
    /// Constant column offsets of `schema`'s rows.
    pub(crate) layout: RowLayout,
    pub(crate) heap: HeapFile,
    pub(crate) primary: BTree,
    pub(crate) secondaries: Vec<BTree>,
    /// Where rows of primary keys were last found, for point reads (checked, never trusted).
    hints: hints::RowHints,
    key_locks: Box<[Mutex<()>]>,
    /// Set when a failed change could not be reversed; every later call reports it.
    poisoned: Mutex<Option<String>>,
    /// Fast check of `poisoned` for the read path.
    is_poisoned: std::sync::atomic::AtomicBool,
    /// Transactions: the log (when the database is durable), locks, ids.
    txn: Arc<TxnShared>,
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
                layout: RowLayout::of(&schema),
                schema,
                heap,
                primary,
                secondaries,
                hints: hints::RowHints::new(txn.row_hint_budget.clone()),
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

    /// A view of row bytes of this table, reading columns through its [`RowLayout`].
    fn view<'a>(&'a self, bytes: &'a [u8]) -> RowView<'a> {
        RowView::with_layout(&self.inner.schema, &self.inner.layout, bytes)
    }

    /// Number of heap pages.
    pub fn heap_pages(&self) -> Result<u64> {
        self.inner.heap.pages()
    }

    fn key_lock(&self, pk: &[u8]) -> std::sync::MutexGuard<'_, ()> {
        let h = crate::util::fnv1a64(pk);
        self.inner.key_locks[(h % KEY_LOCK_STRIPES as u64) as usize].locked()
    }

    /// Runs one change as its own transaction ([`TxnShared::auto_commit`]): the key's
    /// exclusive lock and its unique values' locks, the key's committed row published for
    /// lock-free readers, the change under the key's physical lock, a durable commit.
    fn auto_commit<R>(
        &self,
        pk: &[u8],
        row: Option<&[Value]>,
        body: impl FnOnce(u64, bool, &mut Option<TxnOp>) -> Result<R>,
    ) -> Result<R> {
        self.inner.txn.auto_commit(
            self.inner.id,
            pk,
            |txn| row.map_or(Ok(()), |r| self.lock_unique_values(txn, r)),
            || self.before_image(pk),
            || self.key_lock(pk),
            body,
        )
    }

    /// The committed row of `pk` (its bytes), read by its writer under the key's exclusive
    /// lock before the first page change: what lock-free readers see until the change is
    /// committed or rolled back.
    pub(crate) fn before_image(&self, pk: &[u8]) -> Result<BeforeImage> {
        self.read_pk(pk, |v| Arc::from(v.raw()))
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
            ColumnType::Int | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Date => {
                Value::Int(crate::btree::key::decode_i64(&k).ok_or_else(|| self.bad_key(&k))?)
            }
            ColumnType::Timestamp => {
                Value::Timestamp(crate::btree::key::decode_i64(&k).ok_or_else(|| self.bad_key(&k))?)
            }
            _ => {
                // Other key types: the row holds the value.
                let v = self.read_committed(&k, None, |r| r.value(s.primary_key))?;
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
    /// caller reads each row with [`Table::read_encoded`] or in a transaction. Exact like
    /// [`Table::range`]: each key committed when the walk passes it is passed once (one whose
    /// delete is in flight included), no key another transaction is inserting is passed.
    pub fn primary_keys(
        &self,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        f: impl FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        let mut f = f;
        self.acknowledged(self.primary_range(lo, hi)?.for_each_committed(self, None, |pk, _| f(pk)))
    }

    /// Encoded primary keys of the rows whose value in the column of secondary index `index`
    /// (its position in the schema) lies within the bounds, in index order (NULLs last), until
    /// `f` returns `Ok(false)`. Only the index is read; the caller reads the rows (and
    /// re-checks the value: a row may change after its entry was read). Each entry committed
    /// when the walk passes it is passed once (a key with a change in flight at the position
    /// of its committed value); a row whose indexed value a transaction commits a change of
    /// while the walk runs may be passed at both values or at neither.
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
        self.inner.txn.check_open()?;
        let mut f = f;
        self.acknowledged(self.secondary_range(index, lo, hi)?.for_each_committed(self, None, |pk, _| f(pk)))
    }

    /// Returns `r` once every commit it can have seen is durable: with early lock release a
    /// committed change is visible before its flush, and an auto-commit read must not be
    /// acknowledged before what it saw would survive a crash (see `txn::shared`).
    fn acknowledged<T>(&self, r: Result<T>) -> Result<T> {
        let v = r?;
        self.inner.txn.wait_released()?;
        Ok(v)
    }

    /// [`Table::acknowledged`] for a point read of `pk`: it can have seen only changes of
    /// writers of the key's stripe, so it waits only for theirs (`PendingWriters::released`).
    fn acknowledged_key<T>(&self, pk: &[u8], r: Result<T>) -> Result<T> {
        let v = r?;
        self.inner.txn.wait_released_in(PendingWriters::stripe(self.inner.id, pk))?;
        Ok(v)
    }

    /// [`Table::read`] by encoded primary key (as [`Table::primary_keys`] and
    /// [`Table::index_keys`] give them).
    pub fn read_encoded<R>(&self, pk: &[u8], f: impl FnOnce(RowView<'_>) -> R) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        self.acknowledged_key(pk, self.read_committed(pk, None, f))
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

    /// Reads a row inside read-committed transaction `txn`: as last committed, without a lock
    /// (`Table::read`), except that `txn` sees its own changes.
    pub(crate) fn txn_read_committed<R>(
        &self,
        txn: u64,
        key_bytes: &[u8],
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.check_poisoned()?;
        self.read_committed(key_bytes, Some(txn), f)
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
    /// The key has one row in the heap, or two while a move is cut between filling its new
    /// slot and freeing the old one (see `HeapFile::update`), and the row may not be where the
    /// primary index points: a delete cut between its index steps and its heap step leaves the
    /// row with no index entry, an insert cut before its index step likewise, and a row that
    /// moved may not have been re-pointed yet. So the row is looked for where the primary index
    /// points and where the log says (`op.rid`, and the destination a move logs as an
    /// operation of its own), a second copy is dropped, and a row this undo writes elsewhere is
    /// logged the same way, so a crash during the undo is undone too.
    pub(crate) fn restore(&self, op: &TxnOp) -> Result<()> {
        let s = &self.inner.schema;
        let pk = &op.pk;
        let _k = self.key_lock(pk);
        let holds_key = |rid: RowId| -> Result<bool> {
            Ok(self.inner.heap.read(rid, |b| self.has_pk(&self.view(b), pk))?.transpose()?.unwrap_or(false))
        };
        let cur_rid = self.rid_for(pk)?;
        let logged_rid = (op.rid != u64::MAX).then(|| RowId::from_bytes(&op.rid.to_le_bytes())).flatten();
        // The key's row, if any: where the index points, else where the log says.
        let mut found = None;
        for rid in [cur_rid, logged_rid].into_iter().flatten() {
            if found != Some(rid) && holds_key(rid)? {
                match found {
                    None => found = Some(rid),
                    // Both copies of a move cut half-way: keep the one the index points at.
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
        let value_of = |row: &[u8], col: usize| self.view(row).try_value(col);
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

    /// Reads the row with primary key `key`, passing a zero-copy view to `f`. A key read before
    /// usually goes straight to its row's page, by the row-id hint its last read left (see
    /// [`Options::row_hint_bytes`](crate::Options::row_hint_bytes)); other keys descend the
    /// primary index.
    ///
    /// The read sees only committed data (read committed), takes no lock and never waits for
    /// a writer: when a transaction has the key's change in flight, the read sees the row as
    /// it was before that change (the before-image the writer published), until the change
    /// commits. A change committed with early lock release is seen once its commit record is
    /// logged; the read then returns only once that commit is durable. Once the database is
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
        self.acknowledged_key(pk, self.read_committed(pk, None, f))
    }

    /// The committed row of `pk`, without a lock and without waiting (see
    /// [`PendingWriters`]): the row under its page latch while no writer of the key's stripe
    /// is in flight; else the key's before-image when another transaction has the key in
    /// flight; else (no writer of this key, or only transaction `me`, whose own changes it
    /// sees) the row the page holds.
    fn read_committed<R>(
        &self,
        pk: &[u8],
        me: Option<u64>,
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        let pending = &self.inner.txn.pending;
        let (table, stripe) = (self.inner.id, PendingWriters::stripe(self.inner.id, pk));
        let s = &self.inner.schema;
        let mut f = Some(f);
        let mut last = None;
        // Where the row was last found: tried first, and dropped for the index at any failure.
        let mut hint = self.inner.hints.get(pk);
        for _ in 0..READ_RETRIES {
            let before = pending.load(stripe);
            let located = match hint.take() {
                Some(rid) => Some((rid, true)),
                None => self.rid_for(pk)?.map(|rid| (rid, false)),
            };
            let Some((rid, hinted)) = located else {
                // No entry, and no writer entered or left meanwhile: a committed absence.
                if PendingWriters::idle(before) && pending.load(stripe) == before {
                    return Ok(None);
                }
                // Another writer has the key in flight (a delete, or an insert): its
                // before-image is the committed state. No image, and no writer entered or
                // left since the lookup began: the absence is committed. Else look again.
                match pending.before_image_at(stripe, table, pk, me) {
                    (Some(image), _) => {
                        return Ok(image.map(|row| {
                            (f.take().expect("called once"))(RowView::with_layout(
                                s,
                                &self.inner.layout,
                                &row,
                            ))
                        }))
                    }
                    (None, now) if now == before => return Ok(None),
                    (None, _) => {
                        std::thread::yield_now();
                        continue;
                    }
                }
            };
            let seen = self.inner.heap.read(rid, |b| {
                let v = self.view(b);
                if !self.has_pk(&v, pk)? {
                    return Ok(None);
                }
                // Under the page latch: a writer that changed this row entered first, so an
                // idle stripe, or no other writer of this key, means the row is committed.
                let f = f.take().expect("called once");
                if !PendingWriters::idle(pending.load(stripe)) {
                    if let Some(image) = pending.before_image(stripe, table, pk, me) {
                        return Ok(Some(image.map(|row| f(self.view(&row)))));
                    }
                }
                Ok::<_, Error>(Some(Some(f(v))))
            });
            match seen.and_then(|s| s.transpose()) {
                Ok(Some(Some(r))) => {
                    if !hinted {
                        self.inner.hints.put(pk, rid);
                    }
                    return Ok(r);
                }
                // A hint that failed in any way (the row moved or went, its page is no longer
                // this heap's): the index decides, at once.
                _ if hinted => continue,
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            // The row moved or went since its entry was read: look again.
            last = Some(rid);
            std::thread::yield_now();
        }
        Err(match last {
            Some(rid) => self.dangling(rid),
            None => Error::ResourceExhausted(format!(
                "table `{}`: a read of a key found no row {READ_RETRIES} times while writers of its \
                 stripe kept entering and leaving; retry",
                self.inner.name
            )),
        })
    }

    /// Reads the rows of several primary keys: calls `f(i, row)` for each `keys[i]` in turn,
    /// with `None` for a key that has no row. Each read is exactly a [`Table::read`] (it sees
    /// only committed data); it is faster when many rows are in memory, because the lookups of
    /// up to [`READ_BATCH`] keys are interleaved so that their cache misses overlap: the index
    /// leaves of the keys without a row-id hint (see [`Options::row_hint_bytes`]) are located
    /// in one descent in key order (each inner node fixed once per batch) and prefetched, then
    /// every key's row, then the rows are read.
    ///
    /// [`Options::row_hint_bytes`]: crate::Options::row_hint_bytes
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
        let released = self.read_many_staged(keys, f, &mut || {})?;
        self.inner.txn.wait_released_upto(released)
    }

    /// [`Table::read_many`], calling `between_stages` after each batch has located its leaves
    /// and before it reads them (tests change the table there). Returns the highest commit
    /// LSN released early by writers of the keys' stripes, loaded after the rows were seen:
    /// what the reads must wait for before they are acknowledged (see `acknowledged_key`).
    fn read_many_staged(
        &self,
        keys: &[Value],
        mut f: impl FnMut(usize, Option<RowView<'_>>),
        between_stages: &mut dyn FnMut(),
    ) -> Result<u64> {
        let mut released = 0;
        self.inner.txn.check_open()?;
        self.check_poisoned()?;
        let pending = &self.inner.txn.pending;
        let mut pks = Vec::with_capacity(READ_BATCH * 8);
        let mut ends = [0usize; READ_BATCH];
        let mut rids = [None; READ_BATCH];
        let mut leaves = [None; READ_BATCH];
        // Each key's row-id hint, if any.
        let mut hinted = [None; READ_BATCH];
        let mut stripes = [0usize; READ_BATCH];
        // Each key's stripe value before its index lookup (`None`: a writer was in flight).
        let mut before = [None; READ_BATCH];
        for (b, batch) in keys.chunks(READ_BATCH).enumerate() {
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
            // 1. The leaves of all keys, in key order: one descent for the batch, each inner
            //    node fixed once.
            let n = batch.len();
            let mut keys: [&[u8]; READ_BATCH] = [&[]; READ_BATCH];
            for (j, k) in keys[..n].iter_mut().enumerate() {
                *k = pk(j);
                stripes[j] = PendingWriters::stripe(self.inner.id, k);
            }
            // Keys whose rows have a hint skip the index (stage 3 checks the hint like any row
            // id, and reads a key whose hint failed in full).
            let mut order = [0usize; READ_BATCH];
            let mut unhinted = 0;
            for j in 0..n {
                hinted[j] = self.inner.hints.get(keys[j]);
                if hinted[j].is_none() {
                    order[unhinted] = j;
                    unhinted += 1;
                }
            }
            order[..unhinted].sort_unstable_by_key(|&j| keys[j]);
            if unhinted > 0 {
                self.inner.primary.locate_leaves(&keys[..n], &order[..unhinted], &mut leaves[..n])?;
            }
            between_stages();
            // 2. The row ids, and a prefetch of every row. A key with a writer in flight is
            //    left to stage 3's full read.
            for (j, (leaf, rid)) in leaves.iter().zip(rids.iter_mut()).take(batch.len()).enumerate() {
                let v = pending.load(stripes[j]);
                before[j] = PendingWriters::idle(v).then_some(v);
                *rid = None;
                if before[j].is_none() {
                    continue;
                }
                if let Some(r) = hinted[j] {
                    *rid = Some(r);
                    self.inner.heap.prefetch_row(r);
                    continue;
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
            // 3. The rows, each seen only if committed (as `read_committed` checks). A key
            //    that had a writer in flight, whose row moved since its entry was read, or
            //    whose absence a writer may have caused, is read again in full.
            for j in 0..batch.len() {
                let i = b * READ_BATCH + j;
                let done = match (before[j], rids[j]) {
                    (None, _) => false,
                    (Some(v), None) => {
                        let unchanged = pending.load(stripes[j]) == v;
                        if unchanged {
                            f(i, None);
                        }
                        unchanged
                    }
                    (Some(_), Some(rid)) => {
                        let found = self.inner.heap.read(rid, |bytes| {
                            let v = self.view(bytes);
                            let ok =
                                self.has_pk(&v, pk(j))? && PendingWriters::idle(pending.load(stripes[j]));
                            if ok {
                                f(i, Some(v));
                            }
                            Ok::<_, Error>(ok)
                        });
                        match found.and_then(|r| r.transpose()) {
                            Ok(Some(true)) => {
                                if hinted[j].is_none() {
                                    self.inner.hints.put(pk(j), rid);
                                }
                                true
                            }
                            // A failed hint: read in full below, through the index.
                            _ if hinted[j].is_some() => false,
                            Err(e) => return Err(e),
                            Ok(_) => false,
                        }
                    }
                };
                if !done && self.read_committed(pk(j), None, |v| f(i, Some(v)))?.is_none() {
                    f(i, None);
                }
            }
            for &s in &stripes[..batch.len()] {
                released = released.max(pending.released(s));
            }
        }
        Ok(released)
    }

    /// True if the row `v` has primary key `pk` (encoded); an error for a row that does not
    /// match the schema.
    fn has_pk(&self, v: &RowView<'_>, pk: &[u8]) -> Result<bool> {
        let s = &self.inner.schema;
        Ok(match s.columns[s.primary_key].ty {
            ColumnType::Int
            | ColumnType::Int32
            | ColumnType::Int16
            | ColumnType::Timestamp
            | ColumnType::Date => crate::btree::key::encode_i64(v.try_int(s.primary_key)?) == pk,
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
        let mut f = Some(f);
        let mut last = None;
        for _ in 0..READ_RETRIES {
            let Some(rid) = self.rid_for(pk)? else { return Ok(None) };
            let got = self.inner.heap.read(rid, |b| {
                let v = self.view(b);
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

    /// The row with primary key `key`, decoded, as last committed (like [`Table::read`]); a
    /// row that does not match the schema is [`Error::Corruption`].
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
            let v = self.view(&old_row);
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
            // A move the heap could not reverse: the row is in two slots.
            Err(Error::Poisoned(why)) => {
                self.poison(format!("{why}; reopen the database"));
                return Err(Error::Poisoned(format!("table `{}`: {why}", self.inner.name)));
            }
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
            let v = self.view(&old_row);
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

    /// Full table scan, in primary-key order, until `f` returns `Ok(false)`: exactly
    /// [`Table::range`] over every key. Each row committed when the scan passes its key is
    /// passed once, as last committed; the scan takes no lock and never waits for a writer
    /// (see the module documentation). `f` may modify the table (no latch is held while it
    /// runs), but rows it changes may be seen again under their new keys.
    pub fn scan(&self, f: impl FnMut(RowView<'_>) -> Result<bool>) -> Result<()> {
        self.range(Bound::Unbounded, Bound::Unbounded, f)
    }

    /// Runs `f` on the committed image of each row that a heap-order scan passes (see
    /// `read_committed`):
    /// checked under the page latch, the row itself while no other writer of its key is in
    /// flight, else the key's before-image (nothing for an insert in flight).
    fn scan_committed(
        &self,
        scan: impl FnOnce(&mut dyn FnMut(RowId, &[u8]) -> Result<bool>) -> Result<()>,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        let s = &self.inner.schema;
        let (table, pending) = (self.inner.id, &self.inner.txn.pending);
        let mut key = Vec::with_capacity(16);
        scan(&mut |_, b| {
            let v = self.view(b);
            // Under the page latch: no writer of this table in flight means every change the
            // page shows is committed (writers enter before their first page change), so the
            // row is passed without encoding its key.
            if !pending.any_in_flight(table) {
                return f(v);
            }
            key.clear();
            s.try_primary_key_of(&v, &mut key)?;
            // Under the page latch: a writer that changed this row entered its stripe first.
            let stripe = PendingWriters::stripe(table, &key);
            if !PendingWriters::idle(pending.load(stripe)) {
                if let Some(image) = pending.before_image(stripe, table, &key, None) {
                    return image.map_or(Ok(true), |row| f(self.view(&row)));
                }
            }
            f(v)
        })
    }

    /// Part `part` of `parts` of a full scan: a contiguous share of the heap pages, so `parts`
    /// threads together scan the table once (seed 004's parallel scan). The row's page is
    /// latched while `f` runs: `f` must not modify this table.
    ///
    /// Isolation: each row passed is committed (a row with a change in flight is passed as
    /// its before-image, a row inserted by a transaction in flight is skipped), but in heap
    /// order a row that moves while the scan runs (an update that grows it, a delete or its
    /// rollback) may be passed twice or missed: for an exact scan under concurrent writers use
    /// [`Table::scan`] or [`Table::range`], which go in key order.
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
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.scan_partition_after(part, parts, read_ahead, || (), f)
    }

    /// Like [`Table::scan_partition_ahead`], first starting the reads of the partition's first
    /// read-ahead window and calling `before` while they are in flight: a parallel query's
    /// worker that must wait for the others, or build what its scan probes, before its scan
    /// starts keeps the device busy meanwhile. `before` is called exactly once: before the
    /// first row is passed, or, when the scan fails before that, before the error returns.
    pub fn scan_partition_after(
        &self,
        part: usize,
        parts: usize,
        read_ahead: u64,
        before: impl FnOnce(),
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        let mut before = Some(before);
        let r = self.scan_partition_started(
            part,
            parts,
            read_ahead,
            &mut || {
                if let Some(b) = before.take() {
                    b()
                }
            },
            f,
        );
        if let Some(b) = before {
            b()
        }
        r
    }

    /// The scan of [`Table::scan_partition_after`]: calls `started` once the partition's first
    /// reads are in flight, or not at all when it fails before that.
    fn scan_partition_started(
        &self,
        part: usize,
        parts: usize,
        read_ahead: u64,
        started: &mut dyn FnMut(),
        f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.inner.txn.check_open()?;
        if parts == 0 || part >= parts {
            return Err(Error::InvalidArgument(format!("scan partition {part} of {parts}")));
        }
        let range = scan_partition_pages(self.inner.heap.pages()?, part, parts);
        let start = || {
            started();
            Ok(())
        };
        self.acknowledged(
            self.scan_committed(|visit| self.inner.heap.scan_pages_after(range, read_ahead, start, visit), f),
        )
    }

    /// Rows with primary key within the bounds, in key order, until `f` returns `Ok(false)`.
    /// Exact without locks or waiting: each row committed when the range passes its key is
    /// passed once, as last committed (its before-image while another transaction has a
    /// change of it in flight), and no uncommitted row is passed. Rows are read after their
    /// index leaf is released, so no latch is held while `f` runs.
    pub fn range(
        &self,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        self.check_poisoned()?;
        self.inner.txn.check_open()?;
        let walk = self.primary_range(lo, hi)?.for_each_committed(self, None, |pk, found| {
            Ok(self.read_found(pk, found, None, &mut f)?.transpose()?.unwrap_or(true))
        });
        self.acknowledged(walk)
    }

    /// The committed row of key `pk` as a committed walk found it: its before-image, or the
    /// row its entry points at, read under the page latch while no writer of its stripe is in
    /// flight and the slot still holds the key (else as [`Table::read`] reads it).
    fn read_found<R>(
        &self,
        pk: &[u8],
        found: scan::Found<'_>,
        me: Option<u64>,
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        let rid = match found {
            scan::Found::Image(row) => return Ok(Some(f(self.view(row)))),
            scan::Found::Entry(rid) => rid,
        };
        let pending = &self.inner.txn.pending;
        let stripe = PendingWriters::stripe(self.inner.id, pk);
        let mut f = Some(f);
        let fast = self.inner.heap.read(rid, |b| {
            let v = self.view(b);
            // Under the page latch: the key's row, and no writer of its stripe in flight.
            if self.has_pk(&v, pk)? && PendingWriters::idle(pending.load(stripe)) {
                return Ok(Some((f.take().expect("called once"))(v)));
            }
            Ok::<_, Error>(None)
        })?;
        if let Some(r) = fast.transpose()?.flatten() {
            return Ok(Some(r));
        }
        self.read_committed(pk, me, f.take().expect("not called"))
    }

    /// All rows whose column indexed by `index` equals `value`, in primary-key order: the
    /// committed rows, each once, without a lock or a wait (a row with a change in flight as
    /// its before-image).
    pub fn lookup(&self, index: &str, value: &Value) -> Result<Vec<Vec<Value>>> {
        self.inner.txn.check_open()?;
        let s = &self.inner.schema;
        let pos = s
            .indexes
            .iter()
            .position(|ix| ix.name == index)
            .ok_or_else(|| Error::NotFound(format!("index `{index}` on table `{}`", self.inner.name)))?;
        let col = s.indexes[pos].column;
        let mut rows = Vec::new();
        let keys = self.secondary_range(pos, Bound::Included(value), Bound::Included(value))?;
        keys.for_each_committed(self, None, |pk, found| {
            // A row read through its entry may have changed since its leaf was read: keep it
            // only if it still has the value looked for.
            let row = self.read_found(pk, found, None, |r| match r.try_value(col) {
                Ok(v) if v == *value => Some(r.try_values()),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })?;
            if let Some(Some(r)) = row {
                rows.push(r?);
            }
            Ok(true)
        })?;
        self.acknowledged(Ok(rows))
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
            let v = self.view(b);
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

/// The heap pages part `part` of `parts` of a partitioned scan reads
/// ([`Table::scan_partition`]) in a heap of `pages` pages: a contiguous share of
/// `pages.div_ceil(parts)` pages (the last part shorter, parts past the end empty). The parts
/// together cover every page once.
pub fn scan_partition_pages(pages: u64, part: usize, parts: usize) -> std::ops::Range<u64> {
    let per = pages.div_ceil(parts.max(1) as u64);
    let start = (part as u64 * per).min(pages);
    start..(start + per).min(pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::MemStorage;
    use crate::{BufferSize, Database, Options};

    /// Table `t` (an integer key, a value of up to 900 bytes) in a database in memory opened
    /// with `opts`, 4 KiB pages and no log.
    fn table_in_memory(opts: Options) -> (Database, Table) {
        let opts = Options { table_page_size: 4096, index_page_size: 4096, wal: false, ..opts };
        let db = Database::open_with_storage(Arc::new(MemStorage::new()), opts).unwrap();
        let t = db
            .create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Bytes(900))]))
            .unwrap();
        (db, t)
    }

    /// A row of [`table_in_memory`]'s table with a value of `len` bytes.
    fn row(id: i64, len: usize) -> [Value; 2] {
        [Value::Int(id), Value::Bytes(vec![id as u8; len])]
    }

    /// Row-id hints gone stale in every way a row leaves its id — moved by an update that
    /// grows it, deleted, deleted and inserted again, its slot taken by another key's row —
    /// still give each key's current row (or its absence) through `read`, `read_many` and a
    /// read-committed transaction, and each read replaces a stale hint by the row's new id.
    /// With hints off (`row_hint_bytes` 0) the answers are the same and no hint is kept.
    #[test]
    fn stale_row_hints_are_checked_and_replaced() {
        for hint_bytes in [64 << 20, 0] {
            let (db, t) = table_in_memory(Options { row_hint_bytes: hint_bytes, ..Options::default() });
            let pk = |id: i64| crate::btree::key::encode_i64(id);
            let n = 200i64;
            for id in 0..n {
                t.insert(&row(id, 8)).unwrap();
            }
            for id in 0..n {
                assert_eq!(t.read(&Value::Int(id), |r| r.bytes(1).len()).unwrap(), Some(8));
                let want = if hint_bytes > 0 { t.rid_for(&pk(id)).unwrap() } else { None };
                assert_eq!(t.inner.hints.get(&pk(id)), want, "key {id}: a read leaves a hint");
            }
            let before: Vec<Option<RowId>> = (0..n).map(|id| t.inner.hints.get(&pk(id))).collect();
            // Expected row length per key (None: no row).
            let mut expect: Vec<Option<usize>> = vec![Some(8); n as usize];
            // The last key's slot goes to another key: its hint points at that key's row.
            assert!(t.delete(&Value::Int(n - 1)).unwrap());
            t.insert(&row(5000, 8)).unwrap();
            expect[n as usize - 1] = None;
            for id in 0..n - 1 {
                match id % 4 {
                    0 => {
                        assert!(t.update(&row(id, 900)).unwrap());
                        expect[id as usize] = Some(900);
                    }
                    1 => {
                        assert!(t.delete(&Value::Int(id)).unwrap());
                        expect[id as usize] = None;
                    }
                    2 => {
                        assert!(t.delete(&Value::Int(id)).unwrap());
                        t.insert(&row(id, 50)).unwrap();
                        expect[id as usize] = Some(50);
                    }
                    _ => {}
                }
            }
            if hint_bytes > 0 {
                assert_eq!(before[n as usize - 1], t.rid_for(&pk(5000)).unwrap(), "the freed slot is reused");
                let stale = (0..n).filter(|&id| before[id as usize] != t.rid_for(&pk(id)).unwrap()).count();
                assert!(stale >= 100, "{stale} hints went stale");
            }
            let len_of = |r: RowView<'_>| r.bytes(1).len();
            for id in 0..n {
                let e = expect[id as usize];
                assert_eq!(t.read(&Value::Int(id), len_of).unwrap(), e, "read of key {id}");
                let mut tx = db.begin_with(crate::Isolation::ReadCommitted);
                assert_eq!(tx.read(&t, &Value::Int(id), len_of).unwrap(), e, "transaction read of key {id}");
                tx.commit().unwrap();
                let now = if hint_bytes > 0 && e.is_some() { t.rid_for(&pk(id)).unwrap() } else { None };
                if e.is_some() {
                    assert_eq!(t.inner.hints.get(&pk(id)), now, "key {id}: the read replaced its hint");
                }
            }
            // read_many, with the hints just replaced and with the stale ones put back.
            let keys: Vec<Value> = (0..n).chain([5000]).map(Value::Int).collect();
            for round in 0..2 {
                if round == 1 && hint_bytes > 0 {
                    for id in 0..n {
                        if let Some(r) = before[id as usize] {
                            t.inner.hints.put(&pk(id), r);
                        }
                    }
                }
                let mut got = vec![None; keys.len()];
                t.read_many(&keys, |i, r| got[i] = r.map(len_of)).unwrap();
                for id in 0..n {
                    assert_eq!(got[id as usize], expect[id as usize], "read_many of key {id}, round {round}");
                }
                assert_eq!(got[n as usize], Some(8), "read_many of key 5000, round {round}");
            }
            assert_eq!(t.check_integrity().unwrap(), expect.iter().flatten().count() as u64 + 1);
        }
    }

    /// Between a batch's stages, the leaves it located split (new keys around its own) and its
    /// rows move to other heap pages (they grow): every row is still found, and is the right
    /// one.
    #[test]
    fn read_many_survives_splits_and_moves_between_its_stages() {
        let (_db, t) = table_in_memory(Options {
            table_buffer: BufferSize::Bytes(16 * 4096),
            index_buffer: BufferSize::Bytes(1024 * 4096),
            ..Options::default()
        });
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
