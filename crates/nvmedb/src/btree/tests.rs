//! B+tree tests: model-based against `BTreeMap` with constant eviction, injected I/O errors,
//! concurrency, range scans and bad input.

use super::*;
use crate::buffer::{BufferPool, PoolConfig};
use crate::io::MemDevice;
use crate::util::Rng;
use std::collections::BTreeMap;

fn tree(page_size: usize, frames: usize) -> BTree {
    let pool = BufferPool::new(PoolConfig::new(page_size, frames)).unwrap();
    pool.register_file(0, Arc::new(MemDevice::new("index.db"))).unwrap();
    BTree::create(pool, 0).unwrap()
}

fn random_key(rng: &mut Rng, space: u64) -> Vec<u8> {
    let k = rng.below(space);
    // Mix fixed integer keys and variable-length string keys.
    if k.is_multiple_of(3) {
        key::encode_i64(k as i64).to_vec()
    } else {
        format!("key-{k:0width$}", width = (k % 40) as usize).into_bytes()
    }
}

#[test]
fn model_based_random_operations_with_tiny_pool() {
    for seed in 0..12u64 {
        let mut rng = Rng::new(seed);
        let t = tree(4096, 12);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for step in 0..3000 {
            let k = random_key(&mut rng, 2000);
            let mut v = vec![0u8; rng.below(120) as usize];
            rng.fill(&mut v);
            match rng.below(10) {
                0..=3 => {
                    let inserted = t.insert(&k, &v).unwrap();
                    assert_eq!(inserted, !model.contains_key(&k), "seed {seed} step {step}");
                    model.entry(k).or_insert(v);
                }
                4..=5 => {
                    let old = t.upsert(&k, &v).unwrap();
                    assert_eq!(old, model.insert(k, v), "seed {seed} step {step}");
                }
                6..=7 => {
                    assert_eq!(t.delete(&k).unwrap(), model.remove(&k), "seed {seed} step {step}");
                }
                _ => {
                    assert_eq!(t.get(&k).unwrap(), model.get(&k).cloned(), "seed {seed} step {step}");
                }
            }
            if step % 500 == 499 {
                let shape = t.check().unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                assert_eq!(shape.entries, model.len() as u64);
            }
        }
        let shape = t.check().unwrap();
        assert!(shape.height >= 2, "seed {seed}: tree never split: {shape:?}");
        let mut all = Vec::new();
        t.range(Bound::Unbounded, Bound::Unbounded, |k, v| {
            all.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>(), "seed {seed}: full scan differs");
        assert!(t.pool.stats().evictions > 0, "seed {seed}: pool never evicted");
    }
}

#[test]
fn range_bounds_match_the_model() {
    let mut rng = Rng::new(99);
    let t = tree(4096, 64);
    let mut model = BTreeMap::new();
    for i in 0..3000i64 {
        let k = key::encode_i64(i * 2).to_vec();
        t.insert(&k, &i.to_le_bytes()).unwrap();
        model.insert(k, i.to_le_bytes().to_vec());
    }
    for _ in 0..200 {
        let a = key::encode_i64(rng.below(6100) as i64 - 50).to_vec();
        let b = key::encode_i64(rng.below(6100) as i64 - 50).to_vec();
        let bounds = [Bound::Included(a.as_slice()), Bound::Excluded(a.as_slice()), Bound::Unbounded];
        let his = [Bound::Included(b.as_slice()), Bound::Excluded(b.as_slice()), Bound::Unbounded];
        let lo = bounds[rng.below(3) as usize];
        let hi = his[rng.below(3) as usize];
        if let (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) = (lo, hi) {
            if x > y {
                continue;
            }
        }
        let mut got = Vec::new();
        t.range(lo, hi, |k, _| {
            got.push(k.to_vec());
            Ok(true)
        })
        .unwrap();
        let want: Vec<Vec<u8>> = model.range::<[u8], _>((lo, hi)).map(|(k, _)| k.clone()).collect();
        assert_eq!(got, want);
    }
    // Early stop.
    let mut n = 0;
    t.range(Bound::Unbounded, Bound::Unbounded, |_, _| {
        n += 1;
        Ok(n < 10)
    })
    .unwrap();
    assert_eq!(n, 10);
}

#[test]
fn oversized_and_empty_keys_are_rejected_clearly() {
    let t = tree(4096, 16);
    let max = t.max_entry_bytes();
    let e = t.insert(&vec![1u8; max + 1], b"").unwrap_err().to_string();
    assert!(e.contains("4096-byte index pages") && e.contains(&format!("at most {max}")), "{e}");
    assert!(t.insert(b"", b"v").is_err());
    assert!(t.insert(&vec![1u8; max], b"").unwrap());
}

#[test]
fn concurrent_inserts_lookups_and_deletes() {
    let t = tree(4096, 48);
    let threads = 4u64;
    let per = 3000u64;
    std::thread::scope(|s| {
        for th in 0..threads {
            let t = &t;
            s.spawn(move || {
                let mut rng = Rng::new(th);
                for i in 0..per {
                    let k = key::encode_i64((i * threads + th) as i64);
                    assert!(t.insert(&k, &k).unwrap());
                    let probe = key::encode_i64((rng.below(i + 1) * threads + th) as i64);
                    let v = t.get(&probe).unwrap();
                    assert!(v.is_none() || v.as_deref() == Some(&probe[..]));
                    if i % 3 == 0 {
                        assert_eq!(t.delete(&k).unwrap().as_deref(), Some(&k[..]));
                    }
                }
            });
        }
    });
    let shape = t.check().unwrap();
    assert_eq!(shape.entries, threads * (per - per.div_ceil(3)));
    for th in 0..threads {
        for i in 0..per {
            let k = key::encode_i64((i * threads + th) as i64);
            assert_eq!(t.get(&k).unwrap().is_some(), i % 3 != 0);
        }
    }
}

#[test]
fn large_pages_hold_more_and_split_correctly() {
    let t = tree(65536, 16);
    for i in 0..20_000i64 {
        assert!(t.insert(&key::encode_i64(i), &[7u8; 16]).unwrap());
    }
    let shape = t.check().unwrap();
    assert_eq!(shape.entries, 20_000);
    assert_eq!(shape.height, 2);
}

#[test]
fn injected_io_errors_fail_operations_without_corrupting_the_tree() {
    use crate::util::testing::flaky_device;
    use std::sync::atomic::Ordering;
    for seed in 0..6u64 {
        let mut rng = Rng::new(seed);
        let pool = BufferPool::new(PoolConfig::new(4096, 10)).unwrap();
        let (dev, sw) = flaky_device("flaky-index");
        pool.register_file(0, dev.clone()).unwrap();
        let t = BTree::create(pool, 0).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut failures = 0;
        for step in 0..2500 {
            sw.fail_reads.store(rng.chance(0.05), Ordering::SeqCst);
            sw.fail_writes.store(rng.chance(0.05), Ordering::SeqCst);
            let k = random_key(&mut rng, 1500);
            let v = vec![(step % 251) as u8; rng.below(100) as usize];
            let r = match rng.below(4) {
                0 | 1 => t.upsert(&k, &v).map(|_| {
                    model.insert(k.clone(), v.clone());
                }),
                2 => t.delete(&k).map(|_| {
                    model.remove(&k);
                }),
                _ => t.get(&k).map(|got| assert_eq!(got, model.get(&k).cloned(), "seed {seed} step {step}")),
            };
            match r {
                Ok(()) => {}
                Err(crate::error::Error::Io(_)) => failures += 1,
                Err(e) => panic!("seed {seed} step {step}: unexpected error {e}"),
            }
        }
        sw.fail_reads.store(false, Ordering::SeqCst);
        sw.fail_writes.store(false, Ordering::SeqCst);
        assert!(failures > 0, "seed {seed}: no fault hit");
        let shape = t.check().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(shape.entries, model.len() as u64, "seed {seed}");
        for (k, v) in &model {
            assert_eq!(t.get(k).unwrap().as_ref(), Some(v), "seed {seed}");
        }
    }
}

/// Collects logged page changes in memory; can be told to fail.
struct VecLogger {
    records: std::sync::Mutex<Vec<(u64, Vec<u8>)>>,
    next_lsn: std::sync::atomic::AtomicU64,
    fail: std::sync::atomic::AtomicBool,
}

impl crate::buffer::PageLogger for VecLogger {
    fn log_page_changes(
        &self,
        _tag: u8,
        build: &mut dyn FnMut(Option<u64>) -> Vec<u8>,
    ) -> crate::error::Result<u64> {
        let payload = build(Some(0));
        let payload = &payload;
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::error::Error::Io(crate::io::IoError::os(
                "log",
                crate::io::IoOpKind::Write,
                0,
                payload.len(),
                std::io::Error::from_raw_os_error(5),
            )));
        }
        let mut r = self.records.lock().unwrap();
        let lsn = self.next_lsn.fetch_add(payload.len() as u64 + 1, std::sync::atomic::Ordering::SeqCst);
        r.push((lsn, payload.to_vec()));
        Ok(lsn)
    }

    fn apply_page_ops(&self, page: &mut [u8], ops: &[u8]) -> std::result::Result<(), String> {
        super::apply_page_ops(page, ops)
    }
}

#[test]
fn redo_of_every_logged_change_rebuilds_the_tree() {
    use crate::buffer::mtr::{apply_page_change, decode_mtr_compact, PageChange};
    let logger = Arc::new(VecLogger {
        records: std::sync::Mutex::new(Vec::new()),
        next_lsn: std::sync::atomic::AtomicU64::new(1),
        fail: std::sync::atomic::AtomicBool::new(false),
    });
    let pool = BufferPool::new(PoolConfig::new(4096, 16)).unwrap();
    pool.set_page_logger(logger.clone(), 0).unwrap();
    let dev = Arc::new(MemDevice::new("index.db"));
    pool.register_file(0, dev.clone()).unwrap();
    let t = BTree::create(pool.clone(), 0).unwrap();
    let mut rng = Rng::new(5);
    let mut model = BTreeMap::new();
    for step in 0..4000 {
        let k = random_key(&mut rng, 3000);
        let v = vec![(step % 250) as u8; rng.below(60) as usize];
        if rng.chance(0.7) {
            t.upsert(&k, &v).unwrap();
            model.insert(k, v);
        } else {
            t.delete(&k).unwrap();
            model.remove(&k);
        }
        if step == 2000 {
            // A logging failure: the operation fails and leaves no trace.
            logger.fail.store(true, std::sync::atomic::Ordering::SeqCst);
            for _ in 0..20 {
                let k = random_key(&mut rng, 3000);
                assert!(t.upsert(&k, &[1; 40]).is_err());
            }
            logger.fail.store(false, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(t.check().unwrap().entries, model.len() as u64);
        }
    }
    pool.flush_all().unwrap();
    // Replay the log onto empty pages.
    let mut pages: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut ops = 0;
    for (lsn, payload) in logger.records.lock().unwrap().iter() {
        let rec = decode_mtr_compact(payload, 4096).expect("decodes");
        for (pid, ch) in rec.changes {
            ops += usize::from(matches!(ch, PageChange::Ops(_)));
            let page = pages.entry(pid.page).or_insert_with(|| vec![0u8; 4096]);
            apply_page_change(page, &ch, *lsn, &super::apply_page_ops).expect("applies");
        }
    }
    assert!(ops > 1000, "leaf changes are logged as node operations ({ops})");
    let img = dev.snapshot();
    for (no, mut page) in pages {
        crate::page::PageHeader::seal(&mut page);
        let on_disk = &img[no as usize * 4096..(no as usize + 1) * 4096];
        assert!(page == on_disk, "page {no} differs after redo");
    }
    let t2 = BTree::open(pool, 0, t.root());
    assert_eq!(t2.check().unwrap().entries, model.len() as u64);
}

/// Ascending inserts (a sequential load) fill leaves instead of leaving them half empty.
#[test]
fn ascending_inserts_fill_nodes() {
    let t = tree(4096, 4096);
    let n = 20_000i64;
    for k in 0..n {
        assert!(t.insert(&key::encode_i64(k), &(k as u64).to_le_bytes()).unwrap());
    }
    let shape = t.check().unwrap();
    assert_eq!(shape.entries, n as u64);
    // An entry takes 12 (slot) + 4 (header) + 8 (key) + 8 (value) = 32 bytes; a 4 KiB leaf
    // holds at most about 126. Half-empty splits would need about twice the minimum.
    let min_leaves = (n as u64).div_ceil(126);
    assert!(
        shape.leaves <= min_leaves * 11 / 10,
        "{} leaves for {n} ascending keys (minimum about {min_leaves})",
        shape.leaves
    );
    for k in (0..n).step_by(997) {
        assert_eq!(t.get(&key::encode_i64(k)).unwrap(), Some((k as u64).to_le_bytes().to_vec()));
    }
}

#[test]
fn bulk_built_trees_match_their_input_and_take_changes_afterwards() {
    for (seed, n) in [(0u64, 0usize), (1, 1), (2, 2), (3, 150), (4, 5000), (5, 40_000)] {
        let mut rng = Rng::new(seed);
        let pool = BufferPool::new(PoolConfig::new(4096, 24)).unwrap();
        pool.register_file(0, Arc::new(MemDevice::new("index.db"))).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        while model.len() < n {
            let k = random_key(&mut rng, 1 << 40);
            let mut v = vec![0u8; rng.below(if seed == 4 { 600 } else { 12 }) as usize];
            rng.fill(&mut v);
            model.insert(k, v);
        }
        let mut b = build::TreeBuilder::new(pool.clone(), 0);
        for (k, v) in &model {
            b.push(k, v).unwrap();
        }
        // Keys out of order are refused.
        if let Some((k, v)) = model.iter().next() {
            assert!(matches!(b.push(k, v), Err(Error::InvalidArgument(_))), "seed {seed}");
        }
        let t = b.finish().unwrap();
        let shape = t.check().unwrap();
        assert_eq!(shape.entries, n as u64, "seed {seed}");
        if n > 2000 {
            assert!(shape.height >= 2, "seed {seed}: {shape:?}");
        }
        for (k, v) in &model {
            assert_eq!(t.get(k).unwrap().as_ref(), Some(v), "seed {seed}");
        }
        let mut seen = Vec::new();
        t.range(Bound::Unbounded, Bound::Unbounded, |k, _| {
            seen.push(k.to_vec());
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen, model.keys().cloned().collect::<Vec<_>>(), "seed {seed}: leaf chain order");
        for _ in 0..2000 {
            let k = random_key(&mut rng, 1 << 40);
            if rng.chance(0.5) {
                t.upsert(&k, b"new").unwrap();
                model.insert(k, b"new".to_vec());
            } else if let Some(old) = model.keys().nth(rng.below(model.len().max(1) as u64) as usize).cloned()
            {
                assert!(t.delete(&old).unwrap().is_some());
                model.remove(&old);
            }
        }
        assert_eq!(t.check().unwrap().entries, model.len() as u64, "seed {seed}");
        for (k, v) in &model {
            assert_eq!(t.get(k).unwrap().as_ref(), Some(v), "seed {seed}");
        }
    }
}

/// The intervals `range_visits` reports tile the range: each model key in the range lies in
/// exactly one visit's interval, and is among that visit's entries (also across runs of
/// leaves emptied by deletes).
#[test]
fn range_visits_intervals_tile_the_range_and_hold_their_entries() {
    let t = tree(4096, 64);
    let mut model = BTreeMap::new();
    for i in 0..4000i64 {
        let k = key::encode_i64(i).to_vec();
        t.insert(&k, &[7u8; 40]).unwrap();
        model.insert(k, ());
    }
    // Whole leaves emptied: runs of keys deleted.
    for i in (500..1500).chain(2000..2100).chain(3900..4000) {
        let k = key::encode_i64(i).to_vec();
        t.delete(&k).unwrap();
        model.remove(&k);
    }
    let (a, b) = (key::encode_i64(100).to_vec(), key::encode_i64(3950).to_vec());
    for (lo, hi) in [
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Excluded(a.as_slice()), Bound::Included(b.as_slice())),
        (Bound::Included(b.as_slice()), Bound::Unbounded),
    ] {
        // (from, upto, the visit's keys)
        type Visit = (Bound<Vec<u8>>, Bound<Vec<u8>>, Vec<Vec<u8>>);
        let mut visits: Vec<Visit> = Vec::new();
        t.range_visits(
            lo,
            hi,
            |from, upto| Ok((from.map(<[u8]>::to_vec), upto.map(<[u8]>::to_vec))),
            |entries, (from, upto)| {
                visits.push((from, upto, entries.iter().map(|(k, _)| k.to_vec()).collect()));
                Ok(true)
            },
        )
        .unwrap();
        if lo == Bound::Unbounded {
            assert!(visits.len() > 10, "{} visits", visits.len());
        }
        for w in visits.windows(2) {
            let Bound::Included(end) = &w[0].1 else { panic!("an inner visit ends at its last entry") };
            assert_eq!(w[1].0, Bound::Excluded(end.clone()), "the next visit starts just after");
        }
        assert_eq!(visits.last().unwrap().1, hi.map(<[u8]>::to_vec), "the last visit ends at hi");
        for k in model.range::<[u8], _>((lo, hi)).map(|(k, _)| k) {
            let holding: Vec<_> = visits
                .iter()
                .filter(|(f, u, _)| {
                    let (f, u) = (f.as_ref().map(Vec::as_slice), u.as_ref().map(Vec::as_slice));
                    crate::txn::pending::in_interval(f, u, k)
                })
                .collect();
            assert_eq!(holding.len(), 1, "key {k:?} in one interval");
            assert!(holding[0].2.contains(k), "key {k:?} among its visit's entries");
        }
    }
}

#[test]
fn one_descent_for_a_batch_places_every_key_in_its_leaf() {
    // Large values and many keys: a tree of three or more levels, so a batch shares inner
    // nodes at several levels and also crosses between them.
    let t = tree(4096, 4096);
    let mut rng = Rng::new(7);
    let mut model = BTreeMap::new();
    for _ in 0..6000 {
        let k = random_key(&mut rng, 20_000);
        let mut v = vec![0u8; 300];
        rng.fill(&mut v);
        t.upsert(&k, &v).unwrap();
        model.insert(k, v);
    }
    let shape = t.check().unwrap();
    assert!(shape.height >= 3, "want inner nodes below the root: {shape:?}");
    for batch in 0..200 {
        // Present and absent keys, some repeated; sorted (as read_many visits them) for even
        // batches, in arrival order for odd ones.
        let owned: Vec<Vec<u8>> =
            (0..1 + rng.below(24) as usize).map(|_| random_key(&mut rng, 22_000)).collect();
        let keys: Vec<&[u8]> = owned.iter().map(|k| k.as_slice()).collect();
        let mut order: Vec<usize> = (0..keys.len()).collect();
        if batch % 2 == 0 {
            order.sort_by_key(|&j| keys[j]);
        }
        let mut out = vec![None; keys.len()];
        t.locate_leaves(&keys, &order, &mut out).unwrap();
        for (j, k) in keys.iter().enumerate() {
            let hint = out[j].unwrap_or_else(|| panic!("batch {batch}: key {j} got no leaf"));
            // The hinted leaf is the one covering the key: it holds the key's entry if there is one.
            let found = t.get_in_leaf_with(hint, k, |v| v.to_vec()).unwrap();
            assert_eq!(found.as_ref(), model.get(*k), "batch {batch} key {j} ({k:?})");
            let leaf = t.pool.fix(t.pid(hint.page), PageClass::Index).unwrap();
            let (first, last) =
                (node::key(&leaf, 0).to_vec(), node::key(&leaf, node::count(&leaf) - 1).to_vec());
            drop(leaf);
            let below = model
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(*k)))
                .next_back()
                .map(|(k, _)| k.clone());
            let above = model
                .range::<[u8], _>((Bound::Excluded(*k), Bound::Unbounded))
                .next()
                .map(|(k, _)| k.clone());
            // The leaf's keys are the key's neighbours: the nearest below or above is in it.
            assert!(
                below.iter().chain(above.iter()).any(|n| *n >= first && *n <= last),
                "batch {batch}: leaf {} ({first:?}..{last:?}) does not cover {k:?}",
                hint.page
            );
        }
    }
}
