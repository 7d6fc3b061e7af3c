//! Writes: insert, update and delete of a row with its index entries, in auto-commit or in
//! an explicit transaction, and the undo of a logged operation (`Table::restore`).
//!
//! Owns: the order of each change's steps (heap, primary, secondaries), the compensation of
//! completed steps after a failure ([`Undo`]), the logical undo record each change carries
//! (`TxnOp`), and poisoning a table whose failed change could not be reversed.
//! Invariants: every change runs under the key's striped physical lock; a failure part-way
//! reverses the steps done, newest first (a step that cannot be reversed poisons the table);
//! a row that moves logs where it went before its index entries are re-pointed; `restore` is
//! idempotent.

use super::{files, LockedRow, RowId, Table, Value};
use crate::buffer::mtr::{annotate_next_commit, take_annotation};
use crate::error::{Error, Result};
use crate::wal::engine::TxnOp;
use smallvec::{smallvec, SmallVec};

/// Attempts at a compensating step before the table is poisoned.
const UNDO_ATTEMPTS: usize = 16;

/// A compensating action that reverses one completed step of a multi-structure change.
enum Undo<'a> {
    HeapDelete(RowId),
    PrimaryDelete(&'a [u8]),
    PrimaryInsert(&'a [u8], RowId),
    SecondaryDelete(usize, Vec<u8>),
    SecondaryInsert(usize, Vec<u8>, RowId),
}

/// The completed steps of one change, newest last (a few: no allocation for them).
type Undos<'a> = SmallVec<[Undo<'a>; 4]>;

impl Table {
    /// Validates and encodes a row for a change: `(row bytes, encoded primary key)`.
    fn prepare_row(&self, row: &[Value]) -> Result<(Vec<u8>, Vec<u8>)> {
        self.check_poisoned()?;
        let s = &self.inner.schema;
        let mut bytes = Vec::new();
        s.encode_row(&self.inner.name, row, &mut bytes)?;
        if bytes.len() > crate::table::heap::MAX_ROW_BYTES {
            return Err(crate::table::heap::row_too_large(&self.inner.name, s, Some(row), bytes.len()));
        }
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
        self.auto_commit(&pk, Some(row), true, |txn, log, rec| {
            self.insert_locked(txn, log, rec, row, &pk, &bytes, false)
        })
    }

    /// `absent`: the caller found the key without a row under its exclusive lock (so the
    /// primary index is not searched for it again).
    #[allow(clippy::too_many_arguments)]
    fn insert_locked(
        &self,
        txn: u64,
        log: bool,
        rec: &mut Option<TxnOp>,
        row: &[Value],
        pk: &[u8],
        bytes: &[u8],
        absent: bool,
    ) -> Result<()> {
        let s = &self.inner.schema;
        if !absent && self.rid_for(pk)?.is_some() {
            return Err(Error::AlreadyExists(format!(
                "table `{}`: primary key {:?}",
                self.inner.name, row[s.primary_key]
            )));
        }
        for n in 0..s.indexes.len() {
            self.check_unique(n, &row[s.indexes[n].column], pk)?;
        }
        let table = self.inner.id;
        let rid = self.inner.heap.insert_annotated(bytes, &mut |rid| {
            let rid = u64::from_le_bytes(rid.to_bytes());
            let op = TxnOp {
                txn,
                table,
                pk: pk.to_vec(),
                rid,
                before: None,
                // Undo of an insert needs the row only to find the secondary entries it made
                // (the heap insert, logged in this record, holds it for redo anyway).
                after: (!s.indexes.is_empty()).then(|| bytes.to_vec()),
                patch: None,
            };
            Self::record_op(log, rec, op);
        })?;
        let mut undo: Undos<'_> = smallvec![Undo::HeapDelete(rid)];
        if let Err(e) = self.inner.primary.insert(pk, &rid.to_bytes()) {
            return Err(self.roll_back(undo, e));
        }
        undo.push(Undo::PrimaryDelete(pk));
        for (n, (ix, tree)) in s.indexes.iter().zip(&self.inner.secondaries).enumerate() {
            let k = s.secondary_key_bytes(ix.column, &row[ix.column], pk);
            if let Err(e) = tree.insert(&k, &rid.to_bytes()) {
                return Err(self.roll_back(undo, e));
            }
            undo.push(Undo::SecondaryDelete(n, k));
        }
        Ok(())
    }

    /// Replaces the row with the same primary key. Returns false if there is none. On an I/O
    /// error the steps already done are reversed.
    pub fn update(&self, row: &[Value]) -> Result<bool> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.auto_commit(&pk, Some(row), false, |txn, log, rec| {
            self.update_locked(txn, log, rec, row, &pk, bytes, None)
        })
    }

    /// `bytes`: the row encoded (it becomes the undo record's row after). `known`: the row as
    /// its writer read it under the key's exclusive lock (not looked for again).
    #[allow(clippy::too_many_arguments)]
    fn update_locked(
        &self,
        txn: u64,
        log: bool,
        rec: &mut Option<TxnOp>,
        row: &[Value],
        pk: &[u8],
        bytes: Vec<u8>,
        known: Option<&LockedRow>,
    ) -> Result<bool> {
        let s = &self.inner.schema;
        let Some((rid, old_row)) = self.located(pk, known)? else { return Ok(false) };
        let old_values: Vec<Value> = {
            let v = self.view(&old_row);
            s.indexes.iter().map(|ix| v.try_value(ix.column)).collect::<Result<_>>()?
        };
        for (n, old) in old_values.iter().enumerate() {
            if *old != row[s.indexes[n].column] {
                self.check_unique(n, &row[s.indexes[n].column], pk)?;
            }
        }
        let op = TxnOp {
            txn,
            table: self.inner.id,
            pk: pk.to_vec(),
            rid: u64::from_le_bytes(rid.to_bytes()),
            before: Some(old_row),
            after: Some(bytes),
            patch: None,
        };
        Self::record_op(log, rec, op);
        let op = rec.as_ref().expect("the update's undo record was just kept");
        let bytes = op.after.as_deref().expect("an update's undo record has its row after");
        // 1. New secondary entries first (pointing at the current row), so a failure later
        //    only has to remove them.
        let mut undo = Undos::new();
        let mut changed = Vec::new();
        for (n, ((ix, tree), old)) in
            s.indexes.iter().zip(&self.inner.secondaries).zip(&old_values).enumerate()
        {
            if *old != row[ix.column] {
                let k = s.secondary_key_bytes(ix.column, &row[ix.column], pk);
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
                    pk: pk.to_vec(),
                    rid: u64::from_le_bytes(new.to_bytes()),
                    before: op.before.clone(),
                    after: Some(bytes.to_vec()),
                    patch: None,
                };
                annotate_next_commit(op.encode());
            }
        };
        let new_rid = match self.inner.heap.update(rid, bytes, &mut moved) {
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
            self.inner.primary.upsert(pk, &new_rid.to_bytes()).map_err(poison)?;
            for (ix, tree) in s.indexes.iter().zip(&self.inner.secondaries) {
                let k = s.secondary_key_bytes(ix.column, &row[ix.column], pk);
                tree.upsert(&k, &new_rid.to_bytes()).map_err(poison)?;
            }
        }
        // 4. Old secondary entries go last.
        for &n in &changed {
            let k = s.secondary_key_bytes(s.indexes[n].column, &old_values[n], pk);
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
        self.auto_commit(&pk, None, false, |txn, log, rec| self.delete_locked(txn, log, rec, &pk, None))
    }

    fn delete_locked(
        &self,
        txn: u64,
        log: bool,
        rec: &mut Option<TxnOp>,
        pk: &[u8],
        known: Option<&LockedRow>,
    ) -> Result<bool> {
        let s = &self.inner.schema;
        let Some((rid, old_row)) = self.located(pk, known)? else { return Ok(false) };
        let old_values: Vec<Value> = {
            let v = self.view(&old_row);
            s.indexes.iter().map(|ix| v.try_value(ix.column)).collect::<Result<_>>()?
        };
        let rid_bytes = u64::from_le_bytes(rid.to_bytes());
        let op = TxnOp {
            txn,
            table: self.inner.id,
            pk: pk.to_vec(),
            rid: rid_bytes,
            before: Some(old_row),
            after: None,
            patch: None,
        };
        Self::record_op(log, rec, op);
        let mut undo = Undos::new();
        for (n, (tree, old)) in self.inner.secondaries.iter().zip(&old_values).enumerate() {
            let k = s.secondary_key_bytes(s.indexes[n].column, old, pk);
            if let Err(e) = tree.delete(&k) {
                return Err(self.roll_back(undo, e));
            }
            undo.push(Undo::SecondaryInsert(n, k, rid));
        }
        if let Err(e) = self.inner.primary.delete(pk) {
            return Err(self.roll_back(undo, e));
        }
        undo.push(Undo::PrimaryInsert(pk, rid));
        match self.inner.heap.delete(rid, |_| {}) {
            Ok(true) => Ok(true),
            Ok(false) => Err(self.roll_back(undo, self.dangling(rid))),
            Err(e) => Err(self.roll_back(undo, e)),
        }
    }

    /// Inserts a row into a table nobody else can see yet (a rebuild's new table): no lock,
    /// no undo list; the change is logged as part of `txn`, which the caller commits once.
    pub(crate) fn bulk_insert(&self, txn: u64, row: &[Value]) -> Result<()> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.in_txn(txn, &pk, |txn, log, rec| self.insert_locked(txn, log, rec, row, &pk, &bytes, false))?;
        Ok(())
    }

    /// Explicit-transaction insert (the caller holds the key's exclusive lock; `absent`: it
    /// found the key without a row under that lock).
    pub(crate) fn txn_insert(&self, txn: u64, row: &[Value], absent: bool) -> Result<Option<TxnOp>> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.lock_unique_values(txn, row)?;
        Ok(self
            .in_txn(txn, &pk, |txn, log, rec| self.insert_locked(txn, log, rec, row, &pk, &bytes, absent))?
            .1)
    }

    /// Explicit-transaction update. `known`: the row as the transaction read it under the
    /// key's exclusive lock, unchanged since (see [`LockedRow`]).
    pub(crate) fn txn_update(
        &self,
        txn: u64,
        row: &[Value],
        known: Option<&LockedRow>,
    ) -> Result<(bool, Option<TxnOp>)> {
        let (bytes, pk) = self.prepare_row(row)?;
        self.lock_unique_values(txn, row)?;
        self.in_txn(txn, &pk, |txn, log, rec| self.update_locked(txn, log, rec, row, &pk, bytes, known))
    }

    /// Explicit-transaction delete; `known` as for [`Table::txn_update`].
    pub(crate) fn txn_delete(
        &self,
        txn: u64,
        key: &Value,
        known: Option<&LockedRow>,
    ) -> Result<(bool, Option<TxnOp>)> {
        self.check_poisoned()?;
        let pk = self.pk_bytes(key)?;
        self.in_txn(txn, &pk, |txn, log, rec| self.delete_locked(txn, log, rec, &pk, known))
    }

    /// The row id and a copy of the row of key `pk` for its change: `known`'s when the
    /// transaction read it under the key's exclusive lock, else looked for
    /// ([`Table::locate_for_change`]).
    fn located(&self, pk: &[u8], known: Option<&LockedRow>) -> Result<Option<(RowId, Vec<u8>)>> {
        match known {
            Some(k) => Ok(Some((k.rid, k.row.to_vec()))),
            None => self.locate_for_change(pk),
        }
    }

    fn apply_undo(&self, u: &Undo<'_>) -> Result<()> {
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
    fn roll_back(&self, undo: Undos<'_>, err: Error) -> Error {
        for u in undo.iter().rev() {
            if !(0..UNDO_ATTEMPTS).any(|_| self.apply_undo(u).is_ok()) {
                let why = format!("a failed change could not be reversed after: {err}; reopen the database");
                self.poison(why.clone());
                return Error::Poisoned(format!("table `{}`: {why}", self.inner.name));
            }
        }
        err
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
}
