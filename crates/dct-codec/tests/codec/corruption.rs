//! Deterministic corruption campaign over conformance tiles (docs/ROBUSTNESS.md).
//!
//! For each tile: every byte of the header, chunk table and indptr replaced by several values (`x ^ 0x01`,
//! `x ^ 0x80`, `0x00`, `0xFF`, `x + 1`), seeded random byte flips in the compressed streams, and every truncation.
//! Each corrupt blob is decoded with CRC checking off and on. Always: no panic, no single allocation above
//! 1 MiB + 64 x the blob size, and any successful decode is a structurally valid CSR matrix (partial decodes
//! too); the dataset reader's row-by-row path (planes, then every row) accepts exactly what the full decode
//! accepts, with the same contents. With the CRC checked, every change to bytes the CRC covers (all but the 64-byte header) is an error;
//! header changes are all rejected except the few that leave the decoded data untouched (see
//! `assert_header_outcome`). Run with `-- --nocapture` to see the case and outcome counts.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use dct_codec::{DecodeOptions, DecodedTile, Decoder, SparseRows, TilePlanes};
use dct_format::{HEADER_LEN, TileLayout};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::largest_alloc::largest_allocation;

/// The tiles of the campaign: realistic multi-chunk v1, every kind of exception frame, odd layouts, empty chunks
/// and zero-cell tiles.
const TILES: &[&str] = &[
    "v1_realistic_8chunks_level19",
    "v2_value_exceptions",
    "v2_gap_exceptions_4chunks",
    "v2_bad_base_exceptions",
    "v2_boundaries",
    "v2_both_exception_kinds",
    "v2_layout_frames_reordered",
    "v2_chunks_with_no_nonzeros",
    "v2_many_exceptions",
    "v2_empty_exception_frames",
    "v2_exception_offset_ignored_when_length_0",
    "v2_n_genes_2pow31",
    "v1_extremes_65536_genes",
    "v1_chunk_with_no_nonzeros",
    "v1_zero_cells",
    "v2_zero_cells",
];

/// Random single-byte flips in the compressed streams of each tile (that has any).
const FLIPS_PER_TILE: usize = 2000;

/// Replacement values tried for every byte of the header, chunk table and indptr.
fn replacements(x: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for y in [x ^ 0x01, x ^ 0x80, 0x00, 0xFF, x.wrapping_add(1)] {
        if y != x && !out.contains(&y) {
            out.push(y);
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Region {
    Header,
    Table,
    Indptr,
    Streams,
    Truncation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// The decoder returned an error.
    Rejected,
    /// Decoded to exactly the original tile.
    Identical,
    /// Decoded to the original rows, indices and counts, but a different `n_genes` or version.
    SameData,
    /// Decoded to a different (structurally valid) matrix.
    Different,
}

/// The structural guarantees any accepted tile must give, whatever its bytes.
fn assert_valid_csr(t: &DecodedTile<u32>, what: &str) {
    assert_eq!(t.indptr.first(), Some(&0), "{what}: indptr[0]");
    assert!(t.indptr.windows(2).all(|w| w[0] <= w[1]), "{what}: indptr decreases");
    assert_eq!(*t.indptr.last().unwrap() as usize, t.nnz(), "{what}: indptr does not end at nnz");
    assert_eq!(t.indices.len(), t.values.len(), "{what}: indices and values differ in length");
    for r in 0..t.n_rows() {
        let (idx, vals) = t.row(r);
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "{what}: row {r} not strictly increasing");
        assert!(idx.iter().all(|&g| g >= 0 && (g as u64) < u64::from(t.n_genes)), "{what}: row {r} gene out of range");
        assert!(vals.iter().all(|&v| (1..=i32::MAX as u32).contains(&v)), "{what}: row {r} count out of range");
    }
}

struct Campaign {
    name: &'static str,
    original: DecodedTile<u32>,
    crc_off: Decoder,
    crc_on: Decoder,
    out: DecodedTile<u32>,
    rows_out: DecodedTile<u32>,
    planes: TilePlanes,
    counts: BTreeMap<(Region, bool, Outcome), u64>,
    cases: u64,
}

impl Campaign {
    fn new(name: &'static str, blob: &[u8]) -> Self {
        let original = dct_codec::decode::<u32>(blob, true).unwrap_or_else(|e| panic!("{name}: {e}"));
        Campaign {
            name,
            original,
            crc_off: Decoder::new(DecodeOptions { verify_crc: false, threads: 1 }),
            crc_on: Decoder::new(DecodeOptions { verify_crc: true, threads: 1 }),
            out: DecodedTile::default(),
            rows_out: DecodedTile::default(),
            planes: TilePlanes::default(),
            counts: BTreeMap::new(),
            cases: 0,
        }
    }

    /// Decodes one corrupt blob both ways; checks the always-true properties and returns the two outcomes
    /// (CRC off, CRC on).
    fn run(&mut self, blob: &[u8], region: Region, what: &str) -> (Outcome, Outcome) {
        self.cases += 1;
        let bound = (1 << 20) + 64 * blob.len();
        let mut outcomes = [Outcome::Rejected; 2];
        for (i, verify) in [false, true].into_iter().enumerate() {
            let decoder = if verify { &mut self.crc_on } else { &mut self.crc_off };
            let out = &mut self.out;
            let result = catch_unwind(AssertUnwindSafe(|| largest_allocation(|| decoder.decode_into(blob, out))));
            let (result, largest) =
                result.unwrap_or_else(|_| panic!("{}: {what}: decoder panicked (crc {verify})", self.name));
            assert!(largest <= bound, "{}: {what}: allocated {largest} bytes at once (bound {bound})", self.name);
            outcomes[i] = match result {
                Err(_) => Outcome::Rejected,
                Ok(()) => {
                    assert_valid_csr(&self.out, &format!("{}: {what} (crc {verify})", self.name));
                    self.classify()
                }
            };
            *self.counts.entry((region, verify, outcomes[i])).or_default() += 1;
        }
        self.check_rows(blob, outcomes[0] != Outcome::Rejected, what);
        self.check_planes(blob, outcomes[0] != Outcome::Rejected, what);
        (outcomes[0], outcomes[1])
    }

    /// The dataset reader's row-by-row path (CRC off): decompress into planes, then decode every row. No panic,
    /// bounded allocations, and it accepts exactly what the full decode accepts, with the same contents
    /// (`self.out` still holds the full decode when that succeeded).
    fn check_planes(&mut self, blob: &[u8], full_ok: bool, what: &str) {
        let bound = (1 << 20) + 64 * blob.len();
        let (decoder, planes, got) = (&mut self.crc_off, &mut self.planes, &mut self.rows_out);
        let result = catch_unwind(AssertUnwindSafe(|| {
            largest_allocation(|| -> Result<(), String> {
                decoder.decode_planes_into(blob, planes).map_err(|e| e.to_string())?;
                got.indptr.clear();
                got.indptr.push(0);
                got.indices.clear();
                got.values.clear();
                for r in 0..planes.n_rows() {
                    planes.row_into(r, &mut got.indices, &mut got.values).map_err(|e| e.to_string())?;
                    got.indptr.push(got.indices.len() as i64);
                }
                Ok(())
            })
        }));
        let (result, largest) = result.unwrap_or_else(|_| panic!("{}: {what}: planes path panicked", self.name));
        assert!(largest <= bound, "{}: {what}: planes path allocated {largest} bytes (bound {bound})", self.name);
        match (result, full_ok) {
            (Ok(()), true) => {
                assert_eq!(got.indptr, self.out.indptr, "{}: {what}: planes path indptr", self.name);
                assert_eq!(got.indices, self.out.indices, "{}: {what}: planes path indices", self.name);
                assert_eq!(got.values, self.out.values, "{}: {what}: planes path values", self.name);
            }
            (Err(_), false) => {}
            (Ok(()), false) => panic!("{}: {what}: the planes path accepts what the full decode rejects", self.name),
            (Err(e), true) => {
                panic!("{}: {what}: the planes path rejects ({e}) what the full decode accepts", self.name)
            }
        }
    }

    fn classify(&self) -> Outcome {
        let (a, b) = (&self.out, &self.original);
        if a.indptr != b.indptr || a.indices != b.indices || a.values != b.values {
            Outcome::Different
        } else if a.n_genes != b.n_genes || a.version != b.version {
            Outcome::SameData
        } else {
            Outcome::Identical
        }
    }

    /// A partial decode (CRC off) of a few rows: no panic, bounded allocations, valid rows, and the same rows
    /// as the full decode when that succeeded (`self.out` still holds it).
    fn check_rows(&mut self, blob: &[u8], full_ok: bool, what: &str) {
        let n = self.original.n_rows() as u64;
        if n == 0 {
            return;
        }
        let rows = [n - 1, 0, n / 2, n / 3];
        let bound = (1 << 20) + 64 * blob.len();
        let (decoder, part) = (&mut self.crc_off, &mut self.rows_out);
        let result =
            catch_unwind(AssertUnwindSafe(|| largest_allocation(|| decoder.decode_rows_into(blob, &rows, part))));
        let (result, largest) = result.unwrap_or_else(|_| panic!("{}: {what}: row decode panicked", self.name));
        assert!(largest <= bound, "{}: {what}: row decode allocated {largest} bytes (bound {bound})", self.name);
        match result {
            Ok(()) => {
                assert_valid_csr(part, &format!("{}: {what} (rows)", self.name));
                if full_ok {
                    for (j, &r) in rows.iter().enumerate() {
                        assert_eq!(part.row(j), self.out.row(r as usize), "{}: {what}: row {r}", self.name);
                    }
                }
            }
            // A row decode only reads the chunks it needs, so it may succeed where the full decode fails; it may
            // fail where the full decode succeeds only if the rows asked for are out of range (never here).
            Err(e) => assert!(!full_ok, "{}: {what}: rows fail ({e}) but the full decode succeeds", self.name),
        }
    }
}

/// Header fields by byte offset, for messages and for the header rule.
fn header_field(at: usize) -> &'static str {
    match at {
        0..8 => "magic",
        8..12 => "version",
        12..16 => "flags",
        16..24 => "n_cells",
        24..32 => "nnz",
        32..36 => "n_genes",
        36..40 => "n_chunks",
        40..48 => "indptr_off",
        48..56 => "total_size",
        56..60 => "crc32",
        _ => "reserved",
    }
}

/// What a one-byte header change may do. The header is not covered by the CRC, but every field except
/// `n_genes` and `crc32` is checked against the rest of the tile, so only these changes can decode:
/// * `n_genes` raised, or lowered while still above every stored gene index: the same data with another
///   `n_genes` (the format cannot detect this);
/// * `crc32` with CRC checking off: the identical tile;
/// * `version` 1 <-> 2 in a tile without chunks (the only version-dependent things are the chunk-entry size and
///   exceptions): the same (empty) data as the other version.
///
/// Every other header change is rejected, with or without the CRC check.
fn assert_header_outcome(name: &str, at: usize, n_chunks: u32, crc_off: Outcome, crc_on: Outcome) {
    let field = header_field(at);
    let what = format!("{name}: header byte {at} ({field})");
    assert_ne!(crc_off, Outcome::Different, "{what}: decoded to different data");
    assert_ne!(crc_on, Outcome::Different, "{what}: decoded to different data");
    if field != "crc32" {
        assert_eq!(crc_off, crc_on, "{what}: the CRC does not cover the header, so checking it changes nothing");
    }
    match field {
        "n_genes" => assert_ne!(crc_off, Outcome::Identical, "{what}"),
        "crc32" => assert_eq!((crc_off, crc_on), (Outcome::Identical, Outcome::Rejected), "{what}"),
        "version" if n_chunks == 0 => assert!(matches!(crc_off, Outcome::Rejected | Outcome::SameData), "{what}"),
        _ => assert_eq!((crc_off, crc_on), (Outcome::Rejected, Outcome::Rejected), "{what}: accepted"),
    }
}

/// Without the CRC, the one chunk-table change that decodes to different data is setting a `vexc_len` or
/// `gexc_len` to 0: the frame is then absent and its positions decode as the stored 65535. Every other table
/// change is rejected or (e.g. the offset of an absent frame) decodes to the identical tile.
fn assert_exception_frame_dropped(name: &str, bad: &[u8], at: usize, entry_size: usize) {
    let in_entry = (at - HEADER_LEN) % entry_size;
    let field_at = at - in_entry % 8;
    let value = u64::from_le_bytes(bad[field_at..field_at + 8].try_into().unwrap());
    assert!(
        entry_size == 96 && matches!(in_entry / 8, 9 | 11) && value == 0,
        "{name}: table byte {at} (entry offset {in_entry}) decoded to different data"
    );
}

fn tiles_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance/tiles/good")
}

#[test]
fn corrupt_tiles_are_rejected_or_decode_to_valid_csr() {
    let mut totals: BTreeMap<(Region, bool, Outcome), u64> = BTreeMap::new();
    let mut per_region_cases: BTreeMap<Region, u64> = BTreeMap::new();
    let mut all_cases = 0;
    println!(
        "{:<42} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6}",
        "tile", "bytes", "header", "table", "indptr", "streams", "trunc"
    );
    for (t, &name) in TILES.iter().enumerate() {
        let blob = std::fs::read(tiles_dir().join(format!("{name}.dct"))).unwrap();
        let layout = TileLayout::parse(&blob).unwrap();
        let h = *layout.header();
        let table_end = HEADER_LEN + h.n_chunks as usize * h.version.entry_size();
        let indptr_end = h.indptr_off as usize + 8 * (h.n_cells as usize + 1);
        let mut c = Campaign::new(name, &blob);
        let mut region_cases = BTreeMap::new();

        // Every byte of the header, chunk table (and any padding before the indptr) and indptr.
        let mut bad = blob.clone();
        for at in 0..indptr_end {
            let region = match at {
                _ if at < HEADER_LEN => Region::Header,
                _ if at < h.indptr_off as usize => Region::Table,
                _ => Region::Indptr,
            };
            for y in replacements(blob[at]) {
                bad[at] = y;
                let what = format!("byte {at} {:#04x} -> {y:#04x}", blob[at]);
                let (off, on) = c.run(&bad, region, &what);
                *region_cases.entry(region).or_insert(0u64) += 1;
                if region == Region::Header {
                    assert_header_outcome(name, at, h.n_chunks, off, on);
                } else {
                    assert_eq!(on, Outcome::Rejected, "{name}: {what}: the CRC covers this byte");
                }
                if region == Region::Table && off == Outcome::Different {
                    assert_exception_frame_dropped(name, &bad, at, h.version.entry_size());
                }
            }
            bad[at] = blob[at];
        }
        assert!(table_end <= h.indptr_off as usize);

        // Seeded random single-byte flips anywhere after the indptr (frames and the padding between them).
        if indptr_end < blob.len() {
            // ChaCha8 is value-stable across versions of rand_chacha: the same flips on every run.
            let mut rng = ChaCha8Rng::seed_from_u64(t as u64 + 1);
            for _ in 0..FLIPS_PER_TILE {
                let at = rng.random_range(indptr_end..blob.len());
                let mask = rng.random_range(1..=255u8);
                bad[at] ^= mask;
                let (_, on) = c.run(&bad, Region::Streams, &format!("byte {at} ^ {mask:#04x}"));
                assert_eq!(on, Outcome::Rejected, "{name}: stream byte {at} ^ {mask:#04x}: the CRC covers it");
                bad[at] = blob[at];
                *region_cases.entry(Region::Streams).or_insert(0u64) += 1;
            }
        }

        // Every truncation: total_size no longer matches, with or without the CRC.
        for len in 0..blob.len() {
            let (off, on) = c.run(&blob[..len], Region::Truncation, &format!("truncated to {len} bytes"));
            assert_eq!((off, on), (Outcome::Rejected, Outcome::Rejected), "{name}: truncated to {len} bytes");
            *region_cases.entry(Region::Truncation).or_insert(0u64) += 1;
        }

        let get = |r| region_cases.get(&r).copied().unwrap_or(0);
        println!(
            "{name:<42} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6}",
            blob.len(),
            get(Region::Header),
            get(Region::Table),
            get(Region::Indptr),
            get(Region::Streams),
            get(Region::Truncation)
        );
        for (k, v) in &c.counts {
            *totals.entry(*k).or_default() += v;
        }
        for (k, v) in region_cases {
            *per_region_cases.entry(k).or_default() += v;
        }
        all_cases += c.cases;
    }

    println!("\n{all_cases} corrupt blobs, each decoded with CRC off and on (plus a row decode with CRC off)");
    println!(
        "{:<11} {:>7} | {:<31} | {:<31}",
        "region", "cases", "CRC off: rej/ident/same/diff", "CRC on: rej/ident/same/diff"
    );
    for (&region, &n) in &per_region_cases {
        let cell = |verify: bool| {
            let g = |o| totals.get(&(region, verify, o)).copied().unwrap_or(0);
            let o = [Outcome::Rejected, Outcome::Identical, Outcome::SameData, Outcome::Different];
            o.map(g).map(|x| x.to_string()).join(" / ")
        };
        println!("{:<11} {n:>7} | {:<31} | {:<31}", format!("{region:?}"), cell(false), cell(true));
    }
    assert!(per_region_cases[&Region::Streams] >= 5000, "at least 5,000 stream flips");
}
