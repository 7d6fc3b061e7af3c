//! The simulated disk of a node: every file of the node on one crash-simulated storage.
//!
//! Owns: [`SimDisk`] (a node's physical disk: one [`CrashSimStorage`] whose device names carry
//! the directory — `wal/…`, `standby/…`, `repl/…` — so one power cut drops, keeps or tears every
//! unsynced write of the node, and the data files' lock) and [`DiskIo`] (one incarnation's view
//! of it, nvmedb's [`Disk`]: it counts the I/O operations the node's tasks make, cuts the power
//! at a planned one, fails every operation once the incarnation is dead, and refuses to grow a
//! file while the disk is full).
//!
//! Operations of threads outside the simulation (the engine's own helper threads: the log's
//! preparer filling segments ahead, recovery's read-ahead) are neither counted nor refused for a
//! full disk: they run at real-time moments, so counting them would make the crash point
//! depend on the machine. They only extend files and read, which the model does not need to
//! fail.

use crate::sched::Sim;
use nvmedb::error::Result;
use nvmedb::io::{
    CrashSimStorage, Device, DeviceInfo, IoError, IoOpKind, IoRequest, IoResult, Storage, WriteFate,
};
use nvmedb::repl::disk::Disk;
use nvmedb::util::Rng;
use nvmedb::Options;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A node's physical disk (see the module documentation).
#[derive(Clone)]
pub struct SimDisk {
    css: Arc<CrashSimStorage>,
    /// Which data-storage handle holds the data files' lock.
    lock: Arc<Mutex<Option<u64>>>,
    next_handle: Arc<AtomicU64>,
    /// The disk is full: files cannot grow.
    full: Arc<AtomicBool>,
}

impl Default for SimDisk {
    fn default() -> Self {
        Self::new()
    }
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> Self {
        Self {
            css: Arc::new(CrashSimStorage::new()),
            lock: Arc::default(),
            next_handle: Arc::new(AtomicU64::new(1)),
            full: Arc::default(),
        }
    }

    /// Cuts the power: every unsynced write is dropped, kept or torn, as `rng` says. The data
    /// files' lock goes with the process.
    pub fn power_cut(&self, rng: &mut Rng) -> nvmedb::io::CrashOutcome {
        *self.lock.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.css.crash_with(|_, _, len| match rng.below(3) {
            0 => WriteFate::Dropped,
            1 => WriteFate::Persisted,
            _ => WriteFate::Torn(rng.below((len / nvmedb::io::SECTOR_BYTES).max(1) as u64) as usize),
        })
    }

    /// The process died but the machine did not: unsynced writes are in the page cache and
    /// survive. The data files' lock goes with the process.
    pub fn process_died(&self) {
        *self.lock.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Fills the disk (`true`: files cannot grow) or frees it.
    pub fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::Release);
    }

    /// The storage itself (the checker opens the node's files through it, after the run).
    pub fn storage(&self) -> Arc<CrashSimStorage> {
        self.css.clone()
    }
}

/// A planned power cut: at the `at`-th operation of the incarnation's tasks, `cut` runs (the
/// harness kills the node and cuts its power), and the operation fails.
pub struct CrashPlan {
    /// The operation number (counted from the incarnation's start).
    pub at: u64,
    /// What the harness does then.
    pub cut: Box<dyn Fn() + Send + Sync>,
}

/// One incarnation of a node on its [`SimDisk`] (see the module documentation); clones are the
/// same incarnation.
#[derive(Clone)]
pub struct DiskIo(Arc<IoInner>);

struct IoInner {
    disk: SimDisk,
    sim: Sim,
    dead: AtomicBool,
    ops: AtomicU64,
    plan: Mutex<Option<CrashPlan>>,
    name: String,
}

impl DiskIo {
    /// Node `name`'s incarnation on `disk`, in simulation `sim`.
    pub fn new(disk: &SimDisk, sim: &Sim, name: &str) -> Self {
        Self(Arc::new(IoInner {
            disk: disk.clone(),
            sim: sim.clone(),
            dead: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            plan: Mutex::new(None),
            name: name.to_string(),
        }))
    }

    /// Plans a power cut (replacing an earlier plan).
    pub fn plan_crash(&self, plan: CrashPlan) {
        *self.0.plan.lock().unwrap_or_else(|e| e.into_inner()) = Some(plan);
    }

    /// Operations made so far by the incarnation's tasks.
    pub fn ops(&self) -> u64 {
        self.0.ops.load(Ordering::Acquire)
    }

    /// The incarnation is dead: every later operation fails.
    pub fn die(&self) {
        self.0.dead.store(true, Ordering::Release);
    }

    fn view(&self, prefix: &str, lockable: bool) -> Arc<dyn Storage> {
        let handle = self.0.disk.next_handle.fetch_add(1, Ordering::AcqRel);
        Arc::new(View { io: self.0.clone(), prefix: prefix.to_string(), handle: lockable.then_some(handle) })
    }
}

impl IoInner {
    fn fail(&self, device: &str, op: IoOpKind, offset: u64, len: usize, errno: i32) -> IoError {
        IoError::os(device, op, offset, len, std::io::Error::from_raw_os_error(errno))
    }

    /// Before each operation (see the module documentation).
    fn before(&self, device: &str, op: IoOpKind, offset: u64, len: usize, grows: bool) -> IoResult<()> {
        if self.dead.load(Ordering::Acquire) {
            return Err(self.fail(device, op, offset, len, libc::EIO));
        }
        if !self.sim.in_task() {
            return Ok(());
        }
        let n = self.ops.fetch_add(1, Ordering::AcqRel) + 1;
        let due = {
            let p = self.plan.lock().unwrap_or_else(|e| e.into_inner());
            p.as_ref().is_some_and(|p| p.at == n)
        };
        if due {
            let plan = self.plan.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(p) = plan {
                (p.cut)();
            }
            return Err(self.fail(device, op, offset, len, libc::EIO));
        }
        if grows && self.disk.full.load(Ordering::Acquire) {
            return Err(self.fail(device, op, offset, len, libc::ENOSPC));
        }
        Ok(())
    }
}

impl Disk for DiskIo {
    fn data(&self) -> Result<Arc<dyn Storage>> {
        Ok(self.view("", true))
    }

    fn file_log(&self, _options: &Options) -> Result<Vec<Arc<dyn Storage>>> {
        Ok(vec![self.view("wal/", false)])
    }

    fn remove_file_log(&self, _options: &Options) -> Result<()> {
        let v = self.view("wal/", false);
        for n in v.list()? {
            v.remove(&n)?;
        }
        Ok(())
    }

    fn replica(&self) -> Result<Arc<dyn Storage>> {
        Ok(self.view("standby/", false))
    }

    fn state(&self) -> Result<Arc<dyn Storage>> {
        Ok(self.view("repl/", false))
    }

    fn location(&self) -> String {
        format!("simulated disk of {}", self.0.name)
    }
}

/// The files of one directory of a node's disk, seen by one incarnation.
struct View {
    io: Arc<IoInner>,
    prefix: String,
    /// The data storage's handle number (it can take the data files' lock).
    handle: Option<u64>,
}

impl View {
    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

impl Storage for View {
    fn open(&self, name: &str, create: bool) -> IoResult<Arc<dyn Device>> {
        self.io.before(&self.full(name), IoOpKind::Setup, 0, 0, create && !self.exists(name))?;
        let inner = self.io.disk.css.open(&self.full(name), create)?;
        Ok(Arc::new(Dev { inner, io: self.io.clone(), name: self.full(name) }))
    }

    fn exists(&self, name: &str) -> bool {
        !self.io.dead.load(Ordering::Acquire) && self.io.disk.css.exists(&self.full(name))
    }

    fn list(&self) -> IoResult<Vec<String>> {
        self.io.before(&self.prefix, IoOpKind::Setup, 0, 0, false)?;
        Ok(self
            .io
            .disk
            .css
            .list()?
            .into_iter()
            .filter_map(|n| n.strip_prefix(&self.prefix).map(String::from))
            .filter(|n| !n.contains('/'))
            .collect())
    }

    fn remove(&self, name: &str) -> IoResult<()> {
        self.io.before(&self.full(name), IoOpKind::Setup, 0, 0, false)?;
        self.io.disk.css.remove(&self.full(name))
    }

    fn location(&self) -> String {
        format!("{}:/{}", self.io.name, self.prefix)
    }

    fn lock(&self) -> IoResult<()> {
        let Some(h) = self.handle else { return Ok(()) };
        let mut l = self.io.disk.lock.lock().unwrap_or_else(|e| e.into_inner());
        match *l {
            Some(o) if o != h => Err(IoError::Locked {
                path: self.location(),
                holder: format!("another incarnation's handle of {}'s data files", self.io.name),
            }),
            _ => {
                *l = Some(h);
                Ok(())
            }
        }
    }

    fn in_ram(&self) -> bool {
        true
    }
}

impl Drop for View {
    fn drop(&mut self) {
        if let Some(h) = self.handle {
            let mut l = self.io.disk.lock.lock().unwrap_or_else(|e| e.into_inner());
            if *l == Some(h) {
                *l = None;
            }
        }
    }
}

/// A device of a [`View`].
struct Dev {
    inner: Arc<dyn Device>,
    io: Arc<IoInner>,
    name: String,
}

impl Device for Dev {
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        self.io.before(&self.name, IoOpKind::Setup, len, 0, len > self.inner.capacity())?;
        self.inner.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        self.io.before(&self.name, IoOpKind::Read, offset, buf.len(), false)?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        let grows = offset + buf.len() as u64 > self.inner.capacity();
        self.io.before(&self.name, IoOpKind::Write, offset, buf.len(), grows)?;
        self.inner.write_at(offset, buf)
    }
    fn submit_batch(&self, reqs: &mut [IoRequest<'_>]) -> IoResult<()> {
        let mut first = None;
        for r in reqs.iter_mut() {
            let res = match r {
                IoRequest::Read { offset, buf } => self.read_at(*offset, buf),
                IoRequest::Write { offset, buf } => self.write_at(*offset, buf),
            };
            if let Err(e) = res {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
    fn sync(&self) -> IoResult<()> {
        self.io.before(&self.name, IoOpKind::Sync, 0, 0, false)?;
        self.inner.sync()
    }
}
