//! Input CSR matrices of any index and value type, and their canonical form (sorted, summed, zero-free counts).

use crate::error::EncodeError;
use dct_format::{MAX_COUNT, STREAM_MAX, Version};

/// An integer type usable as a CSR offset or column index.
pub trait IndexLike: Copy + Send + Sync {
    /// The value as a signed 128-bit integer (never fails; range checks are the caller's).
    fn to_i128(self) -> i128;
}

macro_rules! index_like {
    ($($t:ty),*) => {$(
        impl IndexLike for $t {
            #[inline]
            fn to_i128(self) -> i128 { self as i128 }
        }
    )*};
}
index_like!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

/// A value type that may hold counts: integers (non-negative, at most `2^31 - 1`) or floats (finite and
/// integral in that range). Zero is accepted here and dropped by canonicalization.
pub trait CountLike: Copy + Send + Sync + std::fmt::Display {
    /// The count, or why the value is not one.
    fn to_count(self) -> Result<u32, &'static str>;

    /// The value exactly as given, for messages (a float's shortest form may round: `2147483648_f32` displays as
    /// `2147483600`).
    fn exact(self) -> String {
        self.to_string()
    }
}

macro_rules! count_int {
    ($($t:ty),*) => {$(
        impl CountLike for $t {
            #[inline]
            #[allow(unused_comparisons)]
            fn to_count(self) -> Result<u32, &'static str> {
                if self < 0 as $t { return Err("negative"); }
                if (self as u128) > MAX_COUNT as u128 { return Err("above 2^31 - 1"); }
                Ok(self as u32)
            }
        }
    )*};
}
count_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

macro_rules! count_float {
    ($($t:ty),*) => {$(
        impl CountLike for $t {
            #[inline]
            fn to_count(self) -> Result<u32, &'static str> {
                if !self.is_finite() { return Err("not finite"); }
                if self < 0.0 { return Err("negative"); }
                if self.fract() != 0.0 { return Err("not an integer"); }
                // 2^31 is exact in both float types, unlike 2^31 - 1 in f32.
                if self >= 2_147_483_648.0 { return Err("above 2^31 - 1"); }
                Ok(self as u32)
            }

            fn exact(self) -> String {
                // Whole numbers in full (formatting with a precision prints a float's exact decimal value).
                if self.is_finite() && self.fract() == 0.0 { format!("{self:.0}") } else { self.to_string() }
            }
        }
    )*};
}
count_float!(f32, f64);

/// A borrowed CSR matrix: rows are cells, columns are genes. Indices within a row may be unsorted and may
/// repeat (repeats are summed); explicit zeros are dropped. The caller's arrays are never modified.
#[derive(Debug, Clone, Copy)]
pub struct CsrMatrix<'a, P, I, V> {
    /// Rows (cells).
    pub n_rows: usize,
    /// Columns (genes).
    pub n_cols: u64,
    /// Row offsets, `n_rows + 1` entries, non-decreasing, from 0 to `indices.len()`.
    pub indptr: &'a [P],
    /// Column indices.
    pub indices: &'a [I],
    /// Values.
    pub values: &'a [V],
}

/// A CSR count matrix in canonical form: within each row, strictly increasing columns below `n_genes` and
/// counts in `1 ..= 2^31 - 1`. This is what tiles store; build one row by row with [`CanonicalCsr::push_rows`]
/// (the dataset writer does, to re-chunk input blocks into tiles) or all at once with [`CanonicalCsr::from_csr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalCsr {
    /// Columns (genes).
    pub n_genes: u64,
    /// Row offsets, starting at 0.
    pub indptr: Vec<u64>,
    /// Column indices.
    pub indices: Vec<u32>,
    /// Counts.
    pub values: Vec<u32>,
}

impl CanonicalCsr {
    /// An empty matrix with `n_genes` columns.
    pub fn new(n_genes: u64) -> Self {
        CanonicalCsr { n_genes, indptr: vec![0], indices: Vec::new(), values: Vec::new() }
    }

    /// Rows held.
    pub fn n_rows(&self) -> usize {
        self.indptr.len() - 1
    }

    /// Nonzeros held.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Removes all rows, keeping allocations.
    pub fn clear(&mut self) {
        self.indptr.truncate(1);
        self.indices.clear();
        self.values.clear();
    }

    /// Checks that the matrix is canonical (its fields are public, so it may have been built by hand): indptr
    /// from 0, non-decreasing, ending at the number of entries; within each row strictly increasing columns
    /// below `n_genes`; counts in `1 ..= 2^31 - 1`.
    pub fn validate(&self) -> Result<(), EncodeError> {
        if self.indptr.first() != Some(&0) {
            return Err(EncodeError::Shape("indptr must start at 0".into()));
        }
        if self.indices.len() != self.values.len() {
            return Err(EncodeError::Shape(format!("{} indices but {} values", self.indices.len(), self.values.len())));
        }
        if *self.indptr.last().expect("non-empty") != self.indices.len() as u64 {
            return Err(EncodeError::Shape("indptr does not end at the number of entries".into()));
        }
        if let Some(r) = self.indptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(EncodeError::Shape(format!("indptr decreases at row {r}")));
        }
        // One branch-free pass over everything (the rows are now known to lie inside the arrays); only a matrix
        // that fails it is walked entry by entry to name the first bad entry.
        let values_ok = self.values.iter().fold(true, |ok, &v| ok & (v.wrapping_sub(1) < MAX_COUNT));
        let rows_ok = self.indptr.windows(2).fold(true, |ok, w| {
            let row = &self.indices[w[0] as usize..w[1] as usize];
            let increasing = row.iter().zip(row.iter().skip(1)).fold(true, |ok, (a, b)| ok & (a < b));
            // Strictly increasing, so the last column is the largest.
            ok & increasing & row.last().is_none_or(|&c| u64::from(c) < self.n_genes)
        });
        if values_ok && rows_ok {
            return Ok(());
        }
        for (r, w) in self.indptr.windows(2).enumerate() {
            let mut prev: Option<u32> = None;
            for k in w[0] as usize..w[1] as usize {
                let (c, v) = (self.indices[k], self.values[k]);
                if u64::from(c) >= self.n_genes || prev.is_some_and(|p| c <= p) {
                    return Err(EncodeError::Shape(format!(
                        "row {r}: column {c} is not above the previous one or not below {}",
                        self.n_genes
                    )));
                }
                if v == 0 || v > MAX_COUNT {
                    let reason = "not in 1..=2^31 - 1";
                    return Err(EncodeError::NotACount { row: r as u64, col: c.into(), value: v.to_string(), reason });
                }
                prev = Some(c);
            }
        }
        Ok(())
    }

    /// Checks that tiles of `version` can hold this matrix: its genes (`1 ..= version.max_genes()`) and, for
    /// version 1 (no exceptions), every count at most 65535. The error names the first cell (row) and gene that
    /// need version 2, with `row_base` added to row numbers (the global index of row 0).
    pub fn check_version(&self, version: Version, row_base: u64) -> Result<(), EncodeError> {
        if self.n_genes == 0 || self.n_genes > version.max_genes() {
            return Err(EncodeError::Unrepresentable {
                version: version.number(),
                reason: format!(
                    "{} genes; version {} holds 1..={} (write version 2)",
                    self.n_genes,
                    version.number(),
                    version.max_genes()
                ),
            });
        }
        if version.has_exceptions() {
            return Ok(());
        }
        let limit = STREAM_MAX;
        let Some(k) = self.values.iter().position(|&v| v > limit) else { return Ok(()) };
        let row = self.indptr.partition_point(|&p| p <= k as u64) - 1;
        Err(EncodeError::Unrepresentable {
            version: version.number(),
            reason: format!(
                "cell {}, gene {}: count {} is above {limit}, the largest version 1 holds; write version 2",
                row_base + row as u64,
                self.indices[k],
                self.values[k]
            ),
        })
    }

    /// Validates and canonicalizes a whole matrix.
    pub fn from_csr<P: IndexLike, I: IndexLike, V: CountLike>(m: &CsrMatrix<'_, P, I, V>) -> Result<Self, EncodeError> {
        let mut out = CanonicalCsr::new(m.n_cols);
        out.push_rows(m, 0..m.n_rows, 0)?;
        Ok(out)
    }

    /// Appends rows `rows` of `m`, canonicalized. `row_base` is added to row numbers in error messages (the
    /// global index of `m`'s row 0). On error nothing is appended.
    pub fn push_rows<P: IndexLike, I: IndexLike, V: CountLike>(
        &mut self,
        m: &CsrMatrix<'_, P, I, V>,
        rows: std::ops::Range<usize>,
        row_base: u64,
    ) -> Result<(), EncodeError> {
        if m.n_cols != self.n_genes {
            return Err(EncodeError::Shape(format!("matrix has {} columns, expected {}", m.n_cols, self.n_genes)));
        }
        check_shape(m)?;
        if rows.end > m.n_rows {
            return Err(EncodeError::Shape(format!("rows {rows:?} are outside 0..{}", m.n_rows)));
        }
        let (len0, nnz0) = (self.indptr.len(), self.indices.len());
        let mut scratch: Vec<(u32, u32)> = Vec::new();
        for r in rows {
            if let Err(e) = self.push_row(m, r, row_base + r as u64, &mut scratch) {
                self.indptr.truncate(len0);
                self.indices.truncate(nnz0);
                self.values.truncate(nnz0);
                return Err(e);
            }
        }
        Ok(())
    }

    fn push_row<P: IndexLike, I: IndexLike, V: CountLike>(
        &mut self,
        m: &CsrMatrix<'_, P, I, V>,
        r: usize,
        global_row: u64,
        scratch: &mut Vec<(u32, u32)>,
    ) -> Result<(), EncodeError> {
        let (lo, hi) = (m.indptr[r].to_i128() as usize, m.indptr[r + 1].to_i128() as usize);
        let n_genes = self.n_genes;
        let start = self.indices.len();
        let mut sorted = true;
        let mut prev: i128 = -1;
        for k in lo..hi {
            let col = m.indices[k].to_i128();
            if col < 0 || col >= i128::from(n_genes) {
                return Err(EncodeError::ColumnOutOfRange { row: global_row, col, n_genes });
            }
            let v = m.values[k];
            let count = v.to_count().map_err(|reason| EncodeError::NotACount {
                row: global_row,
                col: col as u64,
                value: v.exact(),
                reason,
            })?;
            sorted &= col > prev;
            prev = col;
            if count != 0 {
                self.indices.push(col as u32);
                self.values.push(count);
            }
        }
        if !sorted {
            // Rare path: sort by column (stable), sum repeats; zeros were already dropped.
            scratch.clear();
            scratch.extend(self.indices[start..].iter().copied().zip(self.values[start..].iter().copied()));
            scratch.sort_by_key(|&(c, _)| c);
            self.indices.truncate(start);
            self.values.truncate(start);
            for &(c, v) in scratch.iter() {
                if self.indices.len() > start && *self.indices.last().expect("non-empty") == c {
                    let last = self.values.last_mut().expect("non-empty");
                    let sum = u64::from(*last) + u64::from(v);
                    if sum > u64::from(MAX_COUNT) {
                        return Err(EncodeError::NotACount {
                            row: global_row,
                            col: c.into(),
                            value: sum.to_string(),
                            reason: "repeated entries sum above 2^31 - 1",
                        });
                    }
                    *last = sum as u32;
                } else {
                    self.indices.push(c);
                    self.values.push(v);
                }
            }
        }
        self.indptr.push(self.indices.len() as u64);
        Ok(())
    }
}

fn check_shape<P: IndexLike, I: IndexLike, V>(m: &CsrMatrix<'_, P, I, V>) -> Result<(), EncodeError> {
    if m.indptr.len() != m.n_rows + 1 {
        return Err(EncodeError::Shape(format!("indptr has {} entries for {} rows", m.indptr.len(), m.n_rows)));
    }
    if m.indices.len() != m.values.len() {
        return Err(EncodeError::Shape(format!("{} indices but {} values", m.indices.len(), m.values.len())));
    }
    if m.indptr[0].to_i128() != 0 {
        return Err(EncodeError::Shape("indptr[0] is not 0".into()));
    }
    let mut prev = 0i128;
    for (i, p) in m.indptr.iter().enumerate() {
        let p = p.to_i128();
        if p < prev {
            return Err(EncodeError::Shape(format!("indptr decreases at entry {i}")));
        }
        prev = p;
    }
    if prev != m.indices.len() as i128 {
        return Err(EncodeError::Shape(format!("indptr ends at {prev} but there are {} entries", m.indices.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(n_genes: u64, indptr: &[u64], indices: &[u32], values: &[u32]) -> CanonicalCsr {
        CanonicalCsr { n_genes, indptr: indptr.to_vec(), indices: indices.to_vec(), values: values.to_vec() }
    }

    /// The one-pass check accepts exactly the canonical matrices, and every rejection names its entry.
    #[test]
    fn validate_accepts_exactly_canonical_matrices() {
        assert!(csr(10, &[0, 2, 2, 3], &[1, 9, 0], &[1, MAX_COUNT, 5]).validate().is_ok());
        assert!(csr(10, &[0], &[], &[]).validate().is_ok());
        let shape = |m: CanonicalCsr| matches!(m.validate(), Err(EncodeError::Shape(_)));
        let count = |m: CanonicalCsr| matches!(m.validate(), Err(EncodeError::NotACount { .. }));
        assert!(shape(csr(10, &[0, 2, 1, 3], &[1, 2, 3], &[1, 1, 1])), "indptr decreases");
        assert!(shape(csr(10, &[0, 2], &[3, 3], &[1, 1])), "repeated column");
        assert!(shape(csr(10, &[0, 2], &[4, 3], &[1, 1])), "decreasing columns");
        assert!(shape(csr(10, &[0, 1, 2], &[1, 10], &[1, 1])), "column not below n_genes");
        assert!(count(csr(10, &[0, 2], &[1, 2], &[1, 0])), "stored zero");
        assert!(count(csr(10, &[0, 2], &[1, 2], &[MAX_COUNT + 1, 1])), "count above 2^31 - 1");
        match csr(10, &[0, 1, 3], &[4, 2, 3], &[1, 7, 0]).validate() {
            Err(EncodeError::NotACount { row, col, .. }) => assert_eq!((row, col), (1, 3)),
            other => panic!("{other:?}"),
        }
    }

    /// A refused value is named exactly as given: 2^31 as a float32 is not shown as its shortest form.
    #[test]
    fn refused_floats_are_named_exactly() {
        assert_eq!(2_147_483_648_f32.to_string(), "2147483600", "the shortest form rounds");
        assert_eq!(2_147_483_648_f32.exact(), "2147483648");
        assert_eq!(3e38_f32.exact(), format!("{}", 3e38_f32 as f64 as u128));
        assert_eq!((1.5_f32.exact(), 0.1_f32.exact(), (-2.0_f64).exact()), ("1.5".into(), "0.1".into(), "-2".into()));
        assert_eq!((f32::NAN.exact(), f64::INFINITY.exact()), ("NaN".into(), "inf".into()));
        let m = CsrMatrix { n_rows: 1, n_cols: 4, indptr: &[0u32, 1], indices: &[2u32], values: &[2_147_483_648_f32] };
        let e = CanonicalCsr::from_csr(&m).unwrap_err().to_string();
        assert!(e.contains("value 2147483648 is not a count"), "{e}");
    }
}
