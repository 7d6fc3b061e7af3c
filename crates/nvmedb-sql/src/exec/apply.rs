//! The apply operator: a subquery run for each input row with that row's correlation values
//! (the subqueries the rewrites could not turn into joins).
//!
//! Owns: [`Apply`]: scalar (the subquery's single value, NULL without rows, 21000 for more
//! than one), EXISTS, and IN with SQL's NULL semantics (NULL when no value equals and a NULL
//! was among the values or the tested value is NULL). Invariant: the correlation values the
//! subquery reads are those of the current input row; the enclosing ones are restored after.

use super::{build, BoxOp, ExecCtx, Operator, Row};
use crate::error::{code, SqlError, SqlResult};
use crate::expr::Expr;
use crate::plan::logical::ApplyKind;
use crate::plan::PhysNode;
use crate::types::Datum;
use std::cmp::Ordering;

/// Per-row subquery.
pub struct Apply<'p> {
    input: BoxOp<'p>,
    sub: &'p PhysNode,
    kind: &'p ApplyKind,
    corr: &'p [Expr],
}

impl<'p> Apply<'p> {
    /// `sub` run per row of `input`, with `corr` (over the input row) as its correlation values.
    pub fn new(input: BoxOp<'p>, sub: &'p PhysNode, kind: &'p ApplyKind, corr: &'p [Expr]) -> Self {
        Self { input, sub, kind, corr }
    }

    fn value(&self, r: &Row, cx: &mut ExecCtx<'_>) -> SqlResult<Datum> {
        let vals = self.corr.iter().map(|e| e.eval(r, &cx.eval)).collect::<SqlResult<Vec<_>>>()?;
        let probe = match self.kind {
            ApplyKind::In(x) => Some(x.eval(r, &cx.eval)?),
            _ => None,
        };
        let saved = std::mem::replace(&mut cx.eval.outer, vals);
        let res = (|| {
            let mut op = build(self.sub, cx);
            Ok(match self.kind {
                ApplyKind::Scalar => {
                    let first = op.next(cx)?;
                    if first.is_some() && op.next(cx)?.is_some() {
                        return Err(SqlError::new(
                            code::CARDINALITY_VIOLATION,
                            "more than one row returned by a subquery used as an expression",
                        ));
                    }
                    first.and_then(|mut r| r.pop()).unwrap_or(Datum::Null)
                }
                ApplyKind::Exists => Datum::Bool(op.next(cx)?.is_some()),
                ApplyKind::In(_) => {
                    let x = probe.unwrap_or(Datum::Null);
                    let mut saw_null = false;
                    let mut found = false;
                    let mut any = false;
                    while let Some(mut row) = op.next(cx)? {
                        any = true;
                        let v = row.pop().unwrap_or(Datum::Null);
                        if v.is_null() {
                            saw_null = true;
                        } else if !x.is_null() && x.compare(&v) == Some(Ordering::Equal) {
                            found = true;
                            break;
                        }
                    }
                    if found {
                        Datum::Bool(true)
                    } else if !any {
                        Datum::Bool(false)
                    } else if saw_null || x.is_null() {
                        Datum::Null
                    } else {
                        Datum::Bool(false)
                    }
                }
            })
        })();
        cx.eval.outer = saved;
        res
    }
}

impl Operator for Apply<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        let Some(mut r) = self.input.next(cx)? else { return Ok(None) };
        let v = self.value(&r, cx)?;
        r.push(v);
        Ok(Some(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{ctx, drain, ints};
    use crate::plan::{PhysNode, PhysOp};

    fn values(rows: &[Option<i64>]) -> PhysNode {
        let rows = rows.iter().map(|v| vec![Expr::Const(v.map_or(Datum::Null, Datum::Int))]).collect();
        PhysNode { op: PhysOp::Values(rows), cols: vec![0], rows: 1.0, cost: 0.0, id: 0, order: vec![] }
    }

    fn run(kind: ApplyKind, sub: &[Option<i64>]) -> Vec<Option<i64>> {
        let sub = values(sub);
        let mut a = Apply::new(ints(&[&[Some(1)], &[None]]), &sub, &kind, &[]);
        drain(&mut a, &mut ctx(1 << 20)).into_iter().map(|r| r[1]).collect()
    }

    #[test]
    fn scalar_exists_and_in_with_nulls() {
        assert_eq!(run(ApplyKind::Scalar, &[Some(7)]), vec![Some(7), Some(7)]);
        assert_eq!(run(ApplyKind::Scalar, &[]), vec![None, None]);
        let sub = values(&[Some(1), Some(2)]);
        let kind = ApplyKind::Scalar;
        let mut a = Apply::new(ints(&[&[Some(1)]]), &sub, &kind, &[]);
        assert_eq!(a.next(&mut ctx(1 << 20)).unwrap_err().code, code::CARDINALITY_VIOLATION);
        assert_eq!(run(ApplyKind::Exists, &[None]), vec![Some(1), Some(1)]);
        assert_eq!(run(ApplyKind::Exists, &[]), vec![Some(0), Some(0)]);
        // 1 IN (1, NULL) is true, NULL IN (…) NULL; 1 IN (2, NULL) NULL; x IN () false.
        let x = || ApplyKind::In(Expr::Column(0));
        assert_eq!(run(x(), &[Some(1), None]), vec![Some(1), None]);
        assert_eq!(run(x(), &[Some(2), None]), vec![None, None]);
        assert_eq!(run(x(), &[Some(2)]), vec![Some(0), None]);
        assert_eq!(run(x(), &[]), vec![Some(0), Some(0)]);
    }
}
