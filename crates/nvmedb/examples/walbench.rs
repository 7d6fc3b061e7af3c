//! Commit throughput of the duplexed, group-committing log on the real disk.
//!
//! ```sh
//! cargo run -p nvmedb --example walbench -- /work/walbench [--seconds 3] [--threads 1,4,20]
//!     [--payload 100] [--recovery-mb 1024] [--wait-us 200] [--no-fio]
//! ```
//!
//! For each client-thread count it runs `append` + `wait_durable` in a loop on a fresh log whose
//! two copies are directories `<dir>/copy-a` and `<dir>/copy-b` (O_DIRECT files, fdatasync), and
//! prints commits/s, flushes/s, mean commits per flush and p50/p99 commit latency. It first runs
//! fio's single-thread 4 KiB write + fdatasync on the same directory as the reference, and at the
//! end writes `--recovery-mb` of log and times reading it all back (and reopening the log).
//!
//! The copies are the engine's own `io::DirStorage` (O_DIRECT files).

use nvmedb::io::{DirStorage, FileOptions, Storage};
use nvmedb::wal::{FileLog, LogReader, LogSink, WalOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    dir: PathBuf,
    seconds: f64,
    threads: Vec<usize>,
    payload: usize,
    recovery_mb: u64,
    fio: bool,
    wait_us: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        dir: PathBuf::new(),
        seconds: 3.0,
        threads: vec![1, 4, 20],
        payload: 100,
        recovery_mb: 1024,
        fio: true,
        wait_us: WalOptions::default().group_commit_wait_us,
    };
    let mut dir = None;
    while let Some(x) = it.next() {
        let mut val = |k: &str| it.next().ok_or(format!("{k} needs a value"));
        match x.as_str() {
            "--seconds" => a.seconds = val("--seconds")?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--payload" => a.payload = val("--payload")?.parse().map_err(|e| format!("--payload: {e}"))?,
            "--recovery-mb" => {
                a.recovery_mb = val("--recovery-mb")?.parse().map_err(|e| format!("--recovery-mb: {e}"))?
            }
            "--threads" => {
                a.threads = val("--threads")?
                    .split(',')
                    .map(|t| t.parse().map_err(|e| format!("--threads: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--no-fio" => a.fio = false,
            "--wait-us" => a.wait_us = val("--wait-us")?.parse().map_err(|e| format!("--wait-us: {e}"))?,
            d if !d.starts_with("--") && dir.is_none() => dir = Some(PathBuf::from(d)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    a.dir = dir.ok_or(
        "usage: walbench <dir> [--seconds S] [--threads 1,4,20] [--payload B] [--recovery-mb M] [--no-fio]",
    )?;
    Ok(a)
}

/// A fresh log and its two storages.
type Fresh = (FileLog, Arc<dyn Storage>, Arc<dyn Storage>);

fn fresh_log(dir: &Path, opts: WalOptions) -> nvmedb::Result<Fresh> {
    for c in ["copy-a", "copy-b"] {
        let p = dir.join(c);
        if p.exists() {
            std::fs::remove_dir_all(&p)
                .map_err(|e| nvmedb::Error::InvalidArgument(format!("{}: {e}", p.display())))?;
        }
    }
    let mk = |c: &str| -> nvmedb::Result<Arc<dyn Storage>> {
        Ok(Arc::new(DirStorage::new(dir.join(c), FileOptions::default())?))
    };
    let (a, b) = (mk("copy-a")?, mk("copy-b")?);
    Ok((FileLog::open(a.clone(), b.clone(), opts)?, a, b))
}

fn run_fio(dir: &Path) -> Option<f64> {
    let file = dir.join("fio.dat");
    let out = std::process::Command::new("fio")
        .args(["--name=sync", "--rw=write", "--bs=4k", "--fdatasync=1", "--direct=1", "--size=64m"])
        .arg(format!("--filename={}", file.display()))
        .arg("--output-format=json")
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&out.stdout);
    let w = text.find("\"write\" : {")?;
    let rest = &text[w..];
    let i = rest.find("\"iops\"")?;
    let rest = &rest[i + 6..];
    let num: String = rest
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse().ok()
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn commit_run(args: &Args, threads: usize) -> nvmedb::Result<(f64, f64)> {
    let opts = WalOptions { group_commit_wait_us: args.wait_us, ..WalOptions::default() };
    let (log, _a, _b) = fresh_log(&args.dir, opts)?;
    let log = Arc::new(log);
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (log, stop, measuring) = (log.clone(), stop.clone(), measuring.clone());
            let payload = vec![t as u8; args.payload];
            std::thread::spawn(move || -> nvmedb::Result<Vec<u64>> {
                let mut lat = Vec::with_capacity(1 << 16);
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    let (_, e) = log.append(&payload)?;
                    log.wait_durable(e)?;
                    if measuring.load(Ordering::Relaxed) {
                        lat.push(t0.elapsed().as_nanos() as u64);
                    }
                }
                Ok(lat)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300)); // warm-up
    let s0 = log.stats();
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    measuring.store(false, Ordering::Relaxed);
    let s1 = log.stats();
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    for h in handles {
        match h.join() {
            Ok(r) => lat.extend(r?),
            Err(_) => return Err(nvmedb::Error::InvalidArgument("client thread panicked".into())),
        }
    }
    lat.sort_unstable();
    let commits = lat.len() as f64;
    let flushes = (s1.flushes - s0.flushes) as f64;
    let recs = (s1.records_flushed - s0.records_flushed) as f64;
    println!(
        "{threads:>7} {:>12.0} {:>10.0} {:>16.2} {:>10.1} {:>10.1}",
        commits / secs,
        flushes / secs,
        recs / flushes.max(1.0),
        pct(&lat, 0.50),
        pct(&lat, 0.99)
    );
    Ok((commits / secs, flushes / secs))
}

fn recovery_run(args: &Args) -> nvmedb::Result<()> {
    let target = args.recovery_mb << 20;
    let (log, a, b) = fresh_log(&args.dir, WalOptions::default())?;
    let payload = vec![0xabu8; 60 * 1024];
    let t0 = Instant::now();
    let mut n = 0u64;
    while log.end_lsn() < target {
        let (_, e) = log.append(&payload)?;
        n += 1;
        if n % 16 == 0 {
            log.wait_durable(e)?;
        }
    }
    let end = log.close()?;
    let wsecs = t0.elapsed().as_secs_f64();
    println!(
        "wrote {:.0} MiB of log ({n} records of 60 KiB) to both copies in {wsecs:.2} s ({:.0} MiB/s per copy)",
        end as f64 / (1 << 20) as f64,
        end as f64 / (1 << 20) as f64 / wsecs
    );
    let t1 = Instant::now();
    let log = FileLog::open(a.clone(), b.clone(), WalOptions::default())?;
    let open_secs = t1.elapsed().as_secs_f64();
    assert_eq!(log.recovered().end_lsn, end, "reopen found a different end");
    drop(log);
    let t2 = Instant::now();
    let mut bytes = 0u64;
    let mut recs = 0u64;
    for r in LogReader::open(a, b, 0)? {
        let r = r?;
        bytes += r.end_lsn - r.lsn;
        recs += 1;
    }
    let read_secs = t2.elapsed().as_secs_f64();
    println!(
        "recovery: reopen (find the end) {:.1} ms; read all {recs} records ({:.0} MiB) in {read_secs:.2} s = {:.0} MiB/s",
        open_secs * 1e3,
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / (1 << 20) as f64 / read_secs
    );
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.dir) {
        eprintln!("{}: {e}", args.dir.display());
        std::process::exit(1);
    }
    println!(
        "walbench: dir {} (both log copies on this file system), payload {} B, {} s per point, \
         group_commit_wait_us {}",
        args.dir.display(),
        args.payload,
        args.seconds,
        args.wait_us
    );
    let fio = if args.fio { run_fio(&args.dir) } else { None };
    match fio {
        Some(iops) => println!("fio single-thread 4 KiB write + fdatasync (O_DIRECT): {iops:.0} IOPS"),
        None => println!("fio: not run (missing or --no-fio)"),
    }
    println!(
        "{:>7} {:>12} {:>10} {:>16} {:>10} {:>10}",
        "threads", "commits/s", "flushes/s", "commits/flush", "p50 us", "p99 us"
    );
    let mut rates = Vec::new();
    for &t in &args.threads {
        match commit_run(&args, t) {
            Ok((c, _)) => rates.push((t, c)),
            Err(e) => {
                eprintln!("{t} threads: {e}");
                std::process::exit(1);
            }
        }
    }
    if let (Some(&(1, one)), Some(&(tn, last))) = (rates.first(), rates.last()) {
        println!("{tn} threads / 1 thread = {:.1}x", last / one);
    }
    // The disk is shared: measure the reference again after the runs and compare with both.
    let fio_after = if args.fio { run_fio(&args.dir) } else { None };
    if let Some(after) = fio_after {
        println!("fio again after the commit runs: {after:.0} IOPS");
    }
    if let (Some(before), Some(after)) = (fio, fio_after) {
        let mean = (before + after) / 2.0;
        for (t, c) in &rates {
            println!(
                "{t} threads: {:.2}x fio's fdatasync rate (mean of before/after {mean:.0} IOPS)",
                c / mean
            );
        }
    }
    if args.recovery_mb > 0 {
        if let Err(e) = recovery_run(&args) {
            eprintln!("recovery run: {e}");
            std::process::exit(1);
        }
    }
    for c in ["copy-a", "copy-b"] {
        let _ = std::fs::remove_dir_all(args.dir.join(c));
    }
}
