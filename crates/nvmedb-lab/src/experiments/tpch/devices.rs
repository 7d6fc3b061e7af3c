//! The TPC-H experiment's devices: the loaded database on the real disk (kept between runs of
//! the same scale factor and page size), a RAM copy of it behind an emulated profile (several
//! striped devices = one medium with their summed IOPS and bandwidth caps), and each device's
//! limit: Q3's own scan pattern (same files, partitions and page size, in batches of the
//! read-ahead and of half of it, the better kept; see `probe`) replayed through the engine's
//! `Device` and, on the disk, by fio.
//!
//! Owns: [`DeviceSpec`], [`disk_database`], [`Prepared`], [`prepare`], [`pattern`] and
//! [`limit`]. Invariants:
//! an emulated device's name carries EMULATED and the p50 read latency iobench achieved on it in
//! this run; a reused database is used only when its marker names the same scale factor, page
//! size and row counts, and the rows are counted again by every query.

use super::probe::{self, ScanFile, ScanPattern};
use super::TpchConfig;
use crate::error::{LabError, Result};
use crate::experiments::iobench::{self, IoBenchConfig};
use crate::files::{dir_storage, read_marker, remove_dir, remove_marker, write_marker};
use crate::workload::tpch;
use nvmedb::buffer::BufferPolicy;
use nvmedb::io::{DeviceProfile, EmulatedStorage, MemStorage, Storage};
use nvmedb::{BufferSize, Database, Options};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// A device the query runs on: `disk`, or a built-in profile, optionally `-x<N>` striped.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSpec {
    /// `None` for the real disk; the emulated profile otherwise.
    pub profile: Option<String>,
    /// Emulated devices striped together.
    pub stripes: u32,
}

impl DeviceSpec {
    /// Parses `disk`, `optane` or `optane-x10`; errors name `--devices`.
    pub fn parse(s: &str) -> Result<Self> {
        if s == "disk" {
            return Ok(Self { profile: None, stripes: 1 });
        }
        let (name, stripes) = match s.rsplit_once("-x") {
            Some((n, k)) => (n, k.parse().ok().filter(|&k| k > 0).ok_or_else(|| bad(s))?),
            None => (s, 1),
        };
        if DeviceProfile::builtin(name).is_none() {
            return Err(bad(s));
        }
        Ok(Self { profile: Some(name.to_string()), stripes })
    }

    /// The profile overrides that make `stripes` devices one emulated medium: caps multiplied.
    pub fn overrides(&self) -> Vec<String> {
        let Some(p) = self.profile.as_deref().and_then(DeviceProfile::builtin) else { return Vec::new() };
        if self.stripes == 1 {
            return Vec::new();
        }
        let k = f64::from(self.stripes);
        vec![format!("iops_cap={}", p.iops_cap * k), format!("bandwidth_mb_s={}", p.bandwidth_mb_s * k)]
    }

    /// The profile with its overrides applied.
    fn profile(&self) -> Result<Option<DeviceProfile>> {
        let Some(name) = &self.profile else { return Ok(None) };
        let mut p = DeviceProfile::builtin(name).ok_or_else(|| bad(name))?;
        for o in self.overrides() {
            p.apply_override(&o).map_err(|e| LabError::config("--devices", e.to_string()))?;
        }
        Ok(Some(p))
    }

    /// Short name: `disk`, `optane`, `optane x10`.
    pub fn short(&self) -> String {
        match (&self.profile, self.stripes) {
            (None, _) => "disk".into(),
            (Some(p), 1) => p.clone(),
            (Some(p), k) => format!("{p} x{k}"),
        }
    }
}

fn bad(s: &str) -> LabError {
    LabError::config(
        "--devices",
        format!(
            "`{s}`: expected `disk`, a profile ({}) or <profile>-x<N>",
            nvmedb::io::PROFILE_NAMES.join(", ")
        ),
    )
}

/// The loaded database on the disk, as recorded next to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadMarker {
    /// Scale factor.
    pub sf: f64,
    /// Page size.
    pub page_size: usize,
    /// Rows per table (customer, orders, lineitem).
    pub rows: [u64; 3],
}

/// How the database came to be.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadInfo {
    /// Directory on the disk.
    pub dir: PathBuf,
    /// Rows per table.
    pub rows: [u64; 3],
    /// Heap pages per table.
    pub pages: [u64; 3],
    /// Bytes of the three heap files.
    pub heap_bytes: u64,
    /// Load seconds (0 when an earlier load was reused).
    pub load_s: f64,
    /// An earlier load was reused.
    pub reused: bool,
    /// The three heap files in scan order (customer, orders, lineitem): what the limit probes
    /// read.
    pub files: Vec<ScanFile>,
}

/// Options every open of the TPC-H database uses: no log (read-only queries), the page size,
/// `table_buffer` under `policy`, the engine's defaults otherwise (lock-free hits unless told).
pub fn options(cfg: &TpchConfig, table_buffer: u64, policy: BufferPolicy) -> Options {
    Options {
        table_page_size: cfg.page_size,
        index_page_size: cfg.page_size,
        table_buffer: BufferSize::Bytes(table_buffer),
        // Q3 uses no index; the load needs room for the primary-key B+trees.
        index_buffer: BufferSize::Bytes(256 << 20),
        policy,
        wal: false,
        lock_free_hits: cfg.lock_free_hits,
        async_read_ahead: cfg.async_read_ahead,
        ..Options::default()
    }
}

/// Loads the database on the disk unless `<data_dir>/sf<sf>-p<page>` already holds the same
/// load (its marker matches and `reload` is off).
pub fn disk_database(cfg: &TpchConfig, show_progress: bool, note: &dyn Fn(String)) -> Result<LoadInfo> {
    let dir = cfg.data_dir.join(format!("sf{}-p{}k", cfg.sf, cfg.page_size / 1024));
    let want_rows = tpch::cardinalities(cfg.sf);
    let marker: Option<LoadMarker> = read_marker(&dir);
    let expected = LoadMarker { sf: cfg.sf, page_size: cfg.page_size, rows: want_rows };
    let (reused, load_s) = if !cfg.reload && marker.as_ref() == Some(&expected) && dir.exists() {
        note(format!("reusing the SF {} database in {}", cfg.sf, dir.display()));
        (true, 0.0)
    } else {
        remove_marker(&dir)?;
        remove_dir(&dir)?;
        std::fs::create_dir_all(&dir).map_err(LabError::io(&dir, "create directory"))?;
        let db = Database::open_with_storage(
            dir_storage(&dir)?,
            options(cfg, 256 << 20, BufferPolicy::Shared { stripes: 16 }),
        )
        .map_err(LabError::engine(format!("creating {}", dir.display())))?;
        let r = tpch::load(&db, cfg.sf, cfg.load_threads, show_progress)?;
        db.close().map_err(LabError::engine("closing the loaded database"))?;
        if r.rows != want_rows {
            return Err(LabError::Inconsistent {
                what: "TPC-H load".into(),
                detail: format!("loaded {:?} rows, TPC-H SF {} has {want_rows:?}", r.rows, cfg.sf),
            });
        }
        write_marker(&dir, &expected)?;
        note(format!("loaded SF {} ({:?} rows) in {:.1} s", cfg.sf, r.rows, r.seconds));
        (false, r.seconds)
    };
    let db = Database::open_with_storage(
        dir_storage(&dir)?,
        options(cfg, 16 << 20, BufferPolicy::Shared { stripes: 1 }),
    )
    .map_err(LabError::engine(format!("opening {}", dir.display())))?;
    let mut pages = [0; 3];
    let mut files = Vec::new();
    for (i, name) in tpch::TABLES.iter().enumerate() {
        let t = db.table(name).map_err(LabError::engine(format!("opening table {name}")))?;
        pages[i] = t.heap_pages().map_err(LabError::engine("counting heap pages"))?;
        files.push(ScanFile {
            table: name.to_string(),
            file: nvmedb::db::heap_name(t.id()),
            pages: pages[i],
        });
    }
    drop(db);
    Ok(LoadInfo {
        dir,
        rows: want_rows,
        pages,
        heap_bytes: pages.iter().sum::<u64>() * cfg.page_size as u64,
        load_s,
        reused,
        files,
    })
}

/// A device ready for queries.
pub struct Prepared {
    /// What it is.
    pub spec: DeviceSpec,
    /// Name for tables and plots (EMULATED and the achieved latency for emulated devices).
    pub label: String,
    /// Storage holding the database.
    pub storage: Arc<dyn Storage>,
}

/// Opens `spec`'s storage: the disk directory, or a RAM copy of its files behind the profile.
pub fn prepare(cfg: &TpchConfig, spec: &DeviceSpec, load: &LoadInfo) -> Result<Prepared> {
    let Some(profile) = spec.profile()? else {
        return Ok(Prepared {
            spec: spec.clone(),
            label: format!("disk ({})", load.dir.display()),
            storage: dir_storage(&load.dir)?,
        });
    };
    let disk = dir_storage(&load.dir)?;
    let mem = Arc::new(MemStorage::new());
    for name in disk.list().map_err(LabError::engine("listing the database files"))? {
        let path = load.dir.join(&name);
        let bytes = std::fs::read(&path).map_err(LabError::io(&path, "read"))?;
        mem.open(&name, true).map_err(LabError::engine(format!("creating {name} in RAM")))?;
        mem.mem_device(&name)
            .ok_or_else(|| LabError::Inconsistent {
                what: "RAM copy".into(),
                detail: format!("{name} missing"),
            })?
            .restore(bytes);
    }
    drop(disk);
    let storage: Arc<dyn Storage> = Arc::new(
        EmulatedStorage::new(mem, profile, 1)
            .map_err(LabError::engine(format!("emulating {}", spec.short())))?,
    );
    let lat = iobench::measure(
        &IoBenchConfig {
            device: spec.profile.clone().unwrap_or_default(),
            profile_overrides: spec.overrides(),
            block_bytes: cfg.page_size,
            size_bytes: 256 << 20,
            duration_s: 1.0,
            warmup_s: 0.2,
            ..IoBenchConfig::default()
        },
        false,
    )
    .map_err(LabError::in_part(format!("latency of {}", spec.short())))?;
    let p50 = lat.read_latency.p50_us;
    Ok(Prepared {
        spec: spec.clone(),
        label: format!("{} [EMULATED, read p50 {p50:.1} µs]", spec.short()),
        storage,
    })
}

/// The reads of one pass of Q3 with `workers` workers: the load's three heap files in scan
/// order, partitioned as the scans partition them, in batches of the read-ahead.
pub fn pattern(cfg: &TpchConfig, load: &LoadInfo, workers: usize) -> ScanPattern {
    ScanPattern { files: load.files.clone(), page_size: cfg.page_size, workers, batch: cfg.read_ahead }
}

/// A device's limit at one worker count, measured with Q3's own read pattern in one
/// repetition, just before or just after that repetition's queries at this point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limit {
    /// Device (short name).
    pub device: String,
    /// Threads (= query workers).
    pub workers: usize,
    /// The query's read-ahead (pages each worker keeps in flight).
    pub depth: usize,
    /// Pages per synchronous batch of the engine replay counted in `engine_iops`: the better of
    /// batches of the read-ahead and of half of it (the scans' requests are half a window).
    #[serde(default)]
    pub engine_batch: u64,
    /// The same for fio (0 when fio did not run).
    #[serde(default)]
    pub fio_batch: u64,
    /// Repetition (from 0).
    pub rep: usize,
    /// The probe ran just before this repetition's queries at this point (false: just after).
    pub probe_first: bool,
    /// Passes of the pattern each probe read.
    pub passes: u32,
    /// The engine's `Device` replaying the pattern (io_uring on the disk, the emulator on an
    /// emulated device), pages/s: the better of its batch sizes (`engine_batch`).
    pub engine_iops: f64,
    /// Process CPU µs per page of that replay (for emulated devices: the emulator's cost).
    pub engine_cpu_us_per_read: f64,
    /// The engine replay's pages/s while it read customer's file (from the workers' meeting
    /// before it to the one after it), as the query's customer phase is timed.
    #[serde(default)]
    pub engine_customer_iops: f64,
    /// The same for orders' file.
    #[serde(default)]
    pub engine_orders_iops: f64,
    /// The same for lineitem's file.
    #[serde(default)]
    pub engine_lineitem_iops: f64,
    /// fio replaying the pattern on the disk's files (O_DIRECT, io_uring), the better of its
    /// batch sizes (`fio_batch`); `None` on emulated devices, without fio, or when fio failed.
    pub fio_iops: Option<f64>,
}

impl Limit {
    /// The engine replay's pages/s per table, in Q3's scan order (customer, orders, lineitem).
    pub fn engine_table_iops(&self) -> [f64; 3] {
        [self.engine_customer_iops, self.engine_orders_iops, self.engine_lineitem_iops]
    }

    /// The higher of fio and the engine's replay: the limit a query's page rate is compared with.
    pub fn best(&self) -> f64 {
        self.fio_iops.unwrap_or(0.0).max(self.engine_iops)
    }
}

/// Measures `dev`'s limit with Q3's read pattern at `workers` workers (`cfg.probe_passes`
/// passes; fio only on the real disk, with `cfg.use_fio`), in synchronous batches of the
/// read-ahead and of half of it, keeping the better of each probe: the scans keep the
/// read-ahead in flight in requests of half of it, and a disk may serve either size faster.
pub fn limit(
    cfg: &TpchConfig,
    dev: &Prepared,
    load: &LoadInfo,
    workers: usize,
    rep: usize,
    probe_first: bool,
) -> Result<Limit> {
    let passes = cfg.probe_passes;
    let full = pattern(cfg, load, workers);
    let mut batches = vec![full.batch.max(1)];
    if full.batch / 2 >= 1 {
        batches.push(full.batch / 2);
    }
    let mut engine: Option<(probe::Replay, u64)> = None;
    let mut fio: Option<(f64, u64)> = None;
    for batch in batches {
        let pat = ScanPattern { batch, ..full.clone() };
        let r = probe::replay(&*dev.storage, &pat, passes)
            .map_err(LabError::in_part(format!("scan-pattern replay on {}", dev.spec.short())))?;
        if engine.as_ref().is_none_or(|(e, _)| r.iops > e.iops) {
            engine = Some((r, batch));
        }
        if let (None, true) = (&dev.spec.profile, cfg.use_fio) {
            if let Some(f) = probe::fio(&pat, &load.dir, passes, &cfg.data_dir) {
                if fio.is_none_or(|(v, _)| f.iops > v) {
                    fio = Some((f.iops, batch));
                }
            }
        }
    }
    let (r, engine_batch) = engine.expect("at least one batch size probed");
    Ok(Limit {
        device: dev.spec.short(),
        workers,
        depth: cfg.read_ahead as usize,
        engine_batch,
        fio_batch: fio.map_or(0, |(_, b)| b),
        rep,
        probe_first,
        passes,
        engine_iops: r.iops,
        engine_cpu_us_per_read: r.cpu_us_per_read,
        engine_customer_iops: r.file_iops.first().copied().unwrap_or(0.0),
        engine_orders_iops: r.file_iops.get(1).copied().unwrap_or(0.0),
        engine_lineitem_iops: r.file_iops.get(2).copied().unwrap_or(0.0),
        fio_iops: fio.map(|(v, _)| v),
    })
}
