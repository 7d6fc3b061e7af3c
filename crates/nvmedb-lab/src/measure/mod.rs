//! Measuring: the instruments every experiment shares.
//!
//! Owns: [`hist`] (the one latency-histogram set-up), [`clock`] (thread, process and child CPU
//! clocks), [`cpus`] (which CPUs a node's threads run on), [`device`] (where an experiment's data lives, and its label), [`stats`] (median
//! and min/median/max of repetitions), [`workers`] (worker threads with a warm-up and a
//! measured window), [`fio`] (fio as the device reference), [`profile`] (`perf` CPU profiles of a measured
//! window), [`pgbench`] (pgbench as a client), [`process`] (server child
//! processes) and [`progress`] (progress bars). Invariant: an experiment measures with these and writes no
//! second copy of them.

pub mod clock;
pub mod cpus;
pub mod device;
pub mod fio;
pub mod hist;
pub mod pgbench;
pub mod process;
pub mod profile;
pub mod progress;
pub mod stats;
pub mod workers;

pub use clock::{burn_thread_cpu, children_cpu_ns, pid_cpu_ns, process_cpu_ns, thread_cpu_ns, tree_cpu_ns};
pub use device::DeviceKind;
pub use hist::{LatencyHistogram, LatencySummary};
pub use stats::{median, Spread};
pub use workers::{WindowHooks, WindowRun, Workers};
