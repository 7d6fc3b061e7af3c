//! A replicating primary on any storage (`open_primary_with`): data and both log copies on an
//! emulated device profile over the primary's directory on tmpfs (RAM, as fast profiles need),
//! eager log shipping plus data-page mirroring to a standby that is on emulated devices of its
//! own (`Standby::start_on`: its data, and its replica log's writes); commits reach the standby
//! and survive promotion, which opens the database on the standby's emulated device. A directory
//! on a real disk is refused behind a fast profile, for the primary and for the standby's log.

mod repl_common;

use nvmedb::io::{
    DeviceProfile, DirStorage, EmulatedDevice, EmulatedStorage, FileOptions, MemDevice, Storage,
};
use nvmedb::repl::{
    open_primary_with, MirrorConfig, ReplicationMode, Standby, StandbyConfig, StandbyDevices,
};
use nvmedb::wal::FileLogOpener;
use nvmedb::Value;
use repl_common::*;
use std::path::Path;
use std::sync::Arc;

fn emulated(dir: &Path, seed: u64) -> Arc<dyn Storage> {
    let inner: Arc<dyn Storage> = Arc::new(DirStorage::new(dir, FileOptions::default()).unwrap());
    Arc::new(EmulatedStorage::new(inner, DeviceProfile::builtin("optane").unwrap(), seed).unwrap())
}

fn log_device(seed: u64) -> Arc<EmulatedDevice<MemDevice>> {
    Arc::new(EmulatedDevice::new(
        MemDevice::new("standby log"),
        DeviceProfile::builtin("optane").unwrap(),
        seed,
    ))
}

fn emulated_standby(dir: &Path, seed: u64) -> nvmedb::Result<Standby> {
    Standby::start_on(
        StandbyConfig {
            listen: "127.0.0.1:0".into(),
            data_dir: dir.to_path_buf(),
            secret: SECRET.to_vec(),
            apply: false,
            options: options(),
        },
        StandbyDevices { data: emulated(dir, seed), log: Some(log_device(seed + 1)) },
    )
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
    let sb = emulated_standby(&s, 10).unwrap();
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
    assert!(
        db2.location().contains("optane"),
        "promoted on the standby's emulated device: {}",
        db2.location()
    );
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
        let cfg = StandbyConfig {
            listen: "127.0.0.1:0".into(),
            data_dir: disk.to_path_buf(),
            secret: SECRET.to_vec(),
            apply: false,
            options: options(),
        };
        let e = Standby::start_on(cfg, StandbyDevices { data: inner.clone(), log: Some(log_device(20)) })
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("must wrap RAM"), "{e}");
        let e = EmulatedStorage::new(inner, DeviceProfile::builtin("optane").unwrap(), 1)
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("must wrap RAM storage"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&disk);
}
