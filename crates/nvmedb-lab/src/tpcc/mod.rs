//! TPC-C (TPC-C 5.11) on the engine: the mixed workload of seeds 000, 002 and 003, with zero
//! think and keying time as in the seeds.
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

/// An error of the TPC-C workload, naming what failed.
#[derive(Debug)]
pub enum TpccError {
    /// A bad configuration value.
    Config(String),
    /// The engine failed while doing `context`.
    Engine {
        /// What the workload was doing.
        context: String,
        /// The engine's error.
        source: nvmedb::Error,
    },
    /// A row the specification guarantees is missing (the database is not a TPC-C database, or
    /// it is damaged).
    Missing {
        /// Table.
        table: &'static str,
        /// What was looked for.
        what: String,
    },
    /// A consistency condition of §3.3.2 does not hold.
    Consistency {
        /// Condition number (1–4).
        condition: u8,
        /// Warehouse.
        warehouse: u32,
        /// District, for the per-district conditions.
        district: Option<u32>,
        /// What the condition found.
        detail: String,
    },
    /// A transaction still failed with deadlocks or lock timeouts after this many attempts.
    RetriesExhausted {
        /// Transaction type.
        kind: TxnKind,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: nvmedb::Error,
    },
}

impl TpccError {
    /// Wraps an engine error with what the workload was doing.
    pub fn engine(context: impl Into<String>, source: nvmedb::Error) -> Self {
        Self::Engine { context: context.into(), source }
    }
}

impl std::fmt::Display for TpccError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(m) => write!(f, "tpcc: bad configuration: {m}"),
            Self::Engine { context, source } => write!(f, "tpcc: {context}: {source}"),
            Self::Missing { table, what } => write!(f, "tpcc: table `{table}` has no {what}"),
            Self::Consistency { condition, warehouse, district, detail } => {
                write!(f, "tpcc: consistency condition {condition} (TPC-C §3.3.2.{condition}) fails at warehouse {warehouse}")?;
                if let Some(d) = district {
                    write!(f, ", district {d}")?;
                }
                write!(f, ": {detail}")
            }
            Self::RetriesExhausted { kind, attempts, last } => {
                write!(f, "tpcc: {} failed {attempts} times in a row; last: {last}", kind.name())
            }
        }
    }
}

impl std::error::Error for TpccError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Engine { source, .. } | Self::RetriesExhausted { last: source, .. } => Some(source),
            _ => None,
        }
    }
}
