//! [`TileStrata`]: the cells of each tile grouped by stratum (a category of an obs column), what a stratified epoch
//! draws from.

use crate::error::DatasetError;

/// The cells of each tile grouped by stratum: for each tile, its cells' offsets within the tile ordered by stratum,
/// and the runs of each stratum. Cells without a stratum (a missing value) are left out. Memory: 4 bytes per cell
/// with a stratum, plus 16 bytes per `(tile, stratum)` pair present.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TileStrata {
    /// Per tile, its groups' range in `groups` (`tile_groups[t]..tile_groups[t + 1]`).
    tile_groups: Vec<usize>,
    /// `(stratum, first index in offsets)` of each group, a tile's groups in increasing stratum; a group ends
    /// where the next one starts (or at the end of `offsets`).
    groups: Vec<(u32, u64)>,
    /// Offsets of cells within their tile, grouped.
    offsets: Vec<u32>,
    /// Cells of each stratum.
    stratum_cells: Vec<u64>,
}

impl TileStrata {
    /// Strata of tiles holding `tile_cells` cells from each cell's stratum (`None`: no stratum), given in cell
    /// order by `next_codes`, called with a buffer to fill until every cell has had its code (it is given the
    /// first cell it fills). `n_strata` bounds the strata (`0..n_strata`).
    pub fn build(
        tile_cells: &[u64],
        n_strata: u32,
        mut next_codes: impl FnMut(u64, &mut Vec<Option<u32>>) -> Result<(), DatasetError>,
    ) -> Result<TileStrata, DatasetError> {
        let mut strata = TileStrata {
            tile_groups: Vec::with_capacity(tile_cells.len() + 1),
            stratum_cells: vec![0; n_strata as usize],
            ..TileStrata::default()
        };
        let n_cells: u64 = tile_cells.iter().sum();
        let (mut buffer, mut at) = (Vec::new(), 0usize);
        let mut cell = 0u64;
        let mut tile_codes: Vec<(u32, u32)> = Vec::new();
        for &cells in tile_cells {
            strata.tile_groups.push(strata.groups.len());
            if cells > u64::from(u32::MAX) {
                return Err(DatasetError::InvalidArgument(format!("a tile of {cells} cells is too large to stratify")));
            }
            tile_codes.clear();
            for offset in 0..cells as u32 {
                if at == buffer.len() {
                    buffer.clear();
                    next_codes(cell, &mut buffer)?;
                    at = 0;
                    if buffer.is_empty() || cell + buffer.len() as u64 > n_cells {
                        return Err(DatasetError::InvalidArgument(format!(
                            "strata: {} codes from cell {cell} of {n_cells}",
                            buffer.len()
                        )));
                    }
                }
                if let Some(code) = buffer[at] {
                    if code >= n_strata {
                        return Err(DatasetError::InvalidArgument(format!(
                            "cell {cell} has stratum {code} of {n_strata}"
                        )));
                    }
                    tile_codes.push((code, offset));
                }
                at += 1;
                cell += 1;
            }
            tile_codes.sort_unstable();
            for (i, &(code, offset)) in tile_codes.iter().enumerate() {
                if i == 0 || tile_codes[i - 1].0 != code {
                    strata.groups.push((code, strata.offsets.len() as u64));
                }
                strata.offsets.push(offset);
                strata.stratum_cells[code as usize] += 1;
            }
        }
        strata.tile_groups.push(strata.groups.len());
        Ok(strata)
    }

    /// Tiles.
    pub fn n_tiles(&self) -> usize {
        self.tile_groups.len().saturating_sub(1)
    }

    /// Strata (`0..n_strata`, some possibly without cells).
    pub fn n_strata(&self) -> u32 {
        self.stratum_cells.len() as u32
    }

    /// Cells of each stratum.
    pub fn stratum_cells(&self) -> &[u64] {
        &self.stratum_cells
    }

    /// The offsets within tile `tile` of its cells of stratum `stratum` (empty if it has none).
    pub fn cells(&self, tile: usize, stratum: u32) -> &[u32] {
        let Some(&lo) = self.tile_groups.get(tile) else { return &[] };
        let hi = self.tile_groups[tile + 1];
        let groups = &self.groups[lo..hi];
        match groups.binary_search_by_key(&stratum, |g| g.0) {
            Ok(i) => {
                let start = groups[i].1 as usize;
                let end = self.groups.get(lo + i + 1).map_or(self.offsets.len(), |g| g.1 as usize);
                &self.offsets[start..end]
            }
            Err(_) => &[],
        }
    }

    /// Each stratum's tiles, as `(tile, cells of the stratum)` in tile order.
    pub fn tiles_by_stratum(&self) -> Vec<Vec<(usize, u64)>> {
        let mut out = vec![Vec::new(); self.stratum_cells.len()];
        for tile in 0..self.n_tiles() {
            for g in self.tile_groups[tile]..self.tile_groups[tile + 1] {
                let (stratum, start) = self.groups[g];
                let end = self.groups.get(g + 1).map_or(self.offsets.len() as u64, |n| n.1);
                out[stratum as usize].push((tile, end - start));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::TileStrata;

    #[test]
    fn groups_each_tiles_cells_by_stratum() {
        // Two tiles of 3 and 4 cells; codes given two at a time.
        let codes = [Some(1), None, Some(0), Some(1), Some(1), Some(2), Some(0)];
        let strata = TileStrata::build(&[3, 4], 3, |first, out| {
            let first = first as usize;
            out.extend_from_slice(&codes[first..(first + 2).min(codes.len())]);
            Ok(())
        })
        .unwrap();
        assert_eq!(strata.cells(0, 0), [2]);
        assert_eq!(strata.cells(0, 1), [0]);
        assert!(strata.cells(0, 2).is_empty());
        assert_eq!(strata.cells(1, 0), [3]);
        assert_eq!(strata.cells(1, 1), [0, 1]);
        assert_eq!(strata.cells(1, 2), [2]);
        assert_eq!(strata.stratum_cells(), [2, 3, 1]);
        assert_eq!(strata.tiles_by_stratum(), vec![vec![(0, 1), (1, 1)], vec![(0, 1), (1, 2)], vec![(1, 1)]]);
        assert!(
            TileStrata::build(&[2], 1, |_, out| {
                out.push(Some(1));
                Ok(())
            })
            .is_err()
        );
    }
}
