//! Bulk load against ordinary inserts, interleaved: loads `rows` rows of `width`-byte values
//! (keys in order) into a fresh database with `Database::load_table`, then the same rows with
//! `Transaction::insert` in transactions of 10 000 rows (each commit durable), alternating for
//! `reps` repetitions, and prints every time and the median ratio. Both end with
//! `Database::flush` (pages written back) and use `Options::default()`.
//!
//! Run: `cargo run --release -p nvmedb --example bulk_load -- DIR ROWS WIDTH REPS [load]`
//! (e.g. `... /tmp/bl 1000000 1024 3` and `... /tmp/bl 200000 100 3`); a fifth argument
//! `load` times `load_table` alone.

use nvmedb::{ColumnType, Database, Options, Schema, Value};
use std::time::Instant;

/// Rows per transaction of the insert path (the batch `lab peers` gives every engine).
const BATCH: u64 = 10_000;

fn value(k: u64, width: usize) -> Vec<u8> {
    let mut v = vec![0u8; width];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (k as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
    v
}

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Bytes(4096))])
}

fn rows(n: u64, width: usize) -> impl Iterator<Item = Vec<Value>> {
    (0..n).map(move |k| vec![Value::Int(k as i64), Value::Bytes(value(k, width))])
}

fn run(dir: &std::path::Path, bulk: bool, n: u64, width: usize) -> nvmedb::Result<f64> {
    let _ = std::fs::remove_dir_all(dir);
    let db = Database::open(dir, Options::default())?;
    let t0 = Instant::now();
    let t = if bulk {
        db.load_table("t", schema(), rows(n, width), |_| {})?
    } else {
        let t = db.create_table("t", schema())?;
        let mut it = rows(n, width).peekable();
        while it.peek().is_some() {
            let mut tx = db.begin();
            for r in it.by_ref().take(BATCH as usize) {
                tx.insert(&t, &r)?;
            }
            tx.commit()?;
        }
        t
    };
    db.flush()?;
    let s = t0.elapsed().as_secs_f64();
    assert_eq!(
        t.get(&Value::Int(n as i64 - 1))?.map(|r| r[1].clone()),
        Some(Value::Bytes(value(n - 1, width)))
    );
    drop(t);
    drop(db);
    let _ = std::fs::remove_dir_all(dir);
    Ok(s)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> nvmedb::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let dir = std::path::PathBuf::from(arg(1, "nvmedb-bulk-load"));
    let n: u64 = arg(2, "200000").parse().expect("ROWS");
    let width: usize = arg(3, "100").parse().expect("WIDTH");
    let reps: usize = arg(4, "3").parse().expect("REPS");
    let load_only = arg(5, "") == "load";
    let (mut bulk, mut ins) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        // Alternate which goes first, so drift in the machine's load hits both alike.
        let order: &[bool] = match (load_only, rep % 2) {
            (true, _) => &[true],
            (false, 0) => &[true, false],
            (false, _) => &[false, true],
        };
        for &b in order {
            let s = run(&dir, b, n, width)?;
            println!("rep {rep}: {} {n} x {width} B: {s:.2} s", if b { "load_table" } else { "inserts  " });
            if b { &mut bulk } else { &mut ins }.push(s);
        }
    }
    if load_only {
        let b = median(&mut bulk);
        println!("median of {reps}: load_table {b:.2} s ({:.0} rows/s)", n as f64 / b);
        return Ok(());
    }
    let (b, i) = (median(&mut bulk), median(&mut ins));
    println!(
        "median of {reps}: load_table {b:.2} s ({:.0} rows/s), inserts {i:.2} s ({:.0} rows/s): inserts / load_table = {:.2}x",
        n as f64 / b,
        n as f64 / i,
        i / b
    );
    Ok(())
}
