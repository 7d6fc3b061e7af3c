//! Binding of FOREIGN KEY and CHECK constraints: their definitions in CREATE TABLE and
//! ALTER TABLE … ADD CONSTRAINT, and the CHECK expressions a change evaluates.
//!
//! Owns: the checks a definition must pass before it is stored (the referenced table and
//! columns exist and are its primary key or a unique constraint, else 42830; the column
//! counts and types agree; a CHECK is a boolean expression over the table's own columns
//! without subqueries), and [`Binder::table_checks`] (a table's CHECKs bound over its engine
//! row, for INSERT and UPDATE plans).

use super::bind::{ident, object_name, Binder, Scope, ScopeCol, ScopeItem};
use super::bind_expr::BindCx;
use crate::catalog::TableInfo;
use crate::constraint::{action_of, Check, ForeignKey};
use crate::error::{code, SqlError, SqlResult};
use crate::expr::Expr;
use crate::types::SqlType;
use sqlparser::ast;
use std::sync::Arc;

/// The columns of the table a constraint is defined on: (name, type) in row order, and its
/// unique keys (primary first), for a table that references itself.
pub(crate) struct NewTable<'a> {
    /// Table name.
    pub name: &'a str,
    /// Its visible columns.
    pub cols: &'a [(String, SqlType)],
    /// Its primary key and unique constraints (column names).
    pub keys: Vec<Vec<String>>,
}

fn compatible(a: SqlType, b: SqlType) -> bool {
    use SqlType as T;
    let int = |t| matches!(t, T::Int2 | T::Int4 | T::Int8);
    let text = |t| matches!(t, T::Text | T::Varchar(_) | T::Bpchar(_));
    let num = |t| matches!(t, T::Numeric { .. });
    a == b || (int(a) && int(b)) || (text(a) && text(b)) || (num(a) && num(b))
}

impl Binder<'_> {
    /// A FOREIGN KEY of table `t` on its columns `columns` (a column's REFERENCES when it is
    /// one), from its definition `fk`; `name`: CONSTRAINT name, if given.
    pub(crate) fn foreign_key(
        &mut self,
        t: &NewTable<'_>,
        columns: Vec<String>,
        fk: &ast::ForeignKeyConstraint,
        name: Option<String>,
    ) -> SqlResult<ForeignKey> {
        let parent = object_name(&fk.foreign_table)?;
        let ty_of = |n: &str| t.cols.iter().find(|(c, _)| c == n).map(|(_, ty)| *ty);
        for c in &columns {
            if ty_of(c).is_none() {
                return Err(SqlError::new(
                    code::UNDEFINED_COLUMN,
                    format!("column \"{c}\" referenced in foreign key constraint does not exist"),
                )
                .with_column(c));
            }
        }
        let mut parent_columns: Vec<String> = fk.referred_columns.iter().map(ident).collect();
        let parent_types: Vec<SqlType> = if parent == t.name {
            if parent_columns.is_empty() {
                parent_columns = t.keys.first().cloned().unwrap_or_default();
            }
            let mut want = parent_columns.clone();
            want.sort();
            if !t.keys.iter().any(|k| {
                let mut k = k.clone();
                k.sort();
                k == want
            }) {
                return Err(no_unique(&parent));
            }
            parent_columns.iter().map(|c| ty_of(c).expect("a key's columns exist")).collect()
        } else {
            let p = self.catalog.get(&parent)?;
            if parent_columns.is_empty() {
                if p.hidden_rowid {
                    return Err(SqlError::new(
                        code::INVALID_FOREIGN_KEY,
                        format!("there is no primary key for referenced table \"{parent}\""),
                    ));
                }
                parent_columns = p.primary_key_columns().iter().map(|&c| p.columns[c].name.clone()).collect();
            }
            let pos = parent_columns.iter().map(|c| p.column(c)).collect::<SqlResult<Vec<_>>>()?;
            if crate::exec::fk::unique_key(&p, &pos).is_none() {
                return Err(no_unique(&parent));
            }
            pos.iter().map(|&c| p.columns[c].ty).collect()
        };
        if parent_columns.len() != columns.len() {
            return Err(SqlError::new(
                code::INVALID_FOREIGN_KEY,
                "number of referencing and referenced columns for foreign key disagree",
            ));
        }
        for ((c, pc), pty) in columns.iter().zip(&parent_columns).zip(&parent_types) {
            let cty = ty_of(c).expect("checked above");
            if !compatible(cty, *pty) {
                return Err(SqlError::new(
                    code::DATATYPE_MISMATCH,
                    format!(
                        "foreign key constraint cannot be implemented: key columns \"{c}\" and \"{pc}\" are of incompatible types: {} and {}",
                        cty.name(),
                        pty.name()
                    ),
                ));
            }
        }
        let name = name.unwrap_or_else(|| format!("{}_{}_fkey", t.name, columns.join("_")));
        Ok(ForeignKey {
            name,
            columns,
            parent,
            parent_columns,
            on_delete: action_of(&fk.on_delete)?,
            on_update: action_of(&fk.on_update)?,
        })
    }

    /// A CHECK of table `t`, checked to be a boolean expression over its columns.
    pub(crate) fn check_def(&mut self, t: &NewTable<'_>, expr: &ast::Expr, name: String) -> SqlResult<Check> {
        let mut cols = Vec::new();
        for (c, ty) in t.cols {
            let id = self.new_col(c, Some(t.name), *ty);
            cols.push(ScopeCol { name: c.clone(), id, ty: *ty, hidden: false });
        }
        self.scopes
            .push(Scope { items: vec![ScopeItem { alias: t.name.to_string(), cols }], merged: vec![] });
        let mut cx = BindCx::row("CHECK");
        let initplans = self.initplans.len();
        let r = self.bind_predicate(expr, &mut cx);
        self.scopes.pop();
        r?;
        if !cx.applies.is_empty() || self.initplans.len() != initplans {
            return Err(SqlError::unsupported("a subquery in a CHECK constraint"));
        }
        Ok(Check { name, expr: expr.to_string() })
    }

    /// The FOREIGN KEY and CHECK constraints of CREATE TABLE `ct` (of table `name`, whose
    /// columns are `cols`), added to `meta`.
    pub(crate) fn constraints(
        &mut self,
        ct: &ast::CreateTable,
        name: &str,
        cols: &[(String, SqlType, bool)],
        pk: &Option<Vec<String>>,
        uniques: &[(Option<String>, Vec<String>)],
        meta: &mut crate::meta::TableMeta,
    ) -> SqlResult<()> {
        let cols: Vec<(String, SqlType)> = cols.iter().map(|(n, t, _)| (n.clone(), *t)).collect();
        let keys = pk.iter().cloned().chain(uniques.iter().map(|(_, c)| c.clone())).collect();
        let t = NewTable { name, cols: &cols, keys };
        for c in &ct.columns {
            let cname = ident(&c.name);
            for o in &c.options {
                let given = o.name.as_ref().map(ident);
                match &o.option {
                    ast::ColumnOption::ForeignKey(fk) => {
                        let fk = self.foreign_key(&t, vec![cname.clone()], fk, given)?;
                        meta.fks.push(fk);
                    }
                    ast::ColumnOption::Check(cc) => {
                        let n = given.unwrap_or_else(|| fresh_name(meta, &format!("{name}_{cname}_check")));
                        let check = self.check_def(&t, &cc.expr, n)?;
                        meta.checks.push(check);
                    }
                    _ => {}
                }
            }
        }
        for con in &ct.constraints {
            match con {
                ast::TableConstraint::ForeignKey(fk) => {
                    let columns = fk.columns.iter().map(ident).collect();
                    let fk = self.foreign_key(&t, columns, fk, fk.name.as_ref().map(ident))?;
                    meta.fks.push(fk);
                }
                ast::TableConstraint::Check(cc) => {
                    let n = cc
                        .name
                        .as_ref()
                        .map(ident)
                        .unwrap_or_else(|| fresh_name(meta, &format!("{name}_check")));
                    let check = self.check_def(&t, &cc.expr, n)?;
                    meta.checks.push(check);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The CHECK constraints of `info`, bound over its engine row.
    pub(crate) fn table_checks(&mut self, info: &Arc<TableInfo>) -> SqlResult<Vec<(String, Expr)>> {
        let mut out = Vec::new();
        for c in &info.meta.checks {
            let ast = crate::parse::parse_expr(&c.expr)?;
            let ids = self.table_scope(info, &info.name);
            let r = self.bind_predicate(&ast, &mut BindCx::row("CHECK"));
            self.scopes.pop();
            let mut x = r?;
            Self::to_positions(&mut x, &ids)?;
            out.push((c.name.clone(), x));
        }
        Ok(out)
    }
}

/// `base`, or `base1`, `base2`, … when a CHECK of the table already has that name.
fn fresh_name(meta: &crate::meta::TableMeta, base: &str) -> String {
    let taken = |n: &str| meta.checks.iter().any(|c| c.name == n);
    if !taken(base) {
        return base.to_string();
    }
    (1..).map(|i| format!("{base}{i}")).find(|n| !taken(n)).expect("a free name")
}

fn no_unique(parent: &str) -> SqlError {
    SqlError::new(
        code::INVALID_FOREIGN_KEY,
        format!("there is no unique constraint matching given keys for referenced table \"{parent}\""),
    )
}
