//! Overflow pages: the pieces of a row too large for a slotted heap page.
//!
//! Owns: the layout of overflow pages (page type [`PageType::Overflow`](super::PageType)).
//! A row whose encoding exceeds what a slotted page holds is stored, whole, in a chain of
//! overflow pages of its table's heap file: the first page holds the row's length and first
//! chunk, each page links to the next. After the common header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 32 | 4 | state: 0 free, 1 first page of a row, 2 a later page of a row |
//! | 36 | 4 | bytes of the row in this page |
//! | 40 | 8 | next page of the row (`u64::MAX`: this is the last) |
//! | 48 | 8 | the row's length in bytes (first page; 0 otherwise) |
//! | 56 | | the chunk |
//!
//! Invariants: a chunk lies inside `[56, page_len - 4)`; only a first page is the start of a
//! row (a free or later page is never read as one).

use super::header::{PAGE_HEADER_BYTES, PAGE_TRAILER_BYTES};
use crate::util::bytes::{u32_at, u64_at};

const STATE_OFF: usize = PAGE_HEADER_BYTES;
const LEN_OFF: usize = PAGE_HEADER_BYTES + 4;
const NEXT_OFF: usize = PAGE_HEADER_BYTES + 8;
const TOTAL_OFF: usize = PAGE_HEADER_BYTES + 16;
const DATA_OFF: usize = PAGE_HEADER_BYTES + 24;

/// The next-page value of a row's last page.
pub const NO_PAGE: u64 = u64::MAX;

/// What an overflow page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Nothing: the page may be given to a new row.
    Free,
    /// The first page of a row (a row id points at it).
    First,
    /// A later page of a row.
    Next,
}

/// Bytes of a row one overflow page of `page_size` bytes holds.
pub fn capacity(page_size: usize) -> usize {
    page_size - DATA_OFF - PAGE_TRAILER_BYTES
}

/// The page's state, `None` if the field holds no known state (a damaged page).
pub fn state(page: &[u8]) -> Option<State> {
    match u32_at(page, STATE_OFF) {
        0 => Some(State::Free),
        1 => Some(State::First),
        2 => Some(State::Next),
        _ => None,
    }
}

/// The page after this one in its row, or [`NO_PAGE`].
pub fn next(page: &[u8]) -> u64 {
    u64_at(page, NEXT_OFF)
}

/// The length of the row a first page starts.
pub fn total_len(page: &[u8]) -> u64 {
    u64_at(page, TOTAL_OFF)
}

/// The row's bytes in this page, or an error naming what is wrong with the page.
pub fn chunk(page: &[u8]) -> Result<&[u8], String> {
    let len = u32_at(page, LEN_OFF) as usize;
    if len > capacity(page.len()) {
        return Err(format!("chunk of {len} bytes, more than the {} a page holds", capacity(page.len())));
    }
    Ok(&page[DATA_OFF..DATA_OFF + len])
}

/// Marks the page free (the header must already be initialised; the old chunk's bytes stay
/// but are never read).
pub fn init_free(page: &mut [u8]) {
    write_fields(page, 0, 0, NO_PAGE, 0);
}

/// Makes the page one of a row: its `state` (`First` or `Next`), the row's length `total` (0
/// for a later page), the `next` page and this page's `chunk` (at most [`capacity`] bytes).
pub fn write(page: &mut [u8], state: State, total: u64, next: u64, chunk: &[u8]) {
    assert!(
        chunk.len() <= capacity(page.len()),
        "chunk of {} bytes for a {}-byte page",
        chunk.len(),
        page.len()
    );
    let code = match state {
        State::Free => 0,
        State::First => 1,
        State::Next => 2,
    };
    write_fields(page, code, chunk.len() as u32, next, total);
    page[DATA_OFF..DATA_OFF + chunk.len()].copy_from_slice(chunk);
}

fn write_fields(page: &mut [u8], state: u32, len: u32, next: u64, total: u64) {
    page[STATE_OFF..STATE_OFF + 4].copy_from_slice(&state.to_le_bytes());
    page[LEN_OFF..LEN_OFF + 4].copy_from_slice(&len.to_le_bytes());
    page[NEXT_OFF..NEXT_OFF + 8].copy_from_slice(&next.to_le_bytes());
    page[TOTAL_OFF..TOTAL_OFF + 8].copy_from_slice(&total.to_le_bytes());
}

/// Checks the page's fields are consistent (state known, chunk inside the page).
pub fn check(page: &[u8]) -> Result<(), String> {
    let Some(s) = state(page) else { return Err(format!("unknown state {}", u32_at(page, STATE_OFF))) };
    chunk(page)?;
    if s == State::First && total_len(page) < chunk(page)?.len() as u64 {
        return Err(format!("row of {} bytes shorter than its first chunk", total_len(page)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{PageHeader, PageType};

    #[test]
    fn a_page_round_trips_its_fields_and_rejects_a_chunk_past_its_end() {
        let mut p = vec![0u8; 4096];
        PageHeader::init(&mut p, PageType::Overflow, 1, 2);
        init_free(&mut p);
        assert_eq!(state(&p), Some(State::Free));
        assert_eq!(chunk(&p).unwrap(), b"");
        write(&mut p, State::First, 10_000, 7, &[5; 100]);
        assert_eq!((state(&p), next(&p), total_len(&p)), (Some(State::First), 7, 10_000));
        assert_eq!(chunk(&p).unwrap(), &[5; 100][..]);
        check(&p).unwrap();
        p[LEN_OFF..LEN_OFF + 4].copy_from_slice(&5000u32.to_le_bytes());
        assert!(chunk(&p).is_err() && check(&p).is_err());
        p[STATE_OFF] = 9;
        assert!(state(&p).is_none() && check(&p).is_err());
        assert_eq!(capacity(4096), 4096 - 60);
    }
}
