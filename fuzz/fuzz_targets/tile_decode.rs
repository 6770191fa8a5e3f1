//! Full and partial decoding of arbitrary bytes with CRC checking off, so that corrupt frames, indptrs and
//! exception lists reach the decoder. Never panics; whatever decodes is a structurally valid CSR matrix; partial
//! decodes agree with the full decode; the CRC check only ever turns a success into an error; the parallel
//! decoder and reused buffers give the same result as a fresh single-threaded decode; the row-by-row path the
//! dataset reader uses (`decode_planes_into`, then `TilePlanes::row_into` for every row) accepts exactly what the
//! full decode accepts, with the same contents; a `ParsedTile` of the bytes decodes as the bytes do.

#![no_main]

use std::sync::{Mutex, OnceLock};

use dct_codec::{DecodeOptions, DecodedTile, Decoder, SparseRows, TilePlanes};
use dct_format::{ParsedTile, TileLayout, compute_crc};
use deltacells_fuzz::{assert_rows_match, assert_valid_csr};
use libfuzzer_sys::fuzz_target;

/// A two-thread decoder shared by all inputs (its pool is expensive to start), reused as a real reader would.
fn parallel() -> &'static Mutex<Decoder> {
    static DECODER: OnceLock<Mutex<Decoder>> = OnceLock::new();
    DECODER.get_or_init(|| Mutex::new(Decoder::new(DecodeOptions { verify_crc: false, threads: 2 })))
}

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new(DecodeOptions { verify_crc: false, threads: 1 });
    let mut full = DecodedTile::<u32>::default();
    let result = decoder.decode_into(data, &mut full);
    let layout = TileLayout::parse(data).ok();
    let crc_ok = layout.as_ref().is_some_and(|l| compute_crc(data) == l.header().crc32);

    // A tile handed over parsed decodes exactly as its bytes do (the decoder then skips its own parse).
    if let Ok(parsed) = ParsedTile::parse(data) {
        let mut from_parsed = DecodedTile::<u32>::default();
        let got = decoder.decode_into(&parsed, &mut from_parsed).map_err(|e| e.to_string());
        assert_eq!(got, result.as_ref().map(|_| ()).map_err(|e| e.to_string()), "parsed and plain decodes disagree");
        if got.is_ok() {
            assert_eq!(from_parsed, full, "a parsed tile decodes to other contents");
        }
    }

    let mut checked = Decoder::new(DecodeOptions { verify_crc: true, threads: 1 });
    let with_crc = checked.decode::<u32>(data);
    match &result {
        Ok(()) => {
            assert_valid_csr(&full);
            let h = *layout.as_ref().expect("a decoded tile has a valid layout").header();
            assert_eq!((full.n_rows() as u64, full.nnz() as u64), (h.n_cells, h.nnz));
            assert_eq!((full.n_genes, full.version), (h.n_genes, h.version));
            // The CRC check changes nothing but the verdict on a mismatching CRC.
            match with_crc {
                Ok(t) => {
                    assert!(crc_ok, "decoded with a CRC mismatch");
                    assert_eq!(t, full);
                }
                Err(_) => assert!(!crc_ok, "CRC on rejects a tile that decodes with CRC off and a matching CRC"),
            }
            // Decoding again into the same, already sized buffers, and on two threads, gives the same tile.
            let mut again = full.clone();
            decoder.decode_into(data, &mut again).expect("second decode of the same bytes failed");
            assert_eq!(again, full);
            let mut par = DecodedTile::<u32>::default();
            parallel().lock().unwrap().decode_into(data, &mut par).expect("parallel decode failed");
            assert_eq!(par, full);
            // Float output: the same counts, rounded as f32 rounds them.
            let floats = decoder.decode::<f32>(data).expect("f32 decode failed");
            assert_eq!(floats.indices, full.indices);
            assert!(floats.values.iter().zip(&full.values).all(|(&f, &v)| f == v as f32));
        }
        Err(_) => assert!(with_crc.is_err(), "CRC on accepts a tile CRC off rejects"),
    }

    // The row-by-row path: planes first (structure, frames, exceptions), then every row (its own rules).
    let mut planes = TilePlanes::default();
    let by_rows = decoder.decode_planes_into(data, &mut planes).map_err(|e| e.to_string()).and_then(|()| {
        let mut t = DecodedTile::<u32> { n_genes: planes.n_genes(), version: planes.version(), ..Default::default() };
        for r in 0..planes.n_rows() {
            planes.row_into(r, &mut t.indices, &mut t.values).map_err(|e| e.to_string())?;
            t.indptr.push(t.indices.len() as i64);
        }
        Ok(t)
    });
    match (&result, by_rows) {
        (Ok(()), Ok(t)) => assert_eq!(t, full, "the row-by-row path decodes other contents"),
        (Ok(()), Err(e)) => panic!("the row-by-row path rejects ({e}) what the full decode accepts"),
        (Err(e), Ok(_)) => panic!("the row-by-row path accepts what the full decode rejects ({e})"),
        (Err(_), Err(_)) => {}
    }

    // Partial decode of a few rows: reversed, repeated, spread over the chunks.
    let Some(layout) = layout else { return };
    let n = layout.header().n_cells;
    let mut part = DecodedTile::<u32>::default();
    assert!(decoder.decode_rows_into(data, &[n], &mut part).is_err(), "row n_cells accepted");
    if n == 0 {
        return;
    }
    let pick = (data.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) % n;
    let rows = [n - 1, 0, n / 2, pick, n - 1];
    match decoder.decode_rows_into(data, &rows, &mut part) {
        Ok(()) => {
            assert_valid_csr(&part);
            if result.is_ok() {
                assert_rows_match(&full, &rows, &part);
            }
        }
        Err(e) => assert!(result.is_err(), "rows {rows:?} fail ({e}) but the full decode succeeds"),
    }
});
