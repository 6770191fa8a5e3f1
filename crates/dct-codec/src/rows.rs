//! The row accessors shared by every CSR result: a decoded tile, a reader's batch.

/// Rows in CSR form: row offsets (`n_rows + 1` entries from 0), then per stored nonzero its gene index and its
/// count. [`DecodedTile`](crate::DecodedTile) and the dataset reader's batches implement it; bring it into scope
/// to call `n_rows`, `nnz` and `row` on them.
///
/// ```
/// use dct_codec::{DecodedTile, SparseRows};
/// let tile = DecodedTile::<u32> { indptr: vec![0, 2, 2], indices: vec![3, 7], values: vec![1, 5], ..Default::default() };
/// assert_eq!((tile.n_rows(), tile.nnz()), (2, 2));
/// assert_eq!(tile.row(0), (&[3, 7][..], &[1, 5][..]));
/// assert!(tile.row(1).0.is_empty());
/// ```
pub trait SparseRows {
    /// The count type.
    type Value;

    /// The row offsets, gene indices and counts.
    fn csr(&self) -> (&[i64], &[i32], &[Self::Value]);

    /// Rows (cells).
    fn n_rows(&self) -> usize {
        self.csr().0.len().saturating_sub(1)
    }

    /// Stored nonzeros.
    fn nnz(&self) -> usize {
        self.csr().1.len()
    }

    /// The gene indices and counts of row `r`.
    ///
    /// # Panics
    /// If `r >= self.n_rows()`.
    fn row(&self, r: usize) -> (&[i32], &[Self::Value]) {
        let (indptr, indices, values) = self.csr();
        let (lo, hi) = (indptr[r] as usize, indptr[r + 1] as usize);
        (&indices[lo..hi], &values[lo..hi])
    }
}
