//! The set-returning functions of a select list, run in step over each input row.
//!
//! Owns: [`ProjectSet`]. Invariant: for each input row, as many output rows as its longest
//! call returns (each the input row then the calls' values, NULL for a call already done),
//! and none when every call returns none, as PostgreSQL (10 and later) does.

use super::{BoxOp, ExecCtx, Operator, Row};
use crate::array::Srf;
use crate::error::SqlResult;
use crate::expr::Expr;
use crate::types::Datum;

/// The calls `calls` over each row of `input`.
pub struct ProjectSet<'p> {
    /// Input.
    pub input: BoxOp<'p>,
    /// (function, arguments over the input row, array argument is a vector).
    pub calls: &'p [(Srf, Vec<Expr>, bool)],
    /// The current input row and each call's values for it.
    current: Option<(Row, Vec<Vec<Datum>>)>,
    /// The next position in the current row's values.
    next: usize,
}

impl<'p> ProjectSet<'p> {
    /// The operator over `input`.
    pub fn new(input: BoxOp<'p>, calls: &'p [(Srf, Vec<Expr>, bool)]) -> Self {
        Self { input, calls, current: None, next: 0 }
    }
}

impl Operator for ProjectSet<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        loop {
            if let Some((row, values)) = &self.current {
                if values.iter().any(|v| self.next < v.len()) {
                    let mut out = row.clone();
                    out.extend(values.iter().map(|v| v.get(self.next).cloned().unwrap_or(Datum::Null)));
                    self.next += 1;
                    return Ok(Some(out));
                }
            }
            let Some(row) = self.input.next(cx)? else { return Ok(None) };
            let mut values = Vec::with_capacity(self.calls.len());
            for (f, args, vector) in self.calls {
                let vals = args.iter().map(|a| a.eval(&row, &cx.eval)).collect::<SqlResult<Vec<_>>>()?;
                values.push(f.rows(&vals, *vector)?);
            }
            self.current = Some((row, values));
            self.next = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{col, ctx, drain, ints};

    #[test]
    fn calls_run_in_step_and_pad_with_null() {
        // generate_series(1, a) beside generate_series(1, 2): the longer one decides.
        let one = || Expr::Const(Datum::Int(1));
        let calls = [
            (Srf::Series, vec![one(), col(0)], false),
            (Srf::Series, vec![one(), Expr::Const(Datum::Int(2))], false),
        ];
        let mut p = ProjectSet::new(ints(&[&[Some(3)], &[Some(0)], &[Some(1)]]), &calls);
        assert_eq!(
            drain(&mut p, &mut ctx(1 << 20)),
            vec![
                vec![Some(3), Some(1), Some(1)],
                vec![Some(3), Some(2), Some(2)],
                vec![Some(3), Some(3), None],
                vec![Some(0), None, Some(1)],
                vec![Some(0), None, Some(2)],
                vec![Some(1), Some(1), Some(1)],
                vec![Some(1), None, Some(2)],
            ]
        );
    }
}
