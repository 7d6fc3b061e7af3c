//! The device's limit measured the way Q3's scans read: the same heap files in the same order
//! (customer, orders, lineitem, all workers waiting for each other between tables, each having
//! started its first batch of the next table before the meeting, as the scans start their first
//! window while the workers meet and build their join tables), the same
//! contiguous partition of each file per worker (`nvmedb::table::scan_partition_pages`, the
//! function the scans use), the same page size, and the same synchronous read-ahead batches
//! (a worker submits up to `batch` adjacent page reads together, waits for all of them, then
//! submits the next batch). Two probes replay that pattern: the engine's own `Device`
//! (io_uring on the disk, the emulator on an emulated device), and on the real disk fio
//! (O_DIRECT, io_uring) from a job file built from the same pattern. Both read into huge
//! pages, as the buffer pool's frames are (the engine into [`AlignedBuf::large`] buffers, fio
//! when a hugetlbfs is mounted, see [`fio::huge_page_mem`]): on a virtio disk, reads into
//! 4 KiB pages measured a half to a third of the rate, and a probe that reads slower than the
//! query's own reads is no limit.
//!
//! Owns: [`ScanFile`], [`ScanPattern`], [`Replay`], [`replay`], [`ScanPattern::fio_job`] and
//! [`fio`]. Invariants: one pass of the pattern reads every page of the files exactly once,
//! each worker in ascending page order in batches aligned to its partition's start; a replay
//! counts the pages it read and fails if that differs from the pattern; fio's figure is
//! refused (`None`) unless the bytes it read equal the pattern's bytes times the passes.

use crate::error::{LabError, Result};
use crate::measure::{fio, process_cpu_ns};
use nvmedb::io::{AlignedBuf, Device, IoQueue, IoRequest, IoResult, QueuedOp, QueuedOpKind, Storage};
use nvmedb::table::scan_partition_pages;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

/// One table's heap file as the scan reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanFile {
    /// Table name.
    pub table: String,
    /// File name in the storage (the heap file).
    pub file: String,
    /// Heap pages.
    pub pages: u64,
}

/// The reads of one pass of Q3's scans: every file in turn, each split among the workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanPattern {
    /// Files in scan order.
    pub files: Vec<ScanFile>,
    /// Bytes per page (= per read).
    pub page_size: usize,
    /// Workers (threads; each reads its own partition of every file).
    pub workers: usize,
    /// Reads a worker submits together and waits for together (its read-ahead).
    pub batch: u64,
}

impl ScanPattern {
    /// The pages worker `worker` reads from file `file`.
    pub fn part(&self, file: usize, worker: usize) -> Range<u64> {
        scan_partition_pages(self.files[file].pages, worker, self.workers)
    }

    /// The batches worker `worker` submits for file `file`, in order.
    pub fn batches(&self, file: usize, worker: usize) -> impl Iterator<Item = Range<u64>> {
        let r = self.part(file, worker);
        let batch = self.batch.max(1);
        (r.start..r.end).step_by(batch as usize).map(move |s| s..(s + batch).min(r.end))
    }

    /// Read buffers of all workers together (a batch of pages each).
    pub fn buffer_bytes(&self) -> u64 {
        self.workers.max(1) as u64 * self.batch.max(1) * self.page_size as u64
    }

    /// Pages one pass reads.
    pub fn pages(&self) -> u64 {
        self.files.iter().map(|f| f.pages).sum()
    }

    /// The pattern in words, for every output that shows a limit.
    pub fn describe(&self) -> String {
        format!(
            "{} × {} KiB reads per pass over {} ({}), each worker ({} here) its contiguous partition of every file in ascending order, in synchronous batches of {} (submitted together, all awaited), the workers meeting between files — Q3's scan pattern; read into huge pages as the buffer pool's frames, {}",
            self.pages(),
            self.page_size / 1024,
            self.files.iter().map(|f| f.table.as_str()).collect::<Vec<_>>().join(", then "),
            self.files.iter().map(|f| format!("{} {} pages", f.file, f.pages)).collect::<Vec<_>>().join(", "),
            self.workers,
            self.batch,
            fio::read_buffers(self.buffer_bytes()),
        )
    }

    /// A fio job file that reads the pattern `passes` times from the files in `dir`: per file a
    /// group of one job per worker with a non-empty partition (offset and size of that
    /// partition, looped `passes` times), the groups run one after another (`stonewall`, the
    /// scans' barrier); O_DIRECT, io_uring, `batch` reads submitted together and
    /// all of them reaped before the next batch.
    pub fn fio_job(&self, dir: &Path, passes: u32) -> String {
        let ps = self.page_size as u64;
        let mut s = format!(
            "[global]\ndirect=1\nioengine=io_uring\nrw=read\nbs={ps}\niodepth={b}\niodepth_batch_submit={b}\niodepth_batch_complete_min={b}\nloops={passes}\n",
            b = self.batch.max(1),
        );
        if let Some(mem) = fio::huge_page_mem(self.buffer_bytes()) {
            s.push_str(&format!("mem={mem}\n"));
        }
        for (fi, f) in self.files.iter().enumerate() {
            let path = dir.join(&f.file).display().to_string().replace(':', "\\:");
            let mut first = true;
            for w in 0..self.workers {
                let r = self.part(fi, w);
                if r.is_empty() {
                    continue;
                }
                s.push_str(&format!(
                    "\n[{}-w{w}]\nfilename={path}\noffset={}\nsize={}\n",
                    f.table,
                    r.start * ps,
                    (r.end - r.start) * ps
                ));
                if first && fi > 0 {
                    s.push_str("stonewall\n");
                }
                first = false;
            }
        }
        s
    }
}

/// What a replay measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    /// Pages read (the pattern's pages × passes).
    pub pages: u64,
    /// Wall seconds of all passes.
    pub seconds: f64,
    /// Pages per second.
    pub iops: f64,
    /// Process CPU µs per page read (on an emulated device: mostly the emulator's cost).
    pub cpu_us_per_read: f64,
    /// Pages per second of each file in pattern order: its pages × passes over the wall time
    /// from the workers' meeting before it to their meeting after it, summed over the passes
    /// (empty where not measured, as for fio).
    #[serde(default)]
    pub file_iops: Vec<f64>,
}

/// Replays `pattern` `passes` times on `storage`'s files through the engine's `Device`
/// (`submit_batch`, as the buffer pool's synchronous read-ahead submits): one thread per worker.
pub fn replay(storage: &dyn Storage, pattern: &ScanPattern, passes: u32) -> Result<Replay> {
    let devices: Vec<Arc<dyn Device>> = pattern
        .files
        .iter()
        .map(|f| storage.open(&f.file, false).map_err(LabError::engine(format!("opening {}", f.file))))
        .collect::<Result<_>>()?;
    let n = pattern.workers.max(1);
    let barrier = Barrier::new(n);
    // When the workers met after each file (recorded by the barrier's leader), in order.
    let met: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
    let read = AtomicU64::new(0);
    let first_error: Mutex<Option<LabError>> = Mutex::new(None);
    let ps = pattern.page_size;
    let cpu0 = process_cpu_ns();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..n {
            let (devices, barrier, met, read, first_error) = (&devices, &barrier, &met, &read, &first_error);
            s.spawn(move || {
                // Huge pages, as the pool's frames: see the module comment.
                let mut buf = AlignedBuf::large(pattern.batch.max(1) as usize * ps);
                // The buffers of the next file's first batch, read while the workers meet.
                let mut early_bufs = AlignedBuf::large_many(pattern.batch.max(1) as usize, ps);
                let mut early: Option<(Box<dyn IoQueue + '_>, Range<u64>)> = None;
                let mut failed = false;
                let fail = |what: String, e: nvmedb::io::IoError| {
                    let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(LabError::engine(what)(e));
                };
                for _ in 0..passes {
                    for (fi, dev) in devices.iter().enumerate() {
                        let file = &pattern.files[fi].file;
                        let mut batches = pattern.batches(fi, w);
                        // The first batch, started before the meeting: wait for it.
                        if let Some((q, b)) = early.take() {
                            match finish_early(q, &mut early_bufs) {
                                Err(e) => {
                                    failed = true;
                                    fail(format!("replaying the scan's reads of {file} pages {b:?}"), e);
                                }
                                Ok(()) => {
                                    read.fetch_add(b.end - b.start, Ordering::Relaxed);
                                }
                            }
                            batches.next();
                        }
                        for b in batches {
                            if failed {
                                break;
                            }
                            let mut reqs: Vec<IoRequest<'_>> = buf
                                .chunks_mut(ps)
                                .zip(b.clone())
                                .map(|(buf, p)| IoRequest::Read { offset: p * ps as u64, buf })
                                .collect();
                            match dev.submit_batch(&mut reqs) {
                                Ok(()) => {
                                    read.fetch_add(b.end - b.start, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    failed = true;
                                    fail(format!("replaying the scan's reads of {file} pages {b:?}"), e);
                                }
                            }
                        }
                        // As the scans do, start the next file's first batch before the workers
                        // meet (they build their join tables meanwhile).
                        let first_of_next =
                            (!failed && fi + 1 < devices.len()).then(|| pattern.batches(fi + 1, w).next());
                        if let Some(b) = first_of_next.flatten() {
                            let next = &pattern.files[fi + 1].file;
                            match start_batch(&*devices[fi + 1], pattern, b.clone(), &mut early_bufs) {
                                Ok(q) => early = Some((q, b)),
                                Err(e) => {
                                    failed = true;
                                    fail(format!("replaying the scan's reads of {next} pages {b:?}"), e);
                                }
                            }
                        }
                        // Every worker waits here even after a failure, so none is left behind.
                        if barrier.wait().is_leader() {
                            met.lock().unwrap_or_else(|p| p.into_inner()).push(Instant::now());
                        }
                    }
                }
            });
        }
    });
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_s = process_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let pages = read.into_inner();
    let want = pattern.pages() * u64::from(passes);
    if pages != want {
        return Err(LabError::Inconsistent {
            what: "scan-pattern replay".into(),
            detail: format!("read {pages} pages, the pattern has {want}"),
        });
    }
    let met = met.into_inner().unwrap_or_else(|p| p.into_inner());
    let file_iops = per_file_iops(pattern, &met, t0, passes);
    Ok(Replay {
        pages,
        seconds,
        iops: pages as f64 / seconds.max(1e-9),
        cpu_us_per_read: cpu_s * 1e6 / (pages as f64).max(1.0),
        file_iops,
    })
}

/// Waits for the batch started before the workers met, returning its buffers to `bufs`.
fn finish_early(mut q: Box<dyn IoQueue + '_>, bufs: &mut Vec<AlignedBuf>) -> IoResult<()> {
    let mut done = Vec::new();
    let mut err = q.reap(q.in_flight(), &mut done).err();
    for c in done {
        if let Err(e) = c.result {
            err.get_or_insert(e);
        }
        bufs.push(c.buf);
    }
    err.map_or(Ok(()), Err)
}

/// Starts reading pages `b` of `dev` into `bufs` on a queue of the pattern's batch depth.
fn start_batch<'d>(
    dev: &'d dyn Device,
    pattern: &ScanPattern,
    b: Range<u64>,
    bufs: &mut Vec<AlignedBuf>,
) -> IoResult<Box<dyn IoQueue + 'd>> {
    let ps = pattern.page_size as u64;
    let mut q = dev.open_queue(pattern.batch.max(1) as usize)?;
    let ops = b
        .zip(bufs.drain(..))
        .map(|(p, buf)| QueuedOp { tag: p, kind: QueuedOpKind::Read, offset: p * ps, buf })
        .collect();
    q.submit_all(ops)?;
    Ok(q)
}

/// Each file's read rate over `passes`, from the times the workers met after each file.
fn per_file_iops(pattern: &ScanPattern, met: &[Instant], t0: Instant, passes: u32) -> Vec<f64> {
    let files = pattern.files.len();
    let mut file_s = vec![0.0; files];
    let mut prev = t0;
    for (i, &m) in met.iter().enumerate() {
        file_s[i % files] += (m - prev).as_secs_f64();
        prev = m;
    }
    pattern
        .files
        .iter()
        .zip(&file_s)
        .map(|(f, &s)| (f.pages * u64::from(passes)) as f64 / s.max(1e-9))
        .collect()
}

/// fio's run of [`ScanPattern::fio_job`] on the files in `dir` (the job file is written into
/// `scratch` and removed), or `None` when fio is missing or fails, or read other than the
/// pattern's bytes × `passes`. Time is the sum over the files' groups of the slowest job's
/// runtime (fio reports milliseconds).
pub fn fio(pattern: &ScanPattern, dir: &Path, passes: u32, scratch: &Path) -> Option<Replay> {
    let (bytes, seconds) = fio::run_job_file(&pattern.fio_job(dir, passes), scratch)?;
    let pages = pattern.pages() * u64::from(passes);
    if bytes != pages * pattern.page_size as u64 || seconds <= 0.0 {
        return None;
    }
    Some(Replay { pages, seconds, iops: pages as f64 / seconds, cpu_us_per_read: 0.0, file_iops: Vec::new() })
}
