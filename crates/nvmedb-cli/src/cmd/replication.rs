//! `nvmedb standby`, `nvmedb promote` and `nvmedb status`: running a standby and administering
//! it over the network.
//!
//! Owns: the flags of the three commands and their loops. Invariant: the secret is read from a
//! file, never from the command line.

use super::CliError;
use clap::Args;
use std::path::PathBuf;

/// Flags of `nvmedb standby`.
#[derive(Args, Debug)]
pub struct StandbyArgs {
    /// Address to listen on (loopback by default; give e.g. 0.0.0.0:7700 to accept other hosts).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: String,
    /// The standby's database directory.
    #[arg(long)]
    pub data: PathBuf,
    /// File holding the shared secret.
    #[arg(long)]
    pub secret_file: PathBuf,
    /// Seed the data directory from this (closed) primary database first. Without it, an
    /// empty directory takes a base backup from the primary when it connects, and a former
    /// primary's directory rejoins as a standby.
    #[arg(long)]
    pub seed_from: Option<PathBuf>,
    /// Do not apply redo continuously (data-page mirroring mode: pages arrive written).
    #[arg(long)]
    pub no_apply: bool,
    /// Seconds between status lines.
    #[arg(long, default_value_t = 10.0)]
    pub status_every: f64,
    /// Answer read-only SQL on this address (PostgreSQL protocol, trust authentication) from
    /// snapshots of what the standby has applied; changes are refused with 25006.
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<String>,
    /// With --serve: how long one snapshot serves new statements before a newer one is taken,
    /// in milliseconds (each one starts from the apply thread's pages and undoes the
    /// transactions in flight).
    #[arg(long, default_value_t = 200)]
    pub snapshot_ms: u64,
    /// With --serve: niceness of the read sessions' threads (0 to 19; 0: the standby's own
    /// priority). Above 0 the standby receives, acknowledges and applies the log ahead of
    /// readers when they compete for its CPUs, so reads slow down before the primary's
    /// synchronous commits do.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub read_nice: i32,
}

/// Flags of `nvmedb promote` and `nvmedb status`.
#[derive(Args, Debug)]
pub struct AdminArgs {
    /// The standby's address.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub addr: String,
    /// File holding the shared secret.
    #[arg(long)]
    pub secret_file: PathBuf,
}

/// Flags of `nvmedb promote`.
#[derive(Args, Debug)]
pub struct PromoteArgs {
    /// The standby's address and secret.
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Promote even if too few standbys of the old synchronous set can be fenced: only when the
    /// old primary is known to be down (it could otherwise still acknowledge commits).
    #[arg(long)]
    pub force: bool,
}

/// Runs a standby until it is promoted.
pub fn standby(a: &StandbyArgs) -> Result<(), CliError> {
    use nvmedb::repl::{read_secret, seed_standby, Standby, StandbyConfig};
    let secret = read_secret(&a.secret_file).map_err(CliError::engine("reading the secret"))?;
    if let Some(p) = &a.seed_from {
        seed_standby(p, &a.data).map_err(CliError::engine(format!(
            "seeding {} from {}",
            a.data.display(),
            p.display()
        )))?;
        println!("seeded {} from {}", a.data.display(), p.display());
    }
    let sb = Standby::start(StandbyConfig {
        listen: a.listen.clone(),
        data_dir: a.data.clone(),
        secret,
        apply: !a.no_apply,
        options: nvmedb::Options::default(),
    })
    .map_err(CliError::engine("starting the standby"))?;
    println!("standby listening on {} for {}", sb.addr(), a.data.display());
    let sb = std::sync::Arc::new(sb);
    let mut server: Option<nvmedb_sql::Server> = None;
    let every = std::time::Duration::from_secs_f64(a.status_every.max(0.1));
    let mut last = std::time::Instant::now();
    loop {
        if let Some(r) = sb.promotion() {
            println!(
                "promoted: epoch {}, log end {}, redo {} pages, {} unfinished transactions undone; fenced {:?}; took {:?}; {} now opens as a primary",
                r.epoch,
                r.log_end,
                r.recovery.pages_redone,
                r.recovery.losers,
                r.fenced,
                r.taken,
                a.data.display()
            );
            for n in &r.notes {
                println!("note: {n}");
            }
            if let Some(s) = server.take() {
                let _ = s.shutdown();
            }
            sb.shutdown();
            return Ok(());
        }
        if let (Some(addr), None, true) = (&a.serve, &server, sb.is_seeded()) {
            let reads = nvmedb_sql::standby::StandbyReads::new(
                sb.clone(),
                std::time::Duration::from_millis(a.snapshot_ms),
            );
            let config = nvmedb_sql::ServerConfig {
                listen: addr.clone(),
                session_nice: a.read_nice,
                ..nvmedb_sql::ServerConfig::new(&a.data)
            };
            let s = nvmedb_sql::Server::start_reads(reads, config)
                .map_err(|e| CliError::Server { data: a.data.clone(), source: Box::new(e) })?;
            println!("serving reads on {} (snapshots of at most {} ms)", s.addr(), a.snapshot_ms);
            server = Some(s);
        }
        if last.elapsed() >= every {
            print!("{}", sb.status());
            last = std::time::Instant::now();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn secret(a: &AdminArgs) -> Result<Vec<u8>, CliError> {
    nvmedb::repl::read_secret(&a.secret_file).map_err(CliError::engine("reading the secret"))
}

/// Promotes the standby at `a.admin.addr`.
pub fn promote(a: &PromoteArgs) -> Result<(), CliError> {
    let opts = nvmedb::repl::PromoteOptions { force: a.force, ..Default::default() };
    let (epoch, end) = nvmedb::repl::admin_promote_with(&a.admin.addr, &secret(&a.admin)?, &opts)
        .map_err(CliError::engine(format!("promoting {}", a.admin.addr)))?;
    println!("promoted {}: epoch {epoch}, log end {end}", a.admin.addr);
    Ok(())
}

/// Flags of `nvmedb status`: one standby's status (`--addr`, `--secret-file`), or the whole
/// cluster as its coordination store shows it (`--ha`).
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The standby's address.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub addr: String,
    /// File holding the shared secret (needed with --addr).
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// Show the cluster instead: leader, epoch, synchronous set, each node's role, epoch,
    /// durable LSN and lag, from this coordination store (etcd://host:port,...).
    #[arg(long)]
    pub ha: Option<String>,
    /// The cluster's name (with --ha).
    #[arg(long, default_value = "default")]
    pub cluster: String,
    /// Print the metrics of the `nvmedb serve` or `nvmedb node` whose --metrics listens at
    /// this address (counters, gauges, and each histogram's count, sum and mean).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// Prints the status of the standby at `a.addr`, or of the cluster with `--ha`.
pub fn status(a: &StatusArgs) -> Result<(), CliError> {
    if let Some(m) = &a.metrics {
        let page = nvmedb::metrics::scrape(m)
            .map_err(|e| CliError::flag("--metrics", format!("cannot read http://{m}/metrics: {e}")))?;
        print!("{}", nvmedb::metrics::summary(&page));
        return Ok(());
    }
    if let Some(ha) = &a.ha {
        return super::node::status(&super::node::ClusterArgs { ha: ha.clone(), cluster: a.cluster.clone() });
    }
    let file = a
        .secret_file
        .clone()
        .ok_or_else(|| CliError::flag("--secret-file", "needed to ask a standby (or give --ha)"))?;
    let text =
        nvmedb::repl::admin_status(&a.addr, &secret(&AdminArgs { addr: a.addr.clone(), secret_file: file })?)
            .map_err(CliError::engine(format!("asking {} for its status", a.addr)))?;
    print!("{text}");
    Ok(())
}
