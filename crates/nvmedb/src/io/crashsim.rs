//! A simulated disk that can crash.
//!
//! Owns: [`CrashSimDevice`], which keeps two images — what reads see now ("written") and what a
//! power cut would leave ("durable") — plus the list of writes since the last sync, and
//! [`CrashSimStorage`], a directory of such devices that crash together.
//!
//! Invariants: `sync` moves every pending write into the durable image in order; `crash`
//! decides, per pending write and seeded, whether it was lost, fully persisted, or torn (only a
//! prefix of its 512-byte sectors persisted), then makes the durable image the only image.
//! Simplification stated plainly: creating or removing a device is durable at once.

use super::{check_alignment, Device, DeviceInfo, IoError, IoOpKind, IoResult, Storage, DIRECT_IO_ALIGN};
use crate::util::sync::MutexExt;
use crate::util::Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Granularity at which a torn write is cut.
pub const SECTOR_BYTES: usize = 512;

/// What happened to the unsynced writes at a simulated crash.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CrashOutcome {
    /// Writes lost entirely.
    pub dropped: usize,
    /// Writes that reached the medium whole.
    pub persisted: usize,
    /// Writes of which only a prefix of sectors reached the medium.
    pub torn: usize,
}

impl CrashOutcome {
    fn add(&mut self, o: CrashOutcome) {
        self.dropped += o.dropped;
        self.persisted += o.persisted;
        self.torn += o.torn;
    }
}

#[derive(Debug, Default)]
struct SimState {
    written: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
}

/// What happens to one unsynced write at a planned crash ([`CrashSimDevice::crash_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFate {
    /// Lost entirely.
    Dropped,
    /// Reached the medium whole.
    Persisted,
    /// Only its first `n` sectors of [`SECTOR_BYTES`] reached the medium (`n` is clamped to the
    /// write's sector count).
    Torn(usize),
}

/// A RAM device that models volatile write caching and power loss.
#[derive(Debug)]
pub struct CrashSimDevice {
    name: String,
    state: Mutex<SimState>,
}

fn write_into(image: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset as usize..end].copy_from_slice(bytes);
}

impl CrashSimDevice {
    /// An empty device.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), state: Mutex::new(SimState::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.locked()
    }

    /// Number of writes not yet covered by a sync.
    pub fn pending_writes(&self) -> usize {
        self.lock().pending.len()
    }

    /// Simulates a power cut: each unsynced write is dropped, persisted or torn, chosen by `rng`.
    /// Afterwards reads see exactly the durable image.
    pub fn crash(&self, rng: &mut Rng) -> CrashOutcome {
        self.crash_with(|_, _, len| match rng.below(3) {
            0 => WriteFate::Dropped,
            1 => WriteFate::Persisted,
            _ => WriteFate::Torn(rng.below((len / SECTOR_BYTES) as u64) as usize),
        })
    }

    /// Simulates a power cut where `decide(index, offset, len)` chooses the fate of each unsynced
    /// write, in the order they were issued (index 0 is the oldest). Afterwards reads see exactly
    /// the durable image. A torn write keeps a prefix of whole sectors.
    pub fn crash_with(&self, mut decide: impl FnMut(usize, u64, usize) -> WriteFate) -> CrashOutcome {
        let mut st = self.lock();
        let mut outcome = CrashOutcome::default();
        let pending = std::mem::take(&mut st.pending);
        for (i, (offset, bytes)) in pending.into_iter().enumerate() {
            match decide(i, offset, bytes.len()) {
                WriteFate::Dropped => outcome.dropped += 1,
                WriteFate::Persisted => {
                    write_into(&mut st.durable, offset, &bytes);
                    outcome.persisted += 1;
                }
                WriteFate::Torn(sectors) => {
                    let keep = sectors.min(bytes.len() / SECTOR_BYTES) * SECTOR_BYTES;
                    if keep > 0 {
                        write_into(&mut st.durable, offset, &bytes[..keep]);
                    }
                    outcome.torn += 1;
                }
            }
        }
        st.written = st.durable.clone();
        outcome
    }
}

impl Device for CrashSimDevice {
    fn info(&self) -> DeviceInfo {
        DeviceInfo { name: self.name.clone(), backend: "crash-sim memory".into(), emulated_profile: None }
    }

    fn alignment(&self) -> usize {
        DIRECT_IO_ALIGN
    }

    fn capacity(&self) -> u64 {
        self.lock().written.len() as u64
    }

    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        let mut st = self.lock();
        if (st.written.len() as u64) < len {
            st.written.resize(len as usize, 0);
        }
        if (st.durable.len() as u64) < len {
            st.durable.resize(len as usize, 0);
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        check_alignment(&self.name, DIRECT_IO_ALIGN, offset, buf.len(), buf.as_ptr() as usize)?;
        let st = self.lock();
        let start = offset as usize;
        buf.fill(0);
        if start < st.written.len() {
            let n = (st.written.len() - start).min(buf.len());
            buf[..n].copy_from_slice(&st.written[start..start + n]);
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        check_alignment(&self.name, DIRECT_IO_ALIGN, offset, buf.len(), buf.as_ptr() as usize)?;
        let mut st = self.lock();
        write_into(&mut st.written, offset, buf);
        st.pending.push((offset, buf.to_vec()));
        Ok(())
    }

    fn sync(&self) -> IoResult<()> {
        let mut st = self.lock();
        let pending = std::mem::take(&mut st.pending);
        for (offset, bytes) in pending {
            write_into(&mut st.durable, offset, &bytes);
        }
        Ok(())
    }
}

/// A directory of [`CrashSimDevice`]s that crash together.
#[derive(Debug, Default)]
pub struct CrashSimStorage {
    devices: Mutex<BTreeMap<String, Arc<CrashSimDevice>>>,
}

impl CrashSimStorage {
    /// An empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// Crashes every device (in name order, so the outcome depends only on the seed).
    pub fn crash(&self, rng: &mut Rng) -> CrashOutcome {
        let map = self.devices.locked();
        let mut total = CrashOutcome::default();
        for dev in map.values() {
            total.add(dev.crash(rng));
        }
        total
    }

    /// Crashes every device (in name order), `decide` choosing each unsynced write's fate as
    /// in [`CrashSimDevice::crash_with`] (its index counts within its device).
    pub fn crash_with(&self, mut decide: impl FnMut(usize, u64, usize) -> WriteFate) -> CrashOutcome {
        let map = self.devices.locked();
        let mut total = CrashOutcome::default();
        for dev in map.values() {
            total.add(dev.crash_with(&mut decide));
        }
        total
    }

    /// The device behind `name`, for tests that inspect or corrupt it.
    pub fn device(&self, name: &str) -> Option<Arc<CrashSimDevice>> {
        self.devices.locked().get(name).cloned()
    }
}

impl Storage for CrashSimStorage {
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
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such device in crash-sim storage"),
            ));
        }
        let d = Arc::new(CrashSimDevice::new(name));
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
        "crash-sim memory".into()
    }
    fn in_ram(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::AlignedBuf;

    fn filled(len: usize, byte: u8) -> AlignedBuf {
        let mut b = AlignedBuf::new(len);
        b.fill(byte);
        b
    }

    #[test]
    fn synced_writes_survive_every_crash() {
        for seed in 0..50 {
            let d = CrashSimDevice::new("sim");
            d.write_at(0, &filled(4096, 1)).unwrap();
            d.sync().unwrap();
            d.write_at(4096, &filled(8192, 2)).unwrap();
            d.crash(&mut Rng::new(seed));
            let mut r = AlignedBuf::new(4096);
            d.read_at(0, &mut r).unwrap();
            assert!(r.iter().all(|&b| b == 1), "seed {seed}: synced block changed");
        }
    }

    #[test]
    fn unsynced_write_is_dropped_persisted_or_torn_to_a_sector_prefix() {
        let mut seen = CrashOutcome::default();
        for seed in 0..200 {
            let d = CrashSimDevice::new("sim");
            d.ensure_capacity(16384).unwrap();
            d.sync().unwrap();
            d.write_at(0, &filled(16384, 7)).unwrap();
            let o = d.crash(&mut Rng::new(seed));
            seen.add(o);
            let mut r = AlignedBuf::new(16384);
            d.read_at(0, &mut r).unwrap();
            let prefix = r.iter().take_while(|&&b| b == 7).count();
            assert_eq!(prefix % SECTOR_BYTES, 0, "seed {seed}: tear not at a sector boundary");
            assert!(r[prefix..].iter().all(|&b| b == 0), "seed {seed}: bytes after the torn prefix");
            if o.persisted == 1 {
                assert_eq!(prefix, 16384);
            }
            if o.dropped == 1 {
                assert_eq!(prefix, 0);
            }
            if o.torn == 1 {
                assert!(prefix < 16384);
            }
        }
        assert!(seen.dropped > 0 && seen.persisted > 0 && seen.torn > 0, "{seen:?}");
    }
}
