//! The consistency conditions of TPC-C 5.11 §3.3.2, conditions 1–4, checked on a quiet
//! database (after a run, after recovery, or by `nvmedb lab tpcc --check DIR`).
//!
//! Owns: [`check_consistency`] and [`ConsistencyReport`]. Each table is scanned once and
//! aggregated per warehouse or district; then, for every warehouse and district:
//! 1. W_YTD = Σ D_YTD over the warehouse's districts;
//! 2. D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) over the district's ORDER and NEW-ORDER rows
//!    (the NEW-ORDER part only when the district has NEW-ORDER rows);
//! 3. max(NO_O_ID) − min(NO_O_ID) + 1 = the number of the district's NEW-ORDER rows;
//! 4. Σ O_OL_CNT = the number of the district's ORDER-LINE rows.
//!
//! Invariant: the first condition that fails is returned as [`LabError::Inconsistent`], whose
//! text names the condition, the warehouse and (for 2–4) the district, with both sides' values.

use super::schema::{self as s, Tables};
use crate::error::{LabError, Result};
use nvmedb::{RowView, Table};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a passing check covered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsistencyReport {
    /// Warehouses checked (condition 1).
    pub warehouses: u64,
    /// Districts checked (conditions 2–4).
    pub districts: u64,
    /// ORDER rows seen.
    pub orders: u64,
    /// NEW-ORDER rows seen.
    pub new_orders: u64,
    /// ORDER-LINE rows seen.
    pub order_lines: u64,
}

impl ConsistencyReport {
    /// One line for a summary.
    pub fn describe(&self) -> String {
        format!(
            "TPC-C consistency conditions 1-4 (§3.3.2) hold: {} warehouses, {} districts, {} orders, {} new orders, {} order lines",
            self.warehouses, self.districts, self.orders, self.new_orders, self.order_lines
        )
    }
}

#[derive(Debug, Default)]
struct DistrictAgg {
    d_ytd: i64,
    next_o_id: i64,
    max_o_id: Option<i64>,
    ol_cnt_sum: i64,
    no: Option<(i64, i64)>,
    no_count: i64,
    ol_rows: i64,
}

/// How a failed condition is named: "TPC-C consistency condition 2 (§3.3.2.2) fails at
/// warehouse 1, district 3".
pub fn violation(condition: u8, warehouse: u32, district: Option<u32>) -> String {
    let mut s = format!(
        "TPC-C consistency condition {condition} (§3.3.2.{condition}) fails at warehouse {warehouse}"
    );
    if let Some(d) = district {
        s.push_str(&format!(", district {d}"));
    }
    s
}

/// Cents as dollars and cents.
fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", cents.unsigned_abs() / 100, cents.unsigned_abs() % 100)
}

fn scan(table: &Table, mut f: impl FnMut(RowView<'_>)) -> Result<u64> {
    let mut n = 0;
    table
        .scan(|r| {
            n += 1;
            f(r);
            Ok(true)
        })
        .map_err(LabError::engine(format!("scanning table `{}` for the consistency check", table.name())))?;
    Ok(n)
}

/// Checks conditions 1–4 of §3.3.2 over the whole database. Run it when no transaction is
/// running (the scans take no locks).
pub fn check_consistency(t: &Tables) -> Result<ConsistencyReport> {
    let mut w_ytd: BTreeMap<u32, i64> = BTreeMap::new();
    let mut dist: BTreeMap<(u32, u32), DistrictAgg> = BTreeMap::new();
    let wd = |r: &RowView<'_>, w: usize, d: usize| (r.int(w) as u32, r.int(d) as u32);
    let warehouses = scan(&t.warehouse, |r| {
        w_ytd.insert(r.int(s::warehouse::ID) as u32, r.int(s::warehouse::YTD));
    })?;
    let districts = scan(&t.district, |r| {
        let a = dist.entry(wd(&r, s::district::W_ID, s::district::ID)).or_default();
        a.d_ytd = r.int(s::district::YTD);
        a.next_o_id = r.int(s::district::NEXT_O_ID);
    })?;
    let mut stray: Option<(&'static str, u32, u32)> = None;
    let mut agg = |table: &'static str, key: (u32, u32), f: &mut dyn FnMut(&mut DistrictAgg)| match dist
        .get_mut(&key)
    {
        Some(a) => f(a),
        None => {
            stray.get_or_insert((table, key.0, key.1));
        }
    };
    let orders = scan(&t.orders, |r| {
        let o = r.int(s::orders::ID);
        let n = r.int(s::orders::OL_CNT);
        agg("orders", wd(&r, s::orders::W_ID, s::orders::D_ID), &mut |a| {
            a.max_o_id = Some(a.max_o_id.map_or(o, |m| m.max(o)));
            a.ol_cnt_sum += n;
        });
    })?;
    let new_orders = scan(&t.new_order, |r| {
        let o = r.int(s::new_order::O_ID);
        agg("new_order", wd(&r, s::new_order::W_ID, s::new_order::D_ID), &mut |a| {
            a.no = Some(a.no.map_or((o, o), |(lo, hi)| (lo.min(o), hi.max(o))));
            a.no_count += 1;
        });
    })?;
    let order_lines = scan(&t.order_line, |r| {
        agg("order_line", wd(&r, s::order_line::W_ID, s::order_line::D_ID), &mut |a| a.ol_rows += 1);
    })?;
    let fail = |condition: u8, w: u32, d: Option<u32>, detail: String| {
        Err(LabError::Inconsistent { what: violation(condition, w, d), detail })
    };
    if let Some((table, w, d)) = stray {
        return fail(
            2,
            w,
            Some(d),
            format!("table `{table}` has rows of a district that has no DISTRICT row"),
        );
    }
    for (&w, &ytd) in &w_ytd {
        let sum: i64 = dist.range((w, 0)..(w + 1, 0)).map(|(_, a)| a.d_ytd).sum();
        if ytd != sum {
            return fail(1, w, None, format!("W_YTD = {} but the sum of D_YTD = {}", money(ytd), money(sum)));
        }
    }
    for (&(w, d), a) in &dist {
        if !w_ytd.contains_key(&w) {
            return fail(1, w, Some(d), "a DISTRICT row names a warehouse that has no WAREHOUSE row".into());
        }
        let max_o = a.max_o_id.unwrap_or(0);
        if a.next_o_id - 1 != max_o {
            return fail(
                2,
                w,
                Some(d),
                format!("D_NEXT_O_ID - 1 = {} but max(O_ID) = {max_o}", a.next_o_id - 1),
            );
        }
        if let Some((lo, hi)) = a.no {
            if hi != max_o {
                return fail(2, w, Some(d), format!("max(O_ID) = {max_o} but max(NO_O_ID) = {hi}"));
            }
            if hi - lo + 1 != a.no_count {
                return fail(
                    3,
                    w,
                    Some(d),
                    format!(
                        "max(NO_O_ID) - min(NO_O_ID) + 1 = {hi} - {lo} + 1 = {} but the district has {} NEW-ORDER rows",
                        hi - lo + 1,
                        a.no_count
                    ),
                );
            }
        }
        if a.ol_cnt_sum != a.ol_rows {
            return fail(
                4,
                w,
                Some(d),
                format!(
                    "the sum of O_OL_CNT = {} but the district has {} ORDER-LINE rows",
                    a.ol_cnt_sum, a.ol_rows
                ),
            );
        }
    }
    Ok(ConsistencyReport { warehouses, districts, orders, new_orders, order_lines })
}
