//! The logical plan: what a query computes, as a tree of relational operators over column ids.
//!
//! Owns: [`Logical`] (the binder's output and the rewrites' input), [`ColId`] and the
//! statement's column table [`Cols`]. Every column a node outputs has a statement-wide id
//! (a table column of one FROM item, a computed select item, an aggregate, a subquery's
//! result), and expressions refer to columns by id ([`Expr::Column`] holds an id here), so
//! rewrites (predicate push-down, join reordering, decorrelation) move predicates between
//! nodes without renumbering. The physical planner maps ids to row positions. Invariant: an
//! expression of a node refers only to ids its inputs output (or, inside a correlated
//! subquery, to the enclosing query's ids, listed as the subquery's free columns).

use crate::catalog::TableInfo;
use crate::expr::{AggFunc, Expr};
use crate::types::SqlType;
use std::sync::Arc;

/// A statement-wide column id.
pub type ColId = usize;

/// What the statement knows of a column id.
#[derive(Debug, Clone)]
pub struct ColMeta {
    /// Column name (as a select item or table column calls it).
    pub name: String,
    /// The FROM item (alias) it comes from, if it is a table column.
    pub table: Option<String>,
    /// Type.
    pub ty: SqlType,
}

/// The columns of a statement, by id.
#[derive(Debug, Clone, Default)]
pub struct Cols(pub Vec<ColMeta>);

impl Cols {
    /// A new column; its id.
    pub fn add(&mut self, name: impl Into<String>, table: Option<String>, ty: SqlType) -> ColId {
        self.0.push(ColMeta { name: name.into(), table, ty });
        self.0.len() - 1
    }

    /// Column `id`.
    pub fn get(&self, id: ColId) -> &ColMeta {
        &self.0[id]
    }

    /// The qualified name EXPLAIN shows for column `id`.
    pub fn display(&self, id: ColId) -> String {
        let c = &self.0[id];
        match &c.table {
            Some(t) => format!("{t}.{}", c.name),
            None => c.name.clone(),
        }
    }
}

/// Kinds of join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    /// Pairs that satisfy the condition.
    Inner,
    /// Inner, plus left rows without a match (right side NULL).
    Left,
    /// Inner, plus right rows without a match (left side NULL).
    Right,
    /// Inner, plus unmatched rows of both sides.
    Full,
    /// Left rows with at least one match (left columns only).
    Semi,
    /// Left rows without a match (left columns only).
    Anti,
    /// Left rows without a match where the condition is NULL-aware (`NOT IN`): a NULL on
    /// either side of the key makes the row's result unknown, so it is dropped.
    AntiNullAware,
}

impl JoinKind {
    /// True if the join outputs only the left side's columns.
    pub fn left_only(self) -> bool {
        matches!(self, JoinKind::Semi | JoinKind::Anti | JoinKind::AntiNullAware)
    }

    /// The kind with the sides swapped, if there is one.
    pub fn swapped(self) -> Option<JoinKind> {
        Some(match self {
            JoinKind::Inner => JoinKind::Inner,
            JoinKind::Left => JoinKind::Right,
            JoinKind::Right => JoinKind::Left,
            JoinKind::Full => JoinKind::Full,
            _ => return None,
        })
    }

    /// The name EXPLAIN gives the join type.
    pub fn name(self) -> &'static str {
        match self {
            JoinKind::Inner => "Inner",
            JoinKind::Left => "Left",
            JoinKind::Right => "Right",
            JoinKind::Full => "Full",
            JoinKind::Semi => "Semi",
            JoinKind::Anti | JoinKind::AntiNullAware => "Anti",
        }
    }
}

/// An aggregate call.
#[derive(Debug, Clone)]
pub struct AggCall {
    /// Function.
    pub func: AggFunc,
    /// Argument (unused for `count(*)`).
    pub arg: Expr,
    /// Argument type.
    pub arg_ty: SqlType,
    /// Result type.
    pub ty: SqlType,
    /// `DISTINCT`: each distinct argument value counts once.
    pub distinct: bool,
    /// `FILTER (WHERE …)`: only rows that pass count.
    pub filter: Option<Expr>,
    /// `string_agg`'s separator (empty for the others).
    pub sep: String,
}

/// Window functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowFunc {
    /// `row_number()`
    RowNumber,
    /// `rank()`
    Rank,
    /// `dense_rank()`
    DenseRank,
    /// An aggregate over the frame.
    Agg(AggFunc),
}

/// A window function call.
#[derive(Debug, Clone)]
pub struct WindowCall {
    /// Function.
    pub func: WindowFunc,
    /// Argument (aggregates).
    pub arg: Expr,
    /// Argument type.
    pub arg_ty: SqlType,
    /// Result type.
    pub ty: SqlType,
    /// `PARTITION BY`.
    pub partition: Vec<Expr>,
    /// `ORDER BY`.
    pub order: Vec<SortSpec>,
    /// The frame ends at the current row's last peer (the default with ORDER BY: RANGE …
    /// CURRENT ROW); false: at the current row (ROWS … CURRENT ROW). Without ORDER BY the
    /// frame is the whole partition.
    pub range_frame: bool,
}

/// A set-returning function called in a select list.
#[derive(Debug, Clone)]
pub struct SrfCall {
    /// Function.
    pub func: crate::array::Srf,
    /// Arguments.
    pub args: Vec<Expr>,
    /// Result type (one value per row it returns).
    pub ty: SqlType,
    /// The array argument is a vector (subscripts from 0).
    pub vector: bool,
}

/// A sort key.
#[derive(Debug, Clone)]
pub struct SortSpec {
    /// What is sorted on.
    pub expr: Expr,
    /// Ascending.
    pub asc: bool,
    /// NULLs first.
    pub nulls_first: bool,
}

/// Set operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOpKind {
    /// `UNION`
    Union,
    /// `INTERSECT`
    Intersect,
    /// `EXCEPT`
    Except,
}

/// How a subquery's value is used by [`Logical::Apply`].
#[derive(Debug, Clone)]
pub enum ApplyKind {
    /// Its single value (NULL without rows; more than one row is an error).
    Scalar,
    /// Whether it has a row.
    Exists,
    /// Whether `expr` (over the outer row) equals one of its values (SQL `IN` semantics with
    /// NULLs).
    In(Expr),
}

/// A logical plan node.
#[derive(Debug, Clone)]
pub enum Logical {
    /// One row without columns (a SELECT without FROM).
    One,
    /// A table's rows; `cols[i]` is the id of engine column `i` (hidden ones included).
    Scan {
        /// The table.
        table: Arc<TableInfo>,
        /// The FROM item's alias.
        alias: String,
        /// Id of each engine column.
        cols: Vec<ColId>,
    },
    /// Literal rows.
    Values {
        /// Rows of expressions.
        rows: Vec<Vec<Expr>>,
        /// Output ids.
        cols: Vec<ColId>,
    },
    /// Rows of `input` that satisfy `pred`.
    Filter {
        /// Input.
        input: Box<Logical>,
        /// Predicate.
        pred: Expr,
    },
    /// Computed columns (the output is exactly `exprs`).
    Project {
        /// Input.
        input: Box<Logical>,
        /// (output id, expression).
        exprs: Vec<(ColId, Expr)>,
    },
    /// A join; the output is the left's columns then the right's (the left's only for
    /// semi and anti joins).
    Join {
        /// Kind.
        kind: JoinKind,
        /// Left input.
        left: Box<Logical>,
        /// Right input.
        right: Box<Logical>,
        /// Condition (None: every pair).
        on: Option<Expr>,
    },
    /// Grouping; output: group ids then aggregate ids.
    Aggregate {
        /// Input.
        input: Box<Logical>,
        /// (id, expression) per group key.
        group: Vec<(ColId, Expr)>,
        /// (id, call) per aggregate.
        aggs: Vec<(ColId, AggCall)>,
    },
    /// Window functions; output: the input's columns then one per call.
    Window {
        /// Input.
        input: Box<Logical>,
        /// (id, call).
        calls: Vec<(ColId, WindowCall)>,
    },
    /// The select list's set-returning functions, run in step for each input row: as many
    /// output rows as the longest call returns (the others padded with NULL), none when every
    /// call returns none; output: the input's columns then one per call.
    ProjectSet {
        /// Input.
        input: Box<Logical>,
        /// (id, call).
        calls: Vec<(ColId, SrfCall)>,
    },
    /// Ordering.
    Sort {
        /// Input.
        input: Box<Logical>,
        /// Keys.
        keys: Vec<SortSpec>,
    },
    /// LIMIT / OFFSET (row-independent expressions).
    Limit {
        /// Input.
        input: Box<Logical>,
        /// LIMIT.
        limit: Option<Expr>,
        /// OFFSET.
        offset: Option<Expr>,
    },
    /// Duplicate rows removed.
    Distinct {
        /// Input.
        input: Box<Logical>,
    },
    /// UNION / INTERSECT / EXCEPT [ALL]; both inputs have as many columns as `cols`.
    SetOp {
        /// Operation.
        op: SetOpKind,
        /// ALL.
        all: bool,
        /// Left input.
        left: Box<Logical>,
        /// Right input.
        right: Box<Logical>,
        /// Output ids.
        cols: Vec<ColId>,
    },
    /// For each input row, the subquery run with the row's values of the subquery's free
    /// columns; output: the input's columns then `col` (the subquery's value).
    Apply {
        /// Input.
        input: Box<Logical>,
        /// The subquery (may refer to the input's ids).
        sub: Box<Logical>,
        /// How its result is used.
        kind: ApplyKind,
        /// The result's id.
        col: ColId,
    },
}

impl Logical {
    /// The ids of the node's output columns, in order.
    pub fn output(&self) -> Vec<ColId> {
        let mut out = Vec::new();
        self.output_into(&mut out);
        out
    }

    fn output_into(&self, out: &mut Vec<ColId>) {
        match self {
            Logical::One => {}
            Logical::Scan { cols, .. } | Logical::Values { cols, .. } | Logical::SetOp { cols, .. } => {
                out.extend_from_slice(cols)
            }
            Logical::Filter { input, .. }
            | Logical::Sort { input, .. }
            | Logical::Limit { input, .. }
            | Logical::Distinct { input } => input.output_into(out),
            Logical::Project { exprs, .. } => out.extend(exprs.iter().map(|(c, _)| *c)),
            Logical::Join { kind, left, right, .. } => {
                left.output_into(out);
                if !kind.left_only() {
                    right.output_into(out);
                }
            }
            Logical::Aggregate { group, aggs, .. } => {
                out.extend(group.iter().map(|(c, _)| *c));
                out.extend(aggs.iter().map(|(c, _)| *c));
            }
            Logical::Window { input, calls } => {
                input.output_into(out);
                out.extend(calls.iter().map(|(c, _)| *c));
            }
            Logical::ProjectSet { input, calls } => {
                input.output_into(out);
                out.extend(calls.iter().map(|(c, _)| *c));
            }
            Logical::Apply { input, col, .. } => {
                input.output_into(out);
                out.push(*col);
            }
        }
    }

    /// Calls `f` with every column id an expression of this subtree reads (the free columns of
    /// a correlated subtree among them).
    pub fn referenced(&self, f: &mut dyn FnMut(ColId)) {
        let mut e = |x: &Expr| x.columns(f);
        self.exprs(&mut e);
        self.children().into_iter().for_each(|c| c.referenced(f));
    }

    /// The ids this subtree reads but does not produce: its free (correlated) columns.
    pub fn free_columns(&self) -> Vec<ColId> {
        let mut produced = std::collections::HashSet::new();
        self.produced(&mut produced);
        let mut free = Vec::new();
        self.referenced(&mut |c| {
            if !produced.contains(&c) && !free.contains(&c) {
                free.push(c);
            }
        });
        free
    }

    /// Every id produced anywhere in the subtree.
    pub fn produced(&self, set: &mut std::collections::HashSet<ColId>) {
        match self {
            Logical::Scan { cols, .. } | Logical::Values { cols, .. } | Logical::SetOp { cols, .. } => {
                set.extend(cols.iter().copied())
            }
            Logical::Project { exprs, .. } => set.extend(exprs.iter().map(|(c, _)| *c)),
            Logical::Aggregate { group, aggs, .. } => {
                set.extend(group.iter().map(|(c, _)| *c));
                set.extend(aggs.iter().map(|(c, _)| *c));
            }
            Logical::Window { calls, .. } => set.extend(calls.iter().map(|(c, _)| *c)),
            Logical::ProjectSet { calls, .. } => set.extend(calls.iter().map(|(c, _)| *c)),
            Logical::Apply { col, .. } => {
                set.insert(*col);
            }
            _ => {}
        }
        for c in self.children() {
            c.produced(set);
        }
    }

    /// The node's own expressions.
    fn exprs(&self, f: &mut dyn FnMut(&Expr)) {
        match self {
            Logical::Values { rows, .. } => rows.iter().flatten().for_each(f),
            Logical::Filter { pred, .. } => f(pred),
            Logical::Project { exprs, .. } => exprs.iter().for_each(|(_, e)| f(e)),
            Logical::Join { on: Some(e), .. } => f(e),
            Logical::Aggregate { group, aggs, .. } => {
                group.iter().for_each(|(_, e)| f(e));
                for (_, a) in aggs {
                    f(&a.arg);
                    if let Some(x) = &a.filter {
                        f(x);
                    }
                }
            }
            Logical::Window { calls, .. } => {
                for (_, c) in calls {
                    f(&c.arg);
                    c.partition.iter().for_each(&mut *f);
                    c.order.iter().for_each(|s| f(&s.expr));
                }
            }
            Logical::ProjectSet { calls, .. } => calls.iter().flat_map(|(_, c)| &c.args).for_each(f),
            Logical::Sort { keys, .. } => keys.iter().for_each(|s| f(&s.expr)),
            Logical::Limit { limit, offset, .. } => {
                limit.iter().chain(offset.iter()).for_each(f);
            }
            Logical::Apply { kind: ApplyKind::In(e), .. } => f(e),
            _ => {}
        }
    }

    /// The node's inputs.
    pub fn children(&self) -> Vec<&Logical> {
        match self {
            Logical::One | Logical::Scan { .. } | Logical::Values { .. } => vec![],
            Logical::Filter { input, .. }
            | Logical::Project { input, .. }
            | Logical::Aggregate { input, .. }
            | Logical::Window { input, .. }
            | Logical::ProjectSet { input, .. }
            | Logical::Sort { input, .. }
            | Logical::Limit { input, .. }
            | Logical::Distinct { input } => vec![input],
            Logical::Join { left, right, .. } | Logical::SetOp { left, right, .. } => vec![left, right],
            Logical::Apply { input, sub, .. } => vec![input, sub],
        }
    }

    /// `input` filtered by `pred` (no node for a missing predicate).
    pub fn filter(input: Logical, pred: Option<Expr>) -> Logical {
        match pred {
            None => input,
            Some(pred) => Logical::Filter { input: Box::new(input), pred },
        }
    }
}
