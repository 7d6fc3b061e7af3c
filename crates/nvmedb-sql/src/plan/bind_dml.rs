//! Binding of INSERT, UPDATE and DELETE.
//!
//! Owns: their plans: an INSERT's rows (VALUES or a query) and target columns; an UPDATE's or
//! DELETE's input query (the table's rows that pass WHERE, found through the best access
//! path like any query) with the WHERE conjuncts re-checked on each row once it is locked, and
//! its SET and RETURNING expressions over the table row; an INSERT's ON CONFLICT on the
//! primary key (DO UPDATE's expressions over the existing row and `EXCLUDED`). Invariant: expressions a change
//! evaluates over a row use engine column positions, as the row is read and written.

use super::bind::{ident, object_name, Binder, Scope, ScopeCol, ScopeItem};
use super::bind_expr::{column_name, BindCx};
use super::bind_query::with_applies;
use super::logical::{ColId, Logical};
use super::{InsertPlan, InsertSource, ModifyPlan, OutCol, Stmt};
use crate::catalog::TableInfo;
use crate::error::{code, SqlError, SqlResult};
use crate::expr::Expr;
use sqlparser::ast::{self, Expr as AstExpr};
use std::sync::Arc;

impl Binder<'_> {
    /// Pushes a scope holding table `info` under `alias`; the ids of its engine columns.
    pub(super) fn table_scope(&mut self, info: &Arc<TableInfo>, alias: &str) -> Vec<ColId> {
        let mut ids = Vec::new();
        let mut cols = Vec::new();
        for (i, c) in info.columns.iter().enumerate() {
            let id = self.new_col(&c.name, Some(alias), c.ty);
            ids.push(id);
            cols.push(ScopeCol { name: c.name.clone(), id, ty: c.ty, hidden: info.is_hidden(i) });
        }
        self.scopes.push(Scope { items: vec![ScopeItem { alias: alias.to_string(), cols }], merged: vec![] });
        ids
    }

    /// Rewrites column ids of the table's columns to engine positions; fails on any other
    /// column (a correlated reference where none is allowed).
    pub(super) fn to_positions(e: &mut Expr, ids: &[ColId]) -> SqlResult<()> {
        let mut bad = false;
        e.map_columns(&mut |c| match ids.iter().position(|&i| i == c) {
            Some(p) => Expr::Column(p),
            None => {
                bad = true;
                Expr::Column(c)
            }
        });
        if bad {
            return Err(SqlError::unsupported("a subquery here that refers to the table's row"));
        }
        Ok(())
    }

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

    /// RETURNING items over the table's row (ids `ids`, engine positions after).
    fn returning(
        &mut self,
        items: &Option<Vec<ast::SelectItem>>,
        info: &TableInfo,
        ids: &[ColId],
    ) -> SqlResult<(Vec<Expr>, Vec<OutCol>)> {
        let Some(items) = items else { return Ok((vec![], vec![])) };
        let mut exprs = Vec::new();
        let mut cols = Vec::new();
        for item in items {
            let (e, name) = match item {
                ast::SelectItem::Wildcard(_) => {
                    for c in info.visible() {
                        exprs.push(Expr::Column(c));
                        cols.push(OutCol { name: info.columns[c].name.clone(), ty: info.columns[c].ty });
                    }
                    continue;
                }
                ast::SelectItem::UnnamedExpr(e) => (e, column_name(e)),
                ast::SelectItem::ExprWithAlias { expr, alias } => (expr, ident(alias)),
                other => return Err(SqlError::unsupported(format!("RETURNING item `{other}`"))),
            };
            let mut cx = BindCx::row("RETURNING");
            let (mut x, t) = self.bind(e, &mut cx)?;
            if !cx.applies.is_empty() {
                return Err(SqlError::unsupported("a correlated subquery in RETURNING"));
            }
            Self::to_positions(&mut x, ids)?;
            exprs.push(x);
            cols.push(OutCol { name, ty: t });
        }
        Ok((exprs, cols))
    }

    /// The DEFAULT of engine column `col` of `info`, bound (`None`: it has none, NULL).
    fn column_default(&mut self, info: &TableInfo, col: usize) -> SqlResult<Option<Expr>> {
        let cname = &info.columns[col].name;
        let Some(text) = info.meta.default_of(cname) else { return Ok(None) };
        let ast = crate::parse::parse_expr(text)?;
        self.scopes.push(Scope::default());
        let mut cx = BindCx::row("DEFAULT");
        let r = self.bind(&ast, &mut cx);
        self.scopes.pop();
        let (x, t) = r?;
        let (x, _) = self.assign_type(x, t, info.columns[col].ty)?;
        Ok(Some(x))
    }

    /// The statement's init plans, planned (for statements that are not queries).
    fn initplans_physical(&mut self) -> SqlResult<Vec<super::PhysNode>> {
        if self.initplans.is_empty() {
            return Ok(vec![]);
        }
        let plan = self.finish(Logical::One, false)?;
        Ok(plan.initplans)
    }

    pub(crate) fn insert(&mut self, ins: &ast::Insert) -> SqlResult<(Stmt, Vec<OutCol>)> {
        let ast::TableObject::TableName(name) = &ins.table else {
            return Err(SqlError::unsupported("INSERT into a table function"));
        };
        let tname = object_name(name)?;
        let info = self.catalog.get(&tname)?;
        let on_conflict = match &ins.on {
            None => None,
            Some(ast::OnInsert::OnConflict(oc)) => Some(self.on_conflict(&info, oc)?),
            Some(other) => return Err(SqlError::unsupported(format!("`{other}`"))),
        };
        let targets = self.target_columns(&info, &ins.columns)?;
        let Some(src) = &ins.source else {
            return Err(SqlError::unsupported("INSERT … DEFAULT VALUES"));
        };
        let source = match (src.body.as_ref(), &src.order_by, &src.limit_clause, &src.with) {
            (ast::SetExpr::Values(v), None, None, None) => {
                self.scopes.push(Scope::default());
                let mut rows = Vec::new();
                for r in &v.rows {
                    if r.content.len() != targets.len() {
                        self.scopes.pop();
                        return Err(SqlError::syntax(format!(
                            "INSERT has {} expressions for {} target columns",
                            r.content.len(),
                            targets.len()
                        )));
                    }
                    let mut row = Vec::new();
                    for (e, &col) in r.content.iter().zip(&targets) {
                        if is_default_keyword(e) {
                            let d = self.column_default(&info, col);
                            match d {
                                Ok(d) => row.push(d.unwrap_or(Expr::Const(crate::types::Datum::Null))),
                                Err(err) => {
                                    self.scopes.pop();
                                    return Err(err);
                                }
                            }
                            continue;
                        }
                        let cty = info.columns[col].ty;
                        let mut cx = BindCx::row("VALUES");
                        let bound = self.bind(e, &mut cx);
                        let (x, t) = match bound {
                            Ok(b) => b,
                            Err(err) => {
                                self.scopes.pop();
                                return Err(err);
                            }
                        };
                        if !cx.applies.is_empty() {
                            self.scopes.pop();
                            return Err(SqlError::unsupported("EXISTS / IN subqueries in VALUES"));
                        }
                        let (x, _) = self.assign_type(x, t, cty)?;
                        row.push(x);
                    }
                    rows.push(row);
                }
                self.scopes.pop();
                InsertSource::Values(rows)
            }
            _ => {
                let (plan, cols) = self.query_plan(src)?;
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
        let mut defaults = Vec::new();
        for col in info.visible() {
            if !targets.contains(&col) {
                if let Some(d) = self.column_default(&info, col)? {
                    defaults.push((col, d));
                }
            }
        }
        let ids = self.table_scope(&info, &tname);
        let r = self.returning(&ins.returning, &info, &ids);
        self.scopes.pop();
        let (returning, cols) = r?;
        let initplans = match &source {
            InsertSource::Values(_) => self.initplans_physical()?,
            InsertSource::Query(_) => vec![],
        };
        let checks = self.table_checks(&info)?;
        Ok((
            Stmt::Insert(Box::new(InsertPlan {
                table: info,
                targets,
                source,
                returning,
                defaults,
                initplans,
                on_conflict,
                checks,
            })),
            cols,
        ))
    }

    /// The columns of the table's primary key (`None`: it has none, only a hidden row id).
    fn pk_columns(info: &TableInfo) -> Option<Vec<usize>> {
        if info.hidden_rowid {
            return None;
        }
        Some(info.composite.iter().find(|k| k.column == info.pk).map_or(vec![info.pk], |k| k.columns.clone()))
    }

    /// Binds ON CONFLICT: its target must be the primary key or a unique index (by its columns
    /// or its constraint's name), and is 42P10 when none matches; without a target (DO NOTHING
    /// only) every unique key is an arbiter. DO UPDATE's SET and WHERE see the existing row by
    /// the table's name (and unqualified) and the proposed one as `EXCLUDED`.
    fn on_conflict(&mut self, info: &Arc<TableInfo>, oc: &ast::OnConflict) -> SqlResult<super::OnConflict> {
        use super::Arbiter;
        let pk = Self::pk_columns(info);
        let no_match = || {
            SqlError::new(
                code::INVALID_COLUMN_REFERENCE,
                "there is no unique or exclusion constraint matching the ON CONFLICT specification",
            )
        };
        // The unique index of a multi-column key is on its hidden column.
        let index_on = |col: usize| info.indexes.iter().position(|i| i.2 && i.1 == col);
        let arbiters = match &oc.conflict_target {
            None if matches!(oc.action, ast::OnConflictAction::DoUpdate(_)) => {
                return Err(SqlError::syntax(
                    "ON CONFLICT DO UPDATE requires inference specification or constraint name",
                ))
            }
            None => pk
                .iter()
                .map(|_| Arbiter::PrimaryKey)
                .chain(info.indexes.iter().enumerate().filter(|(_, i)| i.2).map(|(n, _)| Arbiter::Index(n)))
                .collect(),
            Some(ast::ConflictTarget::Columns { columns, predicate }) => {
                if predicate.is_some() {
                    return Err(SqlError::unsupported("ON CONFLICT (…) WHERE (partial unique indexes)"));
                }
                let mut cols =
                    columns.iter().map(|c| info.column(&ident(c))).collect::<SqlResult<Vec<_>>>()?;
                cols.sort_unstable();
                cols.dedup();
                let sorted = |c: &[usize]| {
                    let mut c = c.to_vec();
                    c.sort_unstable();
                    c
                };
                let arbiter = if pk.as_deref().is_some_and(|k| sorted(k) == cols) {
                    Some(Arbiter::PrimaryKey)
                } else if cols.len() == 1 {
                    index_on(cols[0]).map(Arbiter::Index)
                } else {
                    info.composite
                        .iter()
                        .filter(|k| k.def.unique && !k.def.primary && sorted(&k.columns) == cols)
                        .find_map(|k| index_on(k.column))
                        .map(Arbiter::Index)
                };
                vec![arbiter.ok_or_else(no_match)?]
            }
            Some(ast::ConflictTarget::OnConstraint(name)) => {
                let n = object_name(name)?;
                let pk_name = info
                    .composite
                    .iter()
                    .find(|k| k.def.primary)
                    .map_or_else(|| format!("{}_pkey", info.name), |k| k.def.name.clone());
                let arbiter = if pk.is_some() && n == pk_name {
                    Arbiter::PrimaryKey
                } else if let Some(i) = info.indexes.iter().position(|i| i.0 == n) {
                    if !info.indexes[i].2 {
                        return Err(no_match());
                    }
                    Arbiter::Index(i)
                } else {
                    return Err(SqlError::new(
                        code::UNDEFINED_OBJECT,
                        format!("constraint \"{n}\" for table \"{}\" does not exist", info.name),
                    ));
                };
                vec![arbiter]
            }
        };
        let ast::OnConflictAction::DoUpdate(du) = &oc.action else {
            return Ok(super::OnConflict { arbiters, update: false, sets: vec![], filter: None });
        };
        // One scope: the existing row (also unqualified, as `merged` names) and EXCLUDED.
        let mut ids = Vec::new();
        let mut items = Vec::new();
        let mut merged = Vec::new();
        for alias in [info.name.as_str(), "excluded"] {
            let mut cols = Vec::new();
            for (i, c) in info.columns.iter().enumerate() {
                let id = self.new_col(&c.name, Some(alias), c.ty);
                ids.push(id);
                if alias != "excluded" && !info.is_hidden(i) {
                    merged.push((c.name.clone(), id, c.ty));
                }
                cols.push(ScopeCol { name: c.name.clone(), id, ty: c.ty, hidden: info.is_hidden(i) });
            }
            items.push(ScopeItem { alias: alias.to_string(), cols });
        }
        self.scopes.push(Scope { items, merged });
        let initplans = self.initplans.len();
        let r = (|| {
            let mut sets = Vec::new();
            for a in &du.assignments {
                let col = assigned_column(info, a)?;
                let mut cx = BindCx::row("ON CONFLICT DO UPDATE");
                let (x, t) = self.bind(&a.value, &mut cx)?;
                let (mut x, _) = self.assign_type(x, t, info.columns[col].ty)?;
                Self::to_positions(&mut x, &ids)?;
                sets.push((col, x));
            }
            let filter = match &du.selection {
                None => None,
                Some(w) => {
                    let mut x = self.bind_predicate(w, &mut BindCx::row("ON CONFLICT DO UPDATE WHERE"))?;
                    Self::to_positions(&mut x, &ids)?;
                    Some(x)
                }
            };
            Ok(super::OnConflict { arbiters, update: true, sets, filter })
        })();
        self.scopes.pop();
        if self.initplans.len() != initplans {
            return Err(SqlError::unsupported("a subquery in ON CONFLICT DO UPDATE"));
        }
        r
    }

    /// The table of an UPDATE or DELETE.
    fn modified_table(&self, twj: &ast::TableWithJoins) -> SqlResult<(Arc<TableInfo>, String)> {
        if !twj.joins.is_empty() {
            return Err(SqlError::unsupported("UPDATE/DELETE with joins"));
        }
        match &twj.relation {
            ast::TableFactor::Table { name, alias, args: None, .. } => {
                let t = object_name(name)?;
                let info = self.catalog.get(&t)?;
                let alias = alias.as_ref().map_or(t, |a| ident(&a.name));
                Ok((info, alias))
            }
            other => Err(SqlError::unsupported(format!("changing `{other}`"))),
        }
    }

    /// The input of an UPDATE or DELETE: its rows that pass WHERE; the re-checked conjuncts.
    fn modify_input(
        &mut self,
        info: &Arc<TableInfo>,
        alias: &str,
        ids: &[ColId],
        selection: &Option<AstExpr>,
    ) -> SqlResult<(Logical, Option<Expr>)> {
        let mut plan = Logical::Scan { table: info.clone(), alias: alias.to_string(), cols: ids.to_vec() };
        let mut recheck = None;
        if let Some(w) = selection {
            let mut cx = BindCx::row("WHERE");
            let pred = self.bind_predicate(w, &mut cx)?;
            let mut conj = Vec::new();
            pred.clone().conjuncts(&mut conj);
            let mut local: Vec<Expr> =
                conj.into_iter().filter(|e| e.columns_all(&|c| ids.contains(&c))).collect();
            for e in &mut local {
                Self::to_positions(e, ids)?;
            }
            recheck = Expr::and_all(local);
            let had_applies = !cx.applies.is_empty();
            plan = with_applies(plan, cx.applies);
            plan = Logical::Filter { input: Box::new(plan), pred };
            if had_applies {
                plan = Logical::Project {
                    input: Box::new(plan),
                    exprs: ids.iter().map(|&i| (i, Expr::Column(i))).collect(),
                };
            }
        }
        Ok((plan, recheck))
    }

    pub(crate) fn update(&mut self, u: &ast::Update) -> SqlResult<(Stmt, Vec<OutCol>)> {
        if u.from.is_some() {
            return Err(SqlError::unsupported("UPDATE … FROM"));
        }
        let (info, alias) = self.modified_table(&u.table)?;
        let ids = self.table_scope(&info, &alias);
        let r = (|| {
            let mut sets = Vec::new();
            for a in &u.assignments {
                let col = assigned_column(&info, a)?;
                if is_default_keyword(&a.value) {
                    let d = self.column_default(&info, col)?;
                    sets.push((col, d.unwrap_or(Expr::Const(crate::types::Datum::Null))));
                    continue;
                }
                let mut cx = BindCx::row("UPDATE");
                let (x, t) = self.bind(&a.value, &mut cx)?;
                if !cx.applies.is_empty() {
                    return Err(SqlError::unsupported("a correlated subquery in SET"));
                }
                let (mut x, _) = self.assign_type(x, t, info.columns[col].ty)?;
                Self::to_positions(&mut x, &ids)?;
                sets.push((col, x));
            }
            let (input, recheck) = self.modify_input(&info, &alias, &ids, &u.selection)?;
            let (returning, cols) = self.returning(&u.returning, &info, &ids)?;
            Ok((sets, input, recheck, returning, cols))
        })();
        self.scopes.pop();
        let (sets, input, recheck, returning, cols) = r?;
        let input = self.finish(input, false)?;
        let checks = self.table_checks(&info)?;
        Ok((
            Stmt::Update(Box::new(ModifyPlan { table: info, input, recheck, sets, returning, checks })),
            cols,
        ))
    }

    pub(crate) fn delete(&mut self, d: &ast::Delete) -> SqlResult<(Stmt, Vec<OutCol>)> {
        let from = match &d.from {
            ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
        };
        let [twj] = from.as_slice() else {
            return Err(SqlError::unsupported("DELETE from several tables"));
        };
        if d.using.is_some() || d.limit.is_some() || !d.order_by.is_empty() {
            return Err(SqlError::unsupported("DELETE … USING / ORDER BY / LIMIT"));
        }
        let (info, alias) = self.modified_table(twj)?;
        let ids = self.table_scope(&info, &alias);
        let r = (|| -> SqlResult<_> {
            let (input, recheck) = self.modify_input(&info, &alias, &ids, &d.selection)?;
            let (returning, cols) = self.returning(&d.returning, &info, &ids)?;
            Ok((input, recheck, returning, cols))
        })();
        self.scopes.pop();
        let (input, recheck, returning, cols) = r?;
        let input = self.finish(input, false)?;
        Ok((
            Stmt::Delete(Box::new(ModifyPlan {
                table: info,
                input,
                recheck,
                sets: vec![],
                returning,
                checks: vec![],
            })),
            cols,
        ))
    }
}

/// The engine column a SET assignment names (`col` or `t.col`).
fn assigned_column(info: &TableInfo, a: &ast::Assignment) -> SqlResult<usize> {
    let name = match &a.target {
        ast::AssignmentTarget::ColumnName(n) => match n.0.as_slice() {
            [ast::ObjectNamePart::Identifier(i)] | [_, ast::ObjectNamePart::Identifier(i)] => ident(i),
            _ => return Err(SqlError::unsupported(format!("assignment target `{n}`"))),
        },
        other => return Err(SqlError::unsupported(format!("assignment target `{other}`"))),
    };
    info.column(&name)
}

/// True for the keyword DEFAULT standing for a column's default in VALUES or SET.
fn is_default_keyword(e: &AstExpr) -> bool {
    matches!(e, AstExpr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}
