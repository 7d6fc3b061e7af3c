//! Index checks: unique values, entry sizes, and the integrity check of a table's heap and
//! indexes.
//!
//! Owns: [`Table::check_integrity`] and the checks a change passes before its first step.
//! Invariants: a unique index never holds one value for two primary keys (checked under the
//! value's exclusive lock, see `locks.rs`); no change starts with an index entry larger than
//! the index allows.

use super::{RowId, Table, Value};
use crate::error::{Error, Result};
use std::ops::Bound;

impl Table {
    /// Fails with `AlreadyExists` if unique index `n` holds `value` for a row other than `pk`.
    pub(super) fn check_unique(&self, n: usize, value: &Value, pk: &[u8]) -> Result<()> {
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

    pub(super) fn check_index_entries(&self, row: &[Value], pk: &[u8]) -> Result<()> {
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
