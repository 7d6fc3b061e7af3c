//! Join planning: the order of inner joins and the method of every join.
//!
//! Owns: the join region (a tree of inner joins and filters flattened into relations and
//! conjuncts, each conjunct placed at the lowest join that has its columns), the search for
//! the cheapest order (dynamic programming over connected subsets, bushy trees allowed, up to
//! [`DP_LIMIT`] relations; greedy beyond), and the choice of method per join: hash join
//! (building the smaller side), index nested loop (the inner side a table with its primary
//! key or an index on the join key: one lookup per outer row), nested loop (no equality to
//! hash on). Outer, semi and anti joins keep their sides (a right join is a left join with
//! the sides swapped) and choose only their method. Invariant: a region's estimate of a set
//! of relations does not depend on the order chosen inside it, so the costs compare.

use super::cost;
use super::logical::{ColId, JoinKind, Logical};
use super::physical::{Path, PhysNode, PhysOp, Planner, ScanSpec};
use crate::catalog::TableInfo;
use crate::error::SqlResult;
use crate::expr::{BinOp, Expr};
use std::collections::HashMap;
use std::sync::Arc;

/// Relations up to which the join order is searched exhaustively.
pub const DP_LIMIT: usize = 10;

/// One relation of a region.
struct Rel<'l> {
    logical: &'l Logical,
    /// The best plan with its own conjuncts.
    plan: PhysNode,
    /// Its own conjuncts (over ids), for an index join's inner filter.
    preds: Vec<Expr>,
}

/// A conjunct of the region and the relations it reads.
struct Pred {
    expr: Expr,
    mask: u32,
}

/// A base table an index join can look rows up in.
struct Lookup<'a> {
    table: &'a Arc<TableInfo>,
    alias: &'a str,
    ids: &'a [ColId],
}

fn or_branches<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Binary(BinOp::Or, a, b, _) => {
            or_branches(a, out);
            or_branches(b, out);
        }
        other => out.push(other),
    }
}

fn flatten<'l>(l: &'l Logical, rels: &mut Vec<&'l Logical>, preds: &mut Vec<Expr>) {
    match l {
        Logical::Join { kind: JoinKind::Inner, left, right, on } => {
            flatten(left, rels, preds);
            flatten(right, rels, preds);
            if let Some(on) = on {
                on.clone().conjuncts(preds);
            }
        }
        Logical::Filter { input, pred }
            if matches!(input.as_ref(), Logical::Join { kind: JoinKind::Inner, .. }) =>
        {
            flatten(input, rels, preds);
            pred.clone().conjuncts(preds);
        }
        other => rels.push(other),
    }
}

/// Splits `e` as `x = y` with x over `a` and y over `b` (either way round).
fn equi_keys(e: &Expr, a: &[ColId], b: &[ColId]) -> Option<(Expr, Expr)> {
    let Expr::Binary(BinOp::Eq, x, y, _) = e else { return None };
    let over = |e: &Expr, s: &[ColId]| {
        let mut any = false;
        e.columns(&mut |c| any |= s.contains(&c));
        any && e.columns_all(&|c| s.contains(&c))
    };
    if over(x, a) && over(y, b) {
        Some(((**x).clone(), (**y).clone()))
    } else if over(y, a) && over(x, b) {
        Some(((**y).clone(), (**x).clone()))
    } else {
        None
    }
}

impl Planner<'_> {
    /// Plans a region of inner joins with the conjuncts `extra` from above.
    pub(crate) fn region(&mut self, l: &Logical, extra: Vec<Expr>) -> SqlResult<PhysNode> {
        let mut rels_l = Vec::new();
        let mut conj = extra;
        flatten(l, &mut rels_l, &mut conj);
        let ids: Vec<Vec<ColId>> = rels_l.iter().map(|r| r.output()).collect();
        let mask_of = |e: &Expr| {
            let mut m = 0u32;
            e.columns(&mut |c| {
                for (i, s) in ids.iter().enumerate() {
                    if s.contains(&c) {
                        m |= 1 << i;
                    }
                }
            });
            m
        };
        let n = rels_l.len();
        // An OR over several relations whose every branch restricts relation i also
        // restricts i alone: that OR of i's parts filters i early (the whole OR stays).
        let mut derived = Vec::new();
        for e in &conj {
            if !matches!(e, Expr::Binary(BinOp::Or, ..)) || mask_of(e).count_ones() < 2 {
                continue;
            }
            let mut ds = Vec::new();
            or_branches(e, &mut ds);
            for i in 0..n {
                let parts: Option<Vec<Expr>> = ds
                    .iter()
                    .map(|d| {
                        let mut c = Vec::new();
                        (*d).clone().conjuncts(&mut c);
                        Expr::and_all(c.into_iter().filter(|x| mask_of(x) == 1 << i))
                    })
                    .collect();
                if let Some(parts) = parts {
                    derived.extend(parts.into_iter().reduce(|a, b| {
                        Expr::Binary(BinOp::Or, Box::new(a), Box::new(b), crate::types::SqlType::Bool)
                    }));
                }
            }
        }
        conj.extend(derived);
        let mut own: Vec<Vec<Expr>> = vec![Vec::new(); n];
        let mut top = Vec::new();
        let mut preds = Vec::new();
        for e in conj {
            let m = mask_of(&e);
            if m == 0 {
                top.push(e);
            } else if m.count_ones() == 1 {
                own[m.trailing_zeros() as usize].push(e);
            } else {
                preds.push(Pred { expr: e, mask: m });
            }
        }
        let mut rels = Vec::with_capacity(n);
        for (i, rl) in rels_l.iter().enumerate() {
            let plan = self.plan(rl, own[i].clone())?;
            rels.push(Rel { logical: rl, plan, preds: std::mem::take(&mut own[i]) });
        }
        let joined = if n == 1 {
            rels.pop().expect("one relation").plan
        } else if n <= DP_LIMIT {
            self.dp(&rels, &preds)?
        } else {
            self.greedy(&rels, &preds)?
        };
        self.filter_node(joined, top)
    }

    /// Estimated rows of the join of the relations in `mask`.
    fn subset_rows(&self, rels: &[Rel<'_>], preds: &[Pred], mask: u32) -> f64 {
        let mut rows = 1.0f64;
        for (i, r) in rels.iter().enumerate() {
            if mask & (1 << i) != 0 {
                rows *= r.plan.rows.max(1.0);
            }
        }
        for p in preds {
            if p.mask & mask == p.mask {
                rows *= self.est.selectivity(&p.expr);
            }
        }
        rows.max(1.0)
    }

    fn dp(&mut self, rels: &[Rel<'_>], preds: &[Pred]) -> SqlResult<PhysNode> {
        let n = rels.len();
        let full = (1u32 << n) - 1;
        let mut best: HashMap<u32, PhysNode> = HashMap::new();
        for (i, r) in rels.iter().enumerate() {
            best.insert(1 << i, r.plan.clone());
        }
        // Subsets in order of size; a pair of parts is joined if a conjunct connects them
        // (a cross product only where no connected split exists).
        let mut by_size: Vec<u32> = (1..=full).collect();
        by_size.sort_by_key(|m| m.count_ones());
        for &s in &by_size {
            if s.count_ones() < 2 {
                continue;
            }
            let rows = self.subset_rows(rels, preds, s);
            let mut cands: Vec<(u32, u32, bool)> = Vec::new();
            let mut sub = (s - 1) & s;
            while sub > 0 {
                let other = s & !sub;
                if best.contains_key(&sub) && best.contains_key(&other) {
                    let connected = preds
                        .iter()
                        .any(|p| p.mask & s == p.mask && p.mask & sub != 0 && p.mask & other != 0);
                    cands.push((sub, other, connected));
                }
                sub = (sub - 1) & s;
            }
            let any_connected = cands.iter().any(|c| c.2);
            let mut winner: Option<PhysNode> = None;
            for (a, b, connected) in cands {
                if any_connected && !connected {
                    continue;
                }
                let join_preds: Vec<Expr> = preds
                    .iter()
                    .filter(|p| p.mask & s == p.mask && p.mask & a != 0 && p.mask & b != 0)
                    .map(|p| p.expr.clone())
                    .collect();
                let lookup =
                    if b.count_ones() == 1 { Some(&rels[b.trailing_zeros() as usize]) } else { None };
                let plan = self.join_pair(
                    JoinKind::Inner,
                    best[&a].clone(),
                    best[&b].clone(),
                    join_preds,
                    lookup,
                    rows,
                )?;
                if winner.as_ref().is_none_or(|w| plan.cost < w.cost) {
                    winner = Some(plan);
                }
            }
            if let Some(w) = winner {
                best.insert(s, w);
            }
        }
        Ok(best.remove(&full).expect("the full set is joined"))
    }

    fn greedy(&mut self, rels: &[Rel<'_>], preds: &[Pred]) -> SqlResult<PhysNode> {
        let n = rels.len();
        let start =
            (0..n).min_by(|&a, &b| rels[a].plan.rows.total_cmp(&rels[b].plan.rows)).expect("relations");
        let mut mask = 1u32 << start;
        let mut plan = rels[start].plan.clone();
        while mask.count_ones() < n as u32 {
            let mut winner: Option<(u32, PhysNode)> = None;
            for i in 0..n {
                let bit = 1u32 << i;
                if mask & bit != 0 {
                    continue;
                }
                let s = mask | bit;
                let join_preds: Vec<Expr> = preds
                    .iter()
                    .filter(|p| p.mask & s == p.mask && p.mask & bit != 0 && p.mask & mask != 0)
                    .map(|p| p.expr.clone())
                    .collect();
                let rows = self.subset_rows(rels, preds, s);
                let p = self.join_pair(
                    JoinKind::Inner,
                    plan.clone(),
                    rels[i].plan.clone(),
                    join_preds,
                    Some(&rels[i]),
                    rows,
                )?;
                let connected = preds.iter().any(|p| p.mask & bit != 0 && p.mask & mask != 0);
                let score = p.cost * if connected { 1.0 } else { 1e6 };
                if winner.as_ref().is_none_or(|(_, w)| score < w.cost) {
                    winner = Some((bit, p));
                }
            }
            let (bit, p) = winner.expect("a relation is left");
            mask |= bit;
            plan = p;
        }
        Ok(plan)
    }

    /// The cheapest way to join `left` and `right` with the conjuncts `conds` (over ids);
    /// `rel`: the right side as a relation of a region, which an index join may look up in;
    /// `rows`: the estimated output.
    fn join_pair(
        &mut self,
        kind: JoinKind,
        left: PhysNode,
        right: PhysNode,
        conds: Vec<Expr>,
        rel: Option<&Rel<'_>>,
        rows: f64,
    ) -> SqlResult<PhysNode> {
        let lookup = rel.and_then(|r| match r.logical {
            Logical::Scan { table, alias, cols } => {
                Some((Lookup { table, alias, ids: cols }, r.preds.clone()))
            }
            _ => None,
        });
        let mut options = Vec::new();
        if let Some((lk, own)) = lookup {
            if let Some(p) = self.index_join(kind, &left, &lk, &own, &conds, rows, &right)? {
                options.push(p);
            }
        }
        options.push(self.hash_or_loop(kind, left.clone(), right.clone(), conds.clone(), rows)?);
        if kind == JoinKind::Inner {
            // The other way round: build on the left.
            options.push(self.hash_or_loop(kind, right, left, conds, rows)?);
        }
        Ok(options.into_iter().min_by(|a, b| a.cost.total_cmp(&b.cost)).expect("an option"))
    }

    /// Hash join on the equalities between the sides, or a nested loop without any.
    fn hash_or_loop(
        &mut self,
        kind: JoinKind,
        left: PhysNode,
        right: PhysNode,
        conds: Vec<Expr>,
        rows: f64,
    ) -> SqlResult<PhysNode> {
        let mut lk = Vec::new();
        let mut rk = Vec::new();
        let mut extra = Vec::new();
        for c in conds {
            match equi_keys(&c, &left.cols, &right.cols) {
                Some((x, y)) if kind != JoinKind::AntiNullAware || lk.is_empty() => {
                    lk.push(self.compile(&x, &left.cols)?);
                    rk.push(self.compile(&y, &right.cols)?);
                }
                _ => extra.push(c),
            }
        }
        let mut both = left.cols.clone();
        both.extend_from_slice(&right.cols);
        let extra_c =
            Expr::and_all(extra.iter().map(|e| self.compile(e, &both)).collect::<SqlResult<Vec<_>>>()?);
        let cols = if kind.left_only() { left.cols.clone() } else { both };
        let order = left.order.clone();
        if lk.is_empty() {
            let c = left.cost
                + right.cost
                + left.rows * right.rows * cost::CPU_ROW
                + right.rows * cost::HASH_BUILD;
            let op = PhysOp::NestedLoop { kind, left: Box::new(left), right: Box::new(right), cond: extra_c };
            return Ok(self.node(op, cols, rows, c, order));
        }
        let c = left.cost
            + right.cost
            + right.rows * cost::HASH_BUILD
            + left.rows * cost::HASH_PROBE
            + rows * cost::CPU_ROW;
        let op = PhysOp::HashJoin {
            kind,
            left: Box::new(left),
            right: Box::new(right),
            left_keys: lk,
            right_keys: rk,
            extra: extra_c,
        };
        Ok(self.node(op, cols, rows, c, order))
    }

    /// An index nested loop into table `lk`, if an equality gives its key or an indexed
    /// column from the left side.
    #[allow(clippy::too_many_arguments)]
    fn index_join(
        &mut self,
        kind: JoinKind,
        left: &PhysNode,
        lk: &Lookup<'_>,
        own: &[Expr],
        conds: &[Expr],
        rows: f64,
        right_plan: &PhysNode,
    ) -> SqlResult<Option<PhysNode>> {
        let t = lk.table;
        let mut chosen: Option<(Path, usize, f64)> = None;
        for (ci, c) in conds.iter().enumerate() {
            let Some((x, y)) = equi_keys(c, &left.cols, lk.ids) else { continue };
            let Expr::Column(yid) = y else { continue };
            let Some(col) = lk.ids.iter().position(|&i| i == yid) else { continue };
            let key = self.compile(&x, &left.cols)?;
            let total = t.stats.rows(t);
            let (path, per) = if col == t.pk {
                (Path::Point(key), 1.0)
            } else if let Some(ix) = t.index_on(col) {
                let unique = t.indexes[ix].2;
                let per = if unique { 1.0 } else { total / self.est.ndv(yid).unwrap_or(200.0).max(1.0) };
                (Path::IndexPoint(ix, key), per)
            } else {
                continue;
            };
            if chosen.as_ref().is_none_or(|(_, _, p)| per < *p) {
                chosen = Some((path, ci, per));
            }
        }
        let Some((path, used, per)) = chosen else { return Ok(None) };
        let out: Vec<usize> = (0..lk.ids.len()).filter(|&i| self.required.contains(&lk.ids[i])).collect();
        let layout: Vec<ColId> = out.iter().map(|&i| lk.ids[i]).collect();
        let filter =
            Expr::and_all(own.iter().map(|p| self.compile(p, &layout)).collect::<SqlResult<Vec<_>>>()?);
        let mut both = left.cols.clone();
        both.extend_from_slice(&layout);
        // The key equality is re-checked with the rest (the inner row is read after its
        // index entry).
        let extra: Vec<Expr> =
            conds.iter().enumerate().filter(|(i, _)| *i != used).map(|(_, e)| e.clone()).collect();
        let mut extra_c = extra.iter().map(|e| self.compile(e, &both)).collect::<SqlResult<Vec<_>>>()?;
        extra_c.insert(0, self.compile(&conds[used], &both)?);
        let extra_c = Expr::and_all(extra_c);
        let own_sel: f64 = own.iter().map(|p| self.est.selectivity(p)).product();
        let c = left.cost + left.rows * (cost::LOOKUP + per * cost::RANDOM_ROW) + rows * cost::CPU_ROW;
        let _ = (own_sel, right_plan);
        let cols = if kind.left_only() { left.cols.clone() } else { both };
        let spec = ScanSpec { table: lk.table.clone(), alias: lk.alias.to_string(), path, cols: out, filter };
        let order = left.order.clone();
        let op =
            PhysOp::IndexJoin { kind, left: Box::new(left.clone()), inner: Box::new(spec), extra: extra_c };
        Ok(Some(self.node(op, cols, rows, c, order)))
    }

    /// Outer, semi and anti joins: sides kept (right joins swapped to left), method chosen.
    pub(crate) fn outer_join(
        &mut self,
        kind: JoinKind,
        left: &Logical,
        right: &Logical,
        on: Option<&Expr>,
        preds: Vec<Expr>,
    ) -> SqlResult<PhysNode> {
        if kind == JoinKind::Right {
            // Same rows with the sides swapped; the output order of columns does not matter to
            // the parent, which reads them by id.
            return self.outer_join(JoinKind::Left, right, left, on, preds);
        }
        let lids = left.output();
        let rids = right.output();
        // Conjuncts from above on the left side alone can filter it first (not for FULL).
        let (mut lpush, mut above): (Vec<Expr>, Vec<Expr>) = (Vec::new(), Vec::new());
        for p in preds {
            if kind != JoinKind::Full && p.columns_all(&|c| lids.contains(&c)) {
                lpush.push(p);
            } else {
                above.push(p);
            }
        }
        // ON conjuncts on the right side alone filter it before the join (not for FULL).
        let mut on_conj = Vec::new();
        if let Some(on) = on {
            on.clone().conjuncts(&mut on_conj);
        }
        let (rpush, conds): (Vec<Expr>, Vec<Expr>) = on_conj.into_iter().partition(|e| {
            kind != JoinKind::Full && e.columns_all(&|c| rids.contains(&c)) && {
                let mut any = false;
                e.columns(&mut |_| any = true);
                any
            }
        });
        let lp = self.plan(left, lpush)?;
        let rp = self.plan(right, rpush.clone())?;
        let rows = match kind {
            JoinKind::Semi => cost::filtered(lp.rows, 0.5),
            JoinKind::Anti | JoinKind::AntiNullAware => cost::filtered(lp.rows, 0.5),
            _ => {
                let mut r = lp.rows * rp.rows;
                for c in &conds {
                    r *= self.est.selectivity(c);
                }
                r.max(lp.rows)
            }
        };
        let rel = Rel { logical: right, plan: rp.clone(), preds: rpush };
        let node = if kind == JoinKind::Full || kind == JoinKind::AntiNullAware {
            self.hash_or_loop(kind, lp, rp, conds, rows)?
        } else {
            self.join_pair(kind, lp, rp, conds, Some(&rel), rows)?
        };
        self.filter_node(node, above)
    }
}
