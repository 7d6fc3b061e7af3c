//! Writers of the fast log: [`XWriter`] (the drop-in API `x_pwrite`/`x_fsync` and the
//! allocator API `x_alloc`/`x_free`, with per-writer counters) and [`XAlloc`].
//!
//! Owns: a writer's slot among the log's writers and its last allocation's end. Invariants: a
//! writer slot is used by one handle at a time (released on drop); `x_fsync` waits for the
//! credit counter to cover the writer's latest allocation; an allocation dropped unfilled is
//! zero-filled and completed, so it cannot stall the log.

use super::fast::{Grant, Inner};
use super::format;
use crate::error::{Error, Result};
use crate::util::sync::MutexExt;
use crate::wal::Lsn;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A writer handle with its own counters. Create one per thread with [`XLog::writer`].
///
/// [`XLog::writer`]: super::XLog::writer
pub struct XWriter {
    inner: Arc<Inner>,
    id: usize,
    /// Stream end of this writer's latest allocation (what `x_fsync` waits for).
    last_end: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for XWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XWriter {{ id: {}, written: {}, counter: {} }}", self.id, self.written(), self.counter())
    }
}

impl XWriter {
    pub(super) fn register(inner: &Arc<Inner>) -> Result<Self> {
        for (id, w) in inner.writers.iter().enumerate() {
            if w.in_use.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                w.written.store(0, Ordering::Relaxed);
                w.persisted.store(0, Ordering::Relaxed);
                return Ok(Self { inner: Arc::clone(inner), id, last_end: Default::default() });
            }
        }
        Err(Error::Config {
            key: "xlog.max_writers".into(),
            detail: format!("all {} writer handles are in use", inner.writers.len()),
        })
    }

    /// Payload bytes this writer has written (allocated).
    pub fn written(&self) -> u64 {
        self.inner.writers[self.id].written.load(Ordering::Relaxed)
    }

    /// This writer's credit counter: its bytes covered by the contiguous credit counter.
    pub fn counter(&self) -> u64 {
        self.inner.writers[self.id].persisted.load(Ordering::Relaxed)
    }

    /// Queue credits available now (payload bytes that may be written before re-reading the
    /// counter) — the advisory back-pressure protocol of seed 002 §4.1.
    pub fn credits(&self) -> u64 {
        self.inner.queue_credits()
    }

    /// Copies `buf` into the ring as one contiguous stream range, using all available queue
    /// credits per step and re-reading the counter between steps (seed 002 Fig. 8). Returns the
    /// stream range `[start, end)`. Durable once the counter reaches `end` (see `x_fsync`).
    pub fn x_pwrite(&self, buf: &[u8]) -> Result<(Lsn, Lsn)> {
        let inner = &self.inner;
        if buf.is_empty() {
            let end = inner.allocated.load(Ordering::Acquire);
            return Ok((end, end));
        }
        // Fast path: the whole buffer fits one frame and the credits cover it.
        if buf.len() <= inner.max_frame_payload && buf.len() as u64 <= inner.queue_credits() {
            let g = inner.alloc(self.id, buf.len())?;
            // SAFETY: the grant's payload range belongs to this writer until completion.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), inner.payload_ptr(&g), buf.len()) };
            inner.complete(g)?;
            let end = g.stream_pos + buf.len() as u64;
            self.last_end.fetch_max(end, Ordering::AcqRel);
            return Ok((g.stream_pos, end));
        }
        // Several frames: hold the order lock so they are adjacent in the stream.
        let _order = inner.order.locked();
        self.pwrite_ordered(buf)
    }

    /// Like [`XWriter::x_pwrite`] for a buffer that must know its own stream position (a
    /// record header holding its LSN): `build(start)` makes the bytes, which are then written
    /// as one contiguous range starting exactly at `start`.
    pub fn x_pwrite_at(&self, build: impl FnOnce(Lsn) -> Vec<u8>) -> Result<(Lsn, Lsn)> {
        let inner = &self.inner;
        let _order = inner.order.locked();
        let start = inner.lock_alloc().alloc_stream;
        let buf = build(start);
        if buf.is_empty() {
            return Ok((start, start));
        }
        let r = self.pwrite_ordered(&buf)?;
        assert_eq!(r.0, start, "x_pwrite_at did not start at the position it announced");
        Ok(r)
    }

    /// The multi-frame write; the caller holds the order lock.
    fn pwrite_ordered(&self, buf: &[u8]) -> Result<(Lsn, Lsn)> {
        let inner = &self.inner;
        let mut start = None;
        let mut end = 0;
        let mut off = 0;
        while off < buf.len() {
            let mut credits = inner.queue_credits() as usize;
            if credits <= format::FRAME_HEADER && credits < buf.len() - off {
                // Out of credits: wait for the counter to move (back-pressure).
                inner.stats.queue_waits.fetch_add(1, Ordering::Relaxed);
                inner.blocked.fetch_add(1, Ordering::Relaxed);
                let r = inner.wait_until(|| {
                    inner.queue_credits() as usize > format::FRAME_HEADER.min(buf.len() - off)
                        || inner.error().is_some()
                });
                inner.blocked.fetch_sub(1, Ordering::Relaxed);
                r?;
                credits = inner.queue_credits() as usize;
                if credits == 0 {
                    continue;
                }
            }
            let n = (buf.len() - off).min(credits).min(inner.max_frame_payload);
            let g = inner.alloc_ordered(self.id, n)?;
            start.get_or_insert(g.stream_pos);
            if let Some(s) = start {
                assert_eq!(g.stream_pos, s + off as u64, "x_pwrite frames are not adjacent");
            }
            // SAFETY: the grant's payload range belongs to this writer until completion.
            unsafe { std::ptr::copy_nonoverlapping(buf[off..off + n].as_ptr(), inner.payload_ptr(&g), n) };
            inner.complete(g)?;
            end = g.stream_pos + n as u64;
            off += n;
        }
        self.last_end.fetch_max(end, Ordering::AcqRel);
        Ok((start.unwrap_or(end), end))
    }

    /// Waits until the counter the writer sees covers everything this writer has written.
    pub fn x_fsync(&self) -> Result<Lsn> {
        let target = self.last_end.load(Ordering::Acquire);
        self.wait_for(target)
    }

    /// Waits until the counter the writer sees reaches `lsn`.
    pub fn wait_for(&self, lsn: Lsn) -> Result<Lsn> {
        let inner = &self.inner;
        if lsn > inner.allocated.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!("LSN {lsn} is beyond everything written")));
        }
        inner.wait_until(|| inner.visible_credit() >= lsn || inner.closed.load(Ordering::Acquire))?;
        let c = inner.visible_credit();
        if c < lsn {
            return Err(Error::InvalidArgument(format!("xlog closed before LSN {lsn} became durable")));
        }
        Ok(c)
    }

    /// Allocates `len` contiguous ring bytes (at most [`XLog::max_alloc`]) for this writer to
    /// fill in any order; waits for queue credits and ring space. The area is not destaged, and
    /// the counter does not pass it, until it is handed to [`XWriter::x_free`].
    ///
    /// [`XLog::max_alloc`]: super::XLog::max_alloc
    pub fn x_alloc(&self, len: usize) -> Result<XAlloc<'_>> {
        let g = self.inner.alloc(self.id, len)?;
        self.last_end.fetch_max(g.stream_pos + len as u64, Ordering::AcqRel);
        Ok(XAlloc { writer: self, grant: Some(g) })
    }

    /// Marks an allocation as filled: it becomes persistent and destage-able. Returns the stream
    /// end of the allocation (durable once the counter reaches it).
    pub fn x_free(&self, mut a: XAlloc<'_>) -> Result<Lsn> {
        let g = a.grant.take().ok_or_else(|| Error::InvalidArgument("allocation already freed".into()))?;
        self.inner.complete(g)?;
        Ok(g.stream_pos + g.len as u64)
    }
}

impl Drop for XWriter {
    fn drop(&mut self) {
        self.inner.writers[self.id].in_use.store(false, Ordering::Release);
    }
}

/// A ring area handed out by [`XWriter::x_alloc`].
///
/// Dropping it without [`XWriter::x_free`] fills it with zeroes and completes it (counted in
/// [`XStats::abandoned`]), so a forgotten allocation cannot stall the log forever. A crash while
/// it is unfilled leaves a gap, where recovery stops.
///
/// [`XStats::abandoned`]: super::XStats::abandoned
pub struct XAlloc<'w> {
    writer: &'w XWriter,
    grant: Option<Grant>,
}

impl std::fmt::Debug for XAlloc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XAlloc {{ stream_pos: {}, len: {} }}", self.stream_pos(), self.len())
    }
}

impl XAlloc<'_> {
    /// Stream position (LSN) of the first byte.
    pub fn stream_pos(&self) -> u64 {
        self.grant.map_or(0, |g| g.stream_pos)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.grant.map_or(0, |g| g.len)
    }

    /// True for an empty (already freed) allocation.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The area to fill.
    pub fn buf(&mut self) -> &mut [u8] {
        match self.grant {
            Some(g) => {
                // SAFETY: the grant's payload range belongs exclusively to this allocation until
                // it is completed; `&mut self` prevents aliasing through the handle.
                unsafe { std::slice::from_raw_parts_mut(self.writer.inner.payload_ptr(&g), g.len) }
            }
            None => &mut [],
        }
    }
}

impl Drop for XAlloc<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.grant.take() {
            // SAFETY: as in `buf`.
            unsafe { std::ptr::write_bytes(self.writer.inner.payload_ptr(&g), 0, g.len) };
            self.writer.inner.stats.abandoned.fetch_add(1, Ordering::Relaxed);
            let _ = self.writer.inner.complete(g);
        }
    }
}
