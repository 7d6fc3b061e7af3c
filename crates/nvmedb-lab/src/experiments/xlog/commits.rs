//! Figs. 10 and 11 of seed 002: raw commits of one writer on the fast side (`x_pwrite` +
//! `x_fsync`, ring on tmpfs or in a disk file msynced per frame) and with O_DIRECT pwrite +
//! fdatasync, by write size (Fig. 10) and by queue size (Fig. 11).
//!
//! Owns: [`fig10`], [`fig11`] and the points they measure. Invariant: every scratch file a part
//! makes (rings, conventional devices) is removed when it ends.

use super::{remove, run_threads, CommitPoint, XlogConfig, XlogResults};
use crate::error::{LabError, Result};
use crate::measure::LatencyHistogram;
use indicatif::ProgressBar;
use nvmedb::io::{AlignedBuf, Device, DirStorage, FileOptions, Storage};
use nvmedb::xlog::{MsyncPolicy, XLog, XLogConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn open_xlog(ring: PathBuf, queue_bytes: usize, dev: Arc<dyn Device>, msync: MsyncPolicy) -> Result<XLog> {
    remove(&ring);
    let mut c = XLogConfig::new(&ring);
    c.ring_bytes = 8 << 20;
    c.queue_bytes = queue_bytes;
    c.conv_pages = 16384;
    c.destage_batch_pages = 256;
    c.msync = msync;
    c.spin_iters = 200;
    XLog::open(c, dev).map_err(LabError::engine(format!("opening the fast log with ring {}", ring.display())))
}

/// A fresh file `name` in the data directory (O_DIRECT).
fn disk_device(cfg: &XlogConfig, name: &str) -> Result<Arc<dyn Device>> {
    let st = DirStorage::new(&cfg.data_dir, FileOptions::default())
        .map_err(LabError::engine(format!("opening {}", cfg.data_dir.display())))?;
    let ctx = || format!("creating {name} in {}", cfg.data_dir.display());
    if st.exists(name) {
        st.remove(name).map_err(LabError::engine(ctx()))?;
    }
    st.open(name, true).map_err(LabError::engine(ctx()))
}

fn point(
    path: &str,
    queue_bytes: usize,
    bytes: usize,
    n: u64,
    secs: f64,
    h: &LatencyHistogram,
    durability: String,
) -> CommitPoint {
    CommitPoint {
        path: path.into(),
        queue_bytes,
        bytes,
        commits_per_s: n as f64 / secs,
        mb_per_s: (n * bytes as u64) as f64 / secs / 1e6,
        p50_us: h.quantile_us(0.5),
        p99_us: h.quantile_us(0.99),
        durability,
    }
}

fn fast_point(path: &str, log: &XLog, q: usize, bytes: usize, secs: f64) -> Result<CommitPoint> {
    let w = log.writer().map_err(LabError::engine("opening a fast-log writer"))?;
    let payload = vec![7u8; bytes];
    let (n, el, h) = run_threads(&format!("{path} commits of {bytes} B"), 1, secs, |_| {
        w.x_pwrite(&payload)?;
        w.x_fsync().map(|_| ())
    })?;
    Ok(point(path, q, bytes, n, el, &h, log.durability()))
}

fn fdatasync_point(cfg: &XlogConfig, bytes: usize, secs: f64) -> Result<CommitPoint> {
    let dev = disk_device(cfg, "fig10-fdatasync.dat")?;
    let block = bytes.div_ceil(4096) * 4096;
    let blocks = (64u64 << 20) / block as u64;
    dev.ensure_capacity(blocks * block as u64).map_err(LabError::engine("sizing the fdatasync file"))?;
    let mut buf = AlignedBuf::new(block);
    buf.fill(9);
    let next = AtomicU64::new(0);
    let (n, el, h) = run_threads(&format!("fdatasync commits of {bytes} B"), 1, secs, |_| {
        let i = next.fetch_add(1, Ordering::Relaxed) % blocks;
        dev.write_at(i * block as u64, &buf)?;
        dev.sync()?;
        Ok(())
    })?;
    let durability = format!(
        "O_DIRECT pwrite of {block} B + fdatasync per commit on {} ({}): survives power loss",
        dev.info().name,
        dev.info().backend
    );
    Ok(point("fdatasync", 0, bytes, n, el, &h, durability))
}

/// Fig. 10: commit rate vs write size on the three paths.
pub fn fig10(cfg: &XlogConfig, pb: &ProgressBar, out: &mut XlogResults) -> Result<()> {
    let log =
        open_xlog(cfg.ring_path("fig10"), 32 << 10, disk_device(cfg, "fig10.conv")?, MsyncPolicy::Never)?;
    // The power-loss-safe alternative without persistent memory: the ring in a mapped file on
    // the disk, msynced before the counter covers a frame.
    let disk_ring = cfg.data_dir.join(format!("fig10-msync-{}.ring", std::process::id()));
    let msync =
        open_xlog(disk_ring.clone(), 32 << 10, disk_device(cfg, "fig10m.conv")?, MsyncPolicy::Always)?;
    out.durability.push(("fast (raw xlog, tmpfs ring)".into(), log.durability()));
    out.durability.push(("fast-msync (raw xlog, disk ring)".into(), msync.durability()));
    for &b in &cfg.fig10_sizes {
        pb.set_message(format!("fig10 {b} B"));
        out.fig10.push(fast_point("fast", &log, 32 << 10, b, cfg.secs / 3.0)?);
        out.fig10.push(fast_point("fast-msync", &msync, 32 << 10, b, cfg.secs / 3.0)?);
        out.fig10.push(fdatasync_point(cfg, b, cfg.secs / 3.0)?);
        pb.inc(1);
    }
    log.close().map_err(LabError::engine("closing the fast log"))?;
    msync.close().map_err(LabError::engine("closing the msynced fast log"))?;
    remove(&disk_ring);
    remove(&cfg.ring_path("fig10"));
    for f in ["fig10m.conv", "fig10.conv", "fig10-fdatasync.dat"] {
        remove(&cfg.data_dir.join(f));
    }
    Ok(())
}

/// Fig. 11: fast-side bandwidth vs queue size, per write size.
pub fn fig11(cfg: &XlogConfig, pb: &ProgressBar, out: &mut XlogResults) -> Result<()> {
    for &q in &cfg.fig11_queues {
        let log = open_xlog(cfg.ring_path("fig11"), q, disk_device(cfg, "fig11.conv")?, MsyncPolicy::Never)?;
        for &b in &cfg.fig11_sizes {
            pb.set_message(format!("fig11 queue {q} B, writes {b} B"));
            out.fig11.push(fast_point("fast", &log, q, b, cfg.secs / 4.0)?);
            pb.inc(1);
        }
        log.close().map_err(LabError::engine("closing the fast log"))?;
    }
    remove(&cfg.ring_path("fig11"));
    remove(&cfg.data_dir.join("fig11.conv"));
    Ok(())
}
