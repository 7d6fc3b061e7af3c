//! Set operations: UNION [ALL], INTERSECT [ALL], EXCEPT [ALL].
//!
//! Owns: [`SetOp`]. UNION ALL appends; UNION is the append deduplicated (through
//! [`super::distinct`]'s rules); INTERSECT and EXCEPT count the right side's rows in a hash
//! table and stream the left side against it. Invariant: rows compare as DISTINCT does (NULLs
//! equal); the ALL forms keep min(m, n) (INTERSECT) or max(m - n, 0) (EXCEPT) copies of a row
//! the left side has m times and the right side n times, as the standard says.

use super::{hashkey, BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::plan::logical::SetOpKind;
use std::collections::{HashMap, HashSet};

/// A set operation.
pub struct SetOp<'p> {
    op: SetOpKind,
    all: bool,
    left: BoxOp<'p>,
    right: BoxOp<'p>,
    left_done: bool,
    counts: Option<HashMap<Vec<u8>, u64>>,
    emitted: HashSet<Vec<u8>>,
}

impl<'p> SetOp<'p> {
    /// `left op right`.
    pub fn new(op: SetOpKind, all: bool, left: BoxOp<'p>, right: BoxOp<'p>, _id: usize) -> Self {
        Self { op, all, left, right, left_done: false, counts: None, emitted: HashSet::new() }
    }

    fn key(r: &Row) -> Vec<u8> {
        let mut k = Vec::new();
        hashkey::encode_all(r, &mut k);
        k
    }
}

impl Operator for SetOp<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        if self.op == SetOpKind::Union {
            loop {
                let r = if !self.left_done {
                    match self.left.next(cx)? {
                        Some(r) => r,
                        None => {
                            self.left_done = true;
                            continue;
                        }
                    }
                } else {
                    match self.right.next(cx)? {
                        Some(r) => r,
                        None => return Ok(None),
                    }
                };
                if self.all || self.emitted.insert(Self::key(&r)) {
                    return Ok(Some(r));
                }
            }
        }
        if self.counts.is_none() {
            let mut counts = HashMap::new();
            while let Some(r) = self.right.next(cx)? {
                *counts.entry(Self::key(&r)).or_insert(0u64) += 1;
            }
            self.counts = Some(counts);
        }
        let counts = self.counts.as_mut().expect("counted");
        while let Some(r) = self.left.next(cx)? {
            let k = Self::key(&r);
            let n = counts.get_mut(&k);
            let keep = match (self.op, self.all, n) {
                (SetOpKind::Intersect, true, Some(n)) if *n > 0 => {
                    *n -= 1;
                    true
                }
                (SetOpKind::Intersect, false, Some(_)) => self.emitted.insert(k),
                (SetOpKind::Except, true, Some(n)) if *n > 0 => {
                    *n -= 1;
                    false
                }
                (SetOpKind::Except, true, _) => true,
                (SetOpKind::Except, false, None) => self.emitted.insert(k),
                _ => false,
            };
            if keep {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{ctx, drain, ints};

    fn run(op: SetOpKind, all: bool) -> Vec<Vec<Option<i64>>> {
        let l = ints(&[&[Some(1)], &[Some(1)], &[Some(1)], &[Some(2)], &[None], &[None]]);
        let r = ints(&[&[Some(1)], &[Some(1)], &[None], &[Some(3)]]);
        let mut s = SetOp::new(op, all, l, r, 0);
        let mut out = drain(&mut s, &mut ctx(1 << 20));
        out.sort();
        out
    }

    #[test]
    fn bag_and_set_semantics() {
        let v = |xs: &[Option<i64>]| xs.iter().map(|x| vec![*x]).collect::<Vec<_>>();
        assert_eq!(run(SetOpKind::Union, false), v(&[None, Some(1), Some(2), Some(3)]));
        assert_eq!(run(SetOpKind::Union, true).len(), 10);
        assert_eq!(run(SetOpKind::Intersect, false), v(&[None, Some(1)]));
        assert_eq!(run(SetOpKind::Intersect, true), v(&[None, Some(1), Some(1)]));
        assert_eq!(run(SetOpKind::Except, false), v(&[Some(2)]));
        assert_eq!(run(SetOpKind::Except, true), v(&[None, Some(1), Some(2)]));
    }
}
