//! Output large enough for streaming stores (`WriteMode::Streaming`, from 16 MiB) decodes to the source matrix,
//! like output written with ordinary stores: the whole-tile decode switches to streaming stores on its own, and row
//! decoding does so when asked. Small tiles (every other test) take the ordinary path.

use dct_codec::{
    CanonicalCsr, DecodeOptions, DecodedTile, Decoder, EncodeOptions, ExceptionPolicy, TilePlanes, WriteMode,
    encode_canonical,
};
use dct_synth::{SynthParams, generate};

/// About 2.3M nonzeros (18 MB of indices and counts) from the benchmark's model, with some counts above 65,535 and
/// some gaps above 65,535 (a few genes far out), so that both exception kinds are present.
fn large_matrix() -> CanonicalCsr {
    let m = generate(&SynthParams::default(), 0..720).expect("valid parameters");
    // 100,000 more (empty) columns after the model's genes, for gaps above 65,535.
    let n_genes = m.n_genes + 100_000;
    let (mut indices, mut values) = (m.indices, m.values);
    for (k, v) in values.iter_mut().enumerate() {
        if k % 10_007 == 0 {
            *v += 70_000 + k as u32 % 1_000;
        }
    }
    // Every 50th cell's last gene moved to the last column: a gap of at least 100,000.
    for cell in (0..m.indptr.len() - 1).step_by(50) {
        let b = m.indptr[cell + 1] as usize;
        if b > m.indptr[cell] as usize {
            indices[b - 1] = (n_genes - 1) as u32;
        }
    }
    CanonicalCsr { n_genes, indptr: m.indptr, indices, values }
}

#[test]
fn large_tiles_decode_to_the_source_with_either_write_mode() {
    let csr = large_matrix();
    let nnz = csr.indices.len() as u64;
    assert_eq!(WriteMode::for_output_bytes(8 * nnz), WriteMode::Streaming, "the tile is large enough to stream");
    let opts = EncodeOptions {
        level: 1,
        n_chunks: 5,
        exception_policy: ExceptionPolicy::Unlimited,
        ..EncodeOptions::default()
    };
    let tile = encode_canonical(&csr, &opts).expect("encodes");
    let summary = dct_codec::inspect(&tile).expect("valid tile");
    assert!(summary.chunks.iter().map(|c| c.value_exceptions).sum::<u64>() > 100, "value exceptions present");
    assert!(summary.chunks.iter().map(|c| c.gap_exceptions).sum::<u64>() > 5, "gap exceptions present");
    let source_indices: Vec<i32> = csr.indices.iter().map(|&i| i as i32).collect();

    for threads in [1, 2] {
        let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads });
        let whole: DecodedTile<u32> = decoder.decode(&tile).expect("decodes");
        assert_eq!(whole.indices, source_indices, "{threads} thread(s)");
        assert_eq!(whole.values, csr.values, "{threads} thread(s)");
        let floats: DecodedTile<f32> = decoder.decode(&tile).expect("decodes");
        assert!(floats.values.iter().zip(&csr.values).all(|(&f, &v)| f == v as f32), "{threads} thread(s)");
        assert_eq!(floats.indices, source_indices);

        let mut planes = TilePlanes::default();
        decoder.decode_planes_into(&tile, &mut planes).expect("decompresses");
        for mode in [WriteMode::Cached, WriteMode::Streaming] {
            let mut indices = vec![-1i32; nnz as usize];
            let mut values = vec![0u32; nnz as usize];
            for r in 0..planes.n_rows() {
                let (a, b) = (csr.indptr[r] as usize, csr.indptr[r + 1] as usize);
                planes.row_to_with(r, &mut indices[a..b], &mut values[a..b], mode).expect("row decodes");
            }
            assert_eq!(indices, source_indices, "rows, {mode:?}");
            assert_eq!(values, csr.values, "rows, {mode:?}");
        }
    }
}
