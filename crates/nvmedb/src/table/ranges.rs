//! What serializable transactions' key-range locks need from a table (see `txn::lock_range`):
//! the index entries a change adds, which an insert-intention check looks up, and whether a
//! row found through a secondary index has its entry at the position it was found at.
//!
//! Owns: [`Table::new_entries`] and [`Table::has_index_entry`]. Invariant: the keys are the
//! ones `write.rs` puts in the indexes (primary key; value component ++ primary key).

use super::{RowView, Table, Value};
use crate::error::Result;

impl Table {
    /// The index entries a change that leaves the row with primary key `pk` (encoded) as
    /// `row` adds, as `(index, key)` (index 0: the primary index, `n + 1`: secondary `n`): for
    /// an insert (`insert`) the primary entry and every secondary one; for an update, the
    /// secondary entries whose value differs from `before`, the row's bytes before the change
    /// (every secondary entry when it is unknown).
    pub(crate) fn new_entries(
        &self,
        row: &[Value],
        pk: &[u8],
        insert: bool,
        before: Option<&[u8]>,
    ) -> Result<Vec<(u32, Vec<u8>)>> {
        let s = &self.inner.schema;
        let mut out = Vec::new();
        if insert {
            out.push((0, pk.to_vec()));
        }
        let old = before.filter(|_| !insert).map(|b| RowView::new(s, b));
        for (n, ix) in s.indexes.iter().enumerate() {
            let v = &row[ix.column];
            if let Some(old) = &old {
                if old.try_value(ix.column)? == *v {
                    continue;
                }
            }
            out.push((n as u32 + 1, s.secondary_key_bytes(ix.column, v, pk)));
        }
        Ok(out)
    }

    /// True if `row` (primary key `pk`, encoded) has the entry `key` in secondary index `pos`:
    /// a serializable scan, which passes a row in flight at both its committed and its new
    /// position, takes it at exactly one of them once its writer is done.
    pub(crate) fn has_index_entry(
        &self,
        pos: usize,
        row: &RowView<'_>,
        pk: &[u8],
        key: &[u8],
    ) -> Result<bool> {
        let s = &self.inner.schema;
        let col = s.indexes[pos].column;
        Ok(s.secondary_key_bytes(col, &row.try_value(col)?, pk) == key)
    }
}
