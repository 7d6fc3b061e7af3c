//! The traced runs of the primitive experiment: at the smallest buffer on one device, each
//! workload runs with the tracer off, on, off (the tracer's cost), and the traced window
//! becomes a trace CSV, a per-kind summary and a chart like seed 000 Figs. 8/10.
//!
//! Owns: [`trace_runs`] and the chart's window. Invariants: the chart shows every client's
//! [`WHOLE_TXNS`] whole transactions (each transaction is one CPU span around its waits), or a
//! footnote names the clients that completed fewer and what they were waiting for; the trace
//! CSV holds at least the charted window.

use super::devices::PreparedDevice;
use super::point::{self, Phase};
use super::{PointResult, PrimitiveConfig, TraceRun, Workload, WAL_STATUS};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::measure::WindowHooks;
use crate::model::ModelInput;
use crate::report::{trace_summary, transaction_window, write_trace_csv, TraceChart, TxnWindow};
use nvmedb::trace::{self, Trace, TraceConfig, TraceKind};

/// Whole transactions every client shows in a trace chart.
pub const WHOLE_TXNS: usize = 3;

/// Length of the trace CSV's window (the whole trace runs to megabytes), ns.
const CSV_WINDOW_NS: u64 = 100_000_000;

/// Starts the tracer when the window opens and stops it when it closes.
struct Tracer;

impl WindowHooks for Tracer {
    fn opened(&mut self) {
        trace::start(TraceConfig { capacity_per_thread: 1 << 17 });
    }
    fn closed(&mut self) {
        trace::stop();
    }
}

/// The device traced: `trace_device` if given, else `optane`, else the first.
fn trace_device_index(cfg: &PrimitiveConfig, devices: &[PreparedDevice]) -> Option<usize> {
    let want = cfg.trace_device.as_deref().unwrap_or("optane");
    devices.iter().position(|d| d.kind.name() == want).or(if devices.is_empty() { None } else { Some(0) })
}

/// Tracing off, on, off at one point: the mean of the untraced throughputs, the traced
/// throughput and the trace. Every run's row goes into `points`.
fn traced_point(
    cfg: &PrimitiveConfig,
    dev: &PreparedDevice,
    w: Workload,
    pct: f64,
    points: &mut Vec<PointResult>,
) -> Result<(f64, f64, Trace)> {
    let open = super::devices::open_at(cfg, dev, pct)?;
    let mut off = Vec::new();
    let mut on = 0.0;
    let mut traced_trace = None;
    for (i, traced) in [false, true, false].into_iter().enumerate() {
        let seed = cfg.seed.wrapping_add(1_000_000 + i as u64);
        let plan = point::plan(cfg, w, seed, traced);
        let m = if traced {
            point::measure(&open.db, &open.tables, &plan, &mut Tracer)?
        } else {
            point::measure(&open.db, &open.tables, &plan, &mut ())?
        };
        let r = point::result(cfg, dev, w, pct, i, Phase::Trace { traced }, &open, &m);
        if traced {
            on = r.tps;
            traced_trace = Some(trace::collect());
        } else {
            off.push(r.tps);
        }
        points.push(r);
    }
    open.db.close().map_err(LabError::engine("closing the database"))?;
    let off_mean = off.iter().sum::<f64>() / off.len().max(1) as f64;
    Ok((off_mean, on, traced_trace.unwrap_or_default()))
}

/// The window a chart of `trace` shows: from its middle, at least `trace_window_ms` long, until
/// every client shows [`WHOLE_TXNS`] whole transactions.
pub fn chart_window(cfg: &PrimitiveConfig, trace: &Trace) -> TxnWindow {
    transaction_window(trace, TraceKind::Cpu, WHOLE_TXNS, (cfg.trace_window_ms * 1e6) as u64)
}

/// The chart of window `win` of `trace`.
pub fn trace_chart(
    device_label: &str,
    w: Workload,
    pct: f64,
    trace: &Trace,
    win: TxnWindow,
    tps: f64,
) -> TraceChart {
    let first =
        trace.threads.iter().flat_map(|t| t.intervals.first()).map(|iv| iv.start_ns).min().unwrap_or(0);
    let shown = if win.short.is_empty() {
        format!("every client shows at least {} whole transactions", win.min_whole)
    } else {
        format!("{} client(s) completed fewer than {WHOLE_TXNS} transactions (below)", win.short.len())
    };
    let mut chart = TraceChart::from_trace(
        format!("{} at {pct} % buffer on {device_label}: one row per client", w.title()),
        &trace.window(win.from_ns, win.to_ns),
    )
    .subtitle(format!(
        "{:.2} ms from {:.1} ms into a {:.1} s traced run at {:.0} tps; {shown}",
        win.len_ns() as f64 / 1e6,
        win.from_ns.saturating_sub(first) as f64 / 1e6,
        trace.span_ns() as f64 / 1e9,
        tps,
    ))
    .annotate_durations(true)
    .mark_starts(TraceKind::Cpu);
    chart.duration_ns = win.len_ns();
    for s in win.short {
        chart = chart.footnote(s);
    }
    chart = chart.footnote(if w == Workload::Update { WAL_STATUS } else { "SELECT: read only, no log" });
    chart.footnote(
        "a transaction is a CPU span (purple) with its reads, write-backs and waits drawn over it; black ticks mark where each starts",
    )
}

/// For each workload, at the smallest buffer on the traced device: throughput off/on/off, the
/// trace of the traced window (CSV + summary CSV) and its chart.
pub fn trace_runs(
    cfg: &PrimitiveConfig,
    env: &RunEnv,
    devices: &[PreparedDevice],
    points: &mut Vec<PointResult>,
) -> Result<Vec<TraceRun>> {
    let Some(di) = trace_device_index(cfg, devices) else { return Ok(Vec::new()) };
    let dev = &devices[di];
    let pct = cfg.buffer_pcts.iter().cloned().fold(f64::INFINITY, f64::min);
    let mut out = Vec::new();
    for &w in &cfg.workloads {
        let (off, on, trace) = traced_point(cfg, dev, w, pct, points).map_err(LabError::in_part(format!(
            "tracing {} on {}",
            w.name(),
            dev.kind.name()
        )))?;
        let stem = format!("trace_{}_{}", w.name(), dev.kind.name());
        let win = chart_window(cfg, &trace);
        // The CSV holds the middle 100 ms, widened to hold the charted window; the summary CSV
        // covers the whole traced window.
        let mid_from = (trace.span_ns() / 2).saturating_sub(CSV_WINDOW_NS / 2);
        let (from, to) = (mid_from.min(win.from_ns), (mid_from + CSV_WINDOW_NS).max(win.to_ns));
        write_trace_csv(env.dir.file(&format!("{stem}.csv")), &trace.window(from, to))?;
        env.dir.write_csv(&format!("{stem}_summary"), &trace_summary(&trace))?;
        let files = trace_chart(&dev.report.label, w, pct, &trace, win, on)
            .footnote(format!("machine: {}", env.context.one_line()))
            .write(env.dir.path(), &stem)?;
        let from_trace = ModelInput::from_trace(&trace);
        out.push(TraceRun {
            device_label: dev.report.label.clone(),
            workload: w.name().into(),
            buffer_pct: pct,
            tps_tracing_off: off,
            tps_tracing_on: on,
            intervals: trace.threads.iter().map(|t| t.intervals.len()).sum(),
            dropped: trace.dropped(),
            trace_t_cpu_us: from_trace.map(|m| m.t_cpu_us),
            trace_t_io_us: from_trace.map(|m| m.t_io_us),
            chart_png: files.png.display().to_string(),
        });
    }
    Ok(out)
}
