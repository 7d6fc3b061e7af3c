//! The DISTINCT operator: each distinct row once, streaming (a row comes out when first
//! seen).
//!
//! Owns: [`Distinct`]. Past the memory budget the set of rows seen stops growing: rows it
//! holds are still dropped, new ones go to temporary files partitioned by hash and are
//! deduplicated a partition at a time at the end. Invariant: two rows are duplicates when
//! every column is equal or both NULL (as GROUP BY groups them).

use super::spill::{Partitions, Reader};
use super::{hashkey, BoxOp, ExecCtx, Operator, Row};
use crate::error::SqlResult;
use std::collections::HashSet;

const FANOUT: usize = 16;

fn hash(k: &[u8]) -> u64 {
    let mut h: u64 = 0x84222325cbf29ce4;
    for &b in k {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 33)
}

/// Duplicate rows removed.
pub struct Distinct<'p> {
    input: BoxOp<'p>,
    id: usize,
    seen: HashSet<Vec<u8>>,
    bytes: usize,
    spill: Option<Partitions>,
    /// Partitions left, and the one being read.
    parts: Vec<Reader>,
    cur: Option<Reader>,
    input_done: bool,
}

impl<'p> Distinct<'p> {
    /// DISTINCT over `input`.
    pub fn new(input: BoxOp<'p>, id: usize) -> Self {
        Self {
            input,
            id,
            seen: HashSet::new(),
            bytes: 0,
            spill: None,
            parts: Vec::new(),
            cur: None,
            input_done: false,
        }
    }
}

impl Operator for Distinct<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        let mut k = Vec::new();
        loop {
            let r = if !self.input_done {
                match self.input.next(cx)? {
                    Some(r) => r,
                    None => {
                        self.input_done = true;
                        if let Some(mut p) = self.spill.take() {
                            for i in 0..FANOUT {
                                self.parts.push(p.take(i)?);
                            }
                        }
                        continue;
                    }
                }
            } else {
                match self.cur.as_mut() {
                    Some(rd) => match rd.next_row()? {
                        Some(r) => r,
                        None => {
                            self.cur = None;
                            continue;
                        }
                    },
                    None => match self.parts.pop() {
                        Some(rd) => {
                            // Rows of a partition never met the rows kept in memory.
                            self.seen.clear();
                            self.cur = Some(rd);
                            continue;
                        }
                        None => return Ok(None),
                    },
                }
            };
            k.clear();
            hashkey::encode_all(&r, &mut k);
            if self.seen.contains(&k) {
                continue;
            }
            if let (Some(p), false) = (&mut self.spill, self.input_done) {
                p.push(hash(&k), &r)?;
                continue;
            }
            self.bytes += k.len() + 48;
            self.seen.insert(k.clone());
            if self.bytes > cx.work_mem && self.spill.is_none() && !self.input_done {
                self.spill = Some(Partitions::new(FANOUT)?);
                cx.note(self.id, format!("Batches: {FANOUT}"));
            }
            return Ok(Some(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{ctx, drain, ints};

    #[test]
    fn each_row_once_in_memory_and_spilled() {
        let input: Vec<Vec<Option<i64>>> =
            (0..3000).map(|i| vec![Some(i % 301), if i % 2 == 0 { None } else { Some(1) }]).collect();
        for mem in [1 << 20, 1000] {
            let refs: Vec<&[Option<i64>]> = input.iter().map(Vec::as_slice).collect();
            let mut d = Distinct::new(ints(&refs), 0);
            let mut out = drain(&mut d, &mut ctx(mem));
            let n = out.len();
            out.sort();
            out.dedup();
            assert_eq!((n, out.len()), (602, 602), "work_mem {mem}");
        }
    }
}
