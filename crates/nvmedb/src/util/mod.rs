//! Small shared helpers with no engine knowledge: seeded randomness, checksums, locks, byte
//! codecs.
//!
//! Owns: `Rng` (a seeded, reproducible generator, so every randomised test and workload can be
//! replayed from its printed seed), `crc32c` helpers, and [`sync`] (taking locks whatever a
//! panicking holder left), and [`bytes`] (the little-endian readers and writer every format
//! uses).

pub mod bytes;
mod rng;
pub mod sync;
#[cfg(test)]
pub(crate) mod testing;

pub use rng::Rng;

/// CRC32C (Castagnoli) of `bytes`, hardware-accelerated where the CPU supports it.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Continues a CRC32C over more bytes.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}
