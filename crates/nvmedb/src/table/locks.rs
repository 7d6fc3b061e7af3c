//! The locks a change takes: the key's physical lock (striped mutexes), the unique-value
//! locks, and the auto-commit and explicit-transaction wrappers around a change.
//!
//! Owns: `Table::key_lock`, `Table::auto_commit`, `Table::in_txn` and the lock space of
//! unique-index values. Invariants: a change of a primary key runs under the key's physical
//! lock, so the row and its index entries change together with respect to other writers;
//! two writers of one value of a unique index are serialised by an exclusive lock on it.

use super::{RowId, Table, Value, KEY_LOCK_STRIPES};
use crate::buffer::mtr::take_annotation;
use crate::error::Result;
use crate::txn::pending::BeforeImage;
use crate::txn::LockMode;
use crate::util::sync::MutexExt;
use crate::wal::engine::TxnOp;
use std::sync::Arc;

/// A row read by a transaction that holds its key's exclusive lock and has not changed it
/// since: where it is and its bytes (the key's committed row). The change that follows takes
/// them for its before-image and its undo record instead of looking for the row again: under
/// the lock no other writer changes, moves or deletes the row, and a row id stays valid until
/// its row changes.
#[derive(Debug, Clone)]
pub(crate) struct LockedRow {
    /// Where the row is.
    pub(crate) rid: RowId,
    /// Its bytes.
    pub(crate) row: Arc<[u8]>,
}

/// Added to a table id to name the lock space of its unique-index values.
const UNIQUE_LOCK_SPACE: u32 = 0x8000_0000;

impl Table {
    pub(super) fn key_lock(&self, pk: &[u8]) -> std::sync::MutexGuard<'_, ()> {
        let h = crate::util::fnv1a64(pk);
        self.inner.key_locks[(h % KEY_LOCK_STRIPES as u64) as usize].locked()
    }

    /// Runs one change as its own transaction ([`TxnShared::auto_commit`]): the key's
    /// exclusive lock and its unique values' locks, the key's committed row published for
    /// lock-free readers, the change under the key's physical lock, a durable commit.
    ///
    /// [`TxnShared::auto_commit`]: crate::txn::TxnShared::auto_commit
    /// `row`: the row an insert (`insert`) or an update makes, whose new index entries are
    /// checked against the range locks of serializable scans before and after the change
    /// (`None`: a delete, which makes none).
    pub(super) fn auto_commit<R>(
        &self,
        pk: &[u8],
        row: Option<&[Value]>,
        insert: bool,
        body: impl FnOnce(u64, bool, &mut Option<TxnOp>) -> Result<R>,
    ) -> Result<R> {
        let locks = &self.inner.txn.locks;
        let check = |txn: u64, before: Option<&[u8]>| -> Result<()> {
            let Some(row) = row.filter(|_| locks.ranges_live(self.inner.id)) else { return Ok(()) };
            for (index, key) in self.new_entries(row, pk, insert, before)? {
                locks.check_insert(txn, self.inner.id, index, &key)?;
            }
            Ok(())
        };
        self.inner.txn.auto_commit(
            self.inner.id,
            pk,
            |txn| row.map_or(Ok(()), |r| self.lock_unique_values(txn, r)),
            || self.before_image(pk),
            check,
            || self.key_lock(pk),
            body,
            |op| self.restore(op),
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
    pub(super) fn in_txn<R>(
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
    pub(super) fn lock_unique_values(&self, txn: u64, row: &[Value]) -> Result<()> {
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

    /// Encoded primary key of `key` (for lock keys).
    pub(crate) fn lock_key(&self, key: &Value) -> Result<Vec<u8>> {
        self.pk_bytes(key)
    }
}
