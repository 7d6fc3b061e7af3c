//! The SQL view of the engine's tables.
//!
//! Owns: [`TableInfo`] (a table's visible columns with their SQL types, its key, its indexes,
//! and the generator of hidden row ids) and [`Catalog`] (name → table, with a version number
//! that every DDL statement bumps, so cached plans know to re-plan). The engine's catalog is
//! the only schema store: everything here is derived from it when a table is opened.
//!
//! A table created without a primary key gets a hidden first column, [`ROWID_COLUMN`], an
//! 8-byte integer key filled from a per-table counter (continued after a restart from the
//! largest key present); clients never see it (`SELECT *`, COPY and INSERT without a column
//! list skip it).
//!
//! Beside the tables, the catalog holds the database's sequences ([`Sequences`]) and what SQL
//! keeps about tables beyond the engine's schema ([`MetaStore`]: DEFAULTs, multi-column
//! keys), both in hidden engine tables whose names start with `$` and which no statement
//! sees as tables.

use crate::error::{code, SqlError, SqlResult};
use crate::meta::{MetaStore, TableMeta};
use crate::plan::stats::TableStats;
use crate::sequence::Sequences;
use crate::types::SqlType;
use nvmedb::util::sync::RwLockExt;
use nvmedb::{Database, Table};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Name of the hidden row-id column of tables created without a primary key (a name no
/// client column may take).
pub const ROWID_COLUMN: &str = "$rowid";

/// True for the engine tables the SQL layer keeps for itself (sequences, metadata), which are
/// never shown or reachable as tables.
pub fn is_hidden_table(name: &str) -> bool {
    name.starts_with('$')
}

/// A column as SQL sees it.
#[derive(Debug, Clone)]
pub struct ColumnInfo {
    /// Name.
    pub name: String,
    /// SQL type.
    pub ty: SqlType,
    /// Whether NULL is allowed.
    pub nullable: bool,
}

/// A multi-column key of a table, resolved to engine positions.
#[derive(Debug, Clone)]
pub struct CompositeKey {
    /// Its definition.
    pub def: crate::meta::KeyDef,
    /// Engine position of the hidden column holding the encoded key.
    pub column: usize,
    /// Engine positions of the key's columns, in key order.
    pub columns: Vec<usize>,
}

/// A table as SQL sees it.
#[derive(Debug)]
pub struct TableInfo {
    /// The engine table.
    pub table: Table,
    /// Name.
    pub name: String,
    /// All engine columns in row order (the hidden row id first, when there is one).
    pub columns: Vec<ColumnInfo>,
    /// Whether column 0 is the hidden row id.
    pub hidden_rowid: bool,
    /// Engine position of the primary-key column.
    pub pk: usize,
    /// Secondary indexes: (name, engine column, unique).
    pub indexes: Vec<(String, usize, bool)>,
    /// Statistics for the planner (kept across DDL that rebuilds the table).
    pub stats: Arc<TableStats>,
    /// DEFAULTs and multi-column keys.
    pub meta: TableMeta,
    /// The multi-column keys, each kept in a hidden column at the end of the row (the
    /// order-preserving encoding of its columns' values; NULL when one of them is NULL).
    pub composite: Vec<CompositeKey>,
    /// Engine positions of the columns of each foreign key of `meta.fks`, in key order.
    pub fk_columns: Vec<Vec<usize>>,
    /// Next hidden row id.
    next_rowid: AtomicI64,
}

impl TableInfo {
    /// Builds the SQL view of `table` (with fresh statistics).
    pub fn new(table: Table) -> SqlResult<Self> {
        Self::with_stats(table, Arc::default())
    }

    /// Builds the SQL view of `table` keeping statistics `stats`.
    pub fn with_stats(table: Table, stats: Arc<TableStats>) -> SqlResult<Self> {
        Self::with_meta(table, stats, TableMeta::default())
    }

    /// Builds the SQL view of `table` keeping statistics `stats`, with metadata `meta`.
    pub fn with_meta(table: Table, stats: Arc<TableStats>, meta: TableMeta) -> SqlResult<Self> {
        let s = table.schema();
        let columns: Vec<ColumnInfo> = s
            .columns
            .iter()
            .map(|c| ColumnInfo { name: c.name.clone(), ty: SqlType::of_column(c.ty), nullable: c.nullable })
            .collect();
        let hidden_rowid = s.primary_key == 0 && s.columns[0].name == ROWID_COLUMN;
        let pos = |n: &str| s.columns.iter().position(|c| c.name == n);
        let mut composite = Vec::new();
        for k in &meta.keys {
            let broken = || {
                SqlError::new(
                    code::DATA_CORRUPTED,
                    format!(
                        "table \"{}\": key \"{}\" names a column that does not exist",
                        table.name(),
                        k.name
                    ),
                )
            };
            let column = pos(&k.column).ok_or_else(broken)?;
            let columns =
                k.columns.iter().map(|c| pos(c).ok_or_else(broken)).collect::<SqlResult<Vec<_>>>()?;
            composite.push(CompositeKey { def: k.clone(), column, columns });
        }
        let mut fk_columns = Vec::new();
        for fk in &meta.fks {
            let cols = fk.columns.iter().map(|c| pos(c)).collect::<Option<Vec<_>>>().ok_or_else(|| {
                SqlError::new(
                    code::DATA_CORRUPTED,
                    format!(
                        "table \"{}\": foreign key \"{}\" names a column that does not exist",
                        table.name(),
                        fk.name
                    ),
                )
            })?;
            fk_columns.push(cols);
        }
        let next = if hidden_rowid {
            table
                .last_key()
                .map_err(|e| SqlError::from_engine(e, Some(table.name())))?
                .and_then(|v| v.as_int())
                .unwrap_or(0)
                + 1
        } else {
            1
        };
        Ok(Self {
            name: table.name().to_string(),
            pk: s.primary_key,
            indexes: s.indexes.iter().map(|ix| (ix.name.clone(), ix.column, ix.unique)).collect(),
            columns,
            hidden_rowid,
            stats,
            meta,
            composite,
            fk_columns,
            next_rowid: AtomicI64::new(next),
            table,
        })
    }

    /// Engine positions of the columns a client sees, in order.
    pub fn visible(&self) -> std::ops::Range<usize> {
        usize::from(self.hidden_rowid)..self.columns.len() - self.composite.len()
    }

    /// True for engine column `i` when no client sees it (the row id, a key column).
    pub fn is_hidden(&self, i: usize) -> bool {
        !self.visible().contains(&i)
    }

    /// Engine position of the visible column `name`.
    pub fn column(&self, name: &str) -> SqlResult<usize> {
        self.visible().find(|&i| self.columns[i].name == name).ok_or_else(|| {
            SqlError::new(
                code::UNDEFINED_COLUMN,
                format!("column \"{name}\" of relation \"{}\" does not exist", self.name),
            )
            .with_table(&self.name)
            .with_column(name)
        })
    }

    /// A fresh hidden row id.
    pub fn next_rowid(&self) -> i64 {
        self.next_rowid.fetch_add(1, Ordering::Relaxed)
    }

    /// Engine positions of the primary-key columns, in key order (what the system catalogs
    /// show).
    pub fn primary_key_columns(&self) -> Vec<usize> {
        match self.composite.iter().find(|k| k.def.primary) {
            Some(k) => k.columns.clone(),
            None => vec![self.pk],
        }
    }

    /// Secondary indexes as the system catalogs show them: name, engine positions of the
    /// indexed columns in key order, unique.
    /// A multi-column key shows as the index on its columns (its hidden column is internal).
    pub fn index_columns(&self) -> Vec<(String, Vec<usize>, bool)> {
        self.indexes
            .iter()
            .map(|(name, col, unique)| {
                match self.composite.iter().find(|k| !k.def.primary && k.column == *col) {
                    Some(k) => (k.def.name.clone(), k.columns.clone(), k.def.unique),
                    None => (name.clone(), vec![*col], *unique),
                }
            })
            .collect()
    }

    /// The secondary index (position) on engine column `col`, if any.
    pub fn index_on(&self, col: usize) -> Option<usize> {
        self.indexes.iter().position(|(_, c, _)| *c == col)
    }
}

/// All tables, by name, with a version bumped by every DDL statement.
#[derive(Debug)]
pub struct Catalog {
    tables: RwLock<HashMap<String, Arc<TableInfo>>>,
    /// Parent table → (child table, index of its foreign key in `meta.fks`), rebuilt by every
    /// change of the tables.
    referenced: RwLock<HashMap<String, Vec<(String, usize)>>>,
    version: AtomicU64,
    /// The database's sequences.
    pub sequences: Sequences,
    /// Per-table SQL metadata (DEFAULTs, multi-column keys).
    pub meta: MetaStore,
}

impl Catalog {
    /// Reads every table of `db`.
    pub fn load(db: &Database) -> SqlResult<Self> {
        let mut tables = HashMap::new();
        let meta = MetaStore::load(db)?;
        let sequences = Sequences::load(db)?;
        let hidden = crate::rename::finish_at_open(db, &meta, &sequences);
        for name in db.table_names() {
            if is_hidden_table(&name) || hidden.contains(&name) {
                continue;
            }
            let t = db.table(&name)?;
            let cols: Vec<String> = t.schema().columns.iter().map(|c| c.name.clone()).collect();
            let m = meta.resolve(&name, &cols);
            tables.insert(name, Arc::new(TableInfo::with_meta(t, Arc::default(), m)?));
        }
        let c = Self {
            tables: RwLock::new(tables),
            referenced: RwLock::default(),
            version: AtomicU64::new(1),
            sequences,
            meta,
        };
        c.index_references();
        Ok(c)
    }

    /// Rebuilds the map from parents to the foreign keys that reference them.
    fn index_references(&self) {
        let mut map: HashMap<String, Vec<(String, usize)>> = HashMap::new();
        for (name, t) in self.tables.read_locked().iter() {
            for (i, fk) in t.meta.fks.iter().enumerate() {
                map.entry(fk.parent.clone()).or_default().push((name.clone(), i));
            }
        }
        *self.referenced.write_locked() = map;
    }

    /// The tables with a foreign key referencing table `parent`, each with the index of that
    /// key in its `meta.fks` (empty for most tables, at the cost of one map look-up).
    pub fn referencing(&self, parent: &str) -> Vec<(Arc<TableInfo>, usize)> {
        let refs = self.referenced.read_locked();
        let Some(list) = refs.get(parent) else { return vec![] };
        let tables = self.tables.read_locked();
        list.iter().filter_map(|(c, i)| tables.get(c).map(|t| (t.clone(), *i))).collect()
    }

    /// The current version (plans made at an older one are re-made).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Table `name`, or 42P01.
    pub fn get(&self, name: &str) -> SqlResult<Arc<TableInfo>> {
        self.tables.read_locked().get(name).cloned().ok_or_else(|| {
            SqlError::new(code::UNDEFINED_TABLE, format!("relation \"{name}\" does not exist"))
                .with_table(name)
        })
    }

    /// True if table `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        self.tables.read_locked().contains_key(name)
    }

    /// Names of all tables, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.tables.read_locked().keys().cloned().collect();
        v.sort();
        v
    }

    /// Installs (or replaces) the SQL view of `table` and bumps the version (a replaced view's
    /// statistics carry over).
    pub fn put(&self, table: Table) -> SqlResult<Arc<TableInfo>> {
        let stats = self.tables.read_locked().get(table.name()).map(|t| t.stats.clone()).unwrap_or_default();
        let meta = self.meta.get(table.name());
        let info = Arc::new(TableInfo::with_meta(table, stats, meta)?);
        self.tables.write_locked().insert(info.name.clone(), info.clone());
        self.index_references();
        self.version.fetch_add(1, Ordering::AcqRel);
        Ok(info)
    }

    /// Gives columns of table `name` SQL types other than their engine columns' (the catalog
    /// views' arrays, stored as bytes): `types` are (column name, type).
    pub fn retype(&self, name: &str, types: &[(&str, SqlType)]) -> SqlResult<()> {
        let cur = self.get(name)?;
        let mut info = TableInfo::with_meta(cur.table.clone(), cur.stats.clone(), cur.meta.clone())?;
        for (col, ty) in types {
            let c = info.columns.iter_mut().find(|c| c.name == *col).ok_or_else(|| {
                SqlError::new(
                    code::UNDEFINED_COLUMN,
                    format!("column \"{col}\" of relation \"{name}\" does not exist"),
                )
            })?;
            c.ty = *ty;
        }
        self.tables.write_locked().insert(name.to_string(), Arc::new(info));
        self.version.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Installs the SQL view of `table` after a rebuild that changed its columns: as
    /// [`Catalog::put`], with fresh statistics (the old ones are by column position).
    pub fn put_reshaped(&self, table: Table) -> SqlResult<Arc<TableInfo>> {
        let meta = self.meta.get(table.name());
        let info = Arc::new(TableInfo::with_meta(table, Arc::default(), meta)?);
        self.tables.write_locked().insert(info.name.clone(), info.clone());
        self.index_references();
        self.version.fetch_add(1, Ordering::AcqRel);
        Ok(info)
    }

    /// Before a CREATE TABLE makes the engine table: stores its metadata and creates the
    /// sequences it owns (replacing leftovers a crash left of an earlier CREATE TABLE of the
    /// same name; 42P07 if another relation holds one of their names).
    pub fn create_table_parts(&self, ct: &crate::plan::CreateTablePlan) -> SqlResult<()> {
        let stale = |seq: &str| self.sequences.def(seq).map(|d| d.owner.as_deref() == Some(ct.name.as_str()));
        for (seq, _) in &ct.sequences {
            if stale(seq) == Some(false) || self.exists(seq) {
                return Err(SqlError::new(
                    code::DUPLICATE_TABLE,
                    format!("relation \"{seq}\" already exists"),
                ));
            }
        }
        self.meta.set(&ct.name, ct.meta.clone())?;
        for (seq, def) in &ct.sequences {
            if stale(seq) == Some(true) {
                self.sequences.drop_sequence(seq)?;
            }
            self.sequences.create(seq, def.clone())?;
        }
        Ok(())
    }

    /// After a DROP TABLE removed the engine table: deletes its metadata and the sequences it
    /// owned.
    pub fn drop_table_parts(&self, name: &str) -> SqlResult<()> {
        self.meta.set(name, TableMeta::default())?;
        for seq in self.sequences.owned_by(name) {
            self.sequences.drop_sequence(&seq)?;
        }
        Ok(())
    }

    /// Forgets table `name` and bumps the version.
    pub fn remove(&self, name: &str) {
        self.tables.write_locked().remove(name);
        self.index_references();
        self.version.fetch_add(1, Ordering::AcqRel);
    }
}
