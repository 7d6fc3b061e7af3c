//! The fast log path: a software X-SSD (seed 002, SPEC §5).
//!
//! Owns: [`XLog`], a byte-addressable ring in a persistent-memory region ([`PmemRegion`]) with a
//! queue of negotiated size, a credit counter of contiguously persisted bytes, advisory
//! back-pressure and a status register; the destage thread that moves the ring's head into a
//! conventional log ring on a [`Device`] in page batches; the write scheduler shared with the
//! engine's other writers; the drop-in API (`x_pwrite`, `x_fsync`, tail-reading `x_pread`) and
//! the allocator API (`x_alloc`, `x_free`) with per-writer counters; the crash protocol; the
//! replication seam (mirrors and shadow counters); and a [`LogSink`] implementation so the WAL
//! can commit on the credit counter instead of fdatasync; the engine's record log over it
//! ([`XRecordLog`], opened by [`XLogOpener`]: framed records, torn-tail skips, retention of what
//! the last checkpoint needs).
//!
//! Invariants: the credit counter never runs ahead of contiguously persisted bytes and never
//! goes backwards; the conventional side holds a prefix of the credited stream, in order; after
//! a crash, every contiguous valid frame in the ring reaches the conventional side before new
//! writes are accepted, and recovery stops at the first gap (a frame allocated but never
//! completed); the counter the writer sees never exceeds the local counter; with a retained
//! position set, the conventional ring never overwrites a byte at or after it (destage holds).
//!
//! Durability is what the backing gives — see [`Backing::durability`] and [`XLog::durability`].

//!
//! By seam: `config.rs` ([`XLogConfig`]), `recover.rs` (opening the region and the crash
//! protocol), `writer.rs` ([`XWriter`], [`XAlloc`]: the drop-in and allocator APIs), `fast.rs`
//! (the shared ring state), `destage.rs`, `sched.rs`, `region.rs`, `format.rs`, `reader.rs`,
//! `repl.rs`, `records.rs`; the [`XLog`] handle, its status and retention are here.

mod config;
mod destage;
mod fast;
mod format;
mod reader;
mod records;
mod recover;
mod region;
mod repl;
mod sched;
mod writer;

pub use config::XLogConfig;
pub use fast::XStats;
pub use format::{frame_bytes, FRAME_HEADER, PAGE_HEADER};
pub use reader::TailReader;
pub use records::{XLogOpener, XRecordLog, XRecordReader, XLOG_CONV, XLOG_META, XRECORD_HEADER};
pub use recover::RecoveryReport;
pub use region::{Backing, MsyncPolicy, PmemRegion};
pub use repl::{combine, LinkState, Mirror, ReplicationMode, ShadowCounters};
pub use sched::{ClassStats, IoScheduler, SchedMode, WriteClass};
pub use writer::{XAlloc, XWriter};

use crate::error::{Error, Result};
use crate::io::Device;
use crate::util::sync::MutexExt;
use crate::wal::{LogSink, Lsn};
use fast::Inner;
use recover::write_header;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Optional replication seam.
#[derive(Default, Clone)]
pub struct Replication {
    /// Shadow counters, combined into the counter writers see.
    pub shadows: Option<Arc<ShadowCounters>>,
    /// Receivers of the write stream (one per secondary).
    pub mirrors: Vec<Arc<dyn Mirror>>,
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replication {{ shadows: {:?}, mirrors: {} }}", self.shadows, self.mirrors.len())
    }
}

/// The status register (seed 002 §4.1, §7.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XStatus {
    /// Local credit counter: contiguously persisted stream bytes.
    pub credit: u64,
    /// The counter writers see (credit combined with the shadow counters).
    pub visible_credit: u64,
    /// Stream end of all allocations.
    pub allocated: u64,
    /// Stream position durable on the conventional side.
    pub destaged: u64,
    /// Negotiated queue size.
    pub queue_bytes: u64,
    /// Payload in flight (allocated minus credit).
    pub queue_outstanding: u64,
    /// Ring bytes in use (not yet destaged).
    pub ring_used_bytes: u64,
    /// Ring capacity.
    pub ring_bytes: u64,
    /// True while some writer is held back by back-pressure.
    pub backpressure: bool,
    /// The destage error that poisoned the log, if any.
    pub destage_error: Option<String>,
    /// Link state of each secondary.
    pub links: Vec<LinkState>,
    /// Current incarnation.
    pub epoch: u32,
    /// Retained stream position (the conventional ring keeps every byte from it), if set.
    pub retain_from: Option<u64>,
    /// Conventional pages holding retained bytes.
    pub retained_pages: u64,
    /// Conventional ring length in pages.
    pub conv_pages: u64,
    /// True while the destager waits because its next page would overwrite retained bytes
    /// (writers then run out of ring space and fail after the retention timeout).
    pub destage_held: bool,
}

/// A software X-SSD fast log.
pub struct XLog {
    inner: Arc<Inner>,
    destager: Option<JoinHandle<()>>,
    recovery: RecoveryReport,
    sink_writer: XWriter,
    crashed: bool,
}

impl std::fmt::Debug for XLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XLog {{ region: {:?}, status: {:?} }}", self.inner.region, self.status())
    }
}

impl XLog {
    /// Opens (or creates) the fast log over `device`, with its own scheduler, and recovers.
    pub fn open(cfg: XLogConfig, device: Arc<dyn Device>) -> Result<Self> {
        let sched = Arc::new(IoScheduler::new(device, cfg.sched_mode, cfg.sched_slots));
        Self::open_with(cfg, sched, Replication::default())
    }

    /// What recovery found when this log was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// What backs the ring.
    pub fn backing(&self) -> Backing {
        self.inner.region.backing()
    }

    /// A plain statement of what an acknowledged byte survives, for reports and result files.
    pub fn durability(&self) -> String {
        let info = self.inner.sched.device().info();
        format!(
            "fast side: {} [{}]; conventional side: ring of {} x {} B pages on {} ({}), device-synced \
             after every destage batch",
            self.backing().durability(),
            self.inner.region.path().display(),
            self.inner.conv_pages,
            self.inner.page_bytes,
            info.name,
            info.backend
        )
    }

    /// The write scheduler; the engine's other writers to the same device go through
    /// [`IoScheduler::conventional_device`].
    pub fn scheduler(&self) -> &Arc<IoScheduler> {
        &self.inner.sched
    }

    /// Counters.
    pub fn stats(&self) -> &XStats {
        &self.inner.stats
    }

    /// The credit counter the writer sees.
    pub fn counter(&self) -> u64 {
        self.inner.visible_credit()
    }

    /// Stream end of all allocations (the position the next allocation gets).
    pub fn allocated(&self) -> u64 {
        self.inner.allocated.load(Ordering::Acquire)
    }

    /// Conventional page size in bytes.
    pub fn page_bytes(&self) -> usize {
        self.inner.page_bytes
    }

    /// Pages written to the conventional ring since the log was created.
    pub fn conv_pages_written(&self) -> u64 {
        self.inner.conv_next_seq.load(Ordering::Acquire)
    }

    /// Retention at a glance, without the allocation lock: (conventional pages holding retained
    /// bytes, conventional pages retained bytes may use — the ring minus the reserve recovery
    /// needs —, pages written since creation).
    pub fn retention(&self) -> (u64, u64, u64) {
        let i = &self.inner;
        (
            i.retained_pages.load(Ordering::Acquire),
            i.conv_pages.saturating_sub(i.retention_reserve),
            i.conv_next_seq.load(Ordering::Acquire),
        )
    }

    /// Conventional pages retained bytes may still take before the space gate closes:
    /// `usable - retained - usable / 4` (negative: closed). `None` without retention.
    fn gate_headroom(&self) -> Option<i64> {
        let i = &self.inner;
        if i.retain_from.load(Ordering::Acquire) == u64::MAX {
            return None;
        }
        let usable = i.conv_pages.saturating_sub(i.retention_reserve);
        let retained = i.retained_pages.load(Ordering::Acquire);
        Some(usable as i64 - retained as i64 - (usable / 4) as i64)
    }

    /// The space gate a mini-transaction passes *before* it latches any page. Under retention
    /// the conventional ring fills with records the last checkpoint still needs, and only the
    /// next checkpoint frees them; a writer that waited for ring space while holding page
    /// latches would keep that checkpoint's page flush from finishing. So new
    /// mini-transactions wait here, latch-free, once retained bytes fill three quarters of the
    /// usable conventional ring. The last quarter plus the whole ring is the slack in which
    /// the mini-transactions already past the gate, and the checkpoint's own record, always
    /// find space: the checkpoint never waits for a writer, and a writer holding latches never
    /// waits for the checkpoint. (The database asks for a checkpoint at half the ring, see
    /// [`RecordLog::wants_checkpoint`](crate::wal::RecordLog::wants_checkpoint).)
    ///
    /// Returns at once without retention or with headroom. Otherwise waits until a checkpoint
    /// has released enough, the log closes or fails, or `retention_timeout` passes (then it
    /// lets the caller on: its append fails with [`Error::ResourceExhausted`] if space still
    /// does not come, e.g. behind a transaction that keeps the undo start from moving).
    pub fn wait_for_headroom(&self) -> Result<()> {
        if self.gate_headroom().is_none_or(|h| h >= 0) {
            return Ok(());
        }
        let inner = &self.inner;
        inner.stats.gate_waits.fetch_add(1, Ordering::Relaxed);
        inner.kick_destager(true);
        let since = std::time::Instant::now();
        inner.wait_until(|| {
            self.gate_headroom().is_none_or(|h| h >= 0)
                || inner.closed.load(Ordering::Acquire)
                || since.elapsed() >= inner.retention_timeout
        })
    }

    /// Largest frame payload (the negotiated queue minus one frame header, capped by the ring).
    pub fn max_alloc(&self) -> usize {
        self.inner.max_frame_payload
    }

    /// Reads the status register. The snapshot keeps `destaged <= visible_credit <= credit <=
    /// allocated` (each is read before the larger ones).
    pub fn status(&self) -> XStatus {
        let i = &self.inner;
        let (alloc_ring, head_ring) = {
            let st = i.lock_alloc();
            (st.alloc_ring, st.head_ring)
        };
        // Read the smaller (monotone) positions first so the snapshot keeps
        // destaged <= credit <= allocated even while they move.
        let destaged = i.destaged.load(Ordering::Acquire);
        let visible_credit = i.visible_credit();
        let credit = i.credit.load(Ordering::Acquire);
        let allocated = i.allocated.load(Ordering::Acquire);
        XStatus {
            credit,
            visible_credit,
            allocated,
            destaged,
            queue_bytes: i.queue_bytes,
            queue_outstanding: allocated.saturating_sub(credit),
            ring_used_bytes: alloc_ring - head_ring,
            ring_bytes: i.ring_bytes,
            backpressure: i.blocked.load(Ordering::Relaxed) > 0,
            destage_error: i.error(),
            links: i.shadows.as_ref().map(|s| s.links()).unwrap_or_default(),
            epoch: i.epoch,
            retain_from: Some(i.retain_from.load(Ordering::Acquire)).filter(|&r| r != u64::MAX),
            retained_pages: i.retained_pages.load(Ordering::Acquire),
            conv_pages: i.conv_pages,
            destage_held: i.retention_held.load(Ordering::Acquire),
        }
    }

    /// Raises the retained position: from now on the conventional ring keeps every byte at or
    /// after `pos` (it never moves back). Wakes a destager held by the older position.
    pub fn set_retain_from(&self, pos: u64) {
        let r = &self.inner.retain_from;
        let mut cur = r.load(Ordering::Acquire);
        loop {
            let new = if cur == u64::MAX { pos } else { cur.max(pos) };
            match r.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
        self.inner.kick_destager(true);
    }

    /// A new writer handle with its own counters (seed 002 §7.1). Fails when `max_writers`
    /// handles are alive.
    pub fn writer(&self) -> Result<XWriter> {
        XWriter::register(&self.inner)
    }

    /// Applies a secondary's counter update to its shadow and wakes writers waiting on it.
    pub fn update_shadow(&self, secondary: usize, pos: u64) {
        if let Some(s) = &self.inner.shadows {
            s.update(secondary, pos);
            self.inner.notify_all();
        }
    }

    /// A tail reader starting at stream position `from` (which must still be on the
    /// conventional ring or be its current end).
    pub fn tail_reader(&self, from: u64) -> TailReader {
        TailReader::new(Arc::clone(&self.inner), from)
    }

    /// Asks the destager to write partial pages until the conventional side holds everything
    /// credited now, and waits for it.
    pub fn destage_now(&self) -> Result<u64> {
        let target = self.inner.credit.load(Ordering::Acquire);
        {
            let mut c = self.inner.destage_mx.locked();
            c.flush = true;
        }
        self.inner.kick_destager(true);
        let inner = &self.inner;
        inner.wait_until(|| {
            inner.destaged.load(Ordering::Acquire) >= target || inner.retention_held.load(Ordering::Acquire)
        })?;
        let d = inner.destaged.load(Ordering::Acquire);
        if d < target {
            return Err(Error::ResourceExhausted(format!(
                "xlog: destage held at stream {d} (below {target}): the conventional ring would overwrite bytes \
                 retained from {}",
                inner.retain_from.load(Ordering::Acquire)
            )));
        }
        Ok(d)
    }

    /// Reads the destaged stream `[from, to)` from the conventional side (recovery API: after
    /// open, `read_stream(start, recovery().stream_end)` yields the recovered stream).
    pub fn read_stream(&self, from: u64, to: u64) -> Result<Vec<u8>> {
        let end = self.inner.destaged.load(Ordering::Acquire);
        if to > end || from > to {
            return Err(Error::InvalidArgument(format!(
                "stream range {from}..{to} is not on the conventional side (end {end})"
            )));
        }
        let mut out = vec![0u8; (to - from) as usize];
        let mut r = self.tail_reader(from);
        let n = r.try_pread(&mut out)?;
        assert_eq!(n, out.len(), "conventional side shorter than its published end");
        Ok(out)
    }

    /// Oldest stream position still on the conventional ring.
    pub fn oldest_stream_pos(&self) -> Result<u64> {
        let next = self.inner.conv_next_seq.load(Ordering::Acquire);
        if next == 0 {
            return Ok(self.inner.destaged.load(Ordering::Acquire));
        }
        let seq = next.saturating_sub(self.inner.conv_pages);
        let mut page = crate::io::AlignedBuf::new(self.inner.page_bytes.max(4096));
        let off = self.inner.conv_offset + (seq % self.inner.conv_pages) * self.inner.page_bytes as u64;
        self.inner.sched.device().read_at(off, &mut page[..self.inner.page_bytes])?;
        format::PageHeader::open(&page[..self.inner.page_bytes]).map(|h| h.stream_pos).ok_or_else(|| {
            Error::Corruption {
                file: self.inner.sched.device().info().name,
                offset: off,
                detail: format!("oldest conventional log page {seq} is invalid"),
            }
        })
    }

    /// Clean shutdown: destage everything credited, sync, stop the destager.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if let Some(h) = self.destager.take() {
            {
                let mut c = self.inner.destage_mx.locked();
                c.shutdown = true;
                self.inner.destage_cv.notify_all();
            }
            let _ = h.join();
        }
        self.inner.closed.store(true, std::sync::atomic::Ordering::Release);
        self.inner.notify_all();
        match self.inner.error() {
            Some(e) => Err(Error::Poisoned(format!("xlog destage failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Simulates a crash of the process: the destager stops at once, nothing more is destaged
    /// or written to the header. The ring file and the device keep whatever they hold.
    pub fn crash(mut self) {
        if let Some(h) = self.destager.take() {
            {
                let mut c = self.inner.destage_mx.locked();
                c.crash = true;
                self.inner.destage_cv.notify_all();
            }
            let _ = h.join();
        }
        self.crashed = true;
        self.inner.closed.store(true, Ordering::Release);
        self.inner.notify_all();
    }
}

impl Drop for XLog {
    fn drop(&mut self) {
        if !self.crashed {
            let _ = self.shutdown();
        }
    }
}

impl LogSink for XLog {
    fn append(&self, bytes: &[u8]) -> Result<(Lsn, Lsn)> {
        self.sink_writer.x_pwrite(bytes)
    }

    fn durable_lsn(&self) -> Lsn {
        self.inner.visible_credit()
    }

    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        self.sink_writer.wait_for(lsn)
    }
}
