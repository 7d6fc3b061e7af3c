//! Execution: a physical plan becomes a tree of operators that rows flow up through, one
//! pull at a time.
//!
//! Owns: the [`Operator`] trait (`next` gives the operator's next row, or none when it is
//! done: a LIMIT that stops pulling stops the scans under it), [`ExecCtx`] (what every
//! operator reads: parameters and settings, the statement's transaction, the memory budget
//! and where spills go, EXPLAIN ANALYZE's counters), [`build`] (one operator per plan node,
//! one module each), and the statements' drivers ([`run_query`], [`modify`]). Operators read
//! the plan they were built from by reference: a prepared statement's plan is made once and
//! only instantiated per execution.
//!
//! Isolation: outside a transaction block each row is read as last committed (no lock, no
//! wait); in a block, rows are read through the transaction (shared locks kept to the end
//! under SERIALIZABLE; see `session` for the levels), rows to change under exclusive locks.

pub mod apply;
pub mod distinct;
pub mod filter;
pub mod fk;
pub mod hash_agg;
pub mod hash_join;
pub mod hashkey;
pub mod index_join;
pub mod limit;
pub mod modify;
pub mod nested_loop;
pub mod project;
pub mod project_set;
pub mod scan;
pub mod setop;
pub mod sort;
pub mod spill;
pub mod values;
pub mod window;

use crate::error::{code, SqlError, SqlResult};
use crate::expr::{EvalCtx, Expr};
use crate::plan::explain::NodeStats;
use crate::plan::{ExplainPlan, PhysNode, PhysOp, QueryPlan, Stmt};
use crate::types::Datum;
use nvmedb::Transaction;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A row flowing between operators.
pub type Row = Vec<Datum>;

/// An operator instance.
pub trait Operator {
    /// The next row, or `None` once there are no more.
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>>;
}

/// A boxed operator borrowing its plan.
pub type BoxOp<'p> = Box<dyn Operator + 'p>;

/// Default memory an operator may hold before it spills (PostgreSQL's default `work_mem`).
pub const DEFAULT_WORK_MEM: usize = 4 << 20;

/// Why a running statement stops early: the client's CancelRequest or `statement_timeout`.
/// Scans and joins check it once per batch of rows, so a statement ends within a batch's
/// time (a wait for a row lock ends at the lock timeout instead).
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    /// Set when a CancelRequest names the session.
    pub cancel: Option<Arc<AtomicBool>>,
    /// When `statement_timeout` ends the statement.
    pub deadline: Option<Instant>,
}

impl Interrupt {
    /// 57014 when the statement was cancelled or ran out of time.
    pub fn check(&self) -> SqlResult<()> {
        if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(SqlError::new(code::QUERY_CANCELED, "canceling statement due to user request"));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(SqlError::new(code::QUERY_CANCELED, "canceling statement due to statement timeout"));
        }
        Ok(())
    }
}

/// What operators read while they run.
pub struct ExecCtx<'a> {
    /// Expression context (parameters, settings, init plan values, correlation values).
    pub eval: EvalCtx<'a>,
    /// The statement's transaction (None: auto-commit reads of committed rows).
    pub txn: Option<&'a mut Transaction>,
    /// Rows are read under exclusive locks (FOR UPDATE, the rows an UPDATE or DELETE changes).
    pub for_update: bool,
    /// Bytes an operator may hold in memory before it spills to temporary files.
    pub work_mem: usize,
    /// Per-node counters (EXPLAIN ANALYZE), indexed by node id.
    pub stats: Option<Vec<NodeStats>>,
    /// Whether to stop early (cancel, timeout).
    pub interrupt: Interrupt,
    /// The catalog, for changes that reach other tables (foreign keys).
    pub catalog: Option<&'a crate::catalog::Catalog>,
}

impl<'a> ExecCtx<'a> {
    /// A context over `eval` reading through `txn`.
    pub fn new(eval: EvalCtx<'a>, txn: Option<&'a mut Transaction>) -> Self {
        Self {
            eval,
            txn,
            for_update: false,
            work_mem: DEFAULT_WORK_MEM,
            stats: None,
            interrupt: Interrupt::default(),
            catalog: None,
        }
    }

    /// Evaluates a row-independent count (LIMIT, OFFSET): None for NULL.
    pub fn count(&self, e: &Option<Expr>) -> SqlResult<Option<usize>> {
        match e {
            None => Ok(None),
            Some(e) => match e.eval(&[], &self.eval)? {
                Datum::Null => Ok(None),
                Datum::Int(n) if n >= 0 => Ok(Some(n as usize)),
                d => Err(SqlError::new(
                    code::INVALID_ROW_COUNT,
                    format!("LIMIT/OFFSET must not be negative: {}", d.to_text(crate::types::SqlType::Text)),
                )),
            },
        }
    }

    /// Records a note for node `id` (EXPLAIN ANALYZE).
    pub fn note(&mut self, id: usize, note: String) {
        if let Some(s) = self.stats.as_mut().and_then(|v| v.get_mut(id)) {
            if !s.notes.contains(&note) {
                s.notes.push(note);
            }
        }
    }
}

/// Counts rows and time of the operator it wraps (EXPLAIN ANALYZE).
struct Instrumented<'p> {
    inner: BoxOp<'p>,
    id: usize,
    started: bool,
}

impl Operator for Instrumented<'_> {
    fn next(&mut self, cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
        let t = Instant::now();
        let r = self.inner.next(cx);
        let dt = t.elapsed();
        if let Some(s) = cx.stats.as_mut().and_then(|v| v.get_mut(self.id)) {
            if !self.started {
                s.loops += 1;
                s.first += dt;
            }
            s.total += dt;
            if let Ok(Some(_)) = &r {
                s.rows += 1;
            }
        }
        self.started = true;
        r
    }
}

/// Instantiates the operator of `node` (and its inputs).
pub fn build<'p>(node: &'p PhysNode, cx: &ExecCtx<'_>) -> BoxOp<'p> {
    let op: BoxOp<'p> = match &node.op {
        PhysOp::Result => Box::new(values::Values::one()),
        PhysOp::Values(rows) => Box::new(values::Values::new(rows)),
        PhysOp::Scan(spec) => Box::new(scan::Scan::new(spec, Vec::new())),
        PhysOp::Filter(input, pred) => Box::new(filter::Filter { input: build(input, cx), pred }),
        PhysOp::Project(input, exprs) => Box::new(project::Project { input: build(input, cx), exprs }),
        PhysOp::HashJoin { kind, left, right, left_keys, right_keys, extra } => {
            Box::new(hash_join::HashJoin::new(
                *kind,
                build(left, cx),
                build(right, cx),
                left_keys,
                right_keys,
                extra.as_ref(),
                (left.cols.len(), right.cols.len()),
                node.id,
            ))
        }
        PhysOp::IndexJoin { kind, left, inner, extra } => {
            Box::new(index_join::IndexJoin::new(*kind, build(left, cx), inner, extra.as_ref()))
        }
        PhysOp::NestedLoop { kind, left, right, cond } => Box::new(nested_loop::NestedLoop::new(
            *kind,
            build(left, cx),
            build(right, cx),
            cond.as_ref(),
            (left.cols.len(), right.cols.len()),
        )),
        PhysOp::HashAgg { input, group, aggs } => {
            Box::new(hash_agg::HashAgg::new(build(input, cx), group, aggs, node.id))
        }
        PhysOp::Window { input, calls } => Box::new(window::Window::new(build(input, cx), calls, node.id)),
        PhysOp::ProjectSet { input, calls } => {
            Box::new(project_set::ProjectSet::new(build(input, cx), calls))
        }
        PhysOp::Sort { input, keys, limit } => {
            Box::new(sort::Sort::new(build(input, cx), keys, limit, node.id))
        }
        PhysOp::Limit { input, limit, offset } => {
            Box::new(limit::Limit::new(build(input, cx), limit, offset))
        }
        PhysOp::Distinct(input) => Box::new(distinct::Distinct::new(build(input, cx), node.id)),
        PhysOp::SetOp { op, all, left, right } => {
            Box::new(setop::SetOp::new(*op, *all, build(left, cx), build(right, cx), node.id))
        }
        PhysOp::Apply { input, sub, kind, corr } => {
            Box::new(apply::Apply::new(build(input, cx), sub, kind, corr))
        }
    };
    if cx.stats.is_some() {
        Box::new(Instrumented { inner: op, id: node.id, started: false })
    } else {
        op
    }
}

/// Computes the init plans (uncorrelated scalar subqueries) of `plan` into `cx`.
pub fn run_initplans(cx: &mut ExecCtx<'_>, initplans: &[PhysNode]) -> SqlResult<()> {
    cx.eval.subs.clear();
    for ip in initplans {
        let mut op = build(ip, cx);
        let first = op.next(cx)?;
        if first.is_some() && op.next(cx)?.is_some() {
            return Err(SqlError::new(
                code::CARDINALITY_VIOLATION,
                "more than one row returned by a subquery used as an expression",
            ));
        }
        let v = first.and_then(|mut r| r.pop()).unwrap_or(Datum::Null);
        cx.eval.subs.push(v);
    }
    Ok(())
}

/// Runs a query; its rows (the visible columns).
pub fn run_query(cx: &mut ExecCtx<'_>, q: &QueryPlan) -> SqlResult<Vec<Row>> {
    let saved = cx.for_update;
    cx.for_update |= q.for_update;
    let r = (|| {
        run_initplans(cx, &q.initplans)?;
        let mut op = build(&q.root, cx);
        let mut out = Vec::new();
        while let Some(r) = op.next(cx)? {
            out.push(r);
        }
        Ok(out)
    })();
    cx.for_update = saved;
    r
}

/// Runs `q` under EXPLAIN ANALYZE: its rows are counted and dropped; the per-node counters
/// and the time it took.
pub fn analyze_query(cx: &mut ExecCtx<'_>, q: &QueryPlan) -> SqlResult<(Vec<NodeStats>, u64, Duration)> {
    let started = Instant::now();
    cx.stats = Some(vec![NodeStats::default(); q.nodes]);
    let r = (|| -> SqlResult<u64> {
        run_initplans(cx, &q.initplans)?;
        let mut op = build(&q.root, cx);
        let mut n = 0;
        while op.next(cx)?.is_some() {
            n += 1;
        }
        Ok(n)
    })();
    let stats = cx.stats.take().unwrap_or_default();
    Ok((stats, r?, started.elapsed()))
}

pub use modify::{insert, modify};

/// Runs a query or a change (or EXPLAIN of one): its command tag and result rows.
pub fn run_statement(cx: &mut ExecCtx<'_>, stmt: &Stmt) -> SqlResult<(String, Vec<Row>)> {
    Ok(match stmt {
        Stmt::Query(q) => {
            let rows = run_query(cx, q)?;
            (format!("SELECT {}", rows.len()), rows)
        }
        Stmt::Insert(ins) => {
            let (n, rows) = insert(cx, ins)?;
            (format!("INSERT 0 {n}"), rows)
        }
        Stmt::Update(m) => {
            let (n, rows) = modify(cx, m, false)?;
            (format!("UPDATE {n}"), rows)
        }
        Stmt::Delete(m) => {
            let (n, rows) = modify(cx, m, true)?;
            (format!("DELETE {n}"), rows)
        }
        Stmt::Explain(e) => {
            let lines = explain(cx, e)?;
            let n = lines.len();
            (format!("EXPLAIN {n}"), lines.into_iter().map(|l| vec![Datum::Text(l)]).collect())
        }
        _ => return Err(SqlError::new(code::INTERNAL_ERROR, "not a query or a change")),
    })
}

/// EXPLAIN [ANALYZE]: the plan's lines (with ANALYZE the statement runs, changes included,
/// as in PostgreSQL).
fn explain(cx: &mut ExecCtx<'_>, e: &ExplainPlan) -> SqlResult<Vec<String>> {
    let plan = match e.stmt.as_ref() {
        Stmt::Query(q) => q.as_ref(),
        Stmt::Update(m) | Stmt::Delete(m) => &m.input,
        Stmt::Insert(i) => match &i.source {
            crate::plan::InsertSource::Query(q) => q.as_ref(),
            crate::plan::InsertSource::Values(_) => {
                let mut lines = vec![
                    format!("Insert on {}", i.table.name),
                    "  ->  Values Scan on \"*VALUES*\"".to_string(),
                ];
                if e.analyze {
                    let started = Instant::now();
                    let (n, _) = insert(cx, i)?;
                    lines.push(format!("Rows inserted: {n}"));
                    lines.push(format!("Planning Time: {:.3} ms", e.planning.as_secs_f64() * 1e3));
                    lines.push(format!("Execution Time: {:.3} ms", started.elapsed().as_secs_f64() * 1e3));
                }
                return Ok(lines);
            }
        },
        _ => return Err(SqlError::unsupported("EXPLAIN of this statement")),
    };
    let mut lines = Vec::new();
    let title = match e.stmt.as_ref() {
        Stmt::Update(m) => Some(format!("Update on {}", m.table.name)),
        Stmt::Delete(m) => Some(format!("Delete on {}", m.table.name)),
        Stmt::Insert(i) => Some(format!("Insert on {}", i.table.name)),
        _ => None,
    };
    if !e.analyze {
        let body = crate::plan::explain::explain(plan, None);
        match title {
            Some(t) => {
                lines.push(t);
                lines.extend(
                    body.into_iter()
                        .map(|l| format!("  ->  {}", l.trim_start_matches("->  ").trim_start()))
                        .take(1),
                );
                let rest = crate::plan::explain::explain(plan, None);
                lines.extend(rest.into_iter().skip(1).map(|l| format!("      {l}")));
            }
            None => lines = body,
        }
        return Ok(lines);
    }
    let started = Instant::now();
    let (stats, n) = match e.stmt.as_ref() {
        Stmt::Query(q) => {
            let (stats, n, _) = analyze_query(cx, q)?;
            (stats, n)
        }
        stmt => {
            cx.stats = Some(vec![NodeStats::default(); plan.nodes]);
            let r = run_statement(cx, stmt);
            let stats = cx.stats.take().unwrap_or_default();
            let (tag, _) = r?;
            let n = tag.rsplit(' ').next().and_then(|x| x.parse().ok()).unwrap_or(0);
            (stats, n)
        }
    };
    let elapsed = started.elapsed();
    if let Some(t) = title {
        lines.push(format!("{t} (actual rows={n})"));
    }
    lines.extend(crate::plan::explain::explain(plan, Some(&stats)));
    lines.push(format!("Planning Time: {:.3} ms", e.planning.as_secs_f64() * 1e3));
    lines.push(format!("Execution Time: {:.3} ms", elapsed.as_secs_f64() * 1e3));
    Ok(lines)
}

/// Helpers for the operators' unit tests: a source of given rows, a context, a drain.
#[cfg(test)]
pub(crate) mod testing {
    use super::{ExecCtx, Operator, Row};
    use crate::error::SqlResult;
    use crate::expr::{EvalCtx, Expr};
    use crate::types::Datum;
    use std::collections::VecDeque;

    /// An operator that yields the given rows.
    pub struct Rows(pub VecDeque<Row>);

    impl Operator for Rows {
        fn next(&mut self, _cx: &mut ExecCtx<'_>) -> SqlResult<Option<Row>> {
            Ok(self.0.pop_front())
        }
    }

    /// Rows of integers (`None` is NULL).
    pub fn ints(rows: &[&[Option<i64>]]) -> Box<Rows> {
        Box::new(Rows(
            rows.iter().map(|r| r.iter().map(|v| v.map_or(Datum::Null, Datum::Int)).collect()).collect(),
        ))
    }

    /// A context without a transaction, with `work_mem` bytes of memory.
    pub fn ctx(work_mem: usize) -> ExecCtx<'static> {
        let eval = EvalCtx {
            params: &[],
            settings: &|_| None,
            now: 0,
            user: "t",
            database: "t",
            backend_pid: 0,
            subs: Vec::new(),
            outer: Vec::new(),
            seqs: None,
        };
        let mut cx = ExecCtx::new(eval, None);
        cx.work_mem = work_mem;
        cx
    }

    /// Every row of `op`, as integers (`None` for NULL).
    pub fn drain(op: &mut dyn Operator, cx: &mut ExecCtx<'_>) -> Vec<Vec<Option<i64>>> {
        let mut out = Vec::new();
        while let Some(r) = op.next(cx).unwrap() {
            out.push(
                r.iter()
                    .map(|d| match d {
                        Datum::Null => None,
                        Datum::Int(v) => Some(*v),
                        Datum::Bool(b) => Some(i64::from(*b)),
                        d => Some(d.as_f64().expect("a number") as i64),
                    })
                    .collect(),
            );
        }
        out
    }

    /// Column `i`.
    pub fn col(i: usize) -> Expr {
        Expr::Column(i)
    }
}
