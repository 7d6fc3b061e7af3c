//! The lock table, the wait protocol and deadlock detection.
//!
//! Owns: the sharded lock table (key hash → entry with its holders and FIFO wait queue), the
//! per-transaction registry (keys held, the one key waited on, the range-lock shards it holds
//! range locks in), and the deadlock detector. The key-range locks themselves live in
//! `lock_range`; a transaction's are dropped by `release_all` before its keys.
//!
//! Locking discipline (no lock-order cycles): a thread holds at most one lock-table shard
//! mutex or one registry shard mutex at a time, never both. The detector mutex is taken only
//! by waiters about to park, and is the outermost: while holding it the detector takes shard
//! and registry mutexes one at a time.
//!
//! A waiter's fate is a single atomic state word, `WAITING → GRANTED | VICTIM | CANCELLED`,
//! changed by compare-and-swap only: a granter (under the shard mutex) sets `GRANTED`, the
//! detector sets `VICTIM`, the waiter itself (under the shard mutex) sets `CANCELLED` on
//! timeout. Exactly one wins, so a wait ends in exactly one way.

use super::lock_range::RangeLocks;
use super::options::{LockOptions, VictimPolicy};
use super::stats::{Counters, LockStats, ShardCounters};
use super::{key_hash, LockKey, LockMode, TxnId};
use crate::error::{Error, Result};
use crate::util::sync::MutexExt;
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU8, Ordering::*};
use std::sync::{Arc, Mutex};
use std::thread::{self, Thread};
use std::time::Instant;

/// Keys beyond which a released list of keys held is freed rather than kept for the thread's
/// next transaction.
const SPARE_HELD_MAX: usize = 1024;

thread_local! {
    /// The emptied list of keys held of the last transaction this thread released, for the
    /// next one it locks for (no allocation per transaction).
    static SPARE_HELD: std::cell::RefCell<Vec<LockKey>> = const { std::cell::RefCell::new(Vec::new()) };
}

const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const VICTIM: u8 = 2;
const CANCELLED: u8 = 3;

/// How a successful [`LockManager::lock`] was satisfied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOutcome {
    /// The lock was newly granted to the transaction (at once or after a wait).
    Granted,
    /// The transaction already held the key in a mode covering the request (re-entrant).
    AlreadyHeld,
    /// The transaction's shared lock was upgraded to exclusive.
    Upgraded,
}

/// Hasher for keys that are already well mixed (lock-key hashes) or small integers
/// (transaction ids, spread by a Fibonacci multiply).
#[derive(Default)]
pub(crate) struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type MixMap<V> = HashMap<u64, V, BuildHasherDefault<MixHasher>>;

/// One waiting request.
struct Waiter {
    txn: TxnId,
    /// Requested mode (always `Exclusive` for an upgrade).
    mode: LockMode,
    /// The transaction holds the key in shared mode and wants exclusive.
    upgrade: bool,
    state: AtomicU8,
    thread: Thread,
    /// Set by the detector before it marks this waiter a victim.
    cycle: Mutex<Vec<TxnId>>,
}

impl Waiter {
    fn new(txn: TxnId, mode: LockMode, upgrade: bool) -> Arc<Self> {
        Arc::new(Self {
            txn,
            mode,
            upgrade,
            state: AtomicU8::new(WAITING),
            thread: thread::current(),
            cycle: Mutex::new(Vec::new()),
        })
    }

    fn conflicts_with_queued(&self, ahead: &Waiter) -> bool {
        self.upgrade || ahead.upgrade || !self.mode.compatible(ahead.mode)
    }
}

/// The lock state of one key.
struct Entry {
    key: LockKey,
    /// Granted locks, pairwise compatible, one per transaction.
    holders: SmallVec<[(TxnId, LockMode); 2]>,
    /// Waiters in grant order: upgraders first, then FIFO.
    queue: VecDeque<Arc<Waiter>>,
}

impl Entry {
    fn new(table: u32, key: &[u8]) -> Self {
        Self { key: LockKey::new(table, key), holders: SmallVec::new(), queue: VecDeque::new() }
    }

    fn is_free(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty()
    }

    fn check(&self) {
        if cfg!(debug_assertions) {
            for (i, &(t, m)) in self.holders.iter().enumerate() {
                for &(u, n) in &self.holders[i + 1..] {
                    assert_ne!(t, u, "{}: transaction {t} holds the lock twice", self.key);
                    assert!(m.compatible(n), "{}: incompatible holders {t}:{m:?} {u}:{n:?}", self.key);
                }
            }
        }
    }

    /// Grants queued requests from the front while they are compatible with the holders.
    /// Returns the waiters granted (to be woken once the shard mutex is released).
    fn grant_waiters(&mut self) -> Vec<Arc<Waiter>> {
        let mut woken = Vec::new();
        while let Some(w) = self.queue.front() {
            if w.state.load(Acquire) != WAITING {
                // A deadlock victim on its way out: it removes itself if still queued.
                self.queue.pop_front();
                continue;
            }
            let ok = if w.upgrade {
                self.holders.iter().all(|&(t, _)| t == w.txn)
            } else {
                self.holders.iter().all(|&(_, m)| m.compatible(w.mode))
            };
            if !ok {
                break;
            }
            let Some(w) = self.queue.pop_front() else { break };
            if w.state.compare_exchange(WAITING, GRANTED, AcqRel, Acquire).is_err() {
                continue; // chosen as victim just now
            }
            if w.upgrade {
                match self.holders.iter_mut().find(|(t, _)| *t == w.txn) {
                    Some(h) => h.1 = LockMode::Exclusive,
                    None => unreachable!("{}: upgrader {} holds nothing", self.key, w.txn),
                }
            } else {
                self.holders.push((w.txn, w.mode));
            }
            woken.push(w);
        }
        self.check();
        woken
    }

    fn remove_waiter(&mut self, w: &Arc<Waiter>) {
        if let Some(pos) = self.queue.iter().position(|q| Arc::ptr_eq(q, w)) {
            self.queue.remove(pos);
        }
    }
}

/// Entries whose keys share a 64-bit hash (almost always exactly one).
struct Bucket {
    first: Entry,
    more: Vec<Entry>,
}

/// Finds the entry of `(table, key)` in the shard map, creating it if absent.
fn entry_mut<'a>(map: &'a mut MixMap<Bucket>, h: u64, table: u32, key: &[u8]) -> &'a mut Entry {
    let b = map.entry(h).or_insert_with(|| Bucket { first: Entry::new(table, key), more: Vec::new() });
    if b.first.key.is(table, key) {
        return &mut b.first;
    }
    let i = match b.more.iter().position(|e| e.key.is(table, key)) {
        Some(i) => i,
        None => {
            b.more.push(Entry::new(table, key));
            b.more.len() - 1
        }
    };
    &mut b.more[i]
}

fn find_entry<'a>(map: &'a mut MixMap<Bucket>, h: u64, table: u32, key: &[u8]) -> Option<&'a mut Entry> {
    let b = map.get_mut(&h)?;
    if b.first.key.is(table, key) {
        return Some(&mut b.first);
    }
    b.more.iter_mut().find(|e| e.key.is(table, key))
}

/// Drops the entry of `(table, key)` if nothing holds or waits for it (bounded memory).
fn remove_if_free(map: &mut MixMap<Bucket>, h: u64, table: u32, key: &[u8]) {
    let Some(b) = map.get_mut(&h) else { return };
    if b.first.key.is(table, key) {
        if b.first.is_free() {
            if b.more.is_empty() {
                map.remove(&h);
            } else {
                b.first = b.more.swap_remove(0);
            }
        }
    } else if let Some(i) = b.more.iter().position(|e| e.key.is(table, key)) {
        if b.more[i].is_free() {
            b.more.swap_remove(i);
        }
    }
}

#[repr(align(128))]
struct Shard {
    table: Mutex<MixMap<Bucket>>,
    counters: ShardCounters,
}

/// What the manager knows about a live transaction.
#[derive(Default)]
struct TxnSlot {
    /// Keys newly granted to it (each once; upgrades do not add).
    held: Vec<LockKey>,
    /// The key it is waiting for, if any.
    waiting: Option<(LockKey, Arc<Waiter>)>,
    /// The range-lock shards it holds range locks in (bitmask; see `lock_range`).
    ranges: u64,
}

#[repr(align(128))]
struct TxnShard {
    map: Mutex<MixMap<TxnSlot>>,
}

/// Strict two-phase lock manager for table keys (see the [module docs](super) for the
/// protocol and its guarantees).
///
/// ```
/// use nvmedb::txn::{LockManager, LockMode, LockOptions};
/// use std::time::Duration;
/// # fn main() -> nvmedb::Result<()> {
/// let opts = LockOptions { lock_timeout: Duration::from_millis(5), ..LockOptions::default() };
/// let lm = LockManager::new(opts)?;
/// lm.lock(1, 7, b"alice", LockMode::Shared)?;
/// lm.lock(2, 7, b"alice", LockMode::Shared)?; // S/S compatible
/// assert!(lm.try_lock(2, 7, b"alice", LockMode::Exclusive)?.is_none()); // upgrade must wait
/// lm.release_all(1); // commit of 1
/// lm.lock(2, 7, b"alice", LockMode::Exclusive)?; // now the only holder: upgraded
/// match lm.lock(3, 7, b"alice", LockMode::Shared) {
///     Err(e) if e.is_retryable() => { /* abort 3 and retry */ }
///     other => unreachable!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
/// (The last request conflicts with 2's X lock and fails after the 5 ms `lock_timeout`.)
pub struct LockManager {
    opts: LockOptions,
    shards: Box<[Shard]>,
    txns: Box<[TxnShard]>,
    shard_bits: u32,
    detector: Mutex<()>,
    counters: Counters,
    /// Key-range locks of serializable scans (`lock_range`).
    pub(super) ranges: RangeLocks,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager").field("opts", &self.opts).finish_non_exhaustive()
    }
}

impl LockManager {
    /// A lock manager with `opts` (validated).
    pub fn new(opts: LockOptions) -> Result<Self> {
        opts.validate()?;
        let shards = (0..opts.shards)
            .map(|_| Shard { table: Mutex::new(MixMap::default()), counters: ShardCounters::default() })
            .collect();
        let txns = (0..opts.shards).map(|_| TxnShard { map: Mutex::new(MixMap::default()) }).collect();
        Ok(Self {
            shard_bits: opts.shards.trailing_zeros(),
            opts,
            shards,
            txns,
            detector: Mutex::new(()),
            counters: Counters::default(),
            ranges: RangeLocks::default(),
        })
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.opts
    }

    fn shard_index(&self, h: u64) -> usize {
        // High bits pick the shard; the shard's map uses the low bits.
        if self.shard_bits == 0 {
            0
        } else {
            (h >> (64 - self.shard_bits)) as usize
        }
    }

    fn txn_shard(&self, txn: TxnId) -> &TxnShard {
        let h = txn.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.txns[if self.shard_bits == 0 { 0 } else { (h >> (64 - self.shard_bits)) as usize }]
    }

    /// Locks key `key` of table `table` in `mode` for transaction `txn`, waiting if it
    /// conflicts with locks other transactions hold or wait for.
    ///
    /// Re-entrant: a request covered by a lock `txn` already holds returns
    /// [`LockOutcome::AlreadyHeld`]; `Exclusive` on a key held `Shared` upgrades it (at once
    /// when `txn` is the only holder, else ahead of other waiters once the other readers
    /// release). One thread at a time may request locks for a given transaction.
    ///
    /// Errors (both [`Error::is_retryable`]): [`Error::Deadlock`] if `txn` is chosen as the
    /// victim of a wait-for cycle, [`Error::LockTimeout`] after waiting `lock_timeout`. The
    /// transaction keeps the locks it already holds; the caller must abort it
    /// ([`LockManager::release_all`]) and may then retry it.
    pub fn lock(&self, txn: TxnId, table: u32, key: &[u8], mode: LockMode) -> Result<LockOutcome> {
        match self.acquire(txn, table, key, mode, true)? {
            Some(o) => Ok(o),
            None => unreachable!("a waiting acquire always decides"),
        }
    }

    /// Like [`LockManager::lock`] but never waits: `Ok(None)` if the lock cannot be granted now.
    pub fn try_lock(
        &self,
        txn: TxnId,
        table: u32,
        key: &[u8],
        mode: LockMode,
    ) -> Result<Option<LockOutcome>> {
        self.acquire(txn, table, key, mode, false)
    }

    /// [`LockManager::lock`] taking a [`LockKey`].
    pub fn lock_key(&self, txn: TxnId, key: &LockKey, mode: LockMode) -> Result<LockOutcome> {
        self.lock(txn, key.table, &key.key, mode)
    }

    fn acquire(
        &self,
        txn: TxnId,
        table: u32,
        key: &[u8],
        mode: LockMode,
        wait: bool,
    ) -> Result<Option<LockOutcome>> {
        let h = key_hash(table, key);
        let shard = &self.shards[self.shard_index(h)];
        shard.counters.requests.fetch_add(1, Relaxed);
        let waiter = {
            let mut map = shard.table.locked();
            let e = entry_mut(&mut map, h, table, key);
            if let Some(i) = e.holders.iter().position(|&(t, _)| t == txn) {
                let held = e.holders[i].1;
                if held.covers(mode) {
                    shard.counters.reentrant.fetch_add(1, Relaxed);
                    shard.counters.immediate.fetch_add(1, Relaxed);
                    return Ok(Some(LockOutcome::AlreadyHeld));
                }
                if e.holders.len() == 1 {
                    e.holders[i].1 = LockMode::Exclusive;
                    shard.counters.immediate.fetch_add(1, Relaxed);
                    return Ok(Some(LockOutcome::Upgraded));
                }
                if !wait {
                    return Ok(None);
                }
                // Upgraders go ahead of ordinary waiters (they already hold S, and a plain
                // X waiter ahead of them could never be granted while they hold it).
                let pos = e.queue.iter().take_while(|w| w.upgrade).count();
                let w = Waiter::new(txn, LockMode::Exclusive, true);
                e.queue.insert(pos, Arc::clone(&w));
                w
            } else {
                if e.queue.is_empty() && e.holders.iter().all(|&(_, m)| m.compatible(mode)) {
                    e.holders.push((txn, mode));
                    e.check();
                    drop(map);
                    shard.counters.immediate.fetch_add(1, Relaxed);
                    self.note_held(txn, LockKey::new(table, key));
                    return Ok(Some(LockOutcome::Granted));
                }
                // Not free (else it would have been granted), so no entry to clean up.
                if !wait {
                    return Ok(None);
                }
                let w = Waiter::new(txn, mode, false);
                e.queue.push_back(Arc::clone(&w));
                w
            }
        };
        self.wait(txn, h, LockKey::new(table, key), waiter).map(Some)
    }

    fn note_held(&self, txn: TxnId, key: LockKey) {
        let mut m = self.txn_shard(txn).map.locked();
        let held = &mut m.entry(txn).or_default().held;
        if held.capacity() == 0 {
            // The list the thread's last transaction emptied, else one allocation for the tens
            // of locks a transaction usually takes (a New-Order about 35).
            *held = SPARE_HELD.try_with(|s| std::mem::take(&mut *s.borrow_mut())).unwrap_or_default();
            if held.capacity() == 0 {
                held.reserve(48);
            }
        }
        held.push(key);
    }

    fn set_waiting(&self, txn: TxnId, key: LockKey, w: Arc<Waiter>) {
        let mut m = self.txn_shard(txn).map.locked();
        let slot = m.entry(txn).or_default();
        assert!(slot.waiting.is_none(), "transaction {txn} requested a lock while already waiting for one");
        slot.waiting = Some((key, w));
    }

    /// Ends a wait in the registry, recording the key if it was newly granted. A transaction
    /// that holds nothing leaves no trace (the registry is bounded by live lock holders).
    fn end_wait(&self, txn: TxnId, newly_held: Option<LockKey>) {
        let mut m = self.txn_shard(txn).map.locked();
        let slot = m.entry(txn).or_default();
        slot.waiting = None;
        slot.held.extend(newly_held);
        if slot.held.is_empty() && slot.ranges == 0 {
            m.remove(&txn);
        }
    }

    fn waiting_of(&self, txn: TxnId) -> Option<(LockKey, Arc<Waiter>)> {
        self.txn_shard(txn).map.locked().get(&txn).and_then(|s| s.waiting.clone())
    }

    /// The wait protocol: spin on the waiter's own state word, then (after one deadlock
    /// check) park until granted, chosen as victim, or timed out.
    fn wait(&self, txn: TxnId, h: u64, lk: LockKey, w: Arc<Waiter>) -> Result<LockOutcome> {
        self.set_waiting(txn, lk.clone(), Arc::clone(&w));
        let _traced = crate::trace::span(crate::trace::TraceKind::LockWait);
        let c = &self.counters;
        c.waits.fetch_add(1, Relaxed);
        let start = Instant::now();
        let mut st = w.state.load(Acquire);
        if !self.opts.spin.is_zero() {
            let mut i = 0u32;
            while st == WAITING {
                std::hint::spin_loop();
                i = i.wrapping_add(1);
                if i.is_multiple_of(16) {
                    if start.elapsed() >= self.opts.spin {
                        break;
                    }
                    if self.opts.spin_yield && i.is_multiple_of(64) {
                        thread::yield_now();
                    }
                }
                st = w.state.load(Acquire);
            }
        }
        if st == GRANTED {
            c.spin_grants.fetch_add(1, Relaxed);
        } else {
            c.parked_waits.fetch_add(1, Relaxed);
            if self.opts.deadlock_detection && st == WAITING {
                self.detect(txn);
                st = w.state.load(Acquire);
            }
            while st == WAITING {
                let elapsed = start.elapsed();
                if elapsed >= self.opts.lock_timeout {
                    st = self.cancel(h, &lk, &w);
                    break;
                }
                c.park_calls.fetch_add(1, Relaxed);
                // Woken on grant (or as a victim): park until the deadline. Polling in `park`
                // slices instead woke every waiter of a lock held across a commit's flush
                // thousands of times per second (half the SQL server's CPU under pgbench's
                // TPC-B-like load went to those wake-ups).
                let left = self.opts.lock_timeout - elapsed;
                thread::park_timeout(if self.opts.wake_on_release { left } else { self.opts.park.min(left) });
                st = w.state.load(Acquire);
            }
        }
        let waited = start.elapsed();
        c.record_wait(u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX));
        match st {
            GRANTED => {
                if w.upgrade {
                    self.end_wait(txn, None);
                    Ok(LockOutcome::Upgraded)
                } else {
                    self.end_wait(txn, Some(lk));
                    Ok(LockOutcome::Granted)
                }
            }
            VICTIM => {
                self.end_wait(txn, None);
                self.withdraw(h, &lk, &w);
                let cycle = std::mem::take(&mut *w.cycle.locked());
                Err(Error::Deadlock { txn, key: lk, cycle })
            }
            CANCELLED => {
                self.end_wait(txn, None);
                c.timeouts.fetch_add(1, Relaxed);
                Err(Error::LockTimeout { txn, key: lk, mode: w.mode, waited })
            }
            s => unreachable!("waiter state {s}"),
        }
    }

    fn wake(&self, woken: Vec<Arc<Waiter>>) {
        if self.opts.wake_on_release {
            for w in woken {
                w.thread.unpark();
            }
        }
    }

    /// Timeout: withdraws the request unless it was decided meanwhile; returns the final state.
    fn cancel(&self, h: u64, lk: &LockKey, w: &Arc<Waiter>) -> u8 {
        let shard = &self.shards[self.shard_index(h)];
        let mut map = shard.table.locked();
        match w.state.compare_exchange(WAITING, CANCELLED, AcqRel, Acquire) {
            Ok(_) => {
                let woken = match find_entry(&mut map, h, lk.table, &lk.key) {
                    Some(e) => {
                        e.remove_waiter(w);
                        e.grant_waiters()
                    }
                    None => Vec::new(),
                };
                remove_if_free(&mut map, h, lk.table, &lk.key);
                drop(map);
                self.wake(woken);
                CANCELLED
            }
            Err(s) => s,
        }
    }

    /// Removes a victim's request from its queue and lets the waiters behind it move up.
    fn withdraw(&self, h: u64, lk: &LockKey, w: &Arc<Waiter>) {
        let shard = &self.shards[self.shard_index(h)];
        let mut map = shard.table.locked();
        let woken = match find_entry(&mut map, h, lk.table, &lk.key) {
            Some(e) => {
                e.remove_waiter(w);
                e.grant_waiters()
            }
            None => Vec::new(),
        };
        remove_if_free(&mut map, h, lk.table, &lk.key);
        drop(map);
        self.wake(woken);
    }

    /// Releases every lock `txn` holds (at commit or abort) and grants what its release
    /// unblocks. Returns the number of keys released. Must not be called while `txn` is
    /// waiting for a lock. Afterwards the manager has forgotten `txn`: a transaction retried
    /// after a deadlock may reuse its id, and so keep its age under
    /// [`VictimPolicy::Youngest`] (it cannot be chosen as victim forever).
    pub fn release_all(&self, txn: TxnId) -> usize {
        let Some(slot) = self.txn_shard(txn).map.locked().remove(&txn) else { return 0 };
        assert!(slot.waiting.is_none(), "release_all({txn}) while the transaction waits for a lock");
        if slot.ranges != 0 {
            // Before the owner key: a writer that then finds no range waits for nothing.
            self.ranges.release(txn, slot.ranges);
        }
        for k in &slot.held {
            self.unhold(txn, k);
        }
        let n = slot.held.len();
        let mut held = slot.held;
        if held.capacity() <= SPARE_HELD_MAX {
            held.clear();
            let _ = SPARE_HELD.try_with(|s| *s.borrow_mut() = held);
        }
        n
    }

    /// Removes `txn` from the holders of `k` and grants what that unblocks.
    fn unhold(&self, txn: TxnId, k: &LockKey) {
        let h = key_hash(k.table, &k.key);
        let shard = &self.shards[self.shard_index(h)];
        let mut map = shard.table.locked();
        let woken = match find_entry(&mut map, h, k.table, &k.key) {
            Some(e) => {
                let i = e.holders.iter().position(|&(t, _)| t == txn);
                debug_assert!(i.is_some(), "{k}: transaction {txn} released a lock it does not hold");
                if let Some(i) = i {
                    e.holders.swap_remove(i);
                }
                e.grant_waiters()
            }
            None => {
                debug_assert!(false, "{k}: released by {txn} but has no entry");
                Vec::new()
            }
        };
        remove_if_free(&mut map, h, k.table, &k.key);
        drop(map);
        self.wake(woken);
    }

    /// Releases the one lock `txn` holds on `(table, key)` (an instant-duration lock, taken
    /// only to wait for its holders).
    pub(super) fn release_one(&self, txn: TxnId, table: u32, key: &[u8]) {
        let k = {
            let mut m = self.txn_shard(txn).map.locked();
            let Some(slot) = m.get_mut(&txn) else { return };
            let Some(i) = slot.held.iter().rposition(|k| k.is(table, key)) else { return };
            let k = slot.held.swap_remove(i);
            if slot.held.is_empty() && slot.waiting.is_none() && slot.ranges == 0 {
                m.remove(&txn);
            }
            k
        };
        self.unhold(txn, &k);
    }

    /// Records that `txn` holds range locks in the shards of bitmask `bit`.
    pub(super) fn note_ranges(&self, txn: TxnId, bit: u64) {
        self.txn_shard(txn).map.locked().entry(txn).or_default().ranges |= bit;
    }

    /// The mode in which `txn` holds `(table, key)`, if it does.
    pub fn held_mode(&self, txn: TxnId, table: u32, key: &[u8]) -> Option<LockMode> {
        let h = key_hash(table, key);
        let mut map = self.shards[self.shard_index(h)].table.locked();
        let e = find_entry(&mut map, h, table, key)?;
        e.holders.iter().find(|&&(t, _)| t == txn).map(|&(_, m)| m)
    }

    /// The key `txn` is waiting for, if it is waiting.
    pub fn waiting_for(&self, txn: TxnId) -> Option<LockKey> {
        self.waiting_of(txn).filter(|(_, w)| w.state.load(Acquire) == WAITING).map(|(k, _)| k)
    }

    /// Number of keys `txn` holds locks on.
    pub fn held_count(&self, txn: TxnId) -> usize {
        self.txn_shard(txn).map.locked().get(&txn).map_or(0, |s| s.held.len())
    }

    /// Number of lock-table entries (keys held or waited for). Zero when no transaction holds
    /// or waits for anything: entries are freed with their last holder.
    pub fn entry_count(&self) -> usize {
        self.shards.iter().map(|s| s.table.locked().values().map(|b| 1 + b.more.len()).sum::<usize>()).sum()
    }

    /// Number of transactions the manager tracks (holding or waiting for a lock). Zero once
    /// every transaction has released: finished transactions leave nothing behind.
    pub fn active_txns(&self) -> usize {
        self.txns.iter().map(|s| s.map.locked().len()).sum()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> LockStats {
        self.counters.snapshot(self.shards.iter().map(|s| &s.counters))
    }

    // ---- deadlock detection ----

    /// Runs the wait-for cycle check for `me` (which has just stopped spinning) and, if a
    /// cycle through `me` exists, marks one victim. Serialized by the detector mutex, so two
    /// transactions closing the same cycle at once choose one victim: the second check no
    /// longer sees the victim as waiting.
    ///
    /// Completeness: a cycle is closed by the last of its members to start waiting (edges of
    /// an already waiting transaction only change when a request is queued ahead of it, and
    /// that requester checks in turn); the last member's check runs after every other member
    /// registered its wait, so it sees the whole cycle. The lock timeout remains as a safety
    /// net.
    fn detect(&self, me: TxnId) {
        // Cheap pre-check without the detector mutex: if nothing `me` waits for is itself
        // waiting, `me` closes no cycle now (a blocker that starts waiting later runs its own
        // check, and sees `me` waiting).
        if self.blockers(me).into_iter().all(|b| self.waiting_for(b).is_none()) {
            return;
        }
        let _serial = self.detector.locked();
        // Killing another transaction breaks one cycle through `me`; others may remain (their
        // members checked before `me` waited, so nobody else will find them): repeat until
        // no cycle through `me` is left, or `me` itself is the victim.
        for round in 0..64 {
            let Some(cycle) = self.find_cycle(me) else { return };
            let victim = match self.opts.victim {
                // After many rounds, stop hunting and abort the requester.
                _ if round >= 32 => me,
                VictimPolicy::Requester => me,
                VictimPolicy::Youngest => cycle.iter().copied().max().unwrap_or(me),
            };
            let Some((_, w)) = self.waiting_of(victim) else { continue };
            *w.cycle.locked() = cycle;
            if w.state.compare_exchange(WAITING, VICTIM, AcqRel, Acquire).is_ok() {
                self.counters.deadlocks.fetch_add(1, Relaxed);
                if victim == me {
                    return;
                }
                w.thread.unpark();
            }
            // Either another cycle may remain, or the chosen victim was granted or timed out
            // meanwhile: look again.
        }
    }

    /// Transactions `txn` waits for: holders of its key it conflicts with, and conflicting
    /// requests queued ahead of it.
    fn blockers(&self, txn: TxnId) -> Vec<TxnId> {
        let Some((lk, w)) = self.waiting_of(txn) else { return Vec::new() };
        if w.state.load(Acquire) != WAITING {
            return Vec::new();
        }
        let h = key_hash(lk.table, &lk.key);
        let mut map = self.shards[self.shard_index(h)].table.locked();
        let Some(e) = find_entry(&mut map, h, lk.table, &lk.key) else { return Vec::new() };
        let Some(pos) = e.queue.iter().position(|q| Arc::ptr_eq(q, &w)) else { return Vec::new() };
        let mut out: Vec<TxnId> = e
            .holders
            .iter()
            .filter(|&&(t, m)| t != txn && (w.upgrade || !m.compatible(w.mode)))
            .map(|&(t, _)| t)
            .collect();
        for q in e.queue.iter().take(pos) {
            if q.txn != txn && q.state.load(Acquire) == WAITING && w.conflicts_with_queued(q) {
                out.push(q.txn);
            }
        }
        out
    }

    /// Depth-first search of the wait-for graph for a cycle through `start`; returns its
    /// members starting at `start`.
    fn find_cycle(&self, start: TxnId) -> Option<Vec<TxnId>> {
        let mut visited = HashSet::new();
        visited.insert(start);
        let mut path: Vec<(TxnId, Vec<TxnId>, usize)> = vec![(start, self.blockers(start), 0)];
        while let Some((_, blockers, next)) = path.last_mut() {
            let Some(&b) = blockers.get(*next) else {
                path.pop();
                continue;
            };
            *next += 1;
            if b == start {
                return Some(path.iter().map(|p| p.0).collect());
            }
            if visited.insert(b) {
                let bl = self.blockers(b);
                if !bl.is_empty() {
                    path.push((b, bl, 0));
                }
            }
        }
        None
    }
}
