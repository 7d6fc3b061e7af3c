//! Named devices behind an emulated device profile.
//!
//! Owns: [`EmulatedStorage`], which wraps every device another [`Storage`] opens in an
//! [`EmulatedDevice`] with one profile, so a whole database (or one tablespace) runs "on" an
//! emulated device. Invariants: all files of one storage are on one emulated device (one
//! [`EmulatedMedium`]: they share its IOPS and bandwidth caps, channels and GC stalls); a
//! profile with [`Backing::Ram`] (faster than the real disk) is only ever placed over RAM
//! storage, since its latency must replace the medium's.

use super::{
    Backing, Device, DeviceProfile, EmulatedDevice, EmulatedMedium, IoError, IoOpKind, IoResult, MemStorage,
    Storage,
};
use crate::util::sync::MutexExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A storage whose devices all show the latency of one emulated profile.
pub struct EmulatedStorage {
    inner: Arc<dyn Storage>,
    profile: DeviceProfile,
    /// The one device every file is on.
    medium: EmulatedMedium,
    /// One emulated device per name, so its queue model and statistics are shared by every
    /// opener.
    open: Mutex<HashMap<String, Arc<dyn Device>>>,
}

impl EmulatedStorage {
    /// Wraps `inner`. Fails if `profile` must be RAM-backed and `inner` is not in RAM (memory, or
    /// a directory on tmpfs: see [`Storage::in_ram`]).
    pub fn new(inner: Arc<dyn Storage>, profile: DeviceProfile, seed: u64) -> IoResult<Self> {
        if profile.backing == Backing::Ram && !inner.in_ram() {
            return Err(IoError::os(
                &inner.location(),
                IoOpKind::Setup,
                0,
                0,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "profile `{}` is faster than a real disk and must wrap RAM storage (memory or a directory on tmpfs)",
                        profile.name
                    ),
                ),
            ));
        }
        let medium = EmulatedMedium::new(&profile, seed);
        Ok(Self { inner, profile, medium, open: Mutex::new(HashMap::new()) })
    }

    /// A RAM storage behind `profile`.
    pub fn in_memory(profile: DeviceProfile, seed: u64) -> Self {
        let medium = EmulatedMedium::new(&profile, seed);
        Self { inner: Arc::new(MemStorage::new()), profile, medium, open: Mutex::new(HashMap::new()) }
    }

    /// The profile in force.
    pub fn profile(&self) -> &DeviceProfile {
        &self.profile
    }
}

impl Storage for EmulatedStorage {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        let mut open = self.open.locked();
        if let Some(d) = open.get(name) {
            return Ok(d.clone());
        }
        let dev = self.inner.open(name, create)?;
        let emu: Arc<dyn Device> =
            Arc::new(EmulatedDevice::on_medium(dev, self.profile.clone(), self.medium.clone()));
        open.insert(name.to_string(), emu.clone());
        Ok(emu)
    }

    fn exists(&self, name: &str) -> bool {
        self.inner.exists(name)
    }

    fn list(&self) -> IoResult<Vec<String>> {
        self.inner.list()
    }

    fn remove(&self, name: &str) -> IoResult<()> {
        self.open.locked().remove(name);
        self.inner.remove(name)
    }

    fn location(&self) -> String {
        format!("{} (emulated `{}`)", self.inner.location(), self.profile.name)
    }

    fn lock(&self) -> IoResult<()> {
        self.inner.lock()
    }

    fn lock_shared(&self) -> IoResult<()> {
        self.inner.lock_shared()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::AlignedBuf;

    #[test]
    fn devices_are_emulated_and_shared() {
        let p = DeviceProfile::builtin("optane").expect("optane profile");
        let s = EmulatedStorage::in_memory(p, 1);
        let a = s.open("x", true).unwrap();
        let b = s.open("x", false).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.info().emulated_profile.as_deref(), Some("optane"));
        let mut buf = AlignedBuf::new(4096);
        buf[0] = 9;
        a.write_at(0, &buf).unwrap();
        let mut r = AlignedBuf::new(4096);
        b.read_at(0, &mut r).unwrap();
        assert_eq!(r[0], 9);
    }

    /// Files on one emulated storage share its device's bandwidth: 12 reads of 1 MiB from each
    /// of two files, alternating, under a 500 MB/s cap cannot take less than 23 transfer slots
    /// (with a device per file they would take about half).
    #[test]
    fn files_share_the_device_bandwidth() {
        let mut p = DeviceProfile::builtin("optane").expect("optane profile");
        p.apply_override("bandwidth_mb_s=500").unwrap();
        let s = EmulatedStorage::in_memory(p, 1);
        let (a, b) = (s.open("a", true).unwrap(), s.open("b", true).unwrap());
        a.ensure_capacity(32 << 20).unwrap();
        b.ensure_capacity(32 << 20).unwrap();
        let mut buf = AlignedBuf::new(1 << 20);
        let t = std::time::Instant::now();
        for i in 0..12u64 {
            a.read_at(i * (2 << 20), &mut buf).unwrap();
            b.read_at(i * (2 << 20), &mut buf).unwrap();
        }
        let floor = 23.0 * (1 << 20) as f64 / 500e6;
        assert!(t.elapsed().as_secs_f64() >= floor, "{:?} beats the shared cap's {floor} s", t.elapsed());
    }

    #[test]
    fn ram_profiles_refuse_file_storage() {
        let dir = nvmedb_testkit::TmpDir::path_only("emu");
        let ds = crate::io::DirStorage::new(&dir, crate::io::FileOptions::default()).unwrap();
        let p = DeviceProfile::builtin("optane").unwrap();
        assert!(EmulatedStorage::new(Arc::new(ds), p, 1).is_err());
    }
}
