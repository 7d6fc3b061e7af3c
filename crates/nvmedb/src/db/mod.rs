//! The embedded database handle.
//!
//! Owns: `Database` (open/create over a `Storage`, create and open tables, flush, stats),
//! `Options`, and the mapping from tables to files (named in [`crate::table::files`]).
//! Invariant: the catalog only names trees whose root pages have been written and synced.

use crate::btree::BTree;
use crate::util::sync::{MutexExt, RwLockExt};
mod ddl;
mod load;
mod recovery;
mod tablespace;
mod transaction;

pub use crate::table::catalog::DEFAULT_TABLESPACE;
pub use crate::table::files::{heap_name, index_name, CATALOG_FILE};
pub use ddl::{convert_row, BulkLoad};
pub use load::LOAD_PROGRESS_EVERY;
pub use recovery::RecoveryReport;
pub(crate) use recovery::{PageFiles, Redo, RedoPages};
pub use tablespace::{parse_profile, TableAccess, TablespaceSpec, Tablespaces};
pub use transaction::{Isolation, Transaction};

use crate::buffer::{BackgroundWriter, BufferPolicy, BufferPool, BufferStats, PoolConfig};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::table::catalog::{CatalogData, CatalogStore, TableMeta};
use crate::table::{HeapFile, Table};
use crate::txn::TxnShared;
use crate::wal::engine::{
    EngineLog, EngineRecord, RecoveryRecord, TxnLog, TxnOp, KIND_CHECKPOINT, TAG_INDEX, TAG_TABLE,
};
use crate::wal::{FileLogOpener, LogOpener, Lsn, RecordLog, WalOptions};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

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

/// Options for opening a database.
#[derive(Debug, Clone)]
pub struct Options {
    /// Page size of table (heap) files; fixed when the database is created.
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
    pub create_if_missing: bool,
    /// Keep a write-ahead log (on by default for [`Database::open`]): every change is a
    /// transaction that is durable when it returns, and a crash loses nothing acknowledged.
    /// Without it, changes are durable only after [`Database::flush`] or close.
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
    pub huge_pages: bool,
    /// Lock-free buffer hits (see [`PoolConfig::lock_free_hits`]).
    pub lock_free_hits: bool,
    /// Asynchronous read-ahead in scans (on by default; see [`PoolConfig::async_read_ahead`]).
    pub async_read_ahead: bool,
    /// Open even though log records were lost (off by default). A page whose LSN lies beyond
    /// the end of the log proves that the log lost records that page depends on (both copies
    /// truncated or damaged, a ring lost): opening then fails with [`Error::Corruption`] naming
    /// the file and page — at open for the pages recovery reads, and on first read for the
    /// others. With this on, such pages are used as they are: the changes in the lost records
    /// are gone, and transactions they belonged to may be half there. [`Database::open`] then
    /// recovers what the log still holds, checkpoints, and starts a new log above every page
    /// LSN (the old one no longer describes the pages).
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
}

impl Default for Options {
    fn default() -> Self {
        Self {
            table_page_size: 16 * 1024,
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
        let fo = crate::io::FileOptions::default();
        let mut copies: Vec<Arc<dyn Storage>> =
            vec![Arc::new(crate::io::DirStorage::new(dir.join("wal"), fo.clone())?)];
        if let Some(m) = self.log_mirror(dir) {
            copies.push(Arc::new(crate::io::DirStorage::new(m, fo)?));
        }
        Ok(copies)
    }
}

struct DbInner {
    storage: Arc<dyn Storage>,
    /// Every tablespace's storage (the default one is `storage`).
    spaces: RwLock<tablespace::Spaces>,
    table_pool: Arc<BufferPool>,
    index_pool: Arc<BufferPool>,
    catalog: Mutex<(CatalogStore, CatalogData)>,
    tables: RwLock<HashMap<String, Table>>,
    /// Transactions: the log (when the database is durable), locks, ids.
    txn: Arc<TxnShared>,
    /// What recovery did at open.
    recovery: RecoveryReport,
    /// One checkpoint at a time.
    checkpoint_lock: Mutex<()>,
}

/// An open database. Cheap to clone; all clones share the same state.
///
/// The database closes when its last clone is closed or dropped: from then on its `Table`s
/// and `Transaction`s fail with [`Error::Closed`] (a change in progress finishes first), and
/// the directory stays locked until the last of them is dropped too.
#[derive(Clone)]
pub struct Database {
    inner: Arc<DbInner>,
}

impl Drop for DbInner {
    fn drop(&mut self) {
        self.txn.close();
        // The background writers hold the pools only between upgrades of a weak reference: a
        // round in progress would otherwise go on writing after the database is closed, over
        // files a new opener may already be recovering.
        self.table_pool.stop_writer();
        self.index_pool.stop_writer();
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Database({})", self.inner.storage.location())
    }
}

/// The largest page LSN in the database's files (pages that are not valid are skipped).
/// What opening the log and redoing it left for the rest of [`Database::open_with_log`].
struct Redone {
    /// The log, kept by a read-write open.
    log: Option<Arc<dyn RecordLog>>,
    /// The unfinished transactions, for undo.
    losers: recovery::Losers,
    /// The highest transaction id in the log (new ids continue after it).
    max_txn: u64,
    /// What recovery did so far.
    report: RecoveryReport,
}

/// The open tables by id (recovery's undo finds an operation's table by its id).
type TablesById = HashMap<u32, Table>;

fn max_page_lsn(spaces: &tablespace::Spaces, data: &CatalogData) -> Result<u64> {
    let mut max = 0;
    let mut buf = crate::io::AlignedBuf::large(1 << 20);
    for t in &data.tables {
        for (heap, name, ps) in [
            (true, heap_name(t.id), data.table_page_size as usize),
            (false, index_name(t.id), data.index_page_size as usize),
        ] {
            let dev = spaces.of(t, heap)?.open(&name, true)?;
            let cap = dev.capacity() / ps as u64 * ps as u64;
            let chunk = (buf.len() / ps * ps) as u64;
            let mut off = 0;
            while off < cap {
                let n = chunk.min(cap - off) as usize;
                let n = n.div_ceil(4096) * 4096;
                dev.read_at(off, &mut buf[..n])?;
                for page in buf[..n].chunks_exact(ps) {
                    if crate::page::PageHeader::page_type_of(page).is_some() {
                        max = max.max(crate::page::PageHeader::lsn_of(page));
                    }
                }
                off += chunk;
            }
        }
    }
    Ok(max)
}

/// Removes everything inside `dir` (a directory this open found empty and then filled).
fn clear_dir(dir: &std::path::Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

fn frames_for(size: BufferSize, page_size: usize, data_bytes: u64, key: &str) -> Result<usize> {
    let (bytes, min_frames) = match size {
        BufferSize::Bytes(b) => (b, 8),
        BufferSize::PercentOfData(p) => {
            if !(p > 0.0 && p <= 1000.0) {
                return Err(Error::Config {
                    key: key.into(),
                    detail: format!("{p}% is not a percentage in (0, 1000]"),
                });
            }
            ((data_bytes as f64 * p / 100.0) as u64, MIN_PERCENT_FRAMES)
        }
    };
    let memory = crate::buffer::physical_memory_bytes();
    if bytes > memory {
        return Err(Error::Config {
            key: key.into(),
            detail: format!("{bytes} bytes exceed this machine's memory ({memory} bytes)"),
        });
    }
    Ok(((bytes / page_size as u64) as usize).max(min_frames))
}

impl Database {
    /// Opens (or creates, per `options.create_if_missing`) the database in directory `path`,
    /// with O_DIRECT files doing their I/O through io_uring (pread/pwrite where io_uring is
    /// unavailable).
    ///
    /// - One opener at a time: the directory is locked (an advisory lock on its `LOCK` file)
    ///   while any handle of this open lives; a second open, in another process or in this one,
    ///   fails with [`IoError::Locked`](crate::io::IoError::Locked) naming the holder's process.
    /// - Creating: a missing directory, or an empty one, becomes a new database when
    ///   `create_if_missing` is on (the default). A directory that holds files but no catalog
    ///   is not a database and is refused, and an open that fails while creating removes what it
    ///   created: a failed open leaves nothing behind.
    /// - A database that keeps a log and did not shut down cleanly is recovered from it even
    ///   when `options.wal` is off (then the log is replayed and checkpointed first, and the
    ///   database continues without one); the log is never ignored.
    pub fn open(path: impl AsRef<std::path::Path>, options: Options) -> Result<Self> {
        let path = path.as_ref();
        let not_db = |what: String| {
            Error::InvalidArgument(format!("{} is not an nvmedb database: {what}", path.display()))
        };
        let existed = match std::fs::metadata(path) {
            Ok(m) if !m.is_dir() => {
                return Err(not_db("it is a file, and a database is a directory".into()));
            }
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                return Err(crate::io::IoError::os(
                    &path.display().to_string(),
                    crate::io::IoOpKind::Setup,
                    0,
                    0,
                    e,
                )
                .into())
            }
        };
        let is_db = path.join(CATALOG_FILE).exists();
        if existed && !is_db {
            let entries: Vec<String> = std::fs::read_dir(path)
                .map_err(|e| {
                    crate::io::IoError::os(&path.display().to_string(), crate::io::IoOpKind::Setup, 0, 0, e)
                })?
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .filter(|n| n != crate::io::LOCK_FILE)
                .collect();
            if let Some(first) = entries.first() {
                return Err(not_db(format!(
                    "it holds {} entries (e.g. `{first}`) but no {CATALOG_FILE}",
                    entries.len()
                )));
            }
        }
        if !is_db && !options.create_if_missing {
            return Err(Error::NotFound(format!(
                "no database at {} (create_if_missing is off)",
                path.display()
            )));
        }
        if options.read_only {
            if !is_db {
                return Err(Error::NotFound(format!(
                    "no database at {} (a read-only open never creates one)",
                    path.display()
                )));
            }
            return Self::open_dir(path, options);
        }
        let has_files = |d: &std::path::Path| std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some());
        let (file_log, fast_log) = (path.join("wal"), path.join("xlog"));
        if options.wal {
            // A database keeps one kind of log: opening it with the other would start a new,
            // empty log and silently skip the records the existing one still holds.
            let (other, dir) = match options.log {
                LogKind::Fast(_) => ("a file log", &file_log),
                LogKind::File => ("a fast log", &fast_log),
            };
            if has_files(dir) {
                return Err(Error::Config {
                    key: "log".into(),
                    detail: format!(
                        "{} keeps {other} in {}; open it with that log kind (to switch, close the database \
                         cleanly and move that directory away)",
                        path.display(),
                        dir.display()
                    ),
                });
            }
        } else if is_db && (has_files(&file_log) || has_files(&fast_log)) {
            // Without a log, nothing would replay what the log holds beyond the last checkpoint:
            // recover with it first (a cleanly closed database has nothing to replay).
            let log = match (&options.log, has_files(&fast_log)) {
                (LogKind::Fast(f), true) => LogKind::Fast(f.clone()),
                (_, true) => LogKind::Fast(FastLogOptions::default()),
                (_, false) => LogKind::File,
            };
            Self::open(path, Options { wal: true, log, ..options.clone() })?.close()?;
        }
        let mirror = options.log_mirror(path);
        let mirror_existed = mirror.as_ref().is_some_and(|m| m.exists());
        let mirror_was_empty = mirror.as_ref().is_none_or(|m| !has_files(m));
        let ring = match &options.log {
            LogKind::Fast(f) => Some(f.xlog_config(path).ring_path),
            LogKind::File => None,
        };
        let ring_existed = ring.as_ref().is_some_and(|r| r.exists());
        if options.wal && options.accept_lost_log && is_db {
            // Recover with what is left of the log, checkpoint, and start a new log above every
            // page LSN: the old one no longer covers the pages, so new records must not reuse its
            // positions.
            Self::open_dir(path, options.clone())?.close()?;
            for dir in [Some(&file_log), Some(&fast_log), mirror.as_ref()].into_iter().flatten() {
                let _ = std::fs::remove_dir_all(dir);
            }
            if let Some(r) = &ring {
                let _ = std::fs::remove_file(r);
            }
        }
        let opened = Self::open_dir(path, options);
        if opened.is_err() && !is_db {
            // A failed create leaves nothing behind (what existed was empty).
            let _ = if existed { clear_dir(path) } else { std::fs::remove_dir_all(path) };
            if let Some(mirror) = &mirror {
                if !mirror_existed {
                    let _ = std::fs::remove_dir_all(mirror);
                } else if mirror_was_empty {
                    let _ = clear_dir(mirror);
                }
            }
            if let (Some(r), false) = (&ring, ring_existed) {
                let _ = std::fs::remove_file(r);
            }
        }
        opened
    }

    fn open_dir(path: &std::path::Path, options: Options) -> Result<Self> {
        let fo = crate::io::FileOptions::default();
        let storage = crate::io::DirStorage::new(path, fo.clone())?;
        // Lock before the log directories are touched.
        if options.read_only {
            storage.lock_shared()?;
            let has_files = |d: &std::path::Path| std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some());
            if has_files(&path.join("xlog")) {
                return Err(Error::Config {
                    key: "read_only".into(),
                    detail: format!(
                        "{} keeps a fast log; a read-only open reads only the file log (open it read-write)",
                        path.display()
                    ),
                });
            }
            // The log is read to check that nothing needs recovery; nothing is written to it.
            let log = if has_files(&path.join("wal")) {
                let copies = options.file_log_copies(path)?;
                Some(Box::new(FileLogOpener { copies, options: options.wal_options.clone() })
                    as Box<dyn LogOpener>)
            } else {
                None
            };
            return Self::open_with_log(Arc::new(storage), log, options);
        }
        storage.lock()?;
        if let (true, LogKind::Fast(f)) = (options.wal, &options.log) {
            let xs: Arc<dyn Storage> = Arc::new(crate::io::DirStorage::new(path.join("xlog"), fo)?);
            let opener = crate::xlog::XLogOpener { storage: xs, config: f.xlog_config(path) };
            return Self::open_with_log(Arc::new(storage), Some(Box::new(opener)), options);
        }
        let log = if options.wal {
            let copies = options.file_log_copies(path)?;
            Some(Box::new(FileLogOpener { copies, options: options.wal_options.clone() })
                as Box<dyn LogOpener>)
        } else {
            None
        };
        Self::open_with_log(Arc::new(storage), log, options)
    }

    /// Opens (or creates) the database held by `storage`, without a log (`options.wal` is
    /// ignored): changes are durable only after [`Database::flush`] or close.
    pub fn open_with_storage(storage: Arc<dyn Storage>, options: Options) -> Result<Self> {
        Self::open_with_storages(storage, None, options)
    }

    /// Opens (or creates) the database held by `storage`, with its log duplexed on the two
    /// storages of `log` (when given): recovers from a crash first (redo from the last
    /// checkpoint, then undo of unfinished transactions), then checkpoints.
    pub fn open_with_storages(
        storage: Arc<dyn Storage>,
        log: Option<(Arc<dyn Storage>, Arc<dyn Storage>)>,
        options: Options,
    ) -> Result<Self> {
        let opener = log.map(|(primary, secondary)| {
            Box::new(FileLogOpener { copies: vec![primary, secondary], options: options.wal_options.clone() })
                as Box<dyn LogOpener>
        });
        Self::open_with_log(storage, opener, options)
    }

    /// Opens (or creates) the database held by `storage` with the log `log` opens (any
    /// [`RecordLog`](crate::wal::RecordLog): the duplexed file log, the fast log, a replicating
    /// wrapper), or without a log. Recovers first, as [`Database::open_with_storages`] does.
    ///
    /// The steps, in order: lock the directory, read (or create) the catalog, open the
    /// tablespaces, open the log and redo, size the buffer pools and attach the log to them,
    /// open the tables, delete stray files, undo unfinished transactions, record the recovery in
    /// the log, then start checkpointing.
    pub fn open_with_log(
        storage: Arc<dyn Storage>,
        log: Option<Box<dyn LogOpener>>,
        options: Options,
    ) -> Result<Self> {
        Self::lock_directory(storage.as_ref(), &options)?;
        let (store, data) = Self::read_catalog(storage.as_ref(), &options)?;
        let spaces = tablespace::Spaces::open(storage.clone(), &data, &options.tablespaces)?;
        let started = std::time::Instant::now();
        let Redone { log: file_log, losers, max_txn, mut report } =
            Self::open_log_and_redo(storage.as_ref(), &spaces, &data, log, &options)?;
        let (table_pool, index_pool) = Self::buffer_pools(&spaces, &data, &options)?;
        let txn_log = Self::attach_log(file_log, max_txn, &options, &table_pool, &index_pool)?;
        let txn = Arc::new(TxnShared::new(
            txn_log.clone(),
            options.lock_options.clone(),
            storage.clone(),
            options.read_only,
            options.row_hint_bytes,
        )?);
        let (tables, by_id) = Self::open_tables(&spaces, &data, &table_pool, &index_pool, &txn)?;
        // Files of tables that are not in the catalog, or not where it places them: dropped (the
        // drop stopped before deleting them), rebuilt copies that were never switched in, and
        // either side of an interrupted move.
        if !options.read_only {
            spaces.remove_strays(&data)?;
        }
        if let Some(t) = &txn_log {
            Self::undo_losers(t, &losers, &by_id, &mut report)?;
            report.micros = started.elapsed().as_micros() as u64;
            Self::log_recovery(t, &report)?;
        }
        let db = Self {
            inner: Arc::new(DbInner {
                storage,
                spaces: RwLock::new(spaces),
                table_pool,
                index_pool,
                catalog: Mutex::new((store, data)),
                tables: RwLock::new(tables),
                txn,
                recovery: report,
                checkpoint_lock: Mutex::new(()),
            }),
        };
        db.start_checkpointing()?;
        Ok(db)
    }

    /// Takes the directory's lock: one writer at a time (a second one would write the same
    /// files with its own log); read-only openers share the lock and exclude writers.
    fn lock_directory(storage: &dyn Storage, options: &Options) -> Result<()> {
        if options.read_only {
            storage.lock_shared()?;
        } else {
            storage.lock()?;
        }
        Ok(())
    }

    /// Reads the catalog, or creates an empty one in an empty directory (refusing a directory
    /// of foreign files, a read-only open, `create_if_missing: false` and bad page sizes).
    fn read_catalog(storage: &dyn Storage, options: &Options) -> Result<(CatalogStore, CatalogData)> {
        if storage.exists(CATALOG_FILE) {
            let dev = storage.open(CATALOG_FILE, false)?;
            let (store, data) = CatalogStore::load(dev)?;
            let data = data.ok_or_else(|| Error::Corruption {
                file: format!("{}/{CATALOG_FILE}", storage.location()),
                offset: 0,
                detail: "the catalog is empty".into(),
            })?;
            return Ok((store, data));
        }
        if options.read_only {
            return Err(Error::NotFound(format!(
                "no database at {} (a read-only open never creates one)",
                storage.location()
            )));
        }
        let others = storage.list()?;
        if !others.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{} is not an nvmedb database: it holds {} file(s) (e.g. `{}`) but no {CATALOG_FILE}",
                storage.location(),
                others.len(),
                others[0]
            )));
        }
        if !options.create_if_missing {
            return Err(Error::NotFound(format!(
                "no database at {} (create_if_missing is off)",
                storage.location()
            )));
        }
        let dev = storage.open(CATALOG_FILE, true)?;
        let mut store = CatalogStore::load(dev)?.0;
        for (key, ps) in
            [("table_page_size", options.table_page_size), ("index_page_size", options.index_page_size)]
        {
            if ps % 4096 != 0 || !(4096..=65536).contains(&ps) {
                return Err(Error::Config {
                    key: key.into(),
                    detail: format!("{ps} is not a multiple of 4096 from 4096 to 65536"),
                });
            }
        }
        let data = CatalogData {
            table_page_size: options.table_page_size as u32,
            index_page_size: options.index_page_size as u32,
            next_table_id: 0,
            checkpoint_redo_lsn: 0,
            checkpoint_undo_lsn: 0,
            tables: Vec::new(),
            tablespaces: Vec::new(),
        };
        store.store(&data)?;
        Ok((store, data))
    }

    /// Opens the log (a new log for an existing database starts above every page LSN on disk)
    /// and redoes it from the catalog's checkpoint. A read-only open keeps no log and refuses
    /// one that needs recovery.
    fn open_log_and_redo(
        storage: &dyn Storage,
        spaces: &tablespace::Spaces,
        data: &CatalogData,
        log: Option<Box<dyn LogOpener>>,
        options: &Options,
    ) -> Result<Redone> {
        let Some(opener) = log else {
            return Ok(Redone {
                log: None,
                losers: Default::default(),
                max_txn: 0,
                report: Default::default(),
            });
        };
        let mut initial_lsn = 0;
        if opener.is_empty()? && !data.tables.is_empty() {
            // A new log for an existing database (first use of a log, or a log that was reset):
            // it must start above every page LSN on disk, or the WAL rule and redo would compare
            // positions of two different logs.
            initial_lsn = max_page_lsn(spaces, data)?.max(data.checkpoint_redo_lsn) + 1;
        }
        let file_log = opener.open(initial_lsn)?;
        let (losers, max_txn, report) =
            recovery::redo(spaces, data, file_log.as_ref(), options.accept_lost_log, options.read_only)?;
        if !options.read_only {
            return Ok(Redone { log: Some(file_log), losers, max_txn, report });
        }
        // A read-only open only checked the log: it keeps none.
        if report.pages_redone > 0 || report.losers > 0 {
            return Err(Error::ReadOnly(format!(
                "{} did not shut down cleanly: its log holds changes recovery must write to the data \
                 files ({} unfinished transaction(s); page changes from LSN {}); open it read-write once",
                storage.location(),
                report.losers,
                report.redo_from
            )));
        }
        Ok(Redone { log: None, losers, max_txn, report })
    }

    /// The table and index buffer pools, sized from the options and the data files' sizes.
    fn buffer_pools(
        spaces: &tablespace::Spaces,
        data: &CatalogData,
        options: &Options,
    ) -> Result<(Arc<BufferPool>, Arc<BufferPool>)> {
        let tps = data.table_page_size as usize;
        let ips = data.index_page_size as usize;
        let mut heap_bytes = 0;
        let mut index_bytes = 0;
        for t in &data.tables {
            heap_bytes += spaces.of(t, true)?.open(&heap_name(t.id), true)?.capacity();
            index_bytes += spaces.of(t, false)?.open(&index_name(t.id), true)?.capacity();
        }
        let mut tcfg =
            PoolConfig::new(tps, frames_for(options.table_buffer, tps, heap_bytes, "table_buffer")?);
        tcfg.policy = options.policy;
        tcfg.name = "table buffer (Options::table_buffer)".into();
        tcfg.background_writer = options.background_writer;
        tcfg.huge_pages = options.huge_pages;
        tcfg.lock_free_hits = options.lock_free_hits;
        tcfg.async_read_ahead = options.async_read_ahead;
        let mut icfg =
            PoolConfig::new(ips, frames_for(options.index_buffer, ips, index_bytes, "index_buffer")?);
        icfg.pin_index_pages = options.pin_indexes;
        icfg.name = "index buffer (Options::index_buffer)".into();
        icfg.huge_pages = options.huge_pages;
        icfg.lock_free_hits = options.lock_free_hits;
        Ok((BufferPool::new(tcfg)?, BufferPool::new(icfg)?))
    }

    /// Wraps the log in the engine's transaction log (ids continue after `max_txn`) and makes
    /// both pools log their page changes to it and obey the WAL rule.
    fn attach_log(
        file_log: Option<Arc<dyn RecordLog>>,
        max_txn: u64,
        options: &Options,
        table_pool: &BufferPool,
        index_pool: &BufferPool,
    ) -> Result<Option<Arc<TxnLog>>> {
        let Some(fl) = file_log else { return Ok(None) };
        let end = fl.end_lsn();
        let log = EngineLog::new(fl, end);
        let log = if options.accept_lost_log { log.accept_lost_log() } else { log };
        let t = Arc::new(TxnLog::new(Arc::new(log), max_txn));
        table_pool.set_page_logger(t.log().clone(), TAG_TABLE)?;
        index_pool.set_page_logger(t.log().clone(), TAG_INDEX)?;
        table_pool.set_wal_gate(t.log().clone());
        index_pool.set_wal_gate(t.log().clone());
        Ok(Some(t))
    }

    /// Opens every table of the catalog, by name and by id.
    fn open_tables(
        spaces: &tablespace::Spaces,
        data: &CatalogData,
        table_pool: &Arc<BufferPool>,
        index_pool: &Arc<BufferPool>,
        txn: &Arc<TxnShared>,
    ) -> Result<(HashMap<String, Table>, TablesById)> {
        let mut tables = HashMap::new();
        let mut by_id = HashMap::new();
        for t in &data.tables {
            let table = Self::attach(spaces, table_pool, index_pool, t, txn.clone())?;
            by_id.insert(t.id, table.clone());
            tables.insert(t.name.clone(), table);
        }
        Ok((tables, by_id))
    }

    /// Undoes what unfinished transactions did, every loser's operations in one pass, newest
    /// first by LSN, then logs their aborts.
    ///
    /// The order is the log's, whatever the transactions' ids: strict two-phase locking, and
    /// with early lock release the log's order (a transaction changes a row another released
    /// only after that one's commit record, so both are losers only if neither record is
    /// durable, and then the second's change is not either), keep two losers from changing the
    /// same row; undoing in reverse log order does not rely on it.
    fn undo_losers(
        t: &TxnLog,
        losers: &recovery::Losers,
        by_id: &TablesById,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let mut ops: Vec<&(Lsn, TxnOp)> = losers.values().flatten().collect();
        ops.sort_unstable_by_key(|(lsn, _)| std::cmp::Reverse(*lsn));
        for (_, op) in ops {
            if let Some(table) = by_id.get(&op.table) {
                table.restore(op)?;
                report.ops_undone += 1;
            }
        }
        for &id in losers.keys() {
            t.abort(id)?;
        }
        Ok(())
    }

    /// Records what recovery did in the log (`nvmedb inspect --log` shows it).
    fn log_recovery(t: &TxnLog, report: &RecoveryReport) -> Result<()> {
        let rec = EngineRecord::Recovery(RecoveryRecord {
            redo_from: report.redo_from,
            log_end: report.log_end,
            records: report.records,
            pages_redone: report.pages_redone,
            full_images: report.full_images_applied,
            losers: report.losers,
            ops_undone: report.ops_undone,
            micros: report.micros,
        });
        t.log().append(rec.kind(), &rec.encode())?;
        Ok(())
    }

    /// With a log: installs the hook through which transaction starts take the checkpoints the
    /// log asks for, and takes the first checkpoint (the recovered state becomes the redo start).
    fn start_checkpointing(&self) -> Result<()> {
        if self.inner.txn.log.is_none() {
            return Ok(());
        }
        let weak = Arc::downgrade(&self.inner);
        let hook = move || {
            if let Some(inner) = weak.upgrade() {
                // A failure here shows again where it matters (the next commit or
                // checkpoint); the caller is starting a transaction, not checkpointing.
                let _ = Database { inner }.checkpoint_if_wanted();
            }
        };
        let _ = self.inner.txn.checkpointer.set(Box::new(hook));
        self.checkpoint()
    }

    /// What recovery did when this database was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// A fuzzy checkpoint: raises the full-image horizon, writes every dirty page (while other
    /// threads keep working), records the new redo start in the catalog, and releases log
    /// segments no longer needed. Without a log it is [`Database::flush`].
    pub fn checkpoint(&self) -> Result<()> {
        if self.inner.txn.log.is_none() {
            return self.flush();
        }
        let _one = self.inner.checkpoint_lock.locked();
        self.checkpoint_locked()
    }

    /// Checkpoints when the log asks for it ([`RecordLog::wants_checkpoint`](crate::wal::RecordLog::wants_checkpoint))
    /// and no checkpoint is running; called at transaction start (explicit or auto-commit).
    pub(crate) fn checkpoint_if_wanted(&self) -> Result<()> {
        let Some(t) = &self.inner.txn.log else { return Ok(()) };
        if !t.log().record_log().wants_checkpoint() {
            return Ok(());
        }
        match self.inner.checkpoint_lock.try_lock() {
            Ok(_one) => self.checkpoint_locked(),
            Err(_) => Ok(()),
        }
    }

    fn checkpoint_locked(&self) -> Result<()> {
        let Some(t) = &self.inner.txn.log else { return self.flush() };
        let redo = t.log().begin_checkpoint();
        let undo = t.oldest_active_lsn().map_or(redo, |a| a.min(redo));
        // A transaction leaves the active set when its commit record is appended; with early
        // lock release (or between the append and the flush in any case) that record may not
        // be durable yet. The undo start may skip such a transaction's operations, so every
        // commit appended so far must be durable before the catalog names that start.
        t.log().wait_durable(t.log().record_log().end_lsn())?;
        self.flush()?;
        {
            let mut cat = self.inner.catalog.locked();
            let mut next = cat.1.clone();
            next.checkpoint_redo_lsn = redo;
            next.checkpoint_undo_lsn = undo;
            cat.0.store(&next)?;
            cat.1 = next;
        }
        let end = t.log().append(KIND_CHECKPOINT, &EngineRecord::Checkpoint { redo, undo }.encode())?;
        t.log().wait_durable(end)?;
        t.log().record_log().truncate_before(undo)?;
        Ok(())
    }

    pub(crate) fn txn_shared(&self) -> &Arc<TxnShared> {
        &self.inner.txn
    }

    /// Counters of the lock manager (requests, waits, deadlocks, wait times).
    pub fn lock_stats(&self) -> crate::txn::LockStats {
        self.inner.txn.locks.stats()
    }

    /// The log, when the database keeps one.
    pub fn engine_log(&self) -> Option<&Arc<EngineLog>> {
        self.inner.txn.log.as_ref().map(|t| t.log())
    }

    fn attach(
        spaces: &tablespace::Spaces,
        table_pool: &Arc<BufferPool>,
        index_pool: &Arc<BufferPool>,
        t: &TableMeta,
        txn: Arc<TxnShared>,
    ) -> Result<Table> {
        table_pool.register_file(t.id, spaces.of(t, true)?.open(&heap_name(t.id), true)?)?;
        index_pool.register_file(t.id, spaces.of(t, false)?.open(&index_name(t.id), true)?)?;
        let heap = HeapFile::open(table_pool.clone(), t.id, &heap_name(t.id))?;
        let primary = BTree::open(index_pool.clone(), t.id, t.primary_root);
        let secondaries = t.index_roots.iter().map(|&r| BTree::open(index_pool.clone(), t.id, r)).collect();
        Ok(Table::new(t.id, t.name.clone(), t.schema.clone(), heap, primary, secondaries, txn))
    }

    /// Opens a table by name.
    pub fn table(&self, name: &str) -> Result<Table> {
        self.inner
            .tables
            .read_locked()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("table `{name}` in {}", self.inner.storage.location())))
    }

    /// Names of all tables, sorted.
    pub fn table_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner.tables.read_locked().keys().cloned().collect();
        v.sort();
        v
    }

    /// Writes every dirty page and syncs the files.
    pub fn flush(&self) -> Result<()> {
        self.inner.table_pool.flush_all()?;
        self.inner.index_pool.flush_all()
    }

    /// Counters of the table pool and the index pool.
    pub fn buffer_stats(&self) -> (BufferStats, BufferStats) {
        (self.inner.table_pool.stats(), self.inner.index_pool.stats())
    }

    /// Faults the memory of both buffer pools in now (see [`BufferPool::prefault`]): a server
    /// or a benchmark calls it after opening, so reads do not pay for allocating and zeroing
    /// buffer memory the first time each frame is used. Costs the pools' whole size in
    /// resident memory at once.
    pub fn prefault_buffers(&self) -> Result<()> {
        self.inner.table_pool.prefault()?;
        self.inner.index_pool.prefault()
    }

    /// The table buffer pool (for the lab and inspection).
    pub fn table_pool(&self) -> &Arc<BufferPool> {
        &self.inner.table_pool
    }

    /// The index buffer pool (for the lab and inspection).
    pub fn index_pool(&self) -> &Arc<BufferPool> {
        &self.inner.index_pool
    }

    /// Where the database lives.
    pub fn location(&self) -> String {
        self.inner.storage.location()
    }

    /// Catalog contents (for inspection).
    pub fn catalog(&self) -> CatalogData {
        self.inner.catalog.locked().1.clone()
    }

    /// Checkpoints (or flushes, without a log) and closes this handle (other clones stay
    /// usable).
    pub fn close(self) -> Result<()> {
        self.checkpoint()?;
        self.save_access_stats()
    }
}
