//! The fast log's configuration: [`XLogConfig`], its defaults and its validation.
//!
//! Owns: every setting of a fast log and the conventional pages retention keeps free.
//! Invariants: a configuration is validated before a region is opened (sizes aligned to the
//! device, the ring at least four queues, the conventional ring large enough for a full ring
//! while retention holds it); errors name the `xlog.<key>` at fault.

use super::{format, MsyncPolicy, SchedMode};
use crate::error::{Error, Result};
use std::path::PathBuf;
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
    ///
    /// [`XLog::set_retain_from`]: super::XLog::set_retain_from
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

    pub(super) fn validate(&self, align: usize) -> Result<()> {
        let bad = |key: &str, detail: String| Err(Error::Config { key: format!("xlog.{key}"), detail });
        if self.queue_bytes < 256 {
            return bad("queue_bytes", format!("{} is below 256 bytes", self.queue_bytes));
        }
        if !self.ring_bytes.is_multiple_of(4096) || self.ring_bytes < 4 * self.queue_bytes {
            return bad(
                "ring_bytes",
                format!("{} must be a multiple of 4096 and at least 4 × queue_bytes", self.ring_bytes),
            );
        }
        if self.page_bytes <= format::PAGE_HEADER || !self.page_bytes.is_multiple_of(align) {
            return bad(
                "page_bytes",
                format!("{} must be a multiple of the device alignment {align}", self.page_bytes),
            );
        }
        if !self.conv_offset.is_multiple_of(align as u64) {
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
pub(super) fn retention_reserve(cfg: &XLogConfig) -> u64 {
    let pp = cfg.page_bytes.saturating_sub(format::PAGE_HEADER).max(1);
    (cfg.ring_bytes.div_ceil(pp) + 2) as u64
}
