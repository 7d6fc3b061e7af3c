//! The physical plan and the planner that makes it from the logical one.
//!
//! Owns: [`PhysNode`] / [`PhysOp`] (the operator tree the executor instantiates; expressions
//! refer to row positions in their input, [`Expr::Outer`] to a correlated subquery's values),
//! [`ScanSpec`] and [`Path`] (how a table's rows are found), and [`Planner`]: predicate
//! push-down (through projections, below aggregates on group keys, into scans, where they
//! choose the access path), column pruning (a scan decodes and outputs only the columns some
//! expression or the result reads), ORDER BY on a key or indexed prefix read in index order
//! (with a LIMIT) instead of sorted, Sort + LIMIT as a top-N sort, and the rest of the
//! operators one for one. Joins are planned by [`super::joins`]. Invariant: every node's
//! `cols` lists the column ids of its output row, position by position; a compiled
//! expression reads only positions of its input row (or correlation values).

use super::cost::{self, ColumnOrigin, Estimator};
use super::logical::{AggCall, ApplyKind, ColId, Cols, JoinKind, Logical, SetOpKind, SortSpec, WindowCall};
use crate::catalog::TableInfo;
use crate::error::{code, SqlError, SqlResult};
use crate::expr::{BinOp, Expr};
use std::collections::HashSet;
use std::sync::Arc;

/// How rows of one table are found. Key expressions read no column of the table: they are
/// evaluated over the seed row (nothing for a plain scan, the outer row for an index join).
#[derive(Debug, Clone)]
pub enum Path {
    /// Every row, in primary-key order.
    Full,
    /// Primary key equals the expression.
    Point(Expr),
    /// Primary key within bounds (expression, inclusive), in key order.
    Range(Option<(Expr, bool)>, Option<(Expr, bool)>),
    /// Secondary index `ix` equals the expression.
    IndexPoint(usize, Expr),
    /// Secondary index `ix` within bounds, in index order (NULLs last).
    IndexRange(usize, Option<(Expr, bool)>, Option<(Expr, bool)>),
    /// Multi-column key `key` ([`TableInfo::composite`]): its first columns equal `eq`, the
    /// next one (if any bound is given) within bounds; in key order.
    Composite {
        /// Position in [`TableInfo::composite`].
        key: usize,
        /// Values of the key's first `eq.len()` columns.
        eq: Vec<Expr>,
        /// Lower bound of the next column (inclusive when true).
        lo: Option<(Expr, bool)>,
        /// Upper bound of the next column (inclusive when true).
        hi: Option<(Expr, bool)>,
    },
}

/// A table access.
#[derive(Debug, Clone)]
pub struct ScanSpec {
    /// The table.
    pub table: Arc<TableInfo>,
    /// The FROM item's alias (EXPLAIN).
    pub alias: String,
    /// How rows are found.
    pub path: Path,
    /// Engine columns output, in order.
    pub cols: Vec<usize>,
    /// Predicate over the output row (every WHERE conjunct on this table, the ones the path
    /// used included: a row can change between its index entry and its read).
    pub filter: Option<Expr>,
}

/// A sort key over the input row.
#[derive(Debug, Clone)]
pub struct SortKey {
    /// What is sorted on.
    pub expr: Expr,
    /// Ascending.
    pub asc: bool,
    /// NULLs first.
    pub nulls_first: bool,
}

/// Physical operators.
#[derive(Debug, Clone)]
pub enum PhysOp {
    /// One row without columns.
    Result,
    /// Literal rows.
    Values(Vec<Vec<Expr>>),
    /// A table's rows.
    Scan(Box<ScanSpec>),
    /// Rows of the input that pass.
    Filter(Box<PhysNode>, Expr),
    /// Computed columns.
    Project(Box<PhysNode>, Vec<Expr>),
    /// Hash join: the right input is read into a hash table on `right_keys`, the left probes
    /// it with `left_keys`; `extra` (over left ++ right) must hold for a pair to match.
    HashJoin {
        /// Kind (Right is planned as Left with the sides swapped).
        kind: JoinKind,
        /// Probe side.
        left: Box<PhysNode>,
        /// Build side.
        right: Box<PhysNode>,
        /// Probe keys over the left row.
        left_keys: Vec<Expr>,
        /// Build keys over the right row.
        right_keys: Vec<Expr>,
        /// Further condition over the joined row.
        extra: Option<Expr>,
    },
    /// Index nested loop: for each left row, the right table's rows found by `inner.path`
    /// evaluated over the left row.
    IndexJoin {
        /// Inner, Left, Semi or Anti.
        kind: JoinKind,
        /// Outer side.
        left: Box<PhysNode>,
        /// The inner table access (path keys over the left row, filter over the inner row).
        inner: Box<ScanSpec>,
        /// Further condition over the joined row.
        extra: Option<Expr>,
    },
    /// Nested loop over a materialized right side.
    NestedLoop {
        /// Kind.
        kind: JoinKind,
        /// Outer side.
        left: Box<PhysNode>,
        /// Inner side (read once, kept in memory).
        right: Box<PhysNode>,
        /// Condition over the joined row (None: every pair).
        cond: Option<Expr>,
    },
    /// Grouping and aggregation in a hash table; output: group values then aggregates.
    HashAgg {
        /// Input.
        input: Box<PhysNode>,
        /// Group key expressions over the input row.
        group: Vec<Expr>,
        /// Aggregates (arguments over the input row).
        aggs: Vec<AggCall>,
    },
    /// Window functions; output: the input row then one value per call.
    Window {
        /// Input.
        input: Box<PhysNode>,
        /// Calls (partition and order keys over the input row).
        calls: Vec<WindowCall>,
    },
    /// Set-returning functions run in step; output: the input row then one value per call.
    ProjectSet {
        /// Input.
        input: Box<PhysNode>,
        /// (function, arguments over the input row, array argument is a vector).
        calls: Vec<(crate::array::Srf, Vec<Expr>, bool)>,
    },
    /// Sorting; with `limit` (LIMIT + OFFSET, row-independent) only the first rows are kept
    /// (top-N).
    Sort {
        /// Input.
        input: Box<PhysNode>,
        /// Keys over the input row.
        keys: Vec<SortKey>,
        /// Rows needed, if bounded.
        limit: Option<(Option<Expr>, Option<Expr>)>,
    },
    /// LIMIT / OFFSET.
    Limit {
        /// Input.
        input: Box<PhysNode>,
        /// LIMIT.
        limit: Option<Expr>,
        /// OFFSET.
        offset: Option<Expr>,
    },
    /// Duplicate rows removed (hash).
    Distinct(Box<PhysNode>),
    /// UNION [ALL] / INTERSECT / EXCEPT [ALL].
    SetOp {
        /// Operation.
        op: SetOpKind,
        /// ALL.
        all: bool,
        /// Left input.
        left: Box<PhysNode>,
        /// Right input.
        right: Box<PhysNode>,
    },
    /// A subquery run per input row with the row's correlation values.
    Apply {
        /// Input.
        input: Box<PhysNode>,
        /// The subquery.
        sub: Box<PhysNode>,
        /// How its result is used (`In`'s expression over the input row).
        kind: ApplyKind,
        /// Correlation values (over the input row) the subquery reads as [`Expr::Outer`].
        corr: Vec<Expr>,
    },
}

/// A physical plan node.
#[derive(Debug, Clone)]
pub struct PhysNode {
    /// The operator.
    pub op: PhysOp,
    /// Column ids of the output, by position.
    pub cols: Vec<ColId>,
    /// Estimated rows out.
    pub rows: f64,
    /// Estimated total cost (this node and its inputs).
    pub cost: f64,
    /// Node number (EXPLAIN ANALYZE's counters), unique within a statement.
    pub id: usize,
    /// Known order of the output (column ids, ascending).
    pub order: Vec<ColId>,
}

impl PhysNode {
    /// Position of column `id` in the output.
    pub fn pos(&self, id: ColId) -> Option<usize> {
        self.cols.iter().position(|&c| c == id)
    }

    /// The node's inputs.
    pub fn children(&self) -> Vec<&PhysNode> {
        match &self.op {
            PhysOp::Result | PhysOp::Values(_) | PhysOp::Scan(_) => vec![],
            PhysOp::Filter(i, _) | PhysOp::Project(i, _) | PhysOp::Distinct(i) => vec![i],
            PhysOp::HashAgg { input, .. }
            | PhysOp::Window { input, .. }
            | PhysOp::ProjectSet { input, .. }
            | PhysOp::Sort { input, .. }
            | PhysOp::Limit { input, .. } => vec![input],
            PhysOp::IndexJoin { left, .. } => vec![left],
            PhysOp::HashJoin { left, right, .. }
            | PhysOp::NestedLoop { left, right, .. }
            | PhysOp::SetOp { left, right, .. } => vec![left, right],
            PhysOp::Apply { input, sub, .. } => vec![input, sub],
        }
    }
}

/// True if `e` reads no column of the row it is evaluated over (correlation values and
/// parameters allowed): usable as a lookup key.
pub fn no_columns(e: &Expr) -> bool {
    let mut ok = true;
    e.walk(&mut |x| {
        ok &= !matches!(x, Expr::Column(_)) && !matches!(x, Expr::Func(f, _, _) if f.is_volatile())
    });
    ok
}

/// The physical planner of one statement.
pub struct Planner<'c> {
    pub(crate) cols: &'c Cols,
    pub(crate) est: Estimator,
    next_id: usize,
    /// Free columns of the correlated subqueries being planned, innermost last.
    pub(crate) outer: Vec<Vec<ColId>>,
    /// Every column id some expression or a result reads (scans output only these).
    pub(crate) required: HashSet<ColId>,
}

impl<'c> Planner<'c> {
    /// A planner over the statement's columns.
    pub fn new(cols: &'c Cols) -> Self {
        Self { cols, est: Estimator::default(), next_id: 0, outer: Vec::new(), required: HashSet::new() }
    }

    /// Number of nodes made so far.
    pub fn node_count(&self) -> usize {
        self.next_id
    }

    /// Plans a whole tree (a statement's root or an init plan).
    pub fn plan_root(&mut self, l: &Logical) -> SqlResult<PhysNode> {
        l.referenced(&mut |c| {
            self.required.insert(c);
        });
        self.required.extend(l.output());
        self.collect_origins(l);
        let mut node = self.plan(l, Vec::new())?;
        // The result's columns in the logical order (a join region may have reordered them).
        let want = l.output();
        if node.cols != want {
            let exprs = want
                .iter()
                .map(|id| self.compile(&Expr::Column(*id), &node.cols))
                .collect::<SqlResult<Vec<_>>>()?;
            let (rows, cost) = (node.rows, node.cost);
            node = self.node(PhysOp::Project(Box::new(node), exprs), want, rows, cost, vec![]);
        }
        Ok(node)
    }

    fn collect_origins(&mut self, l: &Logical) {
        if let Logical::Scan { table, cols, .. } = l {
            for (i, id) in cols.iter().enumerate() {
                self.est.origins.insert(*id, ColumnOrigin { table: table.clone(), col: i });
            }
        }
        if let Logical::Project { exprs, .. } = l {
            // A renamed column keeps its origin (derived tables, CTEs).
            for (id, e) in exprs {
                if let Expr::Column(src) = e {
                    if let Some(o) = self.est.origins.get(src).cloned() {
                        self.est.origins.insert(*id, o);
                    }
                }
            }
        }
        for c in l.children() {
            self.collect_origins(c);
        }
        if let Logical::Project { exprs, .. } = l {
            for (id, e) in exprs {
                if let Expr::Column(src) = e {
                    if let Some(o) = self.est.origins.get(src).cloned() {
                        self.est.origins.insert(*id, o);
                    }
                }
            }
        }
    }

    /// A new node.
    pub(crate) fn node(
        &mut self,
        op: PhysOp,
        cols: Vec<ColId>,
        rows: f64,
        cost: f64,
        order: Vec<ColId>,
    ) -> PhysNode {
        self.next_id += 1;
        PhysNode { op, cols, rows, cost, id: self.next_id - 1, order }
    }

    /// Compiles `e` (over column ids) against the row layout `layout`: a column outside it is a
    /// correlation value of the subquery being planned.
    pub(crate) fn compile(&self, e: &Expr, layout: &[ColId]) -> SqlResult<Expr> {
        let mut e = e.clone();
        let mut missing = None;
        e.map_columns(&mut |c| match layout.iter().position(|&x| x == c) {
            Some(p) => Expr::Column(p),
            None => match self.outer.last().and_then(|o| o.iter().position(|&x| x == c)) {
                Some(k) => Expr::Outer(k),
                None => {
                    missing = Some(c);
                    Expr::Column(usize::MAX)
                }
            },
        });
        if let Some(c) = missing {
            return Err(SqlError::new(
                code::INTERNAL_ERROR,
                format!("planner: column {} is not available here", self.cols.display(c)),
            ));
        }
        Ok(e)
    }

    pub(crate) fn compile_all(&self, es: &[Expr], layout: &[ColId]) -> SqlResult<Vec<Expr>> {
        es.iter().map(|e| self.compile(e, layout)).collect()
    }

    /// `node` filtered by the conjuncts `preds` (over ids).
    pub(crate) fn filter_node(&mut self, node: PhysNode, preds: Vec<Expr>) -> SqlResult<PhysNode> {
        let Some(pred) = Expr::and_all(preds) else { return Ok(node) };
        let sel = self.est.selectivity(&pred);
        let c = self.compile(&pred, &node.cols)?;
        let (cols, rows, cost, order) = (
            node.cols.clone(),
            cost::filtered(node.rows, sel),
            node.cost + node.rows * cost::CPU_ROW,
            node.order.clone(),
        );
        Ok(self.node(PhysOp::Filter(Box::new(node), c), cols, rows, cost, order))
    }

    /// Plans `l` with the conjuncts `preds` (over ids) applied as low as they can go.
    pub(crate) fn plan(&mut self, l: &Logical, preds: Vec<Expr>) -> SqlResult<PhysNode> {
        self.plan_ordered(l, preds, None)
    }

    /// [`Planner::plan`], with a wanted output order (a LIMIT over ORDER BY): a scan reads an
    /// index in that order where one fits.
    pub(crate) fn plan_ordered(
        &mut self,
        l: &Logical,
        preds: Vec<Expr>,
        want: Option<ColId>,
    ) -> SqlResult<PhysNode> {
        match l {
            Logical::One => {
                let n = self.node(PhysOp::Result, vec![], 1.0, 0.0, vec![]);
                self.filter_node(n, preds)
            }
            Logical::Values { rows, cols } => {
                let compiled =
                    rows.iter().map(|r| self.compile_all(r, &[])).collect::<SqlResult<Vec<_>>>()?;
                let n = rows.len() as f64;
                let node = self.node(PhysOp::Values(compiled), cols.clone(), n, n * cost::CPU_ROW, vec![]);
                self.filter_node(node, preds)
            }
            Logical::Scan { table, alias, cols } => self.scan(table, alias, cols, preds, want),
            Logical::Filter { input, pred } => {
                let mut all = preds;
                pred.clone().conjuncts(&mut all);
                self.plan_ordered(input, all, want)
            }
            Logical::Project { input, exprs } => self.project(input, exprs, preds, want),
            Logical::Join { kind: JoinKind::Inner, .. } => self.region(l, preds),
            Logical::Join { kind, left, right, on } => {
                self.outer_join(*kind, left, right, on.as_ref(), preds)
            }
            Logical::Aggregate { input, group, aggs } => self.aggregate(input, group, aggs, preds),
            Logical::Window { input, calls } => self.window(input, calls, preds),
            Logical::ProjectSet { input, calls } => self.project_set(input, calls, preds),
            Logical::Sort { input, keys } => self.sort(input, keys, None, preds),
            Logical::Limit { input, limit, offset } => self.limit(input, limit, offset, preds),
            Logical::Distinct { input } => {
                let input = self.plan(input, vec![])?;
                let (cols, rows, c) =
                    (input.cols.clone(), input.rows, input.cost + input.rows * cost::HASH_BUILD);
                let node = self.node(PhysOp::Distinct(Box::new(input)), cols, rows, c, vec![]);
                self.filter_node(node, preds)
            }
            Logical::SetOp { op, all, left, right, cols } => {
                let l = self.plan(left, vec![])?;
                let r = self.plan(right, vec![])?;
                let rows = match op {
                    SetOpKind::Union => l.rows + r.rows,
                    _ => l.rows,
                };
                let c = l.cost + r.cost + (l.rows + r.rows) * cost::HASH_BUILD;
                let node = self.node(
                    PhysOp::SetOp { op: *op, all: *all, left: Box::new(l), right: Box::new(r) },
                    cols.clone(),
                    rows,
                    c,
                    vec![],
                );
                self.filter_node(node, preds)
            }
            Logical::Apply { input, sub, kind, col } => {
                let (below, above): (Vec<Expr>, Vec<Expr>) = preds.into_iter().partition(|p| {
                    let mut hit = false;
                    p.columns(&mut |c| hit |= c == *col);
                    !hit
                });
                let input = self.plan(input, below)?;
                let free = sub.free_columns();
                let corr = free
                    .iter()
                    .map(|c| self.compile(&Expr::Column(*c), &input.cols))
                    .collect::<SqlResult<Vec<_>>>()?;
                self.outer.push(free);
                self.collect_origins(sub);
                let sub_p = self.plan_root(sub);
                self.outer.pop();
                let sub_p = sub_p?;
                let kind_c = match kind {
                    ApplyKind::In(x) => ApplyKind::In(self.compile(x, &input.cols)?),
                    k => k.clone(),
                };
                let mut cols = input.cols.clone();
                cols.push(*col);
                let (rows, c) = (input.rows, input.cost + input.rows * sub_p.cost.max(1.0));
                let order = input.order.clone();
                let node = self.node(
                    PhysOp::Apply { input: Box::new(input), sub: Box::new(sub_p), kind: kind_c, corr },
                    cols,
                    rows,
                    c,
                    order,
                );
                self.filter_node(node, above)
            }
        }
    }

    fn project(
        &mut self,
        input: &Logical,
        exprs: &[(ColId, Expr)],
        preds: Vec<Expr>,
        want: Option<ColId>,
    ) -> SqlResult<PhysNode> {
        // Conjuncts over the projection's outputs are pushed below it, with the outputs
        // replaced by their expressions.
        let pushable = |e: &Expr| {
            let mut ok = true;
            e.walk(&mut |x| ok &= !matches!(x, Expr::Func(f, _, _) if f.is_volatile()));
            ok
        };
        let mut below = Vec::new();
        let mut above = Vec::new();
        for p in preds {
            let mut q = p.clone();
            let mut ok = true;
            q.map_columns(&mut |c| match exprs.iter().find(|(id, _)| *id == c) {
                Some((_, e)) => {
                    ok &= pushable(e);
                    e.clone()
                }
                None => Expr::Column(c),
            });
            if ok {
                below.push(q);
            } else {
                above.push(p);
            }
        }
        let want_below = want.and_then(|w| match exprs.iter().find(|(id, _)| *id == w) {
            Some((_, Expr::Column(src))) => Some(*src),
            _ => None,
        });
        let input = self.plan_ordered(input, below, want_below)?;
        let compiled =
            exprs.iter().map(|(_, e)| self.compile(e, &input.cols)).collect::<SqlResult<Vec<_>>>()?;
        // The order survives for columns passed through.
        let order: Vec<ColId> = input
            .order
            .iter()
            .map_while(|o| exprs.iter().find(|(_, e)| *e == Expr::Column(*o)).map(|(id, _)| *id))
            .collect();
        for (id, e) in exprs {
            if let Expr::Column(src) = e {
                if let Some(n) = self.est.ndv(*src) {
                    self.est.ndv_override.entry(*id).or_insert(n);
                }
            }
        }
        let cols = exprs.iter().map(|(id, _)| *id).collect();
        let (rows, c) = (input.rows, input.cost + input.rows * cost::CPU_ROW * 0.1);
        let node = self.node(PhysOp::Project(Box::new(input), compiled), cols, rows, c, order);
        self.filter_node(node, above)
    }

    fn aggregate(
        &mut self,
        input: &Logical,
        group: &[(ColId, Expr)],
        aggs: &[(ColId, AggCall)],
        preds: Vec<Expr>,
    ) -> SqlResult<PhysNode> {
        // Conjuncts on group keys only filter groups: they go below, on the key expressions.
        let mut below = Vec::new();
        let mut above = Vec::new();
        for p in preds {
            let on_keys =
                p.columns_all(&|c| group.iter().any(|(g, _)| *g == c) || !aggs.iter().any(|(a, _)| *a == c));
            let mut q = p.clone();
            q.map_columns(&mut |c| match group.iter().find(|(g, _)| *g == c) {
                Some((_, e)) => e.clone(),
                None => Expr::Column(c),
            });
            if on_keys && !group.is_empty() {
                below.push(q);
            } else {
                above.push(p);
            }
        }
        let input = self.plan(input, below)?;
        let group_c =
            group.iter().map(|(_, e)| self.compile(e, &input.cols)).collect::<SqlResult<Vec<_>>>()?;
        let aggs_c = aggs
            .iter()
            .map(|(_, a)| -> SqlResult<AggCall> {
                Ok(AggCall {
                    arg: self.compile(&a.arg, &input.cols)?,
                    filter: match &a.filter {
                        Some(f) => Some(self.compile(f, &input.cols)?),
                        None => None,
                    },
                    ..a.clone()
                })
            })
            .collect::<SqlResult<Vec<_>>>()?;
        // Groups: the product of the keys' distinct counts, at most half the input rows
        // (at least one group when grouping nothing).
        let rows = if group.is_empty() {
            1.0
        } else {
            let mut n = 1.0f64;
            for (_, e) in group {
                n *= match e {
                    Expr::Column(c) => self.est.ndv(*c).unwrap_or(input.rows * 0.1),
                    _ => input.rows * 0.1,
                }
                .max(1.0);
            }
            n.min((input.rows * 0.5).max(1.0))
        };
        for (id, _) in group {
            self.est.ndv_override.insert(*id, rows);
        }
        let mut cols: Vec<ColId> = group.iter().map(|(id, _)| *id).collect();
        cols.extend(aggs.iter().map(|(id, _)| *id));
        let c = input.cost + input.rows * (cost::HASH_PROBE + cost::CPU_ROW * aggs.len() as f64);
        let node = self.node(
            PhysOp::HashAgg { input: Box::new(input), group: group_c, aggs: aggs_c },
            cols,
            rows,
            c,
            vec![],
        );
        self.filter_node(node, above)
    }

    fn sort(
        &mut self,
        input: &Logical,
        keys: &[SortSpec],
        limit: Option<(Option<Expr>, Option<Expr>)>,
        preds: Vec<Expr>,
    ) -> SqlResult<PhysNode> {
        // With a LIMIT, an index in the first key's order avoids the sort.
        let want = match (keys.first(), &limit) {
            (Some(SortSpec { expr: Expr::Column(c), asc: true, nulls_first: false }), Some(_)) => Some(*c),
            _ => None,
        };
        let input = self.plan_ordered(input, preds, want)?;
        let ordered = keys.len() <= input.order.len()
            && keys
                .iter()
                .zip(&input.order)
                .all(|(k, o)| k.asc && !k.nulls_first && k.expr == Expr::Column(*o));
        if ordered {
            return Ok(input);
        }
        let keys_c = keys
            .iter()
            .map(|k| {
                Ok(SortKey {
                    expr: self.compile(&k.expr, &input.cols)?,
                    asc: k.asc,
                    nulls_first: k.nulls_first,
                })
            })
            .collect::<SqlResult<Vec<_>>>()?;
        let limit_c = match limit {
            Some((l, o)) => Some((
                l.map(|e| self.compile(&e, &[])).transpose()?,
                o.map(|e| self.compile(&e, &[])).transpose()?,
            )),
            None => None,
        };
        let order = keys
            .iter()
            .map_while(|k| match (&k.expr, k.asc, k.nulls_first) {
                (Expr::Column(c), true, false) => Some(*c),
                _ => None,
            })
            .collect();
        let (cols, rows, c) = (input.cols.clone(), input.rows, input.cost + cost::sort_cost(input.rows));
        Ok(self.node(
            PhysOp::Sort { input: Box::new(input), keys: keys_c, limit: limit_c },
            cols,
            rows,
            c,
            order,
        ))
    }

    fn limit(
        &mut self,
        input: &Logical,
        limit: &Option<Expr>,
        offset: &Option<Expr>,
        preds: Vec<Expr>,
    ) -> SqlResult<PhysNode> {
        // LIMIT over ORDER BY (possibly under the projection that drops hidden sort keys) is
        // a top-N sort.
        let inner = match input {
            Logical::Sort { input: si, keys } => {
                Some(self.sort(si, keys, Some((limit.clone(), offset.clone())), vec![])?)
            }
            Logical::Project { input: pi, exprs } if matches!(pi.as_ref(), Logical::Sort { .. }) => {
                let Logical::Sort { input: si, keys } = pi.as_ref() else { unreachable!() };
                let sorted = self.sort(si, keys, Some((limit.clone(), offset.clone())), vec![])?;
                let compiled = exprs
                    .iter()
                    .map(|(_, e)| self.compile(e, &sorted.cols))
                    .collect::<SqlResult<Vec<_>>>()?;
                let cols = exprs.iter().map(|(id, _)| *id).collect();
                let (rows, c) = (sorted.rows, sorted.cost);
                Some(self.node(PhysOp::Project(Box::new(sorted), compiled), cols, rows, c, vec![]))
            }
            _ => None,
        };
        let input = match inner {
            Some(n) => n,
            None => self.plan(input, vec![])?,
        };
        let rows = match limit {
            Some(Expr::Const(crate::types::Datum::Int(n))) => (*n as f64).min(input.rows),
            _ => input.rows,
        };
        let (cols, c, order) = (input.cols.clone(), input.cost, input.order.clone());
        let limit_c = limit.as_ref().map(|e| self.compile(e, &[])).transpose()?;
        let offset_c = offset.as_ref().map(|e| self.compile(e, &[])).transpose()?;
        let node = self.node(
            PhysOp::Limit { input: Box::new(input), limit: limit_c, offset: offset_c },
            cols,
            rows,
            c,
            order,
        );
        self.filter_node(node, preds)
    }

    /// A table scan with the conjuncts `preds` (over ids) on it: the access path they allow.
    pub(crate) fn scan(
        &mut self,
        table: &Arc<TableInfo>,
        alias: &str,
        ids: &[ColId],
        preds: Vec<Expr>,
        want: Option<ColId>,
    ) -> SqlResult<PhysNode> {
        let out: Vec<usize> = (0..ids.len()).filter(|&i| self.required.contains(&ids[i])).collect();
        let layout: Vec<ColId> = out.iter().map(|&i| ids[i]).collect();
        let total = table.stats.rows(table);
        let sel = preds.iter().map(|p| self.est.selectivity(p)).product::<f64>();
        let rows = cost::filtered(total, sel);
        let (path, path_cost) = self.choose_path(table, ids, &preds, total, want)?;
        let filter =
            Expr::and_all(preds.iter().map(|p| self.compile(p, &layout)).collect::<SqlResult<Vec<_>>>()?);
        let order = match &path {
            Path::Full | Path::Range(..) | Path::Point(_) => vec![ids[table.pk]],
            Path::IndexPoint(ix, _) | Path::IndexRange(ix, ..) => {
                vec![ids[table.indexes[*ix].1], ids[table.pk]]
            }
            Path::Composite { key, .. } => {
                let k = &table.composite[*key];
                let mut o: Vec<ColId> = k.columns.iter().map(|&c| ids[c]).collect();
                if !k.def.primary {
                    o.push(ids[table.pk]);
                }
                o
            }
        };
        let order: Vec<ColId> = order.into_iter().take_while(|c| layout.contains(c)).collect();
        let spec = ScanSpec { table: table.clone(), alias: alias.to_string(), path, cols: out, filter };
        let c = path_cost + rows * cost::CPU_ROW;
        Ok(self.node(PhysOp::Scan(Box::new(spec)), layout, rows, c, order))
    }

    /// The cheapest access path for conjuncts `preds` over table columns `ids`.
    fn choose_path(
        &self,
        table: &TableInfo,
        ids: &[ColId],
        preds: &[Expr],
        total: f64,
        want: Option<ColId>,
    ) -> SqlResult<(Path, f64)> {
        // (engine column, op, key expression) with the column on the left.
        let mut keyed: Vec<(usize, BinOp, Expr)> = Vec::new();
        for e in preds {
            if let Expr::Binary(op @ (BinOp::Eq | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), a, b, _) = e
            {
                let col_of = |x: &Expr| match x {
                    Expr::Column(c) => ids.iter().position(|i| i == c),
                    _ => None,
                };
                if let (Some(c), true) = (col_of(a), no_columns(b)) {
                    keyed.push((c, *op, self.compile(b, &[])?));
                } else if let (Some(c), true) = (col_of(b), no_columns(a)) {
                    keyed.push((c, op.flipped(), self.compile(a, &[])?));
                }
            }
        }
        let eq =
            |col: usize| keyed.iter().find(|(c, op, _)| *c == col && *op == BinOp::Eq).map(|k| k.2.clone());
        let range = |col: usize| {
            let (mut lo, mut hi) = (None, None);
            for (c, op, v) in &keyed {
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
        let range_sel = |col: usize, lo: &Option<(Expr, bool)>, hi: &Option<(Expr, bool)>| {
            let id = ids[col];
            let mut s = 1.0;
            for (b, op) in [(lo, BinOp::Ge), (hi, BinOp::Le)] {
                if let Some((e, _)) = b {
                    let p = Expr::Binary(
                        op,
                        Box::new(Expr::Column(id)),
                        Box::new(e.clone()),
                        crate::types::SqlType::Bool,
                    );
                    s *= self.est.selectivity(&p);
                }
            }
            s
        };
        let mut best = (Path::Full, total * cost::SEQ_ROW + cost::LOOKUP);
        let consider = |p: Path, c: f64, best: &mut (Path, f64)| {
            if c < best.1 {
                *best = (p, c);
            }
        };
        if let Some(v) = eq(table.pk) {
            return Ok((Path::Point(v), cost::LOOKUP + cost::RANDOM_ROW));
        }
        for (ix, (_, col, unique)) in table.indexes.iter().enumerate() {
            if let Some(v) = eq(*col) {
                let matches =
                    if *unique { 1.0 } else { total / self.est.ndv(ids[*col]).unwrap_or(200.0).max(1.0) };
                consider(Path::IndexPoint(ix, v), cost::LOOKUP + matches * cost::RANDOM_ROW, &mut best);
            }
        }
        // Multi-column keys: equality on a prefix of the key's columns, a range on the next.
        for (k, key) in table.composite.iter().enumerate() {
            let eqs: Vec<Expr> = key.columns.iter().map_while(|&c| eq(c)).collect();
            let next = key.columns.get(eqs.len()).copied();
            let (lo, hi) = next.map_or((None, None), range);
            if eqs.is_empty() && lo.is_none() && hi.is_none() {
                continue;
            }
            let mut s = 1.0;
            for &c in &key.columns[..eqs.len()] {
                s /= self.est.ndv(ids[c]).unwrap_or(200.0).max(1.0);
            }
            if let Some(c) = next {
                s *= range_sel(c, &lo, &hi);
            }
            let full = eqs.len() == key.columns.len();
            let rows = if full && key.def.unique { 1.0 } else { (total * s).max(1.0) };
            let per = if key.def.primary { cost::SEQ_ROW } else { cost::RANDOM_ROW };
            let path = Path::Composite { key: k, eq: eqs, lo, hi };
            if full && key.def.primary {
                return Ok((path, cost::LOOKUP + cost::RANDOM_ROW));
            }
            consider(path, cost::LOOKUP + rows * per, &mut best);
        }
        let (lo, hi) = range(table.pk);
        if lo.is_some() || hi.is_some() {
            let s = range_sel(table.pk, &lo, &hi);
            consider(Path::Range(lo, hi), cost::LOOKUP + total * s * cost::SEQ_ROW, &mut best);
        }
        for (ix, (_, col, _)) in table.indexes.iter().enumerate() {
            let (lo, hi) = range(*col);
            if lo.is_some() || hi.is_some() {
                let s = range_sel(*col, &lo, &hi);
                consider(
                    Path::IndexRange(ix, lo, hi),
                    cost::LOOKUP + total * s * cost::RANDOM_ROW,
                    &mut best,
                );
            }
        }
        // An ORDER BY … LIMIT on an indexed column reads the index in order and stops early.
        if let (Some(w), Path::Full) = (want, &best.0) {
            if let Some(col) = ids.iter().position(|&i| i == w) {
                if let Some(ix) = table.indexes.iter().position(|(_, c, _)| *c == col) {
                    return Ok((Path::IndexRange(ix, None, None), best.1));
                }
            }
        }
        Ok(best)
    }
}
