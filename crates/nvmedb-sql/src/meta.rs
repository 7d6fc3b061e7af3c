//! What SQL knows about a table beyond the engine's schema: column DEFAULT expressions,
//! multi-column keys, FOREIGN KEY and CHECK constraints.
//!
//! Owns: [`TableMeta`] (and its text form) and [`MetaStore`], the hidden engine table
//! [`META_TABLE`] holding one row per table that has any (key: the table name). The row is
//! written in a transaction of its own, durable before the DDL statement that made it
//! returns. Invariant: a CREATE TABLE replaces its table's row before the table exists, and a
//! DROP TABLE deletes it after the table is gone, so a crash between the two steps leaves at
//! most a row naming a table that does not exist — ignored, and replaced by the next CREATE
//! TABLE of that name — never a table with another table's metadata.
//!
//! A change that rebuilds a table under new columns (ALTER TABLE … ADD/DROP/RENAME COLUMN, a
//! multi-column CREATE INDEX, DROP INDEX of one) first writes the row with both definitions:
//! the current one, and after a line `pending` naming the new engine columns, the one the
//! table has once the rebuild is switched in ([`MetaStore::set_pending`]); then the table is
//! rebuilt (one engine catalog update), then the row is written with the new definition alone.
//! Opening picks the definition whose columns are the engine table's
//! ([`MetaStore::resolve`]), so a crash at any point leaves the old table with its old
//! metadata or the new table with its new metadata.

use crate::error::{SqlError, SqlResult};
use nvmedb::util::sync::{MutexExt, RwLockExt};
use nvmedb::{ColumnType, Database, Schema, Table, Value};
use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

/// The hidden engine table of per-table SQL metadata.
pub const META_TABLE: &str = "$sql_meta";

/// The hidden column holding a multi-column primary key.
pub const PK_COLUMN: &str = "$pk";

/// Longest encoded multi-column key (the hidden column's limit; a longer key is 22001).
pub const KEY_BYTES: u32 = 1024;

/// A multi-column key (a composite PRIMARY KEY, UNIQUE constraint or index), kept by the SQL
/// layer in a hidden column holding the order-preserving encoding of its columns' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDef {
    /// Constraint or index name.
    pub name: String,
    /// The hidden engine column holding the encoded key.
    pub column: String,
    /// The key's columns, in key order.
    pub columns: Vec<String>,
    /// PRIMARY KEY (the hidden column is the engine's primary key).
    pub primary: bool,
    /// No two rows with the same values (NULLs never conflict).
    pub unique: bool,
}

/// A table's SQL metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableMeta {
    /// (column, DEFAULT expression as SQL text).
    pub defaults: Vec<(String, String)>,
    /// Multi-column keys.
    pub keys: Vec<KeyDef>,
    /// FOREIGN KEYs of this table (the child).
    pub fks: Vec<crate::constraint::ForeignKey>,
    /// CHECK constraints.
    pub checks: Vec<crate::constraint::Check>,
    /// While ALTER TABLE … RENAME TO is under way: the table's old name (see
    /// [`crate::rename`]).
    pub renamed_from: Option<String>,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl TableMeta {
    /// True when there is nothing to keep.
    pub fn is_empty(&self) -> bool {
        self.defaults.is_empty()
            && self.keys.is_empty()
            && self.fks.is_empty()
            && self.checks.is_empty()
            && self.renamed_from.is_none()
    }

    /// The DEFAULT of column `col`.
    pub fn default_of(&self, col: &str) -> Option<&str> {
        self.defaults.iter().find(|(c, _)| c == col).map(|(_, e)| e.as_str())
    }

    /// The text form: one line per item, tab-separated fields.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (c, e) in &self.defaults {
            out.push_str(&format!("default\t{}\t{}\n", escape(c), escape(e)));
        }
        for k in &self.keys {
            let cols: Vec<String> = k.columns.iter().map(|c| escape(c)).collect();
            out.push_str(&format!(
                "key\t{}\t{}\t{}\t{}\t{}\n",
                escape(&k.name),
                escape(&k.column),
                u8::from(k.primary),
                u8::from(k.unique),
                cols.join("\t")
            ));
        }
        for fk in &self.fks {
            out.push_str(&crate::constraint::fk_line(fk, &escape));
        }
        for c in &self.checks {
            out.push_str(&format!("check\t{}\t{}\n", escape(&c.name), escape(&c.expr)));
        }
        if let Some(old) = &self.renamed_from {
            out.push_str(&format!("renamed_from\t{}\n", escape(old)));
        }
        out
    }

    /// Parses [`TableMeta::to_text`]; `table` names the row in the error.
    pub fn parse(table: &str, text: &str) -> SqlResult<Self> {
        let mut m = TableMeta::default();
        for line in text.lines() {
            let f: Vec<String> = line.split('\t').map(unescape).collect();
            match f.first().map(String::as_str) {
                Some("default") if f.len() == 3 => m.defaults.push((f[1].clone(), f[2].clone())),
                Some("key") if f.len() >= 6 => m.keys.push(KeyDef {
                    name: f[1].clone(),
                    column: f[2].clone(),
                    primary: f[3] == "1",
                    unique: f[4] == "1",
                    columns: f[5..].to_vec(),
                }),
                Some("renamed_from") if f.len() == 2 => m.renamed_from = Some(f[1].clone()),
                Some("check") if f.len() == 3 => {
                    m.checks.push(crate::constraint::Check { name: f[1].clone(), expr: f[2].clone() })
                }
                Some("fk") if crate::constraint::parse_fk(&f[1..]).is_some() => {
                    m.fks.push(crate::constraint::parse_fk(&f[1..]).expect("checked"))
                }
                _ => {
                    return Err(SqlError::new(
                        crate::error::code::DATA_CORRUPTED,
                        format!("table \"{META_TABLE}\", row \"{table}\": unreadable line `{line}`"),
                    ))
                }
            }
        }
        Ok(m)
    }
}

/// The order-preserving encoding of the values of columns `cols` of `row` (`None` when one
/// is NULL: a NULL never conflicts in a unique key).
pub fn encode_key(schema: &Schema, cols: &[usize], row: &[Value]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(16 * cols.len());
    for &c in cols {
        if row[c].is_null() {
            return None;
        }
        schema.secondary_prefix(c, &row[c], &mut out);
    }
    Some(out)
}

/// `schema` with a hidden column for a multi-column index `name` on `columns` (at the end of
/// the row) and an engine index on it; the key's definition.
pub fn add_key_column(
    mut schema: Schema,
    name: &str,
    columns: &[String],
    unique: bool,
) -> nvmedb::Result<(Schema, KeyDef)> {
    // The first free name: DROP INDEX may have removed one before others.
    let column = (1..)
        .map(|n| format!("$key{n}"))
        .find(|c| schema.column_index(c).is_err())
        .expect("some name is free");
    schema.columns.push(nvmedb::table::Column {
        name: column.clone(),
        ty: ColumnType::Bytes(KEY_BYTES),
        nullable: true,
    });
    let schema =
        if unique { schema.with_unique_index(name, &column)? } else { schema.with_index(name, &column)? };
    let def = KeyDef { name: name.into(), column, columns: columns.to_vec(), primary: false, unique };
    Ok((schema, def))
}

/// The metadata of every table (see the module documentation).
#[derive(Debug)]
pub struct MetaStore {
    db: Database,
    table: Mutex<Option<Table>>,
    rows: RwLock<HashMap<String, TableMeta>>,
    /// Definitions written by [`MetaStore::set_pending`] and not yet resolved: table → (the
    /// engine columns it is for, the definition).
    pending: RwLock<HashMap<String, (Vec<String>, TableMeta)>>,
}

/// The line that separates a row's current definition from its pending one.
const PENDING: &str = "pending";

/// Splits a row's text into its current definition and its pending one (with the engine
/// columns that one is for), if any.
fn split_row(text: &str) -> (&str, Option<(Vec<String>, &str)>) {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let l = line.trim_end_matches('\n');
        if l == PENDING || l.starts_with("pending\t") {
            let cols = l.split('\t').skip(1).map(unescape).collect();
            return (&text[..at], Some((cols, &text[at + line.len()..])));
        }
        at += line.len();
    }
    (text, None)
}

fn eng(e: nvmedb::Error) -> SqlError {
    SqlError::from_engine(e, Some(META_TABLE))
}

impl MetaStore {
    /// Reads the metadata rows of `db` (none if it has no metadata table yet).
    pub fn load(db: &Database) -> SqlResult<Self> {
        let mut rows = HashMap::new();
        let mut pending = HashMap::new();
        let mut bad = None;
        let table = if db.table_names().iter().any(|n| n == META_TABLE) {
            let t = db.table(META_TABLE)?;
            t.scan(|r| {
                let name = String::from_utf8_lossy(r.try_bytes(0)?).into_owned();
                let body = String::from_utf8_lossy(r.try_bytes(1)?).into_owned();
                let (current, next) = split_row(&body);
                match TableMeta::parse(&name, current) {
                    Ok(m) => {
                        rows.insert(name.clone(), m);
                    }
                    Err(e) => bad = Some(e),
                }
                if let Some((cols, text)) = next {
                    match TableMeta::parse(&name, text) {
                        Ok(m) => {
                            pending.insert(name, (cols, m));
                        }
                        Err(e) => bad = Some(e),
                    }
                }
                Ok(true)
            })
            .map_err(eng)?;
            Some(t)
        } else {
            None
        };
        if let Some(e) = bad {
            return Err(e);
        }
        Ok(Self {
            db: db.clone(),
            table: Mutex::new(table),
            rows: RwLock::new(rows),
            pending: RwLock::new(pending),
        })
    }

    fn table(&self) -> SqlResult<Table> {
        let mut t = self.table.locked();
        if let Some(t) = &*t {
            return Ok(t.clone());
        }
        let s = Schema::new(vec![("name", ColumnType::Text(u32::MAX)), ("body", ColumnType::Text(u32::MAX))]);
        let created = self.db.create_table(META_TABLE, s).map_err(eng)?;
        *t = Some(created.clone());
        Ok(created)
    }

    /// Names of the tables that have metadata, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.rows.read_locked().keys().cloned().collect();
        v.sort();
        v
    }

    /// The metadata of table `name` (empty if it has none).
    pub fn get(&self, name: &str) -> TableMeta {
        self.rows.read_locked().get(name).cloned().unwrap_or_default()
    }

    /// Picks, for table `name` whose engine columns are `columns`, the definition written for
    /// them: the pending one when its columns are these (the rebuild that wrote it was
    /// switched in), else the current one. Only memory changes; the next
    /// [`MetaStore::set`] of the table rewrites its row.
    pub fn resolve(&self, name: &str, columns: &[String]) -> TableMeta {
        let next = self.pending.write_locked().remove(name);
        if let Some((cols, meta)) = next {
            if cols == columns {
                let mut rows = self.rows.write_locked();
                if meta.is_empty() {
                    rows.remove(name);
                } else {
                    rows.insert(name.to_string(), meta);
                }
            }
        }
        self.get(name)
    }

    /// Replaces (or, when `meta` is empty, deletes) the row of table `name`; durable when this
    /// returns.
    pub fn set(&self, name: &str, meta: TableMeta) -> SqlResult<()> {
        let known =
            self.rows.read_locked().contains_key(name) || self.pending.read_locked().contains_key(name);
        if !known && meta.is_empty() {
            return Ok(());
        }
        let body = (!meta.is_empty()).then(|| meta.to_text());
        self.write_row(name, body)?;
        self.pending.write_locked().remove(name);
        let mut rows = self.rows.write_locked();
        if meta.is_empty() {
            rows.remove(name);
        } else {
            rows.insert(name.to_string(), meta);
        }
        Ok(())
    }

    /// Before table `name` is rebuilt with engine columns `columns`: writes its row with its
    /// current definition and `next`, the one it has once the rebuild is switched in (see the
    /// module documentation); durable when this returns. The definition in use stays the
    /// current one until [`MetaStore::set`].
    pub fn set_pending(&self, name: &str, columns: &[String], next: &TableMeta) -> SqlResult<()> {
        let current = self.get(name);
        let cols: Vec<String> = columns.iter().map(|c| escape(c)).collect();
        let body = format!("{}{PENDING}\t{}\n{}", current.to_text(), cols.join("\t"), next.to_text());
        self.write_row(name, Some(body))?;
        self.pending.write_locked().insert(name.to_string(), (columns.to_vec(), next.clone()));
        Ok(())
    }

    /// Writes (`Some`) or deletes the row of table `name` in a durable transaction of its own.
    fn write_row(&self, name: &str, body: Option<String>) -> SqlResult<()> {
        let t = self.table()?;
        let key = Value::Bytes(name.as_bytes().to_vec());
        let mut tx = self.db.begin();
        let had = tx.get_for_update(&t, &key).map_err(eng)?.is_some();
        match body {
            None if !had => return Ok(()),
            None => {
                tx.delete(&t, &key).map_err(eng)?;
            }
            Some(b) => {
                let row = [key, Value::Bytes(b.into_bytes())];
                if had {
                    tx.update(&t, &row).map_err(eng)?;
                } else {
                    tx.insert(&t, &row).map_err(eng)?;
                }
            }
        }
        tx.commit().map_err(eng)?;
        Ok(())
    }
}
