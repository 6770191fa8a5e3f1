//! One streaming pass over a source: per-gene and per-cell statistics (the converter's first pass).

use std::ops::Range;

use crate::CountSource;
use crate::block::RowBlock;
use crate::error::InputError;

/// Statistics of a whole matrix, from [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStats {
    /// Cells (rows) scanned.
    pub n_cells: u64,
    /// Genes (columns).
    pub n_genes: u64,
    /// Nonzero entries (after zeros are dropped and repeats summed).
    pub nnz: u64,
    /// Sum of all counts.
    pub total: u64,
    /// Largest count (0 if there is none).
    pub max_count: u32,
    /// Sum of counts per gene, in source column order.
    pub gene_totals: Vec<u64>,
    /// Nonzero cells per gene.
    pub gene_nnz: Vec<u64>,
    /// Sum of counts per cell.
    pub cell_totals: Vec<u64>,
    /// Nonzero genes per cell.
    pub cell_nnz: Vec<u64>,
}

impl ScanStats {
    /// Gene indices sorted by decreasing total count, ties by increasing index (a stable sort): the converter's
    /// default output gene order.
    pub fn gene_order_by_decreasing_total(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.gene_totals.len() as u32).collect();
        order.sort_by_key(|&g| std::cmp::Reverse(self.gene_totals[g as usize]));
        order
    }
}

/// Consecutive windows of at most `window` rows covering `0..n_rows` (`window` 0 is treated as 1).
pub fn row_windows(n_rows: u64, window: u64) -> impl Iterator<Item = Range<u64>> {
    let w = window.max(1);
    (0..n_rows.div_ceil(w)).map(move |i| i * w..((i + 1) * w).min(n_rows))
}

/// Reads every cell of `source` once, `window_rows` cells at a time, and returns per-gene and per-cell statistics.
/// Memory: one window plus 16 bytes per gene and 16 per cell.
pub fn scan(source: &mut dyn CountSource, window_rows: u64) -> Result<ScanStats, InputError> {
    scan_observed(source, window_rows, &mut |_| {})
}

/// [`scan`], handing each window to `observe` as it is read (in row order, each row once): lets a caller keep the
/// decoded cells, e.g. the converter's copy of an input for its second pass.
pub fn scan_observed(
    source: &mut dyn CountSource,
    window_rows: u64,
    observe: &mut dyn FnMut(&RowBlock),
) -> Result<ScanStats, InputError> {
    let (n_cells, n_genes) = (source.n_cells(), source.n_genes());
    // Both are backed by tables already held in memory (gene table, cell names), so these sizes are real.
    let mut s = ScanStats {
        n_cells,
        n_genes,
        nnz: 0,
        total: 0,
        max_count: 0,
        gene_totals: Vec::new(),
        gene_nnz: Vec::new(),
        cell_totals: Vec::with_capacity(n_cells as usize),
        cell_nnz: Vec::with_capacity(n_cells as usize),
    };
    // Total and nonzero count of a gene side by side: one cache line per entry, one bounds check.
    let mut per_gene = vec![[0u64; 2]; n_genes as usize];
    let mut max_count = 0u32;
    let mut block = RowBlock::new(n_genes);
    for rows in row_windows(n_cells, window_rows) {
        source.read_rows_into(rows, &mut block)?;
        for r in 0..block.n_rows() {
            let (genes, counts) = block.row(r);
            let mut cell_total = 0u64;
            for (&g, &c) in genes.iter().zip(counts) {
                let slot = &mut per_gene[g as usize];
                slot[0] += u64::from(c);
                slot[1] += 1;
                cell_total += u64::from(c);
                max_count = max_count.max(c);
            }
            s.cell_totals.push(cell_total);
            s.cell_nnz.push(genes.len() as u64);
            s.total += cell_total;
            s.nnz += genes.len() as u64;
        }
        observe(&block);
    }
    s.max_count = max_count;
    s.gene_totals = per_gene.iter().map(|p| p[0]).collect();
    s.gene_nnz = per_gene.iter().map(|p| p[1]).collect();
    Ok(s)
}
