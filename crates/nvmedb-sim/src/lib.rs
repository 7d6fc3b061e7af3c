//! The deterministic simulator of an nvmedb cluster (docs/ha.md, "The deterministic simulator").
//!
//! One process, one seed: a primary and one to three standbys — the real `nvmedb::repl` code,
//! its threads included — on simulated clocks ([`sched`]), a simulated network ([`net`]),
//! crash-simulated disks ([`disk`]) and an in-memory coordination store with leases on a
//! simulated clock ([`store`]), in every commit mode, failing over automatically; clients commit
//! and read while a nemesis injects the faults of the seed's [`schedule`]; the run is then
//! healed and checked ([`check`]). Every decision follows the seed, so a failure replays exactly:
//! `NVMEDB_SIM_SEED=<seed> cargo test -p nvmedb-sim --test sim`.
//!
//! Layers, each using only those before it: `sched` → `net`, `disk`, `store` → `schedule` →
//! `check` → `world`.

pub mod check;
pub mod disk;
pub mod net;
pub mod sched;
pub mod schedule;
pub mod store;
pub mod world;

pub use schedule::{Fault, Schedule};
pub use world::{run_schedule, run_seed, Failure, Outcome};
