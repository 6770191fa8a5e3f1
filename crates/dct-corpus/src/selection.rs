//! A set of the corpus's cells, kept as sorted ranges: memory in proportion to the number of runs of selected
//! cells (at most half the selected cells), never one entry per cell of the corpus.

use dct_format::CellOutOfRange;

/// Cells of the whole corpus (its "base" cells, before any selection), as sorted, disjoint, non-adjacent ranges.
/// Selected cell `i` is the `i`-th base cell in the set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Range starts, increasing.
    starts: Vec<u64>,
    /// Range ends (exclusive).
    ends: Vec<u64>,
    /// Selected cells before each range.
    before: Vec<u64>,
    n_cells: u64,
}

impl Selection {
    /// Every cell of a corpus of `n_cells` cells.
    pub fn all(n_cells: u64) -> Selection {
        let mut s = Selection::default();
        s.push_range(0, n_cells);
        s
    }

    /// The ranges `[starts[i], ends[i])` (sorted, disjoint; adjacent ones are merged).
    pub fn from_ranges(starts: &[u64], ends: &[u64]) -> Result<Selection, String> {
        if starts.len() != ends.len() {
            return Err(format!("{} range starts but {} ends", starts.len(), ends.len()));
        }
        let mut s = Selection::default();
        for (&a, &b) in starts.iter().zip(ends) {
            if a > b || s.ends.last().is_some_and(|&e| a < e) {
                return Err(format!("range {a}..{b} is empty-backwards or overlaps the one before"));
            }
            s.push_range(a, b);
        }
        Ok(s)
    }

    /// Bytes the selection holds on the heap (its ranges, as allocated).
    pub fn heap_bytes(&self) -> usize {
        (self.starts.capacity() + self.ends.capacity() + self.before.capacity()) * std::mem::size_of::<u64>()
    }

    /// Base cells, increasing and without repeats.
    fn from_sorted(cells: impl IntoIterator<Item = u64>) -> Selection {
        let mut s = Selection::default();
        for c in cells {
            s.push_range(c, c + 1);
        }
        s
    }

    fn push_range(&mut self, a: u64, b: u64) {
        if a == b {
            return;
        }
        match self.ends.last_mut() {
            Some(end) if *end == a => *end = b,
            _ => {
                self.before.push(self.n_cells);
                self.starts.push(a);
                self.ends.push(b);
            }
        }
        self.n_cells += b - a;
    }

    /// Selected cells.
    pub fn n_cells(&self) -> u64 {
        self.n_cells
    }

    /// The ranges of base cells, as `(starts, ends)`.
    pub fn ranges(&self) -> (&[u64], &[u64]) {
        (&self.starts, &self.ends)
    }

    /// The base cell of selected cell `i`, or the out-of-range error naming `i` at `position` of a request.
    pub fn base_cell(&self, i: u64, position: usize) -> Result<u64, CellOutOfRange> {
        if i >= self.n_cells {
            return Err(CellOutOfRange { cell: i128::from(i), position, n_cells: self.n_cells });
        }
        let r = self.before.partition_point(|&b| b <= i) - 1;
        Ok(self.starts[r] + (i - self.before[r]))
    }

    /// The selected cells `cells` (indices into this selection, any order, repeats allowed) as a new selection
    /// of base cells, in base order.
    pub fn select(&self, cells: &[u64]) -> Result<Selection, CellOutOfRange> {
        let mut base = cells
            .iter()
            .enumerate()
            .map(|(position, &i)| self.base_cell(i, position))
            .collect::<Result<Vec<u64>, _>>()?;
        base.sort_unstable();
        base.dedup();
        Ok(Selection::from_sorted(base))
    }

    /// The selected cells where `mask` (one entry per selected cell) is true.
    pub fn select_mask(&self, mask: &[bool]) -> Result<Selection, String> {
        if mask.len() as u64 != self.n_cells {
            return Err(format!(
                "a mask selects with one entry per cell: it has {}, the corpus {}",
                mask.len(),
                self.n_cells
            ));
        }
        let mut out = Selection::default();
        let mut i = 0usize;
        for (&a, &b) in self.starts.iter().zip(&self.ends) {
            let len = (b - a) as usize;
            let mut run: Option<u64> = None;
            for (k, &keep) in mask[i..i + len].iter().enumerate() {
                match (keep, run) {
                    (true, None) => run = Some(a + k as u64),
                    (false, Some(s)) => {
                        out.push_range(s, a + k as u64);
                        run = None;
                    }
                    _ => {}
                }
            }
            if let Some(s) = run {
                out.push_range(s, b);
            }
            i += len;
        }
        Ok(out)
    }

    /// Selected cells in base cells `lo..hi` (a member's cells, say).
    pub fn count_in(&self, lo: u64, hi: u64) -> u64 {
        let first = self.ends.partition_point(|&e| e <= lo);
        let mut n = 0;
        for (&a, &b) in self.starts[first..].iter().zip(&self.ends[first..]) {
            if a >= hi {
                break;
            }
            n += b.min(hi) - a.max(lo);
        }
        n
    }
}

/// Builds a [`Selection`] from base cells given in increasing order (runs of consecutive cells become ranges).
#[derive(Debug, Default)]
pub struct SelectionBuilder {
    selection: Selection,
}

impl SelectionBuilder {
    /// Adds base cell `cell`, which must be greater than every cell added before.
    pub fn push(&mut self, cell: u64) {
        debug_assert!(self.selection.ends.last().is_none_or(|&e| e <= cell), "cells in increasing order");
        self.selection.push_range(cell, cell + 1);
    }

    /// The selection.
    pub fn finish(self) -> Selection {
        self.selection
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_compose_and_count() {
        let all = Selection::all(10);
        assert_eq!(all.ranges(), (&[0u64][..], &[10u64][..]));
        let s = all.select(&[7, 2, 3, 3, 9, 4]).unwrap();
        assert_eq!(s.ranges(), (&[2u64, 7, 9][..], &[5u64, 8, 10][..]));
        assert_eq!(s.n_cells(), 5);
        assert_eq!((0..5).map(|i| s.base_cell(i, 0).unwrap()).collect::<Vec<_>>(), [2, 3, 4, 7, 9]);
        let t = s.select(&[4, 0]).unwrap();
        assert_eq!((0..2).map(|i| t.base_cell(i, 0).unwrap()).collect::<Vec<_>>(), [2, 9]);
        assert_eq!(s.count_in(3, 8), 3);
        let e = s.select(&[1, 5]).unwrap_err();
        assert_eq!((e.cell, e.position, e.n_cells), (5, 1, 5));
        let m = s.select_mask(&[true, false, true, true, false]).unwrap();
        assert_eq!((0..3).map(|i| m.base_cell(i, 0).unwrap()).collect::<Vec<_>>(), [2, 4, 7]);
        assert!(s.select_mask(&[true]).is_err());
        assert_eq!(Selection::from_ranges(s.ranges().0, s.ranges().1).unwrap(), s);
        assert!(Selection::from_ranges(&[3, 2], &[4, 5]).is_err());
    }
}
