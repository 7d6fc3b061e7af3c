//! Civil dates and day numbers: the one calendar the workspace uses (SQL's `date` type, the
//! lab's timestamps, the CLI's `--until`).
//!
//! Owns: [`days_from_civil`] and [`civil_from_days`] (Howard Hinnant's algorithms, proleptic
//! Gregorian, day 0 = 1970-01-01). Invariant: the two are inverse for every date of years
//! -1 000 000 ..= 1 000 000.

/// Days since 1970-01-01 of the civil date `y`-`m`-`d` (month 1..=12, day 1..=31; proleptic
/// Gregorian, so year 0 and negative years are allowed).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month 1..=12, day 1..=31) of `z` days since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
    }

    #[test]
    fn inverse_over_a_wide_range() {
        let mut z = -400_000_000i64;
        while z < 400_000_000 {
            let (y, m, d) = civil_from_days(z);
            assert!((1..=12).contains(&m) && (1..=31).contains(&d), "{z}: {y}-{m}-{d}");
            assert_eq!(days_from_civil(y, m, d), z, "{y}-{m}-{d}");
            z += 9_973;
        }
    }
}
