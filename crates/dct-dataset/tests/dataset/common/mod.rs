//! Shared helpers: a random count matrix kept in memory (the independent truth), fed to a writer in blocks of
//! random sizes with unsorted, split (repeated) and zero entries, and checks of batches against it.

#![allow(dead_code)]

use dct_codec::CsrMatrix;
use dct_dataset::{Batch, DatasetWriter, SparseRows};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A canonical count matrix: per cell, (gene, count) with strictly increasing genes and counts >= 1.
pub struct Truth {
    pub n_genes: u64,
    pub rows: Vec<Vec<(i32, u32)>>,
}

impl Truth {
    pub fn n_cells(&self) -> u64 {
        self.rows.len() as u64
    }

    pub fn nnz(&self) -> u64 {
        self.rows.iter().map(|r| r.len() as u64).sum()
    }

    /// Cells `lo..hi`'s nonzeros.
    pub fn nnz_of(&self, cells: &[u64]) -> u64 {
        cells.iter().map(|&c| self.rows[c as usize].len() as u64).sum()
    }
}

/// A random matrix: about `density` of the genes per cell (some cells empty), counts mostly small; with
/// `big`, a few counts above 65535 (up to 2^31 - 1).
pub fn random_truth(seed: u64, n_cells: usize, n_genes: u64, density: f64, big: bool) -> Truth {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut rows = Vec::with_capacity(n_cells);
    for _ in 0..n_cells {
        if rng.random_bool(0.05) {
            rows.push(Vec::new());
            continue;
        }
        let k = ((n_genes as f64 * density * rng.random_range(0.2..1.8)) as u64).clamp(1, n_genes);
        let mut genes: Vec<i32> = (0..k).map(|_| rng.random_range(0..n_genes) as i32).collect();
        genes.sort_unstable();
        genes.dedup();
        let row = genes
            .into_iter()
            .map(|g| {
                let c = if big && rng.random_bool(0.01) {
                    rng.random_range(65_536..=i32::MAX as u32)
                } else if rng.random_bool(0.7) {
                    1
                } else {
                    rng.random_range(2..300)
                };
                (g, c)
            })
            .collect();
        rows.push(row);
    }
    Truth { n_genes, rows }
}

/// An input block for rows `lo..hi`: entries shuffled within each row, counts >= 2 sometimes split into two
/// entries of the same gene, and explicit zeros added.
pub fn block(truth: &Truth, lo: usize, hi: usize, rng: &mut ChaCha8Rng) -> (Vec<u64>, Vec<u32>, Vec<u32>) {
    let mut indptr = vec![0u64];
    let (mut indices, mut values) = (Vec::new(), Vec::new());
    for row in &truth.rows[lo..hi] {
        let mut entries: Vec<(u32, u32)> = Vec::new();
        for &(g, c) in row {
            if c >= 2 && rng.random_bool(0.1) {
                let a = rng.random_range(1..c);
                entries.push((g as u32, a));
                entries.push((g as u32, c - a));
            } else {
                entries.push((g as u32, c));
            }
        }
        if rng.random_bool(0.2) {
            entries.push((rng.random_range(0..truth.n_genes) as u32, 0));
        }
        entries.shuffle(rng);
        for (g, c) in entries {
            indices.push(g);
            values.push(c);
        }
        indptr.push(indices.len() as u64);
    }
    (indptr, indices, values)
}

/// Appends the whole matrix in blocks of random sizes (0 ..= max_block rows).
pub fn append_all(w: &mut DatasetWriter, truth: &Truth, seed: u64, max_block: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = truth.rows.len();
    let mut lo = 0;
    while lo < n {
        let hi = (lo + rng.random_range(0..=max_block)).min(n);
        let (indptr, indices, values) = block(truth, lo, hi, &mut rng);
        let m =
            CsrMatrix { n_rows: hi - lo, n_cols: truth.n_genes, indptr: &indptr, indices: &indices, values: &values };
        w.append(&m).unwrap();
        lo = hi;
    }
}

/// Asserts that `batch` holds exactly the rows `cells` of `truth`, in order.
pub fn assert_batch(batch: &Batch<u32>, truth: &Truth, cells: &[u64]) {
    assert_eq!(batch.n_rows(), cells.len());
    assert_eq!(batch.n_genes, truth.n_genes);
    for (j, &c) in cells.iter().enumerate() {
        let (idx, vals) = batch.row(j);
        let want = &truth.rows[c as usize];
        let want_idx: Vec<i32> = want.iter().map(|&(g, _)| g).collect();
        let want_vals: Vec<u32> = want.iter().map(|&(_, v)| v).collect();
        assert_eq!(idx, want_idx.as_slice(), "cell {c} (row {j}) genes");
        assert_eq!(vals, want_vals.as_slice(), "cell {c} (row {j}) counts");
    }
}

/// Random batches: shuffled cells from anywhere, with repeats.
pub fn random_batches(seed: u64, n_cells: u64, count: usize, max_len: usize) -> Vec<Vec<u64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let len = rng.random_range(1..=max_len);
            let mut b: Vec<u64> = (0..len).map(|_| rng.random_range(0..n_cells)).collect();
            if len > 2 {
                b[len - 1] = b[0]; // a repeat
            }
            b
        })
        .collect()
}

/// Opens the dataset under `prefix` of `store`, with the retries of `options` (as a URL's store would have).
pub fn open_in(
    store: dct_dataset::Store,
    prefix: &str,
    options: dct_dataset::ReadOptions,
) -> Result<dct_dataset::Dataset, dct_dataset::DatasetError> {
    let store = store.child(prefix).with_retry(options.store.retry.clone());
    dct_dataset::Dataset::open_store(store, options)
}

/// Starts a dataset under `prefix` of `store`, with the retries of `options`.
pub fn create_in(
    store: dct_dataset::Store,
    prefix: &str,
    options: dct_dataset::WriterOptions,
) -> Result<DatasetWriter, dct_dataset::DatasetError> {
    let store = store.child(prefix).with_retry(options.store.retry.clone());
    DatasetWriter::create_in(store, options)
}
