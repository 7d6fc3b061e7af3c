//! One measured point of the TPC-C experiment: the terminals run the mix against a fresh copy of
//! the database for a warm-up and a measured window; then the consistency conditions are
//! checked and the copy is discarded.
//!
//! Owns: [`run`], [`PointOutcome`] and the terminals' state. Invariants: a transaction counts,
//! with its latency (first attempt to commit, retries included), when it started inside the
//! window; buffer, log, lock and emulator-lateness counters are the differences across the window; the terminals'
//! randomness is seeded from (seed, terminal); the run's NURand constants are drawn against the
//! load's (§2.1.6); a consistency failure fails the point.

use super::report;
use super::setup::{self, PreparedDevice, Template};
use super::{PointResult, TpccConfig};
use crate::error::{LabError, Result};
use crate::measure::profile::{folded_stacks, Profiler};
use crate::measure::{thread_cpu_ns, LatencyHistogram, WindowHooks, Workers};
use crate::workload::tpcc::txn::{execute_with_retries, Context, Retries, TxnOutput};
use crate::workload::tpcc::{check_consistency, NuConstants, Terminal, TpccRng, TxnKind};
use nvmedb::io::{lateness, Lateness};
use nvmedb::trace::{self, Trace, TraceConfig, TraceKind};
use nvmedb::txn::LockStats;
use nvmedb::wal::{log_volume, thread_log_bytes, LogVolume};
use nvmedb::{BufferStats, Database, TableAccess};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Attempts a transaction gets before a deadlock or lock-timeout streak fails the point.
const MAX_ATTEMPTS: u32 = 100;

/// What a point produced.
pub struct PointOutcome {
    /// Its row.
    pub result: PointResult,
    /// The trace of its window, when traced.
    pub trace: Option<Trace>,
    /// Every table's access statistics in the window (differences across it).
    pub tables: Vec<TableAccess>,
    /// The window's CPU profile as folded stacks, when profiled.
    pub profile: Option<Vec<String>>,
}

/// One terminal's state: its input generator and what it counted in the window.
struct Client {
    terminal: Terminal,
    counts: Totals,
}

impl Client {
    fn new(terminal: Terminal) -> Self {
        Self { terminal, counts: Totals::default() }
    }

    /// Counts a transaction of `kind` that started at `t0` inside the window, with the
    /// thread's CPU and log bytes when it started (`at_start`).
    fn record(
        &mut self,
        kind: TxnKind,
        t0: Instant,
        at_start: (u64, u64),
        retries: Retries,
        out: &TxnOutput,
    ) {
        let (k, c) = (kind.index(), &mut self.counts);
        c.latency[k].record(t0.elapsed());
        c.cpu_ns[k] += thread_cpu_ns().saturating_sub(at_start.0);
        c.log_bytes[k] += thread_log_bytes().saturating_sub(at_start.1);
        c.deadlocks += u64::from(retries.deadlocks);
        c.timeouts += u64::from(retries.lock_timeouts);
        if let TxnOutput::NewOrder { rolled_back: true, .. } = out {
            c.rollbacks += 1;
        }
    }
}

/// Window counters: one terminal's, or every terminal's summed. CPU and log bytes are per
/// transaction type.
#[derive(Default)]
struct Totals {
    latency: [LatencyHistogram; 5],
    cpu_ns: [u64; 5],
    log_bytes: [u64; 5],
    rollbacks: u64,
    deadlocks: u64,
    timeouts: u64,
}

impl Totals {
    fn of(clients: &[Client]) -> Self {
        let mut all = Self::default();
        for c in clients.iter().map(|c| &c.counts) {
            for (sum, mine) in all.latency.iter_mut().zip(&c.latency) {
                sum.add(mine);
            }
            for k in 0..5 {
                all.cpu_ns[k] += c.cpu_ns[k];
                all.log_bytes[k] += c.log_bytes[k];
            }
            all.rollbacks += c.rollbacks;
            all.deadlocks += c.deadlocks;
            all.timeouts += c.timeouts;
        }
        all
    }

    /// Transactions counted per type.
    fn per_type(&self) -> [u64; 5] {
        TxnKind::ALL.map(|k| self.latency[k.index()].len())
    }

    /// `x` per transaction of each type, divided by `scale` (0 for a type that did not run).
    fn mean_per_type(&self, x: &[u64; 5], scale: f64) -> [f64; 5] {
        let n = self.per_type();
        TxnKind::ALL.map(|k| {
            let i = k.index();
            if n[i] > 0 {
                x[i] as f64 / scale / n[i] as f64
            } else {
                0.0
            }
        })
    }
}

/// Counter snapshots at the window's edges, and the tracer.
struct Counters<'a> {
    db: &'a Database,
    /// The emulated profile under test (its lateness is counted across the window).
    profile: &'a str,
    late_at_open: Lateness,
    late: Lateness,
    traced: bool,
    /// Buffer pools, log (`[durable stream bytes, device bytes written]`), locks.
    at_open: Option<(BufferStats, BufferStats, [u64; 2], LockStats)>,
    delta: Option<(BufferStats, BufferStats, [u64; 2], LockStats)>,
    tables_at_open: Vec<TableAccess>,
    tables: Vec<TableAccess>,
    volume_at_open: LogVolume,
    volume: LogVolume,
    /// Where perf writes its data when profiling, the profiler once attached, and the first
    /// error it met. perf attaches when the window opens, once every thread exists: counters of
    /// threads created while it was attached but disabled would never be enabled.
    profile_to: Option<PathBuf>,
    profiler: Option<Profiler>,
    profile_error: Option<LabError>,
}

impl<'a> Counters<'a> {
    fn new(db: &'a Database, profile: &'a str, observe: &Observe) -> Self {
        Self {
            db,
            profile,
            late_at_open: Lateness::default(),
            late: Lateness::default(),
            traced: observe.traced,
            at_open: None,
            delta: None,
            tables_at_open: Vec::new(),
            tables: Vec::new(),
            volume_at_open: LogVolume::default(),
            volume: LogVolume::default(),
            profile_to: observe.profile.clone(),
            profiler: None,
            profile_error: None,
        }
    }

    /// The window's profile as folded stacks (perf's data file removed), or the first error
    /// the profiler met.
    fn finish_profile(&mut self) -> Result<Option<Vec<String>>> {
        if let Some(e) = self.profile_error.take() {
            return Err(e);
        }
        let Some(p) = self.profiler.take() else { return Ok(None) };
        let data = p.finish()?;
        let folded = folded_stacks(&data)?;
        let _ = std::fs::remove_file(&data);
        Ok(Some(folded))
    }

    fn snapshot(&self) -> (BufferStats, BufferStats, [u64; 2], LockStats) {
        let (t, i) = self.db.buffer_stats();
        let log = self.db.engine_log().map_or([0, 0], |l| {
            let s = l.record_log().stats();
            [s.durable_bytes, s.bytes_written]
        });
        (t, i, log, self.db.lock_stats())
    }
}

impl WindowHooks for Counters<'_> {
    fn opened(&mut self) {
        self.tables_at_open = self.db.access_stats().unwrap_or_default();
        self.late_at_open = lateness(self.profile);
        self.at_open = Some(self.snapshot());
        self.volume_at_open = log_volume();
        if self.traced {
            trace::start(TraceConfig { capacity_per_thread: 1 << 18 });
        }
        if let Some(to) = &self.profile_to {
            match Profiler::attach(to).and_then(|mut p| p.enable().map(|()| p)) {
                Ok(p) => self.profiler = Some(p),
                Err(e) => {
                    self.profile_error.get_or_insert(e);
                }
            }
        }
    }
    fn closed(&mut self) {
        if let Some(p) = &mut self.profiler {
            if let Err(e) = p.disable() {
                self.profile_error.get_or_insert(e);
            }
        }
        if self.traced {
            trace::stop();
        }
        self.volume = log_volume().since(&self.volume_at_open);
        if let Some((t0, i0, log0, l0)) = self.at_open.take() {
            let (t1, i1, log1, l1) = self.snapshot();
            self.late = lateness(self.profile).since(&self.late_at_open);
            let locks = LockStats {
                waits: l1.waits - l0.waits,
                wait_ns_total: l1.wait_ns_total - l0.wait_ns_total,
                deadlocks: l1.deadlocks - l0.deadlocks,
                timeouts: l1.timeouts - l0.timeouts,
                ..l1
            };
            self.delta = Some((
                t1.since(&t0),
                i1.since(&i0),
                [log1[0].saturating_sub(log0[0]), log1[1].saturating_sub(log0[1])],
                locks,
            ));
            let now = self.db.access_stats().unwrap_or_default();
            self.tables = now
                .iter()
                .map(|t| match self.tables_at_open.iter().find(|o| o.id == t.id) {
                    Some(o) => t.since(o),
                    None => t.clone(),
                })
                .collect();
        }
    }
}

/// A terminal's home warehouse: with at least as many terminals as warehouses, each terminal
/// is bound to one (as the specification's terminals are), round robin; with fewer (seed 000's
/// 30 clients on 800 warehouses), each transaction draws its warehouse.
fn home_warehouse(cfg: &TpccConfig, warehouses: u32, client: usize) -> Option<u32> {
    (cfg.clients >= warehouses as usize).then(|| (client % warehouses as usize) as u32 + 1)
}

/// How a point is observed besides its counters.
#[derive(Debug, Clone, Default)]
pub struct Observe {
    /// Trace the window (intervals per client).
    pub traced: bool,
    /// Profile the window's CPU with perf, writing perf's data to this file (removed once its
    /// stacks are folded into [`PointOutcome::profile`]).
    pub profile: Option<PathBuf>,
}

/// Runs one point: a fresh copy of the database on `dev` at `pct` % buffer, the terminals for
/// the warm-up and the window (traced or profiled as `observe` asks), the consistency check,
/// close.
pub fn run(
    cfg: &TpccConfig,
    t: &Template,
    dev: &PreparedDevice,
    pct: f64,
    rep: usize,
    seed: u64,
    observe: &Observe,
) -> Result<PointOutcome> {
    let open = setup::open_point(cfg, t, dev, pct, seed)?;
    let out = measure(cfg, t, open, (&dev.kind.name(), &dev.report.label), pct, rep, seed, observe)?;
    dev.clean_point()?;
    Ok(out)
}

/// Measures an open point (`device`: short name and label for its row): the terminals for the
/// warm-up and the window (traced or profiled as `observe` asks), the consistency check; the
/// database is closed (dropped without a checkpoint) before it returns.
#[allow(clippy::too_many_arguments)]
pub fn measure(
    cfg: &TpccConfig,
    t: &Template,
    open: setup::OpenPoint,
    device: (&str, &str),
    pct: f64,
    rep: usize,
    seed: u64,
    observe: &Observe,
) -> Result<PointOutcome> {
    let traced = observe.traced;
    let buffer_bytes = open.buffer_bytes;
    let ctx = Context::new(open.db.clone(), open.tables.clone())?;
    let run_constants = NuConstants::for_run(&t.load.constants, &mut TpccRng::new(seed ^ 0xC0));
    let scale = t.load.scale;
    let mut counters = Counters::new(&open.db, device.0, observe);
    let workers = Workers::new(
        "TPC-C terminals",
        cfg.clients,
        Duration::from_secs_f64(cfg.warmup_s),
        Duration::from_secs_f64(cfg.duration_s),
    );
    let run = workers.run(
        |c| {
            if traced {
                trace::set_thread_label(format!("client {c:02}"));
            }
            let terminal_seed = seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let home = home_warehouse(cfg, scale.warehouses, c);
            Ok(Client::new(Terminal::new(scale, run_constants, terminal_seed, home)))
        },
        |client, measuring| {
            let input = client.terminal.next_input();
            let (cpu0, log0) = if measuring { (thread_cpu_ns(), thread_log_bytes()) } else { (0, 0) };
            let t0 = Instant::now();
            let span = traced.then(|| trace::span(TraceKind::Cpu));
            let r = execute_with_retries(&ctx, &input, MAX_ATTEMPTS);
            drop(span);
            let (out, retries) = r?;
            if measuring {
                client.record(input.kind(), t0, (cpu0, log0), retries, &out);
            }
            Ok(1)
        },
        &mut counters,
    )?;
    let trace = traced.then(trace::collect);
    let tables_window = std::mem::take(&mut counters.tables);
    let (table_stats, index_stats, log_bytes, locks) =
        counters.delta.take().ok_or_else(|| LabError::Inconsistent {
            what: "the point's window".into(),
            detail: "it closed without counters".into(),
        })?;
    let (late, volume) = (counters.late, std::mem::take(&mut counters.volume));
    let profile = counters.finish_profile()?;
    check_consistency(&ctx.tables)?;
    drop(ctx);
    // The copy is discarded: no closing checkpoint (it would write every dirty page through
    // the device under test). The primary goes before its standby.
    let setup::OpenPoint { db, tables, repl, .. } = open;
    drop(tables);
    drop(db);
    drop(repl);

    let all = Totals::of(&run.states);
    let txns = run.ops;
    let window_s = run.window.as_secs_f64();
    let per_txn = |x: f64| if txns > 0 { x / txns as f64 } else { 0.0 };
    let per_type = all.per_type();
    let q = |p: f64| TxnKind::ALL.map(|k| all.latency[k.index()].quantile_us(p));
    let mut result = PointResult {
        device: device.0.to_string(),
        device_label: device.1.to_string(),
        ha: cfg.ha.name().into(),
        buffer_pct: pct,
        buffer_bytes,
        repetition: rep,
        phase: if traced { "trace".into() } else { "sweep".into() },
        window_s,
        transactions: txns,
        tps: run.ops_per_s(),
        tpmc: per_type[TxnKind::NewOrder.index()] as f64 * 60.0 / window_s.max(1e-9),
        per_type,
        rollbacks: all.rollbacks,
        deadlock_retries: all.deadlocks,
        lock_timeout_retries: all.timeouts,
        p50_us: q(0.50),
        p90_us: q(0.90),
        p99_us: q(0.99),
        hit_ratio: table_stats.hit_ratio(),
        index_hit_ratio: index_stats.hit_ratio(),
        page_reads_per_txn: per_txn(table_stats.reads as f64),
        page_writes_per_txn: per_txn(table_stats.writes as f64),
        eviction_writes_per_txn: per_txn(table_stats.eviction_writes as f64),
        io_us_per_read: if table_stats.reads > 0 {
            table_stats.io_wait_ns as f64 / table_stats.reads as f64 / 1e3
        } else {
            0.0
        },
        log_bytes_per_txn: per_txn(log_bytes[0] as f64),
        log_device_bytes_per_txn: per_txn(log_bytes[1] as f64),
        cpu_us_per_txn: per_txn(run.worker_cpu_ns as f64 / 1e3),
        process_cpu_us_per_txn: per_txn(run.process_cpu_ns as f64 / 1e3),
        cpu_us_per_type: all.mean_per_type(&all.cpu_ns, 1e3),
        log_bytes_per_type: all.mean_per_type(&all.log_bytes, 1.0),
        log_bytes_by_kind: volume
            .kinds()
            .map(|(kind, _, bytes)| (nvmedb::wal::engine::kind_name(kind).to_string(), per_txn(bytes as f64)))
            .collect(),
        lock_waits_per_txn: per_txn(locks.waits as f64),
        lock_wait_us_per_txn: per_txn(locks.wait_ns_total as f64 / 1e3),
        client_us_per_txn: per_txn(cfg.clients as f64 * window_s * 1e6),
        process_cpu_cores: run.process_cpu_cores(),
        limit: String::new(),
        emulator_late_us: late.mean_us(),
        emulator_late_share: late.late_share(),
    };
    result.limit = report::limit(&result, &table_stats);
    Ok(PointOutcome { result, trace, tables: tables_window, profile })
}
