//! `npy::parse_i32` (dct-dataset, for `gene_order.npy`) on arbitrary bytes: never panics, never returns more
//! values than the bytes hold, and what it accepts survives a write/read round trip. Built only with the
//! `parsers` feature.

#![no_main]

use dct_dataset::npy::{parse_i32, write_i32};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(values) = parse_i32(data) else { return };
    assert!(4 * values.len() <= data.len(), "more values than the data bytes can hold");
    // The data are the last 4n bytes, little-endian.
    let tail = &data[data.len() - 4 * values.len()..];
    assert!(values.iter().zip(tail.chunks_exact(4)).all(|(&v, b)| v.to_le_bytes() == b));
    let written = write_i32(&values);
    assert_eq!(parse_i32(&written).expect("a written .npy reads back"), values);
});
