//! The nine TPC-C tables (TPC-C 5.11 §1.3) as engine schemas, their keys, and the scale.
//!
//! Owns: table names, column positions, [`Scale`] (cardinalities per warehouse, the standard
//! ones of §1.2 and §4.3 or a reduced set for tests), the key packing, and [`Tables`] (the
//! open handles). Invariants:
//! - a composite primary key (w, d, o, ...) is packed into one `Int` column (the first of each
//!   table) whose order is the tuple's order: `district_key(w, d) < district_key(w, d + 1)`,
//!   the orders of one district are one contiguous key range, and so on; the tuple's columns
//!   are stored too, so a row reads as the specification writes it;
//! - the two secondary indexes the transactions need are on derived key columns kept equal to
//!   their sources: CUSTOMER by (c_w_id, c_d_id, c_last, c_first) on `c_name_key` (bytes:
//!   w and d big-endian, then last and first name each space-padded to 16 bytes, so the
//!   customers of a last name are one prefix range, ordered by first name), ORDERS by
//!   (o_w_id, o_d_id, o_c_id, o_id) on `o_customer_key`;
//! - money is an `Int` in cents, rates (tax, discount) an `Int` in units of 0.0001, dates
//!   microseconds since the Unix epoch, and a null carrier id or delivery date is 0;
//! - HISTORY has no primary key in the specification: `h_key` is a surrogate (the customer key
//!   for the initial rows, above [`HISTORY_RUN_BASE`] for rows inserted by Payment).

use crate::error::{LabError, Result};
use nvmedb::{ColumnType, Database, Schema, Table};

/// Table names, in the specification's order.
pub const TABLE_NAMES: [&str; 9] =
    ["warehouse", "district", "customer", "history", "new_order", "orders", "order_line", "item", "stock"];

/// Column positions of WAREHOUSE.
pub mod warehouse {
    /// W_ID (primary key).
    pub const ID: usize = 0;
    /// W_NAME.
    pub const NAME: usize = 1;
    /// W_STREET_1 (then street 2, city, state, zip).
    pub const STREET_1: usize = 2;
    /// W_TAX, units of 0.0001.
    pub const TAX: usize = 7;
    /// W_YTD, cents.
    pub const YTD: usize = 8;
}

/// Column positions of DISTRICT.
pub mod district {
    /// Packed (D_W_ID, D_ID) (primary key).
    pub const KEY: usize = 0;
    /// D_ID.
    pub const ID: usize = 1;
    /// D_W_ID.
    pub const W_ID: usize = 2;
    /// D_NAME.
    pub const NAME: usize = 3;
    /// D_STREET_1 (then street 2, city, state, zip).
    pub const STREET_1: usize = 4;
    /// D_TAX, units of 0.0001.
    pub const TAX: usize = 9;
    /// D_YTD, cents.
    pub const YTD: usize = 10;
    /// D_NEXT_O_ID.
    pub const NEXT_O_ID: usize = 11;
}

/// Column positions of CUSTOMER.
pub mod customer {
    /// Packed (C_W_ID, C_D_ID, C_ID) (primary key).
    pub const KEY: usize = 0;
    /// C_ID.
    pub const ID: usize = 1;
    /// C_D_ID.
    pub const D_ID: usize = 2;
    /// C_W_ID.
    pub const W_ID: usize = 3;
    /// C_FIRST.
    pub const FIRST: usize = 4;
    /// C_MIDDLE.
    pub const MIDDLE: usize = 5;
    /// C_LAST.
    pub const LAST: usize = 6;
    /// C_STREET_1 (then street 2, city, state, zip).
    pub const STREET_1: usize = 7;
    /// C_PHONE.
    pub const PHONE: usize = 12;
    /// C_SINCE.
    pub const SINCE: usize = 13;
    /// C_CREDIT ("GC" or "BC").
    pub const CREDIT: usize = 14;
    /// C_CREDIT_LIM, cents.
    pub const CREDIT_LIM: usize = 15;
    /// C_DISCOUNT, units of 0.0001.
    pub const DISCOUNT: usize = 16;
    /// C_BALANCE, cents.
    pub const BALANCE: usize = 17;
    /// C_YTD_PAYMENT, cents.
    pub const YTD_PAYMENT: usize = 18;
    /// C_PAYMENT_CNT.
    pub const PAYMENT_CNT: usize = 19;
    /// C_DELIVERY_CNT.
    pub const DELIVERY_CNT: usize = 20;
    /// C_DATA.
    pub const DATA: usize = 21;
    /// Derived index key (w, d, last, first), see the module documentation.
    pub const NAME_KEY: usize = 22;
    /// Name of the index on `NAME_KEY`.
    pub const BY_NAME: &str = "by_name";
}

/// Column positions of HISTORY.
pub mod history {
    /// Surrogate key.
    pub const KEY: usize = 0;
    /// H_C_ID.
    pub const C_ID: usize = 1;
    /// H_C_D_ID.
    pub const C_D_ID: usize = 2;
    /// H_C_W_ID.
    pub const C_W_ID: usize = 3;
    /// H_D_ID.
    pub const D_ID: usize = 4;
    /// H_W_ID.
    pub const W_ID: usize = 5;
    /// H_DATE.
    pub const DATE: usize = 6;
    /// H_AMOUNT, cents.
    pub const AMOUNT: usize = 7;
    /// H_DATA.
    pub const DATA: usize = 8;
}

/// Column positions of NEW-ORDER.
pub mod new_order {
    /// Packed (NO_W_ID, NO_D_ID, NO_O_ID) (primary key).
    pub const KEY: usize = 0;
    /// NO_O_ID.
    pub const O_ID: usize = 1;
    /// NO_D_ID.
    pub const D_ID: usize = 2;
    /// NO_W_ID.
    pub const W_ID: usize = 3;
}

/// Column positions of ORDER.
pub mod orders {
    /// Packed (O_W_ID, O_D_ID, O_ID) (primary key).
    pub const KEY: usize = 0;
    /// O_ID.
    pub const ID: usize = 1;
    /// O_D_ID.
    pub const D_ID: usize = 2;
    /// O_W_ID.
    pub const W_ID: usize = 3;
    /// O_C_ID.
    pub const C_ID: usize = 4;
    /// O_ENTRY_D.
    pub const ENTRY_D: usize = 5;
    /// O_CARRIER_ID (0 = null).
    pub const CARRIER_ID: usize = 6;
    /// O_OL_CNT.
    pub const OL_CNT: usize = 7;
    /// O_ALL_LOCAL.
    pub const ALL_LOCAL: usize = 8;
    /// Derived index key (w, d, c, o).
    pub const CUSTOMER_KEY: usize = 9;
    /// Name of the index on `CUSTOMER_KEY`.
    pub const BY_CUSTOMER: &str = "by_customer";
}

/// Column positions of ORDER-LINE.
pub mod order_line {
    /// Packed (OL_W_ID, OL_D_ID, OL_O_ID, OL_NUMBER) (primary key).
    pub const KEY: usize = 0;
    /// OL_O_ID.
    pub const O_ID: usize = 1;
    /// OL_D_ID.
    pub const D_ID: usize = 2;
    /// OL_W_ID.
    pub const W_ID: usize = 3;
    /// OL_NUMBER.
    pub const NUMBER: usize = 4;
    /// OL_I_ID.
    pub const I_ID: usize = 5;
    /// OL_SUPPLY_W_ID.
    pub const SUPPLY_W_ID: usize = 6;
    /// OL_DELIVERY_D (0 = null).
    pub const DELIVERY_D: usize = 7;
    /// OL_QUANTITY.
    pub const QUANTITY: usize = 8;
    /// OL_AMOUNT, cents.
    pub const AMOUNT: usize = 9;
    /// OL_DIST_INFO.
    pub const DIST_INFO: usize = 10;
}

/// Column positions of ITEM.
pub mod item {
    /// I_ID (primary key).
    pub const ID: usize = 0;
    /// I_IM_ID.
    pub const IM_ID: usize = 1;
    /// I_NAME.
    pub const NAME: usize = 2;
    /// I_PRICE, cents.
    pub const PRICE: usize = 3;
    /// I_DATA.
    pub const DATA: usize = 4;
}

/// Column positions of STOCK.
pub mod stock {
    /// Packed (S_W_ID, S_I_ID) (primary key).
    pub const KEY: usize = 0;
    /// S_I_ID.
    pub const I_ID: usize = 1;
    /// S_W_ID.
    pub const W_ID: usize = 2;
    /// S_QUANTITY.
    pub const QUANTITY: usize = 3;
    /// S_DIST_01; S_DIST_xx is `DIST_01 + xx - 1`.
    pub const DIST_01: usize = 4;
    /// S_YTD.
    pub const YTD: usize = 14;
    /// S_ORDER_CNT.
    pub const ORDER_CNT: usize = 15;
    /// S_REMOTE_CNT.
    pub const REMOTE_CNT: usize = 16;
    /// S_DATA.
    pub const DATA: usize = 17;
}

/// Largest warehouse id the key packing allows.
pub const MAX_WAREHOUSES: u32 = (1 << 20) - 1;
/// Largest order id the ORDERS by-customer key allows (New-Order fails beyond it).
pub const MAX_ORDER_ID: i64 = (1 << 24) - 1;
/// Surrogate HISTORY keys of rows inserted by Payment start here (initial rows use smaller
/// keys).
pub const HISTORY_RUN_BASE: i64 = 1 << 50;

/// Packed DISTRICT key.
pub fn district_key(w: u32, d: u32) -> i64 {
    (i64::from(w) << 4) | i64::from(d)
}
/// Packed CUSTOMER key.
pub fn customer_key(w: u32, d: u32, c: u32) -> i64 {
    (district_key(w, d) << 12) | i64::from(c)
}
/// Packed ORDER and NEW-ORDER key.
pub fn order_key(w: u32, d: u32, o: i64) -> i64 {
    (district_key(w, d) << 32) | o
}
/// Packed ORDER-LINE key.
pub fn order_line_key(w: u32, d: u32, o: i64, number: u32) -> i64 {
    (order_key(w, d, o) << 4) | i64::from(number)
}
/// Packed STOCK key.
pub fn stock_key(w: u32, i: u32) -> i64 {
    (i64::from(w) << 17) | i64::from(i)
}
/// The ORDERS by-customer index key of (w, d, c, o).
pub fn order_customer_key(w: u32, d: u32, c: u32, o: i64) -> i64 {
    (customer_key(w, d, c) << 24) | o
}

/// Width of each name in the CUSTOMER name key.
const NAME_WIDTH: usize = 16;

/// The prefix of the CUSTOMER name key shared by all customers of (w, d) called `last`.
pub fn customer_name_prefix(w: u32, d: u32, last: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + 2 * NAME_WIDTH);
    k.extend_from_slice(&w.to_be_bytes());
    k.push(d as u8);
    k.extend_from_slice(&last[..last.len().min(NAME_WIDTH)]);
    k.resize(5 + NAME_WIDTH, b' ');
    k
}

/// The CUSTOMER name key of (w, d, last, first).
pub fn customer_name_key(w: u32, d: u32, last: &[u8], first: &[u8]) -> Vec<u8> {
    let mut k = customer_name_prefix(w, d, last);
    k.extend_from_slice(&first[..first.len().min(NAME_WIDTH)]);
    k.resize(5 + 2 * NAME_WIDTH, b' ');
    k
}

/// Cardinalities of a TPC-C database: the standard ones (§1.2, §4.3.3.1) or a reduced set for
/// tests, which keeps the ratios (30 % of each district's orders undelivered, one customer per
/// order, ten districts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Scale {
    /// Warehouses (W).
    pub warehouses: u32,
    /// ITEM rows, and STOCK rows per warehouse (100 000).
    pub items: u32,
    /// Districts per warehouse (10).
    pub districts: u32,
    /// Customers per district (3 000); also the initial orders per district.
    pub customers: u32,
    /// Initial NEW-ORDER rows per district (900): the last orders, not yet delivered.
    pub new_orders: u32,
}

/// Row counts per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowCounts {
    /// WAREHOUSE.
    pub warehouse: u64,
    /// DISTRICT.
    pub district: u64,
    /// CUSTOMER.
    pub customer: u64,
    /// HISTORY.
    pub history: u64,
    /// NEW-ORDER.
    pub new_order: u64,
    /// ORDER.
    pub orders: u64,
    /// ORDER-LINE (after a load: between 5 and 15 per order, 10 on average).
    pub order_line: u64,
    /// ITEM.
    pub item: u64,
    /// STOCK.
    pub stock: u64,
}

impl RowCounts {
    /// All rows.
    pub fn total(&self) -> u64 {
        self.as_array().iter().map(|(_, n)| n).sum()
    }

    /// (table name, rows) in [`TABLE_NAMES`] order.
    pub fn as_array(&self) -> [(&'static str, u64); 9] {
        [
            ("warehouse", self.warehouse),
            ("district", self.district),
            ("customer", self.customer),
            ("history", self.history),
            ("new_order", self.new_order),
            ("orders", self.orders),
            ("order_line", self.order_line),
            ("item", self.item),
            ("stock", self.stock),
        ]
    }
}

impl Scale {
    /// The standard cardinalities of TPC-C 5.11 for `warehouses` warehouses.
    pub fn standard(warehouses: u32) -> Self {
        Self { warehouses, items: 100_000, districts: 10, customers: 3000, new_orders: 900 }
    }

    /// A reduced scale for tests: 1 000 items, 30 customers and orders per district, 9 of them
    /// new (the standard's ratios).
    pub fn reduced(warehouses: u32) -> Self {
        Self { warehouses, items: 1000, districts: 10, customers: 30, new_orders: 9 }
    }

    /// True for the specification's cardinalities.
    pub fn is_standard(&self) -> bool {
        *self == Self::standard(self.warehouses)
    }

    /// Checks the values against what the key packing and the specification allow.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(LabError::config("warehouses/scale", m));
        if self.warehouses == 0 || self.warehouses > MAX_WAREHOUSES {
            return bad(format!("warehouses {}: need 1 to {MAX_WAREHOUSES}", self.warehouses));
        }
        if !(1..(1 << 17)).contains(&self.items) {
            return bad(format!("items {}: need 1 to {}", self.items, (1 << 17) - 1));
        }
        if !(1..=15).contains(&self.districts) {
            return bad(format!("districts {}: need 1 to 15", self.districts));
        }
        if !(1..(1 << 12)).contains(&self.customers) {
            return bad(format!("customers {}: need 1 to {}", self.customers, (1 << 12) - 1));
        }
        if self.new_orders > self.customers {
            return bad(format!(
                "new_orders {} exceeds the {} orders per district",
                self.new_orders, self.customers
            ));
        }
        Ok(())
    }

    /// The first order id that is undelivered after the load (2101 at the standard scale).
    pub fn first_new_order(&self) -> i64 {
        i64::from(self.customers - self.new_orders) + 1
    }

    /// The number of distinct last names (1 000; fewer when there are fewer customers).
    pub fn last_names(&self) -> u32 {
        self.customers.min(1000)
    }

    /// Rows per table right after the load; ORDER-LINE, which is random, as its expectation
    /// (10 per order).
    pub fn expected_rows(&self) -> RowCounts {
        let w = u64::from(self.warehouses);
        let d = w * u64::from(self.districts);
        RowCounts {
            warehouse: w,
            district: d,
            customer: d * u64::from(self.customers),
            history: d * u64::from(self.customers),
            new_order: d * u64::from(self.new_orders),
            orders: d * u64::from(self.customers),
            order_line: d * u64::from(self.customers) * 10,
            item: u64::from(self.items),
            stock: w * u64::from(self.items),
        }
    }
}

fn int(name: &str) -> (&str, ColumnType) {
    (name, ColumnType::Int)
}
fn var(name: &str, n: u32) -> (&str, ColumnType) {
    (name, ColumnType::Bytes(n))
}
fn fixed(name: &str, n: u32) -> (&str, ColumnType) {
    (name, ColumnType::Char(n))
}

/// The schema of table `name` (one of [`TABLE_NAMES`]).
pub fn schema(name: &str) -> Result<Schema> {
    let address = |p: &'static str| -> [(String, ColumnType); 5] {
        [
            (format!("{p}_street_1"), ColumnType::Bytes(20)),
            (format!("{p}_street_2"), ColumnType::Bytes(20)),
            (format!("{p}_city"), ColumnType::Bytes(20)),
            (format!("{p}_state"), ColumnType::Char(2)),
            (format!("{p}_zip"), ColumnType::Char(9)),
        ]
    };
    let with_address = |head: Vec<(&str, ColumnType)>, p: &'static str, tail: Vec<(&str, ColumnType)>| {
        let addr = address(p);
        let mut cols: Vec<(&str, ColumnType)> = head;
        cols.extend(addr.iter().map(|(n, t)| (n.as_str(), *t)));
        cols.extend(tail);
        Schema::new(cols)
    };
    let engine = |e: nvmedb::Error| LabError::engine("building a TPC-C schema")(e);
    Ok(match name {
        "warehouse" => {
            with_address(vec![int("w_id"), var("w_name", 10)], "w", vec![int("w_tax"), int("w_ytd")])
        }
        "district" => with_address(
            vec![int("d_key"), int("d_id"), int("d_w_id"), var("d_name", 10)],
            "d",
            vec![int("d_tax"), int("d_ytd"), int("d_next_o_id")],
        ),
        "customer" => with_address(
            vec![
                int("c_key"),
                int("c_id"),
                int("c_d_id"),
                int("c_w_id"),
                var("c_first", 16),
                fixed("c_middle", 2),
                var("c_last", 16),
            ],
            "c",
            vec![
                fixed("c_phone", 16),
                int("c_since"),
                fixed("c_credit", 2),
                int("c_credit_lim"),
                int("c_discount"),
                int("c_balance"),
                int("c_ytd_payment"),
                int("c_payment_cnt"),
                int("c_delivery_cnt"),
                var("c_data", 500),
                fixed("c_name_key", 5 + 2 * NAME_WIDTH as u32),
            ],
        )
        .with_index(customer::BY_NAME, "c_name_key")
        .map_err(engine)?,
        "history" => Schema::new(vec![
            int("h_key"),
            int("h_c_id"),
            int("h_c_d_id"),
            int("h_c_w_id"),
            int("h_d_id"),
            int("h_w_id"),
            int("h_date"),
            int("h_amount"),
            var("h_data", 24),
        ]),
        "new_order" => Schema::new(vec![int("no_key"), int("no_o_id"), int("no_d_id"), int("no_w_id")]),
        "orders" => Schema::new(vec![
            int("o_key"),
            int("o_id"),
            int("o_d_id"),
            int("o_w_id"),
            int("o_c_id"),
            int("o_entry_d"),
            int("o_carrier_id"),
            int("o_ol_cnt"),
            int("o_all_local"),
            int("o_customer_key"),
        ])
        .with_index(orders::BY_CUSTOMER, "o_customer_key")
        .map_err(engine)?,
        "order_line" => Schema::new(vec![
            int("ol_key"),
            int("ol_o_id"),
            int("ol_d_id"),
            int("ol_w_id"),
            int("ol_number"),
            int("ol_i_id"),
            int("ol_supply_w_id"),
            int("ol_delivery_d"),
            int("ol_quantity"),
            int("ol_amount"),
            fixed("ol_dist_info", 24),
        ]),
        "item" => Schema::new(vec![
            int("i_id"),
            int("i_im_id"),
            var("i_name", 24),
            int("i_price"),
            var("i_data", 50),
        ]),
        "stock" => {
            let dists: Vec<String> = (1..=10).map(|i| format!("s_dist_{i:02}")).collect();
            let mut cols = vec![int("s_key"), int("s_i_id"), int("s_w_id"), int("s_quantity")];
            cols.extend(dists.iter().map(|n| fixed(n, 24)));
            cols.extend([int("s_ytd"), int("s_order_cnt"), int("s_remote_cnt"), var("s_data", 50)]);
            Schema::new(cols)
        }
        other => return Err(LabError::config("table", format!("`{other}` is not a TPC-C table"))),
    })
}

/// Handles of the nine tables.
#[derive(Debug, Clone)]
pub struct Tables {
    /// WAREHOUSE.
    pub warehouse: Table,
    /// DISTRICT.
    pub district: Table,
    /// CUSTOMER.
    pub customer: Table,
    /// HISTORY.
    pub history: Table,
    /// NEW-ORDER.
    pub new_order: Table,
    /// ORDER.
    pub orders: Table,
    /// ORDER-LINE.
    pub order_line: Table,
    /// ITEM.
    pub item: Table,
    /// STOCK.
    pub stock: Table,
}

impl Tables {
    fn build(mut get: impl FnMut(&str) -> Result<Table>) -> Result<Self> {
        Ok(Self {
            warehouse: get("warehouse")?,
            district: get("district")?,
            customer: get("customer")?,
            history: get("history")?,
            new_order: get("new_order")?,
            orders: get("orders")?,
            order_line: get("order_line")?,
            item: get("item")?,
            stock: get("stock")?,
        })
    }

    /// Creates the nine tables in an empty database.
    pub fn create(db: &Database) -> Result<Self> {
        Self::build(|name| {
            db.create_table(name, schema(name)?).map_err(LabError::engine(format!("creating table `{name}`")))
        })
    }

    /// Opens the nine tables of a loaded database; an error names a missing table.
    pub fn open(db: &Database) -> Result<Self> {
        Self::build(|name| {
            db.table(name).map_err(LabError::engine(format!(
                "{} holds no TPC-C table `{name}` (load it first)",
                db.location()
            )))
        })
    }

    /// (name, handle) in [`TABLE_NAMES`] order.
    pub fn all(&self) -> [(&'static str, &Table); 9] {
        [
            ("warehouse", &self.warehouse),
            ("district", &self.district),
            ("customer", &self.customer),
            ("history", &self.history),
            ("new_order", &self.new_order),
            ("orders", &self.orders),
            ("order_line", &self.order_line),
            ("item", &self.item),
            ("stock", &self.stock),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_keys_keep_tuple_order_at_the_limits() {
        let w = MAX_WAREHOUSES;
        assert!(order_line_key(w, 15, (1 << 32) - 1, 15) > 0, "no overflow into the sign bit");
        assert!(order_customer_key(w, 15, 4095, MAX_ORDER_ID) > 0);
        assert!(order_key(1, 10, (1 << 32) - 1) < order_key(2, 1, 0));
        assert!(order_key(1, 3, 7) < order_key(1, 4, 1));
        assert!(order_line_key(1, 3, 7, 15) < order_line_key(1, 3, 8, 1));
        assert!(customer_key(1, 10, 4095) < customer_key(2, 1, 1));
        assert!(stock_key(1, 100_000) < stock_key(2, 1));
        assert!(order_customer_key(1, 2, 3, MAX_ORDER_ID) < order_customer_key(1, 2, 4, 1));
    }

    #[test]
    fn name_keys_group_a_last_name_and_order_by_first_name() {
        let p = customer_name_prefix(1, 2, b"BARBAR");
        let a = customer_name_key(1, 2, b"BARBAR", b"ALICE");
        let b = customer_name_key(1, 2, b"BARBAR", b"BOB");
        let other = customer_name_key(1, 2, b"BARBARABLE", b"AARON");
        assert!(a.starts_with(&p) && b.starts_with(&p) && !other.starts_with(&p));
        assert!(a < b);
        assert_eq!(a.len(), 37);
    }

    #[test]
    fn every_schema_is_valid_and_scales_validate() {
        for name in TABLE_NAMES {
            schema(name).unwrap().validate().unwrap();
        }
        assert!(schema("nope").is_err());
        Scale::standard(800).validate().unwrap();
        Scale::reduced(1).validate().unwrap();
        assert!(Scale::standard(0).validate().is_err());
        assert!(Scale { new_orders: 31, ..Scale::reduced(1) }.validate().is_err());
        assert_eq!(Scale::standard(1).first_new_order(), 2101);
    }
}
