//! A node's persistent replication state: its epoch, and the synchronous set it last learned
//! from a primary.
//!
//! Owns the records `epoch` (one decimal number), `cluster` (the [`ClusterView`] as text) and
//! `history` (the [`History`] of the log this node holds) in the node's state storage
//! ([`Disk::state`](super::disk::Disk::state): `<dir>/repl/`), each replaced atomically by
//! [`write_record`] (two slots, each with a sequence number and a CRC: a write goes to the
//! older slot and is synced; a read takes the newest intact one, so a torn write leaves the
//! previous value), and that two-slot record format, which the replica log's start record uses
//! too.
//!
//! Invariants:
//! - A node's epoch never goes backwards, and a directory without an epoch record is at
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
use crate::io::{AlignedBuf, Storage};
use crate::util::bytes::{u32_at, u64_at};
use crate::xlog::ReplicationMode;

/// The epoch of a directory that never stored one: the first primary's.
pub const FIRST_EPOCH: u64 = 1;
const EPOCH: &str = "epoch";
const CLUSTER: &str = "cluster";
const HISTORY: &str = "history";

/// Bytes of one slot of a record (header and value, at most); a write writes and a read reads
/// only the 4 KiB blocks the value takes.
const SLOT: usize = 64 * 1024;
/// The unit slots are read and written in.
const BLOCK: usize = 4096;
/// A slot: magic u32 | sequence u64 | length u32 | crc u32 (CRC32C of sequence, length and
/// value) | value.
const SLOT_HEADER: usize = 4 + 8 + 4 + 4;
const SLOT_MAGIC: u32 = 0x5245_5043; // "REPC"

/// The newest intact value of record `name` in `st`, with its sequence number; `None` when no
/// slot holds one.
fn read_slots(st: &dyn Storage, name: &str) -> Result<Option<(u64, Vec<u8>)>> {
    if !st.exists(name) {
        return Ok(None);
    }
    let dev = st.open(name, false)?;
    let mut best: Option<(u64, Vec<u8>)> = None;
    for slot in 0..2u64 {
        if dev.capacity() < (slot + 1) * SLOT as u64 {
            continue;
        }
        let mut head = AlignedBuf::new(BLOCK);
        dev.read_at(slot * SLOT as u64, &mut head)?;
        if u32_at(&head, 0) != SLOT_MAGIC {
            continue;
        }
        let (seq, len) = (u64_at(&head, 4), u32_at(&head, 12) as usize);
        if len > SLOT - SLOT_HEADER {
            continue;
        }
        let used = (SLOT_HEADER + len).next_multiple_of(BLOCK);
        let buf = if used == BLOCK {
            head
        } else {
            let mut all = AlignedBuf::new(used);
            dev.read_at(slot * SLOT as u64, &mut all)?;
            all
        };
        let crc = crate::util::crc32c_append(
            crate::util::crc32c(&buf[4..16]),
            &buf[SLOT_HEADER..SLOT_HEADER + len],
        );
        if crc != u32_at(&buf, 16) {
            continue; // torn: the other slot holds the previous value
        }
        if best.as_ref().is_none_or(|(s, _)| seq > *s) {
            best = Some((seq, buf[SLOT_HEADER..SLOT_HEADER + len].to_vec()));
        }
    }
    Ok(best)
}

/// The value of record `name` in the state storage `st` (see the module documentation).
pub(super) fn read_record(st: &dyn Storage, name: &str) -> Result<Option<Vec<u8>>> {
    Ok(read_slots(st, name)?.map(|(_, v)| v))
}

/// Replaces record `name` in `st` with `value`, atomically and durably.
pub(super) fn write_record(st: &dyn Storage, name: &str, value: &[u8]) -> Result<()> {
    if value.len() > SLOT - SLOT_HEADER {
        return Err(Error::ResourceExhausted(format!(
            "{name} in {}: {} bytes exceed the {} a state record holds",
            st.location(),
            value.len(),
            SLOT - SLOT_HEADER
        )));
    }
    let seq = read_slots(st, name)?.map_or(0, |(s, _)| s) + 1;
    let dev = st.open(name, true)?;
    let mut buf = AlignedBuf::new((SLOT_HEADER + value.len()).next_multiple_of(BLOCK));
    buf[..4].copy_from_slice(&SLOT_MAGIC.to_le_bytes());
    buf[4..12].copy_from_slice(&seq.to_le_bytes());
    buf[12..16].copy_from_slice(&(value.len() as u32).to_le_bytes());
    buf[SLOT_HEADER..SLOT_HEADER + value.len()].copy_from_slice(value);
    let crc = crate::util::crc32c_append(crate::util::crc32c(&buf[4..16]), value);
    buf[16..20].copy_from_slice(&crc.to_le_bytes());
    dev.ensure_capacity(2 * SLOT as u64)?;
    dev.write_at((seq % 2) * SLOT as u64, &buf)?;
    dev.sync()?;
    Ok(())
}

fn text(st: &dyn Storage, name: &str) -> Result<Option<String>> {
    match read_record(st, name)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b).map(Some).map_err(|_| Error::Corruption {
            file: format!("{}/{name}", st.location()),
            offset: 0,
            detail: "state record is not text".into(),
        }),
    }
}

/// The epoch stored in state storage `st` ([`FIRST_EPOCH`] if none was stored).
pub(super) fn epoch_in(st: &dyn Storage) -> Result<u64> {
    match text(st, EPOCH)? {
        None => Ok(FIRST_EPOCH),
        Some(s) => s.trim().parse().map_err(|_| Error::Corruption {
            file: format!("{}/{EPOCH}", st.location()),
            offset: 0,
            detail: format!("epoch record holds {s:?}, not a number"),
        }),
    }
}

/// Stores `epoch` as the node's epoch (durably). Refuses to move it backwards.
pub(super) fn write_epoch(st: &dyn Storage, epoch: u64) -> Result<()> {
    let cur = epoch_in(st)?;
    if epoch < cur {
        return Err(Error::InvalidArgument(format!(
            "epoch of {} would go backwards from {cur} to {epoch}",
            st.location()
        )));
    }
    write_record(st, EPOCH, format!("{epoch}\n").as_bytes())
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

/// The cluster view stored in state storage `st`, if any.
pub(super) fn cluster_in(st: &dyn Storage) -> Result<Option<ClusterView>> {
    match text(st, CLUSTER)? {
        None => Ok(None),
        Some(s) => ClusterView::decode(&s).map(Some).ok_or_else(|| Error::Corruption {
            file: format!("{}/{CLUSTER}", st.location()),
            offset: 0,
            detail: "not a cluster view".into(),
        }),
    }
}

/// Stores the cluster view (durably).
pub(super) fn write_cluster(st: &dyn Storage, v: &ClusterView) -> Result<()> {
    write_record(st, CLUSTER, v.encode().as_bytes())
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

/// The history stored in state storage `st` (the default one-entry history if none was stored).
pub(super) fn history_in(st: &dyn Storage) -> Result<History> {
    match text(st, HISTORY)? {
        None => Ok(History::default()),
        Some(s) => {
            let bad = || Error::Corruption {
                file: format!("{}/{HISTORY}", st.location()),
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
pub(super) fn write_history(st: &dyn Storage, h: &History) -> Result<()> {
    let text: String = h.0.iter().map(|(e, l)| format!("{e} {l}\n")).collect();
    write_record(st, HISTORY, text.as_bytes())
}

/// Copies the epoch and history of state storage `from` into `to` (seeding a standby: it
/// starts at its primary's epoch).
pub(super) fn copy_epoch(from: &dyn Storage, to: &dyn Storage) -> Result<()> {
    write_epoch(to, epoch_in(from)?.max(epoch_in(to)?))?;
    write_history(to, &history_in(from)?)
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
        use super::super::disk::{read_epoch, DirDisk, Disk};
        let d = nvmedb_testkit::TmpDir::path_only("repl-state");
        assert_eq!(read_epoch(&d).unwrap(), FIRST_EPOCH);
        let st = DirDisk::new(&d).state().unwrap();
        write_epoch(st.as_ref(), 4).unwrap();
        assert_eq!(read_epoch(&d).unwrap(), 4);
        assert!(write_epoch(st.as_ref(), 3).is_err());
    }

    #[test]
    fn a_record_torn_by_a_power_cut_leaves_the_previous_value() {
        use crate::io::CrashSimStorage;
        use crate::util::Rng;
        let mut kept = [0usize; 2];
        for seed in 0..64 {
            let st = CrashSimStorage::new();
            write_record(&st, "r", b"first").unwrap();
            // An unsynced second write, then the power goes.
            let dev = st.open("r", false).unwrap();
            let mut buf = AlignedBuf::new(SLOT);
            buf[..4].copy_from_slice(&SLOT_MAGIC.to_le_bytes());
            buf[4..12].copy_from_slice(&2u64.to_le_bytes());
            buf[12..16].copy_from_slice(&6u32.to_le_bytes());
            buf[SLOT_HEADER..SLOT_HEADER + 6].copy_from_slice(b"second");
            let crc = crate::util::crc32c_append(crate::util::crc32c(&buf[4..16]), b"second");
            buf[16..20].copy_from_slice(&crc.to_le_bytes());
            // Version 2 goes to slot 0 (version 1 is in slot 1).
            dev.write_at(0, &buf).unwrap();
            st.crash(&mut Rng::new(seed));
            let v = read_record(&st, "r").unwrap().expect("a value survives");
            assert!(v == b"first" || v == b"second", "seed {seed}: {v:?}");
            kept[usize::from(v == b"second")] += 1;
        }
        assert!(kept[0] > 0 && kept[1] > 0, "both outcomes seen: {kept:?}");
    }
}
