//! Typed columns (32/16-bit integers, doubles, booleans, timestamps, numerics, text), NULLs
//! and unique secondary indexes through the public API: rows and index lookups round-trip,
//! survive a reopen through the log, abort restores them, and a unique index refuses a second
//! row with the same value (NULLs never conflict), also between concurrent transactions.

use nvmedb::io::{MemStorage, Storage};
use nvmedb::{BufferSize, ColumnType, Database, Error, Options, Schema, Value};
use std::sync::Arc;

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(32 * 4096),
        index_buffer: BufferSize::Bytes(32 * 4096),
        ..Options::default()
    }
}

struct Disk {
    data: Arc<dyn Storage>,
    log_a: Arc<dyn Storage>,
    log_b: Arc<dyn Storage>,
}

impl Disk {
    fn new() -> Self {
        Self {
            data: Arc::new(MemStorage::new()),
            log_a: Arc::new(MemStorage::new()),
            log_b: Arc::new(MemStorage::new()),
        }
    }
    fn open(&self) -> Database {
        Database::open_with_storages(
            self.data.clone(),
            Some((self.log_a.clone(), self.log_b.clone())),
            options(),
        )
        .unwrap()
    }
}

fn schema() -> Schema {
    Schema::new(vec![
        ("id", ColumnType::Int32),
        ("small", ColumnType::Int16),
        ("score", ColumnType::Double),
        ("flag", ColumnType::Bool),
        ("at", ColumnType::Timestamp),
        ("amount", ColumnType::Numeric { precision: 12, scale: 2 }),
        ("name", ColumnType::Text(20)),
        ("email", ColumnType::Text(u32::MAX)),
    ])
    .with_nullable("score")
    .unwrap()
    .with_nullable("email")
    .unwrap()
    .with_index("by_score", "score")
    .unwrap()
    .with_unique_index("by_email", "email")
    .unwrap()
}

fn row(id: i64, score: Option<f64>, email: Option<&str>) -> Vec<Value> {
    vec![
        Value::Int(id),
        Value::Int(id % 100),
        score.map_or(Value::Null, Value::Double),
        Value::Bool(id % 2 == 0),
        Value::Timestamp(1_700_000_000_000_000 + id),
        Value::Numeric(i128::from(id) * 100 + 5),
        Value::from(format!("n{id}").as_str()),
        email.map_or(Value::Null, Value::from),
    ]
}

#[test]
fn typed_rows_round_trip_and_survive_reopen() {
    let disk = Disk::new();
    {
        let db = disk.open();
        let t = db.create_table("people", schema()).unwrap();
        for id in 0..200i64 {
            let score = (id % 3 != 0).then_some(id as f64 / 4.0);
            let email = format!("p{id}@x");
            t.insert(&row(id, score, (id % 5 != 0).then_some(email.as_str()))).unwrap();
        }
        assert_eq!(t.check_integrity().unwrap(), 200);
        // Dropped without close: the log carries everything.
    }
    let db = disk.open();
    let t = db.table("people").unwrap();
    assert_eq!(t.schema(), &schema());
    assert_eq!(t.get(&Value::Int(7)).unwrap(), Some(row(7, Some(1.75), Some("p7@x"))));
    assert_eq!(t.get(&Value::Int(15)).unwrap(), Some(row(15, None, None)));
    assert_eq!(t.lookup("by_score", &Value::Double(1.75)).unwrap(), vec![row(7, Some(1.75), Some("p7@x"))]);
    // Every third row has a NULL score: the index holds them too.
    assert_eq!(t.lookup("by_score", &Value::Null).unwrap().len(), 67);
    assert_eq!(t.check_integrity().unwrap(), 200);
    let bad = t.insert(&row(1000, Some(1.0), Some(&"x".repeat(5000)))).unwrap_err();
    assert!(bad.to_string().contains("exceeds"), "{bad}");
}

#[test]
fn unique_index_refuses_duplicates_but_not_nulls() {
    let db = Disk::new().open();
    let t = db.create_table("people", schema()).unwrap();
    t.insert(&row(1, None, Some("a@x"))).unwrap();
    let e = t.insert(&row(2, None, Some("a@x"))).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    assert!(e.to_string().contains("by_email") && e.to_string().contains("a@x"), "{e}");
    t.insert(&row(3, None, None)).unwrap();
    t.insert(&row(4, None, None)).unwrap();
    // An update to a taken value is refused; to its own value it is fine.
    t.insert(&row(5, None, Some("b@x"))).unwrap();
    assert!(matches!(t.update(&row(5, None, Some("a@x"))), Err(Error::AlreadyExists(_))));
    assert!(t.update(&row(5, Some(2.0), Some("b@x"))).unwrap());
    // Inside a transaction; abort frees the value again.
    let mut tx = db.begin();
    tx.insert(&t, &row(6, None, Some("c@x"))).unwrap();
    assert!(matches!(tx.insert(&t, &row(7, None, Some("c@x"))), Err(Error::AlreadyExists(_))));
    tx.abort().unwrap();
    t.insert(&row(7, None, Some("c@x"))).unwrap();
    assert_eq!(t.check_integrity().unwrap(), 5);
}

#[test]
fn concurrent_transactions_cannot_both_take_a_unique_value() {
    let db = Disk::new().open();
    let t = db.create_table("people", schema()).unwrap();
    let barrier = std::sync::Barrier::new(2);
    let results: Vec<bool> = std::thread::scope(|s| {
        let hs: Vec<_> = [10i64, 11]
            .into_iter()
            .map(|id| {
                let (db, t, barrier) = (&db, &t, &barrier);
                s.spawn(move || {
                    let mut tx = db.begin();
                    barrier.wait();
                    match tx.insert(t, &row(id, None, Some("same@x"))) {
                        Ok(()) => {
                            // Hold the value a moment so the other writer has to wait for it.
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            tx.commit().unwrap();
                            true
                        }
                        Err(e) => {
                            assert!(matches!(e, Error::AlreadyExists(_)) || e.is_retryable(), "{e}");
                            false
                        }
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|&&ok| ok).count(), 1, "{results:?}");
    assert_eq!(t.lookup("by_email", &Value::from("same@x")).unwrap().len(), 1);
}

#[test]
fn abort_restores_typed_rows() {
    let db = Disk::new().open();
    let t = db.create_table("people", schema()).unwrap();
    t.insert(&row(1, Some(0.5), Some("a@x"))).unwrap();
    let mut tx = db.begin();
    tx.update(&t, &row(1, None, None)).unwrap();
    tx.insert(&t, &row(2, Some(9.0), Some("b@x"))).unwrap();
    tx.abort().unwrap();
    assert_eq!(t.get(&Value::Int(1)).unwrap(), Some(row(1, Some(0.5), Some("a@x"))));
    assert!(t.get(&Value::Int(2)).unwrap().is_none());
    assert!(t.lookup("by_score", &Value::Null).unwrap().is_empty());
    assert_eq!(t.check_integrity().unwrap(), 1);
}

/// A date column: days since 1970-01-01 in 4 bytes, negative days included; as a primary key
/// (key order is date order) and as an indexed column, through a reopen.
#[test]
fn dates_are_keys_and_indexed_values_and_survive_reopen() {
    let disk = Disk::new();
    let db = disk.open();
    let s =
        Schema::new(vec![("day", ColumnType::Date), ("shipped", ColumnType::Date), ("n", ColumnType::Int32)])
            .with_nullable("shipped")
            .unwrap()
            .with_index("by_shipped", "shipped")
            .unwrap();
    let t = db.create_table("d", s).unwrap();
    for day in [-3650i64, -1, 0, 9_000, 10_957, 2_932_896] {
        let shipped = if day % 2 == 0 { Value::Int(day + 30) } else { Value::Null };
        t.insert(&[Value::Int(day), shipped, Value::Int(1)]).unwrap();
    }
    let e = t.insert(&[Value::Int(i64::from(i32::MAX) + 1), Value::Null, Value::Int(0)]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(ref m) if m.contains("out of range")), "{e}");
    let keys = |t: &nvmedb::Table| {
        let mut v = vec![];
        t.scan(|r| {
            v.push(r.int(0));
            Ok(true)
        })
        .unwrap();
        v
    };
    assert_eq!(keys(&t), [-3650, -1, 0, 9_000, 10_957, 2_932_896], "key order is date order");
    assert_eq!(t.lookup("by_shipped", &Value::Int(9_030)).unwrap().len(), 1);
    assert_eq!(t.last_key().unwrap(), Some(Value::Int(2_932_896)));
    drop(t);
    db.close().unwrap();
    let db = disk.open();
    let t = db.table("d").unwrap();
    assert_eq!(t.schema().columns[0].ty, ColumnType::Date);
    assert_eq!(keys(&t), [-3650, -1, 0, 9_000, 10_957, 2_932_896]);
    assert_eq!(t.get(&Value::Int(-3650)).unwrap().unwrap()[1], Value::Int(-3620));
    assert_eq!(t.check_integrity().unwrap(), 6);
}
