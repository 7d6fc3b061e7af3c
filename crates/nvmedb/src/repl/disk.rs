//! Where a node keeps its files, behind one seam: every byte a node of `repl/` stores goes
//! through an [`io::Storage`](crate::io::Storage) that a [`Disk`] hands out.
//!
//! Owns: the [`Disk`] trait — the data files (catalog, heap and index files: the database's
//! storage), the file log's copies (`wal/`, and its mirror when duplexed), the replica log
//! (`standby/`) and the node's replication state (`repl/`: epoch, synchronous set, epoch
//! history) — and [`DirDisk`], the real one: subdirectories of the node's data directory, each a
//! [`DirStorage`]. The deterministic simulator's disk (`crate::sim`) hands out views of one
//! crash-simulated storage per node instead, so a simulated power cut drops, keeps or tears
//! every unsynced write of the node, whichever file it went to.
//!
//! Invariants: each call of [`Disk::data`] returns a new handle, whose lock
//! ([`Storage::lock`](crate::io::Storage::lock)) is released when that handle is dropped, so
//! the data files have one opener at a time and a node can wait until a closed database let
//! them go; the other storages are shared.

use super::state::{cluster_in, epoch_in, history_in, ClusterView, History};
use crate::error::Result;
use crate::io::{DirStorage, FileOptions, Storage};
use crate::Options;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The subdirectory of a node's directory that holds its replica log.
pub const REPLICA_DIR: &str = "standby";
/// The subdirectory of a node's directory that holds its replication state.
pub const STATE_DIR: &str = "repl";

/// A node's storages (see the module documentation).
pub trait Disk: Send + Sync {
    /// The data files (a new handle, with its own lock).
    fn data(&self) -> Result<Arc<dyn Storage>>;
    /// The file log's copies: the first, and the mirror when the log is duplexed.
    fn file_log(&self, options: &Options) -> Result<Vec<Arc<dyn Storage>>>;
    /// Removes the file log's copies (a former primary's log became its replica log).
    fn remove_file_log(&self, options: &Options) -> Result<()>;
    /// The replica log's storage.
    fn replica(&self) -> Result<Arc<dyn Storage>>;
    /// The node's replication state.
    fn state(&self) -> Result<Arc<dyn Storage>>;
    /// Where the files are, for messages.
    fn location(&self) -> String;
}

/// A node's files in a directory of the real file system (see the module documentation).
#[derive(Debug, Clone)]
pub struct DirDisk {
    dir: PathBuf,
}

impl DirDisk {
    /// The files of the node whose directory is `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        Self { dir: dir.as_ref().to_path_buf() }
    }

    /// The node's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The disk as the shared handle the replication code takes.
    pub fn shared(dir: impl AsRef<Path>) -> Arc<dyn Disk> {
        Arc::new(Self::new(dir))
    }
}

/// Small files read through the page cache (the replica log, which its apply thread reads back
/// right after writing it, and the state records).
fn buffered() -> FileOptions {
    FileOptions { direct: false, ..FileOptions::default() }
}

impl Disk for DirDisk {
    fn data(&self) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(DirStorage::new(&self.dir, FileOptions::default())?))
    }

    fn file_log(&self, options: &Options) -> Result<Vec<Arc<dyn Storage>>> {
        options.file_log_copies(&self.dir)
    }

    fn remove_file_log(&self, options: &Options) -> Result<()> {
        let wal = self.dir.join("wal");
        for d in [Some(&wal), options.log_mirror(&self.dir).as_ref()].into_iter().flatten() {
            if d.exists() {
                std::fs::remove_dir_all(d).map_err(|e| {
                    crate::error::Error::Io(crate::io::IoError::os(
                        &d.display().to_string(),
                        crate::io::IoOpKind::Setup,
                        0,
                        0,
                        e,
                    ))
                })?;
            }
        }
        Ok(())
    }

    fn replica(&self) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(DirStorage::new(self.dir.join(REPLICA_DIR), buffered())?))
    }

    fn state(&self) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(DirStorage::new(self.dir.join(STATE_DIR), buffered())?))
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }
}

/// The epoch stored in a node's data directory ([`FIRST_EPOCH`](super::state::FIRST_EPOCH) if
/// none was stored).
pub fn read_epoch(dir: &Path) -> Result<u64> {
    epoch_in(DirDisk::new(dir).state()?.as_ref())
}

/// The cluster view stored in a node's data directory, if any.
pub fn read_cluster(dir: &Path) -> Result<Option<ClusterView>> {
    cluster_in(DirDisk::new(dir).state()?.as_ref())
}

/// The history stored in a node's data directory (the default one-entry history if none was
/// stored).
pub fn read_history(dir: &Path) -> Result<History> {
    history_in(DirDisk::new(dir).state()?.as_ref())
}

/// The conformance suite every [`Disk`] passes (a directory, the simulator's disk): give it a
/// disk that holds nothing yet.
pub mod conformance {
    use super::super::replica_log::ReplicaLog;
    use super::super::state::{read_record, write_epoch, write_record};
    use super::*;

    /// Runs every check; panics with the first failure.
    pub fn run(disk: &dyn Disk) {
        the_data_files_have_one_locker_at_a_time(disk);
        state_records_replace_each_other_and_epochs_only_grow(disk);
        the_replica_log_keeps_its_records_across_reopens_and_cuts(disk);
        the_file_log_is_found_and_removed(disk);
        assert!(!disk.location().is_empty());
    }

    fn the_data_files_have_one_locker_at_a_time(disk: &dyn Disk) {
        let a = disk.data().expect("data");
        a.lock().expect("the first opener locks");
        a.lock().expect("locking again through the same handle");
        let b = disk.data().expect("data");
        assert!(b.lock().is_err(), "a second opener is refused while the first holds the lock");
        drop(a);
        b.lock().expect("the lock goes with the handle that held it");
        // Files of the data storage are not files of the others.
        let d = b.open("t1.heap", true).expect("create");
        d.ensure_capacity(4096).expect("grow");
        assert!(b.list().expect("list").contains(&"t1.heap".to_string()));
        assert!(!disk.state().expect("state").exists("t1.heap"));
        b.remove("t1.heap").expect("remove");
        assert!(!b.exists("t1.heap"));
    }

    fn state_records_replace_each_other_and_epochs_only_grow(disk: &dyn Disk) {
        let st = disk.state().expect("state");
        assert_eq!(read_record(st.as_ref(), "r").expect("read"), None);
        for i in 0..5u8 {
            write_record(st.as_ref(), "r", &vec![i; 100 + i as usize]).expect("write");
            assert_eq!(read_record(st.as_ref(), "r").expect("read"), Some(vec![i; 100 + i as usize]));
        }
        let again = disk.state().expect("state");
        assert_eq!(read_record(again.as_ref(), "r").expect("read"), Some(vec![4u8; 104]));
        write_epoch(st.as_ref(), 3).expect("epoch");
        assert!(write_epoch(st.as_ref(), 2).is_err(), "an epoch never goes back");
        write_epoch(st.as_ref(), 3).expect("the same epoch again");
    }

    fn the_replica_log_keeps_its_records_across_reopens_and_cuts(disk: &dyn Disk) {
        let st = disk.replica().expect("replica");
        assert!(!ReplicaLog::exists(st.as_ref()));
        let log = ReplicaLog::open(st.clone(), 1000).expect("open");
        assert!(ReplicaLog::exists(st.as_ref()));
        let mut lsn = 1000;
        for i in 0..50u64 {
            let payload = vec![i as u8; 10 + (i as usize * 37) % 5000];
            assert!(log.append_at(lsn, lsn + 100 + i, 9, &payload).expect("append"));
            lsn += 100 + i + i % 3;
            if i % 7 == 0 {
                log.sync().expect("sync");
            }
        }
        let end = log.sync().expect("sync");
        drop(log);
        let log = ReplicaLog::open(st.clone(), 0).expect("reopen");
        assert_eq!((log.start_lsn(), log.end_lsn()), (1000, end));
        let mut t = log.tail().expect("tail");
        let mut n = 0;
        while let Some(r) = t.next_record().expect("read") {
            assert_eq!(r.payload, vec![n as u8; 10 + (n as usize * 37) % 5000]);
            n += 1;
        }
        assert_eq!(n, 50);
        let cut = log.truncate_after(end - 1).expect("cut");
        assert!(cut < end);
        assert!(log.append_at(cut, cut + 10, 9, b"other history").expect("append"));
        log.sync().expect("sync");
        drop(t);
        drop(log);
        let log = ReplicaLog::open(st.clone(), 0).expect("reopen");
        assert_eq!(log.end_lsn(), cut + 10, "the cut records stay gone");
        log.reset(9000).expect("reset");
        drop(log);
        let log = ReplicaLog::open(st, 0).expect("reopen");
        assert_eq!((log.start_lsn(), log.end_lsn()), (9000, 9000));
    }

    fn the_file_log_is_found_and_removed(disk: &dyn Disk) {
        let options = Options::default();
        let copies = disk.file_log(&options).expect("file log");
        assert!(!copies.is_empty());
        let d = copies[0].open("seg0", true).expect("create");
        d.ensure_capacity(4096).expect("grow");
        assert!(disk.file_log(&options).expect("file log")[0].exists("seg0"));
        disk.remove_file_log(&options).expect("remove");
        assert!(!disk.file_log(&options).expect("file log")[0].exists("seg0"));
    }
}
