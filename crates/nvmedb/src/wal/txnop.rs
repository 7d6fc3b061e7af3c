//! The logical undo record of a transaction's operation: [`TxnOp`], and the [`RowPatch`] an
//! update that keeps a row's length is logged as.
//!
//! Owns: their log encoding (varint fields; an update as its changed byte ranges, found in
//! one pass eight bytes at a time and written straight from the rows) and its decoding, including the
//! fixed-width encoding of log format 2. Invariants: a patch's ranges are sorted, disjoint,
//! inside the row, and separated by at least [`PATCH_MERGE_GAP`] unchanged bytes; an encoded
//! operation decodes to itself (a patch to the patch of its rows).

use crate::error::{Error, Result};
use crate::util::bytes::{ByteReader, ByteWriter};
use smallvec::SmallVec;

/// One logical operation of a transaction, logged with the first page change it makes, so
/// recovery can undo it if the transaction did not commit.
///
/// In memory (a transaction's undo list) an operation holds whole rows. In the log, an update
/// that keeps the row's length (it is then rewritten in place) is logged lean, as a
/// [`RowPatch`]: only the changed bytes, before and after; [`TxnOp::decode`] gives such an
/// operation back with `patch` set and no rows, and [`TxnOp::resolve`] turns it into whole
/// rows again against the row the table holds for the key at undo time (which is the row
/// before or after the update: every byte outside the patch is the same in both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOp {
    /// Transaction id.
    pub txn: u64,
    /// Table id.
    pub table: u32,
    /// Encoded primary key.
    pub pk: Vec<u8>,
    /// Row id the operation started from or created (`u64::MAX` if none yet).
    pub rid: u64,
    /// The row before the operation (`None`: the key was absent — an insert — or the
    /// operation is a `patch`).
    pub before: Option<Vec<u8>>,
    /// The row after the operation (`None`: a delete, or the operation is a `patch`).
    pub after: Option<Vec<u8>>,
    /// A same-length update as logged: its changed bytes (then `before` and `after` are
    /// `None` until [`TxnOp::resolve`]).
    pub patch: Option<RowPatch>,
}

/// The bytes an update of a row changed, without the rest of the row: the row's length and,
/// for each changed range, its offset, its bytes before and its bytes after. Ranges are
/// sorted, disjoint, and separated by at least [`PATCH_MERGE_GAP`] unchanged bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPatch {
    /// Length of the row before and after.
    pub len: u32,
    /// `(offset, before, after)`, `before.len() == after.len()`.
    pub ranges: Vec<(u32, Vec<u8>, Vec<u8>)>,
}

/// Unchanged gaps shorter than this between two changed ranges of a row are folded into one
/// range (each range costs 6 bytes of framing).
pub const PATCH_MERGE_GAP: usize = 8;

/// True when an update from `before` to `after` can be logged as a [`RowPatch`]: same length,
/// at most 64 KiB.
fn patchable(before: &[u8], after: &[u8]) -> bool {
    before.len() == after.len() && before.len() <= u16::MAX as usize
}

/// Calls `f(start, end)` for each range of a [`RowPatch`] from `before` to `after` (equal
/// lengths), in order: changed bytes, with unchanged gaps shorter than [`PATCH_MERGE_GAP`]
/// folded in. The one definition of a patch's ranges: [`RowPatch::diff`] collects them, and
/// [`TxnOp::encode`] writes them straight into the record without collecting them.
fn for_each_patch_range(before: &[u8], after: &[u8], mut f: impl FnMut(usize, usize)) {
    let mut next = next_difference(before, after, 0);
    while let Some(start) = next {
        let mut end = start + 1;
        // Extend over changes separated by short unchanged gaps.
        loop {
            next = next_difference(before, after, end);
            match next {
                Some(j) if j - end < PATCH_MERGE_GAP => end = j + 1,
                _ => break,
            }
        }
        f(start, end);
    }
}

/// The first offset at or after `from` where `before` and `after` (equal lengths) differ,
/// compared eight bytes at a time.
fn next_difference(before: &[u8], after: &[u8], from: usize) -> Option<usize> {
    let (b, a) = (&before[from..], &after[from..]);
    let mut i = 0;
    for (x, y) in b.chunks_exact(8).zip(a.chunks_exact(8)) {
        let d = u64::from_le_bytes(x.try_into().expect("8 bytes"))
            ^ u64::from_le_bytes(y.try_into().expect("8 bytes"));
        if d != 0 {
            // Little-endian: the lowest non-zero byte of the difference is the first one.
            return Some(from + i + (d.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    (i..b.len()).find(|&j| b[j] != a[j]).map(|j| from + j)
}

/// Annotation kind of an operation logged with whole rows, fixed-width fields (log format 2).
const OP_ROWS: u8 = 1;
/// Annotation kind of an update logged as a [`RowPatch`], fixed-width fields (log format 2).
const OP_PATCH: u8 = 2;
/// [`OP_ROWS`] with varint numbers and lengths (log format 3; what the engine writes).
const OP_ROWS_V: u8 = 3;
/// [`OP_PATCH`] with varint numbers and lengths (log format 3; what the engine writes).
const OP_PATCH_V: u8 = 4;

impl RowPatch {
    /// The bytes changed from `before` to `after`; `None` when their lengths differ (the row
    /// may move: such an update is logged with whole rows) or exceed 64 KiB.
    pub fn diff(before: &[u8], after: &[u8]) -> Option<Self> {
        if !patchable(before, after) {
            return None;
        }
        let mut ranges: Vec<(u32, Vec<u8>, Vec<u8>)> = Vec::new();
        for_each_patch_range(before, after, |start, end| {
            ranges.push((start as u32, before[start..end].to_vec(), after[start..end].to_vec()));
        });
        Some(Self { len: before.len() as u32, ranges })
    }

    /// `row` with every range set to its `before` (`want_after` false) or `after` bytes;
    /// `None` if `row` has another length or a range lies outside it.
    pub fn apply(&self, row: &[u8], want_after: bool) -> Option<Vec<u8>> {
        if row.len() != self.len as usize {
            return None;
        }
        let mut out = row.to_vec();
        for (off, b, a) in &self.ranges {
            let bytes = if want_after { a } else { b };
            out.get_mut(*off as usize..*off as usize + bytes.len())?.copy_from_slice(bytes);
        }
        Some(out)
    }

    /// Bytes of the changed ranges (before and after).
    pub fn changed_bytes(&self) -> usize {
        self.ranges.iter().map(|(_, b, a)| b.len() + a.len()).sum()
    }
}

impl TxnOp {
    /// Encodes for an annotation: an update that changes a row but keeps its length as a
    /// [`RowPatch`] (unless the patch would not be smaller), anything else with whole rows;
    /// numbers and lengths as varints.
    pub fn encode(&self) -> Vec<u8> {
        let rows = self.before.as_ref().map_or(0, Vec::len) + self.after.as_ref().map_or(0, Vec::len);
        if let Some(p) = &self.patch {
            let mut out = Vec::with_capacity(24 + self.pk.len() + p.changed_bytes() + 6 * p.ranges.len());
            self.encode_patch_head(&mut out, p.len, p.ranges.len());
            let mut prev_end = 0u64;
            for (off, b, a) in &p.ranges {
                // Ranges are sorted and disjoint; a malformed patch wraps here and fails to decode.
                ByteWriter::to(&mut out)
                    .var(u64::from(*off).wrapping_sub(prev_end))
                    .var(b.len() as u64)
                    .bytes(b)
                    .bytes(a);
                prev_end = u64::from(*off) + b.len() as u64;
            }
            return out;
        }
        if let (Some(b), Some(a)) = (&self.before, &self.after) {
            // Not for an unchanged row (an undo that rewrites a row logs it whole): a patch
            // needs a change to tell the row before from the row after. Nor when it would not
            // be smaller. The ranges are found once (kept on the stack while few), then
            // written straight from the rows into the record.
            if patchable(b, a) {
                let mut ranges: SmallVec<[(usize, usize); 8]> = SmallVec::new();
                for_each_patch_range(b, a, |start, end| ranges.push((start, end)));
                let (count, changed) = (ranges.len(), ranges.iter().map(|(s, e)| 2 * (e - s)).sum::<usize>());
                if count > 0 && changed + 6 * count < 2 * b.len() {
                    let mut out = Vec::with_capacity(24 + self.pk.len() + changed + 6 * count);
                    self.encode_patch_head(&mut out, b.len() as u32, count);
                    let mut prev_end = 0usize;
                    for (start, end) in ranges {
                        ByteWriter::to(&mut out)
                            .var((start - prev_end) as u64)
                            .var((end - start) as u64)
                            .bytes(&b[start..end])
                            .bytes(&a[start..end]);
                        prev_end = end;
                    }
                    return out;
                }
            }
        }
        let mut out = Vec::with_capacity(24 + self.pk.len() + rows);
        let mut w = ByteWriter::to(&mut out);
        w.u8(OP_ROWS_V);
        w.var(self.txn).var(u64::from(self.table)).var(self.rid.wrapping_add(1));
        w.var_bytes(&self.pk);
        for part in [self.before.as_ref(), self.after.as_ref()] {
            // 0: absent; else the length plus one, then the bytes.
            match part {
                Some(b) => w.var(b.len() as u64 + 1).bytes(b),
                None => w.var(0),
            };
        }
        out
    }

    /// The fields of an [`OP_PATCH_V`] operation before its ranges.
    fn encode_patch_head(&self, out: &mut Vec<u8>, len: u32, ranges: usize) {
        let mut w = ByteWriter::to(out);
        w.u8(OP_PATCH_V);
        w.var(self.txn).var(u64::from(self.table)).var(self.rid.wrapping_add(1));
        w.var_bytes(&self.pk);
        w.var(u64::from(len)).var(ranges as u64);
    }

    /// Decodes [`TxnOp::encode`] and the fixed-width encoding of earlier logs (a lean update
    /// comes back with `patch` set).
    pub fn decode(b: &[u8]) -> Result<Self> {
        let bad = || Error::InvalidArgument("malformed transaction operation in the log".into());
        let mut r = ByteReader::new(b);
        let kind = r.u8().ok_or_else(bad)?;
        let var_u32 = |r: &mut ByteReader<'_>| r.var().and_then(|v| u32::try_from(v).ok()).ok_or_else(bad);
        let (txn, table, rid, pk) = match kind {
            OP_ROWS | OP_PATCH => {
                let txn = r.u64().ok_or_else(bad)?;
                let table = r.u32().ok_or_else(bad)?;
                let rid = r.u64().ok_or_else(bad)?;
                let pk = if kind == OP_PATCH {
                    let n = r.u32().ok_or_else(bad)? as usize;
                    Some(r.take(n).ok_or_else(bad)?.to_vec())
                } else {
                    None
                };
                (txn, table, rid, pk)
            }
            OP_ROWS_V | OP_PATCH_V => {
                let txn = r.var().ok_or_else(bad)?;
                let table = var_u32(&mut r)?;
                let rid = r.var().ok_or_else(bad)?.wrapping_sub(1);
                (txn, table, rid, Some(r.var_bytes().ok_or_else(bad)?.to_vec()))
            }
            _ => return Err(bad()),
        };
        if kind == OP_PATCH || kind == OP_PATCH_V {
            let pk = pk.ok_or_else(bad)?;
            let fixed = kind == OP_PATCH;
            let len = if fixed { r.u32().ok_or_else(bad)? } else { var_u32(&mut r)? };
            let count = if fixed { r.u32().ok_or_else(bad)? as usize } else { var_u32(&mut r)? as usize };
            let mut ranges = Vec::with_capacity(count.min(b.len()));
            let mut end = 0u64;
            for _ in 0..count {
                let (off, n) = if fixed {
                    (u64::from(r.u32().ok_or_else(bad)?), r.u16().ok_or_else(bad)? as usize)
                } else {
                    let gap = r.var().ok_or_else(bad)?;
                    (end.checked_add(gap).ok_or_else(bad)?, r.var().ok_or_else(bad)? as usize)
                };
                let before = r.take(n).ok_or_else(bad)?.to_vec();
                let after = r.take(n).ok_or_else(bad)?.to_vec();
                // Sorted, disjoint ranges inside the row.
                if off < end || off + n as u64 > u64::from(len) {
                    return Err(bad());
                }
                end = off + n as u64;
                ranges.push((off as u32, before, after));
            }
            if !fixed && r.remaining() != 0 {
                return Err(bad());
            }
            let patch = Some(RowPatch { len, ranges });
            return Ok(Self { txn, table, pk, rid, before: None, after: None, patch });
        }
        let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
        if kind == OP_ROWS {
            for _ in 0..3 {
                if r.u8().ok_or_else(bad)? == 1 {
                    let n = r.u32().ok_or_else(bad)? as usize;
                    parts.push(Some(r.take(n).ok_or_else(bad)?.to_vec()));
                } else {
                    parts.push(None);
                }
            }
        } else {
            parts.push(pk);
            for _ in 0..2 {
                let n = r.var().ok_or_else(bad)?;
                parts.push(match n {
                    0 => None,
                    n => Some(r.take(usize::try_from(n - 1).map_err(|_| bad())?).ok_or_else(bad)?.to_vec()),
                });
            }
        }
        if r.remaining() != 0 && kind == OP_ROWS_V {
            return Err(bad());
        }
        let after = parts.pop().ok_or_else(bad)?;
        let before = parts.pop().ok_or_else(bad)?;
        let pk = parts.pop().flatten().ok_or_else(bad)?;
        Ok(Self { txn, table, pk, rid, before, after, patch: None })
    }

    /// The operation with whole rows: itself if it has them, else its patch applied to `row`,
    /// the key's row at undo time (the row before or after the update). `None` if a patch
    /// cannot be applied (no row, or one of another length).
    pub fn resolve(&self, row: Option<&[u8]>) -> Option<std::borrow::Cow<'_, TxnOp>> {
        let Some(p) = &self.patch else { return Some(std::borrow::Cow::Borrowed(self)) };
        let row = row?;
        Some(std::borrow::Cow::Owned(TxnOp {
            before: Some(p.apply(row, false)?),
            after: Some(p.apply(row, true)?),
            patch: None,
            ..self.clone()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::bytes::ByteWriter;

    /// The byte-at-a-time definition of a patch's ranges, which `for_each_patch_range` must
    /// give however it compares.
    fn patch_ranges_bytewise(before: &[u8], after: &[u8]) -> Vec<(usize, usize)> {
        let (mut out, mut i) = (Vec::new(), 0);
        while i < before.len() {
            if before[i] == after[i] {
                i += 1;
                continue;
            }
            let (start, mut end) = (i, i + 1);
            let mut j = end;
            while j < before.len() && j - end < PATCH_MERGE_GAP {
                if before[j] != after[j] {
                    end = j + 1;
                }
                j += 1;
            }
            out.push((start, end));
            i = end;
        }
        out
    }

    #[test]
    fn patch_ranges_match_the_bytewise_definition() {
        let mut rng = crate::util::Rng::new(38);
        for case in 0..2000 {
            let len = rng.below(80) as usize;
            let before: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let mut after = before.clone();
            for _ in 0..rng.below(6) {
                if len > 0 {
                    let at = rng.below(len as u64) as usize;
                    let n = (rng.below(12) as usize).min(len - at);
                    for b in &mut after[at..at + n] {
                        *b ^= 1 + rng.below(255) as u8;
                    }
                }
            }
            let mut got = Vec::new();
            for_each_patch_range(&before, &after, |s, e| got.push((s, e)));
            assert_eq!(got, patch_ranges_bytewise(&before, &after), "case {case}: {before:?} -> {after:?}");
        }
    }

    #[test]
    fn txn_ops_round_trip() {
        let ops = [
            TxnOp {
                txn: 7,
                table: 2,
                pk: vec![1, 2],
                rid: 99,
                before: None,
                after: Some(vec![5; 10]),
                patch: None,
            },
            TxnOp {
                txn: 8,
                table: 0,
                pk: vec![3],
                rid: u64::MAX,
                before: Some(vec![1]),
                after: None,
                patch: None,
            },
            // An update that changes the row's length keeps whole rows.
            TxnOp {
                txn: 9,
                table: 1,
                pk: vec![4],
                rid: 5,
                before: Some(vec![1; 8]),
                after: Some(vec![2; 9]),
                patch: None,
            },
        ];
        for op in ops {
            let enc = op.encode();
            assert_eq!(TxnOp::decode(&enc).unwrap(), op);
            assert!(enc.len() < fixed_rows(&op).len(), "varints are shorter than fixed fields");
            // Logs of format 2 hold fixed-width operations: they still decode.
            assert_eq!(TxnOp::decode(&fixed_rows(&op)).unwrap(), op);
            for cut in 0..enc.len() {
                assert!(TxnOp::decode(&enc[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(TxnOp::decode(&[1, 2, 3]).is_err());
        assert!(TxnOp::decode(&[9; 40]).is_err(), "unknown operation kind");
    }

    /// The fixed-width encoding of whole-row operations that log format 2 wrote.
    fn fixed_rows(op: &TxnOp) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = ByteWriter::to(&mut out);
        w.u8(OP_ROWS).u64(op.txn).u32(op.table).u64(op.rid);
        for part in [Some(&op.pk), op.before.as_ref(), op.after.as_ref()] {
            match part {
                Some(b) => w.u8(1).u32(b.len() as u32).bytes(b),
                None => w.u8(0),
            };
        }
        out
    }

    #[test]
    fn a_patch_encoded_from_whole_rows_equals_the_patch_it_decodes_to() {
        let mut rng = crate::util::Rng::new(11);
        for case in 0..500u64 {
            let len = 1 + rng.below(300) as usize;
            let before: Vec<u8> = (0..len).map(|_| rng.below(4) as u8).collect();
            let mut after = before.clone();
            for _ in 0..rng.below(6) {
                let at = rng.below(len as u64) as usize;
                let n = (1 + rng.below(12) as usize).min(len - at);
                for b in &mut after[at..at + n] {
                    *b = rng.below(4) as u8;
                }
            }
            let op = TxnOp {
                txn: case,
                table: 3,
                pk: vec![case as u8; 1 + case as usize % 9],
                rid: case * 7,
                before: Some(before.clone()),
                after: Some(after.clone()),
                patch: None,
            };
            let bytes = op.encode();
            let decoded = TxnOp::decode(&bytes).unwrap();
            match &decoded.patch {
                Some(p) => {
                    // Written straight from the rows, it is the patch `RowPatch::diff` collects.
                    assert_eq!(Some(p), RowPatch::diff(&before, &after).as_ref(), "case {case}");
                    assert_eq!(decoded.encode(), bytes, "case {case}");
                    assert_eq!(*decoded.resolve(Some(&after)).unwrap(), op, "case {case}");
                }
                None => assert_eq!(decoded, op, "case {case}"),
            }
        }
    }

    #[test]
    fn same_length_updates_are_logged_as_patches_and_resolve_against_either_row() {
        let before: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut after = before.clone();
        after[100..108].copy_from_slice(&42u64.to_le_bytes());
        after[110] ^= 1; // within the merge gap: one range
        after[4000] ^= 0xff; // a second range
        let op = TxnOp {
            txn: 3,
            table: 4,
            pk: vec![9, 9],
            rid: 77,
            before: Some(before.clone()),
            after: Some(after.clone()),
            patch: None,
        };
        let bytes = op.encode();
        assert!(bytes.len() < 100, "a one-integer update logs {} bytes", bytes.len());
        let logged = TxnOp::decode(&bytes).unwrap();
        let p = logged.patch.as_ref().expect("logged as a patch");
        assert_eq!((p.len, p.ranges.len()), (4096, 2));
        assert_eq!((logged.before.as_ref(), logged.after.as_ref()), (None, None));
        // Re-encoding a decoded patch gives the same bytes.
        assert_eq!(logged.encode(), bytes);
        // Whichever row the table holds at undo time, the whole operation comes back.
        for row in [&before, &after] {
            assert_eq!(*logged.resolve(Some(row)).unwrap(), op);
        }
        assert!(logged.resolve(None).is_none());
        assert!(logged.resolve(Some(&before[1..])).is_none(), "a row of another length");
        // A full op resolves to itself.
        assert_eq!(*op.resolve(None).unwrap(), op);
        // Truncations and overlapping ranges are errors, not panics.
        for n in 0..bytes.len() {
            assert!(TxnOp::decode(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
        let overlapping =
            RowPatch { len: 10, ranges: vec![(2, vec![0; 4], vec![1; 4]), (4, vec![0], vec![1])] };
        let bad = TxnOp { patch: Some(overlapping), before: None, after: None, ..op.clone() };
        assert!(TxnOp::decode(&bad.encode()).is_err());
        // An update that changes most bytes is logged whole (no gain from a patch).
        let other: Vec<u8> = before.iter().map(|b| b ^ 0x55).collect();
        let whole = TxnOp { after: Some(other), ..op };
        assert_eq!(TxnOp::decode(&whole.encode()).unwrap(), whole);
    }
}
