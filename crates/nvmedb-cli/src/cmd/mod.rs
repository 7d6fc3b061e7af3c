//! The command families of `nvmedb`, one file each: `machine`, `iobench`, `lab` (one file per
//! experiment under `lab/`), `inspect`, `advise` (the placement advisor), `replication` (standby, promote, status), `node` (an HA node on etcd,
//! the cluster view), `serve` (the PostgreSQL server) and `backup` (backup, restore).
//!
//! Owns: the flags of each command and their translation into a configuration; a command runs
//! by calling the engine or `nvmedb-lab` and printing what they return. Invariant: no command
//! measures, summarises or writes result files itself; every failure is a [`CliError`].

pub mod advise;
pub mod args;
pub mod backup;
mod error;
pub mod inspect;
pub mod iobench;
pub mod lab;
pub mod machine;
pub mod node;
pub mod replication;
pub mod serve;

pub use error::CliError;
