//! The etcd coordination store against a real etcd: three members started by the test as child
//! processes on loopback ports (Debian's `etcd-server`), data in a scratch directory. The store
//! passes the same conformance suite as the simulated one, survives the loss of the etcd
//! leader, and reports an unreachable cluster as unavailable (not as a lost lease).

mod support;

use nvmedb::repl::coord::{conformance, CoordError, CoordStore};
use nvmedb::repl::etcd::{EtcdStore, LocalEtcd};
use std::time::Duration;
use support::TmpDir;

const WAIT: Duration = Duration::from_secs(30);

fn store(c: &LocalEtcd) -> EtcdStore {
    EtcdStore::connect(&c.url(), Duration::from_secs(3)).expect("connect to the local etcd")
}

#[test]
fn the_etcd_store_passes_the_conformance_suite() {
    if !nvmedb_testkit::needs(nvmedb_testkit::ETCD) {
        return;
    }
    let dir = TmpDir::new("etcd-conf");
    let c = LocalEtcd::start(dir.path(), 3, WAIT).expect("local etcd cluster");
    let (a, b) = (store(&c), store(&c));
    conformance::run(&a, &b, "/nvmedb-test/conf", &std::thread::sleep);
}

#[test]
fn the_etcd_store_survives_the_loss_of_the_etcd_leader() {
    if !nvmedb_testkit::needs(nvmedb_testkit::ETCD) {
        return;
    }
    let dir = TmpDir::new("etcd-leader");
    let mut c = LocalEtcd::start(dir.path(), 3, WAIT).expect("local etcd cluster");
    let s = store(&c);
    let lease = s.grant(Duration::from_secs(5)).unwrap();
    let rev = s.create("/t/leader", b"n0 2", Some(lease)).unwrap().expect("created");
    let leader = c.leader().expect("an etcd leader");
    c.kill(leader);
    // The two others elect a new leader; requests go on (the first may time out meanwhile).
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match s.keep_alive(lease) {
            Ok(()) => break,
            Err(CoordError::Unavailable(e)) if std::time::Instant::now() < deadline => {
                eprintln!("waiting for a new etcd leader: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("renewal after the etcd leader's loss: {e}"),
        }
    }
    let got = s.get("/t/leader").unwrap().expect("the leased key survived");
    assert_eq!((got.value.as_slice(), got.revision, got.lease), (&b"n0 2"[..], rev, Some(lease)));
    assert_eq!(s.replace("/t/leader", rev + 1_000, b"x", None).unwrap(), None);
    c.restart(leader).unwrap();
    s.revoke(lease).unwrap();
    assert_eq!(s.get("/t/leader").unwrap(), None);
    assert_eq!(s.keep_alive(lease), Err(CoordError::LeaseExpired(lease)));
}

#[test]
fn an_unreachable_etcd_is_unavailable_not_a_lost_lease() {
    if !nvmedb_testkit::needs(nvmedb_testkit::ETCD) {
        return;
    }
    let dir = TmpDir::new("etcd-down");
    let mut c = LocalEtcd::start(dir.path(), 1, WAIT).expect("local etcd");
    let s = EtcdStore::connect(&c.url(), Duration::from_millis(500)).unwrap();
    let lease = s.grant(Duration::from_secs(10)).unwrap();
    c.kill(0);
    match s.keep_alive(lease) {
        Err(CoordError::Unavailable(d)) => assert!(d.contains("127.0.0.1"), "names the endpoint: {d}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(matches!(s.get("/x"), Err(CoordError::Unavailable(_))));
}
