//! libFuzzer target: the duplexed file log's reader and recovery over two copies of a valid
//! log, each damaged where the input says (offset, then bytes; the second half of the input
//! damages the second copy).
#![no_main]

#[path = "../../crates/nvmedb/tests/support/decoders.rs"]
#[allow(dead_code)]
mod decoders;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (a, b) = decoders::valid_file_log(1);
    let half = data.len() / 2;
    for (copy, part) in [(&a, &data[..half]), (&b, &data[half..])] {
        if part.len() >= 4 {
            let at = u32::from_le_bytes(part[..4].try_into().unwrap()) as usize % (256 << 10);
            decoders::overwrite(copy.as_ref(), at, &part[4..]);
        }
    }
    decoders::feed_file_log(a, b);
});
