//! Real object storage on loopback: S3 (moto) and HTTP (nginx), started by `scripts/test-services.sh`.
//!
//! Compiled only with the `aws` / `http` features, and each test skips itself unless its variables are set
//! (`DCT_S3_ENDPOINT`, `DCT_S3_BUCKET`; `DCT_HTTP_URL`, `DCT_HTTP_ROOT`), so `cargo test` passes without servers;
//! under `CI=true` a missing variable fails the test instead. The suite every backend passes is
//! `dct-cli/tests/cli/backends.rs`; these are the library-level checks of the writer and reader:
//!
//! ```text
//! eval "$(scripts/test-services.sh start)"
//! cargo test -p dct-dataset --features aws,http --test dataset cloud::
//! ```

#![cfg(any(feature = "aws", feature = "http"))]

use crate::common;

use common::{append_all, assert_batch, random_batches, random_truth};
use dct_dataset::{Category, Dataset, DatasetWriter, ReadOptions, StoreOptions, VerifyOptions, WriterOptions};

/// Says the test is skipped for want of `vars`, except under `CI=true`, where it fails.
fn skip(vars: &str) {
    assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true and {vars} not set (scripts/test-services.sh)");
    eprintln!("skipped: {vars} not set (see scripts/test-services.sh)");
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

/// Reads the dataset at `url` with its tiles in ranged parts of 300 bytes (many a tile, concurrently, each
/// response carrying the object's entity tag): the same rows, each tile fetched once, and every tile verified.
fn read_in_parts(url: &str, store: &StoreOptions, truth: &common::Truth) {
    let store = store.clone().with_option(dct_store::PART_BYTES_KEY, "300");
    let ds = Dataset::open(url, ReadOptions { store, ..ReadOptions::default() }).unwrap();
    assert!(ds.n_tiles() > 1 && (0..ds.n_tiles()).all(|t| ds.manifest().tile_bytes[t] > 3 * 300));
    for batch in random_batches(41, truth.n_cells(), 10, 150) {
        assert_batch(&ds.get_batch_as::<u32>(&batch).unwrap(), truth, &batch);
    }
    assert_eq!(ds.stats().tiles_fetched, ds.n_tiles() as u64);
    assert!(ds.verify(&VerifyOptions::default(), |_, _| {}).is_ok());
}

#[cfg(feature = "aws")]
#[test]
fn s3_round_trip() {
    let (Ok(endpoint), Ok(bucket)) = (std::env::var("DCT_S3_ENDPOINT"), std::env::var("DCT_S3_BUCKET")) else {
        skip("DCT_S3_ENDPOINT / DCT_S3_BUCKET");
        return;
    };
    let store = StoreOptions {
        config: [
            ("aws_endpoint", endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..StoreOptions::default()
    };
    let url = format!("s3://{bucket}/{}/ds", unique("dct"));
    let truth = random_truth(21, 700, 300, 0.03, true);
    let opts = WriterOptions {
        tile_size: 128,
        zstd_level: 3,
        exception_policy: dct_codec::ExceptionPolicy::Unlimited,
        store: store.clone(),
        ..WriterOptions::new(300)
    };
    let mut w = DatasetWriter::create(&url, opts.clone()).unwrap();
    append_all(&mut w, &truth, 22, 200);
    w.set_gene_order((0..300).rev().collect()).unwrap();
    w.finish().unwrap();

    let e = DatasetWriter::create(&url, opts.clone()).unwrap_err();
    assert_eq!(e.category(), Category::AlreadyExists, "{e}");

    let ds = Dataset::open(&url, ReadOptions { store: store.clone(), ..ReadOptions::default() }).unwrap();
    assert_eq!(ds.n_tiles(), 6);
    ds.prefetch(&[0, 1, 2]).unwrap();
    for batch in random_batches(23, truth.n_cells(), 20, 150) {
        assert_batch(&ds.get_batch_as::<u32>(&batch).unwrap(), &truth, &batch);
    }
    assert_eq!(ds.stats().tiles_fetched, 6, "one GET per tile");
    assert_eq!(*ds.gene_order().unwrap().unwrap(), (0..300).rev().collect::<Vec<i32>>());
    assert!(ds.verify(&VerifyOptions::default(), |_, _| {}).is_ok());
    read_in_parts(&url, &store, &truth);

    let missing = format!("s3://{bucket}/{}/nothing", unique("dct"));
    let e = Dataset::open(&missing, ReadOptions { store, ..ReadOptions::default() }).unwrap_err();
    assert_eq!(e.category(), Category::ManifestMissing, "{e}");
}

#[cfg(feature = "http")]
#[test]
fn http_read() {
    let (Ok(base), Ok(root)) = (std::env::var("DCT_HTTP_URL"), std::env::var("DCT_HTTP_ROOT")) else {
        skip("DCT_HTTP_URL / DCT_HTTP_ROOT");
        return;
    };
    // nginx serves static files; write the dataset into its root locally, then read it over HTTP.
    let name = unique("dct");
    let truth = random_truth(31, 500, 200, 0.05, false);
    let mut w = DatasetWriter::create(
        &format!("{root}/{name}"),
        WriterOptions { tile_size: 100, zstd_level: 3, ..WriterOptions::new(200) },
    )
    .unwrap();
    append_all(&mut w, &truth, 32, 150);
    w.set_var_names((0..200).map(|g| format!("gene-{g}")).collect()).unwrap();
    w.finish().unwrap();

    let url = format!("{}/{name}", base.trim_end_matches('/'));
    let ds = Dataset::open(&url, ReadOptions::default()).unwrap();
    for batch in random_batches(33, truth.n_cells(), 20, 150) {
        assert_batch(&ds.get_batch_as::<u32>(&batch).unwrap(), &truth, &batch);
    }
    assert_eq!(ds.stats().tiles_fetched, 5);
    assert_eq!(ds.var_names().unwrap().unwrap()[7], "gene-7");
    assert!(ds.verify(&VerifyOptions::default(), |_, _| {}).is_ok());
    read_in_parts(&url, &StoreOptions::default(), &truth);

    let tile = format!("{root}/{name}/tiles/tile_000002.dct");
    std::fs::remove_file(&tile).unwrap();
    let fresh = Dataset::open(&url, ReadOptions::default()).unwrap();
    let e = fresh.get_batch(&[250]).unwrap_err();
    assert_eq!((e.category(), e.tile()), (Category::TileMissing, Some(2)), "{e}");
    assert!(e.to_string().contains("http://"), "{e}");
}
