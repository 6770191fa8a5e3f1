//! Obs benchmarks (ignored by default; numbers in docs/BENCHMARKS.md, "Obs"):
//!
//! ```text
//! cargo test -p dct-convert --release --test convert obs_bench:: -- --ignored --nocapture --test-threads 1
//! ```
//!
//! * `take` of 5,000 random cells from three localized columns (categorical, float, integer) of a 1M-cell obs.
//! * Localizing those three columns from an object store 50 ms away (a throttled in-memory store): time,
//!   requests and bytes read, against the bytes the columns occupy in the shards.
//!
//! Only printed, never asserted against wall-clock times.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Float32Array, Int64Array};
use dct_obs::{ColumnData, Obs, ObsManifest, ObsOptions, ObsSchemaBuilder, ObsWriteOptions, ObsWriter, TileObs};
use dct_store::Store;
use dct_store::testing::{Throttle, counted, throttled};

const N_CELLS: u64 = 1_000_000;
const TILE: u64 = 10_000;
const TAKE: usize = 5_000;
const COLUMNS: [&str; 3] = ["cell_type", "pct_mito", "n_counts"];

/// splitmix64: a small deterministic generator (no dependency needed for a benchmark's data).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Writes a 1M-cell obs (tiles of 10,000 cells, default 1000 tiles per shard) with a 60-label categorical
/// (some missing), a float32 and an int64 column, plus cell names, to `store`; returns the manifest facts.
async fn write_obs(store: Store) -> ObsManifest {
    let tile_cells: Vec<u64> = (0..N_CELLS / TILE).map(|_| TILE).collect();
    let labels: Arc<[String]> = (0..60).map(|i| format!("cell type {i}")).collect::<Vec<_>>().into();
    let mut b = ObsSchemaBuilder::new();
    b.add_plain("obs_names", dct_obs::ArrowType::String).unwrap();
    b.add_category("cell_type", &labels).unwrap();
    b.add_plain("pct_mito", dct_obs::ArrowType::Float).unwrap();
    b.add_plain("n_counts", dct_obs::ArrowType::Int64).unwrap();
    let schema = b.finish();
    let mut w = ObsWriter::new(store, schema, &tile_cells, &ObsWriteOptions::default()).unwrap();
    let mut rng = Rng(7);
    for (t, &n) in tile_cells.iter().enumerate() {
        let n = n as usize;
        let first = t * TILE as usize;
        let names: ArrayRef =
            Arc::new(arrow_array::StringArray::from_iter_values((first..first + n).map(|c| format!("AAAC{c:010}-1"))));
        // Skewed labels (cell types are), 2% missing.
        let codes: Vec<i32> =
            (0..n).map(|_| if rng.below(50) == 0 { -1 } else { (rng.below(60) * rng.below(60) / 60) as i32 }).collect();
        let mito: ArrayRef = Arc::new(Float32Array::from_iter_values((0..n).map(|_| (rng.below(4000) as f32) / 100.0)));
        let counts: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n).map(|_| 500 + rng.below(20_000) as i64)));
        let tile = TileObs::new()
            .with("obs_names", names)
            .with("cell_type", ColumnData::category(codes, labels.clone()))
            .with("pct_mito", mito)
            .with("n_counts", counts);
        w.write_tile(&tile).await.unwrap();
    }
    let summary = w.finish().await.unwrap();
    summary.manifest(&tile_cells)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
async fn bench_localize_over_a_50ms_store_and_take_5000_cells() {
    let memory = Store::memory("obs-bench");
    let started = Instant::now();
    let manifest = write_obs(memory.clone()).await;
    println!(
        "wrote a {N_CELLS}-cell obs ({} tiles, {} shard(s), {} bytes) in {:.2} s",
        manifest.n_tiles(),
        manifest.n_shards(),
        manifest.fields.shard_bytes.iter().sum::<u64>(),
        started.elapsed().as_secs_f64()
    );

    let latency = Duration::from_millis(50);
    let (store, counter) = counted(&throttled(&memory, Throttle { latency, ..Default::default() }));
    for concurrency in [16usize, 64] {
        let cache = tempfile::tempdir().unwrap();
        let opts = ObsOptions { cache_dir: Some(cache.path().into()), concurrency, ..Default::default() };
        counter.reset();
        let t0 = Instant::now();
        let obs = Obs::open(store.clone(), manifest.clone(), opts).await.unwrap();
        let opened = t0.elapsed();
        let sizes = obs.column_sizes().await.unwrap();
        if concurrency == 16 {
            for c in &sizes {
                println!(
                    "  column {:10} stored {:>9} bytes = {:.2} bytes per cell = {:.1} GB per 100M cells",
                    c.name,
                    c.compressed_bytes,
                    c.compressed_bytes as f64 / N_CELLS as f64,
                    c.compressed_bytes as f64 * 1e8 / N_CELLS as f64 / 1e9
                );
            }
        }
        counter.reset();
        let t1 = Instant::now();
        let report = obs.localize(&COLUMNS).await.unwrap();
        let localized = t1.elapsed();
        let counts = counter.counts();
        assert_eq!(report.fetched.len(), 3);
        let stored: u64 = sizes.iter().filter(|s| COLUMNS.contains(&s.name.as_str())).map(|s| s.compressed_bytes).sum();
        let all: u64 = manifest.fields.shard_bytes.iter().sum();
        println!(
            "localize 3 columns, {latency:?} per GET, concurrency {concurrency}: open {:.0} ms, localize {:.0} ms, {} GETs, \
             {} bytes read = {:.2} x the columns' {} stored bytes ({:.1}% of the {} shard bytes)",
            opened.as_secs_f64() * 1e3,
            localized.as_secs_f64() * 1e3,
            counts.gets,
            counts.get_bytes,
            counts.get_bytes as f64 / stored as f64,
            stored,
            100.0 * counts.get_bytes as f64 / all as f64,
            all
        );
        // Again from the cache: nothing is read from the store.
        let obs2 = Obs::open(
            store.clone(),
            manifest.clone(),
            ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() },
        )
        .await
        .unwrap();
        counter.reset();
        let t2 = Instant::now();
        let report = obs2.localize(&COLUMNS).await.unwrap();
        println!(
            "  second process on the node: localize from the cache in {:.2} ms, {} GETs",
            t2.elapsed().as_secs_f64() * 1e3,
            counter.counts().gets
        );
        assert_eq!(report.cached.len(), 3);

        if concurrency == 16 {
            bench_take(&obs2);
        }
    }
}

fn bench_take(obs: &Obs) {
    let mut rng = Rng(42);
    let sets: Vec<Vec<u64>> = (0..64).map(|_| (0..TAKE).map(|_| rng.below(N_CELLS)).collect()).collect();
    // Warm up (page in the mapped files).
    for cells in &sets {
        std::hint::black_box(obs.take(cells, &COLUMNS).unwrap());
    }
    let mut times = Vec::new();
    for round in 0..2000 {
        let cells = &sets[round % sets.len()];
        let t = Instant::now();
        let batch = obs.take(cells, &COLUMNS).unwrap();
        times.push(t.elapsed());
        assert_eq!(batch.num_rows(), TAKE);
        std::hint::black_box(batch);
    }
    times.sort_unstable();
    println!(
        "take {TAKE} random cells x 3 columns (int8 codes, float32, int64) of {N_CELLS}: median {:.1} us, p90 {:.1} us, \
         p99 {:.1} us (target 200 us)",
        percentile(&times, 0.5).as_secs_f64() * 1e6,
        percentile(&times, 0.9).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6
    );
    for (i, col) in COLUMNS.iter().enumerate() {
        let mut t1 = Vec::new();
        for round in 0..500 {
            let t = Instant::now();
            std::hint::black_box(obs.take_column(&sets[round % sets.len()], col).unwrap());
            t1.push(t.elapsed());
        }
        t1.sort_unstable();
        println!("  {} alone: median {:.1} us", COLUMNS[i], percentile(&t1, 0.5).as_secs_f64() * 1e6);
    }
}
