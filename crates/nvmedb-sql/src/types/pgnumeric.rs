//! PostgreSQL's binary format of `numeric` (what a client sends and receives for a numeric
//! in the binary format).
//!
//! Owns: the conversion between a fixed-point value and base-10000 digit groups. Invariant:
//! encoding then decoding gives the value and scale back.

use super::rescale;

/// PostgreSQL's binary numeric: ndigits, weight, sign, dscale (i16/u16 each), then base-10000
/// digits, most significant first.
pub(super) fn encode_pg_numeric(v: i128, scale: u8, out: &mut Vec<u8>) {
    let neg = v < 0;
    let mut mag = v.unsigned_abs();
    // Align the fractional part to whole base-10000 digits.
    let frac_groups = u32::from(scale).div_ceil(4);
    let pad = frac_groups * 4 - u32::from(scale);
    mag *= 10u128.pow(pad);
    let mut groups = Vec::new();
    while mag > 0 {
        groups.push((mag % 10_000) as i16);
        mag /= 10_000;
    }
    let mut weight = groups.len() as i16 - 1 - frac_groups as i16;
    groups.reverse();
    // Strip leading and trailing zero groups.
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.extend_from_slice(&(groups.len() as i16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&(if neg { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&u16::from(scale).to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
}

pub(super) fn decode_pg_numeric(b: &[u8]) -> Option<(i128, u8)> {
    let g = |i: usize| -> Option<i16> { Some(i16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?)) };
    let n = g(0)? as usize;
    let weight = i32::from(g(2)?);
    let sign = g(4)? as u16;
    let dscale = u8::try_from(g(6)?).ok()?;
    if sign == 0xC000 || b.len() != 8 + 2 * n {
        return None; // NaN or malformed
    }
    // value = Σ digit_i × 10000^(weight - i); scaled by 10^dscale.
    let mut v: i128 = 0;
    let mut exp10: i32 = 0; // power of ten of the last digit accumulated
    for i in 0..n {
        let d = i128::from(g(8 + 2 * i)?);
        v = v.checked_mul(10_000)?.checked_add(d)?;
        exp10 = (weight - i as i32) * 4;
    }
    if n == 0 {
        return Some((0, dscale));
    }
    // v × 10^exp10 × 10^dscale
    let shift = exp10 + i32::from(dscale);
    let v = if shift >= 0 {
        v.checked_mul(10i128.checked_pow(shift as u32)?)?
    } else {
        rescale(v, (-shift) as u8, 0)?
    };
    Some((if sign == 0x4000 { -v } else { v }, dscale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numerics_round_trip_through_the_binary_format() {
        for (v, s) in [(12345i128, 2u8), (-5, 2), (0, 3), (10_000_000, 0), (123_456_789, 4), (1, 9)] {
            let mut out = Vec::new();
            encode_pg_numeric(v, s, &mut out);
            assert_eq!(decode_pg_numeric(&out), Some((v, s)), "{v} scale {s}");
        }
        // 123.45 as PostgreSQL sends it: 2 digits, weight 0, +, dscale 2: [123, 4500].
        let pg = [0, 2, 0, 0, 0, 0, 0, 2, 0, 123, 0x11, 0x94];
        assert_eq!(decode_pg_numeric(&pg), Some((12345, 2)));
        let mut out = Vec::new();
        encode_pg_numeric(12345, 2, &mut out);
        assert_eq!(out, pg);
    }
}
