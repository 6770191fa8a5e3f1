//! Seeded synthetic single-cell RNA-seq count matrices, for deltacells tests and benchmarks.
//!
//! # The model
//!
//! This is the model the original implementation's published size and speed figures use:
//!
//! * gene weights `w_j ∝ 1 / (j + 10)^0.9` over `n_genes` genes, normalised to sum to 1;
//! * each cell has a sequencing depth `d ~ LogNormal(ln median_depth, depth_sigma)` (defaults: 3000 and 0.5);
//! * gene `j` is detected in a cell with probability `1 − exp(−1.6 · d · w_j)`, independently of other genes;
//! * a detected gene has the count `1 + Poisson(8 · d · w_j)` (so stored counts are always `≥ 1`; they are capped
//!   at `2^31 − 1`, which the default parameters never come near).
//!
//! With the defaults (30,000 genes) a cell has about 3,300 nonzeros on average (3,000 at the median depth).
//!
//! # Gene order
//!
//! A converter sorts genes by decreasing total count (ties by index) and records the permutation. Here the
//! column order is defined by the **expected** totals under the model, which keeps generation per-cell
//! reproducible (no cell depends on any other): the expected total of gene `j` over cells is
//! `E[(1 − exp(−1.6 d w_j)) (1 + 8 d w_j)]`, which is strictly increasing in `w_j`, and `w_j` strictly
//! decreases with `j`. So the sorted order is the identity: column 0 is the gene with the highest expected total,
//! and [`gene_order`] (the `gene_order.npy` a converter would write) is `0, 1, …, n_genes − 1`. Realised totals of
//! a finite sample follow the same order up to sampling noise among genes of nearly equal weight.
//!
//! # Reproducibility
//!
//! Everything is a pure function of the seed and the cell index: cell `i` draws from its own ChaCha8 stream
//! (key derived from [`SynthParams::seed`], stream number `i`), first its depth, then its genes in increasing
//! order. Any range of cells can therefore be generated on its own (in any order, on any thread) and gives the same
//! rows as when generated as part of a larger range; a 200,000-cell dataset can be produced tile by tile. (Values
//! are reproducible for a given version of `rand_chacha` / `rand_distr`; their sampling algorithms may change
//! between major versions.)
//!
//! # Sampling
//!
//! Instead of one Bernoulli draw per gene and cell, detection is sampled exactly by *thinning*: genes are taken in
//! blocks of 64; within a block every gene's detection probability is at most the block's largest, `q`, so a
//! geometric skip with parameter `q` proposes the next candidate and a candidate `j` is accepted with probability
//! `p_j / q`. This costs about one proposal per nonzero instead of one draw per gene (a 10,000 × 30,000 matrix takes
//! a few seconds in release on two cores). [`Synth::generate`] splits the cells across the current rayon pool.
//!
//! ```
//! use dct_synth::{SynthParams, generate};
//! let params = SynthParams { n_genes: 2_000, ..SynthParams::default() };
//! let m = generate(&params, 0..20)?;
//! assert_eq!(m.n_cells(), 20);
//! // Any sub-range gives the same rows.
//! let tail = generate(&params, 10..20)?;
//! assert_eq!(m.row(15), tail.row(5));
//! # Ok::<(), dct_synth::SynthError>(())
//! ```

#![forbid(unsafe_code)]

use std::ops::Range;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal, Poisson};
use rayon::prelude::*;

/// Detection rate: gene `j` is detected with probability `1 − exp(−DETECTION_RATE · d · w_j)`.
pub const DETECTION_RATE: f64 = 1.6;
/// Count rate: a detected gene's count is `1 + Poisson(COUNT_RATE · d · w_j)`.
pub const COUNT_RATE: f64 = 8.0;
/// Exponent of the gene weights `w_j ∝ 1 / (j + WEIGHT_OFFSET)^WEIGHT_EXPONENT`.
pub const WEIGHT_EXPONENT: f64 = 0.9;
/// Offset of the gene weights `w_j ∝ 1 / (j + WEIGHT_OFFSET)^WEIGHT_EXPONENT`.
pub const WEIGHT_OFFSET: f64 = 10.0;
/// Largest count generated (the format's limit, `2^31 − 1`).
pub const MAX_COUNT: u32 = i32::MAX as u32;

/// Genes per thinning block (see the crate docs).
const BLOCK: usize = 64;
/// Cells per parallel work item in [`Synth::generate`].
const CELLS_PER_TASK: u64 = 32;

/// Parameters of the synthetic model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SynthParams {
    /// Genes (columns); at least 1. The generator keeps two `f64` per gene.
    pub n_genes: u32,
    /// Seed; together with the cell index it determines each row.
    pub seed: u64,
    /// Median cell depth (`exp` of the log-normal's location); finite and positive.
    pub median_depth: f64,
    /// Standard deviation of the log depth; finite and non-negative.
    pub depth_sigma: f64,
}

impl Default for SynthParams {
    /// 30,000 genes, seed 42, median depth 3000, log-depth sigma 0.5.
    fn default() -> Self {
        SynthParams { n_genes: 30_000, seed: 42, median_depth: 3000.0, depth_sigma: 0.5 }
    }
}

/// Why parameters were rejected.
#[derive(Debug, Clone, PartialEq)]
pub enum SynthError {
    /// `n_genes` is 0.
    NoGenes,
    /// `median_depth` is not finite and positive, or `depth_sigma` is not finite and non-negative.
    BadDepth {
        /// The median depth given.
        median_depth: f64,
        /// The log-depth sigma given.
        depth_sigma: f64,
    },
}

impl std::fmt::Display for SynthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SynthError::NoGenes => write!(f, "n_genes must be at least 1"),
            SynthError::BadDepth { median_depth, depth_sigma } => write!(
                f,
                "median_depth must be finite and positive and depth_sigma finite and non-negative \
                 (got {median_depth} and {depth_sigma})"
            ),
        }
    }
}

impl std::error::Error for SynthError {}

/// A generated block of cells in canonical CSR form: within each row strictly increasing gene indices below
/// `n_genes`, and counts in `1 ..= 2^31 − 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthCsr {
    /// Genes (columns).
    pub n_genes: u64,
    /// Row offsets, `n_cells + 1` entries starting at 0.
    pub indptr: Vec<u64>,
    /// Gene indices.
    pub indices: Vec<u32>,
    /// Counts.
    pub values: Vec<u32>,
}

impl SynthCsr {
    /// Cells (rows).
    pub fn n_cells(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    /// Stored nonzeros.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The gene indices and counts of row `r`, or `None` if there is no such row.
    pub fn row(&self, r: usize) -> Option<(&[u32], &[u32])> {
        let lo = usize::try_from(*self.indptr.get(r)?).ok()?;
        let hi = usize::try_from(*self.indptr.get(r + 1)?).ok()?;
        Some((self.indices.get(lo..hi)?, self.values.get(lo..hi)?))
    }
}

/// A prepared generator: the validated parameters, gene weights and per-block bounds. Cheap to share between
/// threads; build one and call [`Synth::generate`] per tile.
#[derive(Debug, Clone)]
pub struct Synth {
    params: SynthParams,
    key: [u8; 32],
    depth: LogNormal<f64>,
    weights: Vec<f64>,
    block_max: Vec<f64>,
}

impl Synth {
    /// Validates `params` and precomputes the gene weights.
    pub fn new(params: &SynthParams) -> Result<Self, SynthError> {
        if params.n_genes == 0 {
            return Err(SynthError::NoGenes);
        }
        let bad = SynthError::BadDepth { median_depth: params.median_depth, depth_sigma: params.depth_sigma };
        if !(params.median_depth.is_finite() && params.median_depth > 0.0) {
            return Err(bad);
        }
        if !(params.depth_sigma.is_finite() && params.depth_sigma >= 0.0) {
            return Err(bad);
        }
        let depth = LogNormal::new(params.median_depth.ln(), params.depth_sigma).map_err(|_| bad)?;
        let mut weights: Vec<f64> =
            (0..params.n_genes).map(|j| (f64::from(j) + WEIGHT_OFFSET).powf(-WEIGHT_EXPONENT)).collect();
        let total: f64 = weights.iter().sum();
        for w in &mut weights {
            *w /= total;
        }
        let block_max = weights.chunks(BLOCK).map(|b| b.iter().copied().fold(0.0, f64::max)).collect();
        let key = ChaCha8Rng::seed_from_u64(params.seed).get_seed();
        Ok(Synth { params: *params, key, depth, weights, block_max })
    }

    /// The parameters.
    pub fn params(&self) -> &SynthParams {
        &self.params
    }

    /// The normalised gene weights `w_j` (decreasing, summing to 1), in column order.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// The gene order a converter would record (see the crate docs): the identity permutation.
    pub fn gene_order(&self) -> Vec<u32> {
        gene_order(self.params.n_genes)
    }

    /// The depth of cell `cell` (the first draw of its stream).
    pub fn depth(&self, cell: u64) -> f64 {
        self.depth.sample(&mut self.cell_rng(cell))
    }

    /// The expected nonzeros of a cell of depth `depth`: `Σ_j 1 − exp(−1.6 · depth · w_j)`.
    pub fn expected_nnz(&self, depth: f64) -> f64 {
        let c = DETECTION_RATE * depth;
        self.weights.iter().map(|&w| -(-c * w).exp_m1()).sum()
    }

    fn cell_rng(&self, cell: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::from_seed(self.key);
        rng.set_stream(cell);
        rng
    }

    /// Appends the row of cell `cell` (gene indices in increasing order and their counts) to `indices` and
    /// `values`.
    pub fn cell_into(&self, cell: u64, indices: &mut Vec<u32>, values: &mut Vec<u32>) {
        let mut rng = self.cell_rng(cell);
        let d = self.depth.sample(&mut rng);
        let c = DETECTION_RATE * d;
        let m = COUNT_RATE * d;
        let n = self.weights.len();
        for (b, &wmax) in self.block_max.iter().enumerate() {
            let (lo, hi) = (b * BLOCK, ((b + 1) * BLOCK).min(n));
            // Every gene of the block is detected with probability at most q.
            let q = -(-c * wmax).exp_m1();
            if q.is_nan() || q <= 0.0 {
                continue;
            }
            let ln_miss = (-q).ln_1p(); // ln(1 - q) < 0; -inf when q == 1
            let mut g = lo;
            loop {
                if q < 1.0 {
                    // Failures before the next success of a Bernoulli(q) sequence, by inversion; u in (0, 1].
                    let u = 1.0 - rng.random::<f64>();
                    let skip = (u.ln() / ln_miss).floor();
                    if skip.is_nan() || skip >= (hi - g) as f64 {
                        break;
                    }
                    g += skip as usize;
                }
                if g >= hi {
                    break;
                }
                let w = self.weights[g];
                let p = -(-c * w).exp_m1();
                if rng.random::<f64>() * q < p {
                    indices.push(g as u32);
                    values.push(count(&mut rng, m * w));
                }
                g += 1;
            }
        }
    }

    /// Generates the cells `cells` (global cell indices; an empty or reversed range gives no rows), splitting the
    /// work across the current rayon pool. The result does not depend on the number of threads.
    pub fn generate(&self, cells: Range<u64>) -> SynthCsr {
        let (start, end) = (cells.start, cells.end.max(cells.start));
        let tasks = (end - start).div_ceil(CELLS_PER_TASK);
        let parts: Vec<(Vec<u64>, Vec<u32>, Vec<u32>)> = (0..tasks)
            .into_par_iter()
            .map(|t| {
                let lo = start + t * CELLS_PER_TASK;
                let hi = lo.saturating_add(CELLS_PER_TASK).min(end);
                let (mut ends, mut indices, mut values) = (Vec::new(), Vec::new(), Vec::new());
                for cell in lo..hi {
                    self.cell_into(cell, &mut indices, &mut values);
                    ends.push(indices.len() as u64);
                }
                (ends, indices, values)
            })
            .collect();
        let nnz: usize = parts.iter().map(|p| p.1.len()).sum();
        let n_cells: usize = parts.iter().map(|p| p.0.len()).sum();
        let mut out = SynthCsr {
            n_genes: u64::from(self.params.n_genes),
            indptr: Vec::with_capacity(n_cells + 1),
            indices: Vec::with_capacity(nnz),
            values: Vec::with_capacity(nnz),
        };
        out.indptr.push(0);
        for (ends, indices, values) in parts {
            let base = out.indices.len() as u64;
            out.indptr.extend(ends.iter().map(|e| base + e));
            out.indices.extend_from_slice(&indices);
            out.values.extend_from_slice(&values);
        }
        out
    }
}

/// `1 + Poisson(lambda)`, capped at [`MAX_COUNT`].
fn count(rng: &mut ChaCha8Rng, lambda: f64) -> u32 {
    if lambda.is_nan() || lambda <= 0.0 {
        return 1;
    }
    if lambda >= f64::from(MAX_COUNT) {
        return MAX_COUNT;
    }
    match Poisson::new(lambda) {
        Ok(p) => {
            let k: f64 = p.sample(rng);
            (1.0 + k).min(f64::from(MAX_COUNT)) as u32
        }
        Err(_) => 1,
    }
}

/// Generates the cells `cells` of the model `params` (see [`Synth::generate`]).
pub fn generate(params: &SynthParams, cells: Range<u64>) -> Result<SynthCsr, SynthError> {
    Ok(Synth::new(params)?.generate(cells))
}

/// The gene order (output column `j` was source gene `gene_order[j]`) for `n_genes` genes: the identity, because
/// expected totals already decrease with the gene index (see the crate docs).
pub fn gene_order(n_genes: u32) -> Vec<u32> {
    (0..n_genes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(n_genes: u32) -> SynthParams {
        SynthParams { n_genes, ..SynthParams::default() }
    }

    fn check_canonical(m: &SynthCsr) {
        assert_eq!(m.indptr[0], 0);
        assert_eq!(*m.indptr.last().unwrap(), m.nnz() as u64);
        assert_eq!(m.indices.len(), m.values.len());
        for r in 0..m.n_cells() {
            let (idx, vals) = m.row(r).unwrap();
            assert!(idx.windows(2).all(|w| w[0] < w[1]), "row {r} not strictly increasing");
            assert!(idx.iter().all(|&g| u64::from(g) < m.n_genes));
            assert!(vals.iter().all(|&v| (1..=MAX_COUNT).contains(&v)));
        }
    }

    #[test]
    fn deterministic() {
        let p = small(5_000);
        let a = generate(&p, 0..40).unwrap();
        let b = generate(&p, 0..40).unwrap();
        assert_eq!(a, b);
        let c = generate(&SynthParams { seed: 43, ..p }, 0..40).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn ranges_compose() {
        let s = Synth::new(&small(30_000)).unwrap();
        let whole = s.generate(0..20);
        let (a, b) = (s.generate(0..10), s.generate(10..20));
        let mut joined = a.clone();
        let base = *joined.indptr.last().unwrap();
        joined.indptr.extend(b.indptr[1..].iter().map(|e| base + e));
        joined.indices.extend_from_slice(&b.indices);
        joined.values.extend_from_slice(&b.values);
        assert_eq!(joined, whole);
        // A single cell far into the dataset, on its own.
        let far = s.generate(123_456..123_457);
        let mut idx = Vec::new();
        let mut vals = Vec::new();
        s.cell_into(123_456, &mut idx, &mut vals);
        assert_eq!(far.row(0), Some((&idx[..], &vals[..])));
        // More than one parallel task, and a range that does not start at 0.
        let wide = s.generate(5..105);
        assert_eq!(wide.row(50), s.generate(55..56).row(0));
    }

    #[test]
    fn canonical_rows() {
        for n in [1, 2, 63, 64, 65, 1000, 30_000] {
            let m = generate(&small(n), 0..30).unwrap();
            assert_eq!(m.n_cells(), 30);
            assert_eq!(m.n_genes, u64::from(n));
            check_canonical(&m);
        }
        // Depth spread far beyond the defaults still gives valid rows.
        let wild = SynthParams { depth_sigma: 4.0, ..small(2_000) };
        check_canonical(&generate(&wild, 0..50).unwrap());
        let zero_sigma = SynthParams { depth_sigma: 0.0, ..small(2_000) };
        check_canonical(&generate(&zero_sigma, 0..5).unwrap());
    }

    #[test]
    fn empty_and_reversed_ranges() {
        let s = Synth::new(&small(100)).unwrap();
        for (a, b) in [(5, 5), (9, 3)] {
            let m = s.generate(a..b);
            assert_eq!(m.n_cells(), 0);
            assert_eq!(m.indptr, vec![0]);
            assert!(m.row(0).is_none());
        }
    }

    #[test]
    fn rejects_bad_params() {
        assert_eq!(Synth::new(&small(0)).unwrap_err(), SynthError::NoGenes);
        for (median_depth, depth_sigma) in
            [(0.0, 0.5), (-1.0, 0.5), (f64::NAN, 0.5), (3000.0, -0.1), (3000.0, f64::INFINITY)]
        {
            let p = SynthParams { median_depth, depth_sigma, ..SynthParams::default() };
            assert!(matches!(Synth::new(&p), Err(SynthError::BadDepth { .. })));
        }
        assert!(!SynthError::NoGenes.to_string().is_empty());
    }

    #[test]
    fn mean_nnz_near_published_figure() {
        let m = generate(&SynthParams::default(), 0..300).unwrap();
        let mean = m.nnz() as f64 / 300.0;
        assert!((2_900.0..3_700.0).contains(&mean), "mean nnz per cell {mean}");
    }

    /// The thinning sampler must match the model exactly: compare realised nonzeros and count totals with their
    /// expectations given each cell's depth (five standard deviations; the seed is fixed, so this is not flaky).
    #[test]
    fn matches_model_expectations() {
        let s = Synth::new(&small(30_000)).unwrap();
        let cells = 0..200u64;
        let m = s.generate(cells.clone());
        let (mut e_nnz, mut v_nnz, mut e_sum, mut v_sum) = (0.0, 0.0, 0.0, 0.0);
        for cell in cells {
            let d = s.depth(cell);
            for &w in s.weights() {
                let p = -(-DETECTION_RATE * d * w).exp_m1();
                let lam = COUNT_RATE * d * w;
                e_nnz += p;
                v_nnz += p * (1.0 - p);
                e_sum += p * (1.0 + lam);
                v_sum += p * (1.0 + 3.0 * lam + lam * lam) - (p * (1.0 + lam)).powi(2);
            }
        }
        let nnz = m.nnz() as f64;
        let sum: f64 = m.values.iter().map(|&v| f64::from(v)).sum();
        assert!((nnz - e_nnz).abs() < 5.0 * v_nnz.sqrt(), "nnz {nnz} vs expected {e_nnz} ± {}", v_nnz.sqrt());
        assert!((sum - e_sum).abs() < 5.0 * v_sum.sqrt(), "sum {sum} vs expected {e_sum} ± {}", v_sum.sqrt());
        // Per cell too, loosely: each row's nonzeros against its own expectation.
        for r in 0..m.n_cells() {
            let got = m.row(r).unwrap().0.len() as f64;
            let want = s.expected_nnz(s.depth(r as u64));
            assert!((got - want).abs() < 6.0 * want.sqrt() + 5.0, "cell {r}: {got} vs {want}");
        }
    }

    #[test]
    fn identity_is_the_sorted_order() {
        let s = Synth::new(&small(30_000)).unwrap();
        assert_eq!(s.gene_order(), (0..30_000).collect::<Vec<u32>>());
        assert!(s.weights().windows(2).all(|w| w[0] > w[1]));
        assert!((s.weights().iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // Realised totals: the top genes (well separated in weight) come out in order, gene 0 is the largest.
        let m = s.generate(0..500);
        let mut totals = vec![0u64; 30_000];
        for (&g, &v) in m.indices.iter().zip(&m.values) {
            totals[g as usize] += u64::from(v);
        }
        assert!(totals[..20].windows(2).all(|w| w[0] > w[1]), "{:?}", &totals[..20]);
        assert_eq!(totals.iter().max(), Some(&totals[0]));
    }
}
