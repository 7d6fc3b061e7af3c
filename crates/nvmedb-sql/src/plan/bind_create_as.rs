//! Binding of CREATE TABLE … AS query and CREATE TABLE … (LIKE t).
//!
//! Owns: the new table's columns taken from a query's result columns (names, types, all
//! nullable) or from another table's visible columns
//! (names, types, NOT NULL; DEFAULTs with `INCLUDING DEFAULTS`). Like PostgreSQL, neither
//! copies keys, indexes or constraints: the new table has the hidden row id as its key.

use super::bind::{object_name, Binder};
use super::bind_ddl::{finish_table, TableParts};
use super::{Stmt, TableAsPlan};
use crate::error::{code, SqlError, SqlResult};
use crate::meta::TableMeta;
use crate::types::SqlType;
use sqlparser::ast;

impl Binder<'_> {
    /// CREATE TABLE `name` AS `q` (`ct.columns`, when given, rename the result columns).
    pub(crate) fn create_table_as(
        &mut self,
        ct: &ast::CreateTable,
        name: String,
        q: &ast::Query,
    ) -> SqlResult<Stmt> {
        let (plan, out) = self.query_plan(q)?;
        if !ct.columns.is_empty() || !ct.constraints.is_empty() {
            return Err(SqlError::unsupported("CREATE TABLE … AS with a column list"));
        }
        let mut cols: Vec<(String, SqlType, bool)> = Vec::new();
        for c in &out {
            let cname = c.name.clone();
            // An untyped literal (`SELECT NULL`, `SELECT 'x'`) makes a text column, as in
            // PostgreSQL.
            let ty = if c.ty == SqlType::Unknown { SqlType::Text } else { c.ty };
            if ty.column_type().is_none() {
                return Err(SqlError::unsupported(format!("a column of type {} (\"{cname}\")", ty.name())));
            }
            if cols.iter().any(|(n, _, _)| *n == cname) {
                return Err(SqlError::new(
                    code::DUPLICATE_COLUMN,
                    format!("column \"{cname}\" specified more than once"),
                ));
            }
            cols.push((cname, ty, true));
        }
        let Stmt::CreateTable(table) = self.new_table(name, cols, TableMeta::default(), ct.if_not_exists)?
        else {
            unreachable!("finish_table makes a CREATE TABLE")
        };
        Ok(Stmt::CreateTableAs(Box::new(TableAsPlan { table: *table, query: plan })))
    }

    /// CREATE TABLE `name` (LIKE source [INCLUDING DEFAULTS | EXCLUDING DEFAULTS]).
    pub(crate) fn create_table_like(
        &mut self,
        ct: &ast::CreateTable,
        name: String,
        like: &ast::CreateTableLike,
    ) -> SqlResult<Stmt> {
        if !ct.columns.is_empty() || !ct.constraints.is_empty() {
            return Err(SqlError::unsupported("CREATE TABLE … (LIKE …) with other columns or constraints"));
        }
        let src = self.catalog.get(&object_name(&like.name)?)?;
        let cols = src
            .visible()
            .map(|i| (src.columns[i].name.clone(), src.columns[i].ty, src.columns[i].nullable))
            .collect::<Vec<_>>();
        let mut meta = TableMeta::default();
        if matches!(like.defaults, Some(ast::CreateTableLikeDefaults::Including)) {
            meta.defaults = src.meta.defaults.clone();
        }
        self.new_table(name, cols, meta, ct.if_not_exists)
    }

    fn new_table(
        &mut self,
        name: String,
        cols: Vec<(String, SqlType, bool)>,
        meta: TableMeta,
        if_not_exists: bool,
    ) -> SqlResult<Stmt> {
        if cols.is_empty() {
            return Err(SqlError::unsupported("a table without columns"));
        }
        if let Some((c, _, _)) = cols.iter().find(|(c, _, _)| c.starts_with('$')) {
            return Err(SqlError::new(code::SYNTAX_ERROR, format!("column name \"{c}\" is reserved")));
        }
        finish_table(TableParts {
            name,
            cols,
            pk: None,
            pk_name: None,
            uniques: vec![],
            meta,
            sequences: vec![],
            if_not_exists,
        })
    }
}
