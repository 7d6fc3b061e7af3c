//! How much the engine logs, by record kind and by thread.
//!
//! Owns: per-thread counters of the records and bytes the engine appends, kept by the thread
//! that appends them (no shared cache line on the append path: each thread writes only its
//! own slot), and the sum over every thread, live or exited ([`log_volume`]). A thread's own
//! running total ([`thread_log_bytes`]) lets a caller attribute the log of one transaction to
//! it (the lab's bytes per TPC-C transaction type).
//!
//! Invariants: a record is counted once, by the thread that appended it, with its payload plus
//! the file log's record header ([`RECORD_HEADER_BYTES`]), whatever log it went to; counters
//! only grow; an exiting thread's counts move to the retired sum before its slot leaves the
//! registry, so [`log_volume`] never goes backwards.

use super::RECORD_HEADER_BYTES;
use crate::util::sync::MutexExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Record kinds counted apart (a kind byte at or above it is counted in the last slot).
pub const VOLUME_KINDS: usize = 64;

/// One thread's counters.
struct Slot {
    bytes: [AtomicU64; VOLUME_KINDS],
    records: [AtomicU64; VOLUME_KINDS],
    total: AtomicU64,
}

impl Slot {
    fn new() -> Self {
        Self {
            bytes: std::array::from_fn(|_| AtomicU64::new(0)),
            records: std::array::from_fn(|_| AtomicU64::new(0)),
            total: AtomicU64::new(0),
        }
    }

    fn add_into(&self, v: &mut LogVolume) {
        for k in 0..VOLUME_KINDS {
            v.bytes[k] += self.bytes[k].load(Relaxed);
            v.records[k] += self.records[k].load(Relaxed);
        }
    }
}

/// Every live thread's slot, and the sum of the exited threads' counts.
static REGISTRY: Mutex<(Vec<Arc<Slot>>, LogVolumeSum)> = Mutex::new((Vec::new(), LogVolumeSum::ZERO));

/// Exited threads' counts (a plain array: only touched under the registry's lock).
struct LogVolumeSum {
    bytes: [u64; VOLUME_KINDS],
    records: [u64; VOLUME_KINDS],
}

impl LogVolumeSum {
    const ZERO: Self = Self { bytes: [0; VOLUME_KINDS], records: [0; VOLUME_KINDS] };
}

/// A thread's registration: its slot, retired into the sum when the thread exits.
struct Registered(Arc<Slot>);

impl Registered {
    fn new() -> Self {
        let slot = Arc::new(Slot::new());
        REGISTRY.locked().0.push(slot.clone());
        Self(slot)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut reg = REGISTRY.locked();
        let (live, retired) = &mut *reg;
        for k in 0..VOLUME_KINDS {
            retired.bytes[k] += self.0.bytes[k].load(Relaxed);
            retired.records[k] += self.0.records[k].load(Relaxed);
        }
        live.retain(|s| !Arc::ptr_eq(s, &self.0));
    }
}

thread_local! {
    static SLOT: Registered = Registered::new();
}

/// Counts one appended record of `kind` with `payload_bytes` of payload on this thread.
pub(crate) fn count(kind: u8, payload_bytes: usize) {
    let k = (kind as usize).min(VOLUME_KINDS - 1);
    let bytes = (payload_bytes + RECORD_HEADER_BYTES) as u64;
    // A thread being torn down (its slot already dropped) appends nothing worth counting.
    let _ = SLOT.try_with(|s| {
        let s = &s.0;
        // Only this thread writes its slot: a load and a store, no locked instruction.
        s.bytes[k].store(s.bytes[k].load(Relaxed) + bytes, Relaxed);
        s.records[k].store(s.records[k].load(Relaxed) + 1, Relaxed);
        s.total.store(s.total.load(Relaxed) + bytes, Relaxed);
    });
}

/// Bytes this thread has logged so far (payloads plus record headers, every kind): the
/// difference across a transaction is what that transaction logged.
pub fn thread_log_bytes() -> u64 {
    SLOT.try_with(|s| s.0.total.load(Relaxed)).unwrap_or(0)
}

/// Records and bytes (payload plus the file log's 32-byte record header) the engine has
/// appended, by record kind, summed over every thread since the process started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogVolume {
    /// Bytes by kind (index = kind byte; kinds at or above [`VOLUME_KINDS`] in the last).
    pub bytes: [u64; VOLUME_KINDS],
    /// Records by kind.
    pub records: [u64; VOLUME_KINDS],
}

impl Default for LogVolume {
    fn default() -> Self {
        Self { bytes: [0; VOLUME_KINDS], records: [0; VOLUME_KINDS] }
    }
}

impl LogVolume {
    /// What was counted since `earlier` (a snapshot taken before).
    pub fn since(&self, earlier: &LogVolume) -> LogVolume {
        LogVolume {
            bytes: std::array::from_fn(|k| self.bytes[k].saturating_sub(earlier.bytes[k])),
            records: std::array::from_fn(|k| self.records[k].saturating_sub(earlier.records[k])),
        }
    }

    /// Total bytes, every kind.
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }

    /// The kinds with records, with their (records, bytes).
    pub fn kinds(&self) -> impl Iterator<Item = (u8, u64, u64)> + '_ {
        (0..VOLUME_KINDS).filter(|&k| self.records[k] > 0).map(|k| (k as u8, self.records[k], self.bytes[k]))
    }
}

/// The engine's log volume so far, summed over every thread (live and exited).
pub fn log_volume() -> LogVolume {
    let reg = REGISTRY.locked();
    let (live, retired) = &*reg;
    let mut v = LogVolume { bytes: retired.bytes, records: retired.records };
    for s in live {
        s.add_into(&mut v);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_appending_thread_and_survive_its_exit() {
        let before = log_volume();
        let mine0 = thread_log_bytes();
        count(40, 100);
        assert_eq!(thread_log_bytes() - mine0, 100 + RECORD_HEADER_BYTES as u64);
        std::thread::spawn(|| {
            count(41, 10);
            count(200, 1);
            assert_eq!(thread_log_bytes(), 10 + 1 + 2 * RECORD_HEADER_BYTES as u64);
        })
        .join()
        .unwrap();
        // Other tests count concurrently: at least ours are there.
        let d = log_volume().since(&before);
        assert!(d.records[40] >= 1 && d.bytes[40] >= 132);
        assert!(d.records[41] >= 1 && d.bytes[41] >= 42, "an exited thread's counts are kept");
        assert!(d.records[VOLUME_KINDS - 1] >= 1, "large kinds share the last slot");
        assert_eq!(thread_log_bytes() - mine0, 132, "another thread's records are not this thread's");
    }
}
