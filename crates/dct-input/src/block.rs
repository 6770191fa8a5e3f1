//! [`RowBlock`]: a window of consecutive cells in canonical CSR form, and the count checks every reader applies.

use dct_format::MAX_COUNT;

/// A window of consecutive cells (rows) of a count matrix, in canonical CSR form.
///
/// Readers guarantee, for every row: gene indices strictly increasing and below [`RowBlock::n_genes`], counts in
/// `1 ..= 2^31 - 1`. Explicit zeros in the source are dropped and repeated (cell, gene) entries are summed, so a
/// block can be handed to the tile encoder as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowBlock {
    /// Global index of the first row (cell) in the block.
    pub first_row: u64,
    /// Number of genes (columns) of the matrix, after any feature-type filter.
    pub n_genes: u64,
    /// Row offsets into `indices`/`values`: `n_rows + 1` entries, starting at 0.
    pub indptr: Vec<u64>,
    /// Gene (column) indices.
    pub indices: Vec<u32>,
    /// Counts.
    pub values: Vec<u32>,
}

impl Default for RowBlock {
    fn default() -> Self {
        RowBlock::new(0)
    }
}

impl RowBlock {
    /// An empty block for a matrix with `n_genes` genes.
    pub fn new(n_genes: u64) -> Self {
        RowBlock { first_row: 0, n_genes, indptr: vec![0], indices: Vec::new(), values: Vec::new() }
    }

    /// Removes all rows (keeping allocations) and sets the first row and gene count for the next fill.
    pub fn reset(&mut self, first_row: u64, n_genes: u64) {
        self.first_row = first_row;
        self.n_genes = n_genes;
        self.indptr.clear();
        self.indptr.push(0);
        self.indices.clear();
        self.values.clear();
    }

    /// Rows (cells) held.
    pub fn n_rows(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    /// Nonzeros held.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The global row range this block covers.
    pub fn rows(&self) -> std::ops::Range<u64> {
        self.first_row..self.first_row + self.n_rows() as u64
    }

    /// Genes and counts of local row `r` (`0 <= r < n_rows()`).
    ///
    /// # Panics
    /// If `r` is out of range.
    pub fn row(&self, r: usize) -> (&[u32], &[u32]) {
        let (lo, hi) = (self.indptr[r] as usize, self.indptr[r + 1] as usize);
        (&self.indices[lo..hi], &self.values[lo..hi])
    }

    /// Appends an entry to the row being built; zeros are dropped.
    #[inline]
    pub(crate) fn push_entry(&mut self, gene: u32, count: u32) {
        if count != 0 {
            self.indices.push(gene);
            self.values.push(count);
        }
    }

    /// Appends entries (in any gene order) to the row being built; zeros are dropped.
    pub(crate) fn push_entries(&mut self, genes: &[u32], counts: &[u32]) {
        if counts.contains(&0) {
            for (&g, &c) in genes.iter().zip(counts) {
                self.push_entry(g, c);
            }
        } else {
            self.indices.extend_from_slice(genes);
            self.values.extend_from_slice(counts);
        }
    }

    /// Closes the row being built, putting it in canonical form (sorted, repeats summed). On a sum above
    /// `2^31 - 1` returns the gene and the sum; the row is then left unclosed and the caller must abandon the block.
    pub(crate) fn finish_row(&mut self) -> Result<(), (u32, u64)> {
        let start = *self.indptr.last().expect("indptr is never empty") as usize;
        let row = start..self.indices.len();
        let end = canonicalize_row(&mut self.indices, &mut self.values, row, start, &mut Vec::new())?;
        self.indices.truncate(end);
        self.values.truncate(end);
        self.indptr.push(end as u64);
        Ok(())
    }
}

/// Puts one row of a matrix being built in canonical form and moves it down to start at `to` (`to <= row.start`,
/// so whole matrices are canonicalized in place, row after row): entries sorted by gene (through `scratch`, only
/// when they are not in order already), zeros dropped, repeated genes summed. Returns where the row now ends, or
/// the gene and sum of a repeat above `2^31 - 1`.
///
/// Every reader that gathers a cell's entries from another layout (Matrix Market's coordinate lists, h5ad's CSC,
/// rows built entry by entry) ends with this.
pub(crate) fn canonicalize_row(
    indices: &mut [u32],
    values: &mut [u32],
    row: std::ops::Range<usize>,
    to: usize,
    scratch: &mut Vec<(u32, u32)>,
) -> Result<usize, (u32, u64)> {
    debug_assert!(to <= row.start);
    if !indices[row.clone()].windows(2).all(|p| p[0] <= p[1]) {
        scratch.clear();
        scratch.extend(indices[row.clone()].iter().copied().zip(values[row.clone()].iter().copied()));
        scratch.sort_by_key(|&(g, _)| g);
        for (k, &(g, v)) in scratch.iter().enumerate() {
            (indices[row.start + k], values[row.start + k]) = (g, v);
        }
    }
    // The write position never passes the read position: the row can move down in place.
    let mut w = to;
    for r in row {
        let (g, v) = (indices[r], values[r]);
        if v == 0 {
            continue;
        }
        if w > to && indices[w - 1] == g {
            let sum = u64::from(values[w - 1]) + u64::from(v);
            if sum > u64::from(MAX_COUNT) {
                return Err((g, sum));
            }
            values[w - 1] = sum as u32;
        } else {
            (indices[w], values[w]) = (g, v);
            w += 1;
        }
    }
    Ok(w)
}

/// Why a repeated entry was rejected, for [`crate::InputError::NotACount`].
pub(crate) const REPEAT_OVERFLOW: &str = "repeated entries for this cell and gene sum above 2^31 - 1";

/// A floating-point value as a count.
#[inline]
pub(crate) fn count_from_f64(v: f64) -> Result<u32, &'static str> {
    if !v.is_finite() {
        Err("not finite")
    } else if v < 0.0 {
        Err("negative")
    } else if v.fract() != 0.0 {
        Err("not an integer")
    } else if v > f64::from(MAX_COUNT) {
        Err("above 2^31 - 1")
    } else {
        Ok(v as u32)
    }
}

/// A signed integer value as a count.
#[inline]
pub(crate) fn count_from_i64(v: i64) -> Result<u32, &'static str> {
    if v < 0 {
        Err("negative")
    } else if v > i64::from(MAX_COUNT) {
        Err("above 2^31 - 1")
    } else {
        Ok(v as u32)
    }
}

/// An unsigned integer value as a count.
#[inline]
pub(crate) fn count_from_u64(v: u64) -> Result<u32, &'static str> {
    if v > u64::from(MAX_COUNT) { Err("above 2^31 - 1") } else { Ok(v as u32) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_row_sorts_sums_and_keeps_canonical_rows() {
        let mut b = RowBlock::new(10);
        for (g, v) in [(5, 1), (2, 3), (5, 4), (0, 0), (9, 2)] {
            b.push_entry(g, v);
        }
        b.finish_row().unwrap();
        b.push_entry(1, 7);
        b.finish_row().unwrap();
        b.finish_row().unwrap();
        assert_eq!(b.indptr, vec![0, 3, 4, 4]);
        assert_eq!(b.row(0), (&[2, 5, 9][..], &[3, 5, 2][..]));
        assert_eq!(b.row(1), (&[1][..], &[7][..]));
        assert_eq!(b.row(2), (&[][..], &[][..]));
    }

    #[test]
    fn finish_row_rejects_overflowing_repeats() {
        let mut b = RowBlock::new(10);
        b.push_entry(3, MAX_COUNT);
        b.push_entry(3, 1);
        assert_eq!(b.finish_row(), Err((3, u64::from(MAX_COUNT) + 1)));
    }

    /// A whole matrix canonicalized in place, row after row, equals each row summed gene by gene in a map.
    #[test]
    fn rows_canonicalized_in_place_match_a_map_of_sums() {
        let mut x = 0x2545_f491u32;
        let mut next = |m: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % m
        };
        for _ in 0..200 {
            let lens: Vec<usize> = (0..8).map(|_| next(12) as usize).collect();
            let (mut indices, mut values) = (Vec::new(), Vec::new());
            for &n in &lens {
                let sorted = next(2) == 0;
                let mut row: Vec<(u32, u32)> = (0..n).map(|_| (next(6), next(4))).collect();
                if sorted {
                    row.sort_unstable();
                }
                indices.extend(row.iter().map(|e| e.0));
                values.extend(row.iter().map(|e| e.1));
            }
            let (mut lo, mut w, mut scratch) = (0, 0, Vec::new());
            let mut got = Vec::new();
            let mut want = Vec::new();
            for &n in &lens {
                let mut sums = std::collections::BTreeMap::new();
                for r in lo..lo + n {
                    if values[r] != 0 {
                        *sums.entry(indices[r]).or_insert(0u32) += values[r];
                    }
                }
                want.push(sums.into_iter().collect::<Vec<_>>());
                let end = canonicalize_row(&mut indices, &mut values, lo..lo + n, w, &mut scratch).unwrap();
                got.push((w..end).map(|k| (indices[k], values[k])).collect::<Vec<_>>());
                (lo, w) = (lo + n, end);
            }
            assert_eq!(got, want);
        }
    }

    #[test]
    fn count_conversions() {
        assert_eq!(count_from_f64(3.0), Ok(3));
        assert_eq!(count_from_f64(2.5), Err("not an integer"));
        assert_eq!(count_from_f64(-1.0), Err("negative"));
        assert_eq!(count_from_f64(f64::NAN), Err("not finite"));
        assert_eq!(count_from_f64(2147483648.0), Err("above 2^31 - 1"));
        assert_eq!(count_from_f64(2147483647.0), Ok(MAX_COUNT));
        assert_eq!(count_from_i64(-3), Err("negative"));
        assert_eq!(count_from_i64(1 << 31), Err("above 2^31 - 1"));
        assert_eq!(count_from_u64(u64::MAX), Err("above 2^31 - 1"));
        assert_eq!(count_from_u64(7), Ok(7));
    }
}
