//! Planning of the nodes that add computed columns to each input row: window functions and
//! the select list's set-returning functions.
//!
//! Owns: [`Planner::window`] and [`Planner::project_set`]. Invariant: the node's output is its
//! input's columns then one column per call; predicates above it are applied after it (they
//! may read the calls' columns).

use super::cost;
use super::logical::{ColId, Logical, SortSpec, SrfCall, WindowCall};
use super::physical::{PhysNode, PhysOp, Planner};
use crate::error::SqlResult;
use crate::expr::Expr;

/// Rows a set-returning call is assumed to return per input row (PostgreSQL assumes 10).
const SRF_ROWS: f64 = 10.0;

impl Planner<'_> {
    /// Window functions over `input`.
    pub(crate) fn window(
        &mut self,
        input: &Logical,
        calls: &[(ColId, WindowCall)],
        preds: Vec<Expr>,
    ) -> SqlResult<PhysNode> {
        let input = self.plan(input, vec![])?;
        let calls_c = calls
            .iter()
            .map(|(_, c)| -> SqlResult<WindowCall> {
                Ok(WindowCall {
                    arg: self.compile(&c.arg, &input.cols)?,
                    partition: self.compile_all(&c.partition, &input.cols)?,
                    order: c
                        .order
                        .iter()
                        .map(|s| Ok(SortSpec { expr: self.compile(&s.expr, &input.cols)?, ..s.clone() }))
                        .collect::<SqlResult<_>>()?,
                    ..c.clone()
                })
            })
            .collect::<SqlResult<Vec<_>>>()?;
        let mut cols = input.cols.clone();
        cols.extend(calls.iter().map(|(id, _)| *id));
        let (rows, c) = (input.rows, input.cost + cost::sort_cost(input.rows));
        let node =
            self.node(PhysOp::Window { input: Box::new(input), calls: calls_c }, cols, rows, c, vec![]);
        self.filter_node(node, preds)
    }

    /// The select list's set-returning functions over `input`.
    pub(crate) fn project_set(
        &mut self,
        input: &Logical,
        calls: &[(ColId, SrfCall)],
        preds: Vec<Expr>,
    ) -> SqlResult<PhysNode> {
        let input = self.plan(input, vec![])?;
        let calls_c = calls
            .iter()
            .map(|(_, c)| Ok((c.func, self.compile_all(&c.args, &input.cols)?, c.vector)))
            .collect::<SqlResult<Vec<_>>>()?;
        let mut cols = input.cols.clone();
        cols.extend(calls.iter().map(|(id, _)| *id));
        let rows = input.rows * SRF_ROWS;
        let c = input.cost + rows * cost::CPU_ROW;
        let node =
            self.node(PhysOp::ProjectSet { input: Box::new(input), calls: calls_c }, cols, rows, c, vec![]);
        self.filter_node(node, preds)
    }
}
