//! The files registered with the pool, and page allocation at their ends.
//!
//! Owns: `FileEntry` (device, name, per-file I/O counters, page counts, dropped flag),
//! registration, device replacement, allocation of new pages (one at a time through a frame,
//! or reserved and written in bulk past the frames).
//!
//! Invariants:
//! - a file id is registered once;
//! - `published <= next_page`, and every page below `published` is mapped or on the device:
//!   allocations publish their pages in page order, only once mapped (or written);
//! - a dropped file's pages are never written and its pages are not read again.

use super::guard::PageMut;
use super::{BufferPool, FILE_HIT_SHARDS, FILE_HIT_SLOTS};
use crate::buffer::{BufferStats, PageClass, PageId};
use crate::error::{Error, Result};
use crate::io::Device;
use crate::page::{PageHeader, PageType};
use crate::util::sync::RwLockExt;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// A registered file.
pub(super) struct FileEntry {
    /// Replaced only by [`BufferPool::replace_device`] (a table moved to another tablespace).
    pub(super) device: RwLock<Arc<dyn Device>>,
    pub(super) name: String,
    /// This file's share of the pool's I/O counters (hits are in `BufferPool::file_hits`).
    pub(super) io: FileIo,
    /// The next page number to hand out (allocation reserves numbers here first).
    pub(super) next_page: AtomicU64,
    /// Pages readers may see: every page below it is mapped or on the device. An allocation
    /// raises it past its page only once the page is mapped, in page order, so a scan reading
    /// up to the file's end never reaches a reserved page that is not mapped yet (it would read
    /// zeroes from the device and map the page under the allocator).
    pub(super) published: AtomicU64,
    /// Set by [`BufferPool::drop_file`]: its pages are discarded instead of written back, and
    /// reads of it fail.
    pub(super) dropped: std::sync::atomic::AtomicBool,
}

/// Device I/O of one file: the per-file share of the partitions' counters.
#[derive(Default)]
pub(super) struct FileIo {
    pub(super) misses: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) background_writes: AtomicU64,
    pub(super) io_wait_ns: AtomicU64,
}

impl FileEntry {
    pub(super) fn device(&self) -> Arc<dyn Device> {
        self.device.read_locked().clone()
    }
}

impl BufferPool {
    /// Makes `device` available as file `file_id`. Its current size decides how many pages
    /// exist; [`BufferPool::allocate`] appends more.
    pub fn register_file(&self, file_id: u32, device: Arc<dyn Device>) -> Result<()> {
        let pages = device.capacity() / self.config.page_size as u64;
        let name = device.info().name;
        let mut files = self.files.write_locked();
        let idx = file_id as usize;
        if files.len() <= idx {
            files.resize_with(idx + 1, || None);
        }
        if files[idx].is_some() {
            return Err(Error::AlreadyExists(format!("file id {file_id} is already registered")));
        }
        files[idx] = Some(Arc::new(FileEntry {
            device: RwLock::new(device),
            name,
            io: FileIo::default(),
            next_page: AtomicU64::new(pages),
            published: AtomicU64::new(pages),
            dropped: std::sync::atomic::AtomicBool::new(false),
        }));
        Ok(())
    }

    /// Forgets file `file_id` (its table was dropped): its buffered pages are discarded as
    /// they are evicted or flushed, never written, and later reads of it fail. The caller
    /// makes sure nothing uses the file any more; the id must not be registered again.
    pub fn drop_file(&self, file_id: u32) -> Result<()> {
        self.file(file_id)?.dropped.store(true, Release);
        Ok(())
    }

    /// Puts file `file_id` on `device`, which must hold the same pages (a table moved to another
    /// tablespace: the caller wrote every dirty page, copied the file and synced the copy, and
    /// keeps changes away until this returns). Later reads and writes go to `device`.
    pub fn replace_device(&self, file_id: u32, device: Arc<dyn Device>) -> Result<()> {
        let file = self.file(file_id)?;
        let pages = file.next_page.load(Acquire);
        let have = device.capacity() / self.config.page_size as u64;
        if have < pages {
            return Err(Error::InvalidArgument(format!(
                "{} has {have} pages but file {file_id} ({}) has {pages}: not a copy of it",
                device.info().name,
                file.name
            )));
        }
        *file.device.write_locked() = device;
        Ok(())
    }

    /// The device behind file `file_id`.
    pub fn file_device(&self, file_id: u32) -> Result<Arc<dyn Device>> {
        Ok(self.file(file_id)?.device())
    }

    /// File `file_id`'s share of [`BufferPool::stats`]: hits, misses, reads, writes, background
    /// writes and I/O wait of its pages (evictions are counted per pool only). Summed over every
    /// file ever registered, each counter equals the pool's. Hits of files whose ids are
    /// congruent modulo [`FILE_HIT_SLOTS`] are counted together.
    pub fn file_stats(&self, file_id: u32) -> Result<BufferStats> {
        let file = self.file(file_id)?;
        let slot = file_id as usize % FILE_HIT_SLOTS;
        let hits =
            (0..FILE_HIT_SHARDS).map(|s| self.file_hits[s * FILE_HIT_SLOTS + slot].load(Relaxed)).sum();
        Ok(BufferStats {
            hits,
            misses: file.io.misses.load(Relaxed),
            reads: file.io.reads.load(Relaxed),
            writes: file.io.writes.load(Relaxed),
            evictions: 0,
            io_wait_ns: file.io.io_wait_ns.load(Relaxed),
            background_writes: file.io.background_writes.load(Relaxed),
            // Latch waits are counted per pool only.
            ..BufferStats::default()
        })
    }

    /// Number of pages file `file_id` has (including allocated pages not yet written).
    pub fn file_pages(&self, file_id: u32) -> Result<u64> {
        Ok(self.file(file_id)?.published.load(Acquire))
    }

    pub(super) fn file(&self, file_id: u32) -> Result<Arc<FileEntry>> {
        let files = self.files.read_locked();
        files.get(file_id as usize).and_then(|f| f.clone()).ok_or_else(|| {
            Error::NotFound(format!("file id {file_id} is not registered with the buffer pool"))
        })
    }

    /// Appends a new page to file `file_id`, initialised with a header of `page_type`, and
    /// returns it fixed for writing (already dirty).
    pub fn allocate(&self, file_id: u32, class: PageClass, page_type: PageType) -> Result<PageMut<'_>> {
        self.check_writable()?;
        let file = self.file(file_id)?;
        let part = self.partition();
        let victim = self.claim_frame(part)?;
        let page_no = file.next_page.fetch_add(1, AcqRel);
        let pid = PageId::new(file_id, page_no);
        let key = pid.key();
        let f = &part.arena.frames[victim];
        let wl = f.latch.write_locked();
        // SAFETY: we hold the write latch of a frame we claimed.
        let bytes = unsafe { part.arena.bytes_mut(victim) };
        bytes.fill(0);
        PageHeader::init(bytes, page_type, file_id, page_no);
        {
            let mut map = part.lock_stripe(key);
            let prev = map.insert(key, victim as u32);
            assert!(prev.is_none(), "new page {pid} was already mapped");
            f.page_key.store(key, Release);
            part.xlate.set(key, victim);
        }
        // Publish in page order: an allocation of an earlier page that has not mapped it yet
        // holds nothing this one holds, so the wait is short and cannot deadlock.
        while file.published.compare_exchange_weak(page_no, page_no + 1, AcqRel, Acquire).is_err() {
            std::thread::yield_now();
        }
        f.usage.store(self.weight(class), Relaxed);
        part.set_sticky(victim, self.sticky_class(class));
        f.valid.store(true, Release);
        Ok(PageMut {
            pool: self,
            part,
            frame: victim,
            pid,
            modified: true,
            before: None,
            fresh: true,
            ops: Vec::new(),
            raw: true,
            latch: Some(wl),
        })
    }

    /// Appends a new page of `page_type` to `file` holding the body of `image` (a page
    /// composed elsewhere: the bytes between the page header and trailer; the header is the
    /// new page's own), in a mini-transaction (with a log, a new page is logged whole).
    /// Returns the page number. How a bulk load writes the pages it builds.
    pub fn append_page(
        &self,
        file_id: u32,
        class: PageClass,
        page_type: PageType,
        image: &[u8],
    ) -> Result<u64> {
        if image.len() != self.page_size() {
            return Err(Error::InvalidArgument(format!(
                "page image of {} bytes for a pool of {}-byte pages",
                image.len(),
                self.page_size()
            )));
        }
        let body =
            crate::page::header::PAGE_HEADER_BYTES..image.len() - crate::page::header::PAGE_TRAILER_BYTES;
        let mtr = self.begin_mtr();
        let mut g = self.allocate(file_id, class, page_type)?;
        g[body.clone()].copy_from_slice(&image[body]);
        let page = g.page_id().page;
        drop(g);
        mtr.commit()?;
        Ok(page)
    }

    /// Reserves `n` new page numbers at the end of file `file_id` for
    /// [`BufferPool::write_new_pages`]; returns the first. Every reservation must be written,
    /// in reservation order: until it is, later allocations in the file wait.
    pub fn reserve_new_pages(&self, file_id: u32, n: u64) -> Result<u64> {
        self.check_writable()?;
        Ok(self.file(file_id)?.next_page.fetch_add(n, AcqRel))
    }

    /// Writes `pages` (whole pages composed elsewhere, back to back, in a buffer aligned for
    /// the device) to the pages of file `file_id` that [`BufferPool::reserve_new_pages`]
    /// reserved from `first`, with one device write, bypassing the frames and the log: each
    /// page gets its header (type `page_type`, its file and page number, LSN 0) and its
    /// checksum here. The pages are then published (in page order, waiting for earlier
    /// reservations), even when the write fails: a failed write leaves pages that read as
    /// never written, for a caller that discards the file. A length that is not a whole
    /// number of pages is an error before anything is written or published.
    ///
    /// The pages are not durable until [`BufferPool::sync_file`]. They have no log record, so
    /// a caller must make them durable before anything that survives a crash refers to them,
    /// and must not use this for a file that a standby rebuilds from the log. How a bulk load
    /// writes its heap pages when its log ships to no standby. Nobody may read the new pages
    /// before this returns (a new file no table names yet).
    pub fn write_new_pages(
        &self,
        file_id: u32,
        first: u64,
        page_type: PageType,
        pages: &mut [u8],
    ) -> Result<()> {
        let page_size = self.page_size();
        if pages.is_empty() || !pages.len().is_multiple_of(page_size) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of new pages is not a whole number of {page_size}-byte pages",
                pages.len()
            )));
        }
        let file = self.file(file_id)?;
        let n = (pages.len() / page_size) as u64;
        for (k, page) in pages.chunks_mut(page_size).enumerate() {
            PageHeader::init(page, page_type, file_id, first + k as u64);
            PageHeader::seal(page);
        }
        let start = Instant::now();
        let written = file.device().write_at(first * page_size as u64, pages);
        let ns = start.elapsed().as_nanos() as u64;
        let part = self.partition();
        part.io_wait_ns.fetch_add(ns, Relaxed);
        file.io.io_wait_ns.fetch_add(ns, Relaxed);
        if written.is_ok() {
            part.writes.fetch_add(n, Relaxed);
            file.io.writes.fetch_add(n, Relaxed);
        }
        while file.published.compare_exchange_weak(first, first + n, AcqRel, Acquire).is_err() {
            std::thread::yield_now();
        }
        Ok(written?)
    }

    /// Makes every completed write of file `file_id` durable (its device's sync).
    pub fn sync_file(&self, file_id: u32) -> Result<()> {
        Ok(self.file(file_id)?.device().sync()?)
    }
}
