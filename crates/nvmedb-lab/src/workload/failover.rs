//! The committing workload of an automatically failing-over cluster (`nvmedb node --clients`,
//! run by the HA experiment's failover part and the cluster harness).
//!
//! Owns: tables `acks` (id, k, epoch; index on k) and `t` (sid, c1, data), created when a node
//! bootstraps the cluster; while the node leads, each client commits transactions that insert
//! one `acks` row and set one `t` row's c1 to that row's id. Invariant: `ACK <epoch> <id> <unix
//! ns>` (parsed by `cluster::NodeEvent`) is printed only after the commit returned
//! successfully, so every printed id must survive any failover.

use nvmedb::repl::node::HaNode;
use nvmedb::{ColumnType, Database, Schema, Value};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Rows of the workload's table `t`.
pub const ROWS: i64 = 100;

/// Creates the workload's tables (bootstrap of a fresh cluster).
pub fn create_tables(db: &Database) -> nvmedb::Result<()> {
    let t = db.create_table(
        "t",
        Schema::new(vec![("sid", ColumnType::Int), ("c1", ColumnType::Int), ("data", ColumnType::Char(100))]),
    )?;
    db.create_table(
        "acks",
        Schema::new(vec![("id", ColumnType::Int), ("k", ColumnType::Int), ("epoch", ColumnType::Int)])
            .with_index("by_k", "k")?,
    )?;
    for i in 0..ROWS {
        t.insert(&[Value::Int(i), Value::Int(-1), Value::from("row")])?;
    }
    Ok(())
}

/// One client (number `c`) until `stop`: commits while the node leads and waits for leadership
/// otherwise; counts each acknowledged commit in `acked` and, with `print`, prints its `ACK`
/// line to stdout.
pub fn client(node: &HaNode, c: usize, print: bool, stop: &AtomicBool, acked: &AtomicU64) {
    let mut rng = nvmedb::util::Rng::new(nvmedb::util::Rng::seed_from_time() ^ c as u64);
    let mut seq: i64 = 0;
    while !stop.load(Ordering::Acquire) {
        let Some(lead) = node.wait_leading(Duration::from_millis(200)) else { continue };
        let (Ok(t), Ok(acks)) = (lead.db.table("t"), lead.db.table("acks")) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let epoch = lead.epoch as i64;
        while !stop.load(Ordering::Acquire) {
            seq += 1;
            let id = (epoch << 40) | ((c as i64) << 32) | seq;
            let k = rng.below(ROWS as u64) as i64;
            let mut tx = lead.db.begin();
            let r = (|| -> nvmedb::Result<()> {
                tx.insert(&acks, &[Value::Int(id), Value::Int(k), Value::Int(epoch)])?;
                tx.update_int(&t, &Value::Int(k), 1, id)?;
                Ok(())
            })();
            let r = match r {
                Ok(()) => tx.commit(),
                Err(e) => {
                    let _ = tx.abort();
                    Err(e)
                }
            };
            match r {
                Ok(()) => {
                    acked.fetch_add(1, Ordering::Relaxed);
                    if print {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_nanos());
                        let mut o = std::io::stdout().lock();
                        let _ = writeln!(o, "ACK {epoch} {id} {now}");
                        let _ = o.flush();
                    }
                }
                Err(e) if e.is_retryable() => {}
                Err(_) => break, // not leading any more (or the standbys did not confirm): drop the handles
            }
        }
    }
}
