//! The `nvmedb` command: a thin layer over `nvmedb-lab` and the engine.

use clap::{Parser, Subcommand};

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
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Commands::Machine => {
            let ctx = nvmedb_lab::machine::RunContext::capture();
            println!("{}", ctx.one_line());
        }
    }
}
