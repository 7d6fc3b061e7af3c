//! nvmedb-lab: the laboratory. Experiments that drive the engine through its public API and
//! turn their measurements into CSV, JSON, plots and summaries.

#![warn(missing_docs)]

pub mod enginebench;
pub mod fio;
pub mod ha;
pub mod iobench;
pub mod machine;
pub mod model;
pub mod primitive;
pub mod report;
pub mod xloglab;
