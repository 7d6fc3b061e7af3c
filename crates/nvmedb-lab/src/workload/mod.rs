//! Workloads shared by several experiments: the tables, their load and the transactions.
//!
//! Owns: [`primitive`] (seed 000's primitive table and its single-row SELECT and UPDATE),
//! used by the primitive and HA experiments, [`tpcc`] (TPC-C: tables, load, transactions,
//! consistency checks), used by the TPC-C experiment and the experiments built on it, and
//! [`tpch`] (TPC-H customer, orders and lineitem from the `tpchgen` crate, their load, and Q3
//! with its independent reference evaluation), [`tpch_sql`] (the eight TPC-H tables and the
//! 22 queries as SQL text for servers), and [`failover`] (the committing clients of an HA
//! cluster's nodes, `nvmedb node --clients`).
//! Invariant: an experiment that runs a workload of another imports it from here, never from
//! that experiment's module.

pub mod failover;
pub mod primitive;
pub mod tpcc;
pub mod tpch;
pub mod tpch_sql;
