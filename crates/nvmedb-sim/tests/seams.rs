//! Every seam of `nvmedb::repl` passes its conformance suite with both implementations: the
//! real one (system clock and threads, TCP on loopback, a directory) and the simulator's (its
//! scheduler's clock and tasks, its network, its crash-simulated disk, the in-memory store on
//! its clock). (The store's real implementation, etcd, runs the same store suite in
//! `crates/nvmedb/tests/repl_etcd.rs`.) Plus what only the simulator promises: a schedule
//! replays exactly, and a power cut at a planned storage operation drops, keeps or tears the
//! node's unsynced writes.

use nvmedb::repl::clock::{self, Clock, SystemClock};
use nvmedb::repl::coord::{self, MemStore};
use nvmedb::repl::disk::{self as rdisk, DirDisk, Disk};
use nvmedb::repl::net::{self, TcpTransport};
use nvmedb_sim::disk::{CrashPlan, DiskIo, SimDisk};
use nvmedb_sim::net::SimNet;
use nvmedb_sim::sched::{Sim, Stop};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs `f` as a task of a new simulation and drives it to its end.
fn in_simulation(seed: u64, f: impl FnOnce(&Sim) -> Box<dyn FnOnce() + Send> + Send) {
    let sim = Sim::new(seed);
    let body = f(&sim);
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    sim.spawn_in(0, "suite", move || {
        body();
        d2.store(true, Ordering::Release);
    })
    .unwrap();
    let stop = sim.run_until(Duration::from_secs(24 * 3600)).unwrap();
    assert_eq!(stop, Stop::Quiet, "{}", sim.describe_live());
    assert!(sim.failure().is_none(), "{:?}", sim.failure());
    assert!(done.load(Ordering::Acquire), "the suite did not finish: {}", sim.describe_live());
    sim.reap();
}

#[test]
fn the_system_clock_passes_the_clock_suite() {
    clock::conformance::run(&SystemClock::shared());
}

#[test]
fn the_simulated_clock_passes_the_clock_suite() {
    in_simulation(1, |sim| {
        let c: Arc<dyn Clock> = sim.clock();
        Box::new(move || clock::conformance::run(&c))
    });
}

#[test]
fn tcp_passes_the_transport_suite() {
    let env = net::conformance::Env { clock: SystemClock::shared(), net: TcpTransport::shared() };
    net::conformance::run(&env, &env, "127.0.0.1:0");
}

#[test]
fn the_simulated_network_passes_the_transport_suite() {
    in_simulation(2, |sim| {
        let sn = SimNet::new(sim, 2, (Duration::from_micros(50), Duration::from_micros(600)));
        let (ga, gb) = (sim.new_group("a"), sim.new_group("b"));
        let a = net::conformance::Env { clock: sim.clock(), net: sn.node("a", ga) };
        let b = net::conformance::Env { clock: sim.clock(), net: sn.node("b", gb) };
        Box::new(move || net::conformance::run(&a, &b, "b:7000"))
    });
}

#[test]
fn a_directory_passes_the_disk_suite() {
    let d = nvmedb_testkit::TmpDir::path_only("sim-seams-dir");
    rdisk::conformance::run(&DirDisk::new(&d));
}

#[test]
fn the_simulated_disk_passes_the_disk_suite() {
    in_simulation(3, |sim| {
        let io = DiskIo::new(&SimDisk::new(), sim, "n0");
        Box::new(move || rdisk::conformance::run(&io))
    });
}

#[test]
fn the_store_on_the_simulated_clock_passes_the_store_suite() {
    in_simulation(4, |sim| {
        let c: Arc<dyn Clock> = sim.clock();
        let a = MemStore::new(c.clone());
        let b = a.client();
        Box::new(move || coord::conformance::run(&a, &b, "/t", &|d| c.sleep(d)))
    });
}

#[test]
fn a_power_cut_at_a_planned_storage_operation_loses_only_unsynced_writes() {
    use nvmedb::io::AlignedBuf;
    let mut outcomes = [0usize; 2];
    for seed in 0..40u64 {
        let disk = SimDisk::new();
        let cut = Arc::new(AtomicBool::new(false));
        in_simulation(seed, |sim| {
            let io = DiskIo::new(&disk, sim, "n0");
            let (d2, c2, s2, io2) = (disk.clone(), cut.clone(), seed, io.clone());
            // The 5th operation from now: open, write, sync, then the unsynced write's fate.
            io.plan_crash(CrashPlan {
                at: 5,
                cut: Box::new(move || {
                    io2.die();
                    d2.power_cut(&mut nvmedb::util::Rng::new(s2));
                    c2.store(true, Ordering::Release);
                }),
            });
            Box::new(move || {
                let st = io.data().unwrap();
                let d = st.open("f", true).unwrap(); // 1 (create)
                let mut b = AlignedBuf::new(8192);
                b.fill(1);
                d.write_at(0, &b).unwrap(); // 2
                d.sync().unwrap(); // 3
                b.fill(2);
                d.write_at(0, &b).unwrap(); // 4: not synced
                assert!(d.sync().is_err(), "the 5th operation fails: the power went"); // 5
                assert!(d.write_at(0, &b).is_err(), "a dead incarnation does nothing more");
            })
        });
        assert!(cut.load(Ordering::Acquire));
        // The next incarnation sees the synced write, and the unsynced one dropped, kept or torn
        // (a prefix of its sectors).
        let sim = Sim::new(seed);
        let io = DiskIo::new(&disk, &sim, "n0");
        let d = io.data().unwrap().open("f", false).unwrap();
        let mut r = AlignedBuf::new(8192);
        d.read_at(0, &mut r).unwrap();
        let twos = r.iter().take_while(|&&b| b == 2).count();
        assert_eq!(twos % 512, 0, "seed {seed}: torn inside a sector");
        assert!(r[twos..].iter().all(|&b| b == 1), "seed {seed}: the synced write was lost");
        outcomes[usize::from(twos > 0)] += 1;
    }
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "both fates seen: {outcomes:?}");
}

#[test]
fn a_schedule_replays_exactly() {
    for seed in [7, 8] {
        let a = nvmedb_sim::run_seed(seed).unwrap_or_else(|f| panic!("{f}"));
        let b = nvmedb_sim::run_seed(seed).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!((a.digest, a.steps, a.acks), (b.digest, b.steps, b.acks), "seed {seed}");
        assert!(a.steps > 100 && a.acks > 0, "seed {seed} did something: {a:?}");
    }
}
