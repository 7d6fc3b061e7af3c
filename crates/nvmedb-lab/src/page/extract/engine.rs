//! Seed 004's buffer policies on a full scan, from a run of `nvmedb lab engine` (part `scan`).
//!
//! Owns: [`seed004_scan`]. The paper runs TPC-H Q3 (its own section waits for the `tpch`
//! experiment); this section compares the same policies (SHR-1/16/512 and SEP) on the engine's
//! full scan, with the device's sequential-read limit measured in the same run.

use super::{num, pct, ratio, Finding, Run, Status};
use crate::error::Result;
use crate::experiments::engine::{EngineConfig, EngineResults};
use crate::report::ResultFile;

/// Seed 004: SEP's scan rate over SHR-1's, and SEP's share of the device limit.
pub fn seed004_scan(run: &Run) -> Result<Finding> {
    let doc: ResultFile<EngineConfig, EngineResults> = run.results()?;
    let scans = &doc.results.scans;
    let find = |p: &str| scans.iter().find(|s| s.policy.eq_ignore_ascii_case(p));
    let details = scans
        .iter()
        .map(|s| {
            (
                format!("full scan under {}", s.policy),
                format!(
                    "{} page reads/s (min {}, max {}), {} MiB/s, {} of the device limit",
                    num(s.read_iops.median),
                    num(s.read_iops.min),
                    num(s.read_iops.max),
                    num(s.mib_per_s),
                    pct(100.0 * s.share_of_device_limit)
                ),
            )
        })
        .collect();
    let (Some(sep), Some(shr)) = (find("SEP"), find("SHR-1")) else {
        let mut f =
            Finding::new("—", "", Status::NotRun("the run has no SEP and SHR-1 scans (--parts scan)".into()));
        f.details = details;
        return Ok(f);
    };
    let speedup = if shr.read_iops.median > 0.0 { sep.read_iops.median / shr.read_iops.median } else { 0.0 };
    let ours = format!(
        "SEP / SHR-1 = {:.2}×; SEP at {} of the device limit",
        speedup,
        pct(100.0 * sep.share_of_device_limit)
    );
    let comparison = format!("{} of the paper's 6.37× speed-up", ratio(speedup, 6.37));
    let status = if speedup >= 0.5 * 6.37 && sep.share_of_device_limit >= 0.8 {
        Status::Reproduced
    } else {
        let mut s = format!(
            "{} scan threads on {} CPUs (the paper: 44 cores and 10 devices): SEP / SHR-1 = {:.2}×",
            doc.config.scan_threads, doc.context.cpus, speedup
        );
        if let Some(limit) = doc.results.device_limit_iops {
            s.push_str(&format!(
                "; SEP reads {} pages/s against the device's {} (sequential QD32), {}",
                num(sep.read_iops.median),
                num(limit),
                pct(100.0 * sep.share_of_device_limit)
            ));
        }
        Status::Differs(s)
    };
    let mut f = Finding::new(ours, comparison, status);
    f.details = details;
    f.devices =
        vec![format!("the heap file on this machine's disk (real), {} threads", doc.config.scan_threads)];
    Ok(f)
}
