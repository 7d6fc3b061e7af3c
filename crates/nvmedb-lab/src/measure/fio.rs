//! fio as the reference: runs it on a file and reads its JSON output.
//!
//! Owns: the fio command lines the lab uses and the reading of fio's JSON. Invariant: random-read
//! runs are read-only (`--readonly`), so fio can never change a database file it measures; a
//! missing or failing fio is `None`, and the experiment says the reference did not run.
//!
//! Read buffers: the engine reads pages into buffer frames and large buffers advised for huge
//! pages (see `nvmedb::io::AlignedBuf::large`), and on a virtio disk a multi-page read into 4 KiB
//! pages can run at a third to a half of the rate it reaches into huge pages. So fio's read
//! buffers go in huge pages too ([`huge_page_mem`]) whenever a hugetlbfs with enough free huge
//! pages is mounted (`echo 64 > /proc/sys/vm/nr_hugepages; mount -t hugetlbfs none /mnt/huge`);
//! [`read_buffers`] says in words which it was, for every output that shows a fio read figure.

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
    randread(file, block_bytes, jobs, depth, engine, secs).map(|r| r.iops)
}

/// One fio random-read run: its rate and the CPU it took per read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FioReads {
    /// Reads per second.
    pub iops: f64,
    /// CPU time of fio's processes (user + system, every job) per read, µs: what the kernel's
    /// read path plus fio's own loop cost, the floor an engine's CPU per miss is compared with.
    pub cpu_us_per_read: f64,
}

/// [`randread_iops`] with the CPU fio's processes used per read (measured as the CPU of this
/// process's waited-for children across the run, so nothing else may run fio meanwhile).
pub fn randread(
    file: &Path,
    block_bytes: usize,
    jobs: usize,
    depth: usize,
    engine: &str,
    secs: f64,
) -> Option<FioReads> {
    let cpu0 = super::clock::children_cpu_ns();
    let shape = ["--rw=randread".into(), format!("--ioengine={engine}")];
    let (iops, reads) = read_run(file, &shape, block_bytes, jobs, depth, secs)?;
    let cpu_ns = super::clock::children_cpu_ns().saturating_sub(cpu0);
    Some(FioReads { iops, cpu_us_per_read: cpu_ns as f64 / 1e3 / reads.max(1) as f64 })
}

/// fio's sequential read rate of `file` in MiB/s: O_DIRECT, 4 MiB reads, one job, depth 1 (how
/// a log is read back), or `None` when fio is missing or fails.
pub fn seqread_mib_s(file: &Path, secs: f64) -> Option<f64> {
    let block = 4 << 20;
    read_iops(file, &["--rw=read".into(), "--ioengine=psync".into()], block, 1, 1, secs)
        .map(|iops| iops * block as f64 / (1 << 20) as f64)
}

/// fio's sequential write rate in MiB/s into a scratch file of `size_bytes` under `dir`
/// (removed afterwards): O_DIRECT, 4 MiB writes, one job, depth 1, one fsync at the end (how a
/// copy is written), or `None` when fio is missing or fails.
pub fn seqwrite_mib_s(dir: &Path, size_bytes: u64, secs: f64) -> Option<f64> {
    let file = dir.join(format!("fio-seqwrite-{}.tmp", std::process::id()));
    let out = Command::new("fio")
        .args([
            "--name=seqwrite".to_string(),
            format!("--filename={}", file.display()),
            "--rw=write".into(),
            "--bs=4m".into(),
            "--direct=1".into(),
            "--ioengine=psync".into(),
            format!("--size={}", size_bytes.max(4 << 20)),
            "--end_fsync=1".into(),
            "--time_based".into(),
            format!("--runtime={}", secs.ceil().max(1.0) as u64),
            "--output-format=json".into(),
        ])
        .output();
    let _ = std::fs::remove_file(&file);
    let out = out.ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["jobs"][0]["write"]["bw_bytes"].as_f64().map(|b| b / (1 << 20) as f64)
}

/// fio's `mem` setting that puts its I/O buffers (`bytes` in all) in huge pages:
/// `mmaphuge:<hugetlbfs mount>/nvmedb-fio-<pid>` when a hugetlbfs is mounted and has at least
/// `bytes` (plus one huge page per 64 MiB of slack) free; else `None` (fio's default, 4 KiB
/// pages).
pub fn huge_page_mem(bytes: u64) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    let mount = mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "hugetlbfs").then(|| f[1].to_string())
    })?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        meminfo.lines().find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse().ok())
    };
    let free = field("HugePages_Free:")? * field("Hugepagesize:")? * 1024;
    (free >= bytes + bytes / 32 + (2 << 20))
        .then(|| format!("mmaphuge:{mount}/nvmedb-fio-{}", std::process::id()))
}

/// In words, where fio's read buffers of `bytes` go ([`huge_page_mem`]).
pub fn read_buffers(bytes: u64) -> String {
    match huge_page_mem(bytes) {
        Some(m) => format!("fio's buffers in huge pages ({})", m.trim_start_matches("mmaphuge:")),
        None => "fio's buffers in 4 KiB pages (no hugetlbfs with free huge pages is mounted; on a \
                 virtio disk this can understate multi-page reads 2-3×)"
            .into(),
    }
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
    read_run(file, shape, block_bytes, jobs, depth, secs).map(|(iops, _)| iops)
}

/// [`read_iops`], with the number of reads the run made.
fn read_run(
    file: &Path,
    shape: &[String],
    block_bytes: usize,
    jobs: usize,
    depth: usize,
    secs: f64,
) -> Option<(f64, u64)> {
    let mem = huge_page_mem((jobs * depth * block_bytes) as u64).map(|m| format!("--mem={m}"));
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
        .args(mem)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let read = &v["jobs"][0]["read"];
    Some((read["iops"].as_f64()?, read["total_ios"].as_u64()?))
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
