//! Planning: a parsed statement (sqlparser's AST) becomes a [`Prepared`] plan against the
//! catalog — tables resolved, columns bound to row positions, parameter types inferred,
//! access paths chosen.
//!
//! Owns: the plan types and the binder. Access paths: a primary-key equality is a point read,
//! a primary-key range a key-order range, an equality or range on an indexed column an index
//! lookup; anything else scans. Every WHERE conjunct is also kept as a filter and re-checked
//! on the row read (a row can change between its index entry and its read). Joins of two
//! tables on an equality use the other table's key or index (index nested loop) or a hash
//! table. Invariant: a plan records the catalog version it was made at; a plan of an older
//! version is made again before it runs.

use crate::catalog::{Catalog, TableInfo, ROWID_COLUMN};
use crate::error::{code, SqlError, SqlResult};
use crate::expr::{AggFunc, BinOp, Expr, Func};
use crate::types::{Datum, SqlType, DEFAULT_NUMERIC_SCALE};
use sqlparser::ast::{self, Expr as AstExpr};
use std::sync::Arc;

/// A result column.
#[derive(Debug, Clone)]
pub struct OutCol {
    /// Column name.
    pub name: String,
    /// Type.
    pub ty: SqlType,
}

/// How rows of one table are found.
#[derive(Debug, Clone)]
pub enum Path {
    /// Primary key equals the expression.
    Point(Expr),
    /// Primary key within bounds (expression, inclusive).
    Range(Option<(Expr, bool)>, Option<(Expr, bool)>),
    /// Secondary index `ix` equals the expression.
    IndexPoint(usize, Expr),
    /// Secondary index `ix` within bounds.
    IndexRange(usize, Option<(Expr, bool)>, Option<(Expr, bool)>),
    /// Every row.
    Scan,
}

/// One table of a FROM clause.
#[derive(Debug, Clone)]
pub struct Access {
    /// The table.
    pub table: Arc<TableInfo>,
    /// Position of its first column in the combined row.
    pub offset: usize,
    /// How its rows are found.
    pub path: Path,
    /// Which of its columns the statement reads (others stay NULL in the row).
    pub needed: Vec<bool>,
}

/// How the inner table of a join is matched.
#[derive(Debug, Clone)]
pub enum JoinMethod {
    /// Look the outer key up in the inner table's primary key.
    PkLookup,
    /// Look the outer key up in inner secondary index `ix`.
    IndexLookup(usize),
    /// Read the inner table once into a hash table on engine column `col`.
    Hash(usize),
}

/// A two-table equi-join.
#[derive(Debug, Clone)]
pub struct Join {
    /// The inner table (its path is unused: the method decides).
    pub inner: Access,
    /// The outer side's key, over the combined row.
    pub outer_key: Expr,
    /// How inner rows are matched.
    pub method: JoinMethod,
    /// LEFT JOIN: outer rows without a match come out with NULLs.
    pub left_outer: bool,
    /// A LEFT JOIN's ON condition (over the combined row): inner rows that fail it do not
    /// match.
    pub on_filter: Option<Expr>,
}

/// An aggregate to compute.
#[derive(Debug, Clone)]
pub struct AggSpec {
    /// Function.
    pub func: AggFunc,
    /// Argument over the input row (unused for `count(*)`).
    pub arg: Expr,
    /// Argument type.
    pub arg_ty: SqlType,
    /// Result type.
    pub ty: SqlType,
}

/// Grouping and aggregation: the rows after it are the group keys then the aggregates.
#[derive(Debug, Clone)]
pub struct AggPlan {
    /// GROUP BY expressions over the input row.
    pub group_by: Vec<Expr>,
    /// Aggregates.
    pub aggs: Vec<AggSpec>,
    /// HAVING over the aggregated row.
    pub having: Option<Expr>,
}

/// A sort key: position in the output row, ascending, NULLs first.
#[derive(Debug, Clone, Copy)]
pub struct SortKey {
    /// Output position.
    pub col: usize,
    /// Ascending order.
    pub asc: bool,
    /// NULLs sort first.
    pub nulls_first: bool,
}

/// A SELECT.
#[derive(Debug, Clone)]
pub struct QueryPlan {
    /// The first FROM table (None: no FROM clause, one empty row).
    pub from: Option<Access>,
    /// A second table joined to it.
    pub join: Option<Box<Join>>,
    /// Width of the combined row.
    pub width: usize,
    /// WHERE over the combined row.
    pub filter: Option<Expr>,
    /// Grouping and aggregates.
    pub agg: Option<AggPlan>,
    /// Output expressions (over the combined or the aggregated row), then hidden sort keys.
    pub output: Vec<Expr>,
    /// Number of output columns the client sees.
    pub visible: usize,
    /// ORDER BY.
    pub sort: Vec<SortKey>,
    /// SELECT DISTINCT.
    pub distinct: bool,
    /// LIMIT.
    pub limit: Option<Expr>,
    /// OFFSET.
    pub offset: Option<Expr>,
    /// FOR UPDATE: rows are read under exclusive locks.
    pub for_update: bool,
}

/// Where an INSERT's rows come from.
#[derive(Debug, Clone)]
pub enum InsertSource {
    /// VALUES rows, one expression per target column.
    Values(Vec<Vec<Expr>>),
    /// A query whose output columns map to the target columns.
    Query(Box<QueryPlan>),
}

/// An INSERT.
#[derive(Debug, Clone)]
pub struct InsertPlan {
    /// Table.
    pub table: Arc<TableInfo>,
    /// Engine positions of the target columns.
    pub targets: Vec<usize>,
    /// Rows.
    pub source: InsertSource,
    /// RETURNING expressions over the new row.
    pub returning: Vec<Expr>,
}

/// An UPDATE or DELETE: a single-table query that finds the rows, then a change per row.
#[derive(Debug, Clone)]
pub struct ModifyPlan {
    /// Finds the rows (over the table's row).
    pub access: Access,
    /// WHERE.
    pub filter: Option<Expr>,
    /// UPDATE: (engine column, new value over the old row); empty for DELETE.
    pub sets: Vec<(usize, Expr)>,
    /// RETURNING over the new (UPDATE) or old (DELETE) row.
    pub returning: Vec<Expr>,
}

/// `COPY table [(cols)] FROM STDIN` in text format.
#[derive(Debug, Clone)]
pub struct CopyPlan {
    /// Table.
    pub table: Arc<TableInfo>,
    /// Engine positions of the columns in each line.
    pub targets: Vec<usize>,
    /// Field delimiter.
    pub delimiter: u8,
    /// The NULL marker.
    pub null: String,
}

/// A planned statement.
#[derive(Debug, Clone)]
pub enum Stmt {
    /// SELECT (or VALUES).
    Query(Box<QueryPlan>),
    /// INSERT.
    Insert(Box<InsertPlan>),
    /// UPDATE.
    Update(Box<ModifyPlan>),
    /// DELETE.
    Delete(Box<ModifyPlan>),
    /// COPY FROM STDIN.
    Copy(Box<CopyPlan>),
    /// BEGIN / START TRANSACTION.
    Begin,
    /// COMMIT / END.
    Commit,
    /// ROLLBACK / ABORT.
    Rollback,
    /// SET name = value (None: DEFAULT).
    Set(String, Option<String>),
    /// SHOW name.
    Show(String),
    /// CREATE TABLE.
    CreateTable(String, nvmedb::Schema, bool),
    /// DROP TABLE names, IF EXISTS.
    DropTable(Vec<String>, bool),
    /// TRUNCATE names.
    Truncate(Vec<String>),
    /// CREATE [UNIQUE] INDEX name ON table (column), IF NOT EXISTS.
    CreateIndex {
        /// Index name.
        name: String,
        /// Table.
        table: String,
        /// Indexed column.
        column: String,
        /// UNIQUE.
        unique: bool,
        /// IF NOT EXISTS.
        if_not_exists: bool,
    },
    /// ALTER TABLE t ADD PRIMARY KEY (column).
    AddPrimaryKey(String, String),
    /// CHECKPOINT.
    Checkpoint,
    /// A statement accepted and done without effect, with its command tag (VACUUM, ANALYZE,
    /// DISCARD ...).
    NoOp(&'static str),
    /// An empty query.
    Empty,
}

/// A statement ready to run: its plan, parameter types and result columns.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The statement text (to plan again after DDL).
    pub sql: String,
    /// The plan.
    pub stmt: Stmt,
    /// Parameter types ($1, $2, ...).
    pub params: Vec<SqlType>,
    /// Result columns (empty when the statement returns no rows).
    pub columns: Arc<Vec<OutCol>>,
    /// Catalog version the plan was made at.
    pub version: u64,
    /// Uncorrelated scalar subqueries, computed in order before the statement (a later one
    /// may use an earlier one's value).
    pub subqueries: Vec<QueryPlan>,
}

/// Resolution scope: the tables of a FROM clause.
struct ScopeTable {
    alias: String,
    info: Arc<TableInfo>,
    offset: usize,
}

enum Mode {
    Row,
    Agg { group: Vec<AstExpr>, group_types: Vec<SqlType>, aggs: Vec<AggSpec> },
}

/// The binder: one statement at a time.
pub struct Planner<'a> {
    catalog: &'a Catalog,
    params: Vec<SqlType>,
    scope: Vec<ScopeTable>,
    subqueries: Vec<QueryPlan>,
}

fn ident(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

/// The table name of an object name (a `public.` or `pg_catalog.` prefix is accepted).
pub fn object_name(n: &ast::ObjectName) -> SqlResult<String> {
    let parts: Vec<String> =
        n.0.iter()
            .map(|p| match p {
                ast::ObjectNamePart::Identifier(i) => Ok(ident(i)),
                other => Err(SqlError::unsupported(format!("name part `{other}`"))),
            })
            .collect::<SqlResult<_>>()?;
    match parts.as_slice() {
        [t] => Ok(t.clone()),
        [s, t] if s == "public" => Ok(t.clone()),
        [s, t] if s == "pg_catalog" || s == "information_schema" => Err(SqlError::new(
            code::FEATURE_NOT_SUPPORTED,
            format!("system catalog \"{s}.{t}\" is not available in nvmedb"),
        )),
        _ => Err(SqlError::unsupported(format!("qualified name `{n}`"))),
    }
}

/// The SQL type a DDL or CAST type name means.
pub fn sql_type(dt: &ast::DataType) -> SqlResult<SqlType> {
    use ast::DataType as D;
    let len = |l: &Option<ast::CharacterLength>, default: u32| match l {
        Some(ast::CharacterLength::IntegerLength { length, .. }) => (*length).min(u32::MAX as u64 - 1) as u32,
        Some(ast::CharacterLength::Max) => u32::MAX,
        None => default,
    };
    let numeric = |info: &ast::ExactNumberInfo| -> SqlResult<SqlType> {
        Ok(match *info {
            ast::ExactNumberInfo::None => SqlType::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE },
            ast::ExactNumberInfo::Precision(p) => SqlType::Numeric { precision: p.min(38) as u8, scale: 0 },
            ast::ExactNumberInfo::PrecisionAndScale(p, s) => {
                if p > 38 || s < 0 || s as u64 > p {
                    return Err(SqlError::unsupported(format!("numeric({p},{s}) (precision is at most 38)")));
                }
                SqlType::Numeric { precision: p as u8, scale: s as u8 }
            }
        })
    };
    Ok(match dt {
        D::SmallInt(_) | D::Int2(_) => SqlType::Int2,
        D::Int(_) | D::Integer(_) | D::Int4(_) => SqlType::Int4,
        D::BigInt(_) | D::Int8(_) => SqlType::Int8,
        D::Real | D::Float4 | D::Float8 | D::Float(_) | D::Double(_) | D::DoublePrecision => SqlType::Float8,
        D::Numeric(i) | D::Decimal(i) | D::Dec(i) => numeric(i)?,
        D::Text => SqlType::Text,
        D::Varchar(l) | D::CharacterVarying(l) | D::CharVarying(l) => match len(l, u32::MAX) {
            u32::MAX => SqlType::Text,
            n => SqlType::Varchar(n),
        },
        D::Char(l) | D::Character(l) => SqlType::Bpchar(len(l, 1)),
        D::Bool | D::Boolean => SqlType::Bool,
        D::Timestamp(_, _) => SqlType::Timestamp,
        D::Bytea => SqlType::Bytea,
        D::Custom(name, _) if name.to_string().eq_ignore_ascii_case("regclass") => SqlType::Text,
        other => return Err(SqlError::unsupported(format!("type `{other}`"))),
    })
}

fn literal(v: &ast::Value) -> SqlResult<(Expr, SqlType)> {
    use ast::Value as V;
    Ok(match v {
        V::Number(s, _) => {
            if let Ok(i) = s.parse::<i64>() {
                let ty = if i32::try_from(i).is_ok() { SqlType::Int4 } else { SqlType::Int8 };
                (Expr::Const(Datum::Int(i)), ty)
            } else {
                let scale = s
                    .split_once('.')
                    .map_or(0, |(_, f)| f.trim_end_matches(|c: char| !c.is_ascii_digit()).len());
                let scale =
                    if s.contains(['e', 'E']) { DEFAULT_NUMERIC_SCALE as usize } else { scale }.min(30) as u8;
                let ty = SqlType::Numeric { precision: 38, scale };
                (Expr::Const(Datum::parse(s, ty)?), ty)
            }
        }
        V::SingleQuotedString(s)
        | V::EscapedStringLiteral(s)
        | V::DoubleQuotedString(s)
        | V::NationalStringLiteral(s) => (Expr::Const(Datum::Text(s.clone())), SqlType::Unknown),
        V::DollarQuotedString(d) => (Expr::Const(Datum::Text(d.value.clone())), SqlType::Unknown),
        V::Boolean(b) => (Expr::Const(Datum::Bool(*b)), SqlType::Bool),
        V::Null => (Expr::Const(Datum::Null), SqlType::Unknown),
        V::HexStringLiteral(h) => {
            let b = (0..h.len() / 2)
                .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<_>, _>>();
            (
                Expr::Const(Datum::Bytes(b.map_err(|_| SqlError::syntax(format!("bad hex literal {h}")))?)),
                SqlType::Bytea,
            )
        }
        other => return Err(SqlError::unsupported(format!("literal `{other}`"))),
    })
}

fn wider_int(a: SqlType, b: SqlType) -> SqlType {
    let rank = |t: SqlType| match t {
        SqlType::Int2 => 0,
        SqlType::Int4 => 1,
        _ => 2,
    };
    if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

/// Result type of arithmetic on `a` and `b`.
fn arith_type(op: BinOp, a: SqlType, b: SqlType) -> SqlResult<SqlType> {
    Ok(match (a, b) {
        (x, y) if x.is_integer() && y.is_integer() => wider_int(x, y),
        (SqlType::Float8, y) | (y, SqlType::Float8) if y.is_numeric() => SqlType::Float8,
        (SqlType::Numeric { scale: s1, .. }, SqlType::Numeric { scale: s2, .. }) => {
            let scale = match op {
                BinOp::Mul => (s1 + s2).min(30),
                BinOp::Div => s1.max(s2).max(DEFAULT_NUMERIC_SCALE),
                _ => s1.max(s2),
            };
            SqlType::Numeric { precision: 38, scale }
        }
        (SqlType::Numeric { scale, .. }, y) | (y, SqlType::Numeric { scale, .. }) if y.is_integer() => {
            let scale = if op == BinOp::Div { scale.max(DEFAULT_NUMERIC_SCALE) } else { scale };
            SqlType::Numeric { precision: 38, scale }
        }
        (x, y) => {
            return Err(SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("operator does not exist: {} {op:?} {}", x.name(), y.name()),
            ))
        }
    })
}

/// Splits an AND tree into its conjuncts.
fn conjuncts(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::Binary(BinOp::And, a, b, _) => {
            conjuncts(*a, out);
            conjuncts(*b, out);
        }
        other => out.push(other),
    }
}

fn and_all(mut es: Vec<Expr>) -> Option<Expr> {
    let first = es.pop()?;
    Some(
        es.into_iter()
            .rev()
            .fold(first, |acc, e| Expr::Binary(BinOp::And, Box::new(e), Box::new(acc), SqlType::Bool)),
    )
}

impl<'a> Planner<'a> {
    /// A planner over `catalog` with client-given parameter types (`None`: infer).
    pub fn new(catalog: &'a Catalog, param_types: &[Option<SqlType>]) -> Self {
        Self {
            catalog,
            params: param_types.iter().map(|t| t.unwrap_or(SqlType::Unknown)).collect(),
            scope: Vec::new(),
            subqueries: Vec::new(),
        }
    }

    /// Plans one statement.
    pub fn plan(mut self, sql: &str, st: &ast::Statement) -> SqlResult<Prepared> {
        let version = self.catalog.version();
        let (stmt, columns) = self.statement(st)?;
        let params =
            self.params.iter().map(|t| if *t == SqlType::Unknown { SqlType::Text } else { *t }).collect();
        Ok(Prepared {
            sql: sql.to_string(),
            stmt,
            params,
            columns: Arc::new(columns),
            version,
            subqueries: self.subqueries,
        })
    }

    fn statement(&mut self, st: &ast::Statement) -> SqlResult<(Stmt, Vec<OutCol>)> {
        use ast::Statement as S;
        Ok(match st {
            S::Query(q) => {
                let (plan, cols) = self.query(q)?;
                (Stmt::Query(Box::new(plan)), cols)
            }
            S::Insert(ins) => self.insert(ins)?,
            S::Update(u) => self.update(u)?,
            S::Delete(d) => self.delete(d)?,
            S::StartTransaction { .. } => (Stmt::Begin, vec![]),
            S::Commit { chain: false, .. } => (Stmt::Commit, vec![]),
            S::Rollback { chain: false, savepoint: None } => (Stmt::Rollback, vec![]),
            S::Set(set) => (self.set(set)?, vec![]),
            S::ShowVariable { variable } => {
                let parts = variable.iter().map(ident).collect::<Vec<_>>();
                // `nvmedb.x` (the server's own settings) arrives as two words.
                let dotted = parts.len() == 2 && parts[0].eq_ignore_ascii_case("nvmedb");
                let name = parts.join(if dotted { "." } else { " " });
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
                        let col = Self::single_column(&pk.columns)?;
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
            S::Analyze(_) => (Stmt::NoOp("ANALYZE"), vec![]),
            S::Discard { .. } => (Stmt::NoOp("DISCARD ALL"), vec![]),
            other => {
                let text = other.to_string();
                let what = text.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                return Err(SqlError::unsupported(format!("the statement `{what} …`")));
            }
        })
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
                Stmt::Set(name, v)
            }
            ast::Set::SetTimeZone { value, .. } => Stmt::Set("timezone".into(), Some(value_text(value))),
            ast::Set::SetNames { charset_name, .. } => {
                Stmt::Set("client_encoding".into(), Some(charset_name.value.clone()))
            }
            ast::Set::SetTransaction { .. } => Stmt::NoOp("SET"),
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
                    let c = Self::single_column(&p.columns)?;
                    if pk.replace(c).is_some() {
                        return Err(SqlError::new(
                            code::SYNTAX_ERROR,
                            format!("multiple primary keys for table \"{name}\""),
                        ));
                    }
                }
                ast::TableConstraint::Unique(u) => uniques.push(Self::single_column(&u.columns)?),
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
            engine_cols.push((
                n.clone(),
                ty.column_type().expect("declared types are concrete"),
                *nullable && !is_pk,
            ));
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

    // ----- expressions -----

    fn param_type(&mut self, i: usize) -> SqlType {
        if self.params.len() <= i {
            self.params.resize(i + 1, SqlType::Unknown);
        }
        self.params[i]
    }

    /// Gives an untyped parameter or literal the type `ty` (literals are converted now).
    fn assign_type(&mut self, e: Expr, ety: SqlType, ty: SqlType) -> SqlResult<(Expr, SqlType)> {
        if ety != SqlType::Unknown || ty == SqlType::Unknown {
            return Ok((e, ety));
        }
        match e {
            Expr::Param(i) => {
                self.param_type(i);
                self.params[i] = ty;
                Ok((Expr::Param(i), ty))
            }
            Expr::Const(d) => Ok((Expr::Const(d.coerce(ty, "literal")?), ty)),
            other => Ok((Expr::Cast(Box::new(other), ty), ty)),
        }
    }

    fn resolve_column(&self, table: Option<&str>, name: &str) -> SqlResult<(usize, SqlType)> {
        let mut found = None;
        for st in &self.scope {
            if table.is_some_and(|t| t != st.alias) {
                continue;
            }
            if let Some(c) = st.info.visible().find(|&i| st.info.columns[i].name == name) {
                if found.is_some() {
                    return Err(SqlError::new(
                        code::AMBIGUOUS_COLUMN,
                        format!("column reference \"{name}\" is ambiguous"),
                    ));
                }
                found = Some((st.offset + c, st.info.columns[c].ty));
            }
        }
        if let Some(f) = found {
            return Ok(f);
        }
        if let Some(t) = table {
            if !self.scope.iter().any(|s| s.alias == t) {
                return Err(SqlError::new(
                    code::UNDEFINED_TABLE,
                    format!("missing FROM-clause entry for table \"{t}\""),
                )
                .with_table(t));
            }
            return Err(SqlError::new(code::UNDEFINED_COLUMN, format!("column {t}.{name} does not exist"))
                .with_column(name));
        }
        let mut e = SqlError::new(code::UNDEFINED_COLUMN, format!("column \"{name}\" does not exist"))
            .with_column(name);
        if let [only] = self.scope.as_slice() {
            e = e.with_table(&only.info.name);
        }
        Err(e)
    }

    fn bind(&mut self, e: &AstExpr, m: &mut Mode) -> SqlResult<(Expr, SqlType)> {
        if let Mode::Agg { group, group_types, .. } = m {
            if let Some(i) = group.iter().position(|g| g == e) {
                return Ok((Expr::Column(i), group_types[i]));
            }
        }
        match e {
            AstExpr::Identifier(i) => {
                let name = ident(i);
                if i.quote_style.is_none() {
                    match name.as_str() {
                        "current_timestamp" | "localtimestamp" | "now" => {
                            return Ok((Expr::Func(Func::Now, vec![]), SqlType::Timestamp))
                        }
                        "current_user" | "session_user" | "user" => {
                            return Ok((Expr::Func(Func::CurrentUser, vec![]), SqlType::Text))
                        }
                        _ => {}
                    }
                }
                if matches!(m, Mode::Agg { .. }) {
                    self.resolve_column(None, &name)?;
                    return Err(SqlError::new(
                        code::GROUPING_ERROR,
                        format!("column \"{name}\" must appear in the GROUP BY clause or be used in an aggregate function"),
                    ));
                }
                let (c, ty) = self.resolve_column(None, &name)?;
                Ok((Expr::Column(c), ty))
            }
            AstExpr::CompoundIdentifier(parts) => {
                let names: Vec<String> = parts.iter().map(ident).collect();
                let (t, c) = match names.as_slice() {
                    [t, c] => (t.as_str(), c.as_str()),
                    [s, t, c] if s == "public" => (t.as_str(), c.as_str()),
                    _ => return Err(SqlError::unsupported(format!("the name `{e}`"))),
                };
                if matches!(m, Mode::Agg { .. }) {
                    self.resolve_column(Some(t), c)?;
                    return Err(SqlError::new(
                        code::GROUPING_ERROR,
                        format!("column \"{t}.{c}\" must appear in the GROUP BY clause or be used in an aggregate function"),
                    ));
                }
                let (c, ty) = self.resolve_column(Some(t), c)?;
                Ok((Expr::Column(c), ty))
            }
            AstExpr::Value(v) => match &v.value {
                ast::Value::Placeholder(p) => {
                    let n: usize = p
                        .strip_prefix('$')
                        .and_then(|n| n.parse().ok())
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| SqlError::syntax(format!("bad parameter {p}")))?;
                    let ty = self.param_type(n - 1);
                    Ok((Expr::Param(n - 1), ty))
                }
                other => literal(other),
            },
            AstExpr::Nested(inner) => self.bind(inner, m),
            AstExpr::UnaryOp { op, expr } => {
                let (x, ty) = self.bind(expr, m)?;
                match op {
                    ast::UnaryOperator::Minus => match x {
                        Expr::Const(Datum::Int(v)) => Ok((Expr::Const(Datum::Int(-v)), ty)),
                        Expr::Const(Datum::Numeric(v, s)) => Ok((Expr::Const(Datum::Numeric(-v, s)), ty)),
                        x => {
                            let (x, ty) = self.assign_type(x, ty, SqlType::Int4)?;
                            Ok((Expr::Neg(Box::new(x)), ty))
                        }
                    },
                    ast::UnaryOperator::Plus => Ok((x, ty)),
                    ast::UnaryOperator::Not => {
                        let (x, _) = self.assign_type(x, ty, SqlType::Bool)?;
                        Ok((Expr::Not(Box::new(x)), SqlType::Bool))
                    }
                    other => Err(SqlError::unsupported(format!("operator {other}"))),
                }
            }
            AstExpr::BinaryOp { left, op, right } => {
                let (a, at) = self.bind(left, m)?;
                let (b, bt) = self.bind(right, m)?;
                let bop = match op {
                    ast::BinaryOperator::Plus => BinOp::Add,
                    ast::BinaryOperator::Minus => BinOp::Sub,
                    ast::BinaryOperator::Multiply => BinOp::Mul,
                    ast::BinaryOperator::Divide => BinOp::Div,
                    ast::BinaryOperator::Modulo => BinOp::Mod,
                    ast::BinaryOperator::Eq => BinOp::Eq,
                    ast::BinaryOperator::NotEq => BinOp::Ne,
                    ast::BinaryOperator::Lt => BinOp::Lt,
                    ast::BinaryOperator::LtEq => BinOp::Le,
                    ast::BinaryOperator::Gt => BinOp::Gt,
                    ast::BinaryOperator::GtEq => BinOp::Ge,
                    ast::BinaryOperator::And => BinOp::And,
                    ast::BinaryOperator::Or => BinOp::Or,
                    ast::BinaryOperator::StringConcat => BinOp::Concat,
                    other => return Err(SqlError::unsupported(format!("operator {other}"))),
                };
                self.binary(bop, (a, at), (b, bt))
            }
            AstExpr::IsNull(x) | AstExpr::IsNotNull(x) => {
                let (x, _) = self.bind(x, m)?;
                Ok((Expr::IsNull(Box::new(x), matches!(e, AstExpr::IsNotNull(_))), SqlType::Bool))
            }
            AstExpr::IsTrue(x) | AstExpr::IsFalse(x) => {
                let (x, ty) = self.bind(x, m)?;
                let (x, _) = self.assign_type(x, ty, SqlType::Bool)?;
                let want = matches!(e, AstExpr::IsTrue(_));
                let eq = Expr::Binary(
                    BinOp::Eq,
                    Box::new(x),
                    Box::new(Expr::Const(Datum::Bool(want))),
                    SqlType::Bool,
                );
                Ok((Expr::Func(Func::Coalesce, vec![eq, Expr::Const(Datum::Bool(false))]), SqlType::Bool))
            }
            AstExpr::Between { expr, negated, low, high } => {
                let x = self.bind(expr, m)?;
                let lo = self.bind(low, m)?;
                let hi = self.bind(high, m)?;
                let (ge, _) = self.binary(BinOp::Ge, x.clone(), lo)?;
                let (le, _) = self.binary(BinOp::Le, x, hi)?;
                let both = Expr::Binary(BinOp::And, Box::new(ge), Box::new(le), SqlType::Bool);
                Ok((if *negated { Expr::Not(Box::new(both)) } else { both }, SqlType::Bool))
            }
            AstExpr::In { expr, target: ast::InTarget::List(list), negated, .. } => {
                let (x, xt) = self.bind(expr, m)?;
                let mut items = Vec::new();
                let mut ty = xt;
                for item in list {
                    let (i, it) = self.bind(item, m)?;
                    let (i, it) = self.assign_type(i, it, xt)?;
                    if ty == SqlType::Unknown {
                        ty = it;
                    }
                    items.push(i);
                }
                let (x, _) = self.assign_type(x, xt, ty)?;
                Ok((Expr::InList(Box::new(x), items, *negated), SqlType::Bool))
            }
            AstExpr::Like { negated, expr, pattern, escape_char: None, any: false }
            | AstExpr::ILike { negated, expr, pattern, escape_char: None, any: false } => {
                let (x, xt) = self.bind(expr, m)?;
                let (p, pt) = self.bind(pattern, m)?;
                let (x, _) = self.assign_type(x, xt, SqlType::Text)?;
                let (p, _) = self.assign_type(p, pt, SqlType::Text)?;
                Ok((
                    Expr::Like(Box::new(x), Box::new(p), *negated, matches!(e, AstExpr::ILike { .. })),
                    SqlType::Bool,
                ))
            }
            AstExpr::Cast { expr, data_type, .. } => {
                let to = sql_type(data_type)?;
                let (x, xt) = self.bind(expr, m)?;
                match x {
                    Expr::Param(_) if xt == SqlType::Unknown => self.assign_type(x, xt, to),
                    Expr::Const(d) => Ok((Expr::Const(d.coerce(to, "cast")?), to)),
                    x => Ok((Expr::Cast(Box::new(x), to), to)),
                }
            }
            AstExpr::TypedString(ts) => {
                let to = sql_type(&ts.data_type)?;
                let (x, _) = literal(&ts.value.value)?;
                match x {
                    Expr::Const(d) => Ok((Expr::Const(d.coerce(to, "literal")?), to)),
                    _ => unreachable!("literals are constants"),
                }
            }
            AstExpr::Function(f) => self.function(f, m),
            AstExpr::Subquery(q) => {
                let (plan, cols) = self.subplan(q)?;
                if cols.len() != 1 {
                    return Err(SqlError::syntax("subquery must return only one column"));
                }
                self.subqueries.push(plan);
                Ok((Expr::Subquery(self.subqueries.len() - 1), cols[0].ty))
            }
            AstExpr::Case { operand, conditions, else_result, .. } => {
                let op = match operand {
                    Some(o) => Some(Box::new(self.bind(o, m)?.0)),
                    None => None,
                };
                let mut whens = Vec::new();
                let mut ty = SqlType::Unknown;
                for cw in conditions {
                    let (c, _) = self.bind(&cw.condition, m)?;
                    let (r, rt) = self.bind(&cw.result, m)?;
                    if ty == SqlType::Unknown {
                        ty = rt;
                    }
                    whens.push((c, r));
                }
                let else_ = match else_result {
                    Some(e) => {
                        let (x, xt) = self.bind(e, m)?;
                        if ty == SqlType::Unknown {
                            ty = xt;
                        }
                        Some(Box::new(x))
                    }
                    None => None,
                };
                Ok((Expr::Case(op, whens, else_), if ty == SqlType::Unknown { SqlType::Text } else { ty }))
            }
            other => Err(SqlError::unsupported(format!("the expression `{other}`"))),
        }
    }

    fn binary(&mut self, op: BinOp, a: (Expr, SqlType), b: (Expr, SqlType)) -> SqlResult<(Expr, SqlType)> {
        let ((a, at), (b, bt)) = (a, b);
        // An untyped side takes the other side's type (parameters, string literals).
        let (a, at) = self.assign_type(a, at, bt)?;
        let (b, bt) = self.assign_type(b, bt, at)?;
        let ty = match op {
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let comparable = at == bt
                    || (at.is_numeric() && bt.is_numeric())
                    || (at.is_text() && bt.is_text())
                    || at == SqlType::Unknown
                    || bt == SqlType::Unknown;
                if !comparable {
                    return Err(SqlError::new(
                        code::UNDEFINED_FUNCTION,
                        format!("operator does not exist: {} {op:?} {}", at.name(), bt.name()),
                    ));
                }
                SqlType::Bool
            }
            BinOp::And | BinOp::Or => SqlType::Bool,
            BinOp::Concat => SqlType::Text,
            _ => {
                let (at, bt) = (
                    if at == SqlType::Unknown { SqlType::Int4 } else { at },
                    if bt == SqlType::Unknown { SqlType::Int4 } else { bt },
                );
                arith_type(op, at, bt)?
            }
        };
        Ok((Expr::Binary(op, Box::new(a), Box::new(b), ty), ty))
    }

    fn function(&mut self, f: &ast::Function, m: &mut Mode) -> SqlResult<(Expr, SqlType)> {
        let name = match f.name.0.last() {
            Some(ast::ObjectNamePart::Identifier(i)) => ident(i),
            _ => return Err(SqlError::unsupported(format!("function `{}`", f.name))),
        };
        if f.over.is_some() || f.filter.is_some() {
            return Err(SqlError::unsupported(format!("window or filtered function `{name}`")));
        }
        let (args, star, distinct) = match &f.args {
            ast::FunctionArguments::None => (vec![], false, false),
            ast::FunctionArguments::List(l) => {
                let mut out = Vec::new();
                let mut star = false;
                for a in &l.args {
                    match a {
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => out.push(e.clone()),
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => star = true,
                        other => return Err(SqlError::unsupported(format!("function argument `{other}`"))),
                    }
                }
                (out, star, matches!(l.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)))
            }
            ast::FunctionArguments::Subquery(_) => {
                return Err(SqlError::unsupported("a subquery as a function argument"))
            }
        };
        let agg = match name.as_str() {
            "count" if star => Some(AggFunc::CountStar),
            "count" => Some(AggFunc::Count),
            "sum" => Some(AggFunc::Sum),
            "min" => Some(AggFunc::Min),
            "max" => Some(AggFunc::Max),
            "avg" => Some(AggFunc::Avg),
            _ => None,
        };
        if let Some(func) = agg {
            if distinct {
                return Err(SqlError::unsupported(format!("{name}(DISTINCT …)")));
            }
            let Mode::Agg { group_types, .. } = m else {
                return Err(SqlError::new(
                    code::GROUPING_ERROR,
                    format!("aggregate function {name} is not allowed here"),
                ));
            };
            let ngroups = group_types.len();
            let (arg, arg_ty) = match (func, args.as_slice()) {
                (AggFunc::CountStar, []) => (Expr::Const(Datum::Null), SqlType::Int8),
                (_, [a]) => {
                    let mut row_mode = Mode::Row;
                    let (e, t) = self.bind(a, &mut row_mode)?;
                    if func != AggFunc::Count
                        && func != AggFunc::Min
                        && func != AggFunc::Max
                        && !t.is_numeric()
                    {
                        return Err(SqlError::new(
                            code::UNDEFINED_FUNCTION,
                            format!("function {name}({}) does not exist", t.name()),
                        ));
                    }
                    (e, t)
                }
                _ => {
                    return Err(SqlError::new(
                        code::UNDEFINED_FUNCTION,
                        format!("function {name} takes one argument"),
                    ))
                }
            };
            let Mode::Agg { aggs, .. } = m else { unreachable!() };
            let ty = func.result_type(arg_ty);
            aggs.push(AggSpec { func, arg, arg_ty, ty });
            return Ok((Expr::Column(ngroups + aggs.len() - 1), ty));
        }
        let _ = &distinct;
        let mut bound = Vec::new();
        for a in &args {
            bound.push(self.bind(a, m)?);
        }
        let want = |n: usize| -> SqlResult<()> {
            if bound.len() == n {
                Ok(())
            } else {
                Err(SqlError::new(
                    code::UNDEFINED_FUNCTION,
                    format!("function {name} takes {n} argument(s), got {}", bound.len()),
                ))
            }
        };
        let (func, ty) = match name.as_str() {
            "now"
            | "current_timestamp"
            | "localtimestamp"
            | "statement_timestamp"
            | "transaction_timestamp"
            | "clock_timestamp" => {
                want(0)?;
                (Func::Now, SqlType::Timestamp)
            }
            "version" => {
                want(0)?;
                (Func::Version, SqlType::Text)
            }
            "current_setting" => {
                if bound.is_empty() || bound.len() > 2 {
                    want(1)?;
                }
                bound.truncate(1);
                (Func::CurrentSetting, SqlType::Text)
            }
            "current_database" => {
                want(0)?;
                (Func::CurrentDatabase, SqlType::Text)
            }
            "current_user" | "session_user" => {
                want(0)?;
                (Func::CurrentUser, SqlType::Text)
            }
            "random" => {
                want(0)?;
                (Func::Random, SqlType::Float8)
            }
            "coalesce" => {
                let ty = bound.iter().map(|b| b.1).find(|t| *t != SqlType::Unknown).unwrap_or(SqlType::Text);
                (Func::Coalesce, ty)
            }
            "abs" => {
                want(1)?;
                (Func::Abs, bound[0].1)
            }
            "lower" | "upper" => {
                want(1)?;
                (if name == "lower" { Func::Lower } else { Func::Upper }, SqlType::Text)
            }
            "length" | "char_length" | "character_length" => {
                want(1)?;
                (Func::Length, SqlType::Int4)
            }
            _ => {
                return Err(SqlError::new(
                    code::UNDEFINED_FUNCTION,
                    format!("function {name}() does not exist"),
                ))
            }
        };
        let mut exprs = Vec::new();
        for (e, t) in bound {
            let target = if func == Func::Coalesce {
                ty
            } else if matches!(func, Func::CurrentSetting | Func::Lower | Func::Upper | Func::Length) {
                SqlType::Text
            } else {
                t
            };
            exprs.push(self.assign_type(e, t, target)?.0);
        }
        Ok((Expr::Func(func, exprs), ty))
    }

    // ----- queries -----

    fn add_table(&mut self, tf: &ast::TableFactor) -> SqlResult<()> {
        match tf {
            ast::TableFactor::Table { name, alias, args: None, .. } => {
                let tname = object_name(name)?;
                let info = self.catalog.get(&tname)?;
                let alias = match alias {
                    Some(a) => ident(&a.name),
                    None => tname,
                };
                if self.scope.iter().any(|s| s.alias == alias) {
                    return Err(SqlError::new(
                        code::DUPLICATE_TABLE,
                        format!("table name \"{alias}\" specified more than once"),
                    ));
                }
                let offset = self.scope.iter().map(|s| s.info.columns.len()).sum();
                self.scope.push(ScopeTable { alias, info, offset });
                Ok(())
            }
            other => Err(SqlError::unsupported(format!("the FROM item `{other}`"))),
        }
    }

    fn width(&self) -> usize {
        self.scope.iter().map(|s| s.info.columns.len()).sum()
    }

    fn query(&mut self, q: &ast::Query) -> SqlResult<(QueryPlan, Vec<OutCol>)> {
        if q.with.is_some() {
            return Err(SqlError::unsupported("WITH (common table expressions)"));
        }
        let select = match q.body.as_ref() {
            ast::SetExpr::Select(s) => s,
            ast::SetExpr::Values(v) => return self.values_query(v),
            ast::SetExpr::Query(inner) if q.order_by.is_none() && q.limit_clause.is_none() => {
                return self.query(inner)
            }
            other => return Err(SqlError::unsupported(format!("the query form `{other}`"))),
        };
        if select.having.is_some()
            && matches!(select.group_by, ast::GroupByExpr::Expressions(ref g, _) if g.is_empty())
        {
            // HAVING without GROUP BY aggregates the whole input: allowed below.
        }
        // FROM
        let mut join_on: Option<(AstExpr, bool)> = None;
        match select.from.as_slice() {
            [] => {}
            [twj] => {
                self.add_table(&twj.relation)?;
                match twj.joins.as_slice() {
                    [] => {}
                    [j] => {
                        self.add_table(&j.relation)?;
                        let (c, left) = match &j.join_operator {
                            ast::JoinOperator::Join(c) | ast::JoinOperator::Inner(c) => (c, false),
                            ast::JoinOperator::Left(c) | ast::JoinOperator::LeftOuter(c) => (c, true),
                            ast::JoinOperator::CrossJoin(_) => (&ast::JoinConstraint::None, false),
                            other => return Err(SqlError::unsupported(format!("join kind {other:?}"))),
                        };
                        match c {
                            ast::JoinConstraint::On(e) => join_on = Some((e.clone(), left)),
                            ast::JoinConstraint::None if !left => {}
                            other => return Err(SqlError::unsupported(format!("join constraint {other:?}"))),
                        }
                    }
                    _ => return Err(SqlError::unsupported("joins of more than two tables")),
                }
            }
            [a, b] if a.joins.is_empty() && b.joins.is_empty() => {
                self.add_table(&a.relation)?;
                self.add_table(&b.relation)?;
            }
            _ => return Err(SqlError::unsupported("joins of more than two tables")),
        }
        // WHERE (and a join's ON, for an inner join)
        let mut conj = Vec::new();
        let mut row = Mode::Row;
        if let Some(w) = &select.selection {
            let (e, t) = self.bind(w, &mut row)?;
            let (e, _) = self.assign_type(e, t, SqlType::Bool)?;
            conjuncts(e, &mut conj);
        }
        let mut on_conj = Vec::new();
        let mut left_outer = false;
        if let Some((on, left)) = &join_on {
            let (e, _) = self.bind(on, &mut row)?;
            if *left {
                conjuncts(e, &mut on_conj);
                left_outer = true;
            } else {
                conjuncts(e, &mut conj);
            }
        }
        // Aggregation?
        let group_asts: Vec<AstExpr> = match &select.group_by {
            ast::GroupByExpr::Expressions(g, mods) if mods.is_empty() => g.clone(),
            ast::GroupByExpr::Expressions(_, _) | ast::GroupByExpr::All(_) => {
                return Err(SqlError::unsupported("GROUP BY ALL / ROLLUP / CUBE"))
            }
        };
        // GROUP BY 1 refers to the first select item.
        let group_asts: Vec<AstExpr> = group_asts
            .into_iter()
            .map(|g| match &g {
                AstExpr::Value(v) => match &v.value {
                    ast::Value::Number(n, _) => {
                        let i: usize = n.parse().unwrap_or(0);
                        match select.projection.get(i.wrapping_sub(1)) {
                            Some(ast::SelectItem::UnnamedExpr(e))
                            | Some(ast::SelectItem::ExprWithAlias { expr: e, .. }) => Ok(e.clone()),
                            _ => Err(SqlError::new(
                                code::UNDEFINED_COLUMN,
                                format!("GROUP BY position {n} is not in select list"),
                            )),
                        }
                    }
                    _ => Ok(g.clone()),
                },
                _ => Ok(g.clone()),
            })
            .collect::<SqlResult<_>>()?;
        let has_agg = !group_asts.is_empty()
            || select.having.is_some()
            || select.projection.iter().any(|p| match p {
                ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                    contains_aggregate(e)
                }
                _ => false,
            })
            || q.order_by.as_ref().is_some_and(|o| match &o.kind {
                ast::OrderByKind::Expressions(es) => es.iter().any(|e| contains_aggregate(&e.expr)),
                _ => false,
            });
        let mut mode = if has_agg {
            let mut group = Vec::new();
            let mut types = Vec::new();
            for g in &group_asts {
                let (e, t) = self.bind(g, &mut Mode::Row)?;
                group.push(e);
                types.push(t);
            }
            // Bound expressions are kept in the plan; the mode keeps the ASTs to match.
            let agg_plan = AggPlan { group_by: group, aggs: vec![], having: None };
            (Mode::Agg { group: group_asts.clone(), group_types: types, aggs: vec![] }, Some(agg_plan))
        } else {
            (Mode::Row, None)
        };
        // Projection
        let mut output = Vec::new();
        let mut cols = Vec::new();
        for item in &select.projection {
            match item {
                ast::SelectItem::Wildcard(_) => {
                    if has_agg {
                        return Err(SqlError::new(
                            code::GROUPING_ERROR,
                            "SELECT * with GROUP BY or aggregates",
                        ));
                    }
                    if self.scope.is_empty() {
                        return Err(SqlError::syntax("SELECT * with no tables specified is not valid"));
                    }
                    for st in &self.scope {
                        for c in st.info.visible() {
                            output.push(Expr::Column(st.offset + c));
                            cols.push(OutCol {
                                name: st.info.columns[c].name.clone(),
                                ty: st.info.columns[c].ty,
                            });
                        }
                    }
                }
                ast::SelectItem::QualifiedWildcard(
                    ast::SelectItemQualifiedWildcardKind::ObjectName(n),
                    _,
                ) => {
                    let t = object_name(n)?;
                    let st = self.scope.iter().find(|s| s.alias == t).ok_or_else(|| {
                        SqlError::new(
                            code::UNDEFINED_TABLE,
                            format!("missing FROM-clause entry for table \"{t}\""),
                        )
                    })?;
                    for c in st.info.visible() {
                        output.push(Expr::Column(st.offset + c));
                        cols.push(OutCol {
                            name: st.info.columns[c].name.clone(),
                            ty: st.info.columns[c].ty,
                        });
                    }
                }
                ast::SelectItem::UnnamedExpr(e) => {
                    let (x, t) = self.bind(e, &mut mode.0)?;
                    let (x, t) = self.assign_type(x, t, SqlType::Text)?;
                    output.push(x);
                    cols.push(OutCol { name: column_name(e), ty: t });
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    let (x, t) = self.bind(expr, &mut mode.0)?;
                    let (x, t) = self.assign_type(x, t, SqlType::Text)?;
                    output.push(x);
                    cols.push(OutCol { name: ident(alias), ty: t });
                }
                other => return Err(SqlError::unsupported(format!("select item `{other}`"))),
            }
        }
        let visible = output.len();
        // HAVING
        let having = match &select.having {
            Some(h) => Some(self.bind(h, &mut mode.0)?.0),
            None => None,
        };
        // ORDER BY
        let mut sort = Vec::new();
        if let Some(ob) = &q.order_by {
            let ast::OrderByKind::Expressions(items) = &ob.kind else {
                return Err(SqlError::unsupported("ORDER BY ALL"));
            };
            for item in items {
                let asc = item.options.sort.as_ref().is_none_or(|s| !matches!(s, ast::OrderBySort::Desc));
                let nulls_first = item.options.nulls_first.unwrap_or(!asc);
                let col = match &item.expr {
                    AstExpr::Value(v) if matches!(v.value, ast::Value::Number(..)) => {
                        let ast::Value::Number(n, _) = &v.value else { unreachable!() };
                        let i: usize = n.parse().unwrap_or(0);
                        if i == 0 || i > visible {
                            return Err(SqlError::new(
                                code::UNDEFINED_COLUMN,
                                format!("ORDER BY position {n} is not in select list"),
                            ));
                        }
                        i - 1
                    }
                    AstExpr::Identifier(id)
                        if cols[..visible].iter().any(|c| c.name == ident(id))
                            && self.resolve_column(None, &ident(id)).is_err() =>
                    {
                        cols.iter().position(|c| c.name == ident(id)).expect("checked")
                    }
                    e => {
                        let (x, _) = self.bind(e, &mut mode.0)?;
                        output.push(x);
                        output.len() - 1
                    }
                };
                sort.push(SortKey { col, asc, nulls_first });
            }
        }
        // LIMIT / OFFSET
        let (mut limit, mut offset) = (None, None);
        match &q.limit_clause {
            None => {}
            Some(ast::LimitClause::LimitOffset { limit: l, offset: o, limit_by }) if limit_by.is_empty() => {
                if let Some(l) = l {
                    let (x, t) = self.bind(l, &mut Mode::Row)?;
                    limit = Some(self.assign_type(x, t, SqlType::Int8)?.0);
                }
                if let Some(o) = o {
                    let (x, t) = self.bind(&o.value, &mut Mode::Row)?;
                    offset = Some(self.assign_type(x, t, SqlType::Int8)?.0);
                }
            }
            Some(other) => return Err(SqlError::unsupported(format!("`{other}`"))),
        }
        let for_update = match q.locks.as_slice() {
            [] => false,
            [l] if l.lock_type == ast::LockType::Update && l.of.is_none() => true,
            _ => return Err(SqlError::unsupported("locking clauses other than FOR UPDATE")),
        };
        let agg = match (mode.0, mode.1) {
            (Mode::Agg { aggs, .. }, Some(mut plan)) => {
                plan.aggs = aggs;
                plan.having = having;
                Some(plan)
            }
            _ => None,
        };
        let distinct = match &select.distinct {
            None => false,
            Some(ast::Distinct::Distinct) => true,
            Some(other) => return Err(SqlError::unsupported(format!("`{other}`"))),
        };
        let width = self.width();
        let (from, join, filter) = self.access_paths(conj, on_conj, left_outer, &output, agg.as_ref())?;
        let plan = QueryPlan {
            from,
            join,
            width,
            filter,
            agg,
            output,
            visible,
            sort,
            distinct,
            limit,
            offset,
            for_update,
        };
        Ok((plan, cols))
    }

    /// Plans an uncorrelated subquery (its own FROM scope; parameters and subqueries shared).
    fn subplan(&mut self, q: &ast::Query) -> SqlResult<(QueryPlan, Vec<OutCol>)> {
        let mut sub = Planner {
            catalog: self.catalog,
            params: std::mem::take(&mut self.params),
            scope: vec![],
            subqueries: std::mem::take(&mut self.subqueries),
        };
        let r = sub.query(q);
        self.params = sub.params;
        self.subqueries = sub.subqueries;
        r
    }

    fn values_query(&mut self, v: &ast::Values) -> SqlResult<(QueryPlan, Vec<OutCol>)> {
        let _ = v;
        Err(SqlError::unsupported("VALUES as a query"))
    }

    /// Chooses how to read the FROM tables given the WHERE conjuncts; returns the access,
    /// the join and the residual filter (all conjuncts, re-checked on each row).
    #[allow(clippy::type_complexity)]
    fn access_paths(
        &mut self,
        conj: Vec<Expr>,
        on_conj: Vec<Expr>,
        left_outer: bool,
        output: &[Expr],
        agg: Option<&AggPlan>,
    ) -> SqlResult<(Option<Access>, Option<Box<Join>>, Option<Expr>)> {
        let mut needed = vec![false; self.width()];
        let mut mark = |e: &Expr| e.columns(&mut |c| needed[c] = true);
        conj.iter().for_each(&mut mark);
        on_conj.iter().for_each(&mut mark);
        match agg {
            Some(a) => {
                a.group_by.iter().for_each(&mut mark);
                a.aggs.iter().for_each(|s| mark(&s.arg));
            }
            None => output.iter().for_each(&mut mark),
        }
        let access_of = |st: &ScopeTable, path: Path, needed: &[bool]| Access {
            table: st.info.clone(),
            offset: st.offset,
            path,
            needed: needed[st.offset..st.offset + st.info.columns.len()].to_vec(),
        };
        match self.scope.len() {
            0 => Ok((None, None, and_all(conj))),
            1 => {
                let st = &self.scope[0];
                let path = choose_path(&st.info, st.offset, &conj);
                let a = access_of(st, path, &needed);
                Ok((Some(a), None, and_all(conj)))
            }
            _ => {
                let (outer_st, inner_st) = (&self.scope[0], &self.scope[1]);
                // Conjuncts over the outer table alone choose its path.
                let outer_only: Vec<Expr> = conj
                    .iter()
                    .filter(|e| {
                        let mut ok = true;
                        e.columns(&mut |c| ok &= c < inner_st.offset);
                        ok
                    })
                    .cloned()
                    .collect();
                let outer_path = choose_path(&outer_st.info, outer_st.offset, &outer_only);
                // An equality between the tables drives the join.
                let join_conj = if left_outer { &on_conj } else { &conj };
                let in_inner = |c: usize| c >= inner_st.offset;
                let mut best: Option<(Expr, usize)> = None;
                for e in join_conj {
                    if let Expr::Binary(BinOp::Eq, a, b, _) = e {
                        for (x, y) in [(a, b), (b, a)] {
                            if let Expr::Column(ic) = y.as_ref() {
                                let mut outer_side = true;
                                x.columns(&mut |c| outer_side &= !in_inner(c));
                                if in_inner(*ic) && outer_side {
                                    let col = ic - inner_st.offset;
                                    let better = match &best {
                                        None => true,
                                        Some((_, bc)) => *bc != inner_st.info.pk && col == inner_st.info.pk,
                                    };
                                    if better {
                                        best = Some(((**x).clone(), col));
                                    }
                                }
                            }
                        }
                    }
                }
                let Some((outer_key, col)) = best else {
                    return Err(SqlError::unsupported("a join without an equality between the two tables"));
                };
                let method = if col == inner_st.info.pk {
                    JoinMethod::PkLookup
                } else if let Some(ix) = inner_st.info.index_on(col) {
                    JoinMethod::IndexLookup(ix)
                } else {
                    JoinMethod::Hash(col)
                };
                let outer = access_of(outer_st, outer_path, &needed);
                let inner = access_of(inner_st, Path::Scan, &needed);
                // A LEFT JOIN's ON decides which inner rows match; WHERE filters joined rows.
                let on_filter = if left_outer { and_all(on_conj) } else { None };
                let join = Join { inner, outer_key, method, left_outer, on_filter };
                Ok((Some(outer), Some(Box::new(join)), and_all(conj)))
            }
        }
    }

    // ----- DML -----

    fn target_columns(&self, info: &TableInfo, cols: &[ast::ObjectName]) -> SqlResult<Vec<usize>> {
        if cols.is_empty() {
            return Ok(info.visible().collect());
        }
        let mut out = Vec::new();
        for c in cols {
            let name = match c.0.as_slice() {
                [ast::ObjectNamePart::Identifier(i)] => ident(i),
                _ => return Err(SqlError::unsupported(format!("target column `{c}`"))),
            };
            let pos = info.column(&name)?;
            if out.contains(&pos) {
                return Err(SqlError::new(
                    code::SYNTAX_ERROR,
                    format!("column \"{name}\" specified more than once"),
                ));
            }
            out.push(pos);
        }
        Ok(out)
    }

    fn returning(&mut self, items: &Option<Vec<ast::SelectItem>>) -> SqlResult<(Vec<Expr>, Vec<OutCol>)> {
        let Some(items) = items else { return Ok((vec![], vec![])) };
        let mut exprs = Vec::new();
        let mut cols = Vec::new();
        for item in items {
            match item {
                ast::SelectItem::Wildcard(_) => {
                    let st = &self.scope[0];
                    for c in st.info.visible() {
                        exprs.push(Expr::Column(c));
                        cols.push(OutCol {
                            name: st.info.columns[c].name.clone(),
                            ty: st.info.columns[c].ty,
                        });
                    }
                }
                ast::SelectItem::UnnamedExpr(e) => {
                    let (x, t) = self.bind(e, &mut Mode::Row)?;
                    exprs.push(x);
                    cols.push(OutCol { name: column_name(e), ty: t });
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    let (x, t) = self.bind(expr, &mut Mode::Row)?;
                    exprs.push(x);
                    cols.push(OutCol { name: ident(alias), ty: t });
                }
                other => return Err(SqlError::unsupported(format!("RETURNING item `{other}`"))),
            }
        }
        Ok((exprs, cols))
    }

    fn insert(&mut self, ins: &ast::Insert) -> SqlResult<(Stmt, Vec<OutCol>)> {
        let ast::TableObject::TableName(name) = &ins.table else {
            return Err(SqlError::unsupported("INSERT into a table function"));
        };
        if ins.on.is_some() {
            return Err(SqlError::unsupported("INSERT … ON CONFLICT"));
        }
        let tname = object_name(name)?;
        let info = self.catalog.get(&tname)?;
        let targets = self.target_columns(&info, &ins.columns)?;
        let Some(src) = &ins.source else {
            return Err(SqlError::unsupported("INSERT … DEFAULT VALUES"));
        };
        let source = match src.body.as_ref() {
            ast::SetExpr::Values(v) => {
                let mut rows = Vec::new();
                for r in &v.rows {
                    if r.content.len() != targets.len() {
                        return Err(SqlError::syntax(format!(
                            "INSERT has {} expressions for {} target columns",
                            r.content.len(),
                            targets.len()
                        )));
                    }
                    let mut row = Vec::new();
                    for (e, &col) in r.content.iter().zip(&targets) {
                        let cty = info.columns[col].ty;
                        let (x, t) = self.bind(e, &mut Mode::Row)?;
                        let (x, _) = self.assign_type(x, t, cty)?;
                        row.push(x);
                    }
                    rows.push(row);
                }
                InsertSource::Values(rows)
            }
            _ => {
                let (plan, cols) = self.subplan(src)?;
                if cols.len() != targets.len() {
                    return Err(SqlError::syntax(format!(
                        "INSERT has {} expressions for {} target columns",
                        cols.len(),
                        targets.len()
                    )));
                }
                InsertSource::Query(Box::new(plan))
            }
        };
        self.scope = vec![ScopeTable { alias: tname.clone(), info: info.clone(), offset: 0 }];
        let (returning, cols) = self.returning(&ins.returning)?;
        Ok((Stmt::Insert(Box::new(InsertPlan { table: info, targets, source, returning })), cols))
    }

    fn single_table(&mut self, twj: &ast::TableWithJoins) -> SqlResult<Arc<TableInfo>> {
        if !twj.joins.is_empty() {
            return Err(SqlError::unsupported("UPDATE/DELETE with joins"));
        }
        self.add_table(&twj.relation)?;
        Ok(self.scope[0].info.clone())
    }

    fn modify_access(
        &mut self,
        selection: &Option<AstExpr>,
        extra_needed: &[Expr],
    ) -> SqlResult<(Access, Option<Expr>)> {
        let mut conj = Vec::new();
        if let Some(w) = selection {
            let (e, t) = self.bind(w, &mut Mode::Row)?;
            let (e, _) = self.assign_type(e, t, SqlType::Bool)?;
            conjuncts(e, &mut conj);
        }
        let st = &self.scope[0];
        let path = choose_path(&st.info, 0, &conj);
        let _ = extra_needed;
        // Changes read whole rows (the new row is written whole).
        let needed = vec![true; st.info.columns.len()];
        Ok((Access { table: st.info.clone(), offset: 0, path, needed }, and_all(conj)))
    }

    fn update(&mut self, u: &ast::Update) -> SqlResult<(Stmt, Vec<OutCol>)> {
        if u.from.is_some() {
            return Err(SqlError::unsupported("UPDATE … FROM"));
        }
        let info = self.single_table(&u.table)?;
        let mut sets = Vec::new();
        for a in &u.assignments {
            let name = match &a.target {
                ast::AssignmentTarget::ColumnName(n) => match n.0.as_slice() {
                    [ast::ObjectNamePart::Identifier(i)] => ident(i),
                    [_, ast::ObjectNamePart::Identifier(i)] => ident(i),
                    _ => return Err(SqlError::unsupported(format!("assignment target `{n}`"))),
                },
                other => return Err(SqlError::unsupported(format!("assignment target `{other}`"))),
            };
            let col = info.column(&name)?;
            let (x, t) = self.bind(&a.value, &mut Mode::Row)?;
            let (x, _) = self.assign_type(x, t, info.columns[col].ty)?;
            sets.push((col, x));
        }
        let (access, filter) = self.modify_access(&u.selection, &[])?;
        let (returning, cols) = self.returning(&u.returning)?;
        Ok((Stmt::Update(Box::new(ModifyPlan { access, filter, sets, returning })), cols))
    }

    fn delete(&mut self, d: &ast::Delete) -> SqlResult<(Stmt, Vec<OutCol>)> {
        let from = match &d.from {
            ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
        };
        let [twj] = from.as_slice() else {
            return Err(SqlError::unsupported("DELETE from several tables"));
        };
        if d.using.is_some() || d.limit.is_some() || !d.order_by.is_empty() {
            return Err(SqlError::unsupported("DELETE … USING / ORDER BY / LIMIT"));
        }
        self.single_table(twj)?;
        let (access, filter) = self.modify_access(&d.selection, &[])?;
        let (returning, cols) = self.returning(&d.returning)?;
        Ok((Stmt::Delete(Box::new(ModifyPlan { access, filter, sets: vec![], returning })), cols))
    }
}

/// The column name PostgreSQL gives an unnamed select item.
fn column_name(e: &AstExpr) -> String {
    match e {
        AstExpr::Identifier(i) => ident(i),
        AstExpr::CompoundIdentifier(p) => p.last().map(ident).unwrap_or_default(),
        AstExpr::Function(f) => match f.name.0.last() {
            Some(ast::ObjectNamePart::Identifier(i)) => ident(i),
            _ => "?column?".into(),
        },
        AstExpr::Cast { expr, data_type, .. } => match expr.as_ref() {
            AstExpr::Identifier(_) | AstExpr::CompoundIdentifier(_) => column_name(expr),
            _ => sql_type(data_type)
                .map(|t| t.name())
                .unwrap_or_else(|_| "?column?".into())
                .split(['(', ' '])
                .next()
                .unwrap_or("?column?")
                .to_string(),
        },
        AstExpr::Nested(x) => column_name(x),
        _ => "?column?".into(),
    }
}

fn contains_aggregate(e: &AstExpr) -> bool {
    let any = |es: &[&AstExpr]| es.iter().any(|x| contains_aggregate(x));
    match e {
        AstExpr::Function(f) => {
            let is_agg = matches!(f.name.0.last(), Some(ast::ObjectNamePart::Identifier(i))
                if matches!(ident(i).as_str(), "count" | "sum" | "min" | "max" | "avg"));
            is_agg
                || match &f.args {
                    ast::FunctionArguments::List(l) => l.args.iter().any(|a| {
                        matches!(a, ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) if contains_aggregate(x))
                    }),
                    _ => false,
                }
        }
        AstExpr::BinaryOp { left, right, .. } => any(&[left, right]),
        AstExpr::UnaryOp { expr, .. }
        | AstExpr::Nested(expr)
        | AstExpr::Cast { expr, .. }
        | AstExpr::IsNull(expr)
        | AstExpr::IsNotNull(expr)
        | AstExpr::IsTrue(expr)
        | AstExpr::IsFalse(expr) => contains_aggregate(expr),
        AstExpr::Between { expr, low, high, .. } => any(&[expr, low, high]),
        AstExpr::In { expr, target: ast::InTarget::List(l), .. } => {
            contains_aggregate(expr) || l.iter().any(contains_aggregate)
        }
        AstExpr::Like { expr, pattern, .. } | AstExpr::ILike { expr, pattern, .. } => any(&[expr, pattern]),
        AstExpr::Case { operand, conditions, else_result, .. } => {
            operand.as_deref().is_some_and(contains_aggregate)
                || conditions
                    .iter()
                    .any(|c| contains_aggregate(&c.condition) || contains_aggregate(&c.result))
                || else_result.as_deref().is_some_and(contains_aggregate)
        }
        _ => false,
    }
}

/// Lower and upper bound of a range (expression, inclusive).
type RangeBounds = (Option<(Expr, bool)>, Option<(Expr, bool)>);

/// Picks the access path of the table whose columns start at `offset` from WHERE conjuncts.
fn choose_path(info: &TableInfo, offset: usize, conj: &[Expr]) -> Path {
    let local = |e: &Expr| -> Option<usize> {
        match e {
            Expr::Column(c) if *c >= offset && *c < offset + info.columns.len() => Some(c - offset),
            _ => None,
        }
    };
    // (column, op, value) with the column on the left.
    let mut preds: Vec<(usize, BinOp, Expr)> = Vec::new();
    for e in conj {
        if let Expr::Binary(op @ (BinOp::Eq | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), a, b, _) = e {
            if let (Some(c), true) = (local(a), b.is_row_independent()) {
                preds.push((c, *op, (**b).clone()));
            } else if let (Some(c), true) = (local(b), a.is_row_independent()) {
                let flipped = match op {
                    BinOp::Lt => BinOp::Gt,
                    BinOp::Le => BinOp::Ge,
                    BinOp::Gt => BinOp::Lt,
                    BinOp::Ge => BinOp::Le,
                    o => *o,
                };
                preds.push((c, flipped, (**a).clone()));
            }
        }
    }
    let eq = |col: usize| preds.iter().find(|(c, op, _)| *c == col && *op == BinOp::Eq).map(|p| p.2.clone());
    let range = |col: usize| -> RangeBounds {
        let mut lo = None;
        let mut hi = None;
        for (c, op, v) in &preds {
            if *c != col {
                continue;
            }
            match op {
                BinOp::Gt if lo.is_none() => lo = Some((v.clone(), false)),
                BinOp::Ge if lo.is_none() => lo = Some((v.clone(), true)),
                BinOp::Lt if hi.is_none() => hi = Some((v.clone(), false)),
                BinOp::Le if hi.is_none() => hi = Some((v.clone(), true)),
                _ => {}
            }
        }
        (lo, hi)
    };
    if let Some(v) = eq(info.pk) {
        return Path::Point(v);
    }
    for (ix, (_, col, _)) in info.indexes.iter().enumerate() {
        if let Some(v) = eq(*col) {
            return Path::IndexPoint(ix, v);
        }
    }
    let (lo, hi) = range(info.pk);
    if lo.is_some() || hi.is_some() {
        return Path::Range(lo, hi);
    }
    for (ix, (_, col, _)) in info.indexes.iter().enumerate() {
        let (lo, hi) = range(*col);
        if lo.is_some() || hi.is_some() {
            return Path::IndexRange(ix, lo, hi);
        }
    }
    Path::Scan
}
