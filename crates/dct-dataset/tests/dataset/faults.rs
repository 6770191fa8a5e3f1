//! Storage faults under the dataset reader and writer: a seeded fault-injecting object store (errors, timeouts,
//! bodies that break off, truncated, over-long, shifted and bit-flipped bodies, failed PUTs) and the promises that
//! hold under it. Every successful read equals the in-memory truth; every failure names the object and has the
//! category of its fault; failures are not cached; a failed write leaves no manifest.
//!
//! Counts are printed with `--nocapture` (docs/ROBUSTNESS.md, "Storage faults").

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Truth, assert_batch, block, create_in, open_in, random_truth};
use dct_codec::CsrMatrix;
use dct_dataset::{Category, DatasetError, ReadOptions, RetryPolicy, Store, StoreOptions, WriterOptions};
use dct_store::testing::{ALL_FAULTS, Fault, faulty as fault_layer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

// ---------------------------------------------------------------------------------------------------------------
// Helpers.

const N_GENES: u64 = 300;
const TILE: u64 = 40;

/// Retries as the library does them, with millisecond delays so the tests stay quick.
fn fast_retry() -> RetryPolicy {
    RetryPolicy { max_retries: 3, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(4) }
}

fn store_options(retry: RetryPolicy) -> StoreOptions {
    StoreOptions { retry, ..StoreOptions::default() }
}

/// Reader options with the given retries.
fn read_options(retry: RetryPolicy) -> ReadOptions {
    ReadOptions { store: store_options(retry), ..ReadOptions::default() }
}

fn writer_options(retry: RetryPolicy) -> WriterOptions {
    WriterOptions {
        tile_size: TILE,
        n_chunks: 3,
        zstd_level: 3,
        encode_threads: 2,
        store: store_options(retry),
        ..WriterOptions::new(N_GENES)
    }
}

/// Writes `truth` (plus gene names) under `ds/` of `store`, in blocks of random sizes, without retries; errors
/// are returned.
fn write(store: Store, truth: &Truth, seed: u64) -> Result<(), DatasetError> {
    write_with(store, truth, seed, RetryPolicy::never())
}

fn write_with(store: Store, truth: &Truth, seed: u64, retry: RetryPolicy) -> Result<(), DatasetError> {
    let mut w = create_in(store, "ds", writer_options(retry))?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = truth.rows.len();
    let mut lo = 0;
    while lo < n {
        let hi = (lo + rng.random_range(0..=90)).min(n);
        let (indptr, indices, values) = block(truth, lo, hi, &mut rng);
        let m =
            CsrMatrix { n_rows: hi - lo, n_cols: truth.n_genes, indptr: &indptr, indices: &indices, values: &values };
        w.append(&m)?;
        lo = hi;
    }
    w.set_var_names((0..N_GENES).map(|g| format!("gene{g}")).collect())?;
    w.finish().map(|_| ())
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn has_manifest(mem: &Store) -> bool {
    run(mem.exists("ds/manifest.json")).unwrap()
}

/// The categories a fault of `kind` may surface as, when it hits a tile GET (without retries).
fn tile_categories(kind: Fault) -> &'static [Category] {
    match kind {
        // A body shorter or longer than the store announced is a failed transfer, like a reset connection.
        Fault::Error | Fault::Timeout | Fault::BodyError | Fault::Truncate | Fault::Extend | Fault::Denied => {
            &[Category::Io]
        }
        // Late, but right.
        Fault::SlowStart => &[],
        // Same length, other bytes: the header check or the CRC (or, for header bytes, structure) rejects them.
        Fault::WrongRange | Fault::BitFlip => &[Category::TileHeader, Category::TileCrc, Category::TileDecode],
    }
}

fn random_cells(rng: &mut ChaCha8Rng, n_cells: u64) -> Vec<u64> {
    let len = rng.random_range(1..=60);
    (0..len).map(|_| rng.random_range(0..n_cells)).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// Tests.

/// 600 seeded batches (some with a prefetch first) against tile GETs faulted with probability 0.25, with the
/// decoded-tile cache on and off and with tiles read in ranged parts, without retries (so that every fault reaches the checks). A batch succeeds exactly when none of its GETs was faulted (prefetch rounds:
/// success means the truth, failure means a fault), and then equals the truth; a failure names a faulted object
/// and has its fault's category; the same batch read again without faults succeeds.
#[test]
fn reader_under_tile_faults_returns_the_truth_or_an_error_naming_the_object() {
    let truth = random_truth(11, 700, N_GENES, 0.04, true);
    let mem = Store::memory("test");
    write(mem.clone(), &truth, 12).unwrap();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut injected_by_kind: BTreeMap<Fault, u64> = BTreeMap::new();
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut rounds = 0;
    // The third pass reads each tile as concurrent ranged GETs of 200-byte parts (every part faulted alone).
    for (pass, cached, part_bytes) in [(0u64, 16usize, 0u64), (1, 0, 0), (2, 16, 200)] {
        let (faulty_store, faulty) = fault_layer(&mem, 100 + pass);
        let faulty_store = faulty_store.with_part_bytes(part_bytes);
        let ds = open_in(
            faulty_store.clone(),
            "ds",
            ReadOptions { max_cached_tiles: cached, decode_threads: 2, ..read_options(RetryPolicy::never()) },
        )
        .unwrap();
        let root = ds.url().to_string();
        for round in 0..200 {
            rounds += 1;
            let cells = random_cells(&mut rng, truth.n_cells());
            faulty.set_gets(0.25, &ALL_FAULTS, "/tiles/");
            let prefetch = round % 4 == 0;
            if prefetch {
                ds.prefetch_cells(&cells).unwrap();
            }
            let got = ds.get_batch_as::<u32>(&cells);
            faulty.set_gets(0.0, &[], "");
            let faults = faulty.take_log();
            for (k, _) in &faults {
                *injected_by_kind.entry(*k).or_default() += 1;
            }
            let harmful = faults.iter().filter(|(k, _)| *k != Fault::SlowStart).count();
            match got {
                Ok(batch) => {
                    assert_batch(&batch, &truth, &cells);
                    if !prefetch {
                        assert_eq!(harmful, 0, "round {round}: a faulted GET went unnoticed: {faults:?}");
                    }
                    *outcomes.entry("ok".into()).or_default() += 1;
                }
                Err(e) => {
                    assert!(harmful > 0, "round {round}: failed without a fault: {e}");
                    let msg = e.to_string();
                    // The object named must have had a fault of a kind that gives this category (a tile may be
                    // fetched twice in a round: by a prefetch that failed, then by the read).
                    let named: Vec<&(Fault, String)> = faults
                        .iter()
                        .filter(|(_, p)| {
                            let rel = p.strip_prefix("ds/").unwrap_or(p);
                            msg.contains(&format!("{root}/{rel}"))
                        })
                        .collect();
                    assert!(!named.is_empty(), "round {round}: the error names no faulted object: {e}\n{faults:?}");
                    let (kind, _) = named
                        .iter()
                        .find(|(k, _)| tile_categories(*k).contains(&e.category()))
                        .unwrap_or_else(|| panic!("round {round}: {named:?} gave category {}: {e}", e.category()));
                    *outcomes.entry(format!("{kind:?} -> {}", e.category())).or_default() += 1;
                    // Not cached: the same batch, without faults, is the truth.
                    assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
                    assert!(faulty.take_log().is_empty());
                }
            }
        }
        assert!(ds.stats().failed_loads > 0);
        if part_bytes > 0 {
            assert!(ds.manifest().tile_bytes.iter().all(|&b| b > 3 * part_bytes), "tiles of at least 4 parts");
        }
    }
    eprintln!("reader, {rounds} batches: faults injected {injected_by_kind:?}; outcomes {outcomes:#?}");
    for k in ALL_FAULTS {
        assert!(injected_by_kind.get(&k).copied().unwrap_or(0) >= 10, "too few {k:?} faults: {injected_by_kind:?}");
    }
}

/// Transient faults (errors, timeouts, broken, short or long bodies) on the first 1 to 3 attempts of a tile or
/// side-file GET are retried: the call succeeds with the truth after exactly that many failed GETs. A fault on
/// every attempt fails after 1 + 3 GETs with an `io` error naming the object. Without retries one fault fails one
/// call, and the next call succeeds (failures are not cached).
#[test]
fn transient_faults_are_retried_with_backoff() {
    let truth = random_truth(21, 200, N_GENES, 0.05, false);
    let mem = Store::memory("test");
    write(mem.clone(), &truth, 22).unwrap();
    let cells = [0, 85, 199];
    for kind in [Fault::Error, Fault::Timeout, Fault::BodyError, Fault::Truncate, Fault::Extend] {
        let (faulty_store, faulty) = fault_layer(&mem, 23);
        let open = || open_in(faulty_store.clone(), "ds", read_options(fast_retry())).unwrap();
        for n in 1..=3 {
            // A new handle each time: nothing cached.
            let ds = open();
            faulty.set_first_gets(n, &[kind], "tile_000002.dct");
            let got = ds.get_batch_as::<u32>(&cells);
            faulty.set_gets(0.0, &[], "");
            assert_batch(&got.unwrap_or_else(|e| panic!("{kind:?} x{n}: {e}")), &truth, &cells);
            assert_eq!(faulty.take_log().len() as u64, n, "{kind:?}: {n} faulted GETs, then a good one");

            faulty.set_first_gets(n, &[kind], "var_names.txt");
            let names = ds.var_names();
            faulty.set_gets(0.0, &[], "");
            assert_eq!(names.unwrap().unwrap().len(), N_GENES as usize, "{kind:?} x{n}");
            assert_eq!(faulty.take_log().len() as u64, n);
        }
        // Faulted on every attempt: the retries run out.
        let ds = open();
        faulty.set_gets(1.0, &[kind], "tile_000002.dct");
        let e = ds.get_batch(&cells).unwrap_err();
        faulty.set_gets(0.0, &[], "");
        assert_eq!(e.category(), Category::Io, "{kind:?}: {e}");
        assert!(e.to_string().contains(&format!("{}/tiles/tile_000002.dct", ds.url())), "{e}");
        assert_eq!(faulty.take_log().len(), 4, "{kind:?}: one GET and 3 retries");

        // Without retries one fault fails one call, and the next call succeeds.
        let (faulty_store, faulty) = fault_layer(&mem, 24);
        let ds = open_in(faulty_store.clone(), "ds", read_options(RetryPolicy::never())).unwrap();
        faulty.set_first_gets(1, &[kind], "tile_000002.dct");
        let e = ds.get_batch(&cells).unwrap_err();
        assert_eq!(e.category(), Category::Io, "{kind:?}: {e}");
        assert!(e.to_string().contains(&format!("{}/tiles/tile_000002.dct", ds.url())), "{e}");
        assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);
        faulty.set_gets(0.0, &[], "");
        assert_eq!(faulty.take_log().len(), 1, "{kind:?}: one GET, no retry");
    }
}

/// Opening under faults of the manifest GET (every attempt faulted): transient faults are retried, then give `io`
/// errors naming `manifest.json`; damaged bodies are refused as invalid JSON or an invalid manifest, or (a bit flip that leaves a valid manifest) give a
/// manifest that differs from the real one. Whatever opened, a batch read through it is the truth or an error.
#[test]
fn opening_under_manifest_faults() {
    let truth = random_truth(31, 230, N_GENES, 0.05, false);
    let mem = Store::memory("test");
    write(mem.clone(), &truth, 32).unwrap();
    let good = open_in(mem.clone(), "ds", ReadOptions::default()).unwrap().manifest().clone();
    let (faulty_store, faulty) = fault_layer(&mem, 33);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let all: Vec<u64> = (0..truth.n_cells()).collect();
    for round in 0..140 {
        let kind = ALL_FAULTS[round % ALL_FAULTS.len()];
        faulty.set_gets(1.0, &[kind], "manifest.json");
        let opened = open_in(faulty_store.clone(), "ds", read_options(fast_retry()));
        faulty.set_gets(0.0, &[], "");
        let transient = !matches!(kind, Fault::WrongRange | Fault::BitFlip | Fault::SlowStart);
        assert_eq!(faulty.take_log().len(), if transient { 4 } else { 1 }, "{kind:?}");
        let key = match opened {
            Err(e) => {
                assert!(e.to_string().contains("manifest.json"), "{kind:?}: {e}");
                if transient {
                    assert_eq!(e.category(), Category::Io, "{kind:?}: {e}")
                } else {
                    assert_ne!(e.category(), Category::Io, "{kind:?}: {e}")
                }
                format!("{kind:?} -> {}", e.category())
            }
            Ok(ds) => {
                // A flip inside a value, or a rotation that only moves whitespace, can leave valid JSON; a slow
                // start only delays the right bytes.
                assert!(matches!(kind, Fault::BitFlip | Fault::WrongRange | Fault::SlowStart), "{kind:?} opened");
                let same = *ds.manifest() == good;
                assert!(same || kind != Fault::SlowStart, "a slow start changed the manifest");
                match ds.get_batch_as::<u32>(&all) {
                    Ok(b) => assert_batch(&b, &truth, &all),
                    Err(e) => assert!(!same, "the real manifest failed to read: {e}"),
                }
                format!("{kind:?} -> opened ({})", if same { "same manifest" } else { "altered manifest" })
            }
        };
        *outcomes.entry(key).or_default() += 1;
    }
    eprintln!("manifest GET faults, 140 opens: {outcomes:#?}");
}

/// Without retries, a PUT that fails (or whose response is lost after storing) at any point of a write stops the
/// writer and leaves no manifest, except when the lost response is the manifest's own, in which case the dataset is whole.
/// Every PUT index of the write is tried once with each failure mode.
#[test]
fn a_failing_put_leaves_no_manifest() {
    let truth = random_truth(41, 300, N_GENES, 0.05, false);
    // A clean run counts the PUTs.
    let mem = Store::memory("test");
    let (counting_store, counting) = fault_layer(&mem, 0);
    write(counting_store, &truth, 42).unwrap();
    let total = counting.puts();
    assert_eq!(total, 8 + 2, "8 tiles, var_names.txt, manifest.json");
    let (mut failed, mut whole) = (0, 0);
    for stored in [false, true] {
        for k in 0..total {
            let mem = Store::memory("test");
            let (faulty_store, faulty) = fault_layer(&mem, k);
            faulty.fail_puts(&[(k, stored)]);
            let result = write(faulty_store.clone(), &truth, 42);
            let e = match result {
                Err(e) => e,
                Ok(()) => panic!("PUT {k} failed (stored: {stored}) but the write succeeded"),
            };
            // The failure is the PUT's (or, after it, the writer's refusal to go on), naming the object.
            assert!(
                e.category() == Category::Io || e.to_string().contains("failed earlier"),
                "PUT {k}: {e} ({})",
                e.category()
            );
            let last = k == total - 1;
            if last && stored {
                // Only the manifest's response was lost: everything is there.
                assert!(has_manifest(&mem));
                let ds = open_in(mem.clone(), "ds", ReadOptions::default()).unwrap();
                let all: Vec<u64> = (0..truth.n_cells()).collect();
                assert_batch(&ds.get_batch_as::<u32>(&all).unwrap(), &truth, &all);
                whole += 1;
            } else {
                assert!(!has_manifest(&mem), "PUT {k} failed (stored: {stored}) and a manifest exists");
                let e = open_in(mem.clone(), "ds", ReadOptions::default()).unwrap_err();
                assert_eq!(e.category(), Category::ManifestMissing);
                failed += 1;
            }
        }
    }
    eprintln!(
        "writer: {} PUT faults; {failed} writes left no manifest, {whole} (lost manifest response) whole",
        2 * total
    );
}

/// With retries, a PUT that fails once at any point of a write (lost response or not) is repeated and the write
/// completes: the dataset reads as the truth.
#[test]
fn a_put_that_fails_once_is_retried() {
    let truth = random_truth(43, 300, N_GENES, 0.05, false);
    let all: Vec<u64> = (0..truth.n_cells()).collect();
    for stored in [false, true] {
        for k in 0..10 {
            let mem = Store::memory("test");
            let (faulty_store, faulty) = fault_layer(&mem, k);
            faulty.fail_puts(&[(k, stored)]);
            write_with(faulty_store.clone(), &truth, 44, fast_retry())
                .unwrap_or_else(|e| panic!("PUT {k} (stored: {stored}) was not retried: {e}"));
            assert_eq!(faulty.puts(), 11, "10 PUTs and one repeated");
            let ds = open_in(mem.clone(), "ds", ReadOptions::default()).unwrap();
            assert_batch(&ds.get_batch_as::<u32>(&all).unwrap(), &truth, &all);
        }
    }
}
