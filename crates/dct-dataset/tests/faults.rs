//! Storage faults under the dataset reader and writer: a seeded fault-injecting object store (errors, timeouts,
//! bodies that break off, truncated, over-long, shifted and bit-flipped bodies, failed PUTs) and the promises that
//! hold under it. Every successful read equals the in-memory truth; every failure names the object and has the
//! category of its fault; failures are not cached; a failed write leaves no manifest.
//!
//! Counts are printed with `--nocapture` (docs/ROBUSTNESS.md, "Storage faults").

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{Truth, assert_batch, block, random_truth};
use dct_codec::CsrMatrix;
use dct_dataset::object_store::memory::InMemory;
use dct_dataset::object_store::path::Path;
use dct_dataset::object_store::{
    Attributes, CopyOptions, Extensions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions,
};
use dct_dataset::{Category, Dataset, DatasetError, DatasetWriter, ReadOptions, WriterOptions};
use futures::StreamExt;
use futures::stream::BoxStream;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

// ---------------------------------------------------------------------------------------------------------------
// The fault-injecting store.

/// What can go wrong with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Fault {
    /// The request fails at once with a generic (transient) error.
    Error,
    /// The request hangs for a while, then fails with a timeout.
    Timeout,
    /// The body stream breaks off with an error after part of the bytes (a reset connection).
    BodyError,
    /// The body ends early; the result still claims the full range.
    Truncate,
    /// Extra bytes follow the body; the result still claims the requested range.
    Extend,
    /// The body holds bytes of another range of the object (whole-object GETs: the object rotated).
    WrongRange,
    /// One bit of the body is flipped.
    BitFlip,
}

const ALL_FAULTS: [Fault; 7] =
    [Fault::Error, Fault::Timeout, Fault::BodyError, Fault::Truncate, Fault::Extend, Fault::WrongRange, Fault::BitFlip];

/// How long a [`Fault::Timeout`] hangs before failing.
const TIMEOUT_SLEEP: Duration = Duration::from_millis(15);

#[derive(Debug)]
struct FaultState {
    seed: u64,
    /// Requests seen so far, by object and range.
    attempts: std::collections::HashMap<String, u64>,
    /// Probability that a GET of a matching object gets a fault.
    get_rate: f64,
    /// Fault kinds drawn from (uniformly).
    kinds: Vec<Fault>,
    /// Only objects whose path contains this are faulted.
    only: String,
    /// PUTs (in order, counting from 0) that fail: `(index, stored anyway)`.
    fail_puts: Vec<(u64, bool)>,
    puts: u64,
    /// Faults injected since the last `take_log`: kind and object path.
    log: Vec<(Fault, String)>,
}

/// An object store wrapper that injects seeded faults into GETs and PUTs.
#[derive(Debug)]
struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    state: Mutex<FaultState>,
}

impl FaultStore {
    fn new(inner: Arc<dyn ObjectStore>, seed: u64) -> Arc<Self> {
        Arc::new(FaultStore {
            inner,
            state: Mutex::new(FaultState {
                seed,
                attempts: std::collections::HashMap::new(),
                get_rate: 0.0,
                kinds: ALL_FAULTS.to_vec(),
                only: String::new(),
                fail_puts: Vec::new(),
                puts: 0,
                log: Vec::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Faults GETs of objects whose path contains `only` with probability `rate`, drawing from `kinds`.
    fn set_gets(&self, rate: f64, kinds: &[Fault], only: &str) {
        let mut s = self.lock();
        s.get_rate = rate;
        s.kinds = kinds.to_vec();
        s.only = only.to_string();
    }

    fn take_log(&self) -> Vec<(Fault, String)> {
        std::mem::take(&mut self.lock().log)
    }

    /// The fault (if any) for a GET of `location` (`range` as asked). The decision depends only on the seed, the
    /// request and how many times the same request was made before, not on the order of concurrent requests, so
    /// runs are reproducible.
    fn draw(&self, location: &Path, range: &Option<GetRange>) -> Option<(Fault, u64)> {
        let mut s = self.lock();
        let path = location.to_string();
        if s.get_rate <= 0.0 || !path.contains(s.only.as_str()) {
            return None;
        }
        let key = format!("{path} {range:?}");
        let attempt = {
            let n = s.attempts.entry(key.clone()).or_default();
            *n += 1;
            *n
        };
        let mut rng = ChaCha8Rng::seed_from_u64(fnv1a(s.seed, &format!("{key} #{attempt}")));
        if !rng.random_bool(s.get_rate) {
            return None;
        }
        let kind = s.kinds[rng.random_range(0..s.kinds.len())];
        s.log.push((kind, path));
        Some((kind, rng.random::<u64>()))
    }
}

/// FNV-1a of `text`, started from `seed`.
fn fnv1a(seed: u64, text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

fn injected(what: String) -> object_store::Error {
    object_store::Error::Generic { store: "FaultStore", source: what.into() }
}

/// A body that yields `bytes` (in two pieces, then an error, if `break_off`).
fn body(bytes: Bytes, break_off: Option<String>) -> GetResultPayload {
    match break_off {
        None => GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed()),
        Some(msg) => {
            let items: Vec<object_store::Result<Bytes>> = vec![Ok(bytes), Err(injected(msg))];
            GetResultPayload::Stream(futures::stream::iter(items).boxed())
        }
    }
}

/// `bytes` changed by `fault` (a body fault), with `salt` choosing where. `other` yields the object's bytes in
/// another range of the same length, if there is one.
fn alter(fault: Fault, bytes: Bytes, salt: u64, other: Option<Bytes>) -> (Bytes, Option<String>) {
    let n = bytes.len();
    let mut rng = ChaCha8Rng::seed_from_u64(salt);
    match fault {
        Fault::BodyError => {
            let keep = if n == 0 { 0 } else { rng.random_range(0..n) };
            (bytes.slice(..keep), Some("injected: connection reset while reading the body".into()))
        }
        Fault::Truncate => {
            let keep = if n == 0 { 0 } else { rng.random_range(0..n) };
            (bytes.slice(..keep), None)
        }
        Fault::Extend => {
            let mut v = bytes.to_vec();
            let extra = rng.random_range(1..=64);
            v.extend((0..extra).map(|_| rng.random::<u8>()));
            (Bytes::from(v), None)
        }
        Fault::WrongRange => match other {
            Some(o) => (o, None),
            None if n > 1 => {
                // A whole-object GET: the bytes rotated by k, as if read from the wrong offset with wrap-around.
                let k = rng.random_range(1..n);
                let mut v = bytes[k..].to_vec();
                v.extend_from_slice(&bytes[..k]);
                (Bytes::from(v), None)
            }
            None => (bytes, None),
        },
        Fault::BitFlip => {
            if n == 0 {
                return (bytes, None);
            }
            let mut v = bytes.to_vec();
            let i = rng.random_range(0..n);
            v[i] ^= 1 << rng.random_range(0..8);
            (Bytes::from(v), None)
        }
        Fault::Error | Fault::Timeout => unreachable!("request faults have no body"),
    }
}

#[async_trait::async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let fail = {
            let mut s = self.lock();
            let i = s.puts;
            s.puts += 1;
            s.fail_puts.iter().find(|(k, _)| *k == i).copied()
        };
        match fail {
            None => self.inner.put_opts(location, payload, opts).await,
            Some((_, false)) => Err(injected(format!("injected failure of PUT {location}"))),
            Some((_, true)) => {
                // Stored, but the response is lost.
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected(format!("injected: response to PUT {location} lost")))
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        if options.head {
            return self.inner.get_opts(location, options).await;
        }
        let Some((fault, salt)) = self.draw(location, &options.range) else {
            return self.inner.get_opts(location, options).await;
        };
        match fault {
            Fault::Error => return Err(injected(format!("injected transient failure of GET {location}"))),
            Fault::Timeout => {
                tokio::time::sleep(TIMEOUT_SLEEP).await;
                return Err(injected(format!("injected: GET {location} timed out")));
            }
            _ => {}
        }
        let ranged = options.range.is_some();
        let GetResult { payload, meta, range, attributes, extensions } = self.inner.get_opts(location, options).await?;
        let whole = GetResult {
            payload,
            meta: meta.clone(),
            range: range.clone(),
            attributes: Attributes::default(),
            extensions: Extensions::default(),
        };
        let bytes = whole.bytes().await?;
        let len = range.end - range.start;
        let other = if fault == Fault::WrongRange && ranged && meta.size > len {
            let mut rng = ChaCha8Rng::seed_from_u64(salt ^ 0x5eed);
            let mut start = rng.random_range(0..=meta.size - len);
            if start == range.start {
                start = if start > 0 { start - 1 } else { start + 1 };
            }
            Some(self.inner.get_range(location, start..start + len).await?)
        } else {
            None
        };
        let (bytes, break_off) = alter(fault, bytes, salt, other);
        Ok(GetResult { payload: body(bytes, break_off), meta, range, attributes, extensions })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        // Each range through `get_opts`, so that each can be faulted.
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            out.push(self.get_range(location, r.clone()).await?);
        }
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers.

const N_GENES: u64 = 300;
const TILE: u64 = 40;

fn writer_options() -> WriterOptions {
    WriterOptions { tile_size: TILE, n_chunks: 3, zstd_level: 3, encode_threads: 2, ..WriterOptions::new(N_GENES) }
}

/// Writes `truth` (plus gene names) under `ds/` of `store`, in blocks of random sizes; errors are returned.
fn write(store: Arc<dyn ObjectStore>, truth: &Truth, seed: u64) -> Result<(), DatasetError> {
    let mut w = DatasetWriter::create_with_store(store, "ds", writer_options())?;
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

fn has_manifest(mem: &Arc<InMemory>) -> bool {
    match run(mem.head(&Path::from("ds/manifest.json"))) {
        Ok(_) => true,
        Err(object_store::Error::NotFound { .. }) => false,
        Err(e) => panic!("HEAD manifest: {e}"),
    }
}

/// The categories a fault of `kind` may surface as, when it hits a tile GET.
fn tile_categories(kind: Fault) -> &'static [Category] {
    match kind {
        Fault::Error | Fault::Timeout | Fault::BodyError => &[Category::Io],
        Fault::Truncate | Fault::Extend => &[Category::TileBytes],
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

/// 400 seeded batches (some with a prefetch first) against tile GETs faulted with probability 0.25, with the
/// decoded-tile cache on and off. A batch succeeds exactly when none of its GETs was faulted (prefetch rounds:
/// success means the truth, failure means a fault), and then equals the truth; a failure names a faulted object
/// and has its fault's category; the same batch read again without faults succeeds.
#[test]
fn reader_under_tile_faults_returns_the_truth_or_an_error_naming_the_object() {
    let truth = random_truth(11, 700, N_GENES, 0.04, true);
    let mem = Arc::new(InMemory::new());
    write(mem.clone(), &truth, 12).unwrap();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut injected_by_kind: BTreeMap<Fault, u64> = BTreeMap::new();
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut rounds = 0;
    for (pass, cached) in [(0u64, 16usize), (1, 0)] {
        let faulty = FaultStore::new(mem.clone(), 100 + pass);
        let ds = Dataset::open_with_store(
            faulty.clone(),
            "ds",
            ReadOptions { max_cached_tiles: cached, decode_threads: 2, ..ReadOptions::default() },
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
            match got {
                Ok(batch) => {
                    assert_batch(&batch, &truth, &cells);
                    if !prefetch {
                        assert!(faults.is_empty(), "round {round}: a faulted GET went unnoticed: {faults:?}");
                    }
                    *outcomes.entry("ok".into()).or_default() += 1;
                }
                Err(e) => {
                    assert!(!faults.is_empty(), "round {round}: failed without a fault: {e}");
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
    }
    eprintln!("reader, {rounds} batches: faults injected {injected_by_kind:?}; outcomes {outcomes:#?}");
    for k in ALL_FAULTS {
        assert!(injected_by_kind.get(&k).copied().unwrap_or(0) >= 10, "too few {k:?} faults: {injected_by_kind:?}");
    }
}

/// The reader does not retry by itself: one transient fault fails the call (with an `io` error naming the tile),
/// and the next call fetches the tile again and succeeds. Side files behave the same.
#[test]
fn one_transient_fault_fails_one_call_and_the_next_call_succeeds() {
    let truth = random_truth(21, 200, N_GENES, 0.05, false);
    let mem = Arc::new(InMemory::new());
    write(mem.clone(), &truth, 22).unwrap();
    for kind in [Fault::Error, Fault::Timeout, Fault::BodyError] {
        let faulty = FaultStore::new(mem.clone(), 23);
        let ds = Dataset::open_with_store(faulty.clone(), "ds", ReadOptions::default()).unwrap();
        faulty.set_gets(1.0, &[kind], "tile_000002.dct");
        let cells = [0, 85, 199];
        let e = ds.get_batch(&cells).unwrap_err();
        faulty.set_gets(0.0, &[], "");
        assert_eq!(e.category(), Category::Io, "{kind:?}: {e}");
        assert!(e.to_string().contains(&format!("{}/tiles/tile_000002.dct", ds.url())), "{e}");
        assert_eq!(faulty.take_log().len(), 1, "{kind:?}: one GET, no retry inside the library");
        assert_batch(&ds.get_batch_as::<u32>(&cells).unwrap(), &truth, &cells);

        faulty.set_gets(1.0, &[kind], "var_names.txt");
        let e = ds.var_names().unwrap_err();
        faulty.set_gets(0.0, &[], "");
        assert_eq!(e.category(), Category::Io, "{kind:?}: {e}");
        assert!(e.to_string().contains("var_names.txt"), "{e}");
        assert_eq!(ds.var_names().unwrap().unwrap().len(), N_GENES as usize);
    }
}

/// Opening under faults of the manifest GET: transient faults are `io` errors naming `manifest.json`; damaged
/// bodies are refused as invalid JSON or an invalid manifest, or (a bit flip that leaves a valid manifest) give a
/// manifest that differs from the real one. Whatever opened, a batch read through it is the truth or an error.
#[test]
fn opening_under_manifest_faults() {
    let truth = random_truth(31, 230, N_GENES, 0.05, false);
    let mem = Arc::new(InMemory::new());
    write(mem.clone(), &truth, 32).unwrap();
    let good = Dataset::open_with_store(mem.clone(), "ds", ReadOptions::default()).unwrap().manifest().clone();
    let faulty = FaultStore::new(mem.clone(), 33);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let all: Vec<u64> = (0..truth.n_cells()).collect();
    for round in 0..140 {
        let kind = ALL_FAULTS[round % ALL_FAULTS.len()];
        faulty.set_gets(1.0, &[kind], "manifest.json");
        let opened = Dataset::open_with_store(faulty.clone(), "ds", ReadOptions::default());
        faulty.set_gets(0.0, &[], "");
        assert_eq!(faulty.take_log().len(), 1);
        let key = match opened {
            Err(e) => {
                assert!(e.to_string().contains("manifest.json"), "{kind:?}: {e}");
                match kind {
                    Fault::Error | Fault::Timeout | Fault::BodyError => {
                        assert_eq!(e.category(), Category::Io, "{kind:?}: {e}")
                    }
                    _ => assert_ne!(e.category(), Category::Io, "{kind:?}: {e}"),
                }
                format!("{kind:?} -> {}", e.category())
            }
            Ok(ds) => {
                assert!(matches!(kind, Fault::BitFlip | Fault::Extend), "{kind:?} opened");
                let same = *ds.manifest() == good;
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

/// A PUT that fails (or whose response is lost after storing) at any point of a write stops the writer and
/// leaves no manifest, except when the lost response is the manifest's own, in which case the dataset is whole.
/// Every PUT index of the write is tried once with each failure mode.
#[test]
fn a_failing_put_leaves_no_manifest() {
    let truth = random_truth(41, 300, N_GENES, 0.05, false);
    // A clean run counts the PUTs.
    let mem = Arc::new(InMemory::new());
    let counting = FaultStore::new(mem.clone(), 0);
    write(counting.clone(), &truth, 42).unwrap();
    let total = counting.lock().puts;
    assert_eq!(total, 8 + 2, "8 tiles, var_names.txt, manifest.json");
    let (mut failed, mut whole) = (0, 0);
    for stored in [false, true] {
        for k in 0..total {
            let mem = Arc::new(InMemory::new());
            let faulty = FaultStore::new(mem.clone(), k);
            faulty.lock().fail_puts = vec![(k, stored)];
            let result = write(faulty.clone(), &truth, 42);
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
                let ds = Dataset::open_with_store(mem.clone(), "ds", ReadOptions::default()).unwrap();
                let all: Vec<u64> = (0..truth.n_cells()).collect();
                assert_batch(&ds.get_batch_as::<u32>(&all).unwrap(), &truth, &all);
                whole += 1;
            } else {
                assert!(!has_manifest(&mem), "PUT {k} failed (stored: {stored}) and a manifest exists");
                let e = Dataset::open_with_store(mem.clone(), "ds", ReadOptions::default()).unwrap_err();
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

/// GETs of ranges through the wrapper are faulted too (the obs reader uses them); sanity of the wrapper itself:
/// each kind changes what a range read returns in the way it says.
#[test]
fn the_fault_store_does_what_it_says() {
    let mem = Arc::new(InMemory::new());
    let p = Path::from("x/obj");
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    run(mem.put(&p, PutPayload::from(data.clone()))).unwrap();
    let faulty = FaultStore::new(mem.clone(), 1);
    for kind in ALL_FAULTS {
        faulty.set_gets(1.0, &[kind], "obj");
        let got = run(async { faulty.get_range(&p, 100..300).await });
        faulty.set_gets(0.0, &[], "");
        match kind {
            Fault::Error | Fault::Timeout | Fault::BodyError => assert!(got.is_err(), "{kind:?}"),
            Fault::Truncate => assert!(got.unwrap().len() < 200),
            Fault::Extend => assert!(got.unwrap().len() > 200),
            Fault::WrongRange | Fault::BitFlip => {
                let b = got.unwrap();
                assert_eq!(b.len(), 200, "{kind:?}");
                assert_ne!(&b[..], &data[100..300], "{kind:?}");
            }
        }
    }
    // Suffix requests keep working through the wrapper.
    let tail = run(async {
        faulty.get_opts(&p, GetOptions { range: Some(GetRange::Suffix(10)), ..Default::default() }).await
    })
    .unwrap();
    assert_eq!(tail.range, 990..1000);
}
