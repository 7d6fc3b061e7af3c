//! FOREIGN KEY and CHECK constraints over the protocol (tokio-postgres): the errors as
//! PostgreSQL words them (SQLSTATE, constraint, key), constraints kept across a restart of the
//! server on the same data directory, and the locking that keeps a concurrent delete of a
//! parent from letting an orphan commit (in both orders of the two transactions).

use nvmedb_sql::{Server, ServerConfig};
use nvmedb_testkit::TmpDir;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

fn start(dir: &Path) -> Server {
    let mut config = ServerConfig::new(dir);
    config.listen = "127.0.0.1:0".into();
    config.options.table_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    config.options.index_buffer = nvmedb::BufferSize::Bytes(8 << 20);
    config.options.lock_options.lock_timeout = Duration::from_secs(20);
    Server::start(config).expect("server starts")
}

async fn connect(s: &Server) -> Client {
    let addr = s.addr();
    let conn = format!("host={} port={} user=tester dbname=test", addr.ip(), addr.port());
    let (client, connection) = tokio_postgres::connect(&conn, NoTls).await.expect("connects");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn db_error(r: Result<u64, tokio_postgres::Error>) -> (String, String, String) {
    let e = r.expect_err("the statement must fail");
    let d = e.as_db_error().unwrap_or_else(|| panic!("not a server error: {e}"));
    (d.code().code().to_string(), d.message().to_string(), d.detail().unwrap_or_default().to_string())
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_survive_a_restart_and_name_the_key() {
    let dir = TmpDir::path_only("sql-constraints");
    let s = start(dir.path());
    let c = connect(&s).await;
    c.batch_execute(
        "CREATE TABLE w (w_id int PRIMARY KEY, w_tax numeric(4,4) CHECK (w_tax >= 0));
         CREATE TABLE d (d_w_id int NOT NULL, d_id int NOT NULL, PRIMARY KEY (d_w_id, d_id),
                         CONSTRAINT d_w_fk FOREIGN KEY (d_w_id) REFERENCES w (w_id) ON DELETE CASCADE);
         CREATE TABLE o (o_id int PRIMARY KEY, o_w_id int, o_d_id int, o_n int,
                         CONSTRAINT o_n_positive CHECK (o_n > 0));
         ALTER TABLE o ADD CONSTRAINT o_d_fk FOREIGN KEY (o_w_id, o_d_id) REFERENCES d (d_w_id, d_id);
         INSERT INTO w VALUES (1, 0.1), (2, 0.2);
         INSERT INTO d VALUES (1, 1), (1, 2), (2, 1);
         INSERT INTO o VALUES (1, 1, 1, 5);",
    )
    .await
    .unwrap();
    drop(c);
    s.shutdown().unwrap();

    let s = start(dir.path());
    let c = connect(&s).await;
    let (code, msg, detail) = db_error(c.execute("INSERT INTO o VALUES (2, 2, 7, 1)", &[]).await);
    assert_eq!(code, "23503");
    assert!(msg.contains("\"o\"") && msg.contains("\"o_d_fk\""), "{msg}");
    assert_eq!(detail, "Key (o_w_id, o_d_id)=(2, 7) is not present in table \"d\".");
    let (code, msg, _) = db_error(c.execute("INSERT INTO o VALUES (2, 1, 1, 0)", &[]).await);
    assert_eq!(
        (code.as_str(), msg.as_str()),
        ("23514", "new row for relation \"o\" violates check constraint \"o_n_positive\"")
    );
    let (code, _, _) = db_error(c.execute("UPDATE w SET w_tax = -0.5 WHERE w_id = 1", &[]).await);
    assert_eq!(code, "23514");
    // d (1, 1) is referenced by o: deleting w 1 cascades to d, which o's NO ACTION refuses.
    let (code, msg, detail) = db_error(c.execute("DELETE FROM w WHERE w_id = 1", &[]).await);
    assert_eq!(code, "23503");
    assert!(msg.contains("\"o_d_fk\"") && msg.contains("table \"o\""), "{msg}");
    assert_eq!(detail, "Key (d_w_id, d_id)=(1, 1) is still referenced from table \"o\".");
    assert_eq!(count(&c, "SELECT count(*) FROM d").await, 3, "the failed DELETE changed nothing");
    // Without the reference the cascade goes through.
    c.batch_execute("DELETE FROM o; DELETE FROM w WHERE w_id = 1").await.unwrap();
    assert_eq!(count(&c, "SELECT count(*) FROM d").await, 1);
    drop(c);
    s.shutdown().unwrap();
}

/// Waits until the server's lock manager has parked one more waiter than `before`.
async fn until_parked(s: &Server, before: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while s.engine().db.lock_stats().parked_waits == before {
        assert!(Instant::now() < deadline, "the statement never waited for a lock");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_parent_delete_never_lets_an_orphan_commit() {
    let dir = TmpDir::path_only("sql-fk-race");
    let s = start(dir.path());
    let (a, b) = (connect(&s).await, connect(&s).await);
    a.batch_execute(
        "CREATE TABLE parent (id int PRIMARY KEY);
         CREATE TABLE child (id int PRIMARY KEY, pid int REFERENCES parent (id));
         INSERT INTO parent VALUES (1), (2);",
    )
    .await
    .unwrap();

    // The child's insert goes first: the parent's delete waits for it, then sees the child.
    a.batch_execute("BEGIN; INSERT INTO child VALUES (1, 1)").await.unwrap();
    let before = s.engine().db.lock_stats().parked_waits;
    let deleter = tokio::spawn(async move {
        let r = b.execute("DELETE FROM parent WHERE id = 1", &[]).await;
        (b, r)
    });
    until_parked(&s, before).await;
    assert!(!deleter.is_finished(), "the DELETE did not wait for the child's transaction");
    a.batch_execute("COMMIT").await.unwrap();
    let (b, r) = deleter.await.unwrap();
    assert_eq!(db_error(r).0, "23503");

    // The parent's delete goes first: the child's insert waits for it, then finds no parent.
    b.batch_execute("BEGIN; DELETE FROM parent WHERE id = 2").await.unwrap();
    let before = s.engine().db.lock_stats().parked_waits;
    let inserter = tokio::spawn(async move {
        let r = a.execute("INSERT INTO child VALUES (2, 2)", &[]).await;
        (a, r)
    });
    until_parked(&s, before).await;
    assert!(!inserter.is_finished(), "the INSERT did not wait for the parent's transaction");
    b.batch_execute("COMMIT").await.unwrap();
    let (a, r) = inserter.await.unwrap();
    assert_eq!(db_error(r).0, "23503");

    let orphans = count(&a, "SELECT count(*) FROM child WHERE pid NOT IN (SELECT id FROM parent)").await;
    assert_eq!(orphans, 0);
    assert_eq!(count(&a, "SELECT count(*) FROM child").await, 1);
    drop((a, b));
    s.shutdown().unwrap();
}
