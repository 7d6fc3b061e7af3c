//! A standby serving reads over the PostgreSQL protocol (`Server::start_reads`): while four
//! clients move money between accounts on the primary (and insert and delete rows), readers
//! on the standby always see the total conserved and the row count whole (never part of a
//! transaction), changes there fail with 25006, and a session that sets `nvmedb.min_lsn` to
//! the primary's `nvmedb.durable_lsn` after a commit reads it (read-your-writes).

use nvmedb::repl::{
    open_primary, seed_standby, ReplConfig, ReplicationMode, Standby, StandbyConfig, StandbyPolicy,
};
use nvmedb_sql::standby::StandbyReads;
use nvmedb_sql::{Server, ServerConfig};
use nvmedb_testkit::TmpDir;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const ACCOUNTS: i64 = 20;

async fn connect(addr: std::net::SocketAddr) -> Client {
    let conn = format!("host={} port={} user=test dbname=test", addr.ip(), addr.port());
    let (c, conn) = tokio_postgres::connect(&conn, NoTls).await.expect("connects");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    c
}

async fn one(c: &Client, sql: &str) -> Vec<String> {
    let rows = c.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    rows.iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).unwrap_or("").to_string()).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_serves_consistent_reads_refuses_writes_and_reads_your_writes() {
    let p = TmpDir::path_only("standby-reads-p");
    let s = TmpDir::path_only("standby-reads-s");
    nvmedb::Database::open(&p, nvmedb::Options::default()).unwrap().close().unwrap();
    seed_standby(&p, &s).unwrap();
    let sb = Arc::new(
        Standby::start(StandbyConfig {
            listen: "127.0.0.1:0".into(),
            data_dir: s.to_path_buf(),
            secret: b"secret".to_vec(),
            apply: true,
            options: nvmedb::Options::default(),
        })
        .unwrap(),
    );
    let config = ReplConfig {
        standbys: vec![sb.addr().to_string()],
        secret: b"secret".to_vec(),
        mode: ReplicationMode::Eager,
        policy: StandbyPolicy::Fail { timeout: Duration::from_secs(30) },
        ..ReplConfig::default()
    };
    let (db, _log) = open_primary(&p, nvmedb::Options::default(), config, None).unwrap();
    let primary =
        Server::start_with(db, ServerConfig { listen: "127.0.0.1:0".into(), ..ServerConfig::new(&*p) })
            .unwrap();
    let pc = connect(primary.addr()).await;
    pc.batch_execute("CREATE TABLE acct (id int PRIMARY KEY, bal int)").await.unwrap();
    for a in 0..ACCOUNTS {
        pc.batch_execute(&format!("INSERT INTO acct VALUES ({a}, 100)")).await.unwrap();
    }
    let setup = one(&pc, "SHOW nvmedb.durable_lsn").await[0].clone();
    let reads = StandbyReads::new(sb.clone(), Duration::from_millis(50));
    let standby =
        Server::start_reads(reads, ServerConfig { listen: "127.0.0.1:0".into(), ..ServerConfig::new(&*s) })
            .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for c in 0..4i64 {
        let client = connect(primary.addr()).await;
        let (stop, commits) = (stop.clone(), commits.clone());
        clients.push(tokio::spawn(async move {
            let mut n = 0i64;
            // The row this client added and has not removed yet: it holds 5 of the money.
            let mut holding: Option<i64> = None;
            while !stop.load(Ordering::Acquire) {
                n += 1;
                let (a, b, x) = ((n * 7 + c) % ACCOUNTS, (n * 13 + c * 3) % ACCOUNTS, 1 + n % 9);
                // A transfer, and a row added (taking 5 from an account) or removed (giving
                // them back): torn, any of them breaks the total.
                let next = match holding {
                    None => Some(1000 + c * 100_000 + n),
                    Some(_) => None,
                };
                let side = match (holding, next) {
                    (None, Some(id)) => {
                        format!("UPDATE acct SET bal = bal - 5 WHERE id = {a}; INSERT INTO acct VALUES ({id}, 5)")
                    }
                    (Some(id), _) => {
                        format!("DELETE FROM acct WHERE id = {id}; UPDATE acct SET bal = bal + 5 WHERE id = {b}")
                    }
                    (None, None) => unreachable!(),
                };
                let sql = format!(
                    "BEGIN; UPDATE acct SET bal = bal - {x} WHERE id = {a}; UPDATE acct SET bal = bal + {x} WHERE id = {b}; {side}; COMMIT"
                );
                match client.batch_execute(&sql).await {
                    Ok(()) => {
                        commits.fetch_add(1, Ordering::Relaxed);
                        holding = next;
                    }
                    Err(e) if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                    Err(e) => panic!("client {c}: {e}"),
                }
            }
        }));
    }
    // The reader starts from the accounts' creation on (a snapshot holds a prefix of the
    // commits: without this it could begin before the last insert).
    let reader = connect(standby.addr()).await;
    reader.batch_execute(&format!("SET nvmedb.min_lsn = '{setup}'")).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..40 {
        let r = one(&reader, "SELECT sum(bal), count(*) FROM acct").await;
        assert_eq!(r[0], (ACCOUNTS * 100).to_string(), "the total on the standby: {r:?}");
        let count: i64 = r[1].parse().unwrap();
        assert!(
            (ACCOUNTS..=ACCOUNTS + 4).contains(&count),
            "{count} rows: each client holds at most one more"
        );
        let lsn: u64 = one(&reader, "SHOW nvmedb.snapshot_lsn").await[0].parse().unwrap();
        let lag: u64 = one(&reader, "SHOW nvmedb.snapshot_lag_bytes").await[0].parse().unwrap();
        seen.push((lsn, lag));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop.store(true, Ordering::Release);
    for c in clients {
        c.await.unwrap();
    }
    assert!(commits.load(Ordering::Relaxed) > 20, "the workload ran");
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "snapshots only move forward: {seen:?}");
    assert!(seen.first().unwrap().0 < seen.last().unwrap().0, "newer snapshots were taken: {seen:?}");
    // Changes on the standby: 25006.
    for sql in [
        "UPDATE acct SET bal = 0 WHERE id = 1",
        "INSERT INTO acct VALUES (-1, 0)",
        "CREATE TABLE t2 (id int PRIMARY KEY)",
    ] {
        let e = reader.batch_execute(sql).await.expect_err(sql);
        assert_eq!(e.code(), Some(&SqlState::READ_ONLY_SQL_TRANSACTION), "{sql}: {e}");
    }
    // Read-your-writes: the primary's durable position after the commit, waited for.
    pc.batch_execute("INSERT INTO acct VALUES (-7, 0)").await.unwrap();
    let durable = one(&pc, "SHOW nvmedb.durable_lsn").await[0].clone();
    let ryw = connect(standby.addr()).await;
    ryw.batch_execute(&format!("SET nvmedb.min_lsn = '{durable}'")).await.unwrap();
    assert_eq!(
        one(&ryw, "SELECT bal FROM acct WHERE id = -7").await,
        vec!["0".to_string()],
        "read-your-writes"
    );
    let at: u64 = one(&ryw, "SHOW nvmedb.snapshot_lsn").await[0].parse().unwrap();
    assert!(at >= durable.parse::<u64>().unwrap());
    drop((reader, ryw, pc));
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}
