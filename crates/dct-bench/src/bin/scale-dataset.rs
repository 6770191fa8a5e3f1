//! Writes the seeded synthetic dataset of the scale benchmark: any number of cells with about 2,000 nonzeros a
//! cell over 36,000 genes and an obs table of 20 columns, as the converter would store it, and prints one JSON line
//! of what writing it cost.
//!
//! ```sh
//! cargo run --release -p dct-bench --bin scale-dataset -- --cells 1000000 --output DIR [--level 3]
//!     [--tile-size 10000] [--seed 7] [--pool 30000]
//! ```
//!
//! Counts come from `dct-synth`'s model (gene weights decreasing as a power law, log-normal depths, Poisson
//! counts), with the median depth chosen so that a cell has about 2,000 nonzeros. Generating 10^7 such cells would
//! take longer than encoding them, so a seeded pool of `--pool` distinct cells (default 30,000, three tiles) is
//! generated once and each tile is a seeded draw of distinct pool cells in random order: tiles are compressed
//! independently, so a tile of drawn cells costs what a tile of new cells costs, and no tile holds a cell twice.
//!
//! The obs table (per tile, from the tile's own seeded stream, so any tile can be made alone): a unique barcode
//! string per cell; category columns of 10, 40, 200, 1,000, 5,000 and 50,000 categories with skewed frequencies
//! and one of 12 categories with 15% missing; the cell's real nonzeros (int32) and total count (float32); numbers
//! of each width (int16 with missing values, int64, float32, float64); three bools; a string column that is
//! missing for nine cells in ten; and a second percentage (float32), 20 columns in all.
//!
//! The JSON line: cells, tiles (and the range written), nonzeros, bytes, seconds writing (generation of the pool
//! excluded), cells/s, the CPU seconds of writing (user and system, all threads), the resident memory peak of the whole process (`VmHWM`) and of the writing alone (the peak less the resident memory
//! once the pool was made).

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Instant;

use dct_codec::CanonicalCsr;
use dct_dataset::dct_obs::arrow::array::{ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array};
use dct_dataset::dct_obs::arrow::array::{Int32Array, Int64Array, StringArray};
use dct_dataset::dct_obs::{ArrowType, ColumnData, ObsColumn, ObsSchema, ObsWriteOptions, TileObs};
use dct_dataset::{CsrMatrix, DatasetWriter, WriterOptions};
use dct_synth::{Synth, SynthParams};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Error = Box<dyn std::error::Error>;

/// Genes of the dataset.
const N_GENES: u32 = 36_000;
/// Nonzeros a cell of median depth has.
const TARGET_NNZ: f64 = 2_000.0;
/// The category columns: name, categories, share of missing values.
const CATEGORIES: [(&str, usize, f64); 7] = [
    ("sample", 10, 0.0),
    ("tissue", 40, 0.0),
    ("cell_type", 200, 0.0),
    ("donor", 1_000, 0.0),
    ("batch", 5_000, 0.0),
    ("guide", 50_000, 0.0),
    ("disease", 12, 0.15),
];

struct Args {
    cells: u64,
    output: String,
    level: i32,
    tile_size: u64,
    seed: u64,
    pool: usize,
    /// The dataset's tiles written: `FIRST..END`.
    tiles: Option<(u64, u64)>,
}

fn parse_args() -> Result<Args, Error> {
    let mut a =
        Args { cells: 0, output: String::new(), level: 3, tile_size: 10_000, seed: 7, pool: 30_000, tiles: None };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--cells" => a.cells = value.parse()?,
            "--output" => a.output = value,
            "--level" => a.level = value.parse()?,
            "--tile-size" => a.tile_size = value.parse()?,
            "--seed" => a.seed = value.parse()?,
            "--pool" => a.pool = value.parse()?,
            "--tiles" => {
                let (first, end) = value.split_once("..").ok_or("--tiles takes FIRST..END")?;
                a.tiles = Some((first.parse()?, end.parse()?));
            }
            _ => return Err(format!("unknown option {flag} (see the file's documentation)").into()),
        }
    }
    if a.cells == 0 || a.output.is_empty() {
        return Err(
            "usage: scale-dataset --cells N --output DIR [--level L] [--tile-size T] [--seed S] [--pool P]".into()
        );
    }
    if (a.pool as u64) < a.tile_size {
        return Err("--pool must hold at least one tile of cells".into());
    }
    if let Some((first, end)) = a.tiles
        && (first >= end || end > a.cells.div_ceil(a.tile_size))
    {
        return Err(format!("--tiles {first}..{end} is not a range of the dataset's tiles").into());
    }
    Ok(a)
}

/// The pool: rows of distinct cells, gene indices as `u16` (36,000 genes) to halve its memory.
struct Pool {
    indptr: Vec<usize>,
    genes: Vec<u16>,
    counts: Vec<u32>,
}

fn make_pool(n: usize, seed: u64) -> Result<Pool, Error> {
    let mut params = SynthParams { n_genes: N_GENES, seed, ..SynthParams::default() };
    let synth = Synth::new(&params)?;
    // The median depth giving TARGET_NNZ nonzeros (expected nonzeros grow with depth).
    let (mut lo, mut hi) = (1.0_f64, 1e6_f64);
    for _ in 0..60 {
        let mid = (lo * hi).sqrt();
        if synth.expected_nnz(mid) < TARGET_NNZ { lo = mid } else { hi = mid }
    }
    params.median_depth = lo;
    let m = Synth::new(&params)?.generate(0..n as u64);
    let genes = m.indices.iter().map(|&g| u16::try_from(g)).collect::<Result<Vec<_>, _>>()?;
    Ok(Pool { indptr: m.indptr.iter().map(|&p| p as usize).collect(), genes, counts: m.values })
}

/// A tile of `rows` distinct pool cells drawn by `rng`, with its obs; `first` is its first cell's index.
fn make_tile(
    pool: &Pool,
    rows: usize,
    first: u64,
    rng: &mut ChaCha8Rng,
    schema: &Labels,
) -> Result<(CanonicalCsr, TileObs), Error> {
    let picks = sample(rng, pool.indptr.len() - 1, rows);
    let mut indptr = Vec::with_capacity(rows + 1);
    let (mut indices, mut values) = (Vec::new(), Vec::new());
    let (mut n_genes, mut totals) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
    indptr.push(0u64);
    for p in picks.iter() {
        let (lo, hi) = (pool.indptr[p], pool.indptr[p + 1]);
        indices.extend(pool.genes[lo..hi].iter().map(|&g| u32::from(g)));
        values.extend_from_slice(&pool.counts[lo..hi]);
        indptr.push(indices.len() as u64);
        n_genes.push((hi - lo) as i32);
        totals.push(pool.counts[lo..hi].iter().map(|&c| f64::from(c)).sum::<f64>() as f32);
    }
    let csr =
        CsrMatrix { n_rows: rows, n_cols: u64::from(N_GENES), indptr: &indptr, indices: &indices, values: &values };
    let tile = CanonicalCsr::from_csr(&csr)?;

    let mut obs = TileObs::new();
    let barcodes: StringArray = (0..rows as u64).map(|r| Some(barcode(first + r))).collect();
    obs.push("barcode", Arc::new(barcodes) as ArrayRef);
    for ((name, n, missing), labels) in CATEGORIES.iter().zip(&schema.0) {
        // Skewed: category k is drawn with density falling as k grows (u^3 spreads the small codes thin).
        let codes = (0..rows)
            .map(|_| if rng.random_bool(*missing) { -1 } else { ((*n as f64) * rng.random::<f64>().powi(3)) as i32 })
            .collect();
        obs.push(*name, ColumnData::category(codes, labels.clone()));
    }
    obs.push("n_genes", col(Arc::new(Int32Array::from(n_genes))));
    obs.push("total_counts", col(Arc::new(Float32Array::from(totals))));
    let pct: Float32Array = (0..rows).map(|_| Some(rng.random::<f32>() * 20.0)).collect();
    obs.push("pct_mito", col(Arc::new(pct)));
    let umis: Int64Array = (0..rows).map(|_| Some(rng.random_range(500..200_000i64))).collect();
    obs.push("n_umis", col(Arc::new(umis)));
    let age: Int16Array = (0..rows).map(|_| (!rng.random_bool(0.05)).then(|| rng.random_range(0..100i16))).collect();
    obs.push("age", col(Arc::new(age)));
    let doublet: Float64Array = (0..rows).map(|_| Some(rng.random::<f64>())).collect();
    obs.push("doublet_score", col(Arc::new(doublet)));
    let size: Float32Array = (0..rows).map(|_| Some(0.2 + rng.random::<f32>() * 3.0)).collect();
    obs.push("size_factor", col(Arc::new(size)));
    for (name, p) in [("is_doublet", 0.05), ("passed_qc", 0.9), ("is_primary", 0.7)] {
        let flags: BooleanArray = (0..rows).map(|_| Some(rng.random_bool(p))).collect();
        obs.push(name, col(Arc::new(flags)));
    }
    let notes: StringArray =
        (0..rows).map(|_| rng.random_bool(0.1).then(|| format!("flag-{}", rng.random_range(0..300)))).collect();
    obs.push("note", col(Arc::new(notes)));
    let ribo: Float32Array = (0..rows).map(|_| Some(rng.random::<f32>() * 40.0)).collect();
    obs.push("pct_ribo", col(Arc::new(ribo)));
    Ok((tile, obs))
}

/// An Arrow array as an obs column.
fn col(a: ArrayRef) -> ArrayRef {
    a
}

/// A 16-base barcode spelling the cell's index (unique for 4^16 cells), with the usual `-1` suffix.
fn barcode(cell: u64) -> String {
    let mut s: String = (0..16).map(|i| b"ACGT"[((cell >> (2 * (15 - i))) & 3) as usize] as char).collect();
    s.push_str("-1");
    s
}

/// The category columns' vocabularies, shared by every tile.
struct Labels(Vec<Arc<[String]>>);

fn schema() -> Result<(ObsSchema, Labels), Error> {
    let mut columns = vec![ObsColumn::plain("barcode", ArrowType::String)];
    let mut labels = Vec::new();
    for (name, n, _) in CATEGORIES {
        let cats: Vec<String> = (0..n).map(|k| format!("{name}-{k}")).collect();
        labels.push(Arc::from(cats.clone()));
        columns.push(ObsColumn::category(name, cats));
    }
    for (name, t) in [
        ("n_genes", ArrowType::Int32),
        ("total_counts", ArrowType::Float),
        ("pct_mito", ArrowType::Float),
        ("n_umis", ArrowType::Int64),
        ("age", ArrowType::Int16),
        ("doublet_score", ArrowType::Double),
        ("size_factor", ArrowType::Float),
        ("is_doublet", ArrowType::Bool),
        ("passed_qc", ArrowType::Bool),
        ("is_primary", ArrowType::Bool),
        ("note", ArrowType::String),
        ("pct_ribo", ArrowType::Float),
    ] {
        columns.push(ObsColumn::plain(name, t));
    }
    Ok((ObsSchema::new(columns)?, Labels(labels)))
}

/// The process's CPU seconds so far, user and system, all threads (`/proc/self/stat`, in the kernel's 100 ticks a
/// second); 0 where it cannot be read.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: state is the 3rd field, utime the 14th and stime the 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: u64 = rest.split_whitespace().skip(11).take(2).filter_map(|f| f.parse::<u64>().ok()).sum();
    ticks as f64 / 100.0
}

/// A line of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`); 0 where there is none.
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.trim_start_matches(':').split_whitespace().next()?.parse().ok());
    kib.unwrap_or(0u64) * 1024
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

fn main() -> Result<(), Error> {
    let a = parse_args()?;
    let t0 = Instant::now();
    let pool = make_pool(a.pool, a.seed)?;
    let pool_seconds = t0.elapsed().as_secs_f64();
    let (schema, labels) = schema()?;
    let options = WriterOptions {
        tile_size: a.tile_size,
        zstd_level: a.level,
        overwrite: true,
        metadata: serde_json::json!({"synthetic": {"cells": a.cells, "seed": a.seed, "pool": a.pool}}),
        ..WriterOptions::new(u64::from(N_GENES))
    };
    let baseline = status_bytes("VmRSS");
    let cpu0 = cpu_seconds();
    let t1 = Instant::now();
    let mut w = DatasetWriter::create(&a.output, options)?;
    w.set_var_names((0..N_GENES).map(|g| format!("GENE{g:05}")).collect())?;
    w.set_obs_schema(schema, &ObsWriteOptions::default())?;
    let mut nnz = 0u64;
    let tiles = a.cells.div_ceil(a.tile_size);
    let (first_tile, end_tile) = a.tiles.unwrap_or((0, tiles));
    for t in first_tile..end_tile {
        let first = t * a.tile_size;
        let rows = a.tile_size.min(a.cells - first) as usize;
        let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ 0x5ca1e);
        rng.set_stream(t);
        let (tile, obs) = make_tile(&pool, rows, first, &mut rng, &labels)?;
        nnz += tile.nnz() as u64;
        w.push_tile_with_obs(tile, &obs)?;
        if (t + 1 - first_tile) % 100 == 0 {
            eprintln!("  {} of {} tiles", t + 1 - first_tile, end_tile - first_tile);
        }
    }
    w.finish()?;
    let seconds = t1.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let peak = status_bytes("VmHWM");
    let cells = (end_tile * a.tile_size).min(a.cells) - first_tile * a.tile_size;
    let line = serde_json::json!({
        "cells": cells, "dataset_cells": a.cells, "tiles": end_tile - first_tile, "tile_range": [first_tile, end_tile],
        "nnz": nnz, "genes": N_GENES, "level": a.level, "tile_size": a.tile_size,
        "bytes": dir_bytes(std::path::Path::new(&a.output)), "pool_cells": a.pool, "pool_seconds": pool_seconds,
        "seconds": seconds, "cells_per_s": cells as f64 / seconds, "cpu_seconds": cpu,
        "peak_rss_bytes": peak, "writing_peak_bytes": peak.saturating_sub(baseline),
    });
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dataset the scale benchmark promises: 20 obs columns, among them a barcode per cell and category columns
    /// of 10 to 50,000 categories, about 2,000 nonzeros a cell over 36,000 genes, and the same tile from the same
    /// seed.
    #[test]
    fn a_tile_has_the_promised_shape_and_is_reproducible() {
        let pool = make_pool(600, 7).unwrap();
        let (schema, labels) = schema().unwrap();
        assert_eq!(schema.columns.len(), 20);
        let cats: Vec<usize> = CATEGORIES.iter().map(|c| c.1).collect();
        assert_eq!((cats.iter().min(), cats.iter().max()), (Some(&10), Some(&50_000)));
        let tile = |seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(3);
            make_tile(&pool, 500, 1_500, &mut rng, &labels).unwrap()
        };
        let (csr, obs) = tile(1);
        assert_eq!(obs.columns.len(), 20);
        let names: Vec<&str> = obs.columns.iter().map(|(n, _)| n.as_str()).collect();
        let expected: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, expected, "the tile's columns are the schema's, in its order");
        assert!(obs.columns.iter().all(|(_, d)| d.len() == 500));
        let Some(ColumnData::Array(barcodes)) = obs.get("barcode") else { panic!("no barcode column") };
        let barcodes = barcodes.as_any().downcast_ref::<StringArray>().unwrap();
        let distinct: std::collections::HashSet<&str> = barcodes.iter().flatten().collect();
        assert_eq!(distinct.len(), 500);
        assert_eq!(barcodes.value(0), barcode(1_500));
        let per_cell = csr.nnz() as f64 / 500.0;
        assert!((1_500.0..2_800.0).contains(&per_cell), "{per_cell} nonzeros a cell");
        assert!(csr.indices.iter().all(|&g| g < N_GENES));
        let (again, again_obs) = tile(1);
        assert_eq!(again, csr);
        assert_eq!(format!("{:?}", again_obs.columns), format!("{:?}", obs.columns));
        let (other, _) = tile(2);
        assert_ne!(other.indices, csr.indices, "another seed, another tile");
    }
}
