//! Explicit transactions.
//!
//! Owns: [`Transaction`]: strict two-phase locking through the database's lock manager
//! (shared locks on keys read, exclusive on keys written, all released after commit or
//! abort), an in-memory undo list, and commit/abort. With a log, commit appends a commit
//! record and waits until it is durable (group commit shares the flush); abort undoes the
//! changes newest first through the tables (the undo is logged like any change) and logs an
//! abort record. A transaction dropped without commit is aborted.
//!
//! Guarantees: transactions that lock individual keys (point reads and writes, the lab's
//! workloads) are serializable in commit order; a deadlock or lock timeout is a typed error
//! (`Error::is_retryable`) after which the caller aborts and retries. Range scans take no
//! range locks (phantoms are possible).

use super::Database;
use crate::error::Result;
use crate::table::{RowView, Table, TxnShared, Value};
use crate::txn::LockMode;
use crate::wal::engine::TxnOp;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A transaction; see the module documentation.
pub struct Transaction {
    shared: Arc<TxnShared>,
    id: u64,
    undo: Vec<(Table, TxnOp)>,
    done: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Transaction({}, {} changes)", self.id, self.undo.len())
    }
}

impl Database {
    /// Starts a transaction.
    pub fn begin(&self) -> Transaction {
        // A log short of space (the fast log's conventional ring) asks for a checkpoint; take
        // it here, before this transaction holds anything.
        self.txn_shared().checkpoint_if_wanted();
        let shared = self.txn_shared().clone();
        shared.explicit_active.fetch_add(1, Ordering::AcqRel);
        let id = shared.begin();
        Transaction { shared, id, undo: Vec::new(), done: false }
    }
}

impl Transaction {
    /// The transaction's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    fn lock(&self, table: &Table, key: &Value, mode: LockMode) -> Result<Vec<u8>> {
        let k = table.lock_key(key)?;
        self.shared.locks.lock(self.id, table.id(), &k, mode)?;
        Ok(k)
    }

    /// Reads the row with primary key `key` under a shared lock.
    pub fn read<R>(
        &mut self,
        table: &Table,
        key: &Value,
        f: impl FnOnce(RowView<'_>) -> R,
    ) -> Result<Option<R>> {
        self.shared.check_open()?;
        let k = self.lock(table, key, LockMode::Shared)?;
        table.txn_read(&k, f)
    }

    /// Reads and decodes the row with primary key `key` under a shared lock.
    pub fn get(&mut self, table: &Table, key: &Value) -> Result<Option<Vec<Value>>> {
        self.read(table, key, |r| r.try_values())?.transpose()
    }

    /// Reads the row for update (exclusive lock at once, avoiding S→X upgrade deadlocks).
    pub fn get_for_update(&mut self, table: &Table, key: &Value) -> Result<Option<Vec<Value>>> {
        self.shared.check_open()?;
        let k = self.lock(table, key, LockMode::Exclusive)?;
        table.txn_read(&k, |r| r.try_values())?.transpose()
    }

    /// Inserts a row.
    pub fn insert(&mut self, table: &Table, row: &[Value]) -> Result<()> {
        let shared = self.shared.clone();
        let _open = shared.enter()?;
        let pk = table.pk_of(row)?;
        self.lock(table, pk, LockMode::Exclusive)?;
        if let Some(op) = table.txn_insert(self.id, row)? {
            self.undo.push((table.clone(), op));
        }
        Ok(())
    }

    /// Replaces the row with the same primary key; false if there is none.
    pub fn update(&mut self, table: &Table, row: &[Value]) -> Result<bool> {
        let shared = self.shared.clone();
        let _open = shared.enter()?;
        let pk = table.pk_of(row)?;
        self.lock(table, pk, LockMode::Exclusive)?;
        let (changed, op) = table.txn_update(self.id, row)?;
        if let Some(op) = op {
            self.undo.push((table.clone(), op));
        }
        Ok(changed)
    }

    /// Sets one integer column of the row with primary key `key`; false if there is none.
    pub fn update_int(&mut self, table: &Table, key: &Value, column: usize, value: i64) -> Result<bool> {
        let Some(mut row) = self.get_for_update(table, key)? else { return Ok(false) };
        if column >= row.len() {
            return Err(crate::Error::InvalidArgument(format!(
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
        let _open = shared.enter()?;
        self.lock(table, key, LockMode::Exclusive)?;
        let (changed, op) = table.txn_delete(self.id, key)?;
        if let Some(op) = op {
            self.undo.push((table.clone(), op));
        }
        Ok(changed)
    }

    /// Commits: durable when this returns (with a log), then releases the locks.
    pub fn commit(mut self) -> Result<()> {
        // Closed: nothing can be made durable any more; the drop rolls the changes back.
        let shared = self.shared.clone();
        let _open = shared.enter()?;
        self.done = true;
        let r = match &self.shared.log {
            Some(log) if !self.undo.is_empty() => log.commit(self.id),
            Some(log) => {
                log.forget(self.id);
                Ok(())
            }
            None => Ok(()),
        };
        self.finish();
        r
    }

    /// Undoes the changes (newest first), logs the abort, releases the locks. Once the
    /// database is closed this fails with `Closed` and changes nothing (recovery undoes the
    /// transaction at the next open).
    pub fn abort(mut self) -> Result<()> {
        self.shared.check_open()?;
        self.done = true;
        let r = self.roll_back();
        self.finish();
        r
    }

    fn roll_back(&mut self) -> Result<()> {
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

    fn finish(&mut self) {
        self.shared.locks.release_all(self.id);
        self.shared.explicit_active.fetch_sub(1, Ordering::AcqRel);
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
            self.finish();
        }
    }
}
