//! nvmedb-lab: the laboratory. Experiments that drive the engine through its public API and
//! turn their measurements into CSV, JSON, plots and summaries.
//!
//! Layout: [`experiment`] (the one `Experiment` trait and the driver every run goes through),
//! [`error`] ([`LabError`]), [`measure`] (histograms, CPU clocks, statistics, worker threads,
//! fio, progress bars), [`workload`] (tables and transactions shared by experiments),
//! [`experiments`] (one module per experiment), [`report`] (the only writer of CSV, JSON and
//! plots), [`page`] (the whole-lab HTML page: every seed figure beside ours), [`model`] (seed
//! 000 §3), [`machine`] (what ran where), [`files`] (data directories kept between runs) and, with feature `etcd`, `cluster` (an automatically
//! failing-over cluster of `nvmedb node` processes on loopback).

#![warn(missing_docs)]

pub mod advisor;
#[cfg(feature = "etcd")]
pub mod cluster;
pub mod error;
pub mod experiment;
pub mod experiments;
pub mod files;
pub mod machine;
pub mod measure;
pub mod model;
pub mod page;
pub mod report;
pub mod workload;

pub use error::LabError;
pub use experiment::{Experiment, Outcome, RunEnv, RunOptions, Summary};
