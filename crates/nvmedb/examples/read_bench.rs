//! Point reads on the user's default path: `Options::default()` (log on, durable commits) with
//! buffers that hold the whole table, one reader thread, while nothing else runs (`--writer`
//! adds one thread committing auto-commit updates of other keys meanwhile, and `--txn` keeps an
//! explicit transaction open during the reads, as an application with transactions would).
//!
//! ```sh
//! cargo run --release -p nvmedb --example read_bench -- DIR ROWS VALUE_BYTES [SECONDS] [--writer] [--txn]
//! ```
//! Loads `ROWS` rows of `VALUE_BYTES`-byte values into `DIR` unless it already holds them (in
//! transactions of 10 000 rows), reads every row once to warm the buffers, then prints single
//! reads (`Table::read`) and batched reads (`Table::read_many`, 16 keys) per second of wall
//! time and per CPU-second of the reading thread, then one full scan (`Table::scan`) in rows
//! per second.

use nvmedb::util::Rng;
use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use std::time::{Duration, Instant};

fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn main() -> nvmedb::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    if pos.len() < 3 {
        eprintln!("usage: read_bench DIR ROWS VALUE_BYTES [SECONDS] [--writer] [--txn]");
        std::process::exit(2);
    }
    let dir = pos[0];
    let rows: u64 = pos[1].parse().expect("ROWS");
    let width: usize = pos[2].parse().expect("VALUE_BYTES");
    let secs: f64 = pos.get(3).map_or(3.0, |s| s.parse().expect("SECONDS"));
    let (writer, txn) = (args.iter().any(|a| a == "--writer"), args.iter().any(|a| a == "--txn"));
    let data = rows * (width as u64 + 16);
    // The only change from the defaults: buffers that hold the table (an in-memory benchmark).
    let opts = Options {
        table_buffer: BufferSize::Bytes(data * 2 + (64 << 20)),
        index_buffer: BufferSize::Bytes(data / 2 + (64 << 20)),
        ..Options::default()
    };
    let db = Database::open(dir, opts)?;
    let t = match db.table("kv") {
        Ok(t) => t,
        Err(_) => {
            db.create_table("kv", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Bytes(4096))]))?
        }
    };
    if t.last_key()? != Some(Value::Int(rows as i64 - 1)) {
        let t0 = Instant::now();
        for from in (0..rows).step_by(10_000) {
            let mut tx = db.begin();
            for k in from..(from + 10_000).min(rows) {
                tx.insert(&t, &[Value::Int(k as i64), Value::Bytes(vec![k as u8; width])])?;
            }
            tx.commit()?;
        }
        eprintln!("loaded {rows} rows in {:.1} s", t0.elapsed().as_secs_f64());
    }
    for k in 0..rows {
        t.read(&Value::Int(k as i64), |_| ())?;
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| -> nvmedb::Result<()> {
        if writer {
            s.spawn(|| {
                let mut rng = Rng::new(1);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let k = rng.below(rows) as i64;
                    t.update(&[Value::Int(k), Value::Bytes(vec![k as u8; width])]).expect("update");
                }
            });
        }
        let _open = if txn {
            let mut tx = db.begin();
            tx.update(&t, &[Value::Int(0), Value::Bytes(vec![0; width])])?;
            Some(tx)
        } else {
            None
        };
        let mut rng = Rng::new(7);
        let mut run = |many: bool| -> nvmedb::Result<(f64, f64)> {
            let (t0, c0) = (Instant::now(), thread_cpu_s());
            let mut n = 0u64;
            let mut keys = Vec::with_capacity(16);
            while t0.elapsed() < Duration::from_secs_f64(secs) {
                for _ in 0..64 {
                    if many {
                        keys.clear();
                        keys.extend((0..16).map(|_| Value::Int(1 + rng.below(rows - 1) as i64)));
                        t.read_many(&keys, |_, r| assert!(r.is_some()))?;
                        n += 16;
                    } else {
                        let k = 1 + rng.below(rows - 1) as i64;
                        assert!(t.read(&Value::Int(k), |r| r.int(0) == k)? == Some(true));
                        n += 1;
                    }
                }
            }
            Ok((n as f64 / t0.elapsed().as_secs_f64(), n as f64 / (thread_cpu_s() - c0)))
        };
        let (one, one_cpu) = run(false)?;
        let (many, many_cpu) = run(true)?;
        // One full scan (`Table::scan`), rows per second.
        let (t0, c0) = (Instant::now(), thread_cpu_s());
        let mut scanned = 0u64;
        t.scan(|_| {
            scanned += 1;
            Ok(true)
        })?;
        let (scan, scan_cpu) =
            (scanned as f64 / t0.elapsed().as_secs_f64(), scanned as f64 / (thread_cpu_s() - c0));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        println!(
            "{rows}x{width}B writer={writer} txn={txn}: read {one:.0}/s ({one_cpu:.0} per CPU-s), \
             read_many {many:.0}/s ({many_cpu:.0} per CPU-s), scan {scan:.0} rows/s ({scan_cpu:.0} per CPU-s)"
        );
        Ok(())
    })
}
