//! Online base backups and point-in-time restore (`nvmedb backup`, `nvmedb restore`).
//!
//! Owns: the backup directory's layout — `data/` (the catalog, every heap and index file),
//! `wal/` (the log segments from the backup's start on, under their slot names) and
//! `backup.manifest` (source, log id, start and end LSN, and every file with its length and
//! CRC32C, closed by a CRC of the manifest itself) — [`backup`] and [`restore`]; the log
//! archive is [`archive`].
//!
//! How a backup is taken while the database runs (as a standby's base backup is,
//! `repl::seed`): the catalog is read first; its checkpoint positions give the start S (every
//! change before S is in the data files as they were then). Then every data file is copied,
//! each page checked against its checksum and read again if a concurrent write-back tore it;
//! then the log's segments from the one holding S on. Redo from S over the copied files makes
//! the fuzzy copy consistent, and a restore replays at least to the end E of the copied log
//! (every page copied is at most as new as the log then). The manifest is written last
//! (synced, renamed): a backup without it — one killed part-way — is refused by [`restore`].
//!
//! A restore checks the manifest and every file's CRC, copies the data files and the backup's
//! segments into the new directory, appends the archived segments that follow (each checked
//! against its `.sum`, its header's log id and sequence), stops at the target (the end of the
//! archive, an LSN, or the durable position marked at a time), cuts the log there
//! ([`wal::cut_at`](crate::wal::cut_at)) and opens the result once as an ordinary database
//! (redo, undo of unfinished transactions, a checkpoint). A missing or damaged segment stops it
//! with an error naming the file.
//!
//! Invariants: nothing in a backup or restore decodes an engine record — segments move as the
//! log's own files; a restore never writes into the backup or the archive.

pub mod archive;

use crate::db::{Database, Options, CATALOG_FILE};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, DirStorage, FileOptions, IoOpKind, Storage};
use crate::table::catalog::CatalogStore;
use crate::table::files::parse_table_file;
use crate::wal::{live_segments, Lsn};
use archive::{copy_device, file_crc, io_err, sync_dir, write_durably, Archive};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The manifest's file name: present only in a complete backup.
pub const MANIFEST: &str = "backup.manifest";
const MANIFEST_HEADER: &str = "nvmedb backup 1";
/// Pages read per request while copying a data file.
const PAGES_PER_READ: usize = 64;

/// What a finished backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The database directory it was taken from.
    pub source: String,
    /// The log's identifier (archived segments must carry it).
    pub log_id: u64,
    /// Redo starts here.
    pub start_lsn: Lsn,
    /// The end of the log copied: a restore replays at least to here.
    pub end_lsn: Lsn,
    /// When it finished (Unix microseconds).
    pub finished_unix_us: i64,
    /// Files relative to the backup directory, with length and CRC32C.
    pub files: Vec<(String, u64, u32)>,
    /// The highest segment sequence number in `wal/`.
    pub last_seq: u64,
}

impl Manifest {
    fn encode(&self) -> String {
        let mut s = format!(
            "{MANIFEST_HEADER}\nsource {}\nlog_id {:016x}\nstart_lsn {}\nend_lsn {}\nlast_seq {}\nfinished_unix_us {}\n",
            self.source, self.log_id, self.start_lsn, self.end_lsn, self.last_seq, self.finished_unix_us
        );
        for (n, len, crc) in &self.files {
            s.push_str(&format!("file {n} {len} {crc:08x}\n"));
        }
        let crc = crate::util::crc32c(s.as_bytes());
        s.push_str(&format!("end {crc:08x}\n"));
        s
    }

    /// Reads the manifest of the backup in `dir`; an absent, cut or damaged one is an error
    /// saying the backup is incomplete or damaged.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let bad = |detail: String| Error::Corruption { file: path.display().to_string(), offset: 0, detail };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::InvalidArgument(format!(
                    "{} is not a complete backup: it has no {MANIFEST} (the backup was interrupted, or is \
                     still running); take a new one",
                    dir.display()
                )))
            }
            Err(e) => return Err(io_err(&path, IoOpKind::Read, e)),
        };
        let body_end =
            text.rfind("end ").ok_or_else(|| bad("no end line: the manifest is cut short".into()))?;
        let (body, end) = text.split_at(body_end);
        let want = u32::from_str_radix(end.trim().trim_start_matches("end ").trim(), 16)
            .map_err(|_| bad("its end line is damaged".into()))?;
        if crate::util::crc32c(body.as_bytes()) != want {
            return Err(bad("its checksum does not match: the manifest is damaged".into()));
        }
        let mut m = Manifest {
            source: String::new(),
            log_id: 0,
            start_lsn: 0,
            end_lsn: 0,
            finished_unix_us: 0,
            files: vec![],
            last_seq: 0,
        };
        let mut lines = body.lines();
        if lines.next() != Some(MANIFEST_HEADER) {
            return Err(bad(format!("the first line is not `{MANIFEST_HEADER}`")));
        }
        for l in lines {
            let (k, v) = l.split_once(' ').ok_or_else(|| bad(format!("bad line `{l}`")))?;
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad(format!("bad number in `{l}`")));
            match k {
                "source" => m.source = v.to_string(),
                "log_id" => m.log_id = u64::from_str_radix(v, 16).map_err(|_| bad(format!("bad `{l}`")))?,
                "start_lsn" => m.start_lsn = num(v)?,
                "end_lsn" => m.end_lsn = num(v)?,
                "last_seq" => m.last_seq = num(v)?,
                "finished_unix_us" => m.finished_unix_us = num(v)? as i64,
                "file" => {
                    let mut it = v.rsplitn(3, ' ');
                    let (crc, len, name) = (it.next(), it.next(), it.next());
                    let (Some(crc), Some(len), Some(name)) = (crc, len, name) else {
                        return Err(bad(format!("bad `{l}`")));
                    };
                    let crc = u32::from_str_radix(crc, 16).map_err(|_| bad(format!("bad `{l}`")))?;
                    m.files.push((name.to_string(), num(len)?, crc));
                }
                _ => return Err(bad(format!("unknown line `{l}`"))),
            }
        }
        Ok(m)
    }
}

/// What [`backup`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupReport {
    /// The manifest it wrote.
    pub manifest: Manifest,
    /// Bytes copied (data files and log).
    pub bytes: u64,
    /// Wall time.
    pub seconds: f64,
}

fn fresh_dir(to: &Path) -> Result<()> {
    if to.exists() && std::fs::read_dir(to).map_err(|e| io_err(to, IoOpKind::Setup, e))?.next().is_some() {
        return Err(Error::AlreadyExists(format!("{} is not empty", to.display())));
    }
    std::fs::create_dir_all(to).map_err(|e| io_err(to, IoOpKind::Setup, e))
}

/// Takes an online base backup of the database in `from` (running or closed, on this machine)
/// into the new directory `to`. `progress(file, bytes)` is called after each file.
pub fn backup(from: &Path, to: &Path, progress: &mut dyn FnMut(&str, u64)) -> Result<BackupReport> {
    let started = Instant::now();
    let fo = FileOptions::default();
    let src = DirStorage::new(from, fo.clone())?;
    if !src.exists(CATALOG_FILE) {
        return Err(Error::NotFound(format!("{} holds no database (no {CATALOG_FILE})", from.display())));
    }
    let copies = Options::default().file_log_copies(from)?;
    if live_segments(&copies)?.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{} keeps no file log in {}/wal: only databases with a file log can be backed up",
            from.display(),
            from.display()
        )));
    }
    fresh_dir(to)?;
    let (data_dir, wal_dir) = (to.join("data"), to.join("wal"));
    for d in [&data_dir, &wal_dir] {
        std::fs::create_dir_all(d).map_err(|e| io_err(d, IoOpKind::Setup, e))?;
    }
    // 1. The catalog: its checkpoint positions give the start.
    let cat_dev = src.open(CATALOG_FILE, false)?;
    let (_, cat) = CatalogStore::load(cat_dev.clone())?;
    let cat = cat.ok_or_else(|| Error::NotFound(format!("the catalog of {} is empty", from.display())))?;
    if !cat.tablespaces.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{} has tables in named tablespaces, which a backup does not copy yet",
            from.display()
        )));
    }
    let start = cat.checkpoint_undo_lsn.min(cat.checkpoint_redo_lsn);
    let mut files = Vec::new();
    let mut bytes = 0u64;
    let crc = copy_device(cat_dev.as_ref(), cat_dev.capacity(), &data_dir, CATALOG_FILE)?;
    files.push((format!("data/{CATALOG_FILE}"), cat_dev.capacity(), crc));
    progress(CATALOG_FILE, cat_dev.capacity());
    // 2. The data files, page by page, each page whole.
    let mut names: Vec<String> = src.list()?.into_iter().filter(|n| parse_table_file(n).is_some()).collect();
    names.sort();
    for name in &names {
        let (id, heap) = parse_table_file(name).expect("filtered");
        let ps = if heap { cat.table_page_size } else { cat.index_page_size } as usize;
        let dev = src.open(name, false)?;
        let len = dev.capacity() / ps as u64 * ps as u64;
        let path = data_dir.join(name);
        let mut out = std::fs::File::create(&path).map_err(|e| io_err(&path, IoOpKind::Write, e))?;
        let mut buf = AlignedBuf::large(PAGES_PER_READ * ps);
        let (mut off, mut crc) = (0u64, 0u32);
        while off < len {
            let n = (PAGES_PER_READ * ps).min((len - off) as usize);
            dev.read_at(off, &mut buf[..n])?;
            for k in 0..n / ps {
                let at = off + (k * ps) as u64;
                crate::repl::seed::read_whole_page(
                    dev.as_ref(),
                    name,
                    at,
                    id,
                    at / ps as u64,
                    &mut buf[k * ps..(k + 1) * ps],
                    &crate::repl::clock::SystemClock,
                )?;
            }
            crc = crate::util::crc32c_append(crc, &buf[..n]);
            std::io::Write::write_all(&mut out, &buf[..n]).map_err(|e| io_err(&path, IoOpKind::Write, e))?;
            off += n as u64;
        }
        out.sync_all().map_err(|e| io_err(&path, IoOpKind::Sync, e))?;
        files.push((format!("data/{name}"), len, crc));
        bytes += len;
        progress(name, len);
    }
    sync_dir(&data_dir)?;
    // 3. The log from the segment holding the start on, as the log's own files.
    let segs = live_segments(&copies)?;
    let log_id = archive::read_log_id(copies[0].as_ref(), &segs[0])?;
    let first = segs.iter().rposition(|s| s.base_lsn <= start).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "the log of {} starts at LSN {} after the backup's start {start}: it was released while \
             the files were copied; take the backup again",
            from.display(),
            segs[0].base_lsn
        ))
    })?;
    let mut last_seq = 0;
    for s in &segs[first..] {
        let dev = copies[0].open(&s.name, false)?;
        let crc = copy_device(dev.as_ref(), s.segment_bytes, &wal_dir, &s.name)?;
        let h = crate::wal::read_segment_header(copies[0].as_ref(), &s.name)?;
        if h.seq != s.seq || h.log_id != log_id {
            return Err(Error::InvalidArgument(format!(
                "log segment {} of {} was recycled while it was copied; take the backup again",
                s.name,
                from.display()
            )));
        }
        files.push((format!("wal/{}", s.name), s.segment_bytes, crc));
        bytes += s.segment_bytes;
        last_seq = s.seq;
        progress(&s.name, s.segment_bytes);
    }
    sync_dir(&wal_dir)?;
    // The end of the copied log: read through it (the log's own reader).
    let wal = Arc::new(DirStorage::new(&wal_dir, fo)?) as Arc<dyn Storage>;
    let end = log_end(&wal, start)?;
    let manifest = Manifest {
        source: from.display().to_string(),
        log_id,
        start_lsn: start,
        end_lsn: end,
        finished_unix_us: archive::unix_micros(),
        files,
        last_seq,
    };
    write_durably(to, MANIFEST, manifest.encode().as_bytes())?;
    Ok(BackupReport { manifest, bytes, seconds: started.elapsed().as_secs_f64() })
}

/// The end of the last readable record of the log in `wal` from `start` on.
fn log_end(wal: &Arc<dyn Storage>, start: Lsn) -> Result<Lsn> {
    let mut r = crate::wal::LogReader::open_copies(vec![wal.clone()], start)?;
    let mut end = start;
    while let Some(rec) = r.next_record()? {
        end = rec.end_lsn;
    }
    Ok(end)
}

/// Where a restore stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Everything the backup and the archive hold.
    End,
    /// The last record ending at or before this LSN.
    Lsn(Lsn),
    /// The durable position the archive marked last at or before this time (Unix
    /// microseconds): every commit acknowledged before the mark is kept.
    Time(i64),
}

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreReport {
    /// The log ends here in the restored database.
    pub end_lsn: Lsn,
    /// Segments taken from the archive.
    pub archived_segments: usize,
    /// Log bytes replayed by the first open (from the backup's start to the end).
    pub log_bytes: u64,
    /// Time spent copying and checking.
    pub copy_seconds: f64,
    /// Time the first open took (redo, undo, checkpoint).
    pub recovery_seconds: f64,
}

fn check_file(path: &Path, len: u64, crc: u32) -> Result<()> {
    let (got, got_len) = file_crc(path)?;
    if got_len != len || got != crc {
        return Err(Error::Corruption {
            file: path.display().to_string(),
            offset: 0,
            detail: format!(
                "damaged: {got_len} bytes with CRC32C {got:08x}, the backup recorded {len} bytes with {crc:08x}"
            ),
        });
    }
    Ok(())
}

/// The archive's copy of the backup's last segment, if it holds more than the backup's: the
/// whole segment, or the partial copy the database left when it closed before the segment
/// filled if that copy reaches past the backup's end (an older one, from a close before the
/// backup, holds less than the backup's own copy).
fn longer_copy_of_last(
    segs: &std::collections::BTreeMap<u64, archive::ArchivedSegment>,
    m: &Manifest,
) -> Option<archive::ArchivedSegment> {
    segs.get(&m.last_seq).filter(|s| !s.partial || s.end.is_some_and(|e| e > m.end_lsn)).cloned()
}

/// Rebuilds a database in the new directory `to` from the backup in `backup_dir`, the log
/// archive in `archive_dir` (optional: without it, the backup's own log only) up to `target`.
/// The result opens as an ordinary database.
pub fn restore(
    backup_dir: &Path,
    archive_dir: Option<&Path>,
    to: &Path,
    target: Target,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<RestoreReport> {
    let started = Instant::now();
    let m = Manifest::read(backup_dir)?;
    for (name, len, crc) in &m.files {
        check_file(&backup_dir.join(name), *len, *crc)?;
    }
    let archive = archive_dir.map(Archive::new);
    let target_lsn = target_lsn(&m, backup_dir, archive.as_ref(), target)?;
    fresh_dir(to)?;
    let wal_dir = to.join("wal");
    std::fs::create_dir_all(&wal_dir).map_err(|e| io_err(&wal_dir, IoOpKind::Setup, e))?;
    for (name, len, _) in &m.files {
        let src = backup_dir.join(name);
        let dst = match name.strip_prefix("data/") {
            Some(n) => to.join(n),
            None => wal_dir.join(name.strip_prefix("wal/").unwrap_or(name)),
        };
        std::fs::copy(&src, &dst).map_err(|e| io_err(&dst, IoOpKind::Write, e))?;
        progress(name, *len);
    }
    let taken = match &archive {
        Some(a) => take_archived(a, &m, &wal_dir, target_lsn, progress)?,
        None => 0,
    };
    sync_dir(&wal_dir)?;
    let wal: Arc<dyn Storage> = Arc::new(DirStorage::new(&wal_dir, FileOptions::default())?);
    let end = log_end(&wal, m.start_lsn)?;
    let end = match target_lsn {
        None => end,
        Some(l) => cut_at_target(&wal, &m, end, l, archive.is_some())?,
    };
    drop(wal);
    let copy_seconds = started.elapsed().as_secs_f64();
    let t = Instant::now();
    let db = Database::open(to, Options::default())?;
    db.close()?;
    Ok(RestoreReport {
        end_lsn: end,
        archived_segments: taken,
        log_bytes: end.saturating_sub(m.start_lsn),
        copy_seconds,
        recovery_seconds: t.elapsed().as_secs_f64(),
    })
}

/// The LSN a restore of the backup `m` (in `backup_dir`) stops at, `None` for the end of what
/// is there: a time resolves to the archive's last mark at or before it. A target before the
/// backup's consistent point is refused.
fn target_lsn(
    m: &Manifest,
    backup_dir: &Path,
    archive: Option<&Archive>,
    target: Target,
) -> Result<Option<Lsn>> {
    let l = match target {
        Target::End => return Ok(None),
        Target::Lsn(l) => l,
        Target::Time(t) => {
            let a = archive.ok_or_else(|| {
                Error::InvalidArgument("a restore to a time needs the log archive (--archive)".into())
            })?;
            let marks = a.marks(m.log_id)?;
            let mark = marks.iter().rev().find(|(mt, _)| *mt <= t).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the archive in {} has no mark of log {:016x} at or before that time (its first is at \
                     {} µs since 1970)",
                    a.dir.display(),
                    m.log_id,
                    marks.first().map_or("none".to_string(), |x| x.0.to_string())
                ))
            })?;
            mark.1
        }
    };
    if l < m.end_lsn {
        return Err(Error::InvalidArgument(format!(
            "the backup in {} is consistent only from LSN {} on (the end of the log it copied); the \
             target LSN {l} is earlier: restore from an older backup",
            backup_dir.display(),
            m.end_lsn
        )));
    }
    Ok(Some(l))
}

/// Copies into `wal_dir` the archived segments that follow the backup `m`'s, in order, until
/// the target (the backup's last segment replaced by a longer archived copy of it); returns
/// how many were taken. A segment missing before the target is an error naming it.
fn take_archived(
    a: &Archive,
    m: &Manifest,
    wal_dir: &Path,
    target_lsn: Option<Lsn>,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<usize> {
    let mut taken = 0;
    let segs = a.segments(m.log_id)?;
    let mut next = m.last_seq + 1;
    let wal = DirStorage::new(wal_dir, FileOptions::default())?;
    let mut slot = wal.list()?.iter().filter_map(|n| crate::wal::parse_slot(n)).max().unwrap_or(0) + 1;
    let mut replace_last = longer_copy_of_last(&segs, m);
    loop {
        let seg = match replace_last.take() {
            Some(s) => s,
            None => match segs.get(&next) {
                Some(s) => s.clone(),
                None => break,
            },
        };
        if let Some(l) = target_lsn {
            let base = segment_base(&seg.path)?;
            if base > l && seg.seq > m.last_seq {
                break;
            }
        }
        let len = check_archived(&seg, m)?;
        let name = if seg.seq == m.last_seq {
            // The whole segment replaces the backup's copy of it, under the same slot.
            m.files
                .iter()
                .filter_map(|(n, _, _)| n.strip_prefix("wal/"))
                .next_back()
                .map(str::to_string)
                .unwrap_or_else(|| crate::wal::slot_name(slot))
        } else {
            let n = crate::wal::slot_name(slot);
            slot += 1;
            n
        };
        std::fs::copy(&seg.path, wal_dir.join(&name))
            .map_err(|e| io_err(&wal_dir.join(&name), IoOpKind::Write, e))?;
        progress(&seg.path.display().to_string(), len);
        taken += 1;
        if seg.seq > m.last_seq {
            next = seg.seq + 1;
            if seg.partial {
                break;
            }
        }
    }
    // A gap: a later segment exists while `next` does not.
    if let Some((&after, _)) = segs.range(next..).next() {
        let needed = target_lsn.is_none_or(|l| {
            segs.get(&after).and_then(|s| segment_base(&s.path).ok()).is_some_and(|b| b <= l)
        });
        if needed {
            return Err(Error::NotFound(format!(
                "log segment {} ({}) is missing from the archive {}; segment {after} follows it",
                next,
                archive::segment_name(m.log_id, next),
                a.dir.display()
            )));
        }
    }
    Ok(taken)
}

/// Checks an archived segment before it is taken: its copy finished (its `.sum` exists), its
/// bytes match the sum, and its header names the backup's log and the expected segment.
/// Returns its length.
fn check_archived(seg: &archive::ArchivedSegment, m: &Manifest) -> Result<u64> {
    let (crc, len) = seg.sum.ok_or_else(|| Error::Corruption {
        file: seg.path.display().to_string(),
        offset: 0,
        detail: "archived segment without its .sum: its copy never finished".into(),
    })?;
    check_file(&seg.path, len, crc)?;
    let h = segment_header_of(&seg.path)?;
    if h.log_id != m.log_id || h.seq != seg.seq {
        return Err(Error::Corruption {
            file: seg.path.display().to_string(),
            offset: 0,
            detail: format!(
                "its header says log {:016x} segment {}, expected log {:016x} segment {}",
                h.log_id, h.seq, m.log_id, seg.seq
            ),
        });
    }
    Ok(len)
}

/// Cuts the restored log (which ends at `end`) after its last record ending at or before the
/// target `l`; returns the cut. A target past `end` is an error.
fn cut_at_target(wal: &Arc<dyn Storage>, m: &Manifest, end: Lsn, l: Lsn, archived: bool) -> Result<Lsn> {
    if l > end {
        return Err(Error::NotFound(format!(
            "the backup and archive hold the log up to LSN {end}, short of the target LSN {l}{}",
            if archived { "" } else { " (no --archive given)" }
        )));
    }
    let mut r = crate::wal::LogReader::open_copies(vec![wal.clone()], m.start_lsn)?;
    let mut cut = m.start_lsn;
    while let Some(rec) = r.next_record()? {
        if rec.end_lsn > l {
            break;
        }
        cut = rec.end_lsn;
    }
    drop(r);
    crate::wal::cut_at(std::slice::from_ref(wal), cut)?;
    Ok(cut)
}

fn segment_header_of(path: &Path) -> Result<crate::wal::SegmentHeader> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let st = DirStorage::new(dir, FileOptions::default())?;
    crate::wal::read_segment_header(&st, &name)
}

fn segment_base(path: &Path) -> Result<Lsn> {
    Ok(segment_header_of(path)?.base_lsn)
}

/// A backup directory's manifest path (for messages).
pub fn manifest_path(dir: &Path) -> PathBuf {
    dir.join(MANIFEST)
}
