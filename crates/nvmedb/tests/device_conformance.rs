//! One conformance suite, run against every `Device` implementation: round trips, zeroes for
//! unwritten bytes, alignment errors that say what was expected, batching, sync, concurrent use
//! from several threads, and queues at depth. Each implementation gets its own #[test] so a
//! failure names it; every random pattern is seeded and the seed is printed on failure.

use nvmedb::io::{
    open_emulated, AlignedBuf, Backend, CrashSimDevice, Device, DeviceProfile, DirStorage, FaultPlan,
    FaultyDevice, FileDevice, FileOptions, IoError, IoRequest, MemDevice, QueuedOp, QueuedOpKind,
    SingleOpPath, Storage,
};
use nvmedb::util::Rng;
use nvmedb_testkit::TmpDir;
use std::sync::Arc;

const BLOCK: usize = 4096;

/// A fresh path for a device file or directory, removed when the guard drops. A device opened
/// from a temporary guard keeps its file open after the path is gone (an unlinked file stays
/// usable), so nothing is left behind.
fn tmp_path(name: &str) -> TmpDir {
    TmpDir::path_only(&format!("device-{name}"))
}

fn pattern(seed: u64, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(len);
    Rng::new(seed).fill(&mut b);
    b
}

fn read(d: &dyn Device, offset: u64, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(len);
    d.read_at(offset, &mut b).unwrap_or_else(|e| panic!("read {len} at {offset} on {:?}: {e}", d.info()));
    b
}

/// Runs every check on a fresh device from `make`.
fn conformance(make: &dyn Fn() -> Arc<dyn Device>) {
    round_trips(&*make());
    unwritten_bytes_read_as_zero(&*make());
    alignment_errors_say_what_was_expected(&*make());
    batches(&*make());
    sync_after_writes(&*make());
    concurrent_threads(make());
    queue_at_depth(&*make());
    preallocate_keeps_every_byte(&*make());
}

fn round_trips(d: &dyn Device) {
    assert_eq!(d.alignment() % 512, 0);
    let cases: [(u64, usize); 5] = [(0, 4096), (4096, 8192), (65536, 65536), (1 << 20, 24576), (12288, 4096)];
    for (i, &(off, len)) in cases.iter().enumerate() {
        let seed = 1000 + i as u64;
        let w = pattern(seed, len);
        d.write_at(off, &w).unwrap_or_else(|e| panic!("write {len} at {off}: {e}"));
        assert!(read(d, off, len)[..] == w[..], "seed {seed}: round trip of {len} bytes at {off}");
    }
    // Overwrite one block inside an earlier write; the neighbours keep their bytes.
    let w = pattern(7, BLOCK);
    d.write_at(65536 + 8192, &w).unwrap();
    let r = read(d, 65536, 65536);
    let orig = pattern(1002, 65536);
    assert!(r[8192..12288] == w[..], "overwritten block");
    assert!(r[..8192] == orig[..8192] && r[12288..] == orig[12288..], "neighbours of the overwrite");
    assert!(d.capacity() >= (1 << 20) + 24576, "capacity {} after writes", d.capacity());
}

fn unwritten_bytes_read_as_zero(d: &dyn Device) {
    d.ensure_capacity(64 * 1024).unwrap();
    assert!(d.capacity() >= 64 * 1024);
    assert!(read(d, 8192, 16384).iter().all(|&b| b == 0), "bytes inside the device never written");
    // Past the end: also zeroes (a sparse tail).
    let end = d.capacity();
    assert!(read(d, end + 4096, 8192).iter().all(|&b| b == 0), "bytes past the end");
    // A write past the end grows the device.
    d.write_at(end + 40960, &pattern(3, BLOCK)).unwrap();
    assert!(d.capacity() >= end + 40960 + BLOCK as u64);
}

/// `preallocate` changes no byte: data inside the range stays, holes read as zeroes, and the
/// device is at least as long as the range.
fn preallocate_keeps_every_byte(d: &dyn Device) {
    let w = pattern(11, 8192);
    d.write_at(1 << 20, &w).unwrap();
    d.preallocate(0, 4 << 20).unwrap_or_else(|e| panic!("preallocate on {:?}: {e}", d.info()));
    assert!(d.capacity() >= 4 << 20, "capacity {} after preallocating 4 MiB", d.capacity());
    assert!(read(d, 1 << 20, 8192)[..] == w[..], "data inside the preallocated range");
    assert!(read(d, 0, 1 << 20).iter().all(|&b| b == 0), "a filled hole reads as zeroes");
    assert!(read(d, (1 << 20) + 8192, 65536).iter().all(|&b| b == 0), "after the data");
    // Over data alone, and past the end.
    d.preallocate(1 << 20, 8192).unwrap();
    d.preallocate(6 << 20, 1 << 20).unwrap();
    assert!(read(d, 1 << 20, 8192)[..] == w[..], "data after preallocating over it");
    assert!(d.capacity() >= 7 << 20);
}

fn expect_misaligned(r: Result<(), IoError>, what: &str, device: &str) {
    match r {
        Err(e @ IoError::Misaligned { .. }) => {
            let IoError::Misaligned { what: w, required, device: dev, .. } = &e else { unreachable!() };
            assert_eq!(*w, what, "{e}");
            assert_eq!(*required, 4096, "{e}");
            assert_eq!(dev, device, "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains(what) && msg.contains("multiple of 4096"),
                "message says what was expected: {msg}"
            );
        }
        other => panic!("expected a misaligned-{what} error, got {other:?}"),
    }
}

fn alignment_errors_say_what_was_expected(d: &dyn Device) {
    let name = d.info().name;
    let mut big = AlignedBuf::new(3 * BLOCK);
    expect_misaligned(d.write_at(100, &big[..BLOCK]), "offset", &name);
    expect_misaligned(d.read_at(4095, &mut big[..BLOCK]), "offset", &name);
    expect_misaligned(d.write_at(0, &big[..1000]), "length", &name);
    expect_misaligned(d.read_at(0, &mut big[..512]), "length", &name);
    expect_misaligned(d.write_at(0, &big[512..512 + BLOCK]), "buffer address", &name);
    expect_misaligned(d.read_at(0, &mut big[1024..1024 + BLOCK]), "buffer address", &name);
    let mut reqs = [
        IoRequest::Write { offset: 4096, buf: &big[..BLOCK] },
        IoRequest::Write { offset: 7, buf: &big[..BLOCK] },
    ];
    expect_misaligned(d.submit_batch(&mut reqs), "offset", &name);
    // Nothing misaligned reached the medium.
    let r = read(d, 0, BLOCK);
    assert!(r.iter().all(|&b| b == 0), "a rejected write touched the medium");
}

fn batches(d: &dyn Device) {
    // 200 requests: more than one ring's worth, mixed sizes.
    let n = 200usize;
    let bufs: Vec<AlignedBuf> = (0..n).map(|i| pattern(i as u64, BLOCK * (1 + i % 3))).collect();
    let mut off = 0u64;
    let mut offsets = Vec::new();
    for b in &bufs {
        offsets.push(off);
        off += b.len() as u64;
    }
    let mut reqs: Vec<IoRequest<'_>> =
        bufs.iter().zip(&offsets).map(|(b, &o)| IoRequest::Write { offset: o, buf: &b[..] }).collect();
    d.submit_batch(&mut reqs).expect("write batch");
    let mut outs: Vec<AlignedBuf> = bufs.iter().map(|b| AlignedBuf::new(b.len())).collect();
    let mut reqs: Vec<IoRequest<'_>> =
        outs.iter_mut().zip(&offsets).map(|(b, &o)| IoRequest::Read { offset: o, buf: &mut b[..] }).collect();
    d.submit_batch(&mut reqs).expect("read batch");
    for (i, (w, r)) in bufs.iter().zip(&outs).enumerate() {
        assert!(w[..] == r[..], "batch request {i} (seed {i}) at offset {}", offsets[i]);
    }
    // A batch of one and an empty batch.
    let mut one = AlignedBuf::new(BLOCK);
    d.submit_batch(&mut [IoRequest::Read { offset: 0, buf: &mut one }]).unwrap();
    assert!(one[..] == bufs[0][..]);
    d.submit_batch(&mut []).unwrap();
}

fn sync_after_writes(d: &dyn Device) {
    d.write_at(0, &pattern(11, BLOCK)).unwrap();
    d.sync().expect("sync");
    d.sync().expect("sync with nothing pending");
    assert!(read(d, 0, BLOCK)[..] == pattern(11, BLOCK)[..]);
}

fn concurrent_threads(d: Arc<dyn Device>) {
    let threads = 4u64;
    let blocks_per_thread = 32u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let d = d.clone();
            s.spawn(move || {
                let seed = 500 + t;
                let mut rng = Rng::new(seed);
                let base = t * blocks_per_thread * BLOCK as u64;
                let mut last = vec![None; blocks_per_thread as usize];
                for i in 0..150u64 {
                    let blk = rng.below(blocks_per_thread);
                    let off = base + blk * BLOCK as u64;
                    if rng.chance(0.5) || last[blk as usize].is_none() {
                        let s = seed * 1_000_000 + i;
                        d.write_at(off, &pattern(s, BLOCK)).unwrap();
                        last[blk as usize] = Some(s);
                    } else {
                        let want = pattern(last[blk as usize].unwrap_or(0), BLOCK);
                        let mut got = AlignedBuf::new(BLOCK);
                        if i % 2 == 0 {
                            d.read_at(off, &mut got).unwrap();
                        } else {
                            d.submit_batch(&mut [IoRequest::Read { offset: off, buf: &mut got }]).unwrap();
                        }
                        assert!(got[..] == want[..], "thread seed {seed}: block {blk} at op {i}");
                    }
                }
            });
        }
    });
}

fn queue_at_depth(d: &dyn Device) {
    let depth = 8;
    let mut q = d.open_queue(depth).expect("open queue");
    assert_eq!(q.in_flight(), 0);
    let ops: Vec<QueuedOp> = (0..depth as u64)
        .map(|i| QueuedOp {
            tag: i,
            kind: QueuedOpKind::Write,
            offset: i * 8192,
            buf: pattern(900 + i, 8192),
        })
        .collect();
    q.submit(ops).unwrap();
    assert!(q.in_flight() <= depth);
    let mut done = Vec::new();
    q.reap(depth, &mut done).unwrap();
    assert_eq!(done.len(), depth, "reap(min = depth) returns every write");
    assert_eq!(q.in_flight(), 0);
    let mut tags: Vec<u64> = done.iter().map(|c| c.tag).collect();
    tags.sort_unstable();
    assert_eq!(tags, (0..depth as u64).collect::<Vec<_>>());
    assert!(
        done.iter().all(|c| c.result.is_ok()),
        "{:?}",
        done.iter().map(|c| &c.result).collect::<Vec<_>>()
    );

    // Keep the queue full for a while: reads verify what the writes stored.
    let mut rng = Rng::new(77);
    let mut issued = 0u64;
    let mut completed = 0u64;
    let total = 120u64;
    let mut free: Vec<AlignedBuf> = done.drain(..).map(|c| c.buf).collect();
    while completed < total {
        let mut batch = Vec::new();
        while q.in_flight() + batch.len() < depth && issued < total {
            let blk = rng.below(depth as u64);
            let buf = free.pop().unwrap_or_else(|| AlignedBuf::new(8192));
            batch.push(QueuedOp { tag: blk, kind: QueuedOpKind::Read, offset: blk * 8192, buf });
            issued += 1;
        }
        q.submit(batch).unwrap();
        assert!(q.in_flight() <= depth, "in flight {} > depth {depth}", q.in_flight());
        q.reap(1, &mut done).unwrap();
        assert!(!done.is_empty() || q.in_flight() == 0, "reap(1) returned nothing with work in flight");
        for c in done.drain(..) {
            c.result.as_ref().unwrap_or_else(|e| panic!("queued read: {e}"));
            assert!(c.buf[..] == pattern(900 + c.tag, 8192)[..], "queued read of block {}", c.tag);
            completed += 1;
            free.push(c.buf);
        }
    }
    assert_eq!(q.in_flight(), 0);
    // A misaligned op is refused, either at submission or in its completion.
    let bad = QueuedOp { tag: 99, kind: QueuedOpKind::Read, offset: 100, buf: AlignedBuf::new(BLOCK) };
    match q.submit(vec![bad]) {
        Err(IoError::Misaligned { .. }) => {}
        Err(e) => panic!("expected misaligned, got {e}"),
        Ok(()) => {
            q.reap(1, &mut done).unwrap();
            assert!(matches!(done[0].result, Err(IoError::Misaligned { .. })), "{:?}", done[0].result);
        }
    }
    // Dropping a queue with operations in flight waits for them.
    q.submit(vec![QueuedOp { tag: 1, kind: QueuedOpKind::Read, offset: 0, buf: AlignedBuf::new(BLOCK) }])
        .unwrap();
    drop(q);
}

fn file_device(name: &str, opts: FileOptions) -> Option<Arc<dyn Device>> {
    match FileDevice::open_with(tmp_path(name), &opts) {
        Ok(d) => Some(Arc::new(d)),
        Err(e) if opts.backend == Backend::IoUring => {
            eprintln!("io_uring cannot be set up here ({e}); the io_uring variant is skipped");
            None
        }
        Err(e) => panic!("open {name}: {e}"),
    }
}

/// On a file, `preallocate` fills the holes of the range (blocks allocated afterwards), which
/// is what spares the log's flushes a metadata write each: a sparse file made by
/// `ensure_capacity` has (almost) no blocks before, and the whole range after.
#[test]
fn file_device_preallocate_fills_the_holes_of_a_sparse_file() {
    use std::os::unix::fs::MetadataExt;
    let path = tmp_path("prealloc");
    let d = FileDevice::open_with(path.path(), &FileOptions::default()).unwrap();
    let len = 8u64 << 20;
    d.ensure_capacity(len).unwrap();
    d.write_at(3 << 20, &pattern(5, 16384)).unwrap();
    let allocated = || std::fs::metadata(path.path()).unwrap().blocks() * 512;
    let before = allocated();
    if before >= len {
        eprintln!("this file system allocated the whole file at once ({before} bytes): no holes to fill");
        return;
    }
    d.preallocate(0, len).unwrap();
    assert!(
        allocated() >= len,
        "{} bytes allocated after preallocating {len} (before: {before})",
        allocated()
    );
    assert!(read(&d, 3 << 20, 16384)[..] == pattern(5, 16384)[..], "the data written before");
}

#[test]
fn mem_device_conforms() {
    conformance(&|| Arc::new(MemDevice::new("mem")));
}

#[test]
fn crash_sim_device_conforms() {
    conformance(&|| Arc::new(CrashSimDevice::new("crashsim")));
}

#[test]
fn file_device_io_uring_conforms() {
    let opts = FileOptions { backend: Backend::IoUring, ..FileOptions::default() };
    if file_device("probe", opts.clone()).is_none() {
        return;
    }
    conformance(&|| {
        let d = file_device("uring", opts.clone()).expect("io_uring");
        assert!(d.info().backend.starts_with("io_uring"), "{:?}", d.info());
        d
    });
}

#[test]
fn file_device_io_uring_thread_ring_conforms() {
    let opts = FileOptions {
        backend: Backend::IoUring,
        single_op: SingleOpPath::ThreadRing,
        ..FileOptions::default()
    };
    if file_device("probe-tr", opts.clone()).is_none() {
        return;
    }
    conformance(&|| file_device("uring-thread-ring", opts.clone()).expect("io_uring"));
}

#[test]
fn file_device_pread_conforms() {
    let opts = FileOptions { backend: Backend::Pread, ..FileOptions::default() };
    conformance(&|| {
        let d = file_device("pread", opts.clone()).expect("pread");
        assert!(d.info().backend.starts_with("pread"), "{:?}", d.info());
        d
    });
}

#[test]
fn dir_storage_devices_conform_and_reopen() {
    let dir = tmp_path("dirstorage");
    let st = DirStorage::new(&dir, FileOptions::default()).unwrap();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    conformance(&|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        st.open(&format!("dev{n}"), true).unwrap()
    });
    let names = st.list().unwrap();
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(st.exists("dev0"));
    // Reopening through a new DirStorage sees the bytes.
    let d0 = st.open("dev0", false).unwrap();
    let before = read(&*d0, 0, BLOCK);
    let st2 = DirStorage::new(&dir, FileOptions::default()).unwrap();
    let again = st2.open("dev0", false).unwrap();
    assert!(read(&*again, 0, BLOCK)[..] == before[..]);
    let e = st2.open("missing", false).err().expect("opening a missing device without create fails");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    assert!(st2.open("../escape", true).is_err());
    st2.remove("dev0").unwrap();
    assert!(!st2.exists("dev0"));
    st2.sync_dir().unwrap();
}

#[test]
fn emulated_optane_over_ram_conforms() {
    conformance(&|| {
        let p = DeviceProfile::builtin("optane").unwrap();
        let d = open_emulated(p, None, &FileOptions::default(), 1).unwrap();
        assert_eq!(d.info().emulated_profile.as_deref(), Some("optane"));
        d
    });
}

#[test]
fn emulated_nand_over_file_conforms() {
    let mut p = DeviceProfile::builtin("nand").unwrap();
    // Keep the suite fast: a shorter service time; the model is the same.
    p.read_latency_us = 20.0;
    p.gc_stall_us = 200.0;
    conformance(&|| open_emulated(p.clone(), Some(&tmp_path("nand")), &FileOptions::default(), 2).unwrap());
}

#[test]
fn faulty_device_without_faults_conforms() {
    conformance(&|| Arc::new(FaultyDevice::new(MemDevice::new("faulty"), FaultPlan::default())));
}

#[test]
fn fast_profiles_refuse_a_file() {
    let p = DeviceProfile::builtin("optane").unwrap();
    let e =
        open_emulated(p, Some(&tmp_path("optane-file")), &FileOptions::default(), 1).err().expect("refused");
    assert!(e.to_string().contains("backed by RAM"), "{e}");
}

#[test]
fn backend_names_parse() {
    assert_eq!(Backend::parse("pread"), Some(Backend::Pread));
    assert_eq!(Backend::parse("io_uring"), Some(Backend::IoUring));
    assert_eq!(Backend::parse("auto"), Some(Backend::Auto));
    assert_eq!(Backend::parse("aio"), None);
}

#[test]
fn file_device_io_uring_batched_queue_submission_conforms() {
    let opts = FileOptions { backend: Backend::IoUring, queue_submit_batch: 32, ..FileOptions::default() };
    if file_device("probe-batch", opts.clone()).is_none() {
        return;
    }
    conformance(&|| file_device("uring-batched", opts.clone()).expect("io_uring"));
}

#[test]
fn env_var_forces_the_pread_backend() {
    // Re-runs this test in a child process with the variable set, so the parent's environment
    // (shared by every test thread) is never modified.
    if std::env::var(nvmedb::io::BACKEND_ENV).is_ok() {
        let d = FileDevice::open(tmp_path("env-pread")).expect("open");
        assert!(d.info().backend.starts_with("pread"), "{:?}", d.info());
        assert!(!d.uses_io_uring());
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["env_var_forces_the_pread_backend", "--exact", "--nocapture"])
        .env(nvmedb::io::BACKEND_ENV, "pread")
        .output()
        .expect("spawn child test");
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stdout));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 passed"), "the child ran the test: {stdout}");
    // A bad value is a setup error that names the variable.
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["env_var_rejects_bad_values_child", "--exact", "--ignored", "--nocapture"])
        .env(nvmedb::io::BACKEND_ENV, "aio")
        .output()
        .expect("spawn child test");
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
#[ignore = "run by env_var_forces_the_pread_backend in a child process"]
fn env_var_rejects_bad_values_child() {
    let e = FileDevice::open(tmp_path("env-bad")).expect_err("a bad backend name is refused");
    assert!(e.to_string().contains(nvmedb::io::BACKEND_ENV), "{e}");
}
