//! TPC-C's random data (TPC-C 5.11 §2.1.5, §2.1.6, §4.3.2): uniform values, NURand with its
//! run-time constants, a-strings, n-strings, last names from syllables, zip codes and the
//! "ORIGINAL" data strings.
//!
//! Owns: [`TpccRng`] (a seeded generator with those helpers) and [`NuConstants`]. Invariants:
//! every value is drawn from the seeded generator, so a load or a terminal replays from its
//! seed; the run constant of C_LAST differs from the load constant by 65..=119, never 96 or
//! 112 (§2.1.6.1).

use nvmedb::util::Rng;
use serde::{Deserialize, Serialize};

/// The syllables of §4.3.2.3.
const SYLLABLES: [&str; 10] =
    ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];

/// Characters of a-strings (§4.3.2.2 asks for at least 128 distinct characters; these 62
/// alphanumerics keep rows printable).
const ALNUM: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The run-time constants C of NURand (§2.1.6) for C_LAST, C_ID and OL_I_ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NuConstants {
    /// C for C_LAST (A = 255).
    pub c_last: u64,
    /// C for C_ID (A = 1023).
    pub c_id: u64,
    /// C for OL_I_ID (A = 8191).
    pub ol_i_id: u64,
}

impl NuConstants {
    /// Constants for a load: each uniform in `0..=A`.
    pub fn for_load(rng: &mut TpccRng) -> Self {
        Self { c_last: rng.uniform(0, 255), c_id: rng.uniform(0, 1023), ol_i_id: rng.uniform(0, 8191) }
    }

    /// Constants for a run against a database loaded with `load`: C_LAST at a distance of
    /// 65..=119 from the load's, but neither 96 nor 112 (§2.1.6.1); the others uniform.
    pub fn for_run(load: &NuConstants, rng: &mut TpccRng) -> Self {
        let c_last = loop {
            let c = rng.uniform(0, 255);
            let delta = c.abs_diff(load.c_last);
            if (65..=119).contains(&delta) && delta != 96 && delta != 112 {
                break c;
            }
        };
        Self { c_last, c_id: rng.uniform(0, 1023), ol_i_id: rng.uniform(0, 8191) }
    }

    /// True if `self` may run against a database loaded with `load`.
    pub fn valid_for_run(&self, load: &NuConstants) -> bool {
        let delta = self.c_last.abs_diff(load.c_last);
        (65..=119).contains(&delta) && delta != 96 && delta != 112
    }
}

/// A seeded generator with TPC-C's helpers.
#[derive(Debug, Clone)]
pub struct TpccRng {
    rng: Rng,
}

impl TpccRng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { rng: Rng::new(seed) }
    }

    /// random(x, y): uniform in `x..=y`.
    pub fn uniform(&mut self, x: u64, y: u64) -> u64 {
        debug_assert!(x <= y, "uniform({x}, {y})");
        x + self.rng.below(y - x + 1)
    }

    /// [`TpccRng::uniform`] as `u32`.
    pub fn uniform32(&mut self, x: u32, y: u32) -> u32 {
        self.uniform(u64::from(x), u64::from(y)) as u32
    }

    /// [`TpccRng::uniform`] as `i64`.
    pub fn uniform_i64(&mut self, x: i64, y: i64) -> i64 {
        x + self.rng.below((y - x + 1) as u64) as i64
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.uniform(1, 100) <= percent
    }

    /// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y − x + 1)) + x (§2.1.6).
    pub fn nurand(&mut self, a: u64, c: u64, x: u64, y: u64) -> u64 {
        (((self.uniform(0, a) | self.uniform(x, y)) + c) % (y - x + 1)) + x
    }

    /// A random a-string of `min..=max` characters.
    pub fn astring(&mut self, min: usize, max: usize) -> Vec<u8> {
        let len = self.uniform(min as u64, max as u64) as usize;
        (0..len).map(|_| ALNUM[self.rng.below(ALNUM.len() as u64) as usize]).collect()
    }

    /// A random n-string (digits) of `min..=max` characters.
    pub fn nstring(&mut self, min: usize, max: usize) -> Vec<u8> {
        let len = self.uniform(min as u64, max as u64) as usize;
        (0..len).map(|_| b'0' + self.rng.below(10) as u8).collect()
    }

    /// Two random upper-case letters (a state).
    pub fn state(&mut self) -> Vec<u8> {
        (0..2).map(|_| b'A' + self.rng.below(26) as u8).collect()
    }

    /// A zip code: 4 random digits then "11111" (§4.3.2.7).
    pub fn zip(&mut self) -> Vec<u8> {
        let mut z = self.nstring(4, 4);
        z.extend_from_slice(b"11111");
        z
    }

    /// I_DATA / S_DATA: an a-string of 26..=50 characters, 10 % of them holding "ORIGINAL" at a
    /// random position (§4.3.3.1).
    pub fn data_with_original(&mut self) -> Vec<u8> {
        let mut s = self.astring(26, 50);
        if self.percent(10) {
            let at = self.uniform(0, (s.len() - 8) as u64) as usize;
            s[at..at + 8].copy_from_slice(b"ORIGINAL");
        }
        s
    }

    /// A uniform draw in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.rng.below(n)
    }
}

/// The last name of number `n` (0..=999): the syllables of its three digits (§4.3.2.3).
pub fn last_name(n: u32) -> Vec<u8> {
    debug_assert!(n < 1000, "last name number {n}");
    let mut s = Vec::with_capacity(15);
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        s.extend_from_slice(SYLLABLES[digit as usize].as_bytes());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_are_the_specifications_examples() {
        assert_eq!(last_name(371), b"PRICALLYOUGHT");
        assert_eq!(last_name(40), b"BARPRESBAR");
        assert_eq!(last_name(999), b"EINGEINGEING");
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut r = TpccRng::new(3);
        let c = NuConstants::for_load(&mut r);
        let mut hits = vec![0u32; 3001];
        for _ in 0..200_000 {
            let v = r.nurand(1023, c.c_id, 1, 3000);
            assert!((1..=3000).contains(&v));
            hits[v as usize] += 1;
        }
        let max = *hits.iter().max().unwrap();
        // Uniform would give ~67 per id; NURand concentrates on some ids.
        assert!(max > 200, "max hits {max}");
    }

    #[test]
    fn run_constants_keep_the_required_distance() {
        for seed in 0..200 {
            let mut r = TpccRng::new(seed);
            let load = NuConstants::for_load(&mut r);
            let run = NuConstants::for_run(&load, &mut r);
            assert!(run.valid_for_run(&load), "{load:?} {run:?}");
            let d = run.c_last.abs_diff(load.c_last);
            assert!((65..=119).contains(&d) && d != 96 && d != 112);
        }
    }

    #[test]
    fn strings_have_their_lengths_and_alphabets() {
        let mut r = TpccRng::new(9);
        let mut originals = 0;
        for _ in 0..2000 {
            let a = r.astring(8, 16);
            assert!((8..=16).contains(&a.len()) && a.iter().all(|b| b.is_ascii_alphanumeric()));
            let z = r.zip();
            assert!(z.len() == 9 && z.ends_with(b"11111") && z.iter().all(u8::is_ascii_digit));
            let d = r.data_with_original();
            assert!((26..=50).contains(&d.len()));
            originals += usize::from(d.windows(8).any(|w| w == b"ORIGINAL"));
        }
        assert!((100..300).contains(&originals), "{originals} of 2000 hold ORIGINAL (expect ~200)");
    }
}
