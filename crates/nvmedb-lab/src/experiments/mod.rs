//! The experiments: one module each, each a unit struct implementing
//! [`crate::experiment::Experiment`].
//!
//! Owns: [`iobench`] (fio-like device benchmark), [`engine`] (buffer manager, tables, locks),
//! [`commit`] (durable commits, the log alone, recovery), [`primitive`] (seed 000/001 primitive
//! workload), [`xlog`] (seed 002 §6), [`ha`] (seed 000 Case B, seed 002 Fig. 13), [`tpch`]
//! (seed 004: TPC-H Q3 under SHR-k and SEP), [`tier`] (seed 003: TPC-C on storage tiers, the
//! placement advisor), [`cost`] (seed 000 §5.4: cost performance of the HA servers) and
//! [`pgbench`] (pgbench against `nvmedb serve` and PostgreSQL 15), [`clients`] (sysbench and a TPC-C kit
//! against the same two servers), [`ops`] (standby reads,
//! backup and restore rates), `peers` (RocksDB, LMDB,
//! SQLite in the same run; cargo feature `peers`).
//! Invariant: an experiment imports shared pieces from `measure/`, `workload/` and `report/`,
//! never from another experiment, with two exceptions: iobench's [`iobench::measure`] is the
//! device reference every experiment may call, and the TPC-C experiment's databases and points
//! (`tpcc::setup`, `tpcc::point`) and results are what `tier` and `cost` build on, and `clients`
//! starts and sizes its servers with pgbench's (`pgbench::servers`, `pgbench::size_buffers`).

pub mod clients;
pub mod commit;
pub mod cost;
pub mod engine;
pub mod ha;
pub mod iobench;
pub mod ops;
#[cfg(feature = "peers")]
pub mod peers;
pub mod pgbench;
pub mod primitive;
pub mod tier;
pub mod tpcc;
pub mod tpch;
pub mod xlog;
