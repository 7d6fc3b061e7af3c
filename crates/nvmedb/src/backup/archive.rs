//! The log archive: every finished segment of a database's file log, copied into a directory
//! with its checksum, and marks of when the log was durable where (for restores to a time).
//!
//! Owns: the archive's file names (`<log id>-<seq>.wal`, its checksum `<..>.wal.sum`, the last
//! segment of a closed log as `<..>.partial`, the marks `<log id>.marks`), [`ArchiveLogOpener`]
//! and [`ArchivingLog`] (a [`RecordLog`] around the file log that copies each segment once a
//! newer one has started, and every segment a truncation is about to release), and
//! [`Archive`] (reading it back). Segments are the log's own files: their names, headers and
//! chain come from `wal::live_segments`; nothing here decodes a record.
//!
//! Invariants: a segment is in the archive only with its `.sum` (CRC32C and length of the
//! whole file), written after the segment itself was synced and renamed into place, so an
//! interrupted copy is absent, never short; a segment is archived before the log may release
//! it (`truncate_before` waits for the copy); a mark `(t, lsn)` means every commit acknowledged
//! before time `t` ends at or before `lsn` (it is the durable position read at `t`).

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Device, IoError, IoOpKind, Storage};
use crate::util::sync::MutexExt;
use crate::wal::{
    live_segments, LogOpener, Lsn, RecordLog, RecordReader, RecoveredLog, SegmentDesc, WalStats,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes copied per read.
const CHUNK: usize = 4 << 20;
/// How often the archiver looks for finished segments and takes a mark.
const TICK: Duration = Duration::from_millis(100);

pub(crate) fn io_err(what: &Path, op: IoOpKind, e: std::io::Error) -> Error {
    Error::Io(IoError::os(&what.display().to_string(), op, 0, 0, e))
}

/// Microseconds since the Unix epoch.
pub fn unix_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// The archive file name of segment `seq` of log `log_id`.
pub fn segment_name(log_id: u64, seq: u64) -> String {
    format!("{log_id:016x}-{seq:012}.wal")
}

fn partial_name(log_id: u64, seq: u64) -> String {
    format!("{log_id:016x}-{seq:012}.partial")
}

fn marks_name(log_id: u64) -> String {
    format!("{log_id:016x}.marks")
}

/// Writes `bytes` to `dir/name` durably: a temporary file, synced, renamed, the directory synced.
pub(crate) fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, IoOpKind::Write, e))?;
    f.write_all(bytes).map_err(|e| io_err(&tmp, IoOpKind::Write, e))?;
    f.sync_all().map_err(|e| io_err(&tmp, IoOpKind::Sync, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, IoOpKind::Write, e))?;
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(dir, IoOpKind::Sync, e))
}

/// Copies `len` bytes of `dev` to `dir/name` (through a temporary file, synced and renamed)
/// and returns their CRC32C.
pub(crate) fn copy_device(dev: &dyn Device, len: u64, dir: &Path, name: &str) -> Result<u32> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut f = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, IoOpKind::Write, e))?;
    let mut buf = AlignedBuf::large(CHUNK);
    let (mut off, mut crc) = (0u64, 0u32);
    while off < len {
        let n = CHUNK.min((len - off) as usize);
        let aligned = n.div_ceil(4096) * 4096;
        crate::wal::read_clamped(dev, off, &mut buf[..aligned])?;
        crc = crate::util::crc32c_append(crc, &buf[..n]);
        f.write_all(&buf[..n]).map_err(|e| io_err(&tmp, IoOpKind::Write, e))?;
        off += n as u64;
    }
    f.sync_all().map_err(|e| io_err(&tmp, IoOpKind::Sync, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, IoOpKind::Write, e))?;
    Ok(crc)
}

/// The CRC32C and length of a file, read in chunks.
pub(crate) fn file_crc(path: &Path) -> Result<(u32, u64)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| io_err(path, IoOpKind::Read, e))?;
    let mut buf = vec![0u8; CHUNK];
    let (mut crc, mut len) = (0u32, 0u64);
    loop {
        let n = f.read(&mut buf).map_err(|e| io_err(path, IoOpKind::Read, e))?;
        if n == 0 {
            return Ok((crc, len));
        }
        crc = crate::util::crc32c_append(crc, &buf[..n]);
        len += n as u64;
    }
}

/// A segment as the archive holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedSegment {
    /// Its sequence number in its log.
    pub seq: u64,
    /// The file.
    pub path: PathBuf,
    /// The last segment of a log that was closed before the segment filled.
    pub partial: bool,
    /// The CRC32C and length its `.sum` records (`None`: no `.sum`, the copy never finished).
    pub sum: Option<(u32, u64)>,
    /// A partial copy's durable end: the log position it holds every record up to (recorded
    /// in its `.sum`; `None` for full segments and for partial copies of older archives).
    pub end: Option<Lsn>,
}

/// An archive directory, read back.
#[derive(Debug, Clone)]
pub struct Archive {
    /// The directory.
    pub dir: PathBuf,
}

impl Archive {
    /// The archive in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The segments of log `log_id` it holds, by sequence number (a full copy wins over a
    /// partial one of the same segment).
    pub fn segments(&self, log_id: u64) -> Result<BTreeMap<u64, ArchivedSegment>> {
        let prefix = format!("{log_id:016x}-");
        let mut out: BTreeMap<u64, ArchivedSegment> = BTreeMap::new();
        let rd = std::fs::read_dir(&self.dir).map_err(|e| io_err(&self.dir, IoOpKind::Read, e))?;
        for e in rd {
            let e = e.map_err(|e| io_err(&self.dir, IoOpKind::Read, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else { continue };
            let (seq, partial) = match (rest.strip_suffix(".wal"), rest.strip_suffix(".partial")) {
                (Some(s), _) => (s, false),
                (_, Some(s)) => (s, true),
                _ => continue,
            };
            let Ok(seq) = seq.parse::<u64>() else { continue };
            if partial && out.get(&seq).is_some_and(|s| !s.partial) {
                continue;
            }
            let path = e.path();
            let (sum, end) = match read_sum(&path) {
                Some((crc, len, end)) => (Some((crc, len)), end),
                None => (None, None),
            };
            out.insert(seq, ArchivedSegment { seq, path, partial, sum, end });
        }
        Ok(out)
    }

    /// The marks of log `log_id`: (time in Unix microseconds, durable LSN then), in time order.
    pub fn marks(&self, log_id: u64) -> Result<Vec<(i64, Lsn)>> {
        let path = self.dir.join(marks_name(log_id));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(io_err(&path, IoOpKind::Read, e)),
        };
        let mut v: Vec<(i64, Lsn)> = text
            .lines()
            .filter_map(|l| {
                let (t, lsn) = l.split_once(' ')?;
                Some((t.trim().parse().ok()?, lsn.trim().parse().ok()?))
            })
            .collect();
        v.sort();
        Ok(v)
    }
}

/// A `.sum`: `crc32c <hex> bytes <n>`, and for a partial copy ` end <lsn>`.
fn read_sum(segment: &Path) -> Option<(u32, u64, Option<Lsn>)> {
    let text = std::fs::read_to_string(format!("{}.sum", segment.display())).ok()?;
    let mut it = text.split_whitespace();
    let (k1, crc, k2, len) = (it.next()?, it.next()?, it.next()?, it.next()?);
    (k1 == "crc32c" && k2 == "bytes").then_some(())?;
    let end = match (it.next(), it.next()) {
        (Some("end"), Some(e)) => Some(e.parse().ok()?),
        _ => None,
    };
    Some((u32::from_str_radix(crc, 16).ok()?, len.parse().ok()?, end))
}

/// Opens (or creates) the database in `dir` with its file log archived into `archive`
/// ([`ArchivingLog`]): what `nvmedb serve --archive` runs. Like [`Database::open`], with
/// `options.log` the file log.
///
/// [`Database::open`]: crate::Database::open
pub fn open_archiving(dir: &Path, options: crate::Options, archive: &Path) -> Result<crate::Database> {
    if !matches!(options.log, crate::LogKind::File) || !options.wal || options.read_only {
        return Err(Error::Config {
            key: "archive".into(),
            detail: "archiving needs the file log, written (not read-only)".into(),
        });
    }
    if !dir.join(crate::db::CATALOG_FILE).exists() {
        // Create it the ordinary way (a failed create leaves nothing), then reopen.
        crate::Database::open(dir, options.clone())?.close()?;
    }
    let storage = crate::io::DirStorage::new(dir, crate::io::FileOptions::default())?;
    storage.lock()?;
    let copies = options.file_log_copies(dir)?;
    let inner =
        Box::new(crate::wal::FileLogOpener { copies: copies.clone(), options: options.wal_options.clone() });
    let opener = ArchiveLogOpener { inner, copies, dir: archive.to_path_buf() };
    crate::Database::open_with_log(Arc::new(storage), Some(Box::new(opener)), options)
}

/// Opens the log through `inner` and archives it into `dir` ([`ArchivingLog`]).
pub struct ArchiveLogOpener {
    /// The opener of the file log itself.
    pub inner: Box<dyn LogOpener>,
    /// The log's copies (the storages `inner` opens; the first one's files are archived).
    pub copies: Vec<Arc<dyn Storage>>,
    /// The archive directory (created if missing).
    pub dir: PathBuf,
}

impl LogOpener for ArchiveLogOpener {
    fn is_empty(&self) -> Result<bool> {
        self.inner.is_empty()
    }

    fn open(self: Box<Self>, initial_lsn: Lsn) -> Result<Arc<dyn RecordLog>> {
        std::fs::create_dir_all(&self.dir).map_err(|e| io_err(&self.dir, IoOpKind::Setup, e))?;
        let log = self.inner.open(initial_lsn)?;
        Ok(ArchivingLog::start(log, self.copies, self.dir)?)
    }
}

struct Shared {
    log: Arc<dyn RecordLog>,
    copies: Vec<Arc<dyn Storage>>,
    dir: PathBuf,
    /// Highest sequence number archived (whole) so far, and the marks not yet written.
    state: Mutex<ArchState>,
    stop: AtomicBool,
    stop_mx: Mutex<()>,
    stop_cv: Condvar,
}

#[derive(Default)]
struct ArchState {
    archived: u64,
    log_id: Option<u64>,
    marks: Vec<(i64, Lsn)>,
    last_error: Option<String>,
}

/// A [`RecordLog`] that archives the file log it wraps (see the module documentation).
pub struct ArchivingLog {
    sh: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ArchivingLog {
    fn start(log: Arc<dyn RecordLog>, copies: Vec<Arc<dyn Storage>>, dir: PathBuf) -> Result<Arc<Self>> {
        let sh = Arc::new(Shared {
            log,
            copies,
            dir,
            state: Mutex::new(ArchState::default()),
            stop: AtomicBool::new(false),
            stop_mx: Mutex::new(()),
            stop_cv: Condvar::new(),
        });
        archive_finished(&sh, u64::MAX)?;
        let s2 = sh.clone();
        let t = std::thread::Builder::new()
            .name("nvmedb-archiver".into())
            .spawn(move || {
                while !s2.stop.load(Ordering::Acquire) {
                    s2.state.locked().marks.push((unix_micros(), s2.log.durable_lsn()));
                    if let Err(e) = archive_finished(&s2, u64::MAX) {
                        let msg = e.to_string();
                        let mut st = s2.state.locked();
                        if st.last_error.as_deref() != Some(&msg) {
                            eprintln!("nvmedb archive: {msg} (retrying)");
                            st.last_error = Some(msg);
                        }
                    }
                    let g = s2.stop_mx.locked();
                    if !s2.stop.load(Ordering::Acquire) {
                        let _ = s2.stop_cv.wait_timeout(g, TICK);
                    }
                }
            })
            .map_err(|e| Error::Config {
                key: "archive".into(),
                detail: format!("cannot start its thread: {e}"),
            })?;
        Ok(Arc::new(Self { sh, thread: Mutex::new(Some(t)) }))
    }

    /// The highest segment sequence number archived so far.
    pub fn archived(&self) -> u64 {
        self.sh.state.locked().archived
    }

    fn stop(&self) {
        self.sh.stop.store(true, Ordering::Release);
        {
            let _g = self.sh.stop_mx.locked();
            self.sh.stop_cv.notify_all();
        }
        if let Some(t) = self.thread.locked().take() {
            let _ = t.join();
        }
    }
}

/// Archives every finished segment (one with a newer segment after it) not archived yet whose
/// base LSN is below `below`, then writes the marks taken so far. Serialised by the state lock.
fn archive_finished(sh: &Shared, below: Lsn) -> Result<()> {
    let mut st = sh.state.locked();
    let segs = live_segments(&sh.copies)?;
    let Some(last) = segs.last() else { return Ok(()) };
    let log_id = read_log_id(sh.copies[0].as_ref(), &segs[0])?;
    st.log_id = Some(log_id);
    for s in &segs {
        if s.seq >= last.seq || s.seq <= st.archived || s.base_lsn >= below {
            continue;
        }
        let done = sh.dir.join(segment_name(log_id, s.seq));
        if read_sum(&done).is_some_and(|(_, len, _)| len == s.segment_bytes) {
            st.archived = s.seq; // archived by an earlier run
            continue;
        }
        archive_segment(sh, log_id, s, s.segment_bytes, None)?;
        st.archived = s.seq;
    }
    flush_marks(sh, &mut st, log_id)
}

fn flush_marks(sh: &Shared, st: &mut ArchState, log_id: u64) -> Result<()> {
    if st.marks.is_empty() {
        return Ok(());
    }
    let path = sh.dir.join(marks_name(log_id));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| io_err(&path, IoOpKind::Write, e))?;
    let mut text = String::new();
    for (t, l) in st.marks.drain(..) {
        text.push_str(&format!("{t} {l}\n"));
    }
    f.write_all(text.as_bytes()).map_err(|e| io_err(&path, IoOpKind::Write, e))?;
    f.sync_data().map_err(|e| io_err(&path, IoOpKind::Sync, e))
}

/// The log id a segment's header carries.
pub(crate) fn read_log_id(storage: &dyn Storage, s: &SegmentDesc) -> Result<u64> {
    Ok(crate::wal::read_segment_header(storage, &s.name)?.log_id)
}

/// Copies segment `s` (its first `len` bytes) into the archive with its `.sum`; `end`, for a
/// partial copy, is the durable position it holds the log up to.
fn archive_segment(sh: &Shared, log_id: u64, s: &SegmentDesc, len: u64, end: Option<Lsn>) -> Result<()> {
    let partial = end.is_some();
    let name = if partial { partial_name(log_id, s.seq) } else { segment_name(log_id, s.seq) };
    let dev = sh.copies[0].open(&s.name, false)?;
    let crc = copy_device(dev.as_ref(), len, &sh.dir, &name)?;
    // The slot may have been recycled while it was copied: the copy must still be segment seq.
    let h = crate::wal::read_segment_header(sh.copies[0].as_ref(), &s.name).ok();
    if h.map(|h| h.seq) != Some(s.seq) {
        let _ = std::fs::remove_file(sh.dir.join(&name));
        return Err(Error::Corruption {
            file: format!("{}/{}", sh.copies[0].location(), s.name),
            offset: 0,
            detail: format!("segment {} was recycled while it was archived", s.seq),
        });
    }
    let end = end.map_or(String::new(), |e| format!(" end {e}"));
    write_durably(&sh.dir, &format!("{name}.sum"), format!("crc32c {crc:08x} bytes {len}{end}\n").as_bytes())
}

impl Drop for ArchivingLog {
    fn drop(&mut self) {
        self.stop();
        // The log is closing: archive what is finished and the current segment as a partial
        // one, up to the durable end.
        let sh = &self.sh;
        if let Err(e) = archive_finished(sh, u64::MAX) {
            eprintln!("nvmedb archive: at close: {e}");
        }
        let durable = sh.log.durable_lsn();
        let r = (|| -> Result<()> {
            let segs = live_segments(&sh.copies)?;
            let Some(last) = segs.last() else { return Ok(()) };
            let log_id = read_log_id(sh.copies[0].as_ref(), &segs[0])?;
            if durable > last.base_lsn {
                let len = (crate::wal::SEGMENT_HEADER_BLOCK_BYTES + (durable - last.base_lsn))
                    .div_ceil(crate::wal::BLOCK_BYTES as u64)
                    * crate::wal::BLOCK_BYTES as u64;
                archive_segment(sh, log_id, last, len.min(last.segment_bytes), Some(durable))?;
            }
            let mut st = sh.state.locked();
            st.marks.push((unix_micros(), durable));
            flush_marks(sh, &mut st, log_id)
        })();
        if let Err(e) = r {
            eprintln!("nvmedb archive: at close: {e}");
        }
    }
}

impl RecordLog for ArchivingLog {
    fn append_record(&self, kind: u8, payload: &[u8]) -> Result<(Lsn, Lsn)> {
        self.sh.log.append_record(kind, payload)
    }
    fn end_lsn(&self) -> Lsn {
        self.sh.log.end_lsn()
    }
    fn durable_lsn(&self) -> Lsn {
        self.sh.log.durable_lsn()
    }
    fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        self.sh.log.wait_durable(lsn)
    }
    fn recovered(&self) -> RecoveredLog {
        self.sh.log.recovered()
    }
    fn reader(&self, from: Lsn) -> Result<Box<dyn RecordReader>> {
        self.sh.log.reader(from)
    }
    fn truncate_before(&self, lsn: Lsn) -> Result<usize> {
        // Nothing is released before it is in the archive.
        archive_finished(&self.sh, lsn)?;
        self.sh.log.truncate_before(lsn)
    }
    fn stats(&self) -> WalStats {
        self.sh.log.stats()
    }
    fn describe(&self) -> String {
        format!("{}, archived to {}", self.sh.log.describe(), self.sh.dir.display())
    }
    fn wants_checkpoint(&self) -> bool {
        self.sh.log.wants_checkpoint()
    }
    fn ships_records(&self) -> bool {
        self.sh.log.ships_records()
    }
    fn wait_for_space(&self) -> Result<()> {
        self.sh.log.wait_for_space()
    }
}
