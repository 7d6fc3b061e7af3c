//! Dates and intervals: their text forms, arithmetic and the date functions built on them
//! (`extract`, `date_trunc`, `+`/`-` with intervals).
//!
//! Owns: [`Interval`] (months, days and microseconds kept apart, as PostgreSQL keeps them:
//! a month is not a fixed number of days), date parsing and formatting, and calendar
//! arithmetic. Invariant: dates are days since 1970-01-01 and timestamps microseconds since
//! 1970-01-01 00:00:00, both proleptic Gregorian without time zone, like [`crate::types`].

use crate::error::{code, SqlError, SqlResult};

/// Microseconds in a day.
pub const DAY_US: i64 = 86_400_000_000;

/// A PostgreSQL interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Interval {
    /// Months (a year is 12).
    pub months: i32,
    /// Days.
    pub days: i32,
    /// Microseconds.
    pub micros: i64,
}

impl Interval {
    /// A comparable magnitude (a month counted as 30 days, as PostgreSQL compares them).
    pub fn sort_key(&self) -> i128 {
        (i128::from(self.months) * 30 + i128::from(self.days)) * i128::from(DAY_US) + i128::from(self.micros)
    }

    /// Negated.
    pub fn negated(self) -> Interval {
        Interval { months: -self.months, days: -self.days, micros: -self.micros }
    }

    /// Sum.
    pub fn checked_add(self, o: Interval) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_add(o.months)?,
            days: self.days.checked_add(o.days)?,
            micros: self.micros.checked_add(o.micros)?,
        })
    }

    /// Scaled by `f` (fractions of months and days carry down as PostgreSQL does).
    pub fn scaled(self, f: f64) -> Option<Interval> {
        let months = f64::from(self.months) * f;
        let m = months.trunc();
        let days = f64::from(self.days) * f + (months - m) * 30.0;
        let d = days.trunc();
        let micros = self.micros as f64 * f + (days - d) * DAY_US as f64;
        if !(m.abs() < 2e9 && d.abs() < 2e9 && micros.abs() < 9e18) {
            return None;
        }
        Some(Interval { months: m as i32, days: d as i32, micros: micros.round() as i64 })
    }
}

pub use nvmedb::util::calendar::{civil_from_days, days_from_civil};

fn days_in_month(y: i64, m: i64) -> i64 {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    days_from_civil(ny, nm, 1) - days_from_civil(y, m, 1)
}

/// Parses `YYYY-MM-DD` (a time part after a space or `T` is ignored).
pub fn parse_date(s: &str) -> Option<i32> {
    let s = s.trim();
    let date = s.split([' ', 'T']).next()?;
    let mut p = date.splitn(3, '-');
    let num = |t: &str| -> Option<i64> {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok())?
    };
    let (y, m, d) = (num(p.next()?)?, num(p.next()?)?, num(p.next()?)?);
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    i32::try_from(days_from_civil(y, m, d)).ok()
}

/// Formats days since 1970-01-01 as `YYYY-MM-DD`.
pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(i64::from(days));
    format!("{y:04}-{m:02}-{d:02}")
}

fn bad_interval(s: &str) -> SqlError {
    SqlError::new(code::INVALID_DATETIME_FORMAT, format!("invalid input syntax for type interval: \"{s}\""))
}

/// Parses PostgreSQL's interval input: `N unit` pairs (`1 year 2 mons 3 days`, units
/// singular, plural or abbreviated), an optional `[-]HH:MM[:SS[.f]]`, and `ago`.
pub fn parse_interval(s: &str) -> SqlResult<Interval> {
    let mut iv = Interval::default();
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut i = 0;
    let mut any = false;
    let mut ago = false;
    while i < words.len() {
        let w = words[i];
        if w.eq_ignore_ascii_case("ago") {
            ago = true;
            i += 1;
            continue;
        }
        if w.contains(':') {
            let (neg, t) = match w.strip_prefix('-') {
                Some(t) => (true, t),
                None => (false, w.strip_prefix('+').unwrap_or(w)),
            };
            let parts: Vec<&str> = t.split(':').collect();
            if parts.len() < 2 || parts.len() > 3 {
                return Err(bad_interval(s));
            }
            let h: i64 = parts[0].parse().map_err(|_| bad_interval(s))?;
            let m: i64 = parts[1].parse().map_err(|_| bad_interval(s))?;
            let sec: f64 = parts.get(2).map_or(Ok(0.0), |p| p.parse()).map_err(|_| bad_interval(s))?;
            let us = (h * 3600 + m * 60) * 1_000_000 + (sec * 1e6).round() as i64;
            iv.micros += if neg { -us } else { us };
            any = true;
            i += 1;
            continue;
        }
        // A number, then its unit (in the same word, `3days`, or the next).
        let split = w.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(w.len());
        let (num, unit) = if split < w.len() {
            (&w[..split], w[split..].to_string())
        } else {
            i += 1;
            (w, words.get(i).map_or(String::new(), |u| u.to_string()))
        };
        let n: f64 = num.parse().map_err(|_| bad_interval(s))?;
        let unit = unit.to_ascii_lowercase();
        let unit = unit.trim_end_matches(',');
        let add = |iv: &mut Interval, months: f64, days: f64, us: f64| -> SqlResult<()> {
            let whole = Interval { months: months.trunc() as i32, days: days.trunc() as i32, micros: 0 };
            let frac_days = days.fract() + months.fract() * 30.0;
            let micros = us + frac_days * DAY_US as f64;
            *iv = iv
                .checked_add(Interval { micros: micros.round() as i64, ..whole })
                .ok_or_else(|| SqlError::new(code::NUMERIC_VALUE_OUT_OF_RANGE, "interval out of range"))?;
            Ok(())
        };
        match unit {
            "year" | "years" | "yr" | "yrs" | "y" => add(&mut iv, n * 12.0, 0.0, 0.0)?,
            "month" | "months" | "mon" | "mons" => add(&mut iv, n, 0.0, 0.0)?,
            "week" | "weeks" | "w" => add(&mut iv, 0.0, n * 7.0, 0.0)?,
            "day" | "days" | "d" => add(&mut iv, 0.0, n, 0.0)?,
            "hour" | "hours" | "hr" | "hrs" | "h" => add(&mut iv, 0.0, 0.0, n * 3.6e9)?,
            "minute" | "minutes" | "min" | "mins" | "m" => add(&mut iv, 0.0, 0.0, n * 6e7)?,
            "second" | "seconds" | "sec" | "secs" | "s" => add(&mut iv, 0.0, 0.0, n * 1e6)?,
            "millisecond" | "milliseconds" | "ms" => add(&mut iv, 0.0, 0.0, n * 1e3)?,
            "microsecond" | "microseconds" | "us" => add(&mut iv, 0.0, 0.0, n)?,
            "" => add(&mut iv, 0.0, 0.0, n * 1e6)?, // a bare number is seconds
            _ => return Err(bad_interval(s)),
        }
        any = true;
        i += 1;
    }
    if !any {
        return Err(bad_interval(s));
    }
    Ok(if ago { iv.negated() } else { iv })
}

/// Formats an interval as PostgreSQL's `postgres` style does (`1 year 2 mons 3 days 04:05:06`).
pub fn format_interval(iv: Interval) -> String {
    let mut parts = Vec::new();
    let (y, m) = (iv.months / 12, iv.months % 12);
    let plural = |n: i64, one: &str, many: &str| format!("{n} {}", if n.abs() == 1 { one } else { many });
    if y != 0 {
        parts.push(plural(i64::from(y), "year", "years"));
    }
    if m != 0 {
        parts.push(plural(i64::from(m), "mon", "mons"));
    }
    if iv.days != 0 {
        parts.push(plural(i64::from(iv.days), "day", "days"));
    }
    if iv.micros != 0 || parts.is_empty() {
        let neg = iv.micros < 0;
        let us = iv.micros.unsigned_abs();
        let secs = us / 1_000_000;
        let frac = us % 1_000_000;
        let mut t = format!(
            "{}{:02}:{:02}:{:02}",
            if neg { "-" } else { "" },
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        );
        if frac != 0 {
            let f = format!(".{frac:06}");
            t.push_str(f.trim_end_matches('0'));
        }
        parts.push(t);
    }
    parts.join(" ")
}

/// `date + interval` as a timestamp (PostgreSQL's result type), microseconds.
pub fn add_interval_us(ts: i64, iv: Interval) -> Option<i64> {
    let days = ts.div_euclid(DAY_US);
    let time = ts.rem_euclid(DAY_US);
    let days = add_months_days(days, iv.months, iv.days)?;
    days.checked_mul(DAY_US)?.checked_add(time)?.checked_add(iv.micros)
}

/// Days after adding months (clamping the day to the month's end) then days.
pub fn add_months_days(days: i64, months: i32, add_days: i32) -> Option<i64> {
    let (y, m, d) = civil_from_days(days);
    let total = y * 12 + (m - 1) + i64::from(months);
    let (ny, nm) = (total.div_euclid(12), total.rem_euclid(12) + 1);
    let nd = d.min(days_in_month(ny, nm));
    days_from_civil(ny, nm, nd).checked_add(i64::from(add_days))
}

/// The field named by `extract(field from …)` / `date_part`, of a timestamp.
pub fn extract(field: &str, ts: i64) -> SqlResult<f64> {
    let days = ts.div_euclid(DAY_US);
    let time = ts.rem_euclid(DAY_US);
    let (y, m, d) = civil_from_days(days);
    Ok(match field {
        "year" | "years" => y as f64,
        "month" | "months" => m as f64,
        "day" | "days" => d as f64,
        "quarter" => ((m - 1) / 3 + 1) as f64,
        "hour" => (time / 3_600_000_000) as f64,
        "minute" => (time / 60_000_000 % 60) as f64,
        "second" => (time % 60_000_000) as f64 / 1e6,
        "dow" => (days + 4).rem_euclid(7) as f64,
        "isodow" => ((days + 3).rem_euclid(7) + 1) as f64,
        "doy" => (days - days_from_civil(y, 1, 1) + 1) as f64,
        "decade" => y.div_euclid(10) as f64,
        "century" => (if y > 0 { (y + 99) / 100 } else { -((99 - y) / 100) }) as f64,
        "epoch" => ts as f64 / 1e6,
        "week" => {
            // ISO week: the week with the year's first Thursday is week 1.
            let thursday = days - (days + 3).rem_euclid(7) + 3;
            let (ty, _, _) = civil_from_days(thursday);
            ((thursday - days_from_civil(ty, 1, 1)) / 7 + 1) as f64
        }
        other => {
            return Err(SqlError::new(
                code::INVALID_PARAMETER_VALUE,
                format!("unit \"{other}\" not recognized for type timestamp"),
            ))
        }
    })
}

/// `date_trunc(field, ts)`.
pub fn date_trunc(field: &str, ts: i64) -> SqlResult<i64> {
    let days = ts.div_euclid(DAY_US);
    let (y, m, _) = civil_from_days(days);
    let at = |d: i64| d * DAY_US;
    Ok(match field {
        "microseconds" => ts,
        "millisecond" | "milliseconds" => ts - ts.rem_euclid(1000),
        "second" => ts - ts.rem_euclid(1_000_000),
        "minute" => ts - ts.rem_euclid(60_000_000),
        "hour" => ts - ts.rem_euclid(3_600_000_000),
        "day" => at(days),
        "week" => at(days - (days + 3).rem_euclid(7)),
        "month" => at(days_from_civil(y, m, 1)),
        "quarter" => at(days_from_civil(y, (m - 1) / 3 * 3 + 1, 1)),
        "year" => at(days_from_civil(y, 1, 1)),
        "decade" => at(days_from_civil(y.div_euclid(10) * 10, 1, 1)),
        "century" => at(days_from_civil((y - 1).div_euclid(100) * 100 + 1, 1, 1)),
        other => {
            return Err(SqlError::new(
                code::INVALID_PARAMETER_VALUE,
                format!("unit \"{other}\" not recognized for type timestamp"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_reject_bad_days() {
        for s in ["1998-12-01", "2000-02-29", "1970-01-01", "1969-12-31", "1992-01-02"] {
            assert_eq!(format_date(parse_date(s).unwrap()), s);
        }
        assert_eq!(parse_date("1999-02-29"), None);
        assert_eq!(parse_date("1999-13-01"), None);
    }

    #[test]
    fn intervals_parse_format_and_add_like_postgres() {
        let iv = parse_interval("1 year 2 mons 3 days 04:05:06.5").unwrap();
        assert_eq!(iv, Interval { months: 14, days: 3, micros: 14_706_500_000 });
        assert_eq!(format_interval(iv), "1 year 2 mons 3 days 04:05:06.5");
        assert_eq!(parse_interval("90 days").unwrap(), Interval { days: 90, ..Default::default() });
        assert_eq!(parse_interval("3 month").unwrap().months, 3);
        assert_eq!(format_interval(parse_interval("2 days ago").unwrap()), "-2 days");
        assert!(parse_interval("soon").is_err());
        // 1998-12-01 - 90 days = 1998-09-02 (TPC-H Q1); Jan 31 + 1 month = Feb 28/29.
        let d = i64::from(parse_date("1998-12-01").unwrap()) * DAY_US;
        let r = add_interval_us(d, Interval { days: -90, ..Default::default() }).unwrap();
        assert_eq!(format_date((r / DAY_US) as i32), "1998-09-02");
        let j = i64::from(parse_date("2000-01-31").unwrap());
        assert_eq!(format_date(add_months_days(j, 1, 0).unwrap() as i32), "2000-02-29");
    }

    #[test]
    fn extract_and_trunc_fields() {
        let ts = crate::types::parse_timestamp("2024-05-17 13:45:07").unwrap();
        assert_eq!(extract("year", ts).unwrap(), 2024.0);
        assert_eq!(extract("month", ts).unwrap(), 5.0);
        assert_eq!(extract("quarter", ts).unwrap(), 2.0);
        assert_eq!(extract("dow", ts).unwrap(), 5.0); // a Friday
        assert_eq!(extract("hour", ts).unwrap(), 13.0);
        let t = date_trunc("month", ts).unwrap();
        assert_eq!(crate::types::format_timestamp(t), "2024-05-01 00:00:00");
        let t = date_trunc("week", ts).unwrap();
        assert_eq!(crate::types::format_timestamp(t), "2024-05-13 00:00:00");
        assert!(extract("fortnight", ts).is_err());
    }
}
