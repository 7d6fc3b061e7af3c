//! One point of the HA experiment: copy the template, start a standby on its own device when the
//! configuration has one, open the primary on its device, run the UPDATE clients, tear
//! everything down.
//!
//! Owns: [`run`], [`options`] and [`Prepared`] (where a device's points live). Invariants: every
//! point starts from a fresh copy of the template; the copy gets its log before the standby is
//! seeded from it, so the standby follows the primary's log from its start; on an emulated
//! device the primary's data, each of its log copies, the standby's data and the standby's log
//! are five emulated devices of the profile (each with its own queue and caps), their bytes on
//! tmpfs; with the fast log the standby's log is its file on tmpfs with no device latency (the
//! fast log's own durability class: RAM that survives kill -9, not power loss).

use super::{HaConfig, HaKind};
use crate::error::{LabError, Result};
use crate::files::copy_files;
use crate::measure::cpus::{self, Pinned};
use crate::measure::device::{log_opener, storage, LogChoice};
use crate::measure::{DeviceKind, Workers};
use crate::workload::primitive::{prewarm, random_update, table_name};
use nvmedb::io::{EmulatedDevice, MemDevice};
use nvmedb::repl::{
    open_primary_with, seed_standby, MirrorConfig, ReplConfig, ReplicationMode, Standby, StandbyConfig,
    StandbyDevices, StandbyPolicy,
};
use nvmedb::util::Rng;
use nvmedb::xlog::XLogOpener;
use nvmedb::{BufferSize, Database, Options, Table};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const SECRET: &[u8] = b"nvmedb-lab-ha";

/// Where the nodes' threads run: `(primary, standby)` CPU sets, or `None` when they share every
/// CPU (not asked to split, or fewer than two CPUs).
pub fn placement(cfg: &HaConfig) -> Result<Option<(Vec<usize>, Vec<usize>)>> {
    if !cfg.split_cpus {
        return Ok(None);
    }
    let all = cpus::allowed_cpus().map_err(LabError::io("/proc/self", "read the CPU affinity"))?;
    Ok(cpus::halves(&all))
}

/// Says where the nodes run, for the summary.
pub fn describe_placement(p: &Option<(Vec<usize>, Vec<usize>)>) -> String {
    match p {
        Some((a, b)) => format!(
            "each node on its own CPUs, as two servers: the primary and its clients on CPU {a:?}, the standby on CPU {b:?}, single on CPU {a:?}"
        ),
        None => "primary and standby share every CPU".into(),
    }
}

/// Options of the primary (and of the standby at 100 %).
pub fn options(buffer_pct: f64) -> Options {
    Options {
        table_buffer: BufferSize::PercentOfData(buffer_pct),
        index_buffer: BufferSize::Bytes(256 << 20),
        pin_indexes: true,
        ..Options::default()
    }
}

/// Where a device's points live.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The device.
    pub kind: DeviceKind,
    /// The loaded template (no log) the points copy.
    pub template: PathBuf,
    /// The primary's copy.
    pub primary: PathBuf,
    /// The standby's copy.
    pub standby: PathBuf,
}

impl Prepared {
    /// The disk's points live under `data_dir`, every other device's under `ram_dir` (tmpfs).
    pub fn new(cfg: &HaConfig, kind: &DeviceKind, template: &Path) -> Self {
        let base = if *kind == DeviceKind::Disk { cfg.data_dir.clone() } else { cfg.ram_dir.clone() };
        Self {
            kind: kind.clone(),
            template: template.to_path_buf(),
            primary: base.join(format!("primary-{}", kind.name())),
            standby: base.join(format!("standby-{}", kind.name())),
        }
    }

    /// Removes what a point left (both copies and the fast log's ring).
    pub fn clean(&self) {
        let _ = std::fs::remove_file(XLogOpener::default_ring_path(&self.primary));
        let _ = std::fs::remove_dir_all(&self.primary);
        let _ = std::fs::remove_dir_all(&self.standby);
    }
}

/// What a point measured.
#[derive(Debug, Clone, Default)]
pub struct PointRun {
    /// Commits in the window.
    pub commits: u64,
    /// Commits per second.
    pub tps: f64,
    /// CPU time of the whole process (clients, primary, standby) per commit, µs.
    pub cpu_us_per_commit: f64,
    /// Of it, the client threads' CPU time per commit, µs.
    pub client_cpu_us_per_commit: f64,
    /// CPU cores the process used over the window.
    pub cpu_cores: f64,
    /// Replication delays recorded (ns), when asked for.
    pub delays: Vec<u64>,
}

/// `cfg.clients` clients updating random rows for the warm-up and window.
fn clients(cfg: &HaConfig, tables: &[Table], seed: u64) -> Result<PointRun> {
    let workers = Workers::new(
        "UPDATE clients",
        cfg.clients,
        Duration::from_secs_f64(cfg.warmup_s),
        Duration::from_secs_f64(cfg.duration_s),
    );
    let run = workers.run(
        |c| Ok(Rng::new(seed * 1000 + c as u64)),
        |rng, _| random_update(tables, cfg.rows, rng),
        &mut (),
    )?;
    Ok(PointRun {
        commits: run.ops,
        tps: run.ops_per_s(),
        cpu_us_per_commit: run.process_cpu_ns as f64 / 1e3 / run.ops.max(1) as f64,
        client_cpu_us_per_commit: run.worker_cpu_ns as f64 / 1e3 / run.ops.max(1) as f64,
        cpu_cores: run.process_cpu_cores(),
        delays: Vec::new(),
    })
}

/// The standby of a point: its data on a device of its own, its log on another (file log on an
/// emulated device), or in its directory (the disk; the fast log's RAM class).
fn start_standby(cfg: &HaConfig, dev: &Prepared, kind: HaKind, log: LogChoice, seed: u64) -> Result<Standby> {
    let data = storage(&dev.kind, &dev.standby, &cfg.profile_overrides, seed ^ 3)?;
    let log_device = match (&dev.kind, log) {
        (DeviceKind::Emulated(p), LogChoice::Duplexed) => Some(Arc::new(EmulatedDevice::new(
            MemDevice::new("standby log"),
            crate::measure::device::profile(p, &cfg.profile_overrides)?,
            seed ^ 4,
        ))),
        _ => None,
    };
    Standby::start_on(
        StandbyConfig {
            listen: "127.0.0.1:0".into(),
            data_dir: dev.standby.clone(),
            secret: SECRET.to_vec(),
            apply: kind == HaKind::HaLog,
            options: options(100.0),
        },
        StandbyDevices { data, log: log_device },
    )
    .map_err(LabError::engine("starting the standby"))
}

/// Runs one point; with `delays`, also records the replication delays.
pub fn run(
    cfg: &HaConfig,
    dev: &Prepared,
    kind: HaKind,
    log: LogChoice,
    buffer: f64,
    seed: u64,
    delays: bool,
) -> Result<PointRun> {
    dev.clean();
    copy_files(&dev.template, &dev.primary)?;
    // The primary, its clients and every thread they spawn run on the primary's CPUs for the
    // whole point (restored when the point ends).
    let place = placement(cfg)?;
    let _pin = match &place {
        Some((ours, _)) => Some(Pinned::new(ours).map_err(LabError::io("/proc/self", "pin the primary"))?),
        None => None,
    };
    let ov = &cfg.profile_overrides;
    let data = storage(&dev.kind, &dev.primary, ov, seed)?;
    let mut standby = None;
    let (db, rlog) = match kind {
        HaKind::Single => {
            let db = Database::open_with_log(
                data,
                Some(log_opener(&dev.kind, log, &dev.primary, ov, seed)?),
                options(buffer),
            )
            .map_err(LabError::engine("opening the primary"))?;
            (db, None)
        }
        HaKind::HaLog | HaKind::HaMirror => {
            // The template has no log; the copy gets its log (and a checkpoint) first, so the
            // standby seeded from it follows the primary's log from its start.
            Database::open_with_log(
                data.clone(),
                Some(log_opener(&dev.kind, log, &dev.primary, ov, seed)?),
                options(100.0),
            )
            .and_then(Database::close)
            .map_err(LabError::engine("giving the copy its log"))?;
            seed_standby(&dev.primary, &dev.standby).map_err(LabError::engine("seeding the standby"))?;
            // The standby's threads are spawned by the thread that starts it (and by those
            // threads), so starting it from a thread pinned to its CPUs keeps it there.
            let sb = match &place {
                Some((_, theirs)) => std::thread::scope(|s| {
                    s.spawn(|| {
                        let _pin =
                            Pinned::new(theirs).map_err(LabError::io("/proc/self", "pin the standby"))?;
                        start_standby(cfg, dev, kind, log, seed)
                    })
                    .join()
                    .map_err(|_| LabError::config("standby", "starting the standby panicked"))?
                })?,
                None => start_standby(cfg, dev, kind, log, seed)?,
            };
            let addr = sb.addr().to_string();
            let rc = ReplConfig {
                standbys: vec![addr.clone()],
                secret: SECRET.to_vec(),
                mode: ReplicationMode::Eager,
                policy: StandbyPolicy::Fail { timeout: Duration::from_secs(30) },
                record_delays: delays,
                ..ReplConfig::default()
            };
            let mirror =
                (kind == HaKind::HaMirror).then(|| MirrorConfig { addr, secret: SECRET.to_vec(), epoch: 1 });
            let (db, l) = open_primary_with(
                data,
                log_opener(&dev.kind, log, &dev.primary, ov, seed)?,
                &dev.primary,
                options(buffer),
                rc,
                mirror,
            )
            .map_err(LabError::engine("opening the primary"))?;
            standby = Some(sb);
            (db, Some(l))
        }
    };
    let tables: Vec<Table> = (0..cfg.tables)
        .map(|i| db.table(&table_name(i)))
        .collect::<nvmedb::Result<_>>()
        .map_err(LabError::engine("opening the tables"))?;
    prewarm(&tables, cfg.rows, buffer / 100.0)?;
    if let Some(l) = &rlog {
        l.take_delays();
    }
    let mut out = clients(cfg, &tables, seed)?;
    if delays {
        out.delays = rlog.as_ref().map(|l| l.take_delays()).unwrap_or_default();
    }
    drop(tables);
    db.close().map_err(LabError::engine("closing the primary"))?;
    drop(rlog);
    drop(standby);
    dev.clean();
    Ok(out)
}
