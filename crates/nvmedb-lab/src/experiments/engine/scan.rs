//! Full scans under each buffer policy (SHR-1/16/512, SEP) against the device's sequential-read
//! limit measured by iobench on the same file.
//!
//! Owns: [`scans`]. Invariant: every scan must see every row, or the part fails.

use super::data::{options, TABLE};
use super::{EngineConfig, ScanResult};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::experiments::iobench::{self, IoBenchConfig, Pattern};
use crate::measure::Spread;
use nvmedb::buffer::BufferPolicy;
use nvmedb::util::sync::MutexExt;
use nvmedb::{BufferSize, Database};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// iobench's sequential-read IOPS of the heap file at the page size, depth 32: the scans'
/// device limit.
pub fn device_limit(cfg: &EngineConfig, heap: &Path, table_bytes: u64) -> Result<f64> {
    let c = IoBenchConfig {
        pattern: Pattern::Sequential,
        depth: 32,
        ..IoBenchConfig::file_reads(heap, cfg.page_size, table_bytes, cfg.duration_s)
    };
    Ok(iobench::measure(&c, false).map_err(LabError::in_part(format!("iobench on {}", heap.display())))?.iops)
}

/// One full scan from `cfg.scan_threads` threads (one partition each): seconds and page reads.
fn scan_once(cfg: &EngineConfig, db: &Database) -> Result<(f64, u64)> {
    let t = db.table(TABLE).map_err(LabError::engine("opening the table"))?;
    let before = db.buffer_stats().0;
    let t0 = Instant::now();
    let rows = AtomicU64::new(0);
    let err = Mutex::new(None);
    std::thread::scope(|s| {
        for part in 0..cfg.scan_threads {
            let (t, rows, err) = (&t, &rows, &err);
            s.spawn(move || {
                let mut n = 0u64;
                let r = t.scan_partition(part, cfg.scan_threads, |row| {
                    n += u64::from(row.int(0) >= 0);
                    Ok(true)
                });
                if let Err(e) = r {
                    *err.locked() = Some(e);
                }
                rows.fetch_add(n, Ordering::Relaxed);
            });
        }
    });
    if let Some(e) = err.into_value() {
        return Err(LabError::engine("scanning a partition")(e));
    }
    let seen = rows.load(Ordering::Relaxed);
    if seen != cfg.rows {
        return Err(LabError::Inconsistent {
            what: "full scan".into(),
            detail: format!("saw {seen} rows, the table has {}", cfg.rows),
        });
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok((secs, db.buffer_stats().0.since(&before).reads))
}

/// Part "scan": `cfg.reps` full scans under each policy of `cfg.scan_policies`.
pub fn scans(cfg: &EngineConfig, env: &RunEnv, limit_iops: f64) -> Result<Vec<ScanResult>> {
    let mut out = Vec::new();
    for name in &cfg.scan_policies {
        let policy = BufferPolicy::parse(name, cfg.scan_threads)
            .ok_or_else(|| LabError::config("scan_policies", format!("unknown policy `{name}`")))?;
        let db = Database::open(
            &cfg.data_dir,
            options(cfg, BufferSize::PercentOfData(cfg.scan_buffer_pct), policy),
        )
        .map_err(LabError::engine("opening the database"))?;
        let (mut secs, mut iops) = (vec![], vec![]);
        for _ in 0..cfg.reps {
            let (s, reads) = scan_once(cfg, &db)?;
            secs.push(s);
            iops.push(reads as f64 / s);
        }
        let iops = Spread::of(&iops);
        let r = ScanResult {
            policy: policy.label(),
            seconds: Spread::of(&secs),
            read_iops: iops,
            mib_per_s: iops.median * cfg.page_size as f64 / (1 << 20) as f64,
            share_of_device_limit: iops.median / limit_iops,
        };
        env.note(r.line(cfg.scan_threads));
        out.push(r);
    }
    Ok(out)
}
