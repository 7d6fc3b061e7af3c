//! What the protocol tests share: a server on a fresh directory with small buffers, clients
//! connected to it, the lock manager's parked-wait counter (to observe a statement blocked on
//! a lock without sleeping for it), and the SQLSTATE of an error.

#![allow(dead_code)] // each test binary uses part of it

use nvmedb_sql::{Server, ServerConfig};
use nvmedb_testkit::TmpDir;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

/// A running server and its directory (removed after the server shut down).
pub struct Fixture {
    pub server: Option<Server>,
    pub _dir: TmpDir,
}

/// A server on 127.0.0.1 (any port) with 8 MiB table and index buffers and `lock_timeout`.
pub fn start(lock_timeout: Duration) -> Fixture {
    let dir = TmpDir::path_only("sql");
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".into();
    config.options.table_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    config.options.index_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    config.options.lock_options.lock_timeout = lock_timeout;
    let server = Server::start(config).expect("server starts");
    Fixture { server: Some(server), _dir: dir }
}

impl Fixture {
    /// A new connection (its connection task runs on the test's runtime).
    pub async fn connect(&self) -> Client {
        let addr = self.server.as_ref().unwrap().addr();
        let conn = format!("host={} port={} user=tester dbname=test", addr.ip(), addr.port());
        let (client, connection) = tokio_postgres::connect(&conn, NoTls).await.expect("connects");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// Lock waits that parked so far.
    pub fn parked(&self) -> u64 {
        self.server.as_ref().unwrap().engine().db.lock_stats().parked_waits
    }

    /// Returns once a lock wait has parked since `before` (a statement is blocked).
    pub async fn until_parked(&self, before: u64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.parked() == before {
            assert!(Instant::now() < deadline, "the statement never waited for a lock");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown().unwrap();
        }
    }
}

/// The SQLSTATE of a server error (or a description of a client-side one).
pub fn code(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.code().code().to_string()).unwrap_or_else(|| format!("not a server error: {e}"))
}

/// Ends both transactions by their statements' outcomes: commits where the statement
/// succeeded, rolls back where it failed, which it may only with 40P01 or 40001; returns the
/// commits.
pub async fn one_victim(results: [(&Client, Result<(), tokio_postgres::Error>); 2]) -> usize {
    let mut commits = 0;
    for (c, r) in results {
        match r {
            Ok(()) => {
                c.batch_execute("COMMIT").await.unwrap();
                commits += 1;
            }
            Err(e) => {
                assert!(["40P01", "40001"].contains(&code(&e).as_str()), "{e:?}");
                c.batch_execute("ROLLBACK").await.unwrap();
            }
        }
    }
    commits
}
