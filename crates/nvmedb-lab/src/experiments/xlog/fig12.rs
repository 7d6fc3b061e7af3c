//! Fig. 12 of seed 002: the share of a device's bandwidth a conventional workload and the fast
//! side's destage get under each scheduler mode, on an emulated device.
//!
//! Owns: [`run`] and the emulated device it runs on: the `dram` profile (no added latency) with
//! a write bandwidth cap of [`BANDWIDTH_MB_S`], one device for the ring's destage and the
//! conventional writes. Invariants: the device is labelled EMULATED in every point; offered
//! loads are paced, achieved loads are bytes over the measured time.

use super::{remove, SchedPoint, XlogConfig, XlogResults};
use crate::error::{LabError, Result};
use indicatif::ProgressBar;
use nvmedb::io::{AlignedBuf, Device, DeviceProfile, EmulatedDevice, MemDevice};
use nvmedb::xlog::{MsyncPolicy, SchedMode, XLog, XLogConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The scheduler modes compared, in the order they run.
pub const MODES: [SchedMode; 3] =
    [SchedMode::Neutral, SchedMode::ConventionalPriority, SchedMode::DestagePriority];

/// The emulated device's bandwidth, MB/s.
pub const BANDWIDTH_MB_S: f64 = 200.0;
const BW: f64 = BANDWIDTH_MB_S * 1e6;
const UNIT: usize = 64 << 10;
const REC: usize = 16 << 10;

/// The emulated device: RAM behind the `dram` profile with a bandwidth cap.
fn device() -> Result<(Arc<dyn Device>, String)> {
    let mut p = DeviceProfile::builtin("dram")
        .ok_or_else(|| LabError::config("profile", "no built-in `dram` profile"))?;
    p.apply_override(&format!("bandwidth_mb_s={BANDWIDTH_MB_S}"))
        .map_err(|e| LabError::config("bandwidth_mb_s", e.to_string()))?;
    let dev = EmulatedDevice::new(MemDevice::new("fig12"), p, 12);
    let label =
        format!("{} [EMULATED: {BANDWIDTH_MB_S:.0} MB/s bandwidth cap, no added latency]", dev.info().name);
    Ok((Arc::new(dev), label))
}

fn paced(stop: &AtomicBool, iv: Duration, mut op: impl FnMut() -> nvmedb::Result<()>) -> nvmedb::Result<()> {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        next += iv;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else if now - next > iv * 10 {
            next = now;
        }
        op()?;
    }
    Ok(())
}

fn one_point(cfg: &XlogConfig, mode: SchedMode, fast_pct: f64) -> Result<SchedPoint> {
    let (dev, device) = device()?;
    let ring = cfg.ring_path("fig12");
    remove(&ring);
    let mut c = XLogConfig::new(&ring);
    c.ring_bytes = 8 << 20;
    c.conv_offset = 64 << 20;
    c.conv_pages = 4096;
    c.destage_batch_pages = 64;
    c.destage_write_pages = UNIT / 4096;
    c.sched_mode = mode;
    c.msync = MsyncPolicy::Never;
    let log = XLog::open(c, dev).map_err(LabError::engine("opening the fast log"))?;
    let conv = log.scheduler().conventional_device();
    let stop = AtomicBool::new(false);
    let conv_bytes = AtomicU64::new(0);
    let fast_bytes = AtomicU64::new(0);
    let d0 = log.status().destaged;
    let t0 = Instant::now();
    let secs = (cfg.secs * 0.75).max(0.1);
    std::thread::scope(|s| -> Result<()> {
        let a = s.spawn(|| {
            let buf = AlignedBuf::new(UNIT);
            let mut i = 0u64;
            paced(&stop, Duration::from_secs_f64(UNIT as f64 / (0.5 * BW)), || {
                conv.write_at((i % 512) * UNIT as u64, &buf)?;
                conv_bytes.fetch_add(UNIT as u64, Ordering::Relaxed);
                i += 1;
                Ok(())
            })
        });
        let b = s.spawn(|| {
            let w = log.writer()?;
            let rec = vec![7u8; REC];
            paced(&stop, Duration::from_secs_f64(REC as f64 / (fast_pct / 100.0 * BW)), || {
                w.x_pwrite(&rec)?;
                fast_bytes.fetch_add(REC as u64, Ordering::Relaxed);
                Ok(())
            })
        });
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        let panicked = |what: &str| LabError::WorkerPanicked { what: what.into() };
        a.join()
            .map_err(|_| panicked("writing conventionally"))?
            .map_err(LabError::engine("a conventional write"))?;
        b.join()
            .map_err(|_| panicked("writing to the fast side"))?
            .map_err(LabError::engine("a fast-side write"))
    })?;
    let el = t0.elapsed().as_secs_f64();
    let destaged = log.status().destaged - d0;
    log.close().map_err(LabError::engine("closing the fast log"))?;
    remove(&ring);
    Ok(SchedPoint {
        mode: format!("{mode:?}"),
        conventional_offered_pct: 50.0,
        fast_offered_pct: fast_pct,
        conventional_pct: conv_bytes.load(Ordering::Relaxed) as f64 / el / BW * 100.0,
        fast_pct: fast_bytes.load(Ordering::Relaxed) as f64 / el / BW * 100.0,
        destaged_pct: destaged as f64 / el / BW * 100.0,
        device,
    })
}

/// Runs Fig. 12: every scheduler mode at every fast-side offered load.
pub fn run(cfg: &XlogConfig, pb: &ProgressBar, out: &mut XlogResults) -> Result<()> {
    for mode in MODES {
        for &fast_pct in &cfg.fig12_fast_pcts {
            pb.set_message(format!("fig12 {mode:?} fast {fast_pct}%"));
            out.fig12.push(
                one_point(cfg, mode, fast_pct)
                    .map_err(LabError::in_part(format!("{mode:?}, fast {fast_pct} %")))?,
            );
            pb.inc(1);
        }
    }
    Ok(())
}
