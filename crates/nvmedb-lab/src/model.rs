//! The relative-performance model of seed 000 §3 (its Fig. 1): how much of the in-memory
//! throughput a system keeps when data accesses go to an I/O device instead of memory.
//!
//! relative = (t_cpu + t_mem) / (t_cpu + t_io), where
//! - t_cpu: CPU time between I/O accesses to data (for the primitive workload at a small
//!   buffer, where nearly every transaction misses once, the CPU time of one transaction);
//! - t_mem: latency of the memory access that replaces the I/O on a buffer hit (the paper uses
//!   0.1 µs);
//! - t_io: latency of the I/O access to data (for an update: the dirty write-back plus the
//!   page read, and the log wait if it is counted per transaction).
//!
//! The paper's formula assumes every access misses (its "1 % buffer" case: 99 % misses). For a
//! hit ratio h the lab uses the natural extension (our addition, not the paper's): each access
//! costs t_mem with probability h and t_io otherwise, so
//! relative(h) = (t_cpu + t_mem) / (t_cpu + h·t_mem + (1−h)·t_io); h = 0 is the paper's formula
//! and h = 1 gives 1. Like the paper, the model ignores overlapping I/O with other work (task
//! switching), so it is a lower bound when many clients keep the CPU busy during I/O.
//!
//! Owns: `ModelInput` and the model-vs-measured chart. Invariant: times are microseconds,
//! hit ratios are in [0, 1]; results are in (0, 1] for valid inputs.

use crate::report::{LegendPosition, LineChart, Series, SeriesStyle};
use nvmedb::trace::{Trace, TraceKind};
use serde::{Deserialize, Serialize};

/// The memory access latency seed 000 uses, µs.
pub const PAPER_T_MEM_US: f64 = 0.1;

/// The paper's formula: (t_cpu + t_mem) / (t_cpu + t_io), all in the same unit.
pub fn relative_performance(t_cpu: f64, t_mem: f64, t_io: f64) -> f64 {
    (t_cpu + t_mem) / (t_cpu + t_io)
}

/// The formula at buffer hit ratio `hit_ratio` (clamped to [0, 1]):
/// (t_cpu + t_mem) / (t_cpu + h·t_mem + (1−h)·t_io).
pub fn relative_performance_at_hit_ratio(t_cpu: f64, t_mem: f64, t_io: f64, hit_ratio: f64) -> f64 {
    let h = hit_ratio.clamp(0.0, 1.0);
    (t_cpu + t_mem) / (t_cpu + h * t_mem + (1.0 - h) * t_io)
}

/// Measured inputs of the model for one device (and workload).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelInput {
    /// CPU time between data I/Os, µs.
    pub t_cpu_us: f64,
    /// I/O latency per data access, µs.
    pub t_io_us: f64,
    /// Memory access latency, µs.
    pub t_mem_us: f64,
}

impl ModelInput {
    /// Inputs from measured CPU time per transaction and I/O latency per missing access (µs),
    /// with the paper's t_mem.
    pub fn new(t_cpu_us: f64, t_io_us: f64) -> Self {
        Self { t_cpu_us, t_io_us, t_mem_us: PAPER_T_MEM_US }
    }

    /// Inputs from run totals: total CPU time and total I/O time (ns) spent by all clients, and
    /// the number of data accesses that went to the device. `None` without any I/O.
    pub fn from_totals(cpu_ns: u64, io_ns: u64, data_ios: u64) -> Option<Self> {
        (data_ios > 0)
            .then(|| Self::new(cpu_ns as f64 / data_ios as f64 / 1e3, io_ns as f64 / data_ios as f64 / 1e3))
    }

    /// Inputs from a trace: t_cpu is exclusive CPU time per data read; t_io is the time per
    /// data read spent in data reads, dirty write-backs and log waits (exclusive accounting, so
    /// I/O nested in a CPU span is not counted twice). `None` when no data read was traced.
    pub fn from_trace(trace: &Trace) -> Option<Self> {
        let reads = trace.kind_stats(TraceKind::DataRead).count;
        let ex = trace.exclusive_ns();
        let io = ex.get(TraceKind::DataRead) + ex.get(TraceKind::DataWrite) + ex.get(TraceKind::LogWait);
        Self::from_totals(ex.get(TraceKind::Cpu), io, reads)
    }

    /// The paper's estimate (every access misses).
    pub fn relative(&self) -> f64 {
        relative_performance(self.t_cpu_us, self.t_mem_us, self.t_io_us)
    }

    /// The estimate at a buffer hit ratio.
    pub fn relative_at_hit_ratio(&self, hit_ratio: f64) -> f64 {
        relative_performance_at_hit_ratio(self.t_cpu_us, self.t_mem_us, self.t_io_us, hit_ratio)
    }
}

/// Measured relative throughput: `throughput` over the all-in-memory (100 % buffer) one.
pub fn measured_relative(throughput: f64, throughput_in_memory: f64) -> Option<f64> {
    (throughput_in_memory > 0.0).then(|| throughput / throughput_in_memory)
}

/// One device's point on the model-vs-measured chart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelPoint {
    /// Device label (say "emulated" for emulated profiles).
    pub device: String,
    /// Measured inputs.
    pub input: ModelInput,
    /// Measured throughput relative to the 100 % buffer run.
    pub measured_relative: f64,
}

/// Seed 000 Fig. 1 with measurements on it: x = CPU time between I/Os (µs, log), y = relative
/// performance (%); one model curve per device at its measured t_io, and the measured point at
/// its measured t_cpu in the same colour.
pub fn model_vs_measured_chart(title: &str, points: &[ModelPoint]) -> LineChart {
    let mut chart = LineChart::new(title, "CPU time between I/Os, t_cpu (µs)", "relative performance (%)")
        .subtitle("model (t_cpu + t_mem) / (t_cpu + t_io), seed 000 Fig. 1; dots: measured")
        .log_x(true)
        .x_range(1.0, 10_000.0)
        .y_range(0.0, 105.0)
        .legend(LegendPosition::LowerRight);
    let xs: Vec<f64> = (0..=80).map(|i| 10f64.powf(i as f64 / 20.0)).collect();
    for (i, p) in points.iter().enumerate() {
        let curve: Vec<(f64, f64)> = xs
            .iter()
            .map(|&x| (x, 100.0 * relative_performance(x, p.input.t_mem_us, p.input.t_io_us)))
            .collect();
        chart = chart
            .series(
                Series::new(format!("model, {} (t_io {:.1} µs)", p.device, p.input.t_io_us), curve)
                    .style(SeriesStyle::Line)
                    .color(i),
            )
            .series(
                Series::new(
                    format!("measured, {}", p.device),
                    vec![(p.input.t_cpu_us.max(1.0), 100.0 * p.measured_relative)],
                )
                .style(SeriesStyle::Markers)
                .color(i),
            );
    }
    chart
}

/// The model over a buffer sweep, to draw next to measured curves normalised to 100 %: for each
/// `(x, hit_ratio)` (x usually the buffer %, the hit ratio the one the run achieved there), the
/// point `(x, 100 · relative_at_hit_ratio(hit_ratio))`, as a dashed series.
pub fn model_series(name: impl Into<String>, input: &ModelInput, sweep: &[(f64, f64)]) -> Series {
    let points = sweep.iter().map(|&(x, h)| (x, 100.0 * input.relative_at_hit_ratio(h))).collect();
    Series::new(name, points).style(SeriesStyle::Dashed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-4, "{a} != {b}");
    }

    #[test]
    fn paper_examples_section_3() {
        // Seed 000 §3: (100 + 0.1) / (100 + 100) = 50 %, (100 + 0.1) / (100 + 10) = 91 %.
        close(relative_performance(100.0, 0.1, 100.0), 100.1 / 200.0);
        close(relative_performance(100.0, 0.1, 10.0), 100.1 / 110.0);
        assert_eq!((ModelInput::new(100.0, 100.0).relative() * 100.0).round(), 50.0);
        assert_eq!((ModelInput::new(100.0, 10.0).relative() * 100.0).round(), 91.0);
    }

    #[test]
    fn paper_examples_section_5_and_seed_001() {
        // Seed 000 §5.1: CPU 100–150 µs between I/Os, I/O 20–30 µs -> "80–90 %".
        close(ModelInput::new(100.0, 20.0).relative(), 100.1 / 120.0); // 83.4 %
        close(ModelInput::new(150.0, 30.0).relative(), 150.1 / 180.0); // 83.4 %
        close(ModelInput::new(150.0, 20.0).relative(), 150.1 / 170.0); // 88.3 %
                                                                       // Seed 001 §4.1: CPU ~400 µs, I/O ~30 µs (Optane) and ~400 µs (NAND) -> 93 % and 50 %.
        assert_eq!((ModelInput::new(400.0, 30.0).relative() * 100.0).round(), 93.0);
        assert_eq!((ModelInput::new(400.0, 400.0).relative() * 100.0).round(), 50.0);
    }

    #[test]
    fn model_series_over_a_sweep() {
        let s = model_series("model", &ModelInput::new(100.0, 10.0), &[(1.0, 0.01), (100.0, 1.0)]);
        assert_eq!(s.style, SeriesStyle::Dashed);
        close(s.points[0].1, 100.0 * 100.1 / (100.0 + 0.01 * 0.1 + 0.99 * 10.0));
        close(s.points[1].1, 100.0);
    }

    #[test]
    fn hit_ratio_extension() {
        let m = ModelInput::new(100.0, 100.0);
        close(m.relative_at_hit_ratio(0.0), m.relative());
        close(m.relative_at_hit_ratio(1.0), 1.0);
        // h = 0.5: 100.1 / (100 + 0.05 + 50).
        close(m.relative_at_hit_ratio(0.5), 100.1 / 150.05);
        close(m.relative_at_hit_ratio(7.0), 1.0);
    }

    #[test]
    fn inputs_from_totals_and_traces() {
        // 10 reads, 1 ms CPU, 300 µs I/O in total -> t_cpu 100 µs, t_io 30 µs.
        let m = ModelInput::from_totals(1_000_000, 300_000, 10).expect("has I/O");
        close(m.t_cpu_us, 100.0);
        close(m.t_io_us, 30.0);
        assert!(ModelInput::from_totals(1, 1, 0).is_none());
        assert_eq!(measured_relative(90.0, 100.0), Some(0.9));
        assert_eq!(measured_relative(1.0, 0.0), None);

        use nvmedb::trace::{Interval, ThreadTrace};
        let iv = |kind, s, e| Interval { kind, start_ns: s, end_ns: e };
        // A CPU span of 130 µs per transaction with a 30 µs read inside it, twice.
        let t = Trace {
            duration_ns: 300_000,
            threads: vec![ThreadTrace {
                thread_index: 0,
                label: "client 0".into(),
                dropped: 0,
                intervals: vec![
                    iv(TraceKind::Cpu, 0, 130_000),
                    iv(TraceKind::DataRead, 50_000, 80_000),
                    iv(TraceKind::Cpu, 150_000, 280_000),
                    iv(TraceKind::DataRead, 200_000, 230_000),
                ],
            }],
        };
        let m = ModelInput::from_trace(&t).expect("reads traced");
        close(m.t_cpu_us, 100.0);
        close(m.t_io_us, 30.0);
    }
}
