//! The nested-loop join operator: the right input read once into memory, then every left
//! row paired with every right row that satisfies the condition.
//!
//! Owns: [`NestedLoop`] for every join kind (joins without an equality to hash on: cross
//! joins, inequalities). Invariant: the output keeps the left side's order; a full join's
//! unmatched right rows come out last.

use super::{BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;
use crate::plan::logical::JoinKind;
use crate::types::Datum;

/// A nested loop over a materialized right side.
pub struct NestedLoop<'p> {
    kind: JoinKind,
    left: BoxOp<'p>,
    right: BoxOp<'p>,
    cond: Option<&'p Expr>,
    /// Widths of the left and right rows (for NULL-extended rows).
    widths: (usize, usize),
    rows: Option<Vec<Row>>,
    matched: Vec<bool>,
    cur: Option<(Row, usize, bool)>,
    unmatched: Option<usize>,
}

impl<'p> NestedLoop<'p> {
    /// A nested loop of `left` over `right`.
    pub fn new(
        kind: JoinKind,
        left: BoxOp<'p>,
        right: BoxOp<'p>,
        cond: Option<&'p Expr>,
        widths: (usize, usize),
    ) -> Self {
        Self { kind, left, right, cond, widths, rows: None, matched: Vec::new(), cur: None, unmatched: None }
    }
}

impl Operator for NestedLoop<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        if self.rows.is_none() {
            let mut rows = Vec::new();
            while let Some(r) = self.right.next(cx)? {
                rows.push(r);
            }
            self.matched = vec![false; rows.len()];
            self.rows = Some(rows);
        }
        loop {
            if let Some(i) = &mut self.unmatched {
                let rows = self.rows.as_ref().expect("built");
                while *i < rows.len() {
                    let j = *i;
                    *i += 1;
                    if !self.matched[j] {
                        let mut r = vec![Datum::Null; self.widths.0];
                        r.extend_from_slice(&rows[j]);
                        return Ok(Some(r));
                    }
                }
                return Ok(None);
            }
            if let Some((l, pos, matched)) = &mut self.cur {
                let rows = self.rows.as_ref().expect("built");
                while *pos < rows.len() {
                    let j = *pos;
                    *pos += 1;
                    let mut joined = l.clone();
                    joined.extend_from_slice(&rows[j]);
                    if let Some(c) = self.cond {
                        if !c.test(&joined, &cx.eval)? {
                            continue;
                        }
                    }
                    *matched = true;
                    self.matched[j] = true;
                    match self.kind {
                        JoinKind::Semi => {
                            let (l, _, _) = self.cur.take().expect("current");
                            return Ok(Some(l));
                        }
                        JoinKind::Anti | JoinKind::AntiNullAware => {
                            *pos = rows.len();
                            break;
                        }
                        _ => return Ok(Some(joined)),
                    }
                }
                let (l, _, matched) = self.cur.take().expect("current");
                match (self.kind, matched) {
                    (JoinKind::Left | JoinKind::Full, false) => {
                        let mut r = l;
                        r.resize(r.len() + self.widths.1, Datum::Null);
                        return Ok(Some(r));
                    }
                    (JoinKind::Anti | JoinKind::AntiNullAware, false) => return Ok(Some(l)),
                    _ => {}
                }
            }
            cx.interrupt.check()?;
            match self.left.next(cx)? {
                Some(l) => self.cur = Some((l, 0, false)),
                None if matches!(self.kind, JoinKind::Full | JoinKind::Right) => self.unmatched = Some(0),
                None => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{col, ctx, drain, ints};
    use crate::expr::BinOp;
    use crate::types::SqlType;

    fn run(kind: JoinKind) -> Vec<Vec<Option<i64>>> {
        // left.a < right.b
        let cond = Expr::Binary(BinOp::Lt, Box::new(col(0)), Box::new(col(1)), SqlType::Bool);
        let mut j = NestedLoop::new(
            kind,
            ints(&[&[Some(1)], &[Some(5)], &[None]]),
            ints(&[&[Some(3)], &[Some(4)], &[Some(0)]]),
            Some(&cond),
            (1, 1),
        );
        drain(&mut j, &mut ctx(1 << 20))
    }

    #[test]
    fn inequality_joins_of_every_kind() {
        assert_eq!(run(JoinKind::Inner), vec![vec![Some(1), Some(3)], vec![Some(1), Some(4)]]);
        assert_eq!(
            run(JoinKind::Left),
            vec![vec![Some(1), Some(3)], vec![Some(1), Some(4)], vec![Some(5), None], vec![None, None]]
        );
        assert_eq!(run(JoinKind::Full).last(), Some(&vec![None, Some(0)]));
        assert_eq!(run(JoinKind::Semi), vec![vec![Some(1)]]);
        assert_eq!(run(JoinKind::Anti), vec![vec![Some(5)], vec![None]]);
        let mut cross = NestedLoop::new(
            JoinKind::Inner,
            ints(&[&[Some(1)], &[Some(2)]]),
            ints(&[&[Some(7)], &[Some(8)]]),
            None,
            (1, 1),
        );
        assert_eq!(drain(&mut cross, &mut ctx(1 << 20)).len(), 4);
    }
}
