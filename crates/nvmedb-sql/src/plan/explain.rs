//! EXPLAIN and EXPLAIN ANALYZE text, in PostgreSQL's layout: one line per operator with its
//! estimated cost, rows and width (and, with ANALYZE, the actual time to the first and the
//! last row, rows and loops), its details indented below it, its inputs after `->  `.
//!
//! Owns: [`explain`] and [`NodeStats`] (what the executor measured per node). Projections
//! are not shown (PostgreSQL computes them inside the operators); a hash join's build input
//! shows under a `Hash` line, an index nested loop's inner side as the index scan it runs per
//! outer row. Invariant: every expression prints with the names of the columns it reads
//! (`alias.column`), whatever positions they have in the row.

use super::logical::{ApplyKind, ColId, Cols, JoinKind, SetOpKind};
use super::physical::{Path, PhysNode, PhysOp, ScanSpec};
use super::QueryPlan;
use crate::expr::display::Shown;
use crate::expr::Expr;
use crate::types::SqlType;
use std::fmt::Write;
use std::time::Duration;

/// What one operator did (EXPLAIN ANALYZE).
#[derive(Debug, Clone, Default)]
pub struct NodeStats {
    /// Rows output, over all loops.
    pub rows: u64,
    /// Times the operator was started.
    pub loops: u64,
    /// Time to its first row, summed over loops.
    pub first: Duration,
    /// Time to its last row, summed over loops.
    pub total: Duration,
    /// Extra lines (`Sort Method: …`, `Batches: …`).
    pub notes: Vec<String>,
}

struct Ctx<'a> {
    cols: &'a Cols,
    stats: Option<&'a [NodeStats]>,
    out: Vec<String>,
}

fn width(cols: &Cols, ids: &[ColId]) -> usize {
    ids.iter()
        .map(|&c| match cols.get(c).ty {
            SqlType::Bool => 1,
            SqlType::Int2 => 2,
            SqlType::Int4 | SqlType::Date => 4,
            SqlType::Int8 | SqlType::Float8 | SqlType::Timestamp => 8,
            SqlType::Interval => 16,
            SqlType::Bpchar(n) | SqlType::Varchar(n) if n < 256 => n as usize + 1,
            SqlType::Numeric { .. } => 12,
            _ => 32,
        })
        .sum()
}

fn show(e: &Expr, layout: &[ColId], cols: &Cols) -> String {
    let name = |p: usize| layout.get(p).map_or_else(|| format!("${p}"), |&id| cols.display(id));
    Shown { expr: e, name: &name }.to_string()
}

fn keys(es: &[Expr], layout: &[ColId], cols: &Cols) -> String {
    es.iter().map(|e| show(e, layout, cols)).collect::<Vec<_>>().join(", ")
}

fn join_name(kind: JoinKind) -> &'static str {
    match kind {
        JoinKind::Inner => "",
        JoinKind::Left => " Left",
        JoinKind::Right => " Right",
        JoinKind::Full => " Full",
        JoinKind::Semi => " Semi",
        JoinKind::Anti | JoinKind::AntiNullAware => " Anti",
    }
}

fn scan_title(s: &ScanSpec) -> String {
    let t = &s.table;
    let on = if s.alias == t.name { t.name.clone() } else { format!("{} {}", t.name, s.alias) };
    match &s.path {
        Path::Full => format!("Seq Scan on {on}"),
        Path::Point(_) | Path::Range(..) => format!("Index Scan using {}_pkey on {on}", t.name),
        Path::IndexPoint(ix, _) | Path::IndexRange(ix, ..) => {
            format!("Index Scan using {} on {on}", t.indexes[*ix].0)
        }
        Path::Composite { key, .. } => format!("Index Scan using {} on {on}", t.composite[*key].def.name),
    }
}

/// `Index Cond` of a scan: keys over `seed` (the outer row of an index join).
fn index_cond(s: &ScanSpec, seed: &[ColId], cols: &Cols, scan_ids: &[ColId]) -> Option<String> {
    let t = &s.table;
    let key_name = |col: usize| {
        let name = &t.columns[col].name;
        let _ = scan_ids;
        name.clone()
    };
    let k = |e: &Expr| show(e, seed, cols);
    Some(match &s.path {
        Path::Full => return None,
        Path::Point(e) => format!("({} = {})", key_name(t.pk), k(e)),
        Path::IndexPoint(ix, e) => format!("({} = {})", key_name(t.indexes[*ix].1), k(e)),
        Path::Composite { key, eq, lo, hi } => {
            let cols = &t.composite[*key].columns;
            let mut parts: Vec<String> =
                eq.iter().zip(cols).map(|(e, &c)| format!("({} = {})", key_name(c), k(e))).collect();
            if let Some(&c) = cols.get(eq.len()) {
                if let Some((e, incl)) = lo {
                    parts.push(format!("({} {} {})", key_name(c), if *incl { ">=" } else { ">" }, k(e)));
                }
                if let Some((e, incl)) = hi {
                    parts.push(format!("({} {} {})", key_name(c), if *incl { "<=" } else { "<" }, k(e)));
                }
            }
            format!("({})", parts.join(" AND "))
        }
        Path::Range(lo, hi) | Path::IndexRange(_, lo, hi) => {
            let col = match &s.path {
                Path::IndexRange(ix, ..) => t.indexes[*ix].1,
                _ => t.pk,
            };
            let mut parts = Vec::new();
            if let Some((e, incl)) = lo {
                parts.push(format!("({} {} {})", key_name(col), if *incl { ">=" } else { ">" }, k(e)));
            }
            if let Some((e, incl)) = hi {
                parts.push(format!("({} {} {})", key_name(col), if *incl { "<=" } else { "<" }, k(e)));
            }
            if parts.is_empty() {
                return None;
            }
            parts.join(" AND ")
        }
    })
}

impl Ctx<'_> {
    fn line(&mut self, depth: usize, title: &str, node: Option<&PhysNode>) {
        let mut s = String::new();
        if depth > 0 {
            s.push_str(&" ".repeat(depth * 6 - 4));
            s.push_str("->  ");
        }
        s.push_str(title);
        if let Some(n) = node {
            let _ = write!(
                s,
                "  (cost=0.00..{:.2} rows={:.0} width={})",
                n.cost,
                n.rows.max(1.0).round(),
                width(self.cols, &n.cols)
            );
            if let Some(st) = self.stats.and_then(|v| v.get(n.id)) {
                if st.loops == 0 {
                    s.push_str(" (never executed)");
                } else {
                    let l = st.loops as f64;
                    let _ = write!(
                        s,
                        " (actual time={:.3}..{:.3} rows={:.0} loops={})",
                        st.first.as_secs_f64() * 1e3 / l,
                        st.total.as_secs_f64() * 1e3 / l,
                        st.rows as f64 / l,
                        st.loops
                    );
                }
            }
        }
        self.out.push(s);
    }

    fn detail(&mut self, depth: usize, text: String) {
        let indent = if depth == 0 { 2 } else { depth * 6 + 2 };
        self.out.push(format!("{}{}", " ".repeat(indent), text));
    }

    fn notes(&mut self, depth: usize, n: &PhysNode) {
        if let Some(st) = self.stats.and_then(|v| v.get(n.id)) {
            for note in st.notes.clone() {
                self.detail(depth, note);
            }
        }
    }

    fn node(&mut self, n: &PhysNode, depth: usize) {
        let cols = self.cols;
        match &n.op {
            PhysOp::Project(input, _) => self.node(input, depth),
            PhysOp::Result => self.line(depth, "Result", Some(n)),
            PhysOp::Values(_) => self.line(depth, "Values Scan on \"*VALUES*\"", Some(n)),
            PhysOp::Scan(s) => {
                self.line(depth, &scan_title(s), Some(n));
                if let Some(c) = index_cond(s, &[], cols, &n.cols) {
                    self.detail(depth, format!("Index Cond: {c}"));
                }
                if let Some(f) = &s.filter {
                    self.detail(depth, format!("Filter: {}", show(f, &n.cols, cols)));
                }
            }
            PhysOp::Filter(input, pred) => {
                self.line(depth, "Filter", Some(n));
                self.detail(depth, format!("Filter: {}", show(pred, &input.cols, cols)));
                self.node(input, depth + 1);
            }
            PhysOp::HashJoin { kind, left, right, left_keys, right_keys, extra } => {
                self.line(depth, &format!("Hash{} Join", join_name(*kind)), Some(n));
                let conds: Vec<String> = left_keys
                    .iter()
                    .zip(right_keys)
                    .map(|(l, r)| format!("({} = {})", show(l, &left.cols, cols), show(r, &right.cols, cols)))
                    .collect();
                self.detail(depth, format!("Hash Cond: {}", conds.join(" AND ")));
                if let Some(x) = extra {
                    let mut both = left.cols.clone();
                    both.extend_from_slice(&right.cols);
                    self.detail(depth, format!("Join Filter: {}", show(x, &both, cols)));
                }
                self.notes(depth, n);
                self.node(left, depth + 1);
                self.line(depth + 1, "Hash", None);
                self.node(right, depth + 2);
            }
            PhysOp::IndexJoin { kind, left, inner, extra } => {
                self.line(
                    depth,
                    &format!(
                        "Nested Loop{}{}",
                        join_name(*kind),
                        if *kind == JoinKind::Inner { "" } else { " Join" }
                    ),
                    Some(n),
                );
                let inner_ids: Vec<ColId> =
                    n.cols.get(left.cols.len()..).map(<[ColId]>::to_vec).unwrap_or_default();
                if let Some(x) = extra {
                    let mut both = left.cols.clone();
                    both.extend_from_slice(&inner_ids);
                    if inner_ids.len() + left.cols.len() == both.len() && !kind.left_only() {
                        self.detail(depth, format!("Join Filter: {}", show(x, &both, cols)));
                    }
                }
                self.node(left, depth + 1);
                self.line(depth + 1, &scan_title(inner), None);
                if let Some(c) = index_cond(inner, &left.cols, cols, &inner_ids) {
                    self.detail(depth + 1, format!("Index Cond: {c}"));
                }
            }
            PhysOp::NestedLoop { kind, left, right, cond } => {
                self.line(
                    depth,
                    &format!(
                        "Nested Loop{}{}",
                        join_name(*kind),
                        if *kind == JoinKind::Inner { "" } else { " Join" }
                    ),
                    Some(n),
                );
                if let Some(c) = cond {
                    let mut both = left.cols.clone();
                    both.extend_from_slice(&right.cols);
                    self.detail(depth, format!("Join Filter: {}", show(c, &both, cols)));
                }
                self.node(left, depth + 1);
                self.line(depth + 1, "Materialize", None);
                self.node(right, depth + 2);
            }
            PhysOp::HashAgg { input, group, .. } => {
                self.line(depth, if group.is_empty() { "Aggregate" } else { "HashAggregate" }, Some(n));
                if !group.is_empty() {
                    self.detail(depth, format!("Group Key: {}", keys(group, &input.cols, cols)));
                }
                self.notes(depth, n);
                self.node(input, depth + 1);
            }
            PhysOp::Window { input, .. } | PhysOp::ProjectSet { input, .. } => {
                self.line(depth, row_calls_title(&n.op), Some(n));
                self.node(input, depth + 1);
            }
            PhysOp::Sort { input, keys: ks, .. } => {
                self.line(depth, "Sort", Some(n));
                let k: Vec<String> = ks
                    .iter()
                    .map(|k| {
                        let mut s = show(&k.expr, &input.cols, cols);
                        if !k.asc {
                            s.push_str(" DESC");
                        }
                        if k.nulls_first == k.asc {
                            s.push_str(if k.nulls_first { " NULLS FIRST" } else { " NULLS LAST" });
                        }
                        s
                    })
                    .collect();
                self.detail(depth, format!("Sort Key: {}", k.join(", ")));
                self.notes(depth, n);
                self.node(input, depth + 1);
            }
            PhysOp::Limit { input, .. } => {
                self.line(depth, "Limit", Some(n));
                self.node(input, depth + 1);
            }
            PhysOp::Distinct(input) => {
                self.line(depth, "HashAggregate", Some(n));
                self.detail(
                    depth,
                    format!(
                        "Group Key: {}",
                        input.cols.iter().map(|&c| cols.display(c)).collect::<Vec<_>>().join(", ")
                    ),
                );
                self.notes(depth, n);
                self.node(input, depth + 1);
            }
            PhysOp::SetOp { op, all, left, right } => {
                let title = match (op, all) {
                    (SetOpKind::Union, true) => "Append".to_string(),
                    (op, all) => format!("HashSetOp {:?}{}", op, if *all { " All" } else { "" }),
                };
                self.line(depth, &title, Some(n));
                self.node(left, depth + 1);
                self.node(right, depth + 1);
            }
            PhysOp::Apply { input, sub, kind, .. } => {
                let k = match kind {
                    ApplyKind::Scalar => "Scalar",
                    ApplyKind::Exists => "Exists",
                    ApplyKind::In(_) => "In",
                };
                self.line(depth, &format!("Subquery Apply ({k}, per row)"), Some(n));
                self.node(input, depth + 1);
                self.node(sub, depth + 1);
            }
        }
    }
}

/// The EXPLAIN lines of `plan` (with `stats`: EXPLAIN ANALYZE's actual numbers).
pub fn explain(plan: &QueryPlan, stats: Option<&[NodeStats]>) -> Vec<String> {
    let mut cx = Ctx { cols: &plan.cols, stats, out: Vec::new() };
    cx.node(&plan.root, 0);
    for (i, ip) in plan.initplans.iter().enumerate() {
        cx.detail(0, format!("InitPlan {} (returns $InitPlan{})", i + 1, i + 1));
        cx.node(ip, 1);
    }
    cx.out
}

/// The title of a node that adds computed columns to each input row.
fn row_calls_title(op: &PhysOp) -> &'static str {
    match op {
        PhysOp::Window { .. } => "WindowAgg",
        _ => "ProjectSet",
    }
}
