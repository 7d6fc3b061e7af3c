//! A checkpoint on the user's default path: `Options::default()` (log on, durable commits,
//! the default torn-page protection) with buffers that hold the whole table.
//!
//! ```sh
//! cargo run --release -p nvmedb --example checkpoint_bench -- DIR ROWS ROW_BYTES [ROUNDS]
//! ```
//! Loads `ROWS` rows of about `ROW_BYTES` bytes into `DIR` unless it already holds them (in
//! transactions of 10 000 rows), then, `ROUNDS` times (default 3): opens the database (which
//! checkpoints), changes an integer column of every row in transactions of 1 000 rows (so each
//! heap page's first change after that checkpoint), prints the log bytes per changed row, then
//! times `Database::checkpoint` (every dirty page written and synced) and prints its seconds,
//! the pages it wrote and their MiB/s (and what the double-write area did); then closes the
//! database.

use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use std::time::Instant;

fn log_bytes() -> u64 {
    nvmedb::wal::log_volume().bytes.iter().sum()
}

fn main() -> nvmedb::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: checkpoint_bench DIR ROWS ROW_BYTES [ROUNDS]");
        std::process::exit(2);
    }
    let dir = &args[0];
    let rows: i64 = args[1].parse().expect("ROWS");
    let width: usize = args[2].parse().expect("ROW_BYTES");
    let rounds: usize = args.get(3).map_or(3, |s| s.parse().expect("ROUNDS"));
    let data = rows as u64 * (width as u64 + 32);
    // The only change from the defaults: buffers that hold the table, so that the checkpoint
    // writes every page the round changed (and evictions write none).
    let opts = Options {
        table_buffer: BufferSize::Bytes(data * 2 + (64 << 20)),
        index_buffer: BufferSize::Bytes(data / 2 + (64 << 20)),
        ..Options::default()
    };
    {
        let db = Database::open(dir, opts.clone())?;
        let t = match db.table("t") {
            Ok(t) => t,
            Err(_) => db.create_table(
                "t",
                Schema::new(vec![
                    ("id", ColumnType::Int),
                    ("n", ColumnType::Int),
                    ("pad", ColumnType::Bytes(8192)),
                ]),
            )?,
        };
        if t.last_key()? != Some(Value::Int(rows - 1)) {
            let t0 = Instant::now();
            for from in (0..rows).step_by(10_000) {
                let mut tx = db.begin();
                for k in from..(from + 10_000).min(rows) {
                    tx.insert(&t, &[Value::Int(k), Value::Int(0), Value::Bytes(vec![k as u8; width])])?;
                }
                tx.commit()?;
            }
            println!("loaded {rows} rows of {width} B in {:.1} s", t0.elapsed().as_secs_f64());
        }
        db.close()?;
    }
    for round in 1..=rounds {
        let t0 = Instant::now();
        let db = Database::open(dir, opts.clone())?;
        let opened = t0.elapsed().as_secs_f64();
        let t = db.table("t")?;
        let (log0, t1) = (log_bytes(), Instant::now());
        for from in (0..rows).step_by(1000) {
            let mut tx = db.begin();
            for k in from..(from + 1000).min(rows) {
                tx.update_int(&t, &Value::Int(k), 1, round as i64)?;
            }
            tx.commit()?;
        }
        let updated = t1.elapsed().as_secs_f64();
        let log = log_bytes() - log0;
        let w0 = db.buffer_stats().0.writes + db.buffer_stats().1.writes;
        let t2 = Instant::now();
        db.checkpoint()?;
        let secs = t2.elapsed().as_secs_f64();
        let pages = db.buffer_stats().0.writes + db.buffer_stats().1.writes - w0;
        let mib = pages as f64 * db.table_pool().page_size() as f64 / (1 << 20) as f64;
        println!(
            "round {round}: open {opened:.2} s; {rows} rows changed in {updated:.2} s, {:.1} log B/row; \
             checkpoint {secs:.3} s, {pages} pages ({mib:.1} MiB, {:.0} MiB/s)",
            log as f64 / rows as f64,
            mib / secs
        );
        if let Some(dw) = db.doublewrite_stats() {
            println!(
                "  double-write area ({} MiB) since the open: {} writes of {} pages ({:.1} MiB), {} syncs, \
                 {} data syncs before reusing a region",
                dw.area_bytes >> 20,
                dw.writes,
                dw.pages,
                dw.bytes as f64 / (1 << 20) as f64,
                dw.syncs,
                dw.data_syncs
            );
        }
        db.close()?;
    }
    Ok(())
}
