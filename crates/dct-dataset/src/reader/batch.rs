//! The rows a read hands out.

use dct_codec::SparseRows;

/// Rows of a dataset in CSR form, in the order they were requested.
///
/// `V` is the count type: `f32` (the default, what training pipelines want), `u32`, `i32`, `u64`, `i64` or
/// `f64` ([`CountValue`](dct_codec::CountValue)). Counts above 2^24 are not exact in `f32`. Its rows are read
/// through [`SparseRows`] (`n_rows`, `nnz`, `row`).
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<V = f32> {
    /// Genes (columns).
    pub n_genes: u64,
    /// Row offsets, `n_rows + 1` entries starting at 0.
    pub indptr: Vec<i64>,
    /// Gene indices (stored column order), strictly increasing within each row.
    pub indices: Vec<i32>,
    /// Counts.
    pub values: Vec<V>,
}

impl<V> Default for Batch<V> {
    fn default() -> Self {
        Batch { n_genes: 0, indptr: vec![0], indices: Vec::new(), values: Vec::new() }
    }
}

impl<V> SparseRows for Batch<V> {
    type Value = V;

    fn csr(&self) -> (&[i64], &[i32], &[V]) {
        (&self.indptr, &self.indices, &self.values)
    }
}
