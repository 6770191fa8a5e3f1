//! `deltacells report DATASET [--output report.html] [--bench FILE] [--sample-tiles N] [--title T] [--json]`.

use dct_dataset::{Dataset, ReadOptions, StoreOptions};
use dct_report::{ReportOptions, report};
use serde_json::json;

use crate::output::print_json;

/// Arguments of `report`.
///
/// One self-contained HTML page of a dataset (style and plots inline; it opens without the network): its facts
/// (the numbers of `deltacells info`), histograms of nonzeros and counts per cell, tile bytes and bytes per nonzero
/// per tile, chunk balance within tiles, gene totals by rank, per obs column its categories or a histogram and its
/// missing fraction, and with `--bench` what `deltacells bench --json` measured. Large datasets are sampled: an
/// even spread of `--sample-tiles` tiles is decoded, and the page says so.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset location: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL.
    dataset: String,
    /// Where to write the page.
    #[arg(long, short, default_value = "report.html")]
    output: std::path::PathBuf,
    /// The output of `deltacells bench DATASET --json` saved to a file, or a loader's timeline saved by Python's
    /// `deltacells.Timeline`: shown as a section of its own.
    #[arg(long, value_name = "FILE")]
    bench: Option<std::path::PathBuf>,
    /// Tiles decoded at most for the cell, chunk and gene sections (an even spread, first and last included).
    #[arg(long, default_value_t = 24, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    sample_tiles: usize,
    /// The page's title (default: the dataset's URL).
    #[arg(long)]
    title: Option<String>,
    /// Print what the page shows as JSON (its facts, the sample, obs missing counts) besides writing it.
    #[arg(long)]
    json: bool,
}

/// Runs `report`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    if args.output.is_dir() {
        anyhow::bail!("--output {} is a directory: give the page's file name", args.output.display());
    }
    let bench = match &args.bench {
        None => None,
        Some(path) => {
            let text = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            Some(serde_json::from_slice(&text).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not JSON ({e}): give the output of `deltacells bench DATASET --json`",
                    path.display()
                )
            })?)
        }
    };
    let ds = Dataset::open(&args.dataset, ReadOptions { store: store.clone(), ..ReadOptions::default() })?;
    let options =
        ReportOptions { sample_tiles: args.sample_tiles.max(1), bench, title: args.title, ..Default::default() };
    let page = report(&ds, &options)?;
    let tmp = args.output.with_extension("html.tmp");
    std::fs::write(&tmp, page.html.as_bytes()).and_then(|()| std::fs::rename(&tmp, &args.output)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp); // nothing half-written is left
        anyhow::anyhow!("cannot write {}: {e}", args.output.display())
    })?;
    if args.json {
        let mut out = page.facts;
        out["output"] = json!(args.output.display().to_string());
        print_json(&out)?;
    } else {
        outln!(
            "wrote {} ({} kB): {}",
            args.output.display(),
            page.html.len().div_ceil(1000),
            page.facts["sample"]["how"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}
