//! The primitive experiment's devices: loading the database once per device (a RAM image
//! shared by memory and every emulated profile; O_DIRECT files on the disk, kept between runs
//! of the same scale), measuring each device's page-read reference with iobench (and fio on the
//! disk), and opening the database at one buffer size.
//!
//! Owns: [`PreparedDevice`], [`prepare`], [`OpenDb`] and [`open_at`]. Invariants: an emulated
//! device's label carries EMULATED and the p50 latency iobench achieved on it in this run; the
//! two log copies live on the same kind of device as the data.

use super::{DeviceKind, DeviceReport, PrimitiveConfig};
use crate::error::{LabError, Result};
use crate::experiments::iobench::{self, Engine, IoBenchConfig};
use crate::files::{dir_storage, read_marker, remove_dir, remove_marker, write_marker};
use crate::measure::fio;
use crate::workload::primitive as workload;
use nvmedb::io::{EmulatedStorage, MemStorage, Storage};
use nvmedb::{Database, Table};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// A device prepared for the sweep.
pub struct PreparedDevice {
    /// Which device.
    pub kind: DeviceKind,
    /// Where the data lives.
    pub storage: Arc<dyn Storage>,
    /// The two copies of the write-ahead log of the disk database (its own directory). Devices
    /// on the shared RAM image get a new log at every open instead (see [`open_at`]).
    pub logs: Option<(Arc<dyn Storage>, Arc<dyn Storage>)>,
    /// What the device measured, and its sizes.
    pub report: DeviceReport,
}

/// Shared RAM image of the database, loaded once for `memory` and every emulated profile.
fn ram_image(
    cfg: &PrimitiveConfig,
    cache: &mut Option<(Arc<MemStorage>, f64)>,
    show_progress: bool,
) -> Result<(Arc<MemStorage>, f64)> {
    if let Some(c) = cache {
        return Ok((c.0.clone(), 0.0));
    }
    let mem = Arc::new(MemStorage::new());
    let t0 = std::time::Instant::now();
    let db = Database::open_with_storage(mem.clone(), cfg.options(256 << 20, 256 << 20)?)
        .map_err(LabError::engine("creating the RAM database"))?;
    workload::load(&db, cfg.tables, cfg.rows_per_table, cpu_count(), show_progress)?;
    db.close().map_err(LabError::engine("closing the loaded RAM database"))?;
    let load_s = t0.elapsed().as_secs_f64();
    *cache = Some((mem.clone(), load_s));
    Ok((mem, load_s))
}

fn cpu_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

/// What the disk database was loaded with (its marker).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct LoadMarker {
    tables: usize,
    rows_per_table: u64,
}

/// Opens (loading it first if needed) the disk database; returns its storage and load time.
fn disk_database(cfg: &PrimitiveConfig, show_progress: bool) -> Result<(Arc<dyn Storage>, f64)> {
    let dir = cfg.disk_db_dir();
    let expected = LoadMarker { tables: cfg.tables, rows_per_table: cfg.rows_per_table };
    let mut load_s = 0.0;
    if cfg.reload || read_marker::<LoadMarker>(&dir).as_ref() != Some(&expected) {
        remove_marker(&dir)?;
        remove_dir(&dir)?;
        std::fs::create_dir_all(&dir).map_err(LabError::io(&dir, "create directory"))?;
        let t0 = std::time::Instant::now();
        let db = Database::open_with_storage(dir_storage(&dir)?, cfg.options(256 << 20, 256 << 20)?)
            .map_err(LabError::engine("creating the disk database"))?;
        workload::load(&db, cfg.tables, cfg.rows_per_table, cpu_count(), show_progress)?;
        db.close().map_err(LabError::engine("closing the loaded disk database"))?;
        load_s = t0.elapsed().as_secs_f64();
        write_marker(&dir, &expected)?;
    }
    Ok((dir_storage(&dir)?, load_s))
}

/// Table and index bytes of the database in `storage`, and the table handles' sanity.
fn sizes(cfg: &PrimitiveConfig, storage: &Arc<dyn Storage>) -> Result<(u64, u64)> {
    let db = Database::open_with_storage(storage.clone(), cfg.options(1 << 20, 1 << 20)?)
        .map_err(LabError::engine("opening the database to size it"))?;
    let mut table_bytes = 0;
    let mut index_bytes = 0;
    for i in 0..cfg.tables {
        let t = db.table(&workload::table_name(i)).map_err(LabError::engine("opening a table"))?;
        table_bytes +=
            t.heap_pages().map_err(LabError::engine("sizing a table"))? * cfg.table_page_size as u64;
        index_bytes += db.index_pool().file_pages(t.id()).map_err(LabError::engine("sizing an index"))?
            * cfg.index_page_size as u64;
    }
    Ok((table_bytes, index_bytes))
}

/// Random page-size reads of `size` bytes of `device` (a file or a profile).
fn iobench_cfg(
    cfg: &PrimitiveConfig,
    device: String,
    engine: Engine,
    depth: usize,
    threads: usize,
    size: u64,
) -> IoBenchConfig {
    IoBenchConfig {
        device,
        profile_overrides: cfg.profile_overrides.clone(),
        block_bytes: cfg.table_page_size,
        depth,
        threads,
        duration_s: cfg.iobench_s,
        warmup_s: (cfg.iobench_s / 4.0).min(0.5),
        size_bytes: size,
        engine,
        seed: cfg.seed,
        ..IoBenchConfig::default()
    }
}

/// Measures the device's reference numbers with iobench (and fio on the disk).
fn characterise(cfg: &PrimitiveConfig, kind: &DeviceKind, report: &mut DeviceReport) -> Result<()> {
    if cfg.iobench_s <= 0.0 || *kind == DeviceKind::Memory {
        return Ok(());
    }
    let (device, size) = match kind {
        DeviceKind::Disk => {
            let f = cfg.disk_db_dir().join(nvmedb::db::heap_name(0));
            let len = std::fs::metadata(&f).map_err(LabError::io(&f, "read the size of"))?.len();
            let size = len / cfg.table_page_size as u64 * cfg.table_page_size as u64;
            (f.display().to_string(), size)
        }
        DeviceKind::Emulated(p) => (p.clone(), 256 << 20),
        DeviceKind::Memory => return Ok(()),
    };
    let bench = |c: IoBenchConfig| {
        iobench::measure(&c, false).map_err(LabError::in_part(format!("iobench on {}", c.device)))
    };
    let qd1 = bench(iobench_cfg(cfg, device.clone(), Engine::Sync, 1, 1, size))?;
    report.read_qd1_mean_us = qd1.read_latency.mean_us;
    report.read_qd1_p50_us = qd1.read_latency.p50_us;
    report.read_qd1_p99_us = qd1.read_latency.p99_us;
    let qdc = bench(iobench_cfg(cfg, device.clone(), Engine::Sync, 1, cfg.clients, size))?;
    report.read_qd_clients_iops = qdc.iops;
    let qd32 = bench(iobench_cfg(cfg, device.clone(), Engine::Queue, 32, 1, size))?;
    report.read_qd32_iops = qd32.iops;
    if let (DeviceKind::Disk, true) = (kind, cfg.fio) {
        report.fio_read_qd32_iops =
            fio::randread_iops(Path::new(&device), cfg.table_page_size, 1, 32, "io_uring", cfg.iobench_s);
    }
    Ok(())
}

/// Loads (or finds) the device's data, sizes it, measures its reference numbers and opens its
/// two log storages.
pub fn prepare(
    cfg: &PrimitiveConfig,
    kind: &DeviceKind,
    ram: &mut Option<(Arc<MemStorage>, f64)>,
    show_progress: bool,
) -> Result<PreparedDevice> {
    let (storage, load_s): (Arc<dyn Storage>, f64) = match kind {
        DeviceKind::Disk => disk_database(cfg, show_progress)?,
        DeviceKind::Memory => {
            let (m, s) = ram_image(cfg, ram, show_progress)?;
            (m, s)
        }
        DeviceKind::Emulated(p) => {
            let (m, s) = ram_image(cfg, ram, show_progress)?;
            let emu = EmulatedStorage::new(m, cfg.profile(p)?, cfg.seed)
                .map_err(LabError::engine("wrapping RAM in an emulated profile"))?;
            (Arc::new(emu), s)
        }
    };
    let (table_bytes, index_bytes) = sizes(cfg, &storage)?;
    let mut report = DeviceReport {
        device: kind.name(),
        label: kind.label(),
        location: storage.location(),
        table_bytes,
        index_bytes,
        load_s,
        read_qd1_mean_us: 0.0,
        read_qd1_p50_us: 0.0,
        read_qd1_p99_us: 0.0,
        read_qd_clients_iops: 0.0,
        read_qd32_iops: 0.0,
        fio_read_qd32_iops: None,
        profile: match kind {
            DeviceKind::Emulated(p) => Some(cfg.profile(p)?.to_pairs()),
            _ => None,
        },
    };
    characterise(cfg, kind, &mut report)?;
    if let DeviceKind::Emulated(_) = kind {
        report.label = format!("{} (EMULATED, read p50 {:.1} µs)", kind.name(), report.read_qd1_p50_us);
    }
    let logs = match kind {
        DeviceKind::Disk => {
            let dir = cfg.disk_db_dir();
            Some((dir_storage(&dir.join("wal"))?, dir_storage(&dir.join("wal-mirror"))?))
        }
        DeviceKind::Memory | DeviceKind::Emulated(_) => None,
    };
    Ok(PreparedDevice { kind: kind.clone(), storage, logs, report })
}

/// The log for one open of `dev`'s database: the disk database's own log directories, or a new
/// pair of log storages on the device's kind for the RAM image. That image is shared by
/// `memory` and every emulated profile, each of which writes it under its own log; reopening it
/// with an earlier device's log would pair the data with a log that ends before the catalog's
/// last checkpoint (the engine refuses that as lost log records). Every open of the image
/// follows a clean close, so a new log loses nothing.
fn logs_for(cfg: &PrimitiveConfig, dev: &PreparedDevice) -> Result<(Arc<dyn Storage>, Arc<dyn Storage>)> {
    if let Some((a, b)) = &dev.logs {
        return Ok((a.clone(), b.clone()));
    }
    Ok(match &dev.kind {
        DeviceKind::Emulated(p) => (
            Arc::new(EmulatedStorage::in_memory(cfg.profile(p)?, cfg.seed ^ 1)),
            Arc::new(EmulatedStorage::in_memory(cfg.profile(p)?, cfg.seed ^ 2)),
        ),
        _ => (Arc::new(MemStorage::new()), Arc::new(MemStorage::new())),
    })
}

/// An open database at one buffer size, with its tables.
pub struct OpenDb {
    /// The database.
    pub db: Database,
    /// Its tables, in order.
    pub tables: Vec<Table>,
    /// The table buffer it was opened with.
    pub buffer_bytes: u64,
}

/// Opens the device's database with a table buffer of `pct` % of the tables (at least four
/// frames per client) and pre-warms it.
pub fn open_at(cfg: &PrimitiveConfig, dev: &PreparedDevice, pct: f64) -> Result<OpenDb> {
    // At least 4 frames per client, so every client can hold a page while others evict.
    let min_frames = (4 * cfg.clients).max(8) as u64;
    let buffer_bytes =
        ((dev.report.table_bytes as f64 * pct / 100.0) as u64).max(cfg.table_page_size as u64 * min_frames);
    // All index pages cached: twice the index size, at least 16 MiB.
    let index_bytes = (dev.report.index_bytes * 2).max(16 << 20);
    let db = Database::open_with_storages(
        dev.storage.clone(),
        Some(logs_for(cfg, dev)?),
        cfg.options(buffer_bytes, index_bytes)?,
    )
    .map_err(LabError::engine("opening the database"))?;
    let tables = (0..cfg.tables)
        .map(|i| db.table(&workload::table_name(i)).map_err(LabError::engine("opening a table")))
        .collect::<Result<Vec<_>>>()?;
    // Index pages first (pinned), then as much of the tables as the buffer holds.
    for t in &tables {
        let _ = t.range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |_| Ok(false));
    }
    workload::prewarm(&tables, cfg.rows_per_table, pct / 100.0)?;
    Ok(OpenDb { db, tables, buffer_bytes })
}
