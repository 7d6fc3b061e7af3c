//! A transaction's range scans: by primary key ([`Transaction::range`]), by secondary index
//! ([`Transaction::index_range`], [`Transaction::index_keys`]), locked row by row or, under
//! read committed, unlocked.
//!
//! Invariants (see the parent module on phantoms): every row a locking scan hands out is locked
//! in the scan's mode first and stays locked until the transaction ends; a serializable scan
//! holds a key-range lock on exactly the keys it read.

use super::{Transaction, LOCKED_ROWS, SCAN_BATCH};
use crate::error::Result;
use crate::table::{KeyBatch, KeyRange, RowView, Serial, Table, Value};
use crate::txn::LockMode;
use crate::Isolation;
use std::ops::Bound;

impl Transaction {
    /// Visits the rows whose primary key lies within `lo..hi`, in key order, until `f`
    /// returns `Ok(false)`. Each row is locked in `mode` before `f` sees it (`Exclusive` for
    /// rows the transaction will change: no S→X upgrade, so no upgrade deadlock) and the lock
    /// is kept until the transaction ends. The rows visited are those committed when the scan
    /// passed them: a row another transaction is deleting (or moving out of the range) is
    /// visited and waited for, then skipped if that transaction committed, seen if it rolled
    /// back; a row another transaction is inserting is not visited. No range lock is taken
    /// (see the module documentation on phantoms).
    ///
    /// ```
    /// # use nvmedb::{ColumnType, Database, Options, Schema, Value};
    /// # use nvmedb::txn::LockMode;
    /// # use std::ops::Bound;
    /// # fn main() -> nvmedb::Result<()> {
    /// # let db = Database::open_with_storage(std::sync::Arc::new(nvmedb::io::MemStorage::new()), Options::default())?;
    /// let t = db.create_table("queue", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]))?;
    /// for id in [5, 3, 9] {
    ///     t.insert(&[Value::Int(id), Value::Int(id * 10)])?;
    /// }
    /// // Take the oldest entry at or after 4 off the queue.
    /// let mut tx = db.begin();
    /// let mut oldest = None;
    /// tx.range(&t, Bound::Included(&Value::Int(4)), Bound::Unbounded, LockMode::Exclusive, |row| {
    ///     oldest = Some(row.int(0));
    ///     Ok(false)
    /// })?;
    /// assert_eq!(oldest, Some(5));
    /// tx.delete(&t, &Value::Int(5))?;
    /// tx.commit()?;
    /// # Ok(()) }
    /// ```
    pub fn range(
        &mut self,
        table: &Table,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        mode: LockMode,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        let keys = table.primary_range(lo, hi)?;
        let (me, lock) = (self.id, self.scan_lock(mode));
        // Rows locked exclusively are kept for the changes that follow (see `locked_rows`).
        let mut kept = Vec::new();
        let scanned = self.locked_scan(table, keys, lock, |_, pk| {
            let seen = match lock {
                Some(LockMode::Exclusive) => match table.txn_read_locked(pk, &mut f)? {
                    Some((seen, locked)) => {
                        // Only the last ones are kept: a long scan holds no copy of every row.
                        if kept.len() == LOCKED_ROWS {
                            kept.remove(0);
                        }
                        kept.push((pk.to_vec(), locked));
                        Some(seen)
                    }
                    None => None,
                },
                Some(_) => table.txn_read(pk, &mut f)?,
                None => table.txn_read_committed(me, pk, &mut f)?,
            };
            Ok(seen.transpose()?.unwrap_or(true))
        });
        for (pk, locked) in kept {
            self.keep_locked_row(table.id(), pk, locked);
        }
        scanned
    }

    /// The lock a scan takes on each row it visits in `mode`: none for a read-committed
    /// transaction's shared reads, which read each row as last committed (its own changes
    /// included), as its point reads do, and so never wait for a writer nor make one wait.
    fn scan_lock(&self, mode: LockMode) -> Option<LockMode> {
        (self.isolation == Isolation::Serializable || mode != LockMode::Shared).then_some(mode)
    }

    /// Visits the rows whose value in the column of secondary index `index` lies within
    /// `lo..hi`, in (value, primary key) order, until `f` returns `Ok(false)`. Each row is
    /// locked in `mode` (by its primary key, as point operations lock it) before `f` sees it,
    /// and is re-checked after the lock is granted: a row whose value left the range meanwhile
    /// is skipped. For a `Bytes` column, the rows whose value starts with a prefix `p` are
    /// `Included(p)..Excluded(p')`, where `p'` is `p` with its last byte incremented. No range
    /// lock is taken.
    ///
    /// ```
    /// # use nvmedb::{ColumnType, Database, Options, Schema, Value};
    /// # use nvmedb::txn::LockMode;
    /// # use std::ops::Bound;
    /// # fn main() -> nvmedb::Result<()> {
    /// # let db = Database::open_with_storage(std::sync::Arc::new(nvmedb::io::MemStorage::new()), Options::default())?;
    /// let schema = Schema::new(vec![("id", ColumnType::Int), ("name", ColumnType::Bytes(32))])
    ///     .with_index("by_name", "name")?;
    /// let t = db.create_table("people", schema)?;
    /// for (id, name) in [(1, "SMITH ANN"), (2, "JONES BOB"), (3, "SMITH AL")] {
    ///     t.insert(&[Value::Int(id), Value::from(name)])?;
    /// }
    /// let mut tx = db.begin();
    /// let mut smiths = vec![];
    /// let (lo, hi) = (Value::from("SMITH "), Value::from("SMITH!"));
    /// tx.index_range(&t, "by_name", Bound::Included(&lo), Bound::Excluded(&hi), LockMode::Shared, |row| {
    ///     smiths.push(row.int(0));
    ///     Ok(true)
    /// })?;
    /// assert_eq!(smiths, [3, 1]); // by name: "SMITH AL" < "SMITH ANN"
    /// tx.commit()?;
    /// # Ok(()) }
    /// ```
    pub fn index_range(
        &mut self,
        table: &Table,
        index: &str,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        mode: LockMode,
        mut f: impl FnMut(RowView<'_>) -> Result<bool>,
    ) -> Result<()> {
        let pos = table.index_position(index)?;
        let keys = table.secondary_range(pos, lo, hi)?;
        let (me, lock) = (self.id, self.scan_lock(mode));
        let serial = lock.is_some() && self.isolation == Isolation::Serializable;
        self.locked_scan(table, keys, lock, |ik, pk| {
            let visit = |row: RowView<'_>| {
                // A serializable scan passes a row in flight at each of its positions: it
                // takes it at the one it has.
                let here = !serial || table.has_index_entry(pos, &row, pk, ik)?;
                if here && table.row_in_index_range(pos, &row, lo, hi) {
                    f(row).map(Some)
                } else {
                    Ok(None)
                }
            };
            let seen = match lock {
                Some(_) => table.txn_read(pk, visit)?,
                None => table.txn_read_committed(me, pk, visit)?,
            };
            Ok(seen.transpose()?.flatten().unwrap_or(true))
        })
    }

    /// The encoded primary keys of the rows whose value in the column of secondary index
    /// number `index` lies within `lo..hi`, in index order, for the caller to read (with
    /// [`Transaction::read_encoded`]). A serializable transaction locks each row in `mode` and
    /// holds a key-range lock on the range, as [`Transaction::index_range`] does; a
    /// read-committed one walks the index without locks ([`Table::index_keys`]).
    pub fn index_keys(
        &mut self,
        table: &Table,
        index: usize,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
        mode: LockMode,
    ) -> Result<Vec<Vec<u8>>> {
        self.shared.check_open()?;
        let mut out = Vec::new();
        if self.isolation != Isolation::Serializable || index >= table.schema().indexes.len() {
            table.index_keys(index, lo, hi, |pk| {
                out.push(pk.to_vec());
                Ok(true)
            })?;
            return Ok(out);
        }
        let keys = table.secondary_range(index, lo, hi)?;
        self.locked_scan(table, keys, Some(mode), |ik, pk| {
            let here = table.txn_read(pk, |row| -> Result<bool> {
                Ok(table.has_index_entry(index, &row, pk, ik)?
                    && table.row_in_index_range(index, &row, lo, hi))
            })?;
            if here.transpose()?.unwrap_or(false) {
                out.push(pk.to_vec());
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Walks `keys` a batch at a time (no latch held between batches), locks each primary key
    /// in `mode` (if any), and calls `visit(index key, primary key)` until it returns
    /// `Ok(false)`. A serializable transaction's scan also holds a key-range lock on what it
    /// read ([`Transaction::serial_scan`]).
    fn locked_scan(
        &mut self,
        table: &Table,
        mut keys: KeyRange,
        mode: Option<LockMode>,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        match mode {
            Some(mode) if self.isolation == Isolation::Serializable => {
                return self.serial_scan(table, keys, mode, visit);
            }
            _ => {}
        }
        let mut batch = KeyBatch::default();
        loop {
            keys.next_batch(table, Some(self.id), SCAN_BATCH, &mut batch)?;
            if batch.is_empty() {
                return Ok(());
            }
            for i in 0..batch.len() {
                let pk = batch.get(i).1;
                if let Some(mode) = mode {
                    self.shared.locks.lock(self.id, table.id(), pk, mode)?;
                }
                if !visit(pk, pk)? {
                    return Ok(());
                }
            }
        }
    }

    /// [`Transaction::locked_scan`] of a serializable transaction: takes a key-range lock on
    /// the range, covering each leaf's keys before they are read and lowered to the last key
    /// taken when `visit` stops the scan; visits the keys other transactions have in flight
    /// at their new positions too, and waits for their writers (`txn::lock_range`).
    fn serial_scan(
        &mut self,
        table: &Table,
        mut keys: KeyRange,
        mode: LockMode,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let locks = &self.shared.locks;
        let (index, lo) = keys.lock_space();
        let cover = locks.lock_range(self.id, table.id(), index, lo)?;
        let serial = Serial { locks, cover: &cover };
        let mut batch = KeyBatch::default();
        loop {
            keys.next_batch_serial(table, self.id, SCAN_BATCH, serial, &mut batch)?;
            if batch.is_empty() {
                return Ok(());
            }
            for i in 0..batch.len() {
                let (ik, pk) = batch.get(i);
                locks.lock(self.id, table.id(), pk, mode)?;
                if !visit(ik, pk)? {
                    locks.cover_back(&cover, ik);
                    return Ok(());
                }
            }
        }
    }
}
