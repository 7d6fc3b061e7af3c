//! Asynchronous read-ahead for scans: a sliding window of page reads kept in flight through the
//! scanning thread's own [`IoQueue`] while the scan processes the pages before them.
//!
//! Owns: [`ReadAhead`] and [`BufferPool::with_read_ahead`]. Invariants:
//! - a page being read ahead lies in a frame the reading thread claimed (pinned, mapped to no
//!   page), so no other thread can see, fix or wait for it: waiting for another thread's
//!   read-ahead could deadlock (each scanner waiting for a page only the other completes).
//!   Another thread that needs the page meanwhile reads it itself; the first copy mapped wins
//!   and the other frame is released unmapped;
//! - a page read ahead is mapped (and so becomes visible and valid) only after its checksum
//!   and LSN are verified;
//! - a frame lent to the queue stays pinned until its read has completed: the window waits for
//!   every read in flight before it ends, on error and on unwinding too;
//! - at most `window` reads are in flight, capped at [`BufferPool::read_ahead_limit`] (an eighth
//!   of the thread's partition), and reads run at most `window` + half a window ahead of the
//!   page the scan holds, so a page read ahead is not evicted before the scan uses it.
//!
//! CPU per page matters as much as depth (a scan on a busy machine is CPU-bound), and so does the
//! size of the requests the device sees: the window is read half a window at a time, each half
//! in one submission of adjacent pages (which the block layer merges into one large request;
//! the first fill is two), the next half started as soon as one has arrived, so the whole
//! window is in flight while the scan processes the half that arrived (a device with long
//! latency delivers the bytes kept in flight). Reads started a page at a time as the scan
//! advances cost a kernel entry each and reach the device as small requests.

use super::{BufferPool, FileEntry, Partition};
use crate::buffer::{PageClass, PageId, PageRef};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Completion, Device, IoQueue, QueuedOp, QueuedOpKind, DIRECT_IO_ALIGN};
use crate::page::PageHeader;
use std::collections::VecDeque;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Instant;

/// One read in flight.
struct Slot {
    page: u64,
    frame: usize,
    submitted: Instant,
    /// Pages the window had handed to the scan when this read was submitted.
    handed: u64,
}

/// A scan's read-ahead window over a range of one file's pages (see the module comment).
/// Made by [`BufferPool::with_read_ahead`]; the scan fixes its pages through
/// [`ReadAhead::fix`], in increasing page order.
pub struct ReadAhead<'p, 'd> {
    pool: &'p BufferPool,
    part: &'p Partition,
    file: Arc<FileEntry>,
    file_id: u32,
    device: &'d dyn Device,
    /// Opened when the first page has to be read (a scan of resident pages opens none).
    queue: Option<Box<dyn IoQueue + 'd>>,
    /// The queue could not be opened: read ahead in synchronous batches instead.
    batched_to: Option<u64>,
    class: PageClass,
    window: u64,
    /// Reads started together (one submission): half the window.
    chunk: usize,
    /// The next page to consider reading ahead.
    next: u64,
    end: u64,
    /// Reads in flight, in page order.
    slots: VecDeque<Slot>,
    /// Pages handed to the scan so far.
    handed: u64,
    reaped: Vec<Completion>,
}

impl BufferPool {
    /// Runs `f` with a read-ahead window over `pages` of file `file_id` (pages past the file's
    /// end are ignored): while the scan processes a page fixed through [`ReadAhead::fix`], up
    /// to `window` of the following pages (at least 1, at most
    /// [`BufferPool::read_ahead_limit`]) are being read through this thread's own I/O queue
    /// straight into frames of its partition. Returns when every read it started has
    /// completed. Under SEP it fills the calling thread's partition.
    pub fn with_read_ahead<'p, T>(
        &'p self,
        file_id: u32,
        pages: Range<u64>,
        window: u64,
        class: PageClass,
        f: impl for<'d> FnOnce(&mut ReadAhead<'p, 'd>) -> Result<T>,
    ) -> Result<T> {
        let file = self.file(file_id)?;
        let device = file.device();
        let end = pages.end.min(file.published.load(Acquire));
        let window = window.max(1).min(self.read_ahead_limit() as u64);
        let mut ra = ReadAhead {
            pool: self,
            part: self.partition(),
            file,
            file_id,
            device: &*device,
            queue: None,
            // Synchronous batches when configured so (the first fix reads the first batch).
            batched_to: (!self.config.async_read_ahead).then_some(pages.start),
            class,
            window,
            chunk: (window as usize / 2).max(1),
            next: pages.start,
            end,
            slots: VecDeque::new(),
            handed: 0,
            reaped: Vec::new(),
        };
        let r = f(&mut ra);
        let finished = ra.finish();
        drop(ra);
        let v = r?;
        finished?;
        Ok(v)
    }
}

impl<'p> ReadAhead<'p, '_> {
    /// Fixes page `page` of the window's file for reading, first topping the window up with
    /// reads of the pages after it and waiting for `page`'s own read if it is in flight.
    pub fn fix(&mut self, page: u64) -> Result<PageRef<'p>> {
        self.advance(page)?;
        let g = self.pool.fix(PageId::new(self.file_id, page), self.class);
        self.handed += 1;
        g
    }

    /// Starts the reads of the window from `page` on, as a fix of `page` would, without
    /// waiting for any: work done before the scan's first fix (waiting for other threads,
    /// building what the scan will probe) then overlaps them. Nothing for a window read in
    /// synchronous batches (a batch is read at the fix that needs it).
    pub fn start(&mut self, page: u64) -> Result<()> {
        if self.batched_to.is_some() {
            return Ok(());
        }
        if !self.slots.is_empty() {
            self.reap(0)?;
        }
        self.top_up(page)
    }

    /// Reads in flight now.
    pub fn in_flight(&self) -> usize {
        self.slots.len()
    }

    fn advance(&mut self, page: u64) -> Result<()> {
        if let Some(to) = self.batched_to {
            if page >= to && page < self.end {
                let to = (page + self.window).min(self.end);
                self.pool.prefetch(self.file_id, page..to, self.class)?;
                self.batched_to = Some(to);
            }
            return Ok(());
        }
        self.start(page)?;
        // Wait for `page`'s read and the reads started before it (they usually complete
        // together: one request), taking whatever else has completed.
        while let Ok(i) = self.slots.binary_search_by_key(&page, |s| s.page) {
            self.reap(i + 1)?;
        }
        Ok(())
    }

    /// Starts reads of the pages from `page` on that are not resident, whole chunks (half
    /// windows, one submission each) at a time, until `window` are in flight, or the range's
    /// end: the first fill is the whole window, later ones half a window each, started as soon
    /// as half a window has completed (so the full window stays in flight while the scan
    /// processes the half that has arrived). Reads run at most `window` + `chunk` pages ahead
    /// of `page`, so a scan slower than the device holds at most that many frames and stops
    /// reading ahead until it catches up.
    fn top_up(&mut self, page: u64) -> Result<()> {
        // Pages the scan skipped are not read ahead.
        self.next = self.next.max(page);
        let limit = (page + 1 + self.window + self.chunk as u64).min(self.end);
        let room = (self.window as usize).saturating_sub(self.slots.len());
        let ahead = limit.saturating_sub(self.next) as usize;
        let rest_fits = limit == self.end && ahead <= room;
        // Whole chunks, or what is left of the range (see the module comment).
        let take = if rest_fits { ahead } else { room.min(ahead) / self.chunk * self.chunk };
        if take == 0 {
            return Ok(());
        }
        let page_size = self.pool.config.page_size;
        let mut ops = Vec::new();
        let mut failure = None;
        // One clock read for the reads started together (clock reads showed in CPU-bound scans).
        let submitted = Instant::now();
        while self.next < limit && ops.len() < take {
            let p = self.next;
            let key = PageId::new(self.file_id, p).key();
            if self.part.lock_stripe(key).contains_key(&key) {
                self.next += 1;
                continue;
            }
            if self.queue.is_none() {
                match self.device.open_queue(self.window as usize) {
                    Ok(q) => self.queue = Some(q),
                    Err(_) => {
                        // No queue (io_uring refused, say): synchronous batches still overlap
                        // the reads of one batch with each other.
                        self.batched_to = Some(page);
                        return self.advance(page);
                    }
                }
            }
            // Read-ahead is advice: out of frames, read what we have.
            let frame = match self.pool.claim_frame_once(self.part) {
                Ok(i) => i,
                Err(Error::ResourceExhausted(_)) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            // SAFETY: the frame is claimed by this thread (pinned, mapped to no page), so
            // nothing else reads or writes its bytes until it is released or mapped, which
            // happens only after its read has completed (see `complete` and `finish`).
            let buf = unsafe {
                let bytes = self.part.arena.bytes_mut(frame);
                AlignedBuf::lend(NonNull::from(bytes).cast(), page_size, DIRECT_IO_ALIGN)
            };
            ops.push(QueuedOp { tag: p, kind: QueuedOpKind::Read, offset: p * page_size as u64, buf });
            self.slots.push_back(Slot { page: p, frame, submitted, handed: self.handed });
            self.next += 1;
        }
        if !ops.is_empty() {
            let n = ops.len() as u64;
            self.part.reads.fetch_add(n, Relaxed);
            self.part.misses.fetch_add(n, Relaxed);
            self.file.io.reads.fetch_add(n, Relaxed);
            self.file.io.misses.fetch_add(n, Relaxed);
            let q = self.queue.as_mut().expect("queue opened before the first read");
            // One submission (one request at the device) per half window, so the halves of a
            // fill complete one after the other and the next half can start as soon as the
            // first has arrived. On error, `finish` reaps whatever did get submitted and
            // releases the rest.
            while !ops.is_empty() {
                let rest = ops.split_off(self.chunk.min(ops.len()));
                q.submit_all(std::mem::replace(&mut ops, rest))?;
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Reaps at least `min` completions (0: only those already done) and completes them.
    fn reap(&mut self, min: usize) -> Result<()> {
        let Some(q) = self.queue.as_mut() else { return Ok(()) };
        // The clock is read only around a wait and once per batch of completions, not per page.
        let start = (min > 0).then(Instant::now);
        let r = q.reap(min, &mut self.reaped);
        if self.reaped.is_empty() && r.is_ok() {
            return Ok(());
        }
        let now = Instant::now();
        if let Some(start) = start {
            let ns = now.duration_since(start).as_nanos() as u64;
            self.part.io_wait_ns.fetch_add(ns, Relaxed);
            self.file.io.io_wait_ns.fetch_add(ns, Relaxed);
        }
        let mut first_err = r.err().map(Error::from);
        let mut done = std::mem::take(&mut self.reaped);
        for c in done.drain(..) {
            if let Err(e) = self.complete(c, now) {
                first_err.get_or_insert(e);
            }
        }
        self.reaped = done;
        first_err.map_or(Ok(()), Err)
    }

    /// Verifies a completed read (reaped at `now`) and maps its page (unless another thread
    /// mapped it meanwhile).
    fn complete(&mut self, c: Completion, now: Instant) -> Result<()> {
        let i = self
            .slots
            .binary_search_by_key(&c.tag, |s| s.page)
            .unwrap_or_else(|_| unreachable!("completion of page {} that is not in flight", c.tag));
        let slot = self.slots.remove(i).expect("slot found above");
        drop(c.buf);
        crate::trace::record(crate::trace::TraceKind::DataRead, slot.submitted, now);
        if self.handed > slot.handed {
            self.part.reads_overlapped.fetch_add(1, Relaxed);
        }
        let pid = PageId::new(self.file_id, slot.page);
        let offset = slot.page * self.pool.config.page_size as u64;
        // SAFETY: the frame is still ours alone (claimed, unmapped) and its read has completed.
        let bytes = unsafe { self.part.arena.bytes(slot.frame) };
        let verified = c.result.map_err(Error::from).and_then(|()| {
            PageHeader::verify(bytes, &self.file.name, offset, pid.file, pid.page)?;
            self.pool.check_page_lsn(bytes, &self.file.name, offset, pid)
        });
        if let Err(e) = verified {
            self.part.unpin(slot.frame);
            return Err(e);
        }
        let f = &self.part.arena.frames[slot.frame];
        f.usage.store(self.pool.weight(self.class), Relaxed);
        f.dirty.store(false, Relaxed);
        let key = pid.key();
        {
            let mut map = self.part.lock_stripe(key);
            if !map.contains_key(&key) && !self.file.dropped.load(Acquire) {
                self.part.set_sticky(slot.frame, self.pool.sticky_class(self.class));
                f.page_key.store(key, Release);
                f.valid.store(true, Release);
                map.insert(key, slot.frame as u32);
                self.part.xlate.set(key, slot.frame);
            }
        }
        self.part.unpin(slot.frame);
        Ok(())
    }

    /// Waits for every read in flight and completes it; releases the frames of reads that were
    /// never submitted. Returns the first error.
    fn finish(&mut self) -> Result<()> {
        let mut first_err = None;
        while let Some(n) = self.queue.as_ref().map(|q| q.in_flight()).filter(|&n| n > 0) {
            if let Err(e) = self.reap(n) {
                first_err.get_or_insert(e);
                if self.queue.as_ref().is_some_and(|q| q.in_flight() > 0) {
                    // The queue cannot reap: dropping it waits for (or aborts on) its reads,
                    // after which no read lands in our frames any more.
                    self.queue = None;
                }
            }
        }
        for s in self.slots.drain(..) {
            self.part.unpin(s.frame);
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for ReadAhead<'_, '_> {
    fn drop(&mut self) {
        // After `with_read_ahead`'s own finish this finds nothing; on unwinding it keeps frames
        // from being reused while the device still writes into them.
        let _ = self.finish();
    }
}
