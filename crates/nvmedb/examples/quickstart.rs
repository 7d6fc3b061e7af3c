//! A first nvmedb program: create a database in a directory, a table with a secondary index,
//! change rows in transactions, read them back, and reopen.
//!
//! Run: `cargo run -p nvmedb --example quickstart -- /tmp/nvmedb-quickstart`

use nvmedb::{ColumnType, Database, Options, Schema, Value};

fn main() -> nvmedb::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "nvmedb-quickstart".into());
    let db = Database::open(&dir, Options::default())?;
    let accounts = match db.table("accounts") {
        Ok(t) => t,
        Err(_) => {
            let schema = Schema::new(vec![
                ("id", ColumnType::Int),
                ("balance", ColumnType::Int),
                ("owner", ColumnType::Bytes(64)),
            ])
            .with_index("by_owner", "owner")?;
            db.create_table("accounts", schema)?
        }
    };

    // One row per statement: each change is its own durable transaction.
    for (id, owner) in [(1, "ada"), (2, "grace"), (3, "ada")] {
        if accounts.get(&Value::Int(id))?.is_none() {
            accounts.insert(&[Value::Int(id), Value::Int(100), Value::from(owner)])?;
        }
    }

    // A transfer: both updates or neither; retry when chosen as a deadlock victim.
    loop {
        let mut tx = db.begin();
        let result = (|| {
            let from = tx.get_for_update(&accounts, &Value::Int(1))?.expect("account 1");
            let to = tx.get_for_update(&accounts, &Value::Int(2))?.expect("account 2");
            tx.update(
                &accounts,
                &[from[0].clone(), Value::Int(from[1].as_int().unwrap_or(0) - 10), from[2].clone()],
            )?;
            tx.update(
                &accounts,
                &[to[0].clone(), Value::Int(to[1].as_int().unwrap_or(0) + 10), to[2].clone()],
            )?;
            Ok::<_, nvmedb::Error>(())
        })();
        match result {
            Ok(()) => break tx.commit()?,
            Err(e) if e.is_retryable() => tx.abort()?,
            Err(e) => return Err(e),
        }
    }

    // Zero-copy point read, secondary-index lookup, range scan.
    let balance = accounts.read(&Value::Int(1), |row| row.int(1))?;
    println!("account 1 balance: {balance:?}");
    println!("ada owns {} account(s)", accounts.lookup("by_owner", &Value::from("ada"))?.len());
    accounts.range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |row| {
        println!("  {:?}", row.to_values());
        Ok(true)
    })?;
    db.close()?;

    // Reopen: everything committed is there.
    let db = Database::open(&dir, Options::default())?;
    println!("after reopen: {:?}", db.table("accounts")?.get(&Value::Int(2))?);
    db.close()
}
