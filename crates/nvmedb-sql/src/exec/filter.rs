//! The filter operator: rows of its input that satisfy a predicate (TRUE; NULL rejects).
//!
//! Owns: [`Filter`]. Invariant: rows pass in their input's order, unchanged.

use super::{BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;

/// Rows of `input` for which `pred` is true.
pub struct Filter<'p> {
    /// Input.
    pub input: BoxOp<'p>,
    /// Predicate over the input row.
    pub pred: &'p Expr,
}

impl Operator for Filter<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        while let Some(r) = self.input.next(cx)? {
            if self.pred.test(&r, &cx.eval)? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{col, ctx, drain, ints};
    use crate::expr::BinOp;
    use crate::types::{Datum, SqlType};

    #[test]
    fn keeps_only_rows_where_the_predicate_is_true() {
        let pred =
            Expr::Binary(BinOp::Gt, Box::new(col(0)), Box::new(Expr::Const(Datum::Int(1))), SqlType::Bool);
        let mut f = Filter { input: ints(&[&[Some(1)], &[Some(2)], &[None], &[Some(3)]]), pred: &pred };
        assert_eq!(drain(&mut f, &mut ctx(1 << 20)), vec![vec![Some(2)], vec![Some(3)]]);
    }
}
