//! One conformance suite, run unchanged against every object-store backend on a server that speaks its protocol:
//! S3 (moto), GCS (fake-gcs-server), Azure Blob (Azurite) and HTTP (nginx). Datasets reach S3 and Azure through
//! the store itself (`deltacells convert --output URL`, the writer); nginx is read-only, so they are written into
//! the folder it serves; fake-gcs-server does not implement the XML API PUT that `object_store`'s GCS client writes
//! with (fsouza/fake-gcs-server#331), so they are written locally and uploaded through its JSON API, and read back
//! through the `gs://` client. `scripts/test-services.sh start` starts the servers and prints the variables this
//! reads:
//!
//! ```text
//! eval "$(scripts/test-services.sh start)"
//! cargo test -p dct-cli --test cli backends:: -- --nocapture
//! ```
//!
//! Without a backend's variables its test skips itself, except under `CI=true`, where it fails.
//!
//! Each backend, against a local copy converted from the same input by the same command as truth:
//! `deltacells convert` with obs and var, `info`, `verify`, `obs show`; random batches equal to the
//! local copy's with one GET per tile; obs localized with ranged reads only; a 1,000-batch random read under 5%
//! injected transient faults; permanent faults within the retry budget; a missing tile and a truncated one giving
//! the typed error with the URL; an interrupted write leaving no manifest.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use bytes::Bytes;
use dct_dataset::dct_obs::ObsOptions;
use dct_dataset::dct_obs::arrow::array::Array;
use dct_dataset::{
    Batch, Category, Dataset, DatasetWriter, ReadOptions, RetryPolicy, Store, StoreOptions, WriterOptions,
};
use dct_store::testing::{Fault, TRANSPORT_FAULTS, counted, faulty};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

const TILE_SIZE: u64 = 64;
const INPUT: &str = "inputs/wu2020_200.h5ad";

/// How datasets get onto a backend's server.
enum Writes {
    /// Through the store: `--output URL`, the writer, PUT and DELETE.
    Store,
    /// Into the local folder the (read-only) server serves at the base URL.
    ServedDir(PathBuf),
    /// Written into a local staging folder, then uploaded object by object through the GCS JSON API at
    /// `endpoint` (`POST /upload/storage/v1/b/<bucket>/o?uploadType=media`).
    GcsJsonApi { endpoint: String, bucket: String, staging: PathBuf },
}

/// Where one backend's datasets go and how to reach them.
struct Backend {
    name: &'static str,
    /// URL of a fresh, empty location for this run (`<scheme>://<bucket>/<unique>`).
    base: String,
    /// `--store-option`s (and `StoreOptions::config`) that reach the server.
    options: Vec<(String, String)>,
    writes: Writes,
}

impl Backend {
    /// The backend's location of dataset `name`.
    fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    fn store_options(&self) -> StoreOptions {
        StoreOptions { config: self.options.clone(), ..StoreOptions::default() }
    }

    fn store(&self, name: &str) -> Store {
        Store::from_url(&self.url(name), &self.store_options()).expect("open the store")
    }

    /// `--store-option K=V` for every option.
    fn cli_options(&self) -> Vec<String> {
        self.options.iter().flat_map(|(k, v)| ["--store-option".to_string(), format!("{k}={v}")]).collect()
    }

    /// Where `deltacells convert` and the writer put dataset `name`: the URL, or a local folder.
    fn write_target(&self, name: &str) -> String {
        match &self.writes {
            Writes::Store => self.url(name),
            Writes::ServedDir(dir) => dir.join(self.base_suffix()).join(name).to_str().unwrap().to_string(),
            Writes::GcsJsonApi { staging, .. } => staging.join(name).to_str().unwrap().to_string(),
        }
    }

    /// The store a writer of dataset `name` writes through, and the `StoreOptions` it needs.
    fn write_store(&self, name: &str) -> (Store, StoreOptions) {
        match &self.writes {
            Writes::Store => (self.store(name), self.store_options()),
            _ => {
                (Store::from_url(&self.write_target(name), &StoreOptions::default()).unwrap(), StoreOptions::default())
            }
        }
    }

    /// Makes what was written to [`write_target`](Self::write_target) visible at the URL (uploads it, for GCS).
    fn publish(&self, name: &str) {
        if let Writes::GcsJsonApi { staging, .. } = &self.writes {
            let root = staging.join(name);
            // A write that stored nothing left no folder.
            let mut stack = if root.exists() { vec![root.clone()] } else { Vec::new() };
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        stack.push(path);
                    } else {
                        let rel = path.strip_prefix(&root).unwrap().to_str().unwrap().to_string();
                        self.gcs_upload(name, &rel, &std::fs::read(&path).unwrap());
                    }
                }
            }
        }
    }

    /// The unique folder under the server's root (the part of `base` after the host).
    fn base_suffix(&self) -> &str {
        self.base.rsplit('/').next().unwrap()
    }

    /// Runs `curl` against the GCS JSON API.
    fn gcs_curl(&self, args: &[&str]) {
        let o = Command::new("curl").args(["-s", "-f", "-o", "/dev/null"]).args(args).output().expect("run curl");
        assert!(o.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }

    fn gcs_object(&self, name: &str, rel: &str) -> String {
        format!("{}/{name}/{rel}", self.base_suffix()).replace('/', "%2F")
    }

    fn gcs_upload(&self, name: &str, rel: &str, bytes: &[u8]) {
        let Writes::GcsJsonApi { endpoint, bucket, staging } = &self.writes else { unreachable!() };
        let file = staging.join(format!("upload-{}", std::process::id()));
        std::fs::write(&file, bytes).unwrap();
        let url =
            format!("{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={}", self.gcs_object(name, rel));
        let data = format!("@{}", file.display());
        self.gcs_curl(&["-X", "POST", "-H", "Content-Type: application/octet-stream", "--data-binary", &data, &url]);
    }

    /// Replaces (or, with `None`, deletes) object `rel` of dataset `name` on the server.
    fn damage(&self, name: &str, rel: &str, bytes: Option<Vec<u8>>) {
        match &self.writes {
            Writes::ServedDir(dir) => {
                let path = dir.join(self.base_suffix()).join(name).join(rel);
                match bytes {
                    Some(b) => std::fs::write(path, b).unwrap(),
                    None => std::fs::remove_file(path).unwrap(),
                }
            }
            Writes::GcsJsonApi { endpoint, bucket, .. } => match bytes {
                Some(b) => self.gcs_upload(name, rel, &b),
                None => {
                    let url = format!("{endpoint}/storage/v1/b/{bucket}/o/{}", self.gcs_object(name, rel));
                    self.gcs_curl(&["-X", "DELETE", &url]);
                }
            },
            Writes::Store => {
                let store = self.store(name);
                let rel = rel.to_string();
                dct_store::runtime::block_on(async move {
                    match bytes {
                        Some(b) => store.put(&rel, Bytes::from(b)).await,
                        None => store.delete(&rel).await,
                    }
                })
                .unwrap()
                .unwrap();
            }
        }
    }

    /// The bytes of object `rel` of dataset `name`.
    fn read(&self, name: &str, rel: &str) -> Vec<u8> {
        let store = self.store(name);
        let rel = rel.to_string();
        dct_store::runtime::block_on(async move { store.get_limited(&rel, 1 << 30).await }).unwrap().unwrap().to_vec()
    }
}

fn unique() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("dct-{}-{nanos}", std::process::id())
}

/// The backend described by the variables `vars` (built by `make` from their values); `None` (skip) when one is
/// missing, a panic under `CI=true`.
fn backend(vars: &[&str], make: impl FnOnce(&[String]) -> Backend) -> Option<Backend> {
    let values: Vec<Option<String>> = vars.iter().map(|v| std::env::var(v).ok().filter(|s| !s.is_empty())).collect();
    if values.iter().any(Option::is_none) {
        let msg = format!("{vars:?} not all set: start the servers with `eval \"$(scripts/test-services.sh start)\"`");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and {msg}");
        }
        eprintln!("skipped: {msg}");
        return None;
    }
    Some(make(&values.into_iter().map(Option::unwrap).collect::<Vec<_>>()))
}

fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

fn deltacells(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_deltacells")).args(args).output().expect("run deltacells")
}

fn ok(args: &[String]) -> Output {
    let o = deltacells(args);
    assert_eq!(o.status.code(), Some(0), "deltacells {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `deltacells convert` of the input with obs and var into `target`.
fn convert(target: &str, extra: &[String]) {
    let input = testdata(INPUT);
    let mut args = strings(&["convert", input.to_str().unwrap(), "--output", target, "--level", "3"]);
    args.extend(strings(&["--tile-size", &TILE_SIZE.to_string(), "--threads", "2"]));
    args.extend_from_slice(extra);
    ok(&args);
}

/// Random batches of 1 to 40 cells (repeats and any order) over `n_cells`.
fn random_batches(seed: u64, n_cells: u64, n: usize) -> Vec<Vec<u64>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| (0..rng.random_range(1..=40)).map(|_| rng.random_range(0..n_cells)).collect()).collect()
}

fn assert_same(got: &Batch<u32>, want: &Batch<u32>, cells: &[u64], what: &str) {
    assert_eq!(
        (&got.indptr, &got.indices, &got.values),
        (&want.indptr, &want.indices, &want.values),
        "{what}: batch {cells:?}"
    );
}

fn tile_name(t: usize) -> String {
    format!("tiles/tile_{t:06}.dct")
}

/// A retry policy with the default budget (3 retries) and short delays, so that the fault runs stay quick.
fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        ..RetryPolicy::default()
    }
}

fn conformance(b: &Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    convert(local.to_str().unwrap(), &[]);
    let truth = Dataset::open(local.to_str().unwrap(), ReadOptions::default()).unwrap();
    let n_tiles = truth.n_tiles();
    assert!(n_tiles >= 3, "the input makes {n_tiles} tiles");

    // Convert straight to the backend (HTTP: into the folder nginx serves).
    let name = "ds";
    let url = b.url(name);
    let extra = if matches!(b.writes, Writes::Store) { b.cli_options() } else { Vec::new() };
    convert(&b.write_target(name), &extra);
    b.publish(name);
    let cli = b.cli_options();

    // info and verify through the command line.
    let with = |args: &[&str]| -> Vec<String> { strings(args).into_iter().chain(cli.iter().cloned()).collect() };
    let info = json(&ok(&with(&["info", &url, "--json"])));
    let local_info = json(&ok(&strings(&["info", local.to_str().unwrap(), "--json"])));
    for key in
        ["n_cells", "n_genes", "n_tiles", "nnz", "tile_bytes_total", "has_var_table", "has_obs", "obs_fingerprint"]
    {
        assert_eq!(info[key], local_info[key], "{}: info {key}", b.name);
    }
    assert_eq!(info["has_obs"], true);
    ok(&with(&["verify", &url]));
    // obs values, through the command line, equal the local copy's.
    let cache = tmp.path().join("cache");
    let show = |dataset: &str, cache: &Path| {
        let mut args = strings(&["obs", "show", dataset, "--cells", "0:200", "--json", "--cache-dir"]);
        args.push(cache.to_str().unwrap().to_string());
        args.extend(cli.iter().cloned());
        json(&ok(&args))
    };
    assert_eq!(show(&url, &cache), show(local.to_str().unwrap(), &tmp.path().join("local-cache")), "{}: obs", b.name);

    // Random batches equal to the local copy's, one GET per tile.
    let (store, counter) = counted(&b.store(name));
    let ds = Dataset::open_store(store, ReadOptions { store: b.store_options(), ..ReadOptions::default() }).unwrap();
    assert_eq!(ds.var_names().unwrap(), truth.var_names().unwrap(), "{}: var names", b.name);
    assert_eq!(ds.gene_order().unwrap(), truth.gene_order().unwrap(), "{}: gene order", b.name);
    counter.reset();
    for cells in random_batches(1, truth.n_cells(), 200) {
        let want = truth.get_batch_as::<u32>(&cells).unwrap();
        assert_same(&ds.get_batch_as::<u32>(&cells).unwrap(), &want, &cells, b.name);
    }
    let counts = counter.counts();
    for t in 0..n_tiles {
        assert_eq!(counts.gets_of(&tile_name(t)), 1, "{}: GETs of tile {t}", b.name);
    }
    assert_eq!(ds.stats().tiles_fetched, n_tiles as u64);

    // The same batches with each tile read as concurrent ranged GETs of at least 3 parts (as tiles above 8 MiB
    // are): equal rows, the parts covering each tile once.
    let tile_bytes = ds.manifest().tile_bytes.clone();
    let part = (tile_bytes.iter().min().unwrap() / 3).max(1);
    let (store, counter) = counted(&b.store(name).with_part_bytes(part));
    let ds = Dataset::open_store(store, ReadOptions { store: b.store_options(), ..ReadOptions::default() }).unwrap();
    counter.reset();
    for cells in random_batches(2, truth.n_cells(), 200) {
        let want = truth.get_batch_as::<u32>(&cells).unwrap();
        assert_same(&ds.get_batch_as::<u32>(&cells).unwrap(), &want, &cells, b.name);
    }
    let counts = counter.counts();
    for (t, &bytes) in tile_bytes.iter().enumerate() {
        let parts = bytes.div_ceil(part);
        assert_eq!(counts.gets_of(&tile_name(t)), parts, "{}: GETs of tile {t} in parts of {part} bytes", b.name);
        let covered: u64 = counter
            .requests()
            .iter()
            .filter(|r| r.path.ends_with(&tile_name(t)))
            .map(|r| r.range.as_ref().map_or(0, |r| r.end - r.start))
            .sum();
        assert_eq!(covered, bytes, "{}: tile {t}'s parts", b.name);
    }

    // Obs localized with ranged reads only; values equal the local copy's.
    counter.reset();
    let obs = ds.obs(ObsOptions { cache_dir: Some(tmp.path().join("cache2")), ..ObsOptions::default() }).unwrap();
    let truth_obs =
        truth.obs(ObsOptions { cache_dir: Some(tmp.path().join("cache3")), ..ObsOptions::default() }).unwrap();
    let columns: Vec<String> = obs.schema().columns.iter().map(|c| c.name.clone()).collect();
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    obs.localize_blocking(&refs).unwrap();
    truth_obs.localize_blocking(&refs).unwrap();
    for c in &refs {
        assert_eq!(
            obs.column(c).unwrap().to_data(),
            truth_obs.column(c).unwrap().to_data(),
            "{}: obs column {c}",
            b.name
        );
    }
    let shard_reads: Vec<_> = counter
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("obs/obs_") && r.path.ends_with(".parquet"))
        .collect();
    assert!(!shard_reads.is_empty());
    for r in &shard_reads {
        assert!(r.range.is_some(), "{}: a whole-object GET of {} while localizing", b.name, r.path);
    }

    faults(b, name, &truth);

    // A missing tile and a truncated one: typed errors naming the tile and the URL.
    let tile1 = b.read(name, &tile_name(1));
    b.damage(name, &tile_name(1), None);
    let fresh = Dataset::open(&url, ReadOptions { store: b.store_options(), ..ReadOptions::default() }).unwrap();
    let e = fresh.get_batch(&[TILE_SIZE]).unwrap_err();
    assert_eq!((e.category(), e.tile()), (Category::TileMissing, Some(1)), "{}: {e}", b.name);
    assert!(e.to_string().contains(&b.base), "{}: {e}", b.name);
    b.damage(name, &tile_name(1), Some(tile1));
    let tile2 = b.read(name, &tile_name(2));
    b.damage(name, &tile_name(2), Some(tile2[..tile2.len() / 2].to_vec()));
    let fresh = Dataset::open(&url, ReadOptions { store: b.store_options(), ..ReadOptions::default() }).unwrap();
    assert_same(
        &fresh.get_batch_as::<u32>(&[TILE_SIZE]).unwrap(),
        &truth.get_batch_as(&[TILE_SIZE]).unwrap(),
        &[],
        "restored",
    );
    let e = fresh.get_batch(&[2 * TILE_SIZE]).unwrap_err();
    assert_eq!((e.category(), e.tile()), (Category::TileBytes, Some(2)), "{}: {e}", b.name);
    assert!(e.to_string().contains(&b.base), "{}: {e}", b.name);
    let verify = deltacells(&with(&["verify", &url]));
    assert_eq!(verify.status.code(), Some(1), "{}: verify of a truncated tile", b.name);

    interrupted_write(b, &truth);
}

/// A 1,000-batch random read under 5% transient faults returns exactly the right rows; a fault on every attempt
/// fails after the retry budget, a permanent one (access denied) after one attempt, both with typed errors.
fn faults(b: &Backend, name: &str, truth: &Dataset) {
    // The bulk read gets 8 retries: with 3, one of ~3,300 fetches fails all 4 attempts about 2% of the time
    // (0.05^4 each), and the schedule changes with every run's object names. 0.05^9 per fetch never happens.
    let patient = RetryPolicy { max_retries: 8, ..quick_retries() };
    let (store, faults) = faulty(&b.store(name).with_retry(patient), 11);
    let (store, counter) = counted(&store);
    // No decoded-tile cache: every batch fetches its tiles again, so the faults hit thousands of GETs.
    let read = ReadOptions { max_cached_tiles: 0, store: b.store_options(), ..ReadOptions::default() };
    let ds = Dataset::open_store(store, read.clone()).unwrap();
    faults.set_gets(0.05, &TRANSPORT_FAULTS, "tiles/");
    for cells in random_batches(2, truth.n_cells(), 1000) {
        let want = truth.get_batch_as::<u32>(&cells).unwrap();
        assert_same(&ds.get_batch_as::<u32>(&cells).unwrap(), &want, &cells, b.name);
    }
    let injected = faults.take_log().len();
    let gets = counter.counts().gets;
    eprintln!("{}: 1000 batches, {gets} GETs, {injected} transient faults injected, every row right", b.name);
    assert!(injected * 100 >= gets as usize * 3, "{}: only {injected} faults in {gets} GETs", b.name);

    // A fault on every attempt: the typed error after exactly 1 + 3 retries (the default budget).
    let (store, faults) = faulty(&b.store(name).with_retry(quick_retries()), 11);
    let (store, counter) = counted(&store);
    let ds = Dataset::open_store(store, read).unwrap();
    faults.set_first_gets(u64::MAX, &[Fault::Error], &tile_name(0));
    counter.reset();
    let e = ds.get_batch(&[0]).unwrap_err();
    assert_eq!(e.tile(), Some(0), "{}: {e}", b.name);
    assert!(e.to_string().contains(&b.base) && e.to_string().contains("4 attempts"), "{}: {e}", b.name);
    assert_eq!(counter.counts().gets_of(&tile_name(0)), 4, "{}: {e}", b.name);
    // Access denied: not retried.
    faults.set_first_gets(u64::MAX, &[Fault::Denied], &tile_name(0));
    counter.reset();
    let e = ds.get_batch(&[0]).unwrap_err();
    assert_eq!(e.tile(), Some(0), "{}: {e}", b.name);
    assert_eq!(counter.counts().gets_of(&tile_name(0)), 1, "{}: {e}", b.name);
    faults.clear_gets();
    assert_same(&ds.get_batch_as::<u32>(&[0]).unwrap(), &truth.get_batch_as(&[0]).unwrap(), &[0], b.name);
}

/// A write that stops before its manifest (the writer dropped, or its final PUTs failing) leaves a location that
/// does not open as a dataset.
fn interrupted_write(b: &Backend, truth: &Dataset) {
    let n_genes = truth.n_genes();
    let rows = truth.get_batch_as::<u32>(&(0..3 * TILE_SIZE).collect::<Vec<_>>()).unwrap();
    let m = dct_dataset::CsrMatrix {
        n_rows: 3 * TILE_SIZE as usize,
        n_cols: n_genes,
        indptr: &rows.indptr,
        indices: &rows.indices,
        values: &rows.values,
    };
    let options = |store: StoreOptions| WriterOptions {
        tile_size: TILE_SIZE,
        zstd_level: 3,
        store,
        ..WriterOptions::new(n_genes)
    };
    let (dropped, failed) = ("dropped", "failed");
    let (store, store_options) = b.write_store(dropped);
    let mut w = DatasetWriter::create_in(store, options(store_options)).unwrap();
    w.append(&m).unwrap();
    drop(w);
    b.publish(dropped);
    let (store, store_options) = b.write_store(failed);
    let (store, faults) = faulty(&store.with_retry(RetryPolicy::never()), 3);
    let mut w = DatasetWriter::create_in(store, options(store_options)).unwrap();
    w.append(&m).unwrap();
    // Every PUT from here on (tiles still in flight, side files, then the manifest) fails, storing nothing.
    let from = faults.puts();
    faults.fail_puts(&(from..from + 1000).map(|i| (i, false)).collect::<Vec<_>>());
    assert!(w.finish().is_err(), "{}: finish with failing PUTs", b.name);
    b.publish(failed);
    for name in [dropped, failed] {
        let e = Dataset::open(&b.url(name), ReadOptions { store: b.store_options(), ..ReadOptions::default() })
            .unwrap_err();
        assert_eq!(e.category(), Category::ManifestMissing, "{}: {name}: {e}", b.name);
    }
}

#[test]
fn s3_moto() {
    let Some(b) = backend(&["DCT_S3_ENDPOINT", "DCT_S3_BUCKET"], |v| Backend {
        name: "s3",
        base: format!("s3://{}/{}", v[1], unique()),
        options: opts(&[
            ("aws_endpoint", &v[0]),
            ("aws_allow_http", "true"),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
        ]),
        writes: Writes::Store,
    }) else {
        return;
    };
    conformance(&b);
}

/// An S3 endpoint given as http:// is used without `aws_allow_http` (the request reaches the server, which says the
/// dataset is not there), and a bucket that does not exist is named as such, after one attempt.
#[test]
fn s3_plain_http_endpoints_and_missing_buckets() {
    let Some(v) = backend(&["DCT_S3_ENDPOINT", "DCT_S3_BUCKET"], |v| Backend {
        name: "s3",
        base: v[0].clone(),
        options: opts(&[("aws_bucket_name", &v[1])]),
        writes: Writes::Store,
    }) else {
        return;
    };
    let (endpoint, bucket) = (v.base, &v.options[0].1);
    let args = |url: String| -> Vec<String> {
        let mut a = vec!["info".to_string(), url];
        for (k, val) in [
            ("aws_endpoint", endpoint.as_str()),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
        ] {
            a.extend(["--store-option".to_string(), format!("{k}={val}")]);
        }
        a
    };
    let o = deltacells(&args(format!("s3://{bucket}/{}/absent", unique())));
    let text = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("there is no manifest.json"), "{text}");
    assert!(!text.contains("builder error") && !text.contains("attempts"), "{text}");
    let o = deltacells(&args(format!("s3://no-such-bucket-{}/ds", unique())));
    let text = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("does not exist") && text.contains("bucket (container) s3://no-such-bucket-"), "{text}");
    assert!(!text.contains("attempts"), "{text}");
}

#[test]
fn gcs_fake_gcs_server() {
    let staging = tempfile::tempdir().unwrap();
    let Some(b) = backend(&["DCT_GCS_BUCKET", "DCT_GCS_SERVICE_ACCOUNT", "DCT_GCS_ENDPOINT"], |v| Backend {
        name: "gcs",
        base: format!("gs://{}/{}", v[0], unique()),
        options: opts(&[("google_service_account", &v[1]), ("allow_http", "true")]),
        writes: Writes::GcsJsonApi { endpoint: v[2].clone(), bucket: v[0].clone(), staging: staging.path().into() },
    }) else {
        return;
    };
    conformance(&b);
}

#[test]
fn azure_azurite() {
    let Some(b) = backend(&["DCT_AZURE_CONTAINER", "AZURITE_BLOB_STORAGE_URL"], |v| Backend {
        name: "azure",
        base: format!("az://{}/{}", v[0], unique()),
        options: opts(&[("azure_storage_use_emulator", "true")]),
        writes: Writes::Store,
    }) else {
        return;
    };
    conformance(&b);
}

#[test]
fn http_nginx() {
    let Some(b) = backend(&["DCT_HTTP_URL", "DCT_HTTP_ROOT"], |v| {
        let dir = unique();
        std::fs::create_dir_all(Path::new(&v[1]).join(&dir)).unwrap();
        Backend {
            name: "http",
            base: format!("{}/{dir}", v[0].trim_end_matches('/')),
            options: Vec::new(),
            writes: Writes::ServedDir(PathBuf::from(&v[1])),
        }
    }) else {
        return;
    };
    conformance(&b);
}

/// A dataset written straight to a web server that takes PUTs (nginx's WebDAV) but lists nothing (it refuses
/// PROPFIND with 405): the writer finds the location empty by its manifest, as `deltacells convert` does, and the
/// dataset reads back; a second writer finds it taken.
#[test]
fn a_dataset_is_written_to_a_web_server_that_lists_nothing() {
    let Some(b) = backend(&["DCT_HTTP_URL", "DCT_HTTP_ROOT"], |v| Backend {
        name: "http",
        base: format!("{}/{}", v[0].trim_end_matches('/'), unique()),
        options: Vec::new(),
        writes: Writes::Store,
    }) else {
        return;
    };
    let url = b.url("written");
    let store =
        |o: &StoreOptions| WriterOptions { tile_size: 4, zstd_level: 3, store: o.clone(), ..WriterOptions::new(3) };
    let options = b.store_options();
    let (indptr, indices, values) = (vec![0i64, 1, 3, 3, 4, 6], vec![0i32, 0, 2, 1, 1, 2], vec![5u32, 1, 2, 7, 3, 4]);
    let m = dct_dataset::CsrMatrix { n_rows: 5, n_cols: 3, indptr: &indptr, indices: &indices, values: &values };
    let mut w = DatasetWriter::create(&url, store(&options)).unwrap();
    w.append(&m).unwrap();
    w.finish().unwrap();
    let ds = Dataset::open(&url, ReadOptions { store: options.clone(), ..ReadOptions::default() }).unwrap();
    let got = ds.get_batch_as::<u32>(&[4, 0, 1]).unwrap();
    assert_eq!((got.indptr, got.indices, got.values), (vec![0, 2, 3, 5], vec![1, 2, 0, 0, 2], vec![3, 4, 5, 1, 2]));
    let taken = DatasetWriter::create(&url, store(&options)).expect_err("the location holds a dataset");
    assert_eq!(taken.category(), Category::AlreadyExists, "{taken}");
}
