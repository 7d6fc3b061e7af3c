//! Failing safe at the edges: a duplexed log whose mirror directory vanished between runs is
//! an error naming it (never a silent switch to one copy), and opens again once the mirror is
//! back.

mod support;

use nvmedb::{ColumnType, Database, Options, Schema, Value};
use support::TmpDir;

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_vanished_log_mirror_is_an_error_naming_it() {
    let tmp = TmpDir::new("mirror-gone");
    let dir = tmp.join("db");
    let mirror = dir.join(nvmedb::db::DEFAULT_LOG_MIRROR_DIR);
    let duplexed = Options { log_mirror_dir: Some(mirror.clone()), ..Options::default() };
    let db = Database::open(&dir, duplexed).unwrap();
    let t = db.create_table("t", Schema::new(vec![("k", ColumnType::Int), ("v", ColumnType::Int)])).unwrap();
    for k in 0..100 {
        t.insert(&[Value::Int(k), Value::Int(k)]).unwrap();
    }
    drop(t);
    db.close().unwrap();
    // The default options find the mirror by its files: delete them all.
    let saved = tmp.join("saved-mirror");
    copy_dir(&mirror, &saved);
    std::fs::remove_dir_all(&mirror).unwrap();
    for options in
        [Options::default(), Options { log_mirror_dir: Some(mirror.clone()), ..Options::default() }]
    {
        let Err(e) = Database::open(&dir, options) else { panic!("one copy of a duplexed log was accepted") };
        let text = e.to_string();
        assert!(text.contains(&mirror.display().to_string()), "the error names the mirror: {text}");
    }
    // With the mirror back, it opens with both copies and holds every row.
    let _ = std::fs::remove_dir_all(&mirror);
    copy_dir(&saved, &mirror);
    let db = Database::open(&dir, Options::default()).unwrap();
    assert_eq!(db.table("t").unwrap().read(&Value::Int(99), |r| r.int(1)).unwrap(), Some(99));
    db.close().unwrap();
}

/// Every path under `dir` with its length and CRC32C (files) or `dir` (directories).
fn listing(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, String> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.insert(p.clone(), "dir".to_string());
            out.extend(listing(&p));
        } else {
            let b = std::fs::read(&p).unwrap();
            out.insert(p.clone(), format!("{} bytes, crc {:08x}", b.len(), nvmedb::util::crc32c(&b)));
        }
    }
    out
}

#[test]
fn a_failed_open_leaves_the_directory_as_it_found_it() {
    let tmp = TmpDir::new("corrupt-catalog");
    let dir = tmp.join("db");
    let db = Database::open(&dir, Options::default()).unwrap();
    db.create_table("t", Schema::new(vec![("k", ColumnType::Int)])).unwrap();
    db.close().unwrap();
    // Only a damaged catalog is left (both of its slots).
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != nvmedb::db::CATALOG_FILE {
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
    let cat = dir.join(nvmedb::db::CATALOG_FILE);
    let mut bytes = std::fs::read(&cat).unwrap();
    for b in bytes.iter_mut().step_by(97) {
        *b ^= 0x5a;
    }
    std::fs::write(&cat, &bytes).unwrap();
    let before = listing(&dir);
    for options in [Options::default(), Options { read_only: true, ..Options::default() }] {
        let Err(e) = Database::open(&dir, options) else { panic!("a damaged catalog opened") };
        assert!(e.to_string().contains(nvmedb::db::CATALOG_FILE), "the error names the catalog: {e}");
        assert_eq!(listing(&dir), before, "the failed open changed {}", dir.display());
    }
}
