//! The projection operator: computed columns of each input row.
//!
//! Owns: [`Project`]. Invariant: one output row per input row, in order; a projection that
//! only picks columns moves them out of the input row instead of copying them.

use super::{BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;
use crate::types::Datum;

/// `exprs` over each row of `input`.
pub struct Project<'p> {
    /// Input.
    pub input: BoxOp<'p>,
    /// Output expressions over the input row.
    pub exprs: &'p [Expr],
}

impl Operator for Project<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        let Some(mut r) = self.input.next(cx)? else { return Ok(None) };
        // Columns are taken out of the input row when no later expression reads them again.
        let mut out = Vec::with_capacity(self.exprs.len());
        for (i, e) in self.exprs.iter().enumerate() {
            match e {
                Expr::Column(c) if !self.exprs[i + 1..].iter().any(|x| reads(x, *c)) => {
                    out.push(std::mem::replace(&mut r[*c], Datum::Null));
                }
                e => out.push(e.eval(&r, &cx.eval)?),
            }
        }
        Ok(Some(out))
    }
}

fn reads(e: &Expr, c: usize) -> bool {
    let mut hit = false;
    e.columns(&mut |x| hit |= x == c);
    hit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{col, ctx, drain, ints};
    use crate::expr::BinOp;
    use crate::types::SqlType;

    #[test]
    fn computes_and_reorders_columns() {
        let sum = Expr::Binary(BinOp::Add, Box::new(col(0)), Box::new(col(1)), SqlType::Int8);
        let exprs = [col(1), sum, col(1), col(0)];
        let mut p = Project { input: ints(&[&[Some(1), Some(10)], &[Some(2), None]]), exprs: &exprs };
        assert_eq!(
            drain(&mut p, &mut ctx(1 << 20)),
            vec![vec![Some(10), Some(11), Some(10), Some(1)], vec![None, None, None, Some(2)]]
        );
    }
}
