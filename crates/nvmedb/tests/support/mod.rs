//! Shared support of the engine's integration tests. Scratch directories, seeds and iteration
//! counts, and the child-process kill loop come from `nvmedb-testkit` (the one test-support
//! crate of every nvmedb crate) and are re-exported here; this module adds what needs the
//! engine.
//!
//! Owns:
//! - [`cut_log`] and [`snapshot`]: a file log's tail cut at an LSN, a storage copied to memory;
//! - [`decoders`]: every on-disk and wire decoder fed arbitrary bytes (fuzzing);
//! - [`workload`]: transactions over four tables (inserts, updates and deletes of rows of
//!   10 B–3 KiB, secondary indexes, counters shared by all clients so that transactions
//!   deadlock) and the check of a recovered database against what was acknowledged.
//!
//! Each test binary compiles this module; what one binary does not use is not dead code.
#![allow(dead_code)]

pub mod decoders;
pub mod workload;

#[allow(unused_imports)]
pub use nvmedb_testkit::{iters, kill, replay, seed, seed_or_random, Replay, TmpDir, ITERS_ENV, SEED_ENV};

use std::sync::Arc;

/// Makes `lsn` the end of the file log kept in `a` and `b` (`b` empty for a single log): every byte from there on
/// is zeroed and later segments are removed, as if nothing after it had reached either copy
/// (a crash that lost the log's tail, or both copies truncated).
pub fn cut_log(a: &dyn nvmedb::io::Storage, b: &dyn nvmedb::io::Storage, lsn: u64) {
    use nvmedb::io::AlignedBuf;
    const BLOCK: u64 = 4096;
    let copies: [Arc<dyn nvmedb::io::Storage>; 2] = [snapshot(a), snapshot(b)];
    let segs = nvmedb::wal::live_segments(&copies).expect("live segments");
    for s in &segs {
        for st in [a, b] {
            if !st.exists(&s.name) {
                // A single (not duplexed) log has no files in the mirror.
                continue;
            }
            if s.base_lsn > lsn || (s.base_lsn == lsn && s.seq != segs[0].seq) {
                st.remove(&s.name).expect("remove segment");
                continue;
            }
            let dev = st.open(&s.name, false).expect("open segment");
            let from = BLOCK + (lsn - s.base_lsn);
            if from >= dev.capacity() {
                continue;
            }
            let block = from / BLOCK * BLOCK;
            let mut buf = AlignedBuf::new(BLOCK as usize);
            dev.read_at(block, &mut buf).expect("read");
            buf[(from - block) as usize..].fill(0);
            dev.write_at(block, &buf).expect("write");
            let rest = dev.capacity().saturating_sub(block + BLOCK) as usize;
            if rest > 0 {
                dev.write_at(block + BLOCK, &AlignedBuf::new(rest)).expect("write");
            }
            dev.sync().expect("sync");
        }
    }
}

/// A copy in memory of every device of `s`.
pub fn snapshot(s: &dyn nvmedb::io::Storage) -> Arc<nvmedb::io::MemStorage> {
    use nvmedb::io::{AlignedBuf, MemStorage, Storage};
    let out = Arc::new(MemStorage::new());
    for name in s.list().expect("list") {
        let from = s.open(&name, false).expect("open");
        let to = out.open(&name, true).expect("create");
        let cap = from.capacity() as usize;
        if cap > 0 {
            let mut buf = AlignedBuf::new(cap.div_ceil(4096) * 4096);
            from.read_at(0, &mut buf).expect("read");
            to.write_at(0, &buf).expect("write");
        }
    }
    out
}
