//! Order-preserving key encodings.
//!
//! Owns: how typed values become B+tree keys whose byte order equals the values' order.
//! Integers: 8 bytes big-endian with the sign bit flipped. Byte strings inside composite keys:
//! every 0x00 is escaped as 0x00 0xFF and the string ends with 0x00 0x01, so a shorter string
//! sorts before its extensions and components never bleed into each other.

/// Encodes an `i64` so that byte order equals numeric order.
pub fn encode_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// Decodes [`encode_i64`]; `None` if `b` is not 8 bytes.
pub fn decode_i64(b: &[u8]) -> Option<i64> {
    let a: [u8; 8] = b.try_into().ok()?;
    Some((u64::from_be_bytes(a) ^ (1 << 63)) as i64)
}

/// Appends `s` as a self-delimiting, order-preserving component of a composite key.
pub fn push_bytes_component(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Reads a component written by [`push_bytes_component`]; returns it and the rest.
pub fn pop_bytes_component(b: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == 0 {
            match b.get(i + 1)? {
                0xFF => out.push(0),
                0x01 => return Some((out, &b[i + 2..])),
                _ => return None,
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::Rng;

    #[test]
    fn integer_order_is_byte_order() {
        let mut rng = Rng::new(1);
        let mut vals: Vec<i64> = (0..500).map(|_| rng.next_u64() as i64).collect();
        vals.extend([i64::MIN, -1, 0, 1, i64::MAX]);
        for &a in &vals {
            assert_eq!(decode_i64(&encode_i64(a)), Some(a));
            for &b in vals.iter().take(50) {
                assert_eq!(a.cmp(&b), encode_i64(a).cmp(&encode_i64(b)), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn composite_components_keep_order_and_round_trip() {
        let samples: Vec<Vec<u8>> =
            vec![vec![], vec![0], vec![0, 0], vec![0, 1], vec![1], vec![1, 0], vec![0xFF], b"abc".to_vec()];
        for a in &samples {
            let mut ea = Vec::new();
            push_bytes_component(&mut ea, a);
            ea.extend_from_slice(b"tail");
            let (back, rest) = pop_bytes_component(&ea).unwrap();
            assert_eq!(&back, a);
            assert_eq!(rest, b"tail");
            for b in &samples {
                let mut eb = Vec::new();
                push_bytes_component(&mut eb, b);
                let mut ea2 = Vec::new();
                push_bytes_component(&mut ea2, a);
                assert_eq!(a.cmp(b), ea2.cmp(&eb), "{a:?} vs {b:?}");
            }
        }
    }
}
