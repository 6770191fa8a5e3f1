//! Property-based round trips: decode(encode(x)) equals x made canonical, for shapes that stress the format
//! (no cells, empty cells, one gene, 2^31 genes, counts and gaps at 65535 / 65536 / 2^31 - 1, many gap
//! exceptions in one cell, up to 1000 chunks), on 1, 2 and 4 decode threads, with byte-identical output for
//! any number of encode threads.

use dct_codec::{
    CanonicalCsr, CsrMatrix, DecodeOptions, DecodedTile, Decoder, EncodeError, EncodeOptions, ExceptionPolicy, Preset,
    encode_canonical, encode_tile,
};
use dct_format::{TileLayout, Version};
use proptest::prelude::*;

/// A matrix as rows of (gene, count), genes strictly increasing: the canonical truth.
#[derive(Debug, Clone)]
struct Rows {
    n_genes: u64,
    rows: Vec<Vec<(u32, u32)>>,
}

impl Rows {
    fn canonical(&self) -> CanonicalCsr {
        let mut m = CanonicalCsr::new(self.n_genes);
        for row in &self.rows {
            for &(g, v) in row {
                m.indices.push(g);
                m.values.push(v);
            }
            m.indptr.push(m.indices.len() as u64);
        }
        m
    }
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 1u32..20,
        1 => prop::sample::select(vec![65534u32, 65535, 65536, 65537, 1 << 24, (1 << 24) + 1, i32::MAX as u32 - 1, i32::MAX as u32]),
        1 => 1u32..=i32::MAX as u32,
    ]
}

/// Sorted distinct genes below `n_genes`, biased towards the edges and towards gaps around 65535.
fn genes(n_genes: u64, max_len: usize) -> impl Strategy<Value = Vec<u32>> {
    let special: Vec<u64> = [0, 1, 65534, 65535, 65536, 65537, 131071, 131072, n_genes - 1, n_genes / 2]
        .into_iter()
        .filter(|&g| g < n_genes)
        .collect();
    let pick = prop_oneof![3 => 0..n_genes, 1 => prop::sample::select(special)];
    prop::collection::btree_set(pick, 0..=max_len).prop_map(|s| s.into_iter().map(|g| g as u32).collect())
}

fn rows() -> impl Strategy<Value = Rows> {
    let n_genes = prop_oneof![
        Just(1u64),
        2u64..300,
        Just(65535u64),
        Just(65536u64),
        Just(65537u64),
        Just(200_000u64),
        Just(1u64 << 31),
    ];
    (n_genes, 0usize..40).prop_flat_map(|(n_genes, n_rows)| {
        let row = prop_oneof![1 => Just(Vec::new()), 4 => genes(n_genes, 24)]
            .prop_flat_map(|gs| {
                let n = gs.len();
                (Just(gs), prop::collection::vec(count(), n))
            })
            .prop_map(|(gs, vs)| gs.into_iter().zip(vs).collect::<Vec<_>>());
        prop::collection::vec(row, n_rows).prop_map(move |rows| Rows { n_genes, rows })
    })
}

fn decode_all(blob: &[u8], threads: usize) -> DecodedTile<u32> {
    Decoder::new(DecodeOptions { verify_crc: true, threads }).decode(blob).expect("own tile decodes")
}

fn assert_same(m: &CanonicalCsr, d: &DecodedTile<u32>) {
    assert_eq!(d.n_genes as u64, m.n_genes);
    assert_eq!(d.indptr.iter().map(|&x| x as u64).collect::<Vec<_>>(), m.indptr);
    assert_eq!(d.indices.iter().map(|&x| x as u32).collect::<Vec<_>>(), m.indices);
    assert_eq!(d.values, m.values);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(x in rows(), n_chunks in prop_oneof![1usize..10, Just(1000usize)], level in prop_oneof![Just(1), Just(3)]) {
        let m = x.canonical();
        let opts = EncodeOptions { n_chunks, level, exception_policy: ExceptionPolicy::Unlimited, ..Default::default() };
        let blob = encode_canonical(&m, &opts).unwrap();
        let layout = TileLayout::parse(&blob).unwrap();
        prop_assert!(layout.chunks().len() <= n_chunks.max(1));
        prop_assert_eq!(layout.chunks().is_empty(), m.n_rows() == 0);
        for threads in [1, 2, 4] {
            assert_same(&m, &decode_all(&blob, threads));
        }
    }

    #[test]
    fn version_1_round_trip_when_representable(x in rows(), n_chunks in 1usize..6) {
        let m = x.canonical();
        let fits = m.n_genes <= 65536
            && m.values.iter().all(|&v| v <= 65535);
        let opts = EncodeOptions {
            n_chunks,
            level: 1,
            version: Version::V1,
            exception_policy: ExceptionPolicy::Unlimited,
            ..Default::default()
        };
        match encode_canonical(&m, &opts) {
            Ok(blob) => {
                prop_assert!(fits);
                let d = decode_all(&blob, 1);
                prop_assert_eq!(d.version, Version::V1);
                assert_same(&m, &d);
            }
            Err(EncodeError::Unrepresentable { .. }) => prop_assert!(!fits),
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        }
    }

    /// Shuffled entries, repeats split in two and explicit zeros come back canonical; the input is untouched.
    #[test]
    fn messy_input_is_canonicalized(x in rows(), seed in any::<u64>()) {
        let truth = x.canonical();
        let (mut indptr, mut indices, mut values) = (vec![0i64], Vec::<i64>::new(), Vec::<f64>::new());
        let mut state = seed | 1;
        let mut next = move || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state };
        for row in &x.rows {
            let mut entries: Vec<(i64, f64)> = Vec::new();
            for &(g, v) in row {
                if v >= 2 && next() % 3 == 0 {
                    let a = v / 2;
                    entries.push((g.into(), f64::from(a)));
                    entries.push((g.into(), f64::from(v - a)));
                } else {
                    entries.push((g.into(), f64::from(v)));
                }
                if next() % 5 == 0 {
                    entries.push((g.into(), 0.0));
                }
            }
            for i in (1..entries.len()).rev() {
                entries.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            indices.extend(entries.iter().map(|e| e.0));
            values.extend(entries.iter().map(|e| e.1));
            indptr.push(indices.len() as i64);
        }
        let before = (indptr.clone(), indices.clone(), values.clone());
        let m = CsrMatrix { n_rows: x.rows.len(), n_cols: x.n_genes, indptr: &indptr, indices: &indices, values: &values };
        let opts = EncodeOptions { level: 1, exception_policy: ExceptionPolicy::Unlimited, ..Default::default() };
        let blob = encode_tile(&m, &opts).unwrap();
        prop_assert_eq!((indptr, indices, values), before);
        assert_same(&truth, &decode_all(&blob, 2));
    }
}

/// One cell with three gap exceptions and value exceptions at the boundaries.
#[test]
fn several_gap_exceptions_in_one_cell() {
    let n_genes = 1u64 << 31;
    let genes = [70_000u32, 70_001, 140_000, 140_000 + 65_535, 2_000_000_000, (1 << 31) - 1];
    let values = [65_535u32, 65_536, 1, 2, i32::MAX as u32, 7];
    let m = CanonicalCsr { n_genes, indptr: vec![0, 6], indices: genes.to_vec(), values: values.to_vec() };
    let blob = encode_canonical(&m, &EncodeOptions::default()).unwrap();
    let summary = dct_codec::inspect(&blob).unwrap();
    assert_eq!(summary.chunks[0].gap_exceptions, 4, "gaps 70000, 69999, 1999794465 and 147483647 exceed 65535");
    assert_eq!(summary.chunks[0].value_exceptions, 2);
    assert_same(&m, &decode_all(&blob, 1));
}

#[test]
fn encode_bytes_do_not_depend_on_thread_count() {
    let mut m = CanonicalCsr::new(5000);
    let mut state = 7u64;
    for _ in 0..3000 {
        let mut g = 0u32;
        loop {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            g += 1 + (state >> 58) as u32;
            if g >= 5000 {
                break;
            }
            m.indices.push(g);
            m.values.push(1 + (state >> 40) as u32 % 100);
        }
        m.indptr.push(m.indices.len() as u64);
    }
    let opts = EncodeOptions { n_chunks: 16, level: 3, ..Default::default() };
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| encode_canonical(&m, &opts).unwrap())
    };
    let one = run(1);
    assert_eq!(one, run(2));
    assert_eq!(one, run(4));
}

#[test]
fn exception_policy_refuses_non_count_data() {
    // 2000 cells each with one count above 65535: 2000 value exceptions > max(1024, 2000 / 200).
    let m =
        CanonicalCsr { n_genes: 10, indptr: (0..=2000).collect(), indices: vec![3; 2000], values: vec![70_000; 2000] };
    let err = encode_canonical(&m, &EncodeOptions { level: 1, ..Default::default() }).unwrap_err();
    assert!(matches!(err, EncodeError::TooManyExceptions { kind: "value", count: 2000, limit: 1024 }), "{err}");
    let opts = EncodeOptions { level: 1, exception_policy: ExceptionPolicy::AtMost(2000), ..Default::default() };
    assert_same(&m, &decode_all(&encode_canonical(&m, &opts).unwrap(), 1));
}

#[test]
fn bad_input_names_row_and_column() {
    let check = |values: &[f64], want: &str| {
        let m = CsrMatrix { n_rows: 2, n_cols: 4, indptr: &[0u32, 1, 2], indices: &[0u32, 3], values };
        let err = encode_tile(&m, &EncodeOptions::default()).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    };
    check(&[1.0, 2.5], "row 1, column 3");
    check(&[-1.0, 2.0], "row 0, column 0");
    check(&[1.0, f64::NAN], "not finite");
    check(&[1.0, 3e9], "above 2^31 - 1");
    // 2^31 is the first float above the largest count (and what 2^31 - 1 rounds to in f32).
    let m = CsrMatrix { n_rows: 1, n_cols: 4, indptr: &[0u32, 1], indices: &[2u32], values: &[2_147_483_648.0f32] };
    assert!(encode_tile(&m, &EncodeOptions::default()).unwrap_err().to_string().contains("above 2^31 - 1"));
    // A hand-built "canonical" matrix is checked too.
    let unsorted = CanonicalCsr { n_genes: 9, indptr: vec![0, 2], indices: vec![5, 3], values: vec![1, 1] };
    assert!(matches!(encode_canonical(&unsorted, &EncodeOptions::default()), Err(EncodeError::Shape(_))));
    let zero = CanonicalCsr { n_genes: 9, indptr: vec![0, 1], indices: vec![5], values: vec![0] };
    assert!(matches!(encode_canonical(&zero, &EncodeOptions::default()), Err(EncodeError::NotACount { .. })));
    let m = CsrMatrix { n_rows: 1, n_cols: 4, indptr: &[0i64, 1], indices: &[4i64], values: &[1u8] };
    assert!(matches!(
        encode_tile(&m, &EncodeOptions::default()),
        Err(EncodeError::ColumnOutOfRange { row: 0, col: 4, .. })
    ));
    let m = CsrMatrix { n_rows: 1, n_cols: 4, indptr: &[0i64, 2], indices: &[1i64], values: &[1u8] };
    assert!(matches!(encode_tile(&m, &EncodeOptions::default()), Err(EncodeError::Shape(_))));
}

/// Golden bytes: re-encoding the conformance matrices reproduces the independent writer's chunk boundaries
/// everywhere, and its exact bytes where its zstd settings are known (the other tiles differ only inside zstd
/// frames, whose level the set does not state).
#[test]
fn encoder_reproduces_independent_v2_tiles() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance/tiles/good");
    for (name, level, chunks, identical) in [
        ("v2_sparse_3chunks", 1, 3, true),
        ("v2_realistic_8chunks_level19", 19, 8, false),
        ("v2_all_empty", 19, 1, true),
        ("v2_interspersed_empty_cells", 19, 8, false),
        ("v2_chunk_with_no_nonzeros", 19, 3, false),
        ("v2_extremes_65536_genes", 19, 3, true),
    ] {
        let golden = std::fs::read(dir.join(format!("{name}.dct"))).unwrap();
        let d: DecodedTile<u32> = dct_codec::decode(&golden, true).unwrap();
        let m = CanonicalCsr {
            n_genes: d.n_genes.into(),
            indptr: d.indptr.iter().map(|&x| x as u64).collect(),
            indices: d.indices.iter().map(|&x| x as u32).collect(),
            values: d.values.clone(),
        };
        // The independent writer calls plain zstd levels.
        let opts = EncodeOptions { n_chunks: chunks, level, preset: Preset::Plain, ..Default::default() };
        let ours = encode_canonical(&m, &opts).unwrap();
        let layout_g = TileLayout::parse(&golden).unwrap();
        let layout_o = TileLayout::parse(&ours).unwrap();
        let bounds = |l: &TileLayout| l.chunks().iter().map(|c| (c.cell_lo, c.cell_hi)).collect::<Vec<_>>();
        assert_eq!(bounds(&layout_o), bounds(&layout_g), "{name}: chunk boundaries");
        if identical {
            assert!(ours == golden, "{name}: bytes differ from the independent writer");
        }
    }
}

/// Every preset writes tiles that decode exactly, with bytes independent of the thread count; on a realistic tile
/// (2,000 synthetic cells with the benchmark's parameters) the tuned level 19 is smaller than the plain one, and the
/// fast preset no larger.
#[test]
fn presets_decode_exactly_and_tuned_beats_plain() {
    let synth = dct_synth::Synth::new(&dct_synth::SynthParams::default()).unwrap();
    let g = synth.generate(0..2000);
    let m = CanonicalCsr { n_genes: g.n_genes, indptr: g.indptr, indices: g.indices, values: g.values };
    let mut sizes = Vec::new();
    for preset in Preset::ALL {
        let opts = EncodeOptions { n_chunks: 8, level: 19, preset, ..Default::default() };
        let on = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| encode_canonical(&m, &opts))
        };
        let tile = on(1).unwrap();
        assert!(on(3).unwrap() == tile, "{preset}: bytes depend on the thread count");
        assert_same(&m, &decode_all(&tile, 2));
        sizes.push((preset, tile.len()));
    }
    eprintln!("level 19 on {} nonzeros: {sizes:?}", m.values.len());
    let size = |p| sizes.iter().find(|(q, _)| *q == p).unwrap().1;
    assert!(size(Preset::Tuned) < size(Preset::Plain), "{sizes:?}");
    assert!(size(Preset::Fast) <= size(Preset::Plain), "{sizes:?}");
}
