//! The steps of [`Database::open_with_log`], in order: lock the directory, read (or create)
//! the catalog, open the tablespaces, restore torn pages from the double-write area, open the
//! log and redo, size the buffer pools and attach the log to them, open the tables, delete
//! stray files, undo unfinished transactions, record the recovery in the log, then start
//! checkpointing.
//!
//! Owns: each step, and sizing the pools from the options and the data files. Invariants: the
//! directory is locked before anything is read; torn pages are restored (and synced) before
//! redo reads any page, and only then does the double-write area start a new generation; a
//! new log for an existing database starts above every page LSN on disk; a read-only open
//! keeps no log and refuses one that needs recovery; losers are undone in reverse LSN order
//! before anything else changes.

use super::{
    heap_name, index_name, recovery, tablespace, BufferSize, Database, DbInner, Options, RecoveryReport,
    TornPageProtection, CATALOG_FILE, MIN_PERCENT_FRAMES,
};
use crate::btree::BTree;
use crate::buffer::{BufferPool, DoubleWrite, PoolConfig, DOUBLEWRITE_FILE};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::table::catalog::{CatalogData, CatalogStore, TableMeta};
use crate::table::{HeapFile, Table};
use crate::txn::TxnShared;
use crate::wal::engine::{EngineLog, EngineRecord, RecoveryRecord, TxnLog, TxnOp, TAG_INDEX, TAG_TABLE};
use crate::wal::{LogOpener, Lsn, RecordLog};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

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

/// The largest page LSN in the database's files (pages that are not valid are skipped).
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
    /// Opens (or creates) the database held by `storage` with the log `log` opens (any
    /// [`RecordLog`]: the duplexed file log, the fast log, a replicating
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
        let (doublewrite, restored) = Self::restore_torn_pages(storage.as_ref(), &spaces, &data, &options)?;
        let Redone { log: file_log, losers, max_txn, mut report } =
            Self::open_log_and_redo(storage.as_ref(), &spaces, &data, log, &options, doublewrite.clone())?;
        report.pages_restored = restored;
        let (table_pool, index_pool) = Self::buffer_pools(&spaces, &data, &options)?;
        if let Some(dw) = &doublewrite {
            table_pool.set_doublewrite(dw.clone(), TAG_TABLE)?;
            index_pool.set_doublewrite(dw.clone(), TAG_INDEX)?;
        }
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
                checkpoint_ns: crate::util::hist::AtomicHistogram::new(&crate::util::hist::NANOS_BOUNDS),
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

    /// Restores the pages a crash tore during their write-back from their copies in the
    /// double-write file (whatever the protection chosen now: the last opener may have chosen
    /// the area), then, with [`TornPageProtection::DoubleWrite`], starts the area's new
    /// generation, which every in-place write goes through from now on; with another
    /// protection the file is removed (its copies would be older than later writes). Returns
    /// the area and the number of pages restored. A read-only open restores nothing (such a
    /// page reads as a checksum failure that names it).
    fn restore_torn_pages(
        storage: &dyn Storage,
        spaces: &tablespace::Spaces,
        data: &CatalogData,
        options: &Options,
    ) -> Result<(Option<Arc<DoubleWrite>>, u64)> {
        let live: std::collections::HashSet<u32> = data.tables.iter().map(|t| t.id).collect();
        let sizes = (data.table_page_size as usize, data.index_page_size as usize);
        let files = recovery::PageFiles::Placed(spaces, data);
        let rep = recovery::repair_torn_pages(storage, files, Some(&live), sizes, !options.read_only)?;
        if options.read_only {
            // Nothing is written: a page the area could restore (torn by a crash, or damaged
            // since) reads as a checksum failure naming it, which is what `nvmedb inspect` is
            // for; a read-write open restores it.
            return Ok((None, 0));
        }
        if options.torn_page_protection != TornPageProtection::DoubleWrite {
            if !rep.missing {
                storage.remove(DOUBLEWRITE_FILE)?;
            }
            return Ok((None, rep.pages_restored));
        }
        Ok((Some(DoubleWrite::create(storage, options.doublewrite_bytes)?), rep.pages_restored))
    }

    /// Opens the log (a new log for an existing database starts above every page LSN on disk)
    /// and redoes it from the catalog's checkpoint, writing pages back through `doublewrite`.
    /// A read-only open keeps no log and refuses one that needs recovery.
    fn open_log_and_redo(
        storage: &dyn Storage,
        spaces: &tablespace::Spaces,
        data: &CatalogData,
        log: Option<Box<dyn LogOpener>>,
        options: &Options,
        doublewrite: Option<Arc<DoubleWrite>>,
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
        let (losers, max_txn, report) = recovery::redo(
            spaces,
            data,
            file_log.as_ref(),
            options.accept_lost_log,
            options.read_only,
            doublewrite,
        )?;
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
        let log = EngineLog::new(fl);
        let log = if options.accept_lost_log { log.accept_lost_log() } else { log };
        let log = match options.torn_page_protection {
            TornPageProtection::FullPageImages => log.with_full_page_images(),
            TornPageProtection::DoubleWrite | TornPageProtection::None => log,
        };
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
}
