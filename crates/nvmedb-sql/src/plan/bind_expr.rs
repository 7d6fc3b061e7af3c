//! Binding of expressions: names to column ids, literals and parameters to types, operators
//! and function calls to [`Expr`]s, aggregate and window calls to the ids of their results,
//! subqueries to init plans (uncorrelated scalars) or pending applies (the rest).
//!
//! Owns: [`BindCx`] (what the expression being bound may contain: aggregates over grouped
//! rows, window functions, subqueries) and the expression binder. Invariant: an expression
//! bound over grouped rows reads only group keys, aggregates and correlated columns
//! (anything else is 42803, as in PostgreSQL).

use super::bind::{datetime_field, ident, literal, sql_type, Binder};
use super::bind_array::aggregate_order;
use super::bind_ops::{arith_type, bin_op};
use super::logical::{AggCall, ApplyKind, ColId, Logical, SortSpec, SrfCall, WindowCall, WindowFunc};
use crate::error::{code, SqlError, SqlResult};
use crate::expr::func::common_type;
use crate::expr::{AggFunc, BinOp, Expr, Func};
use crate::types::{Datum, SqlType, DEFAULT_NUMERIC_SCALE};
use sqlparser::ast::{self, Expr as AstExpr};

/// A subquery to run per row (or to decorrelate into a join): its result is column `col`.
#[derive(Debug, Clone)]
pub(crate) struct PendingApply {
    pub col: ColId,
    pub sub: Logical,
    pub kind: ApplyKind,
}

/// Grouping state of a query level whose expressions are bound over grouped rows.
#[derive(Debug, Clone, Default)]
pub(crate) struct AggState {
    /// GROUP BY expressions as written (select items that repeat one are its key).
    pub group_asts: Vec<AstExpr>,
    /// (id, bound expression) per group key.
    pub group: Vec<(ColId, Expr)>,
    /// Aggregates found so far.
    pub aggs: Vec<(ColId, AggCall)>,
    /// Subqueries inside aggregate arguments (applied below the aggregation).
    pub pre_applies: Vec<PendingApply>,
}

/// What the expression being bound may contain.
#[derive(Debug, Default)]
pub(crate) struct BindCx {
    /// Over grouped rows (None: over FROM rows).
    pub agg: Option<AggState>,
    /// Window calls found (None: not allowed here).
    pub windows: Option<Vec<(ColId, WindowCall)>>,
    /// Subqueries to apply before the expression is evaluated.
    pub applies: Vec<PendingApply>,
    /// Set-returning function calls found (None: not allowed here).
    pub srfs: Option<Vec<(ColId, SrfCall)>>,
    /// Where the expression is, for messages ("WHERE", "JOIN conditions" ...).
    pub clause: &'static str,
}

impl BindCx {
    /// A context over FROM rows without aggregates or windows.
    pub fn row(clause: &'static str) -> Self {
        Self { clause, ..Default::default() }
    }
}

fn grouping_error(name: &str) -> SqlError {
    SqlError::new(
        code::GROUPING_ERROR,
        format!("column \"{name}\" must appear in the GROUP BY clause or be used in an aggregate function"),
    )
}

/// The column name PostgreSQL gives an unnamed select item.
pub(crate) fn column_name(e: &AstExpr) -> String {
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
        AstExpr::Extract { .. } => "extract".into(),
        AstExpr::Substring { .. } => "substring".into(),
        AstExpr::Position { .. } => "position".into(),
        AstExpr::Trim { .. } => "btrim".into(),
        AstExpr::Case { .. } => "case".into(),
        AstExpr::Exists { .. } => "exists".into(),
        AstExpr::Ceil { .. } => "ceil".into(),
        AstExpr::Floor { .. } => "floor".into(),
        AstExpr::Interval(_) => "interval".into(),
        _ => "?column?".into(),
    }
}

/// True if `e` contains an aggregate call (outside subqueries).
pub(crate) fn contains_aggregate(e: &AstExpr) -> bool {
    let mut found = false;
    visit(e, &mut |x| {
        if let AstExpr::Function(f) = x {
            if f.over.is_none() {
                if let Some(ast::ObjectNamePart::Identifier(i)) = f.name.0.last() {
                    let star = matches!(&f.args, ast::FunctionArguments::List(l)
                        if l.args.iter().any(|a| matches!(a, ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard))));
                    found |= AggFunc::lookup(&ident(i), star).is_some();
                }
            }
        }
    });
    found
}

/// Calls `f` on `e` and its subexpressions (not descending into subqueries).
fn visit(e: &AstExpr, f: &mut dyn FnMut(&AstExpr)) {
    f(e);
    let mut v = |x: &AstExpr| visit(x, f);
    match e {
        AstExpr::BinaryOp { left, right, .. } => {
            v(left);
            v(right);
        }
        AstExpr::UnaryOp { expr, .. }
        | AstExpr::Nested(expr)
        | AstExpr::Cast { expr, .. }
        | AstExpr::IsNull(expr)
        | AstExpr::IsNotNull(expr)
        | AstExpr::IsTrue(expr)
        | AstExpr::IsFalse(expr)
        | AstExpr::IsNotTrue(expr)
        | AstExpr::IsNotFalse(expr)
        | AstExpr::Extract { expr, .. }
        | AstExpr::Ceil { expr, .. }
        | AstExpr::Floor { expr, .. } => v(expr),
        AstExpr::Between { expr, low, high, .. } => {
            v(expr);
            v(low);
            v(high);
        }
        AstExpr::In { expr, target, .. } => {
            v(expr);
            if let ast::InTarget::List(l) = target {
                l.iter().for_each(v);
            }
        }
        AstExpr::Like { expr, pattern, .. } | AstExpr::ILike { expr, pattern, .. } => {
            v(expr);
            v(pattern);
        }
        AstExpr::Case { operand, conditions, else_result, .. } => {
            if let Some(o) = operand {
                v(o);
            }
            for c in conditions {
                v(&c.condition);
                v(&c.result);
            }
            if let Some(e) = else_result {
                v(e);
            }
        }
        AstExpr::Function(func) => {
            if let ast::FunctionArguments::List(l) = &func.args {
                for a in &l.args {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) = a {
                        v(x);
                    }
                }
            }
        }
        AstExpr::Substring { expr, substring_from, substring_for, .. } => {
            v(expr);
            substring_from.iter().for_each(|x| v(x));
            substring_for.iter().for_each(|x| v(x));
        }
        AstExpr::Position { expr, r#in } => {
            v(expr);
            v(r#in);
        }
        AstExpr::Trim { expr, trim_what, .. } => {
            v(expr);
            trim_what.iter().for_each(|x| v(x));
        }
        AstExpr::IsDistinctFrom(a, b) | AstExpr::IsNotDistinctFrom(a, b) => {
            v(a);
            v(b);
        }
        _ => {}
    }
}

/// ASC and NULLS FIRST of an ORDER BY item (PostgreSQL's defaults: NULLs sort as larger).
pub(crate) fn sort_options(o: &ast::OrderByOptions) -> SqlResult<(bool, bool)> {
    let asc = match &o.sort {
        None | Some(ast::OrderBySort::Asc) => true,
        Some(ast::OrderBySort::Desc) => false,
        Some(other) => return Err(SqlError::unsupported(format!("ORDER BY … {other:?}"))),
    };
    Ok((asc, o.nulls_first.unwrap_or(!asc)))
}

impl Binder<'_> {
    /// Resolves column `name` (of FROM item `table`, if given): innermost query level first.
    pub(crate) fn resolve_column(&self, table: Option<&str>, name: &str) -> SqlResult<(ColId, SqlType)> {
        for scope in self.scopes.iter().rev() {
            let mut found = None;
            if table.is_none() {
                if let Some((_, id, ty)) = scope.merged.iter().find(|(n, _, _)| n == name) {
                    return Ok((*id, *ty));
                }
            }
            for item in &scope.items {
                if table.is_some_and(|t| t != item.alias) {
                    continue;
                }
                if let Some(c) = item
                    .cols
                    .iter()
                    .find(|c| c.name == name && !(c.hidden && table.is_none() && c.name.starts_with('$')))
                {
                    if found.is_some() {
                        return Err(SqlError::new(
                            code::AMBIGUOUS_COLUMN,
                            format!("column reference \"{name}\" is ambiguous"),
                        ));
                    }
                    found = Some((c.id, c.ty));
                }
            }
            if let Some(f) = found {
                return Ok(f);
            }
            if let Some(t) = table {
                if scope.items.iter().any(|s| s.alias == t) {
                    return Err(SqlError::new(
                        code::UNDEFINED_COLUMN,
                        format!("column {t}.{name} does not exist"),
                    )
                    .with_column(name));
                }
            }
        }
        if let Some(t) = table {
            return Err(SqlError::new(
                code::UNDEFINED_TABLE,
                format!("missing FROM-clause entry for table \"{t}\""),
            )
            .with_table(t));
        }
        let mut e = SqlError::new(code::UNDEFINED_COLUMN, format!("column \"{name}\" does not exist"))
            .with_column(name);
        if let Some(scope) = self.scopes.last() {
            if let [only] = scope.items.as_slice() {
                e = e.with_table(&only.alias);
            }
        }
        Err(e)
    }

    /// True if column `id` belongs to the innermost query level.
    fn is_local(&self, id: ColId) -> bool {
        self.scopes.last().is_some_and(|s| {
            s.items.iter().any(|i| i.cols.iter().any(|c| c.id == id)) || s.merged.iter().any(|m| m.1 == id)
        })
    }

    /// A column reference, mapped to its group key over grouped rows.
    fn column_ref(&self, id: ColId, ty: SqlType, name: &str, cx: &BindCx) -> SqlResult<(Expr, SqlType)> {
        if let Some(agg) = &cx.agg {
            if let Some((gid, _)) = agg.group.iter().find(|(_, g)| *g == Expr::Column(id)) {
                return Ok((Expr::Column(*gid), ty));
            }
            if self.is_local(id) {
                return Err(grouping_error(name));
            }
        }
        Ok((Expr::Column(id), ty))
    }

    /// Binds an expression.
    pub(crate) fn bind(&mut self, e: &AstExpr, cx: &mut BindCx) -> SqlResult<(Expr, SqlType)> {
        if let Some(agg) = &cx.agg {
            if let Some(i) = agg.group_asts.iter().position(|g| g == e) {
                let (gid, _) = agg.group[i];
                return Ok((Expr::Column(gid), self.cols.get(gid).ty));
            }
        }
        match e {
            AstExpr::Identifier(i) => {
                let name = ident(i);
                if i.quote_style.is_none() {
                    let f = match name.as_str() {
                        "current_timestamp" | "localtimestamp" | "now" => Some(("now", SqlType::Timestamp)),
                        "current_date" => Some(("current_date", SqlType::Date)),
                        "current_user" | "session_user" | "user" => Some(("current_user", SqlType::Text)),
                        "current_schema" => Some(("current_schema", SqlType::Text)),
                        _ => None,
                    };
                    if let Some((fname, ty)) = f {
                        if self.resolve_column(None, &name).is_err() {
                            let (func, _, _) = Func::resolve(fname, &[])?;
                            return Ok((Expr::Func(func, vec![], ty), ty));
                        }
                    }
                }
                let (id, ty) = self.resolve_column(None, &name)?;
                self.column_ref(id, ty, &name, cx)
            }
            AstExpr::CompoundIdentifier(parts) => {
                let names: Vec<String> = parts.iter().map(ident).collect();
                let (t, c) = match names.as_slice() {
                    [t, c] => (t.as_str(), c.as_str()),
                    [s, t, c] if s == "public" => (t.as_str(), c.as_str()),
                    _ => return Err(SqlError::unsupported(format!("the name `{e}`"))),
                };
                let (id, ty) = self.resolve_column(Some(t), c)?;
                self.column_ref(id, ty, &format!("{t}.{c}"), cx)
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
            AstExpr::Nested(inner) => self.bind(inner, cx),
            AstExpr::UnaryOp { op, expr } => {
                let (x, ty) = self.bind(expr, cx)?;
                match op {
                    ast::UnaryOperator::Minus => match x {
                        Expr::Const(Datum::Int(v)) => Ok((Expr::Const(Datum::Int(-v)), ty)),
                        Expr::Const(Datum::Numeric(v, s)) => Ok((Expr::Const(Datum::Numeric(-v, s)), ty)),
                        Expr::Const(Datum::Float(v)) => Ok((Expr::Const(Datum::Float(-v)), ty)),
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
            AstExpr::BinaryOp {
                left,
                op:
                    op @ (ast::BinaryOperator::PGRegexMatch
                    | ast::BinaryOperator::PGRegexIMatch
                    | ast::BinaryOperator::PGRegexNotMatch
                    | ast::BinaryOperator::PGRegexNotIMatch),
                right,
            } => {
                use ast::BinaryOperator as B;
                let (a, at) = self.bind(left, cx)?;
                let (a, _) = self.assign_type(a, at, SqlType::Text)?;
                let (p, pt) = self.bind(right, cx)?;
                let (p, _) = self.assign_type(p, pt, SqlType::Text)?;
                let flags = if matches!(op, B::PGRegexIMatch | B::PGRegexNotIMatch) { "i" } else { "" };
                let m = Expr::Func(
                    crate::expr::func::Func::RegexMatch,
                    vec![a, p, Expr::Const(Datum::Text(flags.into()))],
                    SqlType::Bool,
                );
                let negated = matches!(op, B::PGRegexNotMatch | B::PGRegexNotIMatch);
                Ok((if negated { Expr::Not(Box::new(m)) } else { m }, SqlType::Bool))
            }
            AstExpr::BinaryOp { left, op, right } => {
                let a = self.bind(left, cx)?;
                let b = self.bind(right, cx)?;
                self.binary(bin_op(op)?, a, b)
            }
            AstExpr::IsDistinctFrom(l, r) | AstExpr::IsNotDistinctFrom(l, r) => {
                let a = self.bind(l, cx)?;
                let b = self.bind(r, cx)?;
                let op = if matches!(e, AstExpr::IsDistinctFrom(..)) {
                    BinOp::IsDistinct
                } else {
                    BinOp::NotDistinct
                };
                let (x, _) = self.binary(BinOp::Eq, a, b)?;
                let Expr::Binary(_, a, b, _) = x else { unreachable!("binary gives a binary") };
                Ok((Expr::Binary(op, a, b, SqlType::Bool), SqlType::Bool))
            }
            AstExpr::IsNull(x) | AstExpr::IsNotNull(x) => {
                let (x, _) = self.bind(x, cx)?;
                Ok((Expr::IsNull(Box::new(x), matches!(e, AstExpr::IsNotNull(_))), SqlType::Bool))
            }
            AstExpr::IsTrue(x) | AstExpr::IsFalse(x) | AstExpr::IsNotTrue(x) | AstExpr::IsNotFalse(x) => {
                let (x, ty) = self.bind(x, cx)?;
                let (x, _) = self.assign_type(x, ty, SqlType::Bool)?;
                let want = matches!(e, AstExpr::IsTrue(_) | AstExpr::IsNotTrue(_));
                let eq = Expr::Binary(
                    BinOp::NotDistinct,
                    Box::new(x),
                    Box::new(Expr::Const(Datum::Bool(want))),
                    SqlType::Bool,
                );
                let negate = matches!(e, AstExpr::IsNotTrue(_) | AstExpr::IsNotFalse(_));
                Ok((if negate { Expr::Not(Box::new(eq)) } else { eq }, SqlType::Bool))
            }
            AstExpr::Between { expr, negated, low, high } => {
                let x = self.bind(expr, cx)?;
                let lo = self.bind(low, cx)?;
                let hi = self.bind(high, cx)?;
                let (ge, _) = self.binary(BinOp::Ge, x.clone(), lo)?;
                let (le, _) = self.binary(BinOp::Le, x, hi)?;
                let both = Expr::and(ge, le);
                Ok((if *negated { Expr::Not(Box::new(both)) } else { both }, SqlType::Bool))
            }
            AstExpr::In { expr, target: ast::InTarget::List(list), negated, .. } => {
                self.in_list(expr, list, *negated, cx)
            }
            AstExpr::In { expr, target: ast::InTarget::Subquery(q), negated, .. } => {
                let r = self.in_subquery(expr, q, cx)?;
                Ok((if *negated { Expr::Not(Box::new(r)) } else { r }, SqlType::Bool))
            }
            AstExpr::AnyOp { left, compare_op: ast::BinaryOperator::Eq, right, .. } => match right.as_ref() {
                AstExpr::Subquery(q) => Ok((self.in_subquery(left, q, cx)?, SqlType::Bool)),
                // `x = ANY (ARRAY[a, b])` is `x IN (a, b)`.
                AstExpr::Array(a) => self.in_list(left, &a.elem, false, cx),
                other => self.any_array(left, other, cx),
            },
            AstExpr::AllOp { left, compare_op: ast::BinaryOperator::NotEq, right } => match right.as_ref() {
                AstExpr::Subquery(q) => {
                    Ok((Expr::Not(Box::new(self.in_subquery(left, q, cx)?)), SqlType::Bool))
                }
                _ => Err(SqlError::unsupported("<> ALL over something other than a subquery")),
            },
            AstExpr::Exists { subquery, negated } => {
                let (sub, _) = self.subquery(subquery)?;
                let col = self.new_col("exists", None, SqlType::Bool);
                cx.applies.push(PendingApply { col, sub, kind: ApplyKind::Exists });
                let r = Expr::Column(col);
                Ok((if *negated { Expr::Not(Box::new(r)) } else { r }, SqlType::Bool))
            }
            AstExpr::Subquery(q) => {
                let (sub, out) = self.subquery(q)?;
                if out.len() != 1 {
                    return Err(SqlError::syntax("subquery must return only one column"));
                }
                let ty = self.cols.get(out[0]).ty;
                if sub.free_columns().is_empty() {
                    self.initplans.push(sub);
                    return Ok((Expr::Subquery(self.initplans.len() - 1), ty));
                }
                let col = self.new_col("?column?", None, ty);
                cx.applies.push(PendingApply { col, sub, kind: ApplyKind::Scalar });
                Ok((Expr::Column(col), ty))
            }
            AstExpr::Like { negated, expr, pattern, escape_char, any: false }
            | AstExpr::ILike { negated, expr, pattern, escape_char, any: false } => {
                if escape_char.is_some() {
                    return Err(SqlError::unsupported("LIKE … ESCAPE"));
                }
                let (x, xt) = self.bind(expr, cx)?;
                let (p, pt) = self.bind(pattern, cx)?;
                let (x, _) = self.assign_type(x, xt, SqlType::Text)?;
                let (p, _) = self.assign_type(p, pt, SqlType::Text)?;
                Ok((
                    Expr::Like(Box::new(x), Box::new(p), *negated, matches!(e, AstExpr::ILike { .. })),
                    SqlType::Bool,
                ))
            }
            AstExpr::Cast { expr, data_type, .. } => {
                let to = sql_type(data_type)?;
                let (x, xt) = self.bind(expr, cx)?;
                match x {
                    Expr::Param(_) if xt == SqlType::Unknown => self.assign_type(x, xt, to),
                    Expr::Const(d) => Ok((Expr::Const(d.coerce(to, "cast")?), to)),
                    x if xt == to => Ok((x, to)),
                    x => Ok((Expr::Cast(Box::new(x), to), to)),
                }
            }
            AstExpr::TypedString(ts) => {
                let to = sql_type(&ts.data_type)?;
                match literal(&ts.value.value)?.0 {
                    Expr::Const(d) => Ok((Expr::Const(d.coerce(to, "literal")?), to)),
                    _ => unreachable!("literals are constants"),
                }
            }
            AstExpr::Interval(iv) => {
                let (v, _) = self.bind(&iv.value, cx)?;
                let Expr::Const(d) = v else {
                    return Err(SqlError::unsupported("an INTERVAL of a non-constant value"));
                };
                let text = d.to_text(SqlType::Text);
                let text = match &iv.leading_field {
                    Some(f) if !text.trim().contains(|c: char| c.is_ascii_alphabetic()) => {
                        format!("{text} {}", datetime_field(f)?)
                    }
                    _ => text,
                };
                let d = Datum::parse(&text, SqlType::Interval)?;
                Ok((Expr::Const(d), SqlType::Interval))
            }
            AstExpr::Extract { field, expr, .. } => {
                let f = datetime_field(field)?;
                let x = self.bind(expr, cx)?;
                self.call("extract", vec![(Expr::Const(Datum::Text(f.into())), SqlType::Text), x])
            }
            AstExpr::Substring { expr, substring_from, substring_for, .. } => {
                let mut args = vec![self.bind(expr, cx)?];
                args.push(match substring_from {
                    Some(f) => self.bind(f, cx)?,
                    None => (Expr::Const(Datum::Int(1)), SqlType::Int4),
                });
                if let Some(f) = substring_for {
                    args.push(self.bind(f, cx)?);
                }
                self.call("substring", args)
            }
            AstExpr::Position { expr, r#in } => {
                let needle = self.bind(expr, cx)?;
                let hay = self.bind(r#in, cx)?;
                self.call("position", vec![hay, needle])
            }
            AstExpr::Trim { expr, trim_where, trim_what, trim_characters } => {
                if trim_characters.is_some() {
                    return Err(SqlError::unsupported("TRIM with a character list"));
                }
                let mut args = vec![self.bind(expr, cx)?];
                if let Some(w) = trim_what {
                    args.push(self.bind(w, cx)?);
                }
                let name = match trim_where {
                    Some(ast::TrimWhereField::Leading) => "ltrim",
                    Some(ast::TrimWhereField::Trailing) => "rtrim",
                    _ => "btrim",
                };
                self.call(name, args)
            }
            AstExpr::Ceil {
                expr,
                field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime),
            }
            | AstExpr::Floor {
                expr,
                field: ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime),
            } => {
                let a = self.bind(expr, cx)?;
                self.call(if matches!(e, AstExpr::Ceil { .. }) { "ceil" } else { "floor" }, vec![a])
            }
            AstExpr::Function(f) => self.function(f, cx),
            AstExpr::Case { operand, conditions, else_result, .. } => {
                self.case(operand.as_deref(), conditions, else_result.as_deref(), cx)
            }
            AstExpr::Array(a) => self.array(&a.elem, cx),
            AstExpr::CompoundFieldAccess { root, access_chain } => match access_chain.as_slice() {
                [ast::AccessExpr::Subscript(ast::Subscript::Index { index })] => {
                    self.subscript(root, index, cx)
                }
                // `t.a[i]`: the parser's root is `t`, then `.a`, then the subscript.
                [dots @ .., ast::AccessExpr::Subscript(ast::Subscript::Index { index })] => {
                    let AstExpr::Identifier(first) = root.as_ref() else {
                        return Err(SqlError::unsupported(format!("the expression `{e}`")));
                    };
                    let mut parts = vec![first.clone()];
                    for d in dots {
                        match d {
                            ast::AccessExpr::Dot(AstExpr::Identifier(i)) => parts.push(i.clone()),
                            _ => return Err(SqlError::unsupported(format!("the expression `{e}`"))),
                        }
                    }
                    self.subscript(&AstExpr::CompoundIdentifier(parts), index, cx)
                }
                _ => Err(SqlError::unsupported(format!("the expression `{e}`"))),
            },
            other => Err(SqlError::unsupported(format!("the expression `{other}`"))),
        }
    }

    /// Binds an expression that must be boolean (WHERE, HAVING, ON).
    pub(crate) fn bind_predicate(&mut self, e: &AstExpr, cx: &mut BindCx) -> SqlResult<Expr> {
        let (x, t) = self.bind(e, cx)?;
        let (x, t) = self.assign_type(x, t, SqlType::Bool)?;
        if t != SqlType::Bool {
            return Err(SqlError::new(
                code::DATATYPE_MISMATCH,
                format!("argument of {} must be type boolean, not type {}", cx.clause, t.name()),
            ));
        }
        Ok(x)
    }

    /// `x IN (subquery)`: a pending apply; the expression is its result column.
    fn in_subquery(&mut self, expr: &AstExpr, q: &ast::Query, cx: &mut BindCx) -> SqlResult<Expr> {
        let (x, xt) = self.bind(expr, cx)?;
        let (sub, out) = self.subquery(q)?;
        if out.len() != 1 {
            return Err(SqlError::syntax("subquery has too many columns"));
        }
        let st = self.cols.get(out[0]).ty;
        let ty = common_type(xt, st).ok_or_else(|| {
            SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("operator does not exist: {} = {}", xt.name(), st.name()),
            )
        })?;
        let x = self.convert(x, xt, ty)?;
        let col = self.new_col("in", None, SqlType::Bool);
        cx.applies.push(PendingApply { col, sub, kind: ApplyKind::In(x) });
        Ok(Expr::Column(col))
    }

    /// A binary operator over bound operands.
    pub(crate) fn binary(
        &mut self,
        op: BinOp,
        a: (Expr, SqlType),
        b: (Expr, SqlType),
    ) -> SqlResult<(Expr, SqlType)> {
        let ((a, at), (b, bt)) = (a, b);
        // An untyped side takes the other side's type (parameters, string literals); beside
        // `||` it is text, as PostgreSQL resolves `anynonarray || unknown` (`1 || 'a'`).
        let (a, at, b, bt) = if op == BinOp::Concat {
            let (a, at) = self.assign_type(a, at, SqlType::Text)?;
            let (b, bt) = self.assign_type(b, bt, SqlType::Text)?;
            (a, at, b, bt)
        } else {
            let (a, at) = self.assign_type(a, at, bt)?;
            let (b, bt) = self.assign_type(b, bt, at)?;
            (a, at, b, bt)
        };
        let ty = match op {
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let comparable = at == bt
                    || (at.is_numeric() && bt.is_numeric())
                    || (at.is_text() && bt.is_text())
                    || matches!(
                        (at, bt),
                        (SqlType::Date, SqlType::Timestamp) | (SqlType::Timestamp, SqlType::Date)
                    )
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
            BinOp::And | BinOp::Or => {
                for t in [at, bt] {
                    if t != SqlType::Bool && t != SqlType::Unknown {
                        return Err(SqlError::new(
                            code::DATATYPE_MISMATCH,
                            format!("argument of {op:?} must be type boolean, not type {}", t.name()),
                        ));
                    }
                }
                SqlType::Bool
            }
            BinOp::Concat => SqlType::Text,
            BinOp::IsDistinct | BinOp::NotDistinct => SqlType::Bool,
            _ => arith_type(op, at, bt)?,
        };
        Ok((Expr::Binary(op, Box::new(a), Box::new(b), ty), ty))
    }

    /// A call of scalar function `name` on bound arguments.
    pub(crate) fn call(&mut self, name: &str, args: Vec<(Expr, SqlType)>) -> SqlResult<(Expr, SqlType)> {
        let types: Vec<SqlType> = args.iter().map(|a| a.1).collect();
        let (func, mut ty, want) = Func::resolve(name, &types)?;
        // round(x, d) / trunc(x, d) with a constant d: the result has d digits after the point.
        if let (Func::Round | Func::Trunc, Some((Expr::Const(Datum::Int(d)), _))) = (func, args.get(1)) {
            if matches!(ty, SqlType::Numeric { .. }) {
                ty = SqlType::Numeric { precision: 38, scale: (*d).clamp(0, 30) as u8 };
            }
        }
        let mut exprs = Vec::with_capacity(args.len());
        for ((e, t), w) in args.into_iter().zip(want) {
            let e = if t == SqlType::Unknown
                || (t != w && (w.is_numeric() && t.is_numeric() || w == SqlType::Timestamp))
            {
                self.convert(e, t, w)?
            } else {
                e
            };
            exprs.push(e);
        }
        Ok((Expr::Func(func, exprs, ty), ty))
    }

    /// `x [NOT] IN (a, b, …)`.
    fn in_list(
        &mut self,
        expr: &AstExpr,
        list: &[AstExpr],
        negated: bool,
        cx: &mut BindCx,
    ) -> SqlResult<(Expr, SqlType)> {
        let (x, xt) = self.bind(expr, cx)?;
        let mut bound = Vec::new();
        let mut ty = xt;
        for item in list {
            let (i, it) = self.bind(item, cx)?;
            ty = common_type(ty, it).ok_or_else(|| {
                SqlError::new(
                    code::DATATYPE_MISMATCH,
                    format!("IN types {} and {} cannot be matched", ty.name(), it.name()),
                )
            })?;
            bound.push((i, it));
        }
        let x = self.convert(x, xt, ty)?;
        let mut items = Vec::new();
        for (i, it) in bound {
            items.push(self.convert(i, it, ty)?);
        }
        Ok((Expr::InList(Box::new(x), items, negated), SqlType::Bool))
    }

    fn function(&mut self, f: &ast::Function, cx: &mut BindCx) -> SqlResult<(Expr, SqlType)> {
        let name = match f.name.0.as_slice() {
            [ast::ObjectNamePart::Identifier(i)] => ident(i),
            [ast::ObjectNamePart::Identifier(s), ast::ObjectNamePart::Identifier(i)]
                if matches!(ident(s).as_str(), "pg_catalog" | "public") =>
            {
                ident(i)
            }
            _ => return Err(SqlError::unsupported(format!("function `{}`", f.name))),
        };
        let mut order = vec![];
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
                order = aggregate_order(&l.clauses, &name)?;
                (out, star, matches!(l.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)))
            }
            ast::FunctionArguments::Subquery(_) => {
                return Err(SqlError::unsupported("a subquery as a function argument"))
            }
        };
        if let Some(over) = &f.over {
            return self.window_call(&name, &args, star, over, cx);
        }
        if let Some(func) = AggFunc::lookup(&name, star) {
            return self.aggregate(func, &name, &args, (distinct, &order), f.filter.as_deref(), cx);
        }
        if let Some(srf) = crate::array::Srf::lookup(&name) {
            return self.srf_call(srf, &name, &args, cx);
        }
        if f.filter.is_some() || distinct {
            return Err(SqlError::new(
                code::SYNTAX_ERROR,
                format!("DISTINCT or FILTER specified, but {name} is not an aggregate function"),
            ));
        }
        let mut bound = Vec::new();
        for a in &args {
            bound.push(self.bind(a, cx)?);
        }
        self.call(&name, bound)
    }

    /// Binds an aggregate's argument and filter over FROM rows.
    fn over_rows<T>(
        &mut self,
        cx: &mut BindCx,
        f: impl FnOnce(&mut Self, &mut BindCx) -> SqlResult<T>,
    ) -> SqlResult<T> {
        let mut row = BindCx::row("aggregate arguments");
        let r = f(self, &mut row)?;
        if let Some(agg) = &mut cx.agg {
            agg.pre_applies.append(&mut row.applies);
        }
        Ok(r)
    }

    fn aggregate(
        &mut self,
        func: AggFunc,
        name: &str,
        args: &[AstExpr],
        (distinct, order): (bool, &[ast::OrderByExpr]),
        filter: Option<&AstExpr>,
        cx: &mut BindCx,
    ) -> SqlResult<(Expr, SqlType)> {
        if cx.agg.is_none() {
            return Err(SqlError::new(
                code::GROUPING_ERROR,
                format!("aggregate functions are not allowed in {}", cx.clause),
            ));
        }
        let (arg, arg_ty, sep) = self.over_rows(cx, |b, row| {
            Ok(match (func, args) {
                (AggFunc::CountStar, []) => (Expr::Const(Datum::Null), SqlType::Int8, None),
                (AggFunc::StringAgg, [a, s]) => {
                    let (e, t) = b.bind(a, row)?;
                    let (e, t) = b.assign_type(e, t, SqlType::Text)?;
                    let (s, _) = b.bind(s, row)?;
                    let Expr::Const(sep) = s else {
                        return Err(SqlError::unsupported(
                            "string_agg with a separator that is not a constant",
                        ));
                    };
                    (e, t, Some(sep))
                }
                (_, [a]) => {
                    let (e, t) = b.bind(a, row)?;
                    let want = match func {
                        AggFunc::Sum | AggFunc::Avg | AggFunc::StddevSamp | AggFunc::VarSamp => {
                            SqlType::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE }
                        }
                        AggFunc::BoolAnd | AggFunc::BoolOr => SqlType::Bool,
                        _ => SqlType::Text,
                    };
                    let (e, t) = b.assign_type(e, t, want)?;
                    (e, t, None)
                }
                _ => {
                    return Err(SqlError::new(
                        code::UNDEFINED_FUNCTION,
                        format!("function {name} takes one argument"),
                    ))
                }
            })
        })?;
        let filter = match filter {
            Some(x) => Some(self.over_rows(cx, |b, row| b.bind_predicate(x, row))?),
            None => None,
        };
        let (func, arg) = self.over_rows(cx, |b, row| b.aggregate_order_keys(func, arg, order, row))?;
        let ty = func.result_type(arg_ty)?;
        let sep = sep.map_or(String::new(), |d| d.to_text(SqlType::Text));
        let call = AggCall { func, arg, arg_ty, ty, distinct, filter, sep };
        let agg = cx.agg.as_mut().expect("checked above");
        // The same aggregate twice is computed once.
        if let Some((id, _)) = agg.aggs.iter().find(|(_, a)| {
            a.func == call.func
                && a.arg == call.arg
                && a.distinct == call.distinct
                && a.filter == call.filter
                && a.sep == call.sep
        }) {
            return Ok((Expr::Column(*id), ty));
        }
        let id = self.cols.add(name, None, ty);
        cx.agg.as_mut().expect("checked above").aggs.push((id, call));
        Ok((Expr::Column(id), ty))
    }

    #[allow(clippy::type_complexity)]
    fn window_call(
        &mut self,
        name: &str,
        args: &[AstExpr],
        star: bool,
        over: &ast::WindowType,
        cx: &mut BindCx,
    ) -> SqlResult<(Expr, SqlType)> {
        if cx.windows.is_none() {
            return Err(SqlError::new("42P20", format!("window functions are not allowed in {}", cx.clause)));
        }
        let ast::WindowType::WindowSpec(spec) = over else {
            return Err(SqlError::unsupported("named windows (WINDOW w AS …)"));
        };
        let func = match name {
            "row_number" => WindowFunc::RowNumber,
            "rank" => WindowFunc::Rank,
            "dense_rank" => WindowFunc::DenseRank,
            _ => match AggFunc::lookup(name, star) {
                Some(AggFunc::StringAgg) | None => {
                    return Err(SqlError::new(
                        code::UNDEFINED_FUNCTION,
                        format!("window function {name} does not exist"),
                    ))
                }
                Some(a) => WindowFunc::Agg(a),
            },
        };
        // Window arguments are over the (grouped) rows the window sees.
        let saved_windows = cx.windows.take();
        let r = (|| -> SqlResult<(Expr, SqlType, SqlType, Vec<Expr>, Vec<SortSpec>)> {
            let (arg, arg_ty) = match (func, args) {
                (WindowFunc::Agg(AggFunc::CountStar), [])
                | (WindowFunc::RowNumber | WindowFunc::Rank | WindowFunc::DenseRank, []) => {
                    (Expr::Const(Datum::Null), SqlType::Int8)
                }
                (WindowFunc::Agg(_), [a]) => {
                    let (e, t) = self.bind(a, cx)?;
                    self.assign_type(e, t, SqlType::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE })?
                }
                _ => {
                    return Err(SqlError::new(
                        code::UNDEFINED_FUNCTION,
                        format!("function {name} has the wrong arguments"),
                    ))
                }
            };
            let ty = match func {
                WindowFunc::Agg(a) => a.result_type(arg_ty)?,
                _ => SqlType::Int8,
            };
            let mut partition = Vec::new();
            for p in &spec.partition_by {
                partition.push(self.bind(p, cx)?.0);
            }
            let mut order = Vec::new();
            for o in &spec.order_by {
                let (asc, nulls_first) = sort_options(&o.options)?;
                order.push(SortSpec { expr: self.bind(&o.expr, cx)?.0, asc, nulls_first });
            }
            Ok((arg, arg_ty, ty, partition, order))
        })();
        cx.windows = saved_windows;
        let (arg, arg_ty, ty, partition, order) = r?;
        let range_frame = match &spec.window_frame {
            None => true,
            Some(fr) => {
                let end = fr.end_bound.clone().unwrap_or(ast::WindowFrameBound::CurrentRow);
                match (&fr.units, &fr.start_bound, &end) {
                    (
                        ast::WindowFrameUnits::Range,
                        ast::WindowFrameBound::Preceding(None),
                        ast::WindowFrameBound::CurrentRow,
                    ) => true,
                    (
                        ast::WindowFrameUnits::Rows,
                        ast::WindowFrameBound::Preceding(None),
                        ast::WindowFrameBound::CurrentRow,
                    ) => false,
                    _ => return Err(SqlError::unsupported(format!("the window frame {fr:?}"))),
                }
            }
        };
        let id = self.cols.add(name, None, ty);
        let call = WindowCall { func, arg, arg_ty, ty, partition, order, range_frame };
        cx.windows.as_mut().expect("checked above").push((id, call));
        Ok((Expr::Column(id), ty))
    }
}
