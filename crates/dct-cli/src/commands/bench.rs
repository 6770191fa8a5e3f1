//! `deltacells bench DATASET [--threads N] [--batch-size B] [--pattern P] [--max-cells C] [--json]`: what the
//! user's own data and storage deliver, to size workers and tiles, and what an access pattern costs.
//! `deltacells bench --corpus MEMBER...`: the same for many datasets read as one corpus (`bench_corpus.rs`).

use std::time::{Duration, Instant};

use dct_codec::{DecodeOptions, DecodedTile, Decoder};
use dct_dataset::{Batch, Dataset, DatasetError, EpochOptions, EpochPlan, ReadOptions, SparseRows, StoreOptions};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde_json::json;

use crate::output::{human_bytes, print_json};

/// Arguments of `bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Dataset location: a path or a `file://`, `s3://`, `gs://`, `az://` or `https://` URL (with `--corpus`: the
    /// member datasets, in cell order).
    #[arg(required = true, num_args = 1.., value_name = "DATASET")]
    datasets: Vec<String>,
    /// Read the datasets as one corpus through a gene vocabulary, and compare with reading each member alone.
    #[arg(long)]
    corpus: bool,
    /// With `--corpus`: the vocabulary, `union`, `intersection` or a file of gene identifiers, one a line.
    #[arg(long, default_value = "union", requires = "corpus")]
    genes: String,
    /// With `--corpus`: a column of each member's gene table naming its genes (e.g. `gene_ids`).
    #[arg(long = "gene-key", value_name = "COLUMN", requires = "corpus")]
    gene_key: Option<String>,
    /// Decode threads (default: every core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Cells per batch in the shuffled read.
    #[arg(long, default_value_t = 5000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    batch_size: usize,
    /// Tiles timed one by one in the fetch/decode part (not with `--corpus`).
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..), conflicts_with = "corpus")]
    sample_tiles: usize,
    /// Time these tiles (comma separated, repeats allowed) in the fetch/decode part instead of a random sample
    /// (not with `--corpus`).
    #[arg(long, value_delimiter = ',', conflicts_with = "corpus")]
    tiles: Vec<usize>,
    /// Stop the shuffled read after this many cells.
    #[arg(long, default_value_t = 200_000)]
    max_cells: u64,
    /// Tiles to prefetch ahead in the shuffled read (0: no prefetch).
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// The order of the shuffled read: `cells` (cell order), `tiles` (tiles shuffled, cells shuffled within each
    /// tile), `window:K` (tiles shuffled, cells shuffled within windows of K consecutive tiles, as the training
    /// loader reads) or `global` (every cell in random order: every batch touches most tiles).
    #[arg(long, default_value = "tiles")]
    pattern: String,
    /// Seed of the shuffles.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Skip the CRC check of every tile, in the direct decode and in the reader alike (to see what it costs).
    #[arg(long)]
    pub no_crc: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `bench`.
pub fn run(args: Args, store: &StoreOptions) -> anyhow::Result<u8> {
    let threads =
        if args.threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { args.threads };
    let pattern = Pattern::parse(&args.pattern)?;
    if args.corpus {
        if !matches!(pattern, Pattern::Window(_)) {
            anyhow::bail!(
                "--pattern {} with --corpus: a corpus is read in the training loader's order; give tiles or window:K",
                args.pattern
            );
        }
        let bench = super::bench_corpus::CorpusBench {
            members: &args.datasets,
            genes: &args.genes,
            gene_key: args.gene_key.as_deref(),
            batch_size: args.batch_size,
            window: pattern.window(),
            prefetch: args.prefetch,
            max_cells: args.max_cells,
            threads,
            verify: !args.no_crc,
            seed: args.seed,
            json: args.json,
        };
        return super::bench_corpus::run(&bench, store);
    }
    let [dataset] = args.datasets.as_slice() else {
        anyhow::bail!("bench reads one dataset; to read {} as one corpus, pass --corpus", args.datasets.len());
    };
    let dataset = dataset.clone();
    let options = ReadOptions {
        decode_threads: threads,
        max_prefetch_tiles: args.prefetch.max(1),
        // Decoded tiles: a window's (or the one being read) and one decoded ahead; prefetched tiles waiting to be
        // decoded do not count.
        max_cached_tiles: pattern.window() + 1,
        verify_crc: !args.no_crc,
        store: store.clone(),
        ..ReadOptions::default()
    };
    let ds = Dataset::open(&dataset, options.clone())?;
    if ds.n_tiles() == 0 {
        anyhow::bail!("{dataset} holds no tile (0 cells): there is nothing to read");
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);

    // Part 1: fetch and decode single tiles, one at a time.
    let mut tiles: Vec<usize> = (0..ds.n_tiles()).collect();
    tiles.shuffle(&mut rng);
    tiles.truncate(args.sample_tiles.max(1));
    if !args.tiles.is_empty() {
        if let Some(&t) = args.tiles.iter().find(|&&t| t >= ds.n_tiles()) {
            anyhow::bail!("--tiles: tile {t} does not exist ({} has {} tiles)", dataset, ds.n_tiles());
        }
        tiles.clone_from(&args.tiles);
    }
    let mut decoder = Decoder::new(DecodeOptions { verify_crc: !args.no_crc, threads });
    let mut out = DecodedTile::<f32>::default();
    let (mut fetch, mut decode, mut bytes, mut nnz, mut cells) = (Duration::ZERO, Duration::ZERO, 0u64, 0u64, 0u64);
    // One tile untimed first: the first decode into fresh memory pays a page fault per page (and the pool's
    // start), which would be charged to whichever tile came first.
    // Decode errors name the tile and its object, as the reader's do.
    let corrupt = |t: usize, e| {
        let url = format!("{}/{}", ds.url().trim_end_matches('/'), dct_format::objects::tile_path(t));
        anyhow::Error::new(DatasetError::Decode { tile: t, url, cause: e })
    };
    decoder.decode_into(&ds.fetch_tile_bytes(tiles[0])?, &mut out).map_err(|e| corrupt(tiles[0], e))?;
    for &t in &tiles {
        let start = Instant::now();
        let blob = ds.fetch_tile_bytes(t)?;
        fetch += start.elapsed();
        let start = Instant::now();
        decoder.decode_into(&blob, &mut out).map_err(|e| corrupt(t, e))?;
        decode += start.elapsed();
        bytes += blob.len() as u64;
        nnz += out.nnz() as u64;
        cells += out.n_rows() as u64;
    }
    let n = tiles.len() as f64;
    let per_tile_fetch = fetch.as_secs_f64() / n;
    let per_tile_decode = decode.as_secs_f64() / n;
    let per_tile_reader = through_the_reader(&dataset, &options, &tiles)?;

    // Part 2: batches in the order of the pattern, the tiles of the batches ahead prefetched.
    ds.reset_stats();
    let mut batch = Batch::<f32>::default();
    let mut read_nnz = 0u64;
    let mut n_read = 0u64;
    let mut batch_cells: Vec<u64> = Vec::new();
    // Per batch: when it was ready (seconds from the start), how long it took, its cells (a report's timeline).
    let mut timeline: Vec<[f64; 3]> = Vec::new();
    let start = Instant::now();
    let mark = |cells: usize, timeline: &mut Vec<[f64; 3]>| {
        let now = start.elapsed().as_secs_f64();
        let since = timeline.last().map_or(0.0, |l| l[0]);
        timeline.push([now, now - since, cells as f64]);
    };
    match pattern {
        Pattern::Global => {
            let mut every: Vec<u64> = (0..ds.n_cells()).collect();
            every.shuffle(&mut rng);
            every.truncate(usize::try_from(args.max_cells).unwrap_or(usize::MAX));
            for chunk in every.chunks(args.batch_size.max(1)) {
                ds.get_batch_into(chunk, &mut batch)?;
                mark(chunk.len(), &mut timeline);
                read_nnz += batch.nnz() as u64;
                n_read += chunk.len() as u64;
                std::hint::black_box(&batch);
            }
        }
        _ => {
            let opts = EpochOptions {
                shuffle: pattern != Pattern::Cells,
                shuffle_tiles: pattern.window(),
                seed: args.seed,
                ..EpochOptions::new(args.batch_size.max(1))
            };
            let mut plan = EpochPlan::new(&ds.manifest().tile_cells, &opts, 0)?;
            for j in 0..plan.n_batches() {
                if n_read >= args.max_cells {
                    break;
                }
                if args.prefetch > 0 {
                    ds.prefetch(&plan.tiles_ahead(j, pattern.window() + args.prefetch))?;
                }
                plan.batch_into(j, &mut batch_cells)?;
                batch_cells.truncate((args.max_cells - n_read) as usize);
                ds.get_batch_into(&batch_cells, &mut batch)?;
                mark(batch_cells.len(), &mut timeline);
                read_nnz += batch.nnz() as u64;
                n_read += batch_cells.len() as u64;
                std::hint::black_box(&batch);
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = ds.stats();
    let cells_per_s = n_read as f64 / elapsed;
    if args.json {
        print_json(&json!({
            "dataset": dataset, "threads": threads, "tiles_sampled": tiles.len(),
            "tile_fetch_seconds": per_tile_fetch, "tile_decode_seconds": per_tile_decode,
            "fetch_bytes_per_second": bytes as f64 / fetch.as_secs_f64(),
            "decode_nnz_per_second": nnz as f64 / decode.as_secs_f64(),
            "decode_cells_per_second": cells as f64 / decode.as_secs_f64(),
            "tile_reader_seconds": per_tile_reader.total, "tile_reader_fetch_seconds": per_tile_reader.fetch,
            "tile_reader_planes_seconds": per_tile_reader.planes, "tile_reader_rows_seconds": per_tile_reader.rows,
            "tile_reader_checks_seconds": per_tile_reader.checks,
            "tile_reader_handoff_seconds": per_tile_reader.hand_offs(),
            "tile_reader_bookkeeping_seconds": per_tile_reader.bookkeeping(),
            "pattern": args.pattern, "batch_size": args.batch_size, "batch_cells": n_read, "batch_seconds": elapsed,
            "batch_cells_per_second": cells_per_s, "batch_nnz_per_second": read_nnz as f64 / elapsed,
            "stall_seconds": stats.stall_time.as_secs_f64(), "tiles_fetched": stats.tiles_fetched,
            "tiles_decoded": stats.tiles_decoded, "batch_timeline": timeline,
        }))?;
    } else {
        outln!("dataset {}  ({threads} decode threads)", dataset);
        outln!("single tiles ({} sampled, {} each on average):", tiles.len(), human_bytes(bytes / tiles.len() as u64));
        outln!(
            "  fetch   {:8.2} ms per tile   {:>10}/s",
            per_tile_fetch * 1e3,
            human_bytes((bytes as f64 / fetch.as_secs_f64()) as u64)
        );
        outln!(
            "  decode  {:8.2} ms per tile   {:>10.1} M nonzeros/s   {:>10.0} cells/s",
            per_tile_decode * 1e3,
            nnz as f64 / decode.as_secs_f64() / 1e6,
            cells as f64 / decode.as_secs_f64()
        );
        let r = &per_tile_reader;
        outln!(
            "  reader  {:8.2} ms per tile   {:>10.3} x fetch + decode (every row of the tile, through get_batch): \
             fetch {:.2} + checks {:.2} + planes {:.2} + rows {:.2} + hand-offs {:.2} + bookkeeping {:.2} ms",
            r.total * 1e3,
            r.total / (per_tile_fetch + per_tile_decode),
            r.fetch * 1e3,
            r.checks * 1e3,
            r.planes * 1e3,
            r.rows * 1e3,
            r.hand_offs() * 1e3,
            r.bookkeeping() * 1e3
        );
        outln!(
            "batches of {} in {} order ({n_read} cells; {}, prefetch {}):",
            args.batch_size,
            args.pattern,
            pattern.describe(),
            args.prefetch
        );
        outln!(
            "  {cells_per_s:>10.0} cells/s   {:>8.1} M nonzeros/s   {elapsed:.2} s",
            read_nnz as f64 / elapsed / 1e6
        );
        outln!(
            "  stalled {:.2} s waiting for tiles; {} tiles fetched ({}), {} decoded",
            stats.stall_time.as_secs_f64(),
            stats.tiles_fetched,
            human_bytes(stats.bytes_fetched),
            stats.tiles_decoded
        );
    }
    Ok(0)
}

/// Where the time of reading whole tiles through the reader goes, in seconds per tile.
struct ReaderTile {
    /// The whole `get_batch` of every row of a tile not in the cache.
    total: f64,
    /// The reader's GET (its `fetch_time`).
    fetch: f64,
    /// Decompressing into planes (its `decode_time`).
    planes: f64,
    /// Checking the fetched tile: header, structure, CRC (its `check_time`).
    checks: f64,
    /// Filling the batch from the cached planes: the same `get_batch` again, the tile now in the cache.
    rows: f64,
    /// The caller's wait for the load (its `stall_time`): the fetch, checks and planes, and the rest of the load.
    wait: f64,
}

impl ReaderTile {
    /// The caller's wait beyond the load's fetch, checks and planes: the hops between the caller, the fetch
    /// runtime and the decode threads, releasing the fetched bytes (unmapping them, for a local file) and the
    /// load's cache update.
    fn hand_offs(&self) -> f64 {
        self.wait - self.fetch - self.checks - self.planes
    }

    /// What a cold read does outside its wait that a warm one does not: starting the load, the cache's
    /// bookkeeping, recycling the evicted tile.
    fn bookkeeping(&self) -> f64 {
        self.total - self.wait - self.rows
    }
}

/// Reads every row of each of `tiles` through a reader of its own that keeps one decoded tile and prefetches
/// nothing, twice: once from the store, once from the cache. A tile repeated back to back is counted once. One
/// other tile is read first, untimed, so that no timed read pays for the first touch of the batch's memory.
fn through_the_reader(dataset: &str, options: &ReadOptions, tiles: &[usize]) -> anyhow::Result<ReaderTile> {
    let reader = Dataset::open(dataset, ReadOptions { max_cached_tiles: 1, max_prefetch_tiles: 1, ..options.clone() })?;
    let mut starts = vec![0u64];
    for &c in &reader.manifest().tile_cells {
        starts.push(starts.last().expect("not empty") + c);
    }
    let mut batch = Batch::<f32>::default();
    let (mut cells, mut cold, mut warm, mut counted) = (Vec::new(), Duration::ZERO, Duration::ZERO, 0u32);
    // The largest tile but the first timed one: no timed read then grows the batch into fresh memory.
    let tile_nnz = &reader.manifest().tile_nnz;
    let warm_up = (0..tile_nnz.len()).filter(|&t| t != tiles[0]).max_by_key(|&t| tile_nnz[t]);
    if let Some(warm_up) = warm_up {
        cells.extend(starts[warm_up]..starts[warm_up + 1]);
        reader.get_batch_into(&cells, &mut batch)?;
    }
    reader.reset_stats();
    for (i, &t) in tiles.iter().enumerate() {
        if i > 0 && tiles[i - 1] == t {
            continue;
        }
        cells.clear();
        cells.extend(starts[t]..starts[t + 1]);
        for took in [&mut cold, &mut warm] {
            let start = Instant::now();
            reader.get_batch_into(&cells, &mut batch)?;
            *took += start.elapsed();
            std::hint::black_box(&batch);
        }
        counted += 1;
    }
    let stats = reader.stats();
    let per = |d: Duration| d.as_secs_f64() / f64::from(counted.max(1));
    Ok(ReaderTile {
        total: per(cold),
        fetch: per(stats.fetch_time),
        planes: per(stats.decode_time),
        checks: per(stats.check_time),
        rows: per(warm),
        wait: per(stats.stall_time),
    })
}

/// The order of the batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Cells,
    Window(usize),
    Global,
}

impl Pattern {
    fn parse(s: &str) -> anyhow::Result<Pattern> {
        Ok(match s {
            "cells" => Pattern::Cells,
            "tiles" => Pattern::Window(1),
            "global" => Pattern::Global,
            _ => match s.strip_prefix("window:").and_then(|k| k.parse::<usize>().ok()) {
                Some(k) if k >= 1 => Pattern::Window(k),
                _ => usage!("--pattern {s}: give cells, tiles, window:K (K >= 1) or global"),
            },
        })
    }

    /// Tiles decoded at once.
    fn window(self) -> usize {
        match self {
            Pattern::Window(k) => k,
            Pattern::Cells | Pattern::Global => 1,
        }
    }

    fn describe(self) -> String {
        match self {
            Pattern::Cells => "cells in order".into(),
            Pattern::Window(1) => "tiles in random order, cells shuffled within each".into(),
            Pattern::Window(k) => format!("tiles in random order, cells shuffled within windows of {k} tiles"),
            Pattern::Global => "every cell in random order".into(),
        }
    }
}
