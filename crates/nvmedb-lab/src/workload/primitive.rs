//! The primitive workload of seed 000 §4.3 (and seed 001 §3.3): the table, its bulk load, the
//! buffer pre-warm and the two transactions.
//!
//! Owns: [`schema`], [`table_name`], [`load`], [`prewarm`], [`run_select`], [`run_update`] and
//! [`random_update`].
//! Every transaction goes through one of those two functions. Invariants: SIDs are
//! `0..rows_per_table` in every table; a loaded row's C1 equals its SID.

use crate::error::{LabError, Result};
use crate::measure::progress;
use nvmedb::util::sync::MutexExt;
use nvmedb::util::Rng;
use nvmedb::{ColumnType, Database, Schema, Table, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Column positions of the primitive table.
pub const COL_SID: usize = 0;
/// Column C1, the one UPDATE changes.
pub const COL_C1: usize = 1;
/// Column Data1.
pub const COL_DATA1: usize = 2;
/// Length of Data1 (char(4096)).
pub const DATA1_BYTES: u32 = 4096;

/// The seed 000 table: SID int primary key, C1 int, Data1 char(4096).
pub fn schema() -> Schema {
    Schema::new(vec![
        ("sid", ColumnType::Int),
        ("c1", ColumnType::Int),
        ("data1", ColumnType::Char(DATA1_BYTES)),
    ])
}

/// Name of table `i`.
pub fn table_name(i: usize) -> String {
    format!("prim{i:02}")
}

/// The row with key `sid` as loaded.
fn row(sid: u64) -> Vec<Value> {
    let fill = b'a' + (sid % 26) as u8;
    vec![Value::Int(sid as i64), Value::Int(sid as i64), Value::Bytes(vec![fill; DATA1_BYTES as usize])]
}

/// Creates `tables` tables and inserts `rows` rows into each (one loader thread per table, at
/// most `threads` at a time), showing a progress bar when `show_progress`. Flushes at the end.
pub fn load(db: &Database, tables: usize, rows: u64, threads: usize, show_progress: bool) -> Result<()> {
    let handles: Vec<Table> = (0..tables)
        .map(|i| db.create_table(&table_name(i), schema()).map_err(LabError::engine("creating a table")))
        .collect::<Result<_>>()?;
    let bar = progress::bar(show_progress, rows * tables as u64, "loading rows");
    bar.set_message(db.location());
    let next = AtomicU64::new(0);
    let first_error: Mutex<Option<LabError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, tables.max(1)) {
            s.spawn(|| loop {
                let t = next.fetch_add(1, Ordering::Relaxed) as usize;
                if t >= handles.len() {
                    return;
                }
                for sid in 0..rows {
                    if let Err(e) = handles[t].insert(&row(sid)) {
                        let mut slot = first_error.locked();
                        slot.get_or_insert(LabError::engine(format!(
                            "loading row {sid} of {}",
                            table_name(t)
                        ))(e));
                        return;
                    }
                    if sid % 256 == 255 {
                        bar.inc(256);
                    }
                }
                bar.inc(rows % 256);
            });
        }
    });
    bar.finish_and_clear();
    if let Some(e) = first_error.into_value() {
        return Err(e);
    }
    db.flush().map_err(LabError::engine("flushing the loaded data"))
}

/// Reads the first `share` (0..=1) of each table's rows in heap order, one thread per table, so
/// a large buffer starts full rather than filling during the warm-up.
pub fn prewarm(tables: &[Table], rows: u64, share: f64) -> Result<()> {
    let want = ((rows as f64) * share.clamp(0.0, 1.0)).ceil() as u64;
    if want == 0 {
        return Ok(());
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = tables
            .iter()
            .map(|t| {
                s.spawn(move || {
                    let mut n = 0u64;
                    t.scan(|_| {
                        n += 1;
                        Ok(n < want)
                    })
                    .map_err(LabError::engine(format!("pre-warming the buffer with {}", t.name())))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Err(LabError::WorkerPanicked { what: "pre-warming".into() }))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// One single-row SELECT transaction: reads the row with key `sid` and touches C1 and Data1
/// (zero copy). Returns false if the row is missing.
pub fn run_select(table: &Table, sid: i64) -> Result<bool, nvmedb::Error> {
    let got =
        table.read(&Value::Int(sid), |v| v.int(COL_C1).wrapping_add(i64::from(v.bytes(COL_DATA1)[0])))?;
    Ok(got.is_some())
}

/// One single-row UPDATE transaction: sets C1 of the row with key `sid`. With the database's
/// log on, this is a durable transaction: it returns after its commit record is durable
/// (group commit), holding the row's lock until then. Returns false if the row is missing.
pub fn run_update(table: &Table, sid: i64, value: i64) -> Result<bool, nvmedb::Error> {
    table.update_int(&Value::Int(sid), COL_C1, value)
}

/// A closed-loop client's step: [`run_update`] of a random row of a random one of `tables` (rows
/// `0..rows`) to a random value. Returns 1 when it committed, 0 when it failed in a way to retry
/// (a deadlock victim, a lock timeout), which counts as no operation.
pub fn random_update(tables: &[Table], rows: u64, rng: &mut Rng) -> Result<u64> {
    let t = &tables[rng.below(tables.len() as u64) as usize];
    let sid = rng.below(rows) as i64;
    match run_update(t, sid, rng.next_u64() as i64 >> 1) {
        Ok(_) => Ok(1),
        Err(e) if e.is_retryable() => Ok(0),
        Err(e) => Err(LabError::engine(format!("an UPDATE of row {sid} of {}", t.name()))(e)),
    }
}
