//! The binder: one statement at a time, from sqlparser's AST to a plan.
//!
//! Owns: [`Binder`] (the catalog it resolves against, the parameter types inferred so far,
//! the statement's column ids, the FROM scopes of the query levels being bound, the
//! statement's uncorrelated scalar subqueries and its visible CTEs), the statement dispatch
//! and the name and type helpers every binder file uses. Queries are in `bind_query`,
//! expressions in `bind_expr`, INSERT/UPDATE/DELETE in `bind_dml`, DDL and utility
//! statements in `bind_ddl`. Invariant: a name resolves to the innermost scope that has it;
//! a name found only in an enclosing query's scope is a correlated reference (its column id
//! belongs to that query).

use super::logical::{ColId, Cols, Logical};
use super::{ExplainPlan, OutCol, Prepared, QueryPlan, Stmt};
use crate::catalog::Catalog;
use crate::error::{code, SqlError, SqlResult};
use crate::expr::Expr;
use crate::types::{Datum, SqlType, DEFAULT_NUMERIC_SCALE};
use sqlparser::ast::{self, Expr as AstExpr};
use std::sync::Arc;

/// A column visible in a scope.
#[derive(Debug, Clone)]
pub struct ScopeCol {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: ColId,
    /// Its type.
    pub ty: SqlType,
    /// Hidden from `*` (a table's hidden row id).
    pub hidden: bool,
}

/// One FROM item as names see it.
#[derive(Debug, Clone)]
pub struct ScopeItem {
    /// Alias (or table name).
    pub alias: String,
    /// Columns.
    pub cols: Vec<ScopeCol>,
}

/// The names of one query level.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// FROM items, in order.
    pub items: Vec<ScopeItem>,
    /// Names USING / NATURAL joins merged: (name, id) resolving without qualification.
    pub merged: Vec<(String, ColId, SqlType)>,
}

/// A CTE visible to the query being bound.
#[derive(Debug, Clone)]
pub(crate) struct Cte {
    pub name: String,
    pub query: ast::Query,
    pub columns: Vec<String>,
}

/// The binder.
pub struct Binder<'a> {
    pub(crate) catalog: &'a Catalog,
    pub(crate) params: Vec<SqlType>,
    pub(crate) cols: Cols,
    /// Query levels being bound, innermost last.
    pub(crate) scopes: Vec<Scope>,
    /// Uncorrelated scalar subqueries ([`Expr::Subquery`] numbers).
    pub(crate) initplans: Vec<Logical>,
    /// CTEs in force, innermost last.
    pub(crate) ctes: Vec<Cte>,
    /// Nesting depth of CTE expansion (a guard against a CTE that names itself).
    pub(crate) cte_depth: usize,
}

pub(crate) fn ident(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

/// The table name of an object name (a `public.` prefix is accepted).
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
        D::Date => SqlType::Date,
        D::Interval { .. } => SqlType::Interval,
        D::Bytea => SqlType::Bytea,
        D::Custom(name, _) if name.to_string().eq_ignore_ascii_case("regclass") => SqlType::Text,
        D::Custom(name, _) if name.to_string().eq_ignore_ascii_case("int2vector") => {
            SqlType::Vector(&SqlType::Int2)
        }
        D::Custom(name, _) if name.to_string().eq_ignore_ascii_case("oidvector") => {
            SqlType::Vector(&SqlType::Int8)
        }
        D::Array(
            ast::ArrayElemTypeDef::SquareBracket(inner, _)
            | ast::ArrayElemTypeDef::AngleBracket(inner)
            | ast::ArrayElemTypeDef::Qualified(inner, _),
        ) => SqlType::Array(crate::array::elem(sql_type(inner)?)),
        other => return Err(SqlError::unsupported(format!("type `{other}`"))),
    })
}

/// A literal's constant and type (strings are untyped until used).
pub(crate) fn literal(v: &ast::Value) -> SqlResult<(Expr, SqlType)> {
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

impl<'a> Binder<'a> {
    /// A binder over `catalog` with client-given parameter types (`None`: infer).
    pub fn new(catalog: &'a Catalog, param_types: &[Option<SqlType>]) -> Self {
        Self {
            catalog,
            params: param_types.iter().map(|t| t.unwrap_or(SqlType::Unknown)).collect(),
            cols: Cols::default(),
            scopes: Vec::new(),
            initplans: Vec::new(),
            ctes: Vec::new(),
            cte_depth: 0,
        }
    }

    /// Plans one statement.
    pub fn plan(mut self, sql: &str, st: &ast::Statement) -> SqlResult<Prepared> {
        let version = self.catalog.version();
        let (stmt, columns) = self.statement(st)?;
        let params = self.param_types();
        Ok(Prepared { sql: sql.to_string(), stmt, params, columns: Arc::new(columns), version })
    }

    fn statement(&mut self, st: &ast::Statement) -> SqlResult<(Stmt, Vec<OutCol>)> {
        use ast::Statement as S;
        Ok(match st {
            S::Query(q) => {
                let (plan, cols) = self.query_plan(q)?;
                (Stmt::Query(Box::new(plan)), cols)
            }
            S::Insert(ins) => self.insert(ins)?,
            S::Update(u) => self.update(u)?,
            S::Delete(d) => self.delete(d)?,
            S::Explain { statement, analyze, options, .. } => {
                // EXPLAIN ANALYZE … or EXPLAIN (ANALYZE [true], …) ….
                let analyze = *analyze
                    || options.iter().flatten().any(|o| {
                        o.name.value.eq_ignore_ascii_case("analyze")
                            && !o.arg.as_ref().is_some_and(|a| {
                                let t = a.to_string().to_ascii_lowercase();
                                t == "false" || t == "off" || t == "0"
                            })
                    });
                let started = std::time::Instant::now();
                let (inner, _) = self.statement(statement)?;
                if !matches!(inner, Stmt::Query(_) | Stmt::Insert(_) | Stmt::Update(_) | Stmt::Delete(_)) {
                    return Err(SqlError::unsupported(
                        "EXPLAIN of a statement other than a query or a change",
                    ));
                }
                let cols = vec![OutCol { name: "QUERY PLAN".into(), ty: SqlType::Text }];
                let planning = started.elapsed();
                (Stmt::Explain(ExplainPlan { analyze, stmt: Box::new(inner), planning }), cols)
            }
            other => self.utility(other)?,
        })
    }

    /// Binds a whole query (its own query level) and plans it physically.
    pub(crate) fn query_plan(&mut self, q: &ast::Query) -> SqlResult<(QueryPlan, Vec<OutCol>)> {
        let (logical, out, for_update) = self.query(q)?;
        let cols = out.iter().map(|(_, c)| c.clone()).collect();
        let plan = self.finish(logical, for_update)?;
        Ok((plan, cols))
    }

    /// Turns a bound logical tree into a physical plan, with the statement's init plans.
    pub(crate) fn finish(&mut self, logical: Logical, for_update: bool) -> SqlResult<QueryPlan> {
        let logical = super::rewrite::rewrite(logical);
        let initplans: Vec<Logical> = self.initplans.iter().cloned().map(super::rewrite::rewrite).collect();
        let mut planner = super::physical::Planner::new(&self.cols);
        let mut inits = Vec::with_capacity(initplans.len());
        for ip in &initplans {
            inits.push(planner.plan_root(ip)?);
        }
        let root = planner.plan_root(&logical)?;
        Ok(QueryPlan {
            root,
            initplans: inits,
            for_update,
            nodes: planner.node_count(),
            cols: Arc::new(self.cols.clone()),
        })
    }

    /// The type of parameter `i` so far (growing the list).
    pub(crate) fn param_type(&mut self, i: usize) -> SqlType {
        if self.params.len() <= i {
            self.params.resize(i + 1, SqlType::Unknown);
        }
        self.params[i]
    }

    /// Gives an untyped parameter or literal the type `ty` (literals are converted now).
    pub(crate) fn assign_type(&mut self, e: Expr, ety: SqlType, ty: SqlType) -> SqlResult<(Expr, SqlType)> {
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

    /// Converts `e` of type `from` to type `to` where they differ (an implicit cast).
    pub(crate) fn convert(&mut self, e: Expr, from: SqlType, to: SqlType) -> SqlResult<Expr> {
        if from == to || to == SqlType::Unknown {
            return Ok(e);
        }
        if from == SqlType::Unknown {
            return Ok(self.assign_type(e, from, to)?.0);
        }
        // An integer becomes a numeric of scale 0, as in PostgreSQL (a computed numeric has no
        // declared scale: each value keeps its own).
        let to = match to {
            SqlType::Numeric { .. } if from.is_integer() => SqlType::Numeric { precision: 38, scale: 0 },
            t => t,
        };
        Ok(match e {
            Expr::Const(d) => Expr::Const(d.coerce(to, "value")?),
            e if from.is_integer() && to.is_integer() => e,
            e if from.is_text() && to.is_text() => e,
            e => Expr::Cast(Box::new(e), to),
        })
    }

    /// The arguments of `EXECUTE name (args)`, each a constant expression converted to its
    /// parameter's type in `types` (a column or subquery is refused).
    pub(crate) fn execute_args(&mut self, args: &[ast::Expr], types: &[SqlType]) -> SqlResult<Vec<Expr>> {
        self.scopes.push(Default::default());
        let r = args
            .iter()
            .zip(types)
            .map(|(a, &ty)| {
                let mut cx = super::bind_expr::BindCx::row("EXECUTE");
                let (e, t) = self.bind(a, &mut cx)?;
                if !cx.applies.is_empty() || !self.initplans.is_empty() {
                    return Err(SqlError::unsupported("a subquery as an EXECUTE argument"));
                }
                self.convert(e, t, ty)
            })
            .collect();
        self.scopes.pop();
        r
    }

    /// The types of the statement's own parameters so far (unknown ones as text).
    pub fn param_types(&self) -> Vec<SqlType> {
        self.params.iter().map(|t| if *t == SqlType::Unknown { SqlType::Text } else { *t }).collect()
    }

    /// `GROUP BY n` or `GROUP BY alias`: the select item's expression.
    pub(crate) fn group_item(&self, g: &AstExpr, projection: &[ast::SelectItem]) -> SqlResult<AstExpr> {
        match g {
            AstExpr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => {
                    let i: usize = n.parse().unwrap_or(0);
                    match projection.get(i.wrapping_sub(1)) {
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
            AstExpr::Identifier(id) if self.resolve_column(None, &ident(id)).is_err() => {
                let name = ident(id);
                for p in projection {
                    if let ast::SelectItem::ExprWithAlias { expr, alias } = p {
                        if ident(alias) == name {
                            return Ok(expr.clone());
                        }
                    }
                }
                Ok(g.clone())
            }
            _ => Ok(g.clone()),
        }
    }

    /// A new column id.
    pub(crate) fn new_col(&mut self, name: &str, table: Option<&str>, ty: SqlType) -> ColId {
        self.cols.add(name, table.map(str::to_string), ty)
    }
}

/// The name of a date/time field (`extract(YEAR from …)`, `interval '1' day`).
pub(crate) fn datetime_field(f: &ast::DateTimeField) -> SqlResult<&'static str> {
    use ast::DateTimeField as F;
    Ok(match f {
        F::Year | F::Years => "year",
        F::Month | F::Months => "month",
        F::Week(_) | F::Weeks => "week",
        F::Day | F::Days => "day",
        F::Hour | F::Hours => "hour",
        F::Minute | F::Minutes => "minute",
        F::Second | F::Seconds => "second",
        F::Century => "century",
        F::Decade => "decade",
        F::Dow | F::DayOfWeek => "dow",
        F::Doy | F::DayOfYear => "doy",
        F::Epoch => "epoch",
        F::Isodow => "isodow",
        F::Quarter => "quarter",
        other => return Err(SqlError::unsupported(format!("the field {other}"))),
    })
}
