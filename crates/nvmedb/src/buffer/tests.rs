//! Buffer manager tests: model-based with constant eviction, corruption, I/O errors,
//! concurrency, policies, pinning, the WAL gate and the background writer.

use super::*;
use crate::error::Error;
use crate::io::{Device, MemDevice};
use crate::page::{PageHeader, PageType, PAGE_HEADER_BYTES};
use crate::util::sync::MutexExt;
use crate::util::testing::flaky_device;
use crate::util::Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const PS: usize = 4096;

fn pool(frames: usize, policy: BufferPolicy) -> (Arc<BufferPool>, Arc<MemDevice>) {
    let mut cfg = PoolConfig::new(PS, frames);
    cfg.policy = policy;
    let pool = BufferPool::new(cfg).unwrap();
    let dev = Arc::new(MemDevice::new("test.db"));
    pool.register_file(0, dev.clone()).unwrap();
    (pool, dev)
}

fn body_u64(page: &[u8]) -> u64 {
    u64::from_le_bytes(page[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 8].try_into().unwrap())
}
fn set_body_u64(page: &mut [u8], v: u64) {
    page[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn model_based_with_constant_eviction() {
    for seed in 0..20u64 {
        let mut rng = Rng::new(seed);
        let (pool, _) = pool(4, BufferPolicy::Shared { stripes: 2 });
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        for step in 0..400 {
            let op = rng.below(10);
            if op < 2 || model.is_empty() {
                let mut g = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
                let v = rng.next_u64();
                set_body_u64(&mut g, v);
                model.insert(g.page_id().page, v);
            } else if op < 6 {
                let p = rng.below(model.len() as u64);
                let g = pool.fix(PageId::new(0, p), PageClass::Data).unwrap();
                assert_eq!(body_u64(&g), model[&p], "seed {seed} step {step} page {p}");
            } else {
                let p = rng.below(model.len() as u64);
                let mut g = pool.fix_mut(PageId::new(0, p), PageClass::Data).unwrap();
                let v = rng.next_u64();
                set_body_u64(&mut g, v);
                model.insert(p, v);
            }
        }
        let s = pool.stats();
        assert!(s.evictions > 100 && s.reads > 100 && s.writes > 50, "seed {seed}: {s:?}");
        pool.flush_all().unwrap();
        for (&p, &v) in &model {
            let g = pool.fix(PageId::new(0, p), PageClass::Data).unwrap();
            assert_eq!(body_u64(&g), v);
        }
    }
}

#[test]
fn corrupted_page_is_reported_with_file_and_page() {
    let (pool, dev) = pool(2, BufferPolicy::Shared { stripes: 1 });
    for _ in 0..4 {
        drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    }
    pool.flush_all().unwrap();
    // Evict page 1 by touching others, then flip a byte of it on the device.
    for p in [2, 3, 0, 2, 3] {
        drop(pool.fix(PageId::new(0, p), PageClass::Data).unwrap());
    }
    let mut img = dev.snapshot();
    img[PS + 1000] ^= 0x40;
    dev.restore(img);
    let err = pool.fix(PageId::new(0, 1), PageClass::Data).err().expect("corruption must be detected");
    match &err {
        Error::Corruption { file, offset, detail } => {
            assert_eq!(file, "test.db");
            assert_eq!(*offset, PS as u64);
            assert!(detail.contains("page 1"), "{detail}");
        }
        other => panic!("expected corruption, got {other}"),
    }
    // The pool is still usable.
    drop(pool.fix(PageId::new(0, 2), PageClass::Data).unwrap());
}

#[test]
fn missing_page_and_unknown_file_are_clear_errors() {
    let (pool, _) = pool(2, BufferPolicy::Shared { stripes: 1 });
    let e = pool.fix(PageId::new(0, 5), PageClass::Data).err().unwrap().to_string();
    assert!(e.contains("page 5 does not exist"), "{e}");
    let e = pool.fix(PageId::new(9, 0), PageClass::Data).err().unwrap().to_string();
    assert!(e.contains("file id 9"), "{e}");
}

#[test]
fn io_errors_surface_typed_and_lose_nothing() {
    for seed in 0..10u64 {
        let mut rng = Rng::new(seed);
        let pool = BufferPool::new(PoolConfig::new(PS, 3)).unwrap();
        let (dev, sw) = flaky_device("flaky");
        pool.register_file(0, dev.clone()).unwrap();
        let mut model = BTreeMap::new();
        for p in 0..8u64 {
            let mut g = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
            set_body_u64(&mut g, p * 10);
            model.insert(p, p * 10);
        }
        let mut failures = 0;
        for step in 0..300 {
            sw.fail_reads.store(rng.chance(0.2), Ordering::SeqCst);
            sw.fail_writes.store(rng.chance(0.2), Ordering::SeqCst);
            let p = rng.below(8);
            if rng.chance(0.5) {
                match pool.fix(PageId::new(0, p), PageClass::Data) {
                    Ok(g) => assert_eq!(body_u64(&g), model[&p], "seed {seed} step {step}"),
                    Err(Error::Io(e)) => {
                        assert_eq!(e.raw_os_error(), Some(5));
                        failures += 1;
                    }
                    Err(e) => panic!("seed {seed} step {step}: unexpected {e}"),
                }
            } else {
                match pool.fix_mut(PageId::new(0, p), PageClass::Data) {
                    Ok(mut g) => {
                        let v = rng.next_u64();
                        set_body_u64(&mut g, v);
                        model.insert(p, v);
                    }
                    Err(Error::Io(_)) => failures += 1,
                    Err(e) => panic!("seed {seed} step {step}: unexpected {e}"),
                }
            }
        }
        assert!(failures > 0, "seed {seed}: no fault was hit");
        sw.fail_reads.store(false, Ordering::SeqCst);
        sw.fail_writes.store(false, Ordering::SeqCst);
        for (&p, &v) in &model {
            let g = pool.fix(PageId::new(0, p), PageClass::Data).unwrap();
            assert_eq!(body_u64(&g), v, "seed {seed}: page {p} lost its last update");
        }
    }
}

#[test]
fn concurrent_increments_are_not_lost() {
    let (pool, _) = pool(6, BufferPolicy::Shared { stripes: 4 });
    const PAGES: u64 = 16;
    for _ in 0..PAGES {
        drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    }
    let threads = 4;
    let per_thread = 2000;
    std::thread::scope(|s| {
        for t in 0..threads {
            let pool = &pool;
            s.spawn(move || {
                let mut rng = Rng::new(t);
                for _ in 0..per_thread {
                    let p = rng.below(PAGES);
                    let mut g = pool.fix_mut(PageId::new(0, p), PageClass::Data).unwrap();
                    let v = body_u64(&g);
                    set_body_u64(&mut g, v + 1);
                    drop(g);
                    let r = pool.fix(PageId::new(0, rng.below(PAGES)), PageClass::Data).unwrap();
                    assert!(PageHeader::read(&r).is_some());
                }
            });
        }
    });
    let total: u64 =
        (0..PAGES).map(|p| body_u64(&pool.fix(PageId::new(0, p), PageClass::Data).unwrap())).sum();
    assert_eq!(total, threads * per_thread);
    assert!(pool.stats().evictions > 0);
}

#[test]
fn separated_policy_reads_in_parallel_and_refuses_writes() {
    let dev = Arc::new(MemDevice::new("sep.db"));
    {
        let pool2 = BufferPool::new(PoolConfig::new(PS, 8)).unwrap();
        pool2.register_file(0, dev.clone()).unwrap();
        for p in 0..32u64 {
            let mut g = pool2.allocate(0, PageClass::Data, PageType::Heap).unwrap();
            set_body_u64(&mut g, p + 100);
        }
        pool2.flush_all().unwrap();
    }
    let mut cfg = PoolConfig::new(PS, 8);
    cfg.policy = BufferPolicy::Separated { partitions: 2 };
    let sep = BufferPool::new(cfg).unwrap();
    sep.register_file(0, dev).unwrap();
    assert!(matches!(sep.fix_mut(PageId::new(0, 0), PageClass::Data), Err(Error::InvalidArgument(_))));
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let sep = &sep;
            s.spawn(move || {
                for round in 0..3 {
                    for p in 0..32u64 {
                        let g = sep.fix(PageId::new(0, p), PageClass::Data).unwrap();
                        assert_eq!(body_u64(&g), p + 100, "thread {t} round {round}");
                    }
                }
            });
        }
    });
    assert!(sep.stats().reads >= 64);
}

#[test]
fn pinned_index_pages_stay_resident() {
    let mut cfg = PoolConfig::new(PS, 8);
    cfg.pin_index_pages = true;
    let pool = BufferPool::new(cfg).unwrap();
    pool.register_file(0, Arc::new(MemDevice::new("idx"))).unwrap();
    pool.register_file(1, Arc::new(MemDevice::new("heap"))).unwrap();
    for _ in 0..3 {
        drop(pool.allocate(0, PageClass::Index, PageType::BtreeLeaf).unwrap());
    }
    for _ in 0..50 {
        drop(pool.allocate(1, PageClass::Data, PageType::Heap).unwrap());
    }
    let before = pool.stats();
    for p in 0..50u64 {
        drop(pool.fix(PageId::new(1, p), PageClass::Data).unwrap());
        drop(pool.fix(PageId::new(0, p % 3), PageClass::Index).unwrap());
    }
    let d = pool.stats().since(&before);
    assert!(d.reads >= 40, "data pages must cycle through 5 frames: {d:?}");
    assert_eq!(d.hits, 50, "all 50 index fixes must hit: {d:?}");
}

struct RecordingGate {
    durable: AtomicU64,
    max_asked: AtomicU64,
}
impl WalGate for RecordingGate {
    fn ensure_durable(&self, lsn: u64) -> crate::error::Result<()> {
        self.max_asked.fetch_max(lsn, Ordering::SeqCst);
        self.durable.fetch_max(lsn, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn write_back_waits_for_the_log_to_cover_the_page_lsn() {
    let (pool, dev) = pool(2, BufferPolicy::Shared { stripes: 1 });
    let gate = Arc::new(RecordingGate { durable: AtomicU64::new(0), max_asked: AtomicU64::new(0) });
    pool.set_wal_gate(gate.clone());
    {
        let mut g = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
        g.set_lsn(4242);
    }
    pool.flush_all().unwrap();
    assert_eq!(gate.max_asked.load(Ordering::SeqCst), 4242);
    let img = dev.snapshot();
    assert_eq!(PageHeader::lsn_of(&img[..PS]), 4242);
}

/// A pool of `frames` frames over `pages` allocated pages, with or without a background writer
/// (its thread wakes only when asked: `interval` is an hour).
fn pool_with_writer(frames: usize, pages: u64, writer: bool) -> (Arc<BufferPool>, Arc<MemDevice>) {
    let mut cfg = PoolConfig::new(PS, frames);
    cfg.background_writer = writer.then(|| BackgroundWriter {
        interval: std::time::Duration::from_secs(3600),
        ..BackgroundWriter::default()
    });
    let pool = BufferPool::new(cfg).unwrap();
    let dev = Arc::new(MemDevice::new("bg.db"));
    pool.register_file(0, dev.clone()).unwrap();
    for _ in 0..pages {
        drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    }
    pool.flush_all().unwrap();
    (pool, dev)
}

/// Write-heavy steps: each fixes a random page of `pages`, changes it 3 times in 4 (a
/// TPC-C-like mix), and records the value in `model` (page → last value written).
fn write_heavy(pool: &BufferPool, rng: &mut Rng, pages: u64, steps: usize, model: &mut BTreeMap<u64, u64>) {
    for _ in 0..steps {
        let p = rng.below(pages);
        if rng.below(4) == 0 {
            let g = pool.fix(PageId::new(0, p), PageClass::Data).unwrap();
            assert_eq!(body_u64(&g), model.get(&p).copied().unwrap_or(0), "page {p}");
        } else {
            let mut g = pool.fix_mut(PageId::new(0, p), PageClass::Data).unwrap();
            let v = rng.next_u64();
            set_body_u64(&mut g, v);
            model.insert(p, v);
        }
    }
}

#[test]
fn evictions_find_clean_victims_when_the_writer_keeps_ahead() {
    // Rounds are run here between bursts of evictions (the writer's thread may add more): with
    // clean frames ahead of the hand no eviction writes a page itself.
    let (pool, dev) = pool_with_writer(64, 512, true);
    let cfg = pool.config().background_writer.unwrap();
    let mut rng = Rng::new(7);
    let mut model = BTreeMap::new();
    let base = pool.stats();
    for _ in 0..500 {
        pool.clean_ahead(&cfg).unwrap();
        write_heavy(&pool, &mut rng, 512, 8, &mut model);
    }
    let s = pool.stats().since(&base);
    assert!(s.evictions > 3000, "{s:?}");
    assert_eq!(s.eviction_writes, 0, "every victim should have been clean: {s:?}");
    assert!(s.background_writes > 1000, "{s:?}");
    assert_eq!(s.writes, s.background_writes, "only the writer wrote: {s:?}");
    // Nothing was lost: the device holds every page's last value once flushed.
    pool.flush_all().unwrap();
    let img = dev.snapshot();
    for (&p, &v) in &model {
        let page = &img[p as usize * PS..(p as usize + 1) * PS];
        assert_eq!(body_u64(page), v, "page {p}");
    }
}

#[test]
fn evictions_mostly_find_clean_victims_under_a_write_heavy_load() {
    // Four threads change random pages, most of them in a hot set, of a pool 8x too small; the
    // writer's thread runs only when evictions pass over dirty victims. Counted: how many
    // evictions waited for a write-back on their own thread, with the writer and without.
    let run = |writer: bool| {
        let (pool, _) = pool_with_writer(256, 2048, writer);
        let base = pool.stats();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let pool = &pool;
                s.spawn(move || {
                    let mut rng = Rng::new(100 + t);
                    for _ in 0..20_000 {
                        // Four in five fixes go to 128 hot pages, the rest anywhere.
                        let p = if rng.below(5) == 0 { rng.below(2048) } else { rng.below(128) };
                        let mut g = pool.fix_mut(PageId::new(0, p), PageClass::Data).unwrap();
                        // Some work on the page, as a transaction does between fixes.
                        let sum = crc32c::crc32c(&g);
                        set_body_u64(&mut g, u64::from(sum) ^ t);
                    }
                });
            }
        });
        assert!(pool.background_writer_error().is_none());
        pool.stats().since(&base)
    };
    let off = run(false);
    let on = run(true);
    assert!(off.evictions > 5_000 && on.evictions > 5_000, "{off:?} {on:?}");
    assert!(off.eviction_writes * 10 > off.evictions * 9, "without the writer, victims are dirty: {off:?}");
    assert!(
        on.eviction_writes * 4 < on.evictions,
        "with the writer, most victims should be clean: {} of {} evictions waited for a write ({on:?})",
        on.eviction_writes,
        on.evictions
    );
}

#[test]
fn batched_write_back_obeys_the_wal_rule() {
    // A full pool of 16 frames: one round cleans the 4 frames (a quarter) ahead of the hand.
    let (pool, dev) = pool_with_writer(16, 0, true);
    let gate = Arc::new(RecordingGate { durable: AtomicU64::new(0), max_asked: AtomicU64::new(0) });
    pool.set_wal_gate(gate.clone());
    let lsn = |p: u64| if p == 2 { 4242 } else { 10 + p };
    for p in 0..16 {
        let mut g = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
        g.set_lsn(lsn(p));
    }
    // Allocated frames are recently used: age them as a pass of the hand would.
    for f in pool.frames_for_tests() {
        f.usage.store(0, Ordering::Relaxed);
    }
    let cfg = pool.config().background_writer.unwrap();
    assert_eq!(pool.clean_ahead(&cfg).unwrap(), 4);
    assert_eq!(pool.stats().background_writes, 4);
    assert_eq!(gate.max_asked.load(Ordering::SeqCst), 4242, "one wait covering the batch's highest LSN");
    let img = dev.snapshot();
    let on_device: Vec<u64> = (0..4).map(|p| PageHeader::lsn_of(&img[p * PS..(p + 1) * PS])).collect();
    assert_eq!(on_device, (0..4).map(lsn).collect::<Vec<_>>());
    assert_eq!(pool.stats().eviction_writes, 0);
}

#[test]
fn an_eviction_helping_the_writer_takes_at_most_a_quarter_of_the_pool() {
    // 16 dirty, aged frames: the eviction passes over them (waking the writer, whose round
    // cleans a quarter), then helps with one batch of its own. The frames of a batch stay
    // pinned while written, so a batch of the whole pool would leave other threads nothing to
    // claim: together the writer and the helper write at most half the pool here.
    let (pool, _dev) = pool_with_writer(16, 0, true);
    for _ in 0..16 {
        drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    }
    for f in pool.frames_for_tests() {
        f.usage.store(0, Ordering::Relaxed);
    }
    let base = pool.stats();
    drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    let s = pool.stats().since(&base);
    assert!(s.writes >= 1 && s.writes <= 8, "pages written to free one frame: {s:?}");
}

#[test]
fn exhausted_pool_is_a_clear_error() {
    let (pool, _) = pool(2, BufferPolicy::Shared { stripes: 1 });
    let _a = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
    let _b = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
    let e = pool.allocate(0, PageClass::Data, PageType::Heap).err().unwrap();
    assert!(matches!(e, Error::ResourceExhausted(_)), "{e}");
    let m = e.to_string();
    assert!(m.contains("buffer pool") && m.contains("2 frames of 4096 B") && m.contains("2 pinned"), "{m}");
}

/// A pool whose index pages are kept resident, holding `pages` index pages whose bodies are
/// their page numbers (written back, then dropped from memory as far as the pool can).
fn sticky_pool(frames: usize, pages: u64) -> Arc<BufferPool> {
    let mut cfg = PoolConfig::new(PS, frames);
    cfg.pin_index_pages = true;
    cfg.name = "index buffer".into();
    let pool = BufferPool::new(cfg).unwrap();
    pool.register_file(0, Arc::new(MemDevice::new("idx"))).unwrap();
    for p in 0..pages {
        let mut g = pool.allocate(0, PageClass::Index, PageType::BtreeLeaf).unwrap();
        set_body_u64(&mut g, p);
    }
    pool.flush_all().unwrap();
    pool
}

#[test]
fn kept_resident_index_pages_evict_once_they_fill_the_pool() {
    let pool = sticky_pool(8, 40);
    for round in 0..3 {
        for p in 0..40u64 {
            // Each round adds 1000 to every page once (p * 7 mod 40 runs over all pages).
            let v = body_u64(&pool.fix(PageId::new(0, p), PageClass::Index).unwrap());
            assert!(v % 1000 == p && (v / 1000 == round || v / 1000 == round + 1), "round {round}: {v}");
            let mut g = pool.fix_mut(PageId::new(0, (p * 7) % 40), PageClass::Index).unwrap();
            let v = body_u64(&g);
            assert_eq!(v % 1000, (p * 7) % 40);
            set_body_u64(&mut g, v + 1000);
        }
    }
    pool.flush_all().unwrap();
    for p in 0..40u64 {
        assert_eq!(body_u64(&pool.fix(PageId::new(0, p), PageClass::Index).unwrap()), p + 3000);
    }
    assert!(pool.stats().evictions >= 40, "{:?}", pool.stats());
}

/// Readers on the unpinned fast path of kept-resident pages, while other threads make the
/// pool evict them: a guard's page never changes under it, and every change survives.
#[test]
fn unpinned_hits_on_kept_resident_pages_are_safe_under_eviction() {
    const PAGES: u64 = 48;
    let pool = sticky_pool(8, PAGES);
    let increments = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (pool, increments) = (&pool, &increments);
            s.spawn(move || {
                let mut rng = Rng::new(t);
                for _ in 0..3000 {
                    let p = rng.below(PAGES);
                    let pid = PageId::new(0, p);
                    if t == 0 && rng.below(4) == 0 {
                        let mut g = pool.fix_mut(pid, PageClass::Index).unwrap();
                        let v = body_u64(&g);
                        set_body_u64(&mut g, v + 1000);
                        increments.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let g = pool.fix(pid, PageClass::Index).unwrap();
                        assert_eq!(g.page_id(), pid);
                        let first = body_u64(&g);
                        assert_eq!(first % 1000, p, "thread {t}: page {p} holds another page");
                        std::hint::spin_loop();
                        assert_eq!(body_u64(&g), first, "thread {t}: page {p} changed under a guard");
                    }
                }
            });
        }
    });
    pool.flush_all().unwrap();
    let total: u64 = (0..PAGES)
        .map(|p| {
            let v = body_u64(&pool.fix(PageId::new(0, p), PageClass::Index).unwrap());
            assert_eq!(v % 1000, p);
            v / 1000
        })
        .sum();
    assert_eq!(total, increments.load(Ordering::Relaxed));
    assert!(pool.stats().evictions > 100, "{:?}", pool.stats());
}

/// When every frame is held, the error names the pool, its size and what holds the frames
/// (here: readers of kept-resident pages, with or without a pin).
#[test]
fn a_pool_held_whole_names_itself_and_its_holders() {
    let pool = sticky_pool(8, 9);
    let held: Vec<_> = (0..8).map(|p| pool.fix(PageId::new(0, p), PageClass::Index).unwrap()).collect();
    let e = pool.fix(PageId::new(0, 8), PageClass::Index).err().unwrap();
    let m = e.to_string();
    assert!(matches!(e, Error::ResourceExhausted(_)), "{m}");
    assert!(m.contains("index buffer") && m.contains("8 frames of 4096 B (32 KiB)"), "{m}");
    assert!(m.contains("pinned by page fixes") && m.contains("latched by readers"), "{m}");
    drop(held);
    assert_eq!(body_u64(&pool.fix(PageId::new(0, 8), PageClass::Index).unwrap()), 8);
}

#[test]
fn policy_parsing_and_config_validation() {
    assert_eq!(BufferPolicy::parse("SHR-512", 2), Some(BufferPolicy::Shared { stripes: 512 }));
    assert_eq!(BufferPolicy::parse("sep", 3), Some(BufferPolicy::Separated { partitions: 3 }));
    assert_eq!(BufferPolicy::parse("shr-0", 2), None);
    let mut cfg = PoolConfig::new(3000, 8);
    assert!(matches!(cfg.validate(), Err(Error::Config { ref key, .. }) if key == "page_size"));
    cfg.page_size = 4096;
    cfg.frames = 1;
    assert!(matches!(cfg.validate(), Err(Error::Config { ref key, .. }) if key == "frames"));
}

#[test]
fn prefetch_reads_missing_pages_in_one_batch_and_later_fixes_hit() {
    let (pool, dev) = pool(16, BufferPolicy::Shared { stripes: 4 });
    for p in 0..12u64 {
        let mut g = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
        set_body_u64(&mut g, p * 7);
    }
    pool.flush_all().unwrap();
    // A second pool over the same device starts cold.
    let cold = BufferPool::new(PoolConfig::new(PS, 128)).unwrap();
    cold.register_file(0, dev).unwrap();
    drop(cold.fix(PageId::new(0, 3), PageClass::Data).unwrap());
    let read = cold.prefetch(0, 0..20, PageClass::Data).unwrap();
    assert_eq!(read, 11, "12 pages exist, one was resident");
    let before = cold.stats();
    for p in 0..12u64 {
        assert_eq!(body_u64(&cold.fix(PageId::new(0, p), PageClass::Data).unwrap()), p * 7);
    }
    let d = cold.stats().since(&before);
    assert_eq!((d.hits, d.misses), (12, 0));
}

#[test]
fn read_ahead_takes_at_most_an_eighth_of_the_pool() {
    let (pool, dev) = pool(16, BufferPolicy::Shared { stripes: 1 });
    for _ in 0..16u64 {
        drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    }
    pool.flush_all().unwrap();
    let cold = BufferPool::new(PoolConfig::new(PS, 16)).unwrap();
    cold.register_file(0, dev).unwrap();
    assert_eq!(cold.prefetch(0, 0..16, PageClass::Data).unwrap(), 2);
}

#[test]
fn prefetch_of_a_corrupt_page_reports_it_and_leaves_it_unmapped() {
    let (pool, dev) = pool(8, BufferPolicy::Shared { stripes: 1 });
    for _ in 0..4u64 {
        drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    }
    pool.flush_all().unwrap();
    let mut img = dev.snapshot();
    img[2 * PS + 99] ^= 1;
    dev.restore(img);
    let cold = BufferPool::new(PoolConfig::new(PS, 64)).unwrap();
    cold.register_file(0, dev).unwrap();
    assert!(matches!(cold.prefetch(0, 0..4, PageClass::Data), Err(Error::Corruption { .. })));
    assert!(cold.fix(PageId::new(0, 1), PageClass::Data).is_ok());
    assert!(matches!(cold.fix(PageId::new(0, 2), PageClass::Data), Err(Error::Corruption { .. })));
}

/// Hits that skip the page-table lock (pin, then check the frame) never hand out a frame that
/// an evictor is reusing: under constant eviction from several threads, every fixed page is the
/// page asked for, and no increment is lost — with lock-free hits on and off.
#[test]
fn lock_free_hits_never_see_a_reused_frame() {
    for lock_free_hits in [true, false] {
        let mut cfg = PoolConfig::new(PS, 5);
        cfg.lock_free_hits = lock_free_hits;
        let pool = BufferPool::new(cfg).unwrap();
        pool.register_file(0, Arc::new(MemDevice::new("test.db"))).unwrap();
        const PAGES: u64 = 12;
        for _ in 0..PAGES {
            drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
        }
        let (threads, rounds) = (4u64, 3000);
        std::thread::scope(|s| {
            for t in 0..threads {
                let pool = &pool;
                s.spawn(move || {
                    let mut rng = Rng::new(100 + t);
                    for _ in 0..rounds {
                        let p = rng.below(PAGES);
                        let r = pool.fix(PageId::new(0, p), PageClass::Data).unwrap();
                        let h = PageHeader::read(&r).expect("valid header");
                        assert_eq!(h.page_no, p, "asked for page {p} (lock-free hits {lock_free_hits})");
                        drop(r);
                        let q = rng.below(PAGES);
                        let mut g = pool.fix_mut(PageId::new(0, q), PageClass::Data).unwrap();
                        assert_eq!(PageHeader::read(&g).expect("valid header").page_no, q);
                        let v = body_u64(&g);
                        set_body_u64(&mut g, v + 1);
                    }
                });
            }
        });
        let total: u64 =
            (0..PAGES).map(|p| body_u64(&pool.fix(PageId::new(0, p), PageClass::Data).unwrap())).sum();
        assert_eq!(total, threads * rounds, "lost increments (lock-free hits {lock_free_hits})");
        assert!(pool.stats().evictions > 100, "the pool must evict constantly");
    }
}

#[test]
fn waits_on_a_held_page_latch_are_counted_and_uncontended_fixes_are_not() {
    let (pool, _) = pool(8, BufferPolicy::Shared { stripes: 1 });
    for _ in 0..4u64 {
        drop(pool.allocate(0, PageClass::Data, PageType::Heap).unwrap());
    }
    for p in 0..4u64 {
        drop(pool.fix(PageId::new(0, p), PageClass::Data).unwrap());
    }
    assert_eq!(pool.stats().latch_waits, 0, "one thread never waits");
    // A reader that arrives while the page is held exclusively waits, and the wait is counted.
    // The holder cannot tell when the reader has blocked, so it holds longer on each attempt
    // until the reader was seen to block (in practice the first attempt).
    let before = pool.stats();
    for attempt in 0..12u32 {
        let g = pool.fix_mut(PageId::new(0, 1), PageClass::Data).unwrap();
        let started = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                started.store(true, Ordering::Release);
                drop(pool.fix(PageId::new(0, 1), PageClass::Data).unwrap());
            });
            while !started.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(1 << attempt.min(9)));
            assert!(!reader.is_finished(), "the reader cannot fix a page held exclusively");
            drop(g);
        });
        if pool.stats().since(&before).latch_waits > 0 {
            break;
        }
    }
    let d = pool.stats().since(&before);
    assert!(d.latch_waits >= 1 && d.latch_wait_ns > 0, "{d:?}");
}

/// A device whose queue completes nothing by itself: a read lands in its buffer only when the
/// queue's owner reaps it, oldest first and only as many as it waits for (or, with the flag
/// set, whole submissions at a time, as a disk completes a merged request). Deterministic
/// "in flight" for the read-ahead tests. Records the size of every submission.
struct LazyDevice(MemDevice, Mutex<Vec<usize>>, AtomicBool);

struct LazyQueue<'d> {
    dev: &'d MemDevice,
    submissions: &'d Mutex<Vec<usize>>,
    whole: bool,
    pending: std::collections::VecDeque<crate::io::QueuedOp>,
    /// Ops in each pending submission, oldest first (kept with `whole` only).
    sizes: std::collections::VecDeque<usize>,
}

impl crate::io::IoQueue for LazyQueue<'_> {
    fn submit(&mut self, ops: Vec<crate::io::QueuedOp>) -> crate::io::IoResult<()> {
        self.submissions.locked().push(ops.len());
        if self.whole {
            self.sizes.push_back(ops.len());
        }
        self.pending.extend(ops);
        Ok(())
    }
    fn reap(&mut self, min: usize, out: &mut Vec<crate::io::Completion>) -> crate::io::IoResult<()> {
        let mut n = min.min(self.pending.len());
        if self.whole {
            let mut whole = 0;
            while whole < n {
                whole += self.sizes.pop_front().expect("a submission per pending op");
            }
            n = whole;
        }
        for _ in 0..n {
            let mut op = self.pending.pop_front().expect("pending");
            let result = self.dev.read_at(op.offset, &mut op.buf);
            out.push(crate::io::Completion { tag: op.tag, buf: op.buf, result });
        }
        Ok(())
    }
    fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

impl crate::io::Device for LazyDevice {
    fn info(&self) -> crate::io::DeviceInfo {
        self.0.info()
    }
    fn alignment(&self) -> usize {
        self.0.alignment()
    }
    fn capacity(&self) -> u64 {
        self.0.capacity()
    }
    fn ensure_capacity(&self, len: u64) -> crate::io::IoResult<()> {
        self.0.ensure_capacity(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> crate::io::IoResult<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> crate::io::IoResult<()> {
        self.0.write_at(offset, buf)
    }
    fn sync(&self) -> crate::io::IoResult<()> {
        self.0.sync()
    }
    fn open_queue(&self, _depth: usize) -> crate::io::IoResult<Box<dyn crate::io::IoQueue + '_>> {
        Ok(Box::new(LazyQueue {
            dev: &self.0,
            submissions: &self.1,
            whole: self.2.load(Ordering::Relaxed),
            pending: Default::default(),
            sizes: Default::default(),
        }))
    }
}

/// `pages` pages with bodies `p * 7` on a [`LazyDevice`], and a cold pool of `frames` frames
/// (configured by `cfg`) over it.
fn cold_lazy(
    pages: u64,
    frames: usize,
    cfg: impl FnOnce(&mut PoolConfig),
) -> (Arc<BufferPool>, Arc<LazyDevice>) {
    let dev = Arc::new(LazyDevice(MemDevice::new("lazy.db"), Mutex::default(), AtomicBool::new(false)));
    let warm = BufferPool::new(PoolConfig::new(PS, 64)).unwrap();
    warm.register_file(0, dev.clone()).unwrap();
    for p in 0..pages {
        let mut g = warm.allocate(0, PageClass::Data, PageType::Heap).unwrap();
        set_body_u64(&mut g, p * 7);
    }
    warm.flush_all().unwrap();
    let mut c = PoolConfig::new(PS, frames);
    cfg(&mut c);
    let cold = BufferPool::new(c).unwrap();
    cold.register_file(0, dev.clone()).unwrap();
    (cold, dev)
}

#[test]
fn read_ahead_keeps_reads_in_flight_that_no_other_fix_sees_until_verified() {
    let (cold, _dev) = cold_lazy(12, 128, |c| c.async_read_ahead = true);
    drop(cold.fix(PageId::new(0, 3), PageClass::Data).unwrap());
    let before = cold.stats();
    cold.with_read_ahead(0, 0..20, 4, PageClass::Data, |ra| {
        let g = ra.fix(0)?;
        assert_eq!(body_u64(&g), 0);
        // While page 0 is processed, the following pages (but resident page 3) are being read.
        assert_eq!(ra.in_flight(), 3, "pages 1, 2 and 4 in flight");
        drop(g);
        // A fix of a page in flight does not see the read-ahead frame (whose bytes have not
        // arrived): it reads the page itself, and the read-ahead copy is dropped when it lands.
        assert_eq!(body_u64(&cold.fix(PageId::new(0, 2), PageClass::Data)?), 14);
        for p in 1..12u64 {
            assert_eq!(body_u64(&ra.fix(p)?), p * 7, "page {p}");
            assert!(ra.in_flight() > 0 || p >= 10, "page {p}: nothing in flight");
        }
        Ok(())
    })
    .unwrap();
    let d = cold.stats().since(&before);
    assert_eq!(d.reads, 11 + 1, "11 missing pages, page 2 twice");
    assert_eq!(cold.resident_pages(), 12, "each page in one frame");
    assert_eq!(d.reads_overlapped, 10, "every read ahead but page 0's overlapped an earlier page");
}

#[test]
fn read_ahead_of_a_corrupt_page_reports_it_and_a_stopped_window_waits_for_its_reads() {
    let (cold, dev) = cold_lazy(12, 128, |c| c.async_read_ahead = true);
    let mut b = crate::io::AlignedBuf::new(PS);
    dev.0.read_at(5 * PS as u64, &mut b).unwrap();
    b[99] ^= 1;
    dev.0.write_at(5 * PS as u64, &b).unwrap();
    let r = cold.with_read_ahead(0, 0..12, 4, PageClass::Data, |ra| {
        for p in 0..12u64 {
            drop(ra.fix(p)?);
        }
        Ok(())
    });
    assert!(matches!(r, Err(Error::Corruption { .. })), "{r:?}");
    // The corrupt page stays unmapped (a fix reads it again and reports it), the others work.
    assert!(matches!(cold.fix(PageId::new(0, 5), PageClass::Data), Err(Error::Corruption { .. })));
    assert_eq!(body_u64(&cold.fix(PageId::new(0, 4), PageClass::Data).unwrap()), 28);
    // A window stopped after its first page waits for the reads it started and maps them.
    let fresh = BufferPool::new(PoolConfig::new(PS, 128)).unwrap();
    fresh.register_file(0, dev).unwrap();
    fresh.with_read_ahead(0, 0..12, 4, PageClass::Data, |ra| ra.fix(0).map(drop)).unwrap();
    assert_eq!(fresh.resident_pages(), 4, "page 0 and the three read with it");
    assert_eq!(fresh.stats().reads, 4);
}

/// Scans pages 0..40 of `cold` (on `dev`) with a read-ahead window of 8, checking every page;
/// returns the reads in flight after each fix and the size of every submission, having checked
/// that every page was read once.
fn scan_40_pages_with_a_window_of_8(cold: &BufferPool, dev: &LazyDevice) -> (Vec<usize>, Vec<usize>) {
    let mut in_flight_seen = Vec::new();
    cold.with_read_ahead(0, 0..40, 8, PageClass::Data, |ra| {
        for p in 0..40u64 {
            assert_eq!(body_u64(&ra.fix(p)?), p * 7, "page {p}");
            in_flight_seen.push(ra.in_flight());
        }
        Ok(())
    })
    .unwrap();
    let subs = dev.1.locked().clone();
    assert_eq!(subs.iter().sum::<usize>(), 40, "every page read once: {subs:?}");
    (in_flight_seen, subs)
}

#[test]
fn read_ahead_starts_reads_half_a_window_at_a_time() {
    // A scan of 40 cold pages with a window of 8: reads start 4 at a time (one submission of
    // adjacent pages the device can merge), the first fill as two, never a page at a time as
    // the scan advances, and at least a half is in flight while the scan works.
    let (cold, dev) = cold_lazy(40, 128, |c| c.async_read_ahead = true);
    let (in_flight_seen, subs) = scan_40_pages_with_a_window_of_8(&cold, &dev);
    assert!(subs.iter().all(|&n| n == 4), "half a window at a time: {subs:?}");
    assert_eq!(in_flight_seen[0], 7, "the first fill is the whole window: {in_flight_seen:?}");
    assert!(
        in_flight_seen[..32].iter().all(|&n| n >= 3),
        "a half stays in flight while the scan works: {in_flight_seen:?}"
    );
    assert_eq!(cold.stats().reads, 40);
}

#[test]
fn read_ahead_keeps_the_whole_window_in_flight_while_the_scan_works() {
    // A disk completes a half-window submission as one request. The next half must start as
    // soon as one has arrived, not once the scan has worked through most of it: otherwise only
    // half the window is in flight while the scan processes a half, and a device with long
    // latency delivers half the bytes.
    let (cold, dev) = cold_lazy(40, 128, |c| c.async_read_ahead = true);
    dev.2.store(true, Ordering::Relaxed);
    let (in_flight_seen, subs) = scan_40_pages_with_a_window_of_8(&cold, &dev);
    assert!(subs.iter().all(|&n| n == 4), "half a window per submission: {subs:?}");
    // Once the first half has arrived (until the range's end comes into view), a page that
    // was not waited for is processed with the whole window in flight; one that was waited
    // for with the other half.
    for (p, &n) in in_flight_seen.iter().enumerate().take(28).skip(1) {
        let want = if p % 4 == 0 { 4 } else { 8 };
        assert_eq!(n, want, "page {p}: {in_flight_seen:?}");
    }
    assert_eq!(cold.stats().reads, 40);
}

#[test]
fn synchronous_read_ahead_overlaps_nothing() {
    let (cold, _dev) = cold_lazy(12, 128, |c| c.async_read_ahead = false);
    cold.with_read_ahead(0, 0..12, 4, PageClass::Data, |ra| {
        for p in 0..12u64 {
            assert_eq!(body_u64(&ra.fix(p)?), p * 7);
            assert_eq!(ra.in_flight(), 0);
        }
        Ok(())
    })
    .unwrap();
    let s = cold.stats();
    assert_eq!((s.reads, s.reads_overlapped), (12, 0));
}

#[test]
fn prefault_makes_the_frame_memory_resident_and_keeps_the_pages() {
    // 4 MiB of frames, mapped lazily: untouched memory is not resident.
    let pool = BufferPool::new(PoolConfig::new(PS, 4 * 1024 * 1024 / PS)).unwrap();
    pool.register_file(0, Arc::new(MemDevice::new("prefault.db"))).unwrap();
    let before: Vec<f64> = pool.frame_memory_resident();
    assert!(before.iter().all(|&r| r < 0.5), "fresh frame memory already resident: {before:?}");
    let mut g = pool.allocate(0, PageClass::Data, PageType::Heap).unwrap();
    set_body_u64(&mut g, 4242);
    let pid = g.page_id();
    drop(g);
    pool.prefault().unwrap();
    let after: Vec<f64> = pool.frame_memory_resident();
    assert!(after.iter().all(|&r| r == 1.0), "not all frame memory resident: {after:?}");
    assert_eq!(body_u64(&pool.fix(pid, PageClass::Data).unwrap()), 4242, "a page changed");
}
