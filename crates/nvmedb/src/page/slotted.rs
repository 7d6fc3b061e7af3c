//! Slotted pages: variable-length records addressed by a stable slot number.
//!
//! Owns: the layout of heap pages. After the common header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 32 | 4 | number of slots (live or free) |
//! | 36 | 4 | start of the record area (records grow down from the trailer) |
//! | 40 | 8 × slots | slot directory: (record offset u32, record length u32) |
//!
//! A free slot has offset 0. Invariants: the slot directory and the record area never overlap;
//! every live record lies inside `[record_start, page_len - 4)`; slot numbers of live records
//! never change (compaction moves bytes, not slots), so a row id (page, slot) stays valid until
//! the row is deleted.
//!
//! Page operations ([`op`]): the changes a mini-transaction logs instead of the bytes they
//! move — insert, update, in-place patch, delete — each encoded by [`op::insert`] etc. and redone
//! by [`op::apply`], which runs the same function on the page as it was and checks that it
//! gives the slot the log names.

use super::header::{PAGE_HEADER_BYTES, PAGE_TRAILER_BYTES};

const COUNT_OFF: usize = PAGE_HEADER_BYTES;
const START_OFF: usize = PAGE_HEADER_BYTES + 4;
const DIR_OFF: usize = PAGE_HEADER_BYTES + 8;
const SLOT_BYTES: usize = 8;

fn get32(p: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]])
}
fn put32(p: &mut [u8], o: usize, v: u32) {
    p[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

/// Largest record a slotted page of `page_size` bytes can hold.
pub fn max_record_len(page_size: usize) -> usize {
    page_size - PAGE_TRAILER_BYTES - DIR_OFF - SLOT_BYTES
}

/// Prepares an empty slotted body (the header must already be initialised).
pub fn init(page: &mut [u8]) {
    put32(page, COUNT_OFF, 0);
    put32(page, START_OFF, (page.len() - PAGE_TRAILER_BYTES) as u32);
}

/// Number of slots (live and free).
pub fn slot_count(page: &[u8]) -> usize {
    get32(page, COUNT_OFF) as usize
}

fn record_start(page: &[u8]) -> usize {
    get32(page, START_OFF) as usize
}

/// Byte offset of slot `i`'s directory entry (for prefetch hints).
pub fn slot_offset(i: usize) -> usize {
    DIR_OFF + i * SLOT_BYTES
}

/// Where the record in slot `i` starts if the page was filled by inserting records of `len`
/// bytes into slots 0, 1, 2, … in turn (records grow down from the trailer): a guess for
/// prefetching the record together with its slot, before the slot is read. `None` if that
/// place is not on a `page_size` page.
pub fn likely_record_offset(page_size: usize, i: usize, len: usize) -> Option<usize> {
    let below = (i + 1).checked_mul(len)?;
    let end = page_size - PAGE_TRAILER_BYTES;
    (len > 0 && below <= end - DIR_OFF).then(|| end - below)
}

fn slot(page: &[u8], i: usize) -> (usize, usize) {
    let o = DIR_OFF + i * SLOT_BYTES;
    (get32(page, o) as usize, get32(page, o + 4) as usize)
}

fn set_slot(page: &mut [u8], i: usize, off: usize, len: usize) {
    let o = DIR_OFF + i * SLOT_BYTES;
    put32(page, o, off as u32);
    put32(page, o + 4, len as u32);
}

/// The record in slot `i`, or `None` if the slot is free or out of range.
pub fn get(page: &[u8], i: usize) -> Option<&[u8]> {
    if i >= slot_count(page) {
        return None;
    }
    let (off, len) = slot(page, i);
    if off == 0 {
        return None;
    }
    Some(&page[off..off + len])
}

/// Bytes neither in the slot directory nor in live records (obtainable by compaction).
fn unused_bytes(page: &[u8]) -> usize {
    let dir_end = DIR_OFF + slot_count(page) * SLOT_BYTES;
    let live: usize = (0..slot_count(page)).map(|i| slot(page, i)).filter(|s| s.0 != 0).map(|s| s.1).sum();
    page.len() - PAGE_TRAILER_BYTES - dir_end - live
}

/// Bytes obtainable for a new record (including compaction), assuming a new slot is needed.
pub fn free_space(page: &[u8]) -> usize {
    unused_bytes(page).saturating_sub(SLOT_BYTES)
}

fn contiguous_free(page: &[u8]) -> usize {
    record_start(page) - (DIR_OFF + slot_count(page) * SLOT_BYTES)
}

/// Moves all live records to the end of the page, closing holes.
fn compact(page: &mut [u8]) {
    let n = slot_count(page);
    let mut live: Vec<(usize, Vec<u8>)> =
        (0..n).filter_map(|i| get(page, i).map(|r| (i, r.to_vec()))).collect();
    // Keep the original order of bytes in the area stable: place by slot number.
    live.sort_by_key(|(i, _)| *i);
    let mut end = page.len() - PAGE_TRAILER_BYTES;
    for (i, rec) in &live {
        end -= rec.len();
        page[end..end + rec.len()].copy_from_slice(rec);
        set_slot(page, *i, end, rec.len());
    }
    put32(page, START_OFF, end as u32);
}

/// Inserts a record; returns its slot, or `None` if it does not fit. Zero-length records are
/// stored as one byte of overhead-free length 0 at a non-zero offset.
pub fn insert(page: &mut [u8], rec: &[u8]) -> Option<usize> {
    let n = slot_count(page);
    let reuse = (0..n).find(|&i| slot(page, i).0 == 0);
    let dir_growth = if reuse.is_some() { 0 } else { SLOT_BYTES };
    if contiguous_free(page) < rec.len() + dir_growth {
        if unused_bytes(page) < rec.len() + dir_growth {
            return None;
        }
        compact(page);
        if contiguous_free(page) < rec.len() + dir_growth {
            return None;
        }
    }
    let i = match reuse {
        Some(i) => i,
        None => {
            put32(page, COUNT_OFF, (n + 1) as u32);
            n
        }
    };
    place(page, i, rec);
    Some(i)
}

/// Writes `rec` at the top of the free gap (which must hold it) and points slot `i` at it.
fn place(page: &mut [u8], i: usize, rec: &[u8]) {
    let start = record_start(page) - rec.len();
    page[start..start + rec.len()].copy_from_slice(rec);
    put32(page, START_OFF, start as u32);
    // Offset 0 marks a free slot; records never start at 0 because the header is there.
    set_slot(page, i, start, rec.len());
}

/// Appends `rec` in a new slot after the last one, without looking for a free slot or
/// compacting: for pages being filled from empty (a bulk load), where an insert's search for
/// a free slot would walk the whole directory on every row. Returns the slot, or `None` if
/// the record and its slot do not fit in the free gap.
pub fn append(page: &mut [u8], rec: &[u8]) -> Option<usize> {
    let n = slot_count(page);
    if contiguous_free(page) < rec.len() + SLOT_BYTES {
        return None;
    }
    put32(page, COUNT_OFF, (n + 1) as u32);
    place(page, n, rec);
    Some(n)
}

/// Replaces the record in slot `i`. Returns false (page unchanged) if it no longer fits.
///
/// # Panics
/// If slot `i` is free (a caller bug: row ids of deleted rows must not be reused by callers).
pub fn update(page: &mut [u8], i: usize, rec: &[u8]) -> bool {
    let (off, len) = slot(page, i);
    assert!(i < slot_count(page) && off != 0, "update of free slot {i}");
    if rec.len() <= len {
        page[off..off + rec.len()].copy_from_slice(rec);
        set_slot(page, i, off, rec.len());
        return true;
    }
    if unused_bytes(page) + len < rec.len() {
        return false;
    }
    set_slot(page, i, 0, 0);
    if contiguous_free(page) < rec.len() {
        compact(page);
    }
    let start = record_start(page) - rec.len();
    page[start..start + rec.len()].copy_from_slice(rec);
    put32(page, START_OFF, start as u32);
    set_slot(page, i, start, rec.len());
    true
}

/// Frees slot `i`; returns false if it was already free.
pub fn delete(page: &mut [u8], i: usize) -> bool {
    if i >= slot_count(page) || slot(page, i).0 == 0 {
        return false;
    }
    set_slot(page, i, 0, 0);
    true
}

/// Slot numbers of live records, ascending.
pub fn live_slots(page: &[u8]) -> impl Iterator<Item = usize> + '_ {
    (0..slot_count(page)).filter(move |&i| slot(page, i).0 != 0)
}

/// The live records with their slots, in slot order (one pass over the directory).
pub fn live_records(page: &[u8]) -> impl Iterator<Item = (usize, &[u8])> + '_ {
    (0..slot_count(page)).filter_map(move |i| match slot(page, i) {
        (0, _) => None,
        (off, len) => Some((i, &page[off..off + len])),
    })
}

/// Checks the layout invariants; returns a description of the first violation.
pub fn check(page: &[u8]) -> Result<(), String> {
    let n = slot_count(page);
    let dir_end = DIR_OFF + n * SLOT_BYTES;
    let start = record_start(page);
    let area_end = page.len() - PAGE_TRAILER_BYTES;
    if dir_end > start || start > area_end {
        return Err(format!("directory end {dir_end} / record start {start} / area end {area_end} overlap"));
    }
    // Records usually lie in slot order one below the other (inserts place them so): then
    // they cannot overlap, and the check needs no sort.
    let (mut below, mut stacked) = (area_end, true);
    for i in 0..n {
        let (off, len) = slot(page, i);
        if off == 0 {
            continue;
        }
        if off < start || off + len > area_end {
            return Err(format!("slot {i} at {off}+{len} outside the record area {start}..{area_end}"));
        }
        stacked &= off + len <= below;
        below = off;
    }
    if stacked {
        return Ok(());
    }
    let mut spans: Vec<(usize, usize)> =
        (0..n).map(|i| slot(page, i)).filter(|s| s.0 != 0).map(|(off, len)| (off, off + len)).collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[0].1 > w[1].0 {
            return Err(format!("records {:?} and {:?} overlap", w[0], w[1]));
        }
    }
    Ok(())
}

/// Page operations of slotted pages: their encoding in a mini-transaction record and their redo.
///
/// An operation is a code byte, then varints and byte strings ([`crate::util::bytes`]): codes
/// 1–15 belong to slotted pages (`crate::btree::apply_page_ops` sends other codes to the B+tree
/// node format).
pub mod op {
    use super::{delete as page_delete, get, insert as page_insert, slot, update as page_update};
    use crate::util::bytes::{ByteReader, ByteWriter};

    /// A record inserted (slot, record): redone by [`super::insert`], which must pick the slot.
    pub const INSERT: u8 = 1;
    /// A record replaced (slot, record): [`super::update`].
    pub const UPDATE: u8 = 2;
    /// A record changed in place, its length kept (slot, then runs of: varint gap since the
    /// previous run's end, bytes; a zero gap with no bytes ends them).
    pub const PATCH: u8 = 3;
    /// A record deleted (slot): [`super::delete`].
    pub const DELETE: u8 = 4;
    /// The largest code of this format.
    pub const LAST: u8 = 15;

    /// Unchanged bytes shorter than this between two changed runs of a patch are folded in.
    const PATCH_GAP: usize = 4;

    /// Appends an insert of `rec` into `slot`.
    pub fn insert(out: &mut Vec<u8>, slot: usize, rec: &[u8]) {
        ByteWriter::to(out).u8(INSERT).var(slot as u64).var_bytes(rec);
    }

    /// Appends the update of `slot` from `old` to `new`: a patch of the changed bytes when the
    /// length is kept (the update then wrote in place), else the whole new record.
    pub fn update(out: &mut Vec<u8>, slot: usize, old: &[u8], new: &[u8]) {
        if old.len() != new.len() {
            ByteWriter::to(out).u8(UPDATE).var(slot as u64).var_bytes(new);
            return;
        }
        ByteWriter::to(out).u8(PATCH).var(slot as u64);
        let (mut i, mut prev_end) = (0, 0);
        while i < new.len() {
            if old[i] == new[i] {
                i += 1;
                continue;
            }
            let start = i;
            let mut end = i + 1;
            let mut j = end;
            while j < new.len() && j - end < PATCH_GAP {
                if old[j] != new[j] {
                    end = j + 1;
                }
                j += 1;
            }
            ByteWriter::to(out).var((start - prev_end) as u64).var_bytes(&new[start..end]);
            prev_end = end;
            i = end;
        }
        ByteWriter::to(out).var(0).var(0);
    }

    /// Appends the delete of `slot`.
    pub fn delete(out: &mut Vec<u8>, slot: usize) {
        ByteWriter::to(out).u8(DELETE).var(slot as u64);
    }

    /// Redoes the operation of `code` (already read) whose fields follow in `r`.
    pub fn apply(page: &mut [u8], code: u8, r: &mut ByteReader<'_>) -> Result<(), String> {
        let bad = || format!("slotted-page operation {code} is cut short");
        let slot_no = usize::try_from(r.var().ok_or_else(bad)?).map_err(|_| bad())?;
        let live = |page: &[u8]| get(page, slot_no).is_some();
        match code {
            INSERT => {
                let rec = r.var_bytes().ok_or_else(bad)?;
                match page_insert(page, rec) {
                    Some(s) if s == slot_no => Ok(()),
                    Some(s) => Err(format!("insert went to slot {s}, the log says {slot_no}")),
                    None => Err(format!("insert of {} bytes into slot {slot_no} does not fit", rec.len())),
                }
            }
            UPDATE => {
                let rec = r.var_bytes().ok_or_else(bad)?;
                if !live(page) {
                    return Err(format!("update of free slot {slot_no}"));
                }
                page_update(page, slot_no, rec)
                    .then_some(())
                    .ok_or_else(|| format!("update of slot {slot_no} does not fit"))
            }
            PATCH => {
                if !live(page) {
                    return Err(format!("patch of free slot {slot_no}"));
                }
                let (off, len) = slot(page, slot_no);
                let mut end = 0usize;
                loop {
                    let gap = usize::try_from(r.var().ok_or_else(bad)?).map_err(|_| bad())?;
                    let bytes = r.var_bytes().ok_or_else(bad)?;
                    if bytes.is_empty() {
                        return if gap == 0 { Ok(()) } else { Err(bad()) };
                    }
                    let start = end.checked_add(gap).ok_or_else(bad)?;
                    end = start + bytes.len();
                    if end > len {
                        return Err(format!("patch of slot {slot_no} runs past its {len}-byte record"));
                    }
                    page[off + start..off + end].copy_from_slice(bytes);
                }
            }
            DELETE => page_delete(page, slot_no)
                .then_some(())
                .ok_or_else(|| format!("delete of free slot {slot_no}")),
            _ => Err(format!("unknown slotted-page operation {code}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{PageHeader, PageType};
    use crate::util::Rng;
    use std::collections::BTreeMap;

    fn page(size: usize) -> Vec<u8> {
        let mut p = vec![0u8; size];
        PageHeader::init(&mut p, PageType::Heap, 1, 1);
        init(&mut p);
        p
    }

    /// Appending fills a fresh page exactly as inserting does (same slots, same bytes), and
    /// stops where an insert would.
    #[test]
    fn append_fills_a_fresh_page_like_insert() {
        let (mut a, mut b) = (page(4096), page(4096));
        let mut rng = Rng::new(7);
        loop {
            let rec = vec![rng.below(256) as u8; 1 + rng.below(300) as usize];
            let (x, y) = (append(&mut a, &rec), insert(&mut b, &rec));
            assert_eq!(x, y);
            if x.is_none() {
                break;
            }
        }
        assert_eq!(a, b);
        assert!(slot_count(&a) > 10);
    }

    /// On a page filled in order with rows of one length, the guessed row offset is exact.
    #[test]
    fn likely_record_offset_is_exact_for_equal_rows_inserted_in_order() {
        let mut p = page(16384);
        let mut n = 0;
        while let Some(i) = insert(&mut p, &[n as u8; 1004]) {
            assert_eq!(i, n);
            n += 1;
        }
        assert!(n > 10);
        for i in 0..n {
            let (off, _) = slot(&p, i);
            assert_eq!(likely_record_offset(16384, i, 1004), Some(off), "slot {i}");
        }
        assert_eq!(likely_record_offset(16384, 100, 1004), None, "beyond the page");
        assert_eq!(likely_record_offset(16384, 0, 0), None, "no length known");
    }

    #[test]
    fn model_based_random_operations() {
        for seed in 0..200u64 {
            let mut rng = Rng::new(seed);
            let mut p = page(4096);
            let mut model: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
            for step in 0..300 {
                let op = rng.below(10);
                if op < 5 {
                    let mut rec = vec![0u8; rng.below(300) as usize];
                    rng.fill(&mut rec);
                    match insert(&mut p, &rec) {
                        Some(s) => {
                            assert!(
                                !model.contains_key(&s),
                                "seed {seed} step {step}: slot {s} reused while live"
                            );
                            model.insert(s, rec);
                        }
                        None => assert!(
                            unused_bytes(&p) < rec.len() + SLOT_BYTES,
                            "seed {seed} step {step}: refused but fits"
                        ),
                    }
                } else if op < 7 && !model.is_empty() {
                    let s = *model.keys().nth(rng.below(model.len() as u64) as usize).unwrap();
                    let mut rec = vec![0u8; rng.below(400) as usize];
                    rng.fill(&mut rec);
                    if update(&mut p, s, &rec) {
                        model.insert(s, rec);
                    }
                } else if !model.is_empty() {
                    let s = *model.keys().nth(rng.below(model.len() as u64) as usize).unwrap();
                    assert!(delete(&mut p, s));
                    model.remove(&s);
                }
                check(&p).unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                for (s, rec) in &model {
                    assert_eq!(get(&p, *s), Some(rec.as_slice()), "seed {seed} step {step} slot {s}");
                }
                assert_eq!(live_slots(&p).count(), model.len());
                let records: Vec<(usize, &[u8])> = live_records(&p).collect();
                let want: Vec<(usize, &[u8])> = model.iter().map(|(s, r)| (*s, r.as_slice())).collect();
                assert_eq!(records, want, "seed {seed} step {step}");
            }
        }
    }

    #[test]
    fn check_finds_overlapping_records_in_and_out_of_slot_order() {
        let mut p = page(4096);
        for n in [100, 50, 70] {
            assert!(insert(&mut p, &vec![1u8; n]).is_some());
        }
        check(&p).unwrap();
        let (o0, _) = slot(&p, 0);
        let (o1, _) = slot(&p, 1);
        // Slot 1's record grown into slot 0's, the one above it.
        let mut q = p.clone();
        set_slot(&mut q, 1, o1, 60);
        assert!(check(&q).unwrap_err().contains("overlap"));
        // Slot 2 pointed inside slot 0's record, above slot 1's.
        let mut q = p.clone();
        set_slot(&mut q, 2, o0 + 10, 20);
        assert!(check(&q).unwrap_err().contains("overlap"));
        // Out of slot order but disjoint (slots 0 and 2 swapped): fine.
        let mut q = p.clone();
        let (o2, l2) = slot(&p, 2);
        set_slot(&mut q, 0, o2, l2);
        set_slot(&mut q, 2, o0, 100);
        check(&q).unwrap();
    }

    #[test]
    fn largest_record_fits_exactly() {
        let mut p = page(16384);
        let rec = vec![7u8; max_record_len(16384)];
        assert_eq!(insert(&mut p, &rec), Some(0));
        assert_eq!(insert(&mut p, &[1]), None);
        let mut q = page(16384);
        assert_eq!(insert(&mut q, &vec![7u8; max_record_len(16384) + 1]), None);
    }
}
