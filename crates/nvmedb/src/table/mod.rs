//! Tables: rows in a heap file, a B+tree primary index, secondary indexes, and the catalog.
//!
//! Owns: `Table` (insert, get, update, delete, scans, range and secondary lookups) and the
//! catalog format. Invariants: every live row has exactly one primary-index entry pointing at
//! it and one entry per secondary index; modifications of one primary key are serialised by a
//! striped key lock, so the row and its index entries change together with respect to other
//! writers. Every writer holds the key's exclusive lock (lock manager) and is entered in
//! [`PendingWriters`] with the key's committed row (its before-image) from before its first
//! page change until its change is committed or rolled back; reads outside serializable
//! transactions take no lock and never wait: they see the row under its page latch when no
//! writer of it is in flight, and its before-image when one is (see `read_committed`).
//!
//! Isolation of the reads here: each row is read as last committed (read committed, row by
//! row). Scans, ranges, counts (`primary_keys`) and secondary lookups (`lookup`,
//! `index_keys`) are also exact: every key is decided once, and a row committed when the walk
//! passes its key is seen exactly once, as last committed; no uncommitted row is seen. They
//! are not snapshots: a transaction that commits while a scan runs shows in the keys the scan
//! reaches after the commit and not in those before. The transaction API (`db::transaction`)
//! adds serializable reads under locks.
//!
//! Why the lock-free walks are exact (`scan::KeyRange::for_each_committed`). The index is
//! walked a leaf at a time; each visit accounts for an interval of keys, the intervals tile
//! the range, and every key of the tree inside a visit's interval is in the leaf the visit
//! holds latched. Under that latch the walk takes the keys of the table that other
//! transactions have in flight, with their before-images. A writer publishes the image (read
//! under the key's exclusive lock) before its first page change of the key and withdraws it
//! only after its commit is durable or its rollback complete; the latch hand-over orders
//! every page change the leaf shows after the image that preceded it. So under the latch:
//! - a key with no image has no change in flight that the leaf shows: its entry, or its
//!   absence, is committed (a writer that left had finished; one entering now has not yet
//!   touched this leaf and cannot while the latch is held);
//! - a key with an image is decided by the image alone, wherever its entries are: a delete
//!   in flight (the entry and the heap row already gone: the image is passed, so the row is
//!   not missed); an insert in flight (an entry present: skipped, the image says absent); an
//!   update that grows the row (it moves to another page; the entry is re-pointed) or changes
//!   an indexed column (a new secondary entry before the old one goes: both skipped, the
//!   image is passed once at the position of its committed value, inside the one visit whose
//!   interval holds that position); a key deleted and inserted again, or a rollback half-way
//!   (entries come and go): skipped, the image stands. The image is merged in key order with
//!   the entries, so a walk stays in index order.
//!
//! A key not in flight at its visit is read afterwards through its row id: under the heap
//! page latch, a row holding the key with an idle stripe is committed; otherwise (the row
//! moved, went, or a writer entered since) it is read as `Table::read` reads it, which gives
//! the committed state at that moment (the image of a writer that entered since the visit).
//! Either way the key is decided once. For secondary walks, a row read that way is kept only
//! if it still has the value looked for; a committed change of an indexed value while the
//! walk runs moves the row's position, so the row may then show at both values or at none.
//! `scan_partition` goes in heap order for parallel analytic scans and is not exact: a row
//! moved between heap pages while it runs may be seen twice or missed.

//!
//! The `Table` handle is here; its methods live by seam: `read.rs` (point reads and
//! `read_many`), `scan.rs` (scans, ranges, index walks), `write.rs` (insert, update, delete
//! with compensation, and recovery's undo), `index.rs` (uniqueness and entry-size checks, the
//! integrity check), `locks.rs` (key locks, unique-value locks, the auto-commit wrapper).

pub mod catalog;
pub mod files;
pub mod heap;
mod hints;
mod index;
mod locks;
mod ranges;
mod read;
mod scan;
pub mod schema;
mod write;

pub use heap::{HeapFile, RowId};
pub(crate) use locks::LockedRow;
pub use read::READ_BATCH;
pub use scan::scan_partition_pages;
pub(crate) use scan::{KeyBatch, KeyRange, Serial};

use schema::RowLayout;
pub use schema::{Column, ColumnType, IndexDef, RowView, Schema, Value};

use crate::btree::BTree;
use crate::error::{Error, Result};
use crate::txn::{PendingWriters, TxnShared};
use crate::util::sync::MutexExt;
use std::sync::{Arc, Mutex};

/// Striped physical key locks per table (see `Table::key_lock`).
const KEY_LOCK_STRIPES: usize = 256;

/// Shared state of an open table.
pub(crate) struct TableInner {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) schema: Schema,
    /// Constant column offsets of `schema`'s rows.
    pub(crate) layout: RowLayout,
    pub(crate) heap: HeapFile,
    pub(crate) primary: BTree,
    pub(crate) secondaries: Vec<BTree>,
    /// Where rows of primary keys were last found, for point reads (checked, never trusted).
    hints: hints::RowHints,
    key_locks: Box<[Mutex<()>]>,
    /// Set when a failed change could not be reversed; every later call reports it.
    poisoned: Mutex<Option<String>>,
    /// Fast check of `poisoned` for the read path.
    is_poisoned: std::sync::atomic::AtomicBool,
    /// Transactions: the log (when the database is durable), locks, ids.
    txn: Arc<TxnShared>,
}

/// A handle to a table; cheap to clone and safe to share between threads.
#[derive(Clone)]
pub struct Table {
    pub(crate) inner: Arc<TableInner>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({})", self.inner.name)
    }
}

impl Table {
    pub(crate) fn new(
        id: u32,
        name: String,
        schema: Schema,
        heap: HeapFile,
        primary: BTree,
        secondaries: Vec<BTree>,
        txn: Arc<TxnShared>,
    ) -> Self {
        Self {
            inner: Arc::new(TableInner {
                id,
                name,
                layout: RowLayout::of(&schema),
                schema,
                heap,
                primary,
                secondaries,
                hints: hints::RowHints::new(txn.row_hint_budget.clone()),
                key_locks: (0..KEY_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
                poisoned: Mutex::new(None),
                is_poisoned: std::sync::atomic::AtomicBool::new(false),
                txn,
            }),
        }
    }

    /// Table name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Table id (names its files).
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Schema.
    pub fn schema(&self) -> &Schema {
        &self.inner.schema
    }

    /// A view of row bytes of this table, reading columns through its [`RowLayout`].
    fn view<'a>(&'a self, bytes: &'a [u8]) -> RowView<'a> {
        RowView::with_layout(&self.inner.schema, &self.inner.layout, bytes)
    }

    /// Number of heap pages.
    pub fn heap_pages(&self) -> Result<u64> {
        self.inner.heap.pages()
    }

    /// Bytes of row a heap page holds (rows longer than that go to overflow pages): what the
    /// table's page size leaves after the page and slot headers.
    pub fn heap_page_capacity(&self) -> usize {
        self.inner.heap.max_inline_bytes()
    }

    /// Makes every later use of this handle (and its clones) fail: the table was dropped or
    /// replaced by a rebuild.
    pub(crate) fn mark_dropped(&self) {
        self.poison("the table was dropped or rebuilt; open it again by name".into());
    }

    /// The largest primary key (`None` for an empty table), e.g. to continue a sequence of
    /// generated keys after a restart.
    pub fn last_key(&self) -> Result<Option<Value>> {
        self.check_poisoned()?;
        let Some(k) = self.inner.primary.last_key()? else { return Ok(None) };
        let s = &self.inner.schema;
        let ty = s.columns[s.primary_key].ty;
        Ok(Some(match ty {
            ColumnType::Int | ColumnType::Int32 | ColumnType::Int16 | ColumnType::Date => {
                Value::Int(crate::btree::key::decode_i64(&k).ok_or_else(|| self.bad_key(&k))?)
            }
            ColumnType::Timestamp => {
                Value::Timestamp(crate::btree::key::decode_i64(&k).ok_or_else(|| self.bad_key(&k))?)
            }
            _ => {
                // Other key types: the row holds the value.
                let v = self.read_committed(&k, None, |r| r.value(s.primary_key))?;
                v.ok_or_else(|| self.bad_key(&k))?
            }
        }))
    }

    fn bad_key(&self, k: &[u8]) -> Error {
        Error::Corruption {
            file: files::index_name(self.inner.id),
            offset: 0,
            detail: format!("primary index of `{}` holds key {k:02x?} of the wrong shape", self.inner.name),
        }
    }

    /// Returns `r` once every commit it can have seen is durable: with early lock release a
    /// committed change is visible before its flush, and an auto-commit read must not be
    /// acknowledged before what it saw would survive a crash (see `txn::shared`).
    fn acknowledged<T>(&self, r: Result<T>) -> Result<T> {
        let v = r?;
        self.inner.txn.wait_released()?;
        Ok(v)
    }

    /// [`Table::acknowledged`] for a point read of `pk`: it can have seen only changes of
    /// writers of the key's stripe, so it waits only for theirs (`PendingWriters::released`).
    fn acknowledged_key<T>(&self, pk: &[u8], r: Result<T>) -> Result<T> {
        let v = r?;
        self.inner.txn.wait_released_in(PendingWriters::stripe(self.inner.id, pk))?;
        Ok(v)
    }

    /// The primary-key value of `row` (an error if the row is too short to have one).
    pub(crate) fn pk_of<'r>(&self, row: &'r [Value]) -> Result<&'r Value> {
        let s = &self.inner.schema;
        row.get(s.primary_key).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "table `{}` has {} columns, the row has {} values",
                self.inner.name,
                s.columns.len(),
                row.len()
            ))
        })
    }

    fn pk_bytes(&self, key: &Value) -> Result<Vec<u8>> {
        self.inner.schema.primary_key_bytes(&self.inner.name, key)
    }

    fn check_poisoned(&self) -> Result<()> {
        if !self.inner.is_poisoned.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        match &*self.inner.poisoned.locked() {
            Some(why) => Err(Error::Poisoned(format!("table `{}`: {why}", self.inner.name))),
            None => Ok(()),
        }
    }

    fn poison(&self, why: String) {
        *self.inner.poisoned.locked() = Some(why);
        self.inner.is_poisoned.store(true, std::sync::atomic::Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::MemStorage;
    use crate::{BufferSize, Database, Options};

    /// Table `t` (an integer key, a value of up to 900 bytes) in a database in memory opened
    /// with `opts`, 4 KiB pages and no log.
    fn table_in_memory(opts: Options) -> (Database, Table) {
        let opts = Options { table_page_size: 4096, index_page_size: 4096, wal: false, ..opts };
        let db = Database::open_with_storage(Arc::new(MemStorage::new()), opts).unwrap();
        let t = db
            .create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Bytes(900))]))
            .unwrap();
        (db, t)
    }

    /// A row of [`table_in_memory`]'s table with a value of `len` bytes.
    fn row(id: i64, len: usize) -> [Value; 2] {
        [Value::Int(id), Value::Bytes(vec![id as u8; len])]
    }

    /// Row-id hints gone stale in every way a row leaves its id — moved by an update that
    /// grows it, deleted, deleted and inserted again, its slot taken by another key's row —
    /// still give each key's current row (or its absence) through `read`, `read_many` and a
    /// read-committed transaction, and each read replaces a stale hint by the row's new id.
    /// With hints off (`row_hint_bytes` 0) the answers are the same and no hint is kept.
    #[test]
    fn stale_row_hints_are_checked_and_replaced() {
        for hint_bytes in [64 << 20, 0] {
            let (db, t) = table_in_memory(Options { row_hint_bytes: hint_bytes, ..Options::default() });
            let pk = |id: i64| crate::btree::key::encode_i64(id);
            let n = 200i64;
            for id in 0..n {
                t.insert(&row(id, 8)).unwrap();
            }
            for id in 0..n {
                assert_eq!(t.read(&Value::Int(id), |r| r.bytes(1).len()).unwrap(), Some(8));
                let want = if hint_bytes > 0 { t.rid_for(&pk(id)).unwrap() } else { None };
                assert_eq!(t.inner.hints.get(&pk(id)), want, "key {id}: a read leaves a hint");
            }
            let before: Vec<Option<RowId>> = (0..n).map(|id| t.inner.hints.get(&pk(id))).collect();
            // Expected row length per key (None: no row).
            let mut expect: Vec<Option<usize>> = vec![Some(8); n as usize];
            // The last key's slot goes to another key: its hint points at that key's row.
            assert!(t.delete(&Value::Int(n - 1)).unwrap());
            t.insert(&row(5000, 8)).unwrap();
            expect[n as usize - 1] = None;
            for id in 0..n - 1 {
                match id % 4 {
                    0 => {
                        assert!(t.update(&row(id, 900)).unwrap());
                        expect[id as usize] = Some(900);
                    }
                    1 => {
                        assert!(t.delete(&Value::Int(id)).unwrap());
                        expect[id as usize] = None;
                    }
                    2 => {
                        assert!(t.delete(&Value::Int(id)).unwrap());
                        t.insert(&row(id, 50)).unwrap();
                        expect[id as usize] = Some(50);
                    }
                    _ => {}
                }
            }
            if hint_bytes > 0 {
                assert_eq!(before[n as usize - 1], t.rid_for(&pk(5000)).unwrap(), "the freed slot is reused");
                let stale = (0..n).filter(|&id| before[id as usize] != t.rid_for(&pk(id)).unwrap()).count();
                assert!(stale >= 100, "{stale} hints went stale");
            }
            let len_of = |r: RowView<'_>| r.bytes(1).len();
            for id in 0..n {
                let e = expect[id as usize];
                assert_eq!(t.read(&Value::Int(id), len_of).unwrap(), e, "read of key {id}");
                let mut tx = db.begin_with(crate::Isolation::ReadCommitted);
                assert_eq!(tx.read(&t, &Value::Int(id), len_of).unwrap(), e, "transaction read of key {id}");
                tx.commit().unwrap();
                let now = if hint_bytes > 0 && e.is_some() { t.rid_for(&pk(id)).unwrap() } else { None };
                if e.is_some() {
                    assert_eq!(t.inner.hints.get(&pk(id)), now, "key {id}: the read replaced its hint");
                }
            }
            // read_many, with the hints just replaced and with the stale ones put back.
            let keys: Vec<Value> = (0..n).chain([5000]).map(Value::Int).collect();
            for round in 0..2 {
                if round == 1 && hint_bytes > 0 {
                    for id in 0..n {
                        if let Some(r) = before[id as usize] {
                            t.inner.hints.put(&pk(id), r);
                        }
                    }
                }
                let mut got = vec![None; keys.len()];
                t.read_many(&keys, |i, r| got[i] = r.map(len_of)).unwrap();
                for id in 0..n {
                    assert_eq!(got[id as usize], expect[id as usize], "read_many of key {id}, round {round}");
                }
                assert_eq!(got[n as usize], Some(8), "read_many of key 5000, round {round}");
            }
            assert_eq!(t.check_integrity().unwrap(), expect.iter().flatten().count() as u64 + 1);
        }
    }

    /// A database on disk (real O_DIRECT files) with table `t` of `rows` rows of `len`-byte
    /// values, created with `opts` and closed.
    fn table_on_disk(dir: &std::path::Path, opts: &Options, rows: i64, len: usize) {
        let db = Database::open(dir, opts.clone()).unwrap();
        let t = db
            .create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Bytes(900))]))
            .unwrap();
        // One transaction: a durable commit per row would sync the log thousands of times.
        let mut tx = db.begin();
        for id in 0..rows {
            tx.insert(&t, &row(id, len)).unwrap();
        }
        tx.commit().unwrap();
        db.close().unwrap();
    }

    /// `read_many` of keys whose heap pages all miss reads them together: one batched
    /// submission for the batch (one `io_uring_enter`, counted by the device layer), not one
    /// read per key as the same number of single reads costs.
    #[test]
    fn read_many_issues_the_misses_of_a_batch_together() {
        let dir = nvmedb_testkit::TmpDir::new("read-many-misses");
        let opts = Options {
            table_page_size: 4096,
            index_page_size: 4096,
            table_buffer: BufferSize::Bytes(256 * 4096),
            index_buffer: BufferSize::Bytes(1024 * 4096),
            wal: false,
            ..Options::default()
        };
        // 900-byte rows: 4 to a page, so keys 40 apart lie on pages 10 apart.
        table_on_disk(dir.path(), &opts, 4000, 900);
        let db = Database::open(dir.path(), opts).unwrap();
        let t = db.table("t").unwrap();
        // The index into memory (kept resident), no heap page.
        t.primary_keys(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_| Ok(true)).unwrap();
        assert_eq!(db.buffer_stats().0.reads, 0, "no heap page read yet");
        let uring = crate::io::FileDevice::open(dir.join("probe")).unwrap().uses_io_uring();
        let check = |keys: &[i64], batched: bool| {
            let (reads, subs) = (db.buffer_stats().0.reads, crate::io::thread_submissions());
            if batched {
                let values: Vec<Value> = keys.iter().map(|&k| Value::Int(k)).collect();
                let mut got = vec![None; keys.len()];
                t.read_many(&values, |i, r| got[i] = r.map(|r| r.int(0))).unwrap();
                assert_eq!(got, keys.iter().map(|&k| Some(k)).collect::<Vec<_>>());
            } else {
                for &k in keys {
                    assert_eq!(t.read(&Value::Int(k), |r| r.int(0)).unwrap(), Some(k));
                }
            }
            (db.buffer_stats().0.reads - reads, crate::io::thread_submissions() - subs)
        };
        let batch: Vec<i64> = (0..READ_BATCH as i64).map(|j| j * 40).collect();
        let (reads, subs) = check(&batch, true);
        assert_eq!(reads, READ_BATCH as u64, "every key of the batch missed");
        // Without io_uring (NVMEDB_IO_BACKEND=pread) a batch is one pread per page.
        assert_eq!(subs, if uring { 1 } else { READ_BATCH as u64 }, "submissions for the batch's misses");
        // The same number of single reads, of other pages: one submission each.
        let singles: Vec<i64> = (0..READ_BATCH as i64).map(|j| 2000 + j * 40).collect();
        assert_eq!(check(&singles, false), (READ_BATCH as u64, READ_BATCH as u64));
        // A batch that hits reads nothing.
        assert_eq!(check(&batch, true), (0, 0));
    }

    /// A database created with the old defaults (16 KiB table pages, 4 KiB index pages) keeps
    /// them when opened with today's `Options::default()`: the catalog's page sizes win, every
    /// row reads back, and the table takes new rows.
    #[test]
    fn a_database_created_with_the_old_page_sizes_reopens_and_reads_as_before() {
        let dir = nvmedb_testkit::TmpDir::new("old-page-size");
        let old = Options { table_page_size: 16384, index_page_size: 4096, ..Options::default() };
        table_on_disk(dir.path(), &old, 3000, 700);
        let db = Database::open(dir.path(), Options::default()).unwrap();
        let c = db.catalog();
        assert_eq!((c.table_page_size, c.index_page_size), (16384, 4096));
        let t = db.table("t").unwrap();
        assert!(t.heap_pages().unwrap() < 3000 / 16, "rows are packed in 16 KiB pages");
        let len = |r: RowView<'_>| r.bytes(1).len();
        for id in 0..3000 {
            assert_eq!(t.read(&Value::Int(id), len).unwrap(), Some(700), "row {id}");
        }
        let mut tx = db.begin();
        for id in 3000..3100 {
            tx.insert(&t, &row(id, 700)).unwrap();
        }
        tx.commit().unwrap();
        drop(t);
        db.close().unwrap();
        let db = Database::open(dir.path(), Options::default()).unwrap();
        assert_eq!(db.catalog().table_page_size, 16384);
        let t = db.table("t").unwrap();
        let mut n = 0;
        t.scan(|r| {
            assert_eq!(r.bytes(1).len(), 700);
            n += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!(n, 3100);
        assert_eq!(t.check_integrity().unwrap(), 3100);
    }

    /// Between a batch's stages, the leaves it located split (new keys around its own) and its
    /// rows move to other heap pages (they grow): every row is still found, and is the right
    /// one.
    #[test]
    fn read_many_survives_splits_and_moves_between_its_stages() {
        let (_db, t) = table_in_memory(Options {
            table_buffer: BufferSize::Bytes(16 * 4096),
            index_buffer: BufferSize::Bytes(1024 * 4096),
            ..Options::default()
        });
        // Keys 1000 apart; a 4 KiB leaf holds about 126 of them.
        for id in (0..2000i64).map(|i| i * 1000) {
            t.insert(&row(id, 8)).unwrap();
        }
        let leaves_before = t.inner.primary.check().unwrap().leaves;
        let keys: Vec<Value> = (0..2000i64).map(|i| Value::Int(i * 1000)).collect();
        let mut got = vec![None; keys.len()];
        let mut batch = 0i64;
        t.read_many_staged(&keys, |i, r| got[i] = r.map(|r| (r.int(0), r.bytes(1).len())), &mut || {
            let first = batch * READ_BATCH as i64 * 1000;
            // 150 keys just below the batch's first key split its leaf so that the batch's
            // keys go to the new right half; then the batch's rows grow and move.
            for id in first - 150..first {
                t.insert(&row(id, 8)).unwrap();
            }
            for id in (0..READ_BATCH as i64).map(|j| first + j * 1000).filter(|&id| id < 2_000_000) {
                assert!(t.update(&row(id, 900)).unwrap(), "row {id} exists");
            }
            batch += 1;
        })
        .unwrap();
        let leaves_after = t.inner.primary.check().unwrap().leaves;
        assert!(leaves_after > leaves_before * 3 / 2, "leaves split: {leaves_before} → {leaves_after}");
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(got[i], Some((k.as_int().unwrap(), 900)), "key {k:?}");
        }
    }
}
