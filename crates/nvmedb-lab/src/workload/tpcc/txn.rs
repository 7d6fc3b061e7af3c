//! The five TPC-C transactions (§2.4–§2.8) as engine transactions.
//!
//! Owns: [`Context`] (database, tables, the source of HISTORY keys), [`execute`] (one attempt
//! of one transaction) and [`execute_with_retries`]. Invariants:
//! - every read and write goes through one [`nvmedb::Transaction`] under strict two-phase
//!   locking, serializable (key ranges scanned are locked too) except Stock-Level, which
//!   the specification lets read as committed (§3.4.1) and which takes no lock: rows read are share-locked, rows changed (or read in order to change them) are
//!   exclusively locked before they are read, all locks are held until the commit is durable;
//! - the rows every transaction of a warehouse or district touches are locked last, so they are
//!   held for little more than the commit: New-Order locks its district, customer, items and
//!   stock, then reads the warehouse; Payment locks its customer, then the district, then the
//!   warehouse. District before warehouse in both, so those two never deadlock; a New-Order
//!   and a Payment of the same customer can (New-Order holds the district and wants the
//!   customer, Payment the reverse). A deadlock or lock timeout aborts the attempt (the
//!   transaction is rolled back) and [`execute_with_retries`] runs the same input again,
//!   counting it;
//! - a New-Order whose last item id is unused rolls back after doing all its other work and
//!   reports `rolled_back` (§2.4.2.3); no other outcome leaves a transaction uncommitted;
//! - Delivery delivers the oldest undelivered order of every district in one transaction, the
//!   oldest found by a range scan of the district's NEW-ORDER rows.

use super::input::TxnInput;
use super::input::{
    CustomerBy, DeliveryInput, NewOrderInput, OrderStatusInput, PaymentInput, StockLevelInput,
};
use super::schema::{self as s, Tables};
use crate::error::{LabError, Result};
use nvmedb::txn::LockMode;
use nvmedb::{Database, Isolation, RowView, Transaction, Value};
use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, Ordering};

/// What a transaction returns to its terminal (the values the specification displays that the
/// lab and the tests use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOutput {
    /// New-Order.
    NewOrder {
        /// O_ID given to the order (it is gone again if the transaction rolled back).
        o_id: i64,
        /// Total amount, cents: Σ OL_AMOUNT × (1 − C_DISCOUNT) × (1 + W_TAX + D_TAX).
        total: i64,
        /// Order lines entered.
        lines: usize,
        /// True when an unused item id rolled the transaction back.
        rolled_back: bool,
    },
    /// Payment.
    Payment {
        /// The customer paid for.
        c_id: u32,
        /// C_BALANCE afterwards, cents.
        balance: i64,
    },
    /// Order-Status.
    OrderStatus {
        /// The customer.
        c_id: u32,
        /// C_BALANCE, cents.
        balance: i64,
        /// The customer's most recent order, if any.
        o_id: Option<i64>,
        /// Its O_CARRIER_ID (0 = not delivered).
        carrier: i64,
        /// Its order lines.
        lines: usize,
    },
    /// Delivery.
    Delivery {
        /// (district, order) delivered.
        delivered: Vec<(u32, i64)>,
        /// Districts with no undelivered order (§2.7.4.2 asks to report them).
        skipped: u32,
    },
    /// Stock-Level.
    StockLevel {
        /// Distinct items of the district's last 20 orders with S_QUANTITY below the threshold.
        low_stock: u32,
    },
}

/// What the transactions run against.
#[derive(Debug)]
pub struct Context {
    /// The database.
    pub db: Database,
    /// Its TPC-C tables.
    pub tables: Tables,
    /// Districts per warehouse (counted in warehouse 1 when the context is made).
    pub districts: u32,
    /// Next HISTORY surrogate key (unique across runs: it starts from the clock, in µs).
    history_keys: AtomicI64,
}

impl Context {
    /// A context over an open TPC-C database.
    pub fn new(db: Database, tables: Tables) -> Result<Self> {
        let lo = Value::Int(s::district_key(1, 1));
        let hi = Value::Int(s::district_key(1, 15));
        let mut districts = 0;
        tables
            .district
            .range(Bound::Included(&lo), Bound::Included(&hi), |_| {
                districts += 1;
                Ok(true)
            })
            .map_err(eng("counting the districts"))?;
        if districts == 0 {
            return Err(missing("district", "district of warehouse 1 (is the database loaded?)".into()));
        }
        Ok(Self {
            db,
            tables,
            districts,
            history_keys: AtomicI64::new(s::HISTORY_RUN_BASE + super::load::now_us()),
        })
    }
}

/// Retries of one transaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retries {
    /// Attempts that were a deadlock's victim.
    pub deadlocks: u32,
    /// Attempts that timed out waiting for a lock.
    pub lock_timeouts: u32,
}

/// True for a deadlock or lock timeout (abort and run the transaction again).
pub fn is_retryable(e: &LabError) -> bool {
    e.engine_error().is_some_and(nvmedb::Error::is_retryable)
}

fn eng(what: &'static str) -> impl Fn(nvmedb::Error) -> LabError {
    move |e| LabError::engine(what)(e)
}

fn int(r: &RowView<'_>, col: usize) -> i64 {
    r.int(col)
}

fn vint(row: &[Value], table: &'static str, col: usize) -> Result<i64> {
    row.get(col).and_then(Value::as_int).ok_or_else(|| LabError::Inconsistent {
        what: format!("a row of table `{table}`"),
        detail: format!("column {col} is not an integer"),
    })
}

fn missing(table: &'static str, key: String) -> LabError {
    LabError::MissingRow { table: table.into(), key }
}

/// Runs one attempt of `input`. A retryable error (see [`is_retryable`]) leaves nothing
/// behind: the transaction was rolled back.
pub fn execute(ctx: &Context, input: &TxnInput) -> Result<TxnOutput> {
    // The specification's isolation (§3.4.1): level 3 (serializable) among New-Order,
    // Payment, Delivery and Order-Status; level 1 (no dirty reads) for Stock-Level, which
    // therefore reads as committed and takes no locks.
    let mut tx = match input {
        TxnInput::StockLevel(_) => ctx.db.begin_with(Isolation::ReadCommitted),
        _ => ctx.db.begin(),
    };
    let out = match input {
        TxnInput::NewOrder(i) => new_order(ctx, &mut tx, i)?,
        TxnInput::Payment(i) => payment(ctx, &mut tx, i)?,
        TxnInput::OrderStatus(i) => order_status(ctx, &mut tx, i)?,
        TxnInput::Delivery(i) => delivery(ctx, &mut tx, i)?,
        TxnInput::StockLevel(i) => stock_level(ctx, &mut tx, i)?,
    };
    if let TxnOutput::NewOrder { rolled_back: true, .. } = out {
        tx.abort().map_err(eng("rolling back a New-Order"))?;
    } else {
        tx.commit().map_err(eng("committing"))?;
    }
    Ok(out)
}

/// Runs `input` until it commits (or rolls back as intended), at most `max_attempts` times;
/// returns the output and the retries it took.
pub fn execute_with_retries(
    ctx: &Context,
    input: &TxnInput,
    max_attempts: u32,
) -> Result<(TxnOutput, Retries)> {
    let mut retries = Retries::default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match execute(ctx, input) {
            Ok(out) => return Ok((out, retries)),
            Err(LabError::Engine { source, context }) if source.is_retryable() => {
                match source {
                    nvmedb::Error::Deadlock { .. } => retries.deadlocks += 1,
                    _ => retries.lock_timeouts += 1,
                }
                if attempt >= max_attempts {
                    return Err(LabError::Engine {
                        context: format!(
                            "{} gave up after {attempt} attempts, each a deadlock victim or timed out waiting for a lock (last while {context})",
                            input.kind().name()
                        ),
                        source,
                    });
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// New-Order (§2.4.2).
fn new_order(ctx: &Context, tx: &mut Transaction, i: &NewOrderInput) -> Result<TxnOutput> {
    let t = &ctx.tables;
    let now = super::load::now_us();
    let dkey = Value::Int(s::district_key(i.w, i.d));
    let mut district = tx
        .get_for_update(&t.district, &dkey)
        .map_err(eng("New-Order: reading the district"))?
        .ok_or_else(|| missing("district", format!("district {} of warehouse {}", i.d, i.w)))?;
    let d_tax = vint(&district, "district", s::district::TAX)?;
    let o_id = vint(&district, "district", s::district::NEXT_O_ID)?;
    if o_id > s::MAX_ORDER_ID {
        return Err(LabError::Inconsistent {
            what: format!("district {} of warehouse {}", i.d, i.w),
            detail: format!("reached order id {o_id}, beyond the {} the keys allow", s::MAX_ORDER_ID),
        });
    }
    district[s::district::NEXT_O_ID] = Value::Int(o_id + 1);
    tx.update(&t.district, &district).map_err(eng("New-Order: updating the district"))?;
    let c_discount = tx
        .read(&t.customer, &Value::Int(s::customer_key(i.w, i.d, i.c)), |r| int(&r, s::customer::DISCOUNT))
        .map_err(eng("New-Order: reading the customer"))?
        .ok_or_else(|| missing("customer", format!("customer {} of district {}/{}", i.c, i.w, i.d)))?;
    let all_local = i.lines.iter().all(|l| l.supply_w == i.w);
    let okey = s::order_key(i.w, i.d, o_id);
    let order = [
        Value::Int(okey),
        Value::Int(o_id),
        Value::Int(i64::from(i.d)),
        Value::Int(i64::from(i.w)),
        Value::Int(i64::from(i.c)),
        Value::Int(now),
        Value::Int(0),
        Value::Int(i.lines.len() as i64),
        Value::Int(i64::from(all_local)),
        Value::Int(s::order_customer_key(i.w, i.d, i.c, o_id)),
    ];
    tx.insert(&t.orders, &order).map_err(eng("New-Order: inserting the order"))?;
    let no = [Value::Int(okey), Value::Int(o_id), Value::Int(i64::from(i.d)), Value::Int(i64::from(i.w))];
    tx.insert(&t.new_order, &no).map_err(eng("New-Order: inserting the new-order row"))?;
    let mut sum = 0i64;
    // One stock row decoded into the same buffers for every line.
    let mut stock = Vec::new();
    for (n, line) in i.lines.iter().enumerate() {
        let number = n as u32 + 1;
        let Some(price) = tx
            .read(&t.item, &Value::Int(i64::from(line.item)), |r| int(&r, s::item::PRICE))
            .map_err(eng("New-Order: reading an item"))?
        else {
            // "Item number is not valid": the transaction rolls back (§2.4.2.3).
            return Ok(TxnOutput::NewOrder { o_id, total: 0, lines: n, rolled_back: true });
        };
        let skey = Value::Int(s::stock_key(line.supply_w, line.item));
        if !tx.get_for_update_into(&t.stock, &skey, &mut stock).map_err(eng("New-Order: reading stock"))? {
            return Err(missing("stock", format!("item {} of warehouse {}", line.item, line.supply_w)));
        }
        let q = i64::from(line.quantity);
        let s_quantity = vint(&stock, "stock", s::stock::QUANTITY)?;
        let new_quantity = if s_quantity >= q + 10 { s_quantity - q } else { s_quantity - q + 91 };
        stock[s::stock::QUANTITY] = Value::Int(new_quantity);
        stock[s::stock::YTD] = Value::Int(vint(&stock, "stock", s::stock::YTD)? + q);
        stock[s::stock::ORDER_CNT] = Value::Int(vint(&stock, "stock", s::stock::ORDER_CNT)? + 1);
        if line.supply_w != i.w {
            stock[s::stock::REMOTE_CNT] = Value::Int(vint(&stock, "stock", s::stock::REMOTE_CNT)? + 1);
        }
        tx.update(&t.stock, &stock).map_err(eng("New-Order: updating stock"))?;
        let dist_info = std::mem::replace(&mut stock[s::stock::DIST_01 + i.d as usize - 1], Value::Null);
        let amount = q * price;
        sum += amount;
        let ol = [
            Value::Int(s::order_line_key(i.w, i.d, o_id, number)),
            Value::Int(o_id),
            Value::Int(i64::from(i.d)),
            Value::Int(i64::from(i.w)),
            Value::Int(i64::from(number)),
            Value::Int(i64::from(line.item)),
            Value::Int(i64::from(line.supply_w)),
            Value::Int(0),
            Value::Int(q),
            Value::Int(amount),
            dist_info,
        ];
        tx.insert(&t.order_line, &ol).map_err(eng("New-Order: inserting an order line"))?;
    }
    // The warehouse last: every Payment of the warehouse updates its row, so it is locked for
    // as short a time as the result allows.
    let w_tax = tx
        .read(&t.warehouse, &Value::Int(i64::from(i.w)), |r| int(&r, s::warehouse::TAX))
        .map_err(eng("New-Order: reading the warehouse"))?
        .ok_or_else(|| missing("warehouse", format!("warehouse {}", i.w)))?;
    let total = (i128::from(sum) * i128::from(10_000 - c_discount) * i128::from(10_000 + w_tax + d_tax)
        / 100_000_000) as i64;
    Ok(TxnOutput::NewOrder { o_id, total, lines: i.lines.len(), rolled_back: false })
}

/// The key of the customer `by` selects in district (w, d), locked in `mode`: by id, or the
/// middle one (position ⌈n/2⌉ in C_FIRST order) of the customers with that last name.
fn select_customer(
    ctx: &Context,
    tx: &mut Transaction,
    w: u32,
    d: u32,
    by: &CustomerBy,
    mode: LockMode,
) -> Result<(u32, Value)> {
    match by {
        CustomerBy::Id(c) => Ok((*c, Value::Int(s::customer_key(w, d, *c)))),
        CustomerBy::LastName(last) => {
            let prefix = s::customer_name_prefix(w, d, last);
            let mut end = prefix.clone();
            *end.last_mut().expect("the prefix is not empty") += 1;
            let (lo, hi) = (Value::Bytes(prefix), Value::Bytes(end));
            let mut ids = Vec::new();
            tx.index_range(
                &ctx.tables.customer,
                s::customer::BY_NAME,
                Bound::Included(&lo),
                Bound::Excluded(&hi),
                mode,
                |r| {
                    ids.push(int(&r, s::customer::ID) as u32);
                    Ok(true)
                },
            )
            .map_err(eng("selecting a customer by last name"))?;
            if ids.is_empty() {
                return Err(missing(
                    "customer",
                    format!("customer called {} in district {w}/{d}", String::from_utf8_lossy(last)),
                ));
            }
            let c = ids[(ids.len() - 1) / 2];
            Ok((c, Value::Int(s::customer_key(w, d, c))))
        }
    }
}

/// Payment (§2.5.2).
fn payment(ctx: &Context, tx: &mut Transaction, i: &PaymentInput) -> Result<TxnOutput> {
    let t = &ctx.tables;
    let now = super::load::now_us();
    let (c_id, ckey) = select_customer(ctx, tx, i.c_w, i.c_d, &i.customer, LockMode::Exclusive)?;
    let mut c = tx
        .get_for_update(&t.customer, &ckey)
        .map_err(eng("Payment: reading the customer"))?
        .ok_or_else(|| missing("customer", format!("customer {c_id} of district {}/{}", i.c_w, i.c_d)))?;
    let balance = vint(&c, "customer", s::customer::BALANCE)? - i.amount;
    c[s::customer::BALANCE] = Value::Int(balance);
    c[s::customer::YTD_PAYMENT] = Value::Int(vint(&c, "customer", s::customer::YTD_PAYMENT)? + i.amount);
    c[s::customer::PAYMENT_CNT] = Value::Int(vint(&c, "customer", s::customer::PAYMENT_CNT)? + 1);
    if c[s::customer::CREDIT].as_bytes() == Some(b"BC") {
        let mut data =
            format!("{c_id} {} {} {} {} {}.{:02} | ", i.c_d, i.c_w, i.d, i.w, i.amount / 100, i.amount % 100)
                .into_bytes();
        data.extend_from_slice(c[s::customer::DATA].as_bytes().unwrap_or_default());
        data.truncate(500);
        c[s::customer::DATA] = Value::Bytes(data);
    }
    tx.update(&t.customer, &c).map_err(eng("Payment: updating the customer"))?;
    let mut district = tx
        .get_for_update(&t.district, &Value::Int(s::district_key(i.w, i.d)))
        .map_err(eng("Payment: reading the district"))?
        .ok_or_else(|| missing("district", format!("district {} of warehouse {}", i.d, i.w)))?;
    district[s::district::YTD] = Value::Int(vint(&district, "district", s::district::YTD)? + i.amount);
    tx.update(&t.district, &district).map_err(eng("Payment: updating the district"))?;
    let mut wh = tx
        .get_for_update(&t.warehouse, &Value::Int(i64::from(i.w)))
        .map_err(eng("Payment: reading the warehouse"))?
        .ok_or_else(|| missing("warehouse", format!("warehouse {}", i.w)))?;
    wh[s::warehouse::YTD] = Value::Int(vint(&wh, "warehouse", s::warehouse::YTD)? + i.amount);
    tx.update(&t.warehouse, &wh).map_err(eng("Payment: updating the warehouse"))?;
    let name = |v: &Value| v.as_bytes().unwrap_or_default().to_vec();
    let mut h_data = name(&wh[s::warehouse::NAME]);
    h_data.extend_from_slice(b"    ");
    h_data.extend_from_slice(&name(&district[s::district::NAME]));
    let h = [
        Value::Int(ctx.history_keys.fetch_add(1, Ordering::Relaxed)),
        Value::Int(i64::from(c_id)),
        Value::Int(i64::from(i.c_d)),
        Value::Int(i64::from(i.c_w)),
        Value::Int(i64::from(i.d)),
        Value::Int(i64::from(i.w)),
        Value::Int(now),
        Value::Int(i.amount),
        Value::Bytes(h_data),
    ];
    tx.insert(&t.history, &h).map_err(eng("Payment: inserting history"))?;
    Ok(TxnOutput::Payment { c_id, balance })
}

/// Order-Status (§2.6.2).
fn order_status(ctx: &Context, tx: &mut Transaction, i: &OrderStatusInput) -> Result<TxnOutput> {
    let t = &ctx.tables;
    let (c_id, ckey) = select_customer(ctx, tx, i.w, i.d, &i.customer, LockMode::Shared)?;
    let balance = tx
        .read(&t.customer, &ckey, |r| int(&r, s::customer::BALANCE))
        .map_err(eng("Order-Status: reading the customer"))?
        .ok_or_else(|| missing("customer", format!("customer {c_id} of district {}/{}", i.w, i.d)))?;
    let lo = Value::Int(s::order_customer_key(i.w, i.d, c_id, 0));
    let hi = Value::Int(s::order_customer_key(i.w, i.d, c_id, s::MAX_ORDER_ID));
    let mut last = None;
    tx.index_range(
        &t.orders,
        s::orders::BY_CUSTOMER,
        Bound::Included(&lo),
        Bound::Included(&hi),
        LockMode::Shared,
        |r| {
            last = Some((int(&r, s::orders::ID), int(&r, s::orders::CARRIER_ID)));
            Ok(true)
        },
    )
    .map_err(eng("Order-Status: finding the last order"))?;
    let Some((o_id, carrier)) = last else {
        return Ok(TxnOutput::OrderStatus { c_id, balance, o_id: None, carrier: 0, lines: 0 });
    };
    let lo = Value::Int(s::order_line_key(i.w, i.d, o_id, 0));
    let hi = Value::Int(s::order_line_key(i.w, i.d, o_id, 15));
    let mut lines = 0;
    tx.range(&t.order_line, Bound::Included(&lo), Bound::Included(&hi), LockMode::Shared, |r| {
        // OL_I_ID, OL_SUPPLY_W_ID, OL_QUANTITY, OL_AMOUNT, OL_DELIVERY_D are what a terminal shows.
        let _ = (int(&r, s::order_line::I_ID), int(&r, s::order_line::AMOUNT));
        lines += 1;
        Ok(true)
    })
    .map_err(eng("Order-Status: reading the order lines"))?;
    Ok(TxnOutput::OrderStatus { c_id, balance, o_id: Some(o_id), carrier, lines })
}

/// Delivery (§2.7.4): all districts of the warehouse in one transaction.
fn delivery(ctx: &Context, tx: &mut Transaction, i: &DeliveryInput) -> Result<TxnOutput> {
    let t = &ctx.tables;
    let now = super::load::now_us();
    let mut delivered = Vec::new();
    let mut skipped = 0;
    // Rows decoded into the same buffers for every district.
    let (mut order, mut c, mut lines) = (Vec::new(), Vec::new(), Vec::<Vec<Value>>::new());
    for d in 1..=ctx.districts {
        // The oldest undelivered order: the first NEW-ORDER row of the district.
        let lo = Value::Int(s::order_key(i.w, d, 0));
        let hi = Value::Int(s::order_key(i.w, d, s::MAX_ORDER_ID));
        let mut oldest = None;
        tx.range(&t.new_order, Bound::Included(&lo), Bound::Included(&hi), LockMode::Exclusive, |r| {
            oldest = Some(int(&r, s::new_order::O_ID));
            Ok(false)
        })
        .map_err(eng("Delivery: finding the oldest new order"))?;
        let Some(o_id) = oldest else {
            skipped += 1;
            continue;
        };
        let okey = Value::Int(s::order_key(i.w, d, o_id));
        if !tx.delete(&t.new_order, &okey).map_err(eng("Delivery: deleting the new-order row"))? {
            return Err(missing(
                "new_order",
                format!("order {o_id} of district {}/{d} (locked, then gone)", i.w),
            ));
        }
        if !tx
            .get_for_update_into(&t.orders, &okey, &mut order)
            .map_err(eng("Delivery: reading the order"))?
        {
            return Err(missing("orders", format!("order {o_id} of district {}/{d}", i.w)));
        }
        let c_id = vint(&order, "orders", s::orders::C_ID)? as u32;
        order[s::orders::CARRIER_ID] = Value::Int(i64::from(i.carrier));
        tx.update(&t.orders, &order).map_err(eng("Delivery: updating the order"))?;
        let lo = Value::Int(s::order_line_key(i.w, d, o_id, 0));
        let hi = Value::Int(s::order_line_key(i.w, d, o_id, 15));
        let mut n = 0;
        tx.range(&t.order_line, Bound::Included(&lo), Bound::Included(&hi), LockMode::Exclusive, |r| {
            if n == lines.len() {
                lines.push(Vec::new());
            }
            r.values_into(&mut lines[n])?;
            n += 1;
            Ok(true)
        })
        .map_err(eng("Delivery: reading the order lines"))?;
        let mut sum = 0;
        for ol in &mut lines[..n] {
            sum += vint(ol, "order_line", s::order_line::AMOUNT)?;
            ol[s::order_line::DELIVERY_D] = Value::Int(now);
            tx.update(&t.order_line, ol).map_err(eng("Delivery: updating an order line"))?;
        }
        let ckey = Value::Int(s::customer_key(i.w, d, c_id));
        if !tx
            .get_for_update_into(&t.customer, &ckey, &mut c)
            .map_err(eng("Delivery: reading the customer"))?
        {
            return Err(missing("customer", format!("customer {c_id} of district {}/{d}", i.w)));
        }
        c[s::customer::BALANCE] = Value::Int(vint(&c, "customer", s::customer::BALANCE)? + sum);
        c[s::customer::DELIVERY_CNT] = Value::Int(vint(&c, "customer", s::customer::DELIVERY_CNT)? + 1);
        tx.update(&t.customer, &c).map_err(eng("Delivery: updating the customer"))?;
        delivered.push((d, o_id));
    }
    Ok(TxnOutput::Delivery { delivered, skipped })
}

/// Stock-Level (§2.8.2).
fn stock_level(ctx: &Context, tx: &mut Transaction, i: &StockLevelInput) -> Result<TxnOutput> {
    let t = &ctx.tables;
    let next = tx
        .read(&t.district, &Value::Int(s::district_key(i.w, i.d)), |r| int(&r, s::district::NEXT_O_ID))
        .map_err(eng("Stock-Level: reading the district"))?
        .ok_or_else(|| missing("district", format!("district {} of warehouse {}", i.d, i.w)))?;
    let lo = Value::Int(s::order_line_key(i.w, i.d, (next - 20).max(0), 0));
    let hi = Value::Int(s::order_line_key(i.w, i.d, next, 0));
    let mut items = BTreeSet::new();
    tx.range(&t.order_line, Bound::Included(&lo), Bound::Excluded(&hi), LockMode::Shared, |r| {
        items.insert(int(&r, s::order_line::I_ID) as u32);
        Ok(true)
    })
    .map_err(eng("Stock-Level: reading the last orders' lines"))?;
    let mut low_stock = 0;
    for item in items {
        let q = tx
            .read(&t.stock, &Value::Int(s::stock_key(i.w, item)), |r| int(&r, s::stock::QUANTITY))
            .map_err(eng("Stock-Level: reading stock"))?
            .ok_or_else(|| missing("stock", format!("item {item} of warehouse {}", i.w)))?;
        low_stock += u32::from(q < i.threshold);
    }
    Ok(TxnOutput::StockLevel { low_stock })
}
