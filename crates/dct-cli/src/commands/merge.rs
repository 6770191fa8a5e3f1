//! `deltacells merge DATASET DATASET... --output OUT [--level N] [--tails-last] [--overwrite] [--json]`.

use dct_convert::{MergeOptions, merge};
use dct_dataset::StoreOptions;
use serde_json::json;

use crate::output::print_json;

/// Arguments of `merge`.
///
/// One dataset of the cells of several, in order, that have the same genes in the same order. Their tiles are
/// copied as they are (hard links locally, server-side copies within a bucket) wherever they fall whole on the new
/// dataset's tiles; after a source whose last tile is partial, the following cells are cut into tiles anew (every
/// tile but the last must be full), unless `--tails-last` puts those partial tiles' cells after every full tile.
/// Obs is combined: one vocabulary per category column, columns a source lacks
/// missing for its cells. Datasets with different genes are refused: read them together as a corpus, or convert
/// their sources with `--genes union`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The datasets, in order: paths or `file://`, `s3://`, `gs://`, `az://`, `https://` URLs.
    #[arg(required = true, num_args = 2..)]
    datasets: Vec<String>,
    /// Where to write the merged dataset.
    #[arg(long)]
    output: String,
    /// zstd level of the tiles encoded again (default: the first dataset's).
    #[arg(long, allow_negative_numbers = true)]
    level: Option<i32>,
    /// Put the cells of each dataset's partial last tile after all the full tiles, so that every full tile is
    /// copied and only those cells are encoded again; the cells are then not in the datasets' order
    /// (`metadata.merge.segments` in the manifest says where each dataset's cells went).
    #[arg(long)]
    tails_last: bool,
    /// Replace a dataset already at the output.
    #[arg(long)]
    overwrite: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `merge`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    let options = MergeOptions {
        level: args.level,
        tails_last: args.tails_last,
        overwrite: args.overwrite,
        store: store.clone(),
        ..MergeOptions::default()
    };
    let r = merge(&args.datasets, &args.output, &options)?;
    if args.json {
        print_json(&json!({"output": args.output, "n_cells": r.n_cells, "n_tiles": r.n_tiles,
                           "tiles_copied": r.tiles_copied, "tiles_encoded": r.tiles_encoded,
                           "already_done": r.already_done}))?;
    } else if r.already_done {
        outln!("{} already holds this merge ({} cells in {} tiles): nothing to do", args.output, r.n_cells, r.n_tiles);
    } else {
        outln!(
            "merged {} datasets into {}: {} cells in {} tiles ({} copied as they were, {} encoded again)",
            args.datasets.len(),
            args.output,
            r.n_cells,
            r.n_tiles,
            r.tiles_copied,
            r.tiles_encoded
        );
    }
    Ok(0)
}
