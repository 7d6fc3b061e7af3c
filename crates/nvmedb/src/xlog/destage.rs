//! The destage module (seed 002 §4.3): moves the ring's head to the conventional log ring.
//!
//! Owns: [`Destager`], run by one background thread per log (and synchronously by recovery).
//! It copies credited bytes from ring frames into conventional pages (header + payload + zero
//! filler), writes up to `batch_pages` pages per batch through the [`IoScheduler`] as destage
//! writes, syncs the device, then persists the region header and only then releases the ring
//! space. A partial page is written only when the oldest pending byte has waited
//! `latency` (the latency threshold), on an explicit flush, or at shutdown.
//!
//! Invariants: pages are written in sequence-number order and their stream positions are
//! contiguous (page `s+1` starts where page `s` ends), so the conventional side holds exactly
//! the credited stream in order; the header never claims more than the device has synced; the
//! ring head never passes bytes the header does not cover; only credited bytes are destaged.
//!
//! Retention: when a retained position is set (`Inner::retain_from`, the last checkpoint's undo
//! start), a page is never written over an older page holding stream bytes at or after it; the
//! destager holds instead (`Inner::retention_held`, visible in the status register) until the
//! position moves, and writers that run out of ring space meanwhile fail after the retention
//! timeout with a clear error rather than hanging.

use super::fast::Inner;
use super::format::{
    frame_bytes, FrameHeader, PageHeader, RegionHeader, FRAME_HEADER, FRAME_MAGIC, PAD_MAGIC, PAGE_HEADER,
};
use super::sched::WriteClass;
use super::write_header;
use crate::error::{Error, Result};
use crate::io::AlignedBuf;
use crate::util::sync::{CondvarExt, MutexExt};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Control flags of the destage thread, under `Inner::destage_mx`.
#[derive(Debug, Default)]
pub struct DestageCtl {
    /// Destage everything, then exit.
    pub shutdown: bool,
    /// Exit at once without destaging (simulated crash).
    pub crash: bool,
    /// Write partial pages until caught up with the credit counter.
    pub flush: bool,
}

pub(crate) struct Destager {
    pub inner: Arc<Inner>,
    /// Virtual ring position of the frame being destaged.
    pub cur_ring: u64,
    /// Payload bytes of that frame already destaged.
    pub cur_off: usize,
    /// Stream position destaged up to (copied into pages).
    pub cur_stream: u64,
    pub next_seq: u64,
    pub header: RegionHeader,
    pub latency: Duration,
    pub batch_pages: usize,
    /// Pages per scheduled device write (a batch is split so the scheduler can interleave
    /// conventional writes between its parts).
    pub write_pages: usize,
    buf: AlignedBuf,
    /// Per conventional slot: (page sequence number, stream end) of the page written there, as
    /// far as this destager knows (older pages are read from the device on demand).
    page_ends: Vec<(u64, u64)>,
    /// Oldest page sequence number that may hold retained bytes.
    retain_seq: u64,
    /// True when the last `destage_once` stopped because of retention.
    pub held: bool,
    /// `conv_next_seq` of the header this destager started from.
    open_seq: u64,
    /// Pages left unwritten under retention (0 for recovery, which may use them).
    pub reserve: u64,
    /// The retained position `retained_pages` was last computed for.
    seen_retain: u64,
}

impl Destager {
    pub fn new(
        inner: Arc<Inner>,
        header: RegionHeader,
        latency: Duration,
        batch_pages: usize,
        write_pages: usize,
    ) -> Self {
        let pb = inner.page_bytes;
        let batch_pages = batch_pages.max(1);
        let write_pages = if write_pages == 0 { batch_pages } else { write_pages.min(batch_pages) };
        let align = inner.sched.device().alignment().max(512);
        Self {
            cur_ring: header.head_ring_pos,
            cur_off: 0,
            cur_stream: header.head_stream_pos,
            next_seq: header.conv_next_seq,
            buf: AlignedBuf::with_alignment(pb * batch_pages, align),
            page_ends: vec![(u64::MAX, 0); inner.conv_pages as usize],
            retain_seq: header.conv_next_seq.saturating_sub(inner.conv_pages),
            held: false,
            open_seq: header.conv_next_seq,
            reserve: 0,
            seen_retain: u64::MAX,
            inner,
            header,
            latency,
            batch_pages,
            write_pages,
        }
    }

    /// Skips stream bytes below `to` without writing them (they are on the conventional side
    /// already: recovery after a crash in the middle of a frame).
    pub fn skip_to(&mut self, to: u64) -> Result<()> {
        let mut sink = vec![0u8; (to - self.cur_stream) as usize];
        self.copy_stream(&mut sink)
    }

    fn corrupt(&self, detail: String) -> Error {
        Error::Corruption {
            file: self.inner.region.path().display().to_string(),
            offset: self.inner.ring_off(self.cur_ring) as u64,
            detail,
        }
    }

    /// Copies the next `dst.len()` credited stream bytes out of the ring frames.
    fn copy_stream(&mut self, dst: &mut [u8]) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let mut filled = 0;
        let mut hb = [0u8; FRAME_HEADER];
        while filled < dst.len() {
            let off = inner.ring_off(self.cur_ring);
            inner.region.read(off, &mut hb);
            let h = FrameHeader::decode_unchecked(&hb);
            if h.ring_pos != self.cur_ring || h.epoch != inner.epoch {
                return Err(
                    self.corrupt(format!("credited frame has stamps ring {} epoch {}", h.ring_pos, h.epoch))
                );
            }
            if h.magic == PAD_MAGIC {
                self.cur_ring += inner.ring_bytes - self.cur_ring % inner.ring_bytes;
                continue;
            }
            if h.magic != FRAME_MAGIC || h.stream_pos + self.cur_off as u64 != self.cur_stream {
                return Err(self.corrupt(format!(
                    "credited frame magic {:#x} stream {} does not continue stream {}",
                    h.magic, h.stream_pos, self.cur_stream
                )));
            }
            let len = h.payload_len as usize;
            let take = (len - self.cur_off).min(dst.len() - filled);
            inner.region.read(off + FRAME_HEADER + self.cur_off, &mut dst[filled..filled + take]);
            filled += take;
            self.cur_off += take;
            self.cur_stream += take as u64;
            if self.cur_off == len {
                self.cur_ring += frame_bytes(len) as u64;
                self.cur_off = 0;
            }
        }
        Ok(())
    }

    /// Stream end of conventional page `seq` (which must still be on the ring).
    fn page_end(&mut self, seq: u64) -> Result<u64> {
        let inner = Arc::clone(&self.inner);
        let slot = (seq % inner.conv_pages) as usize;
        if self.page_ends[slot].0 == seq {
            return Ok(self.page_ends[slot].1);
        }
        let pb = inner.page_bytes;
        let align = inner.sched.device().alignment().max(512);
        let mut page = AlignedBuf::with_alignment(pb, align);
        let off = inner.conv_offset + slot as u64 * pb as u64;
        inner.sched.device().read_at(off, &mut page)?;
        match PageHeader::open(&page) {
            Some(h) if h.page_seq == seq => {
                let end = h.stream_pos + h.payload_len as u64;
                self.page_ends[slot] = (seq, end);
                Ok(end)
            }
            // The slot was overwritten by a page of the batch a crash interrupted (written, but
            // not yet in the header): that overwrite was allowed by retention then, so the page
            // held no retained bytes.
            _ if seq < self.open_seq.saturating_sub(inner.conv_pages) + self.batch_pages as u64 => {
                self.page_ends[slot] = (seq, 0);
                Ok(0)
            }
            _ => Err(Error::Corruption {
                file: inner.sched.device().info().name,
                offset: off,
                detail: format!("conventional log page {seq} is invalid (checked before overwriting it)"),
            }),
        }
    }

    /// Pages that may be written now without overwriting retained bytes; moves `retain_seq`
    /// past pages that hold only bytes below the retained position.
    fn writable_pages(&mut self) -> Result<u64> {
        let n = self.inner.conv_pages;
        let retain = self.inner.retain_from.load(Ordering::Acquire);
        self.retain_seq = self.retain_seq.max(self.next_seq.saturating_sub(n));
        if retain == u64::MAX {
            self.retain_seq = self.next_seq;
        }
        while self.retain_seq < self.next_seq && self.page_end(self.retain_seq)? <= retain {
            self.retain_seq += 1;
        }
        self.inner.retained_pages.store(self.next_seq - self.retain_seq, Ordering::Release);
        let free = self.retain_seq + n - self.next_seq;
        Ok(if retain == u64::MAX { free } else { free.saturating_sub(self.reserve) })
    }

    /// Destages one batch if there is work: full pages, or one partial page when
    /// `allow_partial`. Returns whether anything was written (`false` with `held` set when
    /// retention stopped it).
    pub fn destage_once(&mut self, allow_partial: bool) -> Result<bool> {
        let inner = Arc::clone(&self.inner);
        let credit = inner.credit.load(Ordering::Acquire);
        assert!(credit >= self.cur_stream, "destage ahead of the credit counter");
        let avail = credit - self.cur_stream;
        let pb = inner.page_bytes;
        let pp = (pb - PAGE_HEADER) as u64;
        let full = (avail / pp) as usize;
        let npages = if full > 0 {
            full.min(self.batch_pages)
        } else if avail > 0 && allow_partial {
            1
        } else {
            return Ok(false);
        };
        let writable = self.writable_pages()?;
        self.held = writable == 0;
        if inner.retention_held.swap(self.held, Ordering::AcqRel) != self.held {
            inner.notify_all();
        }
        if self.held {
            return Ok(false);
        }
        let npages = npages.min(writable as usize);
        let mut buf = std::mem::replace(&mut self.buf, AlignedBuf::with_alignment(512, 512));
        let r = self.fill_and_write(&mut buf, npages, credit, pp);
        self.buf = buf;
        r?;
        Ok(true)
    }

    fn fill_and_write(&mut self, buf: &mut AlignedBuf, npages: usize, credit: u64, pp: u64) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let pb = inner.page_bytes;
        for p in 0..npages {
            let page = &mut buf[p * pb..(p + 1) * pb];
            let n = pp.min(credit - self.cur_stream) as usize;
            let start = self.cur_stream;
            self.copy_stream(&mut page[PAGE_HEADER..PAGE_HEADER + n])?;
            page[PAGE_HEADER + n..].fill(0);
            inner.stats.filler_bytes.fetch_add(pp - n as u64, Ordering::Relaxed);
            let seq = self.next_seq + p as u64;
            PageHeader { page_seq: seq, stream_pos: start, payload_len: n as u32 }.seal(page);
            self.page_ends[(seq % inner.conv_pages) as usize] = (seq, start + n as u64);
        }
        // Write the batch, split where it wraps around the conventional ring.
        let n_slots = inner.conv_pages;
        let first = self.next_seq % n_slots;
        let k = npages as u64;
        let head_part = k.min(n_slots - first) as usize;
        debug_assert!(npages <= n_slots as usize, "batch larger than the conventional ring");
        let dev_off = |slot: u64| inner.conv_offset + slot * pb as u64;
        let mut p = 0;
        while p < npages {
            // Contiguous on the device up to the ring end, and at most `write_pages` per write.
            let slot = (self.next_seq + p as u64) % n_slots;
            let limit = if p < head_part { head_part } else { npages };
            let q = (p + self.write_pages).min(limit);
            inner.sched.write_at(WriteClass::Destage, dev_off(slot), &buf[p * pb..q * pb])?;
            p = q;
        }
        inner.sched.device().sync()?;
        self.next_seq += k;
        // The device holds the pages durably: now the header may say so, then the ring space
        // may be reused.
        self.header.slot_seq += 1;
        self.header.head_ring_pos = self.cur_ring;
        self.header.head_stream_pos = self.cur_stream - self.cur_off as u64;
        self.header.conv_stream_end = self.cur_stream;
        self.header.conv_next_seq = self.next_seq;
        write_header(&inner.region, &self.header)?;
        // Free the ring space before publishing `destaged`: writers waiting for space wake on a
        // change of `destaged` and must then find the space.
        {
            let mut st = inner.lock_alloc();
            assert!(self.cur_ring <= st.credit_ring, "ring head passed the credit counter");
            st.head_ring = self.cur_ring;
        }
        inner.conv_next_seq.store(self.next_seq, Ordering::Release);
        inner.destaged.store(self.cur_stream, Ordering::Release);
        inner.destage_cursor.store(self.cur_stream, Ordering::Release);
        inner.stats.destage_batches.fetch_add(1, Ordering::Relaxed);
        inner.stats.destage_pages.fetch_add(k, Ordering::Relaxed);
        inner.retained_pages.store(self.next_seq - self.retain_seq.min(self.next_seq), Ordering::Release);
        inner.notify_all();
        Ok(())
    }

    /// Destages until the conventional side holds every credited byte.
    pub fn drain(&mut self) -> Result<()> {
        while self.destage_once(true)? {}
        Ok(())
    }

    /// The background thread's loop.
    pub fn run(mut self) {
        let inner = Arc::clone(&self.inner);
        let pp = (inner.page_bytes - PAGE_HEADER) as u64;
        let mut partial_since: Option<Instant> = None;
        loop {
            let (shutdown, crash, flush) = {
                let c = inner.destage_mx.locked();
                (c.shutdown, c.crash, c.flush)
            };
            if crash {
                return;
            }
            // A moved retained position frees pages even when nothing is pending: publish
            // the new count at once (the space gate reads it) and wake its waiters.
            let retain = inner.retain_from.load(Ordering::Acquire);
            if retain != self.seen_retain {
                self.seen_retain = retain;
                if let Err(e) = self.writable_pages() {
                    inner.fail(e.to_string());
                    return;
                }
                inner.notify_all();
            }
            let pending = inner.credit.load(Ordering::Acquire) - self.cur_stream;
            if pending == 0 {
                partial_since = None;
                if flush {
                    inner.destage_mx.locked().flush = false;
                    inner.notify_all();
                }
                if shutdown {
                    return;
                }
            } else if partial_since.is_none() {
                partial_since = Some(Instant::now());
            }
            let due = partial_since.is_some_and(|t| t.elapsed() >= self.latency);
            match self.destage_once(shutdown || flush || due) {
                Ok(true) => {
                    partial_since = None;
                    continue;
                }
                Ok(false) if self.held && (shutdown || flush) => {
                    // Retention holds the rest: it stays in the ring (recovery destages it once
                    // the retained position has moved). A flush waiter is released.
                    if flush {
                        inner.destage_mx.locked().flush = false;
                        inner.notify_all();
                    }
                    if shutdown {
                        return;
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    inner.fail(e.to_string());
                    return;
                }
            }
            // Nothing to write now: sleep until kicked (idle) or until the partial page is due.
            let mut c = inner.destage_mx.locked();
            if c.crash || c.shutdown || c.flush {
                continue;
            }
            if self.held {
                // Wait for the retained position to move (`XLog::set_retain_from` kicks).
                inner.destager_state.store(0, Ordering::SeqCst);
                drop(inner.destage_cv.wait_timeout(c, Duration::from_millis(100)));
                continue;
            }
            let state = if pending > 0 { 1 } else { 2 };
            inner.destager_state.store(state, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let now_pending = inner.credit.load(Ordering::SeqCst) - self.cur_stream;
            let wake_now = (state == 2 && now_pending > 0) || now_pending >= pp;
            if !wake_now {
                let timeout = match partial_since {
                    Some(t) => self.latency.saturating_sub(t.elapsed()).max(Duration::from_micros(1)),
                    None => Duration::from_millis(100),
                };
                c = inner.destage_cv.wait_timeout_locked(c, timeout).0;
            }
            inner.destager_state.store(0, Ordering::SeqCst);
            drop(c);
        }
    }
}
