//! The lock manager: uncontended lock/release cost, and contended transactions under each wait
//! policy (seed 000's "poll, then sleep 1 ms" starting point, park at once, spin then park, and
//! the default spin-yielding-then-park).
//!
//! Owns: [`locks`], the "locks" part. Contended transactions X-lock two keys of a small hot set
//! in key order (so they never deadlock), hold them for `lock_hold_ns` of CPU work and release
//! them. Invariant: every lock call must succeed; a failure names the setting.

use super::{EngineConfig, LockContention, LockResults};
use crate::error::{LabError, Result};
use crate::experiment::RunEnv;
use crate::measure::Workers;
use nvmedb::txn::{LockManager, LockMode, LockOptions};
use nvmedb::util::Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The wait settings compared, by name.
pub fn settings() -> [(&'static str, LockOptions); 4] {
    [
        ("sleep-1ms", LockOptions::legacy_sleep_1ms()),
        ("park", LockOptions::park_only()),
        ("spin-10us", LockOptions { spin_yield: false, ..LockOptions::default() }),
        ("spin+yield", LockOptions::default()),
    ]
}

fn busy(ns: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_nanos(ns) {
        std::hint::spin_loop();
    }
}

fn lock_err(what: &'static str) -> impl FnOnce(nvmedb::Error) -> LabError {
    LabError::engine(what)
}

/// ns per call of `f` over `n` calls.
fn per_call(n: u64, mut f: impl FnMut(u64) -> Result<()>) -> Result<f64> {
    let t = Instant::now();
    for i in 0..n {
        f(i)?;
    }
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

/// One thread: X lock + release_all, S + re-entrant S + upgrade X + release_all, and eight X
/// locks per release_all; ns per lock (or per transaction for the second).
fn uncontended() -> Result<(f64, f64, f64)> {
    let lm = LockManager::new(LockOptions::default()).map_err(lock_err("creating a lock manager"))?;
    let n = 2_000_000u64;
    let keys: Vec<[u8; 8]> = (0..1024u64).map(|k| k.to_be_bytes()).collect();
    let key = |i: u64| &keys[(i & 1023) as usize];
    let x = per_call(n, |i| {
        lm.lock(i, 1, key(i), LockMode::Exclusive).map_err(lock_err("locking"))?;
        lm.release_all(i);
        Ok(())
    })?;
    let upgrade = per_call(n, |i| {
        lm.lock(i, 1, key(i), LockMode::Shared).map_err(lock_err("locking"))?;
        lm.lock(i, 1, key(i), LockMode::Shared).map_err(lock_err("re-entering"))?;
        lm.lock(i, 1, key(i), LockMode::Exclusive).map_err(lock_err("upgrading"))?;
        lm.release_all(i);
        Ok(())
    })?;
    let eight = per_call(n / 8, |i| {
        for k in 0..8 {
            lm.lock(i, 1, key(i * 8 + k), LockMode::Exclusive).map_err(lock_err("locking"))?;
        }
        lm.release_all(i);
        Ok(())
    })? / 8.0;
    Ok((x, upgrade, eight))
}

fn contended(cfg: &EngineConfig, name: &str, opts: LockOptions, threads: usize) -> Result<LockContention> {
    let lm = LockManager::new(opts).map_err(lock_err("creating a lock manager"))?;
    let next = AtomicU64::new(1);
    let before = lm.stats();
    let (hot, hold) = (cfg.lock_hot_keys.max(2), cfg.lock_hold_ns);
    let workers = Workers::new(
        format!("{name} lock clients"),
        threads,
        Duration::ZERO,
        Duration::from_secs_f64(cfg.duration_s),
    )
    .with_latency();
    let run = workers.run(
        |i| Ok(Rng::new(0x10c4 + i as u64)),
        |rng, _| {
            let a = rng.below(hot);
            let b = (a + 1 + rng.below(hot - 1)) % hot;
            let (a, b) = (a.min(b), a.max(b));
            let txn = next.fetch_add(1, Ordering::Relaxed);
            lm.lock(txn, 1, &a.to_be_bytes(), LockMode::Exclusive)
                .map_err(lock_err("locking the first key"))?;
            lm.lock(txn, 1, &b.to_be_bytes(), LockMode::Exclusive)
                .map_err(lock_err("locking the second key"))?;
            busy(hold);
            lm.release_all(txn);
            Ok(1)
        },
        &mut (),
    )?;
    let st = lm.stats().since(&before);
    let us = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1e6);
    Ok(LockContention {
        setting: name.to_string(),
        threads,
        txn_per_s: run.ops_per_s(),
        txn_p50_us: run.latency.quantile_us(0.5),
        txn_p99_us: run.latency.quantile_us(0.99),
        waits: st.waits,
        spin_granted_pct: 100.0 * st.spin_grants as f64 / st.waits.max(1) as f64,
        parked_waits: st.parked_waits,
        park_calls: st.park_calls,
        mean_wait_us: us(st.mean_wait()),
        wait_p50_below_us: us(st.wait_quantile(0.5)),
        wait_p99_below_us: us(st.wait_quantile(0.99)),
        wait_p999_below_us: us(st.wait_quantile(0.999)),
    })
}

/// Part "locks": the uncontended costs, then every wait setting at every thread count.
pub fn locks(cfg: &EngineConfig, env: &RunEnv) -> Result<LockResults> {
    let (x, upgrade, eight) = uncontended()?;
    let mut r = LockResults {
        uncontended_x_release_ns: x,
        uncontended_s_s_x_release_ns: upgrade,
        uncontended_8x_per_lock_ns: eight,
        contended: Vec::new(),
    };
    env.note(r.uncontended_line());
    for &threads in &cfg.lock_threads {
        for (name, opts) in settings() {
            let c = contended(cfg, name, opts, threads)?;
            env.note(c.line());
            r.contended.push(c);
        }
    }
    Ok(r)
}
