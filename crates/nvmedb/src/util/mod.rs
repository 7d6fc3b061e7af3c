//! Small shared helpers with no engine knowledge: seeded randomness, checksums, locks, byte
//! codecs.
//!
//! Owns: `Rng` (a seeded, reproducible generator, so every randomised test and workload can be
//! replayed from its printed seed), `crc32c` helpers, an FNV-1a hash, and [`sync`] (taking locks whatever a
//! panicking holder left), [`bytes`] (the little-endian readers and writer every format
//! uses), [`calendar`] (civil dates and day numbers), [`hist`] (the live atomic histograms behind the operational metrics), and [`sched`] (lowering
//! a thread's scheduling priority).

pub mod bytes;
pub mod calendar;
pub mod hist;
mod rng;
pub mod sched;
pub mod sync;
#[cfg(test)]
pub(crate) mod testing;

pub use rng::Rng;

/// FNV-1a (64-bit) of `bytes`: a cheap, stable hash for spreading keys over stripes and
/// buckets and for naming files; not for checking data (that is [`crc32c`]).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// CRC32C (Castagnoli) of `bytes`, hardware-accelerated where the CPU supports it.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Continues a CRC32C over more bytes.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}
