//! `nvmedb node --ha etcd://…`: one node of an automatically failing-over cluster (the engine's
//! HA agent, `nvmedb::repl::node`, on etcd), optionally with a committing workload; and the
//! cluster view of `nvmedb status --ha`.
//!
//! Owns: the node's flags, its signal handling (SIGTERM/SIGINT stop it cleanly: a primary
//! steps down and releases its lease) and its status lines. The committing clients and their
//! tables are the lab's (`nvmedb_lab::workload::failover`).

use super::CliError;
use clap::Args;
use nvmedb::repl::coord::CoordStore;
use nvmedb::repl::etcd::EtcdStore;
use nvmedb::repl::ha::{ClusterStatus, LeaseTiming};
use nvmedb::repl::node::{HaNode, NodeConfig, NodeEvent};
use nvmedb_lab::workload::failover;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Flags of `nvmedb node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// The coordination store: etcd://host:port[,host:port...].
    #[arg(long)]
    pub ha: String,
    /// The cluster's name (its keys live under /nvmedb/<cluster>/ in etcd).
    #[arg(long, default_value = "default")]
    pub cluster: String,
    /// This node's name (unique in the cluster).
    #[arg(long)]
    pub name: String,
    /// The node's database directory (created empty: it bootstraps the cluster or takes a base
    /// backup; a former primary's directory rejoins).
    #[arg(long)]
    pub data: PathBuf,
    /// The node's replication address (its standby listens here; loopback by default).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: String,
    /// Another node: NAME=HOST:PORT (repeat for each).
    #[arg(long = "peer", value_name = "NAME=ADDR")]
    pub peers: Vec<String>,
    /// File holding the replication secret.
    #[arg(long)]
    pub secret_file: PathBuf,
    /// Commit mode while this node leads: eager, quorum:K, chain, lazy.
    #[arg(long, default_value = "eager")]
    pub mode: String,
    /// Leadership lease TTL in seconds (etcd keeps whole seconds).
    #[arg(long, default_value_t = 10)]
    pub ttl: u64,
    /// Seconds before the lease could expire at which a primary that could not renew stops
    /// acknowledging.
    #[arg(long, default_value_t = 2.0)]
    pub margin: f64,
    /// Seconds a commit waits for the standbys before it fails.
    #[arg(long, default_value_t = 10.0)]
    pub commit_timeout: f64,
    /// Client threads committing while this node leads (0: none, the engine only).
    #[arg(long, default_value_t = 0)]
    pub clients: usize,
    /// Print every acknowledged commit (`ACK <epoch> <id> <unix ns>`).
    #[arg(long)]
    pub print_acks: bool,
    /// Seconds between status lines.
    #[arg(long, default_value_t = 10.0)]
    pub status_every: f64,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9187): the database's
    /// while this node leads, the replication state in either role.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

/// Flags of `nvmedb status --ha`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// The coordination store: etcd://host:port[,host:port...].
    #[arg(long)]
    pub ha: String,
    /// The cluster's name.
    #[arg(long, default_value = "default")]
    pub cluster: String,
}

fn prefix(cluster: &str) -> String {
    format!("/nvmedb/{cluster}")
}

fn store(url: &str) -> Result<EtcdStore, CliError> {
    EtcdStore::connect(url, Duration::from_secs(3))
        .map_err(|e| CliError::flag("--ha", format!("cannot use the coordination store {url}: {e}")))
}

/// Prints the cluster as etcd shows it.
pub fn status(a: &ClusterArgs) -> Result<(), CliError> {
    let s = store(&a.ha)?;
    let st = ClusterStatus::read(&s, &prefix(&a.cluster))
        .map_err(|e| CliError::flag("--ha", format!("reading the cluster from {}: {e}", a.ha)))?;
    print!("{st}");
    Ok(())
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// The node's metrics page: the replication state in its role, and the database's counters
/// while it leads.
fn node_metrics(node: &HaNode) -> String {
    let mut out = nvmedb::metrics::Exposition::new();
    if let Some(lead) = node.leading() {
        nvmedb::metrics::database(&mut out, &lead.db);
        nvmedb::metrics::primary(&mut out, &lead.log.status());
    } else if let Some(p) = node.standby_positions() {
        nvmedb::metrics::standby(&mut out, &p);
    }
    out.finish()
}

/// Runs a node until SIGTERM/SIGINT.
pub fn run(a: &NodeArgs) -> Result<(), CliError> {
    let secret = nvmedb::repl::read_secret(&a.secret_file).map_err(CliError::engine("reading the secret"))?;
    let mode = nvmedb::repl::parse_mode(&a.mode).ok_or_else(|| {
        CliError::flag("--mode", format!("{:?} is not eager, quorum:K, chain or lazy", a.mode))
    })?;
    let mut peers = Vec::new();
    for p in &a.peers {
        let (n, addr) = p
            .split_once('=')
            .ok_or_else(|| CliError::flag("--peer", format!("{p:?} is not NAME=HOST:PORT")))?;
        peers.push((n.to_string(), addr.to_string()));
    }
    if !(a.margin > 0.0 && a.margin < a.ttl as f64) {
        return Err(CliError::flag(
            "--margin",
            format!("{} must be above 0 and below --ttl {}", a.margin, a.ttl),
        ));
    }
    let timing = LeaseTiming { ttl: Duration::from_secs(a.ttl), margin: Duration::from_secs_f64(a.margin) };
    let mut cfg = NodeConfig::new(&a.name, a.data.clone(), &a.listen, peers, secret);
    cfg.mode = mode;
    cfg.timing = timing;
    cfg.tick = (timing.ttl - timing.margin) / 4;
    cfg.commit_timeout = Duration::from_secs_f64(a.commit_timeout.max(0.1));
    cfg.prefix = prefix(&a.cluster);
    if a.clients > 0 {
        cfg.bootstrap = Some(Arc::new(failover::create_tables));
    }
    let store: Arc<dyn CoordStore> = Arc::new(store(&a.ha)?);
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let name = a.name.clone();
    let node = Arc::new(
        HaNode::start(cfg, store, Arc::new(move |e: &NodeEvent| say(&format!("{name}: {e}"))))
            .map_err(CliError::engine(format!("starting node {}", a.name)))?,
    );
    let _metrics = match &a.metrics {
        None => None,
        Some(addr) => {
            let n = node.clone();
            let render: nvmedb::metrics::Render = Arc::new(move || node_metrics(&n));
            let m = nvmedb::metrics::MetricsServer::start(addr, render)
                .map_err(CliError::engine(format!("serving metrics on {addr}")))?;
            say(&format!("metrics at http://{}/metrics", m.addr()));
            Some(m)
        }
    };
    say(&format!(
        "node {} on {} for {} (cluster {} on {}, lease TTL {} s, margin {} s)",
        a.name,
        a.listen,
        a.data.display(),
        a.cluster,
        a.ha,
        a.ttl,
        a.margin
    ));
    let acked = std::sync::atomic::AtomicU64::new(0);
    let every = Duration::from_secs_f64(a.status_every.max(0.1));
    let node = &*node;
    std::thread::scope(|s| {
        for c in 0..a.clients {
            let (node, acked) = (node, &acked);
            s.spawn(move || failover::client(node, c, a.print_acks, &STOP, acked));
        }
        let mut last = std::time::Instant::now();
        while !STOP.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= every {
                say(&format!(
                    "status: {} ({} commits acknowledged)",
                    node.status(),
                    acked.load(Ordering::Relaxed)
                ));
                last = std::time::Instant::now();
            }
        }
    });
    node.stop();
    say(&format!("node {} stopped ({} commits acknowledged)", a.name, acked.load(Ordering::Relaxed)));
    Ok(())
}
