//! Impossible input gets a typed error, never a panic: a catalog whose checksum is right but
//! whose contents are impossible, rows that no longer match their schema, damaged B+tree and
//! heap pages shown by inspection, and a wrong column asked of a row.

mod support;

use nvmedb::io::{AlignedBuf, MemStorage, Storage};
use nvmedb::table::catalog::{decode_catalog, encode_catalog, CatalogData};
use nvmedb::util::Rng;
use nvmedb::{ColumnType, Database, Error, Options, RowView, Schema, Value};
use std::sync::Arc;

const SLOT: usize = 64 * 1024;

fn options() -> Options {
    Options { table_page_size: 4096, index_page_size: 4096, wal: false, ..Options::default() }
}

fn database() -> Arc<MemStorage> {
    let storage = Arc::new(MemStorage::new());
    let db = Database::open_with_storage(storage.clone(), options()).unwrap();
    let schema =
        Schema::new(vec![("id", ColumnType::Int), ("name", ColumnType::Char(16)), ("v", ColumnType::Int)])
            .with_index("by_v", "v")
            .unwrap();
    let t = db.create_table("t", schema).unwrap();
    for i in 0..2000 {
        t.insert(&[Value::Int(i), Value::from("row"), Value::Int(i * 3)]).unwrap();
    }
    drop(t);
    db.close().unwrap();
    storage
}

/// Rewrites the newest catalog version with `change` applied, with a correct checksum.
fn rewrite_catalog(storage: &MemStorage, change: impl FnOnce(&mut CatalogData)) {
    let dev = storage.open("catalog.nvdb", false).unwrap();
    let mut buf = AlignedBuf::new(2 * SLOT);
    dev.read_at(0, &mut buf).unwrap();
    let seq = |s: usize| u64::from_le_bytes(buf[s * SLOT + 8..s * SLOT + 16].try_into().unwrap());
    let slot = if seq(0) >= seq(1) { 0 } else { 1 };
    let at = slot * SLOT;
    let len = u32::from_le_bytes(buf[at + 16..at + 20].try_into().unwrap()) as usize;
    let mut cat = decode_catalog(&buf[at + 32..at + 32 + len]).unwrap();
    change(&mut cat);
    let payload = encode_catalog(&cat);
    buf[at + 16..at + 20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    buf[at + 20..at + 24].copy_from_slice(&nvmedb::util::crc32c(&payload).to_le_bytes());
    buf[at + 32..at + 32 + payload.len()].copy_from_slice(&payload);
    dev.write_at(0, &buf).unwrap();
}

#[test]
fn an_impossible_catalog_is_corruption() {
    type Change = Box<dyn FnOnce(&mut CatalogData)>;
    let cases: Vec<(&str, Change)> = vec![
        ("Char(u32::MAX)", Box::new(|c| c.tables[0].schema.columns[1].ty = ColumnType::Char(u32::MAX))),
        ("index page size 0", Box::new(|c| c.index_page_size = 0)),
        ("table page size 12345", Box::new(|c| c.table_page_size = 12345)),
        ("primary key out of range", Box::new(|c| c.tables[0].schema.primary_key = 99)),
        ("index column out of range", Box::new(|c| c.tables[0].schema.indexes[0].column = 7)),
        ("table id from the future", Box::new(|c| c.next_table_id = 0)),
    ];
    for (what, change) in cases {
        let storage = database();
        rewrite_catalog(&storage, change);
        match Database::open_with_storage(storage, options()) {
            Err(Error::Corruption { file, detail, .. }) => {
                assert!(file.contains("catalog") && detail.contains("impossible"), "{what}: {file}: {detail}")
            }
            other => panic!("{what}: expected Corruption, got {other:?}"),
        }
    }
}

#[test]
fn rows_that_no_longer_match_their_schema_are_corruption() {
    // `Char(16)` read as `Bytes(16)`: the length prefix is row bytes that make no sense.
    let storage = database();
    rewrite_catalog(&storage, |c| c.tables[0].schema.columns[1].ty = ColumnType::Bytes(16));
    let db = Database::open_with_storage(storage, options()).unwrap();
    let t = db.table("t").unwrap();
    for r in [t.get(&Value::Int(5)).map(|_| ()), t.check_integrity().map(|_| ())] {
        assert!(matches!(r, Err(Error::Corruption { .. })), "{r:?}");
    }
    let mut errors = 0;
    t.scan(|r| {
        errors += usize::from(r.try_values().is_err());
        Ok(true)
    })
    .unwrap();
    assert_eq!(errors, 2000);
}

#[test]
fn a_wrong_column_is_a_typed_error() {
    let s = Schema::new(vec![("id", ColumnType::Int), ("b", ColumnType::Bytes(8))]);
    let mut row = Vec::new();
    s.encode_row("t", &[Value::Int(7), Value::from("ab")], &mut row).unwrap();
    let v = RowView::new(&s, &row);
    assert_eq!(v.try_int(0).unwrap(), 7);
    assert_eq!(v.try_bytes(1).unwrap(), b"ab");
    for r in [
        v.try_int(1).map(|_| ()),
        v.try_int(2).map(|_| ()),
        v.try_bytes(0).map(|_| ()),
        v.try_value(9).map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    }
    let cut = RowView::new(&s, &row[..10]);
    assert!(matches!(cut.try_bytes(1), Err(Error::Corruption { .. })));
    assert!(std::panic::catch_unwind(|| v.int(5)).is_err(), "the unchecked accessor documents its panic");
}

/// Inspection shows damaged pages (flipped bytes in B+tree and heap pages, seeded) with what is
/// wrong, and never panics.
#[test]
fn inspecting_damaged_pages_does_not_panic() {
    let storage = database();
    let run = support::Replay::from_env(17, 200);
    let mut rng = Rng::new(run.seed);
    for (file, pages) in [("t0.idx", 4u64), ("t0.heap", 8)] {
        let dev = storage.open(file, false).unwrap();
        for _ in 0..run.iters {
            let page = rng.below(pages);
            let mut buf = AlignedBuf::new(4096);
            dev.read_at(page * 4096, &mut buf).unwrap();
            let orig = buf.to_vec();
            for _ in 0..rng.range(1, 40) {
                let at = 32 + rng.below(4096 - 32) as usize;
                buf[at] = rng.next_u64() as u8;
            }
            dev.write_at(page * 4096, &buf).unwrap();
            let shown = nvmedb::inspect::describe_page(storage.as_ref(), file, 4096, page, None)
                .unwrap_or_else(|e| panic!("{file} page {page}: {e}"));
            assert!(shown.contains("CHECK FAILED"), "{shown}");
            buf.copy_from_slice(&orig);
            dev.write_at(page * 4096, &buf).unwrap();
        }
    }
}
