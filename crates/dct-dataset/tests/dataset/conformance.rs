//! Every dataset case of the conformance suite (`testdata/conformance/datasets`): read exactly, or rejected
//! with its stated category at or before its stated stage.

use std::path::{Path, PathBuf};

use dct_dataset::{Category, Dataset, DatasetError, ReadOptions, SparseRows, VerifyOptions};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde_json::Value;

const DATASETS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/conformance/datasets");

fn cases() -> Vec<(String, PathBuf, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(DATASETS).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if let Some(case) = name.strip_suffix(".expected.json") {
            let expected: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            out.push((case.to_string(), Path::new(DATASETS).join(case), expected));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(out.len(), 18, "the suite has 18 dataset cases");
    out
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn options(verify_crc: bool, cache: usize) -> ReadOptions {
    ReadOptions { verify_crc, max_cached_tiles: cache, decode_threads: 2, ..ReadOptions::default() }
}

/// Reads every cell in a shuffled order, in batches that cross tiles, and compares with the expected X.
fn check_ok(case: &str, dir: &Path, exp: &Value, verify_crc: bool, cache: usize) {
    let ds = Dataset::open(dir.to_str().unwrap(), options(verify_crc, cache)).unwrap_or_else(|e| panic!("{case}: {e}"));
    let m = ds.manifest();
    assert_eq!(u64::from(m.version), exp["version"].as_u64().unwrap(), "{case}");
    assert_eq!(ds.n_cells(), exp["n_cells"].as_u64().unwrap(), "{case}");
    assert_eq!(ds.n_genes(), exp["n_genes"].as_u64().unwrap(), "{case}");
    assert_eq!(m.tile_size, exp["tile_size"].as_u64().unwrap(), "{case}");
    assert_eq!(m.tile_cells, u64s(&exp["tile_cells"]), "{case}");
    assert_eq!(m.tile_nnz, u64s(&exp["tile_nnz"]), "{case}");
    assert_eq!(m.nnz(), exp["nnz"].as_u64().unwrap(), "{case}");
    let indptr = u64s(&exp["indptr"]);
    let indices = u64s(&exp["indices"]);
    let values = u64s(&exp["values"]);
    let n = ds.n_cells();

    let mut order: Vec<u64> = (0..n).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(n ^ u64::from(verify_crc)));
    // Repeats, too.
    order.extend_from_slice(&[0, n - 1, 0]);
    for batch in order.chunks(37) {
        let exact = ds.get_batch_as::<u32>(batch).unwrap_or_else(|e| panic!("{case}: {e}"));
        let floats = ds.get_batch(batch).unwrap();
        assert_eq!(exact.n_rows(), batch.len());
        assert_eq!(exact.n_genes, ds.n_genes());
        let mut expected_nnz = 0;
        for (j, &cell) in batch.iter().enumerate() {
            let (lo, hi) = (indptr[cell as usize] as usize, indptr[cell as usize + 1] as usize);
            expected_nnz += (hi - lo) as u64;
            let (idx, vals) = exact.row(j);
            let want_idx: Vec<i32> = indices[lo..hi].iter().map(|&g| g as i32).collect();
            let want_vals: Vec<u32> = values[lo..hi].iter().map(|&v| v as u32).collect();
            assert_eq!(idx, want_idx.as_slice(), "{case}: cell {cell} genes");
            assert_eq!(vals, want_vals.as_slice(), "{case}: cell {cell} counts");
            let (fidx, fvals) = floats.row(j);
            assert_eq!(fidx, idx);
            assert!(fvals.iter().zip(vals).all(|(&f, &v)| f == v as f32), "{case}: cell {cell} as f32");
        }
        assert_eq!(ds.batch_nnz(batch).unwrap(), expected_nnz, "{case}");
    }

    let var_names = ds.var_names().unwrap();
    match &exp["var_names"] {
        Value::Null => assert!(var_names.is_none(), "{case}"),
        v => {
            let want: Vec<String> = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(*var_names.unwrap(), want, "{case}");
        }
    }
    let gene_order = ds.gene_order().unwrap();
    match &exp["gene_order"] {
        Value::Null => assert!(gene_order.is_none(), "{case}"),
        v => {
            let want: Vec<i32> = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(*gene_order.unwrap(), want, "{case}");
        }
    }
    if let Some(fp) = exp.get("obs_fingerprint").and_then(Value::as_str) {
        assert_eq!(m.obs.fingerprint, fp, "{case}");
        // Recompute it from the schema text, tile_cells and the shards' actual hashes.
        let schema = std::fs::read_to_string(dir.join("obs/schema.json")).unwrap();
        let hashes = m.obs.shard_sha256.clone();
        assert_eq!(dct_dataset::obs_fingerprint(&schema, &m.tile_cells, &hashes), fp, "{case}");
    }

    let mut calls = Vec::new();
    let report = ds.verify(&VerifyOptions::default(), |done, total| calls.push((done, total)));
    assert!(report.is_ok(), "{case}: {:?}", report.problems);
    let total = (ds.n_tiles() as u64) + m.n_obs_shards();
    assert_eq!(calls.first(), Some(&(0, total)));
    assert_eq!(calls.last(), Some(&(total, total)));
    assert_eq!(report.tiles_checked, ds.n_tiles());
}

/// Reads every cell tile by tile; returns the first error.
fn read_all(ds: &Dataset) -> Result<(), DatasetError> {
    let all: Vec<u64> = (0..ds.n_cells()).collect();
    ds.get_batch(&all).map(|_| ())
}

fn check_error(case: &str, dir: &Path, exp: &Value) {
    let category = Category::from_name(exp["category"].as_str().unwrap()).unwrap();
    let stage = exp["stage"].as_str().unwrap();
    let tile = exp.get("tile").and_then(Value::as_u64).map(|t| t as usize);
    let url = dir.to_str().unwrap();
    for verify_crc in [true, false] {
        let opened = Dataset::open(url, options(verify_crc, 4));
        if stage == "open" {
            let e = opened.expect_err(case);
            assert_eq!(e.category(), category, "{case}: {e}");
            assert!(e.to_string().contains("manifest.json"), "{case}: the message names the file: {e}");
            // verify_url reports the same problem.
            let report = dct_dataset::verify_url(url, options(verify_crc, 4), &VerifyOptions::default(), |_, _| {});
            assert_eq!(report.problems.len(), 1, "{case}");
            assert_eq!(report.problems[0].category, category, "{case}");
            continue;
        }
        let ds = opened.unwrap_or_else(|e| panic!("{case} must open (its stage is {stage}): {e}"));
        let read = read_all(&ds);
        if stage == "read" {
            let e = read.expect_err(case);
            assert_eq!(e.category(), category, "{case}: {e}");
            assert_eq!(e.tile(), tile, "{case}: {e}");
            let name = format!("tile_{:06}.dct", tile.unwrap());
            assert!(e.to_string().contains(&name), "{case}: the message names the object: {e}");
            // A retry fails the same way (the failure was not cached as a success).
            assert_eq!(read_all(&ds).unwrap_err().category(), category);
            // The other tiles read fine.
            for t in 0..ds.n_tiles() {
                if Some(t) != tile {
                    let (lo, hi) = ds.tile_bounds(t).unwrap();
                    ds.get_batch(&(lo..hi).collect::<Vec<_>>()).unwrap_or_else(|e| panic!("{case}: tile {t}: {e}"));
                }
            }
        } else {
            assert_eq!(stage, "verify");
            read.unwrap_or_else(|e| panic!("{case}: reading X must work: {e}"));
        }
        // A full verification finds it too, and names the tile.
        let report = ds.verify(&VerifyOptions::default(), |_, _| {});
        let found: Vec<_> = report.problems.iter().filter(|p| p.category == category).collect();
        assert!(!found.is_empty(), "{case}: verify found {:?}", report.problems);
        if let Some(t) = tile {
            assert!(found.iter().any(|p| p.tile == Some(t)), "{case}: {:?}", report.problems);
        }
    }
}

#[test]
fn every_dataset_case() {
    for (case, dir, exp) in cases() {
        match exp["expect"].as_str().unwrap() {
            "ok" => {
                check_ok(&case, &dir, &exp, true, 16);
                check_ok(&case, &dir, &exp, false, 0);
            }
            "error" => check_error(&case, &dir, &exp),
            other => panic!("{case}: unknown expectation {other}"),
        }
    }
}

#[test]
fn unknown_manifest_key_is_kept() {
    let dir = Path::new(DATASETS).join("extra_unknown_manifest_key");
    let ds = Dataset::open(dir.to_str().unwrap(), ReadOptions::default()).unwrap();
    let extra = &ds.manifest().extra["produced_by_future_writer"];
    assert!(extra.is_object());
    let rewritten = dct_dataset::Manifest::from_json(&ds.manifest().to_json_pretty()).unwrap();
    assert_eq!(&rewritten.extra["produced_by_future_writer"], extra);
    assert_eq!(&rewritten, ds.manifest());
}

#[test]
fn cells_out_of_range_are_refused() {
    let dir = Path::new(DATASETS).join("v2_with_obs");
    let ds = Dataset::open(dir.to_str().unwrap(), ReadOptions::default()).unwrap();
    let e = ds.get_batch(&[0, 350]).unwrap_err();
    assert!(
        matches!(e, DatasetError::CellOutOfRange(dct_format::CellOutOfRange { cell: 350, position: 1, n_cells: 350 })),
        "{e}"
    );
    assert_eq!(e.category(), Category::InvalidArgument);
    assert!(ds.prefetch(&[4]).is_err());
    assert!(ds.fetch_tile_bytes(4).is_err());
    assert_eq!(ds.get_batch(&[]).unwrap().n_rows(), 0);
}

#[test]
fn raw_tile_bytes_match_the_files() {
    let dir = Path::new(DATASETS).join("v1_with_obs");
    let ds = Dataset::open(dir.to_str().unwrap(), ReadOptions::default()).unwrap();
    for t in 0..ds.n_tiles() {
        let want = std::fs::read(dir.join(format!("tiles/tile_{t:06}.dct"))).unwrap();
        assert_eq!(ds.fetch_tile_bytes(t).unwrap().as_ref(), want.as_slice());
    }
    assert_eq!(ds.limits(), &[100, 200, 300, 350]);
    assert_eq!(ds.locate(250), Some((2, 50)));
    assert_eq!(ds.tile_of(349), Some(3));
}

#[test]
fn file_urls_and_the_manifest_size_cap() {
    let dir = Path::new(DATASETS).join("v2_exceptions_wide").canonicalize().unwrap();
    let url = format!("file://{}", dir.display());
    let ds = Dataset::open(&url, ReadOptions::default()).unwrap();
    assert_eq!(ds.n_cells(), 105);
    assert!(ds.url().ends_with("v2_exceptions_wide"));
    let e = Dataset::open(&url, ReadOptions { max_manifest_bytes: 100, ..ReadOptions::default() }).unwrap_err();
    assert_eq!(e.category(), Category::ManifestInvalid, "{e}");
    assert!(e.to_string().contains("max_manifest_bytes"), "{e}");
}
