//! The TPC-C experiment's databases: the loaded template, each device's copy of it, and a point's
//! database opened single or as an HA primary with its standby.
//!
//! Owns: [`Template`] (loaded once per scale with the log off, then checkpointed, kept in the
//! data directory between runs; copied to tmpfs when an emulated device needs it in RAM),
//! [`PreparedDevice`] (where a device's points live, its iobench reference and label), and
//! [`open_point`] / [`OpenPoint`]. Invariants: every point starts from a fresh copy of the
//! template; data and both log copies of an emulated device are on that profile over tmpfs
//! (each log copy its own emulated device), those of the disk on the disk; a standby lives on
//! the same kind of storage as its primary's copy (the disk, or tmpfs for emulated devices,
//! whose latency the standby does not emulate), and is seeded from the primary's copy after the
//! copy has a log (a standby follows a primary's log from the start).

use super::{HaMode, TpccConfig};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::experiments::iobench::{self, Engine, IoBenchConfig};
use crate::files::{
    copy_files, dir_bytes, dir_storage, free_bytes, read_marker, remove_dir, remove_marker, write_marker,
};
use crate::measure::DeviceKind;
use crate::workload::tpcc::{load, LoadReport, Tables};
use nvmedb::io::Storage;
use nvmedb::repl::{
    open_primary_with, seed_standby, MirrorConfig, ReplConfig, ReplicatedLog, ReplicationMode, Standby,
    StandbyConfig, StandbyPolicy,
};
use nvmedb::wal::LogOpener;
use nvmedb::xlog::XLogOpener;
use nvmedb::{BufferSize, Database, Options};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::DeviceReport;

const SECRET: &[u8] = b"nvmedb-lab-tpcc";

/// The loaded database every point copies.
#[derive(Debug)]
pub struct Template {
    /// On the real disk.
    pub dir: PathBuf,
    /// Its copy on tmpfs (when a device other than the disk runs).
    pub ram_copy: Option<PathBuf>,
    /// How it was loaded.
    pub load: LoadReport,
    /// Table (heap) bytes.
    pub table_bytes: u64,
    /// Index bytes.
    pub index_bytes: u64,
}

/// Options of the database in every point, and of the load.
pub fn options(cfg: &TpccConfig, table_buffer: u64, index_buffer: u64) -> Options {
    let mut o = Options {
        table_page_size: cfg.table_page_size,
        index_page_size: cfg.index_page_size,
        table_buffer: BufferSize::Bytes(table_buffer),
        index_buffer: BufferSize::Bytes(index_buffer),
        pin_indexes: true,
        ..Options::default()
    };
    o.lock_options.early_release = cfg.early_lock_release;
    o
}

/// The loaded database: found in the data directory (its load report next to it) or loaded now
/// with the log off and checkpointed; copied to tmpfs when a device needs it in RAM.
pub fn template(cfg: &TpccConfig, env: &RunEnv) -> Result<Template> {
    let scale = cfg.scale();
    let dir = cfg.data_dir.join(format!(
        "tpcc-w{}{}-p{}-i{}",
        scale.warehouses,
        if cfg.reduced { "-reduced" } else { "" },
        cfg.table_page_size,
        cfg.index_page_size
    ));
    let cached: Option<LoadReport> = if cfg.reload { None } else { read_marker(&dir) };
    let load = match cached {
        Some(r) if r.scale == scale && r.seed == cfg.seed && dir.join(nvmedb::db::CATALOG_FILE).exists() => r,
        _ => {
            remove_marker(&dir)?;
            remove_dir(&dir)?;
            let w = u64::from(scale.warehouses);
            let big = options(
                cfg,
                (w * (160 << 20)).clamp(256 << 20, 8 << 30),
                (w * (40 << 20)).clamp(64 << 20, 4 << 30),
            );
            let db = Database::open(&dir, Options { wal: false, ..big })
                .map_err(LabError::engine(format!("creating the TPC-C database in {}", dir.display())))?;
            let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
            let r = load(&db, &scale, cfg.seed, threads, env.progress)?;
            db.close().map_err(LabError::engine("closing the loaded TPC-C database"))?;
            write_marker(&dir, &r)?;
            r
        }
    };
    let (table_bytes, index_bytes) = sizes(cfg, &dir)?;
    let ram_copy = if cfg.devices.iter().any(|d| *d != DeviceKind::Disk) {
        let need = dir_bytes(&dir)?;
        if let Some(free) = free_bytes(cfg.ram_dir.parent().unwrap_or(&cfg.ram_dir)) {
            // The template, a point's copy and its standby's (HA) live there at once.
            let copies = if cfg.ha == HaMode::Off { 2 } else { 3 };
            if free < need * copies {
                return Err(LabError::config(
                    "devices",
                    format!(
                        "emulated devices and memory need {copies} copies of the {:.0} MB database in RAM under {}, which has {:.0} MB free: use fewer warehouses or --devices disk",
                        need as f64 / 1e6,
                        cfg.ram_dir.display(),
                        free as f64 / 1e6
                    ),
                ));
            }
        }
        let ram = cfg.ram_dir.join("template");
        copy_files(&dir, &ram)?;
        if !dir_storage(&ram)?.in_ram() {
            return Err(LabError::config(
                "ram-dir",
                format!("{} is not on tmpfs; emulated devices need their data in RAM", cfg.ram_dir.display()),
            ));
        }
        Some(ram)
    } else {
        None
    };
    Ok(Template { dir, ram_copy, load, table_bytes, index_bytes })
}

/// Table and index bytes of the database in `dir`.
fn sizes(cfg: &TpccConfig, dir: &Path) -> Result<(u64, u64)> {
    let db = Database::open_with_storage(dir_storage(dir)?, options(cfg, 1 << 20, 1 << 20))
        .map_err(LabError::engine(format!("opening {} to size it", dir.display())))?;
    let tables = Tables::open(&db)?;
    let (mut heap, mut index) = (0, 0);
    for (name, t) in tables.all() {
        heap += t.heap_pages().map_err(LabError::engine(format!("sizing table `{name}`")))?;
        index += db
            .index_pool()
            .file_pages(t.id())
            .map_err(LabError::engine(format!("sizing `{name}`'s indexes")))?;
    }
    let c = db.catalog();
    Ok((heap * u64::from(c.table_page_size), index * u64::from(c.index_page_size)))
}

/// A device ready for points.
#[derive(Debug)]
pub struct PreparedDevice {
    /// Which device.
    pub kind: DeviceKind,
    /// Its reference measurements and label.
    pub report: DeviceReport,
    /// The copy the points start from.
    source: PathBuf,
    /// Where a point's database lives.
    point_dir: PathBuf,
    /// Where a point's standby lives.
    standby_dir: PathBuf,
}

/// iobench's table-page random reads on `device` (a profile name or a file): QD1 p50 and mean
/// latency, µs, and QD32 IOPS.
pub(crate) fn characterise(cfg: &TpccConfig, device: String, size: u64) -> Result<(f64, f64, f64)> {
    let bench = |engine, depth| {
        let c = IoBenchConfig {
            device: device.clone(),
            profile_overrides: cfg.profile_overrides.clone(),
            block_bytes: cfg.table_page_size,
            depth,
            engine,
            duration_s: cfg.iobench_s,
            warmup_s: (cfg.iobench_s / 4.0).min(0.5),
            size_bytes: size,
            seed: cfg.seed,
            ..IoBenchConfig::default()
        };
        iobench::measure(&c, false).map_err(LabError::in_part(format!("iobench on {device}")))
    };
    let qd1 = bench(Engine::Sync, 1)?;
    let qd32 = bench(Engine::Queue, 32)?;
    Ok((qd1.read_latency.p50_us, qd1.read_latency.mean_us, qd32.iops))
}

/// Measures `kind`'s reference and decides where its points live.
pub fn prepare(cfg: &TpccConfig, t: &Template, kind: &DeviceKind, env: &RunEnv) -> Result<PreparedDevice> {
    let name = kind.name();
    env.note(format!("tpcc: measuring {} with iobench", kind.label()));
    let (source, point_dir, standby_dir) = match kind {
        DeviceKind::Disk => {
            (t.dir.clone(), cfg.data_dir.join("tpcc-point"), cfg.data_dir.join("tpcc-point-standby"))
        }
        _ => {
            let ram = t.ram_copy.clone().ok_or_else(|| LabError::Inconsistent {
                what: "the TPC-C template".into(),
                detail: "no RAM copy for an emulated device".into(),
            })?;
            (ram, cfg.ram_dir.join(format!("point-{name}")), cfg.ram_dir.join(format!("standby-{name}")))
        }
    };
    let (p50, mean, qd32) = match kind {
        _ if cfg.iobench_s <= 0.0 => (0.0, 0.0, 0.0),
        DeviceKind::Memory => (0.0, 0.0, 0.0),
        DeviceKind::Emulated(p) => characterise(cfg, p.clone(), 256 << 20)?,
        DeviceKind::Disk => {
            // The largest table file of the template (stock at the standard scale).
            let mut largest = (0, PathBuf::new());
            for e in std::fs::read_dir(&t.dir).map_err(LabError::io(&t.dir, "list"))? {
                let e = e.map_err(LabError::io(&t.dir, "list"))?;
                let len = e.metadata().map_err(LabError::io(e.path(), "stat"))?.len();
                if nvmedb::table::files::is_heap_file(&e.file_name().to_string_lossy()) && len > largest.0 {
                    largest = (len, e.path());
                }
            }
            let size = largest.0 / cfg.table_page_size as u64 * cfg.table_page_size as u64;
            characterise(cfg, largest.1.display().to_string(), size)?
        }
    };
    let label = match kind {
        DeviceKind::Emulated(_) if p50 > 0.0 => format!("{name} (EMULATED, read p50 {p50:.1} µs)"),
        DeviceKind::Memory => "memory (tmpfs, no device)".into(),
        _ => kind.label(),
    };
    let profile = match kind {
        DeviceKind::Emulated(p) => {
            Some(crate::measure::device::profile(p, &cfg.profile_overrides)?.to_pairs())
        }
        _ => None,
    };
    let report = DeviceReport {
        device: name,
        label,
        location: point_dir.display().to_string(),
        standby_location: (cfg.ha != HaMode::Off).then(|| match kind {
            DeviceKind::Disk => format!("{} (real disk)", standby_dir.display()),
            _ => format!("{} (tmpfs: RAM, not emulated)", standby_dir.display()),
        }),
        read_qd1_p50_us: p50,
        read_qd1_mean_us: mean,
        read_qd32_iops: qd32,
        profile,
    };
    Ok(PreparedDevice { kind: kind.clone(), report, source, point_dir, standby_dir })
}

/// An open point: the database, its tables, and (HA) the standby and the replicated log.
pub struct OpenPoint {
    /// The database.
    pub db: Database,
    /// Its tables.
    pub tables: Tables,
    /// The table buffer, bytes.
    pub buffer_bytes: u64,
    /// The standby and the primary's replicated log (HA).
    pub repl: Option<(Standby, Arc<ReplicatedLog>)>,
}

impl PreparedDevice {
    /// The storage of directory `dir` of a point: the directory itself, behind the profile for
    /// an emulated device.
    fn storage(&self, cfg: &TpccConfig, dir: &Path, seed: u64) -> Result<Arc<dyn Storage>> {
        crate::measure::device::storage(&self.kind, dir, &cfg.profile_overrides, seed)
    }

    /// The point's log, on the device.
    fn log(&self, cfg: &TpccConfig, seed: u64) -> Result<Box<dyn LogOpener>> {
        crate::measure::device::log_opener(&self.kind, cfg.log, &self.point_dir, &cfg.profile_overrides, seed)
    }

    /// Removes what a point left (its copies and the fast log's ring).
    pub fn clean_point(&self) -> Result<()> {
        let _ = std::fs::remove_file(XLogOpener::default_ring_path(&self.point_dir));
        remove_dir(&self.point_dir)?;
        remove_dir(&self.standby_dir)
    }
}

/// Copies the template to the device, opens it with a table buffer of `pct` % of the table data
/// (at least four frames per client) and all indexes cached, single or HA, and pre-warms the
/// buffer with the first `pct` % of every table.
pub fn open_point(
    cfg: &TpccConfig,
    t: &Template,
    dev: &PreparedDevice,
    pct: f64,
    seed: u64,
) -> Result<OpenPoint> {
    dev.clean_point()?;
    copy_files(&dev.source, &dev.point_dir)?;
    let (buffer_bytes, index_bytes) = buffers(cfg, t, pct);
    let opts = options(cfg, buffer_bytes, index_bytes);
    let storage = dev.storage(cfg, &dev.point_dir, seed)?;
    let (db, repl) = match cfg.ha {
        HaMode::Off => {
            let db = Database::open_with_log(storage, Some(dev.log(cfg, seed)?), opts)
                .map_err(LabError::engine("opening the database"))?;
            (db, None)
        }
        HaMode::Log | HaMode::On => {
            // The template has no log; a standby follows its primary's log from the start, so
            // the copy gets its log (and a checkpoint) before the standby is seeded from it.
            Database::open_with_log(
                storage.clone(),
                Some(dev.log(cfg, seed)?),
                options(cfg, 1 << 24, 1 << 24),
            )
            .and_then(Database::close)
            .map_err(LabError::engine("giving the copy its log"))?;
            seed_standby(&dev.point_dir, &dev.standby_dir)
                .map_err(LabError::engine("seeding the standby"))?;
            let sb = Standby::start(StandbyConfig {
                listen: "127.0.0.1:0".into(),
                data_dir: dev.standby_dir.clone(),
                secret: SECRET.to_vec(),
                apply: cfg.ha == HaMode::Log,
                options: options(cfg, 64 << 20, 64 << 20),
            })
            .map_err(LabError::engine("starting the standby"))?;
            let addr = sb.addr().to_string();
            let rc = ReplConfig {
                standbys: vec![addr.clone()],
                secret: SECRET.to_vec(),
                mode: ReplicationMode::Eager,
                policy: StandbyPolicy::Fail { timeout: Duration::from_secs(30) },
                ..ReplConfig::default()
            };
            let mirror =
                (cfg.ha == HaMode::On).then(|| MirrorConfig { addr, secret: SECRET.to_vec(), epoch: 1 });
            let (db, log) = open_primary_with(storage, dev.log(cfg, seed)?, &dev.point_dir, opts, rc, mirror)
                .map_err(LabError::engine("opening the HA primary"))?;
            (db, Some((sb, log)))
        }
    };
    let tables = prewarm(&db, pct)?;
    Ok(OpenPoint { db, tables, buffer_bytes, repl })
}

/// A point's table buffer at `pct` % of the table data (at least four frames per client, and
/// 16) and its index buffer (every index page stays cached, with room for what the run
/// inserts), bytes.
pub(crate) fn buffers(cfg: &TpccConfig, t: &Template, pct: f64) -> (u64, u64) {
    let min_frames = (4 * cfg.clients).max(16) as u64;
    let table = ((t.table_bytes as f64 * pct / 100.0) as u64).max(cfg.table_page_size as u64 * min_frames);
    (table, t.index_bytes * 2 + (32 << 20))
}

/// Opens the TPC-C tables of `db` and reads the first `pct` % of every table's pages into the
/// buffer (the warm-up settles the rest).
pub(crate) fn prewarm(db: &Database, pct: f64) -> Result<Tables> {
    let tables = Tables::open(db)?;
    let parts = (100.0 / pct).round().max(1.0) as usize;
    for (name, table) in tables.all() {
        table
            .scan_partition(0, parts, |_| Ok(true))
            .map_err(LabError::engine(format!("pre-warming the buffer with `{name}`")))?;
    }
    Ok(tables)
}

/// Removes the RAM copies of the run (the disk template stays for the next run).
pub fn clean_up(cfg: &TpccConfig, devices: &[PreparedDevice]) {
    for d in devices {
        let _ = d.clean_point();
    }
    if cfg.devices.iter().any(|d| *d != DeviceKind::Disk) {
        let _ = std::fs::remove_dir_all(&cfg.ram_dir);
    }
}
