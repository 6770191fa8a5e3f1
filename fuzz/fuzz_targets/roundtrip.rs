//! Encode/decode round trip of arbitrary small CSR matrices: rows of `(gene, count)` pairs, possibly unsorted,
//! repeated, zero, negative, too large or out of range. The canonical form (sorted, repeats summed, zeros
//! dropped) and every reason the encoder may refuse the matrix are computed here independently; the encoder
//! must succeed exactly when no reason applies, its error must be one of the reasons, and the tile must decode
//! (fully and by rows) to exactly the canonical form.

#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use dct_codec::{
    CsrMatrix, DecodeOptions, DecodedTile, Decoder, EncodeError, EncodeOptions, ExceptionPolicy, encode_tile,
};
use dct_format::{TileLayout, Version};
use deltacells_fuzz::{MAX_COUNT, Rows, assert_rows_match, assert_valid_csr};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Genes {
    /// `1 + n` columns: small matrices.
    Small(u8),
    /// `1 + n` columns: up to 65536, the version-1 limit.
    Medium(u16),
    /// Exactly this many columns, including 0 and more than 2^31.
    Raw(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Gene {
    /// Reduced modulo the number of columns: always in range.
    InRange(u32),
    /// As is; may be out of range.
    Raw(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Count {
    /// Typical counts, including 0.
    Small(u8),
    /// Around the uint16 limit: 65535 - 8 + n.
    Edge(u8),
    /// Any 32-bit value: exceptions, and values above 2^31 - 1.
    Wide(u32),
    /// Any signed value: negative counts.
    Raw(i64),
}

impl Count {
    fn value(self) -> i64 {
        match self {
            Count::Small(n) => i64::from(n),
            Count::Edge(n) => 65_535 - 8 + i64::from(n),
            Count::Wide(n) => i64::from(n),
            Count::Raw(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    genes: Genes,
    rows: Vec<Vec<(Gene, Count)>>,
    n_chunks: u8,
    level: u8,
    policy: Option<u8>,
    v1: bool,
}

/// Why the encoder may refuse the matrix; the model's view of `EncodeError`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reason {
    Column { row: u64, col: u64 },
    Count { row: u64, col: u64 },
    Genes,
    NeedsExceptions,
    TooMany,
}

fn justified(err: &EncodeError, reasons: &[Reason]) -> bool {
    match err {
        EncodeError::ColumnOutOfRange { row, col, .. } => {
            reasons.contains(&Reason::Column { row: *row, col: *col as u64 })
        }
        EncodeError::NotACount { row, col, .. } => reasons.contains(&Reason::Count { row: *row, col: *col }),
        EncodeError::Unrepresentable { .. } => {
            reasons.iter().any(|r| matches!(r, Reason::Genes | Reason::NeedsExceptions))
        }
        EncodeError::TooManyExceptions { .. } => reasons.contains(&Reason::TooMany),
        EncodeError::Shape(_) | EncodeError::Zstd(_) => false,
    }
}

fuzz_target!(|input: Input| {
    if input.rows.len() > 512 || input.rows.iter().map(Vec::len).sum::<usize>() > 4096 {
        return;
    }
    let n_genes = match input.genes {
        Genes::Small(n) => 1 + u64::from(n),
        Genes::Medium(n) => 1 + u64::from(n),
        Genes::Raw(n) => n,
    };
    let version = if input.v1 { Version::V1 } else { Version::V2 };
    let policy = match input.policy {
        None => ExceptionPolicy::RawCounts,
        Some(255) => ExceptionPolicy::Unlimited,
        Some(n) => ExceptionPolicy::AtMost(u64::from(n % 8)),
    };

    // The CSR arrays handed to the encoder, exactly as generated.
    let mut indptr = vec![0u64];
    let (mut indices, mut values) = (Vec::<u32>::new(), Vec::<i64>::new());
    for row in &input.rows {
        for &(gene, count) in row {
            indices.push(match gene {
                Gene::InRange(g) if n_genes > 0 => (u64::from(g) % n_genes) as u32,
                Gene::InRange(g) | Gene::Raw(g) => g,
            });
            values.push(count.value());
        }
        indptr.push(indices.len() as u64);
    }

    // Independent model: canonical rows and the reasons to refuse.
    let mut reasons = Vec::new();
    let mut canonical = Rows { n_genes, rows: Vec::new() };
    for (r, w) in indptr.windows(2).enumerate() {
        let mut sums: BTreeMap<u64, i128> = BTreeMap::new();
        for k in w[0] as usize..w[1] as usize {
            let (col, v) = (u64::from(indices[k]), values[k]);
            if col >= n_genes {
                reasons.push(Reason::Column { row: r as u64, col });
            } else if v < 0 || v > MAX_COUNT as i64 {
                reasons.push(Reason::Count { row: r as u64, col });
            } else {
                *sums.entry(col).or_default() += i128::from(v);
            }
        }
        for (&col, &sum) in &sums {
            if sum > i128::from(MAX_COUNT) {
                reasons.push(Reason::Count { row: r as u64, col });
            }
        }
        canonical.rows.push(sums.into_iter().filter(|&(_, s)| s > 0).map(|(c, s)| (c, s as u64)).collect());
    }
    if n_genes == 0 || n_genes > version.max_genes() {
        reasons.push(Reason::Genes);
    }
    let nnz: u64 = canonical.rows.iter().map(|r| r.len() as u64).sum();
    let (vexc, gexc) = canonical.exception_counts();
    if version == Version::V1 && vexc + gexc > 0 {
        reasons.push(Reason::NeedsExceptions);
    }
    if vexc.max(gexc) > policy.limit(nnz) {
        reasons.push(Reason::TooMany);
    }

    let m =
        CsrMatrix { n_rows: input.rows.len(), n_cols: n_genes, indptr: &indptr, indices: &indices, values: &values };
    let opts = EncodeOptions {
        n_chunks: usize::from(input.n_chunks),
        level: i32::from(input.level % 8) - 2,
        exception_policy: policy,
        version,
        ..EncodeOptions::default()
    };
    let blob = match encode_tile(&m, &opts) {
        Ok(blob) => blob,
        Err(e) => {
            assert!(justified(&e, &reasons), "unjustified encode error {e:?}; reasons {reasons:?}");
            return;
        }
    };
    assert!(reasons.is_empty(), "encoded a matrix that should be refused: {reasons:?}");

    let layout = TileLayout::parse(&blob).expect("encoded tile parses");
    let n_rows = input.rows.len();
    assert_eq!(layout.version(), version);
    assert!(layout.chunks().len() <= usize::from(input.n_chunks).max(1).min(n_rows.max(1)));
    let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads: 1 });
    let mut out = DecodedTile::<u32>::default();
    decoder.decode_into(&blob, &mut out).expect("encoded tile decodes");
    assert_valid_csr(&out);
    canonical.assert_decoded(&out);
    assert_eq!(out.version, version);

    if n_rows > 0 {
        let rows = [n_rows as u64 - 1, 0, n_rows as u64 / 2, 0];
        let mut part = DecodedTile::<u32>::default();
        decoder.decode_rows_into(&blob, &rows, &mut part).expect("row decode of an encoded tile");
        assert_rows_match(&out, &rows, &part);
    }
});
