//! The read path: loading a page that missed into a claimed frame, batched prefetch, and the
//! checks every page read from a device passes.
//!
//! Owns: [`BufferPool::prefetch`], [`BufferPool::read_ahead_limit`], the miss load and
//! the page LSN check.
//!
//! Invariants:
//! - a frame being loaded is mapped with its write latch held, so fixes of the page wait for
//!   the data; it is marked valid only after its checksum and LSN verify, else it is
//!   unmapped again;
//! - a page read is never newer than the durable log ([`WalGate::page_lsn_limit`]);
//! - batched prefetch claims at most [`BufferPool::read_ahead_limit`] frames and never
//!   waits for one (read-ahead is advice).
//!
//! [`WalGate::page_lsn_limit`]: crate::buffer::WalGate::page_lsn_limit

use super::{BufferPool, Partition};
use crate::buffer::frames::NO_PAGE;
use crate::buffer::{PageClass, PageId};
use crate::error::{Error, Result};
use crate::page::PageHeader;
use crate::util::sync::RwLockExt;
use std::sync::atomic::Ordering::*;
use std::sync::RwLockWriteGuard;
use std::time::Instant;

impl BufferPool {
    /// The miss half of [`BufferPool::pin_page`]: claims a frame, maps it to `pid` and reads
    /// and verifies the page into it under its write latch. Returns the frame pinned, or
    /// `None` when another thread mapped the page meanwhile (look it up again).
    pub(super) fn load_page(&self, part: &Partition, pid: PageId, class: PageClass) -> Result<Option<usize>> {
        let key = pid.key();
        let file = self.file(pid.file)?;
        if file.dropped.load(Acquire) {
            return Err(Error::NotFound(format!("{} belongs to a dropped table", file.name)));
        }
        let pages = file.published.load(Acquire);
        if pid.page >= pages {
            return Err(Error::InvalidArgument(format!(
                "page {} does not exist in {} (file {} has {pages} pages)",
                pid.page, file.name, pid.file
            )));
        }
        let victim = self.claim_frame(part)?;
        let f = &part.arena.frames[victim];
        let wl = f.latch.write_locked();
        {
            let mut map = part.lock_stripe(key);
            if map.contains_key(&key) {
                // Another thread loaded it meanwhile: give the frame back and take the hit.
                drop(map);
                drop(wl);
                part.unpin(victim);
                return Ok(None);
            }
            map.insert(key, victim as u32);
            f.page_key.store(key, Release);
            part.xlate.set(key, victim);
        }
        part.misses.fetch_add(1, Relaxed);
        let offset = pid.page * self.config.page_size as u64;
        // SAFETY: we hold the write latch of a frame we claimed.
        let bytes = unsafe { part.arena.bytes_mut(victim) };
        let start = Instant::now();
        let loaded = file.device().read_at(offset, bytes).map_err(Error::from).and_then(|()| {
            PageHeader::verify(bytes, &file.name, offset, pid.file, pid.page)?;
            self.check_page_lsn(bytes, &file.name, offset, pid)
        });
        let end = Instant::now();
        crate::trace::record(crate::trace::TraceKind::DataRead, start, end);
        part.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
        part.reads.fetch_add(1, Relaxed);
        file.io.io_wait_ns.fetch_add((end - start).as_nanos() as u64, Relaxed);
        file.io.reads.fetch_add(1, Relaxed);
        file.io.misses.fetch_add(1, Relaxed);
        match loaded {
            Ok(()) => {
                f.usage.store(self.weight(class), Relaxed);
                part.set_sticky(victim, self.sticky_class(class));
                f.dirty.store(false, Relaxed);
                f.valid.store(true, Release);
                drop(wl);
                Ok(Some(victim))
            }
            Err(e) => {
                {
                    let mut map = part.lock_stripe(key);
                    map.remove(&key);
                    part.xlate.clear(key, victim);
                    f.page_key.store(NO_PAGE, Release);
                }
                f.valid.store(false, Release);
                drop(wl);
                part.unpin(victim);
                Err(e)
            }
        }
    }

    /// A page just read must not be newer than the durable log (see [`WalGate::page_lsn_limit`]):
    /// if it is, log records it depends on were lost.
    ///
    /// [`WalGate::page_lsn_limit`]: crate::buffer::WalGate::page_lsn_limit
    pub(super) fn check_page_lsn(&self, bytes: &[u8], file: &str, offset: u64, pid: PageId) -> Result<()> {
        let gate = self.gate.read_locked().clone();
        let Some(gate) = gate else { return Ok(()) };
        let lsn = PageHeader::lsn_of(bytes);
        let limit = gate.page_lsn_limit();
        if lsn > limit {
            return Err(Error::Corruption {
                file: file.to_string(),
                offset,
                detail: format!(
                    "page {} has LSN {lsn}, beyond the end of the log ({limit}): log records this page \
                     depends on were lost (Options::accept_lost_log opens anyway, accepting the loss)",
                    pid.page
                ),
            });
        }
        Ok(())
    }

    /// The most pages one [`BufferPool::prefetch`] call of this thread reads: an eighth of the
    /// frames of the thread's partition (the whole pool under SHR-k, its own part under SEP).
    pub fn read_ahead_limit(&self) -> usize {
        (self.partition().arena.len() / 8).max(1)
    }

    /// Reads the non-resident pages among `pages` of file `file_id` with one batched device
    /// submission (many reads in flight), so that later fixes hit. Pages already resident are
    /// skipped; pages past the end of the file are ignored. Returns how many pages were read.
    ///
    /// Used by scans for read-ahead; under SEP it fills the calling thread's partition.
    pub fn prefetch(&self, file_id: u32, pages: std::ops::Range<u64>, class: PageClass) -> Result<usize> {
        let end = pages.end.min(self.file(file_id)?.published.load(Acquire));
        self.read_batched(file_id, pages.start..end, class)
    }

    /// [`BufferPool::prefetch`] of scattered pages (any order; duplicates are read once): the
    /// misses of a batch of point reads ([`Table::read_many`](crate::Table::read_many)) go to the
    /// device together, in one submission, so one thread keeps them all in flight at once
    /// instead of waiting for each in turn. At most [`BufferPool::read_ahead_limit`] pages are
    /// read; the rest are left to the fixes that need them.
    pub fn prefetch_pages(&self, file_id: u32, pages: &[u64], class: PageClass) -> Result<usize> {
        self.read_batched(file_id, pages.iter().copied(), class)
    }

    /// The body of [`BufferPool::prefetch`] and [`BufferPool::prefetch_pages`].
    fn read_batched(
        &self,
        file_id: u32,
        pages: impl IntoIterator<Item = u64>,
        class: PageClass,
    ) -> Result<usize> {
        let file = self.file(file_id)?;
        let end = file.published.load(Acquire);
        let part = self.partition();
        // Claim and map a frame for every missing page; hold each frame's write latch until
        // its read is verified so concurrent fixes of those pages wait for the data.
        let mut claimed: Vec<(usize, PageId, RwLockWriteGuard<'_, ()>)> = Vec::new();
        let mut failure = None;
        for page in pages {
            if page >= end {
                continue;
            }
            let pid = PageId::new(file_id, page);
            let key = pid.key();
            if part.lock_stripe(key).contains_key(&key) {
                continue;
            }
            // Leave most of the pool to other threads: read ahead into at most an eighth.
            if claimed.len() >= self.read_ahead_limit() {
                break;
            }
            // One sweep, no waiting: read-ahead is advice.
            let victim = match self.claim_frame_once(part) {
                Ok(v) => v,
                // Out of frames: read-ahead is advice, read what we have.
                Err(Error::ResourceExhausted(_)) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            let f = &part.arena.frames[victim];
            let wl = f.latch.write_locked();
            let mut map = part.lock_stripe(key);
            if map.contains_key(&key) {
                drop(map);
                drop(wl);
                part.unpin(victim);
                continue;
            }
            map.insert(key, victim as u32);
            f.page_key.store(key, Release);
            part.xlate.set(key, victim);
            drop(map);
            claimed.push((victim, pid, wl));
        }
        let page_size = self.config.page_size as u64;
        let start = Instant::now();
        let io_result = {
            let mut reqs: Vec<crate::io::IoRequest<'_>> = claimed
                .iter()
                .map(|(i, pid, _)| crate::io::IoRequest::Read {
                    offset: pid.page * page_size,
                    // SAFETY: we hold the write latch of each claimed frame, and frames are
                    // distinct, so these slices do not alias.
                    buf: unsafe { part.arena.bytes_mut(*i) },
                })
                .collect();
            if reqs.is_empty() {
                Ok(())
            } else {
                file.device().submit_batch(&mut reqs)
            }
        };
        let end_t = Instant::now();
        crate::trace::record(crate::trace::TraceKind::DataRead, start, end_t);
        part.io_wait_ns.fetch_add((end_t - start).as_nanos() as u64, Relaxed);
        part.reads.fetch_add(claimed.len() as u64, Relaxed);
        part.misses.fetch_add(claimed.len() as u64, Relaxed);
        file.io.io_wait_ns.fetch_add((end_t - start).as_nanos() as u64, Relaxed);
        file.io.reads.fetch_add(claimed.len() as u64, Relaxed);
        file.io.misses.fetch_add(claimed.len() as u64, Relaxed);
        let mut first_err: Option<Error> = io_result.err().map(Error::from);
        let read = claimed.len();
        for (i, pid, wl) in claimed {
            let f = &part.arena.frames[i];
            let offset = pid.page * page_size;
            // SAFETY: we still hold the frame's write latch.
            let bytes = unsafe { part.arena.bytes(i) };
            let verified = if first_err.is_some() {
                Err(None)
            } else {
                PageHeader::verify(bytes, &file.name, offset, pid.file, pid.page)
                    .and_then(|_| self.check_page_lsn(bytes, &file.name, offset, pid))
                    .map_err(Some)
            };
            match verified {
                Ok(_) => {
                    f.usage.store(self.weight(class), Relaxed);
                    part.set_sticky(i, self.sticky_class(class));
                    f.dirty.store(false, Relaxed);
                    f.valid.store(true, Release);
                }
                Err(e) => {
                    if let Some(e) = e {
                        first_err.get_or_insert(e);
                    }
                    let key = pid.key();
                    let mut map = part.lock_stripe(key);
                    map.remove(&key);
                    part.xlate.clear(key, i);
                    f.page_key.store(NO_PAGE, Release);
                    f.valid.store(false, Release);
                }
            }
            drop(wl);
            part.unpin(i);
        }
        match (first_err, failure) {
            (Some(e), _) | (None, Some(e)) => Err(e),
            (None, None) => Ok(read),
        }
    }
}
