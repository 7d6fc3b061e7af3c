//! Hash keys: datums encoded as bytes so that values SQL calls equal encode equally.
//!
//! Owns: [`encode`]. Invariant: `a.compare(b) == Equal` implies equal encodings (integers and
//! numerics of equal value, any scale; dates and the timestamps at their midnight; char(n)
//! with or without its padding), and different encodings mean different values; each value's
//! encoding is self-delimiting, so a row's keys concatenate unambiguously.

use crate::datetime::DAY_US;
use crate::types::Datum;

/// Appends the key encoding of `d` to `out`.
pub fn encode(d: &Datum, out: &mut Vec<u8>) {
    match d {
        Datum::Null => out.push(0),
        Datum::Bool(b) => {
            out.push(1);
            out.push(u8::from(*b));
        }
        Datum::Int(v) => {
            out.push(2);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Datum::Numeric(v, s) => {
            // Normalized: no trailing zero digits; an integer value encodes as an integer.
            let (mut v, mut s) = (*v, *s);
            while s > 0 && v % 10 == 0 {
                v /= 10;
                s -= 1;
            }
            match (s, i64::try_from(v)) {
                (0, Ok(i)) => encode(&Datum::Int(i), out),
                _ => {
                    out.push(3);
                    out.extend_from_slice(&v.to_le_bytes());
                    out.push(s);
                }
            }
        }
        Datum::Float(f) => {
            if f.fract() == 0.0 && f.abs() < 9.0e18 {
                encode(&Datum::Int(*f as i64), out);
            } else {
                out.push(4);
                let f = if *f == 0.0 { 0.0 } else { *f };
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
        }
        Datum::Text(t) => {
            let t = t.trim_end_matches('\0');
            out.push(5);
            out.extend_from_slice(&(t.len() as u32).to_le_bytes());
            out.extend_from_slice(t.as_bytes());
        }
        Datum::Bytes(b) => {
            out.push(6);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        Datum::Date(d) => encode(&Datum::Timestamp(i64::from(*d) * DAY_US), out),
        Datum::Timestamp(t) => {
            out.push(7);
            out.extend_from_slice(&t.to_le_bytes());
        }
        Datum::Interval(iv) => {
            out.push(8);
            out.extend_from_slice(&iv.sort_key().to_le_bytes());
        }
        Datum::Array(items) => {
            out.push(9);
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            encode_all(items, out);
        }
    }
}

/// The key of several values.
pub fn encode_all<'a>(ds: impl IntoIterator<Item = &'a Datum>, out: &mut Vec<u8>) {
    for d in ds {
        encode(d, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(d: &Datum) -> Vec<u8> {
        let mut v = Vec::new();
        encode(d, &mut v);
        v
    }

    #[test]
    fn equal_values_encode_equally() {
        assert_eq!(key(&Datum::Int(5)), key(&Datum::Numeric(500, 2)));
        assert_eq!(key(&Datum::Int(5)), key(&Datum::Float(5.0)));
        assert_eq!(key(&Datum::Numeric(150, 2)), key(&Datum::Numeric(15, 1)));
        assert_ne!(key(&Datum::Numeric(15, 1)), key(&Datum::Int(15)));
        assert_eq!(key(&Datum::Text("ab\0\0".into())), key(&Datum::Text("ab".into())));
        assert_eq!(key(&Datum::Date(1)), key(&Datum::Timestamp(DAY_US)));
        // Self-delimiting: ("a", "bc") differs from ("ab", "c").
        let mut x = Vec::new();
        encode_all([&Datum::Text("a".into()), &Datum::Text("bc".into())], &mut x);
        let mut y = Vec::new();
        encode_all([&Datum::Text("ab".into()), &Datum::Text("c".into())], &mut y);
        assert_ne!(x, y);
    }
}
