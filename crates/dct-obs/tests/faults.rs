//! Storage faults under obs: opening (`obs/schema.json`) and localizing columns (shard footers and column chunks,
//! by ranged GETs) against a seeded fault-injecting object store (errors, timeouts, bodies that break off,
//! truncated, over-long, shifted and bit-flipped bodies). Faults must surface as errors naming the object; a
//! localize that succeeds must give the truth; and after the faults stop, a new handle that localizes and takes
//! must get the truth, so no cache file written under faults holds wrong data.
//!
//! Counts are printed with `--nocapture` (docs/ROBUSTNESS.md, "Storage faults").

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{Synth, V, tiles, values, write_synth};
use dct_obs::object_store::path::Path;
use dct_obs::object_store::{
    Attributes, CopyOptions, Extensions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions,
};
use dct_obs::{Obs, ObsError, ObsOptions};
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

fn opts(cache: &std::path::Path) -> ObsOptions {
    ObsOptions { cache_dir: Some(cache.into()), concurrency: 4, ..Default::default() }
}

/// 12 tiles of 300 cells (last 123), 4 tiles per shard (3 shards), inputs switching at tile 7.
async fn synth() -> Synth {
    write_synth(&tiles(12, 300, 123), 7, 4, 17).await
}

fn column_names(s: &Synth) -> Vec<String> {
    s.schema.columns.iter().map(|c| c.name.clone()).collect()
}

/// Whether `take(cells, columns)` of `obs` equals the truth; the first difference otherwise.
fn check_take(obs: &Obs, s: &Synth, columns: &[&str], cells: &[u64]) -> Result<(), String> {
    let batch = obs.take(cells, columns).map_err(|e| format!("take failed: {e}"))?;
    for (i, &name) in columns.iter().enumerate() {
        let c = s.schema.column(name).unwrap();
        if let Some(cats) = c.categories.as_deref() {
            // Codes outside the vocabulary are wrong data too (`values` would panic on them).
            dct_obs::category_labels(batch.column(i).as_ref(), cats)
                .map_err(|e| format!("column {name:?}: codes outside the categories: {e}"))?;
        }
        let got = values(batch.column(i).as_ref(), c.kind, c.categories.as_deref());
        let truth = s.truth(name);
        let want: Vec<V> = cells.iter().map(|&x| truth[x as usize].clone()).collect();
        if got != want {
            let j = (0..want.len()).find(|&j| got[j] != want[j]).unwrap();
            return Err(format!("column {name:?}, cell {}: {:?} instead of {:?}", cells[j], got[j], want[j]));
        }
    }
    Ok(())
}

fn random_cells(rng: &mut ChaCha8Rng, n_cells: u64) -> Vec<u64> {
    let mut cells: Vec<u64> = (0..200).map(|_| rng.random_range(0..n_cells)).collect();
    cells.push(0);
    cells.push(n_cells - 1);
    cells
}

/// The variant of an obs error, for the tallies.
fn variant(e: &ObsError) -> &'static str {
    match e {
        ObsError::Store { .. } => "store",
        ObsError::NotFound { .. } => "not_found",
        ObsError::Schema { .. } => "schema",
        ObsError::TooLarge { .. } => "too_large",
        ObsError::Shard { .. } => "shard",
        ObsError::Parquet { .. } => "parquet",
        ObsError::Arrow { .. } => "arrow",
        ObsError::Cache { .. } => "cache",
        ObsError::CacheCorrupt { .. } => "cache_corrupt",
        ObsError::Internal(_) => "internal",
        _ => "other",
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tests.

/// Faults of `obs/schema.json`: every fault is an error naming the schema; an altered text never opens (the
/// fingerprint covers it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_under_schema_faults_fails_naming_the_schema() {
    let s = synth().await;
    let cache = tempfile::tempdir().unwrap();
    let faulty = FaultStore::new(s.store(), 5);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for round in 0..70 {
        let kind = ALL_FAULTS[round % ALL_FAULTS.len()];
        faulty.set_gets(1.0, &[kind], "schema.json");
        let opened = Obs::open(faulty.clone(), Path::default(), s.manifest.clone(), opts(cache.path())).await;
        faulty.set_gets(0.0, &[], "");
        assert_eq!(faulty.take_log().len(), 1);
        let e = match opened {
            Ok(_) => panic!("{kind:?}: a faulted schema GET opened"),
            Err(e) => e,
        };
        assert!(e.to_string().contains("obs/schema.json"), "{kind:?}: {e}");
        *outcomes.entry(format!("{kind:?} -> {}", variant(&e))).or_default() += 1;
    }
    // Without faults it opens.
    Obs::open(faulty.clone(), Path::default(), s.manifest.clone(), opts(cache.path())).await.unwrap();
    eprintln!("schema GET faults, 70 opens: {outcomes:#?}");
}

/// What [`localize_rounds`] saw.
struct Rounds {
    injected_by_kind: BTreeMap<Fault, u64>,
    outcomes: BTreeMap<String, u64>,
    /// Rounds whose localize (under faults) succeeded with data that is not the truth.
    wrong_under_faults: Vec<String>,
    /// Rounds after which a new handle, without faults, read data that is not the truth from the cache.
    wrong_after: Vec<String>,
}

/// `rounds` seeded rounds: drop some cache files, open a handle on the faulty store, localize 1 to 4 random
/// columns with every shard GET faulted with probability `rate` (a fault of one of `kinds`), then (faults off)
/// open a new handle, localize the same columns and take 202 random cells. Asserts that a failed localize had a
/// fault and names a faulted shard; collects the rounds that gave wrong data.
async fn localize_rounds(kinds: &[Fault], rate: f64, rounds: usize, seed: u64) -> Rounds {
    let s = synth().await;
    let cache = tempfile::tempdir().unwrap();
    let faulty = FaultStore::new(s.store(), seed);
    let names = column_names(&s);
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
    let mut r = Rounds {
        injected_by_kind: BTreeMap::new(),
        outcomes: BTreeMap::new(),
        wrong_under_faults: Vec::new(),
        wrong_after: Vec::new(),
    };
    for round in 0..rounds {
        let k = rng.random_range(1..=4);
        let mut cols: Vec<&str> = Vec::new();
        while cols.len() < k {
            let c = names[rng.random_range(0..names.len())].as_str();
            if !cols.contains(&c) {
                cols.push(c);
            }
        }
        let obs = Obs::open(faulty.clone(), Path::default(), s.manifest.clone(), opts(cache.path())).await.unwrap();
        if let Ok(entries) = std::fs::read_dir(obs.cache_dir()) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().ends_with(".arrow") && rng.random_bool(0.6) {
                    std::fs::remove_file(e.path()).unwrap();
                }
            }
        }
        faulty.set_gets(rate, kinds, "obs/obs_");
        let got = obs.localize(&cols).await;
        faulty.set_gets(0.0, &[], "");
        let faults = faulty.take_log();
        for (k, _) in &faults {
            *r.injected_by_kind.entry(*k).or_default() += 1;
        }
        let cells = random_cells(&mut rng, s.manifest.n_cells());
        let first = faults.first().map(|(k, _)| format!("{k:?}")).unwrap_or_else(|| "no fault".into());
        match got {
            Ok(report) => {
                if let Err(m) = check_take(&obs, &s, &cols, &cells) {
                    r.wrong_under_faults.push(format!("round {round}: {m}; faults {faults:?}; {report:?}"));
                }
                let how = if report.fetched.is_empty() && report.rebuilt.is_empty() { "cached" } else { "fetched" };
                *r.outcomes.entry(format!("{first} -> ok ({how})")).or_default() += 1;
            }
            Err(e) => {
                assert!(!faults.is_empty(), "round {round}: failed without a fault: {e}");
                let msg = e.to_string();
                assert!(
                    faults.iter().any(|(_, p)| msg.contains(p.as_str())),
                    "round {round}: the error names no faulted object: {e}\n{faults:?}"
                );
                let key = format!("{first} -> {}", variant(&e));
                if !r.outcomes.contains_key(&key) && std::env::var_os("DCT_FAULTS_VERBOSE").is_some() {
                    eprintln!("example of {key}: {e}");
                }
                *r.outcomes.entry(key).or_default() += 1;
            }
        }
        // The faults are over: a new handle must see the truth, whatever the cache holds now.
        let later = Obs::open(faulty.clone(), Path::default(), s.manifest.clone(), opts(cache.path())).await.unwrap();
        later.localize(&cols).await.unwrap();
        if let Err(m) = check_take(&later, &s, &cols, &cells) {
            r.wrong_after.push(format!("round {round}: {m}; faults {faults:?}"));
            // Start the next round from a clean cache.
            std::fs::remove_dir_all(later.cache_dir()).unwrap();
        }
        assert!(faulty.take_log().is_empty());
    }
    eprintln!(
        "localize, {rounds} rounds, kinds {kinds:?} at rate {rate}: faults injected {:?}; outcomes {:#?}; \
         wrong data under faults: {}; wrong data read from the cache after the faults: {}",
        r.injected_by_kind,
        r.outcomes,
        r.wrong_under_faults.len(),
        r.wrong_after.len()
    );
    r
}

fn assert_no_wrong_data(r: &Rounds) {
    assert!(
        r.wrong_under_faults.is_empty() && r.wrong_after.is_empty(),
        "wrong data under faults:\n{}\nwrong data read from the cache after the faults:\n{}",
        r.wrong_under_faults.join("\n"),
        r.wrong_after.join("\n")
    );
}

/// Every fault kind but bit flips (see the next test), 150 rounds at a rate of 0.05 per shard GET: a failed
/// localize names a faulted shard, a successful one gives the truth, and so does the cache afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localize_under_faults_never_leaves_wrong_data_in_the_cache() {
    let kinds: Vec<Fault> = ALL_FAULTS.into_iter().filter(|&k| k != Fault::BitFlip).collect();
    let r = localize_rounds(&kinds, 0.05, 150, 7).await;
    for k in kinds {
        assert!(
            r.injected_by_kind.get(&k).copied().unwrap_or(0) >= 5,
            "too few {k:?} faults: {:?}",
            r.injected_by_kind
        );
    }
    assert!(r.outcomes.iter().any(|(k, _)| k.contains("-> ok (fetched)")));
    assert_no_wrong_data(&r);
}

/// Bit flips in shard bodies, 150 rounds at a rate of 0.05 per shard GET. Fails today: parquet column chunks
/// carry no checksum (parquet-rs 60 writes no page CRCs) and localize does not check the shard's SHA-256 (it reads
/// ranges), so a flipped bit in a column chunk can decode to other values, which localize then caches for every
/// later reader (11 to 13 of 150 rounds). Run with `--ignored`; see docs/ROBUSTNESS.md, "Storage faults".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "known issue: a bit flip in a column chunk can be cached as wrong data (docs/ROBUSTNESS.md)"]
async fn bit_flips_while_localizing_never_leave_wrong_data_in_the_cache() {
    let r = localize_rounds(&[Fault::BitFlip], 0.05, 150, 7).await;
    assert_no_wrong_data(&r);
}
