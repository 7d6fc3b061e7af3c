//! Opening a fast log: the region header (two slots, the newer valid one wins) and the crash
//! protocol.
//!
//! Owns: [`XLog::open_with`], [`RecoveryReport`], reading and writing the region header, and
//! the scan of the ring for the contiguous valid frames of the last epoch. Invariants: every
//! contiguous valid frame in the ring reaches the conventional side before the log accepts
//! writes, and the scan stops at the first gap; a header area that is not empty but has no
//! valid slot is refused, never reinitialised; each open starts a new epoch, so frames of
//! older epochs are stale.

use super::config::retention_reserve;
use super::destage::Destager;
use super::fast::Inner;
use super::format::{self, FrameHeader, RegionHeader, FRAME_MAGIC, HEADER_AREA, HEADER_SLOT, PAD_MAGIC};
use super::{IoScheduler, PmemRegion, Replication, XLog, XLogConfig, XWriter};
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

/// The region's header: the newer valid slot, checked against `cfg`, or a new one written to
/// an empty region (`report.created`). A header area that is not empty but has no valid slot
/// is refused.
fn region_header(region: &PmemRegion, cfg: &XLogConfig, report: &mut RecoveryReport) -> Result<RegionHeader> {
    match read_header(region) {
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
            Ok(h)
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
            write_header(region, &h)?;
            Ok(h)
        }
    }
}

impl XLog {
    /// Opens with a shared scheduler and a replication seam, and recovers: every contiguous
    /// valid frame left in the ring is destaged before the log accepts writes.
    pub fn open_with(cfg: XLogConfig, sched: Arc<IoScheduler>, repl: Replication) -> Result<Self> {
        let align = sched.device().alignment();
        cfg.validate(align)?;
        let region = PmemRegion::open(&cfg.ring_path, HEADER_AREA + cfg.ring_bytes, cfg.msync)?;
        let conv_end_dev = cfg.conv_offset + cfg.conv_pages * cfg.page_bytes as u64;
        sched.device().ensure_capacity(conv_end_dev)?;
        let mut report = RecoveryReport::default();
        let header = region_header(&region, &cfg, &mut report)?;
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
