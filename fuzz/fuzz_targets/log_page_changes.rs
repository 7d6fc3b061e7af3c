//! libFuzzer target: `decoders::feed_mtr` on arbitrary bytes.
#![no_main]

#[path = "../../crates/nvmedb/tests/support/decoders.rs"]
#[allow(dead_code)]
mod decoders;

libfuzzer_sys::fuzz_target!(|data: &[u8]| decoders::feed_mtr(data));
