//! Fault injection: injected EIO surfaces as a typed error naming the device and offset, ENOSPC
//! past a capacity, latency spikes, seeded random faults that replay, and torn writes at a
//! simulated crash that leave exactly the planned prefix.

use nvmedb::io::{
    AlignedBuf, CrashSimDevice, Device, FaultAction, FaultPlan, FaultRule, FaultyDevice, IoError, IoOpKind,
    IoRequest, MemDevice, QueuedOp, QueuedOpKind, WriteFate, SECTOR_BYTES,
};
use nvmedb::util::Rng;
use std::time::{Duration, Instant};

fn filled(len: usize, byte: u8) -> AlignedBuf {
    let mut b = AlignedBuf::new(len);
    b.fill(byte);
    b
}

fn assert_os_error(e: &IoError, device: &str, op: IoOpKind, offset: u64, errno: i32) {
    match e {
        IoError::Os { device: d, op: o, offset: off, .. } => {
            assert_eq!((d.as_str(), *o, *off), (device, op, offset), "{e}");
            assert_eq!(e.raw_os_error(), Some(errno), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains(device) && msg.contains(&format!("offset {offset}")),
                "message names both: {msg}"
            );
        }
        other => panic!("expected IoError::Os, got {other:?}"),
    }
}

#[test]
fn eio_on_the_nth_write_names_device_and_offset_and_leaves_the_medium_alone() {
    let plan = FaultPlan { rules: vec![FaultRule::eio_on_nth(IoOpKind::Write, 1)], ..FaultPlan::default() };
    let d = FaultyDevice::new(MemDevice::new("disk-a"), plan);
    d.write_at(0, &filled(4096, 1)).unwrap();
    let e = d.write_at(8192, &filled(4096, 2)).expect_err("second write fails");
    assert_os_error(&e, "disk-a", IoOpKind::Write, 8192, libc::EIO);
    d.write_at(8192, &filled(4096, 3)).unwrap();
    let mut r = AlignedBuf::new(4096);
    d.read_at(8192, &mut r).unwrap();
    assert!(r.iter().all(|&b| b == 3), "the failed write must not have reached the medium");
    assert_eq!(d.injected().len(), 1);
}

#[test]
fn eio_on_reads_in_an_offset_range_through_batches_and_queues() {
    let plan = FaultPlan {
        rules: vec![FaultRule::eio_in_range(IoOpKind::Read, 16384..20480)],
        ..FaultPlan::default()
    };
    let d = FaultyDevice::new(MemDevice::new("disk-b"), plan);
    d.write_at(0, &filled(32768, 9)).unwrap();
    let mut a = AlignedBuf::new(4096);
    let mut b = AlignedBuf::new(8192);
    // Overlapping the range from below fails; the other request still runs.
    let mut reqs =
        [IoRequest::Read { offset: 0, buf: &mut a }, IoRequest::Read { offset: 12288, buf: &mut b }];
    let e = d.submit_batch(&mut reqs).expect_err("batch reports the failed request");
    assert_os_error(&e, "disk-b", IoOpKind::Read, 12288, libc::EIO);
    assert!(a.iter().all(|&x| x == 9));
    let mut q = d.open_queue(2).unwrap();
    q.submit(vec![
        QueuedOp { tag: 1, kind: QueuedOpKind::Read, offset: 16384, buf: AlignedBuf::new(4096) },
        QueuedOp { tag: 2, kind: QueuedOpKind::Read, offset: 20480, buf: AlignedBuf::new(4096) },
    ])
    .unwrap();
    let mut done = Vec::new();
    q.reap(2, &mut done).unwrap();
    done.sort_by_key(|c| c.tag);
    assert_os_error(
        done[0].result.as_ref().expect_err("tag 1 fails"),
        "disk-b",
        IoOpKind::Read,
        16384,
        libc::EIO,
    );
    assert!(done[1].result.is_ok());
    // Writes in the range are not affected by a read rule.
    d.write_at(16384, &filled(4096, 1)).unwrap();
}

#[test]
fn random_faults_replay_from_their_seed() {
    let run = |seed: u64| -> Vec<u64> {
        let plan = FaultPlan { seed, rules: vec![FaultRule::eio_random(0.2)], ..FaultPlan::default() };
        let d = FaultyDevice::new(MemDevice::new("disk-c"), plan);
        let buf = filled(4096, 5);
        (0..200u64).filter(|i| d.write_at(i * 4096, &buf).is_err()).collect()
    };
    for seed in [1u64, 2, 3] {
        let a = run(seed);
        assert_eq!(a, run(seed), "seed {seed}: same seed, same faults");
        assert!((10..=80).contains(&a.len()), "seed {seed}: {} faults of 200 at p=0.2", a.len());
    }
    assert_ne!(run(1), run(2));
}

#[test]
fn enospc_past_the_capacity_limit() {
    let plan = FaultPlan { enospc_beyond: Some(64 * 1024), ..FaultPlan::default() };
    let d = FaultyDevice::new(MemDevice::new("small"), plan);
    d.write_at(60 * 1024, &filled(4096, 1)).unwrap();
    let e = d.write_at(64 * 1024, &filled(4096, 1)).expect_err("past the limit");
    assert_os_error(&e, "small", IoOpKind::Write, 64 * 1024, libc::ENOSPC);
    let e = d.write_at(60 * 1024, &filled(8192, 1)).expect_err("straddling the limit");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(d.ensure_capacity(1 << 20).expect_err("growth").raw_os_error(), Some(libc::ENOSPC));
    d.ensure_capacity(64 * 1024).unwrap();
}

#[test]
fn eio_on_sync() {
    let plan = FaultPlan { rules: vec![FaultRule::eio_on_nth(IoOpKind::Sync, 0)], ..FaultPlan::default() };
    let d = FaultyDevice::new(MemDevice::new("disk-d"), plan);
    d.write_at(0, &filled(4096, 1)).unwrap();
    assert_os_error(&d.sync().expect_err("first sync fails"), "disk-d", IoOpKind::Sync, 0, libc::EIO);
    d.sync().unwrap();
}

#[test]
fn latency_spike_delays_the_operation() {
    let spike = Duration::from_millis(3);
    let plan = FaultPlan {
        rules: vec![FaultRule { nth: Some(2), ..FaultRule::spike(1.0, spike) }],
        ..FaultPlan::default()
    };
    let d = FaultyDevice::new(MemDevice::new("slow"), plan);
    let mut r = AlignedBuf::new(4096);
    for i in 0..4 {
        let t = Instant::now();
        d.read_at(0, &mut r).unwrap();
        if i == 2 {
            // A lower bound only: a sleep never ends early.
            assert!(t.elapsed() >= spike, "spiked read took {:?}", t.elapsed());
        }
    }
    let log = d.injected();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].action, FaultAction::Delay(spike));
}

#[test]
fn torn_write_at_a_crash_leaves_exactly_the_planned_prefix() {
    for keep in [0usize, 1, 3, 31, 32, 40] {
        let d = FaultyDevice::new(CrashSimDevice::new("torn"), FaultPlan::default());
        d.write_at(0, &filled(16384, 0x11)).unwrap();
        d.sync().unwrap();
        d.write_at(0, &filled(16384, 0x22)).unwrap();
        d.write_at(16384, &filled(4096, 0x33)).unwrap();
        let outcome =
            d.inner().crash_with(|i, _, _| if i == 0 { WriteFate::Torn(keep) } else { WriteFate::Dropped });
        assert_eq!((outcome.torn, outcome.dropped), (1, 1));
        let mut r = AlignedBuf::new(20480);
        d.read_at(0, &mut r).unwrap();
        let prefix = keep.min(32) * SECTOR_BYTES;
        assert!(r[..prefix].iter().all(|&b| b == 0x22), "keep {keep}: torn prefix");
        assert!(r[prefix..16384].iter().all(|&b| b == 0x11), "keep {keep}: old bytes after the prefix");
        assert!(r[16384..].iter().all(|&b| b == 0), "keep {keep}: the dropped write left nothing");
    }
}

#[test]
fn random_crashes_tear_only_at_sector_boundaries() {
    let run =
        nvmedb_testkit::Replay { seed: nvmedb_testkit::seed_or_random(), iters: nvmedb_testkit::iters(50) };
    let seed = run.seed;
    let mut rng = Rng::new(seed);
    for round in 0..run.iters {
        let d = CrashSimDevice::new("sim");
        d.write_at(0, &filled(8192, 0x44)).unwrap();
        d.crash(&mut rng);
        let mut r = AlignedBuf::new(8192);
        d.read_at(0, &mut r).unwrap();
        let prefix = r.iter().take_while(|&&b| b == 0x44).count();
        assert_eq!(prefix % SECTOR_BYTES, 0, "seed {seed} round {round}");
        assert!(r[prefix..].iter().all(|&b| b == 0), "seed {seed} round {round}");
    }
}
