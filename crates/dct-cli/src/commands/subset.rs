//! `deltacells subset DATASET --output OUT [--cells SPEC] [--where COND]... [--genes FILE [--listed-order]
//! [--skip-missing-genes]] [--json]`.

use dct_convert::{SubsetOptions, subset};
use dct_corpus::GeneKey;
use dct_dataset::StoreOptions;
use serde_json::json;

use crate::output::print_json;

/// Arguments of `subset`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The source dataset: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL.
    dataset: String,
    /// Where to write the new dataset.
    #[arg(long)]
    output: String,
    /// Cells to keep: indices and ranges, comma separated (`0:1000,5000`: cells 0 to 999 and 5000).
    #[arg(long)]
    cells: Option<String>,
    /// Keep the cells whose obs meet this condition (repeat for several, all must hold): `COLUMN=V1,V2` (one of
    /// these categories, strings, numbers or true/false) or `COLUMN=LOW:HIGH` (numbers in that range; either end
    /// may be left out, as in `n_genes=200:`).
    #[arg(long = "where", value_name = "CONDITION")]
    conditions: Vec<String>,
    /// Keep only these genes: a file of one gene identifier a line (kept in the dataset's column order).
    #[arg(long, value_name = "FILE")]
    genes: Option<String>,
    /// With --genes: store the genes in the order the file lists them (a corpus whose vocabulary lists them so
    /// reads rows without re-ordering them).
    #[arg(long, requires = "genes")]
    listed_order: bool,
    /// With --genes: leave out the listed genes the dataset lacks instead of refusing them.
    #[arg(long, requires = "genes")]
    skip_missing_genes: bool,
    /// With --genes: identify genes by this column of the gene table (e.g. `gene_ids`) instead of their names.
    #[arg(long, requires = "genes", value_name = "COLUMN")]
    gene_key: Option<String>,
    /// Cells per tile of the new dataset (default: the source's).
    #[arg(long)]
    tile_size: Option<u64>,
    /// zstd level of the new tiles.
    #[arg(long, allow_negative_numbers = true, default_value_t = 19)]
    level: i32,
    /// Replace a dataset already at the output.
    #[arg(long)]
    overwrite: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The cells a `--cells` list names: `A`, or `A:B` for `A..B`, comma separated.
fn parse_cells(spec: &str) -> anyhow::Result<Vec<u64>> {
    let mut cells = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let number = |s: &str| -> anyhow::Result<u64> {
            s.trim()
                .parse::<u64>()
                .map_err(|_| crate::output::Usage(format!("--cells: {s:?} is not a cell index")).into())
        };
        match part.split_once(':') {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if a >= b {
                    let why = format!("--cells: the range {part:?} is empty (write START:END with START < END)");
                    return Err(crate::output::Usage(why).into());
                }
                cells.extend(a..b);
            }
            None => cells.push(number(part)?),
        }
    }
    anyhow::ensure!(!cells.is_empty(), "--cells names no cell");
    Ok(cells)
}

/// Runs `subset`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    // A condition's form is the command line's to check (exit 2); its column and values are the dataset's.
    if let Some(c) = args.conditions.iter().find(|c| !c.contains('=')) {
        usage!("--where {c:?}: write COLUMN=VALUE,... or COLUMN=LOW:HIGH");
    }
    let genes = args.genes.as_deref().map(super::corpus::read_gene_list).transpose()?;
    let options = SubsetOptions {
        cells: args.cells.as_deref().map(parse_cells).transpose()?,
        conditions: args.conditions.clone(),
        genes,
        listed_gene_order: args.listed_order,
        skip_missing_genes: args.skip_missing_genes,
        gene_key: args.gene_key.clone().map_or(GeneKey::VarNames, GeneKey::Column),
        tile_size: args.tile_size,
        level: args.level,
        overwrite: args.overwrite,
        store: store.clone(),
        ..SubsetOptions::default()
    };
    let report = subset(&args.dataset, &args.output, &options)?;
    if args.json {
        print_json(&json!({"output": args.output, "n_cells": report.n_cells, "n_genes": report.n_genes,
                           "n_tiles": report.n_tiles, "already_done": report.already_done}))?;
    } else if report.already_done {
        outln!(
            "{} already holds this subset of {} ({} cells x {} genes): nothing to do",
            args.output,
            args.dataset,
            report.n_cells,
            report.n_genes
        );
    } else {
        outln!(
            "wrote {} cells x {} genes ({} tiles) of {} into {}",
            report.n_cells,
            report.n_genes,
            report.n_tiles,
            args.dataset,
            args.output
        );
    }
    Ok(0)
}
