//! Heap files: rows in slotted pages, addressed by row id.
//!
//! Owns: `HeapFile` (insert, read, update, delete, full scan) over one buffer-pool file, and
//! the [`RowId`] encoding (page number << 16 | slot). Invariant: a row id stays valid until its
//! row is deleted (updates that no longer fit move the row and return its new id; the caller
//! re-points indexes). New rows go to the current insert page; a new page is appended when it
//! is full (space freed by deletes on older pages is reused only by in-place updates). A row
//! larger than a slotted page holds is stored in a chain of overflow pages of the same file
//! (`overflow.rs`): its row id names the chain's first page; every read path gets the row whole,
//! and scans return it once, at its first page.

mod overflow;
pub use overflow::{row_too_large, MAX_ROW_BYTES, OVERFLOW_SLOT};

use crate::buffer::{BufferPool, PageClass, PageId, PageRef};
use crate::error::{Error, Result};
use crate::page::{slotted, PageHeader, PageType};
use crate::util::sync::MutexExt;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};

/// Address of a row: page number and slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowId {
    /// Page number in the heap file.
    pub page: u64,
    /// Slot within the page.
    pub slot: u16,
}

impl RowId {
    /// Packs into 8 bytes for index values.
    pub fn to_bytes(self) -> [u8; 8] {
        ((self.page << 16) | u64::from(self.slot)).to_le_bytes()
    }
    /// Unpacks [`RowId::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let v = u64::from_le_bytes(b.try_into().ok()?);
        Some(Self { page: v >> 16, slot: (v & 0xFFFF) as u16 })
    }
}

const NO_PAGE: u64 = u64::MAX;

thread_local! {
    /// An update's operation, encoded before the change overwrites the old row.
    static UPDATE_OP: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Attempts at removing the new copy of a row whose move could not free its old slot.
const MOVE_UNDO_ATTEMPTS: usize = 16;

/// A heap file of one table.
pub struct HeapFile {
    pool: Arc<BufferPool>,
    file: u32,
    name: String,
    insert_page: AtomicU64,
    alloc_lock: Mutex<()>,
    /// The length of a row seen here (0: none yet), to guess where a row sits in its page
    /// (see [`slotted::likely_record_offset`]). A hint only: set once, never trusted.
    row_len_hint: AtomicU32,
    /// Overflow pages known free (freed since the open, or seen free by a scan).
    free_pages: Mutex<BTreeSet<u64>>,
}

impl HeapFile {
    /// Opens the heap stored in `file` of `pool` (`name` is used in messages).
    pub fn open(pool: Arc<BufferPool>, file: u32, name: &str) -> Result<Self> {
        let pages = pool.file_pages(file)?;
        let insert_page = if pages == 0 { NO_PAGE } else { pages - 1 };
        Ok(Self {
            pool,
            file,
            name: name.to_string(),
            insert_page: AtomicU64::new(insert_page),
            alloc_lock: Mutex::new(()),
            row_len_hint: AtomicU32::new(0),
            free_pages: Mutex::new(BTreeSet::new()),
        })
    }

    /// Largest row the heap can store ([`MAX_ROW_BYTES`]; rows longer than
    /// [`HeapFile::max_inline_bytes`] go to overflow pages).
    pub fn max_row_bytes(&self) -> usize {
        MAX_ROW_BYTES
    }

    /// Largest row stored in a slotted page.
    pub fn max_inline_bytes(&self) -> usize {
        slotted::max_record_len(self.pool.page_size())
    }

    /// Number of pages.
    pub fn pages(&self) -> Result<u64> {
        self.pool.file_pages(self.file)
    }

    fn pid(&self, page: u64) -> PageId {
        PageId::new(self.file, page)
    }

    fn check_heap_page(&self, page: u64, bytes: &[u8]) -> Result<()> {
        if PageHeader::page_type_of(bytes) != Some(PageType::Heap) {
            return Err(Error::Corruption {
                file: self.name.clone(),
                offset: page * self.pool.page_size() as u64,
                detail: format!("page {page} is not a heap page"),
            });
        }
        slotted::check(bytes).map_err(|d| Error::Corruption {
            file: self.name.clone(),
            offset: page * self.pool.page_size() as u64,
            detail: format!("heap page {page}: {d}"),
        })
    }

    /// Stores a row and returns its id.
    pub fn insert(&self, row: &[u8]) -> Result<RowId> {
        self.insert_annotated(row, &mut |_| {})
    }

    /// Like [`HeapFile::insert`]; `annotate(row id)` runs once the row id is known and before
    /// the change is logged (it attaches the transaction's undo information).
    pub fn insert_annotated(&self, row: &[u8], annotate: &mut dyn FnMut(RowId)) -> Result<RowId> {
        if row.len() > self.max_inline_bytes() {
            return self.insert_overflow(row, annotate);
        }
        loop {
            let hint = self.insert_page.load(Acquire);
            if hint != NO_PAGE {
                let mtr = self.pool.begin_mtr();
                let mut g = self.pool.fix_mut(self.pid(hint), PageClass::Data)?;
                // The last page of a file opened may be an overflow page: then rows need a new one.
                let heap_page = PageHeader::page_type_of(&g) == Some(PageType::Heap);
                let placed = g.change_logged(
                    |p| if heap_page { slotted::insert(p, row) } else { None },
                    |slot, out| {
                        if let Some(s) = slot {
                            slotted::op::insert(out, *s, row);
                        }
                    },
                );
                if let Some(slot) = placed {
                    let rid = RowId { page: hint, slot: slot as u16 };
                    annotate(rid);
                    drop(g);
                    mtr.commit()?;
                    return Ok(rid);
                }
                drop(g);
                mtr.commit()?;
            }
            let _alloc = self.alloc_lock.locked();
            if self.insert_page.load(Acquire) != hint {
                continue; // another thread appended a page meanwhile
            }
            // The new page is formatted in a mini-transaction of its own, and the row goes in
            // through the path above: a page cannot be un-allocated, so if logging the insert
            // failed, the page would keep a row no index knows (and write it back).
            let mtr = self.pool.begin_mtr();
            let mut g = self.pool.allocate(self.file, PageClass::Data, PageType::Heap)?;
            slotted::init(&mut g);
            let page = g.page_id().page;
            drop(g);
            mtr.commit()?;
            self.insert_page.store(page, Release);
        }
    }

    /// Prefetches, without waiting, the cache lines a read of `rid` touches if its page is
    /// resident: frame metadata, page header, the row's slot and (a guess of) the row itself,
    /// so that in a batch their latencies overlap other rows'. Returns whether the page looked
    /// resident (`false`: a read of the row would probably miss; see [`HeapFile::read_pages`]).
    pub fn prefetch_row(&self, rid: RowId) -> bool {
        let (lines, n) = self.row_lines(rid);
        self.pool.prefetch_lines(self.pid(rid.page), &lines[..n])
    }

    /// Reads the non-resident ones among heap pages `pages` into the buffer together, in one
    /// device submission ([`BufferPool::prefetch_pages`]): the misses of a batch of reads.
    pub fn read_pages(&self, pages: &[u64]) -> Result<usize> {
        self.pool.prefetch_pages(self.file, pages, PageClass::Data)
    }

    /// Offsets a read of `rid` touches: page header, slot and, once a row length is known, where
    /// the row probably is (see [`slotted::likely_record_offset`]); as an array and the number used.
    fn row_lines(&self, rid: RowId) -> ([usize; 3], usize) {
        if rid.is_overflow() {
            return ([0; 3], 1);
        }
        let slot = rid.slot as usize;
        let len_hint = self.row_len_hint.load(Relaxed) as usize;
        match slotted::likely_record_offset(self.pool.page_size(), slot, len_hint) {
            Some(row) => ([0, slotted::slot_offset(slot), row], 3),
            None => ([0, slotted::slot_offset(slot), 0], 2),
        }
    }

    /// Passes the row at `rid` to `f`; `None` if the slot is free.
    pub fn read<R>(&self, rid: RowId, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        if rid.is_overflow() {
            return Ok(self.read_overflow(rid.page)?.map(|row| f(&row)));
        }
        let slot = rid.slot as usize;
        // Frame metadata, page header, the row's slot and (a guess of) the row itself are
        // fetched in parallel.
        let (lines, n) = self.row_lines(rid);
        let g = self.pool.fix_prefetching(self.pid(rid.page), PageClass::Data, &lines[..n])?;
        if PageHeader::page_type_of(&g) != Some(PageType::Heap) {
            self.check_heap_page(rid.page, &g)?;
        }
        let row = slotted::get(&g, slot);
        if let Some(r) = row.filter(|_| n < 3 && self.row_len_hint.load(Relaxed) == 0) {
            // The first row read sets the hint (only once: no shared writes afterwards).
            let _ = self.row_len_hint.compare_exchange(0, r.len() as u32, Relaxed, Relaxed);
        }
        Ok(row.map(f))
    }

    /// Replaces the row at `rid` with `row`. Returns the row's id afterwards (a new one if it
    /// had to move), or `None` if `rid` holds no row.
    ///
    /// A row that no longer fits its page moves in two mini-transactions: it is inserted
    /// elsewhere first, then its old slot is freed; `moved(new id)` runs before the insert is
    /// logged, so the caller can log, in the same record, where the row went (recovery must find
    /// a row that moved before its index entries were re-pointed, and drops the second copy a
    /// move cut between its two steps leaves). On an error the heap is as before: a failed
    /// insert changed nothing, and a failed free of the old slot removes the new copy again
    /// (if that fails too, the error is [`Error::Poisoned`]: the row has two copies, the new
    /// one unindexed).
    pub fn update(&self, rid: RowId, row: &[u8], moved: &mut dyn FnMut(RowId)) -> Result<Option<RowId>> {
        self.check_row_len(row.len())?;
        let inline = row.len() <= self.max_inline_bytes();
        if rid.is_overflow() {
            // An overflow row is replaced whole: its new copy is written, then its pages freed.
            if !self.overflow_exists(rid.page)? {
                return Ok(None);
            }
        } else {
            let mtr = self.pool.begin_mtr();
            let mut g = self.pool.fix_mut(self.pid(rid.page), PageClass::Data)?;
            let slot = rid.slot as usize;
            let Some(old) = slotted::get(&g, slot) else { return Ok(None) };
            // The patch of an in-place update is computed against the old row, before it is
            // overwritten (only while logging: `change_logged` asks for it then), in a buffer
            // the thread keeps.
            let mut op = UPDATE_OP.with(|b| std::mem::take(&mut *b.borrow_mut()));
            op.clear();
            if self.pool.is_logging() && inline {
                slotted::op::update(&mut op, slot, old, row);
            }
            let updated = g.change_logged(
                |p| inline && slotted::update(p, slot, row),
                |done, out| {
                    if *done {
                        out.extend_from_slice(&op)
                    }
                },
            );
            UPDATE_OP.with(|b| *b.borrow_mut() = op);
            if updated {
                drop(g);
                mtr.commit()?;
                return Ok(Some(rid));
            }
            // Unlatch before inserting: the insert may pick this very page.
            drop(g);
            mtr.commit()?;
        }
        let new = self.insert_annotated(row, moved)?;
        let err = match self.delete(rid, |_| {}) {
            Ok(true) => return Ok(Some(new)),
            Ok(false) => Error::Corruption {
                file: self.name.clone(),
                offset: rid.page * self.pool.page_size() as u64,
                detail: format!("slot {} of page {} emptied while its row was moving", rid.slot, rid.page),
            },
            Err(e) => e,
        };
        if (0..MOVE_UNDO_ATTEMPTS).any(|_| self.delete(new, |_| {}).is_ok()) {
            return Err(err);
        }
        Err(Error::Poisoned(format!(
            "`{}`: a row moving from slot {} of page {} to slot {} of page {} is in both \
             (freeing the old slot failed: {err}; removing the new copy failed too)",
            self.name, rid.slot, rid.page, new.slot, new.page
        )))
    }

    /// Frees the row at `rid`, calling `old` with its bytes; false if there was none.
    pub fn delete(&self, rid: RowId, old: impl FnOnce(&[u8])) -> Result<bool> {
        if rid.is_overflow() {
            return self.delete_overflow(rid.page, old);
        }
        let mtr = self.pool.begin_mtr();
        let mut g = self.pool.fix_mut(self.pid(rid.page), PageClass::Data)?;
        let slot = rid.slot as usize;
        let Some(prev) = slotted::get(&g, slot) else { return Ok(false) };
        old(prev);
        let deleted = g.change_logged(
            |p| slotted::delete(p, slot),
            |done, out| {
                if *done {
                    slotted::op::delete(out, slot)
                }
            },
        );
        drop(g);
        mtr.commit()?;
        Ok(deleted)
    }

    /// Calls `f(row id, row bytes)` for every row, page by page, until it returns `Ok(false)`.
    /// The page is latched shared while `f` runs: `f` must not modify this table.
    pub fn scan(&self, f: impl FnMut(RowId, &[u8]) -> Result<bool>) -> Result<()> {
        let pages = self.pages()?;
        self.scan_pages(0..pages, f)
    }

    /// Like [`HeapFile::scan`] over the pages in `range` only, keeping [`READ_AHEAD_PAGES`]
    /// page reads in flight ahead of the page it processes.
    pub fn scan_pages(
        &self,
        range: std::ops::Range<u64>,
        f: impl FnMut(RowId, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_pages_ahead(range, READ_AHEAD_PAGES, f)
    }

    /// Like [`HeapFile::scan_pages`], keeping `read_ahead` page reads in flight (at least 1;
    /// capped at [`BufferPool::read_ahead_limit`], so under SEP the window fits the scanning
    /// thread's own partition): while `f` processes one page, the following ones are being
    /// read ([`BufferPool::with_read_ahead`]).
    pub fn scan_pages_ahead(
        &self,
        range: std::ops::Range<u64>,
        read_ahead: u64,
        f: impl FnMut(RowId, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_pages_after(range, read_ahead, || Ok(()), f)
    }

    /// Like [`HeapFile::scan_pages_ahead`], first starting the reads of the range's first
    /// window and running `before` while they are in flight ([`crate::buffer::ReadAhead::start`]); the scan
    /// starts when `before` returns `Ok` (`before` runs also for an empty range).
    pub fn scan_pages_after(
        &self,
        range: std::ops::Range<u64>,
        read_ahead: u64,
        before: impl FnOnce() -> Result<()>,
        mut f: impl FnMut(RowId, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let end = range.end.min(self.pages()?);
        if range.start >= end {
            return before();
        }
        self.pool.with_read_ahead(self.file, range.start..end, read_ahead, PageClass::Data, |ra| {
            ra.start(range.start)?;
            before()?;
            for page in range.start..end {
                let g: PageRef<'_> = ra.fix(page)?;
                if PageHeader::page_type_of(&g) == Some(PageType::Overflow) {
                    // An overflow row is visited at its first page; its other pages are not rows.
                    match crate::page::overflow::state(&g) {
                        Some(crate::page::overflow::State::First) => {
                            let row = self.assemble(page, &g)?;
                            if !f(RowId { page, slot: OVERFLOW_SLOT }, &row)? {
                                return Ok(());
                            }
                        }
                        Some(crate::page::overflow::State::Free) => self.note_free(page),
                        Some(crate::page::overflow::State::Next) => {}
                        None => {
                            let detail = crate::page::overflow::check(&g).err().unwrap_or_default();
                            return Err(Error::Corruption {
                                file: self.name.clone(),
                                offset: page * self.pool.page_size() as u64,
                                detail: format!("overflow page {page}: {detail}"),
                            });
                        }
                    }
                    continue;
                }
                self.check_heap_page(page, &g)?;
                for (slot, row) in slotted::live_records(&g) {
                    if !f(RowId { page, slot: slot as u16 }, row)? {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })
    }
}

/// Page reads a scan keeps in flight ahead of the page it processes (capped at an eighth of the
/// pool), started half at a time: 128 makes 64-page requests (1 MiB at 16 KiB pages). A virtio
/// disk served TPC-H Q3's scans 1.03-1.32x faster with 64 than with 32, and about 1.03-1.05x
/// faster again with 128 (`docs/tpch.md`).
pub const READ_AHEAD_PAGES: u64 = 128;
