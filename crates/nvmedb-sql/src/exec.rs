//! Execution of planned queries and changes on the engine's transaction API.
//!
//! Owns: turning a plan's access paths into engine reads (point reads, key-order ranges,
//! index ranges, scans), joins, grouping, sorting and the row changes of INSERT, UPDATE and
//! DELETE. Every row a statement uses is read by primary key, after the key's lock when the
//! statement runs in a transaction (shared for reads, exclusive for rows to change), so no
//! statement sees a change that is not committed; scans and ranges collect keys first and
//! read each row afterwards, so no page stays latched while a lock is awaited.
//!
//! Isolation: outside a transaction block, a SELECT reads each row as last committed (read
//! committed, row by row). Inside a block, every row read keeps its shared lock until the
//! end (rows read stay as read: repeatable read), rows changed keep their exclusive lock;
//! ranges and scans take no locks on gaps, so rows inserted into a range by others appear
//! to a later read of that range (phantoms), as PostgreSQL's REPEATABLE READ would not.

use crate::catalog::TableInfo;
use crate::error::{code, SqlError, SqlResult};
use crate::expr::{Acc, EvalCtx, Expr};
use crate::plan::{Access, InsertPlan, InsertSource, JoinMethod, ModifyPlan, Path, QueryPlan};
use crate::types::{Datum, SqlType};
use nvmedb::{RowView, Transaction, Value};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::ops::Bound;

/// A key to read: a primary-key value, or an encoded key from an index scan.
enum Key {
    Value(Value),
    Encoded(Vec<u8>),
}

/// Where reads go: the statement's transaction (locks) or none (committed rows).
pub struct Reader<'a> {
    /// The transaction, if the statement runs in one.
    pub txn: Option<&'a mut Transaction>,
    /// Read rows under exclusive locks (UPDATE, DELETE, FOR UPDATE).
    pub for_update: bool,
}

fn engine(e: nvmedb::Error, t: &TableInfo) -> SqlError {
    SqlError::from_engine(e, Some(&t.name))
}

/// Fills `row[offset..]` with the needed columns of `view`.
fn decode(view: &RowView<'_>, t: &TableInfo, needed: &[bool], row: &mut [Datum], offset: usize) {
    for (i, c) in t.columns.iter().enumerate() {
        if needed[i] {
            row[offset + i] = Datum::from_row(view, i, c.ty);
        }
    }
}

impl Reader<'_> {
    /// Reads the row with key `k` into `row`; false if there is none.
    fn read(&mut self, a: &Access, k: &Key, row: &mut [Datum]) -> SqlResult<bool> {
        let t = &a.table;
        let f = |v: RowView<'_>| decode(&v, t, &a.needed, row, a.offset);
        let got = match (&mut self.txn, k) {
            (None, Key::Value(v)) => t.table.read(v, f),
            (None, Key::Encoded(b)) => t.table.read_encoded(b, f),
            (Some(tx), Key::Value(v)) if self.for_update => tx.read_for_update(&t.table, v, f),
            (Some(tx), Key::Value(v)) => tx.read(&t.table, v, f),
            (Some(tx), Key::Encoded(b)) if self.for_update => tx.read_encoded_for_update(&t.table, b, f),
            (Some(tx), Key::Encoded(b)) => tx.read_encoded(&t.table, b, f),
        };
        Ok(got.map_err(|e| engine(e, t))?.is_some())
    }
}

/// A bound of a key range as an engine value of column `col`'s type (`None`: the bound
/// cannot match anything, e.g. it is out of the column's range).
fn key_value(d: Datum, t: &TableInfo, col: usize) -> SqlResult<Option<Value>> {
    if d.is_null() {
        return Ok(None);
    }
    match d.to_value(t.columns[col].ty, &t.columns[col].name) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == code::NUMERIC_VALUE_OUT_OF_RANGE => Ok(None),
        Err(e) => Err(e),
    }
}

fn push_keys(out: &mut Vec<Key>) -> impl FnMut(&[u8]) -> nvmedb::Result<bool> + '_ {
    move |pk| {
        out.push(Key::Encoded(pk.to_vec()));
        Ok(true)
    }
}

/// Evaluation helpers for a statement.
pub struct Exec<'a> {
    /// Evaluation context (parameters, settings, time).
    pub ctx: EvalCtx<'a>,
}

impl Exec<'_> {
    fn bound(
        &self,
        b: &Option<(Expr, bool)>,
        t: &TableInfo,
        col: usize,
    ) -> SqlResult<Result<Bound<Value>, ()>> {
        Ok(match b {
            None => Ok(Bound::Unbounded),
            Some((e, incl)) => match key_value(e.eval(&[], &self.ctx)?, t, col)? {
                Some(v) if *incl => Ok(Bound::Included(v)),
                Some(v) => Ok(Bound::Excluded(v)),
                None => Err(()),
            },
        })
    }

    /// The keys an access path yields, in order (none for an impossible bound).
    fn keys(&self, a: &Access) -> SqlResult<Vec<Key>> {
        let t = &a.table;
        let mut out = Vec::new();
        match &a.path {
            Path::Point(e) => {
                if let Some(v) = key_value(e.eval(&[], &self.ctx)?, t, t.pk)? {
                    out.push(Key::Value(v));
                }
            }
            Path::Range(lo, hi) => {
                let (Ok(lo), Ok(hi)) = (self.bound(lo, t, t.pk)?, self.bound(hi, t, t.pk)?) else {
                    return Ok(out);
                };
                t.table
                    .primary_keys(lo.as_ref(), hi.as_ref(), push_keys(&mut out))
                    .map_err(|e| engine(e, t))?;
            }
            Path::IndexPoint(ix, e) => {
                let col = t.indexes[*ix].1;
                if let Some(v) = key_value(e.eval(&[], &self.ctx)?, t, col)? {
                    t.table
                        .index_keys(*ix, Bound::Included(&v), Bound::Included(&v), push_keys(&mut out))
                        .map_err(|e| engine(e, t))?;
                }
            }
            Path::IndexRange(ix, lo, hi) => {
                let col = t.indexes[*ix].1;
                let (Ok(lo), Ok(hi)) = (self.bound(lo, t, col)?, self.bound(hi, t, col)?) else {
                    return Ok(out);
                };
                // NULL entries (sorted last) an open range reaches fail the re-checked filter.
                t.table
                    .index_keys(*ix, lo.as_ref(), hi.as_ref(), push_keys(&mut out))
                    .map_err(|e| engine(e, t))?;
            }
            Path::Scan => {
                let s = t.table.schema();
                t.table
                    .scan(|row| {
                        let mut k = Vec::with_capacity(16);
                        s.primary_key_of(&row, &mut k);
                        out.push(Key::Encoded(k));
                        Ok(true)
                    })
                    .map_err(|e| engine(e, t))?;
            }
        }
        Ok(out)
    }

    /// Calls `f` with every row of `a` that exists (filling `row` at the access's offset)
    /// until `f` returns false.
    fn each_row(
        &self,
        rd: &mut Reader<'_>,
        a: &Access,
        row: &mut Vec<Datum>,
        f: &mut dyn FnMut(&mut Vec<Datum>) -> SqlResult<bool>,
    ) -> SqlResult<()> {
        for k in self.keys(a)? {
            if rd.read(a, &k, row)? && !f(row)? {
                break;
            }
        }
        Ok(())
    }

    /// Runs the FROM/WHERE part of a query: `f` gets each combined row that passes the filter.
    pub fn rows(
        &self,
        rd: &mut Reader<'_>,
        q: &QueryPlan,
        f: &mut dyn FnMut(&[Datum]) -> SqlResult<bool>,
    ) -> SqlResult<()> {
        let mut row = vec![Datum::Null; q.width];
        let Some(outer) = &q.from else {
            if q.filter.as_ref().map_or(Ok(true), |p| p.test(&row, &self.ctx))? {
                f(&row)?;
            }
            return Ok(());
        };
        let Some(join) = &q.join else {
            return self.each_row(rd, outer, &mut row, &mut |row| {
                if let Some(p) = &q.filter {
                    if !p.test(row, &self.ctx)? {
                        return Ok(true);
                    }
                }
                f(row)
            });
        };
        let inner = &join.inner;
        let it = &inner.table;
        let icols = inner.offset..inner.offset + it.columns.len();
        let inner_col = match join.method {
            JoinMethod::PkLookup => it.pk,
            JoinMethod::IndexLookup(ix) => it.indexes[ix].1,
            JoinMethod::Hash(c) => c,
        };
        // Hash join: the inner table once, by key text.
        let mut hash: HashMap<Vec<u8>, Vec<Vec<Datum>>> = HashMap::new();
        if let JoinMethod::Hash(col) = join.method {
            let scan = Access { path: Path::Scan, ..inner.clone() };
            let mut irow = vec![Datum::Null; q.width];
            let mut needed = scan.needed.clone();
            needed[col] = true;
            let scan = Access { needed, ..scan };
            self.each_row(rd, &scan, &mut irow, &mut |r| {
                let k = &r[inner.offset + col];
                if !k.is_null() {
                    let mut key = Vec::new();
                    k.write_text(SqlType::Text, &mut key);
                    hash.entry(key).or_default().push(r[icols.clone()].to_vec());
                }
                Ok(true)
            })?;
        }
        for k in self.keys(outer)? {
            if !rd.read(outer, &k, &mut row)? {
                continue;
            }
            let key = join.outer_key.eval(&row, &self.ctx)?;
            let mut matched = false;
            let mut stop = false;
            let mut emit = |row: &mut Vec<Datum>, matched: &mut bool| -> SqlResult<bool> {
                if let Some(on) = &join.on_filter {
                    if !on.test(row, &self.ctx)? {
                        return Ok(true);
                    }
                }
                *matched = true;
                if let Some(p) = &q.filter {
                    if !p.test(row, &self.ctx)? {
                        return Ok(true);
                    }
                }
                f(row)
            };
            match join.method {
                JoinMethod::Hash(_) => {
                    if !key.is_null() {
                        let mut k = Vec::new();
                        key.write_text(SqlType::Text, &mut k);
                        if let Some(rows) = hash.get(&k) {
                            for r in rows {
                                row[icols.clone()].clone_from_slice(r);
                                if !emit(&mut row, &mut matched)? {
                                    stop = true;
                                    break;
                                }
                            }
                        }
                    }
                }
                JoinMethod::PkLookup | JoinMethod::IndexLookup(_) => {
                    if let Some(v) = key_value(key, it, inner_col)? {
                        let keys = match join.method {
                            JoinMethod::IndexLookup(ix) => {
                                let mut out = Vec::new();
                                it.table
                                    .index_keys(
                                        ix,
                                        Bound::Included(&v),
                                        Bound::Included(&v),
                                        push_keys(&mut out),
                                    )
                                    .map_err(|e| engine(e, it))?;
                                out
                            }
                            _ => vec![Key::Value(v)],
                        };
                        for k in keys {
                            if rd.read(inner, &k, &mut row)? && !emit(&mut row, &mut matched)? {
                                stop = true;
                                break;
                            }
                        }
                    }
                }
            }
            if stop {
                return Ok(());
            }
            if !matched && join.left_outer {
                for d in &mut row[icols.clone()] {
                    *d = Datum::Null;
                }
                let pass = match &q.filter {
                    Some(p) => p.test(&row, &self.ctx)?,
                    None => true,
                };
                if pass && !f(&row)? {
                    return Ok(());
                }
            }
            // Clear the inner part for the next outer row.
            for d in &mut row[icols.clone()] {
                *d = Datum::Null;
            }
        }
        Ok(())
    }

    fn count(&self, e: &Option<Expr>) -> SqlResult<Option<usize>> {
        match e {
            None => Ok(None),
            Some(e) => match e.eval(&[], &self.ctx)? {
                Datum::Null => Ok(None),
                Datum::Int(n) if n >= 0 => Ok(Some(n as usize)),
                d => Err(SqlError::new(
                    code::INVALID_PARAMETER_VALUE,
                    format!("LIMIT/OFFSET must not be negative: {d:?}"),
                )),
            },
        }
    }

    /// Runs a query; returns its rows (visible columns only).
    pub fn query(&self, rd: &mut Reader<'_>, q: &QueryPlan) -> SqlResult<Vec<Vec<Datum>>> {
        let limit = self.count(&q.limit)?;
        let offset = self.count(&q.offset)?.unwrap_or(0);
        let streaming = q.agg.is_none() && q.sort.is_empty() && !q.distinct;
        let mut out: Vec<Vec<Datum>> = Vec::new();
        let mut skipped = 0;
        if let Some(agg) = &q.agg {
            // group key text → (group values, accumulators)
            let mut groups: Vec<(Vec<Datum>, Vec<Acc>)> = Vec::new();
            let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
            self.rows(rd, q, &mut |row| {
                let mut key = Vec::new();
                let mut vals = Vec::with_capacity(agg.group_by.len());
                for g in &agg.group_by {
                    let v = g.eval(row, &self.ctx)?;
                    key.push(u8::from(v.is_null()));
                    v.write_text(SqlType::Text, &mut key);
                    key.push(0);
                    vals.push(v);
                }
                let gi = match index.get(&key) {
                    Some(&i) => i,
                    None => {
                        groups.push((vals, agg.aggs.iter().map(|a| a.func.start()).collect()));
                        index.insert(key, groups.len() - 1);
                        groups.len() - 1
                    }
                };
                for (a, acc) in agg.aggs.iter().zip(groups[gi].1.iter_mut()) {
                    let v = match a.func {
                        crate::expr::AggFunc::CountStar => Datum::Null,
                        _ => a.arg.eval(row, &self.ctx)?,
                    };
                    a.func.add(acc, v, a.arg_ty)?;
                }
                Ok(true)
            })?;
            if groups.is_empty() && agg.group_by.is_empty() {
                groups.push((vec![], agg.aggs.iter().map(|a| a.func.start()).collect()));
            }
            for (vals, accs) in groups {
                let mut arow = vals;
                for (a, acc) in agg.aggs.iter().zip(accs) {
                    arow.push(a.func.finish(acc, a.ty)?);
                }
                if let Some(h) = &agg.having {
                    if !h.test(&arow, &self.ctx)? {
                        continue;
                    }
                }
                out.push(q.output.iter().map(|e| e.eval(&arow, &self.ctx)).collect::<SqlResult<_>>()?);
            }
        } else {
            self.rows(rd, q, &mut |row| {
                if streaming && skipped < offset {
                    skipped += 1;
                    return Ok(true);
                }
                out.push(q.output.iter().map(|e| e.eval(row, &self.ctx)).collect::<SqlResult<_>>()?);
                Ok(!(streaming && limit.is_some_and(|l| out.len() >= l)))
            })?;
        }
        if !q.sort.is_empty() {
            let mut err = None;
            out.sort_by(|a, b| {
                for k in &q.sort {
                    let (x, y) = (&a[k.col], &b[k.col]);
                    let o = match (x.is_null(), y.is_null()) {
                        (true, true) => Ordering::Equal,
                        (true, false) => {
                            return if k.nulls_first { Ordering::Less } else { Ordering::Greater }
                        }
                        (false, true) => {
                            return if k.nulls_first { Ordering::Greater } else { Ordering::Less }
                        }
                        _ => match x.compare(y) {
                            Some(o) => o,
                            None => {
                                err = Some(SqlError::new(
                                    code::UNDEFINED_FUNCTION,
                                    format!("cannot order {x:?} and {y:?}"),
                                ));
                                Ordering::Equal
                            }
                        },
                    };
                    let o = if k.asc { o } else { o.reverse() };
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                Ordering::Equal
            });
            if let Some(e) = err {
                return Err(e);
            }
        }
        for r in &mut out {
            r.truncate(q.visible);
        }
        if q.distinct {
            let mut seen = std::collections::HashSet::new();
            out.retain(|r| {
                let mut key = Vec::new();
                for d in r {
                    key.push(u8::from(d.is_null()));
                    d.write_text(SqlType::Text, &mut key);
                    key.push(0);
                }
                seen.insert(key)
            });
        }
        if !streaming {
            let end = limit.map_or(out.len(), |l| (offset + l).min(out.len()));
            let start = offset.min(end);
            out = out.drain(start..end).collect();
        }
        Ok(out)
    }

    /// Builds the engine row of an INSERT from values of the target columns.
    fn new_row(
        &self,
        t: &TableInfo,
        targets: &[usize],
        vals: Vec<Datum>,
    ) -> SqlResult<(Vec<Value>, Vec<Datum>)> {
        let mut row = vec![Datum::Null; t.columns.len()];
        if t.hidden_rowid {
            row[0] = Datum::Int(t.next_rowid());
        }
        for (&c, v) in targets.iter().zip(vals) {
            row[c] = v;
        }
        let values = self.values_of(t, &row)?;
        Ok((values, row))
    }

    /// Converts a full row of datums into engine values (checked against the column types).
    fn values_of(&self, t: &TableInfo, row: &[Datum]) -> SqlResult<Vec<Value>> {
        row.iter()
            .zip(&t.columns)
            .map(|(d, c)| {
                if d.is_null() && !c.nullable {
                    return Err(SqlError::new(
                        code::NOT_NULL_VIOLATION,
                        format!(
                            "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                            c.name, t.name
                        ),
                    )
                    .with_table(&t.name)
                    .with_column(&c.name));
                }
                d.clone().to_value(c.ty, &c.name).map_err(|e| e.with_table(&t.name))
            })
            .collect()
    }

    /// Runs an INSERT in `tx`; returns the row count and RETURNING rows.
    pub fn insert(&self, tx: &mut Transaction, p: &InsertPlan) -> SqlResult<(u64, Vec<Vec<Datum>>)> {
        let t = &p.table;
        let mut n = 0;
        let mut ret = Vec::new();
        let one = |tx: &mut Transaction,
                   vals: Vec<Datum>,
                   n: &mut u64,
                   ret: &mut Vec<Vec<Datum>>|
         -> SqlResult<()> {
            let (values, row) = self.new_row(t, &p.targets, vals)?;
            tx.insert(&t.table, &values).map_err(|e| engine(e, t))?;
            *n += 1;
            if !p.returning.is_empty() {
                ret.push(p.returning.iter().map(|e| e.eval(&row, &self.ctx)).collect::<SqlResult<_>>()?);
            }
            Ok(())
        };
        match &p.source {
            InsertSource::Values(rows) => {
                for r in rows {
                    let vals = r.iter().map(|e| e.eval(&[], &self.ctx)).collect::<SqlResult<Vec<_>>>()?;
                    one(tx, vals, &mut n, &mut ret)?;
                }
            }
            InsertSource::Query(q) => {
                let rows = {
                    let mut rd = Reader { txn: Some(&mut *tx), for_update: false };
                    self.query(&mut rd, q)?
                };
                for r in rows {
                    one(tx, r, &mut n, &mut ret)?;
                }
            }
        }
        Ok((n, ret))
    }

    /// Runs an UPDATE (`p.sets` non-empty) or DELETE in `tx`; returns the row count and
    /// RETURNING rows.
    pub fn modify(
        &self,
        tx: &mut Transaction,
        p: &ModifyPlan,
        delete: bool,
    ) -> SqlResult<(u64, Vec<Vec<Datum>>)> {
        let a = &p.access;
        let t = &a.table;
        let keys = self.keys(a)?;
        let mut n = 0;
        let mut ret = Vec::new();
        let mut row = vec![Datum::Null; t.columns.len()];
        for k in keys {
            let found = {
                let mut rd = Reader { txn: Some(&mut *tx), for_update: true };
                rd.read(a, &k, &mut row)?
            };
            if !found {
                continue;
            }
            if let Some(f) = &p.filter {
                if !f.test(&row, &self.ctx)? {
                    continue;
                }
            }
            let pk_value = row[t.pk].clone().to_value(t.columns[t.pk].ty, &t.columns[t.pk].name)?;
            if delete {
                tx.delete(&t.table, &pk_value).map_err(|e| engine(e, t))?;
                if !p.returning.is_empty() {
                    ret.push(p.returning.iter().map(|e| e.eval(&row, &self.ctx)).collect::<SqlResult<_>>()?);
                }
            } else {
                let mut new = row.clone();
                for (c, e) in &p.sets {
                    new[*c] = e.eval(&row, &self.ctx)?;
                }
                let values = self.values_of(t, &new)?;
                if values[t.pk] != pk_value {
                    tx.delete(&t.table, &pk_value).map_err(|e| engine(e, t))?;
                    tx.insert(&t.table, &values).map_err(|e| engine(e, t))?;
                } else {
                    tx.update(&t.table, &values).map_err(|e| engine(e, t))?;
                }
                if !p.returning.is_empty() {
                    ret.push(p.returning.iter().map(|e| e.eval(&new, &self.ctx)).collect::<SqlResult<_>>()?);
                }
            }
            n += 1;
        }
        Ok((n, ret))
    }
}
