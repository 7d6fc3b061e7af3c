//! `nvmedb lab ha`: the cost of high availability, in the seeds' configuration.
//!
//! Owns: seed 000 Case B — primitive single-row UPDATE throughput of a single database vs an HA
//! pair (eager log shipping; eager log shipping plus synchronous data-page mirroring) across
//! table-buffer sizes, primary and standby each on its own device (emulated optane by default,
//! as seed 000's two servers each had their own Optane SSDs; the real disk on request), standby
//! in the same process over loopback TCP — seed 002 Fig. 13 — the distribution of the delay
//! from a record's append on the primary to the standby's acknowledgement covering it, with the
//! file log and with the fast log on both sides — and failover: the time from kill -9 of the
//! primary to the first commit the new primary acknowledges, over repeated trials per lease TTL
//! (three etcd members and three `nvmedb node` processes, [`crate::cluster`]). [`HaConfig`],
//! [`HaResults`] and the [`Ha`] experiment; submodule `point` runs one configuration.
//!
//! Invariants: every point starts from the same loaded template (copied, given its log, then
//! the standby is seeded from the copy), so configurations differ only in replication; points
//! are interleaved (repetition → device → buffer → configuration); throughput counts only
//! commits of transactions started inside the measured window; every emulated device is
//! labelled EMULATED with the write latency iobench achieved on it in this run; the summary
//! says what primary and standby share (the CPUs, loopback; the disk when it is the device).

mod point;
mod report;

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::experiments::iobench::{self, Engine, IoBenchConfig};
use crate::measure::device::LogChoice;
use crate::measure::{median, DeviceKind, LatencyHistogram};
use crate::workload::primitive::load;
use nvmedb::{Database, Options};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Seed 000's HA overhead at 100 % buffer (Case B), %.
pub const PAPER_OVERHEAD_PCT: f64 = 12.0;
/// Seed 002 Fig. 13's replication delay range, µs.
pub const PAPER_DELAY_US: (f64, f64) = (4.5, 7.3);

/// The failover part's configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailoverConfig {
    /// Lease TTLs to measure, seconds (empty: no failover part).
    pub ttls: Vec<u64>,
    /// Failovers (kill -9 of the primary) per TTL.
    pub trials: usize,
    /// The `nvmedb` executable that runs the nodes (None: no failover part).
    pub node_exe: Option<PathBuf>,
}

/// Configuration of the experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaConfig {
    /// Scratch directory on the disk (recreated): the disk device's copies and the cluster.
    pub data_dir: PathBuf,
    /// Directory on tmpfs for the copies of emulated devices and memory (recreated, removed).
    pub ram_dir: PathBuf,
    /// Devices: each point puts the primary on one device and the standby on another of the
    /// same kind.
    pub devices: Vec<DeviceKind>,
    /// `key=value` overrides applied to every emulated profile.
    pub profile_overrides: Vec<String>,
    /// Seconds of iobench per device (0: not characterised).
    pub iobench_s: f64,
    /// Tables.
    pub tables: usize,
    /// Rows per table.
    pub rows: u64,
    /// Table buffer sizes, percent of the data.
    pub buffers: Vec<f64>,
    /// Concurrent clients.
    pub clients: usize,
    /// Seconds of warm-up per point.
    pub warmup_s: f64,
    /// Seconds measured per point.
    pub duration_s: f64,
    /// Repetitions of each point.
    pub reps: usize,
    /// The log of the throughput points.
    pub log: LogChoice,
    /// Seconds of each replication-delay run.
    pub delay_s: f64,
    /// The logs the replication delay is measured with (on both sides).
    pub delay_logs: Vec<LogChoice>,
    /// Failover.
    pub failover: FailoverConfig,
    /// Each node on its own CPUs, as seed 000's two servers: the primary (with its clients) on
    /// the first half of the CPUs this process may use, the standby on the other half, and
    /// `single` on the primary's half; `false`: every thread on every CPU (the nodes then take
    /// each other's CPU time). Needs at least two CPUs; with one, the nodes share it (said in
    /// the summary).
    #[serde(default = "yes")]
    pub split_cpus: bool,
}

fn yes() -> bool {
    true
}

impl HaConfig {
    /// Default scale: a few minutes.
    pub fn default_scale(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            ram_dir: PathBuf::from("/dev/shm/nvmedb-ha"),
            devices: vec![DeviceKind::Emulated("optane".into())],
            profile_overrides: Vec::new(),
            iobench_s: 1.0,
            tables: 4,
            rows: 4000,
            buffers: vec![1.0, 100.0],
            clients: 20,
            warmup_s: 1.0,
            duration_s: 5.0,
            reps: 3,
            log: LogChoice::Duplexed,
            delay_s: 5.0,
            delay_logs: vec![LogChoice::Duplexed, LogChoice::Fast],
            failover: FailoverConfig { ttls: vec![1, 2], trials: 5, node_exe: None },
            split_cpus: true,
        }
    }

    /// Full scale (seed 000's 10 tables; longer points, more buffer sizes, more failovers).
    pub fn full_scale(data_dir: PathBuf) -> Self {
        Self {
            tables: 10,
            rows: 50_000,
            buffers: vec![1.0, 10.0, 50.0, 100.0],
            warmup_s: 3.0,
            duration_s: 20.0,
            reps: 3,
            delay_s: 20.0,
            failover: FailoverConfig { ttls: vec![1, 2, 4], trials: 20, node_exe: None },
            ..Self::default_scale(data_dir)
        }
    }
}

/// The three configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HaKind {
    /// No standby.
    Single,
    /// Eager log shipping to one standby.
    HaLog,
    /// Eager log shipping plus synchronous data-page mirroring.
    HaMirror,
}

impl HaKind {
    /// All three, in the order they run.
    pub const ALL: [HaKind; 3] = [HaKind::Single, HaKind::HaLog, HaKind::HaMirror];

    /// Name in tables and files.
    pub fn name(self) -> &'static str {
        match self {
            HaKind::Single => "single",
            HaKind::HaLog => "ha-log",
            HaKind::HaMirror => "ha-mirror",
        }
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaPoint {
    /// Device (primary and standby each on one of this kind).
    pub device: String,
    /// Configuration name.
    pub config: String,
    /// Table buffer, percent of data.
    pub buffer_pct: f64,
    /// Repetition.
    pub rep: usize,
    /// Commits acknowledged in the window.
    pub commits: u64,
    /// Commits per second.
    pub tps: f64,
    /// CPU time of the whole process (clients, primary and standby) per commit, µs.
    #[serde(default)]
    pub cpu_us_per_commit: f64,
    /// Of it, the client threads' (their engine work, local log flushes they lead, waits), µs;
    /// the rest is the background threads' (log copies, shipper, standby receiver and apply).
    #[serde(default)]
    pub client_cpu_us_per_commit: f64,
    /// CPU cores the process used over the window (of the machine's, shared with neighbours).
    #[serde(default)]
    pub cpu_cores: f64,
}

/// Median throughput of one configuration at one buffer size on one device.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaSummaryRow {
    /// Device.
    pub device: String,
    /// Configuration name.
    pub config: String,
    /// Table buffer, percent of data.
    pub buffer_pct: f64,
    /// Slowest repetition, commits per second.
    pub min_tps: f64,
    /// Median commits per second over the repetitions.
    pub median_tps: f64,
    /// Fastest repetition.
    pub max_tps: f64,
    /// Throughput lost against `single` at the same buffer on the same device, % (medians).
    pub overhead_pct: f64,
    /// Overhead of each repetition against single's of the same repetition, %.
    #[serde(default)]
    pub rep_overheads_pct: Vec<f64>,
    /// Median CPU time of the process per commit, µs (where the time goes on shared cores).
    #[serde(default)]
    pub cpu_us_per_commit: f64,
    /// Median CPU time of the client threads per commit, µs (the rest: background threads).
    #[serde(default)]
    pub client_cpu_us_per_commit: f64,
    /// Median CPU cores the process used.
    #[serde(default)]
    pub cpu_cores: f64,
}

/// One row of a delay distribution.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DelayRow {
    /// Device.
    pub device: String,
    /// Log on both sides (`file` or `fast`).
    pub log: String,
    /// Percentile (0..100).
    pub percentile: f64,
    /// Delay, microseconds.
    pub delay_us: f64,
    /// Samples of this distribution.
    pub samples: u64,
}

/// A device as measured in this run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceReport {
    /// Short name.
    pub device: String,
    /// Label for tables (EMULATED with the achieved latency).
    pub label: String,
    /// iobench 4 KiB random write, QD1: median latency, µs (0: not measured).
    pub write_p50_us: f64,
    /// The same, p99.
    pub write_p99_us: f64,
}

/// Failover times at one lease TTL.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailoverRow {
    /// Lease TTL, seconds.
    pub ttl_s: u64,
    /// Every failover: kill -9 of the primary → the new primary's first acknowledged commit, ms.
    pub times_ms: Vec<f64>,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank), ms.
    pub p99_ms: f64,
    /// Slowest, ms.
    pub max_ms: f64,
}

/// What the run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaResults {
    /// The devices.
    pub devices: Vec<DeviceReport>,
    /// Every point.
    pub points: Vec<HaPoint>,
    /// Median throughput per (device, config, buffer) and the overhead vs single.
    pub summary: Vec<HaSummaryRow>,
    /// Delay percentiles per (device, log).
    pub delay: Vec<DelayRow>,
    /// Failover times per lease TTL.
    pub failover: Vec<FailoverRow>,
    /// Why there is no failover part, when there is none.
    pub failover_note: Option<String>,
    /// Where the nodes' threads ran (their own CPUs, or shared).
    #[serde(default)]
    pub cpu_placement: String,
}

/// The points of one configuration at one buffer size on one device, in run order.
fn points_of<'a>(points: &'a [HaPoint], device: &str, kind: &str, buffer: f64) -> Vec<&'a HaPoint> {
    points.iter().filter(|p| p.device == device && p.config == kind && p.buffer_pct == buffer).collect()
}

fn tps_of(points: &[HaPoint], device: &str, kind: &str, buffer: f64) -> Vec<f64> {
    points_of(points, device, kind, buffer).iter().map(|p| p.tps).collect()
}

fn summarise(cfg: &HaConfig, points: &[HaPoint]) -> Vec<HaSummaryRow> {
    let mut out = Vec::new();
    for d in &cfg.devices {
        let dev = d.name();
        for &b in &cfg.buffers {
            let single = median(&tps_of(points, &dev, HaKind::Single.name(), b));
            for kind in HaKind::ALL {
                let v = tps_of(points, &dev, kind.name(), b);
                let m = median(&v);
                let overhead_pct = if single > 0.0 { 100.0 * (1.0 - m / single) } else { 0.0 };
                let these = points_of(points, &dev, kind.name(), b);
                let singles = points_of(points, &dev, HaKind::Single.name(), b);
                // Each repetition against single of the same repetition (run back to back).
                let rep_overheads_pct = these
                    .iter()
                    .filter_map(|p| {
                        let s = singles.iter().find(|q| q.rep == p.rep)?;
                        (s.tps > 0.0).then(|| 100.0 * (1.0 - p.tps / s.tps))
                    })
                    .collect();
                let cpu: Vec<f64> = these.iter().map(|p| p.cpu_us_per_commit).collect();
                let client_cpu: Vec<f64> = these.iter().map(|p| p.client_cpu_us_per_commit).collect();
                let cores: Vec<f64> = these.iter().map(|p| p.cpu_cores).collect();
                out.push(HaSummaryRow {
                    device: dev.clone(),
                    config: kind.name().into(),
                    buffer_pct: b,
                    min_tps: v.iter().copied().fold(f64::INFINITY, f64::min),
                    median_tps: m,
                    max_tps: v.iter().copied().fold(0.0, f64::max),
                    overhead_pct,
                    rep_overheads_pct,
                    cpu_us_per_commit: median(&cpu),
                    client_cpu_us_per_commit: median(&client_cpu),
                    cpu_cores: median(&cores),
                });
            }
        }
    }
    out
}

fn delay_rows(device: &str, log: LogChoice, samples: &[u64]) -> Vec<DelayRow> {
    if samples.is_empty() {
        return Vec::new();
    }
    let mut h = LatencyHistogram::new();
    for &s in samples {
        h.record_ns(s);
    }
    [1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0]
        .iter()
        .map(|&p| DelayRow {
            device: device.into(),
            log: log.name().into(),
            percentile: p,
            delay_us: h.quantile_us(p / 100.0),
            samples: samples.len() as u64,
        })
        .collect()
}

/// iobench's 4 KiB random writes at QD1 on `kind` (a profile, or a file in the data directory):
/// p50 and p99 latency, µs.
fn characterise(cfg: &HaConfig, kind: &DeviceKind) -> Result<(f64, f64)> {
    let device = match kind {
        DeviceKind::Emulated(p) => p.clone(),
        DeviceKind::Disk => cfg.data_dir.join("iobench.dat").display().to_string(),
        DeviceKind::Memory => return Ok((0.0, 0.0)),
    };
    let c = IoBenchConfig {
        device: device.clone(),
        profile_overrides: cfg.profile_overrides.clone(),
        read_pct: 0,
        block_bytes: 4096,
        depth: 1,
        engine: Engine::Sync,
        duration_s: cfg.iobench_s,
        warmup_s: (cfg.iobench_s / 4.0).min(0.5),
        size_bytes: 64 << 20,
        ..IoBenchConfig::default()
    };
    let r = iobench::measure(&c, false).map_err(LabError::in_part(format!("iobench on {device}")))?;
    if matches!(kind, DeviceKind::Disk) {
        let _ = std::fs::remove_file(&device);
    }
    Ok((r.write_latency.p50_us, r.write_latency.p99_us))
}

/// The `nvmedb lab ha` experiment.
#[derive(Debug, Clone, Copy)]
pub struct Ha;

impl Experiment for Ha {
    const NAME: &'static str = "ha";
    const TITLE: &'static str = "seed 000 Case B (update throughput, single vs HA, each node on its own device), seed 002 Fig. 13 (replication delay, file and fast log), failover time";
    type Config = HaConfig;
    type Results = HaResults;

    fn validate(cfg: &HaConfig) -> Result<()> {
        experiment::non_empty("buffers", &cfg.buffers)?;
        experiment::non_empty("devices", &cfg.devices)?;
        if cfg.tables == 0 || cfg.rows == 0 || cfg.clients == 0 || cfg.reps == 0 {
            return Err(LabError::config("tables/rows/clients/reps", "must be at least 1"));
        }
        for d in &cfg.devices {
            if let DeviceKind::Emulated(p) = d {
                crate::measure::device::profile(p, &cfg.profile_overrides)?;
            }
        }
        experiment::seconds("--duration", cfg.duration_s, false)?;
        experiment::seconds("warmup_s", cfg.warmup_s, true)
    }

    fn run(cfg: &HaConfig, env: &RunEnv) -> Result<HaResults> {
        let ram_needed = cfg.devices.iter().any(|d| *d != DeviceKind::Disk);
        let clean = || {
            let _ = std::fs::remove_dir_all(&cfg.data_dir);
            if ram_needed {
                let _ = std::fs::remove_dir_all(&cfg.ram_dir);
            }
        };
        clean();
        // Whatever happens, the copies on the disk and in RAM go (a failed run included).
        let r = run_parts(cfg, env, ram_needed);
        clean();
        r
    }

    fn report(cfg: &HaConfig, r: &HaResults, env: &RunEnv) -> Result<Summary> {
        report::report(cfg, r, env)
    }
}

/// The three parts of a run, in `cfg.data_dir` and `cfg.ram_dir` (the caller removes both).
fn run_parts(cfg: &HaConfig, env: &RunEnv, ram_needed: bool) -> Result<HaResults> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(LabError::io(&cfg.data_dir, "create directory"))?;
    // The template: loaded with the log off (each point's copy gets the log it runs with).
    let template = cfg.data_dir.join("template");
    {
        let db = Database::open(&template, Options { wal: false, ..point::options(100.0) })
            .map_err(LabError::engine("creating the template"))?;
        load(&db, cfg.tables, cfg.rows, 4, env.progress)?;
        db.close().map_err(LabError::engine("closing the template"))?;
    }
    let (devices, prepared) = prepare_devices(cfg, env, &template)?;
    let points = run_points(cfg, env, &prepared)?;
    let delay = run_delay(cfg, env, &prepared)?;
    if ram_needed {
        let _ = std::fs::remove_dir_all(&cfg.ram_dir);
    }
    let (failover, failover_note) = failover::run(cfg, env)?;
    let cpu_placement = point::describe_placement(&point::placement(cfg)?);
    Ok(HaResults {
        summary: summarise(cfg, &points),
        devices,
        points,
        delay,
        failover,
        failover_note,
        cpu_placement,
    })
}

/// Each device under test: its template (the disk's, or a copy in RAM for the emulated
/// devices and memory), its measured write latency and label, and the point runner prepared
/// on it.
fn prepare_devices(
    cfg: &HaConfig,
    env: &RunEnv,
    template: &std::path::Path,
) -> Result<(Vec<DeviceReport>, Vec<point::Prepared>)> {
    let mut prepared = Vec::new();
    let mut devices = Vec::new();
    for d in &cfg.devices {
        let t = if *d == DeviceKind::Disk {
            template.to_path_buf()
        } else {
            let ram = cfg.ram_dir.join("template");
            if !ram.exists() {
                crate::files::copy_files(template, &ram)?;
                use nvmedb::io::Storage as _;
                if !nvmedb::io::DirStorage::new(&ram, Default::default())
                    .map_err(LabError::engine("opening the RAM template"))?
                    .in_ram()
                {
                    return Err(LabError::config(
                        "ram-dir",
                        format!(
                            "{} is not on tmpfs; emulated devices need their data in RAM",
                            cfg.ram_dir.display()
                        ),
                    ));
                }
            }
            ram
        };
        let (p50, p99) = if cfg.iobench_s > 0.0 { characterise(cfg, d)? } else { (0.0, 0.0) };
        let label = match d {
            DeviceKind::Emulated(p) if p50 > 0.0 => {
                format!("{p} (EMULATED, 4 KiB write p50 {p50:.1} µs, p99 {p99:.1} µs)")
            }
            DeviceKind::Disk if p50 > 0.0 => format!("disk (real, 4 KiB O_DIRECT write p50 {p50:.0} µs)"),
            DeviceKind::Memory => "memory (tmpfs, no device)".into(),
            _ => d.label(),
        };
        env.note(format!("ha: device {label}"));
        devices.push(DeviceReport { device: d.name(), label, write_p50_us: p50, write_p99_us: p99 });
        prepared.push(point::Prepared::new(cfg, d, &t));
    }
    Ok((devices, prepared))
}

/// The throughput points: every repetition, device, buffer size and replication kind.
fn run_points(cfg: &HaConfig, env: &RunEnv, prepared: &[point::Prepared]) -> Result<Vec<HaPoint>> {
    let mut points = Vec::new();
    let mut seed = 1;
    for rep in 0..cfg.reps {
        for dev in prepared {
            for &b in &cfg.buffers {
                for kind in HaKind::ALL {
                    seed += 1;
                    let pr =
                        point::run(cfg, dev, kind, cfg.log, b, seed, false).map_err(LabError::in_part(
                            format!("{} on {} at {b} % buffer, rep {rep}", kind.name(), dev.kind.name()),
                        ))?;
                    env.note(format!(
                            "ha: {:<8} {:<9} buffer {:>5.1}%  rep {rep}  {:>9.0} tx/s  {:>6.1} µs CPU/commit ({:.1} in clients)  {:.2} cores",
                            dev.kind.name(),
                            kind.name(),
                            b,
                            pr.tps,
                            pr.cpu_us_per_commit,
                            pr.client_cpu_us_per_commit,
                            pr.cpu_cores
                        ));
                    points.push(HaPoint {
                        device: dev.kind.name(),
                        config: kind.name().into(),
                        buffer_pct: b,
                        rep,
                        commits: pr.commits,
                        tps: pr.tps,
                        cpu_us_per_commit: pr.cpu_us_per_commit,
                        client_cpu_us_per_commit: pr.client_cpu_us_per_commit,
                        cpu_cores: pr.cpu_cores,
                    });
                }
            }
        }
    }
    Ok(points)
}

/// Replication delay (seed 002 Fig. 13): log shipping at the largest buffer, each log on both
/// sides.
fn run_delay(cfg: &HaConfig, env: &RunEnv, prepared: &[point::Prepared]) -> Result<Vec<DelayRow>> {
    let dcfg = HaConfig { duration_s: cfg.delay_s, ..cfg.clone() };
    let top = cfg.buffers.iter().copied().fold(0.0, f64::max);
    let mut delay = Vec::new();
    for dev in prepared {
        for &log in &cfg.delay_logs {
            let pr =
                point::run(&dcfg, dev, HaKind::HaLog, log, top, 999, true).map_err(LabError::in_part(
                    format!("the replication-delay run, {} log on {}", log.name(), dev.kind.name()),
                ))?;
            let (tps, samples) = (pr.tps, pr.delays);
            let rows = delay_rows(&dev.kind.name(), log, &samples);
            if let (Some(p50), Some(p99)) =
                (rows.iter().find(|r| r.percentile == 50.0), rows.iter().find(|r| r.percentile == 99.0))
            {
                env.note(format!(
                    "ha: delay {:<8} {} log: p50 {:.1} µs, p99 {:.1} µs ({} samples, {tps:.0} tx/s)",
                    dev.kind.name(),
                    log.name(),
                    p50.delay_us,
                    p99.delay_us,
                    samples.len()
                ));
            }
            delay.extend(rows);
        }
    }
    Ok(delay)
}

/// The failover part (feature `etcd`).
mod failover {
    use super::{FailoverRow, HaConfig};
    use crate::error::Result;
    use crate::experiment::RunEnv;

    /// Measures failover times per lease TTL, or says why it cannot.
    #[cfg(feature = "etcd")]
    pub fn run(cfg: &HaConfig, env: &RunEnv) -> Result<(Vec<FailoverRow>, Option<String>)> {
        use crate::cluster::{Cluster, ClusterSpec};
        use crate::error::LabError;
        use crate::measure::stats::percentile;
        use std::time::Instant;
        let Some(exe) = cfg.failover.node_exe.clone() else {
            return Ok((Vec::new(), Some("no `nvmedb` executable to run the nodes".into())));
        };
        if cfg.failover.ttls.is_empty() || cfg.failover.trials == 0 {
            return Ok((Vec::new(), Some("no lease TTL or no trials configured".into())));
        }
        if std::process::Command::new("etcd").arg("--version").output().is_err() {
            return Ok((
                Vec::new(),
                Some("etcd is not installed (Debian: apt-get install etcd-server)".into()),
            ));
        }
        let mut rows = Vec::new();
        for &ttl in &cfg.failover.ttls {
            let dir = cfg.data_dir.join(format!("cluster-ttl{ttl}"));
            let mut c = Cluster::start(ClusterSpec::new(exe.clone(), dir.clone(), ttl))?;
            let (mut leader, mut epoch) = c.settled(20, "bootstrap")?;
            let mut times = Vec::new();
            for trial in 0..cfg.failover.trials {
                let ctx = format!("failover {trial} at lease TTL {ttl} s (leader n{leader}, epoch {epoch})");
                let t0 = Instant::now();
                c.kill9(leader)?;
                let (l, e, t) = c.new_leader(epoch, t0, &ctx)?;
                if l == leader || e <= epoch {
                    return Err(LabError::Inconsistent {
                        what: ctx,
                        detail: format!("the new leader n{l} at epoch {e} is not a successor"),
                    });
                }
                times.push(t.as_secs_f64() * 1000.0);
                env.note(format!(
                    "ha: failover {trial} at TTL {ttl} s: {:.0} ms (n{leader} -> n{l})",
                    t.as_secs_f64() * 1000.0
                ));
                c.spawn(leader)?;
                (leader, epoch) = c.settled(20, &ctx)?;
            }
            drop(c); // removes its directory
            rows.push(FailoverRow {
                ttl_s: ttl,
                p50_ms: percentile(&times, 0.5),
                p99_ms: percentile(&times, 0.99),
                max_ms: times.iter().copied().fold(0.0, f64::max),
                times_ms: times,
            });
        }
        Ok((rows, None))
    }

    /// Without etcd support there is no failover part.
    #[cfg(not(feature = "etcd"))]
    pub fn run(_cfg: &HaConfig, _env: &RunEnv) -> Result<(Vec<FailoverRow>, Option<String>)> {
        Ok((Vec::new(), Some("built without feature `etcd`".into())))
    }
}
