//! `nvmedb inspect` on a real database directory: catalog, a heap page, an index page, a
//! corrupted page, and a directory that is not a database.

use nvmedb::{BufferSize, ColumnType, Database, Options, Schema, Value};
use std::process::Command;

fn nvmedb(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nvmedb")).args(args).output().expect("runs");
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn inspect_shows_catalog_pages_and_corruption() {
    let dir = std::env::temp_dir().join(format!("nvmedb-inspect-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options {
        table_page_size: 4096,
        index_page_size: 4096,
        table_buffer: BufferSize::Bytes(1 << 20),
        index_buffer: BufferSize::Bytes(1 << 20),
        ..Options::default()
    };
    let db = Database::open(&dir, opts).unwrap();
    let schema = Schema::new(vec![
        ("sid", ColumnType::Int),
        ("c1", ColumnType::Int),
        ("data1", ColumnType::Char(100)),
    ])
    .with_index("by_c1", "c1")
    .unwrap();
    let t = db.create_table("t1", schema).unwrap();
    for i in 0..1000 {
        t.insert(&[Value::Int(i), Value::Int(i * 2), Value::from("row")]).unwrap();
    }
    // The directory stays locked while any handle of the database lives.
    drop(t);
    db.close().unwrap();
    let d = dir.to_str().unwrap();

    let (ok, out) = nvmedb(&["inspect", d]);
    assert!(ok, "{out}");
    assert!(
        out.contains("table `t1` (id 0)")
            && out.contains("sid Int  PRIMARY KEY")
            && out.contains("index `by_c1`"),
        "{out}"
    );

    let (ok, out) = nvmedb(&["inspect", d, "--table", "t1", "--heap-page", "2"]);
    assert!(ok, "{out}");
    assert!(out.contains("checksum: ok") && out.contains("type Heap") && out.contains("'row'"), "{out}");

    let (ok, out) = nvmedb(&["inspect", d, "--log", "--limit", "400"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("segment(s)") && out.contains("checkpoint redo from") && out.contains("insert table 0"),
        "{out}"
    );
    assert!(out.contains("commit txn"), "{out}");
    assert!(out.contains("recovery: redo from"), "{out}");

    let (ok, out) = nvmedb(&["inspect", d, "--table", "t1", "--index-page", "0"]);
    assert!(ok && out.contains("BtreeInner") || out.contains("BtreeLeaf"), "{out}");

    // Flip a byte of heap page 2: the page is still shown, with the failed check.
    let heap = dir.join("t0.heap");
    let mut bytes = std::fs::read(&heap).unwrap();
    bytes[2 * 4096 + 500] ^= 0xFF;
    std::fs::write(&heap, bytes).unwrap();
    let (ok, out) = nvmedb(&["inspect", d, "--table", "t1", "--heap-page", "2"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("CHECK FAILED") && out.contains("checksum mismatch") && out.contains("8192"),
        "{out}"
    );

    let (ok, out) = nvmedb(&["inspect", d, "--table", "nope", "--heap-page", "0"]);
    assert!(!ok && out.contains("no table `nope`"), "{out}");
    let (ok, out) = nvmedb(&["inspect", d, "--table", "t1", "--heap-page", "99999"]);
    assert!(!ok && out.contains("does not exist"), "{out}");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (ok, out) = nvmedb(&["inspect", empty.to_str().unwrap()]);
    assert!(!ok && out.contains("not an nvmedb database"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
