//! The table scan operator: a table's rows through the plan's access path, a batch at a time.
//!
//! Owns: [`Scan`] and the reads every operator that touches a table uses ([`read_row`],
//! [`key_bound`]). A full scan or a primary-key range walks the key range in batches of
//! [`BATCH`] rows, each batch a walk from just after the previous batch's last key (so a
//! LIMIT above stops the walk within a batch, and no latch or lock wait spans batches); an
//! index range collects the matching primary keys, then reads their rows a batch at a time;
//! a point read reads one row. Outside a transaction rows are read as last committed, without
//! locks; in one, through the transaction (locked as its isolation says, exclusively for FOR
//! UPDATE and changes). Invariant: every row passes the scan's whole filter (the conjuncts
//! the path used included) after it is read, since a row may change between its index entry
//! and its read.

use super::{ExecCtx, Operator, Row};
use crate::catalog::TableInfo;
use crate::error::{code, SqlError, SqlResult};
use crate::expr::Expr;
use crate::plan::{Path, ScanSpec};
use crate::types::Datum;
use nvmedb::txn::LockMode;
use nvmedb::{RowView, Value};
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::Bound;

/// Rows a scan reads per walk of its key range.
pub const BATCH: usize = 256;

fn engine(e: nvmedb::Error, t: &TableInfo) -> SqlError {
    SqlError::from_engine(e, Some(&t.name))
}

/// The output row of `cols` of a stored row.
#[inline]
pub(crate) fn decode(view: &RowView<'_>, t: &TableInfo, cols: &[usize]) -> Row {
    cols.iter().map(|&i| Datum::from_row(view, i, t.columns[i].ty)).collect()
}

/// A key to read: a primary-key value, or an encoded primary key from an index.
pub(crate) enum Key {
    Value(Value),
    Encoded(Vec<u8>),
}

/// Reads the row with key `k` (the output columns `cols`), through the context's
/// transaction if there is one; None if there is no such row.
pub(crate) fn read_row(
    cx: &mut ExecCtx<'_>,
    t: &TableInfo,
    k: &Key,
    cols: &[usize],
) -> SqlResult<Option<Row>> {
    let f = |v: RowView<'_>| decode(&v, t, cols);
    let got = match (&mut cx.txn, k) {
        (None, Key::Value(v)) => t.table.read(v, f),
        (None, Key::Encoded(b)) => t.table.read_encoded(b, f),
        (Some(tx), Key::Value(v)) if cx.for_update => tx.read_for_update(&t.table, v, f),
        (Some(tx), Key::Value(v)) => tx.read(&t.table, v, f),
        (Some(tx), Key::Encoded(b)) if cx.for_update => tx.read_encoded_for_update(&t.table, b, f),
        (Some(tx), Key::Encoded(b)) => tx.read_encoded(&t.table, b, f),
    };
    got.map_err(|e| engine(e, t))
}

/// A bound of a key range on engine column `col`, widened where the value does not fit the
/// column exactly (the filter re-checks every row): `lower` says which side it bounds. `Err`
/// means no row can satisfy it.
pub(crate) fn key_bound(
    d: Datum,
    incl: bool,
    lower: bool,
    t: &TableInfo,
    col: usize,
) -> Result<Bound<Value>, ()> {
    if d.is_null() {
        return Err(());
    }
    let c = &t.columns[col];
    match d.clone().coerce(c.ty, &c.name) {
        Ok(x) if x.compare(&d) == Some(Ordering::Equal) => match x.to_value(c.ty, &c.name) {
            Ok(v) if incl => Ok(Bound::Included(v)),
            Ok(v) => Ok(Bound::Excluded(v)),
            Err(_) => Ok(Bound::Unbounded),
        },
        Ok(_) => Ok(Bound::Unbounded),
        Err(e) if e.code == code::NUMERIC_VALUE_OUT_OF_RANGE => {
            // Beyond the column's range: everything is on one side of it.
            let positive = d.as_f64().is_some_and(|f| f > 0.0);
            if positive == lower {
                Err(())
            } else {
                Ok(Bound::Unbounded)
            }
        }
        Err(_) => Ok(Bound::Unbounded),
    }
}

/// The key value for an equality on engine column `col` (None: no row can match).
pub(crate) fn key_point(d: Datum, t: &TableInfo, col: usize) -> Option<Value> {
    match key_bound(d, true, true, t, col) {
        Ok(Bound::Included(v)) => Some(v),
        _ => None,
    }
}

/// The smallest byte string greater than every string starting with `p` (`None`: there is
/// none, every byte is 0xFF).
fn successor(mut p: Vec<u8>) -> Option<Vec<u8>> {
    while let Some(last) = p.pop() {
        if last < 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// The range of hidden-column values of key `k` whose first columns equal `eq` and whose next
/// column is within `lo`..`hi` (`None`: no row can match, a value is NULL or out of the
/// column's range).
fn composite_bounds(
    t: &TableInfo,
    k: &crate::catalog::CompositeKey,
    eq: Vec<Datum>,
    lo: Option<(Datum, bool)>,
    hi: Option<(Datum, bool)>,
) -> Option<(Bound<Value>, Bound<Value>)> {
    let schema = t.table.schema();
    let next = k.columns.get(eq.len()).copied();
    let mut prefix = Vec::new();
    for (d, &c) in eq.into_iter().zip(&k.columns) {
        let v = key_point(d, t, c)?;
        schema.secondary_prefix(c, &v, &mut prefix);
    }
    let with = |c: usize, v: &Value| {
        let mut p = prefix.clone();
        schema.secondary_prefix(c, v, &mut p);
        p
    };
    let bytes = |b: Vec<u8>| Bound::Included(Value::Bytes(b));
    // Every key starting with `p` is below this.
    let past = |p: Vec<u8>| successor(p).map_or(Bound::Unbounded, |s| Bound::Excluded(Value::Bytes(s)));
    let lower = match (lo, next) {
        (Some((d, incl)), Some(c)) => match key_bound(d, incl, true, t, c).ok()? {
            Bound::Included(v) => bytes(with(c, &v)),
            Bound::Excluded(v) => bytes(successor(with(c, &v))?),
            Bound::Unbounded => bytes(prefix.clone()),
        },
        _ => bytes(prefix.clone()),
    };
    let upper = match (hi, next) {
        (Some((d, incl)), Some(c)) => match key_bound(d, incl, false, t, c).ok()? {
            Bound::Included(v) => past(with(c, &v)),
            Bound::Excluded(v) => Bound::Excluded(Value::Bytes(with(c, &v))),
            Bound::Unbounded => past(prefix.clone()),
        },
        _ => past(prefix.clone()),
    };
    let lower = match lower {
        Bound::Included(Value::Bytes(b)) if b.is_empty() => Bound::Unbounded,
        other => other,
    };
    Some((lower, upper))
}

enum State {
    Start,
    /// A key range walked in batches: the next walk's bounds.
    Range(Bound<Value>, Bound<Value>),
    /// Primary keys left to read (index paths).
    Keys(VecDeque<Vec<u8>>),
    Done,
}

/// A table scan.
pub struct Scan<'p> {
    spec: &'p ScanSpec,
    /// The row the path's key expressions are evaluated over.
    seed: Row,
    state: State,
    buf: VecDeque<Row>,
}

impl<'p> Scan<'p> {
    /// A scan of `spec` whose path keys are evaluated over `seed`.
    pub fn new(spec: &'p ScanSpec, seed: Row) -> Self {
        Self { spec, seed, state: State::Start, buf: VecDeque::new() }
    }

    fn eval(&self, e: &Expr, cx: &ExecCtx<'_>) -> SqlResult<Datum> {
        e.eval(&self.seed, &cx.eval)
    }

    fn start(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<()> {
        let spec: &'p ScanSpec = self.spec;
        let t = &spec.table;
        let bound = |s: &Self,
                     b: &Option<(Expr, bool)>,
                     lower: bool,
                     col: usize,
                     cx: &ExecCtx<'_>|
         -> SqlResult<Result<Bound<Value>, ()>> {
            Ok(match b {
                None => Ok(Bound::Unbounded),
                Some((e, incl)) => key_bound(s.eval(e, cx)?, *incl, lower, t, col),
            })
        };
        self.state = match &spec.path {
            Path::Full => State::Range(Bound::Unbounded, Bound::Unbounded),
            Path::Range(lo, hi) => {
                match (bound(self, lo, true, t.pk, cx)?, bound(self, hi, false, t.pk, cx)?) {
                    (Ok(lo), Ok(hi)) => State::Range(lo, hi),
                    _ => State::Done,
                }
            }
            Path::Point(e) => {
                if let Some(v) = key_point(self.eval(e, cx)?, t, t.pk) {
                    if let Some(r) = read_row(cx, t, &Key::Value(v), &spec.cols)? {
                        self.keep(r, cx)?;
                    }
                }
                State::Done
            }
            Path::IndexPoint(ix, e) => {
                let col = t.indexes[*ix].1;
                match key_point(self.eval(e, cx)?, t, col) {
                    Some(v) => {
                        State::Keys(self.index_keys(cx, *ix, Bound::Included(&v), Bound::Included(&v))?)
                    }
                    None => State::Done,
                }
            }
            Path::Composite { key, eq, lo, hi } => {
                let k = &t.composite[*key];
                let mut vals = Vec::with_capacity(eq.len());
                for e in eq {
                    vals.push(self.eval(e, cx)?);
                }
                let lo = match lo {
                    Some((e, incl)) => Some((self.eval(e, cx)?, *incl)),
                    None => None,
                };
                let hi = match hi {
                    Some((e, incl)) => Some((self.eval(e, cx)?, *incl)),
                    None => None,
                };
                match composite_bounds(t, k, vals, lo, hi) {
                    None => State::Done,
                    Some((lo, hi)) if k.def.primary => State::Range(lo, hi),
                    Some((lo, hi)) => {
                        let ix = t.index_on(k.column).expect("a multi-column key has an index");
                        State::Keys(self.index_keys(cx, ix, lo.as_ref(), hi.as_ref())?)
                    }
                }
            }
            Path::IndexRange(ix, lo, hi) => {
                let col = t.indexes[*ix].1;
                match (bound(self, lo, true, col, cx)?, bound(self, hi, false, col, cx)?) {
                    (Ok(lo), Ok(hi)) => State::Keys(self.index_keys(cx, *ix, lo.as_ref(), hi.as_ref())?),
                    _ => State::Done,
                }
            }
        };
        Ok(())
    }

    fn index_keys(
        &self,
        cx: &mut ExecCtx<'_>,
        ix: usize,
        lo: Bound<&Value>,
        hi: Bound<&Value>,
    ) -> SqlResult<VecDeque<Vec<u8>>> {
        let t = &self.spec.table;
        if let Some(tx) = &mut cx.txn {
            // A serializable transaction locks the rows and the key range it reads.
            let mode = if cx.for_update { LockMode::Exclusive } else { LockMode::Shared };
            return tx.index_keys(&t.table, ix, lo, hi, mode).map(VecDeque::from).map_err(|e| engine(e, t));
        }
        let mut keys = VecDeque::new();
        t.table
            .index_keys(ix, lo, hi, |pk| {
                keys.push_back(pk.to_vec());
                Ok(true)
            })
            .map_err(|e| engine(e, t))?;
        Ok(keys)
    }

    /// Keeps `r` if it passes the filter.
    fn keep(&mut self, r: Row, cx: &ExecCtx<'_>) -> SqlResult<()> {
        if match &self.spec.filter {
            Some(f) => f.test(&r, &cx.eval)?,
            None => true,
        } {
            self.buf.push_back(r);
        }
        Ok(())
    }

    /// Reads the next batch of the key range `lo..hi`; the bounds of the rest.
    fn range_batch(
        &mut self,
        cx: &mut ExecCtx<'_>,
        lo: Bound<Value>,
        hi: Bound<Value>,
    ) -> SqlResult<Option<(Bound<Value>, Bound<Value>)>> {
        let spec = self.spec;
        let t = &spec.table;
        let mut n = 0;
        let mut last: Option<Value> = None;
        let mut err = None;
        let buf = &mut self.buf;
        let eval = &cx.eval;
        let mut visit = |v: RowView<'_>| -> nvmedb::Result<bool> {
            n += 1;
            let r = decode(&v, t, &spec.cols);
            match &spec.filter {
                Some(f) => match f.test(&r, eval) {
                    Ok(true) => buf.push_back(r),
                    Ok(false) => {}
                    Err(e) => {
                        err = Some(e);
                        return Ok(false);
                    }
                },
                None => buf.push_back(r),
            }
            if n >= BATCH {
                last = Some(v.value(t.pk));
                return Ok(false);
            }
            Ok(true)
        };
        let r = match &mut cx.txn {
            None => t.table.range(lo.as_ref(), hi.as_ref(), &mut visit),
            Some(tx) => {
                let mode = if cx.for_update { LockMode::Exclusive } else { LockMode::Shared };
                tx.range(&t.table, lo.as_ref(), hi.as_ref(), mode, &mut visit)
            }
        };
        r.map_err(|e| engine(e, t))?;
        if let Some(e) = err {
            return Err(e);
        }
        Ok(last.map(|k| (Bound::Excluded(k), hi)))
    }
}

impl<'p> Operator for Scan<'p> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        loop {
            if let Some(r) = self.buf.pop_front() {
                return Ok(Some(r));
            }
            cx.interrupt.check()?;
            match std::mem::replace(&mut self.state, State::Done) {
                State::Start => self.start(cx)?,
                State::Range(lo, hi) => {
                    if let Some((lo, hi)) = self.range_batch(cx, lo, hi)? {
                        self.state = State::Range(lo, hi);
                    }
                }
                State::Keys(mut keys) => {
                    let spec: &ScanSpec = self.spec;
                    let t = &spec.table;
                    for _ in 0..BATCH {
                        let Some(k) = keys.pop_front() else { break };
                        if let Some(r) = read_row(cx, t, &Key::Encoded(k), &spec.cols)? {
                            self.keep(r, cx)?;
                        }
                    }
                    if !keys.is_empty() {
                        self.state = State::Keys(keys);
                    }
                }
                State::Done => return Ok(None),
            }
        }
    }
}
