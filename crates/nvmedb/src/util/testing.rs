//! Test helpers shared by the engine's unit tests.

use crate::io::{Device, DeviceInfo, IoError, IoOpKind, IoResult, MemDevice};
use std::sync::atomic::{AtomicBool, Ordering};

/// A device that fails reads or writes while a switch is on.
pub(crate) struct FlakyDevice {
    pub inner: MemDevice,
    pub fail_reads: AtomicBool,
    pub fail_writes: AtomicBool,
}

impl Device for FlakyDevice {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.inner.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(IoError::os(
                "flaky",
                IoOpKind::Read,
                offset,
                buf.len(),
                std::io::Error::from_raw_os_error(5),
            ));
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(IoError::os(
                "flaky",
                IoOpKind::Write,
                offset,
                buf.len(),
                std::io::Error::from_raw_os_error(5),
            ));
        }
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> IoResult<()> {
        Ok(())
    }
}

impl FlakyDevice {
    pub fn new(name: &str) -> Self {
        Self {
            inner: MemDevice::new(name),
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
        }
    }
}
