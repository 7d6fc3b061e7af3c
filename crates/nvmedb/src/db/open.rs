//! Opening a database directory: [`Database::open`] and the openers over storages.
//!
//! Owns: what a directory must hold to be opened or created, the log kind it keeps, recovery
//! of a crashed database opened without a log, starting a new log after lost records, and
//! removing what a failed open made. Invariants: a directory holding files but no catalog is
//! refused; a database is opened only with the log kind it keeps; a failed create leaves
//! nothing behind (what existed was empty), and a failed open of an existing database leaves
//! its directory as it found it (no new lock file or log directory).

use super::{Database, FastLogOptions, LogKind, Options, CATALOG_FILE};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::wal::{FileLogOpener, LogOpener};
use std::sync::Arc;

/// Removes everything inside `dir` (a directory this open found empty and then filled).
fn clear_dir(dir: &std::path::Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

impl Database {
    /// Opens (or creates, per `options.create_if_missing`) the database in directory `path`,
    /// with O_DIRECT files doing their I/O through io_uring (pread/pwrite where io_uring is
    /// unavailable).
    ///
    /// - One opener at a time: the directory is locked (an advisory lock on its `LOCK` file)
    ///   while any handle of this open lives; a second open, in another process or in this one,
    ///   fails with [`IoError::Locked`](crate::io::IoError::Locked) naming the holder's process.
    /// - Creating: a missing directory, or an empty one, becomes a new database when
    ///   `create_if_missing` is on (the default). A directory that holds files but no catalog
    ///   is not a database and is refused, and an open that fails while creating removes what it
    ///   created: a failed open leaves nothing behind.
    /// - A database that keeps a log and did not shut down cleanly is recovered from it even
    ///   when `options.wal` is off (then the log is replayed and checkpointed first, and the
    ///   database continues without one); the log is never ignored.
    pub fn open(path: impl AsRef<std::path::Path>, options: Options) -> Result<Self> {
        let path = path.as_ref();
        let (existed, is_db) = Self::existing_database(path, &options)?;
        if options.read_only {
            if !is_db {
                return Err(Error::NotFound(format!(
                    "no database at {} (a read-only open never creates one)",
                    path.display()
                )));
            }
            // A failed read-only open leaves no lock file behind either.
            let lock = path.join(crate::io::LOCK_FILE);
            let had_lock = lock.exists();
            let opened = Self::open_dir(path, options);
            if opened.is_err() && !had_lock {
                let _ = std::fs::remove_file(&lock);
            }
            return opened;
        }
        let has_files = |d: &std::path::Path| std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some());
        let (file_log, fast_log) = (path.join("wal"), path.join("xlog"));
        if options.wal {
            // A database keeps one kind of log: opening it with the other would start a new,
            // empty log and silently skip the records the existing one still holds.
            let (other, dir) = match options.log {
                LogKind::Fast(_) => ("a file log", &file_log),
                LogKind::File => ("a fast log", &fast_log),
            };
            if has_files(dir) {
                return Err(Error::Config {
                    key: "log".into(),
                    detail: format!(
                        "{} keeps {other} in {}; open it with that log kind (to switch, close the database \
                         cleanly and move that directory away)",
                        path.display(),
                        dir.display()
                    ),
                });
            }
        } else if is_db && (has_files(&file_log) || has_files(&fast_log)) {
            // Without a log, nothing would replay what the log holds beyond the last checkpoint:
            // recover with it first (a cleanly closed database has nothing to replay).
            let log = match (&options.log, has_files(&fast_log)) {
                (LogKind::Fast(f), true) => LogKind::Fast(f.clone()),
                (_, true) => LogKind::Fast(FastLogOptions::default()),
                (_, false) => LogKind::File,
            };
            Self::open(path, Options { wal: true, log, ..options.clone() })?.close()?;
        }
        let mirror = options.log_mirror(path);
        let mirror_existed = mirror.as_ref().is_some_and(|m| m.exists());
        let mirror_was_empty = mirror.as_ref().is_none_or(|m| !has_files(m));
        let ring = match &options.log {
            LogKind::Fast(f) => Some(f.xlog_config(path).ring_path),
            LogKind::File => None,
        };
        let ring_existed = ring.as_ref().is_some_and(|r| r.exists());
        if options.wal && options.accept_lost_log && is_db {
            // Recover with what is left of the log, checkpoint, and start a new log above every
            // page LSN: the old one no longer covers the pages, so new records must not reuse its
            // positions.
            Self::open_dir(path, options.clone())?.close()?;
            for dir in [Some(&file_log), Some(&fast_log), mirror.as_ref()].into_iter().flatten() {
                let _ = std::fs::remove_dir_all(dir);
            }
            if let Some(r) = &ring {
                let _ = std::fs::remove_file(r);
            }
        }
        // What this open may add to an existing database (the lock file, the log directories,
        // the fast log's ring): a failed open removes what it added, so the directory is left as
        // it was found (a database with a damaged catalog gains no LOCK and no wal/).
        let addable: Vec<std::path::PathBuf> = [
            Some(path.join(crate::io::LOCK_FILE)),
            Some(file_log.clone()),
            Some(fast_log.clone()),
            mirror.clone(),
            ring.clone(),
        ]
        .into_iter()
        .flatten()
        .filter(|p| !p.exists())
        .collect();
        let opened = Self::open_dir(path, options);
        if opened.is_err() && is_db {
            for p in &addable {
                let _ = if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
            }
        }
        if opened.is_err() && !is_db {
            // A failed create leaves nothing behind (what existed was empty).
            let _ = if existed { clear_dir(path) } else { std::fs::remove_dir_all(path) };
            if let Some(mirror) = &mirror {
                if !mirror_existed {
                    let _ = std::fs::remove_dir_all(mirror);
                } else if mirror_was_empty {
                    let _ = clear_dir(mirror);
                }
            }
            if let (Some(r), false) = (&ring, ring_existed) {
                let _ = std::fs::remove_file(r);
            }
        }
        opened
    }

    /// Whether `path` exists and whether it holds a database (a catalog), refusing a file, a
    /// directory of foreign files, and a missing database when `create_if_missing` is off.
    fn existing_database(path: &std::path::Path, options: &Options) -> Result<(bool, bool)> {
        let not_db = |what: String| {
            Error::InvalidArgument(format!("{} is not an nvmedb database: {what}", path.display()))
        };
        let existed = match std::fs::metadata(path) {
            Ok(m) if !m.is_dir() => {
                return Err(not_db("it is a file, and a database is a directory".into()));
            }
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                return Err(crate::io::IoError::os(
                    &path.display().to_string(),
                    crate::io::IoOpKind::Setup,
                    0,
                    0,
                    e,
                )
                .into())
            }
        };
        let is_db = path.join(CATALOG_FILE).exists();
        if existed && !is_db {
            let entries: Vec<String> = std::fs::read_dir(path)
                .map_err(|e| {
                    crate::io::IoError::os(&path.display().to_string(), crate::io::IoOpKind::Setup, 0, 0, e)
                })?
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .filter(|n| n != crate::io::LOCK_FILE)
                .collect();
            if let Some(first) = entries.first() {
                return Err(not_db(format!(
                    "it holds {} entries (e.g. `{first}`) but no {CATALOG_FILE}",
                    entries.len()
                )));
            }
        }
        if !is_db && !options.create_if_missing {
            return Err(Error::NotFound(format!(
                "no database at {} (create_if_missing is off)",
                path.display()
            )));
        }
        Ok((existed, is_db))
    }

    fn open_dir(path: &std::path::Path, options: Options) -> Result<Self> {
        let fo = crate::io::FileOptions { read_only: options.read_only, ..Default::default() };
        let storage = crate::io::DirStorage::new(path, fo.clone())?;
        // Lock before the log directories are touched.
        if options.read_only {
            storage.lock_shared()?;
            let has_files = |d: &std::path::Path| std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some());
            if has_files(&path.join("xlog")) {
                return Err(Error::Config {
                    key: "read_only".into(),
                    detail: format!(
                        "{} keeps a fast log; a read-only open reads only the file log (open it read-write)",
                        path.display()
                    ),
                });
            }
            // The log is read to check that nothing needs recovery; nothing is written to it.
            let log = if has_files(&path.join("wal")) {
                let copies = options.file_log_copies(path)?;
                Some(Box::new(FileLogOpener { copies, options: options.wal_options.clone() })
                    as Box<dyn LogOpener>)
            } else {
                None
            };
            return Self::open_with_log(Arc::new(storage), log, options);
        }
        storage.lock()?;
        if let (true, LogKind::Fast(f)) = (options.wal, &options.log) {
            let xs: Arc<dyn Storage> = Arc::new(crate::io::DirStorage::new(path.join("xlog"), fo)?);
            let opener = crate::xlog::XLogOpener { storage: xs, config: f.xlog_config(path) };
            return Self::open_with_log(Arc::new(storage), Some(Box::new(opener)), options);
        }
        let log = if options.wal {
            let copies = options.file_log_copies(path)?;
            Some(Box::new(FileLogOpener { copies, options: options.wal_options.clone() })
                as Box<dyn LogOpener>)
        } else {
            None
        };
        Self::open_with_log(Arc::new(storage), log, options)
    }

    /// Opens (or creates) the database held by `storage`, without a log (`options.wal` is
    /// ignored): changes are durable only after [`Database::flush`] or close.
    pub fn open_with_storage(storage: Arc<dyn Storage>, options: Options) -> Result<Self> {
        Self::open_with_storages(storage, None, options)
    }

    /// Opens (or creates) the database held by `storage`, with its log duplexed on the two
    /// storages of `log` (when given): recovers from a crash first (redo from the last
    /// checkpoint, then undo of unfinished transactions), then checkpoints.
    pub fn open_with_storages(
        storage: Arc<dyn Storage>,
        log: Option<(Arc<dyn Storage>, Arc<dyn Storage>)>,
        options: Options,
    ) -> Result<Self> {
        let opener = log.map(|(primary, secondary)| {
            Box::new(FileLogOpener { copies: vec![primary, secondary], options: options.wal_options.clone() })
                as Box<dyn LogOpener>
        });
        Self::open_with_log(storage, opener, options)
    }
}
