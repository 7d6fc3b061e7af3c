//! Fault injection: a [`Device`] wrapper that fails, fills up or stalls on a seeded plan.
//!
//! Owns: [`FaultyDevice`], [`FaultPlan`], [`FaultRule`], [`FaultAction`], and the log of
//! injected faults ([`InjectedFault`]). Torn writes at a simulated crash come from wrapping a
//! [`CrashSimDevice`](super::CrashSimDevice) and crashing it (see
//! [`CrashSimDevice::crash_with`](super::CrashSimDevice::crash_with)).
//!
//! Invariants: the same plan and seed inject the same faults on the same operation sequence; an
//! injected error is an [`IoError::Os`] carrying the device's name, the operation, its offset and
//! length and the errno, and the medium is not touched by an operation that failed; operations
//! are counted per rule only when the rule's filters match.

use super::{Device, DeviceInfo, IoError, IoOpKind, IoQueue, IoResult};
use crate::util::sync::MutexExt;
use crate::util::Rng;
use std::ops::Range;
use std::sync::Mutex;
use std::time::Duration;

/// What a matching rule does.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Fail with this errno (`libc::EIO`, `libc::ENOSPC`, ...).
    Errno(i32),
    /// Delay the operation by this long, then perform it.
    Delay(Duration),
}

/// When a fault fires: every filter that is set must match.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// Only this kind of operation (`None`: reads, writes and syncs).
    pub op: Option<IoOpKind>,
    /// Only operations overlapping this byte range.
    pub offsets: Option<Range<u64>>,
    /// Only the n-th matching operation (0-based).
    pub nth: Option<u64>,
    /// With this probability (seeded); 1.0 = always.
    pub probability: f64,
    /// Fire at most this many times (`None`: unlimited).
    pub max_fires: Option<u64>,
    /// The fault.
    pub action: FaultAction,
}

impl FaultRule {
    /// EIO on the `n`-th operation of kind `op` (0-based).
    pub fn eio_on_nth(op: IoOpKind, n: u64) -> Self {
        Self {
            op: Some(op),
            offsets: None,
            nth: Some(n),
            probability: 1.0,
            max_fires: None,
            action: FaultAction::Errno(libc::EIO),
        }
    }

    /// EIO on every operation of kind `op` that overlaps `range`.
    pub fn eio_in_range(op: IoOpKind, range: Range<u64>) -> Self {
        Self {
            op: Some(op),
            offsets: Some(range),
            nth: None,
            probability: 1.0,
            max_fires: None,
            action: FaultAction::Errno(libc::EIO),
        }
    }

    /// EIO on any read or write with probability `p`.
    pub fn eio_random(p: f64) -> Self {
        Self {
            op: None,
            offsets: None,
            nth: None,
            probability: p,
            max_fires: None,
            action: FaultAction::Errno(libc::EIO),
        }
    }

    /// A latency spike of `delay` on any operation with probability `p`.
    pub fn spike(p: f64, delay: Duration) -> Self {
        Self {
            op: None,
            offsets: None,
            nth: None,
            probability: p,
            max_fires: None,
            action: FaultAction::Delay(delay),
        }
    }
}

/// A seeded set of rules plus an optional capacity limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    /// Seed of the random choices.
    pub seed: u64,
    /// Rules, checked in order; the first error wins, delays add up.
    pub rules: Vec<FaultRule>,
    /// Writes (and growth) reaching past this many bytes fail with ENOSPC.
    pub enospc_beyond: Option<u64>,
}

/// One fault that fired, for test assertions and replay messages.
#[derive(Debug, Clone, PartialEq)]
pub struct InjectedFault {
    /// Index of the rule (or `usize::MAX` for the ENOSPC limit).
    pub rule: usize,
    /// Operation kind.
    pub op: IoOpKind,
    /// Byte offset.
    pub offset: u64,
    /// What was injected.
    pub action: FaultAction,
}

#[derive(Debug)]
struct FaultState {
    rng: Rng,
    matched: Vec<u64>,
    fired: Vec<u64>,
    log: Vec<InjectedFault>,
}

/// A device that injects the faults of a [`FaultPlan`] in front of `inner`.
#[derive(Debug)]
pub struct FaultyDevice<D: Device> {
    inner: D,
    plan: FaultPlan,
    state: Mutex<FaultState>,
}

impl<D: Device> FaultyDevice<D> {
    /// Wraps `inner` with `plan`.
    pub fn new(inner: D, plan: FaultPlan) -> Self {
        let n = plan.rules.len();
        let state =
            FaultState { rng: Rng::new(plan.seed), matched: vec![0; n], fired: vec![0; n], log: Vec::new() };
        Self { inner, plan, state: Mutex::new(state) }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Every fault injected so far, in order.
    pub fn injected(&self) -> Vec<InjectedFault> {
        self.state.locked().log.clone()
    }

    fn name(&self) -> String {
        self.inner.info().name
    }

    /// Decides the fate of one operation: an error to return, after sleeping any delays.
    fn check(&self, op: IoOpKind, offset: u64, len: usize) -> IoResult<()> {
        let mut delay = Duration::ZERO;
        let mut error: Option<i32> = None;
        {
            let mut st = self.state.locked();
            if let (Some(limit), IoOpKind::Write) = (self.plan.enospc_beyond, op) {
                if offset + len as u64 > limit {
                    error = Some(libc::ENOSPC);
                    st.log.push(InjectedFault {
                        rule: usize::MAX,
                        op,
                        offset,
                        action: FaultAction::Errno(libc::ENOSPC),
                    });
                }
            }
            for (i, rule) in self.plan.rules.iter().enumerate() {
                if error.is_some() {
                    break;
                }
                if rule.op.is_some_and(|k| k != op) {
                    continue;
                }
                if let Some(r) = &rule.offsets {
                    let end = offset + len.max(1) as u64;
                    if offset >= r.end || end <= r.start {
                        continue;
                    }
                }
                let index = st.matched[i];
                st.matched[i] += 1;
                if rule.nth.is_some_and(|n| n != index) {
                    continue;
                }
                if rule.max_fires.is_some_and(|m| st.fired[i] >= m) {
                    continue;
                }
                if rule.probability < 1.0 && !st.rng.chance(rule.probability) {
                    continue;
                }
                st.fired[i] += 1;
                st.log.push(InjectedFault { rule: i, op, offset, action: rule.action.clone() });
                match &rule.action {
                    FaultAction::Errno(e) => error = Some(*e),
                    FaultAction::Delay(d) => delay += *d,
                }
            }
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        match error {
            Some(errno) => {
                Err(IoError::os(&self.name(), op, offset, len, std::io::Error::from_raw_os_error(errno)))
            }
            None => Ok(()),
        }
    }
}

impl<D: Device> Device for FaultyDevice<D> {
    fn info(&self) -> DeviceInfo {
        let inner = self.inner.info();
        DeviceInfo { backend: format!("fault-injecting over {}", inner.backend), ..inner }
    }

    fn alignment(&self) -> usize {
        self.inner.alignment()
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    fn ensure_capacity(&self, len: u64) -> IoResult<()> {
        if let Some(limit) = self.plan.enospc_beyond {
            if len > limit {
                let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
                return Err(IoError::os(&self.name(), IoOpKind::Setup, limit, (len - limit) as usize, e));
            }
        }
        self.inner.ensure_capacity(len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> IoResult<()> {
        super::check_alignment(&self.name(), self.alignment(), offset, buf.len(), buf.as_ptr() as usize)?;
        self.check(IoOpKind::Read, offset, buf.len())?;
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> IoResult<()> {
        super::check_alignment(&self.name(), self.alignment(), offset, buf.len(), buf.as_ptr() as usize)?;
        self.check(IoOpKind::Write, offset, buf.len())?;
        self.inner.write_at(offset, buf)
    }

    fn sync(&self) -> IoResult<()> {
        self.check(IoOpKind::Sync, 0, 0)?;
        self.inner.sync()
    }

    fn open_queue(&self, depth: usize) -> IoResult<Box<dyn IoQueue + '_>> {
        // Every queued operation passes through read_at/write_at, so it sees the plan.
        Ok(Box::new(super::SyncQueue { device: self, depth, done: Vec::new() }))
    }
}
