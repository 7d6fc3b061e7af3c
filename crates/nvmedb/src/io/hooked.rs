//! Devices that consult a hook before every operation.
//!
//! Owns: [`IoHook`], [`HookedDevice`] and [`HookedStorage`] — the one delegating wrapper that
//! tests use to inject faults or cut the power (a hook returns an error instead of letting the
//! operation reach the medium). Invariant: an operation the hook refuses never touches the
//! inner device; one it accepts is passed through unchanged.

use super::{Device, DeviceInfo, IoOpKind, IoResult, Storage};
use std::sync::Arc;

/// Decides, before each operation, whether it may proceed.
pub trait IoHook: Send + Sync {
    /// Called before a read, write, sync or resize of `device` (`len` 0 for sync and resize,
    /// `offset` the new length for a resize). An error is returned to the caller as is.
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()>;
}

/// A device whose operations pass through an [`IoHook`].
pub struct HookedDevice {
    inner: Arc<dyn Device>,
    hook: Arc<dyn IoHook>,
    name: String,
}

impl HookedDevice {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Device>, hook: Arc<dyn IoHook>) -> Self {
        let name = inner.info().name;
        Self { inner, hook, name }
    }
}

impl Device for HookedDevice {
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
        self.hook.before(&self.name, IoOpKind::Setup, len, 0)?;
        self.inner.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.hook.before(&self.name, IoOpKind::Read, offset, buf.len())?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        self.hook.before(&self.name, IoOpKind::Write, offset, buf.len())?;
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> IoResult<()> {
        self.hook.before(&self.name, IoOpKind::Sync, 0, 0)?;
        self.inner.sync()
    }
}

/// A storage whose devices are all [`HookedDevice`]s sharing one hook.
pub struct HookedStorage {
    inner: Arc<dyn Storage>,
    hook: Arc<dyn IoHook>,
}

impl HookedStorage {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Storage>, hook: Arc<dyn IoHook>) -> Self {
        Self { inner, hook }
    }
}

impl Storage for HookedStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        Ok(Arc::new(HookedDevice::new(self.inner.open(name, create)?, self.hook.clone())))
    }
    fn exists(&self, name: &str) -> bool {
        self.inner.exists(name)
    }
    fn list(&self) -> IoResult<Vec<String>> {
        self.inner.list()
    }
    fn remove(&self, name: &str) -> IoResult<()> {
        self.inner.remove(name)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn lock(&self) -> IoResult<()> {
        self.inner.lock()
    }
    fn lock_shared(&self) -> IoResult<()> {
        self.inner.lock_shared()
    }
    fn in_ram(&self) -> bool {
        self.inner.in_ram()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{AlignedBuf, IoError, MemStorage};
    use std::sync::atomic::{AtomicBool, Ordering};

    struct RefuseWrites(AtomicBool);
    impl IoHook for RefuseWrites {
        fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
            if op == IoOpKind::Write && self.0.load(Ordering::SeqCst) {
                return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
            }
            Ok(())
        }
    }

    #[test]
    fn refused_operations_never_reach_the_medium() {
        let mem = Arc::new(MemStorage::new());
        let hook = Arc::new(RefuseWrites(AtomicBool::new(false)));
        let s = HookedStorage::new(mem.clone(), hook.clone());
        let d = s.open("f", true).unwrap();
        let mut b = AlignedBuf::new(4096);
        b[0] = 1;
        d.write_at(0, &b).unwrap();
        hook.0.store(true, Ordering::SeqCst);
        b[0] = 2;
        let e = d.write_at(0, &b).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(5));
        assert!(e.to_string().contains("f"), "{e}");
        let mut r = AlignedBuf::new(4096);
        mem.open("f", false).unwrap().read_at(0, &mut r).unwrap();
        assert_eq!(r[0], 1);
    }
}
