//! Binding of DDL and utility statements: transaction control, SET/SHOW, CREATE/DROP/TRUNCATE
//! TABLE, CREATE INDEX, ALTER TABLE, ANALYZE.
//!
//! Owns: the translation of their ASTs into [`Stmt`]s (an engine [`nvmedb::Schema`] for
//! CREATE TABLE). Invariant: every name a DDL statement depends on is checked here, so the
//! session runs only statements whose objects existed when they were planned (and re-plans
//! after any DDL).

use super::bind::{ident, object_name, sql_type, Binder};
use super::{IsolationLevel, OutCol, Stmt};
use crate::catalog::ROWID_COLUMN;
use crate::error::{code, SqlError, SqlResult};
use crate::types::SqlType;
use sqlparser::ast::{self, Expr as AstExpr};

fn isolation_of(modes: &[ast::TransactionMode]) -> SqlResult<Option<IsolationLevel>> {
    let mut level = None;
    for m in modes {
        match m {
            ast::TransactionMode::IsolationLevel(l) => {
                level = Some(match l {
                    ast::TransactionIsolationLevel::ReadUncommitted
                    | ast::TransactionIsolationLevel::ReadCommitted => IsolationLevel::ReadCommitted,
                    ast::TransactionIsolationLevel::RepeatableRead => IsolationLevel::RepeatableRead,
                    ast::TransactionIsolationLevel::Serializable => IsolationLevel::Serializable,
                    other => return Err(SqlError::unsupported(format!("isolation level {other}"))),
                })
            }
            ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadWrite) => {}
            ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadOnly) => {
                return Err(SqlError::unsupported("READ ONLY transactions"))
            }
        }
    }
    Ok(level)
}

impl Binder<'_> {
    /// Statements other than queries and changes.
    pub(crate) fn utility(&mut self, st: &ast::Statement) -> SqlResult<(Stmt, Vec<OutCol>)> {
        use ast::Statement as S;
        Ok(match st {
            S::StartTransaction { modes, .. } => (Stmt::Begin(isolation_of(modes)?), vec![]),
            S::Commit { chain: false, .. } => (Stmt::Commit, vec![]),
            S::Rollback { chain: false, savepoint: None } => (Stmt::Rollback, vec![]),
            S::Set(set) => (self.set(set)?, vec![]),
            S::ShowVariable { variable } => {
                let parts = variable.iter().map(ident).collect::<Vec<_>>();
                // `nvmedb.x` (the server's own settings) arrives as two words.
                let dotted = parts.len() == 2 && parts[0].eq_ignore_ascii_case("nvmedb");
                let name = parts.join(if dotted { "." } else { " " });
                let name = match name.as_str() {
                    "transaction isolation level" => "transaction_isolation".to_string(),
                    _ => name,
                };
                let cols = vec![OutCol { name: name.clone(), ty: SqlType::Text }];
                (Stmt::Show(name), cols)
            }
            S::CreateTable(ct) => (self.create_table(ct)?, vec![]),
            S::Drop { object_type: ast::ObjectType::Table, if_exists, names, .. } => {
                let names = names.iter().map(object_name).collect::<SqlResult<Vec<_>>>()?;
                (Stmt::DropTable(names, *if_exists), vec![])
            }
            S::Truncate(t) => {
                let names =
                    t.table_names.iter().map(|n| object_name(&n.name)).collect::<SqlResult<Vec<_>>>()?;
                for n in &names {
                    self.catalog.get(n)?;
                }
                (Stmt::Truncate(names), vec![])
            }
            S::CreateIndex(ci) => {
                let table = object_name(&ci.table_name)?;
                let info = self.catalog.get(&table)?;
                if ci.columns.len() != 1 || ci.predicate.is_some() {
                    return Err(SqlError::unsupported(
                        "an index on more than one column, an expression or a predicate",
                    ));
                }
                let column = match &ci.columns[0].column.expr {
                    AstExpr::Identifier(i) => ident(i),
                    other => {
                        return Err(SqlError::unsupported(format!("an index on the expression `{other}`")))
                    }
                };
                info.column(&column)?;
                let name = match &ci.name {
                    Some(n) => object_name(n)?,
                    None => format!("{table}_{column}_idx"),
                };
                (
                    Stmt::CreateIndex {
                        name,
                        table,
                        column,
                        unique: ci.unique,
                        if_not_exists: ci.if_not_exists,
                    },
                    vec![],
                )
            }
            S::AlterTable(at) => {
                let table = object_name(&at.name)?;
                let info = self.catalog.get(&table)?;
                match at.operations.as_slice() {
                    [ast::AlterTableOperation::AddConstraint {
                        constraint: ast::TableConstraint::PrimaryKey(pk),
                        ..
                    }] => {
                        let col = single_column(&pk.columns)?;
                        info.column(&col)?;
                        (Stmt::AddPrimaryKey(table, col), vec![])
                    }
                    _ => {
                        return Err(SqlError::unsupported(format!(
                            "ALTER TABLE other than ADD PRIMARY KEY (`{st}`)"
                        )))
                    }
                }
            }
            S::Analyze(a) => {
                let tables = match &a.table_name {
                    Some(n) => {
                        let t = object_name(n)?;
                        self.catalog.get(&t)?;
                        vec![t]
                    }
                    None => vec![],
                };
                (Stmt::Analyze(tables), vec![])
            }
            S::Discard { .. } => (Stmt::NoOp("DISCARD ALL"), vec![]),
            other => {
                let text = other.to_string();
                let what = text.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                return Err(SqlError::unsupported(format!("the statement `{what} …`")));
            }
        })
    }

    fn set(&mut self, set: &ast::Set) -> SqlResult<Stmt> {
        let value_text = |e: &AstExpr| -> String {
            match e {
                AstExpr::Value(v) => match &v.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                },
                AstExpr::Identifier(i) => i.value.clone(),
                other => other.to_string(),
            }
        };
        Ok(match set {
            ast::Set::SingleAssignment { variable, values, .. } => {
                let name = variable.to_string().to_lowercase();
                let v = values.iter().map(value_text).collect::<Vec<_>>().join(", ");
                let v = if v.eq_ignore_ascii_case("default") { None } else { Some(v) };
                if let (Some(v), "default_transaction_isolation" | "transaction_isolation") =
                    (&v, name.as_str())
                {
                    let level = IsolationLevel::parse(v).ok_or_else(|| {
                        SqlError::new(
                            code::INVALID_PARAMETER_VALUE,
                            format!("invalid value for parameter \"{name}\": \"{v}\""),
                        )
                    })?;
                    if name == "transaction_isolation" {
                        return Ok(Stmt::SetTransaction(level));
                    }
                    return Ok(Stmt::Set(name, Some(level.name().to_string())));
                }
                Stmt::Set(name, v)
            }
            ast::Set::SetTimeZone { value, .. } => Stmt::Set("timezone".into(), Some(value_text(value))),
            ast::Set::SetNames { charset_name, .. } => {
                Stmt::Set("client_encoding".into(), Some(charset_name.value.clone()))
            }
            ast::Set::SetTransaction { modes, session, .. } => match isolation_of(modes)? {
                Some(level) if *session => {
                    Stmt::Set("default_transaction_isolation".into(), Some(level.name().into()))
                }
                Some(level) => Stmt::SetTransaction(level),
                None => Stmt::NoOp("SET"),
            },
            other => return Err(SqlError::unsupported(format!("`{other}`"))),
        })
    }

    fn create_table(&mut self, ct: &ast::CreateTable) -> SqlResult<Stmt> {
        let name = object_name(&ct.name)?;
        if ct.query.is_some() || ct.like.is_some() {
            return Err(SqlError::unsupported("CREATE TABLE … AS / LIKE"));
        }
        let mut cols: Vec<(String, SqlType, bool)> = Vec::new();
        let mut pk: Option<String> = None;
        let mut uniques: Vec<String> = Vec::new();
        for c in &ct.columns {
            let cname = ident(&c.name);
            if cname == ROWID_COLUMN {
                return Err(SqlError::new(
                    code::SYNTAX_ERROR,
                    format!("column name \"{ROWID_COLUMN}\" is reserved"),
                ));
            }
            let ty = sql_type(&c.data_type)?;
            if ty.column_type().is_none() {
                return Err(SqlError::unsupported(format!("a column of type {} (\"{cname}\")", ty.name())));
            }
            let mut nullable = true;
            for o in &c.options {
                match &o.option {
                    ast::ColumnOption::NotNull => nullable = false,
                    ast::ColumnOption::Null => {}
                    ast::ColumnOption::PrimaryKey(_) => {
                        if pk.replace(cname.clone()).is_some() {
                            return Err(SqlError::new(
                                code::SYNTAX_ERROR,
                                format!("multiple primary keys for table \"{name}\""),
                            ));
                        }
                        nullable = false;
                    }
                    ast::ColumnOption::Unique(_) => uniques.push(cname.clone()),
                    other => {
                        return Err(SqlError::unsupported(format!("column option `{other}` on \"{cname}\"")))
                    }
                }
            }
            if cols.iter().any(|(n, _, _)| *n == cname) {
                return Err(SqlError::new(
                    code::SYNTAX_ERROR,
                    format!("column \"{cname}\" specified more than once"),
                ));
            }
            cols.push((cname, ty, nullable));
        }
        for con in &ct.constraints {
            match con {
                ast::TableConstraint::PrimaryKey(p) => {
                    let c = single_column(&p.columns)?;
                    if pk.replace(c).is_some() {
                        return Err(SqlError::new(
                            code::SYNTAX_ERROR,
                            format!("multiple primary keys for table \"{name}\""),
                        ));
                    }
                }
                ast::TableConstraint::Unique(u) => uniques.push(single_column(&u.columns)?),
                other => return Err(SqlError::unsupported(format!("table constraint `{other}`"))),
            }
        }
        if cols.is_empty() {
            return Err(SqlError::unsupported("a table without columns"));
        }
        let mut engine_cols: Vec<(String, nvmedb::ColumnType, bool)> = Vec::new();
        if pk.is_none() {
            engine_cols.push((ROWID_COLUMN.to_string(), nvmedb::ColumnType::Int, false));
        }
        for (n, ty, nullable) in &cols {
            let is_pk = pk.as_deref() == Some(n.as_str());
            engine_cols.push((n.clone(), ty.column_type().expect("checked above"), *nullable && !is_pk));
        }
        let mut schema = nvmedb::Schema::new(engine_cols.iter().map(|(n, t, _)| (n.as_str(), *t)).collect());
        for (i, (_, _, nullable)) in engine_cols.iter().enumerate() {
            schema.columns[i].nullable = *nullable;
        }
        if let Some(p) = &pk {
            schema.primary_key = schema.column_index(p).map_err(|_| {
                SqlError::new(code::UNDEFINED_COLUMN, format!("column \"{p}\" named in key does not exist"))
                    .with_column(p)
            })?;
        }
        for u in uniques {
            if Some(&u) == pk.as_ref() {
                continue;
            }
            schema = schema.with_unique_index(&format!("{name}_{u}_key"), &u).map_err(|_| {
                SqlError::new(code::UNDEFINED_COLUMN, format!("column \"{u}\" named in key does not exist"))
            })?;
        }
        Ok(Stmt::CreateTable(name, schema, ct.if_not_exists))
    }
}

fn single_column(cols: &[ast::IndexColumn]) -> SqlResult<String> {
    match cols {
        [c] => match &c.column.expr {
            AstExpr::Identifier(i) => Ok(ident(i)),
            other => Err(SqlError::unsupported(format!("a key on the expression `{other}`"))),
        },
        _ => Err(SqlError::unsupported("a primary key of more than one column")),
    }
}
