//! iobench's workers: the operation generator, the queue worker (depth operations in flight)
//! and the synchronous worker (one call at a time), run by [`crate::measure::Workers`].
//!
//! Owns: [`OpGen`] and the two worker states. Invariants: latency is measured per operation
//! from submission to observed completion and recorded only for operations submitted inside the
//! measured window; the first failed operation fails the run, naming the device.

use super::{Engine, IoBenchConfig, Pattern};
use crate::error::{LabError, Result};
use crate::measure::LatencyHistogram;
use nvmedb::io::{AlignedBuf, Device, IoQueue, QueuedOp, QueuedOpKind};
use nvmedb::util::Rng;
use std::time::Instant;

/// Offsets and the read/write choice of one thread.
pub struct OpGen {
    rng: Rng,
    pattern: Pattern,
    read_pct: u8,
    blocks: u64,
    bs: u64,
    cursor: u64,
    region: (u64, u64),
}

impl OpGen {
    /// The generator of thread `thread`: random offsets over the whole size, or a sequential
    /// walk over the thread's own slice.
    pub fn new(cfg: &IoBenchConfig, thread: usize) -> Self {
        let bs = cfg.block_bytes as u64;
        let blocks = cfg.size_bytes / bs;
        let per = blocks / cfg.threads as u64;
        let region = (thread as u64 * per, (thread as u64 + 1) * per);
        Self {
            rng: Rng::new(cfg.seed.wrapping_mul(1_000_003).wrapping_add(thread as u64)),
            pattern: cfg.pattern,
            read_pct: cfg.read_pct,
            blocks,
            bs,
            cursor: region.0,
            region,
        }
    }

    /// The next operation: its kind and byte offset.
    pub fn next_op(&mut self) -> (QueuedOpKind, u64) {
        let kind = match self.read_pct {
            100 => QueuedOpKind::Read,
            0 => QueuedOpKind::Write,
            p if self.rng.below(100) < u64::from(p) => QueuedOpKind::Read,
            _ => QueuedOpKind::Write,
        };
        let block = match self.pattern {
            Pattern::Random => self.rng.below(self.blocks),
            Pattern::Sequential => {
                let b = self.cursor;
                self.cursor += 1;
                if self.cursor >= self.region.1 {
                    self.cursor = self.region.0;
                }
                b
            }
        };
        (kind, block * self.bs)
    }
}

/// Latencies of one worker's reads and writes.
#[derive(Default)]
pub struct Latencies {
    /// Reads.
    pub reads: LatencyHistogram,
    /// Writes.
    pub writes: LatencyHistogram,
}

impl Latencies {
    fn record(&mut self, kind: QueuedOpKind, ns: u64) {
        let h = if kind == QueuedOpKind::Read { &mut self.reads } else { &mut self.writes };
        h.record_ns(ns);
    }
}

/// One worker of either engine.
pub enum Worker<'d> {
    /// Keeps `depth` operations in flight through a device queue.
    Queue(QueueWorker<'d>),
    /// One `read_at`/`write_at` at a time.
    Sync(SyncWorker<'d>),
}

/// The queue engine's state.
pub struct QueueWorker<'d> {
    q: Box<dyn IoQueue + 'd>,
    gen: OpGen,
    free: Vec<AlignedBuf>,
    started: Vec<(Instant, QueuedOpKind)>,
    free_tags: Vec<u64>,
    done: Vec<nvmedb::io::Completion>,
    lat: Latencies,
}

/// The sync engine's state.
pub struct SyncWorker<'d> {
    dev: &'d dyn Device,
    gen: OpGen,
    buf: AlignedBuf,
    lat: Latencies,
}

fn io_error(dev: &str) -> impl FnOnce(nvmedb::io::IoError) -> LabError + '_ {
    move |e| LabError::engine(format!("I/O on {dev} during the run"))(e)
}

impl<'d> Worker<'d> {
    /// The state of worker `thread` on `dev`.
    pub fn new(dev: &'d dyn Device, cfg: &IoBenchConfig, thread: usize) -> Result<Self> {
        let gen = OpGen::new(cfg, thread);
        Ok(match cfg.engine {
            Engine::Queue => {
                let q = dev.open_queue(cfg.depth).map_err(io_error(&cfg.device))?;
                // In huge pages, as the buffer pool's frames (see `AlignedBuf::large`).
                let free = AlignedBuf::large_many(cfg.depth, cfg.block_bytes)
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut b)| {
                        Rng::new(cfg.seed + i as u64).fill(&mut b);
                        b
                    })
                    .collect();
                Self::Queue(QueueWorker {
                    q,
                    gen,
                    free,
                    started: vec![(Instant::now(), QueuedOpKind::Read); cfg.depth],
                    free_tags: (0..cfg.depth as u64).collect(),
                    done: Vec::with_capacity(cfg.depth),
                    lat: Latencies::default(),
                })
            }
            Engine::Sync => {
                let mut buf = AlignedBuf::large(cfg.block_bytes);
                Rng::new(cfg.seed + thread as u64).fill(&mut buf);
                Self::Sync(SyncWorker { dev, gen, buf, lat: Latencies::default() })
            }
        })
    }

    /// One round: the queue engine refills the queue and reaps at least one completion; the
    /// sync engine does one operation. Returns the operations completed.
    pub fn step(&mut self, measuring: bool, device: &str) -> Result<u64> {
        match self {
            Self::Queue(w) => w.step(measuring, device),
            Self::Sync(w) => w.step(measuring, device),
        }
    }

    /// Waits for the operations still in flight and returns the latencies.
    pub fn finish(self) -> Latencies {
        match self {
            Self::Queue(mut w) => {
                let mut sink = Vec::new();
                let n = w.q.in_flight();
                let _ = w.q.reap(n, &mut sink);
                w.lat
            }
            Self::Sync(w) => w.lat,
        }
    }
}

impl QueueWorker<'_> {
    fn step(&mut self, measuring: bool, device: &str) -> Result<u64> {
        let now = Instant::now();
        let mut ops = Vec::with_capacity(self.free_tags.len());
        while let (Some(tag), Some(buf)) = (self.free_tags.pop(), self.free.pop()) {
            let (kind, offset) = self.gen.next_op();
            self.started[tag as usize] = (now, kind);
            ops.push(QueuedOp { tag, kind, offset, buf });
        }
        self.q.submit_and_reap(ops, 1, &mut self.done).map_err(io_error(device))?;
        let now = Instant::now();
        let n = self.done.len() as u64;
        for c in self.done.drain(..) {
            let (t0, kind) = self.started[c.tag as usize];
            c.result.map_err(io_error(device))?;
            if measuring {
                self.lat.record(kind, (now - t0).as_nanos() as u64);
            }
            self.free_tags.push(c.tag);
            self.free.push(c.buf);
        }
        Ok(n)
    }
}

impl SyncWorker<'_> {
    fn step(&mut self, measuring: bool, device: &str) -> Result<u64> {
        let (kind, offset) = self.gen.next_op();
        let t0 = Instant::now();
        match kind {
            QueuedOpKind::Read => self.dev.read_at(offset, &mut self.buf),
            QueuedOpKind::Write => self.dev.write_at(offset, &self.buf),
        }
        .map_err(io_error(device))?;
        if measuring {
            self.lat.record(kind, t0.elapsed().as_nanos() as u64);
        }
        Ok(1)
    }
}
