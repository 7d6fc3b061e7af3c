//! An in-memory device.
//!
//! Owns: `MemDevice`, a growable byte array behind a reader-writer lock, used by tests, by the
//! `dram` profile and as the medium under emulated fast profiles. Invariant: the same alignment
//! rules as a real O_DIRECT file are enforced, so code tested on RAM behaves on disk.

use super::{check_alignment, Device, DeviceInfo, IoError, IoResult, DIRECT_IO_ALIGN};
use crate::util::sync::RwLockExt;
use std::sync::RwLock;

/// A device whose medium is RAM.
#[derive(Debug)]
pub struct MemDevice {
    name: String,
    align: usize,
    /// `None` grows on demand; `Some(n)` rejects I/O past `n` bytes (like a full disk).
    max_capacity: Option<u64>,
    data: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// An empty, growable RAM device with 4 KiB alignment.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), align: DIRECT_IO_ALIGN, max_capacity: None, data: RwLock::new(Vec::new()) }
    }

    /// A RAM device that refuses to grow past `max_bytes`.
    pub fn with_max_capacity(name: impl Into<String>, max_bytes: u64) -> Self {
        Self { max_capacity: Some(max_bytes), ..Self::new(name) }
    }

    /// A copy of the current contents (for tests and crash simulation).
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read_locked().clone()
    }

    /// Replaces the contents (for crash simulation).
    pub fn restore(&self, bytes: Vec<u8>) {
        *self.data.write_locked() = bytes;
    }

    fn grow_locked(&self, data: &mut Vec<u8>, end: u64, offset: u64, len: usize) -> IoResult<()> {
        if let Some(max) = self.max_capacity {
            if end > max {
                return Err(IoError::OutOfRange { device: self.name.clone(), offset, len, capacity: max });
            }
        }
        if end as usize > data.len() {
            data.resize(end as usize, 0);
        }
        Ok(())
    }
}

impl Device for MemDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo { name: self.name.clone(), backend: "memory".into(), emulated_profile: None }
    }

    fn alignment(&self) -> usize {
        self.align
    }

    fn capacity(&self) -> u64 {
        self.data.read_locked().len() as u64
    }

    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        let mut data = self.data.write_locked();
        self.grow_locked(&mut data, len, 0, 0)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        check_alignment(&self.name, self.align, offset, buf.len(), buf.as_ptr() as usize)?;
        let data = self.data.read_locked();
        let start = offset as usize;
        let end = start + buf.len();
        if end <= data.len() {
            buf.copy_from_slice(&data[start..end]);
        } else {
            // Bytes never written read as zeroes, like a sparse file.
            buf.fill(0);
            if start < data.len() {
                let n = data.len() - start;
                buf[..n].copy_from_slice(&data[start..]);
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        check_alignment(&self.name, self.align, offset, buf.len(), buf.as_ptr() as usize)?;
        let mut data = self.data.write_locked();
        let end = offset + buf.len() as u64;
        self.grow_locked(&mut data, end, offset, buf.len())?;
        data[offset as usize..end as usize].copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self) -> IoResult<()> {
        Ok(())
    }
}
