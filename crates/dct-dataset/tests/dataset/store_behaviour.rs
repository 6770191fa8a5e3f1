//! Requests, caching, prefetching, transient failures, corruption and latency, measured with instrumented and
//! throttled in-memory stores.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{Truth, append_all, assert_batch, create_in, open_in, random_batches, random_truth};
use dct_dataset::{Category, Dataset, ReadOptions, Store, VerifyOptions, WriterOptions};
use dct_store::testing::{Counter, Throttle, counted, throttled};

const N_GENES: u64 = 200;
const TILE: u64 = 50;

/// A dataset of `n_cells` cells in tiles of 50, written into a fresh in-memory store under `ds/`.
fn dataset(seed: u64, n_cells: usize) -> (Store, Truth) {
    let truth = random_truth(seed, n_cells, N_GENES, 0.05, false);
    let mem = Store::memory("test");
    let opts =
        WriterOptions { tile_size: TILE, n_chunks: 2, zstd_level: 3, encode_threads: 2, ..WriterOptions::new(N_GENES) };
    let mut w = create_in(mem.clone(), "ds", opts).unwrap();
    append_all(&mut w, &truth, seed + 1, 120);
    w.set_var_names((0..N_GENES).map(|g| format!("g{g}")).collect()).unwrap();
    w.finish().unwrap();
    (mem, truth)
}

fn instrumented(mem: &Store) -> (Store, Arc<Counter>) {
    counted(mem)
}

fn tile_cells(ds: &Dataset, t: usize) -> Vec<u64> {
    let (lo, hi) = ds.tile_bounds(t).unwrap();
    (lo..hi).collect()
}

fn tile_name(t: usize) -> String {
    format!("tiles/tile_{t:06}.dct")
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

#[test]
fn one_get_per_tile_and_cached_tiles_are_not_fetched_again() {
    let (mem, truth) = dataset(1, 420);
    let (store, counter) = instrumented(&mem);
    let ds = open_in(store.clone(), "ds", ReadOptions { max_cached_tiles: 16, ..ReadOptions::default() }).unwrap();
    assert_eq!(counter.counts().gets, 1, "open reads the manifest only");
    let n_tiles = ds.n_tiles();
    assert_eq!(n_tiles, 9);

    let all: Vec<u64> = (0..truth.n_cells()).rev().collect();
    assert_batch(&ds.get_batch_as::<u32>(&all).unwrap(), &truth, &all);
    let counts = counter.counts();
    assert_eq!(counts.gets, 1 + n_tiles as u64);
    for t in 0..n_tiles {
        assert_eq!(counts.gets_of(&tile_name(t)), 1, "tile {t}");
    }
    assert_eq!(counts.get_bytes, ds.manifest().tile_bytes.iter().sum::<u64>() + manifest_len(&mem));
    let stats = ds.stats();
    assert_eq!(stats.tiles_fetched, n_tiles as u64);
    assert_eq!(stats.bytes_fetched, ds.manifest().tile_bytes.iter().sum::<u64>());
    assert_eq!(stats.cache_misses, n_tiles as u64);
    assert_eq!(stats.tiles_decoded, n_tiles as u64);

    // Everything again, in other batches: no request at all.
    for batch in random_batches(2, truth.n_cells(), 30, 100) {
        assert_batch(&ds.get_batch_as::<u32>(&batch).unwrap(), &truth, &batch);
        assert_eq!(ds.batch_nnz(&batch).unwrap(), truth.nnz_of(&batch));
    }
    assert_eq!(counter.counts().gets, 1 + n_tiles as u64);
    assert!(ds.stats().cache_hits > 0);
}

fn manifest_len(mem: &Store) -> u64 {
    run(mem.size("ds/manifest.json")).unwrap()
}

#[test]
fn lru_evicts_the_least_recently_used_tile() {
    let (mem, truth) = dataset(3, 200);
    let (store, counter) = instrumented(&mem);
    let ds = open_in(store.clone(), "ds", ReadOptions { max_cached_tiles: 2, ..ReadOptions::default() }).unwrap();
    for t in [0, 1, 0, 2, 0, 1] {
        let cells = tile_cells(&ds, t);
        assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    }
    let c = counter.counts();
    // 0 miss, 1 miss, 0 hit, 2 miss (evicts 1), 0 hit, 1 miss (evicts 2).
    assert_eq!((c.gets_of(&tile_name(0)), c.gets_of(&tile_name(1)), c.gets_of(&tile_name(2))), (1, 2, 1));

    // Without a cache every read fetches.
    let (store, counter) = instrumented(&mem);
    let ds = open_in(store.clone(), "ds", ReadOptions { max_cached_tiles: 0, ..ReadOptions::default() }).unwrap();
    let cells = tile_cells(&ds, 3);
    ds.get_batch(&cells).unwrap();
    ds.get_batch(&cells).unwrap();
    assert_eq!(counter.counts().gets_of(&tile_name(3)), 2);
}

#[test]
fn a_reopened_reader_fetches_no_manifest_and_keeps_its_own_cache() {
    let (mem, truth) = dataset(5, 200);
    let (store, counter) = instrumented(&mem);
    let first = open_in(store.clone(), "ds", ReadOptions { max_cached_tiles: 0, ..ReadOptions::default() }).unwrap();
    let cells = tile_cells(&first, 1);
    first.get_batch(&cells).unwrap();
    assert_eq!((counter.counts().gets, counter.counts().gets_of(&tile_name(1))), (2, 1));

    let ds = first.reopened(ReadOptions { max_cached_tiles: 2, ..ReadOptions::default() }).unwrap();
    assert_eq!(counter.counts().gets, 2, "reopening sends no request");
    assert_eq!(ds.manifest(), first.manifest());
    drop(first);
    // Its own cache, of the new size: tile 1 is fetched once more, then kept, as are two tiles at once.
    for t in [1, 1, 2, 1, 2] {
        let cells = tile_cells(&ds, t);
        assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    }
    let c = counter.counts();
    assert_eq!((c.gets_of(&tile_name(1)), c.gets_of(&tile_name(2))), (2, 1));
    assert_eq!(ds.stats().tiles_fetched, 2);
}

#[test]
fn prefetched_tiles_are_fetched_once_and_batch_nnz_reuses_fetches() {
    let (mem, truth) = dataset(4, 400);
    let (store, counter) = instrumented(&mem);
    let ds = open_in(store.clone(), "ds", ReadOptions { max_prefetch_tiles: 3, ..ReadOptions::default() }).unwrap();
    let n = ds.n_tiles();
    ds.prefetch(&(0..n).collect::<Vec<_>>()).unwrap();
    ds.prefetch(&[0, 1]).unwrap(); // already under way: nothing new
    let all: Vec<u64> = (0..truth.n_cells()).collect();
    assert_batch(&ds.get_batch_as::<u32>(&all).unwrap(), &truth, &all);
    let c = counter.counts();
    for t in 0..n {
        assert_eq!(c.gets_of(&tile_name(t)), 1, "tile {t}");
    }
    let s = ds.stats();
    assert_eq!(s.prefetched, n as u64);
    assert_eq!(s.cache_misses, 0);
    assert_eq!(s.inflight_joins + s.cache_hits, n as u64);

    // batch_nnz loads tiles without decoding; a following read decodes them without fetching again.
    let (store, counter) = instrumented(&mem);
    let ds = open_in(store.clone(), "ds", ReadOptions::default()).unwrap();
    let cells = [5, 390, 5, 120];
    assert_eq!(ds.batch_nnz(&cells).unwrap(), truth.nnz_of(&cells));
    assert_eq!(ds.stats().tiles_decoded, 0);
    assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    assert_eq!(ds.stats().tiles_decoded, 3);
    assert_eq!(counter.counts().gets, 1 + 3);
    ds.prefetch_cells(&[0, 60]).unwrap();
}

/// Without retries, a transient failure fails the call, naming the object, and is not cached.
#[test]
fn a_transient_failure_is_reported_and_not_cached() {
    let (mem, truth) = dataset(5, 200);
    let (store, counter) = instrumented(&mem);
    let no_retry = ReadOptions {
        store: dct_dataset::StoreOptions { retry: dct_dataset::RetryPolicy::never(), ..Default::default() },
        ..ReadOptions::default()
    };
    let ds = open_in(store.clone(), "ds", no_retry).unwrap();
    counter.fail_next_gets(&tile_name(1), 1);
    let cells = [0, 60, 199];
    let e = ds.get_batch(&cells).unwrap_err();
    assert_eq!(e.category(), Category::Io, "{e}");
    assert!(e.to_string().contains(&tile_name(1)), "the message names the object: {e}");
    assert_eq!(ds.stats().failed_loads, 1);
    // The retry succeeds: tile 1 is fetched again, the tiles that did load are not.
    assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    let c = counter.counts();
    assert_eq!((c.gets_of(&tile_name(0)), c.gets_of(&tile_name(1)), c.gets_of(&tile_name(3))), (1, 2, 1));

    // The same for side files.
    counter.fail_next_gets("var_names.txt", 1);
    assert_eq!(ds.var_names().unwrap_err().category(), Category::Io);
    assert_eq!(ds.var_names().unwrap().unwrap().len(), N_GENES as usize);
}

/// With the default retries, a transient failure is retried within the call: one more GET, and the batch is
/// the truth.
#[test]
fn a_transient_failure_is_retried() {
    let (mem, truth) = dataset(5, 200);
    let (store, counter) = instrumented(&mem);
    let ds = open_in(store.clone(), "ds", ReadOptions::default()).unwrap();
    counter.fail_next_gets(&tile_name(1), 2);
    let cells = [0, 60, 199];
    assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    let c = counter.counts();
    assert_eq!((c.gets_of(&tile_name(0)), c.gets_of(&tile_name(1)), c.gets_of(&tile_name(3))), (1, 3, 1));
    assert_eq!(ds.stats().failed_loads, 0);
}

#[test]
fn concurrent_readers_share_tiles() {
    let (mem, truth) = dataset(6, 600);
    let (store, counter) = instrumented(&mem);
    let ds =
        Arc::new(open_in(store.clone(), "ds", ReadOptions { max_cached_tiles: 64, ..ReadOptions::default() }).unwrap());
    let truth = Arc::new(truth);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (ds, truth) = (ds.clone(), truth.clone());
            std::thread::spawn(move || {
                for batch in random_batches(100 + i, truth.n_cells(), 25, 80) {
                    assert_batch(&ds.get_batch_as::<u32>(&batch).unwrap(), &truth, &batch);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let c = counter.counts();
    for t in 0..ds.n_tiles() {
        assert!(c.gets_of(&tile_name(t)) <= 1, "tile {t} fetched {} times", c.gets_of(&tile_name(t)));
    }
}

#[test]
fn verify_reports_every_problem() {
    let (mem, truth) = dataset(7, 300);
    // Tile 1: one byte flipped (the CRC catches it); tile 4: missing; var_names.txt: one name short.
    let p1 = "ds/tiles/tile_000001.dct";
    let mut bytes = run(mem.get_limited(p1, u64::MAX)).unwrap().to_vec();
    let mid = bytes.len() - 5;
    bytes[mid] ^= 0x40;
    run(mem.put(p1, Bytes::from(bytes))).unwrap();
    run(mem.delete("ds/tiles/tile_000004.dct")).unwrap();
    let names: String = (0..N_GENES - 1).map(|g| format!("g{g}\n")).collect();
    run(mem.put("ds/var_names.txt", Bytes::from(names.into_bytes()))).unwrap();

    let ds = open_in(mem.clone(), "ds", ReadOptions::default()).unwrap();
    let mut progress = Vec::new();
    let report = ds.verify(&VerifyOptions { parallel: 3, ..VerifyOptions::default() }, |d, t| progress.push((d, t)));
    let found: Vec<(Category, Option<usize>)> = report.problems.iter().map(|p| (p.category, p.tile)).collect();
    assert_eq!(
        found,
        vec![(Category::TileCrc, Some(1)), (Category::TileMissing, Some(4)), (Category::SideFile, None)],
        "{:#?}",
        report.problems
    );
    assert!(report.problems[2].message.contains("var_names.txt"));
    assert_eq!(progress.len(), ds.n_tiles() + 1);
    assert_eq!(report.tiles_checked, 6);

    // Reading: the corrupt tile fails with its CRC; the rest reads.
    let e = ds.get_batch(&[60]).unwrap_err();
    assert_eq!((e.category(), e.tile()), (Category::TileCrc, Some(1)), "{e}");
    let ok: Vec<u64> = (0..50).chain(100..200).collect();
    assert_batch(&ds.get_batch_as::<u32>(&ok).unwrap(), &truth, &ok);
    assert_eq!(ds.var_names().unwrap_err().category(), Category::SideFile);
}

/// `var.parquet` is decoded by verify, and must hold one row per gene: a truncated file, another file and a table
/// of another length are each one side-file problem naming it.
#[cfg(feature = "obs")]
#[test]
fn verify_decodes_the_gene_table() {
    use dct_obs::{VarTable, encode_var_parquet};
    let table = |n: usize| {
        let ids: Vec<String> = (0..n).map(|g| format!("ENSG{g:08}")).collect();
        let column: dct_obs::arrow::array::ArrayRef = Arc::new(dct_obs::arrow::array::StringArray::from(ids));
        let index = (0..n).map(|g| format!("g{g}")).collect();
        encode_var_parquet(&VarTable {
            index_name: None,
            index,
            columns: vec![("gene_ids".into(), column)],
            ordered: vec![],
        })
        .unwrap()
    };
    let whole = table(N_GENES as usize);
    let cases: [(&str, Bytes, &str); 3] = [
        ("truncated", whole.slice(..whole.len() / 2), "parquet error"),
        ("text", Bytes::from_static(b"gene_ids\nENSG1\n"), "parquet error"),
        ("short", table(N_GENES as usize - 1), "rows but the dataset has"),
    ];
    for (what, bytes, says) in std::iter::once(("whole", whole.clone(), "")).chain(cases) {
        let truth = random_truth(9, 120, N_GENES, 0.05, false);
        let mem = Store::memory("test");
        let mut w =
            create_in(mem.clone(), "ds", WriterOptions { tile_size: TILE, ..WriterOptions::new(N_GENES) }).unwrap();
        append_all(&mut w, &truth, 10, 120);
        w.put_file("var.parquet", whole.clone()).unwrap();
        let mut manifest = w.finish().unwrap();
        run(mem.put("ds/var.parquet", bytes)).unwrap();
        // Without the digest the manifest records (as datasets of the original package have none), the damage is
        // found by decoding the table; with it, by the digest first (`side_files_changed_after_writing_...`).
        manifest.side_file_sha256.clear();
        run(mem.put("ds/manifest.json", Bytes::from(manifest.to_json_pretty()))).unwrap();
        let ds = open_in(mem, "ds", ReadOptions::default()).unwrap();
        let report = ds.verify(&VerifyOptions::default(), |_, _| {});
        if says.is_empty() {
            assert!(report.is_ok(), "{what}: {:#?}", report.problems);
            assert_eq!(ds.var_table().unwrap().unwrap().num_rows(), N_GENES as usize);
            continue;
        }
        assert_eq!(report.problems.len(), 1, "{what}: {:#?}", report.problems);
        let p = &report.problems[0];
        assert_eq!(p.category, Category::SideFile, "{what}");
        assert!(p.message.contains("var.parquet") && p.message.contains(says), "{what}: {}", p.message);
        assert_eq!(p.message.matches("var.parquet").count(), 1, "{what}: the file is named once: {}", p.message);
        // Reading the gene table says the same.
        let read = ds.var_table().unwrap_err().to_string();
        assert!(read.contains(says) && read.matches("var.parquet").count() == 1, "{what}: {read}");
    }
}

/// With a 50 ms latency per GET, a loop that prefetches the next tiles while it "computes" waits far less for
/// data than one that does not. Only the two stall counters of this test are compared, never wall-clock
/// constants.
#[test]
fn prefetching_hides_latency() {
    let (mem, truth) = dataset(8, 400);
    let slow = throttled(&mem, Throttle { latency: Duration::from_millis(50), ..Throttle::default() });
    let epoch = |prefetch: bool| {
        let ds = open_in(
            slow.clone(),
            "ds",
            ReadOptions { max_cached_tiles: 8, max_prefetch_tiles: 4, ..ReadOptions::default() },
        )
        .unwrap();
        let n = ds.n_tiles();
        if prefetch {
            ds.prefetch(&[0, 1, 2]).unwrap();
        }
        for t in 0..n {
            if prefetch && t + 3 < n {
                ds.prefetch(&[t + 3]).unwrap();
            }
            std::thread::sleep(Duration::from_millis(80)); // the training step
            let cells = tile_cells(&ds, t);
            assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
        }
        ds.stats()
    };
    let without = epoch(false);
    let with = epoch(true);
    assert_eq!(without.tiles_fetched, 8);
    assert_eq!(with.tiles_fetched, 8);
    assert_eq!(with.prefetched, 8);
    assert!(
        with.stall_time * 4 < without.stall_time,
        "stall with prefetch {:?}, without {:?}",
        with.stall_time,
        without.stall_time
    );
}

/// Waits (polling the counters) until `n` tiles have been decoded.
fn wait_decoded(ds: &Dataset, n: u64) {
    for _ in 0..2000 {
        if ds.stats().tiles_decoded >= n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("only {} of {n} tiles were decoded", ds.stats().tiles_decoded);
}

/// A full cache evicts the tiles batches have read before the prefetched tiles no batch has read yet, so a
/// prefetch running ahead never throws away what it fetched for the next batches (plain LRU order would evict
/// tile 1 here, prefetched before tile 0 was read).
#[test]
fn prefetched_tiles_outlive_tiles_already_read() {
    let (mem, truth) = dataset(8, 250);
    let (store, counter) = instrumented(&mem);
    let options = ReadOptions { max_cached_tiles: 3, max_prefetch_tiles: 4, ..ReadOptions::default() };
    let ds = open_in(store.clone(), "ds", options).unwrap();
    ds.prefetch(&[1]).unwrap();
    wait_decoded(&ds, 1);
    let cells0 = tile_cells(&ds, 0);
    assert_batch(&ds.get_batch_as::<u32>(&cells0).unwrap(), &truth, &cells0);
    ds.prefetch(&[2, 3]).unwrap();
    // Tile 2 is decoded ahead into the cache's last place; tile 3 waits, fetched, for its read (decoding it
    // ahead would evict tile 0, the tile batches read last).
    wait_decoded(&ds, 3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(ds.stats().tiles_decoded, 3, "no decode ahead evicts the tile read last");
    // Tiles 1, 2 and 3 are still cached: reading them makes no request.
    for t in 1..4 {
        let cells = tile_cells(&ds, t);
        assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    }
    let c = counter.counts();
    assert_eq!((c.gets_of(&tile_name(1)), c.gets_of(&tile_name(2)), c.gets_of(&tile_name(3))), (1, 1, 1));
    assert_eq!(ds.stats().tiles_decoded, 4);
}

/// Cells shuffled within windows of 4 tiles (as the training loader reads them: every batch reads all of its
/// window's tiles), with a cache of 5 decoded places and 8 tiles fetched ahead: decodes ahead take only the
/// places of earlier windows' tiles, never those of the window being read, so every tile is fetched once.
#[test]
fn decodes_ahead_never_evict_the_window_being_read() {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;

    let (mem, truth) = dataset(9, 600); // 12 tiles
    let (store, counter) = instrumented(&mem);
    let options = ReadOptions { max_cached_tiles: 5, max_prefetch_tiles: 8, ..ReadOptions::default() };
    let ds = open_in(store.clone(), "ds", options).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let n = ds.n_tiles();
    for first in (0..n).step_by(4) {
        let window: Vec<usize> = (first..(first + 4).min(n)).collect();
        let mut cells: Vec<u64> = window.iter().flat_map(|&t| tile_cells(&ds, t)).collect();
        cells.shuffle(&mut rng);
        for batch in cells.chunks(16) {
            // This window and the next 8 tiles, asked again before each batch (cached and loading ones are skipped).
            ds.prefetch(&(first..(first + 12).min(n)).collect::<Vec<_>>()).unwrap();
            assert_batch(&ds.get_batch_as::<u32>(batch).unwrap(), &truth, batch);
            // Give the background decoder its chance between batches, as a training step would.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let c = counter.counts();
    for t in 0..n {
        assert_eq!(c.gets_of(&tile_name(t)), 1, "tile {t} was fetched again");
    }
    assert_eq!(ds.stats().tiles_decoded, n as u64);
}

/// Decoded tiles are what `max_cached_tiles` counts: prefetched tiles waiting to be decoded do not, and hold
/// their prefetch permits until decoded, so `max_prefetch_tiles` bounds them. Decoding a tile in a full cache
/// evicts the tile batches read least recently.
#[test]
fn prefetched_tiles_waiting_to_be_decoded_are_bounded_by_the_prefetch_permits() {
    let (mem, truth) = dataset(12, 250);
    let (store, counter) = instrumented(&mem);
    let options = ReadOptions { max_cached_tiles: 1, max_prefetch_tiles: 2, ..ReadOptions::default() };
    let ds = open_in(store.clone(), "ds", options).unwrap();
    let read = |t: usize| {
        let cells = tile_cells(&ds, t);
        assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
    };
    read(0);
    ds.prefetch(&[1, 2, 3]).unwrap();
    // Tiles 1 and 2 are fetched and kept undecoded (a decode ahead would evict tile 0, the tile read last); they
    // hold both permits, so tile 3 is not fetched yet.
    let gets = |t: usize| counter.counts().gets_of(&tile_name(t));
    for _ in 0..400 {
        if gets(1) == 1 && gets(2) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!((gets(1), gets(2), gets(3)), (1, 1, 0));
    assert_eq!(ds.stats().tiles_decoded, 1);
    // Reading tile 1 decodes it (evicting tile 0) and frees a permit for tile 3.
    read(1);
    for t in [2, 3] {
        read(t);
    }
    assert_eq!((gets(1), gets(2), gets(3)), (1, 1, 1), "every prefetched tile fetched once");
    read(0);
    assert_eq!(gets(0), 2, "tile 0 left the one-tile cache and was fetched again");
    assert_eq!(ds.stats().tiles_decoded, 5);
}

/// Small caches under concurrent readers and prefetches: evictions at decode time, prefetch permits held by
/// undecoded tiles and decode-ahead limits must never return a wrong row, lose a tile or hang. Every read is
/// checked against the source; a deadline turns a hang into a failure.
#[test]
fn small_caches_with_concurrent_reads_and_prefetches_stay_correct() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mem, truth) = dataset(13, 900);
        let truth = Arc::new(truth);
        for (cached, prefetch, threads) in [(1, 1, 1), (1, 3, 2), (2, 2, 2), (3, 5, 1)] {
            let options = ReadOptions {
                max_cached_tiles: cached,
                max_prefetch_tiles: prefetch,
                decode_threads: threads,
                ..ReadOptions::default()
            };
            let ds = Arc::new(open_in(mem.clone(), "ds", options).unwrap());
            let n = ds.n_tiles();
            let readers: Vec<_> = (0..3u64)
                .map(|i| {
                    let (ds, truth) = (ds.clone(), truth.clone());
                    std::thread::spawn(move || {
                        for (k, batch) in random_batches(200 + i, truth.n_cells(), 30, 120).into_iter().enumerate() {
                            // Each reader prefetches a few tiles ahead of a walk of its own over the dataset.
                            let ahead: Vec<usize> = (0..3).map(|j| (k * 2 + j + i as usize * 5) % n).collect();
                            ds.prefetch(&ahead).unwrap();
                            assert_batch(&ds.get_batch_as::<u32>(&batch).unwrap(), &truth, &batch);
                            let tile = (k + i as usize) % n;
                            let cells = tile_cells(&ds, tile);
                            assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
                        }
                    })
                })
                .collect();
            for r in readers {
                r.join().unwrap();
            }
            assert_eq!(ds.stats().failed_loads, 0, "cache {cached}, prefetch {prefetch}, threads {threads}");
        }
        done_tx.send(()).unwrap();
    });
    match done_rx.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("small-cache reads did not finish within 120 s"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("small-cache reads failed (see the panic above)")
        }
    }
}

/// Prefetches racing reads of the same tiles, on one decode thread as on several: every read returns the right
/// cells, no tile is decoded twice, and nothing waits forever (a trial background decoder that waited for a tile
/// a reader was decoding on the pool's only thread hung here). Run on a helper thread with a deadline, so that a
/// hang fails the test.
#[test]
fn background_decodes_and_reads_share_the_pool_without_waiting_for_each_other() {
    for threads in [1, 2] {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mem, truth) = dataset(11, 900);
            let options = ReadOptions {
                decode_threads: threads,
                max_cached_tiles: 32, // all 18 tiles: none is evicted and fetched again
                max_prefetch_tiles: 4,
                ..ReadOptions::default()
            };
            let ds = open_in(mem.clone(), "ds", options).unwrap();
            let n = ds.n_tiles();
            assert!(n >= 8, "enough tiles for the reads to race the queue");
            for round in 0..20 {
                // Prefetch everything, then read the tiles back to front, at once: reads race the queue.
                ds.prefetch(&(0..n).collect::<Vec<_>>()).unwrap();
                for t in (0..n).rev() {
                    let cells = tile_cells(&ds, t);
                    assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
                }
                if round == 0 {
                    assert_eq!(ds.stats().tiles_decoded, n as u64, "each tile decoded once ({threads} threads)");
                }
            }
            done_tx.send(()).unwrap();
        });
        match done_rx.recv_timeout(Duration::from_secs(120)) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("reads with {threads} decode thread(s) did not finish within 120 s")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("reads with {threads} decode thread(s) failed (see the panic above)")
            }
        }
    }
}

#[test]
fn readers_sharing_a_store_keep_requests_in_flight_under_its_cap() {
    let (mem, truth) = dataset(21, 1000);
    let slow =
        throttled(&mem.with_max_requests(3), Throttle { latency: Duration::from_millis(10), ..Throttle::default() });
    let (store, counter) = instrumented(&slow);
    // Four readers, each prefetching every tile at once with room for all of them.
    let options = ReadOptions { max_prefetch_tiles: 32, max_cached_tiles: 32, ..ReadOptions::default() };
    let readers: Vec<Dataset> = (0..4).map(|_| open_in(store.clone(), "ds", options.clone()).unwrap()).collect();
    std::thread::scope(|scope| {
        for ds in &readers {
            scope.spawn(|| {
                let all: Vec<usize> = (0..ds.n_tiles()).collect();
                ds.prefetch(&all).unwrap();
                let cells: Vec<u64> = (0..truth.n_cells()).collect();
                assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
            });
        }
    });
    let counts = counter.counts();
    assert_eq!(counts.gets, 4 * (1 + readers[0].n_tiles() as u64), "each reader: its manifest and every tile once");
    assert!((2..=3).contains(&counts.max_in_flight), "{} requests in flight under a cap of 3", counts.max_in_flight);
}
