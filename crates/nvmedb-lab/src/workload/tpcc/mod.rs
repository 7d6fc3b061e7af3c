//! TPC-C (TPC-C 5.11) on the engine: the mixed workload of seeds 000, 002 and 003, with zero
//! think and keying time as in the seeds.
//!
//! Errors are [`LabError`](crate::LabError)s: a failed consistency condition is
//! `LabError::Inconsistent` naming the condition, warehouse and district.
//!
//! Owns: [`schema`] (the nine tables, keys, scale), [`random`] (NURand, strings, names),
//! [`load`] (the initial population of §4.3.3, in parallel, log off, then a checkpoint),
//! [`input`] (what a terminal submits: the 45/43/4/4/4 deck and each transaction's inputs of
//! §2.4–§2.8), [`txn`] (the five transactions as engine transactions under strict two-phase
//! locking, with deadlock and lock-timeout retries) and [`check`] (the consistency conditions
//! of §3.3.2). Invariant: every read and write of a transaction goes through one
//! [`nvmedb::Transaction`]; nothing here keeps state the database does not hold, except the
//! NURand constants of the load (which a run needs to choose its own, §2.1.6).

pub mod check;
pub mod input;
pub mod load;
pub mod random;
pub mod schema;
pub mod txn;

pub use check::{check_consistency, ConsistencyReport};
pub use input::{Deck, Terminal, TxnInput, TxnKind};
pub use load::{load, LoadReport};
pub use random::{NuConstants, TpccRng};
pub use schema::{RowCounts, Scale, Tables};
pub use txn::{execute, execute_with_retries, TxnOutput};
