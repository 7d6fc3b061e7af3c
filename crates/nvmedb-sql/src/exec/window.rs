//! The window operator: row_number, rank, dense_rank and aggregates OVER (PARTITION BY …
//! ORDER BY …).
//!
//! Owns: [`Window`]. The input is read whole; for each call its rows are ordered by
//! (partition keys, order keys, input position) and the values computed a partition at a
//! time: with ORDER BY an aggregate's frame runs from the partition's start to the current
//! row's last peer (RANGE, the default) or to the current row (ROWS); without ORDER BY it is
//! the whole partition. Invariant: rows come out in input order, each with one value per call.

use super::sort::compare_keys;
use super::{hashkey, BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::AggFunc;
use crate::plan::logical::{WindowCall, WindowFunc};
use crate::plan::physical::SortKey;
use crate::types::Datum;
use std::cmp::Ordering;
use std::collections::VecDeque;

/// Window functions over the whole input.
pub struct Window<'p> {
    input: BoxOp<'p>,
    calls: &'p [WindowCall],
    out: Option<VecDeque<Row>>,
}

impl<'p> Window<'p> {
    /// Windows `calls` over `input`.
    pub fn new(input: BoxOp<'p>, calls: &'p [WindowCall], _id: usize) -> Self {
        Self { input, calls, out: None }
    }

    fn compute(&self, rows: &[Row], call: &WindowCall, cx: &ExecCtx<'_>) -> SqlResult<Vec<Datum>> {
        let n = rows.len();
        let mut part = Vec::with_capacity(n);
        let mut ord = Vec::with_capacity(n);
        for r in rows {
            let mut k = Vec::new();
            for p in &call.partition {
                hashkey::encode(&p.eval(r, &cx.eval)?, &mut k);
            }
            part.push(k);
            ord.push(call.order.iter().map(|o| o.expr.eval(r, &cx.eval)).collect::<SqlResult<Vec<_>>>()?);
        }
        let keys: Vec<SortKey> = call
            .order
            .iter()
            .map(|o| SortKey { expr: o.expr.clone(), asc: o.asc, nulls_first: o.nulls_first })
            .collect();
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by(|&a, &b| {
            part[a].cmp(&part[b]).then_with(|| compare_keys(&keys, &ord[a], &ord[b])).then(a.cmp(&b))
        });
        let mut out = vec![Datum::Null; n];
        let mut i = 0;
        while i < n {
            let mut j = i;
            while j < n && part[idx[j]] == part[idx[i]] {
                j += 1;
            }
            self.partition(&idx[i..j], rows, &ord, &keys, call, cx, &mut out)?;
            i = j;
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn partition(
        &self,
        idx: &[usize],
        rows: &[Row],
        ord: &[Vec<Datum>],
        keys: &[SortKey],
        call: &WindowCall,
        cx: &ExecCtx<'_>,
        out: &mut [Datum],
    ) -> SqlResult<()> {
        let peers = |a: usize, b: usize| compare_keys(keys, &ord[a], &ord[b]) == Ordering::Equal;
        match call.func {
            WindowFunc::RowNumber => {
                for (k, &r) in idx.iter().enumerate() {
                    out[r] = Datum::Int(k as i64 + 1);
                }
            }
            WindowFunc::Rank | WindowFunc::DenseRank => {
                let (mut rank, mut dense) = (0i64, 0i64);
                for (k, &r) in idx.iter().enumerate() {
                    if k == 0 || !peers(idx[k - 1], r) {
                        rank = k as i64 + 1;
                        dense += 1;
                    }
                    out[r] = Datum::Int(if call.func == WindowFunc::Rank { rank } else { dense });
                }
            }
            WindowFunc::Agg(f) => {
                let add = |acc: &mut crate::expr::Acc, r: usize| -> SqlResult<()> {
                    let v = if f == AggFunc::CountStar {
                        Datum::Null
                    } else {
                        call.arg.eval(&rows[r], &cx.eval)?
                    };
                    f.add(acc, &v, "")
                };
                let mut acc = f.start();
                if call.order.is_empty() {
                    for &r in idx {
                        add(&mut acc, r)?;
                    }
                    let v = f.finish(acc, call.ty)?;
                    for &r in idx {
                        out[r] = v.clone();
                    }
                    return Ok(());
                }
                let mut k = 0;
                while k < idx.len() {
                    let mut e = k + 1;
                    if call.range_frame {
                        while e < idx.len() && peers(idx[k], idx[e]) {
                            e += 1;
                        }
                    }
                    for &r in &idx[k..e] {
                        add(&mut acc, r)?;
                    }
                    let v = f.finish(acc.clone(), call.ty)?;
                    for &r in &idx[k..e] {
                        out[r] = v.clone();
                    }
                    k = e;
                }
            }
        }
        Ok(())
    }
}

impl Operator for Window<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        if self.out.is_none() {
            let mut rows = Vec::new();
            while let Some(r) = self.input.next(cx)? {
                rows.push(r);
            }
            let mut values = Vec::with_capacity(self.calls.len());
            for c in self.calls {
                values.push(self.compute(&rows, c, cx)?);
            }
            let mut out = VecDeque::with_capacity(rows.len());
            for (i, mut r) in rows.into_iter().enumerate() {
                for v in &mut values {
                    r.push(std::mem::replace(&mut v[i], Datum::Null));
                }
                out.push_back(r);
            }
            self.out = Some(out);
        }
        Ok(self.out.as_mut().expect("computed").pop_front())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{col, ctx, drain, ints};
    use crate::plan::logical::SortSpec;
    use crate::types::SqlType;

    fn call(func: WindowFunc, range_frame: bool) -> WindowCall {
        WindowCall {
            func,
            arg: col(1),
            arg_ty: SqlType::Int4,
            ty: SqlType::Int8,
            partition: vec![col(0)],
            order: vec![SortSpec { expr: col(1), asc: true, nulls_first: false }],
            range_frame,
        }
    }

    #[test]
    fn ranks_and_running_sums_per_partition() {
        let calls = [
            call(WindowFunc::RowNumber, true),
            call(WindowFunc::Rank, true),
            call(WindowFunc::DenseRank, true),
            call(WindowFunc::Agg(AggFunc::Sum), true),
            call(WindowFunc::Agg(AggFunc::Sum), false),
        ];
        let input = ints(&[
            &[Some(1), Some(10)],
            &[Some(1), Some(20)],
            &[Some(1), Some(20)],
            &[Some(1), Some(30)],
            &[Some(2), Some(5)],
        ]);
        let mut w = Window::new(input, &calls, 0);
        let out = drain(&mut w, &mut ctx(1 << 20));
        let cols: Vec<Vec<Option<i64>>> = out.iter().map(|r| r[2..].to_vec()).collect();
        assert_eq!(
            cols,
            vec![
                vec![Some(1), Some(1), Some(1), Some(10), Some(10)],
                vec![Some(2), Some(2), Some(2), Some(50), Some(30)],
                vec![Some(3), Some(2), Some(2), Some(50), Some(50)],
                vec![Some(4), Some(4), Some(3), Some(80), Some(80)],
                vec![Some(1), Some(1), Some(1), Some(5), Some(5)],
            ]
        );
    }
}
