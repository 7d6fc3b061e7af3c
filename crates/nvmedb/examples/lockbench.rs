//! Lock manager benchmark.
//!
//! 1. Uncontended: one thread, lock one key X + `release_all`, ns per lock+release (new
//!    transaction and new lock-table entry each time), and the re-entrant fast path.
//! 2. Contended: 2/4/20 threads run transactions that X-lock two keys of a small hot set (in
//!    key order, so no deadlocks), hold them for `--hold-ns` of CPU work, and commit; for each
//!    wait setting: the legacy "poll, then sleep 1 ms" (seed 000's starting point), park at
//!    once (woken on release), "spin 10 µs, then park", and the default "spin 10 µs yielding
//!    the CPU every ~1 µs, then park".
//!
//! ```text
//! cargo run --release -p nvmedb --example lockbench -- [--secs 1] [--hot 8] [--hold-ns 2000] [--threads 2,4,20]
//! ```

use nvmedb::txn::{LockManager, LockMode, LockOptions, LockStats};
use nvmedb::util::Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

struct Args {
    secs: f64,
    hot: u64,
    hold_ns: u64,
    threads: Vec<usize>,
}

fn parse_args() -> Args {
    let mut a = Args { secs: 1.0, hot: 8, hold_ns: 2000, threads: vec![2, 4, 20] };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--secs" => a.secs = v.parse().expect("--secs"),
            "--hot" => a.hot = v.parse().expect("--hot"),
            "--hold-ns" => a.hold_ns = v.parse().expect("--hold-ns"),
            "--threads" => a.threads = v.split(',').map(|t| t.parse().expect("--threads")).collect(),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

fn busy(ns: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_nanos(ns) {
        std::hint::spin_loop();
    }
}

fn uncontended() {
    let lm = LockManager::new(LockOptions::default()).expect("lock manager");
    let n = 2_000_000u64;
    let keys: Vec<[u8; 8]> = (0..1024u64).map(|k| k.to_be_bytes()).collect();
    let t = Instant::now();
    for i in 0..n {
        lm.lock(i, 1, &keys[(i & 1023) as usize], LockMode::Exclusive).expect("lock");
        lm.release_all(i);
    }
    let per = t.elapsed().as_nanos() as f64 / n as f64;
    println!("uncontended: lock X + release_all: {per:.0} ns/op ({:.2} M op/s)", 1e3 / per);
    let t = Instant::now();
    for i in 0..n {
        lm.lock(i, 1, &keys[(i & 1023) as usize], LockMode::Shared).expect("lock");
        lm.lock(i, 1, &keys[(i & 1023) as usize], LockMode::Shared).expect("re-entrant");
        lm.lock(i, 1, &keys[(i & 1023) as usize], LockMode::Exclusive).expect("upgrade");
        lm.release_all(i);
    }
    let per = t.elapsed().as_nanos() as f64 / n as f64;
    println!("uncontended: lock S + re-entrant S + upgrade X + release_all: {per:.0} ns/txn");
    let t = Instant::now();
    for i in 0..n / 8 {
        for k in 0..8 {
            lm.lock(i, 1, &keys[((i * 8 + k) & 1023) as usize], LockMode::Exclusive).expect("lock");
        }
        lm.release_all(i);
    }
    let per = t.elapsed().as_nanos() as f64 / n as f64;
    println!("uncontended: 8 X locks + release_all: {per:.0} ns per lock");
}

fn contended(args: &Args, name: &str, opts: LockOptions, threads: usize) {
    let lm = Arc::new(LockManager::new(opts).expect("lock manager"));
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(1));
    let before: LockStats = lm.stats();
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (lm, stop, next) = (lm.clone(), stop.clone(), next.clone());
            let (hot, hold) = (args.hot, args.hold_ns);
            thread::spawn(move || {
                let mut rng = Rng::new(0x10c4 + i as u64);
                let mut done = 0u64;
                let mut lat = Vec::with_capacity(1 << 16);
                while !stop.load(Relaxed) {
                    let a = rng.below(hot);
                    let b = (a + 1 + rng.below(hot - 1)) % hot;
                    let (a, b) = (a.min(b), a.max(b));
                    let txn = next.fetch_add(1, Relaxed);
                    let s = Instant::now();
                    lm.lock(txn, 1, &a.to_be_bytes(), LockMode::Exclusive).expect("lock a");
                    lm.lock(txn, 1, &b.to_be_bytes(), LockMode::Exclusive).expect("lock b");
                    busy(hold);
                    lm.release_all(txn);
                    if lat.len() < lat.capacity() {
                        lat.push(s.elapsed().as_nanos() as u64);
                    }
                    done += 1;
                }
                (done, lat)
            })
        })
        .collect();
    thread::sleep(Duration::from_secs_f64(args.secs));
    stop.store(true, Relaxed);
    let mut total = 0;
    let mut lat = Vec::new();
    for h in handles {
        let (d, l) = h.join().expect("worker");
        total += d;
        lat.extend(l);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct = |q: f64| lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1))).copied();
    let st = lm.stats().since(&before);
    let q = |x: f64| st.wait_quantile(x).map_or("-".to_string(), |d| format!("{d:?}"));
    println!(
        "{name:<10} {threads:>2} thr: {:>9.0} txn/s | txn p50 {:>6.1} µs p99 {:>7.1} µs | waits {:>7} (spin-granted {:>5.1}%, parked {:>7}, park calls {:>8}) mean wait {:?} wait p50 <{} p99 <{} p99.9 <{}",
        total as f64 / elapsed,
        pct(0.5).unwrap_or(0) as f64 / 1e3,
        pct(0.99).unwrap_or(0) as f64 / 1e3,
        st.waits,
        100.0 * st.spin_grants as f64 / st.waits.max(1) as f64,
        st.parked_waits,
        st.park_calls,
        st.mean_wait().unwrap_or_default(),
        q(0.5),
        q(0.99),
        q(0.999),
    );
}

fn main() {
    let args = parse_args();
    println!(
        "lockbench: {} cores, hot set {} keys, hold {} ns, {} s per run",
        thread::available_parallelism().map_or(0, |n| n.get()),
        args.hot,
        args.hold_ns,
        args.secs
    );
    uncontended();
    let settings: [(&str, LockOptions); 4] = [
        ("sleep-1ms", LockOptions::legacy_sleep_1ms()),
        ("park", LockOptions::park_only()),
        ("spin-10us", LockOptions { spin_yield: false, ..LockOptions::default() }),
        ("spin+yield", LockOptions::default()),
    ];
    for &threads in &args.threads {
        for (name, opts) in &settings {
            contended(&args, name, opts.clone(), threads);
        }
    }
}
