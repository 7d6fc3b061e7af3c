//! B+tree node layout on a page.
//!
//! Owns: the byte layout of leaf and inner nodes. After the common 32-byte page header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 32 | 2 | number of entries `n` |
//! | 34 | 2 | level (0 = leaf) |
//! | 36 | 4 | start of the entry heap (entries grow down from the trailer) |
//! | 40 | 8 | leaf: right sibling page number (`NO_PAGE` if none); inner: leftmost child |
//! | 48 | 12 × n | slots sorted by key: entry offset u32, then the key's first 8 bytes
//! (zero-padded) as a big-endian "head" |
//!
//! The heads let a binary search run over the contiguous slot array and touch an entry only
//! when two heads tie, which saves most cache misses of a search. An entry is `key_len u16, value_len u16, key, value`. In an inner node the value is the
//! 8-byte child page number holding keys `>= key` (and `< next key`); keys below the first key
//! go to the leftmost child.
//!
//! Invariants: keys strictly increase across the offset array; every entry lies inside
//! `[heap_start, page_len - 4)`; the offset array never overlaps the heap.

use crate::page::header::{PAGE_HEADER_BYTES, PAGE_TRAILER_BYTES};
use crate::util::bytes::u64_at;
use std::cmp::Ordering;

const COUNT: usize = PAGE_HEADER_BYTES;
const LEVEL: usize = PAGE_HEADER_BYTES + 2;
const HEAP_START: usize = PAGE_HEADER_BYTES + 4;
const LINK: usize = PAGE_HEADER_BYTES + 8;
const SLOTS: usize = PAGE_HEADER_BYTES + 16;
const SLOT_BYTES: usize = 12;
const ENTRY_HEADER: usize = 4;

/// "No page" in sibling links.
pub const NO_PAGE: u64 = u64::MAX;

fn g16(p: &[u8], o: usize) -> usize {
    u16::from_le_bytes([p[o], p[o + 1]]) as usize
}
fn p16(p: &mut [u8], o: usize, v: usize) {
    debug_assert!(v <= u16::MAX as usize);
    p[o..o + 2].copy_from_slice(&(v as u16).to_le_bytes());
}
fn g32(p: &[u8], o: usize) -> usize {
    u32::from_le_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]) as usize
}
fn p32(p: &mut [u8], o: usize, v: usize) {
    p[o..o + 4].copy_from_slice(&(v as u32).to_le_bytes());
}
fn g64(p: &[u8], o: usize) -> u64 {
    u64_at(p, o)
}
fn p64(p: &mut [u8], o: usize, v: u64) {
    p[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// Largest key + value an entry may hold in a node of `page_size` bytes (at least four entries
/// fit in a node, so splits always make progress).
pub fn max_entry_payload(page_size: usize) -> usize {
    (page_size - PAGE_TRAILER_BYTES - SLOTS) / 4 - SLOT_BYTES - ENTRY_HEADER
}

/// Initialises an empty node body at `level` with `link` (sibling for leaves, leftmost child
/// for inner nodes).
pub fn init(p: &mut [u8], level: usize, link: u64) {
    p16(p, COUNT, 0);
    p16(p, LEVEL, level);
    p32(p, HEAP_START, p.len() - PAGE_TRAILER_BYTES);
    p64(p, LINK, link);
}

/// Number of entries.
pub fn count(p: &[u8]) -> usize {
    g16(p, COUNT)
}
/// Level of the node (0 = leaf).
pub fn level(p: &[u8]) -> usize {
    g16(p, LEVEL)
}
/// True for a leaf.
pub fn is_leaf(p: &[u8]) -> bool {
    level(p) == 0
}
/// Right sibling (leaf) or leftmost child (inner).
pub fn link(p: &[u8]) -> u64 {
    g64(p, LINK)
}
/// Sets the right sibling (leaf) or leftmost child (inner).
pub fn set_link(p: &mut [u8], v: u64) {
    p64(p, LINK, v)
}

fn entry_off(p: &[u8], i: usize) -> usize {
    g32(p, SLOTS + i * SLOT_BYTES)
}

fn head_at(p: &[u8], i: usize) -> u64 {
    let o = SLOTS + i * SLOT_BYTES + 4;
    u64::from_be_bytes(p[o..o + 8].try_into().expect("8 bytes"))
}

/// The first 8 bytes of `k`, zero-padded, as a big-endian integer (so integer order equals
/// byte order of the prefixes).
fn head_of(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

fn set_slot(p: &mut [u8], i: usize, off: usize, k: &[u8]) {
    let o = SLOTS + i * SLOT_BYTES;
    p32(p, o, off);
    p[o + 4..o + 12].copy_from_slice(&head_of(k).to_be_bytes());
}

/// Key of entry `i`.
pub fn key(p: &[u8], i: usize) -> &[u8] {
    let o = entry_off(p, i);
    let kl = g16(p, o);
    &p[o + ENTRY_HEADER..o + ENTRY_HEADER + kl]
}

/// Value of entry `i`.
pub fn value(p: &[u8], i: usize) -> &[u8] {
    let o = entry_off(p, i);
    let kl = g16(p, o);
    let vl = g16(p, o + 2);
    &p[o + ENTRY_HEADER + kl..o + ENTRY_HEADER + kl + vl]
}

/// Key and value of entry `i`, or `None` if the slot or the entry lies outside the page (a
/// damaged node, for tools that show one without trusting it).
pub fn entry_checked(p: &[u8], i: usize) -> Option<(&[u8], &[u8])> {
    let end = p.len().checked_sub(PAGE_TRAILER_BYTES)?;
    let slot = SLOTS.checked_add(i.checked_mul(SLOT_BYTES)?)?;
    if slot + SLOT_BYTES > end {
        return None;
    }
    let o = entry_off(p, i);
    if o < SLOTS || o.checked_add(ENTRY_HEADER)? > end {
        return None;
    }
    let (kl, vl) = (g16(p, o), g16(p, o + 2));
    let k = p.get(o + ENTRY_HEADER..o + ENTRY_HEADER + kl)?;
    let v = p
        .get(o + ENTRY_HEADER + kl..o + ENTRY_HEADER + kl + vl)
        .filter(|_| o + ENTRY_HEADER + kl + vl <= end)?;
    Some((k, v))
}

/// Child page number of entry `i` of an inner node.
pub fn child(p: &[u8], i: usize) -> u64 {
    g64(value(p, i), 0)
}

/// Compares entry `i`'s key with `k` (whose head is `h`), touching the entry only on a tie.
#[inline]
fn cmp_at(p: &[u8], i: usize, k: &[u8], h: u64) -> Ordering {
    match head_at(p, i).cmp(&h) {
        Ordering::Equal => key(p, i).cmp(k),
        other => other,
    }
}

/// Search: `Ok(i)` if entry `i` has `k`, else `Err(i)` where it would be inserted.
///
/// Nodes of more than a few entries are first narrowed by interpolation on the 8-byte key
/// heads (integer keys are often dense, so the first guess usually lands on the key): a guess,
/// then galloping steps away from it, each step only narrowing `[lo, hi)` by a strict head
/// comparison (which implies the key order). A binary search finishes in what is left. On dense
/// keys this touches 3–4 cache lines of a 16 KiB node instead of about 9.
pub fn search(p: &[u8], k: &[u8]) -> Result<usize, usize> {
    let h = head_of(k);
    let n = count(p);
    if n >= INTERPOLATE_FROM {
        let (h_first, h_last) = (head_at(p, 0), head_at(p, n - 1));
        if h_first < h && h < h_last {
            // Entries 0 and n-1 are on either side of k: k falls in (0, n-1).
            let g = interpolate(h - h_first, h_last - h_first, n - 1);
            return gallop(p, k, h, 1, n - 1, g);
        }
    }
    gallop(p, k, h, 0, n, None)
}

/// [`search`] in a node whose keys are known to lie in `[bounds.0, bounds.1)` by head (the
/// separator heads its parent holds for it, from [`child_for_bounded`]). The first guess is
/// interpolated from those bounds, so it needs neither the node's first nor its last slot: on
/// a node of dense keys the search touches the header line, the guessed slot and the entry.
/// Any bounds give the right answer; wrong ones only cost steps.
pub fn search_bounded(p: &[u8], k: &[u8], bounds: Option<(u64, u64)>) -> Result<usize, usize> {
    let h = head_of(k);
    let n = count(p);
    match bounds {
        Some((lo, hi)) if n >= INTERPOLATE_FROM && lo <= h && h < hi => {
            gallop(p, k, h, 0, n, interpolate(h - lo, hi - lo, n))
        }
        _ => search(p, k),
    }
}

/// Where a search for `k` in a node bounded by `bounds` will probably look first, if the
/// node's keys are dense integers (one key per head value) and its entries were written in key
/// order (as appends, splits and compaction write them): the offsets of the slot and — given
/// the length of the node's values — of its entry. For prefetching those cache lines together
/// with the node header, before the entry count is known; a wrong guess costs nothing else.
pub fn likely_offsets(
    page_size: usize,
    k: &[u8],
    bounds: Option<(u64, u64)>,
    value_len: Option<usize>,
) -> Option<(usize, Option<usize>)> {
    let (lo, hi) = bounds?;
    let h = head_of(k);
    let cap = (page_size - PAGE_TRAILER_BYTES - SLOTS) / SLOT_BYTES;
    if !(lo <= h && h < hi && hi - lo <= cap as u64) {
        return None;
    }
    let i = (h - lo) as usize;
    let entry = value_len.and_then(|v| {
        let below = (i + 1) * (ENTRY_HEADER + k.len() + v);
        let end = page_size - PAGE_TRAILER_BYTES;
        (below <= end - SLOTS).then(|| end - below)
    });
    Some((SLOTS + i * SLOT_BYTES, entry))
}

/// Interpolation below this many entries is not worth its division.
const INTERPOLATE_FROM: usize = 16;

/// `⌊off · n / span⌋`, for `off < span`: the interpolated position of a head `off` above the
/// lower bound of a range `span` wide that holds `n` entries.
fn interpolate(off: u64, span: u64, n: usize) -> Option<usize> {
    debug_assert!(off < span);
    Some(match off.checked_mul(n as u64) {
        Some(x) => (x / span) as usize,
        None => ((u128::from(off) * n as u128) / u128::from(span)) as usize,
    })
}

/// Finds `k` (head `h`) among entries `[lo, hi)`, which must bracket its position: first at
/// `guess` (clamped into the range) and in growing steps away from it, then by bisection.
fn gallop(
    p: &[u8],
    k: &[u8],
    h: u64,
    mut lo: usize,
    mut hi: usize,
    guess: Option<usize>,
) -> Result<usize, usize> {
    if let Some(g) = guess.filter(|_| lo < hi) {
        let g = g.clamp(lo, hi - 1);
        match cmp_at(p, g, k, h) {
            Ordering::Equal => return Ok(g),
            Ordering::Less => {
                lo = g + 1;
                let mut step = 4;
                while lo < hi {
                    let probe = (g + step).min(hi - 1);
                    match cmp_at(p, probe, k, h) {
                        Ordering::Equal => return Ok(probe),
                        Ordering::Less => lo = probe + 1,
                        Ordering::Greater => {
                            hi = probe;
                            break;
                        }
                    }
                    step *= 4;
                }
            }
            Ordering::Greater => {
                hi = g;
                let mut step = 4;
                while lo < hi {
                    let probe = g.saturating_sub(step).max(lo);
                    match cmp_at(p, probe, k, h) {
                        Ordering::Equal => return Ok(probe),
                        Ordering::Greater => hi = probe,
                        Ordering::Less => {
                            lo = probe + 1;
                            break;
                        }
                    }
                    step *= 4;
                }
            }
        }
    }
    while lo < hi {
        let mid = (lo + hi) / 2;
        match cmp_at(p, mid, k, h) {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// The child of an inner node that covers key `k`.
pub fn child_for(p: &[u8], k: &[u8]) -> u64 {
    match search(p, k) {
        Ok(i) => child(p, i),
        Err(0) => link(p),
        Err(i) => child(p, i - 1),
    }
}

/// The child of an inner node that covers key `k`, with the heads of the separators around
/// it: its keys lie in `[lo, hi)` by head. A bound this node does not hold is taken from
/// `outer`, the bounds of this node itself (`None`: unbounded, and then no bounds are given).
pub fn child_for_bounded(p: &[u8], k: &[u8], outer: Option<(u64, u64)>) -> (u64, Option<(u64, u64)>) {
    let n = count(p);
    let (child, below, above) = match search(p, k) {
        Ok(i) => (child(p, i), Some(i), i + 1),
        Err(0) => (link(p), None, 0),
        Err(i) => (child(p, i - 1), Some(i - 1), i),
    };
    let lo = below.map(|i| head_at(p, i)).or(outer.map(|b| b.0));
    let hi = if above < n { Some(head_at(p, above)) } else { outer.map(|b| b.1) };
    // Bounds are hints for interpolation only ([`search_bounded`] is right for any bounds):
    // a key longer than 8 bytes may share the head of the separator above it.
    (child, lo.zip(hi).filter(|(lo, hi)| lo < hi))
}

fn heap_start(p: &[u8]) -> usize {
    g32(p, HEAP_START)
}

fn used_entry_bytes(p: &[u8]) -> usize {
    (0..count(p)).map(|i| ENTRY_HEADER + key(p, i).len() + value(p, i).len()).sum()
}

/// Bytes still available for entries (after compaction), counting their slot.
pub fn free_space(p: &[u8]) -> usize {
    // Saturating: on a damaged node (overlapping entries) the sum can exceed the page.
    (p.len() - PAGE_TRAILER_BYTES - SLOTS).saturating_sub(count(p) * SLOT_BYTES + used_entry_bytes(p))
}

/// Bytes between the slot array and the entry heap: what an entry can take without
/// compaction. Equals [`free_space`] on a node with no holes (one filled from empty), in O(1)
/// where `free_space` walks every entry.
pub fn free_gap(p: &[u8]) -> usize {
    heap_start(p).saturating_sub(SLOTS + count(p) * SLOT_BYTES)
}

/// Space an entry of this key and value needs, including its slot.
pub fn entry_space(k: &[u8], v: &[u8]) -> usize {
    SLOT_BYTES + ENTRY_HEADER + k.len() + v.len()
}

/// True if an entry of this size fits (possibly after compaction).
pub fn fits(p: &[u8], k: &[u8], v: &[u8]) -> bool {
    // The gap between the slot array and the entry heap is free space too: when it holds the
    // entry and its slot, skip the walk over every entry that the total needs.
    let gap_needed = SLOTS + (count(p) + 1) * SLOT_BYTES + ENTRY_HEADER + k.len() + v.len();
    heap_start(p) >= gap_needed || free_space(p) >= entry_space(k, v)
}

fn compact(p: &mut [u8]) {
    let n = count(p);
    let entries: Vec<(Vec<u8>, Vec<u8>)> =
        (0..n).map(|i| (key(p, i).to_vec(), value(p, i).to_vec())).collect();
    let mut top = p.len() - PAGE_TRAILER_BYTES;
    for (i, (k, v)) in entries.iter().enumerate() {
        top -= ENTRY_HEADER + k.len() + v.len();
        write_entry(p, top, k, v);
        set_slot(p, i, top, k);
    }
    p32(p, HEAP_START, top);
}

fn write_entry(p: &mut [u8], at: usize, k: &[u8], v: &[u8]) {
    p16(p, at, k.len());
    p16(p, at + 2, v.len());
    p[at + ENTRY_HEADER..at + ENTRY_HEADER + k.len()].copy_from_slice(k);
    p[at + ENTRY_HEADER + k.len()..at + ENTRY_HEADER + k.len() + v.len()].copy_from_slice(v);
}

/// Inserts `(k, v)` at position `i` (the caller found `i` by [`search`] and checked [`fits`]).
pub fn insert_at(p: &mut [u8], i: usize, k: &[u8], v: &[u8]) {
    let n = count(p);
    assert!(i <= n && fits(p, k, v), "insert_at: entry does not fit or bad position");
    let need = ENTRY_HEADER + k.len() + v.len();
    let slots_end = SLOTS + (n + 1) * SLOT_BYTES;
    if heap_start(p) < slots_end + need {
        compact(p);
    }
    let at = heap_start(p) - need;
    write_entry(p, at, k, v);
    p32(p, HEAP_START, at);
    p.copy_within(SLOTS + i * SLOT_BYTES..SLOTS + n * SLOT_BYTES, SLOTS + (i + 1) * SLOT_BYTES);
    set_slot(p, i, at, k);
    p16(p, COUNT, n + 1);
}

/// Removes entry `i` (its bytes are reclaimed at the next compaction).
pub fn remove_at(p: &mut [u8], i: usize) {
    let n = count(p);
    assert!(i < n, "remove_at {i} of {n}");
    p.copy_within(SLOTS + (i + 1) * SLOT_BYTES..SLOTS + n * SLOT_BYTES, SLOTS + i * SLOT_BYTES);
    p16(p, COUNT, n - 1);
    if n == 1 {
        p32(p, HEAP_START, p.len() - PAGE_TRAILER_BYTES);
    }
}

/// Replaces the value of entry `i` in place when the length is unchanged; returns false
/// otherwise (the caller removes and re-inserts).
pub fn overwrite_value(p: &mut [u8], i: usize, v: &[u8]) -> bool {
    let o = entry_off(p, i);
    let kl = g16(p, o);
    if g16(p, o + 2) != v.len() {
        return false;
    }
    p[o + ENTRY_HEADER + kl..o + ENTRY_HEADER + kl + v.len()].copy_from_slice(v);
    true
}

/// All entries, borrowed from `p` (used by splits: the node being rebuilt is split from a
/// copy of its bytes, one allocation instead of two per entry).
pub fn entries(p: &[u8]) -> Vec<(&[u8], &[u8])> {
    (0..count(p)).map(|i| (key(p, i), value(p, i))).collect()
}

/// Replaces the whole entry set with `entries` (sorted), keeping level and link.
pub fn rebuild(p: &mut [u8], entries: &[(&[u8], &[u8])]) {
    let level = level(p);
    let link = link(p);
    init(p, level, link);
    for (i, (k, v)) in entries.iter().enumerate() {
        insert_at(p, i, k, v);
    }
}

/// Checks the layout invariants; describes the first violation.
pub fn check(p: &[u8]) -> Result<(), String> {
    let n = count(p);
    let hs = heap_start(p);
    let end = p.len() - PAGE_TRAILER_BYTES;
    if SLOTS + n * SLOT_BYTES > hs || hs > end {
        return Err(format!("slot array end {} overlaps heap start {hs}", SLOTS + n * SLOT_BYTES));
    }
    for i in 0..n {
        let o = entry_off(p, i);
        if o < hs || o + ENTRY_HEADER > end || o + ENTRY_HEADER + g16(p, o) + g16(p, o + 2) > end {
            return Err(format!("entry {i} at {o} outside heap {hs}..{end}"));
        }
        if i > 0 && key(p, i - 1) >= key(p, i) {
            return Err(format!("keys not increasing at entry {i}"));
        }
        if head_at(p, i) != head_of(key(p, i)) {
            return Err(format!("slot {i} head does not match its key"));
        }
        if !is_leaf(p) && value(p, i).len() != 8 {
            return Err(format!("inner entry {i} has a {}-byte child pointer", value(p, i).len()));
        }
    }
    Ok(())
}

/// Page operations of B+tree nodes: their encoding in a mini-transaction record and their
/// redo (codes 16–31; `crate::btree::apply_page_ops` dispatches by code).
pub mod op {
    use super::{count, fits, insert_at, overwrite_value, remove_at};
    use crate::util::bytes::{ByteReader, ByteWriter};

    /// An entry inserted at a position (position, key, value): [`super::insert_at`].
    pub const INSERT: u8 = 16;
    /// The entry at a position removed (position): [`super::remove_at`].
    pub const REMOVE: u8 = 17;
    /// The value of the entry at a position replaced in place (position, value):
    /// [`super::overwrite_value`].
    pub const OVERWRITE: u8 = 18;
    /// The smallest code of this format.
    pub const FIRST: u8 = 16;
    /// The largest code of this format.
    pub const LAST: u8 = 31;

    /// Appends the insert of `(k, v)` at position `i`.
    pub fn insert(out: &mut Vec<u8>, i: usize, k: &[u8], v: &[u8]) {
        ByteWriter::to(out).u8(INSERT).var(i as u64).var_bytes(k).var_bytes(v);
    }

    /// Appends the removal of the entry at position `i`.
    pub fn remove(out: &mut Vec<u8>, i: usize) {
        ByteWriter::to(out).u8(REMOVE).var(i as u64);
    }

    /// Appends the in-place replacement of the value at position `i` by `v`.
    pub fn overwrite(out: &mut Vec<u8>, i: usize, v: &[u8]) {
        ByteWriter::to(out).u8(OVERWRITE).var(i as u64).var_bytes(v);
    }

    /// Redoes the operation of `code` (already read) whose fields follow in `r`.
    pub fn apply(p: &mut [u8], code: u8, r: &mut ByteReader<'_>) -> Result<(), String> {
        let bad = || format!("B+tree node operation {code} is cut short");
        let i = usize::try_from(r.var().ok_or_else(bad)?).map_err(|_| bad())?;
        let n = count(p);
        match code {
            INSERT => {
                let (k, v) = (r.var_bytes().ok_or_else(bad)?, r.var_bytes().ok_or_else(bad)?);
                if i > n || !fits(p, k, v) {
                    return Err(format!("insert at position {i} of a node of {n} entries does not fit"));
                }
                insert_at(p, i, k, v);
                Ok(())
            }
            REMOVE if i < n => {
                remove_at(p, i);
                Ok(())
            }
            REMOVE => Err(format!("removal of position {i} from a node of {n} entries")),
            OVERWRITE => {
                let v = r.var_bytes().ok_or_else(bad)?;
                if i >= n || !overwrite_value(p, i, v) {
                    return Err(format!(
                        "in-place value at position {i} of a node of {n} entries does not fit"
                    ));
                }
                Ok(())
            }
            _ => Err(format!("unknown B+tree node operation {code}")),
        }
    }
}

#[cfg(test)]
mod search_tests {
    use super::*;
    use crate::util::Rng;

    /// Plain binary search over full keys: the reference.
    fn reference(p: &[u8], k: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, count(p));
        while lo < hi {
            let mid = (lo + hi) / 2;
            match key(p, mid).cmp(k) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    fn node_with(keys: &mut Vec<Vec<u8>>, page: usize) -> Vec<u8> {
        keys.sort();
        keys.dedup();
        let mut p = vec![0u8; page];
        init(&mut p, 0, NO_PAGE);
        keys.retain(|k| k.len() + 8 <= 200);
        let mut kept = Vec::new();
        for k in keys.iter() {
            if !fits(&p, k, &[0; 8]) {
                break;
            }
            let n = count(&p);
            insert_at(&mut p, n, k, &[7; 8]);
            kept.push(k.clone());
        }
        *keys = kept;
        p
    }

    /// The interpolating search agrees with binary search on dense, sparse, skewed and
    /// shared-prefix keys, for present and absent probes.
    #[test]
    fn interpolation_search_matches_binary_search() {
        for seed in 0..300u64 {
            let mut rng = Rng::new(seed);
            let shape = seed % 5;
            let n = 1 + rng.below(600) as usize;
            let mut keys: Vec<Vec<u8>> = (0..n)
                .map(|i| match shape {
                    0 => ((i as u64) * 3 + 1000).to_be_bytes().to_vec(),
                    1 => rng.next_u64().to_be_bytes().to_vec(),
                    2 => (rng.below(1000).pow(3)).to_be_bytes().to_vec(),
                    3 => {
                        let mut k = b"prefix-".to_vec();
                        k.extend_from_slice(&rng.below(100_000).to_be_bytes());
                        k
                    }
                    _ => (0..1 + rng.below(12)).map(|_| rng.below(4) as u8).collect(),
                })
                .collect();
            let p = node_with(&mut keys, 16384);
            let mut probes: Vec<Vec<u8>> = keys.clone();
            for _ in 0..200 {
                probes.push(match shape {
                    0 | 2 => rng.below(2_000_000).to_be_bytes().to_vec(),
                    3 => {
                        let mut k = b"prefix-".to_vec();
                        k.extend_from_slice(&rng.below(100_000).to_be_bytes());
                        k
                    }
                    _ => (0..rng.below(13)).map(|_| rng.below(5) as u8).collect(),
                });
            }
            for k in probes {
                let want = reference(&p, &k);
                assert_eq!(search(&p, &k), want, "seed {seed}, key {k:?}");
                // Any bounds, right or wrong, give the same answer.
                let (a, b) = (rng.next_u64() >> rng.below(64), rng.next_u64() >> rng.below(64));
                for bounds in [None, Some((a.min(b), a.max(b))), Some((0, u64::MAX)), Some((a, a))] {
                    assert_eq!(search_bounded(&p, &k, bounds), want, "seed {seed}, key {k:?}, {bounds:?}");
                }
            }
        }
    }

    /// The bounds an inner node gives a child hold every key routed to that child, and on a
    /// leaf of dense integer keys written in order the guessed slot and entry offsets are the
    /// key's real ones.
    #[test]
    fn child_bounds_hold_the_key_and_dense_guesses_are_exact() {
        let enc = |x: u64| x.to_be_bytes().to_vec();
        // An inner node with separators 1000, 2000, ..., 9000 over leftmost child 99.
        let mut inner = vec![0u8; 4096];
        init(&mut inner, 1, 99);
        for (i, sep) in (1..10u64).map(|s| s * 1000).enumerate() {
            insert_at(&mut inner, i, &enc(sep), &(i as u64).to_le_bytes());
        }
        for probe in [0u64, 999, 1000, 1500, 8999, 9000, 12_000] {
            let (child, bounds) = child_for_bounded(&inner, &enc(probe), None);
            assert_eq!(child, child_for(&inner, &enc(probe)), "probe {probe}");
            match probe {
                // Leftmost and rightmost children have no bound on one side.
                0..=999 | 9000.. => assert_eq!(bounds, None, "probe {probe}"),
                _ => {
                    let (lo, hi) = bounds.expect("bounded");
                    assert!(lo <= probe && probe < hi && hi - lo == 1000, "probe {probe}: {lo}..{hi}");
                }
            }
            // Outer bounds fill the missing side.
            let (_, outer) = child_for_bounded(&inner, &enc(probe), Some((0, 20_000)));
            assert!(outer.is_some_and(|(lo, hi)| lo <= probe && probe < hi), "probe {probe}");
        }
        // A leaf of keys 5000..5400 filled in order, as appends and splits write it.
        let mut leaf = vec![0u8; 16384];
        init(&mut leaf, 0, NO_PAGE);
        for (i, k) in (5000..5400u64).enumerate() {
            insert_at(&mut leaf, i, &enc(k), &[i as u8; 8]);
        }
        for k in [5000u64, 5001, 5200, 5399] {
            let (slot, entry) =
                likely_offsets(16384, &enc(k), Some((5000, 5400)), Some(8)).expect("dense keys guess");
            let i = search_bounded(&leaf, &enc(k), Some((5000, 5400))).expect("present");
            assert_eq!(slot, SLOTS + i * SLOT_BYTES, "key {k}");
            assert_eq!(entry, Some(entry_off(&leaf, i)), "key {k}");
        }
        // Sparse bounds (more heads than slots could hold) give no guess.
        assert_eq!(likely_offsets(16384, &enc(7), Some((0, 1 << 40)), Some(8)), None);
    }
}
