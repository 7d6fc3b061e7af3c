//! ALTER TABLE, run as DDL (alone, under the gate held exclusively: no other statement or
//! transaction block runs meanwhile, so the rows it checks cannot change under it).
//!
//! Owns: the execution of each [`AlterOp`]. Crash safety: a change of constraints only
//! rewrites the table's metadata row, in one durable transaction (wholly done or not at
//! all); a change of columns rebuilds the table with one switch
//! ([`nvmedb::Database::load_table_replacing`]) and writes the metadata in the order that
//! leaves, after a crash between the two, metadata the catalog reads as the old or the new
//! definition (see each operation).

use super::reshape::rebuild_copy;
use super::{Outcome, Session};
use crate::catalog::{TableInfo, ROWID_COLUMN};
use crate::constraint::ForeignKey;
use crate::error::{code, SqlError, SqlResult};
use crate::plan::bind_alter::AlterOp;
use crate::types::Datum;
use std::collections::HashSet;

fn eng(e: nvmedb::Error, t: &str) -> SqlError {
    SqlError::from_engine(e, Some(t))
}

/// The text of key columns `cols` of a stored row (`None` when one is NULL: such a row
/// references nothing).
fn key_of(t: &TableInfo, r: &nvmedb::RowView<'_>, cols: &[usize]) -> Option<Vec<String>> {
    cols.iter()
        .map(|&c| {
            let d = Datum::from_row(r, c, t.columns[c].ty);
            (!d.is_null()).then(|| d.to_text(t.columns[c].ty))
        })
        .collect()
}

impl Session {
    /// Runs one ALTER TABLE change of `table`.
    pub(super) fn alter(&mut self, table: &str, op: &AlterOp) -> SqlResult<Outcome> {
        let e = self.engine.clone();
        let info = e.catalog.get(table)?;
        match op {
            AlterOp::AddPrimaryKey(column) => self.add_primary_key(&info, column)?,
            AlterOp::AddForeignKey(fk) => {
                validate_fk(&e.catalog, &info, fk)?;
                let mut meta = info.meta.clone();
                meta.fks.push(fk.clone());
                e.catalog.meta.set(table, meta)?;
                e.catalog.put(info.table.clone())?;
            }
            AlterOp::AddCheck(check, x) => {
                self.validate_check(&info, &check.name, x)?;
                let mut meta = info.meta.clone();
                meta.checks.push(check.clone());
                e.catalog.meta.set(table, meta)?;
                e.catalog.put(info.table.clone())?;
            }
            AlterOp::DropConstraint(name, if_exists) => {
                let mut meta = info.meta.clone();
                let before = meta.fks.len() + meta.checks.len();
                meta.fks.retain(|f| f.name != *name);
                meta.checks.retain(|c| c.name != *name);
                if meta.fks.len() + meta.checks.len() == before {
                    if *if_exists {
                        self.notices.push(format!(
                            "constraint \"{name}\" of relation \"{table}\" does not exist, skipping"
                        ));
                        return Ok(Outcome::Done("ALTER TABLE".into()));
                    }
                    return Err(SqlError::new(
                        code::UNDEFINED_OBJECT,
                        format!("constraint \"{name}\" of relation \"{table}\" does not exist"),
                    ));
                }
                e.catalog.meta.set(table, meta)?;
                e.catalog.put(info.table.clone())?;
            }
            AlterOp::AddColumn(def) => return self.add_column(&info, def),
            AlterOp::DropColumn(name, if_exists) => return self.drop_column(&info, name, *if_exists),
            AlterOp::RenameColumn(old, new) => return self.rename_column(&info, old, new),
            AlterOp::RenameTable(new) => self.rename_table(&info, new)?,
        }
        Ok(Outcome::Done("ALTER TABLE".into()))
    }

    /// ALTER TABLE … RENAME TO: the rows are copied under the new name, then the old table is
    /// dropped (see [`crate::rename`] for the steps and what a crash leaves).
    fn rename_table(&mut self, info: &TableInfo, new: &str) -> SqlResult<()> {
        let e = self.engine.clone();
        let old = info.name.as_str();
        if e.catalog.exists(new) || e.catalog.sequences.exists(new) {
            return Err(SqlError::new(code::DUPLICATE_TABLE, format!("relation \"{new}\" already exists")));
        }
        if crate::catalog::is_hidden_table(new) {
            return Err(SqlError::new(
                code::INVALID_TABLE_DEFINITION,
                format!("table names starting with `$` are reserved (\"{new}\")"),
            ));
        }
        let mut meta = info.meta.clone();
        for fk in &mut meta.fks {
            if fk.parent == old {
                fk.parent = new.to_string();
            }
        }
        meta.renamed_from = Some(old.to_string());
        e.catalog.meta.set(new, meta)?;
        let schema = info.table.schema().clone();
        let from = (0..schema.columns.len()).map(super::reshape::Source::Old).collect();
        let t = match super::reshape::copy_table(&e.db, old, new, schema, from, None) {
            Ok(t) => t,
            Err(err) => {
                e.catalog.meta.set(new, crate::meta::TableMeta::default())?;
                return Err(err);
            }
        };
        let done = crate::rename::finish(&e.db, &e.catalog.meta, &e.catalog.sequences, old, new);
        e.catalog.remove(old);
        e.catalog.put(t)?;
        // The children's views still name the old parent: read their metadata again.
        for (child, _) in e.catalog.referencing(old) {
            e.catalog.put(child.table.clone())?;
        }
        done
    }

    fn add_primary_key(&mut self, info: &TableInfo, column: &str) -> SqlResult<()> {
        let e = &self.engine;
        let table = info.name.as_str();
        if !info.hidden_rowid {
            return Err(SqlError::new(
                code::INVALID_TABLE_DEFINITION,
                format!("multiple primary keys for table \"{table}\" are not allowed"),
            ));
        }
        let old = info.table.schema();
        let mut columns = old.columns[1..].to_vec();
        let pk = columns.iter().position(|c| c.name == *column).expect("planner checked the column");
        columns[pk].nullable = false;
        let indexes = old
            .indexes
            .iter()
            .map(|ix| nvmedb::table::IndexDef { column: ix.column - 1, ..ix.clone() })
            .collect();
        let s = nvmedb::Schema { columns, primary_key: pk, indexes };
        debug_assert_ne!(old.columns[0].name, column);
        debug_assert_eq!(old.columns[0].name, ROWID_COLUMN);
        let t = rebuild_copy(&e.db, table, s, None)?;
        e.catalog.put(t)?;
        Ok(())
    }

    /// What a DDL statement evaluates its expressions with (no parameters, settings or
    /// sequences).
    fn ddl_eval_ctx(&self) -> crate::expr::EvalCtx<'_> {
        crate::expr::EvalCtx {
            params: &[],
            settings: &|_| None,
            now: crate::types::now_micros(),
            user: &self.user,
            database: &self.database,
            backend_pid: self.backend_pid,
            subs: Vec::new(),
            outer: Vec::new(),
            seqs: None,
        }
    }

    /// The value of expression `x` without columns (an ADD COLUMN's DEFAULT).
    pub(super) fn eval_constant(&self, x: &crate::expr::Expr) -> SqlResult<Datum> {
        x.eval(&[], &self.ddl_eval_ctx())
    }

    /// 23514 unless CHECK `x` (over the engine row) holds for every row of `t`.
    fn validate_check(&self, t: &TableInfo, name: &str, x: &crate::expr::Expr) -> SqlResult<()> {
        let cx = crate::exec::ExecCtx::new(self.ddl_eval_ctx(), None);
        let all: Vec<usize> = (0..t.columns.len()).collect();
        let mut bad = None;
        t.table
            .scan(|r| {
                let row = crate::exec::scan::decode(&r, t, &all);
                match x.eval(&row, &cx.eval) {
                    Ok(Datum::Bool(false)) => bad = Some(Ok(())),
                    Ok(_) => return Ok(true),
                    Err(err) => bad = Some(Err(err)),
                }
                Ok(false)
            })
            .map_err(|err| eng(err, &t.name))?;
        match bad {
            None => Ok(()),
            Some(Err(err)) => Err(err),
            Some(Ok(())) => Err(SqlError::new(
                code::CHECK_VIOLATION,
                format!("check constraint \"{name}\" of relation \"{}\" is violated by some row", t.name),
            )
            .with_table(&t.name)),
        }
    }
}

/// 23503 unless every row of `child` whose key `fk` is not NULL has its parent row.
fn validate_fk(catalog: &crate::catalog::Catalog, child: &TableInfo, fk: &ForeignKey) -> SqlResult<()> {
    let parent = catalog.get(&fk.parent)?;
    let pcols = fk.parent_columns.iter().map(|c| parent.column(c)).collect::<SqlResult<Vec<_>>>()?;
    let ccols = fk.columns.iter().map(|c| child.column(c)).collect::<SqlResult<Vec<_>>>()?;
    let mut keys = HashSet::new();
    parent
        .table
        .scan(|r| {
            if let Some(k) = key_of(&parent, &r, &pcols) {
                keys.insert(k);
            }
            Ok(true)
        })
        .map_err(|err| eng(err, &parent.name))?;
    let mut missing = None;
    child
        .table
        .scan(|r| match key_of(child, &r, &ccols) {
            Some(k) if !keys.contains(&k) => {
                missing = Some(k);
                Ok(false)
            }
            _ => Ok(true),
        })
        .map_err(|err| eng(err, &child.name))?;
    match missing {
        None => Ok(()),
        Some(k) => {
            let key = format!("({})=({})", fk.columns.join(", "), k.join(", "));
            Err(crate::constraint::missing_parent(&child.name, fk, &key))
        }
    }
}

/// 2BP01 (DROP) or 0A000 (TRUNCATE) when a table outside `names` has a foreign key to one
/// of `names`.
pub(super) fn refuse_if_referenced(
    catalog: &crate::catalog::Catalog,
    names: &[String],
    truncate: bool,
) -> SqlResult<()> {
    for n in names {
        for (child, i) in catalog.referencing(n) {
            if names.contains(&child.name) {
                continue;
            }
            let fk = &child.meta.fks[i];
            return Err(if truncate {
                SqlError::new(
                    code::FEATURE_NOT_SUPPORTED,
                    "cannot truncate a table referenced in a foreign key constraint",
                )
                .with_detail(format!("Table \"{}\" references \"{n}\".", child.name))
            } else {
                SqlError::new(
                    code::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!("cannot drop table {n} because other objects depend on it"),
                )
                .with_detail(format!("constraint {} on table {} depends on table {n}", fk.name, child.name))
            });
        }
    }
    Ok(())
}
