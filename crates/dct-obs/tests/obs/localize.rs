//! Localizing columns: ranged reads only, fetch-once under concurrency (threads and processes), rebuilding invalid
//! cache files, and `take` against the truth.

use crate::common;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Barrier};

use common::*;
use dct_obs::{ColumnKind, Obs, ObsError, ObsOptions};
use parquet::file::reader::{FileReader, SerializedFileReader};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// 40 tiles of 1000 cells (last 777), 10 tiles per shard, inputs switching at tile 25.
async fn synth() -> Synth {
    write_synth(&tiles(40, 1000, 777), 25, 10, 7).await
}

/// The byte range of `column`'s chunk in every row group of every shard, from the parquet metadata.
fn chunk_ranges(s: &Synth, column: &str) -> Vec<(String, Range<u64>)> {
    let pos = s.schema.position(column).unwrap();
    let mut out = Vec::new();
    for shard in 0..s.manifest.n_shards() {
        let r = SerializedFileReader::new(std::fs::File::open(s.shard_path(shard)).unwrap()).unwrap();
        for rg in r.metadata().row_groups() {
            let (start, len) = rg.column(pos).byte_range();
            out.push((dct_obs::shard_name(shard), start..start + len));
        }
    }
    out
}

/// How many requests read up to the end of their object (the footer reads: one per shard).
fn tail_requests(s: &Synth, reqs: &[dct_store::testing::Request]) -> usize {
    reqs.iter()
        .filter(|r| {
            let size = std::fs::metadata(s.dir.path().join(&r.path)).unwrap().len();
            r.suffix || r.range.as_ref().is_some_and(|range| range.end == size)
        })
        .count()
}

fn opts(cache: &std::path::Path) -> ObsOptions {
    ObsOptions { cache_dir: Some(cache.into()), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localizing_a_small_column_reads_only_its_chunks_and_footers() {
    let s = synth().await;
    let cache = tempfile::tempdir().unwrap();
    let (store, counter) = counted(&s.store());
    let obs = Obs::open(store.clone(), s.manifest.clone(), opts(cache.path())).await.unwrap();
    counter.reset();
    let report = obs.localize(&["flag"]).await.unwrap();
    assert_eq!(report.fetched, ["flag"]);
    let reqs = counter.requests();
    let shard_total: u64 = s.summary.fields.shard_bytes.iter().sum();
    let read = counter.total_bytes();
    eprintln!("localizing flag read {read} of {shard_total} shard bytes in {} requests", reqs.len());
    assert!(read * 100 < shard_total * 15, "read {read} of {shard_total} shard bytes");
    let expected = chunk_ranges(&s, "flag");
    let mut chunk_reqs: Vec<(String, Range<u64>)> = Vec::new();
    let mut footer_reqs: HashMap<String, usize> = HashMap::new();
    for r in &reqs {
        let range = r.range.clone().expect("no whole-object GET while localizing");
        let size = std::fs::metadata(s.dir.path().join(&r.path)).unwrap().len();
        assert!(r.bytes < size, "a request read the whole of {}", r.path);
        if expected.iter().any(|(p, e)| *p == r.path && *e == range) {
            chunk_reqs.push((r.path.clone(), range));
        } else {
            // Footer: a request for the object's tail, possibly followed by one for the rest of the metadata.
            *footer_reqs.entry(r.path.clone()).or_default() += 1;
        }
    }
    chunk_reqs.sort_by_key(|(p, r)| (p.clone(), r.start));
    let mut want = expected.clone();
    want.sort_by_key(|(p, r)| (p.clone(), r.start));
    assert_eq!(chunk_reqs, want, "each chunk of the column read exactly once");
    assert_eq!(footer_reqs.len(), s.manifest.n_shards());
    assert!(footer_reqs.values().all(|&n| (1..=2).contains(&n)), "{footer_reqs:?}");
    assert_eq!(tail_requests(&s, &reqs), s.manifest.n_shards());
    // Values are right.
    let c = s.schema.column("flag").unwrap();
    assert_eq!(values(obs.column("flag").unwrap().as_ref(), c.kind, None), s.truth("flag"));

    // Additive: a later call fetches only the new columns, reading each footer once for all of them.
    counter.reset();
    let report = obs.localize(&["flag", "score", "batch", "score"]).await.unwrap();
    assert_eq!(report.cached, ["flag"]);
    assert_eq!(report.fetched, ["batch", "score"]);
    let reqs = counter.requests();
    assert_eq!(tail_requests(&s, &reqs), s.manifest.n_shards());
    let mut chunks: Vec<(String, Range<u64>)> = chunk_ranges(&s, "score");
    chunks.extend(chunk_ranges(&s, "batch"));
    for chunk in &chunks {
        assert_eq!(reqs.iter().filter(|r| r.path == chunk.0 && r.range.as_ref() == Some(&chunk.1)).count(), 1);
    }
    assert!(reqs.len() <= chunks.len() + 2 * s.manifest.n_shards());
    for col in ["score", "batch"] {
        assert_eq!(values(obs.column(col).unwrap().as_ref(), ColumnKind::Numeric, None), s.truth(col));
    }
    assert!(obs.cache_dir().join("score.arrow").exists() && obs.cache_dir().join("flag.arrow").exists());
}

#[test]
fn concurrent_threads_fetch_each_column_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = rt.block_on(synth());
    let cache = tempfile::tempdir().unwrap();
    let (store, counter) = counted(&s.store());
    let cols = ["flag", "donor", "barcode"];
    let n_threads = 4;
    let barrier = Arc::new(Barrier::new(n_threads));
    let handles: Vec<_> = (0..n_threads)
        .map(|i| {
            let store = store.clone();
            let manifest = s.manifest.clone();
            let o = opts(cache.path());
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let obs = Obs::open_blocking(store, manifest, o).unwrap();
                barrier.wait();
                // Different orders, so threads contend on different columns first.
                let mut mine = cols.to_vec();
                mine.rotate_left(i % cols.len());
                let report = obs.localize_blocking(&mine).unwrap();
                (obs, report)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let fetched: usize = results.iter().map(|(_, r)| r.fetched.len()).sum();
    assert_eq!(fetched, cols.len(), "each column fetched by exactly one thread");
    let reqs = counter.requests();
    for col in cols {
        for (path, range) in chunk_ranges(&s, col) {
            let n = reqs.iter().filter(|r| r.path == path && r.range.as_ref() == Some(&range)).count();
            assert_eq!(n, 1, "{col}: chunk {path} {range:?} requested {n} times");
        }
    }
    for (obs, _) in &results {
        for col in cols {
            let c = s.schema.column(col).unwrap();
            let got = values(obs.column(col).unwrap().as_ref(), c.kind, c.categories.as_deref());
            assert_eq!(got, s.truth(col), "{col}");
        }
    }
}

/// Environment variables of the multi-process test's children.
const CHILD_DATA: &str = "DCT_OBS_TEST_CHILD_DATA";
const CHILD_CACHE: &str = "DCT_OBS_TEST_CHILD_CACHE";
const CHILD_MANIFEST: &str = "DCT_OBS_TEST_CHILD_MANIFEST";

/// Run by the children of `concurrent_processes_fetch_each_column_once` (a no-op otherwise): localizes columns and
/// prints every ranged request it made.
#[test]
fn child_localizer() {
    let (Ok(data), Ok(cache), Ok(manifest)) =
        (std::env::var(CHILD_DATA), std::env::var(CHILD_CACHE), std::env::var(CHILD_MANIFEST))
    else {
        return;
    };
    let manifest = decode_manifest(&manifest);
    let (store, counter) = counted(&local_store(std::path::Path::new(&data)));
    let obs = Obs::open_blocking(store.clone(), manifest, opts(std::path::Path::new(&cache))).unwrap();
    let report = obs.localize_blocking(&["flag", "donor", "barcode"]).unwrap();
    for r in counter.requests() {
        if let Some(range) = r.range {
            println!("REQ {} {} {}", r.path, range.start, range.end);
        }
    }
    println!("FETCHED {}", report.fetched.len());
}

#[test]
fn concurrent_processes_fetch_each_column_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = rt.block_on(synth());
    let cache = tempfile::tempdir().unwrap();
    let manifest = encode_manifest(&s.manifest);
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "localize::child_localizer", "--nocapture", "--test-threads=1"])
                .env(CHILD_DATA, s.dir.path())
                .env(CHILD_CACHE, cache.path())
                .env(CHILD_MANIFEST, &manifest)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut requests: Vec<(String, Range<u64>)> = Vec::new();
    let mut fetched = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.as_slice() {
                ["REQ", p, a, b] => requests.push((p.to_string(), a.parse().unwrap()..b.parse().unwrap())),
                ["FETCHED", n] => fetched += n.parse::<usize>().unwrap(),
                _ => {}
            }
        }
    }
    assert_eq!(fetched, 3, "each column fetched by exactly one process");
    for col in ["flag", "donor", "barcode"] {
        for chunk in chunk_ranges(&s, col) {
            let n = requests.iter().filter(|r| **r == chunk).count();
            assert_eq!(n, 1, "{col}: chunk {chunk:?} requested {n} times across processes");
        }
    }
}

/// A local shard whose column chunk no longer matches its CRC-32 is reported as a file changed after it was
/// written, naming it, the tile and the column; nothing was in transit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_local_shard_is_named_as_changed_not_as_damaged_in_transit() {
    let s = synth().await;
    let col = s.schema.columns[0].name.clone();
    let (shard, range) = chunk_ranges(&s, &col)[0].clone();
    let path = s.dir.path().join(&shard);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(range.start + range.end) as usize / 2] ^= 0x5A;
    std::fs::write(&path, &bytes).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let obs = Obs::open(s.store(), s.manifest.clone(), opts(cache.path())).await.unwrap();
    let e = obs.localize(&[col.as_str()]).await.unwrap_err();
    assert!(matches!(e, ObsError::Damaged { local: true, tile: Some(0), .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&shard) && msg.contains(&format!("{col:?}")), "{msg}");
    assert!(msg.contains("changed after it was written") && !msg.contains("transit"), "{msg}");
}

#[tokio::test]
async fn invalid_cache_files_are_rebuilt() {
    let s = write_synth(&tiles(6, 200, 50), 3, 4, 11).await;
    let cache = tempfile::tempdir().unwrap();
    let col = "batch";
    let c = s.schema.column(col).unwrap().clone();
    let open = || Obs::open(s.store(), s.manifest.clone(), opts(cache.path()));
    let obs = open().await.unwrap();
    obs.localize(&[col]).await.unwrap();
    let file = obs.cache_dir().join(dct_obs::column_file_name(col));
    let good = std::fs::read(&file).unwrap();
    drop(obs);

    // A valid Arrow file of the right column but the wrong number of batches, and one with wrong row counts.
    let other = write_synth(&tiles(5, 200, 250), 3, 4, 11).await;
    let ocache = tempfile::tempdir().unwrap();
    let oobs = Obs::open(other.store(), other.manifest.clone(), opts(ocache.path())).await.unwrap();
    oobs.localize(&[col]).await.unwrap();
    let wrong_batches = std::fs::read(oobs.cache_dir().join(dct_obs::column_file_name(col))).unwrap();
    let other2 = write_synth(&tiles(6, 200, 51), 3, 4, 11).await;
    let o2cache = tempfile::tempdir().unwrap();
    let o2 = Obs::open(other2.store(), other2.manifest.clone(), opts(o2cache.path())).await.unwrap();
    o2.localize(&[col]).await.unwrap();
    let wrong_rows = std::fs::read(o2.cache_dir().join(dct_obs::column_file_name(col))).unwrap();

    // The checksum covers the file up to the end of the last record batch.
    let reader = arrow_ipc::reader::FileReader::try_new(std::io::Cursor::new(good.clone()), None).unwrap();
    let covered: usize = reader.custom_metadata()["deltacells:crc32"].split(':').next().unwrap().parse().unwrap();
    assert!(covered > good.len() / 2);

    // (what, bytes, whether it must be rebuilt)
    let mut variants: Vec<(String, Vec<u8>, bool)> = vec![
        ("empty".into(), Vec::new(), true),
        ("garbage".into(), vec![0xAB; 5000], true),
        ("wrong batch count".into(), wrong_batches, true),
        ("wrong row counts".into(), wrong_rows, true),
    ];
    for cut in [good.len() / 2, good.len() - 1, good.len() - 11, 100, 7] {
        variants.push((format!("truncated to {cut}"), good[..cut].to_vec(), true));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut positions: Vec<usize> = (0..40).map(|_| rng.random_range(0..good.len())).collect();
    positions.extend([0, 5, 8, 100, covered - 1, covered, good.len() - 1, good.len() - 6, good.len() - 10]);
    for p in positions {
        let mut b = good.clone();
        b[p] ^= 0x5A;
        variants.push((format!("byte {p} flipped"), b, p < covered));
    }
    for (what, bytes, must_rebuild) in variants {
        std::fs::write(&file, &bytes).unwrap();
        let obs = open().await.unwrap();
        let report = obs.localize(&[col]).await.unwrap();
        let got = values(obs.column(col).unwrap().as_ref(), c.kind, None);
        assert_eq!(got, s.truth(col), "{what}: values after localize");
        let now = std::fs::read(&file).unwrap();
        if report.rebuilt.is_empty() {
            // Only bytes outside what the checksum covers (footer padding, say) may change harmlessly.
            assert!(!must_rebuild, "{what} must be rebuilt");
            assert_eq!(now, bytes, "{what}");
        } else {
            assert_eq!(report.rebuilt, [col], "{what}");
            assert_eq!(now, good, "{what}: rebuilt identically");
        }
    }
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_matches_truth_for_every_kind_and_index_pattern() {
    let s = synth().await;
    let cache = tempfile::tempdir().unwrap();
    let obs = Obs::open(s.store(), s.manifest.clone(), opts(cache.path())).await.unwrap();
    let names: Vec<&str> = s.schema.columns.iter().map(|c| c.name.as_str()).collect();
    // Not localized yet.
    assert!(matches!(obs.take(&[0], &["flag"]), Err(ObsError::NotLocalized(_))));
    obs.localize(&names).await.unwrap();
    let n = obs.n_cells();
    assert_eq!(n, s.tile_cells.iter().sum::<u64>());
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut shuffled: Vec<u64> = (0..n).collect();
    shuffled.shuffle(&mut rng);
    let mut boundaries = Vec::new();
    let mut lo = 0;
    for &t in &s.tile_cells {
        boundaries.extend([lo, lo + t - 1]);
        lo += t;
    }
    let patterns: Vec<(&str, Vec<u64>)> = vec![
        ("all sorted", (0..n).collect()),
        ("shuffled", shuffled),
        ("repeated", (0..500).map(|_| rng.random_range(0..5)).chain([n - 1, n - 1, 0]).collect()),
        ("tile boundaries", boundaries),
        ("sparse sorted across tiles", (0..n).step_by(997).collect()),
        ("one", vec![12_345]),
        ("empty", vec![]),
    ];
    for (what, cells) in &patterns {
        let batch = obs.take(cells, &names).unwrap();
        assert_eq!(batch.num_rows(), cells.len(), "{what}");
        for (i, c) in s.schema.columns.iter().enumerate() {
            assert_eq!(batch.schema().field(i).name(), &c.name);
            let got = values(batch.column(i).as_ref(), c.kind, c.categories.as_deref());
            let truth = s.truth(&c.name);
            let want: Vec<V> = cells.iter().map(|&x| truth[x as usize].clone()).collect();
            assert_eq!(got, want, "{what}: column {}", c.name);
        }
    }
    // Whole table and zero-copy chunks agree with the truth.
    let table = obs.table(&names).unwrap();
    for (i, c) in s.schema.columns.iter().enumerate() {
        assert_eq!(values(table.column(i).as_ref(), c.kind, c.categories.as_deref()), s.truth(&c.name));
        let chunks = obs.column_chunks(&c.name).unwrap();
        assert_eq!(chunks.iter().map(|a| a.len() as u64).collect::<Vec<_>>(), s.tile_cells);
    }
    // Schema facts.
    assert_eq!(obs.schema().column("barcode").unwrap().kind, dct_obs::ColumnKind::String);
    assert_eq!(obs.schema().column("donor").unwrap().arrow_type, dct_obs::ArrowType::Int16);
    assert_eq!(obs.categories("donor").unwrap().unwrap().len(), 250);
    assert_eq!(obs.categories("flag").unwrap(), None);
    assert!(matches!(obs.take(&[n], &["flag"]), Err(ObsError::CellOutOfRange(_))));
    assert!(matches!(obs.take(&[0], &["nope"]), Err(ObsError::UnknownColumn { .. })));
    assert!(matches!(obs.localize(&["nope"]).await, Err(ObsError::UnknownColumn { .. })));
}
