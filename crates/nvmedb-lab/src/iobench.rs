//! `iobench`: an fio-like micro-benchmark of one [`Device`].
//!
//! Owns: [`IoBenchConfig`] (workload: random or sequential, read/write mix, block size, queue
//! depth, threads, duration, size, device = file path or profile name), [`run`] (opens the
//! device, lays out a short file, warms up, measures a fixed window), [`IoBenchReport`] (IOPS,
//! MiB/s, HDR-histogram latency percentiles, CPU used, provenance) and its printed table and JSON
//! result file.
//!
//! Invariants: latency is measured per operation from submission to observed completion and
//! recorded only inside the measured window (after the warm-up); an emulated device is labelled
//! `EMULATED` in the table and in the JSON file, with the latency it achieved; every result file
//! embeds a [`RunContext`].

use crate::machine::RunContext;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use nvmedb::io::{
    open_emulated, AlignedBuf, Backend, Device, DeviceProfile, FileDevice, FileOptions, IoResult, QueuedOp,
    QueuedOpKind, SingleOpPath, PROFILE_NAMES,
};
use nvmedb::util::Rng;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Uniformly random block-aligned offsets.
    Random,
    /// Each thread walks its own slice of the device, block after block.
    Sequential,
}

/// How operations are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Through [`Device::open_queue`], keeping `depth` operations in flight per thread.
    Queue,
    /// Synchronous `read_at`/`write_at` calls, one at a time per thread (fio's `psync`).
    Sync,
}

/// An iobench workload and device.
#[derive(Debug, Clone, Serialize)]
pub struct IoBenchConfig {
    /// File path, or a profile name (`dram`, `optane`, `nand`, `san`, `hdd`).
    pub device: String,
    /// For file-backed profiles: the file to wrap (RAM when absent).
    pub backing_file: Option<PathBuf>,
    /// `key=value` profile overrides, applied after the config file.
    pub profile_overrides: Vec<String>,
    /// A profile config file (`key = value` lines, optional `[profile]` sections).
    pub profile_config: Option<PathBuf>,
    /// Random or sequential.
    pub pattern: Pattern,
    /// Percentage of reads (100 = read only, 0 = write only).
    pub read_pct: u8,
    /// Bytes per operation (a multiple of 4096).
    pub block_bytes: usize,
    /// Operations in flight per thread.
    pub depth: usize,
    /// Worker threads.
    pub threads: usize,
    /// Measured window.
    pub duration_s: f64,
    /// Warm-up before the window.
    pub warmup_s: f64,
    /// Bytes of the device the workload touches.
    pub size_bytes: u64,
    /// Queue or synchronous calls.
    pub engine: Engine,
    /// Kernel interface for files: `auto`, `io_uring` or `pread`.
    #[serde(serialize_with = "ser_backend")]
    pub backend: Backend,
    /// Single-op path for the sync engine on io_uring files.
    #[serde(serialize_with = "ser_single_op")]
    pub single_op: SingleOpPath,
    /// Operations per `io_uring_enter` when a file queue submits (fio's iodepth_batch_submit).
    pub submit_batch: usize,
    /// Seed of offsets, the read/write choice and emulated jitter.
    pub seed: u64,
    /// Show a progress bar.
    pub progress: bool,
    /// Where the JSON result goes (`results/iobench-<time>.json` when absent).
    pub out: Option<PathBuf>,
}

fn ser_backend<S: serde::Serializer>(b: &Backend, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match b {
        Backend::Auto => "auto",
        Backend::IoUring => "io_uring",
        Backend::Pread => "pread",
    })
}

fn ser_single_op<S: serde::Serializer>(b: &SingleOpPath, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match b {
        SingleOpPath::Pread => "pread",
        SingleOpPath::ThreadRing => "thread_ring",
    })
}

impl Default for IoBenchConfig {
    fn default() -> Self {
        Self {
            device: "optane".into(),
            backing_file: None,
            profile_overrides: Vec::new(),
            profile_config: None,
            pattern: Pattern::Random,
            read_pct: 100,
            block_bytes: 4096,
            depth: 1,
            threads: 1,
            duration_s: 5.0,
            warmup_s: 1.0,
            size_bytes: 1 << 30,
            engine: Engine::Queue,
            backend: Backend::Auto,
            single_op: SingleOpPath::Pread,
            submit_batch: 1,
            seed: 1,
            progress: true,
            out: None,
        }
    }
}

impl IoBenchConfig {
    /// A short name like `randread 4K QD32x1`.
    pub fn workload_name(&self) -> String {
        let kind = match self.read_pct {
            100 => "read".to_string(),
            0 => "write".to_string(),
            p => format!("rw{p}"),
        };
        let pat = match self.pattern {
            Pattern::Random => "rand",
            Pattern::Sequential => "seq",
        };
        let engine = match self.engine {
            Engine::Queue => "",
            Engine::Sync => " sync",
        };
        format!("{pat}{kind} {}K QD{}x{}{engine}", self.block_bytes / 1024, self.depth, self.threads)
    }

    fn check(&self) -> Result<(), String> {
        if self.block_bytes == 0 || self.block_bytes % 4096 != 0 {
            return Err(format!("--bs {}: must be a non-zero multiple of 4096", self.block_bytes));
        }
        if self.read_pct > 100 {
            return Err(format!("--read-pct {}: must be 0..=100", self.read_pct));
        }
        if self.depth == 0 || self.threads == 0 {
            return Err("--depth and --threads must be at least 1".into());
        }
        if self.engine == Engine::Sync && self.depth != 1 {
            return Err(format!(
                "--engine sync issues one operation at a time: --depth must be 1, not {}",
                self.depth
            ));
        }
        if self.size_bytes < (self.block_bytes * self.threads) as u64 {
            return Err(format!("--size {} is smaller than one block per thread", self.size_bytes));
        }
        if !self.duration_s.is_finite() || self.duration_s <= 0.0 || self.warmup_s < 0.0 {
            return Err("--duration must be > 0 and --warmup >= 0".into());
        }
        Ok(())
    }
}

/// Latency percentiles in µs.
#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    /// Operations recorded.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Minimum.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
}

impl LatencySummary {
    fn from_hist(h: &Histogram<u64>) -> Self {
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return Self {
                count: 0,
                mean_us: 0.0,
                min_us: 0.0,
                p50_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                max_us: 0.0,
            };
        }
        Self {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            min_us: us(h.min()),
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// The device as the report labels it.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceLabel {
    /// Name (path or profile over its medium).
    pub name: String,
    /// Backend description.
    pub backend: String,
    /// `"EMULATED"` for emulated profiles, `"REAL"` otherwise.
    pub label: String,
    /// The profile's parameters when emulated.
    pub emulated_profile: Option<Vec<(String, String)>>,
}

/// What one iobench run measured.
#[derive(Debug, Clone, Serialize)]
pub struct IoBenchReport {
    /// Always `"iobench"`.
    pub kind: String,
    /// Provenance: command, commit, machine, time.
    pub context: RunContext,
    /// The workload.
    pub config: IoBenchConfig,
    /// The device.
    pub device: DeviceLabel,
    /// Operations completed in the window.
    pub ops: u64,
    /// Reads completed in the window.
    pub reads: u64,
    /// Writes completed in the window.
    pub writes: u64,
    /// Errors (operations that failed); the run stops at the first.
    pub errors: u64,
    /// Length of the measured window, s.
    pub window_s: f64,
    /// Operations per second.
    pub iops: f64,
    /// Throughput, MiB/s.
    pub mib_s: f64,
    /// Latency of all operations.
    pub latency: LatencySummary,
    /// Latency of reads.
    pub read_latency: LatencySummary,
    /// Latency of writes.
    pub write_latency: LatencySummary,
    /// CPU time (user + system) of the whole process during the window, in cores.
    pub cpu_cores: f64,
    /// CPU µs per operation.
    pub cpu_us_per_op: f64,
}

fn new_hist() -> Histogram<u64> {
    // 1 ns .. 100 s at 3 significant digits; values outside are clamped.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).unwrap_or_else(|e| unreachable!("valid bounds: {e}"))
}

fn process_cpu() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the rusage the pointer points to; zeroed is a valid rusage.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Opens the device a config names: a profile (emulated) or a file path.
pub fn open_device(cfg: &IoBenchConfig) -> Result<Arc<dyn Device>, String> {
    let file_opts = FileOptions {
        backend: cfg.backend,
        single_op: cfg.single_op,
        queue_submit_batch: cfg.submit_batch,
        ..FileOptions::default()
    };
    if PROFILE_NAMES.contains(&cfg.device.as_str()) {
        let p = build_profile(cfg)?;
        return open_emulated(p, cfg.backing_file.as_deref(), &file_opts, cfg.seed)
            .map_err(|e| e.to_string());
    }
    if !cfg.profile_overrides.is_empty() || cfg.profile_config.is_some() {
        return Err(format!(
            "--profile-set/--profile-config apply to emulated profiles ({}); `{}` is a file",
            PROFILE_NAMES.join(", "),
            cfg.device
        ));
    }
    let dev = FileDevice::open_with(&cfg.device, &file_opts).map_err(|e| e.to_string())?;
    Ok(Arc::new(dev))
}

/// Writes the file up to `size` with random data (once), so reads hit allocated blocks as
/// fio's reads do after its layout phase.
fn lay_out(dev: &dyn Device, size: u64, progress: bool) -> IoResult<()> {
    let have = dev.capacity();
    if have >= size {
        return Ok(());
    }
    let chunk = 1usize << 20;
    let start = have / chunk as u64 * chunk as u64;
    let bar = if progress { ProgressBar::new(size - start) } else { ProgressBar::hidden() };
    if let Ok(style) = ProgressStyle::with_template("laying out {bytes}/{total_bytes} [{wide_bar}] {eta}") {
        bar.set_style(style);
    }
    let mut buf = AlignedBuf::new(chunk);
    Rng::new(99).fill(&mut buf);
    let mut q = dev.open_queue(4)?;
    let mut done = Vec::new();
    let mut free = vec![buf.clone(), buf.clone(), buf.clone(), buf];
    let mut off = start;
    while off < size || q.in_flight() > 0 {
        let mut ops = Vec::new();
        while off < size && q.in_flight() + ops.len() < 4 {
            let Some(b) = free.pop() else { break };
            ops.push(QueuedOp { tag: off, kind: QueuedOpKind::Write, offset: off, buf: b });
            off += chunk as u64;
        }
        q.submit(ops)?;
        q.reap(1, &mut done)?;
        for c in done.drain(..) {
            c.result?;
            bar.inc(chunk as u64);
            free.push(c.buf);
        }
    }
    drop(q);
    dev.sync()?;
    bar.finish_and_clear();
    Ok(())
}

struct Shared {
    measuring: AtomicBool,
    stop: AtomicBool,
    completed: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
}

struct WorkerResult {
    reads: Histogram<u64>,
    writes: Histogram<u64>,
    errors: u64,
}

struct OpGen {
    rng: Rng,
    pattern: Pattern,
    read_pct: u8,
    blocks: u64,
    bs: u64,
    cursor: u64,
    region: (u64, u64),
}

impl OpGen {
    fn new(cfg: &IoBenchConfig, thread: usize) -> Self {
        let bs = cfg.block_bytes as u64;
        let blocks = cfg.size_bytes / bs;
        let per = blocks / cfg.threads as u64;
        let region = (thread as u64 * per, (thread as u64 + 1) * per);
        Self {
            rng: Rng::new(cfg.seed.wrapping_mul(1_000_003).wrapping_add(thread as u64)),
            pattern: cfg.pattern,
            read_pct: cfg.read_pct,
            blocks,
            bs,
            cursor: region.0,
            region,
        }
    }

    fn next(&mut self) -> (QueuedOpKind, u64) {
        let kind = match self.read_pct {
            100 => QueuedOpKind::Read,
            0 => QueuedOpKind::Write,
            p => {
                if self.rng.below(100) < u64::from(p) {
                    QueuedOpKind::Read
                } else {
                    QueuedOpKind::Write
                }
            }
        };
        let block = match self.pattern {
            Pattern::Random => self.rng.below(self.blocks),
            Pattern::Sequential => {
                let b = self.cursor;
                self.cursor += 1;
                if self.cursor >= self.region.1 {
                    self.cursor = self.region.0;
                }
                b
            }
        };
        (kind, block * self.bs)
    }
}

fn record(res: &mut WorkerResult, kind: QueuedOpKind, ns: u64) {
    let h = if kind == QueuedOpKind::Read { &mut res.reads } else { &mut res.writes };
    h.saturating_record(ns.max(1));
}

fn fail(shared: &Shared, msg: String) {
    let mut slot = shared.first_error.lock().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert(msg);
    shared.stop.store(true, Ordering::Relaxed);
}

fn worker_queue(dev: &dyn Device, cfg: &IoBenchConfig, thread: usize, shared: &Shared) -> WorkerResult {
    let mut res = WorkerResult { reads: new_hist(), writes: new_hist(), errors: 0 };
    let mut gen = OpGen::new(cfg, thread);
    let mut q = match dev.open_queue(cfg.depth) {
        Ok(q) => q,
        Err(e) => {
            fail(shared, e.to_string());
            return res;
        }
    };
    let mut free: Vec<AlignedBuf> = (0..cfg.depth)
        .map(|i| {
            let mut b = AlignedBuf::new(cfg.block_bytes);
            Rng::new(cfg.seed + i as u64).fill(&mut b);
            b
        })
        .collect();
    let mut started: Vec<(Instant, QueuedOpKind)> = vec![(Instant::now(), QueuedOpKind::Read); cfg.depth];
    let mut free_tags: Vec<u64> = (0..cfg.depth as u64).collect();
    let mut done = Vec::with_capacity(cfg.depth);
    let mut ops = Vec::with_capacity(cfg.depth);
    while !shared.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while let (Some(tag), Some(buf)) = (free_tags.pop(), free.pop()) {
            let (kind, offset) = gen.next();
            started[tag as usize] = (now, kind);
            ops.push(QueuedOp { tag, kind, offset, buf });
        }
        let r = q.submit_and_reap(std::mem::take(&mut ops), 1, &mut done);
        if let Err(e) = r {
            fail(shared, e.to_string());
            break;
        }
        let now = Instant::now();
        let measuring = shared.measuring.load(Ordering::Relaxed);
        let n = done.len() as u64;
        for c in done.drain(..) {
            let (t0, kind) = started[c.tag as usize];
            if let Err(e) = c.result {
                res.errors += 1;
                fail(shared, e.to_string());
            } else if measuring {
                record(&mut res, kind, (now - t0).as_nanos() as u64);
            }
            free_tags.push(c.tag);
            free.push(c.buf);
        }
        if measuring {
            shared.completed.fetch_add(n, Ordering::Relaxed);
        }
    }
    let mut sink = Vec::new();
    let _ = q.reap(q.in_flight(), &mut sink);
    res
}

fn worker_sync(dev: &dyn Device, cfg: &IoBenchConfig, thread: usize, shared: &Shared) -> WorkerResult {
    let mut res = WorkerResult { reads: new_hist(), writes: new_hist(), errors: 0 };
    let mut gen = OpGen::new(cfg, thread);
    let mut buf = AlignedBuf::new(cfg.block_bytes);
    Rng::new(cfg.seed + thread as u64).fill(&mut buf);
    let mut pending = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let (kind, offset) = gen.next();
        let t0 = Instant::now();
        let r = match kind {
            QueuedOpKind::Read => dev.read_at(offset, &mut buf),
            QueuedOpKind::Write => dev.write_at(offset, &buf),
        };
        let ns = t0.elapsed().as_nanos() as u64;
        if let Err(e) = r {
            res.errors += 1;
            fail(shared, e.to_string());
            break;
        }
        if shared.measuring.load(Ordering::Relaxed) {
            record(&mut res, kind, ns);
            pending += 1;
            if pending == 64 {
                shared.completed.fetch_add(pending, Ordering::Relaxed);
                pending = 0;
            }
        }
    }
    shared.completed.fetch_add(pending, Ordering::Relaxed);
    res
}

/// Runs the benchmark described by `cfg` and returns its report (not yet printed or saved).
pub fn run(cfg: &IoBenchConfig) -> Result<IoBenchReport, String> {
    cfg.check()?;
    let context = RunContext::capture();
    let dev = open_device(cfg)?;
    let info = dev.info();
    if info.emulated_profile.is_none() {
        lay_out(&*dev, cfg.size_bytes, cfg.progress).map_err(|e| format!("laying out {}: {e}", info.name))?;
    } else {
        dev.ensure_capacity(cfg.size_bytes).map_err(|e| e.to_string())?;
    }
    let shared = Shared {
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        completed: AtomicU64::new(0),
        first_error: Default::default(),
    };
    let duration = Duration::from_secs_f64(cfg.duration_s);
    let warmup = Duration::from_secs_f64(cfg.warmup_s);
    let bar =
        if cfg.progress { ProgressBar::new(duration.as_millis() as u64) } else { ProgressBar::hidden() };
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{wide_bar}] {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(format!("iobench {}", cfg.workload_name()));
    let (results, window, cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (dev, shared) = (&*dev, &shared);
                s.spawn(move || match cfg.engine {
                    Engine::Queue => worker_queue(dev, cfg, t, shared),
                    Engine::Sync => worker_sync(dev, cfg, t, shared),
                })
            })
            .collect();
        bar.set_message("warming up");
        let warm_end = Instant::now() + warmup;
        while Instant::now() < warm_end && !shared.stop.load(Ordering::Relaxed) {
            std::thread::sleep(
                Duration::from_millis(20).min(warm_end.saturating_duration_since(Instant::now())),
            );
        }
        let cpu0 = process_cpu();
        let t0 = Instant::now();
        shared.measuring.store(true, Ordering::Relaxed);
        let end = t0 + duration;
        let mut last = (t0, 0u64);
        loop {
            let now = Instant::now();
            if now >= end || shared.stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100).min(end - now));
            let n = shared.completed.load(Ordering::Relaxed);
            let now = Instant::now();
            let dt = (now - last.0).as_secs_f64();
            if dt > 0.0 {
                bar.set_message(format!("{:.0} IOPS", (n - last.1) as f64 / dt));
            }
            last = (now, n);
            bar.set_position((now - t0).as_millis() as u64);
        }
        shared.measuring.store(false, Ordering::Relaxed);
        let window = t0.elapsed();
        let cpu = process_cpu().saturating_sub(cpu0);
        shared.stop.store(true, Ordering::Relaxed);
        let results: Vec<WorkerResult> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        (results, window, cpu)
    });
    bar.finish_and_clear();
    if let Some(e) = shared.first_error.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(format!("I/O failed during the run: {e}"));
    }
    let mut reads = new_hist();
    let mut writes = new_hist();
    let mut errors = 0;
    for r in &results {
        let _ = reads.add(&r.reads);
        let _ = writes.add(&r.writes);
        errors += r.errors;
    }
    let mut all = reads.clone();
    let _ = all.add(&writes);
    let window_s = window.as_secs_f64();
    let ops = all.len();
    let profile = match &info.emulated_profile {
        Some(_) => Some(build_profile(cfg)?.to_pairs()),
        None => None,
    };
    Ok(IoBenchReport {
        kind: "iobench".into(),
        context,
        config: cfg.clone(),
        device: DeviceLabel {
            name: info.name.clone(),
            backend: info.backend.clone(),
            label: if info.emulated_profile.is_some() { "EMULATED".into() } else { "REAL".into() },
            emulated_profile: profile,
        },
        ops,
        reads: reads.len(),
        writes: writes.len(),
        errors,
        window_s,
        iops: ops as f64 / window_s,
        mib_s: ops as f64 * cfg.block_bytes as f64 / window_s / (1u64 << 20) as f64,
        latency: LatencySummary::from_hist(&all),
        read_latency: LatencySummary::from_hist(&reads),
        write_latency: LatencySummary::from_hist(&writes),
        cpu_cores: cpu.as_secs_f64() / window_s,
        cpu_us_per_op: if ops > 0 { cpu.as_secs_f64() * 1e6 / ops as f64 } else { 0.0 },
    })
}

/// The profile a config names, with its config file and `key=value` overrides applied.
pub fn build_profile(cfg: &IoBenchConfig) -> Result<DeviceProfile, String> {
    let mut p = DeviceProfile::builtin(&cfg.device)
        .ok_or_else(|| format!("unknown profile `{}` (known: {})", cfg.device, PROFILE_NAMES.join(", ")))?;
    if let Some(path) = &cfg.profile_config {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        p.apply_config(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for o in &cfg.profile_overrides {
        p.apply_override(o).map_err(|e| e.to_string())?;
    }
    Ok(p)
}

impl IoBenchReport {
    /// The printed table (Markdown), with the EMULATED label where it applies.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let dev = if self.device.label == "EMULATED" {
            format!("{} [EMULATED]", self.device.name)
        } else {
            self.device.name.clone()
        };
        s.push_str(&format!(
            "device: {dev} ({})\nmachine: {}\n\n",
            self.device.backend,
            self.context.one_line()
        ));
        s.push_str("| device | workload | IOPS | MiB/s | mean µs | p50 µs | p99 µs | p99.9 µs | max µs | CPU cores |\n");
        s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        let mut row = |label: &str, l: &LatencySummary, iops: f64, mib: f64| {
            s.push_str(&format!(
                "| {dev} | {label} | {iops:.0} | {mib:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |\n",
                l.mean_us, l.p50_us, l.p99_us, l.p999_us, l.max_us, self.cpu_cores
            ));
        };
        let w = self.config.workload_name();
        row(&w, &self.latency, self.iops, self.mib_s);
        if self.reads > 0 && self.writes > 0 {
            let share = |n: u64| n as f64 / self.window_s;
            let mib = |n: u64| share(n) * self.config.block_bytes as f64 / (1u64 << 20) as f64;
            row(&format!("{w} (reads)"), &self.read_latency, share(self.reads), mib(self.reads));
            row(&format!("{w} (writes)"), &self.write_latency, share(self.writes), mib(self.writes));
        }
        if let Some(pairs) = &self.device.emulated_profile {
            let get = |k: &str| pairs.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str()).unwrap_or("?");
            s.push_str(&format!(
                "\nEMULATED profile `{}`: configured read {} µs, write {} µs (jitter ±{} µs); achieved \
                 p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs; emulator+benchmark CPU {:.2} cores ({:.2} µs/op)\n",
                get("name"),
                get("read_latency_us"),
                get("write_latency_us"),
                get("jitter_us"),
                self.latency.p50_us,
                self.latency.p99_us,
                self.latency.p999_us,
                self.cpu_cores,
                self.cpu_us_per_op
            ));
        }
        s
    }

    /// One machine-readable line for scripts: `RESULT iops=… mean_us=… p50_us=…`.
    pub fn result_line(&self) -> String {
        format!(
            "RESULT label={} iops={:.1} mib_s={:.2} mean_us={:.2} p50_us={:.2} p99_us={:.2} p999_us={:.2} max_us={:.2} cpu_cores={:.3}",
            self.device.label,
            self.iops,
            self.mib_s,
            self.latency.mean_us,
            self.latency.p50_us,
            self.latency.p99_us,
            self.latency.p999_us,
            self.latency.max_us,
            self.cpu_cores
        )
    }

    /// Writes the JSON result file and returns its path.
    pub fn save(&self) -> Result<PathBuf, String> {
        let path = match &self.config.out {
            Some(p) => p.clone(),
            None => Path::new("results").join(format!("iobench-{}.json", self.context.started_unix_s)),
        };
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
        }
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, json).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(device: &str) -> IoBenchConfig {
        IoBenchConfig {
            device: device.into(),
            duration_s: 0.2,
            warmup_s: 0.05,
            size_bytes: 8 << 20,
            progress: false,
            ..IoBenchConfig::default()
        }
    }

    #[test]
    fn emulated_run_is_labelled_and_serialises() {
        let cfg = IoBenchConfig { depth: 4, read_pct: 70, ..small("optane") };
        let r = run(&cfg).expect("run");
        assert_eq!(r.device.label, "EMULATED");
        assert!(r.ops > 0 && r.reads > 0 && r.writes > 0, "{r:?}");
        assert!(r.latency.p50_us <= r.latency.p99_us && r.latency.p99_us <= r.latency.max_us);
        assert!(r.table().contains("[EMULATED]") && r.table().contains("EMULATED profile `optane`"));
        let json = serde_json::to_string(&r).unwrap();
        for key in ["\"EMULATED\"", "git_commit", "\"command\"", "p999_us", "read_latency_us"] {
            assert!(json.contains(key), "missing {key}");
        }
    }

    #[test]
    fn real_file_run_with_both_engines() {
        let dir = std::env::temp_dir().join(format!("nvmedb-iobench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        for (engine, depth, pattern) in
            [(Engine::Queue, 8, Pattern::Random), (Engine::Sync, 1, Pattern::Sequential)]
        {
            let cfg = IoBenchConfig { engine, depth, pattern, read_pct: 50, ..small(path.to_str().unwrap()) };
            let r = run(&cfg).expect("run");
            assert_eq!(r.device.label, "REAL");
            assert!(r.ops > 0 && r.errors == 0, "{r:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_configs_name_the_flag() {
        let e = run(&IoBenchConfig { block_bytes: 1000, ..small("dram") }).unwrap_err();
        assert!(e.contains("--bs"), "{e}");
        let e = run(&IoBenchConfig { engine: Engine::Sync, depth: 4, ..small("dram") }).unwrap_err();
        assert!(e.contains("--depth"), "{e}");
        let e =
            run(&IoBenchConfig { profile_overrides: vec!["bogus=1".into()], ..small("nand") }).unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }
}
