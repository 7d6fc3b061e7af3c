//! The TPC-C loader against §4.3.3.1: the cardinalities of every table (one warehouse at the
//! standard scale, two at the reduced test scale) and the value range of every column the
//! specification constrains; the loaded database passes the consistency conditions and every
//! index agrees with its table.

use nvmedb::io::MemStorage;
use nvmedb::{BufferSize, Database, Options, RowView, Table, Value};
use nvmedb_lab::workload::tpcc::random::last_name;
use nvmedb_lab::workload::tpcc::schema::{self as s, customer_name_key};
use nvmedb_lab::workload::tpcc::{check_consistency, load, LoadReport, RowCounts, Scale, Tables};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

fn load_db(scale: Scale) -> (Database, Tables, LoadReport) {
    let opts = Options {
        wal: false,
        table_buffer: BufferSize::Bytes(512 << 20),
        index_buffer: BufferSize::Bytes(256 << 20),
        ..Options::default()
    };
    let db = Database::open_with_storage(Arc::new(MemStorage::new()), opts).unwrap();
    let report = load(&db, &scale, 42, 2, false).unwrap();
    let tables = Tables::open(&db).unwrap();
    (db, tables, report)
}

fn rows(t: &Table, mut f: impl FnMut(RowView<'_>)) -> u64 {
    let mut n = 0;
    t.scan(|r| {
        n += 1;
        f(r);
        Ok(true)
    })
    .unwrap();
    n
}

fn len_in(r: &RowView<'_>, col: usize, lo: usize, hi: usize) -> bool {
    (lo..=hi).contains(&r.bytes(col).len())
}

fn syllable_name(name: &[u8]) -> bool {
    (0..1000).any(|n| last_name(n) == name)
}

/// Counts every table and checks every constrained column; returns the counts seen.
fn check_loaded(scale: &Scale, t: &Tables) -> RowCounts {
    let first_new = scale.first_new_order();
    let mut seen = RowCounts::default();
    let mut originals = 0u64;
    seen.item = rows(&t.item, |r| {
        assert!((1..=i64::from(scale.items)).contains(&r.int(s::item::ID)));
        assert!((1..=10_000).contains(&r.int(s::item::IM_ID)));
        assert!(len_in(&r, s::item::NAME, 14, 24) && len_in(&r, s::item::DATA, 26, 50));
        assert!((100..=10_000).contains(&r.int(s::item::PRICE)), "I_PRICE 1.00..100.00");
        originals += u64::from(r.bytes(s::item::DATA).windows(8).any(|w| w == b"ORIGINAL"));
    });
    assert!(
        originals * 100 > seen.item * 6 && originals * 100 < seen.item * 14,
        "~10 % ORIGINAL: {originals}"
    );
    seen.warehouse = rows(&t.warehouse, |r| {
        assert!((0..=2000).contains(&r.int(s::warehouse::TAX)));
        assert_eq!(r.int(s::warehouse::YTD), 30_000_000, "W_YTD 300 000.00 in cents");
        assert!(len_in(&r, s::warehouse::NAME, 6, 10));
        assert!(r.bytes(s::warehouse::STREET_1 + 4).ends_with(b"11111"), "zip");
    });
    seen.district = rows(&t.district, |r| {
        let (w, d) = (r.int(s::district::W_ID) as u32, r.int(s::district::ID) as u32);
        assert_eq!(r.int(s::district::KEY), s::district_key(w, d));
        assert!((0..=2000).contains(&r.int(s::district::TAX)));
        assert_eq!(r.int(s::district::YTD), 3_000_000);
        assert_eq!(r.int(s::district::NEXT_O_ID), i64::from(scale.customers) + 1);
    });
    let mut bad_credit = 0u64;
    seen.customer = rows(&t.customer, |r| {
        let (w, d, c) =
            (r.int(s::customer::W_ID) as u32, r.int(s::customer::D_ID) as u32, r.int(s::customer::ID) as u32);
        assert_eq!(r.int(s::customer::KEY), s::customer_key(w, d, c));
        let last = r.bytes(s::customer::LAST);
        if c <= scale.last_names() {
            assert_eq!(last, last_name(c - 1), "the first customers take the names in order");
        } else {
            assert!(syllable_name(last), "{last:?}");
        }
        assert!(len_in(&r, s::customer::FIRST, 8, 16));
        assert_eq!(r.bytes(s::customer::MIDDLE), b"OE");
        let credit = r.bytes(s::customer::CREDIT);
        assert!(credit == b"GC" || credit == b"BC");
        bad_credit += u64::from(credit == b"BC");
        assert_eq!(r.int(s::customer::CREDIT_LIM), 5_000_000);
        assert!((0..=5000).contains(&r.int(s::customer::DISCOUNT)));
        assert_eq!(r.int(s::customer::BALANCE), -10_00);
        assert_eq!(r.int(s::customer::YTD_PAYMENT), 10_00);
        assert_eq!((r.int(s::customer::PAYMENT_CNT), r.int(s::customer::DELIVERY_CNT)), (1, 0));
        assert!(len_in(&r, s::customer::DATA, 300, 500));
        assert_eq!(r.bytes(s::customer::PHONE).len(), 16);
        assert_eq!(
            r.bytes(s::customer::NAME_KEY),
            customer_name_key(w, d, last, r.bytes(s::customer::FIRST))
        );
    });
    assert!(bad_credit * 100 > seen.customer * 6 && bad_credit * 100 < seen.customer * 14, "~10 % BC");
    seen.history = rows(&t.history, |r| {
        assert_eq!(r.int(s::history::AMOUNT), 10_00);
        assert!(len_in(&r, s::history::DATA, 12, 24));
    });
    // ORDER: each district's customers once each; carriers only on delivered orders.
    let mut customers_of: BTreeMap<(i64, i64), BTreeSet<i64>> = BTreeMap::new();
    let mut ol_cnt: BTreeMap<i64, i64> = BTreeMap::new();
    seen.orders = rows(&t.orders, |r| {
        let (w, d, o) = (r.int(s::orders::W_ID), r.int(s::orders::D_ID), r.int(s::orders::ID));
        assert!((1..=i64::from(scale.customers)).contains(&o));
        assert!(
            customers_of.entry((w, d)).or_default().insert(r.int(s::orders::C_ID)),
            "O_C_ID is a permutation"
        );
        let carrier = r.int(s::orders::CARRIER_ID);
        if o < first_new {
            assert!((1..=10).contains(&carrier));
        } else {
            assert_eq!(carrier, 0, "undelivered orders have a null carrier");
        }
        assert!((5..=15).contains(&r.int(s::orders::OL_CNT)));
        assert_eq!(r.int(s::orders::ALL_LOCAL), 1);
        ol_cnt.insert(r.int(s::orders::KEY), r.int(s::orders::OL_CNT));
    });
    assert!(customers_of.values().all(|c| c.len() == scale.customers as usize));
    let mut lines_of: BTreeMap<i64, i64> = BTreeMap::new();
    seen.order_line = rows(&t.order_line, |r| {
        let (w, d, o) = (r.int(s::order_line::W_ID), r.int(s::order_line::D_ID), r.int(s::order_line::O_ID));
        *lines_of.entry(s::order_key(w as u32, d as u32, o)).or_default() += 1;
        assert!((1..=i64::from(scale.items)).contains(&r.int(s::order_line::I_ID)));
        assert_eq!(r.int(s::order_line::SUPPLY_W_ID), w);
        assert_eq!(r.int(s::order_line::QUANTITY), 5);
        let (delivery, amount) = (r.int(s::order_line::DELIVERY_D), r.int(s::order_line::AMOUNT));
        if o < first_new {
            assert!(delivery > 0 && amount == 0);
        } else {
            assert!(delivery == 0 && (1..=999_999).contains(&amount));
        }
        assert_eq!(r.bytes(s::order_line::DIST_INFO).len(), 24);
    });
    assert_eq!(lines_of, ol_cnt, "every order has O_OL_CNT lines");
    let mut new_orders: BTreeMap<(i64, i64), Vec<i64>> = BTreeMap::new();
    seen.new_order = rows(&t.new_order, |r| {
        new_orders
            .entry((r.int(s::new_order::W_ID), r.int(s::new_order::D_ID)))
            .or_default()
            .push(r.int(s::new_order::O_ID));
    });
    for ids in new_orders.values_mut() {
        ids.sort();
        assert_eq!(*ids, (first_new..=i64::from(scale.customers)).collect::<Vec<_>>());
    }
    seen.stock = rows(&t.stock, |r| {
        let (w, i) = (r.int(s::stock::W_ID) as u32, r.int(s::stock::I_ID) as u32);
        assert_eq!(r.int(s::stock::KEY), s::stock_key(w, i));
        assert!((10..=100).contains(&r.int(s::stock::QUANTITY)));
        assert_eq!(
            (r.int(s::stock::YTD), r.int(s::stock::ORDER_CNT), r.int(s::stock::REMOTE_CNT)),
            (0, 0, 0)
        );
        assert!((0..10).all(|k| r.bytes(s::stock::DIST_01 + k).len() == 24));
        assert!(len_in(&r, s::stock::DATA, 26, 50));
    });
    seen
}

fn assert_cardinalities(scale: &Scale, seen: &RowCounts, report: &LoadReport) {
    let want = scale.expected_rows();
    assert_eq!(
        RowCounts { order_line: want.order_line, ..*seen },
        want,
        "every table but ORDER-LINE has exactly its specified rows"
    );
    // ORDER-LINE: 5 to 15 per order, 10 on average.
    assert!(seen.order_line >= 5 * want.orders && seen.order_line <= 15 * want.orders);
    let avg = seen.order_line as f64 / want.orders as f64;
    assert!((9.5..10.5).contains(&avg), "{avg} lines per order");
    assert_eq!(report.rows, *seen, "the report counts what is there");
    assert!(!report.logged);
}

#[test]
fn the_cardinality_formula_is_the_specifications() {
    let one = Scale::standard(1).expected_rows();
    assert_eq!(
        (
            one.warehouse,
            one.district,
            one.customer,
            one.history,
            one.orders,
            one.new_order,
            one.item,
            one.stock
        ),
        (1, 10, 30_000, 30_000, 30_000, 9_000, 100_000, 100_000)
    );
    let many = Scale::standard(800).expected_rows();
    assert_eq!((many.stock, many.customer, many.item), (80_000_000, 24_000_000, 100_000));
}

#[test]
fn one_standard_warehouse_has_the_specified_rows_and_values() {
    let scale = Scale::standard(1);
    let (_db, t, report) = load_db(scale);
    let seen = check_loaded(&scale, &t);
    assert_cardinalities(&scale, &seen, &report);
    check_consistency(&t).unwrap();
}

#[test]
fn reduced_scale_keeps_the_ratios_and_the_rules() {
    let scale = Scale::reduced(2);
    let (_db, t, report) = load_db(scale);
    let seen = check_loaded(&scale, &t);
    assert_cardinalities(&scale, &seen, &report);
    check_consistency(&t).unwrap();
    for (name, table) in t.all() {
        table.check_integrity().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// The data is fixed by the seed, whatever the number of loader threads.
#[test]
fn the_seed_fixes_the_data() {
    let scale = Scale::reduced(1);
    let dump = |threads: usize| {
        let opts = Options { wal: false, ..Options::default() };
        let db = Database::open_with_storage(Arc::new(MemStorage::new()), opts).unwrap();
        load(&db, &scale, 7, threads, false).unwrap();
        let t = Tables::open(&db).unwrap();
        let mut all = Vec::new();
        // The load's clock (C_SINCE, H_DATE, O_ENTRY_D, OL_DELIVERY_D) is the only difference.
        let clock = |name: &str| match name {
            "customer" => Some(s::customer::SINCE),
            "history" => Some(s::history::DATE),
            "orders" => Some(s::orders::ENTRY_D),
            "order_line" => Some(s::order_line::DELIVERY_D),
            _ => None,
        };
        for (name, table) in t.all() {
            table
                .range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, |r| {
                    let mut v = r.to_values();
                    if let Some(c) = clock(name) {
                        v[c] = Value::Int(i64::from(v[c] != Value::Int(0)));
                    }
                    all.push(v);
                    Ok(true)
                })
                .unwrap();
        }
        all
    };
    let one = dump(1);
    assert_eq!(one, dump(3));
    assert!(one.len() > 4000, "{} rows", one.len());
}
