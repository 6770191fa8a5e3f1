//! Exception application. A fixed, valid version-2 tile with counts and gaps above 65535 (built once with
//! `encode_canonical`) gets one chunk's `vexc` or `gexc` frame replaced by fuzz-chosen content, zstd-compressed
//! (or raw frame bytes, or no frame at all); the chunk table, `total_size` and the CRC are fixed up so the input
//! passes every structural check and reaches the code that applies exceptions.
//!
//! Oracle: an independent model of the spec's exception rules computes the expected matrix or an expected error,
//! and the decoder (full and partial) must agree with it exactly.

#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use dct_codec::{
    CanonicalCsr, DecodeOptions, DecodedTile, Decoder, EncodeOptions, ExceptionPolicy, TilePlanes, encode_canonical,
};
use dct_format::{ChunkEntry, FrameRef, HEADER_LEN, TileHeader, TileLayout, Version, align8, compute_crc};
use deltacells_fuzz::{MAX_COUNT, Rows, STREAM_MAX, assert_rows_match, assert_valid_csr};
use libfuzzer_sys::fuzz_target;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const N_GENES: u64 = 300_000;

struct Base {
    rows: Rows,
    blob: Vec<u8>,
    layout: TileLayout,
}

/// Hand-picked cells covering every exception situation, then pseudo-random ones; some cells are empty.
fn base_rows() -> Rows {
    let max = MAX_COUNT;
    let mut rows: Vec<Vec<(u64, u64)>> = vec![
        vec![],
        vec![(80_000, 5)], // first gene above 65535: gap exception at 0
        vec![(3, 65_535), (70_000, 65_536), (70_005, max)], // gap 69997; count 65535 stored directly
        vec![(0, 1), (65_535, 2), (131_071, 65_535)], // gaps of exactly 65535 (no exception)
        vec![(10, 100_000), (65_546, 1), (131_082, 70_000), (N_GENES - 1, 3)], // gaps 65536 (payload 1)
        vec![],
        vec![(N_GENES - 1, 65_536)],
    ];
    // ChaCha8 is value-stable across versions of rand_chacha: the same fixed tile on every run.
    let mut rng = ChaCha8Rng::seed_from_u64(0x5EED_DE17_A7CE_11A5);
    for _ in 0..33 {
        let len = rng.random_range(0..9usize);
        let mut genes: Vec<u64> = (0..len).map(|_| rng.random_range(0..N_GENES)).collect();
        genes.sort_unstable();
        genes.dedup();
        let row = genes
            .into_iter()
            .map(|g| {
                let v = match rng.random_range(0..6) {
                    0 => 65_535,
                    1 => rng.random_range(65_536..=max),
                    _ => rng.random_range(1..=300),
                };
                (g, v)
            })
            .collect();
        rows.push(row);
    }
    Rows { n_genes: N_GENES, rows }
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let rows = base_rows();
        let mut m = CanonicalCsr::new(N_GENES);
        for row in &rows.rows {
            for &(g, v) in row {
                m.indices.push(g as u32);
                m.values.push(v as u32);
            }
            m.indptr.push(m.indices.len() as u64);
        }
        let opts = EncodeOptions {
            n_chunks: 3,
            level: 3,
            exception_policy: ExceptionPolicy::Unlimited,
            version: Version::V2,
            ..EncodeOptions::default()
        };
        let blob = encode_canonical(&m, &opts).expect("the base matrix encodes");
        let layout = TileLayout::parse(&blob).expect("the base tile parses");
        let with_both = layout.chunks().iter().filter(|e| e.vexc.is_present() && e.gexc.is_present()).count();
        assert!(layout.chunks().len() == 3 && with_both >= 2, "the base tile lacks exception frames");
        let decoded = dct_codec::decode::<u32>(&blob, true).expect("the base tile decodes");
        rows.assert_decoded(&decoded);
        Base { rows, blob, layout }
    })
}

#[derive(Arbitrary, Debug)]
enum Content {
    /// Decompressed frame content, as is (any length).
    Raw(Vec<u8>),
    /// `(position, payload)` pairs written in the frame's layout; `snap` maps each position onto a stored 65535
    /// of the chunk and each payload into the kind's range, `sort` sorts and de-duplicates the positions.
    Pairs { pairs: Vec<(u32, u32)>, snap: bool, sort: bool },
    /// Frame bytes stored without compressing them.
    Frame(Vec<u8>),
    /// No frame: length 0, with this (ignored) offset.
    Absent(u64),
}

#[derive(Arbitrary, Debug)]
struct Input {
    chunk: u8,
    gap_frame: bool,
    content: Content,
}

/// The chunk's stored uint16 streams as the spec defines them: counts and gaps clamped to 65535.
fn stored(rows: &[Vec<(u64, u64)>]) -> (Vec<u64>, Vec<u64>) {
    let (mut gaps, mut vals) = (Vec::new(), Vec::new());
    for row in rows {
        let mut prev = 0;
        for (k, &(g, v)) in row.iter().enumerate() {
            gaps.push((if k == 0 { g } else { g - prev }).min(STREAM_MAX));
            vals.push(v.min(STREAM_MAX));
            prev = g;
        }
    }
    (gaps, vals)
}

/// The chunk's rows after applying exception frame content `content` of the given kind (the other kind keeps
/// its true values), or `None` if the spec makes the content an error.
fn apply(rows: &[Vec<(u64, u64)>], gap_frame: bool, content: &[u8]) -> Option<Vec<Vec<(u64, u64)>>> {
    let (gaps, vals) = stored(rows);
    let n = gaps.len();
    if !content.len().is_multiple_of(8) || content.len() / 8 > n {
        return None;
    }
    let k = content.len() / 8;
    let word = |i: usize| u64::from(u32::from_le_bytes(content[4 * i..4 * i + 4].try_into().unwrap()));
    let mut prev = None;
    let mut exc = Vec::with_capacity(k);
    for i in 0..k {
        let (p, payload) = (word(i), word(k + i));
        if p >= n as u64 || prev.is_some_and(|q| p <= q) {
            return None;
        }
        prev = Some(p);
        let p = p as usize;
        let base = if gap_frame { gaps[p] } else { vals[p] };
        let payload_ok =
            if gap_frame { (1..N_GENES).contains(&payload) } else { payload > STREAM_MAX && payload <= MAX_COUNT };
        if base != STREAM_MAX || !payload_ok {
            return None;
        }
        exc.push((p, payload));
    }
    let mut out = Vec::with_capacity(rows.len());
    let mut pos = 0usize;
    for row in rows {
        let range = pos..pos + row.len();
        let mut new_row = row.clone();
        if gap_frame {
            let mut acc = 0;
            for (j, x) in new_row.iter_mut().enumerate() {
                acc += gaps[pos + j];
                x.0 = acc;
            }
            for &(p, payload) in exc.iter().filter(|(p, _)| range.contains(p)) {
                for x in &mut new_row[p - pos..] {
                    x.0 += payload;
                }
            }
            if new_row.last().is_some_and(|x| x.0 >= N_GENES) {
                return None;
            }
        } else {
            for (j, x) in new_row.iter_mut().enumerate() {
                x.1 = vals[pos + j];
            }
            for &(p, payload) in exc.iter().filter(|(p, _)| range.contains(p)) {
                new_row[p - pos].1 = payload;
            }
        }
        out.push(new_row);
        pos = range.end;
    }
    Some(out)
}

fn compress(content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(content.len()));
    zstd_safe::compress(&mut out, content, 1).expect("zstd compresses");
    out
}

/// The content of a raw frame the decoder accepted (one frame, content size declared).
fn decompress(frame: &[u8]) -> Vec<u8> {
    let size = zstd_safe::get_frame_content_size(frame).ok().flatten().expect("accepted frame declares its size");
    let mut out = Vec::with_capacity(size as usize);
    zstd_safe::decompress(&mut out, frame).expect("accepted frame decompresses");
    out
}

fn pairs_content(
    pairs: &[(u32, u32)],
    snap: bool,
    sort: bool,
    gap_frame: bool,
    chunk_rows: &[Vec<(u64, u64)>],
) -> Vec<u8> {
    let (gaps, vals) = stored(chunk_rows);
    let n = gaps.len().max(1) as u32;
    let sat: Vec<u32> = (if gap_frame { &gaps } else { &vals })
        .iter()
        .enumerate()
        .filter(|&(_, &s)| s == STREAM_MAX)
        .map(|(i, _)| i as u32)
        .collect();
    let mut pairs: Vec<(u32, u32)> = pairs
        .iter()
        .map(|&(p, q)| {
            if !snap {
                return (p, q);
            }
            let p = if sat.is_empty() { p % n } else { sat[p as usize % sat.len()] };
            let q = if gap_frame {
                1 + q % (N_GENES as u32 - 1)
            } else {
                STREAM_MAX as u32 + 1 + q % (MAX_COUNT - STREAM_MAX) as u32
            };
            (p, q)
        })
        .collect();
    if sort {
        pairs.sort_by_key(|&(p, _)| p);
        pairs.dedup_by_key(|&mut (p, _)| p);
    }
    let mut content: Vec<u8> = pairs.iter().flat_map(|&(p, _)| p.to_le_bytes()).collect();
    content.extend(pairs.iter().flat_map(|&(_, q)| q.to_le_bytes()));
    content
}

fuzz_target!(|input: Input| {
    let base = base();
    let c = input.chunk as usize % base.layout.chunks().len();
    let mut entry: ChunkEntry = base.layout.chunks()[c];
    let chunk_rows = &base.rows.rows[entry.cell_lo as usize..entry.cell_hi as usize];

    // The new frame and the decompressed content the model sees (None: only known if the decoder accepts it).
    let (frame, content, absent_offset) = match &input.content {
        Content::Raw(bytes) => (compress(bytes), Some(bytes.clone()), 0),
        Content::Pairs { pairs, snap, sort } => {
            let bytes = pairs_content(pairs, *snap, *sort, input.gap_frame, chunk_rows);
            (compress(&bytes), Some(bytes), 0)
        }
        Content::Frame(bytes) => (bytes.clone(), bytes.is_empty().then(Vec::new), 0),
        Content::Absent(offset) => (Vec::new(), Some(Vec::new()), *offset),
    };

    let mut blob = base.blob.clone();
    let new_ref = if frame.is_empty() {
        FrameRef { offset: absent_offset, len: 0 }
    } else {
        let offset = align8(blob.len() as u64);
        blob.resize(offset as usize, 0);
        blob.extend_from_slice(&frame);
        FrameRef { offset, len: frame.len() as u64 }
    };
    if input.gap_frame {
        entry.gexc = new_ref;
    } else {
        entry.vexc = new_ref;
    }
    let at = HEADER_LEN + c * Version::V2.entry_size();
    entry.write(&mut blob[at..at + Version::V2.entry_size()], Version::V2);
    if !new_ref.is_present() {
        // `ChunkEntry::write` stores absent frames with offset 0; put the ignored offset back.
        let off = at + if input.gap_frame { 80 } else { 64 };
        blob[off..off + 8].copy_from_slice(&absent_offset.to_le_bytes());
    }
    let mut header = TileHeader::parse(&blob).expect("base header");
    header.total_size = blob.len() as u64;
    header.crc32 = compute_crc(&blob);
    blob[..HEADER_LEN].copy_from_slice(&header.to_bytes());

    let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads: 1 });
    let mut out = DecodedTile::<u32>::default();
    let result = decoder.decode_into(&blob, &mut out);
    if result.is_ok() {
        assert_valid_csr(&out);
    }
    let content = match content {
        Some(content) => content,
        None if result.is_ok() => decompress(&frame),
        None => return,
    };
    let expected = apply(chunk_rows, input.gap_frame, &content);
    match (&result, &expected) {
        (Ok(()), Some(new_rows)) => {
            let mut rows = base.rows.clone();
            rows.rows.splice(entry.cell_lo as usize..entry.cell_hi as usize, new_rows.iter().cloned());
            rows.assert_decoded(&out);
        }
        (Err(_), None) => {}
        (Ok(()), None) => panic!("decoded content the spec rejects: {content:?}"),
        (Err(e), Some(_)) => panic!("rejected valid exception content {content:?}: {e}"),
    }

    // Partial decode of the chunk's rows (and one row of another chunk) agrees with the full decode.
    let n_cells = base.rows.rows.len() as u64;
    let mut rows: Vec<u64> = (entry.cell_lo..entry.cell_hi).rev().collect();
    rows.push((entry.cell_hi + 1) % n_cells);
    let mut part = DecodedTile::<u32>::default();
    match decoder.decode_rows_into(&blob, &rows, &mut part) {
        Ok(()) => {
            assert!(result.is_ok(), "partial decode accepted the chunk the full decode rejects");
            assert_rows_match(&out, &rows, &part);
        }
        Err(e) => assert!(result.is_err(), "partial decode fails ({e}) but the full decode succeeds"),
    }

    // The reader's row-by-row path (planes, then each of the chunk's rows) agrees with the full decode.
    let mut planes = TilePlanes::default();
    let by_rows = decoder.decode_planes_into(&blob, &mut planes).map_err(|e| e.to_string()).and_then(|()| {
        let mut t = DecodedTile::<u32> { n_genes: planes.n_genes(), version: planes.version(), ..Default::default() };
        for &r in &rows {
            planes.row_into(r as usize, &mut t.indices, &mut t.values).map_err(|e| e.to_string())?;
            t.indptr.push(t.indices.len() as i64);
        }
        Ok(t)
    });
    match (&result, by_rows) {
        (Ok(()), Ok(t)) => assert_rows_match(&out, &rows, &t),
        (Ok(()), Err(e)) => panic!("the row-by-row path rejects ({e}) what the full decode accepts"),
        (Err(e), Ok(_)) => panic!("the row-by-row path accepts the chunk the full decode rejects ({e})"),
        (Err(_), Err(_)) => {}
    }
});
