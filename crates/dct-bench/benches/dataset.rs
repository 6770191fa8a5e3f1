//! get_batch throughput: 5,000-cell batches over a 20-tile synthetic dataset (10,000-cell tiles), tiles
//! visited in shuffled order and cells shuffled within each tile; from local disk with 1 and 2 decode threads, and
//! through dct-store's throttle layer (50 ms per request, ~150 MB/s per request) with and without prefetch.
//!
//! `cargo bench -p dct-bench --bench dataset` (env: DCT_BENCH_TILES, DCT_BENCH_TILE_SIZE, DCT_BENCH_ROUNDS;
//! DCT_BENCH_ONLY=text runs only the scenarios whose name contains it, DCT_BENCH_TRACE=1 prints every batch).
//! Every scenario opens the dataset afresh (cold cache) and replays the same epoch (the "2nd epoch" ones measure
//! the second epoch on their dataset, as every epoch of a training run after the first: the tiles are fetched and
//! decoded again, but threads and buffers exist already); the scenarios are interleaved round by round so that
//! machine noise hits them alike, and the medians are reported.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use dct_bench::{path_str, shuffled_epoch, synthetic_dataset};
use dct_dataset::{Batch, Dataset, ReadOptions, SparseRows};
use dct_store::testing::{Throttle, throttled};
use dct_store::{Store, StoreOptions};

const BATCH: usize = 5000;
const PREFETCH: usize = 4;

struct Scenario {
    name: &'static str,
    threads: usize,
    throttled: bool,
    prefetch: bool,
    /// Measure a second epoch on the same `Dataset` (tile buffers already allocated, as in every epoch of a
    /// training run after the first) instead of the first.
    warm: bool,
}

struct Run {
    seconds: f64,
    stall: Duration,
    nnz: u64,
    /// Minor page faults of the whole process during the epoch (fresh memory touched for the first time).
    faults: u64,
}

/// The process's minor page faults so far (`/proc/self/stat`, field 10; 0 where there is no such file).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after.split_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn open(dir: &std::path::Path, s: &Scenario) -> Dataset {
    let options = ReadOptions {
        decode_threads: s.threads,
        // The window `epoch` keeps prefetched: the current batch's tile and the next PREFETCH (prefetched tiles
        // hold a permit until they are decoded).
        max_prefetch_tiles: PREFETCH + 1,
        // Decoded tiles: the one being read and one decoded ahead (prefetched tiles waiting to be decoded do not
        // count; the tiles of an epoch are each read by consecutive batches, so a larger cache would only hold
        // tiles that are not read again).
        max_cached_tiles: 2,
        ..ReadOptions::default()
    };
    if s.throttled {
        // 50 ms per GET plus 1 s per 150 MB of body, per request, over the local files (read, not mapped).
        let throttle = Throttle {
            latency: Duration::from_millis(50),
            bytes_per_second: NonZeroU32::new(150_000_000),
            ..Throttle::default()
        };
        let local = Store::from_url(path_str(dir), &StoreOptions::default()).expect("local store");
        let store = throttled(&local, throttle);
        Dataset::open_store(store, options).expect("open throttled")
    } else {
        Dataset::open(path_str(dir), options).expect("open local")
    }
}

/// One epoch of batches; with `prefetch`, the tiles of the current batch and the next `PREFETCH` tiles are kept
/// in flight, running on into `next_order` (the following epoch's tiles, as a training loop that knows its next
/// epoch does) near the end.
fn epoch(ds: &Dataset, cells: &[u64], tile_of: &[usize], order: &[usize], prefetch: bool, next_order: &[usize]) -> Run {
    let mut batch = Batch::<f32>::default();
    let mut nnz = 0u64;
    let faults = minor_faults();
    let start = Instant::now();
    let ahead: Vec<usize> = order.iter().chain(next_order).copied().collect();
    let trace = trace();
    let mut next = 0; // next position in `ahead` not yet prefetched
    for (b, chunk) in cells.chunks(BATCH).enumerate() {
        if prefetch {
            let pos = order.iter().position(|&t| t == tile_of[b * BATCH]).expect("tile in order");
            let want_end = (pos + 1 + PREFETCH).min(ahead.len());
            if next < want_end {
                ds.prefetch(&ahead[next.max(pos)..want_end]).expect("prefetch");
                next = want_end;
            }
        }
        let (t0, stall0, dec0) = (start.elapsed(), ds.stats().stall_time, ds.stats().decode_time);
        ds.get_batch_into(chunk, &mut batch).expect("get_batch");
        nnz += batch.nnz() as u64;
        if trace {
            let stall = ds.stats().stall_time - stall0;
            let took = start.elapsed() - t0;
            let st = ds.stats();
            eprintln!(
                "  batch {b:>3} (tile {:>2}) at {t0:>9.1?}: {took:>8.1?}, stalled {stall:>8.1?}; {} tiles decoded, \
                 {:.1?} of decoding during the batch",
                tile_of[b * BATCH],
                st.tiles_decoded,
                st.decode_time - dec0
            );
        }
        std::hint::black_box(&batch);
    }
    let seconds = start.elapsed().as_secs_f64();
    Run { seconds, stall: ds.stats().stall_time, nnz, faults: minor_faults() - faults }
}

/// `DCT_BENCH_TRACE=1`: print every batch's start, duration and stall.
fn trace() -> bool {
    std::env::var_os("DCT_BENCH_TRACE").is_some()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // Only `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it.
        println!("benchmark skipped: run it with `cargo bench -p dct-bench`");
        return;
    }
    let tiles = env("DCT_BENCH_TILES", 20);
    let tile_size = env("DCT_BENCH_TILE_SIZE", 10_000);
    let rounds = env("DCT_BENCH_ROUNDS", 3) as usize;
    let dir = synthetic_dataset(tiles, tile_size).expect("benchmark dataset");
    let probe = Dataset::open(path_str(&dir), ReadOptions::default()).expect("open");
    let limits: Vec<(u64, u64)> = (0..probe.n_tiles()).map(|t| probe.tile_bounds(t).expect("tile")).collect();
    let bytes: u64 = probe.manifest().tile_bytes.iter().sum();
    let nnz = probe.manifest().nnz();
    drop(probe);
    let (cells, tile_of) = shuffled_epoch(&limits, 1);
    let mut order: Vec<usize> = Vec::new();
    for &t in &tile_of {
        if order.last() != Some(&t) {
            order.push(t);
        }
    }
    println!(
        "dataset: {} cells x 30000 genes, {tiles} tiles of {tile_size}, {nnz} nonzeros, {:.1} MB ({:.3} bytes/nnz)",
        cells.len(),
        bytes as f64 / 1e6,
        bytes as f64 / nnz as f64
    );
    let scenarios = [
        Scenario { name: "local, 1 thread, prefetch", threads: 1, throttled: false, prefetch: true, warm: false },
        Scenario { name: "local, 2 threads, prefetch", threads: 2, throttled: false, prefetch: true, warm: false },
        Scenario { name: "local, 2 threads, no prefetch", threads: 2, throttled: false, prefetch: false, warm: false },
        Scenario {
            name: "throttled, 2 threads, no prefetch",
            threads: 2,
            throttled: true,
            prefetch: false,
            warm: false,
        },
        Scenario { name: "throttled, 2 threads, prefetch 4", threads: 2, throttled: true, prefetch: true, warm: false },
        Scenario {
            name: "local, 2 threads, prefetch, 2nd epoch",
            threads: 2,
            throttled: false,
            prefetch: true,
            warm: true,
        },
        Scenario {
            name: "throttled, 2 threads, prefetch 4, 2nd epoch",
            threads: 2,
            throttled: true,
            prefetch: true,
            warm: true,
        },
    ];
    let mut results: Vec<Vec<Run>> = scenarios.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (s, out) in scenarios.iter().zip(&mut results) {
            // `DCT_BENCH_ONLY=text`: run only the scenarios whose name contains it (the ratios then mean nothing).
            if std::env::var("DCT_BENCH_ONLY").is_ok_and(|only| !s.name.contains(&only)) {
                out.push(Run { seconds: f64::NAN, stall: Duration::ZERO, nnz: 0, faults: 0 });
                continue;
            }
            let ds = open(&dir, s);
            if s.warm {
                // The first epoch runs on into the second, whose first tiles it prefetches.
                epoch(&ds, &cells, &tile_of, &order, s.prefetch, &order);
            }
            let stall_before = ds.stats().stall_time;
            let mut run = epoch(&ds, &cells, &tile_of, &order, s.prefetch, &[]);
            run.stall -= stall_before;
            eprintln!(
                "round {round}: {:<36} {:>9.0} cells/s, {:>8} page faults",
                s.name,
                cells.len() as f64 / run.seconds,
                run.faults
            );
            out.push(run);
        }
    }
    println!(
        "\n{:<36} {:>12} {:>14} {:>12} {:>12}",
        "scenario (median of rounds)", "cells/s", "M nonzeros/s", "stall s", "page faults"
    );
    let mut rates = Vec::new();
    for (s, runs) in scenarios.iter().zip(&results) {
        let secs = median(runs.iter().map(|r| r.seconds).collect());
        let stall = median(runs.iter().map(|r| r.stall.as_secs_f64()).collect());
        let faults = median(runs.iter().map(|r| r.faults as f64).collect());
        let rate = cells.len() as f64 / secs;
        rates.push(rate);
        println!(
            "{:<36} {:>12.0} {:>14.1} {:>12.2} {:>12.0}",
            s.name,
            rate,
            runs[0].nnz as f64 / secs / 1e6,
            stall,
            faults
        );
    }
    println!("\nratios (same run):");
    println!("  local 2 threads / 1 thread                     {:.2}x", rates[1] / rates[0]);
    println!("  local 2 threads, first epoch: {:.0} cells/s (target >= 120,000)", rates[1]);
    println!("  local 2 threads, second epoch: {:.0} cells/s (target >= 120,000)", rates[5]);
    println!("  throttled with prefetch / local, first epoch   {:.2} (target >= 0.80)", rates[4] / rates[1]);
    println!("  throttled with prefetch / local, second epoch  {:.2} (target >= 0.80)", rates[6] / rates[5]);
    println!("  throttled with prefetch / without              {:.2}x", rates[4] / rates[3]);
    println!("  local 2 threads, second epoch / first          {:.2}x", rates[5] / rates[1]);
}
