//! Rows larger than a slotted page: stored whole in a chain of overflow pages of the heap file.
//!
//! Owns: the heap's overflow rows (insert, read, free) and its set of free overflow pages.
//! A row id of an overflow row names the chain's first page and slot [`OVERFLOW_SLOT`]. Every
//! change of a row's pages happens in one mini-transaction, logged like any heap change (the
//! page bytes it changed), so a crash or a failed log append leaves the whole row or none of it.
//! Invariants: pages of a row are latched first page first, then in chain order (ascending: a
//! row takes its pages sorted); a page is in the free set only after the mini-transaction that
//! freed it committed, and is taken from it only after checking, under its exclusive latch,
//! that it is still free (a scan may add a page it saw free that was taken meanwhile).

use super::{HeapFile, RowId};
use crate::buffer::mtr::{annotate_next_commit, take_annotation};
use crate::buffer::{PageClass, PageMut};
use crate::error::{Error, Result};
use crate::page::overflow::{self, State, NO_PAGE};
use crate::page::{PageHeader, PageType};
use crate::table::schema::{ColumnType, Schema, Value};
use crate::util::sync::MutexExt;

/// The slot of a row id that names an overflow row (slotted pages never have this many slots).
pub const OVERFLOW_SLOT: u16 = u16::MAX;

/// Largest row a table stores (its encoding, in bytes): 16 MiB. A row is written by one
/// mini-transaction, so it is bounded by one log record (64 MiB), which an update fills with
/// the row's old and new bytes and its new pages.
pub const MAX_ROW_BYTES: usize = 16 << 20;

impl RowId {
    /// Whether the row id names an overflow row (see [`OVERFLOW_SLOT`]).
    pub fn is_overflow(self) -> bool {
        self.slot == OVERFLOW_SLOT
    }
}

impl HeapFile {
    fn overflow_corrupt(&self, page: u64, detail: String) -> Error {
        Error::Corruption {
            file: self.name.clone(),
            offset: page * self.pool.page_size() as u64,
            detail: format!("overflow page {page}: {detail}"),
        }
    }

    /// Checks that a row of `len` bytes may be stored: at most [`MAX_ROW_BYTES`], and its
    /// pages at most a quarter of the pool (they stay latched while it is written).
    pub(super) fn check_row_len(&self, len: usize) -> Result<()> {
        let pages = len.div_ceil(overflow::capacity(self.pool.page_size()));
        let frames = self.pool.memory_bytes() / self.pool.page_size();
        if len > MAX_ROW_BYTES || (len > self.max_inline_bytes() && pages > frames / 4) {
            return Err(Error::InvalidArgument(format!(
                "row of {len} bytes is too large for `{}`: at most {MAX_ROW_BYTES} bytes, and a row larger \
                 than a page takes at most a quarter of the table buffer ({pages} of {frames} {}-byte pages)",
                self.name,
                self.pool.page_size()
            )));
        }
        Ok(())
    }

    /// Whether `page` is the first page of an overflow row (`false` for any other page: a row
    /// id that outlived its row).
    pub(super) fn overflow_exists(&self, page: u64) -> Result<bool> {
        if page >= self.pages()? {
            return Ok(false);
        }
        let g = self.pool.fix(self.pid(page), PageClass::Data)?;
        Ok(PageHeader::page_type_of(&g) == Some(PageType::Overflow)
            && overflow::state(&g) == Some(State::First))
    }

    /// The overflow row starting at `first`, `None` if no row starts there.
    pub(super) fn read_overflow(&self, first: u64) -> Result<Option<Vec<u8>>> {
        if first >= self.pages()? {
            return Ok(None);
        }
        let g = self.pool.fix(self.pid(first), PageClass::Data)?;
        if PageHeader::page_type_of(&g) != Some(PageType::Overflow)
            || overflow::state(&g) != Some(State::First)
        {
            return Ok(None);
        }
        self.assemble(first, &g).map(Some)
    }

    /// The row whose first page (latched by the caller) is `g`: its later pages are read under
    /// shared latches, one at a time (a change of the row latches the first page first).
    pub(super) fn assemble(&self, first: u64, g: &[u8]) -> Result<Vec<u8>> {
        let total = overflow::total_len(g);
        if total > MAX_ROW_BYTES as u64 {
            return Err(
                self.overflow_corrupt(first, format!("row of {total} bytes, more than {MAX_ROW_BYTES}"))
            );
        }
        let mut row = Vec::with_capacity(total as usize);
        row.extend_from_slice(overflow::chunk(g).map_err(|d| self.overflow_corrupt(first, d))?);
        let mut next = overflow::next(g);
        while next != NO_PAGE {
            let page = next;
            let c = self.pool.fix(self.pid(page), PageClass::Data)?;
            if PageHeader::page_type_of(&c) != Some(PageType::Overflow)
                || overflow::state(&c) != Some(State::Next)
            {
                return Err(self.overflow_corrupt(
                    page,
                    format!(
                        "the row starting at page {first} continues in a page that is not one of its pages"
                    ),
                ));
            }
            row.extend_from_slice(overflow::chunk(&c).map_err(|d| self.overflow_corrupt(page, d))?);
            if row.len() as u64 > total {
                return Err(
                    self.overflow_corrupt(first, format!("chain holds more than the row's {total} bytes"))
                );
            }
            next = overflow::next(&c);
        }
        if row.len() as u64 != total {
            return Err(
                self.overflow_corrupt(first, format!("chain holds {} of the row's {total} bytes", row.len()))
            );
        }
        Ok(row)
    }

    /// Remembers a page a scan found free, for a later row.
    pub(super) fn note_free(&self, page: u64) {
        self.free_pages.locked().insert(page);
    }

    /// `n` overflow pages believed free (taken from the free set, or appended to the file and
    /// formatted free in mini-transactions of their own), sorted. Any logical annotation the
    /// thread has pending is kept for the row's own mini-transaction.
    fn reserve_pages(&self, n: usize) -> Result<Vec<u64>> {
        let mut got: Vec<u64> = {
            let mut free = self.free_pages.locked();
            std::iter::from_fn(|| free.pop_first()).take(n).collect()
        };
        let pending = take_annotation();
        let mut appended = || -> Result<()> {
            while got.len() < n {
                let mtr = self.pool.begin_mtr();
                let mut g = self.pool.allocate(self.file, PageClass::Data, PageType::Overflow)?;
                overflow::init_free(&mut g);
                let page = g.page_id().page;
                drop(g);
                mtr.commit()?;
                got.push(page);
            }
            Ok(())
        };
        let r = appended();
        if let Some(a) = pending {
            annotate_next_commit(a);
        }
        if let Err(e) = r {
            self.free_pages.locked().extend(got);
            return Err(e);
        }
        got.sort_unstable();
        Ok(got)
    }

    /// Stores `row` (longer than a slotted page holds) in a chain of overflow pages, all
    /// written by one mini-transaction; `annotate(row id)` runs before it is logged.
    pub(super) fn insert_overflow(&self, row: &[u8], annotate: &mut dyn FnMut(RowId)) -> Result<RowId> {
        self.check_row_len(row.len())?;
        let cap = overflow::capacity(self.pool.page_size());
        let n = row.len().div_ceil(cap).max(1);
        loop {
            let pages = self.reserve_pages(n)?;
            let mtr = self.pool.begin_mtr();
            let mut guards: Vec<PageMut<'_>> = Vec::with_capacity(n);
            let mut taken = None;
            for &p in &pages {
                let g = match self.pool.fix_mut(self.pid(p), PageClass::Data) {
                    Ok(g) => g,
                    Err(e) => {
                        drop(guards);
                        drop(mtr);
                        self.free_pages.locked().extend(pages);
                        return Err(e);
                    }
                };
                if PageHeader::page_type_of(&g) != Some(PageType::Overflow)
                    || overflow::state(&g) != Some(State::Free)
                {
                    taken = Some(p);
                    break;
                }
                guards.push(g);
            }
            if let Some(t) = taken {
                // A page a scan put back in the free set after it was taken: drop it, try again.
                drop(guards);
                drop(mtr);
                self.free_pages.locked().extend(pages.into_iter().filter(|&p| p != t));
                continue;
            }
            for (k, g) in guards.iter_mut().enumerate() {
                let chunk = &row[(k * cap).min(row.len())..((k + 1) * cap).min(row.len())];
                let (state, total) = if k == 0 { (State::First, row.len() as u64) } else { (State::Next, 0) };
                overflow::write(g, state, total, pages.get(k + 1).copied().unwrap_or(NO_PAGE), chunk);
            }
            let rid = RowId { page: pages[0], slot: OVERFLOW_SLOT };
            annotate(rid);
            drop(guards);
            if let Err(e) = mtr.commit() {
                self.free_pages.locked().extend(pages);
                return Err(e);
            }
            return Ok(rid);
        }
    }

    /// Frees the overflow row starting at `first` (all its pages, in one mini-transaction),
    /// calling `old` with its bytes; false if no row starts there.
    pub(super) fn delete_overflow(&self, first: u64, old: impl FnOnce(&[u8])) -> Result<bool> {
        if first >= self.pages()? {
            return Ok(false);
        }
        let mtr = self.pool.begin_mtr();
        let g = self.pool.fix_mut(self.pid(first), PageClass::Data)?;
        if PageHeader::page_type_of(&g) != Some(PageType::Overflow)
            || overflow::state(&g) != Some(State::First)
        {
            return Ok(false);
        }
        let row = self.assemble(first, &g)?;
        old(&row);
        let mut guards = vec![g];
        let mut pages = vec![first];
        let mut next = overflow::next(&guards[0]);
        while next != NO_PAGE {
            let c = self.pool.fix_mut(self.pid(next), PageClass::Data)?;
            pages.push(next);
            next = overflow::next(&c);
            guards.push(c);
        }
        for g in &mut guards {
            overflow::init_free(g);
        }
        drop(guards);
        mtr.commit()?;
        self.free_pages.locked().extend(pages);
        Ok(true)
    }
}

/// The error for a row of `len` bytes of table `table` (with `schema`) past [`MAX_ROW_BYTES`],
/// naming the column that takes the most of it: the longest value of `row`, or (no row: the
/// schema's largest possible row) the column with the largest declared bound.
pub fn row_too_large(table: &str, schema: &Schema, row: Option<&[Value]>, len: usize) -> Error {
    let widest = |i: usize| match (row, schema.columns[i].ty) {
        (Some(r), _) => match &r[i] {
            Value::Bytes(b) => b.len(),
            _ => 0,
        },
        (None, ColumnType::Bytes(max)) => max as usize,
        (None, _) => 0,
    };
    let col = (0..schema.columns.len()).max_by_key(|&i| widest(i)).unwrap_or(0);
    let what = if row.is_some() { "a row" } else { "rows" };
    Error::InvalidArgument(format!(
        "table `{table}`: {what} of {len} bytes exceed the {MAX_ROW_BYTES}-byte row limit (column `{}` takes {} bytes)",
        schema.columns.get(col).map_or("?", |c| c.name.as_str()),
        widest(col)
    ))
}
