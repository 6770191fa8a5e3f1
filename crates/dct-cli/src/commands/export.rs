//! `deltacells export DATASET --cells SPEC --format mtx|csv --output FILE [--source-gene-order]`.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use dct_dataset::{Batch, Dataset, ReadOptions, SparseRows, StoreOptions};

use crate::cells::CellSelection;
use crate::output::progress;

/// Output formats of `export`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// Matrix Market `coordinate integer general`: rows are the selected cells in order, columns are genes,
    /// 1-based.
    Mtx,
    /// `cell,gene,count` lines (0-based global cell index), with `gene_name` when the dataset has var names.
    Csv,
}

/// Arguments of `export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset location: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL.
    dataset: String,
    /// Cells to export: half-open ranges and single cells, e.g. `0:100,5000` (default: all).
    #[arg(long, default_value = ":")]
    cells: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "mtx")]
    format: Format,
    /// Output file (written to a temporary file, then renamed).
    #[arg(long)]
    output: PathBuf,
    /// Number genes as in the source (through gene_order.npy) instead of the stored order.
    #[arg(long)]
    source_gene_order: bool,
}

/// Cells decoded per batch: bounds memory whatever the selection's size.
const BATCH: usize = 4096;

/// Runs `export`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    let ds = Dataset::open(&args.dataset, ReadOptions { store: store.clone(), ..ReadOptions::default() })?;
    let cells = CellSelection::parse(&args.cells, ds.n_cells())?;
    let order = if args.source_gene_order {
        let order = ds.gene_order()?.context("--source-gene-order: the dataset has no gene_order.npy")?;
        Some(order)
    } else {
        None
    };
    let names = if matches!(args.format, Format::Csv) { ds.var_names()? } else { None };
    let map_gene = |g: i32| -> u64 { order.as_ref().map_or(g as u64, |o| o[g as usize] as u64) };
    let tmp = temp_path(&args.output);
    let result = (|| -> anyhow::Result<()> {
        let file = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        match args.format {
            Format::Mtx => {
                let mut nnz = 0;
                for batch in cells.batches(BATCH) {
                    nnz += ds.batch_nnz(&batch)?;
                }
                writeln!(out, "%%MatrixMarket matrix coordinate integer general")?;
                writeln!(out, "% deltacells export of {}: rows are cells in the order selected", args.dataset)?;
                writeln!(out, "{} {} {}", cells.len(), ds.n_genes(), nnz)?;
            }
            Format::Csv => {
                writeln!(out, "{}", if names.is_some() { "cell,gene,gene_name,count" } else { "cell,gene,count" })?;
            }
        }
        let bar = progress(cells.len(), "exporting");
        let mut batch = Batch::<u32>::default();
        let mut batches = cells.batches(BATCH).peekable();
        let mut b = 0;
        while let Some(chunk) = batches.next() {
            ds.prefetch_cells(batches.peek().map_or(&[][..], |next| &next[..]))?;
            ds.get_batch_into(&chunk, &mut batch)?;
            for (r, &cell) in chunk.iter().enumerate() {
                let (genes, counts) = batch.row(r);
                for (&g, &v) in genes.iter().zip(counts) {
                    let gene = map_gene(g);
                    match (args.format, &names) {
                        (Format::Mtx, _) => writeln!(out, "{} {} {v}", b * BATCH + r + 1, gene + 1)?,
                        (Format::Csv, Some(n)) => writeln!(out, "{cell},{gene},{},{v}", csv_field(&n[g as usize]))?,
                        (Format::Csv, None) => writeln!(out, "{cell},{gene},{v}")?,
                    }
                }
            }
            bar.inc(chunk.len() as u64);
            b += 1;
        }
        bar.finish_and_clear();
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, &args.output).with_context(|| format!("cannot write {}", args.output.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    Ok(0)
}

fn temp_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".tmp-{}", std::process::id()));
    output.with_file_name(name)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}
