//! Bulk loading a new table: heap pages and B+trees built directly, switched in at once.
//!
//! Owns: [`Database::load_table`]. Rows are packed into heap pages composed in memory, each
//! written once to a new page of the table's heap file; primary and secondary index entries are
//! collected, sorted when the input was not already in key order, checked for duplicates and
//! built bottom-up ([`TreeBuilder`]). No row locks, no undo records and no per-row B+tree
//! descent.
//!
//! Crash safety is the catalog switch that [`Database::rebuild_table`] also uses: the table's
//! files exist before the catalog names them, and one catalog update names the finished table.
//! A crash before that update leaves files no catalog names (deleted at the next open, and
//! recovery ignores their log records): the table is absent. After it, the table is whole.
//!
//! Writing: heap pages are composed in buffers of [`DIRECT_WRITE_BYTES`] and, unless the log
//! ships to standbys, written around the log by a writer thread (one device write per buffer,
//! while the next buffer is composed), then synced before the switch: the data is written
//! once, and a crash before the switch leaves only a file that no catalog names. When the log
//! ships to standbys ([`RecordLog::ships_records`](crate::wal::RecordLog::ships_records)),
//! which rebuild their files from the log alone, every heap page is logged whole
//! instead (a new page's first change always is), so a standby receives it. B+tree pages are
//! always logged as images (they are a few percent of the data). With a log, the load waits
//! until the log is durable before the switch; without one, both pools are flushed and synced.

use super::{heap_name, index_name, Database};
use crate::btree::build::TreeBuilder;
use crate::btree::BTree;
use crate::buffer::PageClass;
use crate::error::{Error, Result};
use crate::io::AlignedBuf;
use crate::page::{overflow, slotted, PageType};
use crate::table::catalog::{TableMeta, DEFAULT_TABLESPACE};
use crate::table::heap::{row_too_large, MAX_ROW_BYTES, OVERFLOW_SLOT};
use crate::table::{HeapFile, RowId, Schema, Table, Value};
use crate::util::sync::{MutexExt, RwLockExt};

/// Rows between two calls of a bulk load's progress callback.
pub const LOAD_PROGRESS_EVERY: u64 = 4096;

/// Heap pages between two checks of whether the log wants a checkpoint during a load.
const CHECKPOINT_CHECK_PAGES: u64 = 1024;

/// Index entries of one index being collected: `(key, row id)` and whether they came in
/// strictly increasing key order.
struct Entries {
    items: Vec<(Vec<u8>, [u8; 8])>,
    sorted: bool,
}

impl Entries {
    fn new() -> Self {
        Self { items: Vec::new(), sorted: true }
    }

    fn push(&mut self, key: Vec<u8>, rid: RowId) {
        if self.sorted && self.items.last().is_some_and(|(last, _)| *last >= key) {
            self.sorted = false;
        }
        self.items.push((key, rid.to_bytes()));
    }

    /// Sorts (unless already in order); returns the first key that occurs twice, if any.
    fn sort(&mut self) -> Option<&[u8]> {
        if !self.sorted {
            self.items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        self.items.windows(2).find(|w| w[0].0 == w[1].0).map(|w| w[0].0.as_slice())
    }
}

/// A row waiting in the heap page being composed: its slot, primary key and secondary keys.
struct Pending {
    slot: u16,
    pk: Vec<u8>,
    secondary: Vec<Vec<u8>>,
}

/// Bytes of heap pages a load writes with one device write when it writes around the log.
const DIRECT_WRITE_BYTES: usize = 2 << 20;

/// Buffers of [`DIRECT_WRITE_BYTES`] a load writing around the log cycles through: one being
/// composed, the others queued for or in the writer thread's write.
const DIRECT_WRITE_BUFFERS: usize = 3;

/// A buffer of whole heap pages of about [`DIRECT_WRITE_BYTES`].
fn direct_buffer(page_size: usize) -> AlignedBuf {
    AlignedBuf::large((DIRECT_WRITE_BYTES / page_size).max(1) * page_size)
}

/// Where a load's heap pages go.
enum HeapSink {
    /// Appended one at a time through the pool as logged images
    /// ([`BufferPool::append_page`](crate::buffer::BufferPool::append_page)).
    Logged,
    /// Written around the log by a writer thread, a buffer of pages at a time
    /// ([`BufferPool::write_new_pages`](crate::buffer::BufferPool::write_new_pages)), while
    /// the next buffer is composed.
    Direct {
        /// Full buffers to write: first reserved page number, buffer, pages in it.
        full: std::sync::mpsc::SyncSender<(u64, AlignedBuf, usize)>,
        /// Buffers written (or the write's error).
        done: std::sync::mpsc::Receiver<Result<AlignedBuf>>,
        /// Buffers not in the writer's hands.
        spare: Vec<AlignedBuf>,
        /// Buffers handed to the writer and not yet back.
        out: usize,
    },
}

/// The heap pages of a load: composed in place in a buffer of whole pages, then written by
/// its [`HeapSink`]. A row's index entries get its row id once its page has a number.
struct HeapBatch<'a> {
    db: &'a Database,
    file: u32,
    sink: HeapSink,
    page_size: usize,
    buf: AlignedBuf,
    /// The rows of each page in `buf` so far; the last entry is the page being composed.
    rows: Vec<Vec<Pending>>,
    pages: u64,
}

impl<'a> HeapBatch<'a> {
    fn new(db: &'a Database, file: u32, sink: HeapSink) -> Self {
        let page_size = db.inner.table_pool.page_size();
        let buf = match &sink {
            HeapSink::Logged => AlignedBuf::new(page_size),
            HeapSink::Direct { .. } => direct_buffer(page_size),
        };
        let mut b = Self { db, file, sink, page_size, buf, rows: vec![Vec::new()], pages: 0 };
        slotted::init(b.current());
        b
    }

    /// The writer thread of [`HeapSink::Direct`]: writes every buffer it receives, in order,
    /// and hands it back (or the error); ends when the sender is dropped.
    fn writer(
        pool: &crate::buffer::BufferPool,
        file: u32,
        full: std::sync::mpsc::Receiver<(u64, AlignedBuf, usize)>,
        done: std::sync::mpsc::Sender<Result<AlignedBuf>>,
    ) {
        let page_size = pool.page_size();
        for (first, mut buf, n) in full {
            let r = pool.write_new_pages(file, first, PageType::Heap, &mut buf[..n * page_size]);
            let _ = done.send(r.map(|()| buf));
        }
    }

    /// The page being composed.
    fn current(&mut self) -> &mut [u8] {
        let k = self.rows.len() - 1;
        &mut self.buf[k * self.page_size..(k + 1) * self.page_size]
    }

    /// Adds an encoded row (at most a page's record limit) with its primary and secondary keys.
    fn push(
        &mut self,
        row: &[u8],
        pk: Vec<u8>,
        secondary: Vec<Vec<u8>>,
        primary: &mut Entries,
        indexes: &mut [Entries],
    ) -> Result<()> {
        let slot = match slotted::append(self.current(), row) {
            Some(s) => s,
            None => {
                if self.rows.len() * self.page_size == self.buf.len() {
                    self.write(primary, indexes)?; // leaves one fresh page to compose
                } else {
                    self.rows.push(Vec::new());
                    let page = self.current();
                    page.fill(0);
                    slotted::init(page);
                }
                slotted::append(self.current(), row)
                    .expect("a row of at most max_record_len fits an empty page")
            }
        };
        self.rows.last_mut().expect("a page being composed").push(Pending {
            slot: slot as u16,
            pk,
            secondary,
        });
        Ok(())
    }

    /// Adds an encoded row longer than a slotted page holds: its overflow pages (consecutive,
    /// the first one its row id) are written at once, apart from the batch.
    fn push_overflow(
        &mut self,
        row: &[u8],
        pk: Vec<u8>,
        secondary: Vec<Vec<u8>>,
        primary: &mut Entries,
        indexes: &mut [Entries],
    ) -> Result<()> {
        let ps = self.page_size;
        let cap = overflow::capacity(ps);
        let n = row.len().div_ceil(cap);
        let mut buf = AlignedBuf::new(n * ps);
        let pool = &self.db.inner.table_pool;
        let compose = |buf: &mut [u8], first: u64| {
            for (k, page) in buf.chunks_mut(ps).enumerate() {
                let chunk = &row[k * cap..((k + 1) * cap).min(row.len())];
                let (state, total) = if k == 0 {
                    (overflow::State::First, row.len() as u64)
                } else {
                    (overflow::State::Next, 0)
                };
                let next = if k + 1 < n { first + k as u64 + 1 } else { overflow::NO_PAGE };
                overflow::write(page, state, total, next, chunk);
            }
        };
        let first = match self.sink {
            HeapSink::Logged => {
                // Nobody else appends to a table being loaded: its pages come in order.
                let first = pool.file_pages(self.file)?;
                compose(&mut buf, first);
                for (k, page) in buf.chunks(ps).enumerate() {
                    let got = pool.append_page(self.file, PageClass::Data, PageType::Overflow, page)?;
                    if got != first + k as u64 {
                        return Err(Error::Poisoned(format!(
                            "bulk load of heap file {}: an overflow page went to page {got}, not {}",
                            self.file,
                            first + k as u64
                        )));
                    }
                }
                first
            }
            HeapSink::Direct { .. } => {
                let first = pool.reserve_new_pages(self.file, n as u64)?;
                compose(&mut buf, first);
                pool.write_new_pages(self.file, first, PageType::Overflow, &mut buf)?;
                first
            }
        };
        let rid = RowId { page: first, slot: OVERFLOW_SLOT };
        primary.push(pk, rid);
        for (e, key) in indexes.iter_mut().zip(secondary) {
            e.push(key, rid);
        }
        self.pages += n as u64;
        Ok(())
    }

    /// Writes the pages composed so far (the last one too, if it holds a row) and waits until
    /// every write has completed.
    fn finish(mut self, primary: &mut Entries, indexes: &mut [Entries]) -> Result<()> {
        if self.rows.last().is_some_and(|r| r.is_empty()) {
            self.rows.pop();
        }
        self.write(primary, indexes)?;
        if let HeapSink::Direct { full, done, out, .. } = self.sink {
            drop(full);
            for _ in 0..out {
                done.recv().map_err(|_| writer_gone(self.file))??;
            }
        }
        Ok(())
    }

    /// Hands every page in `rows` to the sink and gives their rows' index entries their row
    /// ids; leaves a fresh page to compose.
    fn write(&mut self, primary: &mut Entries, indexes: &mut [Entries]) -> Result<()> {
        let n = self.rows.len();
        if n == 0 {
            return Ok(());
        }
        let pool = &self.db.inner.table_pool;
        let first = match &mut self.sink {
            HeapSink::Logged => {
                let page = &self.buf[..self.page_size];
                pool.append_page(self.file, PageClass::Data, PageType::Heap, page)?
            }
            HeapSink::Direct { full, done, spare, out } => {
                let next = match spare.pop() {
                    Some(b) => b,
                    None => {
                        *out -= 1;
                        done.recv().map_err(|_| writer_gone(self.file))??
                    }
                };
                let first = pool.reserve_new_pages(self.file, n as u64)?;
                let buf = std::mem::replace(&mut self.buf, next);
                full.send((first, buf, n)).map_err(|_| writer_gone(self.file))?;
                *out += 1;
                first
            }
        };
        debug_assert!(n == 1 || matches!(self.sink, HeapSink::Direct { .. }));
        for (k, rows) in self.rows.drain(..).enumerate() {
            let rid_page = first + k as u64;
            for p in rows {
                let rid = RowId { page: rid_page, slot: p.slot };
                primary.push(p.pk, rid);
                for (e, key) in indexes.iter_mut().zip(p.secondary) {
                    e.push(key, rid);
                }
            }
        }
        let before = self.pages;
        self.pages += n as u64;
        if before / CHECKPOINT_CHECK_PAGES != self.pages / CHECKPOINT_CHECK_PAGES {
            self.db.inner.txn.checkpoint_if_wanted();
        }
        self.rows.push(Vec::new());
        let page = self.current();
        page.fill(0);
        slotted::init(page);
        Ok(())
    }
}

/// The error of a load whose writer thread stopped without a result (it panicked).
fn writer_gone(file: u32) -> Error {
    Error::Poisoned(format!("the bulk load's writer thread for heap file {file} stopped"))
}

impl Database {
    /// Creates table `name` with `schema` and fills it with `rows`, faster than inserting them
    /// one by one: heap pages and B+trees are built directly (bottom-up), without locks or
    /// undo records, and the table appears in one step when it is complete. Rows sorted by
    /// primary key are cheapest; other orders are sorted in memory (so are secondary index
    /// entries), which needs some 40 bytes plus the key per row and index.
    ///
    /// `progress(rows so far)` is called every [`LOAD_PROGRESS_EVERY`] rows and once at the
    /// end. The table must not exist; it goes into the default tablespace.
    ///
    /// After a crash during the load the table does not exist; after `load_table` returns, it
    /// is durable: its heap pages are written once, around the log, and synced, and its index
    /// pages are in the log (or, without a log, written and synced). On a primary whose log
    /// ships to standbys, every page is in the log, so a standby receives the table. A row
    /// that does not match the schema, or a primary key (or unique index value) given twice,
    /// fails the load: nothing of the table remains.
    ///
    /// ```
    /// # use nvmedb::{ColumnType, Database, Options, Schema, Value};
    /// # fn main() -> nvmedb::Result<()> {
    /// # let db = Database::open_with_storage(std::sync::Arc::new(nvmedb::io::MemStorage::new()), Options::default())?;
    /// let schema = Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]).with_index("by_v", "v")?;
    /// let rows = (0..10_000).map(|i| vec![Value::Int(i), Value::Int(i % 100)]);
    /// let mut seen = 0;
    /// let t = db.load_table("t", schema, rows, |n| seen = n)?;
    /// assert_eq!(seen, 10_000);
    /// assert_eq!(t.get(&Value::Int(1234))?, Some(vec![Value::Int(1234), Value::Int(34)]));
    /// assert_eq!(t.lookup("by_v", &Value::Int(7))?.len(), 100);
    /// # Ok(()) }
    /// ```
    pub fn load_table(
        &self,
        name: &str,
        schema: Schema,
        rows: impl IntoIterator<Item = Vec<Value>>,
        progress: impl FnMut(u64),
    ) -> Result<Table> {
        self.load(name, schema, None, rows.into_iter().map(Ok), progress)
    }

    /// Replaces existing table `name` by a table with `schema` holding `rows`, built as
    /// [`Database::load_table`] builds a table (bottom-up, each new page written once) into new
    /// files in the old table's tablespaces, then switched in with one catalog
    /// update: after a crash either the old table or the whole new one exists. For filling an
    /// empty table (SQL's `COPY` into a table just created or truncated) and for rebuilding a
    /// table under a new primary key or index (the rows read from the old table, which is
    /// switched out only at the end); the old table's rows are discarded, and handles to it
    /// fail afterwards. A row that is an error stops the load with that error, and the old
    /// table stays.
    ///
    /// ```
    /// # use nvmedb::{ColumnType, Database, Options, Schema, Value};
    /// # fn main() -> nvmedb::Result<()> {
    /// # let db = Database::open_with_storage(std::sync::Arc::new(nvmedb::io::MemStorage::new()), Options::default())?;
    /// let old = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]))?;
    /// let rows = (0..1000).map(|i| Ok(vec![Value::Int(i), Value::Int(-i)]));
    /// let t = db.load_table_replacing("t", old.schema().clone(), rows, |_| {})?;
    /// assert_eq!(t.get(&Value::Int(7))?, Some(vec![Value::Int(7), Value::Int(-7)]));
    /// # Ok(()) }
    /// ```
    pub fn load_table_replacing(
        &self,
        name: &str,
        schema: Schema,
        rows: impl IntoIterator<Item = Result<Vec<Value>>>,
        progress: impl FnMut(u64),
    ) -> Result<Table> {
        let old = self.table(name)?;
        self.load(name, schema, Some(old), rows.into_iter(), progress)
    }

    /// [`Database::load_table`] (`old` is `None`) or [`Database::load_table_replacing`].
    fn load(
        &self,
        name: &str,
        schema: Schema,
        old: Option<Table>,
        rows: impl Iterator<Item = Result<Vec<Value>>>,
        mut progress: impl FnMut(u64),
    ) -> Result<Table> {
        self.inner.txn.check_writable(&format!("loading table `{name}`"))?;
        let (id, heap_space, index_space) = {
            let mut cat = self.inner.catalog.locked();
            let spaces = match cat.1.tables.iter().find(|t| t.name == name) {
                Some(_) if old.is_none() => return Err(Error::AlreadyExists(format!("table `{name}`"))),
                Some(t) => (t.heap_space.clone(), t.index_space.clone()),
                None if old.is_some() => {
                    return Err(Error::NotFound(format!(
                        "table `{name}` in {}",
                        self.inner.storage.location()
                    )))
                }
                None => (DEFAULT_TABLESPACE.to_string(), DEFAULT_TABLESPACE.to_string()),
            };
            self.check_new_table(name, &schema)?;
            (super::ddl::reserve_table_id(&mut cat)?, spaces.0, spaces.1)
        };
        self.open_table_files(id, &heap_space, &index_space)?;
        // The first row that is an error ends the input; the load then fails with it.
        let mut failed = None;
        let rows = rows.map_while(|r| r.map_err(|e| failed = Some(e)).ok());
        let built = self.build_table(id, name, &schema, rows, &mut progress);
        let built = match failed {
            Some(e) => Err(e),
            None => built,
        };
        let switched = built.and_then(|(meta, rows)| {
            self.make_durable(id)?;
            let meta = TableMeta {
                name: name.to_string(),
                heap_space: heap_space.clone(),
                index_space: index_space.clone(),
                ..meta
            };
            let mut cat = self.inner.catalog.locked();
            let pos = cat.1.tables.iter().position(|t| t.name == name);
            let table = self.table_handle(&meta)?;
            let mut next = cat.1.clone();
            let replaced = match (pos, &old) {
                (None, None) => {
                    next.tables.push(meta);
                    None
                }
                (Some(pos), Some(_)) => Some(std::mem::replace(&mut next.tables[pos], meta)),
                (Some(_), None) => {
                    return Err(Error::AlreadyExists(format!(
                        "table `{name}` (created while it was being loaded)"
                    )))
                }
                (None, Some(_)) => {
                    return Err(Error::NotFound(format!(
                        "table `{name}` (dropped while it was being loaded)"
                    )))
                }
            };
            self.publish_catalog(&mut cat, next)?;
            self.inner.tables.write_locked().insert(name.to_string(), table.clone());
            Ok((table, rows, replaced))
        });
        match switched {
            Ok((table, rows, replaced)) => {
                if let (Some(old), Some(meta)) = (old, replaced) {
                    old.mark_dropped();
                    self.remove_table_files(meta.id, &meta.heap_space, &meta.index_space)?;
                }
                progress(rows);
                Ok(table)
            }
            Err(e) => {
                let _ = self.remove_table_files(id, &heap_space, &index_space);
                Err(e)
            }
        }
    }

    /// Writes the heap and index pages of table `id` from `rows`; returns the table's catalog
    /// entry (name and tablespaces left for the caller) and the number of rows.
    fn build_table(
        &self,
        id: u32,
        name: &str,
        schema: &Schema,
        rows: impl IntoIterator<Item = Vec<Value>>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(TableMeta, u64)> {
        let heap_pool = &self.inner.table_pool;
        let index_pool = &self.inner.index_pool;
        let max_inline = slotted::max_record_len(heap_pool.page_size());
        let max_entry = crate::btree::node::max_entry_payload(index_pool.page_size()) - 8;
        let direct = !self.load_logs_heap_pages();
        let (mut primary, secondary, count) = std::thread::scope(|s| -> Result<_> {
            let sink = if direct {
                let (full, to_write) = std::sync::mpsc::sync_channel(DIRECT_WRITE_BUFFERS);
                let (written, done) = std::sync::mpsc::channel();
                std::thread::Builder::new()
                    .name("nvmedb-load".into())
                    .spawn_scoped(s, move || HeapBatch::writer(heap_pool, id, to_write, written))
                    .map_err(|e| {
                        Error::ResourceExhausted(format!("starting the bulk load's writer thread: {e}"))
                    })?;
                let spare = (1..DIRECT_WRITE_BUFFERS).map(|_| direct_buffer(heap_pool.page_size())).collect();
                HeapSink::Direct { full, done, spare, out: 0 }
            } else {
                HeapSink::Logged
            };
            let mut heap = HeapBatch::new(self, id, sink);
            let mut primary = Entries::new();
            let mut secondary: Vec<Entries> = schema.indexes.iter().map(|_| Entries::new()).collect();
            let mut bytes = Vec::new();
            let mut count = 0u64;
            for row in rows {
                schema.encode_row(name, &row, &mut bytes)?;
                if bytes.len() > MAX_ROW_BYTES {
                    return Err(row_too_large(name, schema, Some(&row), bytes.len()));
                }
                let pk = schema.primary_key_bytes(name, &row[schema.primary_key])?;
                let keys: Vec<Vec<u8>> = schema
                    .indexes
                    .iter()
                    .map(|ix| schema.secondary_key_bytes(ix.column, &row[ix.column], &pk))
                    .collect();
                if let Some(k) = std::iter::once(&pk).chain(&keys).find(|k| k.len() > max_entry) {
                    return Err(Error::InvalidArgument(format!(
                        "table `{name}`: row {count} has an index key of {} bytes, more than the {max_entry} an index \
                         entry allows",
                        k.len()
                    )));
                }
                if bytes.len() > max_inline {
                    heap.push_overflow(&bytes, pk, keys, &mut primary, &mut secondary)?;
                } else {
                    heap.push(&bytes, pk, keys, &mut primary, &mut secondary)?;
                }
                count += 1;
                if count.is_multiple_of(LOAD_PROGRESS_EVERY) {
                    progress(count);
                }
            }
            heap.finish(&mut primary, &mut secondary)?;
            Ok((primary, secondary, count))
        })?;
        if let Some(k) = primary.sort() {
            return Err(Error::AlreadyExists(format!(
                "table `{name}`: primary key {k:02x?} (encoded) given twice"
            )));
        }
        let primary_tree = build_tree(index_pool, id, &primary.items)?;
        drop(primary);
        let mut index_roots = Vec::new();
        for (ix, mut e) in schema.indexes.iter().zip(secondary) {
            e.sort();
            if ix.unique {
                // Entries are value + primary key: a repeated value is a repeated prefix.
                let value_len = |k: &[u8]| schema.secondary_value_len(ix.column, k);
                let null = |k: &[u8]| schema.columns[ix.column].nullable && k.first() == Some(&2);
                if let Some(w) = e.items.windows(2).find(|w| {
                    let (a, b) = (&w[0].0, &w[1].0);
                    !null(a) && value_len(a).is_some() && value_len(a) == value_len(b) && {
                        let n = value_len(a).unwrap_or(0);
                        a[..n] == b[..n]
                    }
                }) {
                    return Err(Error::AlreadyExists(format!(
                        "table `{name}`, unique index `{}`: value {:02x?} (encoded) given twice",
                        ix.name,
                        &w[0].0[..value_len(&w[0].0).unwrap_or(0)]
                    )));
                }
            }
            index_roots.push(build_tree(index_pool, id, &e.items)?.root());
        }
        let meta = TableMeta {
            id,
            name: String::new(),
            schema: schema.clone(),
            primary_root: primary_tree.root(),
            index_roots,
            heap_space: String::new(),
            index_space: String::new(),
        };
        Ok((meta, count))
    }

    /// Makes every page of table `id` written so far durable. With a log: the heap pages
    /// written around it by syncing the heap file, the logged pages by waiting until the log
    /// is durable to its end (their images are in it). Without one: by flushing both pools and
    /// syncing every file (the heap file among them).
    fn make_durable(&self, id: u32) -> Result<()> {
        match &self.inner.txn.log {
            Some(log) => {
                if !self.load_logs_heap_pages() {
                    self.inner.table_pool.sync_file(id)?;
                }
                let end = log.log().record_log().end_lsn();
                log.log().wait_durable(end)
            }
            None => {
                self.inner.table_pool.flush_all()?;
                self.inner.index_pool.flush_all()
            }
        }
    }

    /// Whether a bulk load logs its heap pages as images (the log ships records to standbys,
    /// which rebuild their files from the log alone) or writes them around the log, once, in
    /// large writes, and syncs the file before the catalog switch (every other case: a crash
    /// before the switch leaves a file no catalog names, which the next open deletes).
    fn load_logs_heap_pages(&self) -> bool {
        self.inner.txn.log.as_ref().is_some_and(|l| l.log().record_log().ships_records())
    }

    /// Registers table `id`'s heap and index files (created if new) with the pools.
    pub(super) fn open_table_files(&self, id: u32, heap_space: &str, index_space: &str) -> Result<()> {
        let (heap_st, index_st) = {
            let spaces = self.inner.spaces.read_locked();
            (spaces.get(heap_space)?.clone(), spaces.get(index_space)?.clone())
        };
        self.inner.table_pool.register_file(id, heap_st.open(&heap_name(id), true)?)?;
        self.inner.index_pool.register_file(id, index_st.open(&index_name(id), true)?)
    }

    /// A handle to the table `meta` describes (its files registered).
    pub(super) fn table_handle(&self, meta: &TableMeta) -> Result<Table> {
        let heap = HeapFile::open(self.inner.table_pool.clone(), meta.id, &heap_name(meta.id))?;
        let pool = &self.inner.index_pool;
        let primary = BTree::open(pool.clone(), meta.id, meta.primary_root);
        let secondaries = meta.index_roots.iter().map(|&r| BTree::open(pool.clone(), meta.id, r)).collect();
        Ok(Table::new(
            meta.id,
            meta.name.clone(),
            meta.schema.clone(),
            heap,
            primary,
            secondaries,
            self.inner.txn.clone(),
        ))
    }
}

/// Builds a B+tree in `file` from entries sorted by key.
fn build_tree(
    pool: &std::sync::Arc<crate::buffer::BufferPool>,
    file: u32,
    items: &[(Vec<u8>, [u8; 8])],
) -> Result<BTree> {
    let mut b = TreeBuilder::new(pool.clone(), file);
    for (k, v) in items {
        b.push(k, v)?;
    }
    b.finish()
}
