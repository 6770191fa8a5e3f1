//! The tiles a report decodes: all of a small dataset, an even spread of a large one's, so that a report of 10^7
//! cells reads a few hundred thousand of them.

use dct_codec::{DecodeOptions, DecodedTile, Decoder, inspect};
use dct_dataset::Dataset;
use rayon::prelude::*;

use crate::ReportError;

/// What the sampled tiles hold: per cell, per gene, per chunk.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// The tiles decoded, in order.
    pub tiles: Vec<usize>,
    /// Nonzeros of each sampled cell.
    pub nnz_per_cell: Vec<f64>,
    /// Total counts of each sampled cell.
    pub counts_per_cell: Vec<f64>,
    /// Total counts of each stored gene column over the sampled cells.
    pub gene_totals: Vec<f64>,
    /// Per sampled tile, its chunks' nonzeros and compressed bytes (gaps, counts and exception frames).
    pub chunks: Vec<(usize, Vec<(u64, u64)>)>,
    /// Value and gap exceptions over the sampled tiles.
    pub exceptions: (u64, u64),
}

impl Sample {
    /// Cells sampled.
    pub fn n_cells(&self) -> usize {
        self.nnz_per_cell.len()
    }
}

/// An even spread of at most `max_tiles` of `n_tiles` tiles (all of them when there are no more), first and last
/// included.
pub fn spread(n_tiles: usize, max_tiles: usize) -> Vec<usize> {
    let k = max_tiles.max(1);
    if n_tiles <= k {
        return (0..n_tiles).collect();
    }
    if k == 1 {
        return vec![0];
    }
    (0..k).map(|i| i * (n_tiles - 1) / (k - 1)).collect()
}

/// Fetches, checks (CRC) and decodes `tiles` of `ds`, a few at a time in parallel, and sums what the report shows.
pub fn sample(ds: &Dataset, tiles: &[usize]) -> Result<Sample, ReportError> {
    let n_genes = ds.n_genes() as usize;
    let per_tile: Vec<Sample> = tiles
        .par_iter()
        .map_init(
            // Counts as integers: a sum of float32 values is not exact beyond 2^24.
            || (Decoder::new(DecodeOptions { verify_crc: true, threads: 1 }), DecodedTile::<u32>::default()),
            |(decoder, out), &t| -> Result<Sample, ReportError> {
                let blob = ds.fetch_tile_bytes(t).map_err(|e| ReportError::Dataset(e.to_string()))?;
                let bad = |e: String| ReportError::Tile {
                    url: ds.store().url(&dct_dataset::manifest::tile_path(t)),
                    cause: e,
                };
                let summary = inspect(&blob).map_err(|e| bad(e.to_string()))?;
                decoder.decode_into(&blob, out).map_err(|e| bad(e.to_string()))?;
                let mut s = Sample { tiles: vec![t], gene_totals: vec![0.0; n_genes], ..Sample::default() };
                for r in 0..out.indptr.len().saturating_sub(1) {
                    let (a, b) = (out.indptr[r] as usize, out.indptr[r + 1] as usize);
                    s.nnz_per_cell.push((b - a) as f64);
                    let mut total = 0f64;
                    for (&g, &v) in out.indices[a..b].iter().zip(&out.values[a..b]) {
                        total += f64::from(v);
                        if let Some(slot) = s.gene_totals.get_mut(g as usize) {
                            *slot += f64::from(v);
                        }
                    }
                    s.counts_per_cell.push(total);
                }
                let chunks = summary
                    .chunks
                    .iter()
                    .map(|c| {
                        let e = &c.entry;
                        (e.nnz(), e.gaps.len + e.vals.len + e.vexc.len + e.gexc.len)
                    })
                    .collect();
                s.chunks.push((t, chunks));
                s.exceptions = (
                    summary.chunks.iter().map(|c| c.value_exceptions).sum(),
                    summary.chunks.iter().map(|c| c.gap_exceptions).sum(),
                );
                Ok(s)
            },
        )
        .collect::<Result<_, _>>()?;
    let mut all = Sample { gene_totals: vec![0.0; n_genes], ..Sample::default() };
    for s in per_tile {
        all.tiles.extend(s.tiles);
        all.nnz_per_cell.extend(s.nnz_per_cell);
        all.counts_per_cell.extend(s.counts_per_cell);
        all.gene_totals.iter_mut().zip(&s.gene_totals).for_each(|(a, b)| *a += b);
        all.chunks.extend(s.chunks);
        all.exceptions.0 += s.exceptions.0;
        all.exceptions.1 += s.exceptions.1;
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_keeps_the_ends_and_never_repeats() {
        assert_eq!(spread(5, 10), [0, 1, 2, 3, 4]);
        assert_eq!(spread(100, 5), [0, 24, 49, 74, 99]);
        assert_eq!(spread(3, 1), [0]);
        assert!(spread(0, 4).is_empty());
        let s = spread(100_000, 32);
        assert!(s.windows(2).all(|w| w[0] < w[1]) && s.len() == 32 && s[31] == 99_999);
    }
}
