//! Cutting the inputs' converted obs, in order, into the tiles of the dataset.

use arrow_array::{Array, ArrayRef, new_null_array};
use arrow_schema::DataType;
use dct_obs::{ColumnData, TileObs};

use super::convert::{InputObs, Piece, SchemaPlan};
use crate::error::ConvertError;

/// Cuts the inputs' obs, in order, into tiles of `tile_cells[t]` cells that cross input boundaries.
pub(crate) struct TileCutter<'a> {
    plan: &'a SchemaPlan,
    tile_cells: &'a [u64],
    next_tile: usize,
    filled: usize,
    /// Per schema column, the pieces of the tile being assembled, with their lengths.
    parts: Vec<Vec<(Piece, usize)>>,
}

impl<'a> TileCutter<'a> {
    pub(crate) fn new(plan: &'a SchemaPlan, tile_cells: &'a [u64]) -> Self {
        TileCutter { plan, tile_cells, next_tile: 0, filled: 0, parts: vec![Vec::new(); plan.schema.columns.len()] }
    }

    /// Adds the next input's cells; `emit` receives each tile they complete, in order.
    pub(crate) fn push(
        &mut self,
        input: &InputObs,
        mut emit: impl FnMut(usize, TileObs) -> Result<(), ConvertError>,
    ) -> Result<(), ConvertError> {
        let mut offset = 0;
        while offset < input.n_cells {
            let Some(&rows) = self.tile_cells.get(self.next_tile) else {
                return Err(ConvertError::Inputs(format!(
                    "the inputs hold more cells than the plan's {} tiles: an input changed since the plan was made; \
                     make a new plan",
                    self.tile_cells.len()
                )));
            };
            let take = (rows as usize - self.filled).min(input.n_cells - offset);
            for (parts, piece) in self.parts.iter_mut().zip(&input.pieces) {
                parts.push((piece.slice(offset, take), take));
            }
            offset += take;
            self.filled += take;
            if self.filled == rows as usize {
                let tile = self.assemble()?;
                emit(self.next_tile, tile)?;
                self.next_tile += 1;
                self.filled = 0;
            }
        }
        Ok(())
    }

    fn assemble(&mut self) -> Result<TileObs, ConvertError> {
        let mut tile = TileObs::new();
        for ((column, vocab), parts) in self.plan.schema.columns.iter().zip(&self.plan.vocab).zip(&mut self.parts) {
            let parts = std::mem::take(parts);
            let data = match vocab {
                Some((categories, _)) => {
                    let mut codes = Vec::with_capacity(parts.iter().map(|(_, n)| n).sum());
                    for (piece, n) in parts {
                        match piece {
                            Piece::Codes(c) => codes.extend_from_slice(&c),
                            _ => codes.extend(std::iter::repeat_n(-1, n)),
                        }
                    }
                    ColumnData::category(codes, categories.clone())
                }
                None => {
                    let t: DataType = column.arrow_type.data_type();
                    let arrays: Vec<ArrayRef> = parts
                        .into_iter()
                        .map(|(piece, n)| match piece {
                            Piece::Array(a) => a,
                            _ => new_null_array(&t, n),
                        })
                        .collect();
                    let array = if arrays.len() == 1 {
                        arrays.into_iter().next().expect("one array")
                    } else {
                        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                        arrow_select::concat::concat(&refs).map_err(|e| {
                            ConvertError::Inputs(format!("joining obs column {:?} across inputs: {e}", column.name))
                        })?
                    };
                    ColumnData::Array(array)
                }
            };
            tile.push(column.name.clone(), data);
        }
        Ok(tile)
    }

    /// Checks that every tile was completed.
    pub(crate) fn finish(self) -> Result<(), ConvertError> {
        if self.next_tile != self.tile_cells.len() || self.filled != 0 {
            return Err(ConvertError::Inputs(format!(
                "the inputs' obs filled {} of the plan's {} tiles: an input changed since the plan was made; make a \
                 new plan",
                self.next_tile,
                self.tile_cells.len()
            )));
        }
        Ok(())
    }
}
