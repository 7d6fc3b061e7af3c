//! Dropping and rebuilding tables: a drop removes the table and its files and survives a
//! crash (recovery skips the dropped table's log records); a rebuild (new primary key, new
//! index, or empty = TRUNCATE) switches atomically, survives a crash through the log, and a
//! failed rebuild leaves the old table untouched. Also the key-only scans (`primary_keys`,
//! `index_keys`) and `last_key`.

use nvmedb::io::{MemStorage, Storage};
use nvmedb::{convert_row, BufferSize, ColumnType, Database, Error, Options, Schema, Value};
use std::ops::Bound;
use std::sync::Arc;

fn options() -> Options {
    Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(64 * 4096),
        index_buffer: BufferSize::Bytes(64 * 4096),
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
    fn table_files(&self) -> Vec<String> {
        self.data.list().unwrap().into_iter().filter(|f| f.starts_with('t')).collect()
    }
}

/// pgbench's accounts table before `ALTER TABLE ... ADD PRIMARY KEY`: a hidden row id keys it.
fn hidden_key_schema() -> Schema {
    Schema::new(vec![
        ("rowid", ColumnType::Int),
        ("aid", ColumnType::Int32),
        ("abalance", ColumnType::Int32),
        ("filler", ColumnType::Char(84)),
    ])
    .with_nullable("filler")
    .unwrap()
}

fn load(db: &Database, n: i64) {
    let t = db.create_table("accounts", hidden_key_schema()).unwrap();
    for i in 0..n {
        t.insert(&[Value::Int(i + 1), Value::Int(n - i), Value::Int(i % 7), Value::Null]).unwrap();
    }
}

fn with_aid_key() -> Schema {
    let s = Schema::new(vec![
        ("aid", ColumnType::Int32),
        ("abalance", ColumnType::Int32),
        ("filler", ColumnType::Char(84)),
    ]);
    s.with_nullable("filler").unwrap().with_index("by_balance", "abalance").unwrap()
}

fn rekey(db: &Database) -> nvmedb::Result<nvmedb::Table> {
    db.rebuild_table("accounts", with_aid_key(), |old, load| {
        let to = load.table().schema().clone();
        old.scan(|row| load.insert(&convert_row(&row, &to)).map(|()| true))
    })
}

#[test]
fn drop_table_removes_rows_files_and_handles_and_survives_a_crash() {
    let disk = Disk::new();
    {
        let db = disk.open();
        load(&db, 300);
        db.checkpoint().unwrap();
        let t = db.table("accounts").unwrap();
        // Changes after the checkpoint: recovery would redo them if it did not skip the table.
        for i in 1000..1100 {
            t.insert(&[Value::Int(i), Value::Int(i), Value::Int(0), Value::Null]).unwrap();
        }
        db.create_table("other", Schema::new(vec![("id", ColumnType::Int)])).unwrap();
        db.drop_table("accounts").unwrap();
        let e = t.get(&Value::Int(1)).unwrap_err();
        assert!(matches!(e, Error::Poisoned(_)) && e.to_string().contains("dropped"), "{e}");
        assert!(matches!(db.table("accounts"), Err(Error::NotFound(_))));
        assert!(matches!(db.drop_table("accounts"), Err(Error::NotFound(_))));
        assert_eq!(disk.table_files(), ["t1.heap", "t1.idx"]);
        // Crash: no close, no checkpoint.
    }
    let db = disk.open();
    assert_eq!(db.table_names(), ["other"]);
    assert_eq!(disk.table_files(), ["t1.heap", "t1.idx"]);
    // The name is free again.
    load(&db, 10);
    assert_eq!(db.table("accounts").unwrap().check_integrity().unwrap(), 10);
}

#[test]
fn rebuild_gives_a_new_primary_key_and_index_and_survives_a_crash() {
    let disk = Disk::new();
    {
        let db = disk.open();
        load(&db, 500);
        let old = db.table("accounts").unwrap();
        let t = rekey(&db).unwrap();
        assert!(old.get(&Value::Int(1)).is_err(), "the old handle is dead");
        assert_eq!(t.get(&Value::Int(500)).unwrap().unwrap()[1], Value::Int(0));
        assert_eq!(t.lookup("by_balance", &Value::Int(3)).unwrap().len(), 71);
        assert_eq!(t.check_integrity().unwrap(), 500);
        assert_eq!(disk.table_files(), ["t1.heap", "t1.idx"]);
        // Crash right after the switch.
    }
    let db = disk.open();
    let t = db.table("accounts").unwrap();
    assert_eq!(t.schema(), &with_aid_key());
    assert_eq!(t.check_integrity().unwrap(), 500);
    assert_eq!(t.get(&Value::Int(250)).unwrap().unwrap()[0], Value::Int(250));
}

#[test]
fn a_failed_rebuild_leaves_the_old_table() {
    let disk = Disk::new();
    let db = disk.open();
    load(&db, 50);
    let t = db.table("accounts").unwrap();
    // Two rows with aid 7: the new primary key refuses the second.
    t.insert(&[Value::Int(9999), Value::Int(7), Value::Int(0), Value::Null]).unwrap();
    let e = rekey(&db).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
    assert_eq!(t.check_integrity().unwrap(), 51);
    assert_eq!(disk.table_files(), ["t0.heap", "t0.idx"]);
    drop(db);
    let db = disk.open();
    assert_eq!(db.table("accounts").unwrap().check_integrity().unwrap(), 51);
}

#[test]
fn truncate_is_an_empty_rebuild() {
    let disk = Disk::new();
    let db = disk.open();
    load(&db, 50);
    let t = db.rebuild_table("accounts", hidden_key_schema(), |_, _| Ok(())).unwrap();
    assert_eq!(t.check_integrity().unwrap(), 0);
    assert_eq!(t.last_key().unwrap(), None);
    t.insert(&[Value::Int(1), Value::Int(1), Value::Int(1), Value::Null]).unwrap();
    drop(db);
    assert_eq!(disk.open().table("accounts").unwrap().check_integrity().unwrap(), 1);
}

#[test]
fn key_scans_and_last_key() {
    let db = Disk::new().open();
    load(&db, 200);
    let t = rekey(&db).unwrap();
    assert_eq!(t.last_key().unwrap(), Some(Value::Int(200)));
    let mut keys = Vec::new();
    t.primary_keys(Bound::Included(&Value::Int(10)), Bound::Excluded(&Value::Int(15)), |pk| {
        keys.push(t.read_encoded(pk, |r| r.int(0)).unwrap().unwrap());
        Ok(true)
    })
    .unwrap();
    assert_eq!(keys, [10, 11, 12, 13, 14]);
    // abalance = (200 - aid) % 7 for aid 1..=200.
    let mut by_balance = Vec::new();
    t.index_keys(0, Bound::Excluded(&Value::Int(4)), Bound::Included(&Value::Int(5)), |pk| {
        by_balance.push(t.read_encoded(pk, |r| r.int(1)).unwrap().unwrap());
        Ok(true)
    })
    .unwrap();
    assert_eq!(by_balance.len(), 28);
    assert!(by_balance.iter().all(|&b| b == 5));
    let mut all = 0;
    t.index_keys(0, Bound::Unbounded, Bound::Unbounded, |_| {
        all += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(all, 200);
    // The rightmost leaf emptied by deletes: still found.
    for aid in 150..=200 {
        assert!(t.delete(&Value::Int(aid)).unwrap());
    }
    assert_eq!(t.last_key().unwrap(), Some(Value::Int(149)));
}
