//! The report's sections, in order, from what was read.

use dct_dataset::Dataset;
use dct_dataset::dct_obs::ColumnKind;
use serde_json::{Value, json};

use crate::html::Page;
use crate::obs::{ColumnSummary, ColumnValues};
use crate::plots;
use crate::sample::Sample;
use crate::{Report, ReportOptions};

/// Points a line over tiles keeps at most: more tiles are drawn as the means of equal runs of tiles.
const MAX_POINTS: usize = 1_000;
/// Genes named in the top-genes plot.
const TOP_GENES: usize = 20;

/// `(tile, value)` points, runs of tiles averaged down to at most [`MAX_POINTS`].
fn per_tile(values: &[f64]) -> Vec<(f64, f64)> {
    let run = values.len().div_ceil(MAX_POINTS).max(1);
    values
        .chunks(run)
        .enumerate()
        .map(|(k, c)| ((k * run) as f64 + (c.len() as f64 - 1.0) / 2.0, c.iter().sum::<f64>() / c.len() as f64))
        .collect()
}

/// Assembles the page.
pub(crate) fn build(
    ds: &Dataset,
    options: &ReportOptions,
    sample: &Sample,
    columns: &[ColumnSummary],
    var_names: Option<&[String]>,
) -> Report {
    let m = ds.manifest();
    let facts = dct_dataset::dataset_facts(m);
    let title = options.title.clone().unwrap_or_else(|| format!("deltacells report: {}", ds.url()));
    let mut page = Page::new(&title);
    let how = if sample.tiles.len() == m.n_tiles() {
        format!("every tile ({}) decoded", m.n_tiles())
    } else {
        match sample.tiles.as_slice() {
            [only] => format!("1 of {} tiles decoded (tile {only})", m.n_tiles()),
            tiles => {
                format!("{} of {} tiles decoded, evenly spread (first and last included)", tiles.len(), m.n_tiles())
            }
        }
    };
    let sample_facts = json!({"tiles": sample.tiles.len(), "cells": sample.n_cells(), "how": how});

    // Summary.
    page.section("summary", "Summary");
    let f = |k: &str| facts.get(k).cloned().unwrap_or(Value::Null);
    let rows: Vec<(&str, &str, Value)> = vec![
        ("n_cells", "cells", f("n_cells")),
        ("n_genes", "genes", f("n_genes")),
        ("nnz", "nonzeros", f("nnz")),
        ("tile_bytes_total", "bytes in tiles", f("tile_bytes_total")),
        ("bytes_per_nnz", "bytes per nonzero", f("bytes_per_nnz")),
        ("kb_per_cell", "kB per cell", f("kb_per_cell")),
        ("n_tiles", "tiles", f("n_tiles")),
        ("tile_size", "cells per tile", f("tile_size")),
        ("version", "format version", f("version")),
        ("zstd_level", "zstd level", f("zstd_level")),
        ("n_chunks", "chunks per tile", f("n_chunks")),
        ("has_obs", "obs", f("has_obs")),
        ("obs_shards", "obs shards", f("obs_shards")),
        ("obs_bytes", "obs bytes", f("obs_bytes")),
        ("has_var_names", "gene names", f("has_var_names")),
        ("has_var_table", "gene table", f("has_var_table")),
        ("has_gene_order", "stored gene order", f("has_gene_order")),
        ("obs_fingerprint", "obs fingerprint", f("obs_fingerprint")),
        ("sample_cells", "cells sampled", json!(sample.n_cells())),
    ];
    page.facts(&rows);
    page.note(&format!("Sample for the cell, chunk and gene sections: {how}."));

    // Cells.
    page.section("cells", "Cells");
    page.note(&format!("{} cells sampled ({how}).", sample.n_cells()));
    let log_counts: Vec<f64> = sample.counts_per_cell.iter().map(|&c| (c + 1.0).log10()).collect();
    page.plots(&[
        plots::histogram("Nonzeros per cell", "genes with a count", &sample.nnz_per_cell, 50),
        plots::histogram("Counts per cell", "log10(total counts + 1)", &log_counts, 50),
    ]);

    // Tiles.
    page.section("tiles", "Tiles");
    let bytes: Vec<f64> = m.tile_bytes.iter().map(|&b| b as f64 / 1e6).collect();
    let per_nnz: Vec<f64> = m.tile_bytes.iter().zip(&m.tile_nnz).map(|(&b, &n)| b as f64 / n.max(1) as f64).collect();
    if m.n_tiles() > MAX_POINTS {
        page.note(&format!(
            "{} tiles: each point is the mean of {} consecutive tiles.",
            m.n_tiles(),
            m.n_tiles().div_ceil(MAX_POINTS)
        ));
    }
    page.plots(&[
        plots::lines("Tile size", "tile", "MB", &[("bytes", per_tile(&bytes))], false),
        plots::lines("Bytes per nonzero", "tile", "bytes", &[("bytes per nonzero", per_tile(&per_nnz))], false),
    ]);

    // Chunks.
    page.section("chunks", "Chunk balance within tiles");
    page.note(
        "Per sampled tile, its largest chunk against the mean of its chunks (1 = even): chunks are decoded in \
         parallel, so the largest sets a tile's decode time.",
    );
    let ratio = |v: &[u64]| {
        let mean = v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
        v.iter().copied().max().unwrap_or(0) as f64 / mean.max(1e-9)
    };
    let nnz_ratio: Vec<(f64, f64)> =
        sample.chunks.iter().map(|(t, c)| (*t as f64, ratio(&c.iter().map(|x| x.0).collect::<Vec<_>>()))).collect();
    let byte_ratio: Vec<(f64, f64)> =
        sample.chunks.iter().map(|(t, c)| (*t as f64, ratio(&c.iter().map(|x| x.1).collect::<Vec<_>>()))).collect();
    page.plots(&[plots::lines(
        "Largest chunk / mean chunk",
        "tile",
        "ratio",
        &[("nonzeros", nnz_ratio), ("bytes", byte_ratio)],
        false,
    )]);
    page.note(&format!(
        "Exceptions in the sampled tiles: {} counts and {} gaps too wide for two bytes.",
        sample.exceptions.0, sample.exceptions.1
    ));

    // Genes.
    page.section("genes", "Genes");
    let mut ranked: Vec<(usize, f64)> = sample.gene_totals.iter().copied().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let detected = ranked.iter().filter(|g| g.1 > 0.0).count();
    page.note(&format!(
        "Total counts per gene over the {} sampled cells: {detected} of {} genes seen.",
        sample.n_cells(),
        ranked.len()
    ));
    let by_rank: Vec<(f64, f64)> = ranked.iter().enumerate().map(|(r, g)| ((r + 1) as f64, g.1)).collect();
    let top: Vec<(String, u64)> = ranked
        .iter()
        .take(TOP_GENES)
        .filter(|g| g.1 > 0.0)
        .map(|&(j, total)| {
            (var_names.and_then(|n| n.get(j)).cloned().unwrap_or_else(|| format!("gene {j}")), total as u64)
        })
        .collect();
    page.plots(&[
        plots::lines("Gene totals by rank", "rank", "total counts", &[("genes", by_rank)], true),
        plots::bars(&format!("Top {TOP_GENES} genes"), "total counts", &top),
    ]);

    // Obs.
    page.section("obs", "Obs");
    let mut obs_facts = serde_json::Map::new();
    if columns.is_empty() {
        page.note("This dataset has no obs.");
    }
    for c in columns {
        let mut column = json!({"kind": c.kind.as_str(), "missing": c.missing});
        match &c.values {
            ColumnValues::Category { top, n_categories } => {
                column["categories"] = json!(n_categories);
                column["top"] = json!(top);
            }
            ColumnValues::String { distinct, read, top } => {
                column["distinct"] = json!(distinct);
                column["read"] = json!(read);
                column["top"] = json!(top);
            }
            _ => {}
        }
        obs_facts.insert(c.name.clone(), column);
        page.h3(&format!("{} ({})", c.name, c.kind.as_str()));
        let fraction = c.missing as f64 / c.n_cells.max(1) as f64;
        let (key, key_fraction) = (format!("obs.{}.missing", c.name), format!("obs.{}.missing_fraction", c.name));
        page.facts(&[
            (key.as_str(), "missing", json!(c.missing)),
            (&key_fraction, "missing fraction", json!(fraction)),
        ]);
        match (&c.values, c.kind) {
            (ColumnValues::Category { top, n_categories }, _) => {
                if *n_categories > top.len() {
                    page.note(&format!("The {} most frequent of {n_categories} categories.", top.len()));
                }
                page.plots(&[plots::bars(&c.name, "cells", top)]);
            }
            (ColumnValues::Numeric { sample, present }, _) => {
                if (sample.len() as u64) < *present {
                    page.note(&format!(
                        "Histogram of {} of the {present} values, evenly spread over the cells.",
                        sample.len()
                    ));
                }
                page.plots(&[plots::histogram(&c.name, &c.name, sample, 50)])
            }
            (ColumnValues::Bool { true_, false_ }, _) => {
                page.plots(&[plots::bars(&c.name, "cells", &[("true".into(), *true_), ("false".into(), *false_)])])
            }
            (ColumnValues::String { distinct, read, top }, ColumnKind::String) => {
                page.note(&format!("{distinct} distinct values among the first {read} present."));
                // Values that repeat are drawn as categories are; a column of distinct values (barcodes) is not.
                if top.first().is_some_and(|t| t.1 > 1) {
                    if *distinct > top.len() {
                        page.note(&format!("The {} most frequent of them.", top.len()));
                    }
                    page.plots(&[plots::bars(&c.name, "cells", top)]);
                }
            }
            (ColumnValues::String { .. }, _) => {}
        }
    }

    if let Some(b) = &options.bench {
        crate::bench::section(&mut page, b);
    }
    let html = page.finish(&format!("{} · {how}", ds.url()));
    Report { html, facts: json!({"facts": facts, "sample": sample_facts, "obs": obs_facts}) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_tile_lines_are_averaged_down() {
        let v: Vec<f64> = (0..2500).map(|i| i as f64).collect();
        let p = per_tile(&v);
        assert!(p.len() <= MAX_POINTS && p.len() == 834);
        assert_eq!(p[0], (1.0, 1.0));
        assert_eq!(per_tile(&[4.0, 6.0]), [(0.0, 4.0), (1.0, 6.0)]);
    }
}
