//! Binding of queries: WITH, SELECT (FROM with joins of every kind, derived tables and CTEs,
//! WHERE, GROUP BY, HAVING, window functions, the select list, DISTINCT, ORDER BY, LIMIT),
//! set operations and VALUES, into a [`Logical`] tree.
//!
//! Owns: the shape of a SELECT's tree, bottom to top: FROM → subqueries of WHERE → WHERE →
//! (aggregate arguments' subqueries → Aggregate → subqueries of the grouped expressions) →
//! HAVING → Window → Project (select items, then hidden ORDER BY keys) → Distinct → Sort →
//! Limit → Project (the visible columns). Invariant: each query level has its own scope on
//! the binder's stack while it is bound, so a name is resolved in the innermost level that
//! has it, and a CTE is expanded (with fresh column ids) at each reference.

use super::bind::{ident, object_name, Binder, Cte, Scope, ScopeCol, ScopeItem};
use super::bind_expr::{column_name, contains_aggregate, sort_options, AggState, BindCx, PendingApply};
use super::logical::{ColId, JoinKind, Logical, SetOpKind, SortSpec};
use super::OutCol;
use crate::error::{code, SqlError, SqlResult};
use crate::expr::func::common_type;
use crate::expr::{BinOp, Expr, Func};
use crate::types::SqlType;
use sqlparser::ast::{self, Expr as AstExpr};

/// A bound query: its tree, its output columns, FOR UPDATE.
pub(crate) type BoundQuery = (Logical, Vec<(ColId, OutCol)>, bool);

/// Wraps `plan` with the pending subqueries, in order.
pub(crate) fn with_applies(mut plan: Logical, applies: Vec<PendingApply>) -> Logical {
    for a in applies {
        plan = Logical::Apply { input: Box::new(plan), sub: Box::new(a.sub), kind: a.kind, col: a.col };
    }
    plan
}

impl Binder<'_> {
    /// Binds a subquery (a new query level; the enclosing ones stay visible for correlation).
    pub(crate) fn subquery(&mut self, q: &ast::Query) -> SqlResult<(Logical, Vec<ColId>)> {
        let (plan, out, _) = self.query(q)?;
        Ok((plan, out.into_iter().map(|(id, _)| id).collect()))
    }

    /// Binds a query.
    pub(crate) fn query(&mut self, q: &ast::Query) -> SqlResult<BoundQuery> {
        let pushed = self.ctes.len();
        if let Some(with) = &q.with {
            if with.recursive {
                return Err(SqlError::unsupported("WITH RECURSIVE"));
            }
            for c in &with.cte_tables {
                self.ctes.push(Cte {
                    name: ident(&c.alias.name),
                    query: (*c.query).clone(),
                    columns: c.alias.columns.iter().map(|c| ident(&c.name)).collect(),
                });
            }
        }
        let r = self.query_body(q);
        self.ctes.truncate(pushed);
        r
    }

    fn query_body(&mut self, q: &ast::Query) -> SqlResult<BoundQuery> {
        let for_update = match q.locks.as_slice() {
            [] => false,
            [l] if l.lock_type == ast::LockType::Update && l.of.is_none() => true,
            _ => return Err(SqlError::unsupported("locking clauses other than FOR UPDATE")),
        };
        let order: &[ast::OrderByExpr] = match &q.order_by {
            None => &[],
            Some(ob) => match &ob.kind {
                ast::OrderByKind::Expressions(items) => items,
                _ => return Err(SqlError::unsupported("ORDER BY ALL")),
            },
        };
        let (limit, offset) = match &q.limit_clause {
            None => (None, None),
            Some(ast::LimitClause::LimitOffset { limit, offset, limit_by }) if limit_by.is_empty() => {
                (limit.as_ref(), offset.as_ref().map(|o| &o.value))
            }
            Some(other) => return Err(SqlError::unsupported(format!("`{other}`"))),
        };
        if let Some(fetch) = &q.fetch {
            return Err(SqlError::unsupported(format!("`{fetch}`")));
        }
        let (plan, out) = match q.body.as_ref() {
            ast::SetExpr::Select(s) => self.select(s, order)?,
            body => {
                let (mut plan, out) = self.set_expr(body)?;
                if !order.is_empty() {
                    let mut keys = Vec::new();
                    for item in order {
                        let (asc, nulls_first) = sort_options(&item.options)?;
                        let id = self.output_ref(&item.expr, &out)?.ok_or_else(|| {
                            SqlError::unsupported("ORDER BY over a set operation with an expression that is not an output column")
                        })?;
                        keys.push(SortSpec { expr: Expr::Column(id), asc, nulls_first });
                    }
                    plan = Logical::Sort { input: Box::new(plan), keys };
                }
                (plan, out)
            }
        };
        let plan = self.limit(plan, limit, offset)?;
        Ok((plan, out, for_update))
    }

    fn limit(
        &mut self,
        plan: Logical,
        limit: Option<&AstExpr>,
        offset: Option<&AstExpr>,
    ) -> SqlResult<Logical> {
        if limit.is_none() && offset.is_none() {
            return Ok(plan);
        }
        let mut bind_count = |e: Option<&AstExpr>| -> SqlResult<Option<Expr>> {
            let Some(e) = e else { return Ok(None) };
            let mut cx = BindCx::row("LIMIT");
            let (x, t) = self.bind(e, &mut cx)?;
            if !cx.applies.is_empty() || !x.is_row_independent() && !matches!(x, Expr::Subquery(_)) {
                return Err(SqlError::new(
                    code::SYNTAX_ERROR,
                    "argument of LIMIT/OFFSET must not contain variables",
                ));
            }
            Ok(Some(self.assign_type(x, t, SqlType::Int8)?.0))
        };
        let limit = bind_count(limit)?;
        let offset = bind_count(offset)?;
        Ok(Logical::Limit { input: Box::new(plan), limit, offset })
    }

    /// An ORDER BY item that names an output column (by position or name), if it does.
    fn output_ref(&self, e: &AstExpr, out: &[(ColId, OutCol)]) -> SqlResult<Option<ColId>> {
        Ok(match e {
            AstExpr::Value(v) if matches!(v.value, ast::Value::Number(..)) => {
                let ast::Value::Number(n, _) = &v.value else { unreachable!() };
                let i: usize = n.parse().unwrap_or(0);
                if i == 0 || i > out.len() {
                    return Err(SqlError::new(
                        code::UNDEFINED_COLUMN,
                        format!("ORDER BY position {n} is not in select list"),
                    ));
                }
                Some(out[i - 1].0)
            }
            AstExpr::Identifier(id) => {
                let name = ident(id);
                let hits: Vec<_> = out.iter().filter(|(_, c)| c.name == name).collect();
                match hits.as_slice() {
                    [] => None,
                    [(id, _)] => Some(*id),
                    _ => {
                        return Err(SqlError::new(
                            code::AMBIGUOUS_COLUMN,
                            format!("ORDER BY \"{name}\" is ambiguous"),
                        ))
                    }
                }
            }
            _ => None,
        })
    }

    /// UNION / INTERSECT / EXCEPT, VALUES, or a parenthesized query.
    fn set_expr(&mut self, e: &ast::SetExpr) -> SqlResult<(Logical, Vec<(ColId, OutCol)>)> {
        match e {
            ast::SetExpr::Select(s) => self.select(s, &[]),
            ast::SetExpr::Query(q) => {
                let (p, out, _) = self.query(q)?;
                Ok((p, out))
            }
            ast::SetExpr::Values(v) => self.values(v),
            ast::SetExpr::SetOperation { left, op, set_quantifier, right } => {
                let (l, lout) = self.set_expr(left)?;
                let (r, rout) = self.set_expr(right)?;
                if lout.len() != rout.len() {
                    return Err(SqlError::syntax(format!(
                        "each {op} query must have the same number of columns"
                    )));
                }
                let all = match set_quantifier {
                    ast::SetQuantifier::All => true,
                    ast::SetQuantifier::Distinct | ast::SetQuantifier::None => false,
                    other => return Err(SqlError::unsupported(format!("{op} {other}"))),
                };
                let kind = match op {
                    ast::SetOperator::Union => SetOpKind::Union,
                    ast::SetOperator::Intersect => SetOpKind::Intersect,
                    ast::SetOperator::Except => SetOpKind::Except,
                    other => return Err(SqlError::unsupported(format!("set operation {other}"))),
                };
                // Both sides converted to the common type of each column.
                let mut types = Vec::new();
                for ((_, a), (_, b)) in lout.iter().zip(&rout) {
                    let t = common_type(a.ty, b.ty).ok_or_else(|| {
                        SqlError::new(
                            code::DATATYPE_MISMATCH,
                            format!("{op} types {} and {} cannot be matched", a.ty.name(), b.ty.name()),
                        )
                    })?;
                    types.push(if t == SqlType::Unknown { SqlType::Text } else { t });
                }
                let l = self.cast_outputs(l, &lout, &types)?;
                let r = self.cast_outputs(r, &rout, &types)?;
                let mut out = Vec::new();
                let mut cols = Vec::new();
                for ((_, c), t) in lout.iter().zip(&types) {
                    let id = self.new_col(&c.name, None, *t);
                    cols.push(id);
                    out.push((id, OutCol { name: c.name.clone(), ty: *t }));
                }
                Ok((Logical::SetOp { op: kind, all, left: Box::new(l), right: Box::new(r), cols }, out))
            }
            other => Err(SqlError::unsupported(format!("the query form `{other}`"))),
        }
    }

    /// `plan` with its outputs converted to `types` (a projection, if any differs).
    fn cast_outputs(
        &mut self,
        plan: Logical,
        out: &[(ColId, OutCol)],
        types: &[SqlType],
    ) -> SqlResult<Logical> {
        if out.iter().zip(types).all(|((_, c), t)| c.ty == *t) {
            return Ok(plan);
        }
        let mut exprs = Vec::new();
        for ((id, c), t) in out.iter().zip(types) {
            let e = self.convert(Expr::Column(*id), c.ty, *t)?;
            let nid = self.new_col(&c.name, None, *t);
            exprs.push((nid, e));
        }
        Ok(Logical::Project { input: Box::new(plan), exprs })
    }

    fn values(&mut self, v: &ast::Values) -> SqlResult<(Logical, Vec<(ColId, OutCol)>)> {
        let mut rows: Vec<Vec<(Expr, SqlType)>> = Vec::new();
        for r in &v.rows {
            let mut row = Vec::new();
            for e in &r.content {
                let mut cx = BindCx::row("VALUES");
                let x = self.bind(e, &mut cx)?;
                if !cx.applies.is_empty() {
                    return Err(SqlError::unsupported("a correlated subquery in VALUES"));
                }
                row.push(x);
            }
            if rows.first().is_some_and(|f| f.len() != row.len()) {
                return Err(SqlError::syntax("VALUES lists must all be the same length"));
            }
            rows.push(row);
        }
        let width = rows.first().map_or(0, Vec::len);
        let mut types = vec![SqlType::Unknown; width];
        for r in &rows {
            for (i, (_, t)) in r.iter().enumerate() {
                types[i] = common_type(types[i], *t).ok_or_else(|| {
                    SqlError::new(
                        code::DATATYPE_MISMATCH,
                        format!("VALUES types {} and {} cannot be matched", types[i].name(), t.name()),
                    )
                })?;
            }
        }
        let types: Vec<SqlType> =
            types.into_iter().map(|t| if t == SqlType::Unknown { SqlType::Text } else { t }).collect();
        let mut out_rows = Vec::new();
        for r in rows {
            let mut row = Vec::new();
            for ((e, t), want) in r.into_iter().zip(&types) {
                row.push(self.convert(e, t, *want)?);
            }
            out_rows.push(row);
        }
        let mut cols = Vec::new();
        let mut out = Vec::new();
        for (i, t) in types.iter().enumerate() {
            let name = format!("column{}", i + 1);
            let id = self.new_col(&name, None, *t);
            cols.push(id);
            out.push((id, OutCol { name, ty: *t }));
        }
        Ok((Logical::Values { rows: out_rows, cols }, out))
    }

    fn select(
        &mut self,
        s: &ast::Select,
        order: &[ast::OrderByExpr],
    ) -> SqlResult<(Logical, Vec<(ColId, OutCol)>)> {
        self.scopes.push(Scope::default());
        let r = self.select_in_scope(s, order);
        self.scopes.pop();
        r
    }

    fn select_in_scope(
        &mut self,
        s: &ast::Select,
        order: &[ast::OrderByExpr],
    ) -> SqlResult<(Logical, Vec<(ColId, OutCol)>)> {
        if s.top.is_some() || s.into.is_some() || !s.lateral_views.is_empty() || s.qualify.is_some() {
            return Err(SqlError::unsupported(format!("the SELECT form `{s}`")));
        }
        // FROM
        let mut plan = self.bind_from(&s.from)?;
        // WHERE
        if let Some(w) = &s.selection {
            let mut cx = BindCx::row("WHERE");
            let pred = self.bind_predicate(w, &mut cx)?;
            plan = with_applies(plan, cx.applies);
            plan = Logical::Filter { input: Box::new(plan), pred };
        }
        // GROUP BY (a number or an output alias names a select item)
        let group_asts: Vec<AstExpr> = match &s.group_by {
            ast::GroupByExpr::Expressions(g, mods) if mods.is_empty() => {
                g.iter().map(|g| self.group_item(g, &s.projection)).collect::<SqlResult<_>>()?
            }
            _ => return Err(SqlError::unsupported("GROUP BY ALL / ROLLUP / CUBE / GROUPING SETS")),
        };
        let item_exprs = s.projection.iter().filter_map(|p| match p {
            ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
            _ => None,
        });
        let has_agg = !group_asts.is_empty()
            || s.having.is_some()
            || item_exprs.clone().any(contains_aggregate)
            || order.iter().any(|o| contains_aggregate(&o.expr));
        let mut cx =
            BindCx { windows: Some(vec![]), srfs: Some(vec![]), clause: "SELECT", ..Default::default() };
        let mut group_applies = Vec::new();
        if has_agg {
            let mut state = AggState { group_asts: group_asts.clone(), ..Default::default() };
            for g in &group_asts {
                let mut gcx = BindCx::row("GROUP BY");
                let (e, t) = self.bind(g, &mut gcx)?;
                group_applies.append(&mut gcx.applies);
                let id = match &e {
                    Expr::Column(c) => {
                        let m = self.cols.get(*c).clone();
                        self.cols.add(m.name, m.table, t)
                    }
                    _ => self.new_col(&column_name(g), None, t),
                };
                state.group.push((id, e));
            }
            cx.agg = Some(state);
        }
        // Select list
        let mut items: Vec<(Expr, OutCol)> = Vec::new();
        for item in &s.projection {
            match item {
                ast::SelectItem::Wildcard(_) => {
                    if has_agg {
                        return Err(SqlError::new(
                            code::GROUPING_ERROR,
                            "SELECT * with GROUP BY or aggregates",
                        ));
                    }
                    let cols = self.star(None)?;
                    if cols.is_empty() {
                        return Err(SqlError::syntax("SELECT * with no tables specified is not valid"));
                    }
                    items.extend(cols);
                }
                ast::SelectItem::QualifiedWildcard(
                    ast::SelectItemQualifiedWildcardKind::ObjectName(n),
                    _,
                ) => {
                    if has_agg {
                        return Err(SqlError::new(
                            code::GROUPING_ERROR,
                            "SELECT t.* with GROUP BY or aggregates",
                        ));
                    }
                    let t = object_name(n)?;
                    items.extend(self.star(Some(&t))?);
                }
                ast::SelectItem::UnnamedExpr(e) => {
                    let (x, t) = self.bind(e, &mut cx)?;
                    let (x, t) = self.assign_type(x, t, SqlType::Text)?;
                    items.push((x, OutCol { name: column_name(e), ty: t }));
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    let (x, t) = self.bind(expr, &mut cx)?;
                    let (x, t) = self.assign_type(x, t, SqlType::Text)?;
                    items.push((x, OutCol { name: ident(alias), ty: t }));
                }
                other => return Err(SqlError::unsupported(format!("select item `{other}`"))),
            }
        }
        // HAVING
        let having = self.having(s.having.as_ref(), &mut cx)?;
        // DISTINCT
        let distinct = match &s.distinct {
            None | Some(ast::Distinct::All) => false,
            Some(ast::Distinct::Distinct) => true,
            Some(other) => return Err(SqlError::unsupported(format!("`{other}`"))),
        };
        // ORDER BY: an output column, or an expression computed as a hidden column.
        let mut out: Vec<(ColId, OutCol)> = Vec::new();
        let mut exprs: Vec<(ColId, Expr)> = Vec::new();
        for (x, c) in items {
            let id = self.new_col(&c.name, None, c.ty);
            exprs.push((id, x));
            out.push((id, c));
        }
        let mut keys = Vec::new();
        cx.clause = "ORDER BY";
        for item in order {
            let (asc, nulls_first) = sort_options(&item.options)?;
            let by_name = self.output_ref(&item.expr, &out)?;
            // A name that is an output column but also an input column: PostgreSQL takes the
            // output column.
            let id = match by_name {
                Some(id) => id,
                None => {
                    let (x, t) = self.bind(&item.expr, &mut cx)?;
                    match exprs.iter().find(|(_, e)| *e == x) {
                        Some((id, _)) => *id,
                        None => {
                            if distinct {
                                return Err(SqlError::new(
                                    "42P10",
                                    "for SELECT DISTINCT, ORDER BY expressions must appear in select list",
                                ));
                            }
                            let id = self.new_col(&column_name(&item.expr), None, t);
                            exprs.push((id, x));
                            id
                        }
                    }
                }
            };
            keys.push(SortSpec { expr: Expr::Column(id), asc, nulls_first });
        }
        // The tree, bottom up.
        if let Some(agg) = cx.agg.take() {
            plan = with_applies(plan, group_applies);
            plan = with_applies(plan, agg.pre_applies);
            plan = Logical::Aggregate { input: Box::new(plan), group: agg.group, aggs: agg.aggs };
        }
        plan = with_applies(plan, std::mem::take(&mut cx.applies));
        plan = Logical::filter(plan, having);
        let windows = cx.windows.take().unwrap_or_default();
        if !windows.is_empty() {
            plan = Logical::Window { input: Box::new(plan), calls: windows };
        }
        if let Some(calls) = cx.srfs.take().filter(|c| !c.is_empty()) {
            plan = Logical::ProjectSet { input: Box::new(plan), calls };
        }
        let visible = out.len();
        let hidden = exprs.len() > visible;
        plan = Logical::Project { input: Box::new(plan), exprs };
        if distinct {
            plan = Logical::Distinct { input: Box::new(plan) };
        }
        if !keys.is_empty() {
            plan = Logical::Sort { input: Box::new(plan), keys };
        }
        if hidden {
            // LIMIT goes on top later; the hidden keys are dropped after it by the physical
            // planner's final projection (the visible columns are the first `visible`).
            let exprs = out.iter().map(|(id, _)| (*id, Expr::Column(*id))).collect();
            plan = Logical::Project { input: Box::new(plan), exprs };
        }
        Ok((plan, out))
    }

    /// The HAVING predicate (where neither window nor set-returning functions may be called).
    fn having(&mut self, having: Option<&AstExpr>, cx: &mut BindCx) -> SqlResult<Option<Expr>> {
        let Some(h) = having else { return Ok(None) };
        cx.clause = "HAVING";
        let saved = (cx.windows.take(), cx.srfs.take());
        let p = self.bind_predicate(h, cx)?;
        (cx.windows, cx.srfs) = saved;
        Ok(Some(p))
    }

    /// The columns `*` (or `t.*`) stands for.
    fn star(&self, table: Option<&str>) -> SqlResult<Vec<(Expr, OutCol)>> {
        let scope = self.scopes.last().expect("a select has a scope");
        let mut out = Vec::new();
        if table.is_none() {
            for (name, id, ty) in &scope.merged {
                out.push((Expr::Column(*id), OutCol { name: name.clone(), ty: *ty }));
            }
        }
        let mut found = false;
        for item in &scope.items {
            if table.is_some_and(|t| t != item.alias) {
                continue;
            }
            found = true;
            for c in &item.cols {
                if c.hidden || (table.is_none() && scope.merged.iter().any(|(n, _, _)| *n == c.name)) {
                    continue;
                }
                out.push((Expr::Column(c.id), OutCol { name: c.name.clone(), ty: c.ty }));
            }
        }
        if let (Some(t), false) = (table, found) {
            return Err(SqlError::new(
                code::UNDEFINED_TABLE,
                format!("missing FROM-clause entry for table \"{t}\""),
            )
            .with_table(t));
        }
        Ok(out)
    }

    /// FROM: the items cross-joined (WHERE's equalities become join conditions later).
    fn bind_from(&mut self, from: &[ast::TableWithJoins]) -> SqlResult<Logical> {
        let mut plan: Option<Logical> = None;
        for twj in from {
            let p = self.table_with_joins(twj)?;
            plan = Some(match plan {
                None => p,
                Some(left) => Logical::Join {
                    kind: JoinKind::Inner,
                    left: Box::new(left),
                    right: Box::new(p),
                    on: None,
                },
            });
        }
        Ok(plan.unwrap_or(Logical::One))
    }

    fn table_with_joins(&mut self, twj: &ast::TableWithJoins) -> SqlResult<Logical> {
        let mut left = self.table_factor(&twj.relation)?;
        for j in &twj.joins {
            let before = self.scopes.last().expect("scope").items.len();
            let right = self.table_factor(&j.relation)?;
            use ast::JoinOperator as J;
            let (kind, c) = match &j.join_operator {
                J::Join(c) | J::Inner(c) => (JoinKind::Inner, c),
                J::Left(c) | J::LeftOuter(c) => (JoinKind::Left, c),
                J::Right(c) | J::RightOuter(c) => (JoinKind::Right, c),
                J::FullOuter(c) => (JoinKind::Full, c),
                J::CrossJoin(c) => (JoinKind::Inner, c),
                other => return Err(SqlError::unsupported(format!("join kind {other:?}"))),
            };
            let (on, project) = match c {
                ast::JoinConstraint::On(e) => {
                    let mut cx = BindCx::row("JOIN conditions");
                    let p = self.bind_predicate(e, &mut cx)?;
                    if !cx.applies.is_empty() {
                        return Err(SqlError::unsupported("a subquery in a JOIN condition"));
                    }
                    (Some(p), None)
                }
                ast::JoinConstraint::None => {
                    if kind != JoinKind::Inner {
                        return Err(SqlError::syntax("an outer join needs a join condition"));
                    }
                    (None, None)
                }
                ast::JoinConstraint::Using(names) => {
                    let names = names
                        .iter()
                        .map(|n| match n.0.as_slice() {
                            [ast::ObjectNamePart::Identifier(i)] => Ok(ident(i)),
                            _ => Err(SqlError::syntax(format!("bad USING column {n}"))),
                        })
                        .collect::<SqlResult<Vec<_>>>()?;
                    self.using(&names, before, kind)?
                }
                ast::JoinConstraint::Natural => {
                    let scope = self.scopes.last().expect("scope");
                    let left_names: Vec<String> = scope.items[..before]
                        .iter()
                        .flat_map(|i| i.cols.iter().filter(|c| !c.hidden).map(|c| c.name.clone()))
                        .chain(scope.merged.iter().map(|m| m.0.clone()))
                        .collect();
                    let names: Vec<String> = scope.items[before..]
                        .iter()
                        .flat_map(|i| i.cols.iter().filter(|c| !c.hidden).map(|c| c.name.clone()))
                        .filter(|n| left_names.contains(n))
                        .collect();
                    self.using(&names, before, kind)?
                }
                other => return Err(SqlError::unsupported(format!("join constraint {other:?}"))),
            };
            left = Logical::Join { kind, left: Box::new(left), right: Box::new(right), on };
            if let Some(exprs) = project {
                left = Logical::Project { input: Box::new(left), exprs };
            }
        }
        Ok(left)
    }

    /// `USING (names)` between the items before `split` and those after: the equalities, and
    /// for a FULL join a projection adding the merged (coalesced) columns.
    #[allow(clippy::type_complexity)]
    fn using(
        &mut self,
        names: &[String],
        split: usize,
        kind: JoinKind,
    ) -> SqlResult<(Option<Expr>, Option<Vec<(ColId, Expr)>>)> {
        let mut conds = Vec::new();
        let mut merged = Vec::new();
        for name in names {
            let scope = self.scopes.last().expect("scope");
            let find = |items: &[ScopeItem], merged: &[(String, ColId, SqlType)]| -> Vec<(ColId, SqlType)> {
                let mut v: Vec<(ColId, SqlType)> =
                    merged.iter().filter(|m| &m.0 == name).map(|m| (m.1, m.2)).collect();
                if v.is_empty() {
                    v = items
                        .iter()
                        .flat_map(|i| {
                            i.cols.iter().filter(|c| &c.name == name && !c.hidden).map(|c| (c.id, c.ty))
                        })
                        .collect();
                }
                v
            };
            let l = find(&scope.items[..split], &scope.merged);
            let r = find(&scope.items[split..], &[]);
            let (&[(lid, lt)], &[(rid, rt)]) = (l.as_slice(), r.as_slice()) else {
                return Err(SqlError::new(
                    code::UNDEFINED_COLUMN,
                    format!("column \"{name}\" specified in USING clause does not exist in both tables (or is ambiguous)"),
                ));
            };
            let (eq, _) = self.binary(BinOp::Eq, (Expr::Column(lid), lt), (Expr::Column(rid), rt))?;
            conds.push(eq);
            merged.push((name.clone(), lid, lt, rid, rt));
        }
        let mut project = None;
        let scope_merged: Vec<(String, ColId, SqlType)> = match kind {
            JoinKind::Full => {
                // Every column passes through; the merged ones are added as coalesced.
                let mut exprs: Vec<(ColId, Expr)> = Vec::new();
                let scope = self.scopes.last().expect("scope");
                let mut ids: Vec<ColId> = scope.merged.iter().map(|m| m.1).collect();
                ids.extend(scope.items.iter().flat_map(|i| i.cols.iter().map(|c| c.id)));
                exprs.extend(ids.into_iter().map(|id| (id, Expr::Column(id))));
                let mut out = Vec::new();
                for (name, lid, lt, rid, rt) in &merged {
                    let ty = common_type(*lt, *rt).unwrap_or(*lt);
                    let id = self.new_col(name, None, ty);
                    exprs.push((
                        id,
                        Expr::Func(Func::Coalesce, vec![Expr::Column(*lid), Expr::Column(*rid)], ty),
                    ));
                    out.push((name.clone(), id, ty));
                }
                project = Some(exprs);
                out
            }
            JoinKind::Right => merged.iter().map(|(n, _, _, rid, rt)| (n.clone(), *rid, *rt)).collect(),
            _ => merged.iter().map(|(n, lid, lt, _, _)| (n.clone(), *lid, *lt)).collect(),
        };
        let scope = self.scopes.last_mut().expect("scope");
        scope.merged.retain(|m| !names.contains(&m.0));
        scope.merged.extend(scope_merged);
        Ok((Expr::and_all(conds), project))
    }

    fn add_item(&mut self, alias: String, cols: Vec<ScopeCol>) -> SqlResult<()> {
        let scope = self.scopes.last_mut().expect("a FROM has a scope");
        if scope.items.iter().any(|s| s.alias == alias) {
            return Err(SqlError::new("42712", format!("table name \"{alias}\" specified more than once")));
        }
        scope.items.push(ScopeItem { alias, cols });
        Ok(())
    }

    fn table_factor(&mut self, tf: &ast::TableFactor) -> SqlResult<Logical> {
        match tf {
            ast::TableFactor::Table { name, alias, args: None, with_hints, .. } if with_hints.is_empty() => {
                let tname = object_name(name)?;
                let alias_name = alias.as_ref().map(|a| ident(&a.name));
                if let (true, Some(cte)) =
                    (name.0.len() == 1, self.ctes.iter().rev().find(|c| c.name == tname).cloned())
                {
                    let a = alias
                        .as_ref()
                        .map(|a| a.columns.iter().map(|c| ident(&c.name)).collect())
                        .unwrap_or_default();
                    let cols = if cte.columns.is_empty() { a } else { cte.columns.clone() };
                    return self.derived(&cte.query, alias_name.unwrap_or(tname), cols, true);
                }
                let info = self.catalog.get(&tname)?;
                let alias_name = alias_name.unwrap_or(tname);
                let renames: Vec<String> = alias
                    .as_ref()
                    .map(|a| a.columns.iter().map(|c| ident(&c.name)).collect())
                    .unwrap_or_default();
                let mut ids = Vec::new();
                let mut scope_cols = Vec::new();
                let mut visible_i = 0;
                for (i, c) in info.columns.iter().enumerate() {
                    let hidden = info.is_hidden(i);
                    let name = if hidden {
                        c.name.clone()
                    } else {
                        let n = renames.get(visible_i).cloned().unwrap_or_else(|| c.name.clone());
                        visible_i += 1;
                        n
                    };
                    let id = self.new_col(&name, Some(&alias_name), c.ty);
                    ids.push(id);
                    scope_cols.push(ScopeCol { name, id, ty: c.ty, hidden });
                }
                self.add_item(alias_name.clone(), scope_cols)?;
                Ok(Logical::Scan { table: info, alias: alias_name, cols: ids })
            }
            // A set-returning function in FROM (`generate_series(1, 32) pos (n)`): the query
            // `SELECT f(args)`, its one column named by the alias's column, else the alias,
            // else the function (as in PostgreSQL). Its arguments see no FROM item beside it.
            ast::TableFactor::Table { name, alias, args: Some(args), with_hints, .. }
                if with_hints.is_empty()
                    && args.settings.is_none()
                    && crate::array::Srf::lookup(&object_name(name)?).is_some() =>
            {
                let fname = object_name(name)?;
                let alias_name = alias.as_ref().map_or_else(|| fname.clone(), |a| ident(&a.name));
                let cols: Vec<String> = alias
                    .as_ref()
                    .map(|a| a.columns.iter().map(|c| ident(&c.name)).collect())
                    .unwrap_or_default();
                let list: Vec<String> = args.args.iter().map(|a| a.to_string()).collect();
                let text = format!("SELECT {fname}({})", list.join(", "));
                let q = sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
                    .try_with_sql(&text)
                    .and_then(|mut p| p.parse_query())
                    .map_err(|e| SqlError::syntax(e.to_string()))?;
                let cols = if cols.is_empty() { vec![alias_name.clone()] } else { cols };
                self.derived(&q, alias_name, cols, false)
            }
            ast::TableFactor::Derived { lateral, subquery, alias, .. } => {
                if *lateral {
                    return Err(SqlError::unsupported("LATERAL"));
                }
                let Some(alias) = alias else {
                    return Err(SqlError::syntax("subquery in FROM must have an alias"));
                };
                let cols = alias.columns.iter().map(|c| ident(&c.name)).collect();
                self.derived(subquery, ident(&alias.name), cols, false)
            }
            ast::TableFactor::NestedJoin { table_with_joins, alias: None } => {
                self.table_with_joins(table_with_joins)
            }
            other => Err(SqlError::unsupported(format!("the FROM item `{other}`"))),
        }
    }

    /// A derived table (or CTE reference): bound as its own query level, seen under `alias`.
    fn derived(
        &mut self,
        q: &ast::Query,
        alias: String,
        renames: Vec<String>,
        cte: bool,
    ) -> SqlResult<Logical> {
        if cte {
            self.cte_depth += 1;
            if self.cte_depth > 32 {
                return Err(SqlError::new(
                    "42P19",
                    format!("CTE \"{alias}\" refers to itself (WITH RECURSIVE is not supported)"),
                ));
            }
        }
        // A derived table does not see the FROM items beside it (no LATERAL).
        let saved = std::mem::take(self.scopes.last_mut().expect("scope"));
        let r = self.query(q);
        *self.scopes.last_mut().expect("scope") = saved;
        if cte {
            self.cte_depth -= 1;
        }
        let (plan, out, _) = r?;
        if renames.len() > out.len() {
            return Err(SqlError::new(
                "42P10",
                format!(
                    "table \"{alias}\" has {} columns available but {} columns specified",
                    out.len(),
                    renames.len()
                ),
            ));
        }
        let mut exprs = Vec::new();
        let mut scope_cols = Vec::new();
        for (i, (id, c)) in out.iter().enumerate() {
            let name = renames.get(i).cloned().unwrap_or_else(|| c.name.clone());
            let nid = self.new_col(&name, Some(&alias), c.ty);
            exprs.push((nid, Expr::Column(*id)));
            scope_cols.push(ScopeCol { name, id: nid, ty: c.ty, hidden: false });
        }
        self.add_item(alias, scope_cols)?;
        Ok(Logical::Project { input: Box::new(plan), exprs })
    }
}
