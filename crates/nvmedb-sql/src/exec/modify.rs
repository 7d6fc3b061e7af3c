//! INSERT, UPDATE and DELETE: the row changes of a statement, in its transaction.
//!
//! Owns: [`insert`] (with ON CONFLICT on the primary key or a unique index) and [`modify`]. An UPDATE or DELETE first runs its input query in its
//! transaction with every row it reads locked exclusively (so it sees its own transaction's
//! rows, and two statements changing the same row never both hold it shared and wait for each
//! other to upgrade), collecting the candidates before changing any, so a change that moves a
//! row (a new primary key) cannot make the same statement see it again; then it re-reads each
//! candidate and re-checks the WHERE conjuncts on it. Invariant: every engine
//! row written has been converted to the column types (range, length, NOT NULL) first, and
//! the table's statistics count the rows added and removed.

use super::scan::{read_row, Key};
use super::{run_initplans, run_query, ExecCtx, Row};
use crate::catalog::TableInfo;
use crate::error::{code, SqlError, SqlResult};
use crate::plan::{InsertPlan, InsertSource, ModifyPlan};
use crate::types::Datum;
use nvmedb::txn::LockMode;
use nvmedb::{Transaction, Value};

fn engine(e: nvmedb::Error, t: &TableInfo) -> SqlError {
    SqlError::from_engine(e, Some(&t.name))
}

/// The engine's error for a change of row `row`, with a duplicate key reported as PostgreSQL
/// does: the constraint's name, and its columns' values in the detail.
fn change_error(e: nvmedb::Error, t: &TableInfo, row: &[Datum]) -> SqlError {
    let msg = e.to_string();
    let err = engine(e, t);
    if err.code != code::UNIQUE_VIOLATION {
        return err;
    }
    // The engine names a unique index (`unique index `name``) or the primary key.
    let index = msg.split("unique index `").nth(1).and_then(|r| r.split('`').next());
    let (name, cols): (String, Vec<usize>) = match index {
        Some(ix) => match t.composite.iter().find(|k| k.def.name == ix) {
            Some(k) => (ix.to_string(), k.columns.clone()),
            None => (ix.to_string(), t.indexes.iter().filter(|i| i.0 == ix).map(|i| i.1).collect()),
        },
        None => match t.composite.iter().find(|k| k.def.primary) {
            Some(k) => (k.def.name.clone(), k.columns.clone()),
            None => (format!("{}_pkey", t.name), vec![t.pk]),
        },
    };
    let names: Vec<&str> = cols.iter().map(|&c| t.columns[c].name.as_str()).collect();
    let vals: Vec<String> = cols.iter().map(|&c| row[c].to_text(t.columns[c].ty)).collect();
    let key = format!("({})=({})", names.join(", "), vals.join(", "));
    SqlError::new(
        code::UNIQUE_VIOLATION,
        format!("duplicate key value violates unique constraint \"{name}\": key {key} already exists"),
    )
    .with_detail(format!("Key {key} already exists."))
    .with_table(&t.name)
}

/// Fills the hidden columns of the table's multi-column keys in `row` from its key columns
/// (see [`TableInfo::composite`]).
pub(crate) fn fill_keys(t: &TableInfo, row: &mut [Datum]) -> SqlResult<()> {
    if t.composite.is_empty() {
        return Ok(());
    }
    let schema = t.table.schema();
    let mut vals = vec![Value::Null; row.len()];
    for k in &t.composite {
        for &c in &k.columns {
            let col = &t.columns[c];
            vals[c] = row[c].clone().to_value(col.ty, &col.name).map_err(|e| e.with_table(&t.name))?;
        }
        let key = crate::meta::encode_key(schema, &k.columns, &vals);
        if let Some(b) = key.as_ref().filter(|b| b.len() > crate::meta::KEY_BYTES as usize) {
            return Err(SqlError::new(
                code::STRING_DATA_RIGHT_TRUNCATION,
                format!(
                    "the key \"{}\" of relation \"{}\" takes {} bytes, more than {}",
                    k.def.name,
                    t.name,
                    b.len(),
                    crate::meta::KEY_BYTES
                ),
            ));
        }
        row[k.column] = key.map_or(Datum::Null, Datum::Bytes);
    }
    Ok(())
}

/// PostgreSQL's error for a NULL stored in NOT NULL column `column` of `table` (23502).
pub(crate) fn not_null_violation(table: &str, column: &str) -> SqlError {
    SqlError::new(
        code::NOT_NULL_VIOLATION,
        format!("null value in column \"{column}\" of relation \"{table}\" violates not-null constraint"),
    )
    .with_table(table)
    .with_column(column)
}

/// Converts a full row of datums into engine values (checked against the column types).
pub(crate) fn values_of(t: &TableInfo, row: &[Datum]) -> SqlResult<Vec<Value>> {
    row.iter()
        .zip(&t.columns)
        .map(|(d, c)| {
            if d.is_null() && !c.nullable {
                return Err(not_null_violation(&t.name, &c.name));
            }
            d.clone().to_value(c.ty, &c.name).map_err(|e| e.with_table(&t.name))
        })
        .collect()
}

fn tx<'c>(cx: &'c mut ExecCtx<'_>) -> SqlResult<&'c mut Transaction> {
    cx.txn.as_deref_mut().ok_or_else(|| SqlError::new(code::INTERNAL_ERROR, "a change outside a transaction"))
}

/// 23514 when a CHECK constraint of `t` (bound over its engine row) is false for `row`
/// (NULL passes, as in PostgreSQL).
fn check_row(
    cx: &ExecCtx<'_>,
    t: &TableInfo,
    checks: &[(String, crate::expr::Expr)],
    row: &[Datum],
) -> SqlResult<()> {
    for (name, e) in checks {
        if matches!(e.eval(row, &cx.eval)?, Datum::Bool(false)) {
            return Err(crate::constraint::check_failed(&t.name, name));
        }
    }
    Ok(())
}

/// Runs an INSERT in the context's transaction; the row count and RETURNING rows.
pub fn insert(cx: &mut ExecCtx<'_>, p: &InsertPlan) -> SqlResult<(u64, Vec<Row>)> {
    let t = &p.table;
    let rows: Vec<Row> = match &p.source {
        InsertSource::Values(rows) => {
            run_initplans(cx, &p.initplans)?;
            rows.iter()
                .map(|r| r.iter().map(|e| e.eval(&[], &cx.eval)).collect::<SqlResult<Row>>())
                .collect::<SqlResult<_>>()?
        }
        InsertSource::Query(q) => run_query(cx, q)?,
    };
    let (mut n, mut inserted) = (0, 0);
    let mut ret = Vec::new();
    // DO UPDATE: the primary keys of the rows this statement inserted or updated; a proposed
    // row that conflicts with one of them is refused (21000), as PostgreSQL does.
    let mut touched = std::collections::HashSet::new();
    for vals in rows {
        let mut row = vec![Datum::Null; t.columns.len()];
        if t.hidden_rowid {
            row[0] = Datum::Int(t.next_rowid());
        }
        for (&c, v) in p.targets.iter().zip(vals) {
            row[c] = v;
        }
        for (c, e) in &p.defaults {
            row[*c] = e.eval(&[], &cx.eval)?;
        }
        fill_keys(t, &mut row)?;
        let mut values = values_of(t, &row)?;
        check_row(cx, t, &p.checks, &row)?;
        let action = match &p.on_conflict {
            None => {
                super::fk::check_parents(cx, t, &row, None)?;
                tx(cx)?.insert(&t.table, &values).map_err(|e| change_error(e, t, &row))?;
                Upsert::Inserted
            }
            Some(oc) => upsert(cx, t, oc, &p.checks, &row, &values, &touched)?,
        };
        match action {
            Upsert::Inserted => inserted += 1,
            Upsert::Skip => continue,
            Upsert::Updated(v) => values = v,
        }
        if p.on_conflict.as_ref().is_some_and(|oc| oc.update) {
            touched.insert(values[t.pk].clone());
        }
        n += 1;
        if !p.returning.is_empty() {
            let row: Row = values.iter().zip(&t.columns).map(|(v, c)| value_datum(v, c.ty)).collect();
            ret.push(p.returning.iter().map(|e| e.eval(&row, &cx.eval)).collect::<SqlResult<_>>()?);
        }
    }
    t.stats.note_rows(inserted);
    Ok((n, ret))
}

/// What ON CONFLICT made of a proposed row.
enum Upsert {
    /// No row had its arbiter keys' values: it was inserted.
    Inserted,
    /// DO NOTHING, or DO UPDATE whose WHERE was false.
    Skip,
    /// The existing row was updated to these values.
    Updated(Vec<Value>),
}

/// How many times an upsert looks again for the conflicting row after its insert met a
/// duplicate of an arbiter index (a writer of the value committed in between). The failed
/// insert holds the value's lock, so the second look finds the row unless it was deleted.
const UPSERT_ATTEMPTS: usize = 8;

/// The unique index a duplicate-key error of the engine names (`unique index `name``).
fn violated_index(e: &nvmedb::Error) -> Option<String> {
    if !matches!(e, nvmedb::Error::AlreadyExists(_)) {
        return None;
    }
    let msg = e.to_string();
    msg.split("unique index `").nth(1).and_then(|r| r.split('`').next()).map(str::to_string)
}

/// The row that has the proposed row's value of an arbiter key, read under its exclusive
/// lock. The primary key is locked exclusively even when no row has it, so two sessions
/// upserting one key take turns; a unique index is scanned for the value under exclusive row
/// locks (a row whose value changed before its lock was granted is passed over).
fn conflicting_row(
    cx: &mut ExecCtx<'_>,
    t: &TableInfo,
    arbiters: &[crate::plan::Arbiter],
    values: &[Value],
) -> SqlResult<Option<Vec<Value>>> {
    use std::ops::Bound::Included;
    let tx = tx(cx)?;
    for a in arbiters {
        match *a {
            crate::plan::Arbiter::PrimaryKey => {
                if let Some(old) = tx.get_for_update(&t.table, &values[t.pk]).map_err(|e| engine(e, t))? {
                    return Ok(Some(old));
                }
            }
            crate::plan::Arbiter::Index(n) => {
                let v = &values[t.indexes[n].1];
                if v.is_null() {
                    continue;
                }
                // Each row is locked exclusively and read as it is now (this transaction's own
                // rows included), and passed only if it still has the value.
                let mut found = None;
                tx.index_range(
                    &t.table,
                    &t.indexes[n].0,
                    Included(v),
                    Included(v),
                    LockMode::Exclusive,
                    |r| {
                        found = Some(r.try_values()?);
                        Ok(false)
                    },
                )
                .map_err(|e| engine(e, t))?;
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
    }
    Ok(None)
}

/// ON CONFLICT for the proposed `row` (`values` as the engine stores it): the conflicting row
/// of an arbiter key is found and locked ([`conflicting_row`]); without one the row is
/// inserted. An insert that meets a duplicate of an arbiter index (its writer committed after
/// the look) looks again, under the value's lock its failed insert took. DO UPDATE of a row
/// whose primary key is in `touched` (inserted or updated earlier by the same statement) is
/// 21000.
fn upsert(
    cx: &mut ExecCtx<'_>,
    t: &TableInfo,
    oc: &crate::plan::OnConflict,
    checks: &[(String, crate::expr::Expr)],
    row: &[Datum],
    values: &[Value],
    touched: &std::collections::HashSet<Value>,
) -> SqlResult<Upsert> {
    let mut attempt = 0;
    let old = loop {
        attempt += 1;
        if let Some(old) = conflicting_row(cx, t, &oc.arbiters, values)? {
            break old;
        }
        super::fk::check_parents(cx, t, row, None)?;
        match tx(cx)?.insert(&t.table, values) {
            Ok(()) => return Ok(Upsert::Inserted),
            Err(e) => {
                let arbiter = violated_index(&e).is_some_and(|ix| {
                    oc.arbiters
                        .iter()
                        .any(|a| matches!(*a, crate::plan::Arbiter::Index(n) if t.indexes[n].0 == ix))
                });
                if !arbiter || attempt >= UPSERT_ATTEMPTS {
                    return Err(change_error(e, t, row));
                }
            }
        }
    };
    if !oc.update {
        return Ok(Upsert::Skip);
    }
    if touched.contains(&old[t.pk]) {
        return Err(SqlError::new(
            code::CARDINALITY_VIOLATION,
            format!(
                "ON CONFLICT DO UPDATE command cannot affect row a second time: a key of table \"{}\" is proposed twice",
                t.name
            ),
        )
        .with_detail("Ensure that no rows proposed for insertion within the same command have duplicate constrained values."));
    }
    // The existing row, then EXCLUDED.
    let mut pair: Row = old.iter().zip(&t.columns).map(|(v, c)| value_datum(v, c.ty)).collect();
    pair.extend_from_slice(row);
    if let Some(f) = &oc.filter {
        if !f.test(&pair, &cx.eval)? {
            return Ok(Upsert::Skip);
        }
    }
    let mut new = pair[..t.columns.len()].to_vec();
    for (c, e) in &oc.sets {
        new[*c] = e.eval(&pair, &cx.eval)?;
    }
    fill_keys(t, &mut new)?;
    let v = values_of(t, &new)?;
    check_row(cx, t, checks, &new)?;
    let old_row = &pair[..t.columns.len()];
    super::fk::check_parents(cx, t, &new, Some(old_row))?;
    let tx = tx(cx)?;
    if v[t.pk] != old[t.pk] {
        tx.delete(&t.table, &old[t.pk]).map_err(|e| engine(e, t))?;
        tx.insert(&t.table, &v).map_err(|e| change_error(e, t, &new))?;
    } else {
        tx.update(&t.table, &v).map_err(|e| change_error(e, t, &new))?;
    }
    super::fk::parent_changed(cx, t, old_row, Some(&new))?;
    Ok(Upsert::Updated(v))
}

/// An engine value as a datum of SQL type `ty` (a row just written, for RETURNING).
fn value_datum(v: &Value, ty: crate::types::SqlType) -> Datum {
    use crate::types::SqlType as T;
    match v {
        Value::Null => Datum::Null,
        Value::Int(i) if ty == T::Timestamp => Datum::Timestamp(*i),
        Value::Int(i) if ty == T::Date => Datum::Date(*i as i32),
        Value::Int(i) => Datum::Int(*i),
        Value::Double(f) => Datum::Float(*f),
        Value::Bool(b) => Datum::Bool(*b),
        Value::Timestamp(t) => Datum::Timestamp(*t),
        Value::Numeric(n) => match ty {
            T::Numeric { scale, .. } => Datum::Numeric(*n, scale),
            _ => Datum::Numeric(*n, 0),
        },
        Value::Bytes(b) => match ty {
            T::Bytea => Datum::Bytes(b.clone()),
            _ => Datum::Text(String::from_utf8_lossy(b).trim_end_matches('\0').to_string()),
        },
        #[allow(unreachable_patterns)]
        _ => Datum::Null,
    }
}

/// Runs an UPDATE (`p.sets` non-empty) or DELETE in the context's transaction; the row count
/// and RETURNING rows.
pub fn modify(cx: &mut ExecCtx<'_>, p: &ModifyPlan, delete: bool) -> SqlResult<(u64, Vec<Row>)> {
    let t = &p.table;
    // Candidates, read under exclusive locks, all of them before the first change.
    let candidates = {
        let saved = cx.for_update;
        cx.for_update = true;
        let r = run_query(cx, &p.input);
        cx.for_update = saved;
        r?
    };
    let all: Vec<usize> = (0..t.columns.len()).collect();
    let mut n = 0;
    let mut ret = Vec::new();
    for cand in candidates {
        let key = cand[t.pk].clone().to_value(t.columns[t.pk].ty, &t.columns[t.pk].name)?;
        let saved = cx.for_update;
        cx.for_update = true;
        let row = read_row(cx, t, &Key::Value(key.clone()), &all);
        cx.for_update = saved;
        let Some(row) = row? else { continue };
        if let Some(f) = &p.recheck {
            if !f.test(&row, &cx.eval)? {
                continue;
            }
        }
        if delete {
            tx(cx)?.delete(&t.table, &key).map_err(|e| engine(e, t))?;
            super::fk::parent_changed(cx, t, &row, None)?;
            if !p.returning.is_empty() {
                ret.push(p.returning.iter().map(|e| e.eval(&row, &cx.eval)).collect::<SqlResult<_>>()?);
            }
        } else {
            let mut new = row.clone();
            for (c, e) in &p.sets {
                new[*c] = e.eval(&row, &cx.eval)?;
            }
            fill_keys(t, &mut new)?;
            let values = values_of(t, &new)?;
            check_row(cx, t, &p.checks, &new)?;
            super::fk::check_parents(cx, t, &new, Some(&row))?;
            if values[t.pk] != key {
                let tx = tx(cx)?;
                tx.delete(&t.table, &key).map_err(|e| engine(e, t))?;
                tx.insert(&t.table, &values).map_err(|e| change_error(e, t, &new))?;
            } else {
                tx(cx)?.update(&t.table, &values).map_err(|e| change_error(e, t, &new))?;
            }
            super::fk::parent_changed(cx, t, &row, Some(&new))?;
            if !p.returning.is_empty() {
                ret.push(p.returning.iter().map(|e| e.eval(&new, &cx.eval)).collect::<SqlResult<_>>()?);
            }
        }
        n += 1;
    }
    if delete {
        t.stats.note_rows(-(n as i64));
    }
    Ok((n, ret))
}
