//! The anomaly histories over the PostgreSQL protocol, two connections each: every one is
//! prevented at SERIALIZABLE (a statement waits for the other transaction, or one of them is a
//! deadlock victim, 40P01) and shown where READ COMMITTED allows it. Phantom: an INSERT into a
//! range a serializable transaction counted (primary key and secondary index) waits for it.
//! Write skew: two on-call doctors each check that the other is on call and leave; two
//! bookings of one free slot. Lost update and read skew as read-then-write histories.
//! `SHOW transaction_isolation` reports each level. Two upserts of one unique value insert
//! once (the second waits, then updates, skips or inserts as the first committed or rolled
//! back). Waits are observed in the lock manager's
//! counters, not slept for.

use std::time::Duration;
use tokio_postgres::{Client, SimpleQueryMessage};

mod common;
use common::{one_victim, Fixture};

fn start() -> Fixture {
    common::start(Duration::from_secs(30))
}

async fn int(c: &Client, sql: &str) -> i64 {
    let rows = c.simple_query(sql).await.unwrap();
    rows.into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().parse::<i64>().unwrap()),
            _ => None,
        })
        .unwrap()
}

async fn text(c: &Client, sql: &str) -> String {
    let rows = c.simple_query(sql).await.unwrap();
    rows.into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
            _ => None,
        })
        .unwrap()
}

/// Runs the statements of `sqls` on `c` in a task; its result once done.
fn spawn(
    c: Client,
    sqls: &'static str,
) -> tokio::task::JoinHandle<(Client, Result<(), tokio_postgres::Error>)> {
    tokio::spawn(async move {
        let r = c.batch_execute(sqls).await;
        (c, r)
    })
}

/// Phantom: a serializable transaction counts the rows of a range twice while another
/// connection inserts into it; the insert waits and the counts agree. At read committed the
/// insert does not wait and the second count sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phantom_inserts_wait_for_a_serializable_range_and_not_at_read_committed() {
    let f = start();
    let (a, b) = (f.connect().await, f.connect().await);
    a.batch_execute(
        "CREATE TABLE t (k int PRIMARY KEY, v int); CREATE INDEX t_v ON t (v);
         INSERT INTO t VALUES (10, 1), (20, 2), (30, 3), (40, 4)",
    )
    .await
    .unwrap();
    let cases = [
        ("SELECT count(*) FROM t WHERE k BETWEEN 15 AND 35", "INSERT INTO t VALUES (25, 100)"),
        ("SELECT count(*) FROM t WHERE k > 35", "INSERT INTO t VALUES (1000, 101)"),
        ("SELECT count(*) FROM t WHERE v BETWEEN 2 AND 3", "INSERT INTO t VALUES (5, 2)"),
        ("SELECT count(*) FROM t WHERE v = 7", "INSERT INTO t VALUES (6, 7)"),
    ];
    let mut b = Some(b);
    for (count, insert) in cases {
        a.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").await.unwrap();
        assert_eq!(text(&a, "SHOW transaction_isolation").await, "serializable");
        let n = int(&a, count).await;
        let before = f.parked();
        let w = spawn(b.take().unwrap(), insert);
        f.until_parked(before).await;
        assert_eq!(int(&a, count).await, n, "a phantom appeared in `{count}`");
        a.batch_execute("COMMIT").await.unwrap();
        let (c, r) = w.await.unwrap();
        r.unwrap();
        b = Some(c);
        assert_eq!(int(&a, count).await, n + 1);
    }
    // Read committed: the insert goes through at once and the second count sees it.
    let b = b.unwrap();
    a.batch_execute("BEGIN").await.unwrap();
    assert_eq!(text(&a, "SHOW transaction_isolation").await, "read committed");
    let n = int(&a, "SELECT count(*) FROM t WHERE k BETWEEN 15 AND 35").await;
    b.batch_execute("INSERT INTO t VALUES (26, 0)").await.unwrap();
    assert_eq!(int(&a, "SELECT count(*) FROM t WHERE k BETWEEN 15 AND 35").await, n + 1);
    a.batch_execute("COMMIT").await.unwrap();
}

/// Write skew, the on-call doctors: each of two doctors checks that two are on call and
/// takes themself off. Serializable: one is a deadlock victim and one doctor stays on call.
/// Read committed lets both leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_call_write_skew_is_prevented_at_serializable_and_allowed_at_read_committed() {
    let f = start();
    let (mut a, b) = (f.connect().await, f.connect().await);
    a.batch_execute(
        "CREATE TABLE doctors (id int PRIMARY KEY, shift int, on_call boolean);
         CREATE INDEX doctors_shift ON doctors (shift)",
    )
    .await
    .unwrap();
    for level in ["SERIALIZABLE", "READ COMMITTED"] {
        a.batch_execute("DELETE FROM doctors; INSERT INTO doctors VALUES (1, 1, true), (2, 1, true)")
            .await
            .unwrap();
        for c in [&a, &b] {
            c.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")).await.unwrap();
            assert_eq!(int(c, "SELECT count(*) FROM doctors WHERE shift = 1 AND on_call").await, 2);
        }
        let before = f.parked();
        let a_leaves = spawn(a, "UPDATE doctors SET on_call = false WHERE id = 1");
        if level == "SERIALIZABLE" {
            f.until_parked(before).await;
        }
        let r_b = b.batch_execute("UPDATE doctors SET on_call = false WHERE id = 2").await;
        let (a2, r_a) = a_leaves.await.unwrap();
        a = a2;
        let commits = one_victim([(&a, r_a), (&b, r_b)]).await;
        let on_call = int(&a, "SELECT count(*) FROM doctors WHERE shift = 1 AND on_call").await;
        if level == "SERIALIZABLE" {
            assert_eq!((commits, on_call), (1, 1), "both doctors left the shift");
        } else {
            assert_eq!((commits, on_call), (2, 0), "read committed lets both leave");
        }
    }
}

/// Write skew built on a phantom: two transactions each find a slot free (no row matches)
/// and book it. Serializable: the second INSERT closes a wait-for cycle through the two range
/// locks, one is a deadlock victim, one booking remains. Read committed books twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_booking_is_prevented_at_serializable_and_allowed_at_read_committed() {
    let f = start();
    let (mut a, b) = (f.connect().await, f.connect().await);
    a.batch_execute("CREATE TABLE booking (id int PRIMARY KEY, room int, slot int); CREATE INDEX booking_room ON booking (room)")
        .await
        .unwrap();
    for (level, id) in [("SERIALIZABLE", 0), ("READ COMMITTED", 10)] {
        for c in [&a, &b] {
            c.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")).await.unwrap();
            assert_eq!(int(c, &format!("SELECT count(*) FROM booking WHERE room = {}", 7 + id)).await, 0);
        }
        let before = f.parked();
        let a_books = spawn(
            a,
            if id == 0 {
                "INSERT INTO booking VALUES (1, 7, 1)"
            } else {
                "INSERT INTO booking VALUES (11, 17, 1)"
            },
        );
        if level == "SERIALIZABLE" {
            f.until_parked(before).await;
        }
        let r_b = b.batch_execute(&format!("INSERT INTO booking VALUES ({}, {}, 1)", 2 + id, 7 + id)).await;
        let (a2, r_a) = a_books.await.unwrap();
        a = a2;
        let commits = one_victim([(&a, r_a), (&b, r_b)]).await;
        let booked = int(&a, &format!("SELECT count(*) FROM booking WHERE room = {}", 7 + id)).await;
        if level == "SERIALIZABLE" {
            assert_eq!((commits, booked), (1, 1), "the slot was booked twice");
        } else {
            assert_eq!((commits, booked), (2, 2), "read committed books the slot twice");
        }
    }
}

/// Lost update and read skew where read committed allows them (plain reads take no lock):
/// a read-then-write increment loses the other's, and a reader sees half of a transfer. The
/// serializable side of both is `pg_client.rs`' `lost_updates_are_prevented` and
/// `read_skew_is_prevented_at_serializable`; `SHOW transaction_isolation` names every level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_allows_lost_update_and_read_skew() {
    let f = start();
    let (a, b) = (f.connect().await, f.connect().await);
    a.batch_execute("CREATE TABLE acct (k int PRIMARY KEY, v int); INSERT INTO acct VALUES (1, 50), (2, 50)")
        .await
        .unwrap();
    for (level, shown) in [
        ("READ COMMITTED", "read committed"),
        ("REPEATABLE READ", "repeatable read"),
        ("SERIALIZABLE", "serializable"),
    ] {
        a.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")).await.unwrap();
        assert_eq!(text(&a, "SHOW transaction_isolation").await, shown);
        a.batch_execute("ROLLBACK").await.unwrap();
    }
    assert_eq!(text(&a, "SHOW transaction_isolation").await, "read committed");

    // Lost update: both read 50, both write 51.
    for c in [&a, &b] {
        c.batch_execute("BEGIN").await.unwrap();
        assert_eq!(int(c, "SELECT v FROM acct WHERE k = 1").await, 50);
    }
    a.batch_execute("UPDATE acct SET v = 51 WHERE k = 1; COMMIT").await.unwrap();
    b.batch_execute("UPDATE acct SET v = 51 WHERE k = 1; COMMIT").await.unwrap();
    assert_eq!(int(&a, "SELECT v FROM acct WHERE k = 1").await, 51, "one increment lost");

    // Read skew: the reader reads account 1, a transfer of 10 commits, the reader reads 2.
    a.batch_execute("BEGIN").await.unwrap();
    let x = int(&a, "SELECT v FROM acct WHERE k = 1").await;
    b.batch_execute(
        "BEGIN; UPDATE acct SET v = v - 10 WHERE k = 1; UPDATE acct SET v = v + 10 WHERE k = 2; COMMIT",
    )
    .await
    .unwrap();
    let y = int(&a, "SELECT v FROM acct WHERE k = 2").await;
    a.batch_execute("COMMIT").await.unwrap();
    assert_eq!(x + y, 111, "the reader saw the transfer's credit without its debit");
}

/// Two sessions upsert one value of a unique index (not the primary key). The second waits
/// for the first: when the first commits, the second finds its row and updates it (DO UPDATE)
/// or skips (DO NOTHING); when the first rolls back, the second inserts. Never two rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_upserts_of_one_unique_value_insert_once() {
    let f = start();
    let (a, b) = (f.connect().await, f.connect().await);
    a.batch_execute("CREATE TABLE u (id int PRIMARY KEY, email text UNIQUE, hits int NOT NULL)")
        .await
        .unwrap();
    let mut b = Some(b);
    let rounds = [
        ("x", "COMMIT", "DO UPDATE SET hits = u.hits + EXCLUDED.hits", "1 11"),
        ("y", "ROLLBACK", "DO UPDATE SET hits = u.hits + EXCLUDED.hits", "2 10"),
        ("z", "COMMIT", "DO NOTHING", "1 1"),
    ];
    for (n, (email, end, action, want)) in rounds.into_iter().enumerate() {
        let (id1, id2) = (10 * n + 1, 10 * n + 2);
        a.batch_execute("BEGIN").await.unwrap();
        a.batch_execute(&format!("INSERT INTO u VALUES ({id1}, '{email}', 1) ON CONFLICT (email) {action}"))
            .await
            .unwrap();
        let before = f.parked();
        let sql = format!("INSERT INTO u VALUES ({id2}, '{email}', 10) ON CONFLICT (email) {action}");
        let w = spawn(b.take().unwrap(), Box::leak(sql.into_boxed_str()));
        f.until_parked(before).await;
        a.batch_execute(end).await.unwrap();
        let (c, r) = w.await.unwrap();
        r.unwrap();
        b = Some(c);
        assert_eq!(int(&a, &format!("SELECT count(*) FROM u WHERE email = '{email}'")).await, 1, "{email}");
        let got = text(
            &a,
            &format!("SELECT (id - {})::text || ' ' || hits::text FROM u WHERE email = '{email}'", 10 * n),
        )
        .await;
        assert_eq!(got, want, "{email} after {end}, {action}");
    }
}
