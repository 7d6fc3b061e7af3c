//! Write-back: dirty pages to their devices under the WAL rule, one at a time (evictions,
//! flushes) or in batches (flushes, the background writer's rounds, evictions helping it).
//!
//! Owns: the write-back copies (per-thread scratch buffers), [`BufferPool::flush_all`], the
//! background writer's round ([`BufferPool::clean_ahead`]) and the WAL gate hook.
//!
//! Invariants:
//! - a page is written only after the log is durable up to its LSN ([`WalGate`]), from a
//!   copy taken under its shared latch (never waited for) with its dirty flag cleared; a
//!   failed write or log wait sets the flag again;
//! - a frame is written back by at most one thread at a time (`Partition::writing`) and
//!   stays pinned and mapped until its write is done;
//! - with a double-write area ([`BufferPool::set_doublewrite`]), every in-place write goes
//!   through it: the copies of a write (one page, or a batch) are durable in the area before
//!   the pages are written in place, so a page torn by a crash is restored at the next open;
//! - a dropped file's pages are not written.

use super::{BufferPool, FileEntry, Partition};
use crate::buffer::doublewrite::{DoubleWrite, DwPage};
use crate::buffer::frames::NO_PAGE;
use crate::buffer::{BackgroundWriter, PageId, WalGate};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, IoRequest};
use crate::page::PageHeader;
use crate::util::sync::RwLockExt;
use std::cell::RefCell;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Instant;

/// Dirty pages per batch of [`BufferPool::flush_all`] (a flush or a checkpoint): one log
/// wait and one device submission per file for up to this many pages.
pub const FLUSH_BATCH_PAGES: usize = 64;

/// A page to write in place: its id, its file, the file's device and its sealed bytes.
type InPlace<'a> = (PageId, &'a Arc<FileEntry>, Arc<dyn Device>, &'a [u8]);

thread_local! {
    /// Private copy buffer for write-back (sealing must not modify a page others may read).
    static SCRATCH: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
    /// This thread's copy buffer for batched write-back (grown to the largest batch seen).
    static BATCH_SCRATCH: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
}

impl BufferPool {
    /// Installs the WAL rule hook consulted before every write-back.
    pub fn set_wal_gate(&self, gate: Arc<dyn WalGate>) {
        *self.gate.write_locked() = Some(gate);
    }

    /// Makes every in-place write of this pool go through the double-write area `dw` first
    /// (torn-page protection); `tag` names this pool's files there (the pool's tag in the
    /// log). Can be set once.
    pub fn set_doublewrite(&self, dw: Arc<DoubleWrite>, tag: u8) -> Result<()> {
        self.doublewrite
            .set((dw, tag))
            .map_err(|_| Error::InvalidArgument("the buffer pool already has a double-write area".into()))
    }

    /// The double-write area in-place writes go through, if any.
    pub fn doublewrite(&self) -> Option<&Arc<DoubleWrite>> {
        self.doublewrite.get().map(|(dw, _)| dw)
    }

    /// Writes frame `i` (holding `key`) back if it is dirty. Returns whether it wrote.
    pub(super) fn write_back(&self, part: &Partition, i: usize, key: u64, background: bool) -> Result<bool> {
        let f = &part.arena.frames[i];
        {
            let map = part.lock_stripe(key);
            if f.page_key.load(Acquire) != key || map.get(&key) != Some(&(i as u32)) {
                return Ok(false);
            }
            f.pins.fetch_add(1, AcqRel);
        }
        if part.writing[i].swap(true, AcqRel) {
            part.unpin(i);
            return Ok(false);
        }
        let result = self.write_back_pinned(part, i, key, background);
        part.writing[i].store(false, Release);
        part.unpin(i);
        result
    }

    fn write_back_pinned(&self, part: &Partition, i: usize, key: u64, background: bool) -> Result<bool> {
        let f = &part.arena.frames[i];
        let pid = PageId::new((key >> 40) as u32, key & ((1 << 40) - 1));
        let file = self.file(pid.file)?;
        let page_size = self.config.page_size;
        SCRATCH.with(|cell| {
            let mut slot = cell.borrow_mut();
            let scratch = slot.get_or_insert_with(|| AlignedBuf::new(65536));
            let copy = &mut scratch[..page_size];
            {
                // try_read: a thread holding this page exclusively may itself be waiting for a
                // frame; never block on it (the caller moves on or retries).
                let _rl = match f.latch.try_read() {
                    Ok(g) => g,
                    Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
                };
                if !f.dirty.swap(false, AcqRel) {
                    return Ok(false);
                }
                // SAFETY: we hold the latch shared and a pin.
                copy.copy_from_slice(unsafe { part.arena.bytes(i) });
            }
            if file.dropped.load(Acquire) {
                return Ok(true); // a dropped table's page: nothing to keep
            }
            let lsn = PageHeader::lsn_of(copy);
            let gate = self.gate.read_locked().clone();
            if let Some(gate) = gate {
                if let Err(e) = gate.ensure_durable(lsn) {
                    f.dirty.store(true, Release);
                    return Err(e);
                }
            }
            PageHeader::seal(copy);
            let offset = pid.page * page_size as u64;
            let device = file.device();
            let start = Instant::now();
            let r = match self.doublewrite.get() {
                Some((dw, tag)) => {
                    let page = [DwPage { tag: *tag, pid, bytes: copy, device: &device }];
                    dw.write(&page, &mut |_| Ok(device.write_at(offset, copy)?))
                }
                None => device.write_at(offset, copy).map_err(Error::from),
            };
            let end = Instant::now();
            crate::trace::record(crate::trace::TraceKind::DataWrite, start, end);
            part.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
            file.io.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
            match r {
                Ok(()) => {
                    part.writes.fetch_add(1, Relaxed);
                    file.io.writes.fetch_add(1, Relaxed);
                    if background {
                        part.background_writes.fetch_add(1, Relaxed);
                        file.io.background_writes.fetch_add(1, Relaxed);
                    }
                    Ok(true)
                }
                Err(e) => {
                    f.dirty.store(true, Release);
                    Err(e)
                }
            }
        })
    }

    /// Writes every dirty page, then syncs every registered file. Dirty pages go out in
    /// batches of [`FLUSH_BATCH_PAGES`] (one log wait and one device submission per file per
    /// batch, as the background writer writes); pages a batch had to pass over (latched
    /// exclusively, being written by another thread, or dirtied again meanwhile) are then
    /// written one at a time, waiting for the thread that holds them.
    pub fn flush_all(&self) -> Result<()> {
        let mut batch: Vec<(usize, u64)> = Vec::with_capacity(FLUSH_BATCH_PAGES);
        for part in self.parts.iter() {
            for i in 0..part.arena.len() {
                let f = &part.arena.frames[i];
                let key = f.page_key.load(Acquire);
                if key != NO_PAGE && f.dirty.load(Acquire) {
                    batch.push((i, key));
                    if batch.len() == FLUSH_BATCH_PAGES {
                        self.write_batch(part, &mut batch, false)?;
                    }
                }
            }
            self.write_batch(part, &mut batch, false)?;
            for i in 0..part.arena.len() {
                loop {
                    let f = &part.arena.frames[i];
                    let key = f.page_key.load(Acquire);
                    if key == NO_PAGE {
                        break;
                    }
                    if !f.dirty.load(Acquire) {
                        // A write-back in flight (background or eviction) cleared the flag
                        // before writing: the sync below must come after it.
                        if !part.writing[i].load(Acquire) {
                            break;
                        }
                        std::thread::yield_now();
                        continue;
                    }
                    if !self.write_back(part, i, key, false)? {
                        // Another thread is writing it (or it moved): wait for that to finish.
                        std::thread::yield_now();
                    }
                }
            }
        }
        let files: Vec<Arc<FileEntry>> = self.files.read_locked().iter().flatten().cloned().collect();
        for file in files.iter().filter(|f| !f.dropped.load(Acquire)) {
            file.device().sync()?;
        }
        Ok(())
    }

    /// One background-writer round: in each partition, walks ahead of the clock hand until it
    /// has passed `clean_target` evictable frames (clean, free, or made clean here), writing the
    /// dirty ones among them in batches of `batch_pages`. Frames the hand will only age this
    /// pass (usage above zero), pinned frames, and sticky ones while they are not victims
    /// ([`Partition::sticky_evictable`]) are left alone. Returns pages written.
    pub(crate) fn clean_ahead(&self, cfg: &BackgroundWriter) -> Result<usize> {
        let mut written = 0;
        for part in self.parts.iter() {
            let target = cfg.clean_target.min(part.arena.len() / 4).max(1);
            written += self.clean_part(part, target, cfg.batch_pages, true)?;
        }
        Ok(written)
    }

    /// [`BufferPool::clean_ahead`] in one partition: walks ahead of the hand until `target`
    /// evictable frames, writing the dirty ones in batches of `batch_pages`. `background`: the
    /// writer's thread (else an eviction helping it). Returns pages written.
    pub(super) fn clean_part(
        &self,
        part: &Partition,
        target: usize,
        batch_pages: usize,
        background: bool,
    ) -> Result<usize> {
        let batch_pages = batch_pages.max(1);
        let mut batch: Vec<(usize, u64)> = Vec::with_capacity(batch_pages);
        let mut written = 0;
        let n = part.arena.len();
        let hand = part.hand.load(Relaxed);
        let mut evictable = 0;
        let take_sticky = part.sticky_evictable();
        for k in 0..n {
            let i = (hand + k) % n;
            let f = &part.arena.frames[i];
            if f.pins.load(Acquire) != 0
                || (!take_sticky && f.sticky.load(Relaxed))
                || f.usage.load(Relaxed) > 0
            {
                continue;
            }
            let key = f.page_key.load(Acquire);
            if key != NO_PAGE && f.dirty.load(Acquire) {
                batch.push((i, key));
                if batch.len() == batch_pages {
                    written += self.write_batch(part, &mut batch, background)?;
                }
            }
            evictable += 1;
            if evictable >= target {
                break;
            }
        }
        written += self.write_batch(part, &mut batch, background)?;
        Ok(written)
    }

    /// Writes the dirty frames of `batch` (frame, page key; emptied) back: pins each, copies it
    /// under its shared latch, waits once for the log to cover the highest page LSN, then
    /// submits one write batch per file. Frames that moved, are latched exclusively, or are
    /// already being written are skipped. Returns pages written.
    fn write_batch(
        &self,
        part: &Partition,
        batch: &mut Vec<(usize, u64)>,
        background: bool,
    ) -> Result<usize> {
        if batch.is_empty() {
            return Ok(0);
        }
        let page_size = self.config.page_size;
        let mut bufs = BATCH_SCRATCH
            .with(|c| c.borrow_mut().take())
            .filter(|b| b.len() >= page_size * batch.len())
            .unwrap_or_else(|| AlignedBuf::large(page_size * batch.len()));
        // (frame, page id, file) of every copy taken, pinned and marked as being written.
        let mut taken: Vec<(usize, PageId, Arc<FileEntry>)> = Vec::with_capacity(batch.len());
        let mut max_lsn = 0;
        let mut failure = None;
        for &(i, key) in batch.iter() {
            let f = &part.arena.frames[i];
            {
                let map = part.lock_stripe(key);
                if f.page_key.load(Acquire) != key || map.get(&key) != Some(&(i as u32)) {
                    continue;
                }
                f.pins.fetch_add(1, AcqRel);
            }
            let pid = PageId::new((key >> 40) as u32, key & ((1 << 40) - 1));
            let file = match self.file(pid.file) {
                Ok(file) => file,
                Err(e) => {
                    part.unpin(i);
                    failure = Some(e);
                    break;
                }
            };
            if part.writing[i].swap(true, AcqRel) {
                part.unpin(i);
                continue;
            }
            let slot = taken.len();
            let copy = &mut bufs[slot * page_size..(slot + 1) * page_size];
            let copied = {
                // try_read: never wait for a thread that holds the page exclusively.
                match f.latch.try_read() {
                    Ok(_rl) => {
                        let dirty = f.dirty.swap(false, AcqRel);
                        if dirty {
                            // SAFETY: we hold the latch shared and a pin.
                            copy.copy_from_slice(unsafe { part.arena.bytes(i) });
                        }
                        dirty
                    }
                    Err(std::sync::TryLockError::Poisoned(_)) | Err(std::sync::TryLockError::WouldBlock) => {
                        false
                    }
                }
            };
            if !copied {
                part.writing[i].store(false, Release);
                part.unpin(i);
                continue;
            }
            max_lsn = max_lsn.max(PageHeader::lsn_of(copy));
            taken.push((i, pid, file));
        }
        batch.clear();
        let result = self.write_taken(part, &mut bufs, &taken, max_lsn, background);
        for &(i, _, _) in &taken {
            if result.is_err() {
                part.arena.frames[i].dirty.store(true, Release);
            }
            part.writing[i].store(false, Release);
            part.unpin(i);
        }
        BATCH_SCRATCH.with(|c| *c.borrow_mut() = Some(bufs));
        match (failure, result) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(())) => Ok(taken.len()),
        }
    }

    /// The device half of [`BufferPool::write_batch`]: the WAL rule for the batch, then (after
    /// the batch's copies are durable in the double-write area, when there is one) one
    /// submission per file. On error every copy is treated as unwritten.
    fn write_taken(
        &self,
        part: &Partition,
        bufs: &mut AlignedBuf,
        taken: &[(usize, PageId, Arc<FileEntry>)],
        max_lsn: u64,
        background: bool,
    ) -> Result<()> {
        if taken.is_empty() {
            return Ok(());
        }
        let gate = self.gate.read_locked().clone();
        if let Some(gate) = gate {
            gate.ensure_durable(max_lsn)?;
        }
        let page_size = self.config.page_size;
        let mut chunks: Vec<&mut [u8]> = bufs.chunks_mut(page_size).take(taken.len()).collect();
        for c in chunks.iter_mut() {
            PageHeader::seal(c);
        }
        // The pages to write: a dropped table's pages are not (nothing to keep).
        let mut pages: Vec<InPlace<'_>> = Vec::with_capacity(taken.len());
        for ((_, pid, file), buf) in taken.iter().zip(chunks) {
            if !file.dropped.load(Acquire) {
                pages.push((*pid, file, file.device(), buf));
            }
        }
        match self.doublewrite.get() {
            Some((dw, tag)) => {
                let dw_pages: Vec<DwPage<'_>> = pages
                    .iter()
                    .map(|(pid, _, device, bytes)| DwPage { tag: *tag, pid: *pid, bytes, device })
                    .collect();
                // The area's writes and syncs count as this partition's device time too.
                let (start, mut in_place_ns) = (Instant::now(), 0);
                let r = dw.write(&dw_pages, &mut |r| {
                    let t = Instant::now();
                    let done = self.write_in_place(part, &pages[r], background);
                    in_place_ns += t.elapsed().as_nanos() as u64;
                    done
                });
                let ns = (start.elapsed().as_nanos() as u64).saturating_sub(in_place_ns);
                part.io_wait_ns.fetch_add(ns, Relaxed);
                // Shared among the pages' files by page count, so per-file device time still
                // adds up to the partition's.
                let n = pages.len().max(1) as u64;
                for (i, (_, file, ..)) in pages.iter().enumerate() {
                    let share = ns / n + u64::from((i as u64) < ns % n);
                    file.io.io_wait_ns.fetch_add(share, Relaxed);
                }
                r
            }
            None => self.write_in_place(part, &pages, background),
        }
    }

    /// Writes `pages` in place, one device submission per file, and counts the writes.
    fn write_in_place(&self, part: &Partition, pages: &[InPlace<'_>], background: bool) -> Result<()> {
        let page_size = self.config.page_size;
        let mut by_file: Vec<(u32, Vec<IoRequest<'_>>)> = Vec::new();
        for (pid, _, _, buf) in pages {
            let req = IoRequest::Write { offset: pid.page * page_size as u64, buf };
            match by_file.iter_mut().find(|(id, _)| *id == pid.file) {
                Some((_, reqs)) => reqs.push(req),
                None => by_file.push((pid.file, vec![req])),
            }
        }
        for (id, mut reqs) in by_file {
            let (_, file, device, _) = pages.iter().find(|(p, ..)| p.file == id).expect("file of a request");
            let start = Instant::now();
            let r = device.submit_batch(&mut reqs);
            let end = Instant::now();
            if !background {
                crate::trace::record(crate::trace::TraceKind::DataWrite, start, end);
            }
            let ns = (end - start).as_nanos() as u64;
            part.io_wait_ns.fetch_add(ns, Relaxed);
            file.io.io_wait_ns.fetch_add(ns, Relaxed);
            r?;
            let k = reqs.len() as u64;
            part.writes.fetch_add(k, Relaxed);
            file.io.writes.fetch_add(k, Relaxed);
            if background {
                part.background_writes.fetch_add(k, Relaxed);
                file.io.background_writes.fetch_add(k, Relaxed);
            }
        }
        Ok(())
    }
}
