//! `manifest.json` from Python: parsed and validated by the Rust reader's rules, written by its writer.

use dct_dataset::Manifest;
use pyo3::prelude::*;

use crate::errors::{dataset_error, value_error};

/// Parses and validates a manifest's JSON text; returns it re-serialized in canonical form (every key, defaults
/// filled in). `FormatError` naming the key for an invalid one.
#[pyfunction]
pub(crate) fn normalize_manifest(text: &[u8]) -> PyResult<String> {
    let m = Manifest::from_json(text).map_err(|source| {
        dataset_error(dct_dataset::DatasetError::Manifest { url: "manifest.json".into(), cause: source })
    })?;
    String::from_utf8(m.to_json_pretty()).map_err(|e| value_error(e.to_string()))
}

/// The manifest `text` with side file `rel`'s digest recorded as `data` (`side_file_sha256`; version 2 only), in
/// canonical form: what a caller that replaces a side file of a finished dataset writes next.
#[pyfunction]
pub(crate) fn record_side_file(text: &[u8], rel: &str, data: &[u8]) -> PyResult<String> {
    let mut m = Manifest::from_json(text).map_err(|source| {
        dataset_error(dct_dataset::DatasetError::Manifest { url: "manifest.json".into(), cause: source })
    })?;
    m.record_side_file(rel, data);
    String::from_utf8(m.to_json_pretty()).map_err(|e| value_error(e.to_string()))
}

/// The first column at which `names` lists a dataset's gene names `stored` in another order (the same names),
/// or `None`: a gene table of another gene order.
#[pyfunction]
pub(crate) fn same_genes_in_another_order(names: Vec<String>, stored: Vec<String>) -> Option<usize> {
    dct_dataset::same_genes_in_another_order(&names, &stored)
}

/// The name of tile `tile` (`tiles/tile_000003.dct`).
#[pyfunction]
pub(crate) fn tile_name(tile: usize) -> String {
    dct_format::objects::tile_path(tile)
}

/// The name of obs shard `shard` (`obs/obs_0001.parquet`).
#[pyfunction]
pub(crate) fn obs_shard_name(shard: usize) -> String {
    dct_format::objects::obs_shard_path(shard)
}

/// Obs shards of `n_tiles` tiles at `tiles_per_file` a shard (0 for 0).
#[pyfunction]
pub(crate) fn n_obs_shards(n_tiles: usize, tiles_per_file: u64) -> usize {
    dct_format::objects::n_obs_shards(n_tiles, tiles_per_file)
}

/// `(first, end)` of the tiles obs shard `shard` holds.
#[pyfunction]
pub(crate) fn obs_shard_tiles(n_tiles: usize, tiles_per_file: u64, shard: usize) -> (usize, usize) {
    let r = dct_format::objects::obs_shard_tiles(n_tiles, tiles_per_file, shard);
    (r.start, r.end)
}
