//! `deltacells demo`: the main job on an embedded real sample, with local files only.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use dct_convert::{ConvertOptions, RunOptions};
use dct_dataset::{Batch, Dataset, ReadOptions, VerifyOptions};
use rand::SeedableRng;
use rand::seq::SliceRandom;

use crate::output::human_bytes;

/// 1,000 cells of 10x Genomics' "3k PBMCs from a Healthy Donor" raw counts (see crates/dct-cli/demo/README.md).
const SAMPLE: &[u8] = include_bytes!("../../demo/pbmc1k_raw_sample.h5ad");

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write the dataset (default: `deltacells-demo` in the system's temporary directory, replaced on
    /// each run).
    #[arg(long)]
    output: Option<PathBuf>,
}

/// Runs `demo`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let base = std::env::temp_dir().join("deltacells-demo");
    let output = args.output.unwrap_or_else(|| base.join("dataset"));
    std::fs::create_dir_all(&base)?;
    let input = base.join("pbmc1k_raw_sample.h5ad");
    std::fs::write(&input, SAMPLE).with_context(|| format!("cannot write {}", input.display()))?;
    outln!("deltacells demo: 1,000 real PBMCs (10x Genomics), {} as h5ad (gzip)", human_bytes(SAMPLE.len() as u64));

    // 1. Convert.
    let url = output.to_str().context("the output path is not UTF-8")?.to_string();
    let options = ConvertOptions { tile_size: 256, ..ConvertOptions::new(url.clone()) };
    let start = Instant::now();
    let m = dct_convert::convert(&[input], &options, &RunOptions::default(), true, |_| {})?;
    let secs = start.elapsed().as_secs_f64();
    let bytes: u64 = m.tile_bytes.iter().sum();
    let nnz = m.nnz();
    outln!(
        "1. converted {} cells x {} genes, {nnz} nonzeros, into {} tiles at zstd level 19 in {secs:.2} s ({:.0} cells/s)",
        m.n_cells,
        m.n_genes,
        m.n_tiles(),
        m.n_cells as f64 / secs
    );
    outln!(
        "   size: {} in tiles = {:.3} bytes per nonzero ({:.1}x smaller than the gzip h5ad, {:.1}x smaller than \
         int32+float32 CSR)",
        human_bytes(bytes),
        bytes as f64 / nnz as f64,
        SAMPLE.len() as f64 / bytes as f64,
        (8 * nnz + 8 * (m.n_cells + 1)) as f64 / bytes as f64
    );

    // 2. Verify.
    let ds = Dataset::open(&url, ReadOptions::default())?;
    let report = dct_dataset::verify(&ds, &VerifyOptions::default(), |_, _| {});
    if !report.is_ok() {
        for p in &report.problems {
            errln!("{p}");
        }
        anyhow::bail!("verification failed");
    }
    outln!("2. verified: CRC and full decode of {} tiles, side files consistent", report.tiles_checked);

    // 3. Shuffled batches, as a training loop reads them.
    let mut cells: Vec<u64> = (0..ds.n_cells()).collect();
    cells.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7));
    let mut batch = Batch::<f32>::default();
    let rounds = 20;
    let start = Instant::now();
    let mut read = 0u64;
    for _ in 0..rounds {
        for b in cells.chunks(128) {
            ds.get_batch_into(b, &mut batch)?;
            read += b.len() as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = ds.stats();
    outln!(
        "3. read {read} cells in shuffled batches of 128: {:.0} cells/s, {:.1} M nonzeros/s ({} tiles decoded, {} \
         cache hits)",
        read as f64 / secs,
        (nnz * rounds) as f64 / secs / 1e6,
        stats.tiles_decoded,
        stats.cache_hits
    );
    outln!("dataset: {url}  (try: deltacells info {url})");
    Ok(0)
}
