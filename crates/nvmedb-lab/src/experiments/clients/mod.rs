//! `nvmedb lab clients`: the clients people already have, unchanged, against `nvmedb serve` and
//! against PostgreSQL 15 on this machine — sysbench's `oltp_point_select` and
//! `oltp_read_write` (its pgsql driver) and the TPC-C kit (Python over psycopg2) — in memory
//! and with a table buffer of a few percent of the data, at equal durability (both wait for
//! fdatasync of their log at commit) and equal buffer memory.
//!
//! Owns: [`ClientsConfig`], [`ClientsResults`], [`Sample`], [`Point`] and the [`ClientsBench`]
//! experiment. Submodules: `client` (sysbench and the kit, and what they print), `report`
//! (tables, ratios, charts). It starts its servers, sizes their buffers and measures their
//! data as `lab pgbench` does (that experiment's `servers`, [`BufferSpec`], [`size_buffers`]).
//! Invariants: both servers hold the same data (sysbench prepare and the kit's load with one
//! seed) and get byte-for-byte the same client command lines; runs are interleaved (each
//! repetition runs every workload on both servers, the server that goes first alternating);
//! after the runs of a buffer configuration the kit's consistency check passes on both servers
//! or the run fails; both servers are stopped and the scratch directory deleted at the end,
//! also when the run fails.

mod client;
mod report;

pub use client::{parse_kit, parse_sysbench, Measured, Sysbench, TpccKit, CLIENTS_HINT, TPCC_KIT};

use super::pgbench::servers::{
    loaded_bytes, page_cache_bytes, with_tail, Nvmedb, PgBins, Postgres, RunAs, Scratch,
};
use super::pgbench::{size_buffers, BufferPoint, BufferSpec, Load, Server};
use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::{progress, Spread};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workloads: sysbench's OLTP scripts by name, and the kit.
pub const WORKLOADS: [&str; 5] =
    ["oltp_point_select", "oltp_read_only", "oltp_read_write", "oltp_write_only", "tpcc"];

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientsConfig {
    /// Where the run's scratch directory (both servers' data, deleted at the end) is made.
    pub scratch_dir: PathBuf,
    /// PostgreSQL 15's bin directory (initdb, postgres).
    pub pg_bin: PathBuf,
    /// The `nvmedb` program to run `serve` with; `None`: this program.
    pub nvmedb_bin: Option<PathBuf>,
    /// sysbench `--tables`.
    pub tables: u32,
    /// sysbench `--table-size` (rows per table).
    pub table_size: u64,
    /// sysbench `--threads`.
    pub threads: usize,
    /// TPC-C warehouses.
    pub warehouses: u32,
    /// TPC-C items (the specification's 100 000 scaled down).
    pub items: u32,
    /// TPC-C customers and orders per district (the specification's 3 000 scaled down).
    pub customers: u32,
    /// TPC-C terminals (processes of the kit, each a connection).
    pub terminals: usize,
    /// Seconds of each measured run.
    pub secs: u32,
    /// Repetitions of every run (interleaved).
    pub reps: usize,
    /// Buffer configurations: `memory`, `<p>%`.
    pub buffers: Vec<String>,
    /// Workloads: sysbench script names and `tpcc`.
    pub workloads: Vec<String>,
}

impl Default for ClientsConfig {
    fn default() -> Self {
        Self {
            scratch_dir: PathBuf::from("nvmedb-data/clients"),
            pg_bin: PathBuf::from("/usr/lib/postgresql/15/bin"),
            nvmedb_bin: None,
            tables: 4,
            table_size: 25_000,
            threads: 8,
            warehouses: 1,
            items: 20_000,
            customers: 300,
            terminals: 8,
            secs: 8,
            reps: 2,
            buffers: vec!["memory".into(), "5%".into()],
            workloads: vec!["oltp_point_select".into(), "oltp_read_write".into(), "tpcc".into()],
        }
    }
}

impl ClientsConfig {
    /// The specification's TPC-C scale (100 000 items, 3 000 customers per district) on
    /// `warehouses` warehouses, and sysbench's 10 tables of 100 000 rows.
    pub fn full_scale(mut self, warehouses: u32) -> Self {
        (self.items, self.customers, self.warehouses) = (100_000, 3_000, warehouses);
        (self.tables, self.table_size) = (10, 100_000);
        self
    }

    fn buffer_specs(&self) -> Result<Vec<BufferSpec>> {
        BufferSpec::parse_list(&self.buffers)
    }

    fn runs_sysbench(&self) -> bool {
        self.workloads.iter().any(|w| w != "tpcc")
    }

    fn runs_tpcc(&self) -> bool {
        self.workloads.iter().any(|w| w == "tpcc")
    }
}

/// One measured run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    /// Repetition (from 0).
    pub rep: usize,
    /// Buffer configuration.
    pub buffer: BufferSpec,
    /// Workload.
    pub workload: String,
    /// Server.
    pub server: Server,
    /// Transactions committed per second.
    pub tps: f64,
    /// Mean latency, ms.
    pub latency_ms: f64,
    /// Transactions committed.
    pub transactions: u64,
    /// Retried serialization failures and deadlocks.
    pub retries: u64,
    /// New-Orders per minute (tpcc only).
    pub tpmc: f64,
    /// Wall seconds of the client.
    pub wall_s: f64,
    /// CPU time of the server (nvmedb: its process; PostgreSQL: postmaster and backends), ns.
    pub server_cpu_ns: u64,
    /// CPU time of the client, ns.
    pub client_cpu_ns: u64,
}

/// One (buffer, workload, server) over the repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Buffer configuration.
    pub buffer: BufferSpec,
    /// Workload.
    pub workload: String,
    /// Server.
    pub server: Server,
    /// Transactions per second.
    pub tps: Spread,
    /// New-Orders per minute (tpcc), median.
    pub tpmc: f64,
    /// Mean latency, ms (median).
    pub latency_ms: f64,
    /// Retries over all repetitions.
    pub retries: u64,
    /// Server CPU per transaction, µs (median).
    pub server_cpu_us_per_txn: f64,
    /// Client CPU per transaction, µs (median).
    pub client_cpu_us_per_txn: f64,
}

/// Everything the run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientsResults {
    /// `postgres --version`.
    pub postgres_version: String,
    /// `sysbench --version`.
    pub sysbench_version: String,
    /// The loads (sysbench prepare and the kit's load together).
    pub loads: Vec<Load>,
    /// The buffer configurations, as sized.
    pub buffers: Vec<BufferPoint>,
    /// Every measured run, in the order run.
    pub samples: Vec<Sample>,
    /// The points.
    pub points: Vec<Point>,
    /// The kit's consistency check passed on both servers after each buffer configuration's
    /// runs (a failure stops the run, so this counts the checks made).
    pub consistency_checks: usize,
}

/// The `nvmedb lab clients` experiment.
#[derive(Debug, Clone, Copy)]
pub struct ClientsBench;

/// What the run needs besides PostgreSQL: sysbench and python3 with psycopg2.
fn find_clients(cfg: &ClientsConfig) -> Result<String> {
    let mut version = String::new();
    if cfg.runs_sysbench() {
        let out = Command::new("sysbench")
            .arg("--version")
            .output()
            .map_err(|e| LabError::tool("sysbench", format!("{e}: {CLIENTS_HINT}")))?;
        version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    if cfg.runs_tpcc() {
        let ok = Command::new("python3")
            .args(["-c", "import psycopg2"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(LabError::tool("python3 with psycopg2", format!("not found: {CLIENTS_HINT}")));
        }
    }
    Ok(version)
}

impl Experiment for ClientsBench {
    const NAME: &'static str = "clients";
    const TITLE: &'static str =
        "sysbench and a TPC-C kit against nvmedb serve and PostgreSQL 15, in memory and with a small buffer";
    type Config = ClientsConfig;
    type Results = ClientsResults;

    fn validate(cfg: &ClientsConfig) -> Result<()> {
        if cfg.tables == 0 || cfg.table_size == 0 || cfg.threads == 0 {
            return Err(LabError::config("--tables/--table-size/--threads", "must be at least 1"));
        }
        if cfg.warehouses == 0 || cfg.items == 0 || cfg.customers < 10 || cfg.terminals == 0 {
            return Err(LabError::config(
                "--warehouses/--items/--customers/--terminals",
                "at least 1 warehouse, 1 item, 10 customers per district and 1 terminal",
            ));
        }
        if cfg.secs == 0 || cfg.reps == 0 {
            return Err(LabError::config("--secs/--reps", "must be at least 1"));
        }
        experiment::non_empty("--buffers", &cfg.buffers)?;
        experiment::non_empty("--workloads", &cfg.workloads)?;
        experiment::known_parts("--workloads", &cfg.workloads, &WORKLOADS)?;
        cfg.buffer_specs()?;
        Ok(())
    }

    fn run(cfg: &ClientsConfig, env: &RunEnv) -> Result<ClientsResults> {
        let bins = PgBins::find(&cfg.pg_bin)?;
        let sysbench_version = find_clients(cfg)?;
        let nvmedb_bin = match &cfg.nvmedb_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe().map_err(LabError::io("the running program", "locate"))?,
        };
        let run_as = RunAs::for_postgres()?;
        // Dropped last: the servers below stop (or are killed) before their data is deleted.
        let scratch = Scratch::create(&cfg.scratch_dir)?;
        env.note(format!(
            "{}; {sysbench_version}; scratch directory {}",
            bins.version,
            scratch.path().display()
        ));
        let kit = TpccKit::write(scratch.path())?;
        let pgdata = scratch.path().join("postgres");
        let nvdata = scratch.path().join("nvmedb");
        Postgres::init(&bins, &pgdata, run_as)?;
        let loads = load(cfg, env, &bins, &nvmedb_bin, run_as, &kit, &pgdata, &nvdata)?;
        let specs = cfg.buffer_specs()?;
        let total = (specs.len() * cfg.reps * cfg.workloads.len() * 2) as u64;
        let bar = progress::bar(env.progress, total, "client runs");
        let (mut buffers, mut samples, mut checks) = (Vec::new(), Vec::new(), 0);
        for spec in specs {
            let mut b = size_buffers(spec, &loads);
            env.note(report::buffer_line(&b));
            let nv = Nvmedb::start(
                &nvmedb_bin,
                &nvdata,
                b.nvmedb_table_buffer_bytes,
                b.nvmedb_index_buffer_bytes,
            )?;
            let pg = Postgres::start(&bins, &pgdata, b.postgres_shared_buffers_bytes, run_as)?;
            let servers = Servers { cfg, nv: &nv, pg: &pg, kit: &kit };
            for rep in 0..cfg.reps {
                for workload in &cfg.workloads {
                    let order = if rep % 2 == 0 {
                        [Server::Nvmedb, Server::Postgres]
                    } else {
                        [Server::Postgres, Server::Nvmedb]
                    };
                    for server in order {
                        bar.set_message(format!(
                            "{} {workload} ({}, rep {})",
                            server.label(),
                            spec.label(),
                            rep + 1
                        ));
                        let s = servers.sample(spec, rep, workload, server)?;
                        env.note(report::sample_line(&s));
                        samples.push(s);
                        bar.inc(1);
                    }
                }
            }
            if cfg.runs_tpcc() {
                for server in [Server::Nvmedb, Server::Postgres] {
                    servers.kit(server).check().map_err(|e| servers.with_log(e, server))?;
                    checks += 1;
                }
                env.note(format!(
                    "{}: the TPC-C kit's consistency conditions 1-4 hold on both servers",
                    spec.label()
                ));
            }
            nv.stop()?;
            pg.stop()?;
            let pct = |(resident, total): (u64, u64)| 100.0 * resident as f64 / total.max(1) as f64;
            b.postgres_page_cache_pct = pct(page_cache_bytes(&pgdata.join("base")));
            b.nvmedb_page_cache_pct = pct(page_cache_bytes(&nvdata));
            buffers.push(b);
        }
        bar.finish_and_clear();
        let points = points(&samples);
        drop(scratch);
        Ok(ClientsResults {
            postgres_version: bins.version,
            sysbench_version,
            loads,
            buffers,
            samples,
            points,
            consistency_checks: checks,
        })
    }

    fn report(cfg: &ClientsConfig, r: &ClientsResults, env: &RunEnv) -> Result<Summary> {
        report::report(cfg, r, env)
    }
}

/// The two servers of one buffer configuration and the clients aimed at them.
struct Servers<'a> {
    cfg: &'a ClientsConfig,
    nv: &'a Nvmedb,
    pg: &'a Postgres,
    kit: &'a Path,
}

impl<'a> Servers<'a> {
    fn port(&self, s: Server) -> u16 {
        if s == Server::Nvmedb {
            self.nv.port
        } else {
            self.pg.port
        }
    }

    fn sysbench(&self, s: Server) -> Sysbench<'static> {
        Sysbench {
            port: self.port(s),
            server: s.label(),
            tables: self.cfg.tables,
            table_size: self.cfg.table_size,
        }
    }

    fn kit(&self, s: Server) -> TpccKit<'a> {
        TpccKit { script: self.kit, port: self.port(s), server: s.label() }
    }

    /// Adds the server's last lines of output to a failed client's error.
    fn with_log(&self, e: LabError, server: Server) -> LabError {
        with_tail(e, server.label(), if server == Server::Nvmedb { self.nv.tail() } else { self.pg.tail() })
    }

    /// One measured run of `workload` against `server`, with the server's CPU time across it;
    /// a run in which no transaction committed is an error.
    fn sample(&self, spec: BufferSpec, rep: usize, workload: &str, server: Server) -> Result<Sample> {
        let cfg = self.cfg;
        let cpu = || match server {
            Server::Nvmedb => (self.nv.cpu_ns(), 0),
            Server::Postgres => self.pg.cpu_ns(),
        };
        let (cpu0, live0) = cpu();
        let m = if workload == "tpcc" {
            self.kit(server).run(cfg.terminals, cfg.secs)
        } else {
            self.sysbench(server).run(workload, cfg.threads, cfg.secs)
        }
        .map_err(|e| self.with_log(e, server))?;
        let cpu1 = if server == Server::Postgres { self.pg.cpu_ns_after(live0) } else { cpu() };
        if m.transactions == 0 {
            return Err(LabError::Inconsistent {
                what: format!("{workload} against {}", server.label()),
                detail: format!("no transaction committed in {} s", cfg.secs),
            });
        }
        Ok(Sample {
            rep,
            buffer: spec,
            workload: workload.to_string(),
            server,
            tps: m.tps,
            latency_ms: m.latency_ms,
            transactions: m.transactions,
            retries: m.retries,
            tpmc: m.tpmc,
            wall_s: m.wall_s,
            server_cpu_ns: cpu1.0.saturating_sub(cpu0),
            client_cpu_ns: m.client_cpu_ns,
        })
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Loads both servers (sysbench prepare, the kit's load) with generous buffers, and measures
/// their data.
#[allow(clippy::too_many_arguments)]
fn load(
    cfg: &ClientsConfig,
    env: &RunEnv,
    bins: &PgBins,
    nvmedb_bin: &Path,
    run_as: Option<RunAs>,
    kit: &Path,
    pgdata: &Path,
    nvdata: &Path,
) -> Result<Vec<Load>> {
    let rows = cfg.tables as u64 * cfg.table_size
        + cfg.warehouses as u64 * (cfg.items as u64 + 40 * cfg.customers as u64);
    let table = (64 << 20) + rows * 1024;
    let index = (32 << 20) + rows * 128;
    let spinner = progress::bar(env.progress, 2, "loading sysbench tables and TPC-C");
    let mut secs = [0.0; 2];
    for (i, server) in [Server::Nvmedb, Server::Postgres].into_iter().enumerate() {
        spinner.set_message(server.label());
        let (port, stop): (u16, Box<dyn FnOnce() -> Result<()>>) = if server == Server::Nvmedb {
            let nv = Nvmedb::start(nvmedb_bin, nvdata, table, index)?;
            (nv.port, Box::new(move || nv.stop()))
        } else {
            let pg = Postgres::start(bins, pgdata, table + index, run_as)?;
            (pg.port, Box::new(move || pg.stop()))
        };
        if cfg.runs_sysbench() {
            let sb =
                Sysbench { port, server: server.label(), tables: cfg.tables, table_size: cfg.table_size };
            secs[i] += sb.prepare()?;
        }
        if cfg.runs_tpcc() {
            let k = TpccKit { script: kit, port, server: server.label() };
            secs[i] += k.load(cfg.warehouses, cfg.items, cfg.customers)?;
        }
        stop()?;
        spinner.inc(1);
    }
    spinner.finish_and_clear();
    let (heap, idx, pg_bytes) = loaded_bytes(nvdata, pgdata)?;
    env.note(format!(
        "loaded: nvmedb in {:.1} s ({:.1} MiB tables + {:.1} MiB indexes), PostgreSQL in {:.1} s ({:.1} MiB tables and indexes)",
        secs[0],
        mib(heap),
        mib(idx),
        secs[1],
        mib(pg_bytes)
    ));
    Ok(vec![
        Load { server: Server::Nvmedb, seconds: secs[0], data_bytes: heap, index_bytes: idx },
        Load { server: Server::Postgres, seconds: secs[1], data_bytes: pg_bytes, index_bytes: 0 },
    ])
}

/// Summarises the samples per (buffer, workload, server), in the order first run.
fn points(samples: &[Sample]) -> Vec<Point> {
    let mut out: Vec<Point> = Vec::new();
    for s in samples {
        let same = |t: &Sample| t.buffer == s.buffer && t.workload == s.workload && t.server == s.server;
        if out.iter().any(|p| p.buffer == s.buffer && p.workload == s.workload && p.server == s.server) {
            continue;
        }
        let ss: Vec<&Sample> = samples.iter().filter(|t| same(t)).collect();
        let spread = |f: &dyn Fn(&Sample) -> f64| Spread::of(&ss.iter().map(|t| f(t)).collect::<Vec<_>>());
        let per_txn = |ns: u64, t: &Sample| ns as f64 / 1e3 / t.transactions.max(1) as f64;
        out.push(Point {
            buffer: s.buffer,
            workload: s.workload.clone(),
            server: s.server,
            tps: spread(&|t| t.tps),
            tpmc: spread(&|t| t.tpmc).median,
            latency_ms: spread(&|t| t.latency_ms).median,
            retries: ss.iter().map(|t| t.retries).sum(),
            server_cpu_us_per_txn: spread(&|t| per_txn(t.server_cpu_ns, t)).median,
            client_cpu_us_per_txn: spread(&|t| per_txn(t.client_cpu_ns, t)).median,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configurations_name_the_flag() {
        let bad = |f: fn(&mut ClientsConfig)| {
            let mut c = ClientsConfig::default();
            f(&mut c);
            ClientsBench::validate(&c).unwrap_err().to_string()
        };
        assert!(bad(|c| c.buffers = vec!["most".into()]).starts_with("--buffers: `most`"));
        assert!(bad(|c| c.workloads = vec!["tpch".into()]).starts_with("--workloads"));
        assert!(bad(|c| c.customers = 5).starts_with("--warehouses"));
        assert!(bad(|c| c.secs = 0).starts_with("--secs"));
        assert!(ClientsBench::validate(&ClientsConfig::default()).is_ok());
        let full = ClientsConfig::default().full_scale(2);
        assert_eq!(
            (full.items, full.customers, full.warehouses, full.table_size),
            (100_000, 3_000, 2, 100_000)
        );
        assert!(ClientsBench::validate(&full).is_ok());
    }
}
