//! The experiments: one module each, each a unit struct implementing
//! [`crate::experiment::Experiment`].
//!
//! Owns: [`iobench`] (fio-like device benchmark), [`engine`] (buffer manager, tables, locks),
//! [`commit`] (durable commits, the log alone, recovery), [`primitive`] (seed 000/001 primitive
//! workload), [`xlog`] (seed 002 §6), [`ha`] (seed 000 Case B, seed 002 Fig. 13), [`tpch`]
//! (seed 004: TPC-H Q3 under SHR-k and SEP), `peers` (RocksDB, LMDB, SQLite in the same run;
//! cargo feature `peers`). Invariant: an experiment imports shared pieces
//! from `measure/`, `workload/` and `report/`, never from another experiment (iobench's
//! [`iobench::measure`] is the device reference every experiment may call).

pub mod commit;
pub mod engine;
pub mod ha;
pub mod iobench;
#[cfg(feature = "peers")]
pub mod peers;
pub mod primitive;
pub mod tpcc;
pub mod tpch;
pub mod xlog;
