//! The consistency conditions of §3.3.2 catch a broken database: each damage (a district row
//! whose D_NEXT_O_ID or D_YTD is off, an order line gone, a new order gone) fails exactly the
//! condition it breaks, naming the warehouse and district; undoing the damage passes again.

use nvmedb::io::MemStorage;
use nvmedb::{Database, Options, Value};
use nvmedb_lab::workload::tpcc::check::violation;
use nvmedb_lab::workload::tpcc::schema as s;
use nvmedb_lab::workload::tpcc::{check_consistency, load, Scale, Tables};
use nvmedb_lab::LabError;
use std::sync::Arc;

/// A loaded database and its tables (the handle is kept: tables of a closed database fail).
fn loaded() -> (Database, Tables) {
    let db = Database::open_with_storage(
        Arc::new(MemStorage::new()),
        Options { wal: false, ..Options::default() },
    )
    .unwrap();
    load(&db, &Scale::reduced(2), 11, 2, false).unwrap();
    let t = Tables::open(&db).unwrap();
    check_consistency(&t).expect("a fresh load is consistent");
    (db, t)
}

fn expect_failure(t: &Tables, condition: u8, warehouse: u32, district: Option<u32>) -> String {
    match check_consistency(t) {
        Err(e @ LabError::Inconsistent { .. }) => {
            let msg = e.to_string();
            // The message names the condition, the warehouse and the district, and nothing else
            // (a failure elsewhere would name another place).
            assert!(msg.starts_with(&format!("{}:", violation(condition, warehouse, district))), "{msg}");
            msg
        }
        other => panic!("expected condition {condition} to fail, got {other:?}"),
    }
}

fn bump(t: &nvmedb::Table, key: i64, col: usize, by: i64) {
    let mut row = t.get(&Value::Int(key)).unwrap().unwrap();
    row[col] = Value::Int(row[col].as_int().unwrap() + by);
    assert!(t.update(&row).unwrap());
}

#[test]
fn a_district_whose_next_order_id_is_off_fails_condition_2() {
    let (_db, t) = loaded();
    let key = s::district_key(2, 3);
    bump(&t.district, key, s::district::NEXT_O_ID, 1);
    let msg = expect_failure(&t, 2, 2, Some(3));
    assert!(msg.contains("D_NEXT_O_ID - 1 = 31") && msg.contains("max(O_ID) = 30"), "{msg}");
    bump(&t.district, key, s::district::NEXT_O_ID, -1);
    check_consistency(&t).unwrap();
}

#[test]
fn a_district_whose_ytd_is_off_fails_condition_1() {
    let (_db, t) = loaded();
    bump(&t.district, s::district_key(1, 7), s::district::YTD, 5);
    let msg = expect_failure(&t, 1, 1, None);
    assert!(msg.contains("W_YTD = 300000.00 but the sum of D_YTD = 300000.05"), "{msg}");
}

#[test]
fn a_lost_order_line_fails_condition_4() {
    let (_db, t) = loaded();
    let key = s::order_line_key(1, 5, 12, 2);
    let row = t.order_line.get(&Value::Int(key)).unwrap().expect("every order has at least 5 lines");
    assert!(t.order_line.delete(&Value::Int(key)).unwrap());
    let msg = expect_failure(&t, 4, 1, Some(5));
    assert!(msg.contains("ORDER-LINE rows"), "{msg}");
    t.order_line.insert(&row).unwrap();
    check_consistency(&t).unwrap();
}

#[test]
fn a_hole_in_the_new_orders_fails_condition_3() {
    let (_db, t) = loaded();
    // Reduced scale: orders 22..=30 of each district are new; remove one in the middle.
    assert!(t.new_order.delete(&Value::Int(s::order_key(2, 10, 25))).unwrap());
    let msg = expect_failure(&t, 3, 2, Some(10));
    assert!(msg.contains("8 NEW-ORDER rows"), "{msg}");
}

#[test]
fn a_lost_newest_new_order_fails_condition_2() {
    let (_db, t) = loaded();
    assert!(t.new_order.delete(&Value::Int(s::order_key(1, 1, 30))).unwrap());
    let msg = expect_failure(&t, 2, 1, Some(1));
    assert!(msg.contains("max(NO_O_ID) = 29"), "{msg}");
}
