//! Test helpers shared by the engine's unit tests.

use crate::io::{HookedDevice, IoError, IoHook, IoOpKind, IoResult, MemDevice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Fails reads and/or writes (EIO) while its switches are on.
#[derive(Default)]
pub(crate) struct FlakySwitches {
    pub fail_reads: AtomicBool,
    pub fail_writes: AtomicBool,
}

impl IoHook for FlakySwitches {
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        let fail = match op {
            IoOpKind::Read => self.fail_reads.load(Ordering::SeqCst),
            IoOpKind::Write => self.fail_writes.load(Ordering::SeqCst),
            _ => false,
        };
        if fail {
            return Err(IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(5)));
        }
        Ok(())
    }
}

/// A RAM device that fails reads or writes while the returned switches say so.
pub(crate) fn flaky_device(name: &str) -> (Arc<HookedDevice>, Arc<FlakySwitches>) {
    let switches = Arc::new(FlakySwitches::default());
    (Arc::new(HookedDevice::new(Arc::new(MemDevice::new(name)), switches.clone())), switches)
}
