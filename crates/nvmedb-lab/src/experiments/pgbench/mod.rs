//! `nvmedb lab pgbench`: the same pgbench runs against `nvmedb serve` and against PostgreSQL 15
//! on this machine — select-only (`-S`) and TPC-B-like, each over the simple and the prepared
//! protocol, 20 clients — in memory and with a table buffer of a few percent of the data, at
//! equal durability (both wait for fdatasync of the log at commit) and equal buffer memory.
//!
//! Owns: [`PgbenchConfig`], [`PgbenchResults`], [`Sample`], [`Point`], [`BufferPoint`] and the
//! [`PgbenchBench`] experiment. Submodules: `servers` (the two servers and the scratch
//! directory), `client` (pgbench runs and their output), `report` (tables, ratios, bar charts).
//! Invariants: both servers hold the same `pgbench -i -s <scale>` data and get byte-for-byte the
//! same pgbench command line; runs are interleaved (each repetition runs every workload and
//! mode on both servers, the server that goes first alternating between repetitions); both
//! servers are stopped and the scratch directory deleted at the end, also when the run fails.

mod client;
mod report;
pub(crate) mod servers;

pub use client::{Mode, Workload};
pub use servers::{PgBins, INSTALL_HINT};

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::measure::pgbench::Pgbench;
use crate::measure::{progress, Spread};
use serde::{Deserialize, Serialize};
use servers::{page_cache_bytes, Nvmedb, Postgres, RunAs, Scratch};
use std::path::{Path, PathBuf};

/// The two servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Server {
    /// `nvmedb serve`.
    Nvmedb,
    /// PostgreSQL 15.
    Postgres,
}

impl Server {
    /// Its name in tables.
    pub fn label(self) -> &'static str {
        match self {
            Server::Nvmedb => "nvmedb",
            Server::Postgres => "PostgreSQL",
        }
    }
}

/// A buffer configuration: everything in memory, or a table buffer of a percentage of the data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum BufferSpec {
    /// Buffers larger than all the data.
    Memory,
    /// nvmedb's table buffer is this percentage of its table data.
    Percent(f64),
}

impl BufferSpec {
    /// Parses `memory` or `<p>%` / `<p>` (a percentage in (0, 100]).
    pub fn parse(s: &str) -> Option<Self> {
        if s == "memory" {
            return Some(Self::Memory);
        }
        let p: f64 = s.trim_end_matches('%').trim().parse().ok()?;
        (p > 0.0 && p <= 100.0).then_some(Self::Percent(p))
    }

    /// Parses every configuration of `--buffers`; the error names the first that is not one.
    pub fn parse_list(buffers: &[String]) -> Result<Vec<Self>> {
        buffers
            .iter()
            .map(|b| {
                Self::parse(b).ok_or_else(|| {
                    LabError::config(
                        "--buffers",
                        format!("`{b}`: expected memory or a percentage in (0, 100]"),
                    )
                })
            })
            .collect()
    }

    /// `in memory` or `5 % buffer`.
    pub fn label(self) -> String {
        match self {
            Self::Memory => "in memory".into(),
            Self::Percent(p) => format!("{p} % buffer"),
        }
    }

    /// A file-name stem: `memory`, `buffer5`.
    pub fn stem(self) -> String {
        match self {
            Self::Memory => "memory".into(),
            Self::Percent(p) => format!("buffer{}", format!("{p}").replace('.', "_")),
        }
    }
}

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PgbenchConfig {
    /// Where the run's scratch directory (`run-<pid>`, both servers' data) is made; it is
    /// deleted at the end. Put it on the disk under test.
    pub scratch_dir: PathBuf,
    /// PostgreSQL 15's bin directory (initdb, postgres, pgbench).
    pub pg_bin: PathBuf,
    /// The `nvmedb` program to run `serve` with; `None`: this program.
    pub nvmedb_bin: Option<PathBuf>,
    /// pgbench scale factor (100 000 accounts each; the acceptance run uses 10).
    pub scale: u32,
    /// pgbench clients (`-c`).
    pub clients: usize,
    /// pgbench threads (`-j`).
    pub threads: usize,
    /// Seconds of each measured run (`-T`).
    pub secs: u32,
    /// Seconds of a select-only warm-up on each server after it starts (not measured).
    pub warmup_secs: u32,
    /// Repetitions of every run (interleaved).
    pub reps: usize,
    /// Buffer configurations: `memory`, `<p>%`.
    pub buffers: Vec<String>,
    /// Workloads: `select-only`, `tpcb-like`.
    pub workloads: Vec<String>,
    /// Query protocols: `simple`, `prepared`.
    pub modes: Vec<String>,
    /// pgbench `--max-tries`: a transaction that fails with a deadlock or serialization error
    /// is retried up to this many times.
    pub max_tries: u32,
}

impl Default for PgbenchConfig {
    fn default() -> Self {
        Self {
            scratch_dir: PathBuf::from("nvmedb-data/pgbench"),
            pg_bin: PathBuf::from("/usr/lib/postgresql/15/bin"),
            nvmedb_bin: None,
            scale: 2,
            clients: 20,
            threads: 2,
            secs: 5,
            warmup_secs: 2,
            reps: 3,
            buffers: vec!["memory".into(), "5%".into()],
            workloads: Workload::ALL.iter().map(|w| w.name().to_string()).collect(),
            modes: Mode::ALL.iter().map(|m| m.name().to_string()).collect(),
            max_tries: 10,
        }
    }
}

impl PgbenchConfig {
    fn buffer_specs(&self) -> Result<Vec<BufferSpec>> {
        BufferSpec::parse_list(&self.buffers)
    }

    fn workload_list(&self) -> Result<Vec<Workload>> {
        self.workloads
            .iter()
            .map(|w| {
                Workload::parse(w).ok_or_else(|| {
                    LabError::config("--workloads", format!("`{w}`: expected select-only or tpcb-like"))
                })
            })
            .collect()
    }

    fn mode_list(&self) -> Result<Vec<Mode>> {
        self.modes
            .iter()
            .map(|m| {
                Mode::parse(m)
                    .ok_or_else(|| LabError::config("--modes", format!("`{m}`: expected simple or prepared")))
            })
            .collect()
    }
}

/// Loading one server with `pgbench -i`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Load {
    /// The server.
    pub server: Server,
    /// Seconds of `pgbench -i -s <scale>`.
    pub seconds: f64,
    /// Bytes of table data after the load (nvmedb: heap files; PostgreSQL: `base/`, tables and
    /// indexes).
    pub data_bytes: u64,
    /// Bytes of index data (nvmedb's index files; for PostgreSQL counted in `data_bytes`).
    pub index_bytes: u64,
}

impl Load {
    /// The loaded size for a report: `12.3 MiB tables + 4.5 MiB indexes`, or `… MiB tables and
    /// indexes` when the server counts them together.
    pub(crate) fn size_text(&self) -> String {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        if self.index_bytes > 0 {
            format!("{:.1} MiB tables + {:.1} MiB indexes", mib(self.data_bytes), mib(self.index_bytes))
        } else {
            format!("{:.1} MiB tables and indexes", mib(self.data_bytes))
        }
    }
}

/// The memory both servers get in one buffer configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BufferPoint {
    /// The configuration.
    pub spec: BufferSpec,
    /// nvmedb's table buffer, bytes.
    pub nvmedb_table_buffer_bytes: u64,
    /// nvmedb's index buffer limit, bytes (its indexes stay cached: the engine's default).
    pub nvmedb_index_buffer_bytes: u64,
    /// PostgreSQL's shared_buffers, bytes: nvmedb's table buffer plus its index data (the
    /// memory nvmedb's buffers hold).
    pub postgres_shared_buffers_bytes: u64,
    /// nvmedb's table buffer plus index data as a percentage of its table plus index data.
    pub pct_of_nvmedb_data: f64,
    /// shared_buffers as a percentage of PostgreSQL's data.
    pub pct_of_postgres_data: f64,
    /// Share of PostgreSQL's data files (`base/`) resident in the OS page cache after its runs
    /// with this buffer, percent (measured with `mincore`): what misses its shared_buffers is
    /// read from there, a memory copy.
    #[serde(default)]
    pub postgres_page_cache_pct: f64,
    /// The same for nvmedb's data directory (it reads O_DIRECT, so its misses go to the disk
    /// whatever this says).
    #[serde(default)]
    pub nvmedb_page_cache_pct: f64,
}

/// One measured pgbench run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    /// Repetition (from 0).
    pub rep: usize,
    /// Buffer configuration.
    pub buffer: BufferSpec,
    /// Workload.
    pub workload: Workload,
    /// Protocol.
    pub mode: Mode,
    /// Server.
    pub server: Server,
    /// Transactions per second (pgbench, without connection time).
    pub tps: f64,
    /// Average latency, ms (pgbench).
    pub latency_ms: f64,
    /// Transactions processed.
    pub transactions: u64,
    /// Transactions that failed after their retries.
    pub failed: u64,
    /// Wall seconds of the pgbench process.
    pub wall_s: f64,
    /// CPU time of the server (nvmedb: its process; PostgreSQL: postmaster and backends), ns.
    pub server_cpu_ns: u64,
    /// CPU time of pgbench, ns.
    pub client_cpu_ns: u64,
}

/// One (buffer, workload, mode, server) over the repetitions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Buffer configuration.
    pub buffer: BufferSpec,
    /// Workload.
    pub workload: Workload,
    /// Protocol.
    pub mode: Mode,
    /// Server.
    pub server: Server,
    /// Transactions per second.
    pub tps: Spread,
    /// Average latency, ms.
    pub latency_ms: Spread,
    /// Failed transactions over all repetitions.
    pub failed: u64,
    /// Server CPU per transaction, µs (median).
    pub server_cpu_us_per_txn: f64,
    /// pgbench CPU per transaction, µs (median).
    pub client_cpu_us_per_txn: f64,
    /// Server plus client CPU over the run's wall time, in cores (median).
    pub cpu_cores: f64,
}

/// Everything the run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PgbenchResults {
    /// `postgres --version`.
    pub postgres_version: String,
    /// The loads.
    pub loads: Vec<Load>,
    /// The buffer configurations, as sized.
    pub buffers: Vec<BufferPoint>,
    /// Every measured run, in the order run.
    pub samples: Vec<Sample>,
    /// The points.
    pub points: Vec<Point>,
}

/// The `nvmedb lab pgbench` experiment.
#[derive(Debug, Clone, Copy)]
pub struct PgbenchBench;

impl Experiment for PgbenchBench {
    const NAME: &'static str = "pgbench";
    const TITLE: &'static str =
        "pgbench select-only and TPC-B-like against nvmedb serve and PostgreSQL 15, in memory and with a small buffer";
    type Config = PgbenchConfig;
    type Results = PgbenchResults;

    fn validate(cfg: &PgbenchConfig) -> Result<()> {
        if cfg.scale == 0 || cfg.scale > 1000 {
            return Err(LabError::config("--scale", format!("{}: must be in 1..=1000", cfg.scale)));
        }
        if cfg.clients == 0 || cfg.threads == 0 || cfg.threads > cfg.clients {
            return Err(LabError::config("--clients/--threads", "at least 1 client, 1..=clients threads"));
        }
        if cfg.secs == 0 || cfg.reps == 0 || cfg.max_tries == 0 {
            return Err(LabError::config("--secs/--reps/--max-tries", "must be at least 1"));
        }
        experiment::non_empty("--buffers", &cfg.buffers)?;
        experiment::non_empty("--workloads", &cfg.workloads)?;
        experiment::non_empty("--modes", &cfg.modes)?;
        cfg.buffer_specs()?;
        cfg.workload_list()?;
        cfg.mode_list()?;
        Ok(())
    }

    fn run(cfg: &PgbenchConfig, env: &RunEnv) -> Result<PgbenchResults> {
        let bins = PgBins::find(&cfg.pg_bin)?;
        let nvmedb_bin = match &cfg.nvmedb_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe().map_err(LabError::io("the running program", "locate"))?,
        };
        let run_as = RunAs::for_postgres()?;
        // Dropped last: the servers below stop (or are killed) before their data is deleted.
        let scratch = Scratch::create(&cfg.scratch_dir)?;
        env.note(format!("{}; scratch directory {}", bins.version, scratch.path().display()));
        let pgdata = scratch.path().join("postgres");
        let nvdata = scratch.path().join("nvmedb");
        Postgres::init(&bins, &pgdata, run_as)?;
        let loads = load(cfg, env, &bins, &nvmedb_bin, run_as, &pgdata, &nvdata)?;
        let (specs, workloads, modes) = (cfg.buffer_specs()?, cfg.workload_list()?, cfg.mode_list()?);
        let pgbench = bins.program("pgbench");
        let total = (specs.len() * cfg.reps * workloads.len() * modes.len() * 2) as u64;
        let bar = progress::bar(env.progress, total, "pgbench runs");
        let mut buffers = Vec::new();
        let mut samples = Vec::new();
        for spec in specs {
            let mut b = size_buffers(spec, &loads);
            env.note(format!(
                "{}: nvmedb table buffer {:.1} MiB + index data {:.1} MiB (= {:.1} % of its data); PostgreSQL shared_buffers {:.1} MiB (= {:.1} % of its data)",
                spec.label(),
                mib(b.nvmedb_table_buffer_bytes),
                mib(loads[0].index_bytes),
                b.pct_of_nvmedb_data,
                mib(b.postgres_shared_buffers_bytes),
                b.pct_of_postgres_data
            ));
            let nv = Nvmedb::start(
                &nvmedb_bin,
                &nvdata,
                b.nvmedb_table_buffer_bytes,
                b.nvmedb_index_buffer_bytes,
            )?;
            let pg = Postgres::start(&bins, &pgdata, b.postgres_shared_buffers_bytes, run_as)?;
            let on = |s: Server| Servers { cfg, nv: &nv, pg: &pg, pgbench: &pgbench }.client(s);
            if cfg.warmup_secs > 0 {
                for s in [Server::Nvmedb, Server::Postgres] {
                    bar.set_message(format!("warm-up of {} ({})", s.label(), spec.label()));
                    on(s).run(
                        Workload::SelectOnly,
                        Mode::Prepared,
                        cfg.clients,
                        cfg.threads,
                        cfg.warmup_secs,
                        1,
                    )?;
                }
            }
            for rep in 0..cfg.reps {
                for &workload in &workloads {
                    for &mode in &modes {
                        let order = if rep % 2 == 0 {
                            [Server::Nvmedb, Server::Postgres]
                        } else {
                            [Server::Postgres, Server::Nvmedb]
                        };
                        for server in order {
                            bar.set_message(format!(
                                "{} {} -M {} ({}, rep {})",
                                server.label(),
                                workload.name(),
                                mode.name(),
                                spec.label(),
                                rep + 1
                            ));
                            let s = Servers { cfg, nv: &nv, pg: &pg, pgbench: &pgbench }
                                .sample(spec, rep, workload, mode, server)?;
                            env.note(report::sample_line(&s));
                            samples.push(s);
                            bar.inc(1);
                        }
                    }
                }
            }
            nv.stop()?;
            pg.stop()?;
            let pct = |(resident, total): (u64, u64)| 100.0 * resident as f64 / total.max(1) as f64;
            b.postgres_page_cache_pct = pct(page_cache_bytes(&pgdata.join("base")));
            b.nvmedb_page_cache_pct = pct(page_cache_bytes(&nvdata));
            env.note(report::page_cache_line(&b));
            buffers.push(b);
        }
        bar.finish_and_clear();
        let points = points(&samples);
        drop(scratch);
        Ok(PgbenchResults { postgres_version: bins.version, loads, buffers, samples, points })
    }

    fn report(cfg: &PgbenchConfig, r: &PgbenchResults, env: &RunEnv) -> Result<Summary> {
        report::report(cfg, r, env)
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Adds the server's last lines of output to a failed pgbench run's error.
/// The two servers of one buffer size, and the pgbench that drives them.
struct Servers<'a> {
    cfg: &'a PgbenchConfig,
    nv: &'a Nvmedb,
    pg: &'a Postgres,
    pgbench: &'a Path,
}

impl<'a> Servers<'a> {
    /// pgbench aimed at `s`.
    fn client(&self, s: Server) -> Pgbench<'a> {
        Pgbench {
            bin: self.pgbench,
            port: if s == Server::Nvmedb { self.nv.port } else { self.pg.port },
            server: s.label(),
        }
    }

    /// One measured pgbench run of `workload` in `mode` against `server`, with the server's
    /// CPU time across it; a run in which no transaction completed is an error.
    fn sample(
        &self,
        spec: BufferSpec,
        rep: usize,
        workload: Workload,
        mode: Mode,
        server: Server,
    ) -> Result<Sample> {
        let (cfg, nv, pg) = (self.cfg, self.nv, self.pg);
        let cpu = || match server {
            Server::Nvmedb => (nv.cpu_ns(), 0),
            Server::Postgres => pg.cpu_ns(),
        };
        let (cpu0, live0) = cpu();
        let r = self
            .client(server)
            .run(workload, mode, cfg.clients, cfg.threads, cfg.secs, cfg.max_tries)
            .map_err(|e| with_server_log(e, server, nv, pg))?;
        let cpu1 = if server == Server::Postgres { pg.cpu_ns_after(live0) } else { cpu() };
        if r.parsed.tps <= 0.0 || r.parsed.transactions == 0 {
            return Err(LabError::Inconsistent {
                what: format!("pgbench {} -M {} against {}", workload.name(), mode.name(), server.label()),
                detail: format!("no transaction completed in {} s", cfg.secs),
            });
        }
        Ok(Sample {
            rep,
            buffer: spec,
            workload,
            mode,
            server,
            tps: r.parsed.tps,
            latency_ms: r.parsed.latency_ms,
            transactions: r.parsed.transactions,
            failed: r.parsed.failed,
            wall_s: r.wall_s,
            server_cpu_ns: cpu1.0.saturating_sub(cpu0),
            client_cpu_ns: r.client_cpu_ns,
        })
    }
}

fn with_server_log(e: LabError, server: Server, nv: &Nvmedb, pg: &Postgres) -> LabError {
    servers::with_tail(e, server.label(), if server == Server::Nvmedb { nv.tail() } else { pg.tail() })
}

/// Buffers of the load: generous for both (pgbench data is about 16 MB per scale unit).
fn load_buffers(scale: u32) -> (u64, u64) {
    (64 * (1 << 20) + scale as u64 * (40 << 20), 32 * (1 << 20) + scale as u64 * (8 << 20))
}

/// Loads both servers with `pgbench -i -s <scale>` and measures their data.
fn load(
    cfg: &PgbenchConfig,
    env: &RunEnv,
    bins: &PgBins,
    nvmedb_bin: &Path,
    run_as: Option<RunAs>,
    pgdata: &Path,
    nvdata: &Path,
) -> Result<Vec<Load>> {
    let pgbench = bins.program("pgbench");
    let (table, index) = load_buffers(cfg.scale);
    let spinner = progress::bar(env.progress, 2, format!("pgbench -i -s {}", cfg.scale));
    spinner.set_message("nvmedb");
    let nv = Nvmedb::start(nvmedb_bin, nvdata, table, index)?;
    let nv_s = Pgbench { bin: &pgbench, port: nv.port, server: "nvmedb" }.init(cfg.scale)?;
    nv.stop()?;
    spinner.inc(1);
    spinner.set_message("PostgreSQL");
    let pg = Postgres::start(bins, pgdata, table + index, run_as)?;
    let pg_s = Pgbench { bin: &pgbench, port: pg.port, server: "PostgreSQL" }.init(cfg.scale)?;
    pg.stop()?;
    spinner.finish_and_clear();
    let (heap, idx, pg_bytes) = servers::loaded_bytes(nvdata, pgdata)?;
    env.note(format!(
        "loaded scale {}: nvmedb in {nv_s:.1} s ({:.1} MiB tables + {:.1} MiB indexes), PostgreSQL in {pg_s:.1} s ({:.1} MiB tables and indexes)",
        cfg.scale,
        mib(heap),
        mib(idx),
        mib(pg_bytes)
    ));
    Ok(vec![
        Load { server: Server::Nvmedb, seconds: nv_s, data_bytes: heap, index_bytes: idx },
        Load { server: Server::Postgres, seconds: pg_s, data_bytes: pg_bytes, index_bytes: 0 },
    ])
}

/// Sizes the buffers of `spec`. nvmedb keeps every index page cached (its default), so its
/// memory is its table buffer plus its index data; PostgreSQL's shared_buffers gets exactly
/// that. nvmedb's index buffer limit leaves room for the history table's index to grow.
pub(crate) fn size_buffers(spec: BufferSpec, loads: &[Load]) -> BufferPoint {
    let (heap, idx, pg) = (loads[0].data_bytes, loads[0].index_bytes, loads[1].data_bytes);
    let table = match spec {
        BufferSpec::Memory => heap.max(pg) * 3 / 2 + (32 << 20),
        BufferSpec::Percent(p) => ((heap as f64 * p / 100.0) as u64).max(1 << 20),
    };
    let shared = table + idx;
    BufferPoint {
        spec,
        nvmedb_table_buffer_bytes: table,
        nvmedb_index_buffer_bytes: idx * 2 + (32 << 20),
        postgres_shared_buffers_bytes: shared,
        pct_of_nvmedb_data: 100.0 * shared as f64 / (heap + idx) as f64,
        pct_of_postgres_data: 100.0 * shared as f64 / pg as f64,
        postgres_page_cache_pct: 0.0,
        nvmedb_page_cache_pct: 0.0,
    }
}

/// Summarises the samples per (buffer, workload, mode, server), in the order first run.
fn points(samples: &[Sample]) -> Vec<Point> {
    let mut out: Vec<Point> = Vec::new();
    for s in samples {
        let same = |p: &Point| {
            p.buffer == s.buffer && p.workload == s.workload && p.mode == s.mode && p.server == s.server
        };
        if out.iter().any(same) {
            continue;
        }
        let ss: Vec<&Sample> = samples
            .iter()
            .filter(|t| {
                t.buffer == s.buffer && t.workload == s.workload && t.mode == s.mode && t.server == s.server
            })
            .collect();
        let spread = |f: &dyn Fn(&Sample) -> f64| Spread::of(&ss.iter().map(|t| f(t)).collect::<Vec<_>>());
        let per_txn = |ns: u64, t: &Sample| ns as f64 / 1e3 / t.transactions.max(1) as f64;
        out.push(Point {
            buffer: s.buffer,
            workload: s.workload,
            mode: s.mode,
            server: s.server,
            tps: spread(&|t| t.tps),
            latency_ms: spread(&|t| t.latency_ms),
            failed: ss.iter().map(|t| t.failed).sum(),
            server_cpu_us_per_txn: spread(&|t| per_txn(t.server_cpu_ns, t)).median,
            client_cpu_us_per_txn: spread(&|t| per_txn(t.client_cpu_ns, t)).median,
            cpu_cores: spread(&|t| (t.server_cpu_ns + t.client_cpu_ns) as f64 / 1e9 / t.wall_s.max(1e-9))
                .median,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_specs_parse_and_size() {
        assert_eq!(BufferSpec::parse("memory"), Some(BufferSpec::Memory));
        assert_eq!(BufferSpec::parse("5%"), Some(BufferSpec::Percent(5.0)));
        assert_eq!(BufferSpec::parse("2.5"), Some(BufferSpec::Percent(2.5)));
        assert_eq!(BufferSpec::parse("0%"), None);
        assert_eq!(BufferSpec::parse("lots"), None);
        assert_eq!(BufferSpec::Percent(2.5).stem(), "buffer2_5");
        let loads = [
            Load { server: Server::Nvmedb, seconds: 1.0, data_bytes: 100 << 20, index_bytes: 20 << 20 },
            Load { server: Server::Postgres, seconds: 1.0, data_bytes: 150 << 20, index_bytes: 0 },
        ];
        let b = size_buffers(BufferSpec::Percent(5.0), &loads);
        assert_eq!(b.nvmedb_table_buffer_bytes, 5 << 20);
        assert_eq!(b.postgres_shared_buffers_bytes, 25 << 20, "table buffer + index data");
        assert!(b.nvmedb_index_buffer_bytes > 20 << 20, "room for the indexes to grow");
        let m = size_buffers(BufferSpec::Memory, &loads);
        assert!(m.nvmedb_table_buffer_bytes > 150 << 20 && m.pct_of_postgres_data > 100.0);
    }

    #[test]
    fn page_cache_residency_counts_the_cached_bytes_of_every_file() {
        let dir = nvmedb_testkit::TmpDir::new("pgbench-pagecache");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        // Written through the page cache: every page is resident (dirty or clean).
        std::fs::write(dir.path().join("a"), vec![7u8; 3 * 4096 + 100]).unwrap();
        std::fs::write(dir.path().join("sub").join("b"), vec![9u8; 8192]).unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let (resident, total) = page_cache_bytes(dir.path());
        assert_eq!(total, 3 * 4096 + 100 + 8192);
        assert_eq!(resident, total, "files just written are in the page cache");
        assert_eq!(page_cache_bytes(&dir.path().join("missing")), (0, 0));
    }

    #[test]
    fn bad_configurations_name_the_flag() {
        let bad = |f: fn(&mut PgbenchConfig)| {
            let mut c = PgbenchConfig::default();
            f(&mut c);
            PgbenchBench::validate(&c).unwrap_err().to_string()
        };
        assert!(bad(|c| c.buffers = vec!["most".into()]).starts_with("--buffers: `most`"));
        assert!(bad(|c| c.workloads = vec!["tpcc".into()]).starts_with("--workloads: `tpcc`"));
        assert!(bad(|c| c.modes = vec!["extended".into()]).starts_with("--modes: `extended`"));
        assert!(bad(|c| c.scale = 0).starts_with("--scale"));
        assert!(bad(|c| c.threads = 30).starts_with("--clients/--threads"));
        assert!(PgbenchBench::validate(&PgbenchConfig::default()).is_ok());
    }
}
