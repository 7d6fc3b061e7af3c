//! The primitive workload itself: the schema, the bulk load, and one measured point (clients
//! issuing single-row SELECT or UPDATE transactions by random SID for a warm-up and a timed
//! window).
//!
//! Owns: [`schema`], [`load`], [`prewarm`], [`measure`] and the per-transaction functions
//! [`run_select`] and [`run_update`]. Every transaction goes through one of those two
//! functions, so the WAL can later wrap each in begin/commit in one place. Invariants: SIDs are
//! `0..rows_per_table` in every table; client randomness is seeded from (seed, point, client);
//! counters and CPU time cover only transactions that started inside the measured window.

use super::{PrimitiveError, Workload};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use nvmedb::trace::{self, TraceKind};
use nvmedb::util::Rng;
use nvmedb::{ColumnType, Database, Schema, Table, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Column positions of the primitive table.
pub const COL_SID: usize = 0;
/// Column C1, the one UPDATE changes.
pub const COL_C1: usize = 1;
/// Length of Data1 (char(4096)).
pub const DATA1_BYTES: u32 = 4096;

/// The seed 000 table: SID int primary key, C1 int, Data1 char(4096).
pub fn schema() -> Schema {
    Schema::new(vec![
        ("sid", ColumnType::Int),
        ("c1", ColumnType::Int),
        ("data1", ColumnType::Char(DATA1_BYTES)),
    ])
}

/// Name of table `i`.
pub fn table_name(i: usize) -> String {
    format!("prim{i:02}")
}

/// The row with key `sid` as loaded.
fn row(sid: u64) -> Vec<Value> {
    let fill = b'a' + (sid % 26) as u8;
    vec![Value::Int(sid as i64), Value::Int(sid as i64), Value::Bytes(vec![fill; DATA1_BYTES as usize])]
}

/// Creates `tables` tables and inserts `rows` rows into each (one loader thread per table, at
/// most `threads` at a time), showing a progress bar unless `progress` is false. Flushes at the
/// end.
pub fn load(
    db: &Database,
    tables: usize,
    rows: u64,
    threads: usize,
    progress: bool,
) -> Result<(), PrimitiveError> {
    let handles: Vec<Table> = (0..tables)
        .map(|i| {
            db.create_table(&table_name(i), schema()).map_err(PrimitiveError::engine("creating a table"))
        })
        .collect::<Result<_, _>>()?;
    let total = rows * tables as u64;
    let bar = if progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
    if let Ok(style) =
        ProgressStyle::with_template("loading {pos}/{len} rows [{wide_bar}] {per_sec} eta {eta} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(db.location());
    let next = AtomicU64::new(0);
    let first_error: Mutex<Option<PrimitiveError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, tables.max(1)) {
            s.spawn(|| loop {
                let t = next.fetch_add(1, Ordering::Relaxed) as usize;
                if t >= handles.len() {
                    return;
                }
                for sid in 0..rows {
                    if let Err(e) = handles[t].insert(&row(sid)) {
                        let mut slot = first_error.lock().unwrap_or_else(|e| e.into_inner());
                        slot.get_or_insert(PrimitiveError::engine("loading rows")(e));
                        return;
                    }
                    if sid % 256 == 255 {
                        bar.inc(256);
                    }
                }
                bar.inc(rows % 256);
            });
        }
    });
    bar.finish_and_clear();
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    db.flush().map_err(PrimitiveError::engine("flushing the loaded data"))
}

/// Reads the first `share` (0..=1) of each table's rows in heap order, one thread per table, so
/// a large buffer starts full rather than filling during the warm-up.
pub fn prewarm(tables: &[Table], rows: u64, share: f64) -> Result<(), PrimitiveError> {
    let want = ((rows as f64) * share.clamp(0.0, 1.0)).ceil() as u64;
    if want == 0 {
        return Ok(());
    }
    let results: Vec<Result<(), PrimitiveError>> = std::thread::scope(|s| {
        let hs: Vec<_> = tables
            .iter()
            .map(|t| {
                s.spawn(move || {
                    let mut n = 0u64;
                    t.scan(|_| {
                        n += 1;
                        Ok(n < want)
                    })
                    .map_err(PrimitiveError::engine("pre-warming the buffer"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    results.into_iter().collect()
}

/// One single-row SELECT transaction: reads the row with key `sid` and touches C1 and Data1
/// (zero copy). Returns false if the row is missing.
pub fn run_select(table: &Table, sid: i64) -> Result<bool, nvmedb::Error> {
    // A transaction boundary goes here when transactions exist (read-only: no log record).
    let got = table.read(&Value::Int(sid), |v| v.int(COL_C1).wrapping_add(i64::from(v.bytes(2)[0])))?;
    Ok(got.is_some())
}

/// One single-row UPDATE transaction: sets C1 of the row with key `sid`. With the database's
/// log on, this is a durable transaction: it returns after its commit record is durable
/// (group commit), holding the row's lock until then.
pub fn run_update(table: &Table, sid: i64, value: i64) -> Result<bool, nvmedb::Error> {
    table.update_int(&Value::Int(sid), COL_C1, value)
}

/// The CPU time this thread has used, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

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
    /// Record a `Cpu` span around every transaction (the tracer must be started by the caller).
    pub trace_spans: bool,
    /// Extra CPU burnt per transaction before it runs, ns (stands in for the SQL layer and the
    /// client round trip that the papers' t_cpu includes; 0 = the engine alone).
    pub app_cpu_ns: u64,
}

/// Burns `ns` of this thread's CPU time (not wall time: a preempted thread keeps burning when
/// it runs again), standing in for per-transaction work above the engine.
pub fn burn_cpu(ns: u64) {
    if ns == 0 {
        return;
    }
    let end = thread_cpu_ns() + ns;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
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
    pub table_stats: nvmedb::BufferStats,
    /// Index-buffer counters over the window.
    pub index_stats: nvmedb::BufferStats,
    /// CPU time of all clients in the window, ns.
    pub client_cpu_ns: u64,
    /// Transaction latency percentiles, µs: p50, p99.
    pub latency_us: (f64, f64),
    /// Process CPU over the window in cores (clients plus anything else in the process).
    pub process_cpu_cores: f64,
    /// Log bytes written in the window (0 without a log).
    pub log_bytes: u64,
}

struct ClientOut {
    transactions: u64,
    cpu_ns: u64,
    hist: Histogram<u64>,
}

fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: as in thread_cpu_ns, for the process clock.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs one point: `plan.clients` threads run transactions until the warm-up and the window
/// have passed; `on_window` is called when the window opens and its result when it closes
/// (the tracer uses these). Fails on the first engine error or a missing row.
pub fn measure(
    db: &Database,
    tables: &[Table],
    plan: &PointPlan,
    on_window: &mut dyn FnMut(bool),
) -> Result<PointMeasurement, PrimitiveError> {
    if tables.is_empty() || plan.rows == 0 || plan.clients == 0 {
        return Err(PrimitiveError::Config("a point needs tables, rows and clients".into()));
    }
    let proto = Histogram::<u64>::new_with_bounds(1, 60_000_000, 2)
        .map_err(|e| PrimitiveError::Config(format!("latency histogram: {e}")))?;
    let measuring = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<PrimitiveError>> = Mutex::new(None);
    let fail = |e: PrimitiveError| {
        first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
        stop.store(true, Ordering::Relaxed);
    };
    let (outs, window, stats0, stats1, pcpu, log_bytes) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plan.clients)
            .map(|c| {
                let (measuring, stop, fail, proto) = (&measuring, &stop, &fail, &proto);
                s.spawn(move || {
                    if plan.trace_spans {
                        trace::set_thread_label(format!("client {c:02}"));
                    }
                    let mut rng = Rng::new(plan.seed ^ (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let mut hist = proto.clone();
                    let mut out = ClientOut { transactions: 0, cpu_ns: 0, hist: proto.clone() };
                    let mut cpu0 = None;
                    while !stop.load(Ordering::Relaxed) {
                        let m = measuring.load(Ordering::Acquire);
                        if m && cpu0.is_none() {
                            cpu0 = Some(thread_cpu_ns());
                        } else if !m && cpu0.is_some() {
                            break;
                        }
                        let t = rng.below(tables.len() as u64) as usize;
                        let sid = rng.below(plan.rows) as i64;
                        let t0 = Instant::now();
                        let span = plan.trace_spans.then(|| trace::span(TraceKind::Cpu));
                        burn_cpu(plan.app_cpu_ns);
                        let r = match plan.workload {
                            Workload::Select => run_select(&tables[t], sid),
                            Workload::Update => run_update(&tables[t], sid, rng.next_u64() as i64 >> 1),
                        };
                        drop(span);
                        match r {
                            Ok(true) => {}
                            Ok(false) => {
                                fail(PrimitiveError::Missing { table: tables[t].name().to_string(), sid });
                                break;
                            }
                            Err(e) => {
                                fail(PrimitiveError::engine("running a transaction")(e));
                                break;
                            }
                        }
                        if m {
                            out.transactions += 1;
                            let _ = hist.record((t0.elapsed().as_nanos() as u64 / 1000).max(1));
                        }
                    }
                    if let Some(c0) = cpu0 {
                        out.cpu_ns = thread_cpu_ns().saturating_sub(c0);
                    }
                    out.hist = hist;
                    out
                })
            })
            .collect();
        let sleep_until = |deadline: Instant| {
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
            }
        };
        sleep_until(Instant::now() + plan.warmup);
        let log_written = || db.engine_log().map_or(0, |l| l.record_log().stats().bytes_written);
        let stats0 = db.buffer_stats();
        let log0 = log_written();
        let pcpu0 = process_cpu_ns();
        on_window(true);
        let t0 = Instant::now();
        measuring.store(true, Ordering::Release);
        sleep_until(t0 + plan.duration);
        measuring.store(false, Ordering::Release);
        let window = t0.elapsed();
        on_window(false);
        let stats1 = db.buffer_stats();
        let log_bytes = log_written().saturating_sub(log0);
        let pcpu = process_cpu_ns().saturating_sub(pcpu0);
        stop.store(true, Ordering::Relaxed);
        let outs: Vec<ClientOut> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        (outs, window, stats0, stats1, pcpu, log_bytes)
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let mut hist = proto;
    for o in &outs {
        let _ = hist.add(&o.hist);
    }
    let window_s = window.as_secs_f64();
    Ok(PointMeasurement {
        transactions: outs.iter().map(|o| o.transactions).sum(),
        window_s,
        table_stats: stats1.0.since(&stats0.0),
        index_stats: stats1.1.since(&stats0.1),
        client_cpu_ns: outs.iter().map(|o| o.cpu_ns).sum(),
        latency_us: (hist.value_at_quantile(0.5) as f64, hist.value_at_quantile(0.99) as f64),
        process_cpu_cores: pcpu as f64 / 1e9 / window_s.max(1e-9),
        log_bytes,
    })
}
