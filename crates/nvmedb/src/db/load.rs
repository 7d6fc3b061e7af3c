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
//! Logging: with a log, every page the load writes is logged as a full image (a new page's
//! first change always is) and the load waits until the log is durable before the switch. The
//! alternative — writing and syncing the files and logging only the catalog switch — would
//! write the data once instead of twice, but a standby, which rebuilds its files from the log
//! alone, would receive a catalog naming pages it never saw; so images it is. Without a log,
//! both pools are flushed and synced before the switch.

use super::{heap_name, index_name, Database};
use crate::btree::build::TreeBuilder;
use crate::btree::BTree;
use crate::buffer::PageClass;
use crate::error::{Error, Result};
use crate::page::{slotted, PageType};
use crate::table::catalog::{TableMeta, DEFAULT_TABLESPACE};
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
    /// is durable (with a log, its pages are in the log: a standby receives them; without one,
    /// they are written and synced). A row that does not match the schema, or a primary key
    /// (or unique index value) given twice, fails the load: nothing of the table remains.
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
    /// [`Database::load_table`] builds a table (bottom-up, every new page logged once as an
    /// image) into new files in the old table's tablespaces, then switched in with one catalog
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
            self.check_new_table(name, &schema, cat.1.table_page_size)?;
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
            self.make_durable()?;
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
        let max_row = slotted::max_record_len(heap_pool.page_size());
        let max_entry = crate::btree::node::max_entry_payload(index_pool.page_size()) - 8;
        let mut page = vec![0u8; heap_pool.page_size()];
        slotted::init(&mut page);
        let mut pending: Vec<Pending> = Vec::new();
        let mut primary = Entries::new();
        let mut secondary: Vec<Entries> = schema.indexes.iter().map(|_| Entries::new()).collect();
        let mut bytes = Vec::new();
        let mut count = 0u64;
        let mut pages = 0u64;
        let mut write_page = |page: &mut Vec<u8>,
                              pending: &mut Vec<Pending>,
                              primary: &mut Entries,
                              secondary: &mut Vec<Entries>|
         -> Result<()> {
            let no = heap_pool.append_page(id, PageClass::Data, PageType::Heap, page)?;
            for p in pending.drain(..) {
                let rid = RowId { page: no, slot: p.slot };
                primary.push(p.pk, rid);
                for (e, k) in secondary.iter_mut().zip(p.secondary) {
                    e.push(k, rid);
                }
            }
            slotted::init(page);
            pages += 1;
            if pages % CHECKPOINT_CHECK_PAGES == 0 {
                self.inner.txn.checkpoint_if_wanted();
            }
            Ok(())
        };
        for row in rows {
            schema.encode_row(name, &row, &mut bytes)?;
            if bytes.len() > max_row {
                return Err(Error::InvalidArgument(format!(
                    "table `{name}`: row {count} of {} bytes exceeds the {max_row} bytes a heap page holds",
                    bytes.len()
                )));
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
            let slot = match slotted::append(&mut page, &bytes) {
                Some(s) => s,
                None => {
                    write_page(&mut page, &mut pending, &mut primary, &mut secondary)?;
                    slotted::append(&mut page, &bytes)
                        .expect("a row of at most max_record_len fits an empty page")
                }
            };
            pending.push(Pending { slot: slot as u16, pk, secondary: keys });
            count += 1;
            if count % LOAD_PROGRESS_EVERY == 0 {
                progress(count);
            }
        }
        if !pending.is_empty() {
            write_page(&mut page, &mut pending, &mut primary, &mut secondary)?;
        }
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

    /// Makes every page written so far durable: with a log, by waiting until the log is
    /// durable to its end (the pages' images are in it); without one, by flushing and syncing
    /// both pools.
    fn make_durable(&self) -> Result<()> {
        match &self.inner.txn.log {
            Some(log) => {
                let end = log.log().record_log().end_lsn();
                log.log().wait_durable(end)
            }
            None => {
                self.inner.table_pool.flush_all()?;
                self.inner.index_pool.flush_all()
            }
        }
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
