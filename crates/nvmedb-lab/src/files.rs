//! The data directories experiments keep between runs: copying, removing and sizing them, and
//! the marker that says what a directory was loaded with.
//!
//! Owns: [`copy_files`], [`remove_dir`], [`dir_bytes`], [`free_bytes`], [`dir_storage`] and the
//! load marker ([`read_marker`], [`write_marker`]). Invariants: a marker is written only after
//! its load closed cleanly and removed before a reload starts, so a directory with a marker
//! always holds the load the marker describes; [`copy_files`] leaves `to` holding exactly the
//! regular files of `from`.

use crate::error::{LabError, Result};
use nvmedb::io::{DirStorage, FileOptions, Storage};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The engine's storage of directory `dir` (buffered by the engine, O_DIRECT where supported).
pub fn dir_storage(dir: &Path) -> Result<Arc<dyn Storage>> {
    Ok(Arc::new(
        DirStorage::new(dir, FileOptions::default())
            .map_err(LabError::engine(format!("opening directory {}", dir.display())))?,
    ))
}

/// Copies the regular files of `from` into a fresh `to` (whatever `to` held is removed first).
pub fn copy_files(from: &Path, to: &Path) -> Result<()> {
    remove_dir(to)?;
    std::fs::create_dir_all(to).map_err(LabError::io(to, "create directory"))?;
    for e in std::fs::read_dir(from).map_err(LabError::io(from, "list"))? {
        let e = e.map_err(LabError::io(from, "list"))?;
        if e.file_type().map_err(LabError::io(e.path(), "stat"))?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).map_err(LabError::io(e.path(), "copy"))?;
        }
    }
    Ok(())
}

/// Removes `dir` and everything in it; a missing `dir` is not an error.
pub fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LabError::io(dir, "remove")(e)),
        _ => Ok(()),
    }
}

/// Bytes of the regular files under `dir`, recursively (symbolic links are not followed).
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).map_err(LabError::io(dir, "list"))? {
        let e = e.map_err(LabError::io(dir, "list"))?;
        let t = e.file_type().map_err(LabError::io(e.path(), "stat"))?;
        if t.is_dir() {
            n += dir_bytes(&e.path())?;
        } else if t.is_file() {
            n += e.metadata().map_err(LabError::io(e.path(), "stat"))?.len();
        }
    }
    Ok(n)
}

/// Bytes free for an unprivileged user on the file system of `dir` (None if it cannot be asked).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs is a plain C struct of integers, for which all-zero bytes are a value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a statvfs we own; statvfs writes only into it.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// Where the load marker of data directory `dir` lives: beside it, `<dir>.loaded.json`.
pub fn marker_path(dir: &Path) -> PathBuf {
    dir.with_extension("loaded.json")
}

/// What `dir` was loaded with, if its marker is there, readable and of type `T` (a marker of
/// another shape, from an older lab, reads as none: the caller reloads).
pub fn read_marker<T: DeserializeOwned>(dir: &Path) -> Option<T> {
    let bytes = std::fs::read(marker_path(dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Records that `dir` now holds the load `what` describes (call after the load closed).
pub fn write_marker<T: Serialize>(dir: &Path, what: &T) -> Result<()> {
    let path = marker_path(dir);
    let json = serde_json::to_vec_pretty(what).map_err(|e| LabError::Inconsistent {
        what: format!("the marker {}", path.display()),
        detail: e.to_string(),
    })?;
    std::fs::write(&path, json).map_err(LabError::io(&path, "write"))
}

/// Forgets what `dir` held, before it is reloaded (a missing marker is not an error).
pub fn remove_marker(dir: &Path) -> Result<()> {
    let path = marker_path(dir);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LabError::io(&path, "remove")(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nvmedb-lab-files-{name}-{}", std::process::id()));
        remove_dir(&d).unwrap();
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn copies_and_sizes_a_directory() {
        let d = scratch("copy");
        let (from, to) = (d.join("from"), d.join("to"));
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::write(from.join("a"), [1u8; 100]).unwrap();
        std::fs::write(from.join("sub/b"), [2u8; 50]).unwrap();
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(to.join("stale"), b"x").unwrap();
        copy_files(&from, &to).unwrap();
        assert_eq!(std::fs::read(to.join("a")).unwrap(), vec![1u8; 100]);
        assert!(!to.join("stale").exists(), "the copy starts fresh");
        assert!(!to.join("sub").exists(), "only regular files are copied");
        assert_eq!(dir_bytes(&from).unwrap(), 150, "recursive");
        assert_eq!(dir_bytes(&to).unwrap(), 100);
        assert!(dir_bytes(&d.join("missing")).is_err());
        remove_dir(&d).unwrap();
        remove_dir(&d).unwrap();
        assert!(!d.exists());
    }

    #[test]
    fn a_marker_reads_back_only_as_its_own_shape() {
        #[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Load {
            rows: u64,
        }
        let d = scratch("marker");
        let db = d.join("db");
        assert_eq!(read_marker::<Load>(&db), None);
        write_marker(&db, &Load { rows: 7 }).unwrap();
        assert_eq!(read_marker::<Load>(&db), Some(Load { rows: 7 }));
        assert_eq!(read_marker::<Vec<String>>(&db), None);
        remove_marker(&db).unwrap();
        remove_marker(&db).unwrap();
        assert_eq!(read_marker::<Load>(&db), None);
        remove_dir(&d).unwrap();
    }
}
