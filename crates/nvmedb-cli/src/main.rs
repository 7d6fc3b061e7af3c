//! The `nvmedb` command: parses the command line, hands each command to its family in `cmd/`,
//! and turns any failure into one message and exit status 2.
//!
//! Owns: [`Cli`] and [`Commands`]. Invariant: no command logic here — each arm calls one
//! function of `cmd/`.

mod cmd;

use clap::{Parser, Subcommand};
use cmd::{advise, backup, inspect, iobench, lab, machine, node, replication, serve, CliError};

/// nvmedb: a storage engine for microsecond-latency NVMe storage, and its laboratory.
#[derive(Parser, Debug)]
#[command(name = "nvmedb", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand, Debug)]
enum Commands {
    /// Print facts about this machine as the lab records them.
    Machine,
    /// An fio-like micro-benchmark of a file (O_DIRECT) or an emulated device profile.
    Iobench(Box<iobench::IobenchArgs>),
    /// Laboratory experiments.
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// Show a database's catalog and page counts, or decode one page.
    Inspect(inspect::InspectArgs),
    /// Which tier each table should live on for the best throughput per cost, from a
    /// database's saved access statistics or a `lab tier` run (seed 000's model).
    Advise(advise::AdviseArgs),
    /// Run a standby: receive a primary's log, persist and apply it, until promoted.
    Standby(replication::StandbyArgs),
    /// Promote the standby at an address: it bumps the epoch, fences the old primary's
    /// synchronous set, takes what a fenced standby has beyond it, finishes redo, undoes losers
    /// and closes cleanly (its directory then opens as an ordinary database).
    Promote(replication::PromoteArgs),
    /// Show a standby's replication status (role, epoch, positions, counters), or with --ha the
    /// cluster (leader, epoch, synchronous set, each node's role, LSN and lag).
    Status(replication::StatusArgs),
    /// Run one node of an automatically failing-over cluster on etcd (--ha etcd://...): it leads
    /// or follows as the leadership lease decides, optionally with committing clients.
    Node(Box<node::NodeArgs>),
    /// Serve the database over the PostgreSQL protocol (psql, pgbench, drivers) until SIGTERM
    /// or Ctrl-C, then checkpoint and exit.
    Serve(serve::ServeArgs),
    /// Take an online base backup of a database directory (it may be running): data files
    /// page by page, then its log, with checksums; the manifest is written last.
    Backup(backup::BackupArgs),
    /// Rebuild a database from a backup and the log archive, to the end or to an LSN or time
    /// (--until); the result opens as an ordinary database.
    Restore(backup::RestoreArgs),
}

impl Commands {
    fn name(&self) -> &'static str {
        match self {
            Commands::Machine => "machine",
            Commands::Iobench(_) => "iobench",
            Commands::Lab(l) => l.name(),
            Commands::Inspect(_) => "inspect",
            Commands::Advise(_) => "advise",
            Commands::Standby(_) => "standby",
            Commands::Promote(_) => "promote",
            Commands::Status(_) => "status",
            Commands::Node(_) => "node",
            Commands::Serve(_) => "serve",
            Commands::Backup(_) => "backup",
            Commands::Restore(_) => "restore",
        }
    }

    fn run(&self) -> Result<(), CliError> {
        match self {
            Commands::Machine => machine::run(),
            Commands::Iobench(a) => lab::run(a.as_ref()),
            Commands::Lab(l) => lab::dispatch(l),
            Commands::Inspect(a) => inspect::run(a),
            Commands::Advise(a) => advise::run(a),
            Commands::Standby(a) => replication::standby(a),
            Commands::Promote(a) => replication::promote(a),
            Commands::Status(a) => replication::status(a),
            Commands::Node(a) => node::run(a),
            Commands::Serve(a) => serve::run(a),
            Commands::Backup(a) => backup::run_backup(a),
            Commands::Restore(a) => backup::run_restore(a),
        }
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cli.command.run() {
        eprintln!("nvmedb {}: {e}", cli.command.name());
        std::process::exit(2);
    }
}
