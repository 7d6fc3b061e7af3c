//! The VALUES operator (and the one empty row of a SELECT without FROM).
//!
//! Owns: [`Values`]. Invariant: rows come out in the order written, each expression
//! evaluated when its row is pulled.

use super::{ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;

/// Literal rows.
pub struct Values<'p> {
    rows: &'p [Vec<Expr>],
    next: usize,
    /// The single empty row of `Result`.
    one: bool,
}

impl<'p> Values<'p> {
    /// The rows `rows`.
    pub fn new(rows: &'p [Vec<Expr>]) -> Self {
        Self { rows, next: 0, one: false }
    }

    /// One row without columns.
    pub fn one() -> Self {
        Self { rows: &[], next: 0, one: true }
    }
}

impl Operator for Values<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        if self.one {
            self.one = false;
            return Ok(Some(Vec::new()));
        }
        let Some(r) = self.rows.get(self.next) else { return Ok(None) };
        self.next += 1;
        Ok(Some(r.iter().map(|e| e.eval(&[], &cx.eval)).collect::<SqlResult<_>>()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{ctx, drain};
    use crate::types::Datum;

    #[test]
    fn rows_in_order_and_one_empty_row() {
        let rows = vec![vec![Expr::Const(Datum::Int(1))], vec![Expr::Const(Datum::Null)]];
        assert_eq!(drain(&mut Values::new(&rows), &mut ctx(1 << 20)), vec![vec![Some(1)], vec![None]]);
        assert_eq!(drain(&mut Values::one(), &mut ctx(1 << 20)), vec![Vec::<Option<i64>>::new()]);
    }
}
