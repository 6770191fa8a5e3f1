//! Renumbering genes into the output order, row by row, without sorting.

/// Maps source gene indices to output columns and re-sorts each row's entries by output column; genes without an
/// output column (an input's genes outside a dataset's gene space) are dropped.
///
/// For modest gene counts a row is scattered into a bitset (one bit per gene, which stays in L1 for 30k genes)
/// plus a dense value array, then gathered by scanning the set words: linear in the row's nonzeros plus
/// `n_genes / 64`, instead of a comparison sort per row. Very wide matrices fall back to sorting.
#[derive(Debug, Clone)]
pub struct GeneRemap {
    rank: Vec<u32>,
    bits: Vec<u64>,
    dense: Vec<u32>,
    pairs: Vec<u64>,
    identity: bool,
}

/// The column of a source gene that has none in the output.
pub const NO_COLUMN: u32 = u32::MAX;

/// Above this many genes a bitset per row costs more than sorting.
const BITSET_MAX_GENES: usize = 1 << 22;

impl GeneRemap {
    /// `order[j]` is the source gene stored in output column `j` (a permutation of `0..n`).
    pub fn new(order: &[u32]) -> Self {
        let n = order.len();
        let mut rank = vec![0u32; n];
        for (j, &g) in order.iter().enumerate() {
            rank[g as usize] = j as u32;
        }
        Self::with_columns(rank, n)
    }

    /// `columns[g]` is the output column of source gene `g` (distinct, below `n_out`), or [`NO_COLUMN`] for a gene
    /// the output leaves out.
    pub fn with_columns(columns: Vec<u32>, n_out: usize) -> Self {
        let identity = columns.len() == n_out && columns.iter().enumerate().all(|(j, &c)| j as u32 == c);
        let bitset = n_out <= BITSET_MAX_GENES && !identity;
        GeneRemap {
            rank: columns,
            bits: if bitset { vec![0; n_out.div_ceil(64)] } else { Vec::new() },
            dense: if bitset { vec![0; n_out] } else { Vec::new() },
            pairs: Vec::new(),
            identity,
        }
    }

    /// Appends one row, given in source gene order (`genes` strictly increasing), to `out_genes`/`out_counts` in
    /// output column order.
    pub fn push_row(&mut self, genes: &[u32], counts: &[u32], out_genes: &mut Vec<u32>, out_counts: &mut Vec<u32>) {
        if self.identity {
            out_genes.extend_from_slice(genes);
            out_counts.extend_from_slice(counts);
            return;
        }
        if self.bits.is_empty() {
            self.pairs.clear();
            let rank = &self.rank;
            self.pairs.extend(
                genes
                    .iter()
                    .zip(counts)
                    .filter(|(g, _)| rank[**g as usize] != NO_COLUMN)
                    .map(|(&g, &v)| u64::from(rank[g as usize]) << 32 | u64::from(v)),
            );
            self.pairs.sort_unstable();
            out_genes.extend(self.pairs.iter().map(|p| (p >> 32) as u32));
            out_counts.extend(self.pairs.iter().map(|&p| p as u32));
            return;
        }
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        let (rank, bits, dense) = (&self.rank[..], &mut self.bits[..], &mut self.dense[..]);
        let mut kept = 0;
        for (&g, &v) in genes.iter().zip(counts) {
            let r = rank[g as usize];
            if r == NO_COLUMN {
                continue;
            }
            kept += 1;
            let r = r as usize;
            bits[r / 64] |= 1 << (r % 64);
            dense[r] = v;
            lo = lo.min(r / 64);
            hi = hi.max(r / 64 + 1);
        }
        // Exactly `kept` bits are set (the genes are distinct, so are their columns): size the output once and
        // fill it in place.
        let start = out_genes.len();
        out_genes.resize(start + kept, 0);
        out_counts.resize(start + kept, 0);
        let (og, oc) = (&mut out_genes[start..], &mut out_counts[start..]);
        let mut j = 0;
        for (w, slot) in bits.iter_mut().enumerate().take(hi).skip(lo.min(hi)) {
            let mut word = std::mem::take(slot);
            while word != 0 {
                let r = w * 64 + word.trailing_zeros() as usize;
                og[j] = r as u32;
                oc[j] = dense[r];
                j += 1;
                word &= word - 1;
            }
        }
        debug_assert_eq!(j, kept, "genes of a row must be distinct");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_by_rank(order: &[u32], genes: &[u32], counts: &[u32]) -> (Vec<u32>, Vec<u32>) {
        let mut rank = vec![0u32; order.len()];
        for (j, &g) in order.iter().enumerate() {
            rank[g as usize] = j as u32;
        }
        let mut pairs: Vec<(u32, u32)> = genes.iter().zip(counts).map(|(&g, &v)| (rank[g as usize], v)).collect();
        pairs.sort_unstable();
        pairs.into_iter().unzip()
    }

    #[test]
    fn matches_a_sort_for_every_path() {
        let n = 300u32;
        let order: Vec<u32> = (0..n).map(|j| (j * 7 + 3) % n).collect();
        let genes: Vec<u32> = (0..n).filter(|g| g % 3 != 1).collect();
        let counts: Vec<u32> = genes.iter().map(|g| g + 1).collect();
        let want = sorted_by_rank(&order, &genes, &counts);
        let mut bitset = GeneRemap::new(&order);
        let mut sorting = GeneRemap::new(&order);
        sorting.bits.clear();
        for m in [&mut bitset, &mut sorting] {
            for _ in 0..2 {
                let (mut g, mut c) = (Vec::new(), Vec::new());
                m.push_row(&genes, &counts, &mut g, &mut c);
                assert_eq!((g, c), want);
            }
            let (mut g, mut c) = (Vec::new(), Vec::new());
            m.push_row(&[], &[], &mut g, &mut c);
            assert!(g.is_empty());
        }
        let ident: Vec<u32> = (0..n).collect();
        let (mut g, mut c) = (Vec::new(), Vec::new());
        GeneRemap::new(&ident).push_row(&genes, &counts, &mut g, &mut c);
        assert_eq!(g, genes);
    }

    #[test]
    fn genes_without_a_column_are_dropped_on_every_path() {
        // Source genes 0..6 into 4 output columns: 1 and 4 have none.
        let columns = vec![3, NO_COLUMN, 0, 2, NO_COLUMN, 1];
        let (genes, counts) = ([0u32, 1, 2, 4, 5], [10u32, 11, 12, 14, 15]);
        for bitset in [true, false] {
            let mut m = GeneRemap::with_columns(columns.clone(), 4);
            if !bitset {
                m.bits.clear();
            }
            let (mut g, mut c) = (vec![9], vec![9]);
            m.push_row(&genes, &counts, &mut g, &mut c);
            assert_eq!((g, c), (vec![9, 0, 1, 3], vec![9, 12, 15, 10]), "bitset: {bitset}");
        }
    }

    /// A shuffled order of 60,000 genes and rows of many lengths, one after another into the same output: the
    /// bitset and the sort give the reference order.
    #[test]
    fn wide_shuffled_orders_match_a_sort() {
        let n = 60_000usize;
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        let mut order: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            order.swap(i, next() % (i + 1));
        }
        let rows: Vec<Vec<u32>> = [0usize, 1, 5, 63, 64, 65, 1000, 5000, 59_999]
            .iter()
            .map(|&len| {
                let mut g: Vec<u32> = (0..len).map(|_| (next() % n) as u32).collect();
                g.sort_unstable();
                g.dedup();
                g
            })
            .collect();
        for bitset in [true, false] {
            let mut m = GeneRemap::new(&order);
            if !bitset {
                m.bits.clear();
            }
            let (mut got_g, mut got_c) = (Vec::new(), Vec::new());
            let (mut want_g, mut want_c) = (Vec::new(), Vec::new());
            for genes in &rows {
                let counts: Vec<u32> = genes.iter().map(|&g| g % 1000 + 1).collect();
                m.push_row(genes, &counts, &mut got_g, &mut got_c);
                let (g, c) = sorted_by_rank(&order, genes, &counts);
                want_g.extend(g);
                want_c.extend(c);
            }
            assert_eq!((&got_g, &got_c), (&want_g, &want_c), "bitset: {bitset}");
        }
    }
}
