//! A node's persistent replication state: its epoch, and the synchronous set it last learned
//! from a primary.
//!
//! Owns the files `<dir>/repl/epoch` (one decimal number) and `<dir>/repl/cluster` (the
//! [`ClusterView`] as text), both replaced atomically (write, fsync, rename, fsync of the
//! directory).
//!
//! Invariants:
//! - A node's epoch never goes backwards, and a directory without an epoch file is at
//!   [`FIRST_EPOCH`], the epoch of the first primary: so a standby that never met a primary still
//!   promotes past the primary it was seeded from, and fencing by epoch always applies.
//! - A primary persists its epoch before it ships anything ([`super::open_primary`]); a standby
//!   persists an epoch before it acts on it (adopting a newer primary, being fenced, promoting).
//! - The cluster view is what the primary of `epoch` said: its mode and its standbys, in chain
//!   order; promotion fences that set.

use super::ReplicationMode;
use crate::error::{Error, Result};
use std::io::Write;
use std::path::Path;

/// The epoch of a directory that never stored one: the first primary's.
pub const FIRST_EPOCH: u64 = 1;
const DIR: &str = "repl";
const EPOCH_FILE: &str = "epoch";
const CLUSTER_FILE: &str = "cluster";

fn io(path: &Path, kind: crate::io::IoOpKind, e: std::io::Error) -> Error {
    Error::Io(crate::io::IoError::os(&path.display().to_string(), kind, 0, 0, e))
}

/// Replaces `dir/repl/name` with `bytes` atomically and durably.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let d = dir.join(DIR);
    std::fs::create_dir_all(&d).map_err(|e| io(&d, crate::io::IoOpKind::Setup, e))?;
    let path = d.join(name);
    let tmp = d.join(format!("{name}.tmp"));
    let w = crate::io::IoOpKind::Write;
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, w, e))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| io(&tmp, w, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io(&path, w, e))?;
    std::fs::File::open(&d).and_then(|f| f.sync_all()).map_err(|e| io(&d, w, e))?;
    Ok(())
}

fn read_opt(dir: &Path, name: &str) -> Result<Option<(String, std::path::PathBuf)>> {
    let p = dir.join(DIR).join(name);
    match std::fs::read_to_string(&p) {
        Ok(s) => Ok(Some((s, p))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&p, crate::io::IoOpKind::Read, e)),
    }
}

/// The epoch stored in a node's data directory ([`FIRST_EPOCH`] if none was stored).
pub fn read_epoch(dir: &Path) -> Result<u64> {
    match read_opt(dir, EPOCH_FILE)? {
        None => Ok(FIRST_EPOCH),
        Some((s, p)) => s.trim().parse().map_err(|_| Error::Corruption {
            file: p.display().to_string(),
            offset: 0,
            detail: format!("epoch file holds {s:?}, not a number"),
        }),
    }
}

/// Stores `epoch` as the node's epoch (durably). Refuses to move it backwards.
pub(crate) fn write_epoch(dir: &Path, epoch: u64) -> Result<()> {
    let cur = read_epoch(dir)?;
    if epoch < cur {
        return Err(Error::InvalidArgument(format!(
            "epoch of {} would go backwards from {cur} to {epoch}",
            dir.display()
        )));
    }
    write_atomic(dir, EPOCH_FILE, format!("{epoch}\n").as_bytes())
}

/// A primary's synchronous set as a standby learned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    /// The primary's epoch when it said so.
    pub epoch: u64,
    /// Its commit mode.
    pub mode: ReplicationMode,
    /// Its standbys' addresses, in chain order.
    pub members: Vec<String>,
    /// Which member the receiving standby is (`None` when it is not known).
    pub me: Option<usize>,
}

impl ClusterView {
    /// Text form: `epoch N`, `mode M`, `me I|-`, then one `member ADDR` line each.
    pub fn encode(&self) -> String {
        let mut s = format!(
            "epoch {}\nmode {}\nme {}\n",
            self.epoch,
            super::mode_name(self.mode),
            self.me.map_or("-".to_string(), |m| m.to_string())
        );
        for m in &self.members {
            s.push_str(&format!("member {m}\n"));
        }
        s
    }

    /// Parses [`ClusterView::encode`]'s form; `None` if it is not one.
    pub fn decode(s: &str) -> Option<Self> {
        let mut lines = s.lines();
        let epoch = lines.next()?.strip_prefix("epoch ")?.parse().ok()?;
        let mode = super::parse_mode(lines.next()?.strip_prefix("mode ")?)?;
        let me = match lines.next()?.strip_prefix("me ")? {
            "-" => None,
            m => Some(m.parse().ok()?),
        };
        let members: Vec<String> =
            lines.map(|l| l.strip_prefix("member ").map(String::from)).collect::<Option<_>>()?;
        if me.is_some_and(|m| m >= members.len()) {
            return None;
        }
        Some(Self { epoch, mode, members, me })
    }

    /// True when the members marked in `fenced` (by index) are enough that a primary of this
    /// view can no longer complete a commit in its mode: with every other member acknowledging
    /// everything, the combined position is still 0. Never true in lazy mode (a lazy primary
    /// needs no standby).
    pub fn fenced_enough(&self, fenced: &[bool]) -> bool {
        let shadows: Vec<u64> = (0..self.members.len())
            .map(|i| if fenced.get(i).copied().unwrap_or(false) { 0 } else { u64::MAX })
            .collect();
        !self.members.is_empty() && crate::xlog::combine(self.mode, u64::MAX, &shadows) == 0
    }
}

/// The cluster view stored in `dir`, if any.
pub fn read_cluster(dir: &Path) -> Result<Option<ClusterView>> {
    match read_opt(dir, CLUSTER_FILE)? {
        None => Ok(None),
        Some((s, p)) => ClusterView::decode(&s).map(Some).ok_or_else(|| Error::Corruption {
            file: p.display().to_string(),
            offset: 0,
            detail: "not a cluster view".into(),
        }),
    }
}

/// Stores the cluster view (durably).
pub(crate) fn write_cluster(dir: &Path, v: &ClusterView) -> Result<()> {
    write_atomic(dir, CLUSTER_FILE, v.encode().as_bytes())
}

/// Copies the epoch of `from` into `to` (seeding a standby: it starts at its primary's epoch).
pub(crate) fn copy_epoch(from: &Path, to: &Path) -> Result<()> {
    write_epoch(to, read_epoch(from)?.max(read_epoch(to)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_round_trip_and_fencing_counts_per_mode() {
        let v = ClusterView {
            epoch: 3,
            mode: ReplicationMode::Quorum(2),
            members: vec!["a:1".into(), "b:2".into(), "c:3".into()],
            me: Some(1),
        };
        assert_eq!(ClusterView::decode(&v.encode()), Some(v.clone()));
        assert_eq!(ClusterView::decode("epoch x\n"), None);
        // Quorum 2 of 3: two standbys must be fenced (n - k + 1).
        assert!(!v.fenced_enough(&[true, false, false]));
        assert!(v.fenced_enough(&[true, false, true]));
        let eager = ClusterView { mode: ReplicationMode::Eager, ..v.clone() };
        assert!(eager.fenced_enough(&[false, true, false]));
        let chain = ClusterView { mode: ReplicationMode::Chain, ..v.clone() };
        assert!(!chain.fenced_enough(&[true, true, false]));
        assert!(chain.fenced_enough(&[false, false, true]));
        let lazy = ClusterView { mode: ReplicationMode::Lazy, ..v };
        assert!(!lazy.fenced_enough(&[true, true, true]));
    }

    #[test]
    fn epochs_start_at_one_and_never_go_back() {
        let d = std::env::temp_dir().join(format!("nvmedb-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(read_epoch(&d).unwrap(), FIRST_EPOCH);
        write_epoch(&d, 4).unwrap();
        assert_eq!(read_epoch(&d).unwrap(), 4);
        assert!(write_epoch(&d, 3).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
