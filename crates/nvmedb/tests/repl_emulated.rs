//! A replicating primary on any storage (`open_primary_with`): data and both log copies on an
//! emulated device profile over the primary's directory on tmpfs (RAM, as fast profiles need),
//! eager log shipping plus data-page mirroring to a standby; commits reach the standby and
//! survive promotion. A directory on a real disk is refused behind a fast profile.

mod repl_common;

use nvmedb::io::{DeviceProfile, DirStorage, EmulatedStorage, FileOptions, Storage};
use nvmedb::repl::{open_primary_with, MirrorConfig, ReplicationMode};
use nvmedb::wal::FileLogOpener;
use nvmedb::Value;
use repl_common::*;
use std::path::Path;
use std::sync::Arc;

fn emulated(dir: &Path, seed: u64) -> Arc<dyn Storage> {
    let inner: Arc<dyn Storage> = Arc::new(DirStorage::new(dir, FileOptions::default()).unwrap());
    Arc::new(EmulatedStorage::new(inner, DeviceProfile::builtin("optane").unwrap(), seed).unwrap())
}

#[test]
fn an_emulated_primary_mirrors_and_ships_to_its_standby() {
    let shm =
        std::path::PathBuf::from("/dev/shm").join(format!("nvmedb-repl-emulated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&shm);
    let (p, s) = (shm.join("primary"), shm.join("standby"));
    create_primary(&p);
    nvmedb::repl::seed_standby(&p, &s).unwrap();
    assert!(DirStorage::new(&p, FileOptions::default()).unwrap().in_ram(), "/dev/shm is tmpfs");
    let sb = standby(&s, false);
    let addr = sb.addr().to_string();
    let log = FileLogOpener { copies: vec![emulated(&p.join("wal"), 2)], options: options().wal_options };
    let (db, rlog) = open_primary_with(
        emulated(&p, 1),
        Box::new(log),
        &p,
        options(),
        config(vec![addr.clone()], ReplicationMode::Eager, fail_after(30_000)),
        Some(MirrorConfig { addr, secret: SECRET.to_vec(), epoch: 1 }),
    )
    .unwrap();
    assert!(db.location().contains("optane"), "the data is on the emulated device: {}", db.location());
    let t = db.table("t").unwrap();
    for k in 0..ROWS {
        assert!(t.update_int(&Value::Int(k), 1, 40 + k).unwrap());
    }
    db.checkpoint().unwrap();
    let st = rlog.status();
    assert!(st.standbys[0].shadow >= st.durable, "eager: {st}");
    let mirrored: u64 = sb
        .status()
        .split("mirrored page writes ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no mirrored page count in {}", sb.status()));
    assert!(mirrored > 0, "no page write was mirrored: {}", sb.status());
    drop(t);
    drop(db);
    drop(rlog);
    let (db2, _) = sb.promote().unwrap();
    for k in 0..ROWS {
        assert_eq!(c1(&db2, k), 40 + k, "row {k} after promotion");
    }
    db2.close().unwrap();
    // A mirroring primary still needs eager mode with the fail policy.
    let e = open_primary_with(
        emulated(&p, 4),
        Box::new(FileLogOpener { copies: vec![emulated(&p.join("wal"), 5)], options: options().wal_options }),
        &p,
        options(),
        config(vec![dead_addr()], ReplicationMode::Lazy, fail_after(100)),
        Some(MirrorConfig { addr: dead_addr(), secret: SECRET.to_vec(), epoch: 1 }),
    )
    .map(|_| ())
    .unwrap_err();
    assert!(e.to_string().contains("eager"), "{e}");
    std::fs::remove_dir_all(&shm).unwrap();
    // A fast profile refuses a directory on disk.
    let disk = tmp("emulated-disk");
    let inner: Arc<dyn Storage> = Arc::new(DirStorage::new(&disk, FileOptions::default()).unwrap());
    if !inner.in_ram() {
        let e = EmulatedStorage::new(inner, DeviceProfile::builtin("optane").unwrap(), 1)
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("must wrap RAM storage"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&disk);
}
