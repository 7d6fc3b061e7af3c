//! The LIMIT / OFFSET operator.
//!
//! Owns: [`Limit`]. Invariant: once the limit is reached the input is not pulled again, so
//! the scans below stop.

use super::{BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;

/// At most `limit` rows of `input` after skipping `offset`.
pub struct Limit<'p> {
    input: BoxOp<'p>,
    limit: &'p Option<Expr>,
    offset: &'p Option<Expr>,
    /// (rows left to skip, rows left to pass) once evaluated.
    left: Option<(usize, Option<usize>)>,
}

impl<'p> Limit<'p> {
    /// A limit over `input`.
    pub fn new(input: BoxOp<'p>, limit: &'p Option<Expr>, offset: &'p Option<Expr>) -> Self {
        Self { input, limit, offset, left: None }
    }
}

impl Operator for Limit<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        if self.left.is_none() {
            self.left = Some((cx.count(self.offset)?.unwrap_or(0), cx.count(self.limit)?));
        }
        let (skip, pass) = self.left.as_mut().expect("set above");
        if *pass == Some(0) {
            return Ok(None);
        }
        while *skip > 0 {
            if self.input.next(cx)?.is_none() {
                return Ok(None);
            }
            *skip -= 1;
        }
        let r = self.input.next(cx)?;
        if let (Some(p), Some(_)) = (pass.as_mut(), &r) {
            *p -= 1;
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{ctx, drain, Rows};
    use crate::types::Datum;
    use std::collections::VecDeque;

    /// Counts the rows pulled from it.
    struct Counting(Rows, std::rc::Rc<std::cell::Cell<usize>>);
    impl Operator for Counting {
        fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
            self.1.set(self.1.get() + 1);
            self.0.next(cx)
        }
    }

    #[test]
    fn skips_the_offset_and_stops_pulling_at_the_limit() {
        let pulled = std::rc::Rc::new(std::cell::Cell::new(0));
        let rows: VecDeque<Row> = (0..100).map(|i| vec![Datum::Int(i)]).collect();
        let (l, o) = (Some(Expr::Const(Datum::Int(3))), Some(Expr::Const(Datum::Int(2))));
        let mut op = Limit::new(Box::new(Counting(Rows(rows), pulled.clone())), &l, &o);
        assert_eq!(drain(&mut op, &mut ctx(1 << 20)), vec![vec![Some(2)], vec![Some(3)], vec![Some(4)]]);
        assert_eq!(pulled.get(), 5, "the input is not pulled past the limit");
        let neg = Some(Expr::Const(Datum::Int(-1)));
        let mut op = Limit::new(Box::new(Rows(VecDeque::new())), &neg, &None);
        assert_eq!(op.next(&mut ctx(1 << 20)).unwrap_err().code, crate::error::code::INVALID_ROW_COUNT);
    }
}
