//! The four engines behind one small interface: nvmedb, RocksDB (the `rocksdb` crate on the
//! system's librocksdb), LMDB (`heed`) and SQLite (`rusqlite` on the system's libsqlite3).
//!
//! Owns: [`Kind`] (which engine, and how it is configured: [`Kind::configuration`] is the text
//! the report prints), [`Peer`] (an open engine: bulk load, per-thread [`Client`]s) and the
//! row format every engine stores: key `k` (a 64-bit integer; big-endian bytes where the engine
//! wants bytes) → value of the table's width whose first 8 bytes are `k` (little-endian), so
//! every lookup checks it found the right row. Invariants: every write path is durable when it
//! returns (sync on commit); a lookup that finds no row, or the wrong one, is an error.

use super::TableSpec;
use crate::error::{LabError, Result};
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Table, Value};
use std::path::{Path, PathBuf};

/// Rows per transaction (or write batch) of a bulk load, for every engine.
pub const LOAD_BATCH: u64 = 10_000;
/// Keys per batched lookup (`read_many`, RocksDB `multi_get`, one LMDB read transaction, one
/// SQLite statement loop) — nvmedb's interleaving width.
pub const MANY: usize = nvmedb::READ_BATCH;

/// An engine of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// nvmedb, `Options::default()` except the buffer sizes.
    Nvmedb,
    /// RocksDB through the `rocksdb` crate.
    Rocksdb,
    /// LMDB through `heed`.
    Lmdb,
    /// SQLite through `rusqlite`.
    Sqlite,
}

/// Every engine, nvmedb first (the ratios' numerator).
pub const KINDS: [Kind; 4] = [Kind::Nvmedb, Kind::Rocksdb, Kind::Lmdb, Kind::Sqlite];

/// How much of the table an engine may cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cache {
    /// The whole table (in-memory lookups, commits).
    Whole,
    /// This many bytes (the 1 %-buffer lookups).
    Bytes(u64),
}

impl Kind {
    /// The engine's name in tables and plots.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Nvmedb => "nvmedb",
            Kind::Rocksdb => "RocksDB",
            Kind::Lmdb => "LMDB",
            Kind::Sqlite => "SQLite",
        }
    }

    /// How the engine is configured (printed with every result).
    pub fn configuration(self) -> &'static str {
        match self {
            Kind::Nvmedb => {
                "Options::default() (its default table and index page sizes, single file log, \
                 every commit durable; O_DIRECT data files) except table_buffer/index_buffer: the \
                 whole table in memory, or a table buffer of 1 % of the data for the miss part \
                 with the primary index cached in its own buffer (its index pages stay resident, \
                 as in seed 000; RocksDB's index and filter blocks likewise stay outside its 1 % \
                 block cache; LMDB's and SQLite's 1 % include their index pages), and row-id hints at their \
                 default (Options::row_hint_bytes: up to 64 MiB, at most 64 bytes per key read, 21-42 measured, \
                 outside both buffers); loaded with \
                 Database::load_table (pages built directly: heap pages written once around the \
                 log and synced, index pages logged as images; one durable switch), then \
                 Database::flush"
            }
            Kind::Rocksdb => {
                "block-based table, 4 KiB blocks, 10-bit bloom filter, LRU block cache holding the \
                 whole table (or 1 % of the data; index and filter blocks held outside it, RocksDB's \
                 default), multi_get for batched lookups, \
                 use_direct_reads and direct flush/compaction I/O, WriteOptions.sync = true for \
                 every write, loaded through synced write batches then flushed and compacted to \
                 one level"
            }
            Kind::Lmdb => {
                "default flags (a commit syncs), map size 4 × the data; reads go through the OS \
                 page cache (LMDB has no direct I/O): for the miss part its file is dropped from \
                 the page cache before each window, which the window then refills (an upper bound)"
            }
            Kind::Sqlite => {
                "WITHOUT ROWID table (id INTEGER PRIMARY KEY, v BLOB), journal_mode = WAL, \
                 synchronous = FULL, cache_size = the whole table (or 1 % of the data), mmap off, \
                 one connection per thread with a prepared statement, busy_timeout 10 s; reads \
                 go through the OS page cache: for the miss part its file is dropped from the page \
                 cache before each window (an upper bound)"
            }
        }
    }
}

/// Wraps a peer engine's error with the engine and what the experiment was doing.
fn pe<E: std::fmt::Display>(kind: Kind, context: impl Into<String>) -> impl FnOnce(E) -> LabError {
    LabError::peer(kind.name(), context)
}

/// The value stored under `key`, `width` bytes.
pub fn value(key: u64, width: usize, version: u64) -> Vec<u8> {
    let mut v = vec![(key ^ version) as u8; width.max(8)];
    v[..8].copy_from_slice(&key.to_le_bytes());
    v
}

fn check(kind: Kind, key: u64, v: Option<&[u8]>) -> Result<()> {
    match v {
        Some(b) if b.len() >= 8 && b[..8] == key.to_le_bytes() => Ok(()),
        Some(_) => Err(LabError::Inconsistent {
            what: format!("{} lookup of key {key}", kind.name()),
            detail: "found another row's value".into(),
        }),
        None => Err(LabError::MissingRow { table: format!("{} table", kind.name()), key: key.to_string() }),
    }
}

/// The table's name inside nvmedb and SQLite.
const TABLE: &str = "kv";

/// An open engine holding one table of `rows` rows of `width`-byte values.
pub enum Peer {
    /// nvmedb.
    Nvmedb(Database, Table),
    /// RocksDB.
    Rocksdb(rocksdb::DB),
    /// LMDB.
    Lmdb(heed::Env, heed::Database<heed::types::Bytes, heed::types::Bytes>),
    /// SQLite: the database file and the cache bytes of each connection (connections are per
    /// thread).
    Sqlite(PathBuf, u64),
}

/// One thread's handle on a [`Peer`].
pub enum Client<'a> {
    /// nvmedb: the table.
    Nvmedb(&'a Table, Vec<Value>),
    /// RocksDB: the database and a synced write option.
    Rocksdb(&'a rocksdb::DB, rocksdb::WriteOptions),
    /// LMDB.
    Lmdb(&'a heed::Env, heed::Database<heed::types::Bytes, heed::types::Bytes>),
    /// SQLite: the thread's own connection.
    Sqlite(rusqlite::Connection),
}

fn sqlite_open(path: &Path, cache_bytes: u64) -> rusqlite::Result<rusqlite::Connection> {
    let c = rusqlite::Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.pragma_update(None, "mmap_size", 0)?;
    // Negative: KiB.
    c.pragma_update(None, "cache_size", -((cache_bytes / 1024).max(64) as i64))?;
    c.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY, v BLOB) WITHOUT ROWID"
    ))?;
    Ok(c)
}

impl Peer {
    /// The engine's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Peer::Nvmedb(..) => Kind::Nvmedb,
            Peer::Rocksdb(..) => Kind::Rocksdb,
            Peer::Lmdb(..) => Kind::Lmdb,
            Peer::Sqlite(..) => Kind::Sqlite,
        }
    }

    /// Opens (creating if needed) `kind` in directory `dir` for table `t`, caching as `cache`
    /// says. `table_page`: nvmedb's table page size when not `Options::default()`'s (a
    /// database that exists keeps the page size it was created with); nvmedb's value column is
    /// declared at the table's value size, so any page size that holds a row can be compared.
    pub fn open(
        kind: Kind,
        dir: &Path,
        t: &TableSpec,
        cache: Cache,
        table_page: Option<usize>,
    ) -> Result<Peer> {
        let data_bytes = t.data_bytes();
        std::fs::create_dir_all(dir).map_err(LabError::io(dir, "create directory"))?;
        // Room for the data with its page and index overheads.
        let whole = data_bytes * 2 + (64 << 20);
        let bytes = match cache {
            Cache::Whole => whole,
            Cache::Bytes(b) => b,
        };
        Ok(match kind {
            Kind::Nvmedb => {
                let mut opts = Options {
                    table_buffer: BufferSize::Bytes(bytes),
                    // The whole index cached, also when the table buffer is 1 % of the data
                    // (seed 000's "indexes cached"; a smaller index pool would evict index
                    // pages, which `Options::pin_indexes` otherwise keeps resident).
                    index_buffer: BufferSize::Bytes(whole / 4),
                    ..Options::default()
                };
                if let Some(p) = table_page {
                    opts.table_page_size = p;
                }
                let db = Database::open(dir, opts)
                    .map_err(LabError::engine(format!("opening {}", dir.display())))?;
                let t = match db.table(TABLE) {
                    Ok(t) => t,
                    Err(_) => db
                        .create_table(
                            TABLE,
                            Schema::new(vec![
                                ("id", ColumnType::Int),
                                ("v", ColumnType::Bytes(t.value_bytes as u32)),
                            ]),
                        )
                        .map_err(LabError::engine("creating the table"))?,
                };
                Peer::Nvmedb(db, t)
            }
            Kind::Rocksdb => {
                let lru = rocksdb::Cache::new_lru_cache(bytes as usize)
                    .map_err(pe(kind, "creating the block cache"))?;
                let mut table = rocksdb::BlockBasedOptions::default();
                table.set_block_cache(&lru);
                table.set_bloom_filter(10.0, false);
                // Index and filter blocks stay outside the block cache (RocksDB's default,
                // held by the table readers), as nvmedb's index stays in its own buffer: the
                // 1 % cache holds data blocks only, for both.
                table.set_cache_index_and_filter_blocks(false);
                let mut o = rocksdb::Options::default();
                o.create_if_missing(true);
                o.set_block_based_table_factory(&table);
                o.set_use_direct_reads(true);
                o.set_use_direct_io_for_flush_and_compaction(true);
                o.increase_parallelism(2);
                Peer::Rocksdb(
                    rocksdb::DB::open(&o, dir)
                        .map_err(pe(kind, format!("opening RocksDB in {}", dir.display())))?,
                )
            }
            Kind::Lmdb => {
                // SAFETY: the environment is opened once in this process and its file is not
                // changed by anything else while it is open.
                // LMDB wants a map size that is a multiple of the OS page size (64 KiB covers
                // 4, 16 and 64 KiB pages).
                let env = unsafe {
                    heed::EnvOpenOptions::new()
                        .map_size(((data_bytes * 4) as usize).max(1 << 30).next_multiple_of(1 << 16))
                        .max_readers(256)
                        .max_dbs(1)
                        .open(dir)
                }
                .map_err(pe(kind, format!("opening LMDB in {}", dir.display())))?;
                let mut w =
                    env.write_txn().map_err(pe(kind, format!("opening LMDB in {}", dir.display())))?;
                let db = env
                    .create_database(&mut w, Some(TABLE))
                    .map_err(pe(kind, format!("opening LMDB in {}", dir.display())))?;
                w.commit().map_err(pe(kind, format!("opening LMDB in {}", dir.display())))?;
                Peer::Lmdb(env, db)
            }
            Kind::Sqlite => {
                let path = dir.join("sqlite.db");
                sqlite_open(&path, bytes)
                    .map_err(pe(kind, format!("opening SQLite in {}", dir.display())))?;
                Peer::Sqlite(path, bytes)
            }
        })
    }

    /// The files to drop from the OS page cache before a cold window (engines that read through
    /// it).
    pub fn cached_files(&self, dir: &Path) -> Vec<PathBuf> {
        match self {
            Peer::Lmdb(..) => vec![dir.join("data.mdb")],
            Peer::Sqlite(p, _) => vec![p.clone(), p.with_extension("db-wal")],
            _ => Vec::new(),
        }
    }

    /// nvmedb's table page size (what its misses read), for nvmedb only.
    pub fn data_page_size(&self) -> Option<usize> {
        match self {
            Peer::Nvmedb(db, _) => Some(db.catalog().table_page_size as usize),
            _ => None,
        }
    }

    /// nvmedb's heap file (fio's random reads run on it), for nvmedb only.
    pub fn data_file(&self, dir: &Path) -> Option<PathBuf> {
        match self {
            Peer::Nvmedb(_, t) => Some(dir.join(nvmedb::table::files::heap_name(t.id()))),
            _ => None,
        }
    }

    /// Loads keys `0..rows` in key order: nvmedb through its bulk loader
    /// ([`Database::load_table`], which replaces the empty table), the peers
    /// [`LOAD_BATCH`] rows per durable transaction (or write batch).
    pub fn load(&mut self, rows: u64, width: usize, mut progress: impl FnMut(u64)) -> Result<()> {
        let kind = self.kind();
        if let Peer::Nvmedb(db, t) = self {
            let schema = t.schema().clone();
            db.drop_table(TABLE).map_err(LabError::engine("dropping the empty table before the load"))?;
            let values = (0..rows).map(|k| vec![Value::Int(k as i64), Value::Bytes(value(k, width, 0))]);
            *t = db
                .load_table(TABLE, schema, values, &mut progress)
                .map_err(LabError::engine("loading rows"))?;
            db.flush().map_err(LabError::engine("flushing after the load"))?;
            return Ok(());
        }
        let mut from = 0;
        while from < rows {
            let to = (from + LOAD_BATCH).min(rows);
            match self {
                Peer::Nvmedb(..) => unreachable!("nvmedb loads through load_table above"),
                Peer::Rocksdb(db) => {
                    let mut b = rocksdb::WriteBatch::default();
                    for k in from..to {
                        b.put(k.to_be_bytes(), value(k, width, 0));
                    }
                    let mut wo = rocksdb::WriteOptions::default();
                    wo.set_sync(true);
                    db.write_opt(b, &wo).map_err(pe(kind, "loading rows (write batch)"))?;
                }
                Peer::Lmdb(env, db) => {
                    let mut w = env.write_txn().map_err(pe(kind, "loading rows (transaction)"))?;
                    for k in from..to {
                        db.put_with_flags(
                            &mut w,
                            heed::PutFlags::APPEND,
                            &k.to_be_bytes(),
                            &value(k, width, 0),
                        )
                        .map_err(pe(kind, "loading rows (put)"))?;
                    }
                    w.commit().map_err(pe(kind, "loading rows (commit)"))?;
                }
                Peer::Sqlite(path, bytes) => {
                    let mut c = sqlite_open(path, *bytes).map_err(pe(kind, "loading rows (open)"))?;
                    let tx = c.transaction().map_err(pe(kind, "loading rows (begin)"))?;
                    {
                        let mut st = tx
                            .prepare_cached(&format!("INSERT INTO {TABLE} (id, v) VALUES (?1, ?2)"))
                            .map_err(pe(kind, "loading rows (prepare)"))?;
                        for k in from..to {
                            st.execute(rusqlite::params![k as i64, value(k, width, 0)])
                                .map_err(pe(kind, "loading rows (insert)"))?;
                        }
                    }
                    tx.commit().map_err(pe(kind, "loading rows (commit)"))?;
                }
            }
            from = to;
            progress(from);
        }
        // What a loaded table needs before it serves reads: RocksDB flushes its memtable and
        // compacts to one level (nvmedb wrote its pages back above).
        if let Peer::Rocksdb(db) = self {
            db.flush().map_err(pe(kind, "loading rows (flush)"))?;
            db.compact_range::<&[u8], &[u8]>(None, None);
        }
        Ok(())
    }

    /// A handle for one thread.
    pub fn client(&self) -> Result<Client<'_>> {
        Ok(match self {
            Peer::Nvmedb(_, t) => Client::Nvmedb(t, Vec::with_capacity(MANY)),
            Peer::Rocksdb(db) => {
                let mut wo = rocksdb::WriteOptions::default();
                wo.set_sync(true);
                Client::Rocksdb(db, wo)
            }
            Peer::Lmdb(env, db) => Client::Lmdb(env, *db),
            Peer::Sqlite(path, bytes) => Client::Sqlite(
                sqlite_open(path, *bytes).map_err(LabError::peer("SQLite", "opening a connection"))?,
            ),
        })
    }
}

impl Client<'_> {
    fn kind(&self) -> Kind {
        match self {
            Client::Nvmedb(..) => Kind::Nvmedb,
            Client::Rocksdb(..) => Kind::Rocksdb,
            Client::Lmdb(..) => Kind::Lmdb,
            Client::Sqlite(..) => Kind::Sqlite,
        }
    }

    /// Looks `key` up and checks the row.
    pub fn get(&mut self, key: u64) -> Result<()> {
        let kind = self.kind();
        let err = || format!("a point lookup of key {key}");
        match self {
            Client::Nvmedb(t, _) => {
                let ok = t
                    .read(&Value::Int(key as i64), |r| r.bytes(1)[..8] == key.to_le_bytes())
                    .map_err(LabError::engine("a point lookup"))?;
                match ok {
                    Some(true) => Ok(()),
                    Some(false) => check(kind, key, Some(&[])),
                    None => check(kind, key, None),
                }
            }
            Client::Rocksdb(db, _) => {
                let v = db.get_pinned(key.to_be_bytes()).map_err(pe(kind, err()))?;
                check(kind, key, v.as_deref())
            }
            Client::Lmdb(env, db) => {
                let r = env.read_txn().map_err(pe(kind, err()))?;
                check(kind, key, db.get(&r, &key.to_be_bytes()).map_err(pe(kind, err()))?)
            }
            Client::Sqlite(c) => {
                let mut st = c
                    .prepare_cached(&format!("SELECT v FROM {TABLE} WHERE id = ?1"))
                    .map_err(pe(kind, err()))?;
                let mut rows = st.query([key as i64]).map_err(pe(kind, err()))?;
                match rows.next().map_err(pe(kind, err()))? {
                    Some(row) => {
                        let v =
                            row.get_ref(0).map_err(pe(kind, err()))?.as_blob().map_err(pe(kind, err()))?;
                        check(kind, key, Some(v))
                    }
                    None => check(kind, key, None),
                }
            }
        }
    }

    /// Looks up [`MANY`] keys at once (the engine's batched read) and checks every row.
    pub fn get_many(&mut self, keys: &[u64]) -> Result<()> {
        let kind = self.kind();
        let err = || "a batched lookup".to_string();
        match self {
            Client::Nvmedb(t, vals) => {
                vals.clear();
                vals.extend(keys.iter().map(|&k| Value::Int(k as i64)));
                let mut bad = None;
                t.read_many(vals, |i, r| {
                    if r.is_none_or(|r| r.bytes(1)[..8] != keys[i].to_le_bytes()) {
                        bad = Some(i);
                    }
                })
                .map_err(LabError::engine("a batched lookup"))?;
                match bad {
                    Some(i) => check(kind, keys[i], None),
                    None => Ok(()),
                }
            }
            Client::Rocksdb(db, _) => {
                for (k, v) in keys.iter().zip(db.multi_get(keys.iter().map(|k| k.to_be_bytes()))) {
                    check(kind, *k, v.map_err(pe(kind, err()))?.as_deref())?;
                }
                Ok(())
            }
            Client::Lmdb(env, db) => {
                let r = env.read_txn().map_err(pe(kind, err()))?;
                for &k in keys {
                    check(kind, k, db.get(&r, &k.to_be_bytes()).map_err(pe(kind, err()))?)?;
                }
                Ok(())
            }
            Client::Sqlite(_) => {
                for &k in keys {
                    self.get(k)?;
                }
                Ok(())
            }
        }
    }

    /// Replaces the value of `key` (which exists) and returns once the change is durable.
    pub fn update(&mut self, key: u64, v: &[u8]) -> Result<()> {
        let kind = self.kind();
        let err = || format!("a durable update of key {key}");
        match self {
            Client::Nvmedb(t, _) => {
                let found = t
                    .update(&[Value::Int(key as i64), Value::Bytes(v.to_vec())])
                    .map_err(LabError::engine("a durable update"))?;
                if found {
                    Ok(())
                } else {
                    check(kind, key, None)
                }
            }
            Client::Rocksdb(db, wo) => db.put_opt(key.to_be_bytes(), v, wo).map_err(pe(kind, err())),
            Client::Lmdb(env, db) => {
                let mut w = env.write_txn().map_err(pe(kind, err()))?;
                db.put(&mut w, &key.to_be_bytes(), v).map_err(pe(kind, err()))?;
                w.commit().map_err(pe(kind, err()))
            }
            Client::Sqlite(c) => {
                let mut st = c
                    .prepare_cached(&format!("UPDATE {TABLE} SET v = ?1 WHERE id = ?2"))
                    .map_err(pe(kind, err()))?;
                match st.execute(rusqlite::params![v, key as i64]).map_err(pe(kind, err()))? {
                    1 => Ok(()),
                    _ => check(kind, key, None),
                }
            }
        }
    }
}

/// Drops `files` from the OS page cache (`posix_fadvise(DONTNEED)`); missing files are skipped.
pub fn drop_from_page_cache(files: &[PathBuf]) -> Result<()> {
    use std::os::fd::AsRawFd;
    for f in files {
        let Ok(file) = std::fs::File::open(f) else { continue };
        // SAFETY: a valid open descriptor; the call only advises the kernel.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(LabError::io(f, "drop from the page cache")(std::io::Error::from_raw_os_error(rc)));
        }
    }
    Ok(())
}
