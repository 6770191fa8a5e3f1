//! `deltacells append DATASET INPUT... [--gene-key COLUMN] [--drop-new-genes] [--allow-repeat] [--json]`.

use std::path::PathBuf;

use dct_codec::Preset;
use dct_convert::{AppendOptions, append, resolve_inputs};
use dct_dataset::StoreOptions;
use serde_json::json;

use crate::output::print_json;

/// Arguments of `append`.
///
/// Adds the cells of the inputs at the end of the dataset. The inputs' genes are placed in the dataset's columns by
/// name (or by `--gene-key`); every full tile is left as it is and only the partial last tile is encoded again,
/// with the first new cells. Obs grows with the cells: new categories are added at the end of each vocabulary (the
/// existing codes keep their meaning) and new columns are missing for the dataset's cells. The manifest records
/// each append (`metadata.appends`), so the same append run again changes nothing. An interrupted append is
/// completed by running it again; a second append waits for none: it is refused while one is under way.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The dataset: a path or a `file://`, `s3://`, `gs://`, `az://` URL.
    dataset: String,
    /// Input files or folders (`.h5ad`, 10x `.h5`, 10x Matrix Market folders) or glob patterns, appended in
    /// natural sort order.
    #[arg(required = true)]
    inputs: Vec<String>,
    /// Match the inputs' genes to the dataset's by this gene-table column (e.g. `gene_ids`) instead of names.
    #[arg(long, value_name = "COLUMN")]
    gene_key: Option<String>,
    /// Drop the inputs' genes the dataset lacks (their counts are lost; the number is reported) instead of
    /// refusing the append.
    #[arg(long)]
    drop_new_genes: bool,
    /// Append inputs an earlier append already added (their cells are then in the dataset twice).
    #[arg(long)]
    allow_repeat: bool,
    /// zstd level of the new tiles (default: the dataset's).
    #[arg(long, allow_negative_numbers = true)]
    level: Option<i32>,
    /// How zstd's parameters follow from the level (`tuned`, `plain` or `fast`; see `convert --help`).
    #[arg(long, default_value = "tuned", value_parser = crate::commands::convert::parse_preset)]
    preset: Preset,
    /// Read this layer of `.h5ad` inputs instead of X.
    #[arg(long, conflicts_with = "raw")]
    layer: Option<String>,
    /// Read `raw/X` of `.h5ad` inputs.
    #[arg(long)]
    raw: bool,
    /// Leave out this obs column of the inputs (repeat for several).
    #[arg(long = "obs-exclude", value_name = "COLUMN")]
    obs_exclude: Vec<String>,
    /// Compression threads (default: every core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `append`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    let inputs: Vec<PathBuf> = resolve_inputs(&args.inputs, true)?.into_iter().map(PathBuf::from).collect();
    let options = AppendOptions {
        gene_key: args.gene_key.clone(),
        drop_new_genes: args.drop_new_genes,
        allow_repeat: args.allow_repeat,
        level: args.level,
        preset: args.preset,
        matrix: crate::commands::convert::matrix_of(args.layer.as_deref(), args.raw),
        obs_exclude: args.obs_exclude.clone(),
        threads: args.threads,
        store: store.clone(),
        ..AppendOptions::default()
    };
    let r = append(&args.dataset, &inputs, &options)?;
    if args.json {
        let mut out = r.to_json();
        out["dataset"] = json!(args.dataset);
        print_json(&out)?;
        return Ok(0);
    }
    if r.already_appended {
        let when = r.record.get("time").and_then(|t| t.as_str()).unwrap_or("earlier");
        outln!(
            "{}: these inputs were appended already ({when}, {} cells); nothing changed (--allow-repeat appends \
             them again)",
            args.dataset,
            r.cells_added
        );
        return Ok(0);
    }
    if r.resumed && r.tiles_added == 0 && r.tile_rewritten.is_none() {
        outln!("{}: completed the interrupted append ({} cells now)", args.dataset, r.n_cells);
        return Ok(0);
    }
    outln!(
        "appended {} cells to {}{}: {} cells in {} tiles; {} new tiles{}, {:.1} MB of tiles written",
        r.cells_added,
        args.dataset,
        if r.resumed { " (completing an interrupted run)" } else { "" },
        r.n_cells,
        r.n_tiles,
        r.tiles_added,
        r.tile_rewritten.map(|t| format!(", last tile {t} encoded again")).unwrap_or_default(),
        r.tile_bytes_written as f64 / 1e6
    );
    if !r.obs_shards_written.is_empty() {
        outln!("obs: shards {:?} written", r.obs_shards_written);
        for why in &r.obs_rewrite_reasons {
            outln!("obs: every shard was rewritten: {why}");
        }
    }
    if r.genes_dropped > 0 {
        outln!(
            "dropped {} genes the dataset lacks (with their counts), e.g. {}",
            r.genes_dropped,
            r.genes_dropped_examples.join(", ")
        );
    }
    Ok(0)
}
