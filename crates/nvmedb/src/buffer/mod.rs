//! The buffer manager: a fixed set of page frames in front of the devices.
//!
//! Owns: frames and their metadata, the page table (striped), GCLOCK replacement, the
//! shared (SHR-k) and separated (SEP) policies, page guards, dirty write-back (by a background
//! writer that keeps clean frames ahead of the clock hand, or by the eviction itself when none
//! is within reach), and the counters.
//!
//! Invariants:
//! - a page is in at most one frame of a partition, and the page table maps it there;
//! - a frame with `pins > 0` is never evicted, and pins are only taken under the page table
//!   stripe lock that maps the page, or lock-free with a re-check (so eviction and a hit
//!   cannot both win); a frame is unmapped only under its write latch, so a hit on a sticky
//!   (kept-resident index) frame may hold the latch shared without a pin;
//! - sticky frames are evicted only once they fill all but an eighth of their partition, or
//!   when no other frame can be taken: an index larger than its buffer evicts, never fails;
//! - a dirty page is written back only after the log covers its LSN ([`WalGate`]), from a copy
//!   taken under the page's shared latch, and stays in the page table until the write is done,
//!   so no reader can fetch a stale version from the device;
//! - every page read from a device is checksum-verified before a guard hands it out.
//! - a page being read ahead asynchronously lies in a frame its scanning thread claimed and
//!   mapped to no page: no other thread sees or waits for it until it is verified and mapped
//!   (see `pool/readahead.rs`).

pub mod doublewrite;
mod frames;
pub mod mtr;
mod pool;
mod writer;

pub use doublewrite::{DoubleWrite, DoubleWriteStats, DOUBLEWRITE_FILE};
pub use mtr::PageLogger;
pub use pool::{BufferPool, Mtr, PageMut, PageRef, ReadAhead};

use crate::error::Result;

/// Identifies a page: a file registered with the pool and a page number in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageId {
    /// File id as registered with [`BufferPool::register_file`].
    pub file: u32,
    /// Page number within the file (byte offset = page number × page size).
    pub page: u64,
}

impl PageId {
    /// Page `page` of file `file`.
    pub fn new(file: u32, page: u64) -> Self {
        Self { file, page }
    }
    pub(crate) fn key(self) -> u64 {
        debug_assert!(self.page < (1 << 40) && self.file < (1 << 23));
        (u64::from(self.file) << 40) | self.page
    }
}

impl std::fmt::Display for PageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.page)
    }
}

/// What a page is used for; sets its GCLOCK weight and whether it may be pinned for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageClass {
    /// Table (heap) data.
    Data,
    /// Index (B+tree) pages: heavier GCLOCK weight, and kept resident when
    /// [`PoolConfig::pin_index_pages`] is set.
    Index,
}

/// How frames are shared between threads (seed 004's policies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferPolicy {
    /// One pool shared by all threads, its page table split into `stripes` locks (SHR-k).
    Shared {
        /// Number of page-table locks (1, 16, 512 in seed 004).
        stripes: usize,
    },
    /// Separated per-thread pools (SEP): each thread gets its own partition of the frames and
    /// takes no lock another thread contends on. Read-only: exclusive fixes are refused.
    Separated {
        /// Number of partitions (normally the number of scanning threads).
        partitions: usize,
    },
}

impl BufferPolicy {
    /// Parses "shr-16", "SHR-512", "sep" or "sep-4".
    pub fn parse(s: &str, default_partitions: usize) -> Option<Self> {
        let l = s.to_ascii_lowercase();
        if let Some(n) = l.strip_prefix("shr-") {
            return n.parse().ok().filter(|&n| n > 0).map(|stripes| BufferPolicy::Shared { stripes });
        }
        if l == "sep" {
            return Some(BufferPolicy::Separated { partitions: default_partitions.max(1) });
        }
        l.strip_prefix("sep-")
            .and_then(|n| n.parse().ok())
            .filter(|&n| n > 0)
            .map(|partitions| BufferPolicy::Separated { partitions })
    }

    /// Short name as in seed 004 ("SHR-16", "SEP").
    pub fn label(&self) -> String {
        match self {
            BufferPolicy::Shared { stripes } => format!("SHR-{stripes}"),
            BufferPolicy::Separated { .. } => "SEP".into(),
        }
    }
}

/// Background writer settings: one thread per pool that keeps clean frames ahead of the clock
/// hand, so that an eviction finds a clean victim instead of writing a dirty page (and, under
/// HA, waiting for its mirrored copy) on the thread that needs the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackgroundWriter {
    /// Longest pause between rounds; an eviction that passes over a dirty victim wakes the
    /// writer at once.
    pub interval: std::time::Duration,
    /// Clean, evictable frames the writer keeps just ahead of each clock hand (capped at a
    /// quarter of the partition's frames).
    pub clean_target: usize,
    /// Most pages written in one batched device submission (one group-commit wait for the log,
    /// one mirrored round trip to a standby).
    pub batch_pages: usize,
    /// Dirty, otherwise evictable frames one eviction passes over (waking the writer) before
    /// it writes one back itself.
    pub eviction_dirty_skips: usize,
}

impl Default for BackgroundWriter {
    /// The default: woken by evictions, at least every 50 ms; 256 clean frames ahead of the
    /// hand; batches of 32 pages; an eviction passes over up to 64 dirty frames.
    fn default() -> Self {
        Self {
            interval: std::time::Duration::from_millis(50),
            clean_target: 256,
            batch_pages: 32,
            eviction_dirty_skips: 64,
        }
    }
}

/// Buffer pool configuration.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Page (and frame) size in bytes: a multiple of 4 KiB from 4 KiB to 64 KiB (seed 000 uses 24 KiB table pages).
    pub page_size: usize,
    /// Number of frames (memory budget = frames × page size).
    pub frames: usize,
    /// Sharing policy.
    pub policy: BufferPolicy,
    /// GCLOCK weight given to data pages on each access.
    pub data_weight: u32,
    /// GCLOCK weight given to index pages on each access.
    pub index_weight: u32,
    /// Keep index pages resident once loaded ("all indexes cached"): they are not evicted
    /// while they leave an eighth of the frames to other pages, and a hit on one takes no pin
    /// and no page-table lock. Index pages beyond that (an index larger than the buffer) are
    /// evicted like any other page, by GCLOCK, rather than failing the fix that needs a frame.
    pub pin_index_pages: bool,
    /// `None`: dirty pages are written only when evicted (by the evicting thread) or flushed.
    /// `Some`: a background writer cleans pages ahead of the clock hand and evictions prefer
    /// clean victims (seed 001 found a periodic writer harmful on low-latency devices; this one
    /// is driven by evictions: measure both).
    pub background_writer: Option<BackgroundWriter>,
    /// Ask the kernel for transparent huge pages for frame memory (fewer TLB misses on large
    /// pools; on by default).
    pub huge_pages: bool,
    /// Serve hits through a lock-free page → frame table (pin, then check the frame) instead of
    /// the striped page table's locks; the striped table stays authoritative for misses (on by
    /// default; off reproduces seed 004's locked SHR-k hit path, and also turns off the
    /// `prefetch_lines` hints, which look frames up in the same table).
    pub lock_free_hits: bool,
    /// Scans keep their read-ahead in flight while they process pages (on by default,
    /// [`BufferPool::with_read_ahead`]): the whole window stays in flight, topped up half a
    /// window at a time (one submission of adjacent pages) as soon as a half has arrived, while
    /// the scan processes the half that arrived. Off, a scan reads ahead in
    /// synchronous batches: it submits a window of reads together, waits for all of them, then
    /// processes those pages with nothing in flight, so the device idles while the CPU works
    /// and the other way round (`lab tpch` SF 1 on this project's 2-vCPU VM: the window read
    /// 1.1-1.3x the pages per second of the batches at 1-2 workers, 0.9-1.1x at 4-8).
    pub async_read_ahead: bool,
    /// What errors call the pool ("index buffer (Options::index_buffer)", say).
    pub name: String,
}

impl PoolConfig {
    /// A shared pool (SHR-16) of `frames` frames of `page_size` bytes, no background writer
    /// (the engine's [`Options`](crate::db::Options) turn it on by default).
    pub fn new(page_size: usize, frames: usize) -> Self {
        Self {
            page_size,
            frames,
            policy: BufferPolicy::Shared { stripes: 16 },
            data_weight: 1,
            index_weight: 4,
            pin_index_pages: false,
            background_writer: None,
            huge_pages: true,
            lock_free_hits: true,
            async_read_ahead: true,
            name: "buffer pool".into(),
        }
    }

    /// Checks the values; errors name the offending option.
    pub fn validate(&self) -> Result<()> {
        use crate::error::Error;
        let cfg = |key: &str, detail: String| Err(Error::Config { key: key.into(), detail });
        if !self.page_size.is_multiple_of(4096) || !(4096..=65536).contains(&self.page_size) {
            return cfg(
                "page_size",
                format!("{} is not a multiple of 4096 from 4096 to 65536", self.page_size),
            );
        }
        let parts = match self.policy {
            BufferPolicy::Shared { stripes: 0 } => {
                return cfg("policy", "SHR needs at least one stripe".into())
            }
            BufferPolicy::Shared { .. } => 1,
            BufferPolicy::Separated { partitions } => partitions,
        };
        if parts == 0 {
            return cfg("policy", "SEP needs at least one partition".into());
        }
        let memory = physical_memory_bytes();
        if (self.frames as u128) * (self.page_size as u128) > u128::from(memory) {
            return cfg(
                "frames",
                format!(
                    "{} frames of {} B ({} B) exceed this machine's memory ({memory} B)",
                    self.frames,
                    self.page_size,
                    self.frames as u128 * self.page_size as u128
                ),
            );
        }
        if self.frames < 2 * parts {
            return cfg(
                "frames",
                format!("{} frames is too few: need at least 2 per partition ({parts})", self.frames),
            );
        }
        if self.data_weight == 0 || self.index_weight == 0 {
            return cfg("gclock weight", "weights must be at least 1".into());
        }
        Ok(())
    }
}

/// The machine's physical memory in bytes (`u64::MAX` if the system does not say).
pub fn physical_memory_bytes() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages <= 0 || size <= 0 {
        return u64::MAX;
    }
    (pages as u64).saturating_mul(size as u64)
}

/// The hook through which the WAL rule is enforced: before a dirty page with LSN `lsn` is
/// written, the log must be durable up to `lsn`. The same rule, read backwards, checks every
/// page loaded from a device: its LSN cannot lie beyond the durable end of the log, unless log
/// records were lost.
pub trait WalGate: Send + Sync {
    /// Returns once the log is durable at least up to `lsn`.
    fn ensure_durable(&self, lsn: u64) -> Result<()>;
    /// The largest LSN a page read from a device may carry (`u64::MAX`: no check).
    fn page_lsn_limit(&self) -> u64 {
        u64::MAX
    }
}

/// Buffer pool counters (cumulative since the pool was created).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferStats {
    /// Fixes served from a frame.
    pub hits: u64,
    /// Fixes that had to load the page.
    pub misses: u64,
    /// Pages read from devices.
    pub reads: u64,
    /// Pages written to devices.
    pub writes: u64,
    /// Frames taken from one page for another.
    pub evictions: u64,
    /// Nanoseconds threads spent in device reads and writes.
    pub io_wait_ns: u64,
    /// Writes done by the background writer (a subset of `writes`).
    pub background_writes: u64,
    /// Evictions that waited for a write-back on the thread that needed the frame: one dirty
    /// page without a background writer; with one, a batch ahead of the clock hand when the
    /// writer had fallen behind. The other evictions found a clean victim.
    pub eviction_writes: u64,
    /// Page-table lock or page latch acquisitions that found it held and waited.
    pub latch_waits: u64,
    /// Nanoseconds threads spent in those waits.
    pub latch_wait_ns: u64,
    /// Pages read ahead ([`BufferPool::with_read_ahead`]) whose read was still in flight when
    /// the scan was handed an earlier page: reads overlapped with the scan's processing.
    pub reads_overlapped: u64,
}

impl BufferStats {
    /// Hits / (hits + misses), or 1.0 with no accesses.
    pub fn hit_ratio(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            1.0
        } else {
            self.hits as f64 / total as f64
        }
    }

    /// Counter differences `self - earlier`.
    pub fn since(&self, earlier: &BufferStats) -> BufferStats {
        BufferStats {
            hits: self.hits - earlier.hits,
            misses: self.misses - earlier.misses,
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            evictions: self.evictions - earlier.evictions,
            io_wait_ns: self.io_wait_ns - earlier.io_wait_ns,
            background_writes: self.background_writes - earlier.background_writes,
            eviction_writes: self.eviction_writes - earlier.eviction_writes,
            latch_waits: self.latch_waits - earlier.latch_waits,
            latch_wait_ns: self.latch_wait_ns - earlier.latch_wait_ns,
            reads_overlapped: self.reads_overlapped - earlier.reads_overlapped,
        }
    }
}

#[cfg(test)]
mod tests;
