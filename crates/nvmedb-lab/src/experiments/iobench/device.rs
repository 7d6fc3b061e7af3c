//! The device an iobench run measures: a file (O_DIRECT) or an emulated profile, and the file's
//! layout before reads.
//!
//! Owns: [`open_device`], [`build_profile`] and [`lay_out`]. Invariant: a profile's overrides
//! apply only to emulated profiles; a file is written to its size once, so reads hit allocated
//! blocks as fio's do after its layout phase.

use super::IoBenchConfig;
use crate::error::{LabError, Result};
use crate::measure::progress;
use nvmedb::io::{
    open_emulated, AlignedBuf, Device, DeviceProfile, FileDevice, FileOptions, IoResult, QueuedOp,
    QueuedOpKind, PROFILE_NAMES,
};
use nvmedb::util::Rng;
use std::sync::Arc;

/// Opens the device a config names: a profile (emulated) or a file path.
pub fn open_device(cfg: &IoBenchConfig) -> Result<Arc<dyn Device>> {
    let file_opts = FileOptions {
        backend: cfg.backend,
        single_op: cfg.single_op,
        queue_submit_batch: cfg.submit_batch,
        ..FileOptions::default()
    };
    if PROFILE_NAMES.contains(&cfg.device.as_str()) {
        let p = build_profile(cfg)?;
        return open_emulated(p, cfg.backing_file.as_deref(), &file_opts, cfg.seed)
            .map_err(LabError::engine(format!("opening the emulated device `{}`", cfg.device)));
    }
    if !cfg.profile_overrides.is_empty() || cfg.profile_config.is_some() {
        return Err(LabError::config(
            "--profile-set/--profile-config",
            format!("apply to emulated profiles ({}); `{}` is a file", PROFILE_NAMES.join(", "), cfg.device),
        ));
    }
    let dev = FileDevice::open_with(&cfg.device, &file_opts)
        .map_err(LabError::engine(format!("opening {}", cfg.device)))?;
    Ok(Arc::new(dev))
}

/// The profile a config names, with its config file and `key=value` overrides applied.
pub fn build_profile(cfg: &IoBenchConfig) -> Result<DeviceProfile> {
    let mut p = DeviceProfile::builtin(&cfg.device).ok_or_else(|| {
        LabError::config(
            "--device",
            format!("unknown profile `{}` (known: {})", cfg.device, PROFILE_NAMES.join(", ")),
        )
    })?;
    if let Some(path) = &cfg.profile_config {
        let text = std::fs::read_to_string(path).map_err(LabError::io(path, "read"))?;
        p.apply_config(&text).map_err(|e| LabError::config(path.display().to_string(), e.to_string()))?;
    }
    for o in &cfg.profile_overrides {
        p.apply_override(o).map_err(|e| LabError::config("--profile-set", e.to_string()))?;
    }
    Ok(p)
}

/// Writes the file up to `size` with random data (once), so reads hit allocated blocks.
pub fn lay_out(dev: &dyn Device, size: u64, show_progress: bool) -> IoResult<()> {
    let have = dev.capacity();
    if have >= size {
        return Ok(());
    }
    let chunk = 1usize << 20;
    let start = have / chunk as u64 * chunk as u64;
    let bar = progress::bytes_bar(show_progress, size - start, "laying out");
    let mut buf = AlignedBuf::large(chunk);
    Rng::new(99).fill(&mut buf);
    let mut q = dev.open_queue(4)?;
    let mut done = Vec::new();
    let mut free = vec![buf.clone(), buf.clone(), buf.clone(), buf];
    let mut off = start;
    while off < size || q.in_flight() > 0 {
        let mut ops = Vec::new();
        while off < size && q.in_flight() + ops.len() < 4 {
            let Some(b) = free.pop() else { break };
            ops.push(QueuedOp { tag: off, kind: QueuedOpKind::Write, offset: off, buf: b });
            off += chunk as u64;
        }
        q.submit(ops)?;
        q.reap(1, &mut done)?;
        for c in done.drain(..) {
            c.result?;
            bar.inc(chunk as u64);
            free.push(c.buf);
        }
    }
    drop(q);
    dev.sync()?;
    bar.finish_and_clear();
    Ok(())
}
