//! xlogbench: commit latency and throughput through the fast log path (xlog) versus
//! write + fdatasync of 4 KiB blocks to an O_DIRECT file on the real disk.
//!
//! ```sh
//! cargo run --release -p nvmedb --example xlogbench -- /work/xlogbench [--secs 1] [--bytes 4096] \
//!     [--threads 1,4,20] [--rate 2000] [--csv out.csv] [--sweep] [--fig11] [--fig12]
//! ```
//!
//! A commit is "append `bytes` + wait until durable": `x_pwrite` + `x_fsync` on the fast side,
//! `pwrite` of one aligned block + `fdatasync` on the baseline. Each thread commits in a closed
//! loop for `--secs`; latencies are per commit. Every row states what "durable" means for it.
//! `--sweep` adds a write-size sweep (seed 002 Fig. 10 style) and `--fig11` a queue-size x
//! write-size sweep (Fig. 11 style) to the output and the CSV; `--fig12` runs the scheduler
//! experiment (Fig. 12 style) on an emulated one-channel device and writes `<csv>.fig12.csv`.

use nvmedb::io::MemDevice;
use nvmedb::io::{check_alignment, AlignedBuf, Device, DeviceInfo, IoError, IoOpKind, IoResult};
use nvmedb::xlog::{MsyncPolicy, SchedMode, XLog, XLogConfig};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Minimal O_DIRECT file device for the benchmark (the engine's own lives in the I/O layer).
struct DirectFile {
    name: String,
    file: File,
}

impl DirectFile {
    fn open(path: &Path, len: u64) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        if file.metadata()?.len() < len {
            file.set_len(len)?;
        }
        Ok(Self { name: path.display().to_string(), file })
    }
}

impl Device for DirectFile {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.name.clone(),
            backend: "pread/pwrite O_DIRECT (bench)".into(),
            emulated_profile: None,
        }
    }
    fn alignment(&self) -> usize {
        4096
    }
    fn capacity(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0)
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        if self.capacity() < len {
            self.file.set_len(len).map_err(|e| IoError::os(&self.name, IoOpKind::Setup, 0, 0, e))?;
        }
        Ok(())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        check_alignment(&self.name, 4096, offset, buf.len(), buf.as_ptr() as usize)?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| IoError::os(&self.name, IoOpKind::Read, offset, buf.len(), e))
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        check_alignment(&self.name, 4096, offset, buf.len(), buf.as_ptr() as usize)?;
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| IoError::os(&self.name, IoOpKind::Write, offset, buf.len(), e))
    }
    fn sync(&self) -> IoResult<()> {
        self.file.sync_data().map_err(|e| IoError::os(&self.name, IoOpKind::Sync, 0, 0, e))
    }
}

/// A RAM device with one channel of fixed bandwidth: each write holds the channel for
/// `len / bandwidth`. Emulated, and labelled so in the output.
struct Throttled {
    mem: MemDevice,
    bytes_per_s: f64,
    channel: std::sync::Mutex<()>,
}

impl Device for Throttled {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "throttled-ram".into(),
            backend: "memory".into(),
            emulated_profile: Some(format!("one channel, {:.0} MB/s writes", self.bytes_per_s / 1e6)),
        }
    }
    fn alignment(&self) -> usize {
        self.mem.alignment()
    }
    fn capacity(&self) -> u64 {
        self.mem.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.mem.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.mem.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        let _ch = self.channel.lock().unwrap_or_else(|e| e.into_inner());
        let t = Instant::now();
        self.mem.write_at(offset, buf)?;
        let busy = Duration::from_secs_f64(buf.len() as f64 / self.bytes_per_s);
        while t.elapsed() < busy {
            std::thread::sleep(busy - t.elapsed());
        }
        Ok(())
    }
    fn sync(&self) -> IoResult<()> {
        Ok(())
    }
}

/// Seed 002 Fig. 12 style: a conventional workload at 50 % of an emulated device's bandwidth
/// and a fast-side workload at 30–60 %, under each scheduler mode. Returns CSV lines.
fn fig12(shm: &Path, secs: f64) -> Vec<String> {
    const BW: f64 = 200e6;
    const UNIT: usize = 64 << 10;
    const REC: usize = 16 << 10;
    let mut out = Vec::new();
    println!("## fig12: emulated one-channel device at {:.0} MB/s (emulated, not the real disk)", BW / 1e6);
    for mode in [SchedMode::Neutral, SchedMode::ConventionalPriority, SchedMode::DestagePriority] {
        for fast_pct in [30.0f64, 45.0, 60.0] {
            let dev = Arc::new(Throttled {
                mem: MemDevice::new("fig12"),
                bytes_per_s: BW,
                channel: Default::default(),
            });
            let ring = shm.join(format!("xlogbench-fig12-{}.ring", std::process::id()));
            let _ = std::fs::remove_file(&ring);
            let mut cfg = XLogConfig::new(&ring);
            cfg.ring_bytes = 8 << 20;
            cfg.conv_offset = 64 << 20;
            cfg.conv_pages = 4096;
            cfg.destage_batch_pages = 64;
            cfg.destage_write_pages = UNIT / 4096;
            cfg.sched_mode = mode;
            cfg.msync = MsyncPolicy::Never;
            let log = XLog::open(cfg, dev).expect("open fig12 xlog");
            let conv = log.scheduler().conventional_device();
            let stop = AtomicBool::new(false);
            let conv_bytes = AtomicU64::new(0);
            let fast_bytes = AtomicU64::new(0);
            let d0 = log.status().destaged;
            let t0 = Instant::now();
            std::thread::scope(|s| {
                s.spawn(|| {
                    let buf = AlignedBuf::new(UNIT);
                    let iv = Duration::from_secs_f64(UNIT as f64 / (0.5 * BW));
                    let mut next = Instant::now();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        next += iv;
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        } else if now - next > iv * 10 {
                            next = now;
                        }
                        conv.write_at((i % 512) * UNIT as u64, &buf).expect("conventional write");
                        conv_bytes.fetch_add(UNIT as u64, Ordering::Relaxed);
                        i += 1;
                    }
                });
                s.spawn(|| {
                    let w = log.writer().expect("writer");
                    let rec = vec![7u8; REC];
                    let iv = Duration::from_secs_f64(REC as f64 / (fast_pct / 100.0 * BW));
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        next += iv;
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        } else if now - next > iv * 10 {
                            next = now;
                        }
                        w.x_pwrite(&rec).expect("x_pwrite");
                        fast_bytes.fetch_add(REC as u64, Ordering::Relaxed);
                    }
                });
                std::thread::sleep(Duration::from_secs_f64(secs));
                stop.store(true, Ordering::Relaxed);
            });
            let el = t0.elapsed().as_secs_f64();
            let destaged = log.status().destaged - d0;
            let (c, f, d) = (
                conv_bytes.load(Ordering::Relaxed) as f64 / el / BW * 100.0,
                fast_bytes.load(Ordering::Relaxed) as f64 / el / BW * 100.0,
                destaged as f64 / el / BW * 100.0,
            );
            println!(
                "fig12 {mode:?}: offered conventional 50% fast {fast_pct:.0}% -> achieved conventional {c:.1}% fast {f:.1}% destaged {d:.1}% of bandwidth"
            );
            out.push(format!("{mode:?},50,{fast_pct:.0},{c:.2},{f:.2},{d:.2}"));
            log.close().expect("close fig12");
            let _ = std::fs::remove_file(&ring);
        }
    }
    out
}

struct Row {
    variant: String,
    offered: Option<f64>,
    threads: usize,
    bytes: usize,
    commits: u64,
    secs: f64,
    lat_ns: Vec<u64>,
    durability: String,
}

impl Row {
    fn pct(&self, p: f64) -> f64 {
        if self.lat_ns.is_empty() {
            return f64::NAN;
        }
        let i = ((self.lat_ns.len() as f64 - 1.0) * p).round() as usize;
        self.lat_ns[i] as f64 / 1000.0
    }
    fn tput(&self) -> f64 {
        self.commits as f64 / self.secs
    }
}

/// Runs `threads` committers for `secs`; `commit` is called with the thread index. With
/// `rate` (total commits per second) each thread paces itself to its share; without, each
/// thread commits in a closed loop.
fn run_threads<F>(threads: usize, secs: f64, rate: Option<f64>, commit: F) -> (u64, f64, Vec<u64>)
where
    F: Fn(usize) -> nvmedb::Result<()> + Sync,
{
    const MAX_SAMPLES: usize = 2_000_000;
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let t0 = Instant::now();
    let lats = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, total, commit) = (&stop, &total, &commit);
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(1 << 16);
                    let interval = rate.map(|r| Duration::from_secs_f64(threads as f64 / r));
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(iv) = interval {
                            next += iv;
                            let now = Instant::now();
                            if next > now {
                                std::thread::sleep(next - now);
                            } else if now - next > iv * 10 {
                                next = now; // far behind: do not burst to catch up
                            }
                        }
                        let a = Instant::now();
                        commit(t).expect("commit failed");
                        if lat.len() < MAX_SAMPLES {
                            lat.push(a.elapsed().as_nanos() as u64);
                        }
                        total.fetch_add(1, Ordering::Relaxed);
                    }
                    lat
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().flat_map(|h| h.join().expect("bench thread")).collect::<Vec<u64>>()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let mut lats = lats;
    lats.sort_unstable();
    (total.load(Ordering::Relaxed), elapsed, lats)
}

fn bench_fdatasync(dir: &Path, threads: usize, bytes: usize, secs: f64, rate: Option<f64>) -> Row {
    let blocks = 16384u64; // 64 MiB region, reused round-robin
    let block = bytes.div_ceil(4096) * 4096;
    let path = dir.join("baseline.odirect");
    let dev = DirectFile::open(&path, blocks * block as u64).expect("open O_DIRECT baseline file");
    let next = AtomicU64::new(0);
    let bufs: Vec<AlignedBuf> = (0..threads)
        .map(|t| {
            let mut b = AlignedBuf::new(block);
            b.fill(t as u8 + 1);
            b
        })
        .collect();
    let (commits, elapsed, lat) = run_threads(threads, secs, rate, |t| {
        let i = next.fetch_add(1, Ordering::Relaxed) % blocks;
        dev.write_at(i * block as u64, &bufs[t])?;
        dev.sync()?;
        Ok(())
    });
    Row {
        variant: "odirect+fdatasync".into(),
        offered: rate,
        threads,
        bytes: block,
        commits,
        secs: elapsed,
        lat_ns: lat,
        durability: format!(
            "O_DIRECT pwrite + fdatasync per commit on {}: survives power loss",
            path.display()
        ),
    }
}

fn open_xlog(dir: &Path, ring_dir: &Path, tag: &str, msync: MsyncPolicy) -> XLog {
    open_xlog_q(dir, ring_dir, tag, msync, 32 << 10)
}

fn open_xlog_q(dir: &Path, ring_dir: &Path, tag: &str, msync: MsyncPolicy, queue_bytes: usize) -> XLog {
    let ring = ring_dir.join(format!("xlogbench-{tag}-{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&ring);
    let conv = dir.join(format!("xlogbench-{tag}.conv"));
    let _ = std::fs::remove_file(&conv);
    let mut cfg = XLogConfig::new(&ring);
    cfg.ring_bytes = 8 << 20;
    cfg.queue_bytes = queue_bytes;
    cfg.conv_pages = 16384; // 64 MiB conventional ring
    cfg.destage_batch_pages = 256; // up to 1 MiB per destage write + sync
    cfg.msync = msync;
    cfg.spin_iters = 200;
    let dev = Arc::new(DirectFile::open(&conv, cfg.conv_pages * 4096).expect("open conventional ring file"));
    XLog::open(cfg, dev).expect("open xlog")
}

fn bench_xlog(log: &XLog, variant: &str, threads: usize, bytes: usize, secs: f64, rate: Option<f64>) -> Row {
    let writers: Vec<_> = (0..threads).map(|_| log.writer().expect("writer")).collect();
    let payloads: Vec<Vec<u8>> = (0..threads).map(|t| vec![t as u8 + 1; bytes]).collect();
    let (commits, elapsed, lat) = run_threads(threads, secs, rate, |t| {
        writers[t].x_pwrite(&payloads[t])?;
        writers[t].x_fsync()?;
        Ok(())
    });
    Row {
        variant: variant.into(),
        offered: rate,
        threads,
        bytes,
        commits,
        secs: elapsed,
        lat_ns: lat,
        durability: log.durability(),
    }
}

fn print_row(r: &Row) {
    println!(
        "{:<22} {:>9} threads {:>2}  bytes {:>5}  commits/s {:>10.0}  p50 {:>9.2} us  p99 {:>9.2} us  p99.9 {:>9.2} us",
        r.variant,
        r.offered.map_or("closed".to_string(), |o| format!("@{o:.0}/s")),
        r.threads,
        r.bytes,
        r.tput(),
        r.pct(0.50),
        r.pct(0.99),
        r.pct(0.999)
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir: Option<PathBuf> = None;
    let mut secs = 1.0;
    let mut bytes = 4096usize;
    let mut threads = vec![1usize, 4, 20];
    let mut csv: Option<PathBuf> = None;
    let mut sweep = false;
    let mut fig11 = false;
    let mut fig12_on = false;
    let mut rate = 2000.0f64;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => secs = args.next().and_then(|v| v.parse().ok()).expect("--secs <float>"),
            "--bytes" => bytes = args.next().and_then(|v| v.parse().ok()).expect("--bytes <n>"),
            "--threads" => {
                threads = args
                    .next()
                    .expect("--threads 1,4,20")
                    .split(',')
                    .map(|s| s.parse().expect("thread count"))
                    .collect()
            }
            "--csv" => csv = Some(PathBuf::from(args.next().expect("--csv <path>"))),
            "--sweep" => sweep = true,
            "--fig11" => fig11 = true,
            "--fig12" => fig12_on = true,
            "--rate" => rate = args.next().and_then(|v| v.parse().ok()).expect("--rate <commits/s>"),
            other if !other.starts_with("--") => dir = Some(PathBuf::from(other)),
            other => panic!("unknown argument {other}"),
        }
    }
    let dir = dir.expect("usage: xlogbench <dir on the real disk> [--secs S] [--bytes N] [--threads 1,4,20] [--csv F] [--sweep]");
    std::fs::create_dir_all(&dir).expect("create bench dir");
    let shm = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { dir.clone() };

    let mut rows = Vec::new();
    println!(
        "# xlogbench: commit = append {bytes} B + wait durable; {secs} s per point; dir {}",
        dir.display()
    );
    let fast = open_xlog(&dir, &shm, "tmpfs", MsyncPolicy::Never);
    let disk = open_xlog(&dir, &dir, "disk", MsyncPolicy::Always);
    println!("# xlog-tmpfs durability: {}", fast.durability());
    println!("# xlog-disk-msync durability: {}", disk.durability());
    println!(
        "# baseline durability: O_DIRECT pwrite + fdatasync per commit under {}: survives power loss",
        dir.display()
    );
    // Latency at an offered load the conventional side can absorb (`--rate`, default 2000
    // commits/s in total), then throughput in a closed loop (saturation: for the fast side this
    // ends up bounded by destage bandwidth once the ring is full).
    for (phase, r) in [("latency at offered load", Some(rate)), ("closed-loop throughput", None)] {
        println!("## {phase}");
        for &t in &threads {
            for row in [
                bench_xlog(&fast, "xlog-tmpfs", t, bytes, secs, r),
                bench_xlog(&disk, "xlog-disk-msync", t, bytes, secs, r),
                bench_fdatasync(&dir, t, bytes, secs, r),
            ] {
                print_row(&row);
                rows.push(row);
            }
        }
    }
    for &t in &threads {
        let find = |v: &str| rows.iter().find(|x| x.variant == v && x.threads == t && x.offered.is_some());
        if let (Some(b), Some(x)) = (find("odirect+fdatasync"), find("xlog-tmpfs")) {
            println!(
                "# at {t} thread(s), offered {rate:.0}/s: p99 fdatasync {:.1} us / xlog-tmpfs {:.1} us = {:.1}x",
                b.pct(0.99),
                x.pct(0.99),
                b.pct(0.99) / x.pct(0.99)
            );
        }
    }
    if sweep {
        for size in [16usize, 64, 256, 1024, 4096, 16384] {
            let r = bench_xlog(&fast, "xlog-tmpfs-size", 1, size, secs / 2.0, None);
            print_row(&r);
            rows.push(r);
        }
    }
    if fig11 {
        // Seed 002 Fig. 11 style: queue size x group-commit (write) size, tmpfs, 1 thread.
        for q in [4usize << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10] {
            let log = open_xlog_q(&dir, &shm, &format!("q{q}"), MsyncPolicy::Never, q);
            for size in [1024usize, 4096, 16384, 65536] {
                let mut r = bench_xlog(&log, &format!("xlog-tmpfs-q{q}"), 1, size, secs / 4.0, None);
                r.variant = format!("fig11-queue{q}");
                print_row(&r);
                rows.push(r);
            }
            log.close().expect("close");
            let _ = std::fs::remove_file(shm.join(format!("xlogbench-q{q}-{}.ring", std::process::id())));
        }
    }
    let fig12_rows = if fig12_on { fig12(&shm, secs) } else { Vec::new() };
    let s = fast.stats();
    println!(
        "# xlog-tmpfs stats: frames {} destage pages {} batches {} filler bytes {} queue waits {} space waits {}",
        s.frames.load(Ordering::Relaxed),
        s.destage_pages.load(Ordering::Relaxed),
        s.destage_batches.load(Ordering::Relaxed),
        s.filler_bytes.load(Ordering::Relaxed),
        s.queue_waits.load(Ordering::Relaxed),
        s.space_waits.load(Ordering::Relaxed)
    );
    if let Some(p) = csv {
        let mut f = File::create(&p).expect("create csv");
        writeln!(
            f,
            "variant,offered_per_s,threads,bytes,commits,secs,commits_per_s,p50_us,p99_us,p999_us,durability"
        )
        .expect("csv");
        for r in &rows {
            writeln!(
                f,
                "{},{},{},{},{},{:.3},{:.0},{:.2},{:.2},{:.2},\"{}\"",
                r.variant,
                r.offered.map_or(String::new(), |o| format!("{o:.0}")),
                r.threads,
                r.bytes,
                r.commits,
                r.secs,
                r.tput(),
                r.pct(0.5),
                r.pct(0.99),
                r.pct(0.999),
                r.durability.replace('"', "'")
            )
            .expect("csv");
        }
        println!("# wrote {}", p.display());
        if !fig12_rows.is_empty() {
            let p12 = p.with_extension("fig12.csv");
            let mut f = File::create(&p12).expect("create fig12 csv");
            writeln!(
                f,
                "mode,conventional_offered_pct,fast_offered_pct,conventional_pct,fast_pct,destaged_pct"
            )
            .expect("csv");
            for l in &fig12_rows {
                writeln!(f, "{l}").expect("csv");
            }
            println!("# wrote {}", p12.display());
        }
    }
    fast.close().expect("close fast");
    disk.close().expect("close disk");
    for d in [&shm, &dir] {
        for tag in ["tmpfs", "disk"] {
            let _ = std::fs::remove_file(d.join(format!("xlogbench-{tag}-{}.ring", std::process::id())));
        }
    }
}
