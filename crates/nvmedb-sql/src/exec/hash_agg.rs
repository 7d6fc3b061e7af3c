//! The hash aggregate operator: grouping in a hash table, aggregates with DISTINCT and
//! FILTER.
//!
//! Owns: [`HashAgg`]. When the groups outgrow the memory budget, rows of groups already in
//! memory keep being aggregated and rows of new groups go to temporary files partitioned by
//! key hash; once the input is done the groups in memory are output, then each partition is
//! aggregated the same way (partitioned again if it still does not fit). Invariant: every
//! input row is aggregated into exactly one group exactly once; without GROUP BY there is
//! exactly one output row, also for no input.

use super::spill::{row_bytes, Partitions, Reader};
use super::{hashkey, BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::{Acc, AggFunc, Expr};
use crate::plan::logical::AggCall;
use crate::types::Datum;
use std::collections::{HashMap, HashSet, VecDeque};

/// Partitions of one spill level.
const FANOUT: usize = 16;

struct Group {
    keys: Row,
    accs: Vec<Acc>,
    /// Values seen per DISTINCT aggregate.
    seen: Vec<HashSet<Vec<u8>>>,
}

/// Where the rows being aggregated come from.
enum Source {
    Input,
    Spilled(Reader, u32),
}

/// A hash aggregate.
pub struct HashAgg<'p> {
    input: BoxOp<'p>,
    group: &'p [Expr],
    aggs: &'p [AggCall],
    id: usize,
    out: VecDeque<Row>,
    /// Partitions still to aggregate, with their spill depth.
    pending: Vec<(Reader, u32)>,
    started: bool,
}

fn hash(k: &[u8], depth: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(depth).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &b in k {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 31)
}

impl<'p> HashAgg<'p> {
    /// A hash aggregate of `input`.
    pub fn new(input: BoxOp<'p>, group: &'p [Expr], aggs: &'p [AggCall], id: usize) -> Self {
        Self { input, group, aggs, id, out: VecDeque::new(), pending: Vec::new(), started: false }
    }

    fn new_group(&self, keys: Row) -> Group {
        Group {
            keys,
            accs: self.aggs.iter().map(|a| a.func.start()).collect(),
            seen: self.aggs.iter().map(|_| HashSet::new()).collect(),
        }
    }

    fn add(&self, g: &mut Group, r: &Row, cx: &ExecCtx<'_>, bytes: &mut usize) -> SqlResult<()> {
        for (i, a) in self.aggs.iter().enumerate() {
            if let Some(f) = &a.filter {
                if !f.test(r, &cx.eval)? {
                    continue;
                }
            }
            let v = match a.func {
                AggFunc::CountStar => {
                    a.func.add(&mut g.accs[i], &Datum::Null, "")?;
                    continue;
                }
                _ => a.arg.operand(r, &cx.eval)?,
            };
            if a.distinct {
                if v.is_null() {
                    continue;
                }
                let mut k = Vec::new();
                hashkey::encode(&v, &mut k);
                *bytes += k.len() + 32;
                if !g.seen[i].insert(k) {
                    continue;
                }
            }
            a.func.add(&mut g.accs[i], &v, &a.sep)?;
        }
        Ok(())
    }

    /// Aggregates every row of `src`; groups that do not fit go to partitions (returned).
    fn consume(&mut self, cx: &mut ExecCtx<'_>, mut src: Source) -> SqlResult<()> {
        let depth = match &src {
            Source::Input => 0,
            Source::Spilled(_, d) => *d,
        };
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut bytes = 0usize;
        let mut spill: Option<Partitions> = None;
        let mut key = Vec::new();
        let mut keys = Vec::with_capacity(self.group.len());
        loop {
            let r = match &mut src {
                Source::Input => self.input.next(cx)?,
                Source::Spilled(rd, _) => rd.next_row()?,
            };
            let Some(r) = r else { break };
            key.clear();
            keys.clear();
            for g in self.group {
                let v = g.eval(&r, &cx.eval)?;
                hashkey::encode(&v, &mut key);
                keys.push(v);
            }
            let gi = match index.get(&key) {
                Some(&i) => i,
                None => {
                    if let Some(p) = &mut spill {
                        p.push(hash(&key, depth), &r)?;
                        continue;
                    }
                    bytes += row_bytes(&keys) + key.len() + 64 * self.aggs.len().max(1) + 48;
                    groups.push(self.new_group(std::mem::take(&mut keys)));
                    index.insert(key.clone(), groups.len() - 1);
                    if bytes > cx.work_mem && !self.group.is_empty() && depth < 6 {
                        spill = Some(Partitions::new(FANOUT)?);
                        cx.note(self.id, format!("Batches: {}  (spilled at depth {depth})", FANOUT));
                    }
                    groups.len() - 1
                }
            };
            let mut g =
                std::mem::replace(&mut groups[gi], Group { keys: vec![], accs: vec![], seen: vec![] });
            let r2 = self.add(&mut g, &r, cx, &mut bytes);
            groups[gi] = g;
            r2?;
        }
        if groups.is_empty() && self.group.is_empty() && depth == 0 {
            groups.push(self.new_group(Vec::new()));
        }
        for g in groups {
            let mut row = g.keys;
            for (a, acc) in self.aggs.iter().zip(g.accs) {
                row.push(a.func.finish(acc, a.ty)?);
            }
            self.out.push_back(row);
        }
        if let Some(mut p) = spill {
            for i in 0..FANOUT {
                self.pending.push((p.take(i)?, depth + 1));
            }
        }
        Ok(())
    }
}

impl Operator for HashAgg<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        loop {
            if let Some(r) = self.out.pop_front() {
                return Ok(Some(r));
            }
            if !self.started {
                self.started = true;
                self.consume(cx, Source::Input)?;
                continue;
            }
            match self.pending.pop() {
                Some((rd, depth)) => self.consume(cx, Source::Spilled(rd, depth))?,
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

    fn call(func: AggFunc, distinct: bool, filter: Option<Expr>) -> AggCall {
        AggCall {
            func,
            arg: col(1),
            arg_ty: SqlType::Int4,
            ty: func.result_type(SqlType::Int4).unwrap(),
            distinct,
            filter,
            sep: String::new(),
        }
    }

    #[test]
    fn groups_with_distinct_and_filter_in_memory_and_spilled() {
        let positive =
            Expr::Binary(BinOp::Gt, Box::new(col(1)), Box::new(Expr::Const(Datum::Int(1))), SqlType::Bool);
        let aggs = [
            call(AggFunc::CountStar, false, None),
            call(AggFunc::Sum, false, None),
            call(AggFunc::Count, true, None),
            call(AggFunc::Sum, false, Some(positive)),
        ];
        let group = [col(0)];
        let mut input: Vec<Vec<Option<i64>>> = Vec::new();
        for g in 0..200 {
            for v in [1, 2, 2, 3] {
                input.push(vec![Some(g), Some(v)]);
            }
        }
        input.push(vec![None, Some(5)]);
        for mem in [1 << 20, 2000] {
            let rows: Vec<&[Option<i64>]> = input.iter().map(Vec::as_slice).collect();
            let mut op = HashAgg::new(ints(&rows), &group, &aggs, 0);
            let mut out = drain(&mut op, &mut ctx(mem));
            out.sort();
            assert_eq!(out.len(), 201, "every group once (work_mem {mem})");
            assert_eq!(out[0], vec![None, Some(1), Some(5), Some(1), Some(5)]);
            assert!(
                out[1..].iter().all(|r| r[1..] == [Some(4), Some(8), Some(3), Some(7)]),
                "{:?}",
                &out[1..3]
            );
        }
    }

    #[test]
    fn no_groups_gives_one_row_even_without_input() {
        let aggs = [call(AggFunc::CountStar, false, None), call(AggFunc::Sum, false, None)];
        let mut op = HashAgg::new(ints(&[]), &[], &aggs, 0);
        assert_eq!(drain(&mut op, &mut ctx(1 << 20)), vec![vec![Some(0), None]]);
    }
}
