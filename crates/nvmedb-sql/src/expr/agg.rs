//! Aggregate functions: their accumulators, result types and final values.
//!
//! Owns: [`AggFunc`] and [`Acc`]. Invariant: integer sums are exact (kept as i128 numerics),
//! so `sum(bigint)` cannot overflow before its result type's range is checked; an
//! accumulator can be merged with another of the same aggregate ([`AggFunc::merge`]), which
//! partial (spilled or parallel) aggregation relies on.

use super::{arith, BinOp};
use crate::error::{code, SqlError, SqlResult};
use crate::types::{Datum, SqlType, DEFAULT_NUMERIC_SCALE};
use std::cmp::Ordering;

/// Aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunc {
    /// `count(*)`
    CountStar,
    /// `count(x)`
    Count,
    /// `sum(x)`
    Sum,
    /// `min(x)`
    Min,
    /// `max(x)`
    Max,
    /// `avg(x)`
    Avg,
    /// `bool_and(x)` / `every(x)`
    BoolAnd,
    /// `bool_or(x)`
    BoolOr,
    /// `string_agg(x, sep)`: the separator is a constant kept in the call.
    StringAgg,
    /// `stddev_samp(x)` / `stddev(x)`
    StddevSamp,
    /// `var_samp(x)` / `variance(x)`
    VarSamp,
    /// `array_agg(x [ORDER BY …])`: every value, NULLs included; ordered, the argument is
    /// `ARRAY[x, key, …]` and the values are sorted on the keys at the end.
    ArrayAgg(AggOrder),
}

/// The `ORDER BY` of an ordered aggregate: how many keys follow the value in its argument,
/// and per key (bit `i`) whether it sorts descending and whether NULLs come first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AggOrder {
    /// Number of keys (at most 8).
    pub keys: u8,
    /// Bit `i`: key `i` is descending.
    pub desc: u8,
    /// Bit `i`: key `i` puts NULLs first.
    pub nulls_first: u8,
}

impl AggOrder {
    /// Orders two `ARRAY[value, key, …]` entries on their keys.
    fn compare(self, a: &Datum, b: &Datum) -> Ordering {
        let (Datum::Array(a), Datum::Array(b)) = (a, b) else { return Ordering::Equal };
        for k in 0..usize::from(self.keys) {
            let (x, y) = (a.get(k + 1).unwrap_or(&Datum::Null), b.get(k + 1).unwrap_or(&Datum::Null));
            let nulls_first = self.nulls_first & (1 << k) != 0;
            let o = match (x.is_null(), y.is_null()) {
                (true, true) => Ordering::Equal,
                (true, false) => {
                    if nulls_first {
                        Ordering::Less
                    } else {
                        Ordering::Greater
                    }
                }
                (false, true) => {
                    if nulls_first {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    }
                }
                _ => {
                    let o = x.compare(y).unwrap_or(Ordering::Equal);
                    if self.desc & (1 << k) != 0 {
                        o.reverse()
                    } else {
                        o
                    }
                }
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

/// The running state of one aggregate.
#[derive(Debug, Clone)]
pub enum Acc {
    /// count
    Count(i64),
    /// sum / avg: the sum so far (None until a non-NULL value) and the count
    Sum(Option<Datum>, i64),
    /// min / max / bool_and / bool_or: the value so far
    Extreme(Option<Datum>),
    /// string_agg: the text so far
    Text(Option<String>),
    /// variance: count, mean, sum of squared differences (Welford)
    Var(i64, f64, f64),
    /// array_agg: every value so far
    List(Vec<Datum>),
}

impl AggFunc {
    /// The aggregate called `name` (`star`: `count(*)`), if it is one.
    pub fn lookup(name: &str, star: bool) -> Option<AggFunc> {
        Some(match name {
            "count" if star => AggFunc::CountStar,
            "count" => AggFunc::Count,
            "sum" => AggFunc::Sum,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            "avg" => AggFunc::Avg,
            "bool_and" | "every" => AggFunc::BoolAnd,
            "bool_or" => AggFunc::BoolOr,
            "string_agg" => AggFunc::StringAgg,
            "stddev" | "stddev_samp" => AggFunc::StddevSamp,
            "variance" | "var_samp" => AggFunc::VarSamp,
            "array_agg" => AggFunc::ArrayAgg(AggOrder::default()),
            _ => return None,
        })
    }

    /// The SQL name.
    pub fn name(self) -> &'static str {
        match self {
            AggFunc::CountStar | AggFunc::Count => "count",
            AggFunc::Sum => "sum",
            AggFunc::Min => "min",
            AggFunc::Max => "max",
            AggFunc::Avg => "avg",
            AggFunc::BoolAnd => "bool_and",
            AggFunc::BoolOr => "bool_or",
            AggFunc::StringAgg => "string_agg",
            AggFunc::StddevSamp => "stddev_samp",
            AggFunc::VarSamp => "var_samp",
            AggFunc::ArrayAgg(_) => "array_agg",
        }
    }

    /// Checks the argument type; the result type.
    pub fn result_type(self, arg: SqlType) -> SqlResult<SqlType> {
        let bad = || {
            SqlError::new(
                code::UNDEFINED_FUNCTION,
                format!("function {}({}) does not exist", self.name(), arg.name()),
            )
        };
        Ok(match self {
            AggFunc::CountStar | AggFunc::Count => SqlType::Int8,
            AggFunc::Sum => match arg {
                SqlType::Int2 | SqlType::Int4 => SqlType::Int8,
                SqlType::Int8 | SqlType::Unknown => SqlType::Numeric { precision: 38, scale: 0 },
                SqlType::Numeric { scale, .. } => SqlType::Numeric { precision: 38, scale },
                SqlType::Float8 | SqlType::Interval => arg,
                _ => return Err(bad()),
            },
            AggFunc::Avg => match arg {
                SqlType::Float8 => SqlType::Float8,
                SqlType::Interval => SqlType::Interval,
                SqlType::Numeric { scale, .. } => {
                    SqlType::Numeric { precision: 38, scale: scale.max(DEFAULT_NUMERIC_SCALE) }
                }
                t if t.is_integer() || t == SqlType::Unknown => {
                    SqlType::Numeric { precision: 38, scale: DEFAULT_NUMERIC_SCALE }
                }
                _ => return Err(bad()),
            },
            AggFunc::Min | AggFunc::Max => arg,
            AggFunc::BoolAnd | AggFunc::BoolOr if matches!(arg, SqlType::Bool | SqlType::Unknown) => {
                SqlType::Bool
            }
            AggFunc::BoolAnd | AggFunc::BoolOr => return Err(bad()),
            AggFunc::StringAgg if arg.is_text() => SqlType::Text,
            AggFunc::StringAgg => return Err(bad()),
            AggFunc::StddevSamp | AggFunc::VarSamp if arg.is_numeric() => match arg {
                SqlType::Float8 => SqlType::Float8,
                _ => SqlType::Numeric { precision: 38, scale: 16 },
            },
            AggFunc::StddevSamp | AggFunc::VarSamp => return Err(bad()),
            AggFunc::ArrayAgg(_) => SqlType::Array(crate::array::elem(arg)),
        })
    }

    /// A fresh accumulator.
    pub fn start(self) -> Acc {
        match self {
            AggFunc::CountStar | AggFunc::Count => Acc::Count(0),
            AggFunc::Sum | AggFunc::Avg => Acc::Sum(None, 0),
            AggFunc::Min | AggFunc::Max | AggFunc::BoolAnd | AggFunc::BoolOr => Acc::Extreme(None),
            AggFunc::StringAgg => Acc::Text(None),
            AggFunc::StddevSamp | AggFunc::VarSamp => Acc::Var(0, 0.0, 0.0),
            AggFunc::ArrayAgg(_) => Acc::List(Vec::new()),
        }
    }

    /// Adds one input value (`sep`: string_agg's separator).
    pub fn add(self, acc: &mut Acc, v: &Datum, sep: &str) -> SqlResult<()> {
        if self == AggFunc::CountStar {
            if let Acc::Count(n) = acc {
                *n += 1;
            }
            return Ok(());
        }
        if let Acc::List(l) = acc {
            l.push(v.clone());
            return Ok(());
        }
        if v.is_null() {
            return Ok(());
        }
        match acc {
            Acc::Count(n) => *n += 1,
            Acc::Sum(s, n) => {
                *n += 1;
                *s = Some(match (s.take(), v) {
                    (None, Datum::Int(x)) => Datum::Numeric(i128::from(*x), 0),
                    (None, d) => d.clone(),
                    (Some(Datum::Numeric(a, 0)), Datum::Int(x)) => Datum::Numeric(
                        a.checked_add(i128::from(*x)).ok_or_else(|| super::overflow(SqlType::Int8))?,
                        0,
                    ),
                    (Some(Datum::Numeric(a, sa)), Datum::Numeric(b, sb)) if sa == *sb => {
                        Datum::Numeric(a.checked_add(*b).ok_or_else(|| super::overflow(SqlType::Int8))?, sa)
                    }
                    (Some(cur), d) => sum2(&cur, d)?,
                });
            }
            Acc::Extreme(cur) => {
                let replace = match cur {
                    None => true,
                    Some(c) => match self {
                        AggFunc::Min => v.compare(c) == Some(Ordering::Less),
                        AggFunc::Max => v.compare(c) == Some(Ordering::Greater),
                        AggFunc::BoolAnd => *v == Datum::Bool(false),
                        _ => *v == Datum::Bool(true),
                    },
                };
                if replace {
                    *cur = Some(v.clone());
                }
            }
            Acc::Text(cur) => {
                let t = v.to_text(SqlType::Text);
                match cur {
                    None => *cur = Some(t),
                    Some(s) => {
                        s.push_str(sep);
                        s.push_str(&t);
                    }
                }
            }
            Acc::Var(n, mean, m2) => {
                let x = v.as_f64().unwrap_or(f64::NAN);
                *n += 1;
                let d = x - *mean;
                *mean += d / *n as f64;
                *m2 += d * (x - *mean);
            }
            Acc::List(_) => unreachable!("array_agg is handled above"),
        }
        Ok(())
    }

    /// Merges accumulator `other` (of the same aggregate, over other rows) into `acc`.
    pub fn merge(self, acc: &mut Acc, other: Acc, sep: &str) -> SqlResult<()> {
        match (acc, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::List(a), Acc::List(b)) => a.extend(b),
            (Acc::Sum(a, na), Acc::Sum(b, nb)) => {
                *na += nb;
                *a = match (a.take(), b) {
                    (None, x) | (x, None) => x,
                    (Some(x), Some(y)) => Some(sum2(&x, &y)?),
                };
            }
            (acc @ Acc::Extreme(_), Acc::Extreme(Some(v))) => self.add(acc, &v, sep)?,
            (Acc::Text(a), Acc::Text(Some(b))) => match a {
                None => *a = Some(b),
                Some(s) => {
                    s.push_str(sep);
                    s.push_str(&b);
                }
            },
            (Acc::Var(n, mean, m2), Acc::Var(nb, mb, m2b)) if nb > 0 => {
                let total = *n + nb;
                let d = mb - *mean;
                *m2 += m2b + d * d * (*n as f64) * (nb as f64) / total as f64;
                *mean += d * nb as f64 / total as f64;
                *n = total;
            }
            _ => {}
        }
        Ok(())
    }

    /// The final value (`result`: the planned result type).
    pub fn finish(self, acc: Acc, result: SqlType) -> SqlResult<Datum> {
        Ok(match acc {
            Acc::Count(n) => Datum::Int(n),
            Acc::List(l) if l.is_empty() => Datum::Null,
            Acc::List(mut l) => match self {
                AggFunc::ArrayAgg(order) if order.keys > 0 => {
                    l.sort_by(|a, b| order.compare(a, b));
                    let first = |d: Datum| match d {
                        Datum::Array(mut v) if !v.is_empty() => v.swap_remove(0),
                        _ => Datum::Null,
                    };
                    Datum::Array(l.into_iter().map(first).collect())
                }
                _ => Datum::Array(l),
            },
            Acc::Extreme(v) => v.unwrap_or(Datum::Null),
            Acc::Text(s) => s.map_or(Datum::Null, Datum::Text),
            Acc::Sum(None, _) => Datum::Null,
            Acc::Sum(Some(s), n) => {
                if self == AggFunc::Avg {
                    match s {
                        Datum::Interval(iv) => Datum::Interval(
                            iv.scaled(1.0 / n as f64).ok_or_else(|| super::overflow(SqlType::Interval))?,
                        ),
                        // A numeric average keeps the quotient's own scale, as in PostgreSQL.
                        s @ (Datum::Numeric(..) | Datum::Int(_)) => {
                            arith(BinOp::Div, &s, &Datum::Int(n), result)?
                        }
                        s => arith(BinOp::Div, &s, &Datum::Int(n), result)?.coerce(result, "avg")?,
                    }
                } else {
                    s.coerce(result, "sum")?
                }
            }
            Acc::Var(n, _, m2) => {
                if n < 2 {
                    Datum::Null
                } else {
                    let var = m2 / (n - 1) as f64;
                    let v = if self == AggFunc::StddevSamp { var.sqrt() } else { var };
                    Datum::Float(v).coerce(result, self.name())?
                }
            }
        })
    }
}

/// The sum of two non-NULL values of a sum.
fn sum2(a: &Datum, b: &Datum) -> SqlResult<Datum> {
    let ty = match (a, b) {
        (Datum::Float(_), _) | (_, Datum::Float(_)) => SqlType::Float8,
        (Datum::Interval(_), _) => SqlType::Interval,
        (Datum::Numeric(_, sa), Datum::Numeric(_, sb)) => {
            SqlType::Numeric { precision: 38, scale: (*sa).max(*sb) }
        }
        (Datum::Numeric(_, s), _) | (_, Datum::Numeric(_, s)) => {
            SqlType::Numeric { precision: 38, scale: *s }
        }
        _ => SqlType::Numeric { precision: 38, scale: 0 },
    };
    let a = match a {
        Datum::Int(x) => Datum::Numeric(i128::from(*x), 0),
        d => d.clone(),
    };
    arith(BinOp::Add, &a, b, ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_exact_and_averages_round() {
        let f = AggFunc::Sum;
        let mut acc = f.start();
        for v in [i64::MAX, i64::MAX, -5] {
            f.add(&mut acc, &Datum::Int(v), "").unwrap();
        }
        let ty = f.result_type(SqlType::Int8).unwrap();
        assert_eq!(f.finish(acc, ty).unwrap(), Datum::Numeric(2 * i128::from(i64::MAX) - 5, 0));
        let a = AggFunc::Avg;
        let mut acc = a.start();
        for v in [1, 2, 2] {
            a.add(&mut acc, &Datum::Int(v), "").unwrap();
        }
        a.add(&mut acc, &Datum::Null, "").unwrap();
        assert_eq!(
            a.finish(acc, a.result_type(SqlType::Int4).unwrap()).unwrap().to_text(SqlType::Text),
            "1.6666666666666667"
        );
    }

    #[test]
    fn accumulators_merge_like_one_pass() {
        for f in [AggFunc::Count, AggFunc::Sum, AggFunc::Min, AggFunc::Max, AggFunc::Avg, AggFunc::VarSamp] {
            let vals: Vec<Datum> = (1..=10).map(|i| Datum::Numeric(i * 25, 2)).collect();
            let ty = f.result_type(SqlType::Numeric { precision: 10, scale: 2 }).unwrap();
            let mut one = f.start();
            vals.iter().for_each(|v| f.add(&mut one, v, "").unwrap());
            let (mut a, mut b) = (f.start(), f.start());
            vals[..4].iter().for_each(|v| f.add(&mut a, v, "").unwrap());
            vals[4..].iter().for_each(|v| f.add(&mut b, v, "").unwrap());
            f.merge(&mut a, b, "").unwrap();
            let (x, y) = (f.finish(one, ty).unwrap(), f.finish(a, ty).unwrap());
            assert_eq!(x.compare(&y), Some(Ordering::Equal), "{f:?}: {x:?} vs {y:?}");
        }
    }

    #[test]
    fn string_agg_and_bools() {
        let f = AggFunc::StringAgg;
        let mut acc = f.start();
        for v in ["a", "b", "c"] {
            f.add(&mut acc, &Datum::Text(v.into()), ", ").unwrap();
        }
        assert_eq!(f.finish(acc, SqlType::Text).unwrap(), Datum::Text("a, b, c".into()));
        let b = AggFunc::BoolAnd;
        let mut acc = b.start();
        for v in [true, false, true] {
            b.add(&mut acc, &Datum::Bool(v), "").unwrap();
        }
        assert_eq!(b.finish(acc, SqlType::Bool).unwrap(), Datum::Bool(false));
    }
}
