//! Storage faults under obs: opening (`obs/schema.json`) and localizing columns (shard footers and column chunks,
//! by ranged GETs) against a seeded fault-injecting object store (errors, timeouts, bodies that break off,
//! truncated, over-long, shifted and bit-flipped bodies). Faults must surface as errors naming the object; a
//! localize that succeeds must give the truth; and after the faults stop, a new handle that localizes and takes
//! must get the truth, so no cache file written under faults holds wrong data.
//!
//! Counts are printed with `--nocapture` (docs/ROBUSTNESS.md, "Storage faults").

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Synth, V, tiles, values, write_synth};
use dct_obs::{Obs, ObsError, ObsOptions, RetryPolicy, Store};
use dct_store::testing::{ALL_FAULTS, Fault, faulty as fault_layer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

// ---------------------------------------------------------------------------------------------------------------
// Helpers.

/// Retries as the library does them, with millisecond delays so the tests stay quick.
fn fast_retry() -> RetryPolicy {
    RetryPolicy { max_retries: 3, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(4) }
}

fn opts(cache: &std::path::Path) -> ObsOptions {
    ObsOptions { cache_dir: Some(cache.into()), concurrency: 4, ..Default::default() }
}

/// `store` with requests retried as `retry` says.
fn at(store: &Store, retry: RetryPolicy) -> Store {
    store.clone().with_retry(retry)
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
        ObsError::Fingerprint { .. } => "fingerprint",
        ObsError::TooLarge { .. } => "too_large",
        ObsError::Shard { .. } => "shard",
        ObsError::Parquet { .. } => "parquet",
        ObsError::Damaged { .. } => "damaged",
        ObsError::Arrow { .. } => "arrow",
        ObsError::Cache { .. } => "cache",
        ObsError::CacheCorrupt { .. } => "cache_corrupt",
        ObsError::Internal(_) => "internal",
        _ => "other",
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tests.

/// Faults of `obs/schema.json` on every attempt: every fault is an error naming the schema. Transient ones
/// (errors, timeouts, broken, short or long bodies) are retried 3 times first; an altered text never opens (the
/// fingerprint covers it) and is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_under_schema_faults_fails_naming_the_schema() {
    let s = synth().await;
    let cache = tempfile::tempdir().unwrap();
    let (faulty_store, faulty) = fault_layer(&s.store(), 5);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    // A slow start delays the right bytes: it opens, and is left out here.
    let kinds: Vec<Fault> = ALL_FAULTS.into_iter().filter(|&k| k != Fault::SlowStart).collect();
    for round in 0..70 {
        let kind = kinds[round % kinds.len()];
        faulty.set_gets(1.0, &[kind], "schema.json");
        let opened = Obs::open(at(&faulty_store, fast_retry()), s.manifest.clone(), opts(cache.path())).await;
        faulty.set_gets(0.0, &[], "");
        let altered = matches!(kind, Fault::WrongRange | Fault::BitFlip);
        assert_eq!(faulty.take_log().len(), if altered { 1 } else { 4 }, "{kind:?}");
        let e = match opened {
            Ok(_) => panic!("{kind:?}: a faulted schema GET opened"),
            Err(e) => e,
        };
        assert!(e.to_string().contains("obs/schema.json"), "{kind:?}: {e}");
        *outcomes.entry(format!("{kind:?} -> {}", variant(&e))).or_default() += 1;
    }
    // Without faults it opens.
    Obs::open(at(&faulty_store, fast_retry()), s.manifest.clone(), opts(cache.path())).await.unwrap();
    eprintln!("schema GET faults, 70 opens: {outcomes:#?}");
}

/// Transient faults that the retries outlast (the first 1 to 3 attempts of every GET fail): opening and
/// localizing succeed with the truth. Without retries the same faults fail at once, naming the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_faults_are_retried_with_backoff() {
    let s = synth().await;
    let names = column_names(&s);
    let cols: Vec<&str> = names.iter().map(String::as_str).collect();
    let cells: Vec<u64> = (0..s.manifest.n_cells()).step_by(7).collect();
    for kind in [Fault::Error, Fault::Timeout, Fault::BodyError, Fault::Truncate, Fault::Extend, Fault::BitFlip] {
        // A flipped bit is caught by the CRC of a whole footer or chunk read, which may be two GETs (the tail, then
        // the rest of a long footer, whose range a flipped length field changes): each GET is faulted on its own
        // first n attempts, so such a read may need up to 2n attempts before both of its GETs come through clean.
        let policy = if kind == Fault::BitFlip { RetryPolicy { max_retries: 6, ..fast_retry() } } else { fast_retry() };
        for n in 1..=3 {
            let cache = tempfile::tempdir().unwrap();
            let (faulty_store, faulty) = fault_layer(&s.store(), 40 + n);
            faulty.set_first_gets(n, &[kind], "obs/");
            let obs = Obs::open(at(&faulty_store, policy.clone()), s.manifest.clone(), opts(cache.path())).await;
            // A bit flip in schema.json is not retried (it reads as another schema); start from shard faults.
            let obs = match (kind, obs) {
                (Fault::BitFlip, Err(ObsError::Schema { .. } | ObsError::Fingerprint { .. })) => {
                    faulty.set_gets(0.0, &[], "");
                    let obs = Obs::open(at(&faulty_store, policy.clone()), s.manifest.clone(), opts(cache.path()));
                    let obs = obs.await.unwrap();
                    faulty.set_first_gets(n, &[kind], "obs/obs_");
                    obs
                }
                (_, obs) => obs.unwrap_or_else(|e| panic!("{kind:?} x{n}: open failed despite retries: {e}")),
            };
            let report = obs.localize(&cols).await;
            faulty.set_gets(0.0, &[], "");
            let faults = faulty.take_log();
            report.unwrap_or_else(|e| panic!("{kind:?} x{n}: localize failed despite retries: {e}"));
            assert!(faults.len() as u64 >= n, "{kind:?} x{n}: only {} faults injected", faults.len());
            check_take(&obs, &s, &cols, &cells).unwrap_or_else(|m| panic!("{kind:?} x{n}: {m}"));
        }
        // No retries: the first fault fails the call, naming the faulted object.
        let cache = tempfile::tempdir().unwrap();
        let (faulty_store, faulty) = fault_layer(&s.store(), 50);
        let obs =
            Obs::open(at(&faulty_store, RetryPolicy::never()), s.manifest.clone(), opts(cache.path())).await.unwrap();
        faulty.set_first_gets(1, &[kind], "obs/obs_");
        let e = obs.localize(&cols).await.unwrap_err();
        faulty.set_gets(0.0, &[], "");
        let faults = faulty.take_log();
        assert!(faults.iter().any(|(_, p)| e.to_string().contains(p.as_str())), "{kind:?}: {e}\n{faults:?}");
        assert!(e.is_transient(), "{kind:?}: {e}");
    }
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
async fn localize_rounds(kinds: &[Fault], rate: f64, rounds: usize, seed: u64, retry: RetryPolicy) -> Rounds {
    let s = synth().await;
    let cache = tempfile::tempdir().unwrap();
    let (faulty_store, faulty) = fault_layer(&s.store(), seed);
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
        let obs = Obs::open(at(&faulty_store, retry.clone()), s.manifest.clone(), opts(cache.path())).await.unwrap();
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
        let later = Obs::open(at(&faulty_store, fast_retry()), s.manifest.clone(), opts(cache.path())).await.unwrap();
        later.localize(&cols).await.unwrap();
        if let Err(m) = check_take(&later, &s, &cols, &cells) {
            r.wrong_after.push(format!("round {round}: {m}; faults {faults:?}"));
            // Start the next round from a clean cache.
            std::fs::remove_dir_all(later.cache_dir()).unwrap();
        }
        assert!(faulty.take_log().is_empty());
    }
    eprintln!(
        "localize, {rounds} rounds, kinds {kinds:?} at rate {rate}, {} retries: faults injected {:?}; outcomes {:#?}; \
         wrong data under faults: {}; wrong data read from the cache after the faults: {}",
        retry.max_retries,
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

/// Every fault kind but bit flips (see the next test), 150 rounds at a rate of 0.05 per shard GET, without
/// retries (so that every fault reaches the checks): a failed localize names a faulted shard, a successful one
/// gives the truth, and so does the cache afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localize_under_faults_never_leaves_wrong_data_in_the_cache() {
    let kinds: Vec<Fault> = ALL_FAULTS.into_iter().filter(|&k| k != Fault::BitFlip).collect();
    let r = localize_rounds(&kinds, 0.05, 150, 7, RetryPolicy::never()).await;
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

/// Bit flips in shard bodies, 150 rounds at a rate of 0.05 per shard GET. Parquet-rs writes no page checksums and
/// localize reads ranges (so it cannot check a shard's SHA-256); what catches a flipped bit is the footer's CRC-32
/// in the manifest (`obs_shard_footer_crc32`) and the column-chunk CRC-32s in the footer, checked before anything
/// decodes the bytes. Without them 11 to 13 of these rounds cached wrong data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bit_flips_while_localizing_never_leave_wrong_data_in_the_cache() {
    let r = localize_rounds(&[Fault::BitFlip], 0.05, 150, 7, RetryPolicy::never()).await;
    assert!(r.injected_by_kind.get(&Fault::BitFlip).copied().unwrap_or(0) >= 20, "{:?}", r.injected_by_kind);
    assert!(r.outcomes.keys().any(|k| k.starts_with("BitFlip -> damaged")), "no flip was caught: {:?}", r.outcomes);
    assert_no_wrong_data(&r);
}

/// Every fault kind, 150 rounds at a rate of 0.1 per shard GET, with the library's retries: most faulted rounds
/// succeed (the retry gets good bytes), every success is the truth, and so is the cache afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_outlast_faults_while_localizing() {
    let r = localize_rounds(&ALL_FAULTS, 0.1, 150, 9, fast_retry()).await;
    let healed: u64 =
        r.outcomes.iter().filter(|(k, _)| !k.starts_with("no fault") && k.contains("-> ok")).map(|(_, n)| n).sum();
    let failed: u64 = r.outcomes.iter().filter(|(k, _)| !k.contains("-> ok")).map(|(_, n)| n).sum();
    assert!(healed >= 30 && healed > 5 * failed, "healed {healed}, failed {failed}: {:?}", r.outcomes);
    assert_no_wrong_data(&r);
}
