/// Why a list of per-tile cell counts cannot index a dataset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CellIndexError {
    /// The total number of cells does not fit in 64 bits.
    #[error("the tile cell counts add up to more than 2^64 - 1")]
    Overflow,
}

/// A requested cell the dataset does not have: the one error for a cell index out of range, whichever layer meets
/// it (the reader of the counts, the obs reader, or the Python binding handing over a negative index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cell {cell} (position {position} of the request) is out of range: there are {n_cells} cells")]
pub struct CellOutOfRange {
    /// The cell index asked for (signed: callers such as numpy may ask for a negative one).
    pub cell: i128,
    /// Its position in the request.
    pub position: usize,
    /// Cells in the dataset.
    pub n_cells: u64,
}

impl CellOutOfRange {
    /// Unsigned cell indices from signed ones (as numpy hands them over): a negative one is out of range. Whether
    /// the others are below `n_cells` is left to the reader that locates them.
    pub fn unsigned(indices: &[i64], n_cells: u64) -> Result<Vec<u64>, CellOutOfRange> {
        indices
            .iter()
            .enumerate()
            .map(|(position, &i)| {
                u64::try_from(i).map_err(|_| CellOutOfRange { cell: i128::from(i), position, n_cells })
            })
            .collect()
    }
}

/// Maps global cell indices to tiles, from the per-tile cell counts of a manifest.
///
/// `limits[i]` is the cumulative number of cells up to and including tile `i`; global cell `c` lives in tile
/// `searchsorted(limits, c, side="right")` at local row `c - limits[tile - 1]` (or `c` in tile 0), exactly as the
/// format specification states.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CellIndex {
    limits: Vec<u64>,
    /// The cells of every tile but the last, when they all hold that many (and the last at most as many), as a
    /// converter writes them: a cell's tile is then a division, not a search (derived from `limits`).
    uniform: Option<u64>,
}

impl CellIndex {
    /// Builds the index from the manifest's `tile_cells`.
    pub fn from_tile_cells(tile_cells: &[u64]) -> Result<Self, CellIndexError> {
        let mut total = 0u64;
        let mut limits = Vec::with_capacity(tile_cells.len());
        for &n in tile_cells {
            total = total.checked_add(n).ok_or(CellIndexError::Overflow)?;
            limits.push(total);
        }
        let uniform = match tile_cells.split_last() {
            Some((&last, rest)) => {
                let k = rest.first().copied().unwrap_or(last);
                (k > 0 && (1..=k).contains(&last) && rest.iter().all(|&n| n == k)).then_some(k)
            }
            None => None,
        };
        Ok(CellIndex { limits, uniform })
    }

    /// Cumulative cell counts, one per tile.
    pub fn limits(&self) -> &[u64] {
        &self.limits
    }

    /// Total cells.
    pub fn n_cells(&self) -> u64 {
        self.limits.last().copied().unwrap_or(0)
    }

    /// Number of tiles.
    pub fn n_tiles(&self) -> usize {
        self.limits.len()
    }

    /// Global cell range `[lo, hi)` of tile `tile`, or `None` past the last tile.
    pub fn tile_bounds(&self, tile: usize) -> Option<(u64, u64)> {
        let hi = *self.limits.get(tile)?;
        let lo = if tile == 0 { 0 } else { self.limits[tile - 1] };
        Some((lo, hi))
    }

    /// `(tile, local row)` of global cell `cell`, or `None` if `cell >= n_cells`.
    pub fn locate(&self, cell: u64) -> Option<(usize, u64)> {
        if let Some(k) = self.uniform {
            return (cell < self.n_cells()).then(|| ((cell / k) as usize, cell % k));
        }
        let tile = self.limits.partition_point(|&l| l <= cell);
        if tile >= self.limits.len() {
            return None;
        }
        let lo = if tile == 0 { 0 } else { self.limits[tile - 1] };
        Some((tile, cell - lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `locate` by searching `limits`, as the specification states it (the index's own path for tiles of unequal
    /// cells).
    fn searched(tile_cells: &[u64], cell: u64) -> Option<(usize, u64)> {
        let limits: Vec<u64> = tile_cells.iter().scan(0, |t, &n| Some(std::mem::replace(t, *t + n) + n)).collect();
        let tile = limits.partition_point(|&l| l <= cell);
        (tile < limits.len()).then(|| (tile, cell - if tile == 0 { 0 } else { limits[tile - 1] }))
    }

    #[test]
    fn equal_tiles_locate_by_division_as_the_search_does() {
        let layouts: [&[u64]; 9] =
            [&[4, 4, 4], &[4, 4, 1], &[4], &[1], &[3, 3, 3, 2], &[4, 4, 5], &[0, 4], &[4, 0, 4], &[4, 4, 0]];
        for tile_cells in layouts {
            let idx = CellIndex::from_tile_cells(tile_cells).unwrap();
            let equal = tile_cells.len() == 1 || tile_cells[..tile_cells.len() - 1].iter().all(|&n| n == tile_cells[0]);
            let by_division = equal && tile_cells[0] > 0 && (1..=tile_cells[0]).contains(tile_cells.last().unwrap());
            assert_eq!(idx.uniform.is_some(), by_division, "{tile_cells:?}");
            for cell in (0..idx.n_cells() + 3).chain([u64::MAX]) {
                assert_eq!(idx.locate(cell), searched(tile_cells, cell), "{tile_cells:?} cell {cell}");
            }
        }
        assert_eq!(CellIndex::from_tile_cells(&[]).unwrap().locate(0), None);
    }

    #[test]
    fn locates_like_searchsorted_right() {
        let idx = CellIndex::from_tile_cells(&[3, 3, 1]).unwrap();
        let got: Vec<_> = (0..8).map(|c| idx.locate(c)).collect();
        assert_eq!(
            got,
            vec![
                Some((0, 0)),
                Some((0, 1)),
                Some((0, 2)),
                Some((1, 0)),
                Some((1, 1)),
                Some((1, 2)),
                Some((2, 0)),
                None
            ]
        );
        assert_eq!(idx.tile_bounds(1), Some((3, 6)));
        assert_eq!(idx.n_cells(), 7);
    }

    #[test]
    fn skips_empty_tiles_and_rejects_overflow() {
        let idx = CellIndex::from_tile_cells(&[2, 0, 2]).unwrap();
        assert_eq!(idx.locate(2), Some((2, 0)));
        assert_eq!(CellIndex::from_tile_cells(&[u64::MAX, 1]), Err(CellIndexError::Overflow));
    }
}
