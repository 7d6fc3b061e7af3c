//! One measured point of the primitive experiment: `clients` threads issuing single-row SELECT
//! or UPDATE transactions by random SID for a warm-up and a timed window.
//!
//! Owns: [`PointPlan`], [`measure`], [`PointMeasurement`] and the row it becomes ([`result`]).
//! Invariants: client randomness is seeded from (seed, point, client); counters, latencies and
//! CPU time cover only transactions that started inside the measured window; a missing row or an
//! engine error fails the point.

use super::devices::{OpenDb, PreparedDevice};
use super::{PointResult, PrimitiveConfig, Workload, WAL_STATUS};
use crate::error::{LabError, Result};
use crate::measure::{burn_thread_cpu, WindowHooks, Workers};
use crate::workload::primitive::{run_select, run_update};
use nvmedb::trace::{self, TraceKind};
use nvmedb::util::Rng;
use nvmedb::{BufferStats, Database, Table};
use std::time::Duration;

/// How one point runs.
#[derive(Debug, Clone, Copy)]
pub struct PointPlan {
    /// SELECT or UPDATE.
    pub workload: Workload,
    /// Concurrent clients.
    pub clients: usize,
    /// Rows per table (SIDs are drawn from `0..rows`).
    pub rows: u64,
    /// Warm-up before the window.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// Seed of this point's clients.
    pub seed: u64,
    /// Label each client thread and record a `Cpu` span around every transaction (the tracer
    /// is started by the caller's hooks).
    pub trace_spans: bool,
    /// Extra CPU burnt per transaction before it runs, ns (stands in for the SQL layer and the
    /// client round trip that the papers' t_cpu includes; 0 = the engine alone).
    pub app_cpu_ns: u64,
}

/// The plan of a point of workload `w`.
pub fn plan(cfg: &PrimitiveConfig, w: Workload, seed: u64, trace_spans: bool) -> PointPlan {
    PointPlan {
        workload: w,
        clients: cfg.clients,
        rows: cfg.rows_per_table,
        warmup: Duration::from_secs_f64(cfg.warmup_s),
        duration: Duration::from_secs_f64(cfg.duration_s),
        seed,
        trace_spans,
        app_cpu_ns: (cfg.app_cpu_us * 1e3) as u64,
    }
}

/// What one point measured.
#[derive(Debug, Clone, Default)]
pub struct PointMeasurement {
    /// Transactions completed in the window.
    pub transactions: u64,
    /// Window length, s.
    pub window_s: f64,
    /// Table-buffer counters over the window.
    pub table_stats: BufferStats,
    /// Index-buffer counters over the window.
    pub index_stats: BufferStats,
    /// CPU time of all clients in the window, ns.
    pub client_cpu_ns: u64,
    /// Transaction latency percentiles, µs: p50, p99.
    pub latency_us: (f64, f64),
    /// Process CPU over the window in cores (clients plus anything else in the process).
    pub process_cpu_cores: f64,
    /// Log record bytes written in the window (0 without a log).
    pub log_bytes: u64,
    /// Filler bytes the log wrote in the window to complete the block at the end of each
    /// group-commit write (device bytes that carry no record).
    pub log_padding_bytes: u64,
}

/// Snapshots the buffer and log counters at the window's edges, and runs the caller's hooks.
struct Counters<'a> {
    db: &'a Database,
    inner: &'a mut dyn WindowHooks,
    at_open: Option<((BufferStats, BufferStats), (u64, u64))>,
    delta: ((BufferStats, BufferStats), (u64, u64)),
}

impl Counters<'_> {
    /// Log bytes so far: the records (the stream's growth), and what the device was written
    /// beyond them (whole blocks: the re-written start of each flush's first block, the zeroes
    /// after its end, segment headers; the fast log's page filler).
    fn log_written(&self) -> (u64, u64) {
        self.db.engine_log().map_or((0, 0), |l| {
            let st = l.record_log().stats();
            (st.durable_bytes, st.bytes_written.saturating_sub(st.durable_bytes))
        })
    }
}

impl WindowHooks for Counters<'_> {
    fn opened(&mut self) {
        self.at_open = Some((self.db.buffer_stats(), self.log_written()));
        self.inner.opened();
    }
    fn tick(&mut self, elapsed: Duration, ops: u64) {
        self.inner.tick(elapsed, ops);
    }
    fn closed(&mut self) {
        self.inner.closed();
        if let Some(((t0, i0), log0)) = self.at_open.take() {
            let (t1, i1) = self.db.buffer_stats();
            let log1 = self.log_written();
            self.delta = (
                (t1.since(&t0), i1.since(&i0)),
                (log1.0.saturating_sub(log0.0), log1.1.saturating_sub(log0.1)),
            );
        }
    }
}

/// Runs one point; `hooks` run when the window opens and closes (the tracer uses them). Fails
/// on the first engine error or a missing row.
pub fn measure(
    db: &Database,
    tables: &[Table],
    plan: &PointPlan,
    hooks: &mut dyn WindowHooks,
) -> Result<PointMeasurement> {
    if tables.is_empty() || plan.rows == 0 || plan.clients == 0 {
        return Err(LabError::config("tables/rows/clients", "a point needs tables, rows and clients"));
    }
    let mut counters = Counters { db, inner: hooks, at_open: None, delta: Default::default() };
    let workers =
        Workers::new(format!("{} clients", plan.workload.title()), plan.clients, plan.warmup, plan.duration)
            .with_latency();
    let run = workers.run(
        |c| {
            if plan.trace_spans {
                trace::set_thread_label(format!("client {c:02}"));
            }
            Ok(Rng::new(plan.seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        },
        |rng, _| {
            let t = rng.below(tables.len() as u64) as usize;
            let sid = rng.below(plan.rows) as i64;
            let span = plan.trace_spans.then(|| trace::span(TraceKind::Cpu));
            burn_thread_cpu(plan.app_cpu_ns);
            let r = match plan.workload {
                Workload::Select => run_select(&tables[t], sid),
                Workload::Update => run_update(&tables[t], sid, rng.next_u64() as i64 >> 1),
            };
            drop(span);
            match r {
                Ok(true) => Ok(1),
                Ok(false) => {
                    Err(LabError::MissingRow { table: tables[t].name().to_string(), key: sid.to_string() })
                }
                Err(e) => Err(LabError::engine(format!("a {} transaction", plan.workload.title()))(e)),
            }
        },
        &mut counters,
    )?;
    let ((table_stats, index_stats), (log_bytes, log_padding_bytes)) = counters.delta;
    Ok(PointMeasurement {
        transactions: run.ops,
        window_s: run.window.as_secs_f64(),
        table_stats,
        index_stats,
        client_cpu_ns: run.worker_cpu_ns,
        latency_us: (run.latency.quantile_us(0.5), run.latency.quantile_us(0.99)),
        process_cpu_cores: run.process_cpu_cores(),
        log_bytes,
        log_padding_bytes,
    })
}

/// Which phase a point belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The sweep (enters the summary).
    Sweep,
    /// The tracing-cost runs; `traced` says whether the tracer was on.
    Trace {
        /// Tracer on during the window.
        traced: bool,
    },
}

/// The result row of a measured point.
#[allow(clippy::too_many_arguments)]
pub fn result(
    cfg: &PrimitiveConfig,
    dev: &PreparedDevice,
    w: Workload,
    pct: f64,
    rep: usize,
    phase: Phase,
    open: &OpenDb,
    m: &PointMeasurement,
) -> PointResult {
    let per_s = |n: u64| n as f64 / m.window_s.max(1e-9);
    let per_txn = |x: f64| if m.transactions > 0 { x / m.transactions as f64 } else { 0.0 };
    let ts = &m.table_stats;
    PointResult {
        device: dev.kind.name(),
        device_label: dev.report.label.clone(),
        workload: w.name().into(),
        buffer_pct: pct,
        buffer_bytes: open.buffer_bytes,
        repetition: rep,
        phase: if phase == Phase::Sweep { "sweep".into() } else { "trace".into() },
        tracing: phase == Phase::Trace { traced: true },
        clients: cfg.clients,
        window_s: m.window_s,
        transactions: m.transactions,
        tps: per_s(m.transactions),
        hit_ratio: ts.hit_ratio(),
        index_hit_ratio: m.index_stats.hit_ratio(),
        data_reads_per_s: per_s(ts.reads),
        data_writes_per_s: per_s(ts.writes),
        io_us_per_read: if ts.reads > 0 { ts.io_wait_ns as f64 / ts.reads as f64 / 1e3 } else { 0.0 },
        cpu_us_per_txn: per_txn(m.client_cpu_ns as f64 / 1e3),
        log_kib_per_txn: per_txn(m.log_bytes as f64 / 1024.0),
        log_pad_kib_per_txn: per_txn(m.log_padding_bytes as f64 / 1024.0),
        process_cpu_cores: m.process_cpu_cores,
        latency_p50_us: m.latency_us.0,
        latency_p99_us: m.latency_us.1,
        wal: if w == Workload::Update { WAL_STATUS.into() } else { "read only (no log)".into() },
    }
}
