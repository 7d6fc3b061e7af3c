//! Enforcement of FOREIGN KEY constraints, in the changing statement's transaction.
//!
//! Owns: [`check_parents`] (a child row written must reference an existing parent row) and
//! [`parent_changed`] (a parent row deleted, or its referenced key changed: RESTRICT / NO
//! ACTION refuse, CASCADE deletes or re-keys the children, SET NULL clears their columns,
//! recursively). Locking, so that no orphan can commit: the child's writer reads the parent
//! key under its **exclusive** lock (the engine's read-committed transactions take no shared
//! row locks, so the lock PostgreSQL takes as FOR KEY SHARE is taken exclusive here: two
//! transactions inserting children of one parent take turns), and a parent's writer holds its
//! row's exclusive lock before it looks for children. So either the child's writer locks the
//! parent first, and the parent's writer waits for its commit and then sees the child; or the
//! parent's writer goes first, and the child's writer waits and then finds no parent (23503).
//! Invariant: children are found by a read of committed rows (the transaction's own changes
//! included) and each one is re-read under its exclusive lock, and re-checked, before it is
//! changed.

use super::modify::{fill_keys, values_of};
use super::{ExecCtx, Row};
use crate::catalog::{Catalog, TableInfo};
use crate::constraint::{missing_parent, still_referenced, FkAction, ForeignKey};
use crate::error::{code, SqlError, SqlResult};
use crate::types::Datum;
use nvmedb::txn::LockMode;
use nvmedb::{Transaction, Value};
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

/// How rows of a table are found by the values of a unique key.
#[derive(Debug, Clone)]
pub(crate) enum UniqueKey {
    /// The one-column primary key.
    Primary,
    /// A multi-column key (index into [`TableInfo::composite`]); found by its encoding, as the
    /// primary key or through the unique index on its hidden column.
    Composite(usize),
    /// A one-column unique index (its name).
    Index(String),
}

/// The unique key of `t` whose columns are exactly `cols` (in any order); `None` when there
/// is none (a foreign key may only reference a primary key or unique constraint: 42830).
pub(crate) fn unique_key(t: &TableInfo, cols: &[usize]) -> Option<UniqueKey> {
    let mut want = cols.to_vec();
    want.sort_unstable();
    if let [c] = cols {
        if *c == t.pk && !t.hidden_rowid && !t.composite.iter().any(|k| k.def.primary) {
            return Some(UniqueKey::Primary);
        }
        if let Some((name, _, _)) = t.indexes.iter().find(|(_, ix, u)| *u && ix == c) {
            return Some(UniqueKey::Index(name.clone()));
        }
    }
    t.composite
        .iter()
        .position(|k| {
            let mut kc = k.columns.clone();
            kc.sort_unstable();
            k.def.unique && kc == want
        })
        .map(UniqueKey::Composite)
}

fn engine(e: nvmedb::Error, t: &TableInfo) -> SqlError {
    SqlError::from_engine(e, Some(&t.name))
}

fn tx<'c>(cx: &'c mut ExecCtx<'_>) -> SqlResult<&'c mut Transaction> {
    cx.txn.as_deref_mut().ok_or_else(|| SqlError::new(code::INTERNAL_ERROR, "a change outside a transaction"))
}

fn catalog<'c>(cx: &ExecCtx<'c>) -> SqlResult<&'c Catalog> {
    cx.catalog.ok_or_else(|| SqlError::new(code::INTERNAL_ERROR, "a foreign key checked without the catalog"))
}

/// `(a, b)=(1, 2)`: a key as PostgreSQL's messages show it.
fn key_text(t: &TableInfo, cols: &[usize], row: &[Datum]) -> String {
    let names: Vec<&str> = cols.iter().map(|&c| t.columns[c].name.as_str()).collect();
    let vals: Vec<String> = cols.iter().map(|&c| row[c].to_text(t.columns[c].ty)).collect();
    format!("({})=({})", names.join(", "), vals.join(", "))
}

/// Engine positions of `names` in `t` (the catalog checked them when the key was made).
fn positions(t: &TableInfo, names: &[String]) -> SqlResult<Vec<usize>> {
    names.iter().map(|n| t.column(n)).collect()
}

/// Reads, under its exclusive lock, whether `t` has a row whose key `key` (columns `cols`, in
/// the foreign key's order) holds `vals` (datums in that order).
fn locked_lookup(
    cx: &mut ExecCtx<'_>,
    t: &TableInfo,
    key: &UniqueKey,
    cols: &[usize],
    vals: &[Datum],
) -> SqlResult<bool> {
    let mut row = vec![Value::Null; t.columns.len()];
    for (&c, d) in cols.iter().zip(vals) {
        let col = &t.columns[c];
        row[c] = match d.clone().to_value(col.ty, &col.name) {
            Ok(v) => v,
            // A value the parent's column cannot hold is in no parent row.
            Err(_) => return Ok(false),
        };
    }
    let probe = |tx: &mut Transaction, index: &str, v: &Value| -> nvmedb::Result<bool> {
        let mut found = false;
        tx.index_range(&t.table, index, Bound::Included(v), Bound::Included(v), LockMode::Exclusive, |_| {
            found = true;
            Ok(false)
        })?;
        Ok(found)
    };
    let tx = tx(cx)?;
    let found = match key {
        UniqueKey::Primary => tx.read_for_update(&t.table, &row[t.pk], |_| ()).map(|r| r.is_some()),
        UniqueKey::Index(name) => probe(tx, name, &row[cols[0]]),
        UniqueKey::Composite(i) => {
            let k = &t.composite[*i];
            let Some(enc) = crate::meta::encode_key(t.table.schema(), &k.columns, &row) else {
                return Ok(false);
            };
            let enc = Value::Bytes(enc);
            if k.def.primary {
                tx.read_for_update(&t.table, &enc, |_| ()).map(|r| r.is_some())
            } else {
                let index = t.indexes.iter().find(|ix| ix.1 == k.column).map(|ix| ix.0.clone());
                match index {
                    Some(ix) => probe(tx, &ix, &enc),
                    None => {
                        return Err(SqlError::new(code::INTERNAL_ERROR, "a unique key without its index"))
                    }
                }
            }
        }
    };
    found.map_err(|e| engine(e, t))
}

/// Checks that every foreign key of `t` that `row` (a full engine row about to be written)
/// sets to a non-NULL key finds its parent row, locking it; `old` is the row it replaces
/// (keys it leaves unchanged are not checked again).
pub(crate) fn check_parents(
    cx: &mut ExecCtx<'_>,
    t: &TableInfo,
    row: &[Datum],
    old: Option<&[Datum]>,
) -> SqlResult<()> {
    for (fk, cols) in t.meta.fks.iter().zip(&t.fk_columns) {
        if cols.iter().any(|&c| row[c].is_null()) {
            continue;
        }
        if old.is_some_and(|o| cols.iter().all(|&c| same(&o[c], &row[c]))) {
            continue;
        }
        let parent: Arc<TableInfo> = catalog(cx)?.get(&fk.parent)?;
        let pcols = positions(&parent, &fk.parent_columns)?;
        let vals: Vec<Datum> = cols.iter().map(|&c| row[c].clone()).collect();
        // A row that references itself.
        if parent.name == t.name && pcols.iter().zip(&vals).all(|(&p, v)| same(&row[p], v)) {
            continue;
        }
        let key = unique_key(&parent, &pcols).ok_or_else(|| no_unique(fk))?;
        if !locked_lookup(cx, &parent, &key, &pcols, &vals)? {
            return Err(missing_parent(&t.name, fk, &key_text(t, cols, row)));
        }
    }
    Ok(())
}

/// 42830: the referenced columns are no longer a unique key.
pub(crate) fn no_unique(fk: &ForeignKey) -> SqlError {
    SqlError::new(
        code::INVALID_FOREIGN_KEY,
        format!("there is no unique constraint matching given keys for referenced table \"{}\"", fk.parent),
    )
}

fn same(a: &Datum, b: &Datum) -> bool {
    match (a.is_null(), b.is_null()) {
        (true, true) => true,
        (false, false) => a.compare(b) == Some(Ordering::Equal),
        _ => false,
    }
}

/// Primary keys of the rows of `child` whose columns `cols` hold `vals`, read as committed
/// (the transaction's own changes included): through the primary key or an index on the one
/// column when there is one, else by a scan of the table.
fn find_children(
    cx: &mut ExecCtx<'_>,
    child: &TableInfo,
    cols: &[usize],
    vals: &[Datum],
) -> SqlResult<Vec<Value>> {
    let pk = child.pk;
    let mut keys = Vec::new();
    let matches = |r: &nvmedb::RowView<'_>| {
        cols.iter().zip(vals).all(|(&c, v)| same(&Datum::from_row(r, c, child.columns[c].ty), v))
    };
    let mut visit = |r: nvmedb::RowView<'_>| -> nvmedb::Result<bool> {
        if matches(&r) {
            keys.push(r.value(pk));
        }
        Ok(true)
    };
    let probe = match cols {
        [c] => {
            let col = &child.columns[*c];
            match vals[0].clone().to_value(col.ty, &col.name) {
                Ok(v) => Some((*c, v)),
                Err(_) => return Ok(vec![]),
            }
        }
        _ => None,
    };
    let tx = tx(cx)?;
    let r = match &probe {
        Some((c, v)) if *c == pk && !child.hidden_rowid => {
            tx.range(&child.table, Bound::Included(v), Bound::Included(v), LockMode::Shared, &mut visit)
        }
        Some((c, v)) if child.index_on(*c).is_some() => {
            let name = &child.indexes[child.index_on(*c).expect("checked")].0;
            tx.index_range(
                &child.table,
                name,
                Bound::Included(v),
                Bound::Included(v),
                LockMode::Shared,
                &mut visit,
            )
        }
        _ => tx.range(&child.table, Bound::Unbounded, Bound::Unbounded, LockMode::Shared, &mut visit),
    };
    r.map_err(|e| engine(e, child))?;
    Ok(keys)
}

/// A parent row `old` of `t` was deleted (`new` None) or replaced by `new`: applies the
/// ON DELETE / ON UPDATE action of every foreign key that references it and whose key
/// changed.
pub(crate) fn parent_changed(
    cx: &mut ExecCtx<'_>,
    t: &TableInfo,
    old: &[Datum],
    new: Option<&[Datum]>,
) -> SqlResult<()> {
    let refs = catalog(cx)?.referencing(&t.name);
    for (child, i) in refs {
        let fk = &child.meta.fks[i];
        let pcols = positions(t, &fk.parent_columns)?;
        if pcols.iter().any(|&c| old[c].is_null()) {
            continue;
        }
        if new.is_some_and(|n| pcols.iter().all(|&c| same(&old[c], &n[c]))) {
            continue;
        }
        let vals: Vec<Datum> = pcols.iter().map(|&c| old[c].clone()).collect();
        let ccols = child.fk_columns[i].clone();
        let keys = find_children(cx, &child, &ccols, &vals)?;
        if keys.is_empty() {
            continue;
        }
        let action = if new.is_some() { fk.on_update } else { fk.on_delete };
        if matches!(action, FkAction::Restrict | FkAction::NoAction) {
            return Err(still_referenced(&t.name, &child.name, fk, &key_text(t, &pcols, old)));
        }
        for k in keys {
            change_child(cx, &child, &ccols, &vals, &k, action, new.map(|n| (n, pcols.as_slice())))?;
        }
    }
    Ok(())
}

/// CASCADE or SET NULL on one child row (key `k`), re-read under its exclusive lock and
/// skipped if it no longer references `vals`. `new`: the parent's new row and its key columns
/// (an ON UPDATE).
fn change_child(
    cx: &mut ExecCtx<'_>,
    child: &TableInfo,
    ccols: &[usize],
    vals: &[Datum],
    k: &Value,
    action: FkAction,
    new: Option<(&[Datum], &[usize])>,
) -> SqlResult<()> {
    let all: Vec<usize> = (0..child.columns.len()).collect();
    let row: Option<Row> = tx(cx)?
        .read_for_update(&child.table, k, |v| super::scan::decode(&v, child, &all))
        .map_err(|e| engine(e, child))?;
    let Some(row) = row else { return Ok(()) };
    if !ccols.iter().zip(vals).all(|(&c, v)| same(&row[c], v)) {
        return Ok(());
    }
    if action == FkAction::Cascade && new.is_none() {
        tx(cx)?.delete(&child.table, k).map_err(|e| engine(e, child))?;
        child.stats.note_rows(-1);
        return parent_changed(cx, child, &row, None);
    }
    let mut changed = row.clone();
    for (j, &c) in ccols.iter().enumerate() {
        changed[c] = match (action, new) {
            (FkAction::Cascade, Some((n, pcols))) => n[pcols[j]].clone(),
            _ => Datum::Null,
        };
    }
    fill_keys(child, &mut changed)?;
    let values = values_of(child, &changed)?;
    let tx = tx(cx)?;
    if values[child.pk] != *k {
        tx.delete(&child.table, k).map_err(|e| engine(e, child))?;
        tx.insert(&child.table, &values).map_err(|e| engine(e, child))?;
    } else {
        tx.update(&child.table, &values).map_err(|e| engine(e, child))?;
    }
    parent_changed(cx, child, &row, Some(&changed))
}
