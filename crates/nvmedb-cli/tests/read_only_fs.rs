//! A database on a read-only file system, and a copy without its lock file: `nvmedb inspect`
//! and `Options::read_only` open it and read every row, and nothing in it changes. The
//! directory is bind-mounted read-only in a private mount namespace (`unshare -m`, which needs
//! root: CI runs as root; elsewhere the test says SKIPPED, or fails under `CI`).

use nvmedb::{ColumnType, Database, Options, Schema, Value};
use nvmedb_testkit::{kill::child_role, TmpDir};
use std::process::Command;

const ROWS: i64 = 500;

#[test]
fn inspect_and_read_only_opens_work_on_a_read_only_file_system() {
    if let Some(dir) = child_role() {
        // The child, inside the namespace: the engine's read-only open.
        let db = Database::open(&dir, Options { read_only: true, ..Options::default() })
            .unwrap_or_else(|e| panic!("read-only open of {dir}: {e}"));
        let t = db.table("t").unwrap();
        let mut n = 0;
        t.scan(|r| {
            assert_eq!(r.int(1), r.int(0) * 3);
            n += 1;
            Ok(true)
        })
        .unwrap();
        let e = t.insert(&[Value::Int(-1), Value::Int(0)]).unwrap_err();
        println!("READ {n} rows; insert refused: {e}");
        return;
    }
    let tmp = TmpDir::new("ro-fs");
    let (dir, mnt) = (tmp.join("db"), tmp.join("mnt"));
    let db = Database::open(&dir, Options::default()).unwrap();
    let t = db.create_table("t", Schema::new(vec![("k", ColumnType::Int), ("v", ColumnType::Int)])).unwrap();
    for k in 0..ROWS {
        t.insert(&[Value::Int(k), Value::Int(k * 3)]).unwrap();
    }
    drop(t);
    db.close().unwrap();
    // A copy as a backup leaves it: no lock file.
    std::fs::remove_file(dir.join(nvmedb::io::LOCK_FILE)).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let ns = Command::new("unshare").args(["-m", "true"]).output();
    if !ns.as_ref().is_ok_and(|o| o.status.success()) {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(!ci, "unshare -m (root) is needed to mount a read-only file system: {ns:?}");
        eprintln!("SKIPPED: cannot make a private mount namespace here (unshare -m needs root)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "set -e; mount --bind '{d}' '{m}'; mount -o remount,bind,ro '{m}'; \
         if touch '{m}/probe' 2>/dev/null; then echo 'NOT READ-ONLY'; exit 3; fi; \
         '{nv}' inspect '{m}'; '{nv}' inspect '{m}' --log --limit 5; \
         NVMEDB_TEST_CHILD='{m}' '{exe}' inspect_and_read_only_opens_work_on_a_read_only_file_system --exact --nocapture",
        d = dir.display(),
        m = mnt.display(),
        nv = env!("CARGO_BIN_EXE_nvmedb"),
        exe = exe.display()
    );
    let before = listing(&dir);
    let out = Command::new("unshare").args(["-m", "sh", "-c", &script]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("table `t`"), "inspect showed the catalog: {text}");
    assert!(text.contains("segment(s)"), "inspect --log read the log: {text}");
    assert!(text.contains(&format!("READ {ROWS} rows; insert refused")), "{text}");
    assert_eq!(listing(&dir), before, "nothing in the directory changed");
}

fn listing(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = walk(dir).into_iter().collect();
    v.sort();
    v
}

fn walk(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push((p.display().to_string(), e.metadata().unwrap().len()));
        }
    }
    out
}
