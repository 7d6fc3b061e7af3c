//! Online backups and point-in-time restore under the crash tests' workload (multi-table
//! transactions that insert, update and delete, with secondary indexes): a database archiving
//! its log runs three clients, a base backup is taken while they commit, the clients go on past
//! a chosen time and stop, and the database closes. Then:
//! - a restore to the end holds exactly every acknowledged transaction (row by row, integrity of
//!   every index);
//! - a restore to the chosen time holds every transaction acknowledged before the archive's
//!   mark at or before it, none started after that mark, and each one whole;
//! - a damaged archived segment and a missing one each stop the restore with an error naming
//!   the file;
//! - a backup killed with SIGKILL part-way is refused by restore, never restored short.

mod support;

use nvmedb::backup::archive::{open_archiving, unix_micros, Archive};
use nvmedb::backup::{backup, restore, Manifest, Target};
use nvmedb::{Database, Options};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use support::workload::{self, Bounds};
use support::TmpDir;

const SEED: u64 = 42;
const CLIENTS: u64 = 3;

fn options() -> Options {
    let mut o = support::small_page_options();
    // Small segments, so the run fills several and the archive has a chain to restore.
    o.wal_options.segment_bytes = 512 << 10;
    o.wal_options.max_batch_bytes = 128 << 10;
    o
}

/// (client, seq) -> (time the transaction started, time its commit returned), Unix µs.
type Times = BTreeMap<(u64, u64), (i64, i64)>;

fn run_clients(db: &Database, stop: &AtomicBool, times: &Mutex<Times>) {
    let t = workload::Tables::open(db).unwrap();
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let t = &t;
            s.spawn(move || {
                let (mut model, _) = workload::replay(SEED, c, 0);
                while !stop.load(Ordering::Acquire) {
                    let plan = workload::plan(SEED, c, &model);
                    let t0 = unix_micros();
                    workload::run(db, t, &plan).unwrap();
                    let t1 = unix_micros();
                    times.lock().unwrap().insert((c, plan.seq), (t0, t1));
                    workload::apply(&plan, &mut model);
                }
            });
        }
    });
}

fn check(dir: &Path, bounds: &BTreeMap<u64, Bounds>) {
    let db = Database::open(dir, options()).unwrap();
    workload::verify(&db, SEED, bounds).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    db.close().unwrap();
}

#[test]
fn backup_during_a_workload_restores_to_the_end_and_to_a_time() {
    let tmp = TmpDir::new("backup");
    let (src, arch, bk) = (tmp.join("db"), tmp.join("archive"), tmp.join("backup"));
    let db = open_archiving(&src, options(), &arch).unwrap();
    workload::create(&db).unwrap();
    let stop = AtomicBool::new(false);
    let times = Mutex::new(Times::new());
    let mut mid = 0;
    std::thread::scope(|s| {
        s.spawn(|| run_clients(&db, &stop, &times));
        std::thread::sleep(Duration::from_millis(400));
        let r = backup(&src, &bk, &mut |_, _| {}).expect("online backup");
        assert!(r.manifest.end_lsn >= r.manifest.start_lsn);
        assert!(r.manifest.files.iter().any(|(n, _, _)| n.starts_with("wal/")));
        std::thread::sleep(Duration::from_millis(500));
        mid = unix_micros();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Release);
    });
    db.close().unwrap();
    let times = times.into_inner().unwrap();
    let count = |f: &dyn Fn(&(i64, i64)) -> bool| -> BTreeMap<u64, u64> {
        let mut n: BTreeMap<u64, u64> = (0..CLIENTS).map(|c| (c, 0)).collect();
        for ((c, seq), t) in &times {
            if f(t) {
                let e = n.get_mut(c).unwrap();
                *e = (*e).max(seq + 1);
            }
        }
        n
    };
    let all = count(&|_| true);
    assert!(all.values().all(|&n| n > 5), "each client committed some transactions: {all:?}");
    let m = Manifest::read(&bk).unwrap();
    let segs = Archive::new(&arch).segments(m.log_id).unwrap();
    assert!(segs.len() >= 3, "the run filled several segments ({})", segs.len());

    // To the end: every acknowledged transaction, nothing else.
    let end = tmp.join("end");
    let r = restore(&bk, Some(&arch), &end, Target::End, &mut |_, _| {}).unwrap();
    assert!(r.archived_segments > 0);
    let exact = all.iter().map(|(&c, &n)| (c, Bounds { floor: n, ceil: n })).collect();
    check(&end, &exact);

    // To the time in the middle: the archive's last mark at or before it decides.
    let marks = Archive::new(&arch).marks(m.log_id).unwrap();
    let (tm, _) = *marks.iter().rev().find(|(t, _)| *t <= mid).expect("a mark before the time");
    let floor = count(&|&(_, acked)| acked < tm);
    let ceil = count(&|&(started, _)| started <= tm);
    let at = tmp.join("mid");
    restore(&bk, Some(&arch), &at, Target::Time(mid), &mut |_, _| {}).unwrap();
    let bounds = (0..CLIENTS).map(|c| (c, Bounds { floor: floor[&c], ceil: ceil[&c] })).collect();
    check(&at, &bounds);
    assert!(floor.values().sum::<u64>() < all.values().sum::<u64>(), "the time lies inside the run");

    // A damaged segment, then a missing one, stop the restore naming the file.
    let full: Vec<_> = segs.values().filter(|s| !s.partial && s.seq > m.last_seq).collect();
    assert!(full.len() >= 2, "archived segments after the backup's: {}", full.len());
    let victim = &full[0].path;
    let saved = std::fs::read(victim).unwrap();
    let mut bytes = saved.clone();
    bytes[saved.len() / 2] ^= 0x40;
    std::fs::write(victim, &bytes).unwrap();
    let e = restore(&bk, Some(&arch), &tmp.join("damaged"), Target::End, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains(&victim.display().to_string()), "{e}");
    std::fs::write(victim, &saved).unwrap();
    std::fs::remove_file(victim).unwrap();
    let e = restore(&bk, Some(&arch), &tmp.join("gap"), Target::End, &mut |_, _| {}).unwrap_err();
    let name = victim.file_name().unwrap().to_string_lossy().into_owned();
    assert!(e.to_string().contains(&name), "{e}");
    // An LSN before the backup's end is refused (the backup is not consistent there).
    let e = restore(&bk, None, &tmp.join("early"), Target::Lsn(m.start_lsn), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("consistent only from"), "{e}");
}

#[test]
fn a_backup_killed_part_way_is_refused_by_restore() {
    if let Some(role) = support::kill::child_role() {
        // The child: back up, slowly, announcing each file, until killed.
        let (src, to) = role.split_once('|').unwrap();
        let _ = backup(Path::new(src), Path::new(to), &mut |name, _| {
            println!("COPIED {name}");
            std::thread::sleep(Duration::from_millis(300));
        });
        println!("DONE");
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let tmp = TmpDir::new("backup-kill");
    let (src, bk) = (tmp.join("db"), tmp.join("backup"));
    let db = Database::open(&src, options()).unwrap();
    let t = workload::create(&db).unwrap();
    let (mut model, _) = workload::replay(SEED, 0, 0);
    for _ in 0..50 {
        let plan = workload::plan(SEED, 0, &model);
        workload::run(&db, &t, &plan).unwrap();
        workload::apply(&plan, &mut model);
    }
    let role = format!("{}|{}", src.display(), bk.display());
    let child = support::kill::spawn("a_backup_killed_part_way_is_refused_by_restore", &role, &[]);
    let mut copied = 0;
    child
        .kill_after(2, |l| {
            assert_ne!(l, "DONE", "the backup finished before the kill");
            copied += u64::from(l.starts_with("COPIED "));
            copied
        })
        .unwrap();
    assert!(bk.join("data").is_dir(), "the killed backup had started copying");
    let e = restore(&bk, None, &tmp.join("r"), Target::End, &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("not a complete backup"), "{e}");
    assert!(!tmp.join("r").join("catalog.nvdb").exists(), "nothing was restored");
    drop(t);
    db.close().unwrap();
}

/// Commits acknowledged after the backup in the very segment the backup ended in, and then the
/// database closed before that segment filled: the archive holds the segment only as the
/// partial copy left at close, and a restore to the end holds those commits too (it used to
/// keep the backup's shorter copy of the segment and lose them).
#[test]
fn commits_after_the_backup_in_its_last_segment_are_restored_from_the_partial_copy() {
    use nvmedb::{ColumnType, Schema, Value};
    let tmp = TmpDir::new("backup-partial");
    let (src, arch, bk, end) = (tmp.join("db"), tmp.join("archive"), tmp.join("backup"), tmp.join("end"));
    let mut o = support::small_page_options();
    o.wal_options.segment_bytes = 64 << 20; // never fills here
    let db = open_archiving(&src, o.clone(), &arch).unwrap();
    let t = db.create_table("t", Schema::new(vec![("id", ColumnType::Int), ("v", ColumnType::Int)])).unwrap();
    for i in 0..100 {
        t.insert(&[Value::Int(i), Value::Int(i)]).unwrap();
    }
    let r = backup(&src, &bk, &mut |_, _| {}).expect("online backup");
    for i in 100..300 {
        t.insert(&[Value::Int(i), Value::Int(i)]).unwrap();
    }
    t.update_int(&Value::Int(7), 1, 700).unwrap();
    drop(t);
    db.close().unwrap();
    let segs = Archive::new(&arch).segments(r.manifest.log_id).unwrap();
    let last = &segs[&r.manifest.last_seq];
    assert!(last.partial && last.end.is_some_and(|e| e > r.manifest.end_lsn), "{last:?}");
    restore(&bk, Some(&arch), &end, Target::End, &mut |_, _| {}).unwrap();
    let db = Database::open(&end, o).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(t.check_integrity().unwrap(), 300, "every acknowledged insert is restored");
    assert_eq!(t.read(&Value::Int(7), |r| r.int(1)).unwrap(), Some(700));
    drop(t);
    db.close().unwrap();
}
