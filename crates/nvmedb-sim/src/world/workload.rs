//! The clients' transactions of a simulated run, and the reads of what a node's database holds
//! that the checks compare with what was acknowledged.

use super::KEYS_PER_CLIENT;
use nvmedb::{ColumnType, Database, Schema, Transaction, Value};
use std::collections::BTreeSet;

pub(super) fn create_tables(db: &Database, clients: usize) -> nvmedb::Result<()> {
    let t = db.create_table(
        "t",
        Schema::new(vec![("k", ColumnType::Int), ("val", ColumnType::Int), ("pad", ColumnType::Char(60))]),
    )?;
    for k in 0..(clients as i64 * KEYS_PER_CLIENT).max(1) {
        t.insert(&[Value::Int(k), Value::Int(0), Value::from("t")])?;
    }
    db.create_table(
        "acks",
        Schema::new(vec![("id", ColumnType::Int), ("k", ColumnType::Int), ("node", ColumnType::Int)])
            .with_index("by_k", "k")?,
    )?;
    db.create_table("gone", Schema::new(vec![("id", ColumnType::Int)]))?;
    Ok(())
}

/// Inserts `acks` row `id` and points `t` row `k` at it, in one transaction. An error says
/// whether the commit had begun (outcome unknown) or not (nothing was committed).
pub(super) fn insert_tx(db: &Database, id: i64, k: i64, node: usize) -> Result<(), (nvmedb::Error, bool)> {
    let (t, acks) = match (db.table("t"), db.table("acks")) {
        (Ok(t), Ok(a)) => (t, a),
        (Err(e), _) | (_, Err(e)) => return Err((e, false)),
    };
    in_tx(db, |tx| {
        tx.insert(&acks, &[Value::Int(id), Value::Int(k), Value::Int(node as i64)])?;
        tx.update_int(&t, &Value::Int(k), 1, id)?;
        Ok(())
    })
}

/// Deletes `acks` row `id` and records it in `gone`, in one transaction.
pub(super) fn delete_tx(db: &Database, id: i64) -> Result<(), (nvmedb::Error, bool)> {
    let (acks, gone) = match (db.table("acks"), db.table("gone")) {
        (Ok(a), Ok(g)) => (a, g),
        (Err(e), _) | (_, Err(e)) => return Err((e, false)),
    };
    in_tx(db, |tx| {
        tx.delete(&acks, &Value::Int(id))?;
        tx.insert(&gone, &[Value::Int(id)])?;
        Ok(())
    })
}

/// Runs `body` in one transaction and commits it; aborts it if `body` fails. An error says
/// whether the commit had begun (outcome unknown) or not (nothing was committed).
fn in_tx(
    db: &Database,
    body: impl FnOnce(&mut Transaction) -> nvmedb::Result<()>,
) -> Result<(), (nvmedb::Error, bool)> {
    let mut tx = db.begin();
    match body(&mut tx) {
        Ok(()) => tx.commit().map_err(|e| (e, true)),
        Err(e) => {
            let _ = tx.abort();
            Err((e, false))
        }
    }
}

/// The ids in `acks` and in `gone`.
pub fn read_ids(db: &Database) -> nvmedb::Result<(BTreeSet<i64>, BTreeSet<i64>)> {
    let mut acks = BTreeSet::new();
    db.table("acks")?.scan(|r| {
        acks.insert(r.int(0));
        Ok(true)
    })?;
    let mut gone = BTreeSet::new();
    db.table("gone")?.scan(|r| {
        gone.insert(r.int(0));
        Ok(true)
    })?;
    Ok((acks, gone))
}
