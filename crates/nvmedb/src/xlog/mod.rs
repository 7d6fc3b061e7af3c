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

mod destage;
mod fast;
mod format;
mod reader;
mod records;
mod region;
mod repl;
mod sched;

pub use fast::XStats;
pub use format::{frame_bytes, FRAME_HEADER, PAGE_HEADER};
pub use reader::TailReader;
pub use records::{XLogOpener, XRecordLog, XRecordReader, XLOG_CONV, XLOG_META, XRECORD_HEADER};
pub use region::{Backing, MsyncPolicy, PmemRegion};
pub use repl::{combine, LinkState, Mirror, ReplicationMode, ShadowCounters};
pub use sched::{ClassStats, IoScheduler, SchedMode, WriteClass};

use crate::error::{Error, Result};
use crate::io::Device;
use crate::util::sync::MutexExt;
use crate::wal::{LogSink, Lsn};
use destage::Destager;
use fast::{Grant, Inner};
use format::{FrameHeader, RegionHeader, FRAME_MAGIC, HEADER_AREA, HEADER_SLOT, PAD_MAGIC};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Configuration of a fast log.
#[derive(Debug, Clone)]
pub struct XLogConfig {
    /// File holding the persistent region (on a DAX mount, tmpfs or a disk file system).
    pub ring_path: PathBuf,
    /// Ring capacity in bytes (multiple of 4096, at least 4 × `queue_bytes`).
    pub ring_bytes: usize,
    /// Negotiated queue size: payload bytes a writer may have in flight beyond the counter.
    pub queue_bytes: usize,
    /// Conventional page size (multiple of the device alignment).
    pub page_bytes: usize,
    /// Byte offset of the conventional log ring on the device.
    pub conv_offset: u64,
    /// Conventional log ring length in pages.
    pub conv_pages: u64,
    /// Pages per destage batch at most (one device sync per batch).
    pub destage_batch_pages: usize,
    /// Pages per scheduled device write within a batch (0: one write per batch). Smaller
    /// writes let the scheduler interleave conventional writes (opportunistic destaging).
    pub destage_write_pages: usize,
    /// Latency threshold: a partial page is destaged once its oldest byte waited this long.
    pub destage_latency: Duration,
    /// Whether a disk-file mapping is msynced before the counter covers it.
    pub msync: MsyncPolicy,
    /// Scheduler mode when the log creates its own scheduler.
    pub sched_mode: SchedMode,
    /// Concurrent device writes the scheduler allows.
    pub sched_slots: usize,
    /// Most writer handles alive at once.
    pub max_writers: usize,
    /// Spin iterations before a waiter parks.
    pub spin_iters: u32,
    /// Stream position from which the conventional ring must keep every byte (the engine's
    /// last checkpoint undo start); `None`: the ring overwrites its oldest pages freely, as the
    /// device of seed 002 does. Raised later with [`XLog::set_retain_from`].
    pub retain_from: Option<u64>,
    /// How long a writer waits for ring space while retention holds the destager before it
    /// fails with [`Error::ResourceExhausted`].
    pub retention_timeout: Duration,
}

impl XLogConfig {
    /// Defaults: 4 MiB ring, 32 KiB queue, 4 KiB pages, 16 MiB conventional ring at offset 0,
    /// 64-page batches, 200 µs latency threshold, msync on, neutral scheduling.
    pub fn new(ring_path: impl Into<PathBuf>) -> Self {
        Self {
            ring_path: ring_path.into(),
            ring_bytes: 4 << 20,
            queue_bytes: 32 << 10,
            page_bytes: 4096,
            conv_offset: 0,
            conv_pages: 4096,
            destage_batch_pages: 64,
            destage_write_pages: 0,
            destage_latency: Duration::from_micros(200),
            msync: MsyncPolicy::Always,
            sched_mode: SchedMode::Neutral,
            sched_slots: 1,
            max_writers: 64,
            spin_iters: 2000,
            retain_from: None,
            retention_timeout: Duration::from_secs(30),
        }
    }

    fn validate(&self, align: usize) -> Result<()> {
        let bad = |key: &str, detail: String| Err(Error::Config { key: format!("xlog.{key}"), detail });
        if self.queue_bytes < 256 {
            return bad("queue_bytes", format!("{} is below 256 bytes", self.queue_bytes));
        }
        if self.ring_bytes % 4096 != 0 || self.ring_bytes < 4 * self.queue_bytes {
            return bad(
                "ring_bytes",
                format!("{} must be a multiple of 4096 and at least 4 × queue_bytes", self.ring_bytes),
            );
        }
        if self.page_bytes <= format::PAGE_HEADER || self.page_bytes % align != 0 {
            return bad(
                "page_bytes",
                format!("{} must be a multiple of the device alignment {align}", self.page_bytes),
            );
        }
        if self.conv_offset % align as u64 != 0 {
            return bad("conv_offset", format!("{} is not a multiple of {align}", self.conv_offset));
        }
        if self.conv_pages < 2 {
            return bad("conv_pages", "the conventional ring needs at least 2 pages".into());
        }
        if self.destage_batch_pages == 0 || self.destage_batch_pages as u64 > self.conv_pages {
            return bad(
                "destage_batch_pages",
                format!(
                    "{} must be between 1 and conv_pages ({})",
                    self.destage_batch_pages, self.conv_pages
                ),
            );
        }
        if self.retain_from.is_some() && self.conv_pages < 4 * retention_reserve(self) {
            return bad(
                "conv_pages",
                format!(
                    "{} pages are too few to retain the last checkpoint's records: at least {} (4 x a full \
                     ring's worth of pages) are needed",
                    self.conv_pages,
                    4 * retention_reserve(self)
                ),
            );
        }
        if self.max_writers == 0 {
            return bad("max_writers", "at least one writer handle is needed".into());
        }
        Ok(())
    }
}

/// Conventional pages a full ring needs when recovery destages it (kept free under retention).
fn retention_reserve(cfg: &XLogConfig) -> u64 {
    let pp = cfg.page_bytes.saturating_sub(format::PAGE_HEADER).max(1);
    (cfg.ring_bytes.div_ceil(pp) + 2) as u64
}

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

/// What recovery found at open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// True if the region was created by this open.
    pub created: bool,
    /// Stream position durable on the conventional side before recovery.
    pub conv_end_before: u64,
    /// Valid, contiguous frames found in the ring.
    pub frames_recovered: u64,
    /// Stream bytes moved from the ring to the conventional side by recovery.
    pub bytes_recovered: u64,
    /// End of the recovered stream (the next LSN).
    pub stream_end: u64,
    /// Ring position where the scan stopped at a gap, if it stopped at one (an invalid frame
    /// header inside the written window).
    pub stopped_at_ring_pos: u64,
    /// Epoch of the new incarnation.
    pub epoch: u32,
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

pub(crate) fn write_header(region: &PmemRegion, h: &RegionHeader) -> Result<()> {
    let slot = HEADER_SLOT[(h.slot_seq % 2) as usize];
    region.write(slot, &h.encode());
    region.persist(slot, RegionHeader::LEN)
}

fn read_header(region: &PmemRegion) -> Option<RegionHeader> {
    let mut best: Option<RegionHeader> = None;
    for slot in HEADER_SLOT {
        let mut b = [0u8; RegionHeader::LEN];
        region.read(slot, &mut b);
        if let Some(h) = RegionHeader::decode(&b) {
            if best.is_none_or(|x| h.slot_seq > x.slot_seq) {
                best = Some(h);
            }
        }
    }
    best
}

impl XLog {
    /// Opens (or creates) the fast log over `device`, with its own scheduler, and recovers.
    pub fn open(cfg: XLogConfig, device: Arc<dyn Device>) -> Result<Self> {
        let sched = Arc::new(IoScheduler::new(device, cfg.sched_mode, cfg.sched_slots));
        Self::open_with(cfg, sched, Replication::default())
    }

    /// Opens with a shared scheduler and a replication seam, and recovers: every contiguous
    /// valid frame left in the ring is destaged before the log accepts writes.
    pub fn open_with(cfg: XLogConfig, sched: Arc<IoScheduler>, repl: Replication) -> Result<Self> {
        let align = sched.device().alignment();
        cfg.validate(align)?;
        let region = PmemRegion::open(&cfg.ring_path, HEADER_AREA + cfg.ring_bytes, cfg.msync)?;
        let conv_end_dev = cfg.conv_offset + cfg.conv_pages * cfg.page_bytes as u64;
        sched.device().ensure_capacity(conv_end_dev)?;
        let mut report = RecoveryReport::default();
        let header = match read_header(&region) {
            Some(h) => {
                if h.ring_bytes != cfg.ring_bytes as u64
                    || h.page_bytes as usize != cfg.page_bytes
                    || h.conv_pages != cfg.conv_pages
                {
                    return Err(Error::Config {
                        key: "xlog".into(),
                        detail: format!(
                            "{} was created with ring_bytes {}, page_bytes {}, conv_pages {}; the configuration differs",
                            cfg.ring_path.display(),
                            h.ring_bytes,
                            h.page_bytes,
                            h.conv_pages
                        ),
                    });
                }
                h
            }
            None => {
                let mut area = vec![0u8; HEADER_AREA];
                region.read(0, &mut area);
                if area.iter().any(|&b| b != 0) {
                    return Err(Error::Corruption {
                        file: cfg.ring_path.display().to_string(),
                        offset: 0,
                        detail: "neither header slot is valid but the header area is not empty; refusing to \
                                 reinitialise a log that may hold data"
                            .into(),
                    });
                }
                report.created = true;
                let h = RegionHeader {
                    slot_seq: 0,
                    epoch: 0,
                    ring_bytes: cfg.ring_bytes as u64,
                    page_bytes: cfg.page_bytes as u32,
                    conv_pages: cfg.conv_pages,
                    head_ring_pos: 0,
                    head_stream_pos: 0,
                    conv_stream_end: 0,
                    conv_next_seq: 0,
                };
                write_header(&region, &h)?;
                h
            }
        };
        report.conv_end_before = header.conv_stream_end;
        // Scan the ring from the head: contiguous valid frames of the last epoch.
        let (end_ring, end_stream, frames, stop) = scan_ring(&region, &header, cfg.queue_bytes);
        report.frames_recovered = frames;
        report.stopped_at_ring_pos = stop;
        let mut inner = Inner::new(
            region,
            cfg.ring_bytes as u64,
            cfg.queue_bytes as u64,
            cfg.page_bytes,
            cfg.conv_offset,
            cfg.conv_pages,
            header.epoch,
            sched,
            cfg.max_writers,
            repl.shadows,
            repl.mirrors,
            cfg.spin_iters,
            (header.head_ring_pos, header.head_stream_pos),
            (header.conv_stream_end, header.conv_next_seq),
        );
        inner.retention_timeout = cfg.retention_timeout;
        inner.retention_reserve = retention_reserve(&cfg);
        inner.retain_from.store(cfg.retain_from.unwrap_or(u64::MAX), Ordering::Release);
        {
            let mut st = inner.lock_alloc();
            st.alloc_ring = end_ring;
            st.alloc_stream = end_stream;
            st.credit_ring = end_ring;
        }
        inner.credit.store(end_stream, Ordering::Release);
        inner.allocated.store(end_stream, Ordering::Release);
        let mut inner = Arc::new(inner);
        // Crash protocol: destage everything contiguous, synchronously.
        let mut d = Destager::new(
            Arc::clone(&inner),
            header,
            cfg.destage_latency,
            cfg.destage_batch_pages,
            cfg.destage_write_pages,
        );
        if header.conv_stream_end > end_stream {
            return Err(Error::Corruption {
                file: cfg.ring_path.display().to_string(),
                offset: 0,
                detail: format!(
                    "the conventional side claims stream {} but the ring only holds frames up to {end_stream}",
                    header.conv_stream_end
                ),
            });
        }
        d.skip_to(header.conv_stream_end)?;
        d.drain()?;
        if d.held {
            return Err(Error::ResourceExhausted(format!(
                "xlog recovery: the ring holds stream bytes up to {end_stream} but the conventional ring ({} \
                 pages) cannot take them past {} without overwriting bytes retained from {}; open with a \
                 larger conv_pages",
                cfg.conv_pages,
                d.cur_stream,
                cfg.retain_from.unwrap_or(0)
            )));
        }
        assert_eq!(d.cur_stream, end_stream, "recovery did not destage the whole contiguous ring");
        assert_eq!(d.cur_off, 0, "recovery ended inside a frame");
        report.bytes_recovered = end_stream - header.conv_stream_end.min(end_stream);
        report.stream_end = end_stream;
        let mut header = d.header;
        // Everything up to the scan end is on the conventional side or is padding.
        let head_ring = end_ring;
        drop(d);
        // New incarnation: frames of older epochs are stale from now on.
        header.epoch += 1;
        header.slot_seq += 1;
        header.head_ring_pos = head_ring;
        header.head_stream_pos = end_stream;
        header.conv_stream_end = end_stream;
        write_header(&inner.region, &header)?;
        report.epoch = header.epoch;
        let inner_mut = Arc::get_mut(&mut inner)
            .ok_or_else(|| Error::InvalidArgument("xlog state shared during recovery".into()))?;
        inner_mut.epoch = header.epoch;
        {
            let mut st = inner_mut.lock_alloc();
            assert_eq!(st.credit_ring, head_ring, "recovery left undestaged frames");
            st.head_ring = head_ring;
        }
        let mut d = Destager::new(
            Arc::clone(&inner),
            header,
            cfg.destage_latency,
            cfg.destage_batch_pages,
            cfg.destage_write_pages,
        );
        d.reserve = inner.retention_reserve;
        let handle = std::thread::Builder::new()
            .name("xlog-destage".into())
            .spawn(move || d.run())
            .map_err(|e| Error::InvalidArgument(format!("cannot start the destage thread: {e}")))?;
        let sink_writer = XWriter::register(&inner)?;
        Ok(Self { inner, destager: Some(handle), recovery: report, sink_writer, crashed: false })
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

/// Scans frames from the header's head; returns (end ring pos, end stream pos, frames, ring
/// position where it stopped).
fn scan_ring(region: &PmemRegion, h: &RegionHeader, queue_bytes: usize) -> (u64, u64, u64, u64) {
    let ring = h.ring_bytes;
    let mut pos = h.head_ring_pos;
    let mut stream = h.head_stream_pos;
    let mut frames = 0;
    let mut hb = [0u8; format::FRAME_HEADER];
    let mut payload = Vec::new();
    while pos - h.head_ring_pos < ring {
        let off = HEADER_AREA + (pos % ring) as usize;
        region.read(off, &mut hb);
        let f = FrameHeader::decode_unchecked(&hb);
        if f.ring_pos != pos || f.epoch != h.epoch {
            break;
        }
        if f.magic == PAD_MAGIC {
            if !FrameHeader::crc_ok(&hb, &[]) {
                break;
            }
            pos += ring - pos % ring;
            continue;
        }
        let len = f.payload_len as usize;
        let fb = format::frame_bytes(len) as u64;
        if f.magic != FRAME_MAGIC
            || f.stream_pos != stream
            || len == 0
            || len > queue_bytes
            || (pos % ring) + fb > ring
        {
            break;
        }
        payload.resize(len, 0);
        region.read(off + format::FRAME_HEADER, &mut payload);
        if !FrameHeader::crc_ok(&hb, &payload) {
            break;
        }
        pos += fb;
        stream += len as u64;
        frames += 1;
    }
    (pos, stream, frames, pos)
}

/// A writer handle with its own counters. Create one per thread with [`XLog::writer`].
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
    fn register(inner: &Arc<Inner>) -> Result<Self> {
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
