//! Cell-major (CSR) matrices built from entries listed in another order: Matrix Market's coordinate lists and
//! h5ad's CSC matrices. A first pass counts each cell's entries ([`offsets_from_counts`]); a [`CellMajorBuilder`]
//! then takes the entries in any order into their cells' places, and canonicalizes every cell at the end.

use std::path::Path;

use crate::block::{REPEAT_OVERFLOW, canonicalize_row};
use crate::error::{BadValue, InputError};

/// Turns per-cell entry counts (`counts[c + 1]` for cell `c`, `counts[0] == 0`) into row offsets, in place.
pub(crate) fn offsets_from_counts(counts: &mut [u64]) {
    for i in 1..counts.len() {
        counts[i] += counts[i - 1];
    }
}

/// The entries of a matrix gathered cell by cell into the places a counting pass gave them.
pub(crate) struct CellMajorBuilder {
    /// Per cell, its next free place and where its places end: side by side, because entries arrive in no
    /// order of cells and each placement would otherwise touch two distant cache lines for them.
    slots: Vec<(u64, u64)>,
    indices: Vec<u32>,
    values: Vec<u32>,
}

/// The rows of a finished [`CellMajorBuilder`]: canonical (sorted, summed, zero-free), `indptr` from 0.
#[derive(Debug)]
pub(crate) struct CellMajor {
    pub(crate) indptr: Vec<u64>,
    pub(crate) indices: Vec<u32>,
    pub(crate) values: Vec<u32>,
}

impl CellMajorBuilder {
    /// Places for the entries that `cell_ptr` (row offsets, `n_cells + 1` of them) counts. Its total is the
    /// caller's to have checked against the input's size.
    pub(crate) fn new(cell_ptr: &[u64]) -> Self {
        let nnz = cell_ptr.last().copied().unwrap_or(0) as usize;
        let slots = cell_ptr.windows(2).map(|w| (w[0], w[1])).collect();
        CellMajorBuilder { slots, indices: vec![0; nnz], values: vec![0; nnz] }
    }

    /// Puts an entry into the next place of `cell`. `false` if `cell` has none left or does not exist: the input
    /// lists more entries than its counting pass saw (it changed since).
    // Inlined into the callers' entry loops: as a call it cost 3% of a CSC conversion.
    #[inline(always)]
    pub(crate) fn place(&mut self, cell: usize, gene: u32, count: u32) -> bool {
        match self.slots.get_mut(cell) {
            Some((next, end)) if *next < *end => {
                (self.indices[*next as usize], self.values[*next as usize]) = (gene, count);
                *next += 1;
                true
            }
            _ => false,
        }
    }

    /// Whether every counted place holds an entry.
    pub(crate) fn is_full(&self) -> bool {
        self.slots.iter().all(|&(next, end)| next == end)
    }

    /// Canonicalizes every cell ([`canonicalize_row`] cell after cell, compacted towards the front). A repeat
    /// summing above `2^31 - 1` is reported as a value of `object` in `path`, the cell named by `cell_name` and
    /// the gene by `source_gene` (its index in the source, and its name).
    pub(crate) fn finish(
        self,
        (path, object): (&Path, &str),
        cell_name: impl Fn(usize) -> String,
        source_gene: impl Fn(u32) -> (u64, String),
    ) -> Result<CellMajor, InputError> {
        let CellMajorBuilder { slots, mut indices, mut values } = self;
        let mut indptr = Vec::with_capacity(slots.len() + 1);
        indptr.push(0u64);
        let (mut w, mut scratch, mut start) = (0usize, Vec::new(), 0usize);
        for (c, &(_, end)) in slots.iter().enumerate() {
            let row = start..end as usize;
            start = end as usize;
            w = canonicalize_row(&mut indices, &mut values, row, w, &mut scratch).map_err(|(g, sum)| {
                let (gene, gene_name) = source_gene(g);
                InputError::NotACount(Box::new(BadValue {
                    path: path.to_path_buf(),
                    object: object.to_string(),
                    cell: c as u64,
                    cell_name: cell_name(c),
                    gene,
                    gene_name,
                    value: sum.to_string(),
                    reason: REPEAT_OVERFLOW,
                }))
            })?;
            indptr.push(w as u64);
        }
        indices.truncate(w);
        values.truncate(w);
        Ok(CellMajor { indptr, indices, values })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_in_any_order_come_out_canonical_and_overfull_cells_are_refused() {
        // Cell 0: genes 5, 2, 5 (a repeat), 7 with a zero; cell 1: nothing; cell 2: gene 1.
        let mut ptr = vec![0, 4, 0, 1];
        offsets_from_counts(&mut ptr);
        assert_eq!(ptr, [0, 4, 4, 5]);
        let mut b = CellMajorBuilder::new(&ptr);
        for (cell, gene, count) in [(0, 5, 1), (2, 1, 9), (0, 2, 3), (0, 5, 4), (0, 7, 0)] {
            assert!(b.place(cell, gene, count));
        }
        assert!(b.is_full());
        assert!(!b.place(0, 8, 1), "cell 0 has no place left");
        assert!(!b.place(1, 8, 1), "cell 1 has none");
        assert!(!b.place(3, 8, 1), "there is no cell 3");
        let m = b.finish((Path::new("m"), "x"), |c| c.to_string(), |g| (u64::from(g), g.to_string())).unwrap();
        assert_eq!((m.indptr, m.indices, m.values), (vec![0, 2, 2, 3], vec![2, 5, 1], vec![3, 5, 9]));
    }

    #[test]
    fn a_repeat_above_the_largest_count_names_its_cell_and_source_gene() {
        let ptr = [0, 0, 2];
        let mut b = CellMajorBuilder::new(&ptr);
        assert!(b.place(1, 4, 2_147_483_647) && b.place(1, 4, 1));
        let err = b.finish(
            (Path::new("m.mtx"), "repeated entries"),
            |c| format!("cell{c}"),
            |g| (10 + u64::from(g), "G".into()),
        );
        match err {
            Err(InputError::NotACount(v)) => {
                assert_eq!((v.cell, v.cell_name.as_str(), v.gene, v.value.as_str()), (1, "cell1", 14, "2147483648"))
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("accepted"),
        }
    }
}
