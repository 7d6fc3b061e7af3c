//! The sort operator: ORDER BY, as a top-N heap under a LIMIT, in memory, or as an external
//! merge sort past the memory budget.
//!
//! Owns: [`Sort`] and [`compare_keys`] (the one ordering of sort keys: ASC/DESC, NULLS
//! FIRST/LAST). With a known LIMIT + OFFSET of n rows only the n smallest are kept (a bounded
//! heap); otherwise rows are collected and sorted, and when they outgrow `work_mem` each
//! sorted run is written to a temporary file and the runs are merged. Invariant: the sort is
//! stable (rows with equal keys keep their input order), in every mode.

use super::spill::{row_bytes, Reader, SpillFile};
use super::{BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use crate::expr::Expr;
use crate::plan::physical::SortKey;
use crate::types::Datum;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// Orders two rows of key values by `keys`.
pub fn compare_keys(keys: &[SortKey], a: &[Datum], b: &[Datum]) -> Ordering {
    for (k, (x, y)) in keys.iter().zip(a.iter().zip(b)) {
        let o = match (x.is_null(), y.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) => return if k.nulls_first { Ordering::Less } else { Ordering::Greater },
            (false, true) => return if k.nulls_first { Ordering::Greater } else { Ordering::Less },
            _ => x.compare(y).unwrap_or(Ordering::Equal),
        };
        let o = if k.asc { o } else { o.reverse() };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// A row with its sort keys and input position (for stability).
struct Item<'k> {
    keys: Row,
    seq: u64,
    row: Row,
    by: &'k [SortKey],
}

impl PartialEq for Item<'_> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Item<'_> {}
impl PartialOrd for Item<'_> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item<'_> {
    fn cmp(&self, o: &Self) -> Ordering {
        compare_keys(self.by, &self.keys, &o.keys).then(self.seq.cmp(&o.seq))
    }
}

/// A sorted run's next row in the merge (reversed: the heap is a max-heap).
struct Head<'k> {
    item: Item<'k>,
    run: usize,
}
impl PartialEq for Head<'_> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Head<'_> {}
impl PartialOrd for Head<'_> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Head<'_> {
    fn cmp(&self, o: &Self) -> Ordering {
        o.item.cmp(&self.item)
    }
}

enum Out<'k> {
    Memory(VecDeque<Row>),
    Merge(BinaryHeap<Head<'k>>, Vec<Reader>),
}

/// A sort.
pub struct Sort<'p> {
    input: BoxOp<'p>,
    keys: &'p [SortKey],
    limit: &'p Option<(Option<Expr>, Option<Expr>)>,
    id: usize,
    out: Option<Out<'p>>,
}

impl<'p> Sort<'p> {
    /// A sort of `input` by `keys`, keeping `limit` (LIMIT, OFFSET) rows if bounded.
    pub fn new(
        input: BoxOp<'p>,
        keys: &'p [SortKey],
        limit: &'p Option<(Option<Expr>, Option<Expr>)>,
        id: usize,
    ) -> Self {
        Self { input, keys, limit, id, out: None }
    }

    fn item(&self, row: Row, seq: u64, cx: &ExecCtx<'_>) -> SqlResult<Item<'p>> {
        let keys = self.keys.iter().map(|k| k.expr.eval(&row, &cx.eval)).collect::<SqlResult<Row>>()?;
        Ok(Item { keys, seq, row, by: self.keys })
    }

    fn write_run(items: &mut Vec<Item<'p>>) -> SqlResult<Reader> {
        items.sort_unstable();
        let mut f = SpillFile::new()?;
        for it in items.drain(..) {
            // Keys, the sequence number, then the row.
            let mut r = it.keys;
            r.push(Datum::Int(it.seq as i64));
            r.extend(it.row);
            f.push(&r)?;
        }
        f.into_reader()
    }

    fn read_run(&self, rd: &mut Reader) -> SqlResult<Option<Item<'p>>> {
        let Some(mut r) = rd.next_row()? else { return Ok(None) };
        let n = self.keys.len();
        let row = r.split_off(n + 1);
        let seq = match r.pop() {
            Some(Datum::Int(s)) => s as u64,
            _ => 0,
        };
        Ok(Some(Item { keys: r, seq, row, by: self.keys }))
    }

    fn run(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Out<'p>> {
        let bound = match self.limit {
            Some((l, o)) => {
                let skip = cx.count(o)?.unwrap_or(0);
                cx.count(l)?.map(|l| l + skip)
            }
            None => None,
        };
        let mut seq = 0u64;
        if let Some(n) = bound {
            // Top-N: a max-heap of the n smallest.
            let mut heap: BinaryHeap<Item<'p>> = BinaryHeap::with_capacity(n.min(1 << 16) + 1);
            if n > 0 {
                while let Some(r) = self.input.next(cx)? {
                    let it = self.item(r, seq, cx)?;
                    seq += 1;
                    if heap.len() < n {
                        heap.push(it);
                    } else if it < *heap.peek().expect("full heap") {
                        heap.pop();
                        heap.push(it);
                    }
                }
            }
            cx.note(self.id, "Sort Method: top-N heapsort".into());
            return Ok(Out::Memory(heap.into_sorted_vec().into_iter().map(|i| i.row).collect()));
        }
        let mut items = Vec::new();
        let mut bytes = 0usize;
        let mut runs = Vec::new();
        let mut disk = 0usize;
        while let Some(r) = self.input.next(cx)? {
            bytes += row_bytes(&r) + 32 * self.keys.len() + 16;
            items.push(self.item(r, seq, cx)?);
            seq += 1;
            if bytes > cx.work_mem {
                disk += bytes;
                runs.push(Self::write_run(&mut items)?);
                bytes = 0;
            }
        }
        if runs.is_empty() {
            items.sort_unstable();
            cx.note(self.id, "Sort Method: quicksort".into());
            return Ok(Out::Memory(items.into_iter().map(|i| i.row).collect()));
        }
        if !items.is_empty() {
            disk += bytes;
            runs.push(Self::write_run(&mut items)?);
        }
        cx.note(
            self.id,
            format!("Sort Method: external merge  Disk: {}kB  Runs: {}", disk / 1024, runs.len()),
        );
        let mut heap = BinaryHeap::new();
        for (i, rd) in runs.iter_mut().enumerate() {
            if let Some(item) = self.read_run(rd)? {
                heap.push(Head { item, run: i });
            }
        }
        Ok(Out::Merge(heap, runs))
    }
}

impl Operator for Sort<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        if self.out.is_none() {
            self.out = Some(self.run(cx)?);
        }
        match self.out.as_mut().expect("sorted") {
            Out::Memory(rows) => Ok(rows.pop_front()),
            Out::Merge(heap, _) => {
                let Some(Head { item, run }) = heap.pop() else { return Ok(None) };
                let Some(Out::Merge(_, runs)) = self.out.as_mut() else { unreachable!() };
                let mut rd = std::mem::replace(&mut runs[run], Reader::empty());
                let nxt = self.read_run(&mut rd)?;
                let Some(Out::Merge(heap, runs)) = self.out.as_mut() else { unreachable!() };
                runs[run] = rd;
                if let Some(n) = nxt {
                    heap.push(Head { item: n, run });
                }
                Ok(Some(item.row))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{col, ctx, drain, ints};

    fn key(i: usize, asc: bool, nulls_first: bool) -> SortKey {
        SortKey { expr: col(i), asc, nulls_first }
    }

    fn input() -> Vec<Vec<Option<i64>>> {
        // (key, input position): many duplicates and NULLs, to check order and stability.
        (0..3000).map(|i| vec![if i % 7 == 0 { None } else { Some((i * 37) % 11) }, Some(i)]).collect()
    }

    fn expected(asc: bool) -> Vec<Vec<Option<i64>>> {
        let mut v = input();
        v.sort_by(|a, b| {
            let o = match (a[0], b[0]) {
                (None, None) => Ordering::Equal,
                (None, _) => Ordering::Greater,
                (_, None) => Ordering::Less,
                (Some(x), Some(y)) => {
                    if asc {
                        x.cmp(&y)
                    } else {
                        y.cmp(&x)
                    }
                }
            };
            // NULLs last for ASC, first for DESC (PostgreSQL's defaults).
            let o = if asc || (a[0].is_some() && b[0].is_some()) { o } else { o.reverse() };
            o.then(a[1].cmp(&b[1]))
        });
        v
    }

    #[test]
    fn sorts_stably_in_memory_externally_and_top_n() {
        for asc in [true, false] {
            let keys = [key(0, asc, !asc)];
            let want = expected(asc);
            for mem in [1 << 30, 4096] {
                let rows = input();
                let refs: Vec<&[Option<i64>]> = rows.iter().map(Vec::as_slice).collect();
                let mut s = Sort::new(ints(&refs), &keys, &None, 0);
                let mut cx = ctx(mem);
                cx.stats = Some(vec![Default::default()]);
                assert_eq!(drain(&mut s, &mut cx), want, "asc {asc}, work_mem {mem}");
                let method = &cx.stats.unwrap()[0].notes[0];
                assert_eq!(method.starts_with("Sort Method: external merge"), mem == 4096, "{method}");
            }
            let limit = Some((Some(Expr::Const(Datum::Int(10))), Some(Expr::Const(Datum::Int(5)))));
            let rows = input();
            let refs: Vec<&[Option<i64>]> = rows.iter().map(Vec::as_slice).collect();
            let mut s = Sort::new(ints(&refs), &keys, &limit, 0);
            assert_eq!(drain(&mut s, &mut ctx(1 << 20)), want[..15].to_vec());
        }
    }
}
