//! The reads part of `lab ops`: a replicating primary in this process committing single-row
//! UPDATEs, its standby in a child process (`nvmedb standby --serve`, the operator's command),
//! and, in every other point, pgbench clients running point SELECTs on the standby.
//!
//! Owns: [`ReadPoint`], [`LagSample`] and [`run`]. Invariants: the primary has no SQL server,
//! so every read counted was answered by the standby; the apply lag is sampled through the
//! standby's admin port (its applied LSN) against the primary's durable LSN read just after,
//! so a sample is never negative unless the standby applied what the primary had not made
//! durable (recorded as it is, never clamped); the points with and without readers alternate
//! which goes first between repetitions; the standby is killed at the end (it keeps nothing
//! the run needs).

use super::OpsConfig;
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::measure::cpus::{self, Pinned};
use crate::measure::pgbench::Pgbench;
use crate::measure::process::{free_port, ChildProcess};
use crate::measure::{median, pid_cpu_ns, Workers};
use crate::workload::primitive::{random_update, table_name};
use nvmedb::repl::{admin_status, open_primary, ReplConfig, ReplicatedLog, ReplicationMode, StandbyPolicy};
use nvmedb::util::Rng;
use nvmedb::wal::RecordLog;
use nvmedb::{Options, Table};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SECRET: &str = "nvmedb-lab-ops";

/// One sample of the standby's apply lag.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LagSample {
    /// Seconds since the point started.
    pub t_s: f64,
    /// The primary's durable LSN minus the standby's applied LSN, bytes.
    pub bytes: i64,
    /// How long ago the primary's durable position first passed the standby's applied one, ms
    /// (0 when the standby had applied everything durable).
    pub ms: f64,
}

/// One measured point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadPoint {
    /// Repetition.
    pub rep: usize,
    /// pgbench clients were reading from the standby.
    pub with_reads: bool,
    /// Commits acknowledged in the window (each replicated to the standby before it was).
    pub commits: u64,
    /// Commits per second.
    pub tps: f64,
    /// CPU cores this process (primary and writers) used over the window.
    pub primary_cores: f64,
    /// CPU cores the standby process used over the point.
    pub standby_cores: f64,
    /// Reads pgbench completed on the standby (0 without readers).
    pub reads: u64,
    /// Reads per second (pgbench's tps, without connection time).
    pub read_tps: f64,
    /// pgbench's mean read latency, ms.
    pub read_latency_ms: f64,
    /// Apply lag samples over the point.
    pub lag: Vec<LagSample>,
}

impl ReadPoint {
    /// `with reads` or `no reads`.
    pub fn label(&self) -> &'static str {
        if self.with_reads {
            "with reads"
        } else {
            "no reads"
        }
    }

    /// Median and maximum apply lag of the point, (ms, ms, bytes, bytes).
    pub fn lag_summary(&self) -> (f64, f64, f64, f64) {
        let ms: Vec<f64> = self.lag.iter().map(|s| s.ms).collect();
        let b: Vec<f64> = self.lag.iter().map(|s| s.bytes as f64).collect();
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        (median(&ms), max(&ms), median(&b), max(&b))
    }
}

/// What the part produced.
#[derive(Debug)]
pub struct ReadsPart {
    /// Every point, in run order.
    pub points: Vec<ReadPoint>,
    /// Where the nodes ran.
    pub placement: String,
}

/// The standby child process and how to reach it.
struct StandbyProcess {
    process: ChildProcess,
    /// Its replication (and admin) address.
    addr: String,
    /// Its SQL port.
    sql_port: u16,
}

/// Starts `nvmedb standby --seed-from <primary> --serve 127.0.0.1:0` (the primary closed).
fn start_standby(exe: &Path, primary: &Path, dir: &Path, secret_file: &Path) -> Result<StandbyProcess> {
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("standby")
        .args(["--listen", &addr])
        .arg("--data")
        .arg(dir.join("standby"))
        .arg("--secret-file")
        .arg(secret_file)
        .arg("--seed-from")
        .arg(primary)
        .args(["--serve", "127.0.0.1:0", "--status-every", "3600"]);
    // "serving reads on 127.0.0.1:<port> (snapshots of at most ...".
    let ready = |l: &str| {
        let rest = l.strip_prefix("serving reads on 127.0.0.1:")?;
        Some(rest.split(|c: char| !c.is_ascii_digit()).next()?.to_string())
    };
    let (process, port) = ChildProcess::spawn("nvmedb standby", cmd, ready, libc::SIGKILL)?;
    let sql_port = port
        .parse()
        .map_err(|_| LabError::tool("nvmedb standby", format!("reported port `{port}` is not a number")))?;
    Ok(StandbyProcess { process, addr, sql_port })
}

/// The `applied <lsn>` of a standby's status text.
fn parse_applied(status: &str) -> Option<u64> {
    let mut words = status.split_whitespace();
    while let Some(w) = words.next() {
        if w == "applied" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// Samples the apply lag every `every` until `stop`: the standby's applied LSN (admin port),
/// then the primary's durable LSN; the primary's durable position is also recorded every
/// 2 ms, so the lag in time is when it first passed the applied position.
fn sample_lag(
    rlog: &ReplicatedLog,
    addr: &str,
    every: Duration,
    stop: &AtomicBool,
) -> Result<Vec<LagSample>> {
    let t0 = Instant::now();
    let mut history: Vec<(Instant, u64)> = Vec::new();
    let mut out = Vec::new();
    let mut next = t0;
    while !stop.load(Ordering::Acquire) {
        history.push((Instant::now(), rlog.durable_lsn()));
        if Instant::now() >= next {
            let status = admin_status(addr, SECRET.as_bytes())
                .map_err(|e| LabError::tool("the standby's admin port", format!("{addr}: {e}")))?;
            let applied = parse_applied(&status).ok_or_else(|| {
                LabError::tool(
                    "the standby's admin port",
                    format!("no `applied <lsn>` in its status: {status}"),
                )
            })?;
            let now = Instant::now();
            let durable = rlog.durable_lsn();
            history.push((now, durable));
            let since =
                history.iter().find(|(_, d)| *d > applied).map_or(0.0, |(t, _)| (now - *t).as_secs_f64());
            out.push(LagSample {
                t_s: (now - t0).as_secs_f64(),
                bytes: durable as i64 - applied as i64,
                ms: since * 1e3,
            });
            next += every;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(out)
}

/// pgbench's script for table `i`: a point SELECT of a random row.
fn write_scripts(cfg: &OpsConfig, dir: &Path) -> Result<Vec<PathBuf>> {
    (0..cfg.tables)
        .map(|i| {
            let path = dir.join(format!("select-{i}.sql"));
            let text = format!(
                "\\set sid random(0, {})\nSELECT c1 FROM {} WHERE sid = :sid;\n",
                cfg.rows - 1,
                table_name(i)
            );
            std::fs::write(&path, text).map_err(LabError::io(&path, "write"))?;
            Ok(path)
        })
        .collect()
}

/// Runs the part on the loaded, closed primary in `primary`.
pub fn run(cfg: &OpsConfig, env: &RunEnv, primary: &Path) -> Result<ReadsPart> {
    let dir = &cfg.data_dir;
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, SECRET).map_err(LabError::io(&secret_file, "write"))?;
    let exe = match &cfg.nvmedb_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(LabError::io("the running program", "locate"))?,
    };
    let place = if cfg.split_cpus {
        cpus::halves(&cpus::allowed_cpus().map_err(LabError::io("/proc/self", "read the CPU affinity"))?)
    } else {
        None
    };
    let mut placement = match &place {
        Some((a, b)) => format!(
            "the primary and its writers on CPU {a:?}; the standby and pgbench (its readers) on CPU {b:?}"
        ),
        None => "every process on every CPU".into(),
    };
    if cfg.reader_nice > 0 {
        placement.push_str(&format!(
            "; pgbench (the readers' load generator, on client machines in a deployment) at niceness {}",
            cfg.reader_nice
        ));
    }
    let pin = |set: Option<&Vec<usize>>| -> Result<Option<Pinned>> {
        set.map(|s| Pinned::new(s).map_err(LabError::io("/proc/self", "pin to CPUs"))).transpose()
    };
    // The standby (and later pgbench) start from a thread pinned to the standby's CPUs: a
    // child process inherits its parent thread's CPU set.
    let standby = std::thread::scope(|s| {
        s.spawn(|| {
            let _pin = pin(place.as_ref().map(|p| &p.1))?;
            start_standby(&exe, primary, dir, &secret_file)
        })
        .join()
        .map_err(|_| LabError::config("standby", "starting the standby panicked"))?
    })?;
    env.note(format!("ops: standby at {} serving SQL on port {}", standby.addr, standby.sql_port));
    let _pin = pin(place.as_ref().map(|p| &p.0))?;
    let config = ReplConfig {
        standbys: vec![standby.addr.clone()],
        secret: SECRET.as_bytes().to_vec(),
        mode: ReplicationMode::Eager,
        policy: StandbyPolicy::Fail { timeout: Duration::from_secs(30) },
        ..ReplConfig::default()
    };
    let (db, rlog) = open_primary(primary, Options::default(), config, None)
        .map_err(LabError::engine("opening the replicating primary"))?;
    let tables: Vec<Table> = (0..cfg.tables)
        .map(|i| db.table(&table_name(i)))
        .collect::<nvmedb::Result<_>>()
        .map_err(LabError::engine("opening the tables"))?;
    let scripts = write_scripts(cfg, dir)?;
    let mut points = Vec::new();
    for rep in 0..cfg.reps {
        let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
        for with_reads in order {
            let p =
                point(cfg, &tables, &rlog, &standby, &scripts, place.as_ref().map(|p| &p.1), with_reads, rep)
                    .map_err(LabError::in_part(format!(
                        "rep {rep} {}; the standby's last output:\n{}",
                        if with_reads { "with reads" } else { "without reads" },
                        standby.process.tail()
                    )))?;
            let (lag50, lag_max, _, _) = p.lag_summary();
            env.note(format!(
                "ops: rep {rep} {:<10} {:>8.0} commits/s  {:>8.0} reads/s on the standby  apply lag median {:.1} ms, max {:.1} ms  (primary {:.2} cores, standby {:.2})",
                p.label(),
                p.tps,
                p.read_tps,
                lag50,
                lag_max,
                p.primary_cores,
                p.standby_cores
            ));
            points.push(p);
        }
    }
    drop(tables);
    db.close().map_err(LabError::engine("closing the primary"))?;
    drop(rlog);
    drop(standby); // killed: nothing it holds is needed
    let _ = std::fs::remove_dir_all(dir.join("standby"));
    Ok(ReadsPart { points, placement })
}

/// One point: the writers for the warm-up and window, the lag sampler throughout, and with
/// `with_reads` pgbench on the standby for as long.
#[allow(clippy::too_many_arguments)]
fn point(
    cfg: &OpsConfig,
    tables: &[Table],
    rlog: &ReplicatedLog,
    standby: &StandbyProcess,
    scripts: &[PathBuf],
    reader_cpus: Option<&Vec<usize>>,
    with_reads: bool,
    rep: usize,
) -> Result<ReadPoint> {
    let stop = AtomicBool::new(false);
    let secs = (cfg.warmup_s + cfg.duration_s).ceil().max(1.0) as u64;
    let pid = standby.process.pid();
    let (sb_cpu0, t0) = (pid_cpu_ns(pid).unwrap_or(0), Instant::now());
    let (writers, lag, reads) = std::thread::scope(|s| {
        let sampler =
            s.spawn(|| sample_lag(rlog, &standby.addr, Duration::from_millis(cfg.lag_every_ms), &stop));
        let reader = with_reads.then(|| {
            s.spawn(move || {
                let _pin = reader_cpus
                    .map(|c| Pinned::new(c).map_err(LabError::io("/proc/self", "pin pgbench")))
                    .transpose()?;
                // This thread only starts pgbench, which inherits the niceness.
                if cfg.reader_nice > 0 {
                    nvmedb::util::sched::lower_thread_priority(cfg.reader_nice)
                        .map_err(LabError::io("/proc/self", "lower pgbench's priority"))?;
                }
                let (c, j, t) = (cfg.readers.to_string(), cfg.reader_threads.to_string(), secs.to_string());
                let mut args = vec!["-n", "-c", &c, "-j", &j, "-T", &t];
                let files: Vec<String> = scripts.iter().map(|p| p.display().to_string()).collect();
                for f in &files {
                    args.extend(["-f", f.as_str()]);
                }
                Pgbench { bin: &cfg.pgbench_bin, port: standby.sql_port, server: "the standby" }
                    .run_args(&args)
            })
        });
        let w = Workers::new(
            "UPDATE clients on the primary",
            cfg.writers,
            Duration::from_secs_f64(cfg.warmup_s),
            Duration::from_secs_f64(cfg.duration_s),
        )
        .run(
            |c| Ok(Rng::new(((rep as u64) << 32) ^ (c as u64 + 1) ^ u64::from(with_reads) << 20)),
            |rng, _| random_update(tables, cfg.rows, rng),
            &mut (),
        );
        // The readers end on their own (-T); the sampler runs until they have.
        let reads = reader
            .map(|h| h.join().unwrap_or_else(|_| Err(LabError::tool("pgbench", "its thread panicked"))));
        stop.store(true, Ordering::Release);
        let lag = sampler.join().unwrap_or_else(|_| Err(LabError::tool("the lag sampler", "panicked")));
        (w, lag, reads)
    });
    let w = writers?;
    let lag = lag?;
    let reads = reads.transpose()?;
    let wall = t0.elapsed().as_secs_f64().max(1e-9);
    let standby_cores = pid_cpu_ns(pid).unwrap_or(0).saturating_sub(sb_cpu0) as f64 / 1e9 / wall;
    Ok(ReadPoint {
        rep,
        with_reads,
        commits: w.ops,
        tps: w.ops_per_s(),
        primary_cores: w.process_cpu_cores(),
        standby_cores,
        reads: reads.map_or(0, |r| r.parsed.transactions),
        read_tps: reads.map_or(0.0, |r| r.parsed.tps),
        read_latency_ms: reads.map_or(0.0, |r| r.parsed.latency_ms),
        lag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applied_position_is_read_from_a_status_text() {
        let s = "role standby  epoch 1  received (persisted) LSN 9000  applied 8123  primary-acknowledged 9000  log from 0\n";
        assert_eq!(parse_applied(s), Some(8123));
        assert_eq!(parse_applied("role standby"), None);
    }
}
