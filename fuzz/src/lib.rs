//! Helpers shared by the deltacells fuzz targets: the structural invariants every decoded tile must satisfy,
//! and small independent reference models (canonical CSR, exception application) that the targets compare the
//! library against. Nothing here calls the code under test to compute an expected result.

#![forbid(unsafe_code)]

use dct_codec::{DecodedTile, SparseRows};

/// Largest count a tile can hold (`2^31 - 1`), restated here rather than imported so the oracle is independent.
pub const MAX_COUNT: u64 = (1 << 31) - 1;
/// Largest value a uint16 stream element holds; larger counts and gaps are exceptions.
pub const STREAM_MAX: u64 = 65535;

/// Panics unless `t` is a structurally valid CSR matrix: indptr from 0, non-decreasing, ending at the number of
/// entries; indices strictly increasing within each row and in `0..n_genes`; counts in `1 ..= 2^31 - 1`.
pub fn assert_valid_csr(t: &DecodedTile<u32>) {
    assert!(!t.indptr.is_empty(), "indptr is empty");
    assert_eq!(t.indptr[0], 0, "indptr[0] != 0");
    assert!(t.indptr.windows(2).all(|w| w[0] <= w[1]), "indptr decreases");
    assert_eq!(*t.indptr.last().unwrap() as usize, t.indices.len(), "indptr does not end at nnz");
    assert_eq!(t.indices.len(), t.values.len(), "indices and values differ in length");
    assert!(t.n_genes >= 1, "n_genes is 0");
    for r in 0..t.n_rows() {
        let (idx, vals) = t.row(r);
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "row {r}: indices not strictly increasing");
        assert!(idx.iter().all(|&g| g >= 0 && (g as u64) < u64::from(t.n_genes)), "row {r}: gene out of range");
        assert!(vals.iter().all(|&v| (1..=MAX_COUNT).contains(&u64::from(v))), "row {r}: count out of range");
    }
}

/// Panics unless rows `rows` of `full` are exactly the rows of `part`, in order.
pub fn assert_rows_match(full: &DecodedTile<u32>, rows: &[u64], part: &DecodedTile<u32>) {
    assert_eq!(part.n_rows(), rows.len(), "row decode returned the wrong number of rows");
    assert_eq!(part.n_genes, full.n_genes);
    for (j, &r) in rows.iter().enumerate() {
        assert_eq!(part.row(j), full.row(r as usize), "row {r} differs between full and partial decode");
    }
}

/// A canonical matrix kept as plain rows of `(gene, count)`, genes strictly increasing within a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rows {
    /// Columns.
    pub n_genes: u64,
    /// One `Vec` of `(gene, count)` per row.
    pub rows: Vec<Vec<(u64, u64)>>,
}

impl Rows {
    /// Flattens into CSR arrays `(indptr, indices, values)`.
    pub fn to_csr(&self) -> (Vec<i64>, Vec<i32>, Vec<u32>) {
        let mut indptr = vec![0i64];
        let (mut indices, mut values) = (Vec::new(), Vec::new());
        for row in &self.rows {
            for &(g, v) in row {
                indices.push(g as i32);
                values.push(v as u32);
            }
            indptr.push(indices.len() as i64);
        }
        (indptr, indices, values)
    }

    /// Panics unless `t` holds exactly this matrix.
    pub fn assert_decoded(&self, t: &DecodedTile<u32>) {
        let (indptr, indices, values) = self.to_csr();
        assert_eq!(u64::from(t.n_genes), self.n_genes, "n_genes");
        assert_eq!(t.indptr, indptr, "indptr");
        assert_eq!(t.indices, indices, "indices");
        assert_eq!(t.values, values, "values");
    }

    /// Counts above 65535 (value exceptions) and gaps above 65535 (gap exceptions, the first gene of a row
    /// counting as a gap from 0).
    pub fn exception_counts(&self) -> (u64, u64) {
        let (mut vexc, mut gexc) = (0, 0);
        for row in &self.rows {
            let mut prev = 0;
            for (k, &(g, v)) in row.iter().enumerate() {
                vexc += u64::from(v > STREAM_MAX);
                let gap = if k == 0 { g } else { g - prev };
                gexc += u64::from(gap > STREAM_MAX);
                prev = g;
            }
        }
        (vexc, gexc)
    }
}
