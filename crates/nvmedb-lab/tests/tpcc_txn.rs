//! The five TPC-C transactions on a tiny hand-made database, each checked against effects
//! computed by hand from the specification (§2.4–§2.8); rollbacks and lock retries leave
//! nothing behind; a concurrent mix keeps every consistency condition and index.
//!
//! The fixture: warehouses 1 and 2 (W_TAX 0.1000), two districts each (D_TAX 0.0500, D_YTD
//! 10.00, W_YTD 20.00). District (1, 1) has customers 1 ALICE, 2 BOB (credit BC), 3 CARL
//! (all BARBARBAR) and 4 DAVE OUGHTBARBAR, each with balance -10.00; orders 1 (customer 1,
//! delivered, 2 lines), 2 (customer 2, 1 line of 5.00) and 3 (customer 1, lines of 1.00 and
//! 2.00), orders 2 and 3 undelivered; D_NEXT_O_ID 4. Items 1–3 cost 1.00, 2.50 and 9.99;
//! stock of warehouse 1: 50, 11, 20; of warehouse 2: 30, 11, 40.

use nvmedb::io::MemStorage;
use nvmedb::txn::LockOptions;
use nvmedb::{ColumnType, Database, Options, Value};
use nvmedb_lab::workload::tpcc::input::{
    CustomerBy, DeliveryInput, NewOrderInput, OrderLineInput, OrderStatusInput, PaymentInput, StockLevelInput,
};
use nvmedb_lab::workload::tpcc::random::last_name;
use nvmedb_lab::workload::tpcc::schema::{self as s, schema, Tables};
use nvmedb_lab::workload::tpcc::txn::{execute, execute_with_retries, Context, TxnOutput};
use nvmedb_lab::workload::tpcc::{check_consistency, load, NuConstants, Scale, Terminal, TpccRng, TxnInput};
use std::sync::Arc;
use std::time::Duration;

/// A row of `table` with every column zero or empty.
fn blank(table: &str) -> Vec<Value> {
    schema(table)
        .unwrap()
        .columns
        .iter()
        .map(|c| match c.ty {
            ColumnType::Int => Value::Int(0),
            _ => Value::Bytes(Vec::new()),
        })
        .collect()
}

fn set(mut row: Vec<Value>, fields: &[(usize, Value)]) -> Vec<Value> {
    for (c, v) in fields {
        row[*c] = v.clone();
    }
    row
}

fn int(v: i64) -> Value {
    Value::Int(v)
}

fn fixture(lock_timeout: Duration) -> Context {
    let opts = Options {
        lock_options: LockOptions { lock_timeout, ..LockOptions::default() },
        ..Options::default()
    };
    let mem = || Arc::new(MemStorage::new());
    let db = Database::open_with_storages(mem(), Some((mem(), mem())), opts).unwrap();
    let t = Tables::create(&db).unwrap();
    for w in 1..=2u32 {
        let name = Value::from(format!("W{w}NAME").as_str());
        t.warehouse
            .insert(&set(
                blank("warehouse"),
                &[
                    (s::warehouse::ID, int(w.into())),
                    (s::warehouse::NAME, name),
                    (s::warehouse::TAX, int(1000)),
                    (s::warehouse::YTD, int(2000)),
                ],
            ))
            .unwrap();
        for d in 1..=2u32 {
            let next = if (w, d) == (1, 1) { 4 } else { 1 };
            t.district
                .insert(&set(
                    blank("district"),
                    &[
                        (s::district::KEY, int(s::district_key(w, d))),
                        (s::district::ID, int(d.into())),
                        (s::district::W_ID, int(w.into())),
                        (s::district::NAME, Value::from(format!("D{d}NAME").as_str())),
                        (s::district::TAX, int(500)),
                        (s::district::YTD, int(1000)),
                        (s::district::NEXT_O_ID, int(next)),
                    ],
                ))
                .unwrap();
        }
        for (i, q) in [(1u32, [50, 30]), (2, [11, 11]), (3, [20, 40])] {
            t.stock
                .insert(&set(
                    blank("stock"),
                    &[
                        (s::stock::KEY, int(s::stock_key(w, i))),
                        (s::stock::I_ID, int(i.into())),
                        (s::stock::W_ID, int(w.into())),
                        (s::stock::QUANTITY, int(q[w as usize - 1])),
                        (s::stock::DIST_01, Value::from(format!("dist-w{w}-i{i}-d01").as_str())),
                        (s::stock::DIST_01 + 1, Value::from(format!("dist-w{w}-i{i}-d02").as_str())),
                    ],
                ))
                .unwrap();
        }
    }
    for (i, price) in [(1, 100), (2, 250), (3, 999)] {
        t.item.insert(&set(blank("item"), &[(s::item::ID, int(i)), (s::item::PRICE, int(price))])).unwrap();
    }
    let bar = last_name(0);
    assert_eq!(bar, b"BARBARBAR");
    for (c, first, last, credit, discount) in [
        (1u32, "ALICE", bar.clone(), "GC", 1000),
        (2, "BOB", bar.clone(), "BC", 0),
        (3, "CARL", bar.clone(), "GC", 0),
        (4, "DAVE", last_name(100), "GC", 0),
    ] {
        t.customer
            .insert(&set(
                blank("customer"),
                &[
                    (s::customer::KEY, int(s::customer_key(1, 1, c))),
                    (s::customer::ID, int(c.into())),
                    (s::customer::D_ID, int(1)),
                    (s::customer::W_ID, int(1)),
                    (s::customer::FIRST, Value::from(first)),
                    (s::customer::LAST, Value::Bytes(last.clone())),
                    (s::customer::CREDIT, Value::from(credit)),
                    (s::customer::DISCOUNT, int(discount)),
                    (s::customer::BALANCE, int(-1000)),
                    (s::customer::YTD_PAYMENT, int(1000)),
                    (s::customer::PAYMENT_CNT, int(1)),
                    (s::customer::DATA, Value::from("old data")),
                    (
                        s::customer::NAME_KEY,
                        Value::Bytes(s::customer_name_key(1, 1, &last, first.as_bytes())),
                    ),
                ],
            ))
            .unwrap();
    }
    // Orders of district (1, 1): (o, customer, carrier, [(item, amount, delivery)]).
    for (o, c, carrier, lines) in [
        (1i64, 1u32, 3, vec![(1, 0, 111), (2, 0, 111)]),
        (2, 2, 0, vec![(3, 500, 0)]),
        (3, 1, 0, vec![(1, 100, 0), (3, 200, 0)]),
    ] {
        t.orders
            .insert(&set(
                blank("orders"),
                &[
                    (s::orders::KEY, int(s::order_key(1, 1, o))),
                    (s::orders::ID, int(o)),
                    (s::orders::D_ID, int(1)),
                    (s::orders::W_ID, int(1)),
                    (s::orders::C_ID, int(c.into())),
                    (s::orders::CARRIER_ID, int(carrier)),
                    (s::orders::OL_CNT, int(lines.len() as i64)),
                    (s::orders::ALL_LOCAL, int(1)),
                    (s::orders::CUSTOMER_KEY, int(s::order_customer_key(1, 1, c, o))),
                ],
            ))
            .unwrap();
        for (n, (item, amount, delivery)) in lines.into_iter().enumerate() {
            let n = n as u32 + 1;
            t.order_line
                .insert(&set(
                    blank("order_line"),
                    &[
                        (s::order_line::KEY, int(s::order_line_key(1, 1, o, n))),
                        (s::order_line::O_ID, int(o)),
                        (s::order_line::D_ID, int(1)),
                        (s::order_line::W_ID, int(1)),
                        (s::order_line::NUMBER, int(n.into())),
                        (s::order_line::I_ID, int(item)),
                        (s::order_line::SUPPLY_W_ID, int(1)),
                        (s::order_line::DELIVERY_D, int(delivery)),
                        (s::order_line::QUANTITY, int(5)),
                        (s::order_line::AMOUNT, int(amount)),
                    ],
                ))
                .unwrap();
        }
        if carrier == 0 {
            t.new_order.insert(&[int(s::order_key(1, 1, o)), int(o), int(1), int(1)]).unwrap();
        }
    }
    check_consistency(&t).expect("the fixture is consistent");
    Context::new(db, t).unwrap()
}

fn get(ctx: &Context, table: &str, key: i64) -> Option<Vec<Value>> {
    let t = ctx.tables.all().into_iter().find(|(n, _)| *n == table).unwrap().1.clone();
    t.get(&int(key)).unwrap()
}

fn col(ctx: &Context, table: &str, key: i64, c: usize) -> i64 {
    get(ctx, table, key).unwrap_or_else(|| panic!("{table} has no row {key}"))[c].as_int().unwrap()
}

fn bytes(ctx: &Context, table: &str, key: i64, c: usize) -> Vec<u8> {
    get(ctx, table, key).unwrap()[c].as_bytes().unwrap().to_vec()
}

fn rows(ctx: &Context, table: &str) -> u64 {
    let t = ctx.tables.all().into_iter().find(|(n, _)| *n == table).unwrap().1.clone();
    let mut n = 0;
    t.scan(|_| {
        n += 1;
        Ok(true)
    })
    .unwrap();
    n
}

fn line(item: u32, supply_w: u32, quantity: u32) -> OrderLineInput {
    OrderLineInput { item, supply_w, quantity }
}

#[test]
fn new_order_enters_the_order_and_takes_stock() {
    let ctx = fixture(Duration::from_secs(5));
    let input = NewOrderInput { w: 1, d: 1, c: 1, lines: vec![line(1, 1, 3), line(2, 2, 2)] };
    let out = execute(&ctx, &TxnInput::NewOrder(input)).unwrap();
    // Σ OL_AMOUNT = 3 × 1.00 + 2 × 2.50 = 8.00; × (1 − 0.10) × (1 + 0.10 + 0.05) = 8.28.
    assert_eq!(out, TxnOutput::NewOrder { o_id: 4, total: 828, lines: 2, rolled_back: false });
    assert_eq!(col(&ctx, "district", s::district_key(1, 1), s::district::NEXT_O_ID), 5);
    let o = get(&ctx, "orders", s::order_key(1, 1, 4)).unwrap();
    assert_eq!(o[s::orders::C_ID], int(1));
    assert_eq!(o[s::orders::CARRIER_ID], int(0));
    assert_eq!(o[s::orders::OL_CNT], int(2));
    assert_eq!(o[s::orders::ALL_LOCAL], int(0), "line 2 comes from warehouse 2");
    assert_eq!(o[s::orders::CUSTOMER_KEY], int(s::order_customer_key(1, 1, 1, 4)));
    assert!(get(&ctx, "new_order", s::order_key(1, 1, 4)).is_some());
    let ol1 = get(&ctx, "order_line", s::order_line_key(1, 1, 4, 1)).unwrap();
    assert_eq!(
        (&ol1[s::order_line::I_ID], &ol1[s::order_line::SUPPLY_W_ID], &ol1[s::order_line::QUANTITY]),
        (&int(1), &int(1), &int(3))
    );
    assert_eq!(ol1[s::order_line::AMOUNT], int(300));
    assert_eq!(ol1[s::order_line::DELIVERY_D], int(0));
    assert_eq!(&ol1[s::order_line::DIST_INFO].as_bytes().unwrap()[..16], b"dist-w1-i1-d01\0\0");
    let ol2 = get(&ctx, "order_line", s::order_line_key(1, 1, 4, 2)).unwrap();
    assert_eq!(ol2[s::order_line::AMOUNT], int(500));
    assert_eq!(&ol2[s::order_line::DIST_INFO].as_bytes().unwrap()[..14], b"dist-w2-i2-d01");
    // Stock (1, 1): 50 ≥ 3 + 10, so 50 − 3 = 47. Stock (2, 2): 11 < 2 + 10, so 11 − 2 + 91 = 100.
    let k11 = s::stock_key(1, 1);
    assert_eq!(col(&ctx, "stock", k11, s::stock::QUANTITY), 47);
    assert_eq!(col(&ctx, "stock", k11, s::stock::YTD), 3);
    assert_eq!(col(&ctx, "stock", k11, s::stock::ORDER_CNT), 1);
    assert_eq!(col(&ctx, "stock", k11, s::stock::REMOTE_CNT), 0);
    let k22 = s::stock_key(2, 2);
    assert_eq!(col(&ctx, "stock", k22, s::stock::QUANTITY), 100);
    assert_eq!(col(&ctx, "stock", k22, s::stock::YTD), 2);
    assert_eq!(col(&ctx, "stock", k22, s::stock::REMOTE_CNT), 1);
    assert_eq!(col(&ctx, "stock", s::stock_key(1, 2), s::stock::QUANTITY), 11, "untouched");
    check_consistency(&ctx.tables).unwrap();
}

#[test]
fn new_order_with_an_unused_item_rolls_back_everything() {
    let ctx = fixture(Duration::from_secs(5));
    let before: Vec<u64> = s::TABLE_NAMES.iter().map(|t| rows(&ctx, t)).collect();
    let input = NewOrderInput { w: 1, d: 1, c: 1, lines: vec![line(1, 1, 3), line(4, 1, 1)] };
    let out = execute(&ctx, &TxnInput::NewOrder(input)).unwrap();
    assert_eq!(out, TxnOutput::NewOrder { o_id: 4, total: 0, lines: 1, rolled_back: true });
    assert_eq!(col(&ctx, "district", s::district_key(1, 1), s::district::NEXT_O_ID), 4);
    assert_eq!(col(&ctx, "stock", s::stock_key(1, 1), s::stock::QUANTITY), 50);
    assert!(get(&ctx, "orders", s::order_key(1, 1, 4)).is_none());
    let after: Vec<u64> = s::TABLE_NAMES.iter().map(|t| rows(&ctx, t)).collect();
    assert_eq!(before, after);
    check_consistency(&ctx.tables).unwrap();
    for (name, t) in ctx.tables.all() {
        t.check_integrity().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn payment_by_id_moves_the_money_and_writes_history() {
    let ctx = fixture(Duration::from_secs(5));
    let input = PaymentInput { w: 1, d: 1, c_w: 1, c_d: 1, customer: CustomerBy::Id(3), amount: 12_345 };
    let out = execute(&ctx, &TxnInput::Payment(input)).unwrap();
    assert_eq!(out, TxnOutput::Payment { c_id: 3, balance: -1000 - 12_345 });
    assert_eq!(col(&ctx, "warehouse", 1, s::warehouse::YTD), 2000 + 12_345);
    assert_eq!(col(&ctx, "district", s::district_key(1, 1), s::district::YTD), 1000 + 12_345);
    let c = s::customer_key(1, 1, 3);
    assert_eq!(col(&ctx, "customer", c, s::customer::YTD_PAYMENT), 1000 + 12_345);
    assert_eq!(col(&ctx, "customer", c, s::customer::PAYMENT_CNT), 2);
    assert_eq!(bytes(&ctx, "customer", c, s::customer::DATA), b"old data", "good credit: C_DATA unchanged");
    let mut hist = Vec::new();
    ctx.tables
        .history
        .scan(|r| {
            hist.push((
                r.int(s::history::C_ID),
                r.int(s::history::AMOUNT),
                r.bytes(s::history::DATA).to_vec(),
            ));
            Ok(true)
        })
        .unwrap();
    assert_eq!(hist, [(3, 12_345, b"W1NAME    D1NAME".to_vec())]);
    check_consistency(&ctx.tables).unwrap();
}

#[test]
fn remote_payment_by_last_name_picks_the_middle_customer_and_notes_bad_credit() {
    let ctx = fixture(Duration::from_secs(5));
    // Warehouse 2 takes a payment for a customer of district (1, 1) called BARBARBAR: ALICE,
    // BOB, CARL in first-name order; the middle (position ⌈3/2⌉ = 2) is BOB, who has BC credit.
    let input = PaymentInput {
        w: 2,
        d: 1,
        c_w: 1,
        c_d: 1,
        customer: CustomerBy::LastName(last_name(0)),
        amount: 12_345,
    };
    let out = execute(&ctx, &TxnInput::Payment(input)).unwrap();
    assert_eq!(out, TxnOutput::Payment { c_id: 2, balance: -13_345 });
    assert_eq!(col(&ctx, "warehouse", 2, s::warehouse::YTD), 2000 + 12_345);
    assert_eq!(col(&ctx, "warehouse", 1, s::warehouse::YTD), 2000);
    assert_eq!(col(&ctx, "district", s::district_key(2, 1), s::district::YTD), 1000 + 12_345);
    // C_ID C_D_ID C_W_ID D_ID W_ID H_AMOUNT, then the old data.
    assert_eq!(
        bytes(&ctx, "customer", s::customer_key(1, 1, 2), s::customer::DATA),
        b"2 1 1 1 2 123.45 | old data"
    );
    // A name with one customer selects it; Order-Status by name reads the same middle one.
    let out = execute(
        &ctx,
        &TxnInput::Payment(PaymentInput {
            w: 1,
            d: 2,
            c_w: 1,
            c_d: 1,
            customer: CustomerBy::LastName(last_name(100)),
            amount: 100,
        }),
    )
    .unwrap();
    assert_eq!(out, TxnOutput::Payment { c_id: 4, balance: -1100 });
    check_consistency(&ctx.tables).unwrap();
}

#[test]
fn order_status_shows_the_last_order_of_the_customer() {
    let ctx = fixture(Duration::from_secs(5));
    let by_name = OrderStatusInput { w: 1, d: 1, customer: CustomerBy::LastName(last_name(0)) };
    assert_eq!(
        execute(&ctx, &TxnInput::OrderStatus(by_name)).unwrap(),
        TxnOutput::OrderStatus { c_id: 2, balance: -1000, o_id: Some(2), carrier: 0, lines: 1 }
    );
    // Customer 1 has orders 1 (delivered) and 3: the last is 3, with 2 lines.
    let by_id = OrderStatusInput { w: 1, d: 1, customer: CustomerBy::Id(1) };
    assert_eq!(
        execute(&ctx, &TxnInput::OrderStatus(by_id)).unwrap(),
        TxnOutput::OrderStatus { c_id: 1, balance: -1000, o_id: Some(3), carrier: 0, lines: 2 }
    );
    let none = OrderStatusInput { w: 1, d: 1, customer: CustomerBy::Id(3) };
    assert_eq!(
        execute(&ctx, &TxnInput::OrderStatus(none)).unwrap(),
        TxnOutput::OrderStatus { c_id: 3, balance: -1000, o_id: None, carrier: 0, lines: 0 }
    );
}

#[test]
fn delivery_takes_the_oldest_order_of_every_district() {
    let ctx = fixture(Duration::from_secs(5));
    let run = |carrier| execute(&ctx, &TxnInput::Delivery(DeliveryInput { w: 1, carrier })).unwrap();
    // District 1: order 2 (customer 2, one line of 5.00); district 2 has none.
    assert_eq!(run(7), TxnOutput::Delivery { delivered: vec![(1, 2)], skipped: 1 });
    assert!(get(&ctx, "new_order", s::order_key(1, 1, 2)).is_none());
    assert_eq!(col(&ctx, "orders", s::order_key(1, 1, 2), s::orders::CARRIER_ID), 7);
    assert!(col(&ctx, "order_line", s::order_line_key(1, 1, 2, 1), s::order_line::DELIVERY_D) > 0);
    assert_eq!(col(&ctx, "customer", s::customer_key(1, 1, 2), s::customer::BALANCE), -1000 + 500);
    assert_eq!(col(&ctx, "customer", s::customer_key(1, 1, 2), s::customer::DELIVERY_CNT), 1);
    // Then order 3 (customer 1, 1.00 + 2.00), then nothing.
    assert_eq!(run(8), TxnOutput::Delivery { delivered: vec![(1, 3)], skipped: 1 });
    assert_eq!(col(&ctx, "customer", s::customer_key(1, 1, 1), s::customer::BALANCE), -1000 + 300);
    for n in 1..=2 {
        assert!(col(&ctx, "order_line", s::order_line_key(1, 1, 3, n), s::order_line::DELIVERY_D) > 0);
    }
    assert_eq!(run(9), TxnOutput::Delivery { delivered: vec![], skipped: 2 });
    assert_eq!(rows(&ctx, "new_order"), 0);
    check_consistency(&ctx.tables).unwrap();
}

#[test]
fn stock_level_counts_distinct_low_items_of_the_last_orders() {
    let ctx = fixture(Duration::from_secs(5));
    let run =
        |threshold| execute(&ctx, &TxnInput::StockLevel(StockLevelInput { w: 1, d: 1, threshold })).unwrap();
    // Orders 1–3 hold items 1, 2, 3 (1 and 3 twice); their stock: 50, 11, 20.
    assert_eq!(run(21), TxnOutput::StockLevel { low_stock: 2 });
    assert_eq!(run(12), TxnOutput::StockLevel { low_stock: 1 });
    assert_eq!(run(11), TxnOutput::StockLevel { low_stock: 0 });
    assert_eq!(run(51), TxnOutput::StockLevel { low_stock: 3 });
}

#[test]
fn lock_conflicts_are_retried_and_counted_and_leave_nothing_behind() {
    let ctx = fixture(Duration::from_millis(50));
    let input = TxnInput::Payment(PaymentInput {
        w: 1,
        d: 1,
        c_w: 1,
        c_d: 1,
        customer: CustomerBy::Id(1),
        amount: 1,
    });
    // Another transaction holds the warehouse row: every attempt times out.
    let mut holder = ctx.db.begin();
    holder.get_for_update(&ctx.tables.warehouse, &int(1)).unwrap();
    let err = execute_with_retries(&ctx, &input, 3).unwrap_err();
    assert!(matches!(err.engine_error(), Some(nvmedb::Error::LockTimeout { .. })), "{err}");
    assert!(err.to_string().starts_with("Payment gave up after 3 attempts"), "{err}");
    holder.commit().unwrap();
    assert_eq!(col(&ctx, "warehouse", 1, s::warehouse::YTD), 2000, "the failed attempts left nothing");
    assert_eq!(rows(&ctx, "history"), 0);
    let (out, retries) = execute_with_retries(&ctx, &input, 3).unwrap();
    assert_eq!(out, TxnOutput::Payment { c_id: 1, balance: -1001 });
    assert_eq!((retries.deadlocks, retries.lock_timeouts), (0, 0));
    check_consistency(&ctx.tables).unwrap();
}

/// A Payment caught in a deadlock is the victim (the younger transaction), is rolled back and
/// runs again; the retry is counted as a deadlock and the money moves once.
#[test]
fn a_deadlock_victim_is_retried_once_and_counted() {
    let ctx = fixture(Duration::from_secs(30));
    let input = TxnInput::Payment(PaymentInput {
        w: 1,
        d: 1,
        c_w: 1,
        c_d: 1,
        customer: CustomerBy::Id(1),
        amount: 7,
    });
    // An older transaction holds the warehouse; the Payment takes its customer and the
    // district, then waits for the warehouse; the older one then asks for the district: a cycle.
    let mut older = ctx.db.begin();
    let mut wh = older.get_for_update(&ctx.tables.warehouse, &int(1)).unwrap().unwrap();
    let waits = ctx.db.lock_stats().waits;
    std::thread::scope(|sc| {
        let payment = sc.spawn(|| execute_with_retries(&ctx, &input, 5).unwrap());
        while ctx.db.lock_stats().waits == waits {
            std::thread::yield_now();
        }
        let mut district =
            older.get_for_update(&ctx.tables.district, &int(s::district_key(1, 1))).unwrap().unwrap();
        wh[s::warehouse::YTD] = int(2000 + 1);
        district[s::district::YTD] = int(1000 + 1);
        older.update(&ctx.tables.warehouse, &wh).unwrap();
        older.update(&ctx.tables.district, &district).unwrap();
        older.commit().unwrap();
        let (out, retries) = payment.join().unwrap();
        assert_eq!(out, TxnOutput::Payment { c_id: 1, balance: -1007 });
        assert_eq!((retries.deadlocks, retries.lock_timeouts), (1, 0));
    });
    assert_eq!(col(&ctx, "warehouse", 1, s::warehouse::YTD), 2000 + 1 + 7);
    assert_eq!(col(&ctx, "district", s::district_key(1, 1), s::district::YTD), 1000 + 1 + 7);
    assert_eq!(rows(&ctx, "history"), 1);
    check_consistency(&ctx.tables).unwrap();
}

/// Four terminals run the mix concurrently on a logged database; afterwards the consistency
/// conditions hold, every index agrees with its table, and every order entered is there with
/// its lines.
#[test]
fn a_concurrent_mix_keeps_the_database_consistent() {
    let scale = Scale::reduced(2);
    let mem = || Arc::new(MemStorage::new());
    let data = mem();
    let report = {
        let db =
            Database::open_with_storage(data.clone(), Options { wal: false, ..Options::default() }).unwrap();
        let r = load(&db, &scale, 3, 2, false).unwrap();
        db.close().unwrap();
        r
    };
    let db = Database::open_with_storages(data, Some((mem(), mem())), Options::default()).unwrap();
    let tables = Tables::open(&db).unwrap();
    let ctx = Context::new(db, tables).unwrap();
    let run = NuConstants::for_run(&report.constants, &mut TpccRng::new(9));
    let entered: Vec<(u32, u32, i64, usize)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4u64)
            .map(|c| {
                let ctx = &ctx;
                sc.spawn(move || {
                    let mut term = Terminal::new(scale, run, 100 + c, None);
                    let mut mine = Vec::new();
                    for _ in 0..300 {
                        let input = term.next_input();
                        let (out, _) = execute_with_retries(ctx, &input, 100).unwrap();
                        if let (
                            TxnInput::NewOrder(i),
                            TxnOutput::NewOrder { o_id, rolled_back: false, lines, .. },
                        ) = (&input, &out)
                        {
                            mine.push((i.w, i.d, *o_id, *lines));
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    check_consistency(&ctx.tables).unwrap();
    for (name, t) in ctx.tables.all() {
        t.check_integrity().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(entered.len() > 400, "{} orders entered", entered.len());
    for &(w, d, o, lines) in &entered {
        assert_eq!(col(&ctx, "orders", s::order_key(w, d, o), s::orders::OL_CNT), lines as i64);
        for n in 1..=lines as u32 {
            assert!(get(&ctx, "order_line", s::order_line_key(w, d, o, n)).is_some());
        }
    }
    // Every order id handed out belongs to exactly one committed New-Order.
    let mut handed_out = 0;
    ctx.tables
        .district
        .scan(|r| {
            handed_out += r.int(s::district::NEXT_O_ID) - 1 - i64::from(scale.customers);
            Ok(true)
        })
        .unwrap();
    assert_eq!(handed_out, entered.len() as i64);
}
