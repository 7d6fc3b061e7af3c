//! A node's persistent replication state: its epoch, and the synchronous set it last learned
//! from a primary.
//!
//! Owns the files `<dir>/repl/epoch` (one decimal number), `<dir>/repl/cluster` (the
//! [`ClusterView`] as text) and `<dir>/repl/history` (the [`History`] of the log this node
//! holds), each replaced atomically (write, fsync, rename, fsync of the directory).
//!
//! Invariants:
//! - A node's epoch never goes backwards, and a directory without an epoch file is at
//!   [`FIRST_EPOCH`], the epoch of the first primary: so a standby that never met a primary still
//!   promotes past the primary it was seeded from, and fencing by epoch always applies.
//! - A primary persists its epoch before it ships anything ([`open_primary`](super::open::open_primary)); a standby
//!   persists an epoch before it acts on it (adopting a newer primary, being fenced, promoting).
//! - The cluster view is what the primary of `epoch` said: its mode and its standbys, in chain
//!   order; promotion fences that set.
//! - The history lists, for each epoch whose primary wrote records into this node's log, the
//!   LSN where its records begin, in increasing epoch and LSN order; two nodes' logs agree up to
//!   the first point where their histories differ ([`History::fork_point`]).

use super::mode::{mode_name, parse_mode};
use crate::error::{Error, Result};
use crate::util::bytes::u64_at;
use crate::xlog::ReplicationMode;
use std::io::Write;
use std::path::Path;

/// The epoch of a directory that never stored one: the first primary's.
pub const FIRST_EPOCH: u64 = 1;
const DIR: &str = "repl";
const EPOCH_FILE: &str = "epoch";
const CLUSTER_FILE: &str = "cluster";
const HISTORY_FILE: &str = "history";

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
            mode_name(self.mode),
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
        let mode = parse_mode(lines.next()?.strip_prefix("mode ")?)?;
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

/// The epochs of a log: `(epoch, first LSN written under it)`, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History(pub Vec<(u64, u64)>);

impl Default for History {
    fn default() -> Self {
        History(vec![(FIRST_EPOCH, 0)])
    }
}

impl History {
    /// The epoch of the newest entry.
    pub fn last_epoch(&self) -> u64 {
        self.0.last().map_or(FIRST_EPOCH, |e| e.0)
    }

    /// Records that epoch `epoch` begins writing at `lsn` (no-op unless `epoch` is newer).
    pub fn begin(&mut self, epoch: u64, lsn: u64) {
        if epoch > self.last_epoch() {
            self.0.push((epoch, lsn));
        }
    }

    /// The LSN up to which a log of this history and a log of `other` agree: the smaller start
    /// of the first entry where they differ (`u64::MAX` when one is a prefix of the other and
    /// nothing differs).
    pub fn fork_point(&self, other: &History) -> u64 {
        for i in 0..self.0.len().max(other.0.len()) {
            match (self.0.get(i), other.0.get(i)) {
                (Some(a), Some(b)) if a == b => {}
                (a, b) => return a.map_or(u64::MAX, |a| a.1).min(b.map_or(u64::MAX, |b| b.1)),
            }
        }
        u64::MAX
    }

    /// Wire form: count u32, then (epoch u64, lsn u64) each.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = (self.0.len() as u32).to_le_bytes().to_vec();
        for (e, l) in &self.0 {
            b.extend_from_slice(&e.to_le_bytes());
            b.extend_from_slice(&l.to_le_bytes());
        }
        b
    }

    /// Parses [`History::encode`]'s form.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let n = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        if b.len() != 4 + 16 * n || n == 0 {
            return None;
        }
        let v: Vec<(u64, u64)> = (0..n)
            .map(|i| {
                let o = 4 + 16 * i;
                (u64_at(b, o), u64_at(b, o + 8))
            })
            .collect();
        v.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1).then_some(History(v))
    }
}

/// The history stored in `dir` (the default one-entry history if none was stored).
pub fn read_history(dir: &Path) -> Result<History> {
    match read_opt(dir, HISTORY_FILE)? {
        None => Ok(History::default()),
        Some((s, p)) => {
            let bad = || Error::Corruption {
                file: p.display().to_string(),
                offset: 0,
                detail: "not an epoch history".into(),
            };
            let mut v = Vec::new();
            for l in s.lines() {
                let (e, lsn) = l.split_once(' ').ok_or_else(bad)?;
                v.push((e.parse().map_err(|_| bad())?, lsn.parse().map_err(|_| bad())?));
            }
            History::decode(&History(v).encode()).ok_or_else(bad)
        }
    }
}

/// Stores the history (durably).
pub(crate) fn write_history(dir: &Path, h: &History) -> Result<()> {
    let text: String = h.0.iter().map(|(e, l)| format!("{e} {l}\n")).collect();
    write_atomic(dir, HISTORY_FILE, text.as_bytes())
}

/// Copies the epoch of `from` into `to` (seeding a standby: it starts at its primary's epoch).
pub(crate) fn copy_epoch(from: &Path, to: &Path) -> Result<()> {
    write_epoch(to, read_epoch(from)?.max(read_epoch(to)?))?;
    write_history(to, &read_history(from)?)
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
    fn histories_find_their_fork_point() {
        let a = History(vec![(1, 0), (2, 500)]);
        let b = History(vec![(1, 0), (2, 500), (4, 900)]);
        let c = History(vec![(1, 0), (3, 700)]);
        assert_eq!(a.fork_point(&b), 900, "a is a prefix of b: they agree up to b's next epoch");
        assert_eq!(b.fork_point(&a), 900);
        assert_eq!(a.fork_point(&a), u64::MAX);
        assert_eq!(a.fork_point(&c), 500);
        assert_eq!(History::decode(&b.encode()), Some(b.clone()));
        assert_eq!(History::decode(&History(vec![(2, 0), (1, 5)]).encode()), None);
        let mut h = History::default();
        h.begin(1, 50);
        h.begin(3, 80);
        assert_eq!(h, History(vec![(1, 0), (3, 80)]));
    }

    #[test]
    fn epochs_start_at_one_and_never_go_back() {
        let d = nvmedb_testkit::TmpDir::path_only("repl-state");
        assert_eq!(read_epoch(&d).unwrap(), FIRST_EPOCH);
        write_epoch(&d, 4).unwrap();
        assert_eq!(read_epoch(&d).unwrap(), 4);
        assert!(write_epoch(&d, 3).is_err());
    }
}
