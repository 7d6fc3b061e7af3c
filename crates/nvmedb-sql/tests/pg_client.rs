//! A real PostgreSQL driver (tokio-postgres) against the server: simple and extended
//! queries, parameters of every supported type in text and binary form, COPY FROM STDIN,
//! transactions and rollback, every SQLSTATE the server promises, a client that disconnects
//! in the middle of a transaction, concurrent sessions moving money between accounts, and the
//! extended protocol as pgbench `-M prepared` drives it: prepared statements with parameters
//! run many times, many Bind/Execute/Sync pipelined on one connection before the first answer
//! is read, errors of a prepared statement that name the SQL object at fault, and a statement
//! waiting for a row lock that holds up no other connection; and the anomaly histories the
//! isolation levels prevent (lost update, read skew).

use futures::future::join_all;
use nvmedb_sql::{Server, ServerConfig};
use nvmedb_testkit::TmpDir;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

mod common;
use common::{code, one_victim, start, Fixture};

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default()
}

async fn simple_rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    c.simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_and_extended_queries_with_every_type() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, small smallint, big bigint, d double precision, b boolean, \
         ts timestamp, n numeric(12,2), v varchar(20), t text, ch char(5), raw bytea); \
         INSERT INTO t VALUES (1, 2, 3000000000, 1.5, true, '2024-02-29 13:45:07.5', 12.34, 'vv', 'tt', 'ab', '\\x00ff'), \
                              (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);",
    )
    .await
    .unwrap();
    // Simple protocol: text results.
    let rows = simple_rows(&c, "SELECT * FROM t ORDER BY id").await;
    assert_eq!(
        rows[0],
        [
            "1",
            "2",
            "3000000000",
            "1.5",
            "t",
            "2024-02-29 13:45:07.5",
            "12.34",
            "vv",
            "tt",
            "ab   ",
            "\\x00ff"
        ]
        .map(|s| Some(s.to_string()))
    );
    assert!(rows[1][1..].iter().all(Option::is_none));
    // Extended protocol: binary results and typed parameters of every type.
    let ts = UNIX_EPOCH + Duration::from_micros(1_709_214_307_500_000);
    let row = c
        .query_one("SELECT id, small, big, d, b, ts, v, t, ch, raw FROM t WHERE id = $1", &[&1i32])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);
    assert_eq!(row.get::<_, i16>(1), 2);
    assert_eq!(row.get::<_, i64>(2), 3_000_000_000);
    assert_eq!(row.get::<_, f64>(3), 1.5);
    assert!(row.get::<_, bool>(4));
    assert_eq!(row.get::<_, SystemTime>(5), ts);
    assert_eq!(row.get::<_, &str>(6), "vv");
    assert_eq!(row.get::<_, &str>(7), "tt");
    assert_eq!(row.get::<_, &str>(8), "ab   ");
    assert_eq!(row.get::<_, Vec<u8>>(9), vec![0, 255]);
    let n = c.query_one("SELECT n FROM t WHERE id = 1", &[]).await.unwrap();
    assert_eq!(n.get::<_, rust_decimal::Decimal>(0).to_string(), "12.34");
    let ins = c
        .prepare("INSERT INTO t (id, small, big, d, b, ts, n, v, t, ch, raw) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)")
        .await
        .unwrap();
    let dec = rust_decimal::Decimal::new(-98765, 3); // -98.765 → rounds to -98.77 at scale 2
    c.execute(
        &ins,
        &[&3i32, &-7i16, &-1i64, &-0.25f64, &false, &ts, &dec, &"x", &"y", &"z", &vec![1u8, 2, 3]],
    )
    .await
    .unwrap();
    let back = c
        .query_one("SELECT small, big, d, b, ts, n, v, t, ch, raw FROM t WHERE id = $1", &[&3i32])
        .await
        .unwrap();
    assert_eq!(back.get::<_, i16>(0), -7);
    assert_eq!(back.get::<_, i64>(1), -1);
    assert_eq!(back.get::<_, f64>(2), -0.25);
    assert!(!back.get::<_, bool>(3));
    assert_eq!(back.get::<_, SystemTime>(4), ts);
    assert_eq!(back.get::<_, rust_decimal::Decimal>(5).to_string(), "-98.77");
    assert_eq!(back.get::<_, &str>(8), "z    ");
    assert_eq!(back.get::<_, Vec<u8>>(9), vec![1, 2, 3]);
    // NULL parameters, a prepared statement reused, RETURNING, expressions on parameters.
    let upd = c.prepare("UPDATE t SET big = big + $1 WHERE id = $2 RETURNING big").await.unwrap();
    for _ in 0..3 {
        c.query_one(&upd, &[&10i64, &3i32]).await.unwrap();
    }
    assert_eq!(c.query_one(&upd, &[&0i64, &3i32]).await.unwrap().get::<_, i64>(0), 29);
    c.execute("UPDATE t SET v = $1 WHERE id = 3", &[&None::<&str>]).await.unwrap();
    assert_eq!(
        c.query_one("SELECT v FROM t WHERE id = 3", &[]).await.unwrap().get::<_, Option<&str>>(0),
        None
    );
    // Ranges, aggregates, grouping, ordering, limits, a join.
    c.batch_execute(
        "CREATE TABLE acct (id int PRIMARY KEY, branch int NOT NULL, bal int); CREATE INDEX acct_branch ON acct (branch); \
         CREATE TABLE branch (bid int PRIMARY KEY, name text);",
    )
    .await
    .unwrap();
    for i in 1..=100i32 {
        c.execute("INSERT INTO acct VALUES ($1, $2, $3)", &[&i, &(i % 4), &(i * 10)]).await.unwrap();
    }
    c.batch_execute("INSERT INTO branch VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three')")
        .await
        .unwrap();
    let r = c
        .query("SELECT id FROM acct WHERE id BETWEEN $1 AND $2 ORDER BY id DESC LIMIT 3", &[&10i32, &20i32])
        .await
        .unwrap();
    assert_eq!(r.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), [20, 19, 18]);
    let r = c
        .query_one("SELECT count(*), sum(bal), min(bal), max(bal), avg(bal) FROM acct WHERE branch = 1", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i64>(0), 25);
    assert_eq!(r.get::<_, i64>(1), (0..25).map(|k| (4 * k + 1) * 10).sum::<i64>());
    assert_eq!((r.get::<_, i32>(2), r.get::<_, i32>(3)), (10, 970));
    assert_eq!(r.get::<_, rust_decimal::Decimal>(4).to_string(), "490.0000000000000000");
    let g = simple_rows(
        &c,
        "SELECT branch, count(*) AS n FROM acct GROUP BY branch HAVING count(*) > 24 ORDER BY 1",
    )
    .await;
    assert_eq!(g.len(), 4);
    assert_eq!(g[3], [Some("3".to_string()), Some("25".to_string())]);
    let j = simple_rows(
        &c,
        "SELECT a.id, b.name FROM acct a JOIN branch b ON a.branch = b.bid WHERE a.id < 3 ORDER BY a.id",
    )
    .await;
    assert_eq!(j, [[Some("1".into()), Some("one".into())], [Some("2".into()), Some("two".into())]]);
    let j2 = simple_rows(
        &c,
        "SELECT count(*) FROM acct, branch WHERE branch.name = 'two' AND acct.branch = branch.bid",
    )
    .await;
    assert_eq!(j2, [[Some("25".to_string())]]);
    let sub = simple_rows(
        &c,
        "SELECT (SELECT max(bal) FROM acct), (SELECT count(*) FROM branch) + 1, id FROM acct \
         WHERE bal = (SELECT min(bal) FROM acct)",
    )
    .await;
    assert_eq!(sub, [[Some("1000".to_string()), Some("5".to_string()), Some("1".to_string())]]);
    let e = c.batch_execute("SELECT (SELECT id FROM acct)").await.unwrap_err();
    assert_eq!(code(&e), "21000");
    // What clients send at start-up.
    let v = simple_rows(&c, "SELECT version()").await;
    assert!(v[0][0].as_deref().unwrap().contains("nvmedb"));
    assert_eq!(simple_rows(&c, "SHOW client_encoding").await, [[Some("UTF8".to_string())]]);
    c.batch_execute("SET application_name = 'tests'; SET extra_float_digits = 3").await.unwrap();
    assert_eq!(
        simple_rows(&c, "SELECT current_setting('application_name')").await,
        [[Some("tests".to_string())]]
    );
    let now = c.query_one("SELECT now(), CURRENT_TIMESTAMP", &[]).await.unwrap();
    let t: SystemTime = now.get(0);
    assert!(t.duration_since(UNIX_EPOCH).unwrap().as_secs() > 1_600_000_000);
    c.batch_execute("VACUUM ANALYZE acct; ANALYZE acct; CHECKPOINT").await.unwrap();
    // DELETE and TRUNCATE, DROP TABLE IF EXISTS.
    assert_eq!(c.execute("DELETE FROM acct WHERE branch = $1", &[&0i32]).await.unwrap(), 25);
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM acct").await, [[Some("75".to_string())]]);
    c.batch_execute("TRUNCATE acct; DROP TABLE IF EXISTS nothing_here, branch").await.unwrap();
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM acct").await, [[Some("0".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_and_transactions() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    c.batch_execute("CREATE TABLE h (tid int, delta int, note text, at timestamp)").await.unwrap();
    // COPY in text format, split across messages at odd places, with escapes and NULLs.
    let sink = c.copy_in("COPY h (tid, delta, note, at) FROM STDIN").await.unwrap();
    use futures::SinkExt;
    let mut sink = Box::pin(sink);
    let mut data = String::new();
    for i in 0..1000 {
        data.push_str(&format!("{i}\t{}\tline\\t{i}\t\\N\n", i * 2));
    }
    for chunk in data.as_bytes().chunks(777) {
        sink.send(bytes::Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    assert_eq!(sink.as_mut().finish().await.unwrap(), 1000);
    let r = simple_rows(&c, "SELECT count(*), sum(delta) FROM h").await;
    assert_eq!(r, [[Some("1000".to_string()), Some("999000".to_string())]]);
    assert_eq!(simple_rows(&c, "SELECT note FROM h WHERE tid = 7").await, [[Some("line\t7".to_string())]]);
    // A bad line fails the whole COPY: nothing of it stays.
    let sink = c.copy_in("COPY h (tid, delta) FROM STDIN").await.unwrap();
    let mut sink = Box::pin(sink);
    sink.send(bytes::Bytes::from_static(b"1\t2\nx\t3\n")).await.unwrap();
    let e = sink.as_mut().finish().await.unwrap_err();
    assert_eq!(code(&e), "22P02", "{e}");
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM h").await, [[Some("1000".to_string())]]);
    // Rollback undoes; commit keeps.
    c.batch_execute("CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL)").await.unwrap();
    c.batch_execute("INSERT INTO acct VALUES (1, 100), (2, 100)").await.unwrap();
    let mut c = c;
    let tx = c.transaction().await.unwrap();
    tx.execute("UPDATE acct SET bal = bal - 30 WHERE id = 1", &[]).await.unwrap();
    tx.execute("INSERT INTO acct VALUES (3, 1)", &[]).await.unwrap();
    tx.execute("DELETE FROM acct WHERE id = 2", &[]).await.unwrap();
    assert_eq!(tx.query_one("SELECT bal FROM acct WHERE id = 1", &[]).await.unwrap().get::<_, i32>(0), 70);
    tx.rollback().await.unwrap();
    assert_eq!(simple_rows(&c, "SELECT id, bal FROM acct ORDER BY id").await.len(), 2);
    assert_eq!(simple_rows(&c, "SELECT bal FROM acct WHERE id = 1").await, [[Some("100".to_string())]]);
    let tx = c.transaction().await.unwrap();
    tx.execute("UPDATE acct SET bal = bal - 30 WHERE id = 1", &[]).await.unwrap();
    tx.execute("UPDATE acct SET bal = bal + 30 WHERE id = 2", &[]).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        simple_rows(&c, "SELECT sum(bal), min(bal) FROM acct").await,
        [[Some("200".to_string()), Some("70".to_string())]]
    );
    // An error fails the block: later statements are refused until ROLLBACK.
    c.batch_execute("BEGIN").await.unwrap();
    let e = c.batch_execute("INSERT INTO acct VALUES (1, 0)").await.unwrap_err();
    assert_eq!(code(&e), "23505");
    let e = c.batch_execute("SELECT 1").await.unwrap_err();
    assert_eq!(code(&e), "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(simple_rows(&c, "SELECT 1").await, [[Some("1".to_string())]]);
}

/// Sends `data` as one COPY FROM STDIN of `sql`; the server's answer.
async fn copy(c: &Client, sql: &str, data: &str) -> Result<u64, tokio_postgres::Error> {
    use futures::SinkExt;
    let mut sink = Box::pin(c.copy_in(sql).await?);
    for chunk in data.as_bytes().chunks(1000) {
        sink.send(bytes::Bytes::copy_from_slice(chunk)).await?;
    }
    sink.as_mut().finish().await
}

/// COPY into an empty table is a bulk load when it is its own transaction or the table was
/// created or truncated in the same block (as `pgbench -i` does): rows, primary-key lookups
/// and integrity as with inserts; a bad line or a duplicate key fails it and leaves the table
/// as it was; like the DDL before it, a later ROLLBACK of the block keeps it. A COPY into an
/// empty table the block did not create or truncate stays transactional.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_into_an_empty_table_loads_it() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    let rows: String = (1..=5000).map(|i| format!("{i}\t{}\t0\tfill\n", (i - 1) / 1000 + 1)).collect();
    // pgbench -i: truncate, insert the small tables, COPY the big one, all in one block.
    c.batch_execute(
        "CREATE TABLE acc (aid int NOT NULL, bid int, abalance int, filler char(84)); \
         CREATE TABLE br (bid int PRIMARY KEY, bbalance int); \
         BEGIN; TRUNCATE acc, br; INSERT INTO br VALUES (1, 0), (2, 0)",
    )
    .await
    .unwrap();
    assert_eq!(copy(&c, "COPY acc FROM STDIN WITH (FREEZE ON)", &rows).await.unwrap(), 5000);
    c.batch_execute("COMMIT; ALTER TABLE acc ADD PRIMARY KEY (aid)").await.unwrap();
    assert_eq!(
        simple_rows(&c, "SELECT count(*), sum(bid), max(aid) FROM acc").await,
        [[Some("5000".into()), Some("15000".into()), Some("5000".into())]]
    );
    assert_eq!(simple_rows(&c, "SELECT bid FROM acc WHERE aid = 4321").await, [[Some("5".to_string())]]);
    // Its own transaction, into a table with a primary key: a duplicate key fails the load.
    c.batch_execute("CREATE TABLE k (id int PRIMARY KEY, v int)").await.unwrap();
    let e = copy(&c, "COPY k FROM STDIN", "1\t1\n2\t2\n1\t3\n").await.unwrap_err();
    assert_eq!(code(&e), "23505", "{e}");
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM k").await, [[Some("0".to_string())]]);
    let e = copy(&c, "COPY k FROM STDIN", "1\t1\nx\t2\n").await.unwrap_err();
    assert_eq!(code(&e), "22P02", "{e}");
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM k").await, [[Some("0".to_string())]]);
    assert_eq!(copy(&c, "COPY k FROM STDIN", "3\t30\n1\t10\n2\t20\n").await.unwrap(), 3);
    assert_eq!(simple_rows(&c, "SELECT v FROM k WHERE id = 2").await, [[Some("20".to_string())]]);
    c.batch_execute("INSERT INTO k VALUES (4, 40)").await.unwrap();
    // Truncated in the block: loaded, and the ROLLBACK keeps it as it keeps the TRUNCATE.
    c.batch_execute("BEGIN; TRUNCATE k").await.unwrap();
    assert_eq!(copy(&c, "COPY k FROM STDIN", "7\t70\n").await.unwrap(), 1);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(simple_rows(&c, "SELECT id, v FROM k").await, [[Some("7".into()), Some("70".into())]]);
    // Empty, but not created or truncated in this block: the COPY is part of the block.
    c.batch_execute("CREATE TABLE e (id int PRIMARY KEY); BEGIN").await.unwrap();
    assert_eq!(copy(&c, "COPY e FROM STDIN", "1\n2\n").await.unwrap(), 2);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM e").await, [[Some("0".to_string())]]);
}

/// One binary COPY row of (int4, text or NULL).
fn binary_row(out: &mut Vec<u8>, id: i32, note: Option<&str>) {
    out.extend_from_slice(&2i16.to_be_bytes());
    out.extend_from_slice(&4i32.to_be_bytes());
    out.extend_from_slice(&id.to_be_bytes());
    match note {
        Some(n) => {
            out.extend_from_slice(&(n.len() as i32).to_be_bytes());
            out.extend_from_slice(n.as_bytes());
        }
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

/// Sends `data` (bytes) as one COPY FROM STDIN of `sql`, in chunks of 7 bytes.
async fn copy_bytes(c: &Client, sql: &str, data: &[u8]) -> Result<u64, tokio_postgres::Error> {
    use futures::SinkExt;
    let mut sink = Box::pin(c.copy_in(sql).await?);
    for chunk in data.chunks(7) {
        sink.send(bytes::Bytes::copy_from_slice(chunk)).await?;
    }
    sink.as_mut().finish().await
}

/// COPY FROM STDIN in the binary format (pgx's CopyFrom): header, rows whose fields are in
/// their types' binary formats (NULL as length -1), trailer; split across messages anywhere.
/// A wrong field count, a bad signature and a NULL in a NOT NULL column fail the COPY whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_the_binary_format() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    c.batch_execute(
        "CREATE TABLE bc (id int PRIMARY KEY, note text); CREATE TABLE nn (id int, note text NOT NULL)",
    )
    .await
    .unwrap();
    let mut data = b"PGCOPY\n\xff\r\n\0".to_vec();
    data.extend_from_slice(&0i32.to_be_bytes());
    data.extend_from_slice(&0i32.to_be_bytes());
    let header = data.clone();
    for i in 1..=300 {
        binary_row(&mut data, i, if i % 7 == 0 { None } else { Some("n\tx") });
    }
    data.extend_from_slice(&(-1i16).to_be_bytes());
    assert_eq!(copy_bytes(&c, "COPY bc (id, note) FROM STDIN BINARY", &data).await.unwrap(), 300);
    assert_eq!(
        simple_rows(&c, "SELECT count(*), count(note), sum(id) FROM bc").await,
        [[Some("300".into()), Some("258".into()), Some("45150".into())]]
    );
    assert_eq!(simple_rows(&c, "SELECT note FROM bc WHERE id = 8").await, [[Some("n\tx".to_string())]]);
    // A row with one field for two columns.
    let mut bad = header.clone();
    bad.extend_from_slice(&1i16.to_be_bytes());
    bad.extend_from_slice(&4i32.to_be_bytes());
    bad.extend_from_slice(&1i32.to_be_bytes());
    bad.extend_from_slice(&(-1i16).to_be_bytes());
    let e = copy_bytes(&c, "COPY bc FROM STDIN (FORMAT binary)", &bad).await.unwrap_err();
    assert_eq!(code(&e), "22P04", "{e}");
    let e = copy_bytes(&c, "COPY bc FROM STDIN BINARY", b"NOTCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "22P04", "{e}");
    let mut null = header;
    binary_row(&mut null, 1, None);
    null.extend_from_slice(&(-1i16).to_be_bytes());
    let e = copy_bytes(&c, "COPY nn FROM STDIN BINARY", &null).await.unwrap_err();
    assert_eq!(code(&e), "23502", "{e}");
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM bc").await, [[Some("300".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_promised_sqlstate() {
    let f = start(Duration::from_millis(300));
    let c = f.connect().await;
    c.batch_execute(
        "CREATE TABLE k (id int PRIMARY KEY, v int NOT NULL); INSERT INTO k VALUES (1, 1), (2, 2)",
    )
    .await
    .unwrap();
    let err = |sql: &'static str| {
        let c = &c;
        async move { c.batch_execute(sql).await.unwrap_err() }
    };
    let e = err("SELECT * FROM nope").await;
    assert_eq!(code(&e), "42P01");
    assert!(message(&e).contains("nope"), "{e:?}");
    let e = err("SELECT nope FROM k").await;
    assert_eq!(code(&e), "42703");
    assert!(message(&e).contains("nope"));
    let e = err("INSERT INTO k VALUES (1, 5)").await;
    assert_eq!(code(&e), "23505");
    assert!(message(&e).contains('k') && message(&e).contains('1'), "{}", message(&e));
    let e = err("INSERT INTO k (id) VALUES (9)").await;
    assert_eq!(code(&e), "23502");
    assert!(message(&e).contains("\"v\""), "{}", message(&e));
    let e = err("SELEKT 1").await;
    assert_eq!(code(&e), "42601");
    let e = err("SELECT * FROM k WHERE id = 'abc'").await;
    assert_eq!(code(&e), "22P02");
    assert!(message(&e).contains("abc"));
    let e = c.query("SELECT * FROM k WHERE id = $1::text::int", &[&"x1"]).await.unwrap_err();
    assert_eq!(code(&e), "22P02");
    let e = err("CREATE VIEW vk AS SELECT * FROM k").await;
    assert_eq!(code(&e), "0A000");
    assert!(message(&e).contains("CREATE VIEW"), "{}", message(&e));
    // A catalog query naming relations it never joined: 42P01, as in PostgreSQL.
    let e = err("select o.n, p.partstrat from pg_catalog.pg_class as c where c.relname = 'k'").await;
    assert_eq!(code(&e), "42P01");
    // 40P01: two transactions lock rows in opposite orders.
    let (a, b) = (f.connect().await, f.connect().await);
    a.batch_execute("BEGIN; UPDATE k SET v = v + 1 WHERE id = 1").await.unwrap();
    b.batch_execute("BEGIN; UPDATE k SET v = v + 1 WHERE id = 2").await.unwrap();
    let (ra, rb) = tokio::join!(
        a.batch_execute("UPDATE k SET v = v + 1 WHERE id = 2"),
        b.batch_execute("UPDATE k SET v = v + 1 WHERE id = 1")
    );
    let codes: Vec<String> = [&ra, &rb].iter().filter_map(|r| r.as_ref().err()).map(code).collect();
    assert!(codes.contains(&"40P01".to_string()), "{codes:?}");
    a.batch_execute("ROLLBACK").await.unwrap();
    b.batch_execute("ROLLBACK").await.unwrap();
    // 55P03: a lock held longer than the lock timeout (no cycle).
    a.batch_execute("BEGIN; UPDATE k SET v = 10 WHERE id = 1").await.unwrap();
    let e = b.batch_execute("UPDATE k SET v = 20 WHERE id = 1").await.unwrap_err();
    assert_eq!(code(&e), "55P03");
    a.batch_execute("COMMIT").await.unwrap();
    assert_eq!(simple_rows(&b, "SELECT v FROM k WHERE id = 1").await, [[Some("10".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_transaction_is_rolled_back() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    c.batch_execute("CREATE TABLE k (id int PRIMARY KEY, v int); INSERT INTO k VALUES (1, 1)").await.unwrap();
    {
        let gone = f.connect().await;
        gone.batch_execute("BEGIN; UPDATE k SET v = 99 WHERE id = 1; INSERT INTO k VALUES (2, 2)")
            .await
            .unwrap();
        // Dropped here: the socket closes with the transaction open.
    }
    // The row lock is released when the server notices; then the old value is back.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = simple_rows(&c, "SELECT v FROM k WHERE id = 1").await;
        if r == [[Some("1".to_string())]] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the gone client's change is still visible: {r:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM k").await, [[Some("1".to_string())]]);
    // A malformed message ends only its own connection.
    let addr = f.server.as_ref().unwrap().addr();
    let mut raw = std::net::TcpStream::connect(addr).unwrap();
    use std::io::Write;
    raw.write_all(&[0, 0, 0, 3, 0xde, 0xad]).unwrap();
    drop(raw);
    assert_eq!(simple_rows(&c, "SELECT v FROM k WHERE id = 1").await, [[Some("1".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_keep_the_total() {
    let f = start(Duration::from_secs(10));
    let c = f.connect().await;
    c.batch_execute("CREATE TABLE acct (id int PRIMARY KEY, bal bigint NOT NULL)").await.unwrap();
    for i in 0..20i32 {
        c.execute("INSERT INTO acct VALUES ($1, 1000)", &[&i]).await.unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let mut client = f.connect().await;
        tasks.push(tokio::spawn(async move {
            let mut seed = w * 7919 + 1;
            let mut done = 0;
            let mut retries = 0;
            while done < 40 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let (from, to) = ((seed >> 33) % 20, (seed >> 45) % 20);
                if from == to {
                    continue;
                }
                let tx = client.transaction().await.unwrap();
                let r: Result<(), tokio_postgres::Error> = async {
                    tx.execute("UPDATE acct SET bal = bal - 7 WHERE id = $1", &[&(from as i32)]).await?;
                    tx.execute("UPDATE acct SET bal = bal + 7 WHERE id = $1", &[&(to as i32)]).await?;
                    Ok(())
                }
                .await;
                match r {
                    Ok(()) => {
                        tx.commit().await.unwrap();
                        done += 1;
                    }
                    Err(e) => {
                        assert!(["40P01", "55P03"].contains(&code(&e).as_str()), "{e}");
                        let _ = tx.rollback().await;
                        retries += 1;
                    }
                }
            }
            retries
        }));
    }
    let mut retries = 0;
    for t in tasks {
        retries += t.await.unwrap();
    }
    let r = simple_rows(&c, "SELECT sum(bal), count(*) FROM acct").await;
    assert_eq!(r, [[Some("20000".to_string()), Some("20".to_string())]], "after {retries} retried deadlocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_statement_follows_its_table_through_drop_and_create() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    c.batch_execute("CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL)").await.unwrap();
    c.batch_execute("INSERT INTO acct VALUES (1, 10), (2, 20)").await.unwrap();
    let get = c.prepare("SELECT bal FROM acct WHERE id = $1").await.unwrap();
    let add = c.prepare("UPDATE acct SET bal = bal + $1 WHERE id = $2").await.unwrap();
    let bal = |r: tokio_postgres::Row| r.get::<_, i32>(0);
    assert_eq!(bal(c.query_one(&get, &[&2i32]).await.unwrap()), 20);
    assert_eq!(c.execute(&add, &[&5i32, &2i32]).await.unwrap(), 1);
    assert_eq!(bal(c.query_one(&get, &[&2i32]).await.unwrap()), 25);

    // The table is dropped and made again, with the columns in another order and other
    // rows: the cached plans must read and change the new table, not the old one's files.
    c.batch_execute("DROP TABLE acct").await.unwrap();
    let e = c.query_one(&get, &[&2i32]).await.unwrap_err();
    assert_eq!(code(&e), "42P01", "{e}");
    c.batch_execute("CREATE TABLE acct (note text, bal int NOT NULL, id int PRIMARY KEY)").await.unwrap();
    c.batch_execute("INSERT INTO acct VALUES ('x', 700, 2), ('y', 800, 3)").await.unwrap();
    assert_eq!(bal(c.query_one(&get, &[&2i32]).await.unwrap()), 700);
    assert_eq!(c.execute(&add, &[&1i32, &3i32]).await.unwrap(), 1);
    assert_eq!(bal(c.query_one(&get, &[&3i32]).await.unwrap()), 801);
    assert!(c.query_opt(&get, &[&1i32]).await.unwrap().is_none(), "row 1 went with the old table");
    assert_eq!(
        simple_rows(&c, "SELECT note, bal FROM acct ORDER BY id").await,
        [[Some("x".to_string()), Some("700".to_string())], [Some("y".to_string()), Some("801".to_string())]]
    );

    // TRUNCATE in between: the plans see the emptied table.
    c.batch_execute("TRUNCATE acct").await.unwrap();
    assert!(c.query_opt(&get, &[&2i32]).await.unwrap().is_none());
    assert_eq!(c.execute(&add, &[&1i32, &2i32]).await.unwrap(), 0);

    // A result type that changes under a cached plan is refused (as PostgreSQL refuses it).
    c.batch_execute("DROP TABLE acct").await.unwrap();
    c.batch_execute("CREATE TABLE acct (id int PRIMARY KEY, bal text)").await.unwrap();
    let e = c.query_opt(&get, &[&2i32]).await.unwrap_err();
    assert_eq!(code(&e), "0A000", "{e}");
}

async fn accounts(c: &Client, n: i32) {
    c.batch_execute(
        "CREATE TABLE acc (aid int PRIMARY KEY, bid int NOT NULL, abalance int NOT NULL, filler char(84))",
    )
    .await
    .unwrap();
    let values: Vec<String> = (1..=n).map(|i| format!("({i}, {}, {}, '')", i % 3, i * 10)).collect();
    c.batch_execute(&format!("INSERT INTO acc VALUES {}", values.join(", "))).await.unwrap();
}

/// pgbench's select-only and TPC-B-like statements, prepared once and run many times with
/// parameters, pipelined: tokio-postgres sends every query's Bind/Execute/Sync without
/// waiting for the previous answer, so the server reads many messages from one socket read
/// and must answer each in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_prepared_statements() {
    let f = start(Duration::from_secs(20));
    let c = f.connect().await;
    accounts(&c, 200).await;
    let get = c.prepare("SELECT abalance FROM acc WHERE aid = $1").await.unwrap();
    let add = c.prepare("UPDATE acc SET abalance = abalance + $1 WHERE aid = $2").await.unwrap();

    let reads = join_all((1..=200).rev().map(|aid: i32| {
        let (c, get) = (&c, &get);
        async move { (aid, c.query_one(get, &[&aid]).await.map(|r| r.get::<_, i32>(0))) }
    }))
    .await;
    for (aid, r) in reads {
        assert_eq!(r.unwrap(), aid * 10, "account {aid}");
    }

    // Updates and reads of the same rows pipelined: each read sees every update sent before it.
    let mut ops = Vec::new();
    for round in 1..=5i32 {
        for aid in [7i32, 8, 9] {
            ops.push((aid, Some(round)));
            ops.push((aid, None));
        }
    }
    let results = join_all(ops.iter().map(|&(aid, delta)| {
        let (c, get, add) = (&c, &get, &add);
        async move {
            match delta {
                Some(d) => c.execute(add, &[&d, &aid]).await.map(|n| n as i32),
                None => c.query_one(get, &[&aid]).await.map(|r| r.get::<_, i32>(0)),
            }
        }
    }))
    .await;
    let mut expect = std::collections::HashMap::from([(7, 70), (8, 80), (9, 90)]);
    for (&(aid, delta), r) in ops.iter().zip(results) {
        let v = r.unwrap();
        match delta {
            Some(d) => {
                assert_eq!(v, 1, "one row updated");
                *expect.get_mut(&aid).unwrap() += d;
            }
            None => assert_eq!(v, expect[&aid], "account {aid} after the updates before it"),
        }
    }

    // A wrong parameter fails only its own query of the pipeline, naming the value at fault.
    let bad = c.prepare("SELECT abalance FROM acc WHERE aid = $1::text::int").await.unwrap();
    let (a, b, d) =
        tokio::join!(c.query_one(&get, &[&1i32]), c.query_one(&bad, &[&"x1"]), c.query_one(&get, &[&2i32]));
    assert_eq!(a.unwrap().get::<_, i32>(0), 10);
    let e = b.unwrap_err();
    assert_eq!(code(&e), "22P02", "{e}");
    assert!(message(&e).contains("x1"), "{}", message(&e));
    assert_eq!(d.unwrap().get::<_, i32>(0), 20);

    // Parse errors name the table and the column.
    let e = c.prepare("SELECT abalance FROM nosuch WHERE aid = $1").await.unwrap_err();
    assert_eq!(code(&e), "42P01", "{e}");
    assert!(message(&e).contains("nosuch"), "{}", message(&e));
    let e = c.prepare("UPDATE acc SET nocol = $1 WHERE aid = $2").await.unwrap_err();
    assert_eq!(code(&e), "42703", "{e}");
    assert!(message(&e).contains("nocol"), "{}", message(&e));
    // A prepared INSERT of a duplicate key names the relation and the key.
    let ins = c.prepare("INSERT INTO acc (aid, bid, abalance) VALUES ($1, $2, $3)").await.unwrap();
    let e = c.execute(&ins, &[&5i32, &0i32, &0i32]).await.unwrap_err();
    assert_eq!(code(&e), "23505", "{e}");
    assert!(message(&e).contains("acc") && message(&e).contains('5'), "{}", message(&e));

    // In a transaction block, through the same prepared statements.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute(&add, &[&1000i32, &100i32]).await.unwrap();
    assert_eq!(c.query_one(&get, &[&100i32]).await.unwrap().get::<_, i32>(0), 2000);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(c.query_one(&get, &[&100i32]).await.unwrap().get::<_, i32>(0), 1000);
}

/// A statement that waits for a row lock holds up only its own connection: other connections'
/// prepared reads and writes and simple queries are answered while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_wait_does_not_hold_up_other_connections() {
    let f = start(Duration::from_secs(20));
    let (a, b, c) = (f.connect().await, f.connect().await, f.connect().await);
    accounts(&a, 10).await;
    let get = c.prepare("SELECT abalance FROM acc WHERE aid = $1").await.unwrap();
    let add = c.prepare("UPDATE acc SET abalance = abalance + $1 WHERE aid = $2").await.unwrap();
    a.batch_execute("BEGIN; UPDATE acc SET abalance = 1 WHERE aid = 1").await.unwrap();
    let parked = f.server.as_ref().unwrap().engine().db.lock_stats().parked_waits;
    let waiter =
        tokio::spawn(
            async move { b.batch_execute("UPDATE acc SET abalance = abalance + 5 WHERE aid = 1").await },
        );
    // Until the waiter is parked in the lock manager (it then occupies a thread).
    let deadline = Instant::now() + Duration::from_secs(15);
    while f.server.as_ref().unwrap().engine().db.lock_stats().parked_waits == parked {
        assert!(Instant::now() < deadline, "the second UPDATE never waited for the lock");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(!waiter.is_finished(), "the waiting UPDATE answered before the lock was free");
    let others = async {
        assert_eq!(c.query_one(&get, &[&2i32]).await.unwrap().get::<_, i32>(0), 20);
        assert_eq!(c.execute(&add, &[&3i32, &2i32]).await.unwrap(), 1);
        let rows = simple_rows(&c, "SELECT abalance FROM acc WHERE aid = 2").await;
        assert_eq!(rows, vec![vec![Some("23".to_string())]]);
    };
    // The lock timeout is 20 s: these answers come while the UPDATE still waits, or never.
    tokio::time::timeout(Duration::from_secs(10), others)
        .await
        .expect("other connections were answered while a statement waited for a lock");
    assert!(!waiter.is_finished(), "the waiting UPDATE answered before the lock was free");
    a.batch_execute("COMMIT").await.unwrap();
    waiter.await.unwrap().unwrap();
    assert_eq!(c.query_one(&get, &[&1i32]).await.unwrap().get::<_, i32>(0), 6);
}

/// The anomaly histories the isolation levels promise to prevent. Lost update: two
/// transactions increment the same counter; at READ COMMITTED (as in PostgreSQL) an `UPDATE
/// … SET v = v + 1` waits for the other's commit and adds to its result, and at SERIALIZABLE
/// two read-then-write increments cannot both commit (one is a deadlock victim, 40P01).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_updates_are_prevented() {
    let f = start(Duration::from_secs(20));
    let (a, b) = (f.connect().await, f.connect().await);
    a.batch_execute("CREATE TABLE counter (k int PRIMARY KEY, v int); INSERT INTO counter VALUES (1, 0)")
        .await
        .unwrap();
    let value = |rows: Vec<Vec<Option<String>>>| rows[0][0].clone().unwrap().parse::<i32>().unwrap();

    // READ COMMITTED: the second increment waits, then adds to the first's committed value.
    a.batch_execute("BEGIN").await.unwrap();
    a.batch_execute("UPDATE counter SET v = v + 1 WHERE k = 1").await.unwrap();
    let before = f.parked();
    let second = tokio::spawn(async move {
        b.batch_execute("UPDATE counter SET v = v + 1 WHERE k = 1").await.unwrap();
        b
    });
    f.until_parked(before).await;
    a.batch_execute("COMMIT").await.unwrap();
    let b = second.await.unwrap();
    assert_eq!(value(simple_rows(&a, "SELECT v FROM counter WHERE k = 1").await), 2);

    // SERIALIZABLE: both read 2 and write 3; only one of them may commit.
    for c in [&a, &b] {
        c.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").await.unwrap();
        assert_eq!(value(simple_rows(c, "SELECT v FROM counter WHERE k = 1").await), 2);
    }
    let before = f.parked();
    let first = tokio::spawn(async move {
        let r = a.batch_execute("UPDATE counter SET v = 3 WHERE k = 1").await;
        (a, r)
    });
    f.until_parked(before).await;
    let r_b = b.batch_execute("UPDATE counter SET v = 3 WHERE k = 1").await;
    let (a, r_a) = first.await.unwrap();
    let commits = one_victim([(&a, r_a), (&b, r_b)]).await;
    assert_eq!(commits, 1, "both read-then-write increments committed: a lost update");
    assert_eq!(value(simple_rows(&a, "SELECT v FROM counter WHERE k = 1").await), 3);
}

/// Read skew: a SERIALIZABLE reader of two accounts never sees half of a transfer between
/// them. The transfer's second write waits for the reader's lock, and the reader's second read
/// for the transfer's first write: a deadlock, whose victim (40P01) sees nothing inconsistent;
/// whatever the reader does see sums to the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_skew_is_prevented_at_serializable() {
    let f = start(Duration::from_secs(20));
    let (a, b) = (f.connect().await, f.connect().await);
    a.batch_execute("CREATE TABLE acct (k int PRIMARY KEY, v int); INSERT INTO acct VALUES (1, 50), (2, 50)")
        .await
        .unwrap();
    let value = |rows: Vec<Vec<Option<String>>>| rows[0][0].clone().unwrap().parse::<i32>().unwrap();
    a.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").await.unwrap();
    let x = value(simple_rows(&a, "SELECT v FROM acct WHERE k = 1").await);
    b.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").await.unwrap();
    b.batch_execute("UPDATE acct SET v = v + 10 WHERE k = 2").await.unwrap();
    let before = f.parked();
    let transfer = tokio::spawn(async move {
        let r = b.batch_execute("UPDATE acct SET v = v - 10 WHERE k = 1").await;
        (b, r)
    });
    f.until_parked(before).await;
    let y = a.simple_query("SELECT v FROM acct WHERE k = 2").await;
    let reader_ok = match &y {
        Ok(_) => true,
        Err(e) => {
            assert_eq!(code(e), "40P01", "{e:?}");
            false
        }
    };
    if reader_ok {
        let y: Vec<Vec<Option<String>>> = y
            .unwrap()
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(vec![r.get(0).map(str::to_string)]),
                _ => None,
            })
            .collect();
        assert_eq!(x + value(y), 100, "the reader saw half of the transfer");
        a.batch_execute("COMMIT").await.unwrap();
    } else {
        a.batch_execute("ROLLBACK").await.unwrap();
    }
    let (b, r) = transfer.await.unwrap();
    match r {
        Ok(()) => b.batch_execute("COMMIT").await.unwrap(),
        Err(e) => {
            assert!(reader_ok, "both transactions were deadlock victims");
            assert_eq!(code(&e), "40P01", "{e:?}");
            b.batch_execute("ROLLBACK").await.unwrap();
        }
    }
    let total = simple_rows(&b, "SELECT sum(v) FROM acct").await;
    assert_eq!(total, vec![vec![Some("100".to_string())]]);
}

/// A table of `n` rows whose three-way cross join no test waits for.
async fn big_table(c: &Client, n: i32) {
    c.batch_execute("CREATE TABLE big (id int PRIMARY KEY, v int)").await.unwrap();
    let values: Vec<String> = (0..n).map(|i| format!("({i}, {})", i % 7)).collect();
    c.batch_execute(&format!("INSERT INTO big VALUES {}", values.join(", "))).await.unwrap();
}

const ENDLESS: &str = "SELECT count(*) FROM big a, big b, big c WHERE a.v + b.v + c.v >= 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_ends_the_running_statement() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    big_table(&c, 1000).await;
    // A safety net: were the cancel lost, the statement would end by its timeout, and say so.
    c.batch_execute("SET statement_timeout = '120s'").await.unwrap();
    let token = c.cancel_token();
    let started = Instant::now();
    let q = tokio::spawn(async move {
        let r = c.simple_query(ENDLESS).await;
        (c, r)
    });
    // A cancel that arrives before the statement starts cancels nothing (as in PostgreSQL), so
    // cancels go until the statement has ended.
    while !q.is_finished() {
        token.cancel_query(NoTls).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (c, r) = q.await.unwrap();
    let e = r.expect_err("the endless statement was cancelled");
    assert_eq!(code(&e), "57014", "{e}");
    assert!(message(&e).contains("user request"), "{}", message(&e));
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    // The session goes on; the next statement is not cancelled by the old request.
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM big").await, vec![vec![Some("1000".to_string())]]);
    // The extended protocol too.
    let token = c.cancel_token();
    let q = tokio::spawn(async move {
        let r = c.query(ENDLESS, &[]).await.map(|_| ());
        (c, r)
    });
    while !q.is_finished() {
        token.cancel_query(NoTls).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (c, r) = q.await.unwrap();
    assert_eq!(code(&r.unwrap_err()), "57014");
    assert_eq!(simple_rows(&c, "SELECT count(*) FROM big WHERE v = 0").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_ends_a_long_scan() {
    let f = start(Duration::from_secs(5));
    let c = f.connect().await;
    big_table(&c, 1000).await;
    c.batch_execute("SET statement_timeout = 300").await.unwrap();
    assert_eq!(simple_rows(&c, "SHOW statement_timeout").await, vec![vec![Some("300".to_string())]]);
    let started = Instant::now();
    let e = c.simple_query(ENDLESS).await.expect_err("the statement timed out");
    assert_eq!(code(&e), "57014", "{e}");
    assert!(message(&e).contains("statement timeout"), "{}", message(&e));
    assert!(started.elapsed() >= Duration::from_millis(300), "ended after {:?}", started.elapsed());
    // The extended protocol too.
    let e = c.query(ENDLESS, &[]).await.expect_err("the prepared statement timed out");
    assert_eq!(code(&e), "57014", "{e}");
    // The timeout is per statement: short ones run.
    for _ in 0..3 {
        assert_eq!(simple_rows(&c, "SELECT count(*) FROM big WHERE v = 3").await.len(), 1);
    }
    c.batch_execute("SET statement_timeout = '1min'; SET statement_timeout = 0").await.unwrap();
    let e = c.batch_execute("SET statement_timeout = 'soon'").await.unwrap_err();
    assert_eq!(code(&e), "22023", "{e}");
}

/// A session's thread runs at the server's `session_nice` (what `nvmedb standby --serve` sets,
/// so that reads yield the CPU to the standby's log receipt and apply), read back from /proc.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_threads_run_at_the_configured_niceness() {
    let dir = TmpDir::path_only("sql-nice");
    let mut config = ServerConfig::new(dir.path());
    config.listen = "127.0.0.1:0".into();
    config.session_nice = 7;
    let f = Fixture { server: Some(Server::start(config).expect("server starts")), _dir: dir };
    let c = f.connect().await;
    // The query runs on the session's thread: it has set its priority by then.
    c.simple_query("SELECT 1").await.expect("a query");
    // Other tests of this binary run servers at the default priority in parallel: their
    // session threads show 0; this one's must show 7.
    let nices = session_nices();
    assert!(nices.contains(&7), "no session thread at niceness 7: {nices:?}");
}

/// The niceness of every thread of this process named like a session thread.
fn session_nices() -> Vec<i64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let p = t.expect("a task").path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if !comm.starts_with("nvmedb-conn-") {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(p.join("stat")) else { continue };
        // After the command's closing parenthesis come fields 3 (state) onwards; nice is 19.
        let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
        out.push(rest.split(' ').nth(16).expect("19 fields").parse().expect("a number"));
    }
    out
}
