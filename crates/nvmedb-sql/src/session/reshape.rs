//! DDL that rebuilds a table under a new engine schema: ALTER TABLE … ADD COLUMN, DROP
//! COLUMN, RENAME COLUMN, and DROP INDEX; and the one copy of a table's rows into a new
//! layout that every rebuild goes through ([`rebuild_from`]).
//!
//! Owns: the schema edits (a new column goes before the hidden key columns; positions of the
//! primary key and the indexes follow the columns they name), the dependency checks of DROP
//! COLUMN and DROP INDEX, and the order of the steps. Crash safety: the table is replaced by
//! one engine catalog update ([`nvmedb::Database::load_table_replacing`]: a crash leaves the
//! old table or the whole new one); when the SQL metadata changes with the columns, its row
//! is first written with both definitions ([`crate::meta::MetaStore::set_pending`]), so
//! whichever table a crash leaves, opening finds its definition. Runs under the DDL gate held
//! exclusively, like all DDL.

use super::{Outcome, Session, LOAD_BATCH};
use crate::catalog::TableInfo;
use crate::error::{code, SqlError, SqlResult};
use crate::meta::TableMeta;
use nvmedb::{Database, Schema, Value};
use std::sync::mpsc;
use std::time::Instant;

/// Fills a row's new columns as a table is copied ([`rebuild_from`]).
pub(super) type RowFill = Box<dyn Fn(&mut [Value]) + Send>;

/// Where a column of a rebuilt table gets its values.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// Column `i` of the old row.
    Old(usize),
    /// This value in every row.
    Const(Value),
}

/// The sources of the columns of `schema` taken from table `old` by column name (columns
/// the old table lacks are NULL).
fn by_name(old: &Schema, schema: &Schema) -> Vec<Source> {
    schema
        .columns
        .iter()
        .map(|c| old.column_index(&c.name).map_or(Source::Const(Value::Null), Source::Old))
        .collect()
}

/// Rebuilds `table` under `schema`, copying its rows by column name; see [`rebuild_from`].
pub(super) fn rebuild_copy(
    db: &Database,
    table: &str,
    schema: Schema,
    fill: Option<RowFill>,
) -> SqlResult<nvmedb::Table> {
    let old = db.table(table).map_err(|e| SqlError::from_engine(e, Some(table)))?;
    let from = by_name(old.schema(), &schema);
    rebuild_from(db, table, schema, from, fill)
}

/// Rebuilds `table` under `schema`, each new column filled from `from`; see [`copy_table`].
pub(super) fn rebuild_from(
    db: &Database,
    table: &str,
    schema: Schema,
    from: Vec<Source>,
    fill: Option<RowFill>,
) -> SqlResult<nvmedb::Table> {
    copy_table(db, table, table, schema, from, fill)
}

/// Copies the rows of table `table` into table `to` with `schema` (the same name: replacing
/// it), each new column filled from `from`, by a bulk load ([`Database::load_table_replacing`]
/// or [`Database::load_table`]) fed by a thread that scans the old table; progress on stderr
/// for big tables.
pub(super) fn copy_table(
    db: &Database,
    table: &str,
    to: &str,
    schema: Schema,
    from: Vec<Source>,
    fill: Option<RowFill>,
) -> SqlResult<nvmedb::Table> {
    let started = Instant::now();
    let engine_err = |e| SqlError::from_engine(e, Some(table));
    let old = db.table(table).map_err(engine_err)?;
    let (rows, rows_rx) = mpsc::sync_channel::<super::LoadBatch>(4);
    let reader = std::thread::spawn(move || {
        let mut batch = Vec::with_capacity(LOAD_BATCH);
        let r = old.scan(|row| {
            let mut r: Vec<Value> = from
                .iter()
                .map(|f| match f {
                    Source::Old(i) => row.value(*i),
                    Source::Const(v) => v.clone(),
                })
                .collect();
            if let Some(fill) = &fill {
                fill(&mut r);
            }
            batch.push(Ok(r));
            if batch.len() >= LOAD_BATCH {
                let b = std::mem::replace(&mut batch, Vec::with_capacity(LOAD_BATCH));
                // The load stopped (it failed): stop reading.
                return Ok(rows.send(b).is_ok());
            }
            Ok(true)
        });
        if let Err(e) = r {
            batch.push(Err(e));
        }
        let _ = rows.send(batch);
    });
    let mut shown = 0;
    let progress = |n: u64| {
        if n / 1_000_000 > shown {
            shown = n / 1_000_000;
            eprintln!("nvmedb: copying {table}: {n} rows ({:.1} s)", started.elapsed().as_secs_f64());
        }
    };
    let rows = rows_rx.into_iter().flatten();
    let loaded = if to == table {
        db.load_table_replacing(table, schema, rows, progress)
    } else {
        let mut failed = None;
        let rows = rows.map_while(|r| r.map_err(|e| failed = Some(e)).ok());
        let made = db.load_table(to, schema, rows, progress);
        match (failed, made) {
            (Some(e), Ok(_)) => {
                // The copy is partial: it must not stay under the new name.
                let _ = db.drop_table(to);
                Err(e)
            }
            (_, made) => made,
        }
    };
    let _ = reader.join();
    loaded.map_err(|e| SqlError::from_engine(e, Some(to)))
}

/// `schema` with column `at` removed (positions of the key and the indexes after it move down).
fn without_column(mut s: Schema, at: usize) -> Schema {
    s.columns.remove(at);
    debug_assert_ne!(s.primary_key, at);
    if s.primary_key > at {
        s.primary_key -= 1;
    }
    s.indexes.retain(|ix| ix.column != at);
    for ix in &mut s.indexes {
        if ix.column > at {
            ix.column -= 1;
        }
    }
    s
}

/// Renames identifier `old` to `new` in the SQL text `sql` (a CHECK expression), leaving the
/// rest as it was; `None` when `old` does not occur.
pub(crate) fn rename_ident(sql: &str, old: &str, new: &str) -> Option<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql).tokenize().ok()?;
    let mut found = false;
    let mut out = String::with_capacity(sql.len());
    for t in &tokens {
        match t {
            Token::Word(w) if w.quote_style.map_or(w.value.to_lowercase(), |_| w.value.clone()) == old => {
                found = true;
                out.push_str(&crate::pgcatalog::quote_ident(new));
            }
            other => out.push_str(&other.to_string()),
        }
    }
    found.then_some(out)
}

fn depends(what: &str, column: &str, table: &str) -> SqlError {
    SqlError::new(
        code::DEPENDENT_OBJECTS_STILL_EXIST,
        format!("cannot drop column {column} of table {table} because other objects depend on it"),
    )
    .with_detail(format!(
        "{what} depends on column {column} of table {table}; drop it first (nvmedb does not drop it with the column)"
    ))
}

impl Session {
    /// Replaces `info`'s table by one with engine `schema`, columns filled from `from`, and
    /// SQL metadata `meta` (see the module documentation for the order of the steps).
    pub(super) fn reshape(
        &mut self,
        info: &TableInfo,
        schema: Schema,
        from: Vec<Source>,
        meta: TableMeta,
        fill: Option<RowFill>,
    ) -> SqlResult<()> {
        let e = self.engine.clone();
        let table = info.name.as_str();
        let cols: Vec<String> = schema.columns.iter().map(|c| c.name.clone()).collect();
        let same_meta = meta == info.meta;
        if !same_meta {
            e.catalog.meta.set_pending(table, &cols, &meta)?;
        }
        match rebuild_from(&e.db, table, schema, from, fill) {
            Ok(t) => {
                let r = if same_meta { Ok(()) } else { e.catalog.meta.set(table, meta) };
                e.catalog.put_reshaped(t)?;
                r
            }
            Err(err) => {
                if !same_meta {
                    e.catalog.meta.set(table, info.meta.clone())?;
                }
                Err(err)
            }
        }
    }

    /// ALTER TABLE … ADD COLUMN: existing rows get the DEFAULT (NULL without one); NOT NULL
    /// with a NULL default on a table with rows is 23502.
    pub(super) fn add_column(
        &mut self,
        info: &TableInfo,
        def: &crate::plan::bind_alter::NewColumn,
    ) -> SqlResult<Outcome> {
        let table = info.name.as_str();
        let name = def.name.as_str();
        if info.visible().any(|i| info.columns[i].name == name) {
            if def.if_not_exists {
                self.notices
                    .push(format!("column \"{name}\" of relation \"{table}\" already exists, skipping"));
                return Ok(Outcome::Done("ALTER TABLE".into()));
            }
            return Err(SqlError::new(
                code::DUPLICATE_COLUMN,
                format!("column \"{name}\" of relation \"{table}\" already exists"),
            ));
        }
        let empty = {
            let mut any = false;
            info.table
                .scan(|_| {
                    any = true;
                    Ok(false)
                })
                .map_err(|err| SqlError::from_engine(err, Some(table)))?;
            !any
        };
        let value = match (&def.value, empty) {
            (Some(x), false) => {
                let d = self.eval_constant(x)?;
                d.to_value(def.ty, name)?
            }
            _ => Value::Null,
        };
        if !def.nullable && value.is_null() && !empty {
            return Err(SqlError::new(
                code::NOT_NULL_VIOLATION,
                format!("column \"{name}\" of relation \"{table}\" contains null values"),
            )
            .with_table(table)
            .with_column(name));
        }
        let old = info.table.schema();
        let at = info.visible().end;
        let mut s = old.clone();
        let ty = def.ty.column_type().expect("the binder checked the type");
        s.columns.insert(at, nvmedb::table::Column { name: name.to_string(), ty, nullable: def.nullable });
        if s.primary_key >= at {
            s.primary_key += 1;
        }
        for ix in &mut s.indexes {
            if ix.column >= at {
                ix.column += 1;
            }
        }
        let mut from: Vec<Source> = (0..old.columns.len()).map(Source::Old).collect();
        from.insert(at, Source::Const(value));
        let mut meta = info.meta.clone();
        meta.defaults.retain(|(c, _)| c != name);
        if let Some(text) = &def.default {
            meta.defaults.push((name.to_string(), text.clone()));
        }
        self.reshape(info, s, from, meta, None)?;
        Ok(Outcome::Done("ALTER TABLE".into()))
    }

    /// ALTER TABLE … DROP COLUMN: refused (2BP01) while a key, index or constraint uses the
    /// column.
    pub(super) fn drop_column(
        &mut self,
        info: &TableInfo,
        name: &str,
        if_exists: bool,
    ) -> SqlResult<Outcome> {
        let table = info.name.as_str();
        let c = match info.column(name) {
            Ok(c) => c,
            Err(_) if if_exists => {
                self.notices
                    .push(format!("column \"{name}\" of relation \"{table}\" does not exist, skipping"));
                return Ok(Outcome::Done("ALTER TABLE".into()));
            }
            Err(err) => return Err(err),
        };
        if info.pk == c {
            return Err(depends(&format!("constraint {table}_pkey on table {table}"), name, table));
        }
        for k in &info.composite {
            if k.columns.contains(&c) {
                let kind = if k.def.primary || k.def.unique { "constraint" } else { "index" };
                return Err(depends(&format!("{kind} {}", k.def.name), name, table));
            }
        }
        if let Some((ix, _, _)) = info.indexes.iter().find(|(_, col, _)| *col == c) {
            return Err(depends(&format!("index {ix}"), name, table));
        }
        for (fk, cols) in info.meta.fks.iter().zip(&info.fk_columns) {
            if cols.contains(&c) {
                return Err(depends(&format!("constraint {} on table {table}", fk.name), name, table));
            }
        }
        for (child, i) in self.engine.catalog.referencing(table) {
            let fk = &child.meta.fks[i];
            if fk.parent_columns.iter().any(|p| p == name) {
                return Err(depends(&format!("constraint {} on table {}", fk.name, child.name), name, table));
            }
        }
        for ch in &info.meta.checks {
            if rename_ident(&ch.expr, name, name).is_some() {
                return Err(depends(&format!("constraint {} on table {table}", ch.name), name, table));
            }
        }
        if info.visible().len() == 1 {
            return Err(SqlError::unsupported(format!(
                "dropping the last column of table \"{table}\" (a table without columns)"
            )));
        }
        let old = info.table.schema();
        let s = without_column(old.clone(), c);
        let from = (0..old.columns.len()).filter(|&i| i != c).map(Source::Old).collect();
        let mut meta = info.meta.clone();
        meta.defaults.retain(|(col, _)| col != name);
        self.reshape(info, s, from, meta, None)?;
        Ok(Outcome::Done("ALTER TABLE".into()))
    }

    /// ALTER TABLE … RENAME COLUMN: the column's name changes in the schema, its DEFAULT, its
    /// keys and the table's constraints (a rebuild: the engine keeps names in its schema).
    pub(super) fn rename_column(
        &mut self,
        info: &TableInfo,
        old_name: &str,
        new_name: &str,
    ) -> SqlResult<Outcome> {
        let table = info.name.as_str();
        let c = info.column(old_name)?;
        let mut meta = info.meta.clone();
        for (child, i) in self.engine.catalog.referencing(table) {
            let fk = &child.meta.fks[i];
            if child.name != table && fk.parent_columns.iter().any(|p| p == old_name) {
                return Err(SqlError::unsupported(format!(
                    "renaming column \"{old_name}\" of \"{table}\": foreign key {} of table \"{}\" references it (drop the constraint, rename, add it again)",
                    fk.name, child.name
                )));
            }
        }
        let rename = |v: &mut String| {
            if v == old_name {
                *v = new_name.to_string();
            }
        };
        for (col, _) in &mut meta.defaults {
            rename(col);
        }
        for k in &mut meta.keys {
            k.columns.iter_mut().for_each(rename);
        }
        for fk in &mut meta.fks {
            fk.columns.iter_mut().for_each(rename);
            if fk.parent == table {
                fk.parent_columns.iter_mut().for_each(rename);
            }
        }
        for ch in &mut meta.checks {
            if let Some(x) = rename_ident(&ch.expr, old_name, new_name) {
                ch.expr = x;
            }
        }
        let old = info.table.schema();
        let mut s = old.clone();
        s.columns[c].name = new_name.to_string();
        let from = (0..old.columns.len()).map(Source::Old).collect();
        self.reshape(info, s, from, meta, None)?;
        Ok(Outcome::Done("ALTER TABLE".into()))
    }

    /// DROP INDEX [IF EXISTS] names: each index's table is rebuilt without it. The index of a
    /// primary key, or of a unique key a foreign key references, is refused (2BP01).
    pub(super) fn drop_indexes(&mut self, names: &[String], if_exists: bool) -> SqlResult<Outcome> {
        let e = self.engine.clone();
        let mut found = Vec::new();
        for n in names {
            let owner = e.catalog.names().into_iter().filter_map(|t| e.catalog.get(&t).ok()).find(|t| {
                t.index_columns().iter().any(|(ix, _, _)| ix == n)
                    || t.composite.iter().any(|k| k.def.primary && k.def.name == *n)
                    || (!t.hidden_rowid
                        && t.composite.iter().all(|k| !k.def.primary)
                        && *n == format!("{}_pkey", t.name))
            });
            match owner {
                Some(t) => found.push((n.clone(), t)),
                None if if_exists => self.notices.push(format!("index \"{n}\" does not exist, skipping")),
                None => {
                    return Err(SqlError::new(
                        code::UNDEFINED_OBJECT,
                        format!("index \"{n}\" does not exist"),
                    ))
                }
            }
        }
        for (n, t) in &found {
            let Some((_, cols, _)) = t.index_columns().into_iter().find(|(ix, _, _)| ix == n) else {
                return Err(SqlError::new(
                    code::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!("cannot drop index {n} because constraint {n} on table {} requires it", t.name),
                ));
            };
            let names: Vec<&str> = cols.iter().map(|&c| t.columns[c].name.as_str()).collect();
            for (child, i) in e.catalog.referencing(&t.name) {
                let fk = &child.meta.fks[i];
                if fk.parent_columns.iter().map(String::as_str).eq(names.iter().copied()) {
                    return Err(SqlError::new(
                        code::DEPENDENT_OBJECTS_STILL_EXIST,
                        format!("cannot drop index {n} because other objects depend on it"),
                    )
                    .with_detail(format!(
                        "constraint {} on table {} depends on index {n}",
                        fk.name, child.name
                    )));
                }
            }
        }
        for (n, _) in &found {
            // Look the table up again: an earlier name of this statement may have rebuilt it.
            let t = e
                .catalog
                .names()
                .into_iter()
                .filter_map(|t| e.catalog.get(&t).ok())
                .find(|t| t.index_columns().iter().any(|(ix, _, _)| ix == n));
            let Some(t) = t else { continue };
            let old = t.table.schema();
            let mut meta = t.meta.clone();
            let (s, from) = match t.composite.iter().find(|k| k.def.name == *n) {
                Some(k) => {
                    meta.keys.retain(|d| d.name != *n);
                    let from = (0..old.columns.len()).filter(|&i| i != k.column).map(Source::Old).collect();
                    (without_column(old.clone(), k.column), from)
                }
                None => {
                    let mut s = old.clone();
                    s.indexes.retain(|ix| ix.name != *n);
                    (s, (0..old.columns.len()).map(Source::Old).collect())
                }
            };
            self.reshape(&t, s, from, meta, None)?;
        }
        Ok(Outcome::Done("DROP INDEX".into()))
    }
}
