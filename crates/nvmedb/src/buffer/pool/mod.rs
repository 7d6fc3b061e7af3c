//! The buffer pool proper: page table, fix/unfix, GCLOCK victim selection, write-back.
//!
//! Owns: `BufferPool` (its configuration, partitions, registered files, WAL hooks and
//! background writer), the thread's partition choice (SEP), the pool-wide counters, and
//! closing (the writer stopped before the pool goes). Each seam is a file of its own:
//! `partition.rs` (frames, page table stripes, clock hand, counters), `guard.rs` (page
//! guards), `files.rs` (registered files and page allocation), `fix.rs` (fix/unfix and the
//! page-table lookup), `read.rs` (loading a missed page, batched prefetch, the checks every
//! page read passes), `evict.rs` (GCLOCK victims), `writeback.rs` (write-back under the WAL
//! rule, flushes, the background writer's rounds), `logging.rs` (mini-transaction scopes),
//! `readahead.rs` (asynchronous read-ahead for scans).
//!
//! Invariants: see the module invariants in `buffer/mod.rs`; each file states the ones it keeps.

use super::frames::NO_PAGE;
use super::mtr::PageLogger;
use super::writer::{Signal, WriterHandle};
use super::{BufferPolicy, BufferStats, PageClass, PoolConfig, WalGate};
use crate::error::{Error, Result};
use crate::util::sync::MutexExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, RwLock};

mod evict;
mod files;
mod fix;
mod guard;
mod logging;
mod partition;
mod read;
mod readahead;
mod writeback;

use files::FileEntry;
pub use guard::{PageMut, PageRef};
pub use logging::Mtr;
use partition::{Partition, FILE_HIT_SHARDS, FILE_HIT_SLOTS};
pub use readahead::ReadAhead;

thread_local! {
    /// This thread's slot for SEP partition choice.
    static THREAD_SLOT: usize = NEXT_THREAD_SLOT.fetch_add(1, Relaxed);
}
static NEXT_THREAD_SLOT: AtomicUsize = AtomicUsize::new(0);

/// A buffer pool over one or more files of the same page size.
pub struct BufferPool {
    config: PoolConfig,
    parts: Box<[Partition]>,
    files: RwLock<Vec<Option<Arc<FileEntry>>>>,
    /// Hits per file (see [`FILE_HIT_SHARDS`]).
    file_hits: Box<[AtomicU64]>,
    gate: RwLock<Option<Arc<dyn WalGate>>>,
    writer: Mutex<Option<WriterHandle>>,
    /// Wakes the background writer (`None`: the pool has none).
    writer_signal: Option<Arc<Signal>>,
    /// The WAL hook receiving page changes, and this pool's tag in the log.
    logger: std::sync::OnceLock<(Arc<dyn PageLogger>, u8)>,
    /// Set when a page change could not be logged outside a mini-transaction.
    log_failure: Mutex<Option<String>>,
    /// The double-write area every in-place write goes through first, and this pool's tag in
    /// it (see `writeback.rs`).
    doublewrite: std::sync::OnceLock<(Arc<super::DoubleWrite>, u8)>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool").field("config", &self.config).finish_non_exhaustive()
    }
}

impl BufferPool {
    /// Creates a pool; allocates all frame memory now.
    pub fn new(config: PoolConfig) -> Result<Arc<Self>> {
        config.validate()?;
        let parts: Box<[Partition]> = match config.policy {
            BufferPolicy::Shared { stripes } => {
                vec![Partition::new(config.page_size, config.frames, stripes, config.huge_pages)?]
                    .into_boxed_slice()
            }
            BufferPolicy::Separated { partitions } => (0..partitions)
                .map(|_| Partition::new(config.page_size, config.frames / partitions, 1, config.huge_pages))
                .collect::<Result<_>>()?,
        };
        let pool = Arc::new(Self {
            writer_signal: config.background_writer.map(|_| Arc::new(Signal::new())),
            config,
            parts,
            files: RwLock::new(Vec::new()),
            file_hits: (0..FILE_HIT_SHARDS * FILE_HIT_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            gate: RwLock::new(None),
            writer: Mutex::new(None),
            logger: std::sync::OnceLock::new(),
            log_failure: Mutex::new(None),
            doublewrite: std::sync::OnceLock::new(),
        });
        if let (Some(bw), Some(signal)) = (pool.config.background_writer, &pool.writer_signal) {
            *pool.writer.locked() = Some(WriterHandle::start(Arc::downgrade(&pool), signal.clone(), bw));
        }
        Ok(pool)
    }

    /// The configuration the pool was created with.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.config.page_size
    }

    /// Bytes of frame memory allocated.
    pub fn memory_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.arena.bytes_total()).sum()
    }

    fn partition(&self) -> &Partition {
        if self.parts.len() == 1 {
            &self.parts[0]
        } else {
            &self.parts[THREAD_SLOT.with(|s| *s) % self.parts.len()]
        }
    }

    /// Whether pages of `class` are kept resident (sticky) when loaded.
    fn sticky_class(&self, class: PageClass) -> bool {
        class == PageClass::Index && self.config.pin_index_pages
    }

    fn weight(&self, class: PageClass) -> u32 {
        match class {
            PageClass::Data => self.config.data_weight,
            PageClass::Index => self.config.index_weight,
        }
    }

    fn check_writable(&self) -> Result<()> {
        if let BufferPolicy::Separated { .. } = self.config.policy {
            return Err(Error::InvalidArgument(
                "the SEP buffer policy is read-only (seed 004 uses it for scans); use SHR-k to modify pages"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Faults the memory of every frame in now, as a server does at start, so that the first
    /// read into each frame does not stop to allocate and zero it (the pool maps its memory
    /// lazily: a pool of gigabytes costs nothing until it is used). Contents are unchanged, so
    /// this may run while the pool is in use. On a kernel older than 5.14 (no
    /// `MADV_POPULATE_WRITE`) it does nothing; out of memory is an error naming the pool.
    pub fn prefault(&self) -> Result<()> {
        for (i, p) in self.parts.iter().enumerate() {
            match p.arena.populate() {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(()),
                Err(e) => {
                    return Err(Error::ResourceExhausted(format!(
                        "faulting in the {} B of frame memory of {} partition {i}: {e}",
                        p.arena.len() * self.config.page_size,
                        self.config.name
                    )))
                }
            }
        }
        Ok(())
    }

    /// Share of each partition's frame memory resident now (tests).
    #[cfg(test)]
    pub(crate) fn frame_memory_resident(&self) -> Vec<f64> {
        self.parts.iter().map(|p| p.arena.resident_share()).collect()
    }

    /// Counters summed over partitions.
    pub fn stats(&self) -> BufferStats {
        let mut s = BufferStats::default();
        for p in self.parts.iter() {
            s.hits += p.hits.iter().map(|c| c.0.load(Relaxed)).sum::<u64>();
            s.misses += p.misses.load(Relaxed);
            s.reads += p.reads.load(Relaxed);
            s.writes += p.writes.load(Relaxed);
            s.background_writes += p.background_writes.load(Relaxed);
            s.eviction_writes += p.eviction_writes.load(Relaxed);
            s.evictions += p.evictions.load(Relaxed);
            s.io_wait_ns += p.io_wait_ns.load(Relaxed);
            s.latch_waits += p.latch_waits.load(Relaxed);
            s.latch_wait_ns += p.latch_wait_ns.load(Relaxed);
            s.reads_overlapped += p.reads_overlapped.load(Relaxed);
        }
        s
    }

    /// Number of frames currently holding a page.
    pub fn resident_pages(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.arena.frames.iter().filter(|f| f.page_key.load(Relaxed) != NO_PAGE).count())
            .sum()
    }

    /// The last error the background writer hit, if any.
    pub fn background_writer_error(&self) -> Option<String> {
        self.writer.locked().as_ref().and_then(|w| w.last_error())
    }

    /// Every frame of every partition (tests age or inspect frames through it).
    #[cfg(test)]
    pub(crate) fn frames_for_tests(&self) -> impl Iterator<Item = &super::frames::Frame> {
        self.parts.iter().flat_map(|p| p.arena.frames.iter())
    }
}

impl BufferPool {
    /// Stops the background writer and waits for its round in progress to end, so that no
    /// page of this pool is written after this returns (unless an eviction writes it). Called
    /// when the database closes: a writer that outlived its database could write a stale page
    /// over a file the next opener has already recovered. Idempotent.
    pub(crate) fn stop_writer(&self) {
        let w = self.writer.locked().take();
        if let Some(w) = w {
            w.stop();
        }
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        self.stop_writer();
    }
}
