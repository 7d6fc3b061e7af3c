//! The index nested-loop join operator: for each outer row, the inner table's rows found
//! through its primary key or an index with a key computed from the outer row.
//!
//! Owns: [`IndexJoin`] for inner, left, semi and anti joins. Each lookup is a [`Scan`] of the
//! inner access (its path keyed on the outer row, its filter the inner table's own
//! conjuncts). Invariant: the output keeps the outer side's order.

use super::scan::Scan;
use super::{BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;
use crate::plan::logical::JoinKind;
use crate::plan::ScanSpec;
use crate::types::Datum;

/// An index nested loop.
pub struct IndexJoin<'p> {
    kind: JoinKind,
    left: BoxOp<'p>,
    inner: &'p ScanSpec,
    extra: Option<&'p Expr>,
    /// The outer row being joined, its lookup, whether it matched.
    cur: Option<(Row, Scan<'p>, bool)>,
}

impl<'p> IndexJoin<'p> {
    /// An index join of `left` with lookups `inner`.
    pub fn new(kind: JoinKind, left: BoxOp<'p>, inner: &'p ScanSpec, extra: Option<&'p Expr>) -> Self {
        Self { kind, left, inner, extra, cur: None }
    }
}

impl Operator for IndexJoin<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        loop {
            if let Some((l, scan, matched)) = &mut self.cur {
                while let Some(r) = scan.next(cx)? {
                    let mut joined = l.clone();
                    joined.extend(r);
                    if let Some(e) = self.extra {
                        if !e.test(&joined, &cx.eval)? {
                            continue;
                        }
                    }
                    *matched = true;
                    match self.kind {
                        JoinKind::Semi => {
                            let (l, _, _) = self.cur.take().expect("current");
                            return Ok(Some(l));
                        }
                        JoinKind::Anti | JoinKind::AntiNullAware => break,
                        _ => return Ok(Some(joined)),
                    }
                }
                let (l, _, matched) = self.cur.take().expect("current");
                match (self.kind, matched) {
                    (JoinKind::Left, false) => {
                        let mut r = l;
                        r.resize(r.len() + self.inner.cols.len(), Datum::Null);
                        return Ok(Some(r));
                    }
                    (JoinKind::Anti, false) => return Ok(Some(l)),
                    _ => {}
                }
            }
            let Some(l) = self.left.next(cx)? else { return Ok(None) };
            let scan = Scan::new(self.inner, l.clone());
            self.cur = Some((l, scan, false));
        }
    }
}
