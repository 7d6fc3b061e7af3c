//! Changing the set of tables: create, drop, and rebuild (a table replaced atomically by a
//! new one filled before the switch — how TRUNCATE, a new primary key or a new index over
//! existing rows are made).
//!
//! Owns: the order of steps that keeps a crash harmless. A new table's files and B+tree roots
//! are on disk before the catalog names them; a drop or a rebuild takes effect with one
//! catalog update (synced, and logged for standbys); files that no catalog names any more are
//! deleted afterwards, or at the next open if a crash came first. Recovery ignores log records
//! of tables the catalog does not name. Handles to a dropped or replaced table fail from then
//! on ("dropped") instead of changing files nobody reads.
//!
//! Callers keep other writers away from a table while it is dropped or rebuilt (the SQL layer
//! holds its DDL lock): rows written to the old table during a rebuild are not copied.

use super::{heap_name, index_name, Database};
use crate::btree::BTree;
use crate::error::{Error, Result};
use crate::table::catalog::{CatalogData, CatalogStore, TableMeta, DEFAULT_TABLESPACE};
use crate::table::{RowView, Schema, Table, Value};
use crate::util::sync::{MutexExt, RwLockExt};

/// Fills a table that a [`Database::rebuild_table`] is building: rows go in without locks and
/// without an undo list (nobody else can see the table yet); they are logged, and committed
/// once, durably, just before the table is switched in.
pub struct BulkLoad<'a> {
    table: &'a Table,
    txn: u64,
    rows: u64,
}

impl std::fmt::Debug for BulkLoad<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BulkLoad({}, {} rows)", self.table.name(), self.rows)
    }
}

impl BulkLoad<'_> {
    /// Inserts a row into the new table (a duplicate primary key or unique value fails with
    /// `AlreadyExists`, which makes the rebuild fail).
    pub fn insert(&mut self, row: &[Value]) -> Result<()> {
        self.table.bulk_insert(self.txn, row)?;
        self.rows += 1;
        Ok(())
    }

    /// Rows inserted so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The table being filled (its schema, for converting rows).
    pub fn table(&self) -> &Table {
        self.table
    }
}

impl Database {
    /// Creates table `id` called `name` with its heap in tablespace `heap_space` and its indexes
    /// in `index_space`: registers its files, creates its B+trees and writes their roots to
    /// disk. The catalog does not name it yet.
    fn new_table_files(
        &self,
        id: u32,
        name: &str,
        schema: Schema,
        heap_space: &str,
        index_space: &str,
    ) -> Result<(Table, TableMeta)> {
        self.open_table_files(id, heap_space, index_space)?;
        let primary = BTree::create(self.inner.index_pool.clone(), id)?;
        let mut index_roots = Vec::new();
        for _ in &schema.indexes {
            index_roots.push(BTree::create(self.inner.index_pool.clone(), id)?.root());
        }
        // The catalog may only name roots that are on disk.
        self.inner.index_pool.flush_all()?;
        let meta = TableMeta {
            id,
            name: name.to_string(),
            schema,
            primary_root: primary.root(),
            index_roots,
            heap_space: heap_space.to_string(),
            index_space: index_space.to_string(),
        };
        let table = self.table_handle(&meta)?;
        Ok((table, meta))
    }

    /// Checks a schema and table name for a new table.
    pub(super) fn check_new_table(&self, name: &str, schema: &Schema) -> Result<()> {
        schema.validate()?;
        if name.is_empty() || name.len() > 255 {
            return Err(Error::InvalidArgument("a table name needs 1 to 255 bytes".into()));
        }
        // Rows larger than a page go to overflow pages; the bound is the engine's row limit.
        if schema.max_row_bytes() > crate::table::heap::MAX_ROW_BYTES {
            return Err(crate::table::heap::row_too_large(name, schema, None, schema.max_row_bytes()));
        }
        Ok(())
    }

    /// Stores `next` as the catalog and logs it (standbys learn of table changes from the log;
    /// a commit that depends on it waits for a later position, so no wait here).
    pub(super) fn publish_catalog(
        &self,
        cat: &mut (crate::table::catalog::CatalogStore, crate::table::catalog::CatalogData),
        next: crate::table::catalog::CatalogData,
    ) -> Result<()> {
        cat.0.store(&next)?;
        cat.1 = next;
        if let Some(t) = &self.inner.txn.log {
            t.log()
                .append(crate::wal::engine::KIND_CATALOG, &crate::table::catalog::encode_catalog(&cat.1))?;
        }
        Ok(())
    }

    /// Creates a table in the default tablespace. Its name must be new.
    pub fn create_table(&self, name: &str, schema: Schema) -> Result<Table> {
        self.create_table_in(name, schema, DEFAULT_TABLESPACE, DEFAULT_TABLESPACE)
    }

    /// Creates a table with its heap in tablespace `heap_space` and its indexes in
    /// `index_space` (see [`Database::create_tablespace`]). Its name must be new.
    pub fn create_table_in(
        &self,
        name: &str,
        schema: Schema,
        heap_space: &str,
        index_space: &str,
    ) -> Result<Table> {
        self.inner.txn.check_writable(&format!("creating table `{name}`"))?;
        let mut cat = self.inner.catalog.locked();
        self.check_new_table(name, &schema)?;
        if cat.1.tables.iter().any(|t| t.name == name) {
            return Err(Error::AlreadyExists(format!("table `{name}`")));
        }
        let id = cat.1.next_table_id;
        let (table, meta) = self.new_table_files(id, name, schema, heap_space, index_space)?;
        let mut next = cat.1.clone();
        next.next_table_id = id + 1;
        next.tables.push(meta);
        self.publish_catalog(&mut cat, next)?;
        self.inner.tables.write_locked().insert(name.to_string(), table.clone());
        Ok(table)
    }

    /// Forgets table `id`'s files, kept in tablespaces `heap_space` and `index_space`: its
    /// buffered pages are discarded and the files deleted.
    pub(super) fn remove_table_files(&self, id: u32, heap_space: &str, index_space: &str) -> Result<()> {
        self.inner.table_pool.drop_file(id)?;
        self.inner.index_pool.drop_file(id)?;
        let spaces = self.inner.spaces.read_locked().clone();
        spaces.get(heap_space)?.remove(&heap_name(id))?;
        Ok(spaces.get(index_space)?.remove(&index_name(id))?)
    }

    /// Drops table `name`: one catalog update removes it (a crash before it leaves the table
    /// whole, after it leaves it gone), then its buffered pages are discarded and its files
    /// deleted. Handles to it fail from then on.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.inner.txn.check_writable(&format!("dropping table `{name}`"))?;
        let id = {
            let mut cat = self.inner.catalog.locked();
            let pos = cat.1.tables.iter().position(|t| t.name == name).ok_or_else(|| {
                Error::NotFound(format!("table `{name}` in {}", self.inner.storage.location()))
            })?;
            let mut next = cat.1.clone();
            let old = next.tables.remove(pos);
            self.publish_catalog(&mut cat, next)?;
            old
        };
        if let Some(old) = self.inner.tables.write_locked().remove(name) {
            old.mark_dropped();
        }
        self.remove_table_files(id.id, &id.heap_space, &id.index_space)
    }

    /// Replaces table `name` by a new table with `schema` (same name), filled by
    /// `fill(old table, loader)` before the switch. The switch is one catalog update: after a
    /// crash either the old table or the whole new one exists. Handles to the old table fail
    /// afterwards. If `fill` fails, the new table is discarded and the old one stays.
    ///
    /// This is how a table is emptied (a `fill` that inserts nothing), given a new primary key
    /// (a `fill` that copies the rows into the new layout) or an index over its rows.
    ///
    /// ```
    /// # use nvmedb::{ColumnType, Database, Options, Schema, Value};
    /// # fn main() -> nvmedb::Result<()> {
    /// # let db = Database::open_with_storage(std::sync::Arc::new(nvmedb::io::MemStorage::new()), Options::default())?;
    /// let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]))?;
    /// t.insert(&[Value::Int(1), Value::Int(10)])?;
    /// // Index the existing rows by `v`.
    /// let schema = t.schema().clone().with_index("by_v", "v")?;
    /// let t = db.rebuild_table("t", schema, |old, load| old.scan(|row| load.insert(&row.to_values()).map(|()| true)))?;
    /// assert_eq!(t.lookup("by_v", &Value::Int(10))?.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn rebuild_table(
        &self,
        name: &str,
        schema: Schema,
        fill: impl FnOnce(&Table, &mut BulkLoad<'_>) -> Result<()>,
    ) -> Result<Table> {
        self.inner.txn.check_writable(&format!("rebuilding table `{name}`"))?;
        let old = self.table(name)?;
        let (heap_space, index_space) = {
            let cat = self.inner.catalog.locked();
            let t = cat.1.tables.iter().find(|t| t.name == name).ok_or_else(|| {
                Error::NotFound(format!("table `{name}` in {}", self.inner.storage.location()))
            })?;
            (t.heap_space.clone(), t.index_space.clone())
        };
        let id = {
            let mut cat = self.inner.catalog.locked();
            self.check_new_table(name, &schema)?;
            reserve_table_id(&mut cat)?
        };
        let (table, meta) = self.new_table_files(id, name, schema, &heap_space, &index_space)?;
        let shared = self.inner.txn.clone();
        let txn = shared.begin();
        let mut load = BulkLoad { table: &table, txn, rows: 0 };
        let filled = fill(&old, &mut load);
        let rows = load.rows;
        let finished = filled.and_then(|()| match &shared.log {
            Some(log) if rows > 0 => log.commit(txn),
            Some(log) => {
                log.forget(txn);
                Ok(())
            }
            None => Ok(()),
        });
        if let Err(e) = finished {
            if let Some(log) = &shared.log {
                // Recovery must not undo rows of a table that will never exist.
                let _ = log.abort(txn);
            }
            table.mark_dropped();
            let _ = self.remove_table_files(id, &heap_space, &index_space);
            return Err(e);
        }
        let old_id = {
            let mut cat = self.inner.catalog.locked();
            let pos = cat.1.tables.iter().position(|t| t.name == name).ok_or_else(|| {
                Error::NotFound(format!("table `{name}` (dropped while it was being rebuilt)"))
            })?;
            let mut next = cat.1.clone();
            let old = std::mem::replace(&mut next.tables[pos], meta);
            self.publish_catalog(&mut cat, next)?;
            old
        };
        self.inner.tables.write_locked().insert(name.to_string(), table.clone());
        old.mark_dropped();
        self.remove_table_files(old_id.id, &old_id.heap_space, &old_id.index_space)?;
        Ok(table)
    }
}

/// Copies a row of `from` into the column layout of `to` by column name: columns `to` lacks
/// are dropped, columns `from` lacks become NULL.
pub fn convert_row(from: &RowView<'_>, to: &Schema) -> Vec<Value> {
    let fs = from.schema();
    to.columns.iter().map(|c| fs.column_index(&c.name).map_or(Value::Null, |i| from.value(i))).collect()
}

/// Takes the catalog's next table id and stores the catalog with the counter advanced, naming
/// no table yet: the new table's files are named by the id before one later catalog update
/// names the table (a crash in between leaves files no catalog names).
pub(super) fn reserve_table_id(cat: &mut (CatalogStore, CatalogData)) -> Result<u32> {
    let id = cat.1.next_table_id;
    let mut next = cat.1.clone();
    next.next_table_id = id + 1;
    cat.0.store(&next)?;
    cat.1 = next;
    Ok(id)
}
