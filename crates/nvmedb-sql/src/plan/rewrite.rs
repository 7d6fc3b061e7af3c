//! Rewrites of the logical plan before physical planning: subqueries decorrelated into joins,
//! and outer joins that a filter makes inner.
//!
//! Owns: the rules. `WHERE EXISTS (…)` / `NOT EXISTS` / `x IN (…)` / `x NOT IN (…)` become
//! semi, anti and NULL-aware anti joins when the subquery's correlated predicates can be
//! pulled up into the join condition; a correlated scalar subquery over an aggregate without
//! GROUP BY whose correlated predicates are equalities becomes a left join with the aggregate
//! grouped by the inner sides of those equalities (not when it counts: a missing group must
//! count 0, not NULL). What cannot be rewritten stays an Apply, run per row. A left join under
//! a filter that rejects NULLs of its right side is an inner join. Invariant: every rule keeps
//! the rows and columns each node outputs (a rewritten subquery's value keeps its column id).

use super::logical::{AggCall, ApplyKind, ColId, JoinKind, Logical};
use crate::expr::{AggFunc, BinOp, Expr};
use std::collections::HashSet;

/// Applies every rule, bottom up.
pub fn rewrite(plan: Logical) -> Logical {
    rw(plan)
}

fn rw(plan: Logical) -> Logical {
    match plan {
        // The filter's applies are rewritten by `filter`, which sees the conjuncts using them.
        Logical::Filter { input, pred } => filter(*input, pred),
        Logical::Apply { input, sub, kind, col } => {
            let input = rw(*input);
            let sub = rw(*sub);
            scalar_apply(input, sub, kind, col)
        }
        Logical::Project { input, exprs } => Logical::Project { input: Box::new(rw(*input)), exprs },
        Logical::Join { kind, left, right, on } => {
            Logical::Join { kind, left: Box::new(rw(*left)), right: Box::new(rw(*right)), on }
        }
        Logical::Aggregate { input, group, aggs } => {
            Logical::Aggregate { input: Box::new(rw(*input)), group, aggs }
        }
        Logical::Window { input, calls } => Logical::Window { input: Box::new(rw(*input)), calls },
        Logical::ProjectSet { input, calls } => Logical::ProjectSet { input: Box::new(rw(*input)), calls },
        Logical::Sort { input, keys } => Logical::Sort { input: Box::new(rw(*input)), keys },
        Logical::Limit { input, limit, offset } => {
            Logical::Limit { input: Box::new(rw(*input)), limit, offset }
        }
        Logical::Distinct { input } => Logical::Distinct { input: Box::new(rw(*input)) },
        Logical::SetOp { op, all, left, right, cols } => {
            Logical::SetOp { op, all, left: Box::new(rw(*left)), right: Box::new(rw(*right)), cols }
        }
        leaf => leaf,
    }
}

/// A filter over (possibly) a chain of applies: EXISTS / IN conjuncts become joins.
fn filter(input: Logical, pred: Expr) -> Logical {
    let mut raw = Vec::new();
    pred.conjuncts(&mut raw);
    let mut conj = Vec::new();
    for c in raw {
        factor_or(c, &mut conj);
    }
    // Peel the applies directly below the filter (bottom one last).
    let mut applies = Vec::new();
    let mut base = input;
    loop {
        match base {
            Logical::Apply { input, sub, kind, col } => {
                applies.push((rw(*sub), kind, col));
                base = *input;
            }
            other => {
                base = rw(other);
                break;
            }
        }
    }
    applies.reverse();
    let mut plan = base;
    for (sub, kind, col) in applies {
        // The conjunct using this subquery's result alone, if any: `col` or `NOT col`.
        let pos = conj.iter().position(|c| match c {
            Expr::Column(c) => *c == col,
            Expr::Not(x) => matches!(x.as_ref(), Expr::Column(c) if *c == col),
            _ => false,
        });
        let used_elsewhere = |conj: &[Expr], skip: Option<usize>| {
            conj.iter().enumerate().any(|(i, e)| {
                Some(i) != skip && {
                    let mut hit = false;
                    e.columns(&mut |c| hit |= c == col);
                    hit
                }
            })
        };
        let joined = match (pos, &kind) {
            (Some(p), ApplyKind::Exists | ApplyKind::In(_)) if !used_elsewhere(&conj, Some(p)) => {
                let negated = matches!(conj[p], Expr::Not(_));
                semi_join(&plan, &sub, &kind, negated).map(|j| (p, j))
            }
            _ => None,
        };
        plan = match joined {
            Some((p, j)) => {
                conj.remove(p);
                j
            }
            None => scalar_apply(plan, sub, kind, col),
        };
    }
    plan = simplify_outer(plan, &conj);
    Logical::filter(plan, Expr::and_all(conj))
}

/// The disjuncts of an OR tree.
fn disjuncts(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::Binary(BinOp::Or, a, b, _) => {
            disjuncts(*a, out);
            disjuncts(*b, out);
        }
        other => out.push(other),
    }
}

/// Appends `e` to `out` as conjuncts, an OR's conjuncts common to all its branches factored
/// out: `(a AND x) OR (a AND y)` is `a AND (x OR y)` (TPC-H Q19's join condition sits in every
/// branch).
pub fn factor_or(e: Expr, out: &mut Vec<Expr>) {
    if !matches!(e, Expr::Binary(BinOp::Or, ..)) {
        out.push(e);
        return;
    }
    let mut ds = Vec::new();
    disjuncts(e, &mut ds);
    let branches: Vec<Vec<Expr>> = ds
        .into_iter()
        .map(|d| {
            let mut c = Vec::new();
            d.conjuncts(&mut c);
            c
        })
        .collect();
    let common: Vec<Expr> =
        branches[0].iter().filter(|c| branches[1..].iter().all(|b| b.contains(c))).cloned().collect();
    let rest: Vec<Vec<Expr>> =
        branches.into_iter().map(|b| b.into_iter().filter(|c| !common.contains(c)).collect()).collect();
    let any_empty = rest.iter().any(Vec::is_empty);
    out.extend(common);
    if !any_empty {
        let ors = rest
            .into_iter()
            .map(|b| Expr::and_all(b).expect("not empty"))
            .reduce(|a, b| Expr::Binary(BinOp::Or, Box::new(a), Box::new(b), crate::types::SqlType::Bool));
        out.extend(ors);
    }
}

/// The subquery `sub` as a semi or anti join of `left`, if its correlation can be pulled up.
fn semi_join(left: &Logical, sub: &Logical, kind: &ApplyKind, negated: bool) -> Option<Logical> {
    let outer: HashSet<ColId> = left.output().into_iter().collect();
    let (core, mut conds, value) = match kind {
        ApplyKind::Exists => {
            let (core, conds) = pull_up(strip_top(sub), &outer)?;
            (core, conds, None)
        }
        ApplyKind::In(x) => {
            if sub.free_columns().is_empty() {
                let out = sub.output();
                let v = Expr::Column(*out.first()?);
                (sub.clone(), vec![], Some((x.clone(), v)))
            } else {
                // Project([y]) over the correlated core: the condition reads y's expression.
                let Logical::Project { input, exprs } = strip_distinct(sub) else { return None };
                let [(_, y)] = exprs.as_slice() else { return None };
                let (core, conds) = pull_up(input, &outer)?;
                (core, conds, Some((x.clone(), y.clone())))
            }
        }
        ApplyKind::Scalar => return None,
    };
    if let Some((x, y)) = value {
        conds.insert(0, Expr::Binary(BinOp::Eq, Box::new(x), Box::new(y), crate::types::SqlType::Bool));
    }
    let kind = match (kind, negated) {
        (_, false) => JoinKind::Semi,
        (ApplyKind::In(_), true) => {
            if conds.len() > 1 {
                // NOT IN with correlation: NULL semantics across pulled predicates are subtle;
                // leave it to the per-row apply.
                return None;
            }
            JoinKind::AntiNullAware
        }
        (_, true) => JoinKind::Anti,
    };
    Some(Logical::Join {
        kind,
        left: Box::new(left.clone()),
        right: Box::new(core),
        on: Expr::and_all(conds),
    })
}

/// EXISTS ignores its subquery's select list and duplicates.
fn strip_top(sub: &Logical) -> &Logical {
    match sub {
        Logical::Project { input, .. } | Logical::Distinct { input } => strip_top(input),
        other => other,
    }
}

fn strip_distinct(sub: &Logical) -> &Logical {
    match sub {
        Logical::Distinct { input } => strip_distinct(input),
        other => other,
    }
}

/// Splits the correlated conjuncts off the filter at the top of `sub` (through projections
/// that keep the columns they read); the rest must not be correlated.
fn pull_up(sub: &Logical, outer: &HashSet<ColId>) -> Option<(Logical, Vec<Expr>)> {
    let (core, conds) = match sub {
        Logical::Filter { input, pred } => {
            let mut conj = Vec::new();
            pred.clone().conjuncts(&mut conj);
            let (corr, local): (Vec<Expr>, Vec<Expr>) = conj.into_iter().partition(|e| {
                let mut hit = false;
                e.columns(&mut |c| hit |= outer.contains(&c));
                hit
            });
            (Logical::filter((**input).clone(), Expr::and_all(local)), corr)
        }
        other => (other.clone(), vec![]),
    };
    // What is left must be uncorrelated, and the pulled conditions may read only the outer
    // side and the core's output.
    if !core.free_columns().is_empty() {
        return None;
    }
    let produced: HashSet<ColId> = core.output().into_iter().collect();
    for c in &conds {
        if !c.columns_all(&|x| outer.contains(&x) || produced.contains(&x)) {
            return None;
        }
    }
    Some((core, conds))
}

/// A correlated scalar subquery over an ungrouped aggregate, as a left join with the
/// aggregate grouped by the correlation's inner sides; anything else stays an apply.
fn scalar_apply(input: Logical, sub: Logical, kind: ApplyKind, col: ColId) -> Logical {
    let keep = |input: Logical, sub: Logical, kind: ApplyKind| Logical::Apply {
        input: Box::new(input),
        sub: Box::new(sub),
        kind,
        col,
    };
    if !matches!(kind, ApplyKind::Scalar) || sub.free_columns().is_empty() {
        return keep(input, sub, kind);
    }
    let Logical::Project { input: agg_node, exprs } = &sub else { return keep(input, sub, kind) };
    let [(_, value)] = exprs.as_slice() else { return keep(input, sub, kind) };
    let Logical::Aggregate { input: below, group, aggs } = agg_node.as_ref() else {
        return keep(input, sub, kind);
    };
    if !group.is_empty()
        || aggs.iter().any(|(_, a): &(ColId, AggCall)| matches!(a.func, AggFunc::Count | AggFunc::CountStar))
    {
        return keep(input, sub, kind);
    }
    let outer: HashSet<ColId> = input.output().into_iter().collect();
    let Some((core, conds)) = pull_up(below, &outer) else { return keep(input, sub, kind) };
    // Every pulled condition must be inner = outer.
    let inner_cols: HashSet<ColId> = core.output().into_iter().collect();
    let mut keys = Vec::new();
    for c in &conds {
        let Expr::Binary(BinOp::Eq, a, b, _) = c else { return keep(input, sub, kind) };
        let side =
            |e: &Expr, set: &HashSet<ColId>| e.columns_all(&|x| set.contains(&x)) && !e.is_row_independent();
        if side(a, &inner_cols) && side(b, &outer) {
            keys.push(((**a).clone(), (**b).clone()));
        } else if side(b, &inner_cols) && side(a, &outer) {
            keys.push(((**b).clone(), (**a).clone()));
        } else {
            return keep(input, sub, kind);
        }
    }
    if keys.is_empty() {
        return keep(input, sub, kind);
    }
    // Group ids: fresh ids are not available here without the column table, so the inner
    // sides must be plain columns, which become their own group keys.
    let mut group = Vec::new();
    let mut on = Vec::new();
    for (inner, outer_e) in keys {
        let Expr::Column(ic) = inner else { return keep(input, sub, kind) };
        group.push((ic, Expr::Column(ic)));
        on.push(Expr::Binary(
            BinOp::Eq,
            Box::new(outer_e),
            Box::new(Expr::Column(ic)),
            crate::types::SqlType::Bool,
        ));
    }
    let mut out_exprs: Vec<(ColId, Expr)> = group.iter().map(|(g, _)| (*g, Expr::Column(*g))).collect();
    out_exprs.push((col, value.clone()));
    let agg = Logical::Aggregate { input: Box::new(core), group, aggs: aggs.clone() };
    let right = Logical::Project { input: Box::new(agg), exprs: out_exprs };
    Logical::Join {
        kind: JoinKind::Left,
        left: Box::new(input),
        right: Box::new(right),
        on: Expr::and_all(on),
    }
}

/// True if `e` is NULL (or false) whenever any column of `cols` it reads is NULL, so a
/// filter on it rejects the NULL-extended rows of an outer join.
fn rejects_nulls_of(e: &Expr, cols: &HashSet<ColId>) -> bool {
    match e {
        Expr::Binary(op, a, b, _)
            if op.is_comparison() || matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div) =>
        {
            rejects_nulls_of(a, cols) || rejects_nulls_of(b, cols)
        }
        Expr::Binary(BinOp::And, a, b, _) => rejects_nulls_of(a, cols) || rejects_nulls_of(b, cols),
        Expr::Column(c) => cols.contains(c),
        Expr::Like(a, _, _, _) | Expr::Cast(a, _) | Expr::Neg(a) => rejects_nulls_of(a, cols),
        Expr::IsNull(a, true) => rejects_nulls_of(a, cols),
        Expr::InList(a, _, _) => rejects_nulls_of(a, cols),
        _ => false,
    }
}

/// Turns outer joins directly under a filter into inner joins where the filter rejects the
/// NULL-extended rows.
fn simplify_outer(plan: Logical, conj: &[Expr]) -> Logical {
    match plan {
        Logical::Join {
            kind: kind @ (JoinKind::Left | JoinKind::Right | JoinKind::Full),
            left,
            right,
            on,
        } => {
            let lcols: HashSet<ColId> = left.output().into_iter().collect();
            let rcols: HashSet<ColId> = right.output().into_iter().collect();
            let rej_r = conj.iter().any(|e| rejects_nulls_of(e, &rcols));
            let rej_l = conj.iter().any(|e| rejects_nulls_of(e, &lcols));
            let kind = match kind {
                JoinKind::Left if rej_r => JoinKind::Inner,
                JoinKind::Right if rej_l => JoinKind::Inner,
                JoinKind::Full if rej_l && rej_r => JoinKind::Inner,
                JoinKind::Full if rej_r => JoinKind::Right,
                JoinKind::Full if rej_l => JoinKind::Left,
                k => k,
            };
            Logical::Join { kind, left, right, on }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SqlType;

    fn values(cols: &[ColId]) -> Logical {
        Logical::Values { rows: vec![], cols: cols.to_vec() }
    }

    fn eq(a: ColId, b: ColId) -> Expr {
        Expr::Binary(BinOp::Eq, Box::new(Expr::Column(a)), Box::new(Expr::Column(b)), SqlType::Bool)
    }

    #[test]
    fn exists_and_not_in_become_semi_and_anti_joins() {
        // outer(0, 1) WHERE EXISTS (SELECT * FROM inner(2, 3) WHERE 2 = 0) AND 1 NOT IN (SELECT 3 FROM inner)
        let sub = Logical::Filter { input: Box::new(values(&[2, 3])), pred: eq(2, 0) };
        let in_sub = Logical::Project { input: Box::new(values(&[4, 5])), exprs: vec![(6, Expr::Column(5))] };
        let plan = Logical::Apply {
            input: Box::new(Logical::Apply {
                input: Box::new(values(&[0, 1])),
                sub: Box::new(sub),
                kind: ApplyKind::Exists,
                col: 10,
            }),
            sub: Box::new(in_sub),
            kind: ApplyKind::In(Expr::Column(1)),
            col: 11,
        };
        let pred = Expr::and(Expr::Column(10), Expr::Not(Box::new(Expr::Column(11))));
        let out = rw(Logical::Filter { input: Box::new(plan), pred });
        let Logical::Join { kind: JoinKind::AntiNullAware, left, .. } = out else { panic!("{out:?}") };
        let Logical::Join { kind: JoinKind::Semi, on: Some(on), .. } = *left else { panic!("{left:?}") };
        assert_eq!(on, eq(2, 0));
    }

    #[test]
    fn a_correlated_aggregate_becomes_a_grouped_left_join_unless_it_counts() {
        let mk = |func| {
            let agg = Logical::Aggregate {
                input: Box::new(Logical::Filter { input: Box::new(values(&[2, 3])), pred: eq(2, 0) }),
                group: vec![],
                aggs: vec![(
                    4,
                    AggCall {
                        func,
                        arg: Expr::Column(3),
                        arg_ty: SqlType::Int4,
                        ty: SqlType::Int8,
                        distinct: false,
                        filter: None,
                        sep: String::new(),
                    },
                )],
            };
            let sub = Logical::Project { input: Box::new(agg), exprs: vec![(5, Expr::Column(4))] };
            rw(Logical::Apply {
                input: Box::new(values(&[0, 1])),
                sub: Box::new(sub),
                kind: ApplyKind::Scalar,
                col: 9,
            })
        };
        let out = mk(AggFunc::Max);
        let Logical::Join { kind: JoinKind::Left, right, .. } = &out else { panic!("{out:?}") };
        assert!(out.output().contains(&9));
        assert!(
            matches!(right.as_ref(), Logical::Project { input, .. } if matches!(input.as_ref(), Logical::Aggregate { group, .. } if group.len() == 1))
        );
        assert!(matches!(mk(AggFunc::Count), Logical::Apply { .. }));
    }
}
