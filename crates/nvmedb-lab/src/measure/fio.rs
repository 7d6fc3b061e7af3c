//! fio as the reference: runs it on a file and reads its JSON output.
//!
//! Owns: the fio command lines the lab uses and the reading of fio's JSON. Invariant: random-read
//! runs are read-only (`--readonly`), so fio can never change a database file it measures; a
//! missing or failing fio is `None`, and the experiment says the reference did not run.

use std::path::Path;
use std::process::Command;

/// True when `fio` can be run.
pub fn installed() -> bool {
    Command::new("fio").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// fio's random-read IOPS on `file` (O_DIRECT), or `None` when fio is missing or fails.
/// `engine` is fio's `ioengine` (e.g. `psync`, `io_uring`).
pub fn randread_iops(
    file: &Path,
    block_bytes: usize,
    jobs: usize,
    depth: usize,
    engine: &str,
    secs: f64,
) -> Option<f64> {
    read_iops(file, &["--rw=randread".into(), format!("--ioengine={engine}")], block_bytes, jobs, depth, secs)
}

/// fio's sequential read rate of `file` in MiB/s: O_DIRECT, 4 MiB reads, one job, depth 1 (how
/// a log is read back), or `None` when fio is missing or fails.
pub fn seqread_mib_s(file: &Path, secs: f64) -> Option<f64> {
    let block = 4 << 20;
    read_iops(file, &["--rw=read".into(), "--ioengine=psync".into()], block, 1, 1, secs)
        .map(|iops| iops * block as f64 / (1 << 20) as f64)
}

/// Runs the fio job file `job` read-only (`--readonly`, a command-line option only; written into `scratch`, removed afterwards) and returns the
/// bytes all its jobs read and the seconds its groups took one after another (per group the
/// slowest job's runtime; fio reports milliseconds), or `None` when fio is missing or fails.
pub fn run_job_file(job: &str, scratch: &Path) -> Option<(u64, f64)> {
    let path = scratch.join(format!("nvmedb-{}.fio", std::process::id()));
    std::fs::write(&path, job).ok()?;
    let out = Command::new("fio").args(["--readonly", "--output-format=json"]).arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let out = out.ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut bytes = 0u64;
    let mut group_ms: std::collections::BTreeMap<u64, u64> = Default::default();
    for j in v["jobs"].as_array()? {
        bytes += j["read"]["io_bytes"].as_u64()?;
        let g = group_ms.entry(j["groupid"].as_u64()?).or_default();
        *g = (*g).max(j["job_runtime"].as_u64()?);
    }
    Some((bytes, group_ms.values().sum::<u64>() as f64 / 1e3))
}

/// Runs a read-only, O_DIRECT, time-based fio job of `jobs` × `depth` reads of `block_bytes`
/// on `file` with the extra `shape` options; its read IOPS, or `None` when fio is missing or
/// fails.
fn read_iops(
    file: &Path,
    shape: &[String],
    block_bytes: usize,
    jobs: usize,
    depth: usize,
    secs: f64,
) -> Option<f64> {
    let out = Command::new("fio")
        .args([
            "--name=nvmedb-ref".to_string(),
            format!("--filename={}", file.display()),
            "--readonly".into(),
            format!("--bs={block_bytes}"),
            "--direct=1".into(),
            format!("--iodepth={depth}"),
            format!("--numjobs={jobs}"),
            "--group_reporting".into(),
            "--time_based".into(),
            format!("--runtime={}", secs.ceil().max(1.0) as u64),
            "--output-format=json".into(),
        ])
        .args(shape)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["jobs"][0]["read"]["iops"].as_f64()
}

/// fio's rate of 4 KiB sequential O_DIRECT writes each followed by fdatasync, one job, in a
/// scratch file under `dir` (removed afterwards).
pub fn fdatasync_iops(dir: &Path, secs: f64) -> Option<f64> {
    let file = dir.join("fio-fdatasync.tmp");
    let out = Command::new("fio")
        .args([
            "--name=sync",
            &format!("--filename={}", file.display()),
            "--rw=write",
            "--bs=4k",
            "--direct=1",
            "--fdatasync=1",
            "--size=64m",
            "--time_based",
            &format!("--runtime={}", secs.ceil().max(1.0) as u64),
            "--output-format=json",
        ])
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&file);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["jobs"][0]["write"]["iops"].as_f64()
}
