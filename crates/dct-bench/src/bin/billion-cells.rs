//! What the reader's own structures cost at 10^9 cells, simulated without the data: a manifest of 10^5 tiles
//! (10,000 cells each, about 2,000 nonzeros a cell, obs in shards of 1,000 tiles) is built, written, parsed and
//! opened from an in-memory store, and each worker's epoch plan is made, as a training job of 8 ranks with 4
//! DataLoader workers each would. Prints JSON: sizes, times (medians of 5) and the memory each holds (resident
//! memory grown while holding it: the process's `/proc/self/statm`, so Linux only).
//!
//! `cargo run --release -p dct-bench --bin billion-cells [N_CELLS [TILE_SIZE]]`

#![forbid(unsafe_code)]

use std::time::Instant;

use dct_dataset::manifest::{MANIFEST_NAME, Manifest};
use dct_dataset::{Dataset, EpochOptions, EpochPlan, ManifestSettings, ObsFields, ReadOptions, Store, TileStats};
use serde_json::json;

/// Resident memory now, in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Median seconds of 5 runs of `f`, and the value of the last.
fn timed<T>(mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        let start = Instant::now();
        let v = f();
        times.push(start.elapsed().as_secs_f64());
        last = Some(v);
    }
    times.sort_by(f64::total_cmp);
    (times[2], last.expect("ran"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let n_cells = args.next().transpose()?.unwrap_or(1_000_000_000);
    let tile_size = args.next().transpose()?.unwrap_or(10_000);
    let n_tiles = n_cells.div_ceil(tile_size) as usize;
    let tiles_per_file = 1_000u64;

    // Tile statistics of realistic spread: nonzeros 1,500-2,500 a cell, 0.75 bytes a nonzero.
    let tiles: Vec<TileStats> = (0..n_tiles as u64)
        .map(|t| {
            let cells = tile_size.min(n_cells - t * tile_size);
            let nnz = cells * (1_500 + (t * 7_919) % 1_000);
            TileStats { cells, nnz, bytes: nnz * 3 / 4 + 4_096 }
        })
        .collect();
    let n_shards = (n_tiles as u64).div_ceil(tiles_per_file) as usize;
    let obs = ObsFields {
        tiles_per_file,
        fingerprint: "0123456789abcdef01234567".into(),
        shard_bytes: (0..n_shards as u64).map(|s| 180_000_000 + s).collect(),
        shard_sha256: (0..n_shards).map(|s| format!("{s:064x}")).collect(),
        shard_footer_crc32: Some((0..n_shards as u32).collect()),
    };
    let settings =
        ManifestSettings { version: dct_format::Version::V2, n_genes: 36_000, tile_size, n_chunks: 8, zstd_level: 19 };
    let manifest = Manifest::build(settings, &tiles, Some(obs), json!({}));
    drop(tiles);
    let text = manifest.to_json_pretty();
    drop(manifest);

    let before = resident();
    let (parse_seconds, parsed) = timed(|| Manifest::from_json(&text));
    let parsed = parsed?;
    let parsed_bytes = resident().saturating_sub(before);
    drop(parsed);

    let store = Store::memory("billion");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(store.put(MANIFEST_NAME, text.clone().into()))?;
    let before = resident();
    let options = ReadOptions { decode_threads: 1, io_threads: 1, ..ReadOptions::default() };
    let (open_seconds, ds) = timed(|| Dataset::open_store(store.clone(), options.clone()));
    let ds = ds?;
    let open_bytes = resident().saturating_sub(before);

    // 8 ranks x 4 workers: each worker's plan of its share of a shuffled epoch (windows of 4 tiles, batch 1,024).
    let (world, workers) = (8usize, 4usize);
    let opts = EpochOptions { rank: 3, world_size: world, worker: 1, num_workers: workers, ..EpochOptions::new(1_024) };
    let before = resident();
    let tile_cells = ds.manifest().tile_cells.clone();
    let (plan_seconds, plan) = timed(|| EpochPlan::new(&tile_cells, &opts, 0));
    let mut plan = plan?;
    let mut batch = Vec::new();
    let start = Instant::now();
    plan.batch_into(0, &mut batch)?;
    let first_batch_seconds = start.elapsed().as_secs_f64();
    let plan_bytes = resident().saturating_sub(before);

    let out = json!({
        "n_cells": n_cells, "tile_size": tile_size, "n_tiles": n_tiles, "obs_shards": n_shards,
        "manifest_bytes": text.len(), "manifest_parse_seconds": parse_seconds,
        "manifest_resident_bytes": parsed_bytes, "open_seconds": open_seconds, "open_resident_bytes": open_bytes,
        "epoch_plan": {"ranks": world, "workers_per_rank": workers, "window_tiles": 4, "batch_size": 1024,
                       "plan_seconds": plan_seconds, "first_batch_seconds": first_batch_seconds,
                       "worker_batches": plan.n_batches(), "resident_bytes": plan_bytes},
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
