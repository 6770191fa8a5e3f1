//! `deltacells bench DATASET [--threads N] [--batch-size B] [--max-cells C] [--json]`: what the user's own data
//! and storage deliver, to size workers and tiles.

use std::time::{Duration, Instant};

use dct_codec::{DecodeOptions, DecodedTile, Decoder};
use dct_dataset::{Batch, Dataset, ReadOptions};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde_json::json;

use crate::output::{human_bytes, print_json};

/// Arguments of `bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset location: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL.
    dataset: String,
    /// Decode threads (default: every core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Cells per batch in the shuffled read.
    #[arg(long, default_value_t = 5000)]
    batch_size: usize,
    /// Tiles timed one by one in the fetch/decode part.
    #[arg(long, default_value_t = 8)]
    sample_tiles: usize,
    /// Time these tiles (comma separated, repeats allowed) in the fetch/decode part instead of a random sample.
    #[arg(long, value_delimiter = ',')]
    tiles: Vec<usize>,
    /// Stop the shuffled read after this many cells.
    #[arg(long, default_value_t = 200_000)]
    max_cells: u64,
    /// Tiles to prefetch ahead in the shuffled read (0: no prefetch).
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Seed of the shuffles.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `bench`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let threads =
        if args.threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { args.threads };
    let options = ReadOptions {
        decode_threads: threads,
        max_prefetch_tiles: args.prefetch.max(1),
        // Decoded tiles: the one being read and one decoded ahead (prefetched tiles waiting do not count).
        max_cached_tiles: 2,
        ..ReadOptions::default()
    };
    let ds = Dataset::open(&args.dataset, options)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);

    // Part 1: fetch and decode single tiles, one at a time.
    let mut tiles: Vec<usize> = (0..ds.n_tiles()).collect();
    tiles.shuffle(&mut rng);
    tiles.truncate(args.sample_tiles.max(1));
    if !args.tiles.is_empty() {
        if let Some(&t) = args.tiles.iter().find(|&&t| t >= ds.n_tiles()) {
            anyhow::bail!("--tiles: tile {t} does not exist ({} has {} tiles)", args.dataset, ds.n_tiles());
        }
        tiles.clone_from(&args.tiles);
    }
    let mut decoder = Decoder::new(DecodeOptions { verify_crc: true, threads });
    let mut out = DecodedTile::<f32>::default();
    let (mut fetch, mut decode, mut bytes, mut nnz, mut cells) = (Duration::ZERO, Duration::ZERO, 0u64, 0u64, 0u64);
    for &t in &tiles {
        let start = Instant::now();
        let blob = ds.fetch_tile_bytes(t)?;
        fetch += start.elapsed();
        let start = Instant::now();
        decoder.decode_into(&blob, &mut out)?;
        decode += start.elapsed();
        bytes += blob.len() as u64;
        nnz += out.nnz() as u64;
        cells += out.n_rows() as u64;
    }
    let n = tiles.len() as f64;
    let per_tile_fetch = fetch.as_secs_f64() / n;
    let per_tile_decode = decode.as_secs_f64() / n;

    // Part 2: shuffled batches: tiles in shuffled order, cells shuffled within each tile.
    let mut order: Vec<usize> = (0..ds.n_tiles()).collect();
    order.shuffle(&mut rng);
    let mut sequence: Vec<u64> = Vec::new();
    let mut tile_of_position = Vec::new();
    for &t in &order {
        let (lo, hi) = ds.tile_bounds(t).expect("tile in range");
        let mut c: Vec<u64> = (lo..hi).collect();
        c.shuffle(&mut rng);
        for x in c {
            if sequence.len() as u64 >= args.max_cells {
                break;
            }
            sequence.push(x);
            tile_of_position.push(t);
        }
    }
    ds.reset_stats();
    let mut batch = Batch::<f32>::default();
    let start = Instant::now();
    let mut read_nnz = 0u64;
    let mut next_prefetch = 0usize;
    for (b, chunk) in sequence.chunks(args.batch_size.max(1)).enumerate() {
        if args.prefetch > 0 {
            // Keep the next `prefetch` tiles of the sequence in flight.
            let end_pos = ((b + 1) * args.batch_size).min(sequence.len());
            let current = tile_of_position.get(end_pos.saturating_sub(1)).copied();
            let mut ahead = Vec::new();
            let pos = order.iter().position(|&t| Some(t) == current).unwrap_or(0);
            for &t in order.iter().skip(pos.max(next_prefetch)).take(args.prefetch + 1) {
                ahead.push(t);
            }
            next_prefetch = pos;
            ds.prefetch(&ahead)?;
        }
        ds.get_batch_into(chunk, &mut batch)?;
        read_nnz += batch.nnz() as u64;
        std::hint::black_box(&batch);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = ds.stats();
    let cells_per_s = sequence.len() as f64 / elapsed;
    if args.json {
        print_json(&json!({
            "dataset": args.dataset, "threads": threads, "tiles_sampled": tiles.len(),
            "tile_fetch_seconds": per_tile_fetch, "tile_decode_seconds": per_tile_decode,
            "fetch_bytes_per_second": bytes as f64 / fetch.as_secs_f64(),
            "decode_nnz_per_second": nnz as f64 / decode.as_secs_f64(),
            "decode_cells_per_second": cells as f64 / decode.as_secs_f64(),
            "batch_size": args.batch_size, "batch_cells": sequence.len(), "batch_seconds": elapsed,
            "batch_cells_per_second": cells_per_s, "batch_nnz_per_second": read_nnz as f64 / elapsed,
            "stall_seconds": stats.stall_time.as_secs_f64(), "tiles_fetched": stats.tiles_fetched,
        }));
    } else {
        println!("dataset {}  ({threads} decode threads)", args.dataset);
        println!(
            "single tiles ({} sampled, {} each on average):",
            tiles.len(),
            human_bytes(bytes / tiles.len() as u64)
        );
        println!(
            "  fetch   {:8.2} ms per tile   {:>10}/s",
            per_tile_fetch * 1e3,
            human_bytes((bytes as f64 / fetch.as_secs_f64()) as u64)
        );
        println!(
            "  decode  {:8.2} ms per tile   {:>10.1} M nonzeros/s   {:>10.0} cells/s",
            per_tile_decode * 1e3,
            nnz as f64 / decode.as_secs_f64() / 1e6,
            cells as f64 / decode.as_secs_f64()
        );
        println!(
            "shuffled batches of {} ({} cells; tiles in random order, cells shuffled within each, prefetch {}):",
            args.batch_size,
            sequence.len(),
            args.prefetch
        );
        println!(
            "  {cells_per_s:>10.0} cells/s   {:>8.1} M nonzeros/s   {elapsed:.2} s",
            read_nnz as f64 / elapsed / 1e6
        );
        println!(
            "  stalled {:.2} s waiting for tiles; {} tiles fetched ({}), {} decoded",
            stats.stall_time.as_secs_f64(),
            stats.tiles_fetched,
            human_bytes(stats.bytes_fetched),
            stats.tiles_decoded
        );
    }
    Ok(0)
}
