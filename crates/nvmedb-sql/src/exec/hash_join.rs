//! The hash join operator: the right input read into a hash table on its keys, the left
//! input probing it row by row.
//!
//! Owns: [`HashJoin`] for inner, left, full, semi, anti and NULL-aware anti (`NOT IN`) joins.
//! A build side larger than the memory budget is partitioned with the probe side into
//! temporary files by key hash and joined a partition at a time (a grace hash join, see
//! [`super::spill`]); a full join's unmatched build rows come out at the end of their
//! partition. Invariant: a row whose key has a NULL matches nothing (SQL equality); a `NOT
//! IN` with a NULL among the subquery's values keeps no row, and an empty subquery keeps
//! every row.

use super::spill::{row_bytes, Partitions};
use super::{hashkey, BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;
use crate::plan::logical::JoinKind;
use crate::types::Datum;
use std::collections::HashMap;

/// Spill partitions of a grace hash join.
const FANOUT: usize = 16;

/// The build side in memory.
#[derive(Default)]
struct Table {
    map: HashMap<Vec<u8>, Vec<u32>>,
    rows: Vec<Row>,
    matched: Vec<bool>,
    has_null_key: bool,
}

enum Phase {
    Build,
    Probe,
    /// Emitting the unmatched build rows (full join) from this index.
    Unmatched(usize),
    /// The next spilled partition pair is loaded.
    NextPartition,
    Done,
}

/// A hash join.
pub struct HashJoin<'p> {
    kind: JoinKind,
    left: BoxOp<'p>,
    right: BoxOp<'p>,
    left_keys: &'p [Expr],
    right_keys: &'p [Expr],
    extra: Option<&'p Expr>,
    /// Widths of the left and right rows (for NULL-extended rows).
    widths: (usize, usize),
    id: usize,
    phase: Phase,
    table: Table,
    /// The probe row being joined, its candidates and the next one to try.
    cur: Option<(Row, Vec<u32>, usize, bool)>,
    key: Vec<u8>,
    /// Spilled partitions (build, probe) when the build side did not fit.
    spilled: Option<(Partitions, Partitions)>,
    part: usize,
    /// Probe rows of the current spilled partition.
    probe_part: Option<super::spill::Reader>,
}

impl<'p> HashJoin<'p> {
    /// A hash join; `widths`: the left and right rows' widths (for NULL-extended rows).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: JoinKind,
        left: BoxOp<'p>,
        right: BoxOp<'p>,
        left_keys: &'p [Expr],
        right_keys: &'p [Expr],
        extra: Option<&'p Expr>,
        widths: (usize, usize),
        id: usize,
    ) -> Self {
        Self {
            kind,
            left,
            right,
            left_keys,
            right_keys,
            extra,
            widths,
            id,
            phase: Phase::Build,
            table: Table::default(),
            cur: None,
            key: Vec::new(),
            spilled: None,
            part: 0,
            probe_part: None,
        }
    }

    /// Encodes the key of `r` into `out`; false if a key value is NULL.
    fn key_of(keys: &[Expr], r: &Row, cx: &ExecCtx<'_>, out: &mut Vec<u8>) -> SqlResult<bool> {
        out.clear();
        for k in keys {
            let v = k.operand(r, &cx.eval)?;
            if v.is_null() {
                return Ok(false);
            }
            hashkey::encode(&v, out);
        }
        Ok(true)
    }

    fn insert(&mut self, r: Row, cx: &ExecCtx<'_>) -> SqlResult<()> {
        let mut k = Vec::new();
        if !Self::key_of(self.right_keys, &r, cx, &mut k)? {
            self.table.has_null_key = true;
            if self.kind != JoinKind::Full {
                return Ok(());
            }
            // A full join still outputs it, unmatched.
            self.table.rows.push(r);
            self.table.matched.push(false);
            return Ok(());
        }
        let i = self.table.rows.len() as u32;
        self.table.rows.push(r);
        self.table.matched.push(false);
        self.table.map.entry(k).or_default().push(i);
        Ok(())
    }

    /// Reads the build side; spills both sides by key hash when it outgrows the budget.
    fn build(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<()> {
        let mut bytes = 0usize;
        while let Some(r) = self.right.next(cx)? {
            bytes += row_bytes(&r) + 48;
            self.insert(r, cx)?;
            if bytes > cx.work_mem && self.kind != JoinKind::AntiNullAware {
                return self.spill(cx);
            }
        }
        self.phase = Phase::Probe;
        Ok(())
    }

    /// Moves the build side to partitions, reads the rest of both sides into them.
    fn spill(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<()> {
        let mut build = Partitions::new(FANOUT)?;
        let mut probe = Partitions::new(FANOUT)?;
        let mut k = Vec::new();
        let table = std::mem::take(&mut self.table);
        for r in table.rows {
            let h = if Self::key_of(self.right_keys, &r, cx, &mut k)? { hash(&k) } else { 0 };
            build.push(h, &r)?;
        }
        while let Some(r) = self.right.next(cx)? {
            let h = if Self::key_of(self.right_keys, &r, cx, &mut k)? { hash(&k) } else { 0 };
            build.push(h, &r)?;
        }
        while let Some(r) = self.left.next(cx)? {
            let h = if Self::key_of(self.left_keys, &r, cx, &mut k)? { hash(&k) } else { 0 };
            probe.push(h, &r)?;
        }
        cx.note(self.id, format!("Batches: {FANOUT}  Disk: {}kB", (build.bytes() + probe.bytes()) / 1024));
        self.spilled = Some((build, probe));
        self.part = 0;
        self.phase = Phase::NextPartition;
        Ok(())
    }

    fn next_left(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        match &mut self.probe_part {
            Some(p) => p.next_row(),
            None => self.left.next(cx),
        }
    }

    /// The next output of the probe phase, None when the probe side is exhausted.
    fn probe(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        loop {
            if let Some((l, cands, pos, matched)) = &mut self.cur {
                while *pos < cands.len() {
                    let i = cands[*pos] as usize;
                    *pos += 1;
                    let mut joined = l.clone();
                    joined.extend_from_slice(&self.table.rows[i]);
                    let ok = match self.extra {
                        Some(e) => e.test(&joined, &cx.eval)?,
                        None => true,
                    };
                    if !ok {
                        continue;
                    }
                    *matched = true;
                    match self.kind {
                        JoinKind::Semi => {
                            let l = std::mem::take(l);
                            self.cur = None;
                            return Ok(Some(l));
                        }
                        JoinKind::Anti | JoinKind::AntiNullAware => {
                            *pos = cands.len();
                            break;
                        }
                        JoinKind::Full => {
                            self.table.matched[i] = true;
                            return Ok(Some(joined));
                        }
                        _ => return Ok(Some(joined)),
                    }
                }
                let (l, _, _, matched) = self.cur.take().expect("current row");
                match (self.kind, matched) {
                    (JoinKind::Left | JoinKind::Full, false) => {
                        let mut r = l;
                        r.resize(r.len() + self.widths.1, Datum::Null);
                        return Ok(Some(r));
                    }
                    (JoinKind::Anti, false) => return Ok(Some(l)),
                    (JoinKind::AntiNullAware, false) if !self.table.has_null_key => return Ok(Some(l)),
                    _ => {}
                }
            }
            let Some(l) = self.next_left(cx)? else { return Ok(None) };
            let mut key = std::mem::take(&mut self.key);
            let has_key = Self::key_of(self.left_keys, &l, cx, &mut key)?;
            let cands =
                if has_key { self.table.map.get(&key).cloned().unwrap_or_default() } else { Vec::new() };
            self.key = key;
            if self.kind == JoinKind::AntiNullAware {
                // x NOT IN (…): an empty subquery keeps every row; otherwise a NULL x or a
                // NULL among the values makes the result unknown.
                if self.table.rows.is_empty() && !self.table.has_null_key {
                    return Ok(Some(l));
                }
                if !has_key {
                    continue;
                }
            }
            self.cur = Some((l, cands, 0, false));
        }
    }
}

fn hash(k: &[u8]) -> u64 {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
    for &b in k {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}

impl Operator for HashJoin<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        loop {
            match self.phase {
                Phase::Build => self.build(cx)?,
                Phase::Probe => match self.probe(cx)? {
                    Some(r) => return Ok(Some(r)),
                    None => {
                        self.phase = if self.kind == JoinKind::Full {
                            Phase::Unmatched(0)
                        } else if self.spilled.is_some() {
                            Phase::NextPartition
                        } else {
                            Phase::Done
                        }
                    }
                },
                Phase::Unmatched(i) => {
                    if let Some(pos) = (i..self.table.rows.len()).find(|&j| !self.table.matched[j]) {
                        self.phase = Phase::Unmatched(pos + 1);
                        let mut r = vec![Datum::Null; self.widths.0];
                        r.extend_from_slice(&self.table.rows[pos]);
                        return Ok(Some(r));
                    }
                    self.phase = if self.spilled.is_some() { Phase::NextPartition } else { Phase::Done };
                }
                Phase::NextPartition => {
                    let Some((build, probe)) = &mut self.spilled else {
                        self.phase = Phase::Done;
                        continue;
                    };
                    if self.part >= FANOUT {
                        self.phase = Phase::Done;
                        continue;
                    }
                    let mut rows = build.take(self.part)?;
                    let pr = probe.take(self.part)?;
                    self.part += 1;
                    self.table = Table::default();
                    while let Some(r) = rows.next_row()? {
                        self.insert(r, cx)?;
                    }
                    self.probe_part = Some(pr);
                    self.phase = Phase::Probe;
                }
                Phase::Done => return Ok(None),
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

    fn left() -> BoxOp<'static> {
        ints(&[&[Some(1), Some(10)], &[Some(2), Some(20)], &[None, Some(30)], &[Some(4), Some(40)]])
    }

    fn right() -> BoxOp<'static> {
        ints(&[&[Some(1), Some(100)], &[Some(1), Some(101)], &[Some(3), Some(300)], &[None, Some(999)]])
    }

    fn run(kind: JoinKind, extra: Option<&Expr>, work_mem: usize) -> Vec<Vec<Option<i64>>> {
        let keys = [col(0)];
        let mut j = HashJoin::new(kind, left(), right(), &keys, &keys, extra, (2, 2), 0);
        let mut rows = drain(&mut j, &mut ctx(work_mem));
        rows.sort();
        rows
    }

    #[test]
    fn every_join_kind_in_memory_and_spilled() {
        for mem in [1 << 20, 1] {
            assert_eq!(
                run(JoinKind::Inner, None, mem),
                vec![
                    vec![Some(1), Some(10), Some(1), Some(100)],
                    vec![Some(1), Some(10), Some(1), Some(101)]
                ]
            );
            let l = run(JoinKind::Left, None, mem);
            assert_eq!(l.len(), 5, "{l:?}");
            assert!(l.contains(&vec![None, Some(30), None, None]));
            let f = run(JoinKind::Full, None, mem);
            assert_eq!(f.len(), 7, "{f:?}");
            assert!(
                f.contains(&vec![None, None, None, Some(999)])
                    && f.contains(&vec![None, None, Some(3), Some(300)])
            );
            assert_eq!(run(JoinKind::Semi, None, mem), vec![vec![Some(1), Some(10)]]);
            assert_eq!(
                run(JoinKind::Anti, None, mem),
                vec![vec![None, Some(30)], vec![Some(2), Some(20)], vec![Some(4), Some(40)]]
            );
            // Extra condition: right value > 100 (column 3 of the joined row).
            let extra = Expr::Binary(BinOp::Gt, Box::new(col(3)), Box::new(col(1)), SqlType::Bool);
            assert_eq!(run(JoinKind::Inner, Some(&extra), mem).len(), 2);
        }
    }

    #[test]
    fn not_in_semantics() {
        // The build side holds a NULL key: x NOT IN (…) is never true.
        assert_eq!(run(JoinKind::AntiNullAware, None, 1 << 20), Vec::<Vec<Option<i64>>>::new());
        // Without NULLs: rows whose key is not among the values, but not a NULL key.
        let keys = [col(0)];
        let mut j = HashJoin::new(
            JoinKind::AntiNullAware,
            left(),
            ints(&[&[Some(1)]]),
            &keys,
            &keys,
            None,
            (2, 1),
            0,
        );
        let mut rows = drain(&mut j, &mut ctx(1 << 20));
        rows.sort();
        assert_eq!(rows, vec![vec![Some(2), Some(20)], vec![Some(4), Some(40)]]);
        // An empty subquery keeps every row, a NULL key too.
        let mut j = HashJoin::new(JoinKind::AntiNullAware, left(), ints(&[]), &keys, &keys, None, (2, 1), 0);
        assert_eq!(drain(&mut j, &mut ctx(1 << 20)).len(), 4);
    }
}
