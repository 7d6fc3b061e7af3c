//! What an opener chooses: buffer sizes, the log kind and its options, and every other
//! setting of [`Options`], with the defaults a user gets.
//!
//! Owns: [`Options`], [`BufferSize`], [`LogKind`], [`FastLogOptions`], and where the file
//! log's copies live. Invariant: `Options::default()` is the configuration the engine is
//! tuned and tested for; every field says its default.

use super::Tablespaces;
use crate::buffer::{BackgroundWriter, BufferPolicy};
use crate::error::Result;
use crate::io::Storage;
use crate::wal::WalOptions;
use std::sync::Arc;

/// How much memory a buffer pool gets. A pool is sized once, when the database is opened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BufferSize {
    /// A fixed number of bytes (at least 8 frames).
    Bytes(u64),
    /// A percentage (in (0, 1000]) of the pool's data files (heap files for the table pool,
    /// index files for the index pool) as they are when the database is opened, and at least
    /// [`MIN_PERCENT_FRAMES`] frames — which is what an empty database gets. The pool does not
    /// grow with the data: a database loaded after it was opened keeps the size it got then
    /// until it is reopened, so give a database that starts empty and grows a
    /// [`BufferSize::Bytes`] (the default: 64 MiB per pool) or reopen it after loading.
    PercentOfData(f64),
}

/// The fewest frames a [`BufferSize::PercentOfData`] pool gets (an empty database's size).
pub const MIN_PERCENT_FRAMES: usize = 16;

/// Which log [`Database::open`] keeps (when `Options::wal` is on).
///
/// [`Database::open`]: super::Database::open
#[derive(Debug, Clone, Default)]
pub enum LogKind {
    /// The file log: O_DIRECT segments in `<dir>/wal`, duplexed into a second directory when
    /// [`Options::log_mirror_dir`] names one; a commit waits for fdatasync of every copy
    /// (survives power loss).
    #[default]
    File,
    /// The fast log (software X-SSD): a commit waits on the credit counter of a ring in a mapped
    /// file; the conventional log ring and metadata live in `<dir>/xlog`. What it survives is
    /// the ring's backing: tmpfs (the default, `/dev/shm`) survives kill -9, **not** power loss.
    Fast(FastLogOptions),
}

/// Options of [`LogKind::Fast`].
#[derive(Debug, Clone)]
pub struct FastLogOptions {
    /// The ring file (default: [`XLogOpener::default_ring_path`](crate::xlog::XLogOpener::default_ring_path),
    /// on /dev/shm).
    pub ring_path: Option<std::path::PathBuf>,
    /// Ring capacity in bytes.
    pub ring_bytes: usize,
    /// Negotiated queue size in bytes.
    pub queue_bytes: usize,
    /// Conventional log ring length in 4 KiB pages.
    pub conv_pages: u64,
    /// Partial pages are destaged after this long.
    pub destage_latency: std::time::Duration,
    /// Whether a ring on a disk file is msynced before the counter covers it (irrelevant on
    /// tmpfs/DAX).
    pub msync: crate::xlog::MsyncPolicy,
}

impl Default for FastLogOptions {
    /// 8 MiB ring, 32 KiB queue, 64 MiB conventional ring, 200 µs destage threshold.
    fn default() -> Self {
        Self {
            ring_path: None,
            ring_bytes: 8 << 20,
            queue_bytes: 32 << 10,
            conv_pages: 16 * 1024,
            destage_latency: std::time::Duration::from_micros(200),
            msync: crate::xlog::MsyncPolicy::Always,
        }
    }
}

impl FastLogOptions {
    /// The fast log's configuration for a database in `db_dir`.
    pub fn xlog_config(&self, db_dir: &std::path::Path) -> crate::xlog::XLogConfig {
        let ring =
            self.ring_path.clone().unwrap_or_else(|| crate::xlog::XLogOpener::default_ring_path(db_dir));
        let mut c = crate::xlog::XLogConfig::new(ring);
        c.ring_bytes = self.ring_bytes;
        c.queue_bytes = self.queue_bytes;
        c.conv_pages = self.conv_pages;
        c.destage_latency = self.destage_latency;
        c.msync = self.msync;
        c.destage_batch_pages = c.destage_batch_pages.min(self.conv_pages as usize);
        c
    }
}

/// How a page torn by a crash during its write-back (some of its sectors new, the rest old) is
/// repaired. Every page carries a checksum, so a torn page is always detected; this chooses
/// what restores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TornPageProtection {
    /// The default: every in-place write of data pages (evictions, the background writer, the
    /// checkpoint's flush, recovery's write-back) first writes copies of the pages to the
    /// double-write area (`doublewrite.nvdw` in the data directory, [`Options::doublewrite_bytes`]
    /// long) and syncs it; an open restores a torn page from its copy before redo. The log
    /// holds no full page images: a page's first change after a checkpoint is a diff like any
    /// other (InnoDB's doublewrite buffer). Costs one extra write and sync per batch of
    /// write-backs, which concurrent writers share.
    #[default]
    DoubleWrite,
    /// The first change of each page after each checkpoint is logged as a full page image,
    /// which redo applies to a torn page (PostgreSQL's full_page_writes): no extra data writes,
    /// but a page image in the log per page touched after each checkpoint.
    FullPageImages,
    /// No protection: only for devices whose page-sized writes are atomic (a write of a page
    /// reaches the medium whole or not at all, even at a power loss: some NVMe SSDs with power
    /// loss protection and atomic write units of at least the page size, ZFS and other
    /// copy-on-write file systems, battery-backed RAM). On any other device a crash during a
    /// write-back can leave a torn page that nothing repairs: the database then fails to open
    /// (redo finds the page unreadable) or reports the page corrupt when it is read.
    None,
}

/// Options for opening a database.
#[derive(Debug, Clone)]
pub struct Options {
    /// Page size of table (heap) files; fixed when the database is created (a database keeps
    /// the size its catalog records, whatever an opener passes). Default 8 KiB, chosen by
    /// measurement (`docs/engine-benchmarks.md`): lookups that miss the buffer ran 1.1-1.4x
    /// faster than with 16 KiB pages (one 8 KiB read per miss), scans under the default policy
    /// as fast and TPC-C in memory no slower, where 4 KiB pages made misses faster still but
    /// scans 2-5x slower. Rows larger than a page are stored in overflow pages.
    pub table_page_size: usize,
    /// Page size of index files; fixed when the database is created.
    pub index_page_size: usize,
    /// Memory for table pages.
    pub table_buffer: BufferSize,
    /// Memory for index pages.
    pub index_buffer: BufferSize,
    /// Buffer sharing policy of the table pool (the index pool is always shared).
    pub policy: BufferPolicy,
    /// Keep index pages resident once loaded ("all indexes cached", on by default): an index
    /// page is not evicted while the index pages leave an eighth of the index buffer free, and
    /// a lookup's hit on it takes no pin. An index larger than the index buffer still works:
    /// its pages are then evicted like any others (size [`Options::index_buffer`] to hold the
    /// indexes whole to keep them all resident).
    pub pin_indexes: bool,
    /// Background writer of the table pool (on by default: it keeps clean frames ahead of the
    /// clock hand, so a transaction that needs a frame rarely writes a dirty page itself; `None`
    /// makes every eviction of a dirty page write it on the evicting thread).
    pub background_writer: Option<BackgroundWriter>,
    /// Create the database if the storage holds none (on by default). Creating is safe to
    /// leave on: only a missing or empty directory is created into (one holding other files is
    /// refused), and an open that fails while creating removes everything it created. Turn it
    /// off to make a missing database an error ([`Error::NotFound`]).
    ///
    /// [`Error::NotFound`]: crate::error::Error::NotFound
    pub create_if_missing: bool,
    /// Keep a write-ahead log (on by default for [`Database::open`]): every change is a
    /// transaction that is durable when it returns, and a crash loses nothing acknowledged.
    /// Without it, changes are durable only after [`Database::flush`] or close.
    ///
    /// [`Database::open`]: super::Database::open
    /// [`Database::flush`]: super::Database::flush
    pub wal: bool,
    /// Duplex the file log: a second copy of every flush goes to this directory, written in
    /// parallel with the first, and a commit waits for both (put it on another device, so the
    /// log survives losing one). `None` (the default): a single log in `<dir>/wal`, whose
    /// commits cost one write + fdatasync — except that a database whose `<dir>/wal-mirror`
    /// already holds log segments (created duplexed with that default mirror) stays duplexed.
    pub log_mirror_dir: Option<std::path::PathBuf>,
    /// Log options of the file log (segment size, group commit).
    pub wal_options: WalOptions,
    /// Which log to keep (default: the file log).
    pub log: LogKind,
    /// Lock waits: spin, park, timeout, deadlock detection.
    pub lock_options: crate::txn::LockOptions,
    /// Transparent huge pages for buffer memory (see [`PoolConfig::huge_pages`]).
    ///
    /// [`PoolConfig::huge_pages`]: crate::buffer::PoolConfig::huge_pages
    pub huge_pages: bool,
    /// Lock-free buffer hits (see [`PoolConfig::lock_free_hits`]).
    ///
    /// [`PoolConfig::lock_free_hits`]: crate::buffer::PoolConfig::lock_free_hits
    pub lock_free_hits: bool,
    /// Asynchronous read-ahead in scans (on by default; see [`PoolConfig::async_read_ahead`]).
    ///
    /// [`PoolConfig::async_read_ahead`]: crate::buffer::PoolConfig::async_read_ahead
    pub async_read_ahead: bool,
    /// Open even though log records were lost (off by default). A page whose LSN lies beyond
    /// the end of the log proves that the log lost records that page depends on (both copies
    /// truncated or damaged, a ring lost): opening then fails with [`Error::Corruption`] naming
    /// the file and page — at open for the pages recovery reads, and on first read for the
    /// others. With this on, such pages are used as they are: the changes in the lost records
    /// are gone, and transactions they belonged to may be half there. [`Database::open`] then
    /// recovers what the log still holds, checkpoints, and starts a new log above every page
    /// LSN (the old one no longer describes the pages).
    ///
    /// [`Error::Corruption`]: crate::error::Error::Corruption
    /// [`Database::open`]: super::Database::open
    pub accept_lost_log: bool,
    /// Storages of named tablespaces, by name (RAM or emulated devices the opener builds). A
    /// tablespace the catalog names that is not supplied here is reopened from its catalog entry
    /// (its directory, behind its profile).
    pub tablespaces: Tablespaces,
    /// Open without changing anything (off by default). Several read-only openers, in this
    /// process or others, may share a directory (each takes the directory's lock shared), while
    /// a writer excludes them and they exclude a writer ([`IoError::Locked`](crate::io::IoError::Locked)).
    /// Every change — insert, update, delete, DDL — fails with [`Error::ReadOnly`]; reads and
    /// read-only transactions work as usual. A read-only open never creates a database, and
    /// refuses one that did not shut down cleanly (its log holds changes that recovery would
    /// have to write): open it read-write once first. Only the file log is read (a database
    /// keeping the fast log is refused).
    ///
    /// [`Error::ReadOnly`]: crate::error::Error::ReadOnly
    pub read_only: bool,
    /// Memory for row-id hints (64 MiB by default; 0 turns them off): each table remembers
    /// where the rows of the primary keys it reads were found, so a point read
    /// ([`Table::read`](crate::Table::read), [`Table::read_many`](crate::Table::read_many), reads
    /// in read-committed transactions) goes straight to the row's page instead of descending the
    /// primary index. A hint is checked under the page's latch and never trusted: a row that
    /// moved or went is looked up in the index again. A table's map starts at 64 KiB and
    /// doubles as the keys read outgrow it (64 bytes per 4 entries, grown once half are in
    /// use: at most 64 bytes per key read, 21–42 measured), while the tables' maps together stay within this.
    pub row_hint_bytes: usize,
    /// What repairs pages torn by a crash during their write-back (default: the double-write
    /// area; see [`TornPageProtection`]).
    pub torn_page_protection: TornPageProtection,
    /// Size of the double-write area's ring (default 16 MiB; at least 1 MiB). A region of the
    /// ring is reused only once the in-place writes it protects are durable, so each time the
    /// ring wraps the data files written since the last wrap are synced first: a larger area
    /// makes that rarer (a checkpoint flushing more than this many bytes of dirty pages syncs
    /// the data files about once per area's worth). Used only with
    /// [`TornPageProtection::DoubleWrite`]; the file is allocated as it is first filled.
    pub doublewrite_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            table_page_size: 8 * 1024,
            index_page_size: 4 * 1024,
            table_buffer: BufferSize::Bytes(64 << 20),
            index_buffer: BufferSize::Bytes(64 << 20),
            policy: BufferPolicy::Shared { stripes: 16 },
            pin_indexes: true,
            background_writer: Some(BackgroundWriter::default()),
            create_if_missing: true,
            wal: true,
            log_mirror_dir: None,
            wal_options: WalOptions::default(),
            log: LogKind::File,
            lock_options: crate::txn::LockOptions::default(),
            huge_pages: true,
            lock_free_hits: true,
            async_read_ahead: true,
            accept_lost_log: false,
            tablespaces: Tablespaces::new(),
            read_only: false,
            row_hint_bytes: 64 << 20,
            torn_page_protection: TornPageProtection::DoubleWrite,
            doublewrite_bytes: crate::buffer::doublewrite::DEFAULT_AREA_BYTES,
        }
    }
}

/// The directory the default mirror of the file log lives in (`<dir>/wal-mirror`).
pub const DEFAULT_LOG_MIRROR_DIR: &str = "wal-mirror";

impl Options {
    /// The mirror directory of the file log of the database in `dir`, if the log is duplexed:
    /// [`Options::log_mirror_dir`], or `<dir>/wal-mirror` when that holds files already.
    pub fn log_mirror(&self, dir: &std::path::Path) -> Option<std::path::PathBuf> {
        self.log_mirror_dir.clone().or_else(|| {
            let default = dir.join(DEFAULT_LOG_MIRROR_DIR);
            std::fs::read_dir(&default).is_ok_and(|mut r| r.next().is_some()).then_some(default)
        })
    }

    /// The copies of the file log of the database in `dir`, as O_DIRECT directory storages:
    /// `<dir>/wal`, and the mirror when the log is duplexed ([`Options::log_mirror`]).
    pub fn file_log_copies(&self, dir: &std::path::Path) -> Result<Vec<Arc<dyn Storage>>> {
        let fo = crate::io::FileOptions { read_only: self.read_only, ..Default::default() };
        let mut copies: Vec<Arc<dyn Storage>> =
            vec![Arc::new(crate::io::DirStorage::new(dir.join("wal"), fo.clone())?)];
        if let Some(m) = self.log_mirror(dir) {
            copies.push(Arc::new(crate::io::DirStorage::new(m, fo)?));
        }
        Ok(copies)
    }
}
