//! What a dataset is, in numbers read from its manifest alone: what `deltacells info --json` prints and a report
//! shows (one definition for both).

use serde_json::{Value, json};

use crate::Manifest;

/// The manifest's facts: format version, shape, tiles, nonzeros, bytes, encoder settings, side files and obs.
/// Keys: `version`, `n_cells`, `n_genes`, `n_tiles`, `tile_size`, `nnz`, `tile_bytes_total`, `bytes_per_nnz`,
/// `kb_per_cell`, `n_chunks`, `zstd_level`, `has_gene_order`, `has_var_names`, `has_var_table`, `has_obs`,
/// `obs_shards`, `obs_bytes`, `obs_fingerprint` (null without obs). `bytes_per_nnz` and `kb_per_cell` are null
/// for a dataset without nonzeros or cells.
pub fn dataset_facts(m: &Manifest) -> Value {
    let bytes: u64 = m.tile_bytes.iter().sum();
    let nnz = m.nnz();
    let obs_bytes: u64 = m.obs.shard_bytes.iter().sum();
    json!({
        "version": m.version, "n_cells": m.n_cells, "n_genes": m.n_genes, "n_tiles": m.n_tiles(),
        "tile_size": m.tile_size, "nnz": nnz, "tile_bytes_total": bytes,
        // Undefined (null) for a dataset without nonzeros or cells.
        "bytes_per_nnz": (nnz > 0).then(|| bytes as f64 / nnz as f64),
        "kb_per_cell": (m.n_cells > 0).then(|| bytes as f64 / 1000.0 / m.n_cells as f64),
        "n_chunks": m.n_chunks, "zstd_level": m.zstd_level,
        "has_gene_order": m.has_gene_order, "has_var_names": m.has_var_names, "has_var_table": m.has_var_table,
        "has_obs": m.has_obs, "obs_shards": m.obs.shard_bytes.len(), "obs_bytes": obs_bytes,
        "obs_fingerprint": m.has_obs.then(|| m.obs.fingerprint.clone()),
    })
}
