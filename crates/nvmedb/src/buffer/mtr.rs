//! Mini-transactions: atomic, logged groups of page changes.
//!
//! Owns: the per-thread record of pages changed inside an open mini-transaction (their
//! exclusive latches and before-images), the redo payload format, and [`PageLogger`], the hook
//! through which the WAL receives page changes.
//!
//! Invariants:
//! - while a pool has a logger, a page changed under an exclusive fix keeps its latch and pin
//!   until the mini-transaction that changed it commits; commit appends *one* log record with
//!   every changed page (so redo of a durable log prefix never sees half of a B+tree split),
//!   stamps each page with that record's LSN, and only then releases the latches;
//! - a mini-transaction that ends without commit (an error returned early, a panic) restores
//!   every page it changed from its before-image, so the operation leaves no trace;
//! - a new page's first change is logged whole, as its bytes over a zeroed page
//!   ([`PageChange::NewPage`]); with a full-image horizon (torn-page protection by the log,
//!   PostgreSQL's full_page_writes), the first change of a page whose LSN is at or below it (the
//!   last checkpoint's redo start) is logged as a full page image, which is then what repairs
//!   a page torn by a crash during its write-back. Without one (the default: the double-write
//!   area repairs torn pages, `buffer/doublewrite/`) every other change is a diff or its
//!   page operations;
//! - a page changed only through [`PageMut::change_logged`](super::PageMut::change_logged) is
//!   logged as its page operations ([`PageChange::Ops`]: a heap insert, a B+tree entry
//!   removal…, which the layer owning the page format encodes and redoes), not as the bytes
//!   they moved; a page also changed any other way (or new, or due for a full image) is logged
//!   by its bytes. In debug builds every commit checks that its operations, replayed on the
//!   before-image, give the page it changed byte for byte.
//!
//! Two payload formats: the compact one the engine writes (varints, [`encode_compact_start`],
//! [`encode_compact_change`], [`decode_mtr_compact`]) and the earlier fixed-width one
//! ([`encode_page_change`], [`decode_mtr`]), which recovery still reads from older logs.

use super::PageId;
use crate::error::Result;
use crate::page::header::{PAGE_LSN_RANGE, PAGE_TRAILER_BYTES};
use crate::page::PageHeader;
use crate::util::bytes::{ByteReader, ByteWriter};

/// Receives atomic groups of page changes (the WAL implements it).
pub trait PageLogger: Send + Sync {
    /// Appends one redo record for the pool tagged `pool_tag`. The logger calls `build` with
    /// the current full-image horizon (pages whose LSN is at or below it must be logged whole;
    /// `None`: no page is, torn pages being repaired otherwise) and appends the payload it
    /// returns, both under one lock that a checkpoint's change of the horizon excludes. Returns
    /// the LSN to stamp on the changed pages.
    fn log_page_changes(&self, pool_tag: u8, build: &mut dyn FnMut(Option<u64>) -> Vec<u8>) -> Result<u64>;

    /// Called when a thread opens its outermost mini-transaction, before it latches any page:
    /// a logger whose space only a checkpoint frees waits here while it is nearly full, so
    /// that no thread waits for log space while holding page latches a checkpoint's flush
    /// needs. Default: returns at once.
    fn wait_for_space(&self) {}

    /// Redoes page operations ([`PageChange::Ops`]) on `page`: the logger knows every page
    /// format's operations (they belong to layers above the buffer). Used by debug builds to
    /// check each commit's operations against the page they changed. Default: unsupported.
    fn apply_page_ops(&self, _page: &mut [u8], _ops: &[u8]) -> std::result::Result<(), String> {
        Err("this logger does not know page operations".into())
    }
}

thread_local! {
    /// Logical information to log with this thread's next mini-transaction commit.
    static ANNOTATION: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// Attaches `bytes` to the next mini-transaction this thread commits (any pool): they are
/// logged in the same record as its page changes, so they are durable exactly when those are.
pub fn annotate_next_commit(bytes: Vec<u8>) {
    ANNOTATION.with(|a| *a.borrow_mut() = Some(bytes));
}

/// Removes a pending annotation (returns it), e.g. when an operation ended without changes.
pub fn take_annotation() -> Option<Vec<u8>> {
    ANNOTATION.with(|a| a.borrow_mut().take())
}

/// The page LSN is excluded from diffs (redo stamps it).
const LSN_RANGE: std::ops::Range<usize> = PAGE_LSN_RANGE;
/// Unchanged gaps shorter than this are folded into the surrounding changed range.
const MERGE_GAP: usize = 16;

/// One page's change as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageChange {
    /// The whole page (without the trailing checksum).
    FullImage(Vec<u8>),
    /// Changed byte ranges: (offset, new bytes).
    Ranges(Vec<(u32, Vec<u8>)>),
    /// Operations of the page's format, in the order they were made (see
    /// [`PageLogger::apply_page_ops`]).
    Ops(Vec<u8>),
    /// A new page: its bytes are these ranges over a zeroed page (applicable, like a full
    /// image, to a page that is unreadable or was never written).
    NewPage(Vec<(u32, Vec<u8>)>),
}

impl PageChange {
    /// True when the change gives the whole page (a full image or a new page), so redo can
    /// apply it to a page that is unreadable.
    pub fn is_whole(&self) -> bool {
        matches!(self, PageChange::FullImage(_) | PageChange::NewPage(_))
    }
}

/// A page's change as the compact encoder takes it (borrowed: nothing is copied to log it).
#[derive(Debug, Clone, Copy)]
pub enum ChangeRef<'a> {
    /// The whole page (without the trailing checksum).
    FullImage(&'a [u8]),
    /// The bytes that differ between `before` and `after` (computed while encoding).
    Diff {
        /// The page before.
        before: &'a [u8],
        /// The page after.
        after: &'a [u8],
    },
    /// Encoded page operations.
    Ops(&'a [u8]),
    /// A new page: the bytes that differ from a zeroed page.
    NewPage(&'a [u8]),
}

/// Change types of both payload formats.
const CHANGE_FULL: u8 = 1;
const CHANGE_RANGES: u8 = 2;
const CHANGE_OPS: u8 = 3;
const CHANGE_NEW: u8 = 4;

/// A zeroed page of the largest size, the before-image of a new page.
static ZERO_PAGE: [u8; 65536] = [0; 65536];

/// Starts a compact payload of `pages` page changes.
pub fn encode_compact_start(out: &mut Vec<u8>, pages: usize) {
    ByteWriter::to(out).var(pages as u64);
}

/// Appends one page's change in the compact format: file and page number as varints, the
/// change type, then a full image (varint length, bytes), the changed ranges (each: varint gap
/// since the previous range's end, varint length > 0, bytes; a zero gap and length end them;
/// a new page's ranges over a zeroed page likewise), or the operations (varint length, bytes).
/// LSN field and checksum are never logged.
pub fn encode_compact_change(out: &mut Vec<u8>, pid: PageId, change: ChangeRef<'_>) {
    let mut w = ByteWriter::to(out);
    w.var(u64::from(pid.file)).var(pid.page);
    match change {
        ChangeRef::FullImage(img) => {
            w.u8(CHANGE_FULL).var_bytes(img);
        }
        ChangeRef::Ops(ops) => {
            w.u8(CHANGE_OPS).var_bytes(ops);
        }
        ChangeRef::Diff { .. } | ChangeRef::NewPage(_) => {
            let (before, after) = match change {
                ChangeRef::Diff { before, after } => {
                    w.u8(CHANGE_RANGES);
                    (before, after)
                }
                ChangeRef::NewPage(after) => {
                    w.u8(CHANGE_NEW);
                    (&ZERO_PAGE[..after.len()], after)
                }
                _ => unreachable!("matched above"),
            };
            let mut prev_end = 0usize;
            for_each_diff_range(before, after, |start, end| {
                ByteWriter::to(out).var((start - prev_end) as u64).var_bytes(&after[start..end]);
                prev_end = end;
            });
            ByteWriter::to(out).var(0).var(0);
        }
    }
}

/// Appends the compact annotation trailer (varint length then bytes; 0 = none).
pub fn encode_compact_annotation(out: &mut Vec<u8>, annotation: Option<&[u8]>) {
    ByteWriter::to(out).var_bytes(annotation.unwrap_or(&[]));
}

/// Decodes a compact payload of a pool with `page_size`-byte pages (`None` if malformed). A
/// `page_size` of 0 means unknown (inspection): full images of any length are accepted.
pub fn decode_mtr_compact(payload: &[u8], page_size: usize) -> Option<MtrRecord> {
    let body = if page_size == 0 { usize::MAX } else { page_size.checked_sub(PAGE_TRAILER_BYTES)? };
    let mut r = ByteReader::new(payload);
    let count = usize::try_from(r.var()?).ok()?;
    let mut changes = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let file = u32::try_from(r.var()?).ok()?;
        let page = r.var()?;
        let change = match r.u8()? {
            CHANGE_FULL => {
                let img = r.var_bytes()?;
                if img.len() != body && page_size != 0 {
                    return None;
                }
                PageChange::FullImage(img.to_vec())
            }
            kind @ (CHANGE_RANGES | CHANGE_NEW) => {
                let mut ranges = Vec::new();
                let mut end = 0usize;
                loop {
                    let gap = usize::try_from(r.var()?).ok()?;
                    let bytes = r.var_bytes()?;
                    if bytes.is_empty() {
                        if gap != 0 {
                            return None;
                        }
                        break;
                    }
                    let start = end.checked_add(gap)?;
                    end = start.checked_add(bytes.len())?;
                    if end > body {
                        return None;
                    }
                    ranges.push((start as u32, bytes.to_vec()));
                }
                if kind == CHANGE_NEW {
                    PageChange::NewPage(ranges)
                } else {
                    PageChange::Ranges(ranges)
                }
            }
            CHANGE_OPS => PageChange::Ops(r.var_bytes()?.to_vec()),
            _ => return None,
        };
        changes.push((PageId::new(file, page), change));
    }
    let a = r.var_bytes()?;
    if r.remaining() != 0 {
        return None;
    }
    Some(MtrRecord { page_size, changes, annotation: (!a.is_empty()).then(|| a.to_vec()) })
}

/// The first index in `from..end` where `a` and `b` differ (`end` if none). Equal 64-byte
/// blocks are skipped with the OR of their words' XORs, which compiles to vector instructions
/// (a slice comparison would call memcmp for each block).
fn first_difference(a: &[u8], b: &[u8], from: usize, end: usize) -> usize {
    let word = |s: &[u8]| u64::from_ne_bytes(s.try_into().expect("8 bytes"));
    let mut i = from;
    while i + 64 <= end {
        let x = a[i..i + 64].chunks_exact(8).zip(b[i..i + 64].chunks_exact(8));
        if x.fold(0u64, |acc, (p, q)| acc | (word(p) ^ word(q))) != 0 {
            break;
        }
        i += 64;
    }
    while i < end && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Byte ranges where `before` and `after` differ (LSN field and checksum excluded).
pub fn diff_ranges(before: &[u8], after: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut out: Vec<(u32, Vec<u8>)> = Vec::new();
    for_each_diff_range(before, after, |start, end| out.push((start as u32, after[start..end].to_vec())));
    out
}

/// Calls `f(start, end)` for each byte range where `before` and `after` differ, in order
/// (unchanged gaps of at most [`MERGE_GAP`] bytes folded in; LSN field and checksum excluded).
fn for_each_diff_range(before: &[u8], after: &[u8], mut f: impl FnMut(usize, usize)) {
    debug_assert_eq!(before.len(), after.len());
    let end = after.len() - PAGE_TRAILER_BYTES;
    let mut i = 0;
    while i < end {
        i = first_difference(before, after, i, end);
        if i >= end {
            break;
        }
        if before[i] == after[i] || LSN_RANGE.contains(&i) {
            i += 1;
            continue;
        }
        let start = i;
        let mut last_diff = i;
        while i < end && i - last_diff <= MERGE_GAP {
            if before[i] != after[i] && !LSN_RANGE.contains(&i) {
                last_diff = i;
            }
            i += 1;
        }
        f(start, last_diff + 1);
        i = last_diff + 1;
    }
}

/// Appends the encoding of one page change to `out`.
pub fn encode_page_change(out: &mut Vec<u8>, pid: PageId, change: &PageChange) {
    out.extend_from_slice(&pid.file.to_le_bytes());
    out.extend_from_slice(&pid.page.to_le_bytes());
    match change {
        PageChange::FullImage(img) => {
            out.push(CHANGE_FULL);
            out.extend_from_slice(&(img.len() as u32).to_le_bytes());
            out.extend_from_slice(img);
        }
        PageChange::Ranges(ranges) | PageChange::NewPage(ranges) => {
            out.push(if matches!(change, PageChange::NewPage(_)) { CHANGE_NEW } else { CHANGE_RANGES });
            out.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
            for (off, bytes) in ranges {
                out.extend_from_slice(&off.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
        PageChange::Ops(ops) => {
            out.push(CHANGE_OPS);
            out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
            out.extend_from_slice(ops);
        }
    }
}

/// Appends the annotation trailer (length u32 then bytes; length 0 = none).
pub fn encode_annotation(out: &mut Vec<u8>, annotation: Option<&[u8]>) {
    let a = annotation.unwrap_or(&[]);
    out.extend_from_slice(&(a.len() as u32).to_le_bytes());
    out.extend_from_slice(a);
}

/// A decoded mini-transaction record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MtrRecord {
    /// Page size of the pool.
    pub page_size: usize,
    /// Page changes in commit order.
    pub changes: Vec<(PageId, PageChange)>,
    /// Logical information attached with [`annotate_next_commit`].
    pub annotation: Option<Vec<u8>>,
}

/// Decodes a payload written by a mini-transaction commit.
pub fn decode_mtr(payload: &[u8]) -> Option<MtrRecord> {
    let (page_size, changes, used) = decode_changes_prefix(payload)?;
    let rest = &payload[used..];
    let n = ByteReader::new(rest).u32()? as usize;
    if rest.len() != 4 + n {
        return None;
    }
    let annotation = (n > 0).then(|| rest[4..].to_vec());
    Some(MtrRecord { page_size, changes, annotation })
}

/// Decodes the page changes of a payload without a trailer: `(page size, changes)`.
pub fn decode_page_changes(payload: &[u8]) -> Option<(usize, Vec<(PageId, PageChange)>)> {
    let (ps, ch, used) = decode_changes_prefix(payload)?;
    (used == payload.len()).then_some((ps, ch))
}

/// Page size, page changes, and bytes consumed.
type ChangesPrefix = (usize, Vec<(PageId, PageChange)>, usize);

fn decode_changes_prefix(payload: &[u8]) -> Option<ChangesPrefix> {
    let mut r = ByteReader::new(payload);
    let page_size = r.u32()? as usize;
    let body = page_size.checked_sub(PAGE_TRAILER_BYTES)?;
    let count = r.u32()? as usize;
    let mut changes = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let file = r.u32()?;
        let page = r.u64()?;
        let change = match r.u8()? {
            1 => {
                let n = r.u32()? as usize;
                if n != body {
                    return None;
                }
                PageChange::FullImage(r.take(n)?.to_vec())
            }
            kind @ (CHANGE_RANGES | CHANGE_NEW) => {
                let n = r.u32()? as usize;
                let mut ranges = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    let off = r.u32()?;
                    let len = r.u32()? as usize;
                    if (off as usize).checked_add(len)? > body {
                        return None;
                    }
                    ranges.push((off, r.take(len)?.to_vec()));
                }
                if kind == CHANGE_NEW {
                    PageChange::NewPage(ranges)
                } else {
                    PageChange::Ranges(ranges)
                }
            }
            3 => {
                let n = r.u32()? as usize;
                PageChange::Ops(r.take(n)?.to_vec())
            }
            _ => return None,
        };
        changes.push((PageId::new(file, page), change));
    }
    Some((page_size, changes, r.pos()))
}

/// Redoes page operations on a page (the layers owning the page formats provide it; see
/// [`PageLogger::apply_page_ops`]).
pub type OpsApplier<'a> = &'a dyn Fn(&mut [u8], &[u8]) -> std::result::Result<(), String>;

/// Applies a logged change to `page` (a full page buffer) and stamps `lsn`; page operations
/// through `ops`. An error says why the change does not fit the page (the page may then be
/// partly changed: the caller treats it as corrupt).
pub fn apply_page_change(
    page: &mut [u8],
    change: &PageChange,
    lsn: u64,
    ops: OpsApplier<'_>,
) -> std::result::Result<(), String> {
    match change {
        PageChange::FullImage(img) => {
            page.get_mut(..img.len()).ok_or("a full image longer than the page")?.copy_from_slice(img)
        }
        PageChange::Ranges(ranges) | PageChange::NewPage(ranges) => {
            if matches!(change, PageChange::NewPage(_)) {
                let body = page.len() - PAGE_TRAILER_BYTES;
                page[..body].fill(0);
            }
            for (off, bytes) in ranges {
                let o = *off as usize;
                page.get_mut(o..o + bytes.len())
                    .ok_or("a changed range outside the page")?
                    .copy_from_slice(bytes);
            }
        }
        PageChange::Ops(o) => ops(page, o)?,
    }
    PageHeader::set_lsn(page, lsn);
    Ok(())
}

/// True when `a` and `b` (two images of one page) hold the same bytes outside the LSN field
/// and the checksum.
pub fn same_but_lsn(a: &[u8], b: &[u8]) -> bool {
    let end = a.len() - PAGE_TRAILER_BYTES;
    a.len() == b.len()
        && a[..PAGE_LSN_RANGE.start] == b[..PAGE_LSN_RANGE.start]
        && a[PAGE_LSN_RANGE.end..end] == b[PAGE_LSN_RANGE.end..end]
}

/// Chooses how to log a page: a new page as its bytes over a zeroed page; with a full-image
/// `horizon`, a full image when the page's LSN is at or below it (its first change since the
/// last checkpoint began); else its page operations when it was changed only through them
/// (`ops`), else the changed ranges.
pub(crate) fn change_for<'a>(
    before: Option<&'a [u8]>,
    after: &'a [u8],
    ops: Option<&'a [u8]>,
    horizon: Option<u64>,
) -> ChangeRef<'a> {
    match before {
        None => ChangeRef::NewPage(after),
        // A page whose LSN is at or below the horizon was last changed before the checkpoint
        // began (a record ending exactly at the horizon included), so the checkpoint may be
        // writing it right now: log it whole.
        Some(b) if horizon.is_some_and(|h| PageHeader::lsn_of(b) <= h) => {
            ChangeRef::FullImage(&after[..after.len() - PAGE_TRAILER_BYTES])
        }
        Some(b) => match ops {
            Some(o) => ChangeRef::Ops(o),
            None => ChangeRef::Diff { before: b, after },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::Rng;

    fn no_ops(_: &mut [u8], _: &[u8]) -> std::result::Result<(), String> {
        Err("no operations in this test".into())
    }

    #[test]
    fn compact_payloads_round_trip_and_redo_the_after_image() {
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let size = [4096, 16384][seed as usize % 2];
            let mut before = vec![0u8; size];
            rng.fill(&mut before);
            let mut after = before.clone();
            for _ in 0..rng.below(20) {
                let at = rng.below(size as u64 - 4) as usize;
                let len = (rng.below(64) as usize).min(size - 4 - at);
                rng.fill(&mut after[at..at + len]);
            }
            let mut out = Vec::new();
            encode_compact_start(&mut out, 3);
            encode_compact_change(
                &mut out,
                PageId::new(3, 9),
                ChangeRef::Diff { before: &before, after: &after },
            );
            encode_compact_change(&mut out, PageId::new(1 << 20, 1 << 40), ChangeRef::Ops(b"\x05\x01"));
            encode_compact_change(&mut out, PageId::new(0, 0), ChangeRef::FullImage(&after[..size - 4]));
            encode_compact_annotation(&mut out, Some(b"undo"));
            let m = decode_mtr_compact(&out, size).expect("decodes");
            assert_eq!(m.annotation.as_deref(), Some(&b"undo"[..]));
            assert_eq!(m.changes[0].1, PageChange::Ranges(diff_ranges(&before, &after)), "seed {seed}");
            assert_eq!(m.changes[1], (PageId::new(1 << 20, 1 << 40), PageChange::Ops(vec![5, 1])));
            let mut redo = before.clone();
            apply_page_change(&mut redo, &m.changes[0].1, 5, &no_ops).unwrap();
            assert!(same_but_lsn(&redo, &after), "seed {seed}");
            assert_eq!(PageHeader::lsn_of(&redo), 5);
            assert!(apply_page_change(&mut redo, &m.changes[1].1, 6, &no_ops).is_err());
            // Every cut is malformed, and so is a page size the full image does not fit.
            for cut in 0..out.len() {
                assert!(decode_mtr_compact(&out[..cut], size).is_none(), "seed {seed} cut {cut}");
            }
            assert!(decode_mtr_compact(&out, size * 2).is_none());
        }
    }

    #[test]
    fn new_pages_are_ranges_over_zeroes_and_full_images_need_a_horizon() {
        let mut after = vec![0u8; 4096];
        PageHeader::init(&mut after, crate::page::PageType::Heap, 3, 9);
        after[100..140].fill(7);
        after[4000..4010].fill(1);
        let mut out = Vec::new();
        encode_compact_start(&mut out, 1);
        encode_compact_change(&mut out, PageId::new(3, 9), change_for(None, &after, None, None));
        encode_compact_annotation(&mut out, None);
        assert!(out.len() < 128, "a new page is logged in {} bytes", out.len());
        let m = decode_mtr_compact(&out, 4096).unwrap();
        let new = &m.changes[0].1;
        assert!(matches!(new, PageChange::NewPage(_)) && new.is_whole(), "{new:?}");
        // The fixed-width encoding round-trips it too.
        let mut fixed = 4096u32.to_le_bytes().to_vec();
        fixed.extend_from_slice(&1u32.to_le_bytes());
        encode_page_change(&mut fixed, PageId::new(3, 9), new);
        assert_eq!(decode_page_changes(&fixed).unwrap().1, m.changes);
        // It rebuilds the page over whatever an unreadable page held.
        let mut redo = vec![0xAB; 4096];
        apply_page_change(&mut redo, new, 50, &no_ops).unwrap();
        assert!(same_but_lsn(&redo, &after));
        // A page changed since the horizon is a diff (or its operations); one at or below it
        // is whole only with a horizon (the full-page-image protection).
        let mut before = after.clone();
        PageHeader::set_lsn(&mut before, 10);
        let mut changed = before.clone();
        changed[200] = 1;
        assert!(matches!(change_for(Some(&before), &changed, None, Some(10)), ChangeRef::FullImage(_)));
        assert!(matches!(change_for(Some(&before), &changed, None, Some(9)), ChangeRef::Diff { .. }));
        assert!(matches!(change_for(Some(&before), &changed, None, None), ChangeRef::Diff { .. }));
        assert!(matches!(change_for(Some(&before), &changed, Some(b"x"), None), ChangeRef::Ops(_)));
    }

    #[test]
    fn diffs_reproduce_the_after_image() {
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let mut before = vec![0u8; 4096];
            rng.fill(&mut before);
            let mut after = before.clone();
            for _ in 0..rng.below(20) {
                let at = rng.below(4096 - 4) as usize;
                let len = (rng.below(64) as usize).min(4092 - at);
                rng.fill(&mut after[at..at + len]);
            }
            after[PAGE_LSN_RANGE].copy_from_slice(&[9; 8]); // LSN changes are not logged
            let ranges = diff_ranges(&before, &after);
            let mut redo = before.clone();
            apply_page_change(&mut redo, &PageChange::Ranges(ranges.clone()), 77, &no_ops).unwrap();
            assert_eq!(&redo[..PAGE_LSN_RANGE.start], &after[..PAGE_LSN_RANGE.start], "seed {seed}");
            assert_eq!(&redo[32..4092], &after[32..4092], "seed {seed}");
            assert_eq!(PageHeader::lsn_of(&redo), 77);
            let mut enc = 4096u32.to_le_bytes().to_vec();
            enc.extend_from_slice(&1u32.to_le_bytes());
            encode_page_change(&mut enc, PageId::new(3, 9), &PageChange::Ranges(ranges.clone()));
            let (ps, dec) = decode_page_changes(&enc).unwrap();
            assert_eq!(ps, 4096);
            assert_eq!(dec, vec![(PageId::new(3, 9), PageChange::Ranges(ranges))]);
        }
    }

    /// The byte-at-a-time diff the word-skipping one replaced: the log format must not change.
    fn reference_diff(before: &[u8], after: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let end = after.len() - PAGE_TRAILER_BYTES;
        let mut out: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut i = 0;
        while i < end {
            if before[i] == after[i] || LSN_RANGE.contains(&i) {
                i += 1;
                continue;
            }
            let start = i;
            let mut last_diff = i;
            while i < end && i - last_diff <= MERGE_GAP {
                if before[i] != after[i] && !LSN_RANGE.contains(&i) {
                    last_diff = i;
                }
                i += 1;
            }
            out.push((start as u32, after[start..=last_diff].to_vec()));
            i = last_diff + 1;
        }
        out
    }

    #[test]
    fn diffs_equal_the_byte_at_a_time_reference() {
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let size = [4096, 16384, 24576][seed as usize % 3];
            let before: Vec<u8> = (0..size).map(|_| rng.below(3) as u8).collect();
            let mut after = before.clone();
            for _ in 0..rng.below(12) {
                let at = rng.below(size as u64) as usize;
                for b in &mut after[at..(at + rng.below(40) as usize).min(size)] {
                    *b = rng.below(3) as u8;
                }
            }
            assert_eq!(diff_ranges(&before, &after), reference_diff(&before, &after), "seed {seed}");
        }
    }

    #[test]
    fn truncated_payloads_do_not_decode() {
        let mut enc = 4096u32.to_le_bytes().to_vec();
        enc.extend_from_slice(&1u32.to_le_bytes());
        encode_page_change(&mut enc, PageId::new(1, 2), &PageChange::FullImage(vec![5; 4092]));
        assert!(decode_page_changes(&enc).is_some());
        assert!(decode_page_changes(&enc[..enc.len() - 1]).is_none());
    }
}
