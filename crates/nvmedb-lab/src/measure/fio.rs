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

/// fio's sequential-read IOPS on `file` (O_DIRECT, io_uring, read-only): `jobs` jobs, each
/// reading its own contiguous slice of `size_bytes / jobs` (as the partitioned scans do) in
/// batches of `depth` reads submitted together and reaped together (as a scan's read-ahead
/// does; the block layer may merge a batch's adjacent reads), or `None` when fio is missing or
/// fails.
pub fn seqread_iops(
    file: &Path,
    block_bytes: usize,
    size_bytes: u64,
    jobs: usize,
    depth: usize,
    secs: f64,
) -> Option<f64> {
    let slice = (size_bytes / jobs.max(1) as u64) / block_bytes as u64 * block_bytes as u64;
    if slice == 0 {
        return None;
    }
    let shape = [
        "--rw=read".to_string(),
        "--ioengine=io_uring".into(),
        format!("--iodepth_batch_submit={depth}"),
        format!("--iodepth_batch_complete_min={depth}"),
        format!("--size={slice}"),
        format!("--offset_increment={slice}"),
    ];
    read_iops(file, &shape, block_bytes, jobs, depth, secs)
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
