//! [`DirStorage`]: a directory of [`FileDevice`]s, the engine's data files and log segments on
//! a real disk.
//!
//! Owns: the directory's open devices (one per name), its `LOCK` file and the lock held on it.
//! Invariants: names never leave the directory (no separators, no `..`); one device per name is
//! open at a time; the lock is held until the storage is dropped.

use super::{FileDevice, FileOptions};
use crate::io::{Device, IoError, IoOpKind, IoResult, Storage};
use crate::util::sync::MutexExt;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A directory of [`FileDevice`]s: the engine's data files and log segments on a real disk.
#[derive(Debug)]
pub struct DirStorage {
    dir: PathBuf,
    /// The directory is on tmpfs (RAM).
    tmpfs: bool,
    opts: FileOptions,
    open: Mutex<BTreeMap<String, Arc<FileDevice>>>,
    /// The lock file, flocked, once [`Storage::lock`] took it; closing it releases the lock.
    lock: Mutex<Option<File>>,
}

/// The error of a write refused because the file system is read-only or the file is not ours.
fn read_only_fs(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM))
}

impl DirStorage {
    /// Uses (and creates if missing) the directory `dir`.
    pub fn new(dir: impl AsRef<Path>, opts: FileOptions) -> IoResult<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)
            .map_err(|e| IoError::os(&dir.display().to_string(), IoOpKind::Setup, 0, 0, e))?;
        let tmpfs = is_tmpfs(&dir);
        Ok(Self { dir, tmpfs, opts, open: Mutex::new(BTreeMap::new()), lock: Mutex::new(None) })
    }

    fn path_of(&self, name: &str) -> IoResult<PathBuf> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
            return Err(IoError::os(
                name,
                IoOpKind::Setup,
                0,
                0,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "device names are plain file names (no '/', not '.' or '..')",
                ),
            ));
        }
        Ok(self.dir.join(name))
    }

    /// Takes the directory's lock: exclusive (a writer: the lock file then names its process)
    /// or shared (a read-only opener; several may hold it). Held until the storage is dropped.
    fn flock(&self, shared: bool) -> IoResult<()> {
        use std::io::{Read, Seek, Write};
        let mut held = self.lock.locked();
        if held.is_some() {
            return Ok(());
        }
        let path = self.dir.join(crate::io::LOCK_FILE);
        let name = path.display().to_string();
        let setup = |e: std::io::Error| IoError::os(&name, IoOpKind::Setup, 0, 0, e);
        let create =
            || std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        let opened = if self.opts.read_only {
            // A read-only opener opens the lock file for reading (a read-only descriptor holds
            // a shared flock), creating it only where it may; on a file system it cannot write
            // (mounted read-only, or a copy it does not own) no writer can run either, and it
            // goes on without the lock.
            match std::fs::File::open(&path) {
                Ok(f) => Ok(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => match create() {
                    Err(e) if read_only_fs(&e) => return Ok(()),
                    r => r,
                },
                Err(e) if read_only_fs(&e) => return Ok(()),
                Err(e) => Err(e),
            }
        } else {
            create()
        };
        let mut file = opened.map_err(setup)?;
        let mode = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
        // SAFETY: flock on a valid descriptor has no memory-safety preconditions.
        if unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(setup(e));
            }
            // A writer refused while a shared lock is still free: read-only openers hold it.
            // SAFETY: as above.
            if !shared && unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
                let holder = "read-only openers (Options::read_only)".to_string();
                return Err(IoError::Locked { path: self.location(), holder });
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let pid = text.trim().strip_prefix("pid ").and_then(|p| p.parse::<u32>().ok());
            let holder = match pid {
                Some(p) if p == std::process::id() => format!(
                    "this process (pid {p}): it is already open here; share that Database (it is cheap \
                     to clone), or drop it and every Table and Transaction of it first"
                ),
                Some(p) => format!("process {p}"),
                None => "another process".to_string(),
            };
            return Err(IoError::Locked { path: self.location(), holder });
        }
        if !shared {
            file.set_len(0).map_err(setup)?;
            file.seek(std::io::SeekFrom::Start(0)).map_err(setup)?;
            writeln!(file, "pid {}", std::process::id()).map_err(setup)?;
        }
        *held = Some(file);
        Ok(())
    }

    /// Makes creations and removals in the directory durable (fsync of the directory).
    pub fn sync_dir(&self) -> IoResult<()> {
        let name = self.dir.display().to_string();
        let d = File::open(&self.dir).map_err(|e| IoError::os(&name, IoOpKind::Sync, 0, 0, e))?;
        d.sync_all().map_err(|e| IoError::os(&name, IoOpKind::Sync, 0, 0, e))
    }
}

impl Storage for DirStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let path = self.path_of(name)?;
        let mut map = self.open.locked();
        if let Some(d) = map.get(name) {
            return Ok(d.clone());
        }
        let opts = FileOptions { create, ..self.opts.clone() };
        let dev = Arc::new(FileDevice::open_with(&path, &opts)?);
        map.insert(name.to_string(), dev.clone());
        Ok(dev)
    }

    fn exists(&self, name: &str) -> bool {
        self.path_of(name).map(|p| p.exists()).unwrap_or(false)
    }

    fn list(&self) -> IoResult<Vec<String>> {
        let loc = self.location();
        let rd = std::fs::read_dir(&self.dir).map_err(|e| IoError::os(&loc, IoOpKind::Setup, 0, 0, e))?;
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| IoError::os(&loc, IoOpKind::Setup, 0, 0, e))?;
            if entry.file_type().map(|t| t.is_file()).unwrap_or(false)
                && entry.file_name() != crate::io::LOCK_FILE
            {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn remove(&self, name: &str) -> IoResult<()> {
        let path = self.path_of(name)?;
        self.open.locked().remove(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(IoError::os(&path.display().to_string(), IoOpKind::Setup, 0, 0, e)),
        }
    }

    fn lock(&self) -> IoResult<()> {
        self.flock(false)
    }

    fn lock_shared(&self) -> IoResult<()> {
        self.flock(true)
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn in_ram(&self) -> bool {
        self.tmpfs
    }
}

/// True if `dir` is on tmpfs (its files live in RAM).
fn is_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs is a plain C struct of integers, for which all-zero bytes are a value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a statfs we own; statfs writes only into it.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == TMPFS_MAGIC
}
