//! The public conformance tiles (testdata/conformance/tiles): every good tile decodes exactly to its expected
//! contents, and every bad one is rejected, never panics and never allocates beyond the bound the set states.

use std::path::PathBuf;

use dct_codec::dct_format::{FrameKind, ParsedTile, TileLayout};
use dct_codec::{DecodeError, DecodeOptions, DecodedTile, Decoder, SparseRows, TilePlanes};
use serde_json::Value;

use crate::largest_alloc::largest_allocation;

fn tiles_dir(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance/tiles").join(kind)
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().expect("array").iter().map(|x| x.as_i64().expect("integer")).collect()
}

struct Expected {
    name: String,
    blob: Vec<u8>,
    json: Value,
}

fn good_tiles() -> Vec<Expected> {
    let dir = tiles_dir("good");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("testdata/conformance/tiles/good") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("dct") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let json: Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.expected.json"))).unwrap()).unwrap();
        out.push(Expected { name, blob: std::fs::read(&path).unwrap(), json });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(out.len(), 36, "the public set has 36 good tiles");
    out
}

fn check_exact(t: &Expected, got: &DecodedTile<u32>, how: &str) {
    let j = &t.json;
    let name = &t.name;
    assert_eq!(got.version.number() as i64, j["version"].as_i64().unwrap(), "{name} ({how}): version");
    assert_eq!(got.n_genes as i64, j["n_genes"].as_i64().unwrap(), "{name} ({how}): n_genes");
    assert_eq!(got.n_rows() as i64, j["n_cells"].as_i64().unwrap(), "{name} ({how}): n_cells");
    assert_eq!(got.nnz() as i64, j["nnz"].as_i64().unwrap(), "{name} ({how}): nnz");
    assert_eq!(got.indptr, ints(&j["indptr"]), "{name} ({how}): indptr");
    let indices: Vec<i64> = got.indices.iter().map(|&x| i64::from(x)).collect();
    assert_eq!(indices, ints(&j["indices"]), "{name} ({how}): indices");
    let values: Vec<i64> = got.values.iter().map(|&x| i64::from(x)).collect();
    assert_eq!(values, ints(&j["values"]), "{name} ({how}): values");
}

#[test]
fn good_tiles_decode_exactly_with_and_without_crc() {
    for t in good_tiles() {
        for verify_crc in [true, false] {
            let got = dct_codec::decode::<u32>(&t.blob, verify_crc)
                .unwrap_or_else(|e| panic!("{} (crc {verify_crc}): {e}", t.name));
            check_exact(&t, &got, if verify_crc { "crc on" } else { "crc off" });
        }
    }
}

#[test]
fn good_tiles_decode_identically_into_reused_buffers_on_1_2_4_threads() {
    let tiles = good_tiles();
    for threads in [1, 2, 4] {
        let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads });
        // One buffer reused across every tile, in two passes (grow, then shrink and regrow).
        let mut out = DecodedTile::<u32>::default();
        for pass in 0..2 {
            for t in &tiles {
                decoder.decode_into(&t.blob, &mut out).unwrap_or_else(|e| panic!("{}: {e}", t.name));
                check_exact(t, &out, &format!("{threads} threads, reused buffer, pass {pass}"));
            }
        }
    }
}

#[test]
fn float_and_signed_outputs_match_the_integer_counts() {
    let mut decoder = Decoder::new(DecodeOptions::default());
    for t in good_tiles() {
        let ints: DecodedTile<u32> = decoder.decode(&t.blob).unwrap();
        let f64s: DecodedTile<f64> = decoder.decode(&t.blob).unwrap();
        let i64s: DecodedTile<i64> = decoder.decode(&t.blob).unwrap();
        assert_eq!(ints.indices, f64s.indices);
        for ((a, b), c) in ints.values.iter().zip(&f64s.values).zip(&i64s.values) {
            assert_eq!(f64::from(*a), *b, "{}", t.name);
            assert_eq!(i64::from(*a), *c, "{}", t.name);
        }
    }
}

#[test]
fn partial_decode_returns_requested_rows_in_order() {
    let mut decoder = Decoder::new(DecodeOptions::default());
    for t in good_tiles() {
        let full: DecodedTile<u32> = decoder.decode(&t.blob).unwrap();
        let n = full.n_rows() as u64;
        if n == 0 {
            let mut out = DecodedTile::<u32>::default();
            assert!(decoder.decode_rows_into(&t.blob, &[0], &mut out).is_err(), "{}", t.name);
            continue;
        }
        // Reversed, repeated, and a stride across chunks.
        let mut rows: Vec<u64> = (0..n).rev().step_by(3).collect();
        rows.extend([0, n - 1, 0, n / 2]);
        let mut out = DecodedTile::<u32>::default();
        decoder.decode_rows_into(&t.blob, &rows, &mut out).unwrap();
        assert_eq!(out.n_rows(), rows.len());
        for (j, &r) in rows.iter().enumerate() {
            assert_eq!(out.row(j), full.row(r as usize), "{} row {r}", t.name);
        }
        let mut out = DecodedTile::<u32>::default();
        assert!(decoder.decode_rows_into(&t.blob, &[n], &mut out).is_err());
    }
}

#[test]
fn bad_tiles_are_rejected_without_panics_or_large_allocations() {
    let dir = tiles_dir("bad");
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap()).unwrap();
    assert_eq!(cases.len(), 154, "the public set has 154 bad tiles");
    for case in &cases {
        let file = case["file"].as_str().unwrap();
        let verify_only = case["expect"].as_str().unwrap() == "error_with_verify_only";
        let blob = std::fs::read(dir.join(file)).unwrap();
        let bound = (1 << 20) + 64 * blob.len();
        // One decoder whose CRC check is switched (a CRC-only case must fail, then pass).
        let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads: 1 });
        for verify_crc in [true, false] {
            decoder.set_verify_crc(verify_crc);
            assert_eq!(decoder.options().verify_crc, verify_crc);
            let mut out = DecodedTile::<u32>::default();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                largest_allocation(|| decoder.decode_into(&blob, &mut out))
            }));
            let (result, largest) = result.unwrap_or_else(|_| panic!("{file}: decoder panicked (crc {verify_crc})"));
            assert!(largest <= bound, "{file}: allocated {largest} bytes at once (bound {bound})");
            match result {
                Err(_) => {}
                Ok(()) if verify_only && !verify_crc => assert_valid_csr(&out, file),
                Ok(()) => panic!("{file} ({}): decoded without error (crc {verify_crc})", case["description"]),
            }
        }
    }
}

/// Every row of a tile decoded from its planes (`TilePlanes::row_into`), in `rows` order, as one CSR; the first
/// error otherwise. Each row's successor is prefetched first, as the reader does.
fn rows_from_planes(planes: &TilePlanes, rows: impl Iterator<Item = usize>) -> Result<DecodedTile<u32>, String> {
    let mut out = DecodedTile::<u32> { n_genes: planes.n_genes(), version: planes.version(), ..Default::default() };
    prefetch_every_row(planes);
    let mut rows = rows.peekable();
    while let Some(r) = rows.next() {
        if let Some(&next) = rows.peek() {
            planes.prefetch_row(next);
        }
        planes.row_into(r, &mut out.indices, &mut out.values).map_err(|e| e.to_string())?;
        out.indptr.push(out.indices.len() as i64);
    }
    Ok(out)
}

/// Prefetching is a hint for any row of any planes: every row, rows past the end and far past it, of planes that
/// decoded, that failed to decode midway, or that never held a tile. It must never panic.
fn prefetch_every_row(planes: &TilePlanes) {
    let n = planes.n_rows();
    for r in (0..n + 2).chain([usize::MAX - 1, usize::MAX]) {
        planes.prefetch_row(r);
    }
}

/// The row-by-row path (planes, then rows) gives exactly the full decode, on 1 and 2 threads, into reused planes,
/// for rows in any order; a row past the end is an error.
#[test]
fn good_tiles_decode_identically_row_by_row_from_planes() {
    let mut planes = TilePlanes::default();
    for threads in [1, 2] {
        let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads });
        for t in good_tiles() {
            let full: DecodedTile<u32> = decoder.decode(&t.blob).unwrap();
            decoder.decode_planes_into(&t.blob, &mut planes).unwrap();
            assert_eq!(planes.n_rows(), full.n_rows(), "{}", t.name);
            assert_eq!(planes.nnz(), full.nnz(), "{}", t.name);
            let got = rows_from_planes(&planes, 0..full.n_rows()).unwrap();
            assert_eq!(got, full, "{}", t.name);
            let rows: Vec<usize> =
                (0..full.n_rows()).rev().chain([0, full.n_rows() / 2]).filter(|&r| r < full.n_rows()).collect();
            let got = rows_from_planes(&planes, rows.iter().copied()).unwrap();
            for (j, &r) in rows.iter().enumerate() {
                assert_eq!(got.row(j), full.row(r), "{} row {r}", t.name);
            }
            let mut idx = Vec::new();
            let mut val = Vec::<u32>::new();
            assert!(planes.row_into(full.n_rows(), &mut idx, &mut val).is_err());
        }
    }
}

/// Every bad tile is rejected by the row-by-row path too (when decompressing it, or when decoding a row), with
/// CRC checking on and off as the full decoder is, never panics and never allocates beyond the same bound; with
/// CRC checking off, what it accepts is what the full decoder accepts.
#[test]
fn bad_tiles_are_rejected_row_by_row_from_planes() {
    let dir = tiles_dir("bad");
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap()).unwrap();
    for case in &cases {
        let file = case["file"].as_str().unwrap();
        let blob = std::fs::read(dir.join(file)).unwrap();
        let bound = (1 << 20) + 64 * blob.len();
        for verify_crc in [true, false] {
            let mut decoder = Decoder::new(DecodeOptions { verify_crc, threads: 1 });
            let full: Result<DecodedTile<u32>, _> = decoder.decode(&blob);
            let mut planes = TilePlanes::default();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                prefetch_every_row(&planes);
                largest_allocation(|| {
                    let decoded = decoder.decode_planes_into(&blob, &mut planes).map_err(|e| e.to_string());
                    prefetch_every_row(&planes); // whether or not the decode failed midway
                    decoded?;
                    rows_from_planes(&planes, 0..planes.n_rows())
                })
            }));
            let (result, largest) =
                result.unwrap_or_else(|_| panic!("{file}: planes path panicked (crc {verify_crc})"));
            assert!(largest <= bound, "{file}: allocated {largest} bytes at once (bound {bound})");
            match (result, full) {
                (Err(_), Err(_)) => {}
                (Ok(got), Ok(full)) => assert_eq!(got, full, "{file}: the two paths accept different contents"),
                (Ok(_), Err(e)) => panic!("{file}: the planes path accepted what the decoder rejects ({e})"),
                (Err(e), Ok(_)) => panic!("{file}: the planes path rejected what the decoder accepts ({e})"),
            }
        }
    }
}

/// A tile handed over parsed (`ParsedTile`) decodes exactly as its bytes do, on every path and thread count; a bad
/// tile that still parses is rejected the same way (the CRC is checked by a decoder that checks CRCs, frames and
/// data whatever the layout came from).
#[test]
fn parsed_tiles_decode_as_their_bytes_do() {
    let mut planes = TilePlanes::default();
    for threads in [1, 2] {
        let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads });
        for t in good_tiles() {
            let parsed = ParsedTile::parse(t.blob.as_slice()).unwrap();
            let full: DecodedTile<u32> = decoder.decode(&t.blob).unwrap();
            assert_eq!(decoder.decode::<u32>(&parsed).unwrap(), full, "{}", t.name);
            decoder.decode_planes_into(&parsed, &mut planes).unwrap();
            assert_eq!(rows_from_planes(&planes, 0..full.n_rows()).unwrap(), full, "{}", t.name);
            let rows: Vec<u64> = (0..full.n_rows() as u64).rev().collect();
            let (mut from_bytes, mut from_parsed) = (DecodedTile::<u32>::default(), DecodedTile::<u32>::default());
            decoder.decode_rows_into(&t.blob, &rows, &mut from_bytes).unwrap();
            decoder.decode_rows_into(&parsed, &rows, &mut from_parsed).unwrap();
            assert_eq!(from_parsed, from_bytes, "{}", t.name);
        }
    }
    let dir = tiles_dir("bad");
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap()).unwrap();
    let mut parsed_bad = 0;
    for case in &cases {
        let file = case["file"].as_str().unwrap();
        let blob = std::fs::read(dir.join(file)).unwrap();
        let Ok(parsed) = ParsedTile::parse(blob.as_slice()) else { continue };
        parsed_bad += 1;
        for verify_crc in [true, false] {
            let mut decoder = Decoder::new(DecodeOptions { verify_crc, threads: 1 });
            let want = decoder.decode::<u32>(&blob).map_err(|e| e.to_string());
            let got = decoder.decode::<u32>(&parsed).map_err(|e| e.to_string());
            assert_eq!(got, want, "{file} (crc {verify_crc})");
        }
    }
    assert!(parsed_bad > 10, "only {parsed_bad} bad tiles get past the parser: the test checks too little");
}

/// The structural guarantees an accepted tile must give, whatever its bytes.
fn assert_valid_csr(t: &DecodedTile<u32>, file: &str) {
    assert_eq!(t.indptr[0], 0, "{file}");
    assert!(t.indptr.windows(2).all(|w| w[0] <= w[1]), "{file}: indptr decreases");
    assert_eq!(*t.indptr.last().unwrap() as usize, t.nnz(), "{file}");
    for r in 0..t.n_rows() {
        let (idx, vals) = t.row(r);
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "{file}: row {r} not strictly increasing");
        assert!(idx.iter().all(|&g| g >= 0 && (g as u64) < u64::from(t.n_genes)), "{file}: gene out of range");
        assert!(vals.iter().all(|&v| (1..=i32::MAX as u32).contains(&v)), "{file}: count out of range");
    }
}

#[test]
fn errors_name_the_place() {
    let dir = tiles_dir("bad");
    let msg =
        |file: &str| dct_codec::decode::<u32>(&std::fs::read(dir.join(file)).unwrap(), false).unwrap_err().to_string();
    assert!(msg("zero_count.dct").contains("chunk 1"), "{}", msg("zero_count.dct"));
    assert!(msg("indptr_not_monotone.dct").contains("indptr[3]"), "{}", msg("indptr_not_monotone.dct"));
    assert!(msg("gaps_off_unaligned.dct").contains("chunk 1 gaps_off"), "{}", msg("gaps_off_unaligned.dct"));
    assert!(msg("vexc_positions_equal.dct").contains("vexc"), "{}", msg("vexc_positions_equal.dct"));
}

/// A data error names the frame whose content breaks the rule and that frame's byte offset, as the chunk table
/// gives it, on the whole-tile and the row-by-row paths alike.
#[test]
fn data_errors_name_the_frame_and_its_offset() {
    let dir = tiles_dir("bad");
    let cases = [
        ("zero_count.dct", FrameKind::Vals),
        ("zero_gap_repeats_gene.dct", FrameKind::Gaps),
        ("gene_index_reaches_n_genes_in_stream.dct", FrameKind::Gaps),
    ];
    for (file, kind) in cases {
        let blob = std::fs::read(dir.join(file)).unwrap();
        let layout = TileLayout::parse(&blob).unwrap();
        let mut decoder = Decoder::new(DecodeOptions { verify_crc: false, threads: 1 });
        let whole = decoder.decode::<u32>(&blob).unwrap_err();
        let mut planes = TilePlanes::default();
        let by_rows = decoder
            .decode_planes_into(&blob, &mut planes)
            .and_then(|()| {
                let (mut i, mut v) = (Vec::new(), Vec::<u32>::new());
                (0..planes.n_rows()).try_for_each(|r| planes.row_into(r, &mut i, &mut v))
            })
            .unwrap_err();
        for (path, e) in [("whole", &whole), ("rows", &by_rows)] {
            let DecodeError::Data { chunk, frame, offset, .. } = e else { panic!("{file} ({path}): {e}") };
            let want = layout.chunks()[*chunk as usize].frame(kind).offset;
            assert_eq!((*frame, *offset), (kind, want), "{file} ({path}): {e}");
            assert!(e.to_string().contains(&format!("{kind} frame at offset {want}")), "{file} ({path}): {e}");
        }
    }
}

/// Tiles found by review or fuzzing that once broke the decoder (testdata/regressions).
#[test]
fn regression_tiles_are_rejected_without_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let blob = std::fs::read(&path).unwrap();
        for verify_crc in [true, false] {
            let r = std::panic::catch_unwind(|| dct_codec::decode::<u32>(&blob, verify_crc));
            let r = r.unwrap_or_else(|_| panic!("{}: decoder panicked", path.display()));
            if let Ok(t) = r {
                assert_valid_csr(&t, &path.display().to_string());
            }
        }
        n += 1;
    }
    assert!(n >= 1);
}

/// Chunks may share frame bytes; a table of many chunks pointing at one frame must not multiply the work.
#[test]
fn shared_frames_cannot_multiply_the_claimed_size() {
    use dct_format::{ChunkEntry, FrameRef, HEADER_LEN, TileHeader, Version, align8, compute_crc};
    // 2000 chunks of 2^20 nonzeros whose gaps and vals all point at one small frame of 2^21 bytes.
    let n = 1u64 << 20;
    let mut frame = Vec::with_capacity(zstd_safe::compress_bound(2 * n as usize));
    zstd_safe::compress(&mut frame, &vec![1u8; 2 * n as usize], 19).unwrap();
    let n_chunks = 2000u64;
    let table_end = HEADER_LEN as u64 + 96 * n_chunks;
    let indptr_off = align8(table_end);
    let n_cells = n_chunks;
    let frame_off = align8(indptr_off + 8 * (n_cells + 1));
    let total = frame_off + frame.len() as u64;
    let mut blob = vec![0u8; total as usize];
    for c in 0..n_chunks {
        let e = ChunkEntry {
            cell_lo: c,
            cell_hi: c + 1,
            nnz_lo: c * n,
            nnz_hi: (c + 1) * n,
            gaps: FrameRef { offset: frame_off, len: frame.len() as u64 },
            vals: FrameRef { offset: frame_off, len: frame.len() as u64 },
            ..Default::default()
        };
        let at = HEADER_LEN + 96 * c as usize;
        e.write(&mut blob[at..at + 96], Version::V2);
    }
    for i in 0..=n_cells {
        let at = (indptr_off + 8 * i) as usize;
        blob[at..at + 8].copy_from_slice(&(i * n).to_le_bytes());
    }
    blob[frame_off as usize..].copy_from_slice(&frame);
    let mut h = TileHeader {
        version: Version::V2,
        n_cells,
        nnz: n_chunks * n,
        n_genes: 1 << 31,
        n_chunks: n_chunks as u32,
        indptr_off,
        total_size: total,
        crc32: 0,
    };
    h.crc32 = compute_crc(&blob);
    blob[..HEADER_LEN].copy_from_slice(&h.to_bytes());
    let (result, largest) = largest_allocation(|| dct_codec::decode::<u32>(&blob, true));
    let err = result.unwrap_err().to_string();
    assert!(err.contains("claim"), "{err}");
    assert!(largest <= (1 << 20) + 64 * blob.len(), "allocated {largest}");
}
