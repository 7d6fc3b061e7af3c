//! Shared by the xlog integration tests: a scratch path for a ring file (on tmpfs when the
//! machine has one) that is removed, file or directory, when the test drops it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A unique scratch path, removed on drop.
pub struct TmpPath(pub PathBuf);

impl TmpPath {
    /// A fresh path under /dev/shm (or the temp directory) named after `tag`.
    pub fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let p = dir.join(format!(
            "nvmedb-xtest-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
