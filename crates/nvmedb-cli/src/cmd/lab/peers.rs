//! `nvmedb lab peers`: the flags of the peer comparison (RocksDB, LMDB, SQLite).
//!
//! Owns: [`PeersArgs`] and, with the `peers` cargo feature, its translation into a
//! [`PeersConfig`](nvmedb_lab::experiments::peers::PeersConfig). Without the feature the command
//! exists but fails with how to build it. Invariant: table sizes, thread counts and engines are
//! flags.

use crate::cmd::args::{CommonArgs, DurationArg, RepsArg};
use crate::cmd::CliError;
use clap::Args;
use std::path::PathBuf;

/// Flags of `nvmedb lab peers`.
#[derive(Args, Debug)]
#[cfg_attr(
    feature = "peers",
    command(mut_arg("duration", |a| crate::cmd::args::with_default(
        a,
        nvmedb_lab::experiments::peers::PeersConfig::default().duration_s
    )))
)]
#[cfg_attr(
    feature = "peers",
    command(mut_arg("reps", |a| crate::cmd::args::with_default(
        a,
        nvmedb_lab::experiments::peers::PeersConfig::default().reps
    )))
)]
pub struct PeersArgs {
    /// Directory for the engines' data (on the disk under test; removed afterwards unless --keep).
    #[arg(long, default_value = "nvmedb-data/peers")]
    pub data_dir: PathBuf,
    /// Tables as ROWSxVALUE_BYTES, comma-separated (the largest is the bulk-load and 1 %-cache
    /// table, the smallest the durable-update table).
    #[arg(long, value_delimiter = ',', default_value = "1000000x1024,200000x100")]
    pub tables: Vec<String>,
    /// Engines (comma-separated; nvmedb is required): nvmedb, rocksdb, lmdb, sqlite.
    #[arg(long, value_delimiter = ',', default_value = "nvmedb,rocksdb,lmdb,sqlite")]
    pub engines: Vec<String>,
    /// Parts (comma-separated): memory, commits, miss (the load always runs).
    #[arg(long, value_delimiter = ',', default_value = "memory,commits,miss")]
    pub parts: Vec<String>,
    #[command(flatten)]
    pub duration: DurationArg,
    #[command(flatten)]
    pub reps: RepsArg,
    /// Client threads of the durable updates (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,20")]
    pub commit_threads: Vec<usize>,
    /// Client threads of the 1 %-cache lookups.
    #[arg(long, default_value_t = 32)]
    pub miss_threads: usize,
    /// Cache of the miss part, percent of the largest table's data.
    #[arg(long, default_value_t = 1.0)]
    pub miss_cache_pct: f64,
    /// Keep the data directories afterwards.
    #[arg(long)]
    pub keep: bool,
    /// nvmedb's table page size (bytes or K suffix; default: `Options::default()`'s), to
    /// compare page sizes.
    #[arg(long)]
    pub table_page: Option<String>,
    /// Results root and progress.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs `lab peers` (built with the `peers` feature).
#[cfg(feature = "peers")]
pub fn run(a: &PeersArgs) -> Result<(), CliError> {
    super::run(a)
}

/// Without the `peers` feature: an error saying how to build it.
#[cfg(not(feature = "peers"))]
pub fn run(_: &PeersArgs) -> Result<(), CliError> {
    Err(CliError::flag(
        "lab peers",
        "this nvmedb was built without the `peers` feature; install librocksdb-dev, libclang-dev and \
         libsqlite3-dev (Debian) and build with `cargo build --release -p nvmedb-cli --features peers`"
            .to_string(),
    ))
}

#[cfg(feature = "peers")]
mod config {
    use super::*;
    use crate::cmd::lab::LabArgs;
    use nvmedb_lab::experiments::peers::engines::Kind;
    use nvmedb_lab::experiments::peers::{PeersBench, PeersConfig, TableSpec};

    fn table(s: &str) -> Result<TableSpec, CliError> {
        let bad = || CliError::flag("--tables", format!("`{s}`: expected ROWSxVALUE_BYTES, e.g. 200000x100"));
        let (r, b) = s.trim().split_once(['x', 'X']).ok_or_else(bad)?;
        Ok(TableSpec { rows: r.parse().map_err(|_| bad())?, value_bytes: b.parse().map_err(|_| bad())? })
    }

    fn engine(s: &str) -> Result<Kind, CliError> {
        Ok(match s.trim().to_lowercase().as_str() {
            "nvmedb" => Kind::Nvmedb,
            "rocksdb" => Kind::Rocksdb,
            "lmdb" => Kind::Lmdb,
            "sqlite" => Kind::Sqlite,
            other => {
                return Err(CliError::flag(
                    "--engines",
                    format!("unknown engine `{other}` (nvmedb, rocksdb, lmdb, sqlite)"),
                ))
            }
        })
    }

    impl LabArgs for PeersArgs {
        type Exp = PeersBench;

        fn common(&self) -> &CommonArgs {
            &self.common
        }

        fn config(&self) -> Result<PeersConfig, CliError> {
            let d = PeersConfig::default();
            let (mut duration_s, mut reps) = (d.duration_s, d.reps);
            self.duration.apply(&mut duration_s);
            self.reps.apply(&mut reps);
            Ok(PeersConfig {
                data_dir: self.data_dir.clone(),
                tables: self.tables.iter().map(|s| table(s)).collect::<Result<_, _>>()?,
                engines: self.engines.iter().map(|s| engine(s)).collect::<Result<_, _>>()?,
                parts: self.parts.clone(),
                duration_s,
                reps,
                commit_threads: self.commit_threads.clone(),
                miss_threads: self.miss_threads,
                miss_cache_pct: self.miss_cache_pct,
                keep_data: self.keep,
                table_page_size: match &self.table_page {
                    Some(p) => Some(crate::cmd::args::parse_size("--table-page", p)? as usize),
                    None => None,
                },
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::super::super::tests::parse;
        use super::super::super::LabCommand;
        use super::*;

        #[test]
        fn tables_and_engines_are_flags() {
            let LabCommand::Peers(a) = parse(&["peers", "--tables", "1000x64", "--engines", "nvmedb,lmdb"])
            else {
                panic!("not lab peers")
            };
            let c = a.config().unwrap();
            assert_eq!(c.tables, [TableSpec { rows: 1000, value_bytes: 64 }]);
            assert_eq!(c.engines, [Kind::Nvmedb, Kind::Lmdb]);
            let LabCommand::Peers(a) = parse(&["peers", "--tables", "12"]) else { panic!() };
            assert!(a.config().is_err());
        }
    }
}
