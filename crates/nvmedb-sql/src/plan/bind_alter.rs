//! Binding of ALTER TABLE.
//!
//! Owns: [`AlterOp`] (one change of a table's definition) and its binding: ADD PRIMARY KEY,
//! ADD CONSTRAINT … FOREIGN KEY / CHECK, DROP CONSTRAINT, ADD COLUMN (with DEFAULT), DROP
//! COLUMN, RENAME COLUMN, RENAME TO. Invariant: every name is checked against the catalog
//! here, so the session runs only changes whose objects existed when they were planned.

use super::bind::{ident, object_name, sql_type, Binder};
use super::bind_constraint::NewTable;
use super::Stmt;
use crate::catalog::TableInfo;
use crate::constraint::{Check, ForeignKey};
use crate::error::{code, SqlError, SqlResult};
use crate::expr::Expr;
use crate::types::SqlType;
use sqlparser::ast;
use std::sync::Arc;

/// One ALTER TABLE change.
#[derive(Debug, Clone)]
pub enum AlterOp {
    /// ADD PRIMARY KEY (column) of a table that has none.
    AddPrimaryKey(String),
    /// ADD [CONSTRAINT name] FOREIGN KEY: every existing row is checked first.
    AddForeignKey(ForeignKey),
    /// ADD [CONSTRAINT name] CHECK: the definition, and its expression over the engine row
    /// (every existing row is checked first).
    AddCheck(Check, Expr),
    /// DROP CONSTRAINT name (a FOREIGN KEY or CHECK) [IF EXISTS].
    DropConstraint(String, bool),
    /// ADD COLUMN.
    AddColumn(NewColumn),
    /// DROP COLUMN name [IF EXISTS].
    DropColumn(String, bool),
    /// RENAME COLUMN old TO new.
    RenameColumn(String, String),
    /// RENAME TO new.
    RenameTable(String),
}

/// A column ALTER TABLE … ADD COLUMN adds.
#[derive(Debug, Clone)]
pub struct NewColumn {
    /// Column name.
    pub name: String,
    /// Its type.
    pub ty: SqlType,
    /// NULL allowed.
    pub nullable: bool,
    /// DEFAULT as SQL text.
    pub default: Option<String>,
    /// DEFAULT bound, evaluated once for the existing rows.
    pub value: Option<Expr>,
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
}

impl Binder<'_> {
    /// ALTER TABLE `at` (one change per statement).
    pub(crate) fn alter_table(&mut self, at: &ast::AlterTable) -> SqlResult<Stmt> {
        let table = object_name(&at.name)?;
        let info = self.catalog.get(&table)?;
        let [op] = at.operations.as_slice() else {
            return Err(SqlError::unsupported("ALTER TABLE with several changes (give one per statement)"));
        };
        use ast::AlterTableOperation as O;
        let op = match op {
            O::AddConstraint { constraint, .. } => self.add_constraint(&info, constraint)?,
            O::DropConstraint { if_exists, name, .. } => AlterOp::DropConstraint(ident(name), *if_exists),
            O::AddColumn { if_not_exists, column_def, .. } => {
                self.add_column(&info, column_def, *if_not_exists)?
            }
            O::DropColumn { column_names, if_exists, .. } => match column_names.as_slice() {
                [c] => AlterOp::DropColumn(ident(c), *if_exists),
                _ => return Err(SqlError::unsupported("DROP COLUMN of several columns")),
            },
            O::RenameColumn { old_column_name, new_column_name } => {
                let old = ident(old_column_name);
                info.column(&old)?;
                let new = ident(new_column_name);
                if info.columns.iter().any(|c| c.name == new) {
                    return Err(SqlError::new(
                        code::DUPLICATE_COLUMN,
                        format!("column \"{new}\" of relation \"{table}\" already exists"),
                    ));
                }
                AlterOp::RenameColumn(old, new)
            }
            O::RenameTable { table_name } => {
                let new = match table_name {
                    ast::RenameTableNameKind::As(n) | ast::RenameTableNameKind::To(n) => object_name(n)?,
                };
                AlterOp::RenameTable(new)
            }
            other => return Err(SqlError::unsupported(format!("ALTER TABLE … {other}"))),
        };
        Ok(Stmt::Alter(table, Box::new(op)))
    }

    fn add_constraint(&mut self, info: &Arc<TableInfo>, c: &ast::TableConstraint) -> SqlResult<AlterOp> {
        let cols: Vec<(String, SqlType)> =
            info.visible().map(|i| (info.columns[i].name.clone(), info.columns[i].ty)).collect();
        let t = NewTable { name: &info.name, cols: &cols, keys: vec![] };
        Ok(match c {
            ast::TableConstraint::PrimaryKey(pk) => match pk.columns.as_slice() {
                [c] => {
                    let col = match &c.column.expr {
                        ast::Expr::Identifier(i) => ident(i),
                        other => {
                            return Err(SqlError::unsupported(format!("a key on the expression `{other}`")))
                        }
                    };
                    info.column(&col)?;
                    AlterOp::AddPrimaryKey(col)
                }
                _ => {
                    return Err(SqlError::unsupported(
                        "ALTER TABLE … ADD PRIMARY KEY of more than one column",
                    ))
                }
            },
            ast::TableConstraint::ForeignKey(fk) => {
                let columns = fk.columns.iter().map(ident).collect();
                let fk = self.foreign_key(&t, columns, fk, fk.name.as_ref().map(ident))?;
                if constraint_exists(info, &fk.name) {
                    return Err(exists(&fk.name, &info.name));
                }
                AlterOp::AddForeignKey(fk)
            }
            ast::TableConstraint::Check(cc) => {
                let name = cc.name.as_ref().map(ident).unwrap_or_else(|| format!("{}_check", info.name));
                if constraint_exists(info, &name) {
                    return Err(exists(&name, &info.name));
                }
                let check = self.check_def(&t, &cc.expr, name)?;
                let ids = self.table_scope(info, &info.name);
                let r = self.bind_predicate(&cc.expr, &mut super::bind_expr::BindCx::row("CHECK"));
                self.scopes.pop();
                let mut x = r?;
                Self::to_positions(&mut x, &ids)?;
                AlterOp::AddCheck(check, x)
            }
            other => return Err(SqlError::unsupported(format!("ALTER TABLE … ADD {other}"))),
        })
    }

    fn add_column(
        &mut self,
        info: &Arc<TableInfo>,
        c: &ast::ColumnDef,
        if_not_exists: bool,
    ) -> SqlResult<AlterOp> {
        let name = ident(&c.name);
        let ty = sql_type(&c.data_type)?;
        if ty.column_type().is_none() {
            return Err(SqlError::unsupported(format!("a column of type {} (\"{name}\")", ty.name())));
        }
        let mut nullable = true;
        let mut default = None;
        let mut value = None;
        for o in &c.options {
            match &o.option {
                ast::ColumnOption::NotNull => nullable = false,
                ast::ColumnOption::Null => {}
                ast::ColumnOption::Default(e) => {
                    self.scopes.push(super::bind::Scope::default());
                    let mut cx = super::bind_expr::BindCx::row("DEFAULT");
                    let r = self.bind(e, &mut cx);
                    self.scopes.pop();
                    let (x, ety) = r?;
                    if !cx.applies.is_empty() || !self.initplans.is_empty() {
                        return Err(SqlError::unsupported(format!(
                            "a subquery in the DEFAULT of column \"{name}\""
                        )));
                    }
                    let (x, _) = self.assign_type(x, ety, ty)?;
                    default = Some(e.to_string());
                    value = Some(x);
                }
                other => {
                    return Err(SqlError::unsupported(format!(
                        "ADD COLUMN with the option `{other}` (\"{name}\")"
                    )))
                }
            }
        }
        if crate::catalog::is_hidden_table(&name) || name == crate::catalog::ROWID_COLUMN {
            return Err(SqlError::new(code::SYNTAX_ERROR, format!("column name \"{name}\" is reserved")));
        }
        let _ = info;
        Ok(AlterOp::AddColumn(NewColumn { name, ty, nullable, default, value, if_not_exists }))
    }
}

/// True when `t` has a constraint or index named `name`.
pub(crate) fn constraint_exists(t: &TableInfo, name: &str) -> bool {
    t.meta.fks.iter().any(|f| f.name == name)
        || t.meta.checks.iter().any(|c| c.name == name)
        || t.meta.keys.iter().any(|k| k.name == name)
        || t.indexes.iter().any(|i| i.0 == name)
}

fn exists(name: &str, table: &str) -> SqlError {
    SqlError::new(
        code::DUPLICATE_OBJECT,
        format!("constraint \"{name}\" for relation \"{table}\" already exists"),
    )
}
