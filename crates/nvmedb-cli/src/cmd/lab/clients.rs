//! `nvmedb lab clients`: the flags of the comparison of `nvmedb serve` with PostgreSQL 15 under
//! the clients people already have (sysbench, a TPC-C kit over psycopg2).
//!
//! Owns: [`ClientsArgs`] and its translation into a [`ClientsConfig`].

use super::LabArgs;
use crate::cmd::args::{list, with_default, CommonArgs, RepsArg};
use crate::cmd::CliError;
use clap::Args;
use nvmedb_lab::experiments::clients::{ClientsBench, ClientsConfig};
use std::path::PathBuf;

/// Flags of `nvmedb lab clients`. Scale flags left out keep the default (or `--full-scale`'s)
/// value.
#[derive(Args, Debug)]
#[command(mut_arg("reps", |a| with_default(a, ClientsConfig::default().reps)))]
#[command(mut_arg("buffers", |a| with_default(a, list(&ClientsConfig::default().buffers))))]
#[command(mut_arg("workloads", |a| with_default(a, list(&ClientsConfig::default().workloads))))]
pub struct ClientsArgs {
    /// The TPC-C specification's scale on this many warehouses (100 000 items, 3 000 customers
    /// per district) and sysbench's 10 tables of 100 000 rows; the default is a few minutes'
    /// run on 1 warehouse scaled down.
    #[arg(long)]
    pub full_scale: Option<u32>,
    /// sysbench tables.
    #[arg(long)]
    pub tables: Option<u32>,
    /// sysbench rows per table.
    #[arg(long)]
    pub table_size: Option<u64>,
    /// sysbench threads.
    #[arg(long, default_value_t = ClientsConfig::default().threads)]
    pub threads: usize,
    /// TPC-C warehouses.
    #[arg(long)]
    pub warehouses: Option<u32>,
    /// TPC-C items (the specification has 100 000).
    #[arg(long)]
    pub items: Option<u32>,
    /// TPC-C customers (and orders) per district (the specification has 3 000).
    #[arg(long)]
    pub customers: Option<u32>,
    /// TPC-C terminals (each a process and a connection).
    #[arg(long, default_value_t = ClientsConfig::default().terminals)]
    pub terminals: usize,
    /// Seconds of each measured run.
    #[arg(long, default_value_t = ClientsConfig::default().secs)]
    pub secs: u32,
    #[command(flatten)]
    pub reps: RepsArg,
    /// Buffer configurations (comma-separated): memory, or nvmedb's table buffer as a
    /// percentage of its table data (PostgreSQL's shared_buffers gets the same memory).
    #[arg(long, value_delimiter = ',')]
    pub buffers: Option<Vec<String>>,
    /// Workloads (comma-separated): oltp_point_select, oltp_read_only, oltp_read_write,
    /// oltp_write_only (sysbench), tpcc (the kit).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Option<Vec<String>>,
    /// Where the run's scratch directory (both servers' data, deleted at the end) is made: put it
    /// on the disk under test.
    #[arg(long, default_value = "nvmedb-data/clients")]
    pub scratch_dir: PathBuf,
    /// PostgreSQL 15's bin directory (initdb, postgres).
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin")]
    pub pg_bin: PathBuf,
    /// The `nvmedb` program to serve with (default: this one), e.g. another build to compare.
    #[arg(long)]
    pub nvmedb_bin: Option<PathBuf>,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl LabArgs for ClientsArgs {
    type Exp = ClientsBench;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn config(&self) -> Result<ClientsConfig, CliError> {
        let mut c = ClientsConfig::default();
        if let Some(w) = self.full_scale {
            c = c.full_scale(w);
        }
        c.scratch_dir = self.scratch_dir.clone();
        c.pg_bin = self.pg_bin.clone();
        c.nvmedb_bin = self.nvmedb_bin.clone();
        c.tables = self.tables.unwrap_or(c.tables);
        c.table_size = self.table_size.unwrap_or(c.table_size);
        c.threads = self.threads;
        c.warehouses = self.warehouses.unwrap_or(c.warehouses);
        c.items = self.items.unwrap_or(c.items);
        c.customers = self.customers.unwrap_or(c.customers);
        c.terminals = self.terminals;
        c.secs = self.secs;
        c.reps = self.reps.reps.unwrap_or(c.reps);
        if let Some(b) = &self.buffers {
            c.buffers = b.clone();
        }
        if let Some(w) = &self.workloads {
            c.workloads = w.clone();
        }
        Ok(c)
    }
}
