//! The TPC-H experiment's devices: the loaded database on the real disk (kept between runs of
//! the same scale factor and page size), a RAM copy of it behind an emulated profile (several
//! striped devices = one medium with their summed IOPS and bandwidth caps), and each device's
//! sequential-read limit measured with fio and iobench at the query's page size and concurrency.
//!
//! Owns: [`DeviceSpec`], [`disk_database`], [`Prepared`], [`prepare`] and [`limit`]. Invariants:
//! an emulated device's name carries EMULATED and the p50 read latency iobench achieved on it in
//! this run; a reused database is used only when its marker names the same scale factor, page
//! size and row counts, and the rows are counted again by every query.

use super::TpchConfig;
use crate::error::{LabError, Result};
use crate::experiments::iobench::{self, IoBenchConfig, Pattern};
use crate::measure::fio;
use crate::workload::tpch;
use nvmedb::buffer::BufferPolicy;
use nvmedb::io::{DeviceProfile, DirStorage, EmulatedStorage, FileOptions, MemStorage, Storage};
use nvmedb::{BufferSize, Database, Options};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
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
    /// Heap file of lineitem (the device references read it).
    pub lineitem_file: PathBuf,
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

fn dir_storage(dir: &Path) -> Result<Arc<dyn Storage>> {
    Ok(Arc::new(
        DirStorage::new(dir, FileOptions::default())
            .map_err(LabError::engine(format!("opening {}", dir.display())))?,
    ))
}

/// Loads the database on the disk unless `<data_dir>/sf<sf>-p<page>` already holds the same
/// load (its marker matches and `reload` is off).
pub fn disk_database(cfg: &TpchConfig, show_progress: bool, note: &dyn Fn(String)) -> Result<LoadInfo> {
    let dir = cfg.data_dir.join(format!("sf{}-p{}k", cfg.sf, cfg.page_size / 1024));
    let marker_path = dir.with_extension("loaded.json");
    let want_rows = tpch::cardinalities(cfg.sf);
    let marker: Option<LoadMarker> =
        std::fs::read(&marker_path).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let expected = LoadMarker { sf: cfg.sf, page_size: cfg.page_size, rows: want_rows };
    let (reused, load_s) = if !cfg.reload && marker.as_ref() == Some(&expected) && dir.exists() {
        note(format!("reusing the SF {} database in {}", cfg.sf, dir.display()));
        (true, 0.0)
    } else {
        let _ = std::fs::remove_file(&marker_path);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(LabError::io(&dir, "remove"))?;
        }
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
        let text =
            serde_json::to_vec_pretty(&expected).map_err(|e| LabError::config("marker", e.to_string()))?;
        std::fs::write(&marker_path, text).map_err(LabError::io(&marker_path, "write"))?;
        note(format!("loaded SF {} ({:?} rows) in {:.1} s", cfg.sf, r.rows, r.seconds));
        (false, r.seconds)
    };
    let db = Database::open_with_storage(
        dir_storage(&dir)?,
        options(cfg, 16 << 20, BufferPolicy::Shared { stripes: 1 }),
    )
    .map_err(LabError::engine(format!("opening {}", dir.display())))?;
    let mut pages = [0; 3];
    let mut lineitem_file = PathBuf::new();
    for (i, name) in tpch::TABLES.iter().enumerate() {
        let t = db.table(name).map_err(LabError::engine(format!("opening table {name}")))?;
        pages[i] = t.heap_pages().map_err(LabError::engine("counting heap pages"))?;
        if *name == tpch::LINEITEM {
            lineitem_file = dir.join(nvmedb::db::heap_name(t.id()));
        }
    }
    drop(db);
    Ok(LoadInfo {
        dir,
        rows: want_rows,
        pages,
        heap_bytes: pages.iter().sum::<u64>() * cfg.page_size as u64,
        load_s,
        reused,
        lineitem_file,
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

/// A device's sequential-read limit at one concurrency.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Limit {
    /// Device (short name).
    pub device: String,
    /// Threads (= query workers).
    pub workers: usize,
    /// Reads in flight per thread (= the query's read-ahead).
    pub depth: usize,
    /// iobench: page-size sequential reads, each thread its own slice, `depth` submitted
    /// together, through the engine's Device (the emulator for emulated devices).
    pub iobench_iops: f64,
    /// CPU µs per read iobench's process spent (for emulated devices: the emulator's cost).
    pub iobench_cpu_us_per_read: f64,
    /// fio on the lineitem heap file, same shape (real disk only; `None` without fio).
    pub fio_iops: Option<f64>,
}

impl Limit {
    /// The higher of fio and iobench: the limit a query's page rate is compared with.
    pub fn best(&self) -> f64 {
        self.fio_iops.unwrap_or(0.0).max(self.iobench_iops)
    }
}

/// Measures `spec`'s limit with `workers` threads of `depth` reads of a page.
pub fn limit(cfg: &TpchConfig, spec: &DeviceSpec, load: &LoadInfo, workers: usize) -> Result<Limit> {
    let depth = cfg.read_ahead as usize;
    let size = load.pages[2] * cfg.page_size as u64;
    let base = match &spec.profile {
        None => IoBenchConfig::file_reads(&load.lineitem_file, cfg.page_size, size, cfg.device_secs),
        Some(p) => IoBenchConfig {
            device: p.clone(),
            profile_overrides: spec.overrides(),
            block_bytes: cfg.page_size,
            size_bytes: size.max((workers * cfg.page_size) as u64),
            duration_s: cfg.device_secs,
            warmup_s: 0.3,
            ..IoBenchConfig::default()
        },
    };
    // Batches of `depth` submitted together, as a scan's read-ahead submits them.
    let c =
        IoBenchConfig { pattern: Pattern::Sequential, depth, threads: workers, submit_batch: depth, ..base };
    let r = iobench::measure(&c, false).map_err(LabError::in_part(format!("iobench on {}", spec.short())))?;
    let fio_iops = match (&spec.profile, cfg.use_fio) {
        (None, true) => {
            fio::seqread_iops(&load.lineitem_file, cfg.page_size, size, workers, depth, cfg.device_secs)
        }
        _ => None,
    };
    Ok(Limit {
        device: spec.short(),
        workers,
        depth,
        iobench_iops: r.iops,
        iobench_cpu_us_per_read: r.cpu_us_per_op,
        fio_iops,
    })
}
