//! Collected traces and the interval arithmetic on them: per-kind totals, exclusive time when
//! intervals of one thread overlap, utilisation, and the model inputs (CPU time between data
//! reads, mean read latency).
//!
//! Owns: `Trace`, `ThreadTrace`, `Interval`, `KindTotals`, `KindStats`. Invariants: every
//! interval has `start_ns <= end_ns`; exclusive accounting attributes each instant of a thread
//! to at most one kind (the highest [`TraceKind::priority`] active then), so a thread's
//! exclusive times never add up to more than the span its intervals cover.

use super::TraceKind;

/// One interval of one thread. In a collected [`Trace`], times are nanoseconds since the trace
/// epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// What the thread was doing.
    pub kind: TraceKind,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns (`>= start_ns`).
    pub end_ns: u64,
}

impl Interval {
    /// Length in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// Nanoseconds per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindTotals(pub [u64; TraceKind::COUNT]);

impl KindTotals {
    /// Nanoseconds of `kind`.
    pub fn get(&self, kind: TraceKind) -> u64 {
        self.0[kind.index()]
    }
    /// Sum over all kinds.
    pub fn sum(&self) -> u64 {
        self.0.iter().sum()
    }
    fn add(&mut self, other: &KindTotals) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }
}

/// Count and duration statistics of one kind's intervals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KindStats {
    /// Number of intervals.
    pub count: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
    /// Mean duration, ns (0 when `count == 0`).
    pub mean_ns: f64,
    /// Longest duration, ns.
    pub max_ns: u64,
}

/// The intervals of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadTrace {
    /// Registration order of the thread in this process (stable row order).
    pub thread_index: u32,
    /// Label set with [`super::set_thread_label`], or `"thread N"`.
    pub label: String,
    /// Intervals sorted by start.
    pub intervals: Vec<Interval>,
    /// Intervals lost because the buffer was full.
    pub dropped: u64,
}

impl ThreadTrace {
    /// Sum of interval durations per kind, counting overlaps twice.
    pub fn totals_ns(&self) -> KindTotals {
        let mut t = KindTotals::default();
        for iv in &self.intervals {
            t.0[iv.kind.index()] += iv.duration_ns();
        }
        t
    }

    /// Time per kind where each instant goes to the highest-priority kind active then (so a
    /// read inside a CPU span counts as read, not CPU). Idle time counts for no kind.
    pub fn exclusive_ns(&self) -> KindTotals {
        // Sweep over start/end events; between two event times the top active kind owns it.
        let mut events: Vec<(u64, bool, TraceKind)> = Vec::with_capacity(self.intervals.len() * 2);
        for iv in &self.intervals {
            events.push((iv.start_ns, true, iv.kind));
            events.push((iv.end_ns, false, iv.kind));
        }
        events.sort_unstable_by_key(|e| e.0);
        let mut active = [0u32; TraceKind::COUNT];
        let mut out = KindTotals::default();
        let mut prev_t = 0u64;
        for (t, is_start, kind) in events {
            if t > prev_t {
                if let Some(top) = top_active(&active) {
                    out.0[top.index()] += t - prev_t;
                }
            }
            prev_t = t;
            let slot = &mut active[kind.index()];
            if is_start {
                *slot += 1;
            } else {
                *slot = slot.saturating_sub(1);
            }
        }
        out
    }

    /// Time covered by at least one interval, ns.
    pub fn busy_ns(&self) -> u64 {
        self.exclusive_ns().sum()
    }
}

fn top_active(active: &[u32; TraceKind::COUNT]) -> Option<TraceKind> {
    TraceKind::ALL.into_iter().filter(|k| active[k.index()] > 0).max_by_key(|k| k.priority())
}

/// Everything collected in one tracing window.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    /// From the trace epoch to the collection, ns.
    pub duration_ns: u64,
    /// One entry per thread that recorded (or dropped) something, by registration order.
    pub threads: Vec<ThreadTrace>,
}

impl Trace {
    /// Raw per-kind totals over all threads (overlaps counted twice).
    pub fn totals_ns(&self) -> KindTotals {
        let mut t = KindTotals::default();
        self.threads.iter().for_each(|th| t.add(&th.totals_ns()));
        t
    }

    /// Exclusive per-kind totals over all threads (see [`ThreadTrace::exclusive_ns`]).
    pub fn exclusive_ns(&self) -> KindTotals {
        let mut t = KindTotals::default();
        self.threads.iter().for_each(|th| t.add(&th.exclusive_ns()));
        t
    }

    /// Share of the window (threads × `window_ns`) each kind occupied, exclusive accounting.
    /// `window_ns` is usually [`Trace::duration_ns`] or [`Trace::span_ns`]; 0 gives zeros.
    pub fn utilisation(&self, window_ns: u64) -> [f64; TraceKind::COUNT] {
        let denom = window_ns as f64 * self.threads.len() as f64;
        let ex = self.exclusive_ns();
        let mut u = [0.0; TraceKind::COUNT];
        if denom > 0.0 {
            for k in TraceKind::ALL {
                u[k.index()] = ex.get(k) as f64 / denom;
            }
        }
        u
    }

    /// From the earliest start to the latest end over all threads, ns (0 if empty).
    pub fn span_ns(&self) -> u64 {
        let ivs = self.threads.iter().flat_map(|t| t.intervals.iter());
        let (lo, hi) = ivs.fold((u64::MAX, 0u64), |(lo, hi), iv| (lo.min(iv.start_ns), hi.max(iv.end_ns)));
        hi.saturating_sub(lo)
    }

    /// Count, total, mean and max duration of `kind`'s intervals over all threads.
    pub fn kind_stats(&self, kind: TraceKind) -> KindStats {
        let mut s = KindStats::default();
        for iv in self.threads.iter().flat_map(|t| t.intervals.iter()).filter(|iv| iv.kind == kind) {
            s.count += 1;
            s.total_ns += iv.duration_ns();
            s.max_ns = s.max_ns.max(iv.duration_ns());
        }
        if s.count > 0 {
            s.mean_ns = s.total_ns as f64 / s.count as f64;
        }
        s
    }

    /// Intervals lost to full buffers, all threads.
    pub fn dropped(&self) -> u64 {
        self.threads.iter().map(|t| t.dropped).sum()
    }

    /// The model input t_cpu of seed 000 §3: exclusive CPU time per data read, ns. `None`
    /// when no data read was traced.
    pub fn cpu_ns_per_data_read(&self) -> Option<f64> {
        let reads = self.kind_stats(TraceKind::DataRead).count;
        (reads > 0).then(|| self.exclusive_ns().get(TraceKind::Cpu) as f64 / reads as f64)
    }

    /// A copy keeping only intervals overlapping `[from_ns, to_ns)`, clipped to it and shifted
    /// so `from_ns` becomes 0 (for charting a short window of a longer trace).
    pub fn window(&self, from_ns: u64, to_ns: u64) -> Trace {
        let threads = self
            .threads
            .iter()
            .map(|t| ThreadTrace {
                thread_index: t.thread_index,
                label: t.label.clone(),
                dropped: t.dropped,
                intervals: t
                    .intervals
                    .iter()
                    .filter(|iv| iv.end_ns > from_ns && iv.start_ns < to_ns)
                    .map(|iv| Interval {
                        kind: iv.kind,
                        start_ns: iv.start_ns.max(from_ns) - from_ns,
                        end_ns: iv.end_ns.min(to_ns) - from_ns,
                    })
                    .collect(),
            })
            .collect();
        Trace { duration_ns: to_ns.saturating_sub(from_ns), threads }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TraceKind::*;

    fn iv(kind: TraceKind, s: u64, e: u64) -> Interval {
        Interval { kind, start_ns: s, end_ns: e }
    }

    fn thread(ivs: Vec<Interval>) -> ThreadTrace {
        ThreadTrace { thread_index: 0, label: "t".into(), intervals: ivs, dropped: 0 }
    }

    #[test]
    fn totals_sum_durations_per_kind() {
        let t =
            thread(vec![iv(Cpu, 0, 100), iv(DataRead, 100, 130), iv(Cpu, 130, 230), iv(LogWait, 230, 300)]);
        let tot = t.totals_ns();
        assert_eq!(tot.get(Cpu), 200);
        assert_eq!(tot.get(DataRead), 30);
        assert_eq!(tot.get(LogWait), 70);
        assert_eq!(tot.get(DataWrite), 0);
        assert_eq!(tot.sum(), 300);
        assert_eq!(t.exclusive_ns(), tot, "no overlap: exclusive equals raw");
    }

    #[test]
    fn exclusive_gives_nested_io_priority_over_cpu() {
        // A CPU span 0..300 containing a write 50..80 and a read 80..110; idle 300..400; a lock
        // wait 400..450 overlapping a CPU span 420..500.
        let t = thread(vec![
            iv(Cpu, 0, 300),
            iv(DataWrite, 50, 80),
            iv(DataRead, 80, 110),
            iv(LockWait, 400, 450),
            iv(Cpu, 420, 500),
        ]);
        let ex = t.exclusive_ns();
        assert_eq!(ex.get(DataWrite), 30);
        assert_eq!(ex.get(DataRead), 30);
        assert_eq!(ex.get(Cpu), 300 - 60 + 50);
        assert_eq!(ex.get(LockWait), 50);
        assert_eq!(t.busy_ns(), 300 + 100);
        assert_eq!(t.totals_ns().get(Cpu), 380, "raw totals count the overlap twice");
    }

    #[test]
    fn utilisation_and_model_inputs() {
        let a =
            thread(vec![iv(Cpu, 0, 100), iv(DataRead, 100, 120), iv(Cpu, 120, 220), iv(DataRead, 220, 240)]);
        let mut b = thread(vec![iv(Cpu, 0, 500)]);
        b.thread_index = 1;
        let tr = Trace { duration_ns: 1000, threads: vec![a, b] };
        let u = tr.utilisation(1000);
        assert!((u[Cpu.index()] - 700.0 / 2000.0).abs() < 1e-12);
        assert!((u[DataRead.index()] - 40.0 / 2000.0).abs() < 1e-12);
        assert_eq!(tr.span_ns(), 500);
        let rs = tr.kind_stats(DataRead);
        assert_eq!((rs.count, rs.total_ns, rs.max_ns), (2, 40, 20));
        assert!((rs.mean_ns - 20.0).abs() < 1e-12);
        assert_eq!(tr.cpu_ns_per_data_read(), Some(350.0));
        assert_eq!(Trace::default().cpu_ns_per_data_read(), None);
        assert_eq!(Trace::default().utilisation(0), [0.0; TraceKind::COUNT]);
    }

    #[test]
    fn window_clips_and_shifts() {
        let tr = Trace {
            duration_ns: 1000,
            threads: vec![thread(vec![iv(Cpu, 0, 100), iv(DataRead, 100, 300), iv(Cpu, 300, 900)])],
        };
        let w = tr.window(200, 400);
        assert_eq!(w.duration_ns, 200);
        assert_eq!(w.threads[0].intervals, vec![iv(DataRead, 0, 100), iv(Cpu, 100, 200)]);
    }

    #[test]
    fn kind_names_round_trip() {
        for k in TraceKind::ALL {
            assert_eq!(TraceKind::from_name(k.name()), Some(k));
            assert_eq!(TraceKind::ALL[k.index()], k);
        }
        assert_eq!(TraceKind::from_name("nope"), None);
    }
}
