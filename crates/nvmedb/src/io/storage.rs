//! Named devices: the engine's view of a directory.
//!
//! Owns: the [`Storage`] trait (open/create, list and remove named devices — data files, log
//! segments) and [`MemStorage`], its in-RAM implementation for tests. The real-directory
//! implementation lives next to the O_DIRECT file device. Invariant: opening the same name twice
//! yields the same medium (in memory: the same `Arc`), so a "reopen" in a test sees what was
//! written.

use super::{Device, IoError, IoOpKind, IoResult, MemDevice};
use crate::util::sync::MutexExt;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A set of named devices, like files in a directory.
pub trait Storage: Send + Sync {
    /// Opens the device called `name`, creating it (empty) when `create` is true and it is
    /// missing. A missing device without `create` is an `Os` error with `NotFound`.
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>>;
    /// True if a device of that name exists.
    fn exists(&self, name: &str) -> bool;
    /// Names of all devices, sorted.
    fn list(&self) -> IoResult<Vec<String>>;
    /// Deletes a device.
    fn remove(&self, name: &str) -> IoResult<()>;
    /// Where the devices live, for messages ("/data/db" or "memory").
    fn location(&self) -> String;
    /// Takes this storage's exclusive lock, held until the storage is dropped, so that one
    /// database has one opener: for a directory, an advisory `flock` on its [`LOCK_FILE`]
    /// (which names the holder's process id); a second storage of the same directory, in another
    /// process or in this one, gets [`IoError::Locked`]. Taking it again through the same
    /// storage succeeds. Storages no other process can reach (memory) have nothing to lock.
    fn lock(&self) -> IoResult<()> {
        Ok(())
    }
    /// Takes this storage's lock shared, for a read-only opener: several read-only openers may
    /// hold it at once, while [`Storage::lock`] (a writer) excludes them and they exclude a
    /// writer ([`IoError::Locked`]). Storages no other process can reach have nothing to lock.
    fn lock_shared(&self) -> IoResult<()> {
        Ok(())
    }
    /// True when the devices are in RAM (memory, or a directory on tmpfs): only such storage
    /// may sit behind a device profile faster than a real disk.
    fn in_ram(&self) -> bool {
        false
    }
}

/// The lock file a locked directory storage holds (not a device: [`Storage::list`] omits it).
pub const LOCK_FILE: &str = "LOCK";

/// Named RAM devices.
#[derive(Debug, Default)]
pub struct MemStorage {
    devices: Mutex<BTreeMap<String, Arc<MemDevice>>>,
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// The RAM device behind `name`, for tests that inspect or corrupt bytes.
    pub fn mem_device(&self, name: &str) -> Option<Arc<MemDevice>> {
        self.devices.locked().get(name).cloned()
    }
}

impl Storage for MemStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let mut map = self.devices.locked();
        if let Some(d) = map.get(name) {
            return Ok(d.clone());
        }
        if !create {
            return Err(IoError::os(
                name,
                IoOpKind::Setup,
                0,
                0,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such device in memory storage"),
            ));
        }
        let d = Arc::new(MemDevice::new(name));
        map.insert(name.to_string(), d.clone());
        Ok(d)
    }

    fn exists(&self, name: &str) -> bool {
        self.devices.locked().contains_key(name)
    }

    fn list(&self) -> IoResult<Vec<String>> {
        Ok(self.devices.locked().keys().cloned().collect())
    }

    fn remove(&self, name: &str) -> IoResult<()> {
        self.devices.locked().remove(name);
        Ok(())
    }

    fn location(&self) -> String {
        "memory".into()
    }

    fn in_ram(&self) -> bool {
        true
    }
}
