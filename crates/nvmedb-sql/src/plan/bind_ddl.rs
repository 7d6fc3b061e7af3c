//! Binding of DDL and utility statements: transaction control, SET/SHOW, CREATE/DROP/TRUNCATE
//! TABLE, CREATE INDEX, ALTER TABLE, ANALYZE.
//!
//! Owns: the translation of their ASTs into [`Stmt`]s (an engine [`nvmedb::Schema`] for
//! CREATE TABLE). Invariant: every name a DDL statement depends on is checked here, so the
//! session runs only statements whose objects existed when they were planned (and re-plans
//! after any DDL).

use super::bind::{ident, object_name, sql_type, Binder};
use super::bind_expr::BindCx;
use super::{CreateTablePlan, IsolationLevel, OutCol, Stmt};
use crate::catalog::{is_hidden_table, ROWID_COLUMN};
use crate::error::{code, SqlError, SqlResult};
use crate::meta::{KeyDef, TableMeta, KEY_BYTES, PK_COLUMN};
use crate::sequence::SeqDef;
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
            S::CreateSequence { temporary: false, if_not_exists, name, sequence_options } => {
                let name = object_name(name)?;
                let def = seq_def(sequence_options, i64::MAX)?;
                (Stmt::CreateSequence(name, def, *if_not_exists), vec![])
            }
            S::Drop { object_type: ast::ObjectType::Sequence, if_exists, names, .. } => {
                let names = names.iter().map(object_name).collect::<SqlResult<Vec<_>>>()?;
                (Stmt::DropSequence(names, *if_exists), vec![])
            }
            S::Drop { object_type: ast::ObjectType::Table, if_exists, names, .. } => {
                let names = names.iter().map(object_name).collect::<SqlResult<Vec<_>>>()?;
                (Stmt::DropTable(names, *if_exists), vec![])
            }
            S::Drop { object_type: ast::ObjectType::Index, if_exists, names, .. } => {
                let names = names.iter().map(object_name).collect::<SqlResult<Vec<_>>>()?;
                (Stmt::DropIndex(names, *if_exists), vec![])
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
                if ci.predicate.is_some() {
                    return Err(SqlError::unsupported("a partial index (CREATE INDEX … WHERE)"));
                }
                let columns = key_columns(&ci.columns)?;
                for c in &columns {
                    info.column(c)?;
                }
                let name = match &ci.name {
                    Some(n) => object_name(n)?,
                    None => format!("{table}_{}_idx", columns.join("_")),
                };
                (
                    Stmt::CreateIndex {
                        name,
                        table,
                        columns,
                        unique: ci.unique,
                        if_not_exists: ci.if_not_exists,
                    },
                    vec![],
                )
            }
            S::AlterTable(at) => (self.alter_table(at)?, vec![]),
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
        if is_hidden_table(&name) {
            return Err(SqlError::new(
                code::INVALID_TABLE_DEFINITION,
                format!("table names starting with `$` are reserved (\"{name}\")"),
            ));
        }
        match (&ct.query, &ct.like) {
            (Some(q), None) => return self.create_table_as(ct, name, q),
            (None, Some(ast::CreateTableLikeKind::Parenthesized(like))) => {
                return self.create_table_like(ct, name, like)
            }
            (None, None) => {}
            _ => return Err(SqlError::unsupported("this form of CREATE TABLE … AS / LIKE")),
        }
        let mut cols: Vec<(String, SqlType, bool)> = Vec::new();
        let mut pk: Option<Vec<String>> = None;
        let mut pk_name: Option<String> = None;
        let mut uniques: Vec<(Option<String>, Vec<String>)> = Vec::new();
        let mut meta = TableMeta::default();
        let mut sequences: Vec<(String, SeqDef)> = Vec::new();
        for c in &ct.columns {
            let cname = ident(&c.name);
            if cname == ROWID_COLUMN {
                return Err(SqlError::new(
                    code::SYNTAX_ERROR,
                    format!("column name \"{ROWID_COLUMN}\" is reserved"),
                ));
            }
            let serial = serial_type(&c.data_type);
            let ty = match serial {
                Some((ty, _)) => ty,
                None => sql_type(&c.data_type)?,
            };
            if ty.column_type().is_none() {
                return Err(SqlError::unsupported(format!("a column of type {} (\"{cname}\")", ty.name())));
            }
            let mut nullable = true;
            let mut default: Option<String> = None;
            let mut identity: Option<SeqDef> = None;
            if let Some((_, max)) = serial {
                identity = Some(SeqDef::with_defaults(1, None, None, None, max)?);
            }
            for o in &c.options {
                match &o.option {
                    ast::ColumnOption::Default(e) => {
                        self.check_default(e, ty, &cname)?;
                        default = Some(e.to_string());
                    }
                    ast::ColumnOption::Generated {
                        generated_as: ast::GeneratedAs::Always | ast::GeneratedAs::ByDefault,
                        sequence_options,
                        generation_expr: None,
                        ..
                    } => {
                        let max = type_max(ty).ok_or_else(|| {
                            SqlError::new(
                                code::INVALID_PARAMETER_VALUE,
                                format!(
                                    "identity column type must be smallint, integer, or bigint (\"{cname}\")"
                                ),
                            )
                        })?;
                        identity = Some(seq_def(sequence_options.as_deref().unwrap_or(&[]), max)?);
                        nullable = false;
                    }
                    ast::ColumnOption::NotNull => nullable = false,
                    ast::ColumnOption::Null => {}
                    ast::ColumnOption::PrimaryKey(_) => {
                        if pk.replace(vec![cname.clone()]).is_some() {
                            return Err(SqlError::new(
                                code::INVALID_TABLE_DEFINITION,
                                format!("multiple primary keys for table \"{name}\" are not allowed"),
                            ));
                        }
                        nullable = false;
                    }
                    ast::ColumnOption::Unique(_) => uniques.push((None, vec![cname.clone()])),
                    ast::ColumnOption::ForeignKey(_) | ast::ColumnOption::Check(_) => {}
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
            if let Some(mut def) = identity {
                if default.is_some() {
                    return Err(SqlError::new(
                        code::SYNTAX_ERROR,
                        format!(
                            "both default and identity specified for column \"{cname}\" of table \"{name}\""
                        ),
                    ));
                }
                let seq = format!("{name}_{cname}_seq");
                def.owner = Some(name.clone());
                default = Some(format!("nextval('{}')", seq.replace('\'', "''")));
                sequences.push((seq, def));
                nullable = false;
            }
            if let Some(d) = default {
                meta.defaults.push((cname.clone(), d));
            }
            cols.push((cname, ty, nullable));
        }
        for con in &ct.constraints {
            match con {
                ast::TableConstraint::PrimaryKey(p) => {
                    let c = key_columns(&p.columns)?;
                    if pk.replace(c).is_some() {
                        return Err(SqlError::new(
                            code::INVALID_TABLE_DEFINITION,
                            format!("multiple primary keys for table \"{name}\" are not allowed"),
                        ));
                    }
                    pk_name = p.name.as_ref().map(ident);
                }
                ast::TableConstraint::Unique(u) => {
                    uniques.push((u.name.as_ref().map(ident), key_columns(&u.columns)?))
                }
                ast::TableConstraint::ForeignKey(_) | ast::TableConstraint::Check(_) => {}
                other => return Err(SqlError::unsupported(format!("table constraint `{other}`"))),
            }
        }
        if cols.is_empty() {
            return Err(SqlError::unsupported("a table without columns"));
        }
        for c in pk.iter().chain(uniques.iter().map(|(_, c)| c)).flatten() {
            if !cols.iter().any(|(n, _, _)| n == c) {
                return Err(SqlError::new(
                    code::UNDEFINED_COLUMN,
                    format!("column \"{c}\" named in key does not exist"),
                )
                .with_column(c));
            }
        }
        self.constraints(ct, &name, &cols, &pk, &uniques, &mut meta)?;
        finish_table(TableParts {
            name,
            cols,
            pk,
            pk_name,
            uniques,
            meta,
            sequences,
            if_not_exists: ct.if_not_exists,
        })
    }
}

/// What CREATE TABLE found, to become the engine schema.
pub(super) struct TableParts {
    /// Table name.
    pub name: String,
    /// Visible columns: name, type, NULL allowed.
    pub cols: Vec<(String, SqlType, bool)>,
    /// PRIMARY KEY columns (`None`: the hidden row id).
    pub pk: Option<Vec<String>>,
    /// The primary key's constraint name.
    pub pk_name: Option<String>,
    /// UNIQUE constraints: name, columns.
    pub uniques: Vec<(Option<String>, Vec<String>)>,
    /// DEFAULTs, keys, constraints.
    pub meta: TableMeta,
    /// Sequences the table owns.
    pub sequences: Vec<(String, SeqDef)>,
    /// IF NOT EXISTS.
    pub if_not_exists: bool,
}

/// The engine schema of a new table: its columns, the hidden row id when it has no primary
/// key, and a hidden column for each multi-column key.
pub(super) fn finish_table(parts: TableParts) -> SqlResult<Stmt> {
    let TableParts { name, cols, pk, pk_name, uniques, mut meta, sequences, if_not_exists } = parts;
    let single_pk = match pk.as_deref() {
        Some([c]) => Some(c.clone()),
        _ => None,
    };
    let mut engine_cols: Vec<(String, nvmedb::ColumnType, bool)> = Vec::new();
    if pk.is_none() {
        engine_cols.push((ROWID_COLUMN.to_string(), nvmedb::ColumnType::Int, false));
    }
    for (n, ty, nullable) in &cols {
        let in_pk = pk.as_ref().is_some_and(|p| p.contains(n));
        engine_cols.push((n.clone(), ty.column_type().expect("checked above"), *nullable && !in_pk));
    }
    // Multi-column keys: a hidden column each, at the end of the row.
    let mut hidden_keys: Vec<(String, bool)> = Vec::new();
    if let Some(p) = pk.as_ref().filter(|p| p.len() > 1) {
        meta.keys.push(KeyDef {
            name: pk_name.clone().unwrap_or_else(|| format!("{name}_pkey")),
            column: PK_COLUMN.into(),
            columns: p.clone(),
            primary: true,
            unique: true,
        });
        engine_cols.push((PK_COLUMN.into(), nvmedb::ColumnType::Bytes(KEY_BYTES), false));
    }
    let mut single_uniques = Vec::new();
    for (cname, u) in uniques {
        if Some(&u) == pk.as_ref() {
            continue;
        }
        let con = cname.unwrap_or_else(|| format!("{name}_{}_key", u.join("_")));
        if let [c] = u.as_slice() {
            single_uniques.push((con, c.clone()));
            continue;
        }
        let column = format!("$key{}", hidden_keys.len() + 1);
        meta.keys.push(KeyDef {
            name: con.clone(),
            column: column.clone(),
            columns: u,
            primary: false,
            unique: true,
        });
        engine_cols.push((column.clone(), nvmedb::ColumnType::Bytes(KEY_BYTES), true));
        hidden_keys.push((con, true));
    }
    let mut schema = nvmedb::Schema::new(engine_cols.iter().map(|(n, t, _)| (n.as_str(), *t)).collect());
    for (i, (_, _, nullable)) in engine_cols.iter().enumerate() {
        schema.columns[i].nullable = *nullable;
    }
    let pk_col = match (&single_pk, &pk) {
        (Some(p), _) => Some(p.as_str()),
        (None, Some(_)) => Some(PK_COLUMN),
        (None, None) => None,
    };
    if let Some(p) = pk_col {
        schema.primary_key = schema.column_index(p).expect("checked above");
    }
    for (con, c) in single_uniques {
        schema = schema.with_unique_index(&con, &c).expect("checked above");
    }
    for (i, (con, _)) in hidden_keys.iter().enumerate() {
        schema = schema.with_unique_index(con, &format!("$key{}", i + 1)).expect("the column was added");
    }
    Ok(Stmt::CreateTable(Box::new(CreateTablePlan { name, schema, if_not_exists, meta, sequences })))
}

impl Binder<'_> {
    /// Checks that DEFAULT `e` of column `col` (type `ty`) is an expression without columns
    /// or subqueries that binds.
    fn check_default(&mut self, e: &AstExpr, ty: SqlType, col: &str) -> SqlResult<()> {
        self.scopes.push(super::bind::Scope::default());
        let mut cx = BindCx::row("DEFAULT");
        let r = self.bind(e, &mut cx);
        self.scopes.pop();
        let (x, ety) = r?;
        if !cx.applies.is_empty() || !self.initplans.is_empty() {
            return Err(SqlError::new(
                code::FEATURE_NOT_SUPPORTED,
                format!("cannot use a subquery in the DEFAULT of column \"{col}\""),
            ));
        }
        let _ = self.assign_type(x, ety, ty)?;
        Ok(())
    }
}

/// SERIAL's family: the column type and the largest value of its sequence.
fn serial_type(dt: &ast::DataType) -> Option<(SqlType, i64)> {
    let ast::DataType::Custom(name, _) = dt else { return None };
    Some(match name.to_string().to_ascii_lowercase().as_str() {
        "smallserial" | "serial2" => (SqlType::Int2, i64::from(i16::MAX)),
        "serial" | "serial4" => (SqlType::Int4, i64::from(i32::MAX)),
        "bigserial" | "serial8" => (SqlType::Int8, i64::MAX),
        _ => return None,
    })
}

/// The largest value of an integer type (an identity column's sequence ends there).
fn type_max(ty: SqlType) -> Option<i64> {
    match ty {
        SqlType::Int2 => Some(i64::from(i16::MAX)),
        SqlType::Int4 => Some(i64::from(i32::MAX)),
        SqlType::Int8 => Some(i64::MAX),
        _ => None,
    }
}

/// An integer constant of a sequence option.
fn const_int(e: &AstExpr) -> SqlResult<i64> {
    let bad = || SqlError::new(code::SYNTAX_ERROR, format!("a sequence option needs an integer, not `{e}`"));
    match e {
        AstExpr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n.parse().map_err(|_| bad()),
            _ => Err(bad()),
        },
        AstExpr::UnaryOp { op: ast::UnaryOperator::Minus, expr } => {
            const_int(expr)?.checked_neg().ok_or_else(bad)
        }
        AstExpr::UnaryOp { op: ast::UnaryOperator::Plus, expr } => const_int(expr),
        AstExpr::Nested(x) => const_int(x),
        _ => Err(bad()),
    }
}

/// A sequence's definition from CREATE SEQUENCE's (or an identity column's) options; values
/// end at `type_max` unless AS or MAXVALUE says otherwise.
fn seq_def(opts: &[ast::SequenceOptions], max_of_type: i64) -> SqlResult<SeqDef> {
    use ast::SequenceOptions as O;
    let (mut inc, mut start, mut min, mut max, mut cycle, mut tmax) =
        (1, None, None, None, false, max_of_type);
    for o in opts {
        match o {
            O::DataType(dt) => {
                tmax = type_max(sql_type(dt)?).ok_or_else(|| {
                    SqlError::new(
                        code::INVALID_PARAMETER_VALUE,
                        "sequence type must be smallint, integer, or bigint",
                    )
                })?
            }
            O::IncrementBy(e, _) => inc = const_int(e)?,
            O::MinValue(e) => min = e.as_ref().map(const_int).transpose()?,
            O::MaxValue(e) => max = e.as_ref().map(const_int).transpose()?,
            O::StartWith(e, _) => start = Some(const_int(e)?),
            O::Cache(_) => {}
            O::Cycle(no) => cycle = !*no,
            O::OwnedBy(_) => {}
        }
    }
    let mut d = SeqDef::with_defaults(inc, start, min, max, tmax)?;
    d.cycle = cycle;
    Ok(d)
}

/// The column names of a key or index (each once).
fn key_columns(cols: &[ast::IndexColumn]) -> SqlResult<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for c in cols {
        let n = match &c.column.expr {
            AstExpr::Identifier(i) => ident(i),
            other => return Err(SqlError::unsupported(format!("a key on the expression `{other}`"))),
        };
        if out.contains(&n) {
            return Err(SqlError::new(
                code::DUPLICATE_COLUMN,
                format!("column \"{n}\" appears twice in a key"),
            ));
        }
        out.push(n);
    }
    Ok(out)
}
