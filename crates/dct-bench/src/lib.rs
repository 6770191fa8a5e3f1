//! Shared pieces of the deltacells release benchmarks (`cargo bench -p dct-bench`): building the synthetic
//! benchmark dataset once and reusing it, and the shuffled read order that the dataset benchmark replays.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use dct_dataset::{CsrMatrix, DatasetWriter, WriterOptions};
use dct_synth::{Synth, SynthParams};
use rand::SeedableRng;
use rand::seq::SliceRandom;

/// Where benchmark data is kept between runs: `$DCT_BENCH_DIR`, else `dct-bench-data` beside the cargo target
/// directory (outside the clone), else the system's temporary directory.
pub fn data_dir() -> PathBuf {
    if let Ok(d) = std::env::var("DCT_BENCH_DIR") {
        return PathBuf::from(d);
    }
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("dct-bench-data");
    }
    std::env::temp_dir().join("dct-bench-data")
}

/// The synthetic benchmark dataset: `tiles` tiles of `tile_size` cells from `dct-synth`'s default model (seed 42),
/// zstd level 19, 8 chunks. Built once and reused while its manifest exists.
pub fn synthetic_dataset(tiles: u64, tile_size: u64) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let dir = data_dir().join(format!("synth_{tiles}x{tile_size}_l19"));
    if dir.join(dct_dataset::manifest::MANIFEST_NAME).exists() {
        return Ok(dir);
    }
    eprintln!("building {} (once): {tiles} tiles of {tile_size} cells at level 19 ...", dir.display());
    let synth = Synth::new(&SynthParams::default())?;
    let n_genes = u64::from(SynthParams::default().n_genes);
    let opts = WriterOptions { tile_size, zstd_level: 19, overwrite: true, ..WriterOptions::new(n_genes) };
    let mut w = DatasetWriter::create(path_str(&dir), opts)?;
    for t in 0..tiles {
        let block = synth.generate(t * tile_size..(t + 1) * tile_size);
        w.append(&CsrMatrix {
            n_rows: block.n_cells(),
            n_cols: n_genes,
            indptr: &block.indptr,
            indices: &block.indices,
            values: &block.values,
        })?;
        eprintln!("  tile {}/{tiles}", t + 1);
    }
    w.finish()?;
    Ok(dir)
}

/// A path as the `&str` URL the dataset API takes.
pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("benchmark paths are UTF-8")
}

/// The read order of a training epoch: tiles in shuffled order, cells shuffled within each tile. Returns the cell
/// sequence and, for each position, its tile.
pub fn shuffled_epoch(limits: &[(u64, u64)], seed: u64) -> (Vec<u64>, Vec<usize>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tiles: Vec<usize> = (0..limits.len()).collect();
    tiles.shuffle(&mut rng);
    let (mut cells, mut tile_of) = (Vec::new(), Vec::new());
    for t in tiles {
        let (lo, hi) = limits[t];
        let mut c: Vec<u64> = (lo..hi).collect();
        c.shuffle(&mut rng);
        tile_of.extend(std::iter::repeat_n(t, c.len()));
        cells.extend(c);
    }
    (cells, tile_of)
}
