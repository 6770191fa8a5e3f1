//! The converter and `DatasetWriter` assemble manifests the same way: a dataset converted from an h5ad input and
//! one written by `DatasetWriter` from the same rows, obs and side files have the same `manifest.json`, byte for
//! byte, apart from `metadata` (which records how each was made).

use crate::support;

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef};
use dct_codec::{CanonicalCsr, CsrMatrix, SparseRows};
use dct_convert::{ConvertOptions, RunOptions, convert};
use dct_dataset::dct_obs::{ColumnData, ObsOptions, ObsSchema, ObsWriteOptions, TileObs};
use dct_dataset::{Dataset, DatasetWriter, ReadOptions, WriterOptions};
use dct_format::Version;
use support::testdata;

/// The manifest as JSON text without its `metadata` key.
fn manifest_without_metadata(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let mut in_metadata = false;
    let mut kept = Vec::new();
    for line in text.lines() {
        // Top-level keys are indented by two spaces; `metadata` runs to the next one.
        if line.starts_with("  \"") || line == "}" {
            in_metadata = line.starts_with("  \"metadata\"");
        }
        if !in_metadata {
            kept.push(line);
        }
    }
    assert!(kept.len() > 20 && text.contains("\"metadata\""), "{text}");
    kept.join("\n")
}

/// An obs column read back whole: its name, values, and vocabulary if it is a category column.
type ReadColumn = (String, ArrayRef, Option<Arc<[String]>>);

/// Tile `t`'s obs, read back from `obs` (whole columns, localized): category columns as codes and their
/// vocabulary, the others as their Arrow arrays.
fn tile_obs(columns: &[ReadColumn], first: usize, len: usize) -> TileObs {
    let mut tile = TileObs::new();
    for (name, array, categories) in columns {
        let part = array.slice(first, len);
        let data = match categories {
            Some(cats) => {
                // Codes are stored as narrow as the vocabulary allows.
                let codes = arrow_cast::cast(&part, &arrow_schema::DataType::Int32).unwrap();
                let codes = codes.as_primitive::<Int32Type>();
                let codes = (0..len).map(|i| if codes.is_null(i) { -1 } else { codes.value(i) }).collect();
                ColumnData::category(codes, cats.clone())
            }
            None => ColumnData::from(part),
        };
        tile.push(name.clone(), data);
    }
    tile
}

fn check_version(version: Version) {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/wu2020_200.h5ad");
    let converted = tmp.path().join("converted");
    // 200 cells in tiles of 64 (the last of 8), 3 tiles per obs shard: a full shard and a short one.
    let opts = ConvertOptions {
        tile_size: 64,
        level: 3,
        n_chunks: 2,
        obs_tiles_per_file: 3,
        format_version: version,
        ..ConvertOptions::new(converted.to_str().unwrap())
    };
    let m = convert(std::slice::from_ref(&input), &opts, &RunOptions::default(), false, |_| {}).unwrap();
    assert!(m.has_obs && m.has_var_table && m.has_gene_order && m.has_var_names);

    // Everything the writer needs, read back through the reader (rows, side files, obs).
    let ds = Dataset::open(converted.to_str().unwrap(), ReadOptions::default()).unwrap();
    let obs = ds.obs(ObsOptions { cache_dir: Some(tmp.path().join("cache")), ..Default::default() }).unwrap();
    let names: Vec<String> = obs.columns().iter().map(|(n, _)| n.to_string()).collect();
    obs.localize_blocking(&names.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    let columns: Vec<ReadColumn> = names
        .iter()
        .map(|n| (n.clone(), obs.column(n).unwrap(), obs.categories(n).unwrap().map(|c| Arc::from(c.to_vec()))))
        .collect();
    let schema = ObsSchema::parse(&std::fs::read(converted.join("obs/schema.json")).unwrap(), "schema").unwrap();

    let written = tmp.path().join("written");
    let options = WriterOptions { tile_size: 64, n_chunks: 2, zstd_level: 3, version, ..WriterOptions::new(m.n_genes) };
    let mut w = DatasetWriter::create(written.to_str().unwrap(), options).unwrap();
    w.set_obs_schema(schema, &ObsWriteOptions { tiles_per_file: 3, zstd_level: 3 }).unwrap();
    w.set_gene_order(ds.gene_order().unwrap().unwrap().to_vec()).unwrap();
    w.set_var_names(ds.var_names().unwrap().unwrap().to_vec()).unwrap();
    w.put_file("var.parquet", std::fs::read(converted.join("var.parquet")).unwrap().into()).unwrap();
    let mut first = 0u64;
    for &cells in &m.tile_cells {
        let ids: Vec<u64> = (first..first + cells).collect();
        let batch = ds.get_batch_as::<u32>(&ids).unwrap();
        let (indptr, indices, values) = batch.csr();
        let rows = CsrMatrix { n_rows: batch.n_rows(), n_cols: m.n_genes, indptr, indices, values };
        let tile = CanonicalCsr::from_csr(&rows).unwrap();
        w.push_tile_with_obs(tile, &tile_obs(&columns, first as usize, cells as usize)).unwrap();
        first += cells;
    }
    let w_manifest = w.finish().unwrap();

    assert_eq!(w_manifest.tile_bytes, m.tile_bytes, "the same tiles");
    assert_eq!(w_manifest.obs, m.obs, "the same obs shards");
    assert_ne!(w_manifest.metadata, m.metadata, "metadata says how each was made");
    assert_eq!(manifest_without_metadata(&written), manifest_without_metadata(&converted));
    for shard in 0..m.obs.shard_bytes.len() {
        let name = dct_format::objects::obs_shard_path(shard);
        assert_eq!(std::fs::read(written.join(&name)).unwrap(), std::fs::read(converted.join(&name)).unwrap());
    }
}

#[test]
fn writer_and_converter_write_the_same_manifest_version_2() {
    check_version(Version::V2);
}

#[test]
fn writer_and_converter_write_the_same_manifest_version_1() {
    check_version(Version::V1);
}
