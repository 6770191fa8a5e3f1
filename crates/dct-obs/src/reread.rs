//! Reading a whole shard back as the writer's input: the tiles of a shard an append rewrites (its last tiles gain
//! cells, or the schema gained a column or a wider type), as [`TileObs`] that an [`ObsShardEncoder`] takes again.
//!
//! [`ObsShardEncoder`]: crate::ObsShardEncoder

use std::sync::Arc;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::data::{ColumnData, TileObs};
use crate::error::{ObsError, Result};
use crate::schema::{ColumnKind, ObsSchema};

/// The tiles of the shard `file` (named `url` in errors), one [`TileObs`] per row group, as `schema` (the schema
/// the shard was written with) describes them: category columns as codes into the schema's vocabulary, other
/// columns as their arrays. `tile_cells` are the cells of the shard's tiles, which its row groups must hold.
pub fn shard_tile_obs(file: Bytes, schema: &ObsSchema, tile_cells: &[u64], url: &str) -> Result<Vec<TileObs>> {
    let perr = |source| ObsError::Parquet { url: url.to_string(), tile: None, column: None, cause: source };
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(perr)?;
    let row_groups = builder.metadata().row_groups();
    if row_groups.len() != tile_cells.len() {
        return Err(ObsError::shard(
            url,
            None,
            None,
            format!("holds {} row groups where the manifest has {} tiles", row_groups.len(), tile_cells.len()),
        ));
    }
    for (t, (rg, &cells)) in row_groups.iter().zip(tile_cells).enumerate() {
        if rg.num_rows() as u64 != cells {
            return Err(ObsError::shard(
                url,
                Some(t),
                None,
                format!("row group {t} holds {} rows where the tile holds {cells} cells", rg.num_rows()),
            ));
        }
    }
    let largest = tile_cells.iter().copied().max().unwrap_or(1).max(1) as usize;
    let categories: Vec<Option<Arc<[String]>>> =
        schema.columns.iter().map(|c| c.categories.as_ref().map(|v| Arc::<[String]>::from(v.as_slice()))).collect();
    let reader = builder.with_batch_size(largest).build().map_err(perr)?;
    let mut tiles = Vec::with_capacity(tile_cells.len());
    for (t, batch) in reader.enumerate() {
        let batch = batch.map_err(|e| ObsError::arrow(format!("reading {url}"), e))?;
        if tiles.len() >= tile_cells.len() || batch.num_rows() as u64 != tile_cells[t] {
            return Err(ObsError::shard(url, Some(t), None, "its rows do not come in whole row groups"));
        }
        let mut tile = TileObs::new();
        for (column, cats) in schema.columns.iter().zip(&categories) {
            let values = batch
                .column_by_name(&column.name)
                .ok_or_else(|| ObsError::shard(url, Some(t), Some(&column.name), "the column is missing"))?;
            let data = match (column.kind, cats) {
                (ColumnKind::Category, Some(cats)) => {
                    let wide = arrow_cast::cast(values, &arrow_schema::DataType::Int32)
                        .map_err(|e| ObsError::arrow(format!("reading codes of {:?} in {url}", column.name), e))?;
                    let codes = wide.as_primitive::<Int32Type>();
                    let codes = (0..codes.len()).map(|i| if codes.is_null(i) { -1 } else { codes.value(i) });
                    ColumnData::category(codes.collect(), Arc::clone(cats))
                }
                _ => ColumnData::Array(Arc::clone(values)),
            };
            tile.push(column.name.clone(), data);
        }
        tiles.push(tile);
    }
    if tiles.len() != tile_cells.len() {
        return Err(ObsError::shard(
            url,
            None,
            None,
            format!("{} of {} tiles could be read", tiles.len(), tile_cells.len()),
        ));
    }
    Ok(tiles)
}
