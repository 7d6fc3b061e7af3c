//! A minimal O_DIRECT directory `Storage` for the kill -9 test (the engine's own DirStorage
//! lives in the io layer; this copy keeps the WAL tests independent of it).
#![allow(dead_code)]

use nvmedb::io::{check_alignment, Device, DeviceInfo, IoError, IoOpKind, IoResult, Storage};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const ALIGN: usize = 4096;

/// An O_DIRECT file.
pub struct FileDev {
    name: String,
    file: File,
}

impl FileDev {
    fn err(&self, op: IoOpKind, offset: u64, len: usize, e: std::io::Error) -> IoError {
        IoError::os(&self.name, op, offset, len, e)
    }
}

impl Device for FileDev {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.name.clone(),
            backend: "pread/O_DIRECT (walbench)".into(),
            emulated_profile: None,
        }
    }
    fn alignment(&self) -> usize {
        ALIGN
    }
    fn capacity(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0)
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        let cur = self.capacity();
        if cur >= len {
            return Ok(());
        }
        // SAFETY: fallocate on a file descriptor we own, with in-range arguments.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, cur as i64, (len - cur) as i64) };
        if rc != 0 {
            return Err(self.err(
                IoOpKind::Setup,
                cur,
                (len - cur) as usize,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        check_alignment(&self.name, ALIGN, offset, buf.len(), buf.as_ptr() as usize)?;
        self.file.read_exact_at(buf, offset).map_err(|e| self.err(IoOpKind::Read, offset, buf.len(), e))
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        check_alignment(&self.name, ALIGN, offset, buf.len(), buf.as_ptr() as usize)?;
        self.file.write_all_at(buf, offset).map_err(|e| self.err(IoOpKind::Write, offset, buf.len(), e))
    }
    fn sync(&self) -> IoResult<()> {
        self.file.sync_data().map_err(|e| self.err(IoOpKind::Sync, 0, 0, e))
    }
}

/// A directory of O_DIRECT files.
pub struct DirStorage {
    dir: PathBuf,
    open: Mutex<HashMap<String, Arc<FileDev>>>,
}

impl DirStorage {
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self { dir: dir.to_path_buf(), open: Mutex::new(HashMap::new()) })
    }
}

impl Storage for DirStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let mut map = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = map.get(name) {
            return Ok(d.clone());
        }
        let path = self.dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .map_err(|e| IoError::os(&path.display().to_string(), IoOpKind::Setup, 0, 0, e))?;
        let d = Arc::new(FileDev { name: path.display().to_string(), file });
        map.insert(name.to_string(), d.clone());
        Ok(d)
    }
    fn exists(&self, name: &str) -> bool {
        self.dir.join(name).exists()
    }
    fn list(&self) -> IoResult<Vec<String>> {
        let rd = std::fs::read_dir(&self.dir)
            .map_err(|e| IoError::os(&self.dir.display().to_string(), IoOpKind::Setup, 0, 0, e))?;
        let mut v: Vec<String> = rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
        v.sort();
        Ok(v)
    }
    fn remove(&self, name: &str) -> IoResult<()> {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
        std::fs::remove_file(self.dir.join(name)).map_err(|e| IoError::os(name, IoOpKind::Setup, 0, 0, e))
    }
    fn location(&self) -> String {
        self.dir.display().to_string()
    }
}
