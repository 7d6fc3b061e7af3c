//! The embedded database handle.
//!
//! Owns: `Database` (open/create over a `Storage`, create and open tables, flush, stats),
//! `Options`, and the mapping from tables to files (named in [`crate::table::files`]).
//! Invariant: the catalog only names trees whose root pages have been written and synced.
//!
//! By seam: `options.rs` (what an opener chooses), `open.rs` (opening a directory: checks,
//! log-kind consistency, cleanup of a failed create), `steps.rs` (`open_with_log`'s steps in
//! order), `checkpoint.rs` (fuzzy checkpoints), `ddl.rs`, `load.rs`, `recovery.rs`,
//! `tablespace.rs`, `transaction.rs`; the handle, its tables and its counters are here.

use crate::util::sync::{MutexExt, RwLockExt};
mod checkpoint;
mod ddl;
mod load;
mod open;
mod options;
mod recovery;
mod steps;
mod tablespace;
mod transaction;

pub use crate::table::catalog::DEFAULT_TABLESPACE;
pub use crate::table::files::{heap_name, index_name, CATALOG_FILE};
pub use ddl::{convert_row, BulkLoad};
pub use load::LOAD_PROGRESS_EVERY;
pub use options::{
    BufferSize, FastLogOptions, LogKind, Options, TornPageProtection, DEFAULT_LOG_MIRROR_DIR,
    MIN_PERCENT_FRAMES,
};
pub use recovery::RecoveryReport;
pub(crate) use recovery::{repair_torn_pages, PageFiles, Redo, RedoPages};
pub use tablespace::{parse_profile, TableAccess, TablespaceSpec, Tablespaces};
pub use transaction::{Isolation, Transaction};

use crate::buffer::{BufferPool, BufferStats};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::table::catalog::{CatalogData, CatalogStore};
use crate::table::Table;
use crate::txn::TxnShared;
use crate::wal::engine::EngineLog;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

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
    /// How long each checkpoint took, in nanoseconds (the operational metrics).
    checkpoint_ns: crate::util::hist::AtomicHistogram,
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

impl Database {
    /// What recovery did when this database was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    pub(crate) fn txn_shared(&self) -> &Arc<TxnShared> {
        &self.inner.txn
    }

    /// Counters of the lock manager (requests, waits, deadlocks, wait times).
    pub fn lock_stats(&self) -> crate::txn::LockStats {
        self.inner.txn.locks.stats()
    }

    /// Number of key-range locks serializable transactions hold (see
    /// [`Transaction::range`]); zero once they have all ended.
    pub fn range_lock_count(&self) -> usize {
        self.inner.txn.locks.range_lock_count()
    }

    /// The log, when the database keeps one.
    pub fn engine_log(&self) -> Option<&Arc<EngineLog>> {
        self.inner.txn.log.as_ref().map(|t| t.log())
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

    /// Counters of the double-write area both pools write through since the open (`None`
    /// unless [`Options::torn_page_protection`] is the double-write area).
    pub fn doublewrite_stats(&self) -> Option<crate::buffer::DoubleWriteStats> {
        self.inner.table_pool.doublewrite().map(|dw| dw.stats())
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
