//! The fast side's shared state: ring allocation, frame completion, the credit counter, the
//! queue credits (advisory back-pressure) and waiting.
//!
//! Owns: [`Inner`], shared by writers, the destager and readers. Positions are virtual and
//! 64-bit: a *ring position* `r` lives at region offset `HEADER_AREA + r % ring_bytes`; a
//! *stream position* counts payload bytes since the log was created (it is the LSN).
//!
//! Invariants (asserted where they change):
//! - `head_ring <= credit_ring <= alloc_ring` and `alloc_ring - head_ring <= ring_bytes`: a
//!   writer never overwrites a frame the conventional side does not hold yet.
//! - `credit` (stream) only covers frames whose header and payload were persisted, and every
//!   frame below it: it counts *contiguously* persisted bytes, never ahead of the data.
//! - `destaged <= credit <= allocated`.
//! - The completion set holds at most one entry per outstanding frame; outstanding payload is at
//!   most `queue_bytes` (allocation waits), so the set is bounded.

use super::format::{frame_bytes, FrameHeader, FRAME_HEADER, FRAME_MAGIC, HEADER_AREA, PAD_MAGIC};
use super::region::PmemRegion;
use super::repl::{Mirror, ShadowCounters};
use super::sched::IoScheduler;
use crate::error::{Error, Result};
use crate::util::sync::{CondvarExt, MutexExt};
use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Counters of one writer (seed 002 §7.1: one counter per writer).
#[derive(Debug, Default)]
pub struct WriterSlot {
    pub(crate) in_use: AtomicBool,
    /// Payload bytes this writer has had allocated.
    pub(crate) written: AtomicU64,
    /// Payload bytes of this writer covered by the contiguous credit counter.
    pub(crate) persisted: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Done {
    ring_end: u64,
    stream_end: u64,
    writer: usize,
    payload: u64,
}

#[derive(Debug)]
pub(crate) struct AllocState {
    pub alloc_ring: u64,
    pub alloc_stream: u64,
    pub credit_ring: u64,
    pub head_ring: u64,
    done: BTreeMap<u64, Done>,
}

/// A granted frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub ring_pos: u64,
    pub stream_pos: u64,
    pub len: usize,
    pub writer: usize,
}

/// Statistics, all monotone.
#[derive(Debug, Default)]
pub struct XStats {
    /// Data frames completed.
    pub frames: AtomicU64,
    /// Payload bytes completed.
    pub payload_bytes: AtomicU64,
    /// Padding frames written at the ring end.
    pub pad_frames: AtomicU64,
    /// Allocations dropped without `x_free` (zero-filled and completed).
    pub abandoned: AtomicU64,
    /// Times a writer had to wait for queue credits (back-pressure).
    pub queue_waits: AtomicU64,
    /// Times a writer had to wait for ring space (destage behind).
    pub space_waits: AtomicU64,
    /// Times a mini-transaction waited at the space gate ([`XLog::wait_for_headroom`]) before
    /// latching its pages.
    ///
    /// [`XLog::wait_for_headroom`]: super::XLog::wait_for_headroom
    pub gate_waits: AtomicU64,
    /// Destage batches written.
    pub destage_batches: AtomicU64,
    /// Conventional pages written.
    pub destage_pages: AtomicU64,
    /// Filler bytes in partial pages.
    pub filler_bytes: AtomicU64,
    /// Largest observed outstanding payload (allocated minus credit) right after an allocation.
    pub max_outstanding: AtomicU64,
}

pub(crate) struct Inner {
    pub region: PmemRegion,
    pub ring_bytes: u64,
    pub queue_bytes: u64,
    pub max_frame_payload: usize,
    pub page_bytes: usize,
    pub conv_offset: u64,
    pub conv_pages: u64,
    pub epoch: u32,
    pub sched: std::sync::Arc<IoScheduler>,
    pub alloc: Mutex<AllocState>,
    /// Taken around every reservation, and held by a multi-frame `x_pwrite` for its whole call
    /// so its frames are adjacent in the stream.
    pub order: Mutex<()>,
    /// Contiguously persisted stream bytes: the credit counter.
    pub credit: AtomicU64,
    /// Stream end of all allocations.
    pub allocated: AtomicU64,
    /// Stream position durable on the conventional side.
    pub destaged: AtomicU64,
    /// Next conventional page sequence number (pages below it are durable).
    pub conv_next_seq: AtomicU64,
    /// Where the destager has copied up to (not yet durable), for wake-up decisions.
    pub destage_cursor: AtomicU64,
    /// Destager sleep state: 0 running, 1 sleeping with a partial page pending, 2 idle.
    pub destager_state: AtomicU8,
    pub destage_mx: Mutex<super::destage::DestageCtl>,
    pub destage_cv: Condvar,
    wait_mx: Mutex<()>,
    wait_cv: Condvar,
    waiters: AtomicUsize,
    /// Writers currently blocked by back-pressure (queue or ring space).
    pub blocked: AtomicUsize,
    pub closed: AtomicBool,
    pub error: Mutex<Option<String>>,
    pub writers: Vec<WriterSlot>,
    pub shadows: Option<std::sync::Arc<ShadowCounters>>,
    pub mirrors: Vec<std::sync::Arc<dyn Mirror>>,
    pub stats: XStats,
    pub spin_iters: u32,
    /// Stream position from which the conventional ring must keep every byte (the last
    /// checkpoint's undo start); `u64::MAX`: no retention, the ring overwrites freely.
    pub retain_from: AtomicU64,
    /// True while the destager waits because its next page would overwrite retained bytes.
    pub retention_held: AtomicBool,
    /// Conventional pages holding retained bytes (published by the destager).
    pub retained_pages: AtomicU64,
    /// How long a writer waits for ring space while destage is held before failing.
    pub retention_timeout: Duration,
    /// Conventional pages the running destager keeps free of retained bytes' competitors: room
    /// for recovery to destage a full ring after a crash without overwriting retained bytes.
    pub retention_reserve: u64,
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        region: PmemRegion,
        ring_bytes: u64,
        queue_bytes: u64,
        page_bytes: usize,
        conv_offset: u64,
        conv_pages: u64,
        epoch: u32,
        sched: std::sync::Arc<IoScheduler>,
        max_writers: usize,
        shadows: Option<std::sync::Arc<ShadowCounters>>,
        mirrors: Vec<std::sync::Arc<dyn Mirror>>,
        spin_iters: u32,
        start: (u64, u64),
        conv: (u64, u64),
    ) -> Self {
        let (ring_pos, stream_pos) = start;
        let max_frame_payload = (queue_bytes as usize).min(ring_bytes as usize / 4) - FRAME_HEADER;
        Self {
            region,
            ring_bytes,
            queue_bytes,
            max_frame_payload,
            page_bytes,
            conv_offset,
            conv_pages,
            epoch,
            sched,
            alloc: Mutex::new(AllocState {
                alloc_ring: ring_pos,
                alloc_stream: stream_pos,
                credit_ring: ring_pos,
                head_ring: ring_pos,
                done: BTreeMap::new(),
            }),
            order: Mutex::new(()),
            credit: AtomicU64::new(stream_pos),
            allocated: AtomicU64::new(stream_pos),
            destaged: AtomicU64::new(conv.0),
            conv_next_seq: AtomicU64::new(conv.1),
            destage_cursor: AtomicU64::new(stream_pos),
            destager_state: AtomicU8::new(0),
            destage_mx: Mutex::new(Default::default()),
            destage_cv: Condvar::new(),
            wait_mx: Mutex::new(()),
            wait_cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
            blocked: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            error: Mutex::new(None),
            writers: (0..max_writers.max(1)).map(|_| WriterSlot::default()).collect(),
            shadows,
            mirrors,
            stats: XStats::default(),
            spin_iters,
            retain_from: AtomicU64::new(u64::MAX),
            retention_held: AtomicBool::new(false),
            retained_pages: AtomicU64::new(0),
            retention_timeout: Duration::from_secs(30),
            retention_reserve: 0,
        }
    }

    pub fn lock_alloc(&self) -> MutexGuard<'_, AllocState> {
        self.alloc.locked()
    }

    /// Region offset of ring position `r`.
    pub fn ring_off(&self, r: u64) -> usize {
        HEADER_AREA + (r % self.ring_bytes) as usize
    }

    /// The counter the writer sees: local credit combined with the shadow counters.
    pub fn visible_credit(&self) -> u64 {
        let local = self.credit.load(Ordering::Acquire);
        match &self.shadows {
            Some(s) => s.combined(local),
            None => local,
        }
    }

    /// Queue credits: payload bytes a writer may send before re-reading the counter.
    pub fn queue_credits(&self) -> u64 {
        let alloc = self.allocated.load(Ordering::Acquire);
        let credit = self.credit.load(Ordering::Acquire);
        self.queue_bytes.saturating_sub(alloc - credit.min(alloc))
    }

    pub fn error(&self) -> Option<String> {
        self.error.locked().clone()
    }

    pub fn fail(&self, msg: String) {
        let mut e = self.error.locked();
        if e.is_none() {
            *e = Some(msg);
        }
        drop(e);
        self.notify_all();
    }

    fn check_usable(&self) -> Result<()> {
        if let Some(e) = self.error() {
            return Err(Error::Poisoned(format!("xlog destage failed: {e}")));
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument("xlog is closed".into()));
        }
        Ok(())
    }

    /// Wakes every waiter (credit, space, readers). Cheap when nobody waits.
    pub fn notify_all(&self) {
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.wait_mx.locked();
            self.wait_cv.notify_all();
        }
    }

    /// Blocks until `done()` is true, spinning briefly first. Returns early with an error when
    /// the log is poisoned; `done` must observe `closed` itself if it should stop on close.
    pub fn wait_until(&self, mut done: impl FnMut() -> bool) -> Result<()> {
        for i in 0..self.spin_iters {
            if done() {
                return Ok(());
            }
            if i % 64 == 63 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut g = self.wait_mx.locked();
        let r = loop {
            if done() {
                break Ok(());
            }
            if let Some(e) = self.error() {
                break Err(Error::Poisoned(format!("xlog destage failed: {e}")));
            }
            // The timeout is a safety net only; correctness rests on notify_all.
            g = self.wait_cv.wait_timeout_locked(g, Duration::from_millis(50)).0;
        };
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Reserves a frame of `len` payload bytes for `writer`. Waits while the queue credits or
    /// the ring space do not allow it (back-pressure), then writes a padding frame first when
    /// the frame would straddle the ring end.
    pub fn alloc(&self, writer: usize, len: usize) -> Result<Grant> {
        // A multi-frame x_pwrite holds `order` across its frames; everyone else takes it only
        // for the reservation, so nothing lands between that x_pwrite's frames.
        let _order = self.order.locked();
        self.alloc_ordered(writer, len)
    }

    /// `alloc` for a caller that already holds `order`.
    pub fn alloc_ordered(&self, writer: usize, len: usize) -> Result<Grant> {
        if len == 0 || len > self.max_frame_payload {
            return Err(Error::InvalidArgument(format!(
                "xlog allocation of {len} bytes: must be 1..={} (the negotiated queue minus a frame header)",
                self.max_frame_payload
            )));
        }
        let fb = frame_bytes(len) as u64;
        let mut blocked = false;
        let mut held_since: Option<std::time::Instant> = None;
        loop {
            self.check_usable()?;
            // Snapshot destage progress *before* checking the space: the destager frees space
            // before it publishes `destaged`, so any freeing after this load changes it and
            // wakes the wait below (a snapshot taken after the check could miss the last batch
            // and wait forever).
            let destaged_snapshot = self.destaged.load(Ordering::Acquire);
            let mut st = self.lock_alloc();
            let in_lap = st.alloc_ring % self.ring_bytes;
            let pad = if self.ring_bytes - in_lap < fb { self.ring_bytes - in_lap } else { 0 };
            let space_ok = st.alloc_ring + pad + fb - st.head_ring <= self.ring_bytes;
            let credit = self.credit.load(Ordering::Acquire);
            let queue_ok = st.alloc_stream - credit + len as u64 <= self.queue_bytes;
            if space_ok && queue_ok {
                if pad > 0 {
                    let at = st.alloc_ring;
                    let h = FrameHeader {
                        magic: PAD_MAGIC,
                        payload_len: 0,
                        stream_pos: st.alloc_stream,
                        ring_pos: at,
                        epoch: self.epoch,
                    };
                    let off = self.ring_off(at);
                    self.region.write(off, &h.encode(&[]));
                    self.region.persist(off, FRAME_HEADER)?;
                    st.alloc_ring += pad;
                    let done = Done {
                        ring_end: st.alloc_ring,
                        stream_end: st.alloc_stream,
                        writer: usize::MAX,
                        payload: 0,
                    };
                    self.stats.pad_frames.fetch_add(1, Ordering::Relaxed);
                    self.complete_locked(&mut st, at, done);
                }
                let g = Grant { ring_pos: st.alloc_ring, stream_pos: st.alloc_stream, len, writer };
                st.alloc_ring += fb;
                st.alloc_stream += len as u64;
                assert!(st.alloc_ring - st.head_ring <= self.ring_bytes, "ring overrun");
                self.allocated.store(st.alloc_stream, Ordering::Release);
                let outstanding = st.alloc_stream - self.credit.load(Ordering::Acquire);
                self.stats.max_outstanding.fetch_max(outstanding, Ordering::Relaxed);
                drop(st);
                if let Some(w) = self.writers.get(writer) {
                    w.written.fetch_add(len as u64, Ordering::Relaxed);
                }
                if blocked {
                    self.blocked.fetch_sub(1, Ordering::Relaxed);
                }
                return Ok(g);
            }
            drop(st);
            if !blocked {
                blocked = true;
                self.blocked.fetch_add(1, Ordering::Relaxed);
            }
            if !space_ok {
                self.stats.space_waits.fetch_add(1, Ordering::Relaxed);
                if self.retention_held.load(Ordering::Acquire) {
                    let since = *held_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() >= self.retention_timeout {
                        if blocked {
                            self.blocked.fetch_sub(1, Ordering::Relaxed);
                        }
                        return Err(Error::ResourceExhausted(format!(
                            "xlog: the ring is full and destage is held for {:?}: the conventional log ring \
                             ({} pages) would overwrite stream bytes at or after {}, which the last checkpoint \
                             still needs; checkpoint more often, end long transactions or enlarge conv_pages",
                            self.retention_timeout,
                            self.conv_pages,
                            self.retain_from.load(Ordering::Acquire)
                        )));
                    }
                } else {
                    held_since = None;
                }
                self.kick_destager(true);
            } else {
                self.stats.queue_waits.fetch_add(1, Ordering::Relaxed);
            }
            // A destage batch (frees space, then advances `destaged`) or a completion at the
            // counter (advances `credit`, read under the lock above) may unblock us.
            let credit_snapshot = credit;
            let r = self.wait_until(|| {
                self.destaged.load(Ordering::Acquire) != destaged_snapshot
                    || self.credit.load(Ordering::Acquire) != credit_snapshot
                    || self.error().is_some()
                    || (self.retention_held.load(Ordering::Acquire)
                        && held_since.is_none_or(|t| t.elapsed() >= self.retention_timeout))
            });
            if let Err(e) = r {
                self.blocked.fetch_sub(1, Ordering::Relaxed);
                return Err(e);
            }
        }
    }

    /// Raw pointer to a grant's payload.
    pub fn payload_ptr(&self, g: &Grant) -> *mut u8 {
        self.region.ptr_at(self.ring_off(g.ring_pos) + FRAME_HEADER, g.len)
    }

    /// Seals a filled frame: header with CRC written after the payload, both persisted, the
    /// mirrors fed, then the credit counter advanced over every contiguous completed frame.
    pub fn complete(&self, g: Grant) -> Result<()> {
        let off = self.ring_off(g.ring_pos);
        // SAFETY: the grant's payload range is exclusively this writer's until completion and
        // was fully written by it; nothing else writes it (destage only reads below credit).
        let payload = unsafe { std::slice::from_raw_parts(self.payload_ptr(&g), g.len) };
        let h = FrameHeader {
            magic: FRAME_MAGIC,
            payload_len: g.len as u32,
            stream_pos: g.stream_pos,
            ring_pos: g.ring_pos,
            epoch: self.epoch,
        };
        // Payload stored first, header last, then one persist of the whole frame: a process
        // crash before the header store leaves no frame (a gap); a power loss that tears the
        // frame is caught by the CRC, which covers the payload.
        fence(Ordering::Release);
        self.region.write(off, &h.encode(payload));
        if let Err(e) = self.region.persist(off, FRAME_HEADER + g.len) {
            // The frame can never be credited: poison the log so waiters fail instead of
            // waiting behind a gap forever.
            self.fail(format!("persisting the frame at stream {}: {e}", g.stream_pos));
            return Err(e);
        }
        for (i, m) in self.mirrors.iter().enumerate() {
            // A replication error is a stalled shadow counter plus a status-register entry
            // (seed 002 §7.1), never a local failure.
            if m.on_frame(g.stream_pos, payload).is_err() {
                if let Some(s) = self.shadows.as_ref().filter(|s| i < s.len()) {
                    s.set_link(i, super::repl::LinkState::Failed);
                }
            }
        }
        self.stats.frames.fetch_add(1, Ordering::Relaxed);
        self.stats.payload_bytes.fetch_add(g.len as u64, Ordering::Relaxed);
        let done = Done {
            ring_end: g.ring_pos + frame_bytes(g.len) as u64,
            stream_end: g.stream_pos + g.len as u64,
            writer: g.writer,
            payload: g.len as u64,
        };
        let mut st = self.lock_alloc();
        let advanced = self.complete_locked(&mut st, g.ring_pos, done);
        drop(st);
        if advanced {
            self.notify_all();
            self.kick_destager(false);
        }
        Ok(())
    }

    /// Records a completed frame; advances the credit counter if it is the next contiguous one.
    fn complete_locked(&self, st: &mut AllocState, ring_pos: u64, done: Done) -> bool {
        assert!(
            ring_pos >= st.credit_ring && done.ring_end <= st.alloc_ring,
            "completion outside the live window"
        );
        if ring_pos != st.credit_ring {
            let prev = st.done.insert(ring_pos, done);
            assert!(prev.is_none(), "frame at ring position {ring_pos} completed twice");
            return false;
        }
        let mut d = done;
        loop {
            st.credit_ring = d.ring_end;
            if let Some(w) = self.writers.get(d.writer) {
                w.persisted.fetch_add(d.payload, Ordering::Relaxed);
            }
            let prev = self.credit.swap(d.stream_end, Ordering::AcqRel);
            assert!(prev <= d.stream_end, "credit counter went backwards: {prev} -> {}", d.stream_end);
            match st.done.remove(&st.credit_ring) {
                Some(n) => d = n,
                None => break,
            }
        }
        true
    }

    /// Wakes the destager when it sleeps idle, or sleeps while a full page is ready (or `force`).
    pub fn kick_destager(&self, force: bool) {
        fence(Ordering::SeqCst);
        let state = self.destager_state.load(Ordering::SeqCst);
        if state == 0 && !force {
            return;
        }
        let ready =
            self.credit.load(Ordering::SeqCst).saturating_sub(self.destage_cursor.load(Ordering::SeqCst));
        let page_payload = (self.page_bytes - super::format::PAGE_HEADER) as u64;
        if force || state == 2 || ready >= page_payload {
            let _g = self.destage_mx.locked();
            self.destage_cv.notify_all();
        }
    }
}
