//! `nvmedb lab …`: one subcommand per experiment, each run by the one generic [`run`].
//!
//! Owns: [`LabCommand`], the [`LabArgs`] trait (a command's flags: the common ones and a
//! configuration) and [`run`]. Invariant: a lab command only turns flags into a configuration;
//! the experiment measures, reports and writes its files through `nvmedb_lab::experiment::run`.
//!
//! A new experiment's command is one file here: an `Args` struct with `#[command(flatten)]
//! common: CommonArgs`, an `impl LabArgs`, and one arm in [`LabCommand`] and [`dispatch`] (and
//! one line in `replot`). `lab report` writes the whole-lab page (`nvmedb_lab::page`).

mod clients;
mod commit;
mod cost;
mod engine;
mod ha;
mod ops;
mod peers;
mod pgbench;
mod primitive;
pub mod tier;
mod tpcc;
mod tpch;
mod xlog;

use super::args::CommonArgs;
use super::CliError;
use clap::Subcommand;
use nvmedb_lab::experiment::{self, Experiment};
use std::path::{Path, PathBuf};

/// The flags of a command that runs experiment `Exp`.
pub trait LabArgs {
    /// The experiment.
    type Exp: Experiment;
    /// The flags every lab command has.
    fn common(&self) -> &CommonArgs;
    /// The experiment's configuration; a bad flag is an error naming it.
    fn config(&self) -> Result<<Self::Exp as Experiment>::Config, CliError>;
}

/// Runs the experiment of `args`, prints its summary and where its results are.
pub fn run<A: LabArgs>(args: &A) -> Result<(), CliError> {
    let config = args.config()?;
    let out = experiment::run::<A::Exp>(&config, &args.common().options())?;
    print!("{}", out.summary.text);
    println!("results: {}", out.dir.display());
    Ok(())
}

/// `nvmedb lab …` experiments.
#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Seed 000/001 primitive workload: single-row SELECT/UPDATE across buffer sizes and devices.
    /// A flag given twice takes its last value (the main job's defaults can be overridden).
    #[command(args_override_self = true)]
    Primitive(Box<primitive::PrimitiveArgs>),
    /// Buffer manager, table and lock micro-benchmarks: in-memory lookups, 1 % buffer lookups vs
    /// fio on the same file, full scans under SHR-1/16/512 and SEP, and (part `locks`) the lock
    /// manager's wait policies.
    Engine(engine::EngineArgs),
    /// Durable commits from several threads vs fio's fdatasync rate (and, part `log`, the log
    /// alone), and recovery time of a large log.
    Commit(commit::CommitArgs),
    /// Seed 002 §6 on this machine: Fig. 9 (transactions vs workers with no log, a memory log,
    /// the fast log and the fdatasync file log — also the commit benchmark at 1/4/20 clients
    /// with fio's fdatasync rate), Fig. 10 (write size), Fig. 11 (queue size), Fig. 12
    /// (scheduler modes, emulated device). About two minutes; `--long` for longer runs.
    Xlog(xlog::XlogArgs),
    /// Seed 000 Case B (update throughput single vs HA log shipping vs HA data mirroring
    /// across buffer sizes, primary and standby each on its own emulated optane device, standby
    /// over loopback), seed 002 Fig. 13 (replication delay with the file and the fast log) and
    /// failover time (kill -9 of the primary, etcd, per lease TTL).
    Ha(ha::HaArgs),
    /// Seed 004: TPC-H Q3 (tpchgen data) as parallel scans through the buffer manager under
    /// SHR-1/16/512 and SEP, on the disk and emulated Optane (striped), against the devices'
    /// sequential-read limit measured by fio and iobench in the same run.
    Tpch(tpch::TpchArgs),
    /// One self-contained HTML page of the whole lab: every seed figure with the paper's number,
    /// ours, the status and our plot, from the latest run of every experiment under --results.
    Report {
        /// Root of the results directories.
        #[arg(long, default_value = "results")]
        results: PathBuf,
        /// The HTML file to write (default `<results>/lab-report.html`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Draw an earlier run's tables and plots again from its results.json with this code.
    Replot {
        /// The run's directory (`results/<experiment>/<UTC time>` or `.../latest`).
        dir: PathBuf,
    },
    /// TPC-C (seeds 000/002/003): tpmC, txn/s and per-type latency across buffer sizes, devices,
    /// log kinds and HA; `--case-c` runs seed 000 Case C (Fig. 7); `--check DIR` checks a
    /// database's consistency conditions. Default: 4 warehouses, 4 terminals, a few minutes.
    Tpcc(Box<tpcc::TpccArgs>),
    /// Seed 003 Figs. 4 and 6: TPC-C with its tables on emulated HDD, NAND, Optane and DRAM
    /// tiers (all on one, H1-H5, the placement advisor's choice) and the real disk; throughput,
    /// cost, throughput per cost, predicted vs measured. Default: a few minutes;
    /// `--paper-scale` for seed 003's scale.
    Tier(Box<tier::TierArgs>),
    /// Seed 000 §5.4 / Fig. 11: cost and cost-performance of the HA configurations (low- and
    /// mid-latency SSD, SAN, all in memory) from a `lab tpcc --case-c` run and the seed's
    /// server configurations, next to the paper's 1.4×.
    Cost(cost::CostArgs),
    /// pgbench select-only and TPC-B-like (simple and prepared protocol, 20 clients) against
    /// `nvmedb serve` and a private PostgreSQL 15 cluster, interleaved, at equal durability and
    /// buffer memory, in memory and with a 5 % buffer: tps, latency, CPU per transaction and
    /// the nvmedb/PostgreSQL ratio. Default scale 2 (a few minutes); `--scale 10` for the
    /// documented comparison.
    Pgbench(Box<pgbench::PgbenchArgs>),
    /// sysbench oltp_point_select and oltp_read_write and a TPC-C kit (Python over psycopg2),
    /// unchanged, against `nvmedb serve` and a private PostgreSQL 15 cluster, interleaved, at
    /// equal durability and buffer memory, in memory and with a 5 % buffer: tps, tpmC, retries,
    /// CPU per transaction and the nvmedb/PostgreSQL ratio; the kit's consistency check after
    /// the runs. Default: a few minutes; `--full-scale W` for TPC-C's full scale.
    Clients(Box<clients::ClientsArgs>),
    /// nvmedb vs RocksDB, LMDB and SQLite in the same run: in-memory point lookups, durable
    /// single-row updates at 1 and 20 threads beside fio's fdatasync rate, bulk-load time, and
    /// 1 %-cache lookups from 32 threads beside fio's random reads. Needs the `peers` cargo
    /// feature (see the README).
    Peers(Box<peers::PeersArgs>),
    /// Operations: the primary's commit throughput with and without 8 pgbench clients reading
    /// from `nvmedb standby --serve`, the standby's read throughput and apply lag; base backups
    /// beside fio's sequential rates on the same disk; restore time per GiB of archived log.
    /// Default: a few minutes; `--full` for 1 GiB of data and a 2 GiB log.
    Ops(Box<ops::OpsArgs>),
}

/// Runs a lab subcommand.
pub fn dispatch(command: &LabCommand) -> Result<(), CliError> {
    match command {
        LabCommand::Primitive(a) => run(a.as_ref()),
        LabCommand::Engine(a) => run(a),
        LabCommand::Commit(a) => run(a),
        LabCommand::Xlog(a) => run(a),
        LabCommand::Ha(a) => run(a),
        LabCommand::Tpch(a) => run(a),
        LabCommand::Replot { dir } => replot(dir),
        LabCommand::Tpcc(a) => tpcc::run(a),
        LabCommand::Tier(a) => run(a.as_ref()),
        LabCommand::Cost(a) => run(a),
        LabCommand::Pgbench(a) => run(a.as_ref()),
        LabCommand::Clients(a) => run(a.as_ref()),
        LabCommand::Peers(a) => peers::run(a),
        LabCommand::Ops(a) => run(a.as_ref()),
        LabCommand::Report { results, out } => report(results, out.as_deref()),
    }
}

/// Redraws the report of the run in `dir`, whichever experiment it is.
fn replot(dir: &Path) -> Result<(), CliError> {
    use nvmedb_lab::experiments::{
        clients, commit, cost, engine, ha, iobench, ops, pgbench, primitive, tier, tpch, xlog,
    };
    let name = experiment::recorded_experiment(dir)?;
    let summary = match name.as_str() {
        n if n == primitive::Primitive::NAME => experiment::replot::<primitive::Primitive>(dir)?,
        n if n == engine::EngineBench::NAME => experiment::replot::<engine::EngineBench>(dir)?,
        n if n == commit::CommitBench::NAME => experiment::replot::<commit::CommitBench>(dir)?,
        n if n == xlog::Xlog::NAME => experiment::replot::<xlog::Xlog>(dir)?,
        n if n == ha::Ha::NAME => experiment::replot::<ha::Ha>(dir)?,
        n if n == iobench::IoBench::NAME => experiment::replot::<iobench::IoBench>(dir)?,
        n if n == tpch::TpchBench::NAME => experiment::replot::<tpch::TpchBench>(dir)?,
        n if n == tier::Tier::NAME => experiment::replot::<tier::Tier>(dir)?,
        n if n == cost::Cost::NAME => experiment::replot::<cost::Cost>(dir)?,
        n if n == pgbench::PgbenchBench::NAME => experiment::replot::<pgbench::PgbenchBench>(dir)?,
        n if n == ops::Ops::NAME => experiment::replot::<ops::Ops>(dir)?,
        n if n == clients::ClientsBench::NAME => experiment::replot::<clients::ClientsBench>(dir)?,
        #[cfg(feature = "peers")]
        n if n == nvmedb_lab::experiments::peers::PeersBench::NAME => {
            experiment::replot::<nvmedb_lab::experiments::peers::PeersBench>(dir)?
        }
        other => {
            return Err(CliError::flag("replot", format!("{}: unknown experiment `{other}`", dir.display())))
        }
    };
    print!("{}", summary.text);
    println!("results: {}", dir.display());
    Ok(())
}

/// Writes the whole-lab page and prints where it is, with one line per figure.
fn report(results: &Path, out: Option<&Path>) -> Result<(), CliError> {
    let (page, path) = nvmedb_lab::page::write(results, out)?;
    for row in &page.rows {
        println!("{:<34} {:<20} {}", row.figure, row.status.label(), row.ours);
    }
    if !page.other_runs.is_empty() {
        println!("other runs on the page: {}", page.other_runs.join(", "));
    }
    println!("page: {}", path.display());
    Ok(())
}

impl LabCommand {
    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            LabCommand::Primitive(_) => "lab primitive",
            LabCommand::Engine(_) => "lab engine",
            LabCommand::Commit(_) => "lab commit",
            LabCommand::Xlog(_) => "lab xlog",
            LabCommand::Ha(_) => "lab ha",
            LabCommand::Tpch(_) => "lab tpch",
            LabCommand::Replot { .. } => "lab replot",
            LabCommand::Tpcc(_) => "lab tpcc",
            LabCommand::Tier(_) => "lab tier",
            LabCommand::Cost(_) => "lab cost",
            LabCommand::Pgbench(_) => "lab pgbench",
            LabCommand::Clients(_) => "lab clients",
            LabCommand::Peers(_) => "lab peers",
            LabCommand::Ops(_) => "lab ops",
            LabCommand::Report { .. } => "lab report",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        lab: LabCommand,
    }

    /// The configuration `args` of a lab command map to.
    pub fn parse(args: &[&str]) -> LabCommand {
        Cli::try_parse_from(std::iter::once("lab").chain(args.iter().copied())).expect("parses").lab
    }

    #[test]
    fn every_experiment_has_a_command_with_the_common_flags() {
        for name in [
            "primitive",
            "engine",
            "commit",
            "xlog",
            "ha",
            "tpcc",
            "tpch",
            "tier",
            "cost",
            "pgbench",
            "clients",
            "peers",
        ] {
            let c = parse(&[name, "--results", "/tmp/r", "--no-progress"]);
            assert_eq!(c.name(), format!("lab {name}"));
        }
        match parse(&["report", "--results", "/tmp/r", "--out", "/tmp/p.html"]) {
            LabCommand::Report { results, out } => {
                assert_eq!((results, out), (PathBuf::from("/tmp/r"), Some(PathBuf::from("/tmp/p.html"))))
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    /// The measuring flags the experiments share are declared once (`cmd/args.rs`): no
    /// experiment's flags declare one again (each flattens the shared group), and every
    /// experiment that has one shows its own default in the help.
    #[test]
    fn shared_flags_are_declared_once_and_show_the_experiments_defaults() {
        let shared = ["reps", "duration", "warmup", "devices", "buffers"];
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cmd/lab");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let src = std::fs::read_to_string(&path).unwrap();
            for (i, line) in src.lines().enumerate() {
                let l = line.trim();
                for flag in shared {
                    let field = l.strip_prefix(&format!("pub {flag}: "));
                    // pgbench's and clients' `--buffers` are configurations of two servers (`memory`,
                    // `5%`), not the engine's list of percentages: its own flag.
                    let own =
                        (path.ends_with("pgbench.rs") || path.ends_with("clients.rs")) && flag == "buffers";
                    let ok = own || field.is_none_or(|ty| ty.ends_with("Arg,"));
                    let named = l.contains(&format!("long = \"{flag}\""));
                    assert!(
                        ok && !named,
                        "{}:{}: `--{flag}` is declared here; flatten the shared `{}Arg` of cmd/args.rs instead",
                        path.display(),
                        i + 1,
                        flag[..1].to_uppercase() + &flag[1..]
                    );
                }
            }
        }
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut seen = 0;
        // Without the `peers` feature there is no peers configuration to take defaults from.
        for sub in cmd.get_subcommands().filter(|s| cfg!(feature = "peers") || s.get_name() != "peers") {
            for arg in sub.get_arguments().filter(|a| shared.contains(&a.get_id().as_str())) {
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                assert!(
                    help.contains("[default: "),
                    "lab {} --{}: the help shows no default: {help}",
                    sub.get_name(),
                    arg.get_id()
                );
                seen += 1;
            }
        }
        assert!(seen >= 20, "only {seen} shared flags found");
    }
}
