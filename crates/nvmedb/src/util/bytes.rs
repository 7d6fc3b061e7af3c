//! Little-endian byte codecs shared by the engine's on-disk and on-wire formats.
//!
//! Owns: fixed-offset reads ([`u16_at`], [`u32_at`], [`u64_at`]) for headers whose length the
//! caller has already checked, the bounds-checked [`ByteReader`] for decoding bytes that may
//! be short or corrupt (every read past the end is `None`, never a panic), and [`ByteWriter`],
//! which appends. Every multi-byte integer the engine stores is little-endian; the log's
//! compact records also use LEB128 varints ([`ByteWriter::var`], [`ByteReader::var`]: seven
//! bits a byte, low bits first, at most ten bytes).
//!
//! Invariants: a `ByteReader` never moves past the end of its bytes; a read that does not fit
//! leaves the position where it was.

/// The `u16` at byte offset `at`.
///
/// # Panics
/// If `b` is shorter than `at + 2` (callers check header lengths first, as with slicing).
#[inline]
pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The `u32` at byte offset `at`.
///
/// # Panics
/// If `b` is shorter than `at + 4`.
#[inline]
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The `u64` at byte offset `at`.
///
/// # Panics
/// If `b` is shorter than `at + 8`.
#[inline]
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads integers and byte strings from the front of a slice, bounds-checked.
#[derive(Debug, Clone)]
pub struct ByteReader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    /// A reader at the start of `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Self { b, pos: 0 }
    }

    /// Bytes read so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    /// The next `n` bytes, or `None` if fewer are left.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16_at(s, 0))
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|s| u32_at(s, 0))
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|s| u64_at(s, 0))
    }

    /// A varint written by [`ByteWriter::var`] (`None` if short, or longer than a `u64` holds).
    #[inline]
    pub fn var(&mut self) -> Option<u64> {
        let (mut v, mut shift, start) = (0u64, 0u32, self.pos);
        loop {
            let Some(&b) = self.b.get(self.pos) else {
                self.pos = start;
                return None;
            };
            self.pos += 1;
            if shift == 63 && b > 1 {
                self.pos = start;
                return None;
            }
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
            shift += 7;
        }
    }

    /// A varint length, then that many bytes.
    #[inline]
    pub fn var_bytes(&mut self) -> Option<&'a [u8]> {
        let start = self.pos;
        let n = self.var()?;
        match usize::try_from(n).ok().and_then(|n| self.take(n)) {
            Some(b) => Some(b),
            None => {
                self.pos = start;
                None
            }
        }
    }

    /// A string written by [`ByteWriter::str16`]: a `u16` length, then UTF-8 bytes (`None`
    /// if short or not UTF-8).
    pub fn str16(&mut self) -> Option<String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// Appends little-endian integers and byte strings to a vector.
#[derive(Debug)]
pub struct ByteWriter<'v>(&'v mut Vec<u8>);

impl<'v> ByteWriter<'v> {
    /// A writer appending to `out`.
    pub fn to(out: &'v mut Vec<u8>) -> Self {
        Self(out)
    }

    fn buf(&mut self) -> &mut Vec<u8> {
        self.0
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf().extend_from_slice(b);
        self
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf().push(v);
        self
    }

    /// Appends a little-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends `v` as a LEB128 varint (1 byte below 128, at most 10).
    #[inline]
    pub fn var(&mut self, mut v: u64) -> &mut Self {
        let out = self.buf();
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        self
    }

    /// Appends `b` with a varint length prefix (read back by [`ByteReader::var_bytes`]).
    #[inline]
    pub fn var_bytes(&mut self, b: &[u8]) -> &mut Self {
        self.var(b.len() as u64).bytes(b)
    }

    /// Appends `s` with a `u16` length prefix (read back by [`ByteReader::str16`]).
    ///
    /// # Panics
    /// If `s` is longer than 65 535 bytes (names are checked against that limit where they
    /// are accepted).
    pub fn str16(&mut self, s: &str) -> &mut Self {
        let n = u16::try_from(s.len()).expect("a length-prefixed string fits in 65 535 bytes");
        self.u16(n).bytes(s.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_short_or_overlong_input() {
        let vals = [0u64, 1, 127, 128, 300, 16_383, 16_384, u32::MAX as u64, u64::MAX - 1, u64::MAX];
        let mut b = Vec::new();
        for v in vals {
            ByteWriter::to(&mut b).var(v);
        }
        ByteWriter::to(&mut b).var_bytes(b"abc");
        let mut r = ByteReader::new(&b);
        for v in vals {
            assert_eq!(r.var(), Some(v));
        }
        assert_eq!(r.var_bytes(), Some(&b"abc"[..]));
        assert_eq!(r.var(), None);
        let mut one = Vec::new();
        ByteWriter::to(&mut one).var(300);
        assert_eq!(one.len(), 2);
        let mut short = ByteReader::new(&one[..1]);
        assert_eq!((short.var(), short.pos()), (None, 0), "a cut varint leaves the position");
        // Eleven continuation bytes, or a tenth byte beyond 64 bits, are not a u64.
        assert_eq!(ByteReader::new(&[0xFF; 11]).var(), None);
        let mut over = vec![0xFF; 9];
        over.push(0x02);
        assert_eq!(ByteReader::new(&over).var(), None);
        // A length longer than what follows is None and leaves the position.
        let mut r = ByteReader::new(&[5, 1, 2]);
        assert_eq!((r.var_bytes(), r.pos()), (None, 0));
    }

    #[test]
    fn round_trip_and_short_reads_are_none() {
        let mut b = Vec::new();
        ByteWriter::to(&mut b).u8(7).u16(0x1234).u32(0xdead_beef).u64(u64::MAX - 1).str16("héllo");
        assert_eq!(b.len(), 1 + 2 + 4 + 8 + 2 + 6);
        let mut r = ByteReader::new(&b);
        assert_eq!(r.u8(), Some(7));
        assert_eq!(r.u16(), Some(0x1234));
        assert_eq!(r.u32(), Some(0xdead_beef));
        assert_eq!(r.u64(), Some(u64::MAX - 1));
        assert_eq!(r.str16().as_deref(), Some("héllo"));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.u8(), None);
        let mut short = ByteReader::new(&b[..5]);
        assert_eq!(short.u8(), Some(7));
        assert_eq!(short.u16(), Some(0x1234));
        assert_eq!(short.u32(), None, "a read past the end is None");
        assert_eq!(short.pos(), 3, "and leaves the position where it was");
        assert_eq!(short.take(usize::MAX), None);
        assert_eq!(u32_at(&b, 3), 0xdead_beef);
        assert_eq!(u64_at(&b, 7), u64::MAX - 1);
        assert_eq!(u16_at(&b, 1), 0x1234);
    }

    #[test]
    fn writer_appends_to_a_caller_vector() {
        let mut v = vec![1u8];
        ByteWriter::to(&mut v).u32(2).u8(3);
        assert_eq!(v, [1, 2, 0, 0, 0, 3]);
    }
}
