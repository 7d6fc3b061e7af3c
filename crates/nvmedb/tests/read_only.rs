//! Read-only opens (`Options::read_only`): several read-only openers share a directory and
//! see its committed rows; every change is refused with `Error::ReadOnly`; a writer excludes
//! them and they exclude a writer; a read-only open creates nothing and refuses a database that
//! needs recovery; and the log's segment files are reused across opens.

mod support;

use nvmedb::io::IoError;
use nvmedb::{ColumnType, Database, Error, Options, Schema, Value};
use support::TmpDir;

fn schema() -> Schema {
    Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)]).with_index("by_v", "v").unwrap()
}

fn ro() -> Options {
    Options { read_only: true, ..Options::default() }
}

/// A database with rows 0..n in table `t`, closed cleanly.
fn create(dir: &std::path::Path, n: i64) {
    let db = Database::open(dir, Options::default()).unwrap();
    let t = db.create_table("t", schema()).unwrap();
    for i in 0..n {
        t.insert(&[Value::Int(i), Value::Int(i * 10)]).unwrap();
    }
    db.close().unwrap();
}

fn count(db: &Database) -> u64 {
    db.table("t").unwrap().check_integrity().unwrap()
}

#[test]
fn read_only_openers_share_a_directory_and_refuse_every_change() {
    let dir = TmpDir::new("ro-share");
    create(dir.path(), 200);
    let a = Database::open(dir.path(), ro()).unwrap();
    let b = Database::open(dir.path(), ro()).expect("a second read-only opener shares the directory");
    for db in [&a, &b] {
        assert_eq!(count(db), 200);
        let t = db.table("t").unwrap();
        assert_eq!(t.get(&Value::Int(7)).unwrap().unwrap()[1], Value::Int(70));
        assert_eq!(t.lookup("by_v", &Value::Int(1990)).unwrap().len(), 1);
    }
    let t = a.table("t").unwrap();
    let refused = |r: nvmedb::Result<()>, what: &str| match r {
        Err(Error::ReadOnly(m)) => assert!(m.contains(&dir.path().display().to_string()), "{what}: {m}"),
        other => panic!("{what} on a read-only database: {other:?}"),
    };
    refused(t.insert(&[Value::Int(1000), Value::Int(1)]), "insert");
    refused(t.update(&[Value::Int(1), Value::Int(1)]).map(|_| ()), "update");
    refused(t.update_int(&Value::Int(1), 1, 5).map(|_| ()), "update_int");
    refused(t.delete(&Value::Int(1)).map(|_| ()), "delete");
    refused(a.create_table("u", schema()).map(|_| ()), "create_table");
    refused(a.drop_table("t"), "drop_table");
    refused(a.rebuild_table("t", schema(), |_, _| Ok(())).map(|_| ()), "rebuild_table");
    let mut tx = a.begin();
    assert_eq!(tx.get(&t, &Value::Int(3)).unwrap().unwrap()[1], Value::Int(30), "reads in a transaction");
    refused(tx.insert(&t, &[Value::Int(1001), Value::Int(1)]), "transaction insert");
    refused(tx.delete(&t, &Value::Int(3)).map(|_| ()), "transaction delete");
    tx.commit().expect("a transaction that changed nothing commits");
    // Nothing changed.
    assert_eq!(count(&b), 200);
    assert!(t.get(&Value::Int(1000)).unwrap().is_none());

    // A writer is excluded while read-only openers hold the directory.
    match Database::open(dir.path(), Options::default()) {
        Err(Error::Io(IoError::Locked { holder, .. })) => assert!(holder.contains("read-only"), "{holder}"),
        other => panic!("a writer opened a directory read-only openers hold: {other:?}"),
    }
    drop(t);
    a.close().unwrap();
    b.close().unwrap();
    // Without them it opens, and read-only openers are excluded while it is open.
    let w = Database::open(dir.path(), Options::default()).expect("the writer opens once the readers left");
    assert!(
        matches!(Database::open(dir.path(), ro()), Err(Error::Io(IoError::Locked { .. }))),
        "a read-only opener got in beside a writer"
    );
    w.table("t").unwrap().insert(&[Value::Int(500), Value::Int(5)]).unwrap();
    w.close().unwrap();
    let r = Database::open(dir.path(), ro()).unwrap();
    assert_eq!(count(&r), 201, "a read-only opener sees what the writer committed");
}

#[test]
fn read_only_open_creates_nothing_and_refuses_a_database_that_needs_recovery() {
    let dir = TmpDir::path_only("ro-missing");
    match Database::open(dir.path(), ro()) {
        Err(Error::NotFound(m)) => assert!(m.contains("read-only"), "{m}"),
        other => panic!("read-only open of a missing database: {other:?}"),
    }
    assert!(!dir.path().exists(), "a read-only open created {}", dir.path().display());

    let dir = TmpDir::new("ro-unclean");
    create(dir.path(), 10);
    {
        // Changes committed (durable in the log) but never checkpointed: dropping the database
        // without closing it leaves the files as a crash would.
        let db = Database::open(dir.path(), Options::default()).unwrap();
        let t = db.table("t").unwrap();
        for i in 10..60 {
            t.insert(&[Value::Int(i), Value::Int(i * 10)]).unwrap();
        }
    }
    match Database::open(dir.path(), ro()) {
        Err(Error::ReadOnly(m)) => assert!(m.contains("did not shut down cleanly"), "{m}"),
        other => panic!("read-only open of a database that needs recovery: {other:?}"),
    }
    // A read-write open recovers; read-only opens work from then on and see every commit.
    Database::open(dir.path(), Options::default()).unwrap().close().unwrap();
    assert_eq!(count(&Database::open(dir.path(), ro()).unwrap()), 60);
}

#[test]
fn log_segments_are_reused_across_opens() {
    let dir = TmpDir::new("wal-reuse");
    create(dir.path(), 10);
    let segment_files = || std::fs::read_dir(dir.join("wal")).unwrap().count();
    let mut counts = Vec::new();
    for round in 0..6i64 {
        let db = Database::open(dir.path(), Options::default()).unwrap();
        db.table("t").unwrap().insert(&[Value::Int(1000 + round), Value::Int(round)]).unwrap();
        let log = db.engine_log().unwrap().record_log().stats();
        if round > 0 {
            assert_eq!(
                (log.segments_created, log.segments_recycled),
                (0, 1),
                "open {round}: the new segment must go into a slot the last checkpoint released"
            );
        }
        db.close().unwrap();
        counts.push(segment_files());
    }
    assert!(counts.iter().all(|&c| c <= 2), "segment files per open: {counts:?}");
    assert!(!dir.join("wal-mirror").exists(), "the default log is single (no mirror directory)");
    assert_eq!(count(&Database::open(dir.path(), ro()).unwrap()), 16);
}
