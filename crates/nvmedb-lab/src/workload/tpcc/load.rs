//! The initial database population of TPC-C 5.11 §4.3.3.1, loaded in parallel.
//!
//! Owns: [`load`] and [`LoadReport`]. The work is cut into units (item chunks, one
//! warehouse with its districts, stock chunks, each district's customers with their history,
//! each district's orders with their order lines and new orders); threads take units from a
//! shared counter. Invariants: a unit's rows depend only on (seed, unit), so the content of a
//! load is fixed by its seed whatever the thread count; the load is meant to run with the log
//! off (`Options::wal = false`: no log records are written, a crash during the load means
//! loading again) and ends with a checkpoint (every page written and synced), after which the
//! database is opened with its log for the run.

use super::random::{last_name, NuConstants, TpccRng};
use super::schema::{self, RowCounts, Scale, Tables};
use crate::error::{LabError, Result};
use indicatif::ProgressBar;
use nvmedb::util::sync::MutexExt;
use nvmedb::{Database, Table, Value};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Rows per ITEM or STOCK unit of work.
const CHUNK: u32 = 10_000;

/// What a load did (stored with results, printed by the lab).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// Cardinalities asked for.
    pub scale: Scale,
    /// Seed of the data.
    pub seed: u64,
    /// The NURand constants used for the data (a run picks its own from them, §2.1.6).
    pub constants: NuConstants,
    /// Rows inserted per table.
    pub rows: RowCounts,
    /// Loader threads.
    pub threads: usize,
    /// Seconds from the first insert to the end of the checkpoint.
    pub seconds: f64,
    /// Whether the database logged the load (it should not: see [`LOAD_METHOD`]).
    pub logged: bool,
    /// Unix time of the load, µs (C_SINCE, O_ENTRY_D, H_DATE of the initial rows).
    pub load_time_us: i64,
}

/// How the load is made durable; printed with every load.
pub const LOAD_METHOD: &str =
    "loaded with the log off (Options::wal = false: no log records; a crash during the \
     load means loading again), then checkpointed (every page written and synced) before the run opens the \
     database with its log";

#[derive(Debug, Clone, Copy)]
enum Unit {
    Items { first: u32, last: u32 },
    Warehouse(u32),
    Stock { w: u32, first: u32, last: u32 },
    Customers { w: u32, d: u32 },
    Orders { w: u32, d: u32 },
}

impl Unit {
    /// A seed for this unit's rows that does not depend on which thread loads it.
    fn seed(&self, seed: u64) -> u64 {
        let (tag, a, b) = match *self {
            Unit::Items { first, .. } => (1u64, 0, u64::from(first)),
            Unit::Warehouse(w) => (2, u64::from(w), 0),
            Unit::Stock { w, first, .. } => (3, u64::from(w), u64::from(first)),
            Unit::Customers { w, d } => (4, u64::from(w), u64::from(d)),
            Unit::Orders { w, d } => (5, u64::from(w), u64::from(d)),
        };
        seed ^ (tag << 60)
            ^ (a << 24).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
    }
}

fn units(scale: &Scale) -> Vec<Unit> {
    let chunks = |n: u32| (0..n.div_ceil(CHUNK)).map(move |k| (k * CHUNK + 1, ((k + 1) * CHUNK).min(n)));
    let mut u = Vec::new();
    // The biggest units first, so threads finish together.
    for w in 1..=scale.warehouses {
        for d in 1..=scale.districts {
            u.push(Unit::Orders { w, d });
            u.push(Unit::Customers { w, d });
        }
        u.extend(chunks(scale.items).map(|(first, last)| Unit::Stock { w, first, last }));
        u.push(Unit::Warehouse(w));
    }
    u.extend(chunks(scale.items).map(|(first, last)| Unit::Items { first, last }));
    u
}

/// Per-table insert counters shared by the loader threads.
#[derive(Default)]
struct Counters {
    n: [AtomicU64; 9],
}

struct Loader<'a> {
    t: &'a Tables,
    scale: &'a Scale,
    constants: NuConstants,
    now: i64,
    counters: &'a Counters,
    bar: &'a ProgressBar,
}

impl Loader<'_> {
    fn insert(&self, table: &Table, index: usize, row: &[Value]) -> Result<()> {
        table.insert(row).map_err(LabError::engine(format!("loading table `{}`", table.name())))?;
        if self.counters.n[index].fetch_add(1, Ordering::Relaxed) % 1024 == 1023 {
            self.bar.inc(1024);
        }
        Ok(())
    }

    fn run(&self, unit: Unit, seed: u64) -> Result<()> {
        let mut r = TpccRng::new(unit.seed(seed));
        match unit {
            Unit::Items { first, last } => self.items(&mut r, first, last),
            Unit::Warehouse(w) => self.warehouse(&mut r, w),
            Unit::Stock { w, first, last } => self.stock(&mut r, w, first, last),
            Unit::Customers { w, d } => self.customers(&mut r, w, d),
            Unit::Orders { w, d } => self.orders(&mut r, w, d),
        }
    }

    /// The item table's rows `first..=last` (§4.3.3.1).
    fn items(&self, r: &mut TpccRng, first: u32, last: u32) -> Result<()> {
        for i in first..=last {
            let row = [
                Value::Int(i64::from(i)),
                Value::Int(r.uniform_i64(1, 10_000)),
                Value::Bytes(r.astring(14, 24)),
                Value::Int(r.uniform_i64(100, 10_000)),
                Value::Bytes(r.data_with_original()),
            ];
            self.insert(&self.t.item, 7, &row)?;
        }
        Ok(())
    }

    /// Warehouse `w` and its districts.
    fn warehouse(&self, r: &mut TpccRng, w: u32) -> Result<()> {
        let s = self.scale;
        let mut row = vec![Value::Int(i64::from(w)), Value::Bytes(r.astring(6, 10))];
        row.extend(address(r));
        // W_YTD = Σ D_YTD (300 000.00 with the standard ten districts).
        row.extend([Value::Int(r.uniform_i64(0, 2000)), Value::Int(3_000_000 * i64::from(s.districts))]);
        self.insert(&self.t.warehouse, 0, &row)?;
        for d in 1..=s.districts {
            let mut row = vec![
                Value::Int(schema::district_key(w, d)),
                Value::Int(i64::from(d)),
                Value::Int(i64::from(w)),
                Value::Bytes(r.astring(6, 10)),
            ];
            row.extend(address(r));
            row.extend([
                Value::Int(r.uniform_i64(0, 2000)),
                Value::Int(3_000_000),
                Value::Int(i64::from(s.customers) + 1),
            ]);
            self.insert(&self.t.district, 1, &row)?;
        }
        Ok(())
    }

    /// Warehouse `w`'s stock of items `first..=last`.
    fn stock(&self, r: &mut TpccRng, w: u32, first: u32, last: u32) -> Result<()> {
        for i in first..=last {
            let mut row = vec![
                Value::Int(schema::stock_key(w, i)),
                Value::Int(i64::from(i)),
                Value::Int(i64::from(w)),
                Value::Int(r.uniform_i64(10, 100)),
            ];
            row.extend((0..10).map(|_| Value::Bytes(r.astring(24, 24))));
            row.extend([Value::Int(0), Value::Int(0), Value::Int(0), Value::Bytes(r.data_with_original())]);
            self.insert(&self.t.stock, 8, &row)?;
        }
        Ok(())
    }

    /// District (`w`, `d`)'s customers, each with one history row.
    fn customers(&self, r: &mut TpccRng, w: u32, d: u32) -> Result<()> {
        let s = self.scale;
        for c in 1..=s.customers {
            let last = if c <= s.last_names() {
                last_name(c - 1)
            } else {
                last_name(r.nurand(255, self.constants.c_last, 0, u64::from(s.last_names() - 1)) as u32)
            };
            let first = r.astring(8, 16);
            let name_key = schema::customer_name_key(w, d, &last, &first);
            let mut row = vec![
                Value::Int(schema::customer_key(w, d, c)),
                Value::Int(i64::from(c)),
                Value::Int(i64::from(d)),
                Value::Int(i64::from(w)),
                Value::Bytes(first),
                Value::from("OE"),
                Value::Bytes(last),
            ];
            row.extend(address(r));
            let credit = if r.percent(10) { "BC" } else { "GC" };
            row.extend([
                Value::Bytes(r.nstring(16, 16)),
                Value::Int(self.now),
                Value::from(credit),
                Value::Int(5_000_000),
                Value::Int(r.uniform_i64(0, 5000)),
                Value::Int(-1000),
                Value::Int(1000),
                Value::Int(1),
                Value::Int(0),
                Value::Bytes(r.astring(300, 500)),
                Value::Bytes(name_key),
            ]);
            self.insert(&self.t.customer, 2, &row)?;
            let h = [
                Value::Int(schema::customer_key(w, d, c)),
                Value::Int(i64::from(c)),
                Value::Int(i64::from(d)),
                Value::Int(i64::from(w)),
                Value::Int(i64::from(d)),
                Value::Int(i64::from(w)),
                Value::Int(self.now),
                Value::Int(1000),
                Value::Bytes(r.astring(12, 24)),
            ];
            self.insert(&self.t.history, 3, &h)?;
        }
        Ok(())
    }

    /// District (`w`, `d`)'s orders (customers in a random permutation), their lines, and the undelivered ones' new-order rows.
    fn orders(&self, r: &mut TpccRng, w: u32, d: u32) -> Result<()> {
        let s = self.scale;
        // O_C_ID: a random permutation of the customer ids.
        let mut perm: Vec<u32> = (1..=s.customers).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, r.below(i as u64 + 1) as usize);
        }
        let first_new = s.first_new_order();
        for (idx, &c) in perm.iter().enumerate() {
            let o = idx as i64 + 1;
            let delivered = o < first_new;
            let ol_cnt = r.uniform_i64(5, 15);
            let row = [
                Value::Int(schema::order_key(w, d, o)),
                Value::Int(o),
                Value::Int(i64::from(d)),
                Value::Int(i64::from(w)),
                Value::Int(i64::from(c)),
                Value::Int(self.now),
                Value::Int(if delivered { r.uniform_i64(1, 10) } else { 0 }),
                Value::Int(ol_cnt),
                Value::Int(1),
                Value::Int(schema::order_customer_key(w, d, c, o)),
            ];
            self.insert(&self.t.orders, 5, &row)?;
            for n in 1..=ol_cnt as u32 {
                let row = [
                    Value::Int(schema::order_line_key(w, d, o, n)),
                    Value::Int(o),
                    Value::Int(i64::from(d)),
                    Value::Int(i64::from(w)),
                    Value::Int(i64::from(n)),
                    Value::Int(r.uniform_i64(1, i64::from(s.items))),
                    Value::Int(i64::from(w)),
                    Value::Int(if delivered { self.now } else { 0 }),
                    Value::Int(5),
                    Value::Int(if delivered { 0 } else { r.uniform_i64(1, 999_999) }),
                    Value::Bytes(r.astring(24, 24)),
                ];
                self.insert(&self.t.order_line, 6, &row)?;
            }
            if !delivered {
                let row = [
                    Value::Int(schema::order_key(w, d, o)),
                    Value::Int(o),
                    Value::Int(i64::from(d)),
                    Value::Int(i64::from(w)),
                ];
                self.insert(&self.t.new_order, 4, &row)?;
            }
        }
        Ok(())
    }
}

/// Street 1, street 2, city, state, zip (§4.3.3.1).
fn address(r: &mut TpccRng) -> [Value; 5] {
    [
        Value::Bytes(r.astring(10, 20)),
        Value::Bytes(r.astring(10, 20)),
        Value::Bytes(r.astring(10, 20)),
        Value::Bytes(r.state()),
        Value::Bytes(r.zip()),
    ]
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Creates the nine tables in the empty database `db` and loads them at `scale` with `threads`
/// threads (a progress bar unless `progress` is false), then checkpoints. Open `db` with
/// `Options::wal = false` ([`LOAD_METHOD`]); a logged load works too, only slower, and the
/// report says so.
pub fn load(db: &Database, scale: &Scale, seed: u64, threads: usize, progress: bool) -> Result<LoadReport> {
    scale.validate()?;
    let started = std::time::Instant::now();
    let tables = Tables::create(db)?;
    let constants = NuConstants::for_load(&mut TpccRng::new(seed ^ 0xC0DE));
    let expected = scale.expected_rows().total();
    let bar = crate::measure::progress::bar(progress, expected, "tpcc load (rows; order lines estimated)");
    bar.set_message(format!("{} warehouse(s), log off", scale.warehouses));
    let counters = Counters::default();
    let work = units(scale);
    let next = AtomicUsize::new(0);
    let first_error: Mutex<Option<LabError>> = Mutex::new(None);
    let now = now_us();
    let threads = threads.clamp(1, work.len());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let loader = Loader { t: &tables, scale, constants, now, counters: &counters, bar: &bar };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= work.len() || first_error.locked().is_some() {
                        return;
                    }
                    if let Err(e) = loader.run(work[i], seed) {
                        first_error.locked().get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_value() {
        bar.abandon();
        return Err(e);
    }
    bar.set_message("checkpoint");
    db.checkpoint().map_err(LabError::engine("checkpointing after the TPC-C load"))?;
    bar.finish_and_clear();
    let n = |i: usize| counters.n[i].load(Ordering::Relaxed);
    let rows = RowCounts {
        warehouse: n(0),
        district: n(1),
        customer: n(2),
        history: n(3),
        new_order: n(4),
        orders: n(5),
        order_line: n(6),
        item: n(7),
        stock: n(8),
    };
    Ok(LoadReport {
        scale: *scale,
        seed,
        constants,
        rows,
        threads,
        seconds: started.elapsed().as_secs_f64(),
        logged: db.engine_log().is_some(),
        load_time_us: now,
    })
}

impl LoadReport {
    /// One paragraph for a summary: rows, time, and how the load was made durable.
    pub fn describe(&self) -> String {
        format!(
            "TPC-C load: {} warehouse(s){}, {} rows ({} order lines) in {:.1} s with {} threads, {:.0} rows/s; {}",
            self.scale.warehouses,
            if self.scale.is_standard() { "" } else { " at a reduced scale" },
            self.rows.total(),
            self.rows.order_line,
            self.seconds,
            self.threads,
            self.rows.total() as f64 / self.seconds.max(1e-9),
            if self.logged {
                "the database logged the load (slower than the usual log-off load), then checkpointed"
            } else {
                LOAD_METHOD
            }
        )
    }
}
