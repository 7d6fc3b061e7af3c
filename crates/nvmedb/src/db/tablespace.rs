//! Tablespaces: named places for tables' heap and index files, moving a table between them,
//! and per-table access statistics.
//!
//! Owns: [`Tablespaces`] (storages an opener supplies by name), [`TablespaceSpec`], `Spaces`
//! (the open database's storage of every tablespace, and which storage holds which file),
//! [`Database::create_tablespace`], [`Database::move_table`], [`TableAccess`] and the saved
//! statistics (device [`ACCESS_STATS_FILE`] of the default tablespace: each clean close adds the
//! session's counters to it, as text lines `table hits misses reads writes background_writes
//! io_wait_ns` for the heap then the indexes).
//!
//! Invariants: a table's heap (index) file lives in exactly the tablespace the catalog names for
//! it; a table file found in any other tablespace is what an interrupted move or drop left, and
//! is deleted at open. A move writes every dirty page, copies the file to the target, syncs the
//! copy, and only then switches the table over with one catalog update (synced, and logged), so a
//! crash anywhere leaves the table whole in one tablespace: before the switch the old file is in
//! force (and the partial copy is deleted at open), after it the copy is (and the old file is).
//! Log records redo onto whichever file the catalog names: both hold every page up to the flush.

use super::{heap_name, index_name, Database};
use crate::buffer::BufferStats;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, DeviceProfile, DirStorage, EmulatedStorage, FileOptions, Storage};
use crate::table::catalog::{CatalogData, TableMeta, TablespaceMeta, DEFAULT_TABLESPACE};
use crate::util::sync::{MutexExt, RwLockExt};
use crate::wal::engine::TAG_TABLE;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Storages an opener supplies for named tablespaces (in [`Options::tablespaces`](super::Options)):
/// RAM, an emulated device, or any [`Storage`]. A tablespace the catalog names but the opener
/// does not supply is opened from its catalog entry (its directory, behind its profile).
#[derive(Clone, Default)]
pub struct Tablespaces(Vec<(String, Arc<dyn Storage>)>);

impl Tablespaces {
    /// No supplied storages.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the storage of tablespace `name`.
    pub fn with(mut self, name: &str, storage: Arc<dyn Storage>) -> Self {
        self.0.retain(|(n, _)| n != name);
        self.0.push((name.to_string(), storage));
        self
    }

    fn get(&self, name: &str) -> Option<&Arc<dyn Storage>> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }
}

impl std::fmt::Debug for Tablespaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(n, s)| (n, s.location()))).finish()
    }
}

/// Where a new tablespace lives: a directory, optionally behind an emulated device profile.
#[derive(Debug, Clone, PartialEq)]
pub struct TablespaceSpec {
    /// Its directory (created if missing; it must not hold another database's files).
    pub dir: PathBuf,
    /// An emulated device profile in front of the directory: a built-in profile name followed by
    /// `key=value` overrides, separated by spaces (`"optane"`, `"nand read_latency_us=90"`).
    /// Profiles faster than a disk need the directory on tmpfs.
    pub profile: Option<String>,
}

/// The built-in profile `spec` names, with its overrides applied.
pub fn parse_profile(spec: &str) -> Result<DeviceProfile> {
    let mut words = spec.split_whitespace();
    let name = words.next().unwrap_or("");
    let mut p = DeviceProfile::builtin(name).ok_or_else(|| Error::Config {
        key: "profile".into(),
        detail: format!(
            "`{name}` is not a built-in device profile ({})",
            crate::io::PROFILE_NAMES.join(", ")
        ),
    })?;
    for w in words {
        p.apply_override(w).map_err(|e| Error::Config { key: "profile".into(), detail: e.to_string() })?;
    }
    Ok(p)
}

/// Opens a directory tablespace: the directory, behind `profile` when one is given.
fn open_dir_space(name: &str, dir: &std::path::Path, profile: &str) -> Result<Arc<dyn Storage>> {
    let inner: Arc<dyn Storage> = Arc::new(DirStorage::new(dir, FileOptions::default())?);
    if profile.trim().is_empty() {
        return Ok(inner);
    }
    let p = parse_profile(profile)?;
    let seed = name.bytes().fold(0x9e37_79b9u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    Ok(Arc::new(EmulatedStorage::new(inner, p, seed)?))
}

/// The storage of every tablespace of an open database.
#[derive(Clone)]
pub(crate) struct Spaces {
    default: Arc<dyn Storage>,
    named: BTreeMap<String, Arc<dyn Storage>>,
}

impl Spaces {
    /// The default storage and the tablespaces `cat` names: supplied ones first, else opened
    /// from their catalog entries. Every storage is locked for this opener.
    pub(crate) fn open(default: Arc<dyn Storage>, cat: &CatalogData, supplied: &Tablespaces) -> Result<Self> {
        let mut named = BTreeMap::new();
        for m in &cat.tablespaces {
            let s = match supplied.get(&m.name) {
                Some(s) => s.clone(),
                None if std::path::Path::new(&m.location).is_absolute() => {
                    open_dir_space(&m.name, std::path::Path::new(&m.location), &m.profile)?
                }
                None => {
                    return Err(Error::Config {
                        key: "tablespaces".into(),
                        detail: format!(
                            "tablespace `{}` lives in `{}`, which cannot be reopened from the catalog: supply its storage in Options::tablespaces",
                            m.name, m.location
                        ),
                    })
                }
            };
            s.lock()?;
            named.insert(m.name.clone(), s);
        }
        Ok(Self { default, named })
    }

    /// The storage of tablespace `name`.
    pub(crate) fn get(&self, name: &str) -> Result<&Arc<dyn Storage>> {
        if name == DEFAULT_TABLESPACE {
            return Ok(&self.default);
        }
        self.named.get(name).ok_or_else(|| Error::NotFound(format!("tablespace `{name}`")))
    }

    /// The storage holding `t`'s heap (`heap`) or index file.
    pub(crate) fn of(&self, t: &TableMeta, heap: bool) -> Result<&Arc<dyn Storage>> {
        self.get(if heap { &t.heap_space } else { &t.index_space })
    }

    /// The storage holding file `file` of the pool tagged `tag` (the default storage for a table
    /// the catalog does not name: recovery skips its records anyway).
    pub(crate) fn for_file(&self, cat: &CatalogData, tag: u8, file: u32) -> Result<&Arc<dyn Storage>> {
        match cat.tables.iter().find(|t| t.id == file) {
            Some(t) => self.of(t, tag == TAG_TABLE),
            None => Ok(&self.default),
        }
    }

    fn insert(&mut self, name: &str, s: Arc<dyn Storage>) {
        self.named.insert(name.to_string(), s);
    }

    /// Deletes table files that no catalog entry places where they are (leftovers of a drop, a
    /// rebuild or a move that a crash interrupted).
    pub(crate) fn remove_strays(&self, cat: &CatalogData) -> Result<()> {
        let all = std::iter::once((DEFAULT_TABLESPACE, &self.default))
            .chain(self.named.iter().map(|(n, s)| (n.as_str(), s)));
        for (space, storage) in all {
            for f in storage.list()? {
                let Some((id, heap)) = crate::table::files::parse_table_file(&f) else {
                    continue;
                };
                let owned = cat
                    .tables
                    .iter()
                    .any(|t| t.id == id && (if heap { &t.heap_space } else { &t.index_space }) == space);
                if !owned {
                    storage.remove(&f)?;
                }
            }
        }
        Ok(())
    }
}

/// One table's access statistics: its heap file's and its index file's share of the buffer
/// pools' counters since the database was opened (all of a table's indexes share its index
/// file). Differences of two snapshots ([`TableAccess::since`]) give an interval's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableAccess {
    /// Table name.
    pub table: String,
    /// Table id.
    pub id: u32,
    /// Tablespace of the heap.
    pub heap_space: String,
    /// Tablespace of the indexes.
    pub index_space: String,
    /// Heap pages in the file.
    pub heap_pages: u64,
    /// Index pages in the file.
    pub index_pages: u64,
    /// Heap page size, bytes.
    pub heap_page_size: u64,
    /// Index page size, bytes.
    pub index_page_size: u64,
    /// The heap file's counters (hits, misses, reads, writes, I/O wait).
    pub heap: BufferStats,
    /// The index file's counters.
    pub index: BufferStats,
}

impl TableAccess {
    /// Counter differences `self - earlier` (sizes and places as in `self`).
    pub fn since(&self, earlier: &TableAccess) -> TableAccess {
        TableAccess {
            heap: self.heap.since(&earlier.heap),
            index: self.index.since(&earlier.index),
            ..self.clone()
        }
    }

    /// Bytes read from the heap's device.
    pub fn heap_bytes_read(&self) -> u64 {
        self.heap.reads * self.heap_page_size
    }

    /// Bytes written to the heap's device.
    pub fn heap_bytes_written(&self) -> u64 {
        self.heap.writes * self.heap_page_size
    }

    /// Bytes read from the index's device.
    pub fn index_bytes_read(&self) -> u64 {
        self.index.reads * self.index_page_size
    }

    /// Bytes written to the index's device.
    pub fn index_bytes_written(&self) -> u64 {
        self.index.writes * self.index_page_size
    }
}

impl Database {
    /// Creates tablespace `name` in directory `spec.dir` (behind `spec.profile` when given) and
    /// records it in the catalog; tables can then be created in it or moved to it. When the
    /// database is opened again, the tablespace is reopened from that record unless
    /// [`Options::tablespaces`](super::Options) supplies its storage.
    pub fn create_tablespace(&self, name: &str, spec: &TablespaceSpec) -> Result<()> {
        self.inner.txn.check_writable(&format!("creating tablespace `{name}`"))?;
        let dir = if spec.dir.is_absolute() {
            spec.dir.clone()
        } else {
            std::env::current_dir()
                .map_err(|e| Error::InvalidArgument(format!("no current directory: {e}")))?
                .join(&spec.dir)
        };
        let profile = spec.profile.clone().unwrap_or_default();
        let storage = open_dir_space(name, &dir, &profile)?;
        self.add_tablespace(name, storage, dir.display().to_string(), profile)
    }

    /// Creates tablespace `name` on `storage` (RAM, an emulated device, any [`Storage`]), with
    /// `profile` recorded as its description (a profile spec, or empty). Reopening the database
    /// needs the same storage in [`Options::tablespaces`](super::Options) unless its location is
    /// a directory.
    pub fn create_tablespace_on(&self, name: &str, storage: Arc<dyn Storage>, profile: &str) -> Result<()> {
        let location = storage.location();
        self.add_tablespace(name, storage, location, profile.to_string())
    }

    fn add_tablespace(
        &self,
        name: &str,
        storage: Arc<dyn Storage>,
        location: String,
        profile: String,
    ) -> Result<()> {
        self.inner.txn.check_writable(&format!("creating tablespace `{name}`"))?;
        if name.is_empty() || name.len() > 255 || name == DEFAULT_TABLESPACE {
            return Err(Error::InvalidArgument(format!(
                "a tablespace name needs 1 to 255 bytes and cannot be `{DEFAULT_TABLESPACE}` (got `{name}`)"
            )));
        }
        let mut cat = self.inner.catalog.locked();
        if cat.1.tablespaces.iter().any(|s| s.name == name) {
            return Err(Error::AlreadyExists(format!("tablespace `{name}`")));
        }
        let strays: Vec<String> = storage.list()?.into_iter().filter(|f| f != crate::io::LOCK_FILE).collect();
        if let Some(f) = strays.first() {
            return Err(Error::InvalidArgument(format!(
                "tablespace `{name}`: {location} is not empty (it holds `{f}`); a tablespace needs a place of its own"
            )));
        }
        storage.lock()?;
        let mut next = cat.1.clone();
        next.tablespaces.push(TablespaceMeta { name: name.to_string(), location, profile });
        self.publish_catalog(&mut cat, next)?;
        self.inner.spaces.write_locked().insert(name, storage);
        Ok(())
    }

    /// The storage of tablespace `name` ([`DEFAULT_TABLESPACE`] is the database's own).
    pub fn tablespace_storage(&self, name: &str) -> Result<Arc<dyn Storage>> {
        self.inner.spaces.read_locked().get(name).cloned()
    }

    /// Moves table `name`'s heap to tablespace `heap_space` and its indexes to `index_space`
    /// while the database stays open. Changes to every table wait while the moved files are
    /// copied (reads go on); a change waiting for a row lock held by a transaction delays the
    /// move until it gets the lock or times out. Crash-safe: see the module comment.
    pub fn move_table(&self, name: &str, heap_space: &str, index_space: &str) -> Result<()> {
        self.inner.txn.check_writable(&format!("moving table `{name}`"))?;
        let spaces = self.inner.spaces.read_locked().clone();
        spaces.get(heap_space)?;
        spaces.get(index_space)?;
        let shared = self.inner.txn.clone();
        let _quiet = shared.quiesce()?;
        let meta = self
            .catalog()
            .tables
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::NotFound(format!("table `{name}` in {}", self.location())))?;
        // Every page of the table is on disk (and no change can dirty one) before the copy.
        self.flush()?;
        let mut moved = Vec::new();
        for (heap, to) in [(true, heap_space), (false, index_space)] {
            let from = if heap { &meta.heap_space } else { &meta.index_space };
            if from == to {
                continue;
            }
            let file = if heap { heap_name(meta.id) } else { index_name(meta.id) };
            let src = spaces.get(from)?.open(&file, false)?;
            let target = spaces.get(to)?;
            if target.exists(&file) {
                target.remove(&file)?; // a copy an earlier, interrupted move left
            }
            let dst = target.open(&file, true)?;
            let mut buf = AlignedBuf::large(1 << 20);
            let (cap, mut off) = (src.capacity(), 0u64);
            while off < cap {
                let n = ((cap - off).min(buf.len() as u64) as usize).div_ceil(4096) * 4096;
                src.read_at(off, &mut buf[..n])?;
                dst.write_at(off, &buf[..n])?;
                off += n as u64;
            }
            dst.sync()?;
            moved.push((heap, file, from.clone(), dst));
        }
        if moved.is_empty() {
            return Ok(());
        }
        {
            let mut cat = self.inner.catalog.locked();
            let mut next = cat.1.clone();
            let t = next.tables.iter_mut().find(|t| t.id == meta.id).ok_or_else(|| {
                Error::NotFound(format!("table `{name}` (dropped while it was being moved)"))
            })?;
            t.heap_space = heap_space.to_string();
            t.index_space = index_space.to_string();
            self.publish_catalog(&mut cat, next)?;
        }
        for (heap, file, from, dst) in moved {
            let pool = if heap { &self.inner.table_pool } else { &self.inner.index_pool };
            pool.replace_device(meta.id, dst)?;
            spaces.get(&from)?.remove(&file)?;
        }
        Ok(())
    }

    /// Access statistics of every table since the database was opened, sorted by name.
    pub fn access_stats(&self) -> Result<Vec<TableAccess>> {
        let cat = self.catalog();
        let mut out = Vec::new();
        for t in &cat.tables {
            let (tp, ip) = (&self.inner.table_pool, &self.inner.index_pool);
            out.push(TableAccess {
                table: t.name.clone(),
                id: t.id,
                heap_space: t.heap_space.clone(),
                index_space: t.index_space.clone(),
                heap_pages: tp.file_pages(t.id)?,
                index_pages: ip.file_pages(t.id)?,
                heap_page_size: u64::from(cat.table_page_size),
                index_page_size: u64::from(cat.index_page_size),
                heap: tp.file_stats(t.id)?,
                index: ip.file_stats(t.id)?,
            });
        }
        out.sort_by(|a, b| a.table.cmp(&b.table));
        Ok(out)
    }
}

/// The device of the default tablespace holding the access statistics of earlier sessions.
pub const ACCESS_STATS_FILE: &str = "access.stats";
const STATS_MAGIC: &str = "nvmedb-access-stats 1";

fn stats_fields(b: &BufferStats) -> [u64; 6] {
    [b.hits, b.misses, b.reads, b.writes, b.background_writes, b.io_wait_ns]
}

fn stats_from(v: &[u64]) -> BufferStats {
    BufferStats {
        hits: v[0],
        misses: v[1],
        reads: v[2],
        writes: v[3],
        evictions: 0,
        background_writes: v[4],
        io_wait_ns: v[5],
        ..BufferStats::default()
    }
}

fn add(a: &BufferStats, b: &BufferStats) -> BufferStats {
    let (x, y) = (stats_fields(a), stats_fields(b));
    stats_from(&std::array::from_fn::<u64, 6, _>(|i| x[i] + y[i]))
}

/// The saved statistics of earlier sessions, by table name (empty when none were saved; a file
/// that does not parse is reported, naming it).
pub(crate) fn load_saved(storage: &dyn Storage) -> Result<BTreeMap<String, (BufferStats, BufferStats)>> {
    let mut out = BTreeMap::new();
    if !storage.exists(ACCESS_STATS_FILE) {
        return Ok(out);
    }
    let dev = storage.open(ACCESS_STATS_FILE, false)?;
    let cap = dev.capacity() as usize;
    if cap == 0 {
        return Ok(out);
    }
    let mut buf = AlignedBuf::new(cap.div_ceil(4096) * 4096);
    dev.read_at(0, &mut buf[..cap.div_ceil(4096) * 4096])?;
    let bad = |detail: String| Error::Corruption { file: dev.info().name, offset: 0, detail };
    let text = std::str::from_utf8(&buf[..cap]).map_err(|e| bad(format!("not text: {e}")))?;
    // A shorter save leaves zeros (and perhaps an older tail) after its text.
    let text = text.split('\0').next().unwrap_or_default();
    let mut lines = text.lines();
    if lines.next() != Some(STATS_MAGIC) {
        return Err(bad(format!("does not start with `{STATS_MAGIC}`")));
    }
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let mut w = line.split_whitespace();
        let name = w.next().unwrap_or_default().to_string();
        let v: Vec<u64> = w
            .map(|x| x.parse::<u64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(format!("line `{line}`: {e}")))?;
        if v.len() != 12 {
            return Err(bad(format!("line `{line}` has {} counters, not 12", v.len())));
        }
        out.insert(name, (stats_from(&v[..6]), stats_from(&v[6..])));
    }
    Ok(out)
}

impl Database {
    /// Access statistics of every table summed over the earlier sessions that closed the
    /// database cleanly and this one (what `nvmedb inspect --stats` shows).
    pub fn access_stats_total(&self) -> Result<Vec<TableAccess>> {
        let saved = load_saved(self.inner.storage.as_ref())?;
        let mut now = self.access_stats()?;
        for t in &mut now {
            if let Some((h, i)) = saved.get(&t.table) {
                t.heap = add(&t.heap, h);
                t.index = add(&t.index, i);
            }
        }
        Ok(now)
    }

    /// Writes [`Database::access_stats_total`] to [`ACCESS_STATS_FILE`] (on a clean close).
    pub(crate) fn save_access_stats(&self) -> Result<()> {
        if self.inner.txn.read_only {
            // A read-only opener writes nothing, not even its statistics: its files are open
            // for reading only (and may be on a read-only mount or a backup copy).
            return Ok(());
        }
        let mut text = format!("{STATS_MAGIC}\n");
        for t in self.access_stats_total()? {
            let f: Vec<String> = stats_fields(&t.heap)
                .iter()
                .chain(stats_fields(&t.index).iter())
                .map(u64::to_string)
                .collect();
            text.push_str(&format!("{} {}\n", t.table, f.join(" ")));
        }
        let storage = &self.inner.storage;
        let dev = storage.open(ACCESS_STATS_FILE, true)?;
        let n = text.len().div_ceil(4096) * 4096;
        let mut buf = AlignedBuf::new(n);
        buf[..text.len()].copy_from_slice(text.as_bytes());
        dev.write_at(0, &buf[..n])?;
        Ok(dev.sync()?)
    }
}
