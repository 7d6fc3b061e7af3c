//! Worker threads with a warm-up and a measured window: the closed loop every experiment runs.
//!
//! Owns: [`Workers`] (how many threads, how long to warm up and to measure, whether to time each
//! operation), [`WindowHooks`] (what the coordinating thread does when the window opens, ticks
//! and closes: counter snapshots, the tracer, a progress bar) and [`WindowRun`] (operations,
//! window length, latencies, CPU). Invariants: an operation counts, and its latency is recorded,
//! when it started inside the window; a worker's CPU time runs from its first operation in the
//! window to its exit, which follows the window's close; the first error stops every worker and
//! is the one returned; a panicking worker is an error, never a hang; a window closes only once
//! at least one operation has counted (a very short window on a loaded machine can otherwise
//! pass while every worker is descheduled and measure nothing), staying open for at most
//! [`MAX_EXTENSION`] beyond its length, and its reported length includes the extension.

use super::clock::{process_cpu_ns, thread_cpu_ns};
use super::hist::LatencyHistogram;
use crate::error::{LabError, Result};
use nvmedb::util::sync::MutexExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the coordinating thread calls [`WindowHooks::tick`].
pub const TICK: Duration = Duration::from_millis(100);

/// How long a window that has counted no operation yet stays open beyond its length.
pub const MAX_EXTENSION: Duration = Duration::from_secs(30);

/// A set of worker threads and its timing.
#[derive(Debug, Clone)]
pub struct Workers {
    /// Worker threads.
    pub threads: usize,
    /// Warm-up before the window: operations run but do not count.
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
    /// Time every operation (two clock reads each) into [`WindowRun::latency`].
    pub latency: bool,
    /// What the workers do, for error messages ("running SELECT clients").
    pub what: String,
}

impl Workers {
    /// `threads` workers measured for `window` after `warmup`, not timing single operations.
    pub fn new(what: impl Into<String>, threads: usize, warmup: Duration, window: Duration) -> Self {
        Self { threads, warmup, window, latency: false, what: what.into() }
    }

    /// Times every operation.
    pub fn with_latency(mut self) -> Self {
        self.latency = true;
        self
    }
}

/// What the coordinating thread does around the window. Every method has an empty default.
pub trait WindowHooks {
    /// Just before the window opens (counter snapshots, starting a tracer).
    fn opened(&mut self) {}
    /// About every [`TICK`] inside the window, with the time since it opened and the operations
    /// counted so far.
    fn tick(&mut self, _elapsed: Duration, _ops: u64) {}
    /// Just after the window closes, before the workers are stopped.
    fn closed(&mut self) {}
}

/// No hooks.
impl WindowHooks for () {}

/// What one run of the workers measured.
#[derive(Debug)]
pub struct WindowRun<S> {
    /// Each worker's state as its loop left it, in worker order.
    pub states: Vec<S>,
    /// Operations counted in the window (the sum of what the operations returned).
    pub ops: u64,
    /// Length of the window.
    pub window: Duration,
    /// Latency of every counted operation call (empty unless [`Workers::latency`]).
    pub latency: LatencyHistogram,
    /// CPU time of the workers in the window, ns.
    pub worker_cpu_ns: u64,
    /// CPU time of the whole process in the window, ns.
    pub process_cpu_ns: u64,
}

impl<S> WindowRun<S> {
    /// Operations per second of window.
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// Operations per second of worker CPU time.
    pub fn ops_per_cpu_s(&self) -> f64 {
        self.ops as f64 / (self.worker_cpu_ns as f64 / 1e9).max(1e-9)
    }

    /// Process CPU over the window, in cores.
    pub fn process_cpu_cores(&self) -> f64 {
        self.process_cpu_ns as f64 / 1e9 / self.window.as_secs_f64().max(1e-9)
    }
}

/// A per-worker counter on its own cache lines, so workers never share a line.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

struct WorkerOut<S> {
    state: S,
    ops: u64,
    hist: LatencyHistogram,
    cpu_ns: u64,
}

struct Shared {
    measuring: AtomicBool,
    stop: AtomicBool,
    first_error: Mutex<Option<LabError>>,
}

impl Shared {
    fn fail(&self, e: LabError) {
        self.first_error.locked().get_or_insert(e);
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Sleeps until `deadline` or until a worker failed.
    fn sleep_until(&self, deadline: Instant, hooks: Option<(&mut dyn WindowHooks, Instant, &[Counter])>) {
        let mut hooks = hooks;
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            std::thread::sleep((deadline - now).min(TICK));
            if let Some((h, t0, counters)) = hooks.as_mut() {
                let ops = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
                h.tick(t0.elapsed(), ops);
            }
        }
    }
}

impl Workers {
    /// Runs the workers. Each builds its state with `init(worker index)`, then calls
    /// `op(&mut state, measuring)` in a loop; `op` returns how many operations it completed
    /// (0: none to count, e.g. a transaction to retry). Returns when the window has closed and
    /// every worker has stopped.
    pub fn run<S, I, Op>(&self, init: I, op: Op, hooks: &mut dyn WindowHooks) -> Result<WindowRun<S>>
    where
        S: Send,
        I: Fn(usize) -> Result<S> + Sync,
        Op: Fn(&mut S, bool) -> Result<u64> + Sync,
    {
        if self.threads == 0 {
            return Err(LabError::config("threads", format!("{}: need at least one worker", self.what)));
        }
        let shared = Shared {
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            first_error: Mutex::new(None),
        };
        let counters: Vec<Counter> = (0..self.threads).map(|_| Counter::default()).collect();
        let (outs, window, process_cpu) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.threads)
                .map(|i| {
                    let (shared, init, op, counter) = (&shared, &init, &op, &counters[i]);
                    s.spawn(move || self.worker(i, shared, init, op, counter))
                })
                .collect();
            shared.sleep_until(Instant::now() + self.warmup, None);
            hooks.opened();
            let pcpu0 = process_cpu_ns();
            let t0 = Instant::now();
            shared.measuring.store(true, Ordering::Release);
            shared.sleep_until(t0 + self.window, Some((&mut *hooks, t0, &counters)));
            let extended_until = t0 + self.window + MAX_EXTENSION;
            while counters.iter().all(|c| c.0.load(Ordering::Relaxed) == 0)
                && !shared.stop.load(Ordering::Relaxed)
                && !handles.iter().any(|h| h.is_finished())
                && Instant::now() < extended_until
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            shared.measuring.store(false, Ordering::Release);
            let window = t0.elapsed();
            let process_cpu = process_cpu_ns().saturating_sub(pcpu0);
            hooks.closed();
            shared.stop.store(true, Ordering::Relaxed);
            let outs: Vec<Option<Option<WorkerOut<S>>>> =
                handles.into_iter().map(|h| h.join().ok()).collect();
            (outs, window, process_cpu)
        });
        if let Some(e) = shared.first_error.into_value() {
            return Err(e);
        }
        let mut run = WindowRun {
            states: Vec::with_capacity(self.threads),
            ops: 0,
            window,
            latency: LatencyHistogram::new(),
            worker_cpu_ns: 0,
            process_cpu_ns: process_cpu,
        };
        for out in outs {
            // `None` from join: the worker panicked; an inner `None` follows a recorded error.
            let Some(Some(o)) = out else { return Err(LabError::WorkerPanicked { what: self.what.clone() }) };
            run.ops += o.ops;
            run.latency.add(&o.hist);
            run.worker_cpu_ns += o.cpu_ns;
            run.states.push(o.state);
        }
        Ok(run)
    }

    fn worker<S, I, Op>(
        &self,
        index: usize,
        shared: &Shared,
        init: &I,
        op: &Op,
        counter: &Counter,
    ) -> Option<WorkerOut<S>>
    where
        I: Fn(usize) -> Result<S>,
        Op: Fn(&mut S, bool) -> Result<u64>,
    {
        let mut state = match init(index) {
            Ok(s) => s,
            Err(e) => {
                shared.fail(e);
                return None;
            }
        };
        let mut hist = LatencyHistogram::new();
        let mut ops = 0u64;
        let mut cpu0 = None;
        while !shared.stop.load(Ordering::Relaxed) {
            let measuring = shared.measuring.load(Ordering::Acquire);
            if measuring && cpu0.is_none() {
                cpu0 = Some(thread_cpu_ns());
            } else if !measuring && cpu0.is_some() {
                break;
            }
            let t0 = self.latency.then(Instant::now);
            match op(&mut state, measuring) {
                Ok(n) if measuring && n > 0 => {
                    ops += n;
                    counter.0.store(ops, Ordering::Relaxed);
                    if let Some(t0) = t0 {
                        hist.record(t0.elapsed());
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    shared.fail(e);
                    return None;
                }
            }
        }
        let cpu_ns = cpu0.map_or(0, |c| thread_cpu_ns().saturating_sub(c));
        Some(WorkerOut { state, ops, hist, cpu_ns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Marks(Vec<&'static str>, u64);

    impl WindowHooks for Marks {
        fn opened(&mut self) {
            self.0.push("opened");
        }
        fn tick(&mut self, _: Duration, ops: u64) {
            self.1 = self.1.max(ops);
        }
        fn closed(&mut self) {
            self.0.push("closed");
        }
    }

    #[test]
    fn counts_only_the_window_and_records_latency() {
        let w =
            Workers::new("counting", 3, Duration::from_millis(30), Duration::from_millis(250)).with_latency();
        let warm = AtomicU64::new(0);
        let mut marks = Marks(Vec::new(), 0);
        let run = w
            .run(
                |i| Ok(i as u64),
                |_, measuring| {
                    if !measuring {
                        warm.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                    Ok(1)
                },
                &mut marks,
            )
            .unwrap();
        assert_eq!(marks.0, ["opened", "closed"]);
        assert!(warm.load(Ordering::Relaxed) > 0, "the warm-up ran operations");
        assert!(
            run.ops > 0 && run.latency.len() == run.ops,
            "{} ops, {} latencies",
            run.ops,
            run.latency.len()
        );
        assert!(marks.1 > 0 && marks.1 <= run.ops, "ticks saw the running count");
        assert!(run.latency.quantile_us(0.5) >= 200.0);
        assert_eq!(run.states, [0, 1, 2]);
        assert!(run.window >= Duration::from_millis(250));
        assert!(run.ops_per_s() > 0.0);
    }

    #[test]
    fn a_window_stays_open_until_an_operation_counts() {
        // Every operation outlasts the window: without the extension it would count none.
        let w = Workers::new("slow", 1, Duration::ZERO, Duration::from_millis(5));
        let run = w
            .run(
                |_| Ok(()),
                |_, _| {
                    std::thread::sleep(Duration::from_millis(60));
                    Ok(1)
                },
                &mut (),
            )
            .unwrap();
        assert!(run.ops >= 1, "the window closed before any operation counted");
        assert!(run.window >= Duration::from_millis(60), "the reported window includes the extension");
    }

    #[test]
    fn the_first_error_stops_everyone_and_a_panic_is_an_error() {
        let w = Workers::new("failing", 2, Duration::ZERO, Duration::from_secs(30));
        let t0 = Instant::now();
        let e = w.run(|_| Ok(()), |_, _| Err(LabError::config("x", "broken")), &mut ()).unwrap_err();
        assert_eq!(e.to_string(), "x: broken");
        assert!(t0.elapsed() < Duration::from_secs(10), "the window ended early");
        let w = Workers::new("panicking", 1, Duration::ZERO, Duration::from_millis(20));
        let e = w.run(|_| Ok(()), |_, m| if m { panic!("boom") } else { Ok(0) }, &mut ()).unwrap_err();
        assert!(matches!(e, LabError::WorkerPanicked { .. }), "{e}");
        assert!(Workers::new("none", 0, Duration::ZERO, Duration::ZERO)
            .run(|_| Ok(()), |_, _| Ok(1), &mut ())
            .is_err());
    }
}
