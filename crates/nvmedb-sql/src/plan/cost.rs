//! The cost model: row estimates (selectivities from statistics) and operator costs.
//!
//! Owns: the constants and formulas. Costs are in units of "one row handled in memory"; a
//! row read from a table through its index (a random heap access) costs [`RANDOM_ROW`], a
//! row of a scan in key order [`SEQ_ROW`], a lookup's descent [`LOOKUP`]. Selectivities:
//! an equality with a column is 1/ndv (PostgreSQL's 0.005 without statistics), a range
//! interpolates between the column's min and max where both are numbers or dates (1/3
//! otherwise), LIKE 0.1 (a prefix pattern 0.02), IS NULL the null fraction. Join sizes are
//! |L|·|R| / max(ndv(l), ndv(r)) per equality. Invariant: estimates are at least one row
//! for a non-empty input, so products never collapse to zero.

use super::logical::ColId;
use crate::catalog::TableInfo;
use crate::expr::{BinOp, Expr};
use crate::types::Datum;
use std::collections::HashMap;
use std::sync::Arc;

/// Cost of one row read in a key-order scan.
pub const SEQ_ROW: f64 = 1.0;
/// Cost of one row read through an index entry (a heap page found at random).
pub const RANDOM_ROW: f64 = 3.0;
/// Cost of one B+tree descent.
pub const LOOKUP: f64 = 8.0;
/// Cost of evaluating a predicate or building a hash entry, per row.
pub const CPU_ROW: f64 = 0.2;
/// Cost of inserting a row into a hash table.
pub const HASH_BUILD: f64 = 1.0;
/// Cost of probing a hash table.
pub const HASH_PROBE: f64 = 0.5;

/// Where a column of the plan comes from, for its statistics.
#[derive(Debug, Clone)]
pub struct ColumnOrigin {
    /// The table.
    pub table: Arc<TableInfo>,
    /// Engine column.
    pub col: usize,
}

/// Column origins and the estimator over them.
#[derive(Debug, Default, Clone)]
pub struct Estimator {
    /// Base-table origin of each column id that has one.
    pub origins: HashMap<ColId, ColumnOrigin>,
    /// Distinct counts of computed columns (group keys of an aggregate: its rows).
    pub ndv_override: HashMap<ColId, f64>,
}

fn as_f64(d: &Datum) -> Option<f64> {
    match d {
        Datum::Date(v) => Some(f64::from(*v)),
        Datum::Timestamp(v) => Some(*v as f64 / 86_400e6),
        d => d.as_f64(),
    }
}

impl Estimator {
    /// Distinct values of column `id` (None: unknown).
    pub fn ndv(&self, id: ColId) -> Option<f64> {
        if let Some(n) = self.ndv_override.get(&id) {
            return Some(*n);
        }
        let o = self.origins.get(&id)?;
        if o.col == o.table.pk {
            return Some(o.table.stats.rows(&o.table));
        }
        if let Some(c) = o.table.stats.column(o.col) {
            return Some(c.ndv.max(1.0));
        }
        if o.table.indexes.iter().any(|(_, c, unique)| *c == o.col && *unique) {
            return Some(o.table.stats.rows(&o.table));
        }
        None
    }

    fn range_fraction(&self, id: ColId, op: BinOp, v: &Datum) -> Option<f64> {
        let o = self.origins.get(&id)?;
        let c = o.table.stats.column(o.col)?;
        let (lo, hi, x) = (as_f64(c.min.as_ref()?)?, as_f64(c.max.as_ref()?)?, as_f64(v)?);
        if hi <= lo {
            return None;
        }
        let below = ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
        Some(match op {
            BinOp::Lt | BinOp::Le => below,
            _ => 1.0 - below,
        })
    }

    /// The fraction of rows that pass predicate `e` (over column ids).
    pub fn selectivity(&self, e: &Expr) -> f64 {
        let s = match e {
            Expr::Binary(BinOp::And, a, b, _) => self.selectivity(a) * self.selectivity(b),
            Expr::Binary(BinOp::Or, a, b, _) => {
                let (x, y) = (self.selectivity(a), self.selectivity(b));
                x + y - x * y
            }
            Expr::Not(x) => 1.0 - self.selectivity(x),
            Expr::Binary(BinOp::Eq, a, b, _) => match (a.as_ref(), b.as_ref()) {
                (Expr::Column(x), Expr::Column(y)) => {
                    let n = self.ndv(*x).unwrap_or(200.0).max(self.ndv(*y).unwrap_or(200.0));
                    1.0 / n.max(1.0)
                }
                (Expr::Column(x), _) | (_, Expr::Column(x)) => 1.0 / self.ndv(*x).unwrap_or(200.0).max(1.0),
                _ => 0.005,
            },
            Expr::Binary(BinOp::Ne, a, b, _) => match (a.as_ref(), b.as_ref()) {
                (Expr::Column(x), _) | (_, Expr::Column(x)) => {
                    1.0 - 1.0 / self.ndv(*x).unwrap_or(200.0).max(1.0)
                }
                _ => 0.995,
            },
            Expr::Binary(op @ (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), a, b, _) => {
                match (a.as_ref(), b.as_ref()) {
                    (Expr::Column(x), Expr::Const(v)) => self.range_fraction(*x, *op, v).unwrap_or(1.0 / 3.0),
                    (Expr::Const(v), Expr::Column(x)) => {
                        self.range_fraction(*x, op.flipped(), v).unwrap_or(1.0 / 3.0)
                    }
                    _ => 1.0 / 3.0,
                }
            }
            Expr::Like(_, p, negated, _) => {
                let s = match p.as_ref() {
                    Expr::Const(Datum::Text(t)) if !t.starts_with('%') && !t.starts_with('_') => 0.02,
                    _ => 0.1,
                };
                if *negated {
                    1.0 - s
                } else {
                    s
                }
            }
            Expr::InList(x, l, negated) => {
                let one = match x.as_ref() {
                    Expr::Column(c) => 1.0 / self.ndv(*c).unwrap_or(200.0).max(1.0),
                    _ => 0.005,
                };
                let s = (one * l.len() as f64).min(0.5);
                if *negated {
                    1.0 - s
                } else {
                    s
                }
            }
            Expr::IsNull(x, negated) => {
                let f = match x.as_ref() {
                    Expr::Column(c) => self
                        .origins
                        .get(c)
                        .and_then(|o| o.table.stats.column(o.col))
                        .map_or(0.01, |s| s.null_frac),
                    _ => 0.01,
                };
                if *negated {
                    1.0 - f
                } else {
                    f
                }
            }
            Expr::Const(Datum::Bool(true)) => 1.0,
            Expr::Const(Datum::Bool(false)) | Expr::Const(Datum::Null) => 0.0,
            _ => 0.5,
        };
        s.clamp(1e-9, 1.0)
    }
}

/// Rows out of `rows` in after a filter of selectivity `s` (at least one when any come in).
pub fn filtered(rows: f64, s: f64) -> f64 {
    if rows <= 0.0 {
        0.0
    } else {
        (rows * s).max(1.0)
    }
}

/// The cost of sorting `rows` rows.
pub fn sort_cost(rows: f64) -> f64 {
    let n = rows.max(2.0);
    n * n.log2() * CPU_ROW
}
