//! `deltacells verify DATASET [--threads N] [--json]`.

use dct_dataset::{Dataset, ReadOptions, StoreOptions, VerifyOptions, verify};
use serde_json::json;

use crate::output::{print_json, progress};

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset location: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL.
    dataset: String,
    /// Decode threads (default: every core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `verify`: exit 0 when the dataset is sound, 1 with every problem found otherwise.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    let options = ReadOptions { decode_threads: args.threads, store: store.clone(), ..ReadOptions::default() };
    let ds = match Dataset::open(&args.dataset, options) {
        Ok(ds) => ds,
        Err(e) => {
            if args.json {
                print_json(
                    &json!({"ok": false, "problems": [{"category": e.category().as_str(), "message": e.to_string()}]}),
                )?;
            }
            errln!("error: {e}");
            return Ok(1);
        }
    };
    let total = ds.n_tiles() as u64 + ds.manifest().obs.shard_bytes.len() as u64;
    let bar = progress(total, "verifying");
    let report = verify(&ds, &VerifyOptions { parallel: args.threads * 2, ..VerifyOptions::default() }, |done, _| {
        bar.set_position(done)
    });
    bar.finish_and_clear();
    if args.json {
        let problems: Vec<_> = report
            .problems
            .iter()
            .map(|p| json!({"category": p.category.as_str(), "tile": p.tile, "message": p.message}))
            .collect();
        print_json(&json!({
            "ok": report.is_ok(), "tiles_checked": report.tiles_checked, "bytes_checked": report.bytes_checked,
            "n_cells": ds.n_cells(), "problems": problems,
        }))?;
    } else if report.is_ok() {
        outln!("OK: {} tiles, {} cells", ds.n_tiles(), ds.n_cells());
    } else {
        for p in &report.problems {
            outln!("{p}");
        }
        errln!("{} problem(s) found in {}", report.problems.len(), args.dataset);
    }
    Ok(if report.is_ok() { 0 } else { 1 })
}
