//! `iobench`: an fio-like micro-benchmark of one [`Device`](nvmedb::io::Device).
//!
//! Owns: [`IoBenchConfig`] (workload: random or sequential, read/write mix, block size, queue
//! depth, threads, duration, size, device = file path or profile name), [`measure`] (opens the
//! device, lays out a short file, warms up, measures a fixed window; other experiments call it
//! for their device references), [`IoBenchResults`] (IOPS, MiB/s, latency percentiles, CPU
//! used) and the [`IoBench`] experiment with its printed table and `RESULT` line.
//! Submodules: `device` (opening, profiles, layout), `worker` (the queue and sync workers).
//!
//! Invariants: latency is measured per operation from submission to observed completion and
//! recorded only inside the measured window (after the warm-up); an emulated device is labelled
//! `EMULATED` in the table and in the result files, with the latency it achieved.

mod device;
mod worker;

pub use device::{build_profile, open_device};

use crate::error::{LabError, Result};
use crate::experiment::{self, Experiment, RunEnv, Summary};
use crate::machine::RunContext;
use crate::measure::{progress, LatencyHistogram, LatencySummary, WindowHooks, Workers};
use crate::report::Figure;
use indicatif::ProgressBar;
use nvmedb::io::{Backend, SingleOpPath};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Uniformly random block-aligned offsets.
    Random,
    /// Each thread walks its own slice of the device, block after block.
    Sequential,
}

/// How operations are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Through [`nvmedb::io::Device::open_queue`], keeping `depth` operations in flight per thread.
    Queue,
    /// Synchronous `read_at`/`write_at` calls, one at a time per thread (fio's `psync`).
    Sync,
}

/// An iobench workload and device.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    #[serde(with = "backend_name")]
    pub backend: Backend,
    /// Single-op path for the sync engine on io_uring files.
    #[serde(with = "single_op_name")]
    pub single_op: SingleOpPath,
    /// Operations per `io_uring_enter` when a file queue submits (fio's iodepth_batch_submit).
    pub submit_batch: usize,
    /// Seed of offsets, the read/write choice and emulated jitter.
    pub seed: u64,
}

mod backend_name {
    use nvmedb::io::Backend;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Backend, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match b {
            Backend::Auto => "auto",
            Backend::IoUring => "io_uring",
            Backend::Pread => "pread",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Backend, D::Error> {
        let s = String::deserialize(d)?;
        Backend::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown backend `{s}`")))
    }
}

mod single_op_name {
    use nvmedb::io::SingleOpPath;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &SingleOpPath, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match b {
            SingleOpPath::Pread => "pread",
            SingleOpPath::ThreadRing => "thread_ring",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SingleOpPath, D::Error> {
        match String::deserialize(d)?.as_str() {
            "pread" => Ok(SingleOpPath::Pread),
            "thread_ring" => Ok(SingleOpPath::ThreadRing),
            other => Err(serde::de::Error::custom(format!("unknown single-op path `{other}`"))),
        }
    }
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
        }
    }
}

impl IoBenchConfig {
    /// Random reads of `block_bytes` over `size_bytes` of a file (whole blocks), the reference
    /// other experiments measure their files with.
    pub fn file_reads(file: &std::path::Path, block_bytes: usize, size_bytes: u64, duration_s: f64) -> Self {
        Self {
            device: file.display().to_string(),
            block_bytes,
            size_bytes: size_bytes / block_bytes as u64 * block_bytes as u64,
            duration_s,
            warmup_s: 0.5,
            ..Self::default()
        }
    }

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

    /// Checks the values; errors name the flag.
    pub fn validate(&self) -> Result<()> {
        if self.block_bytes == 0 || !self.block_bytes.is_multiple_of(4096) {
            return Err(LabError::config(
                "--bs",
                format!("{}: must be a non-zero multiple of 4096", self.block_bytes),
            ));
        }
        if self.read_pct > 100 {
            return Err(LabError::config("--read-pct", format!("{}: must be 0..=100", self.read_pct)));
        }
        if self.depth == 0 || self.threads == 0 {
            return Err(LabError::config("--depth/--threads", "must be at least 1"));
        }
        if self.engine == Engine::Sync && self.depth != 1 {
            return Err(LabError::config(
                "--depth",
                format!(
                    "--engine sync issues one operation at a time: --depth must be 1, not {}",
                    self.depth
                ),
            ));
        }
        if self.size_bytes < (self.block_bytes * self.threads) as u64 {
            return Err(LabError::config(
                "--size",
                format!("{} is smaller than one block per thread", self.size_bytes),
            ));
        }
        experiment::seconds("--duration", self.duration_s, false)?;
        experiment::seconds("--warmup", self.warmup_s, true)
    }
}

/// The device as the report labels it.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IoBenchResults {
    /// The device.
    pub device: DeviceLabel,
    /// The workload's short name ([`IoBenchConfig::workload_name`]).
    pub workload: String,
    /// Operations completed in the window.
    pub ops: u64,
    /// Reads completed in the window.
    pub reads: u64,
    /// Writes completed in the window.
    pub writes: u64,
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

/// The progress bar of the measured window: IOPS so far.
struct Bar {
    bar: ProgressBar,
    last: (Duration, u64),
}

impl WindowHooks for Bar {
    fn opened(&mut self) {
        self.bar.set_message("measuring");
    }
    fn tick(&mut self, elapsed: Duration, ops: u64) {
        let dt = (elapsed - self.last.0).as_secs_f64();
        if dt > 0.0 {
            self.bar.set_message(format!("{:.0} IOPS", (ops - self.last.1) as f64 / dt));
        }
        self.last = (elapsed, ops);
        self.bar.set_position(elapsed.as_millis() as u64);
    }
}

/// Runs the benchmark described by `cfg` and returns what it measured (nothing printed or
/// written). `show_progress` shows the layout and window bars.
pub fn measure(cfg: &IoBenchConfig, show_progress: bool) -> Result<IoBenchResults> {
    cfg.validate()?;
    let dev = open_device(cfg)?;
    let info = dev.info();
    if info.emulated_profile.is_none() {
        device::lay_out(&*dev, cfg.size_bytes, show_progress)
            .map_err(LabError::engine(format!("laying out {}", info.name)))?;
    } else {
        dev.ensure_capacity(cfg.size_bytes).map_err(LabError::engine(format!("sizing {}", info.name)))?;
    }
    let window = Duration::from_secs_f64(cfg.duration_s);
    let bar =
        progress::bar(show_progress, window.as_millis() as u64, format!("iobench {}", cfg.workload_name()));
    bar.set_message("warming up");
    let mut hooks = Bar { bar, last: (Duration::ZERO, 0) };
    let workers = Workers::new(
        format!("iobench on {}", cfg.device),
        cfg.threads,
        Duration::from_secs_f64(cfg.warmup_s),
        window,
    );
    let run = workers.run(
        |t| worker::Worker::new(&*dev, cfg, t),
        |w, measuring| w.step(measuring, &cfg.device),
        &mut hooks,
    )?;
    hooks.bar.finish_and_clear();
    let mut reads = LatencyHistogram::new();
    let mut writes = LatencyHistogram::new();
    let window_s = run.window.as_secs_f64();
    let cpu_s = run.process_cpu_ns as f64 / 1e9;
    for w in run.states {
        let l = w.finish();
        reads.add(&l.reads);
        writes.add(&l.writes);
    }
    let mut all = reads.clone();
    all.add(&writes);
    let ops = all.len();
    let profile = match &info.emulated_profile {
        Some(_) => Some(build_profile(cfg)?.to_pairs()),
        None => None,
    };
    Ok(IoBenchResults {
        device: DeviceLabel {
            name: info.name.clone(),
            backend: info.backend.clone(),
            label: if info.emulated_profile.is_some() { "EMULATED".into() } else { "REAL".into() },
            emulated_profile: profile,
        },
        workload: cfg.workload_name(),
        ops,
        reads: reads.len(),
        writes: writes.len(),
        window_s,
        iops: ops as f64 / window_s,
        mib_s: ops as f64 * cfg.block_bytes as f64 / window_s / (1u64 << 20) as f64,
        latency: all.summary(),
        read_latency: reads.summary(),
        write_latency: writes.summary(),
        cpu_cores: cpu_s / window_s,
        cpu_us_per_op: if ops > 0 { cpu_s * 1e6 / ops as f64 } else { 0.0 },
    })
}

impl IoBenchResults {
    /// The printed table (Markdown), with the EMULATED label where it applies.
    pub fn table(&self, cfg: &IoBenchConfig, ctx: &RunContext) -> String {
        let mut s = String::new();
        let dev = if self.device.label == "EMULATED" {
            format!("{} [EMULATED]", self.device.name)
        } else {
            self.device.name.clone()
        };
        s.push_str(&format!("device: {dev} ({})\nmachine: {}\n\n", self.device.backend, ctx.one_line()));
        s.push_str("| device | workload | IOPS | MiB/s | mean µs | p50 µs | p99 µs | p99.9 µs | max µs | CPU cores |\n");
        s.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        let mut row = |label: &str, l: &LatencySummary, iops: f64, mib: f64| {
            s.push_str(&format!(
                "| {dev} | {label} | {iops:.0} | {mib:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |\n",
                l.mean_us, l.p50_us, l.p99_us, l.p999_us, l.max_us, self.cpu_cores
            ));
        };
        let w = &self.workload;
        row(w, &self.latency, self.iops, self.mib_s);
        if self.reads > 0 && self.writes > 0 {
            let share = |n: u64| n as f64 / self.window_s;
            let mib = |n: u64| share(n) * cfg.block_bytes as f64 / (1u64 << 20) as f64;
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
}

/// The `nvmedb iobench` experiment.
#[derive(Debug, Clone, Copy)]
pub struct IoBench;

impl Experiment for IoBench {
    const NAME: &'static str = "iobench";
    const TITLE: &'static str = "fio-like benchmark of one device (file or EMULATED profile)";
    type Config = IoBenchConfig;
    type Results = IoBenchResults;

    fn validate(config: &IoBenchConfig) -> Result<()> {
        config.validate()
    }

    fn run(config: &IoBenchConfig, env: &RunEnv) -> Result<IoBenchResults> {
        measure(config, env.progress)
    }

    fn report(config: &IoBenchConfig, r: &IoBenchResults, env: &RunEnv) -> Result<Summary> {
        let text = format!("{}\n{}\n", r.table(config, &env.context), r.result_line());
        let dev = format!("{} [{}]", r.device.name, r.device.label);
        let figures = vec![
            Figure::new("iops", format!("{} on {dev}", r.workload), r.iops, "IOPS"),
            Figure::new("mib_s", format!("{} on {dev}", r.workload), r.mib_s, "MiB/s"),
            Figure::new("latency/mean", "mean latency", r.latency.mean_us, "µs"),
            Figure::new("latency/p50", "p50 latency", r.latency.p50_us, "µs"),
            Figure::new("latency/p99", "p99 latency", r.latency.p99_us, "µs"),
            Figure::new("cpu_cores", "process CPU in the window", r.cpu_cores, "cores"),
        ];
        Ok(Summary { text, figures })
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
            ..IoBenchConfig::default()
        }
    }

    #[test]
    fn emulated_run_is_labelled_and_serialises() {
        let cfg = IoBenchConfig { depth: 4, read_pct: 70, ..small("optane") };
        let r = measure(&cfg, false).expect("run");
        assert_eq!(r.device.label, "EMULATED");
        assert!(r.ops > 0 && r.reads > 0 && r.writes > 0, "{r:?}");
        assert!(r.latency.p50_us <= r.latency.p99_us && r.latency.p99_us <= r.latency.max_us);
        let table = r.table(&cfg, &RunContext::capture());
        assert!(table.contains("[EMULATED]") && table.contains("EMULATED profile `optane`"));
        let json = serde_json::to_string(&r).unwrap();
        for key in ["\"EMULATED\"", "p999_us", "read_latency_us"] {
            assert!(json.contains(key), "missing {key}");
        }
        let cfg_json = serde_json::to_string(&cfg).unwrap();
        let back: IoBenchConfig = serde_json::from_str(&cfg_json).unwrap();
        assert_eq!(back.backend, cfg.backend);
    }

    #[test]
    fn real_file_run_with_both_engines() {
        let dir = nvmedb_testkit::TmpDir::new("iobench");
        let path = dir.join("f");
        for (engine, depth, pattern) in
            [(Engine::Queue, 8, Pattern::Random), (Engine::Sync, 1, Pattern::Sequential)]
        {
            let cfg = IoBenchConfig { engine, depth, pattern, read_pct: 50, ..small(path.to_str().unwrap()) };
            let r = measure(&cfg, false).expect("run");
            assert_eq!(r.device.label, "REAL");
            assert!(r.ops > 0 && r.reads + r.writes == r.ops, "{r:?}");
        }
    }

    #[test]
    fn bad_configs_name_the_flag() {
        let e = measure(&IoBenchConfig { block_bytes: 1000, ..small("dram") }, false).unwrap_err();
        assert!(e.to_string().contains("--bs"), "{e}");
        let e =
            measure(&IoBenchConfig { engine: Engine::Sync, depth: 4, ..small("dram") }, false).unwrap_err();
        assert!(e.to_string().contains("--depth"), "{e}");
        let e = measure(&IoBenchConfig { profile_overrides: vec!["bogus=1".into()], ..small("nand") }, false)
            .unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
