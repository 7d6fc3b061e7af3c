//! `nvmedb lab xlog`: the experiments of seed 002 §6 on this machine, and the commit benchmark
//! of the fast log against the duplexed fdatasync file log.
//!
//! Owns: the experiment driver and its result files. Parts:
//! - **fig9**: transaction latency (p50/p99/p99.9, hdrhistogram) and throughput vs workers
//!   through the engine's [`Database`] with four logs — none, a memory-only log, the fast log
//!   (tmpfs ring), the duplexed file log (fdatasync) — on single-row update transactions; fio's
//!   4 KiB write + fdatasync rate is measured in the same run as the device reference.
//! - **fig10**: write-size effect: 1 writer, `x_pwrite` + `x_fsync` (tmpfs ring; and a ring
//!   in a disk file msynced per frame) vs O_DIRECT pwrite + fdatasync, per commit size.
//! - **fig11**: queue size vs group-commit (write) size on the fast side.
//! - **fig12**: destage priority vs a conventional workload under the three scheduler modes, on
//!   an *emulated* one-channel device (labelled so everywhere).
//!
//! Every result row carries the durability statement of its log; the JSON embeds the command,
//! configuration, machine and git commit. Invariant: every number printed is measured in this
//! run; speed is reported, never asserted.

use crate::machine::RunContext;
use crate::report::{LineChart, ResultsDir, Series, TextTable};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use nvmedb::io::{AlignedBuf, Device, DeviceInfo, DirStorage, FileOptions, IoResult, MemDevice, Storage};
use nvmedb::util::Rng;
use nvmedb::wal::{LogOpener, LogRecord, Lsn, RecordLog, RecordReader, RecoveredLog, WalStats};
use nvmedb::xlog::{MsyncPolicy, SchedMode, XLog, XLogConfig};
use nvmedb::{BufferSize, ColumnType, Database, FastLogOptions, LogKind, Options, Schema, Value};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XlogLabConfig {
    /// Working directory on the real disk (databases, conventional rings, fio file).
    pub data_dir: PathBuf,
    /// Directory of the fast side's ring files (tmpfs: `/dev/shm`).
    pub ring_dir: PathBuf,
    /// Root of the results directories.
    pub results_root: PathBuf,
    /// Seconds per measured point.
    pub secs: f64,
    /// Worker counts of fig9.
    pub workers: Vec<usize>,
    /// Rows of the fig9 table.
    pub rows: u64,
    /// Commit sizes of fig10, bytes.
    pub fig10_sizes: Vec<usize>,
    /// Queue sizes of fig11, bytes.
    pub fig11_queues: Vec<usize>,
    /// Write sizes of fig11, bytes.
    pub fig11_sizes: Vec<usize>,
    /// Fast-side offered load of fig12, percent of the emulated device bandwidth.
    pub fig12_fast_pcts: Vec<f64>,
    /// Parts to run: any of fig9, fig10, fig11, fig12.
    pub parts: Vec<String>,
    /// Measure fio's fdatasync rate in the run (when fio is installed).
    pub use_fio: bool,
}

impl XlogLabConfig {
    /// The default scale (about two minutes on a 2-vCPU VM).
    pub fn default_scale(data_dir: PathBuf, results_root: PathBuf) -> Self {
        let ring_dir =
            if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { data_dir.clone() };
        Self {
            data_dir,
            ring_dir,
            results_root,
            secs: 2.0,
            workers: vec![1, 4, 20],
            rows: 10_000,
            fig10_sizes: vec![16, 256, 1024, 4096, 16384],
            fig11_queues: vec![4 << 10, 16 << 10, 32 << 10, 64 << 10],
            fig11_sizes: vec![1024, 4096, 16384],
            fig12_fast_pcts: vec![30.0, 45.0, 60.0],
            parts: vec!["fig9".into(), "fig10".into(), "fig11".into(), "fig12".into()],
            use_fio: true,
        }
    }

    /// Longer runs with more points.
    pub fn long(mut self) -> Self {
        self.secs = 10.0;
        self.workers = vec![1, 2, 4, 8, 16, 20, 32];
        self.rows = 100_000;
        self.fig10_sizes = vec![16, 64, 256, 1024, 4096, 16384, 65536];
        self.fig11_queues = vec![4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10];
        self.fig11_sizes = vec![512, 1024, 4096, 16384, 65536];
        self.fig12_fast_pcts = vec![20.0, 30.0, 45.0, 60.0, 75.0];
        self
    }

    /// A tiny scale for the end-to-end test (seconds, not minutes).
    pub fn tiny(mut self) -> Self {
        self.secs = 0.15;
        self.workers = vec![1, 2];
        self.rows = 200;
        self.fig10_sizes = vec![64, 4096];
        self.fig11_queues = vec![4 << 10, 32 << 10];
        self.fig11_sizes = vec![1024];
        self.fig12_fast_pcts = vec![30.0];
        self.use_fio = false;
        self
    }
}

/// One fig9 point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TxnPoint {
    /// Log kind: none, memory, fast, file.
    pub log: String,
    /// Worker threads.
    pub workers: usize,
    /// Transactions committed.
    pub txns: u64,
    /// Seconds measured.
    pub secs: f64,
    /// Transactions per second.
    pub txn_per_s: f64,
    /// Latency percentiles, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// What a committed transaction survives with this log.
    pub durability: String,
}

/// One fig10 / fig11 point (raw commits of `bytes`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitPoint {
    /// Path: fast (x_pwrite + x_fsync, tmpfs ring), fast-msync (ring in a disk file, msync per
    /// frame) or fdatasync (O_DIRECT pwrite + fdatasync).
    pub path: String,
    /// Negotiated queue size (fast side), bytes; 0 for fdatasync.
    pub queue_bytes: usize,
    /// Bytes per commit.
    pub bytes: usize,
    /// Commits per second.
    pub commits_per_s: f64,
    /// MB/s committed.
    pub mb_per_s: f64,
    /// Latency percentiles, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// What a commit survives.
    pub durability: String,
}

/// One fig12 point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SchedPoint {
    /// Scheduler mode.
    pub mode: String,
    /// Conventional workload offered, % of the emulated bandwidth.
    pub conventional_offered_pct: f64,
    /// Fast-side workload offered, %.
    pub fast_offered_pct: f64,
    /// Conventional workload achieved, %.
    pub conventional_pct: f64,
    /// Fast-side writes achieved, %.
    pub fast_pct: f64,
    /// Destaged to the device, %.
    pub destaged_pct: f64,
    /// The device (emulated).
    pub device: String,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XlogLabResults {
    /// fio: 4 KiB sequential write + fdatasync, one job, IOPS (same run, same disk).
    pub fio_fdatasync_iops: Option<f64>,
    /// fig9 points.
    pub fig9: Vec<TxnPoint>,
    /// fig10 points.
    pub fig10: Vec<CommitPoint>,
    /// fig11 points.
    pub fig11: Vec<CommitPoint>,
    /// fig12 points.
    pub fig12: Vec<SchedPoint>,
    /// Durability statement of each log kind used.
    pub durability: Vec<(String, String)>,
    /// fig9: file-log p99 / fast-log p99 per worker count.
    pub p99_ratio_file_over_fast: Vec<(usize, f64)>,
}

/// The outcome of a run: the results, where they were written and the printed summary.
#[derive(Debug)]
pub struct XlogLabOutcome {
    /// Measurements.
    pub results: XlogLabResults,
    /// The results directory.
    pub dir: PathBuf,
    /// The summary printed (also in `summary.txt`).
    pub summary: String,
}

type Res<T> = std::result::Result<T, String>;

fn eng(ctx: &'static str) -> impl Fn(nvmedb::Error) -> String {
    move |e| format!("{ctx}: {e}")
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("xlog lab {pos}/{len} [{wide_bar}] eta {eta} {msg}") {
        b.set_style(style.progress_chars("=> "));
    }
    b.set_message(what.to_string());
    b
}

fn pct_us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return f64::NAN;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Runs `threads` closed-loop committers for `secs` (optionally paced to `rate` per second in
/// total); returns commits, seconds and the latency histogram (ns).
fn run_threads<F>(threads: usize, secs: f64, commit: F) -> Res<(u64, f64, Histogram<u64>)>
where
    F: Fn(usize, &mut Rng) -> nvmedb::Result<()> + Sync,
{
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let hs = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, commit) = (&stop, &commit);
                s.spawn(move || -> Res<(u64, Histogram<u64>)> {
                    let mut h =
                        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
                    let mut rng = Rng::new(t as u64 * 7919 + 1);
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let a = Instant::now();
                        commit(t, &mut rng).map_err(|e| format!("commit failed: {e}"))?;
                        h.saturating_record(a.elapsed().as_nanos().max(1) as u64);
                        n += 1;
                    }
                    Ok((n, h))
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().map_err(|_| "bench thread panicked".to_string())?).collect::<Vec<_>>()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
    let mut total = 0;
    for r in hs {
        let (n, h) = r?;
        total += n;
        all.add(&h).map_err(|e| e.to_string())?;
    }
    Ok((total, secs, all))
}

/// A memory-only record log: appends copy the record into a RAM ring under a mutex and are
/// "durable" at once. It survives nothing (no recovery); it measures the engine without any log
/// persistence cost.
struct MemLog {
    ring: Mutex<Vec<u8>>,
    end: AtomicU64,
    start: Lsn,
    records: AtomicU64,
}

struct Empty;

impl RecordReader for Empty {
    fn next_record(&mut self) -> nvmedb::Result<Option<LogRecord>> {
        Ok(None)
    }
}

impl RecordLog for MemLog {
    fn append_record(&self, _kind: u8, payload: &[u8]) -> nvmedb::Result<(Lsn, Lsn)> {
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        let len = payload.len() as u64 + 20;
        let start = self.end.load(Ordering::Relaxed);
        let n = ring.len();
        let at = (start as usize + 20) % n;
        let first = payload.len().min(n - at);
        ring[at..at + first].copy_from_slice(&payload[..first]);
        ring[..payload.len() - first].copy_from_slice(&payload[first..]);
        self.end.store(start + len, Ordering::Release);
        self.records.fetch_add(1, Ordering::Relaxed);
        Ok((start, start + len))
    }
    fn end_lsn(&self) -> Lsn {
        self.end.load(Ordering::Acquire)
    }
    fn durable_lsn(&self) -> Lsn {
        self.end.load(Ordering::Acquire)
    }
    fn wait_durable(&self, _lsn: Lsn) -> nvmedb::Result<Lsn> {
        Ok(self.durable_lsn())
    }
    fn recovered(&self) -> RecoveredLog {
        RecoveredLog { log_id: 0, start_lsn: self.start, end_lsn: self.start, segments: 0, created: true }
    }
    fn reader(&self, _from: Lsn) -> nvmedb::Result<Box<dyn RecordReader>> {
        Ok(Box::new(Empty))
    }
    fn truncate_before(&self, _lsn: Lsn) -> nvmedb::Result<usize> {
        Ok(0)
    }
    fn stats(&self) -> WalStats {
        WalStats { records_appended: self.records.load(Ordering::Relaxed), ..Default::default() }
    }
    fn describe(&self) -> String {
        "memory-only log: records copied to RAM, durable at once; survives nothing (no recovery)".into()
    }
}

struct MemLogOpener;

impl LogOpener for MemLogOpener {
    fn is_empty(&self) -> nvmedb::Result<bool> {
        Ok(true)
    }
    fn open(self: Box<Self>, initial_lsn: Lsn) -> nvmedb::Result<Arc<dyn RecordLog>> {
        Ok(Arc::new(MemLog {
            ring: Mutex::new(vec![0; 64 << 20]),
            end: AtomicU64::new(initial_lsn),
            start: initial_lsn,
            records: AtomicU64::new(0),
        }))
    }
}

fn db_options(log: LogKind, wal: bool) -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(32 << 20),
        index_buffer: BufferSize::Bytes(32 << 20),
        wal,
        log,
        ..Options::default()
    }
}

fn fast_kind(cfg: &XlogLabConfig, tag: &str) -> LogKind {
    LogKind::Fast(FastLogOptions {
        ring_path: Some(ring_path(cfg, tag)),
        msync: MsyncPolicy::Never,
        ..FastLogOptions::default()
    })
}

fn ring_path(cfg: &XlogLabConfig, tag: &str) -> PathBuf {
    cfg.ring_dir.join(format!("nvmedb-xloglab-{tag}-{}.ring", std::process::id()))
}

fn open_db(cfg: &XlogLabConfig, kind: &str, dir: &Path) -> Res<Database> {
    match kind {
        "none" => Database::open(dir, db_options(LogKind::Duplexed, false)).map_err(eng("open (no log)")),
        "memory" => {
            let storage = Arc::new(DirStorage::new(dir, FileOptions::default()).map_err(|e| e.to_string())?);
            Database::open_with_log(
                storage,
                Some(Box::new(MemLogOpener)),
                db_options(LogKind::Duplexed, true),
            )
            .map_err(eng("open (memory log)"))
        }
        "fast" => {
            Database::open(dir, db_options(fast_kind(cfg, "fig9"), true)).map_err(eng("open (fast log)"))
        }
        _ => Database::open(dir, db_options(LogKind::Duplexed, true)).map_err(eng("open (file log)")),
    }
}

fn fig9(cfg: &XlogLabConfig, pb: &ProgressBar, out: &mut XlogLabResults) -> Res<()> {
    let schema = Schema::new(vec![
        ("id", ColumnType::Int),
        ("balance", ColumnType::Int),
        ("filler", ColumnType::Char(100)),
    ]);
    for kind in ["none", "memory", "fast", "file"] {
        let dir = cfg.data_dir.join(format!("fig9-{kind}"));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(ring_path(cfg, "fig9"));
        {
            let db = Database::open(&dir, db_options(LogKind::Duplexed, false)).map_err(eng("create"))?;
            let t = db.create_table("acct", schema.clone()).map_err(eng("create table"))?;
            for id in 0..cfg.rows as i64 {
                t.insert(&[Value::Int(id), Value::Int(1000), Value::from("x")]).map_err(eng("load"))?;
            }
            db.close().map_err(eng("close"))?;
        }
        let db = open_db(cfg, kind, &dir)?;
        let durability = match db.engine_log() {
            Some(l) => l.record_log().describe(),
            None => "no log: a commit is durable only after the next flush; a crash loses it".into(),
        };
        out.durability.push((kind.to_string(), durability.clone()));
        let t = db.table("acct").map_err(eng("table"))?;
        for &w in &cfg.workers {
            pb.set_message(format!("fig9 {kind} log, {w} workers"));
            let rows = cfg.rows;
            let (txns, secs, h) = run_threads(w, cfg.secs, |_, rng| {
                let k = rng.below(rows) as i64;
                loop {
                    let mut tx = db.begin();
                    let r = (|| {
                        let mut row = tx.get_for_update(&t, &Value::Int(k))?.expect("row exists");
                        row[1] = Value::Int(row[1].as_int().unwrap_or(0) + 1);
                        tx.update(&t, &row)
                    })();
                    match r {
                        Ok(_) => return tx.commit(),
                        Err(e) if e.is_retryable() => tx.abort()?,
                        Err(e) => return Err(e),
                    }
                }
            })?;
            out.fig9.push(TxnPoint {
                log: kind.into(),
                workers: w,
                txns,
                secs,
                txn_per_s: txns as f64 / secs,
                p50_us: pct_us(&h, 0.5),
                p99_us: pct_us(&h, 0.99),
                p999_us: pct_us(&h, 0.999),
                durability: durability.clone(),
            });
            pb.inc(1);
        }
        drop(t);
        db.close().map_err(eng("close"))?;
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(ring_path(cfg, "fig9"));
    }
    for &w in &cfg.workers {
        let p = |k: &str| out.fig9.iter().find(|x| x.log == k && x.workers == w).map(|x| x.p99_us);
        if let (Some(f), Some(x)) = (p("file"), p("fast")) {
            out.p99_ratio_file_over_fast.push((w, f / x));
        }
    }
    Ok(())
}

fn open_xlog(cfg: &XlogLabConfig, tag: &str, queue_bytes: usize, dev: Arc<dyn Device>) -> Res<XLog> {
    open_xlog_at(ring_path(cfg, tag), queue_bytes, dev, MsyncPolicy::Never)
}

fn open_xlog_at(ring: PathBuf, queue_bytes: usize, dev: Arc<dyn Device>, msync: MsyncPolicy) -> Res<XLog> {
    let _ = std::fs::remove_file(&ring);
    let mut c = XLogConfig::new(&ring);
    c.ring_bytes = 8 << 20;
    c.queue_bytes = queue_bytes;
    c.conv_pages = 16384;
    c.destage_batch_pages = 256;
    c.msync = msync;
    c.spin_iters = 200;
    XLog::open(c, dev).map_err(eng("open xlog"))
}

fn disk_device(cfg: &XlogLabConfig, name: &str) -> Res<Arc<dyn Device>> {
    let st = DirStorage::new(&cfg.data_dir, FileOptions::default()).map_err(|e| e.to_string())?;
    if st.exists(name) {
        st.remove(name).map_err(|e| e.to_string())?;
    }
    st.open(name, true).map_err(|e| e.to_string())
}

fn fast_point(path: &str, log: &XLog, q: usize, bytes: usize, secs: f64) -> Res<CommitPoint> {
    let w = log.writer().map_err(eng("writer"))?;
    let payload = vec![7u8; bytes];
    let (n, el, h) = run_threads(1, secs, |_, _| {
        w.x_pwrite(&payload)?;
        w.x_fsync().map(|_| ())
    })?;
    Ok(CommitPoint {
        path: path.into(),
        queue_bytes: q,
        bytes,
        commits_per_s: n as f64 / el,
        mb_per_s: (n * bytes as u64) as f64 / el / 1e6,
        p50_us: pct_us(&h, 0.5),
        p99_us: pct_us(&h, 0.99),
        durability: log.durability(),
    })
}

fn fdatasync_point(cfg: &XlogLabConfig, bytes: usize, secs: f64) -> Res<CommitPoint> {
    let dev = disk_device(cfg, "fig10-fdatasync.dat")?;
    let block = bytes.div_ceil(4096) * 4096;
    let blocks = (64u64 << 20) / block as u64;
    dev.ensure_capacity(blocks * block as u64).map_err(|e| e.to_string())?;
    let mut buf = AlignedBuf::new(block);
    buf.fill(9);
    let next = AtomicU64::new(0);
    let (n, el, h) = run_threads(1, secs, |_, _| {
        let i = next.fetch_add(1, Ordering::Relaxed) % blocks;
        dev.write_at(i * block as u64, &buf)?;
        dev.sync()?;
        Ok(())
    })?;
    Ok(CommitPoint {
        path: "fdatasync".into(),
        queue_bytes: 0,
        bytes,
        commits_per_s: n as f64 / el,
        mb_per_s: (n * bytes as u64) as f64 / el / 1e6,
        p50_us: pct_us(&h, 0.5),
        p99_us: pct_us(&h, 0.99),
        durability: format!(
            "O_DIRECT pwrite of {block} B + fdatasync per commit on {} ({}): survives power loss",
            dev.info().name,
            dev.info().backend
        ),
    })
}

fn fig10(cfg: &XlogLabConfig, pb: &ProgressBar, out: &mut XlogLabResults) -> Res<()> {
    let log = open_xlog(cfg, "fig10", 32 << 10, disk_device(cfg, "fig10.conv")?)?;
    // The power-loss-safe alternative without persistent memory: the ring in a mapped file on
    // the disk, msynced before the counter covers a frame.
    let disk_ring = cfg.data_dir.join(format!("fig10-msync-{}.ring", std::process::id()));
    let msync =
        open_xlog_at(disk_ring.clone(), 32 << 10, disk_device(cfg, "fig10m.conv")?, MsyncPolicy::Always)?;
    out.durability.push(("fast (raw xlog, tmpfs ring)".into(), log.durability()));
    out.durability.push(("fast-msync (raw xlog, disk ring)".into(), msync.durability()));
    for &b in &cfg.fig10_sizes {
        pb.set_message(format!("fig10 {b} B"));
        out.fig10.push(fast_point("fast", &log, 32 << 10, b, cfg.secs / 3.0)?);
        out.fig10.push(fast_point("fast-msync", &msync, 32 << 10, b, cfg.secs / 3.0)?);
        out.fig10.push(fdatasync_point(cfg, b, cfg.secs / 3.0)?);
        pb.inc(1);
    }
    log.close().map_err(eng("close xlog"))?;
    msync.close().map_err(eng("close xlog"))?;
    let _ = std::fs::remove_file(&disk_ring);
    let _ = std::fs::remove_file(cfg.data_dir.join("fig10m.conv"));
    let _ = std::fs::remove_file(ring_path(cfg, "fig10"));
    let _ = std::fs::remove_file(cfg.data_dir.join("fig10.conv"));
    let _ = std::fs::remove_file(cfg.data_dir.join("fig10-fdatasync.dat"));
    Ok(())
}

fn fig11(cfg: &XlogLabConfig, pb: &ProgressBar, out: &mut XlogLabResults) -> Res<()> {
    for &q in &cfg.fig11_queues {
        let log = open_xlog(cfg, "fig11", q, disk_device(cfg, "fig11.conv")?)?;
        for &b in &cfg.fig11_sizes {
            pb.set_message(format!("fig11 queue {q} B, writes {b} B"));
            out.fig11.push(fast_point("fast", &log, q, b, cfg.secs / 4.0)?);
            pb.inc(1);
        }
        log.close().map_err(eng("close xlog"))?;
    }
    let _ = std::fs::remove_file(ring_path(cfg, "fig11"));
    let _ = std::fs::remove_file(cfg.data_dir.join("fig11.conv"));
    Ok(())
}

/// A RAM device with one channel of fixed write bandwidth: each write holds the channel for
/// `len / bandwidth`. Emulated, and labelled so in every result.
struct Throttled {
    mem: MemDevice,
    bytes_per_s: f64,
    channel: Mutex<()>,
}

impl Device for Throttled {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "emulated-one-channel".into(),
            backend: "memory (emulated)".into(),
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

fn paced(stop: &AtomicBool, iv: Duration, mut op: impl FnMut() -> nvmedb::Result<()>) -> nvmedb::Result<()> {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        next += iv;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else if now - next > iv * 10 {
            next = now;
        }
        op()?;
    }
    Ok(())
}

fn fig12(cfg: &XlogLabConfig, pb: &ProgressBar, out: &mut XlogLabResults) -> Res<()> {
    const BW: f64 = 200e6;
    const UNIT: usize = 64 << 10;
    const REC: usize = 16 << 10;
    for mode in [SchedMode::Neutral, SchedMode::ConventionalPriority, SchedMode::DestagePriority] {
        for &fast_pct in &cfg.fig12_fast_pcts {
            pb.set_message(format!("fig12 {mode:?} fast {fast_pct}%"));
            let dev = Arc::new(Throttled {
                mem: MemDevice::new("fig12"),
                bytes_per_s: BW,
                channel: Mutex::new(()),
            });
            let device = format!("{} [{}]", dev.info().name, dev.info().emulated_profile.unwrap_or_default());
            let ring = ring_path(cfg, "fig12");
            let _ = std::fs::remove_file(&ring);
            let mut c = XLogConfig::new(&ring);
            c.ring_bytes = 8 << 20;
            c.conv_offset = 64 << 20;
            c.conv_pages = 4096;
            c.destage_batch_pages = 64;
            c.destage_write_pages = UNIT / 4096;
            c.sched_mode = mode;
            c.msync = MsyncPolicy::Never;
            let log = XLog::open(c, dev).map_err(eng("open fig12 xlog"))?;
            let conv = log.scheduler().conventional_device();
            let stop = AtomicBool::new(false);
            let conv_bytes = AtomicU64::new(0);
            let fast_bytes = AtomicU64::new(0);
            let d0 = log.status().destaged;
            let t0 = Instant::now();
            let secs = (cfg.secs * 0.75).max(0.1);
            let r = std::thread::scope(|s| {
                let a = s.spawn(|| {
                    let buf = AlignedBuf::new(UNIT);
                    let mut i = 0u64;
                    paced(&stop, Duration::from_secs_f64(UNIT as f64 / (0.5 * BW)), || {
                        conv.write_at((i % 512) * UNIT as u64, &buf)?;
                        conv_bytes.fetch_add(UNIT as u64, Ordering::Relaxed);
                        i += 1;
                        Ok(())
                    })
                });
                let b = s.spawn(|| {
                    let w = log.writer()?;
                    let rec = vec![7u8; REC];
                    paced(&stop, Duration::from_secs_f64(REC as f64 / (fast_pct / 100.0 * BW)), || {
                        w.x_pwrite(&rec)?;
                        fast_bytes.fetch_add(REC as u64, Ordering::Relaxed);
                        Ok(())
                    })
                });
                std::thread::sleep(Duration::from_secs_f64(secs));
                stop.store(true, Ordering::Relaxed);
                let ra = a.join().map_err(|_| "fig12 thread panicked".to_string())?;
                let rb = b.join().map_err(|_| "fig12 thread panicked".to_string())?;
                ra.and(rb).map_err(|e| e.to_string())
            });
            r?;
            let el = t0.elapsed().as_secs_f64();
            let destaged = log.status().destaged - d0;
            out.fig12.push(SchedPoint {
                mode: format!("{mode:?}"),
                conventional_offered_pct: 50.0,
                fast_offered_pct: fast_pct,
                conventional_pct: conv_bytes.load(Ordering::Relaxed) as f64 / el / BW * 100.0,
                fast_pct: fast_bytes.load(Ordering::Relaxed) as f64 / el / BW * 100.0,
                destaged_pct: destaged as f64 / el / BW * 100.0,
                device,
            });
            log.close().map_err(eng("close fig12 xlog"))?;
            let _ = std::fs::remove_file(&ring);
            pb.inc(1);
        }
    }
    Ok(())
}

fn on(cfg: &XlogLabConfig, part: &str) -> bool {
    cfg.parts.iter().any(|p| p == part)
}

/// Runs the selected parts, prints tables, writes CSV/JSON/plots into a new results directory.
pub fn run(cfg: &XlogLabConfig) -> Res<XlogLabOutcome> {
    for p in &cfg.parts {
        if !["fig9", "fig10", "fig11", "fig12"].contains(&p.as_str()) {
            return Err(format!("unknown part `{p}` (fig9, fig10, fig11, fig12)"));
        }
    }
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| format!("{}: {e}", cfg.data_dir.display()))?;
    let ctx = RunContext::capture();
    let dir = ResultsDir::create(&cfg.results_root, "xlog").map_err(|e| e.to_string())?;
    let mut out = XlogLabResults {
        fio_fdatasync_iops: None,
        fig9: Vec::new(),
        fig10: Vec::new(),
        fig11: Vec::new(),
        fig12: Vec::new(),
        durability: Vec::new(),
        p99_ratio_file_over_fast: Vec::new(),
    };
    let steps = on(cfg, "fig9") as usize * 4 * cfg.workers.len()
        + on(cfg, "fig10") as usize * cfg.fig10_sizes.len()
        + on(cfg, "fig11") as usize * cfg.fig11_queues.len() * cfg.fig11_sizes.len()
        + on(cfg, "fig12") as usize * 3 * cfg.fig12_fast_pcts.len();
    let pb = bar(steps as u64, "starting");
    if cfg.use_fio && on(cfg, "fig9") {
        pb.set_message("fio fdatasync reference");
        out.fio_fdatasync_iops = crate::fio::fdatasync_iops(&cfg.data_dir, cfg.secs.max(1.0));
    }
    if on(cfg, "fig9") {
        fig9(cfg, &pb, &mut out)?;
    }
    if on(cfg, "fig10") {
        fig10(cfg, &pb, &mut out)?;
    }
    if on(cfg, "fig11") {
        fig11(cfg, &pb, &mut out)?;
    }
    if on(cfg, "fig12") {
        fig12(cfg, &pb, &mut out)?;
    }
    pb.finish_and_clear();
    let summary = write_all(cfg, &ctx, &dir, &out).map_err(|e| e.to_string())?;
    let _ = dir.link_latest();
    Ok(XlogLabOutcome { results: out, dir: dir.path().to_path_buf(), summary })
}

fn f0(x: f64) -> String {
    format!("{x:.0}")
}
fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn write_all(
    cfg: &XlogLabConfig,
    ctx: &RunContext,
    dir: &ResultsDir,
    r: &XlogLabResults,
) -> crate::report::Result<String> {
    let mut text = String::new();
    let machine = ctx.one_line();
    text.push_str(&format!("# nvmedb lab xlog — {machine}\n# command: {}\n", ctx.command));
    for (k, d) in &r.durability {
        text.push_str(&format!("# durability [{k}]: {d}\n"));
    }
    if let Some(f) = r.fio_fdatasync_iops {
        text.push_str(&format!("# fio 4 KiB write + fdatasync, 1 job, same disk, same run: {f:.0} IOPS\n"));
    }
    if !r.fig9.is_empty() {
        let mut t = TextTable::new(["log", "workers", "txn/s", "p50 µs", "p99 µs", "p99.9 µs"])
            .title("Fig. 9 — single-row update transactions through the engine, by log");
        for p in &r.fig9 {
            t.row([
                p.log.clone(),
                p.workers.to_string(),
                f0(p.txn_per_s),
                f1(p.p50_us),
                f1(p.p99_us),
                f1(p.p999_us),
            ]);
        }
        for (w, x) in &r.p99_ratio_file_over_fast {
            t.note(format!("{w} workers: file-log p99 / fast-log p99 = {x:.1}x"));
        }
        text.push_str(&format!("{t}\n"));
        dir.write_csv("fig9", &r.fig9)?;
        let mut tput = LineChart::new("Fig. 9 — throughput vs workers", "workers", "transactions/s")
            .subtitle("single-row update transactions; fast = tmpfs ring (kill -9 safe, not power-loss safe)")
            .footnote(machine.clone());
        let mut lat = LineChart::new("Fig. 9 — p99 commit latency vs workers", "workers", "p99 latency (µs)")
            .subtitle("single-row update transactions")
            .footnote(machine.clone());
        for (i, k) in ["none", "memory", "fast", "file"].iter().enumerate() {
            let pts: Vec<_> = r.fig9.iter().filter(|p| p.log == *k).collect();
            if pts.is_empty() {
                continue;
            }
            tput = tput.series(
                Series::new(*k, pts.iter().map(|p| (p.workers as f64, p.txn_per_s)).collect()).color(i),
            );
            lat = lat
                .series(Series::new(*k, pts.iter().map(|p| (p.workers as f64, p.p99_us)).collect()).color(i));
        }
        tput.write(dir.path(), "fig9_throughput")?;
        lat.write(dir.path(), "fig9_p99")?;
    }
    if !r.fig10.is_empty() {
        let mut t = TextTable::new(["path", "bytes", "commits/s", "MB/s", "p50 µs", "p99 µs"])
            .title("Fig. 10 — write-size effect, 1 writer, closed loop");
        for p in &r.fig10 {
            t.row([
                p.path.clone(),
                p.bytes.to_string(),
                f0(p.commits_per_s),
                f1(p.mb_per_s),
                f1(p.p50_us),
                f1(p.p99_us),
            ]);
        }
        text.push_str(&format!("{t}\n"));
        dir.write_csv("fig10", &r.fig10)?;
        let mut c = LineChart::new("Fig. 10 — commit rate vs write size", "bytes per commit", "commits/s")
            .log_x(true)
            .footnote(machine.clone());
        for (i, k) in ["fast", "fast-msync", "fdatasync"].iter().enumerate() {
            let pts =
                r.fig10.iter().filter(|p| p.path == *k).map(|p| (p.bytes as f64, p.commits_per_s)).collect();
            c = c.series(Series::new(*k, pts).color(i));
        }
        c.write(dir.path(), "fig10")?;
    }
    if !r.fig11.is_empty() {
        let mut t = TextTable::new(["queue B", "write B", "commits/s", "MB/s", "p50 µs", "p99 µs"])
            .title("Fig. 11 — queue size vs group-commit size (fast side, 1 writer)");
        for p in &r.fig11 {
            t.row([
                p.queue_bytes.to_string(),
                p.bytes.to_string(),
                f0(p.commits_per_s),
                f1(p.mb_per_s),
                f1(p.p50_us),
                f1(p.p99_us),
            ]);
        }
        text.push_str(&format!("{t}\n"));
        dir.write_csv("fig11", &r.fig11)?;
        let mut c =
            LineChart::new("Fig. 11 — fast-side bandwidth vs queue size", "queue size (bytes)", "MB/s")
                .log_x(true)
                .footnote(machine.clone());
        for (i, &b) in cfg.fig11_sizes.iter().enumerate() {
            let pts =
                r.fig11.iter().filter(|p| p.bytes == b).map(|p| (p.queue_bytes as f64, p.mb_per_s)).collect();
            c = c.series(Series::new(format!("{b} B writes"), pts).color(i));
        }
        c.write(dir.path(), "fig11")?;
    }
    if !r.fig12.is_empty() {
        let mut t = TextTable::new(["mode", "fast offered %", "conventional %", "fast %", "destaged %"])
            .title("Fig. 12 — destage vs a conventional workload at 50 % (EMULATED one-channel device)");
        for p in &r.fig12 {
            t.row([
                p.mode.clone(),
                f0(p.fast_offered_pct),
                f1(p.conventional_pct),
                f1(p.fast_pct),
                f1(p.destaged_pct),
            ]);
        }
        t.note(format!("device: {}", r.fig12[0].device));
        text.push_str(&format!("{t}\n"));
        dir.write_csv("fig12", &r.fig12)?;
        let mut c = LineChart::new(
            "Fig. 12 — achieved share of an emulated device",
            "fast-side offered load (% of bandwidth)",
            "achieved (% of bandwidth)",
        )
        .subtitle("conventional workload offered at 50 %; EMULATED one-channel RAM device")
        .footnote(machine.clone());
        for (i, m) in ["Neutral", "ConventionalPriority", "DestagePriority"].iter().enumerate() {
            let pts: Vec<_> = r.fig12.iter().filter(|p| p.mode == *m).collect();
            c = c.series(
                Series::new(
                    format!("{m} conventional"),
                    pts.iter().map(|p| (p.fast_offered_pct, p.conventional_pct)).collect(),
                )
                .color(2 * i),
            );
            c = c.series(
                Series::new(
                    format!("{m} destaged"),
                    pts.iter().map(|p| (p.fast_offered_pct, p.destaged_pct)).collect(),
                )
                .color(2 * i + 1),
            );
        }
        c.write(dir.path(), "fig12")?;
    }
    dir.write_json("results", ctx, cfg, r)?;
    dir.write_text("summary.txt", &text)?;
    Ok(text)
}
