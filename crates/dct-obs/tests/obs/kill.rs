//! Crash safety of obs localization: a child process (this test binary, re-run with `DCT_KILL_CHILD` set)
//! localizes every column of a dataset over a slow store, in three calls, and is killed with SIGKILL at seeded
//! random moments. After each kill, every `.arrow` file left in the cache must be a whole, valid file (checked
//! independently with the Arrow IPC reader, and by the library: nothing to rebuild), and a new handle must
//! localize and read every column exactly (re-fetching what is missing).
//!
//! Counts are printed with `--nocapture` (docs/ROBUSTNESS.md, "Crash safety").

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Synth, decode_manifest, encode_manifest, local_store, tiles, values, write_synth};
use dct_obs::{Obs, ObsOptions};
use dct_store::testing::{Throttle, throttled};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Set (to anything) in the child; the child's data directory, cache directory and manifest fields.
const CHILD: &str = "DCT_KILL_CHILD";
const CHILD_DATA: &str = "DCT_KILL_DATA";
const CHILD_CACHE: &str = "DCT_KILL_CACHE";
const CHILD_MANIFEST: &str = "DCT_KILL_MANIFEST";

const TRIALS: usize = 24;

fn opts(cache: &FsPath) -> ObsOptions {
    ObsOptions { cache_dir: Some(cache.into()), concurrency: 2, ..Default::default() }
}

/// The child (a no-op unless `DCT_KILL_CHILD` is set): localizes every column over a store that waits 10 ms per
/// GET, in three calls (1, 3 and the remaining columns), so that kills land inside fetches, between commits and
/// after.
#[test]
fn kill_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let data = PathBuf::from(std::env::var(CHILD_DATA).unwrap());
    let cache = PathBuf::from(std::env::var(CHILD_CACHE).unwrap());
    let manifest = decode_manifest(&std::env::var(CHILD_MANIFEST).unwrap());
    let slow = throttled(&local_store(&data), Throttle { latency: Duration::from_millis(10), ..Throttle::default() });
    let obs = Obs::open_blocking(slow, manifest, opts(&cache)).unwrap();
    let names: Vec<String> = obs.columns().iter().map(|(n, _)| n.to_string()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for group in [&names[..1], &names[1..4], &names[4..]] {
        obs.localize_blocking(group).unwrap();
        println!("LOCALIZED {group:?}");
    }
    println!("CHILD DONE");
}

fn spawn_child(s: &Synth, cache: &FsPath, piped: bool) -> std::process::Child {
    let stdout = if piped { Stdio::piped() } else { Stdio::null() };
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "kill::kill_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env(CHILD_DATA, s.dir.path())
        .env(CHILD_CACHE, cache)
        .env(CHILD_MANIFEST, encode_manifest(&s.manifest))
        .stdout(stdout)
        .stderr(if piped { Stdio::piped() } else { Stdio::null() })
        .spawn()
        .unwrap()
}

/// Reads an Arrow IPC file whole with the Arrow reader: `(record batches, rows)`, or why it cannot be read.
fn read_arrow_file(path: &FsPath) -> Result<(usize, u64), String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = arrow_ipc::reader::FileReader::try_new(file, None).map_err(|e| e.to_string())?;
    let (mut batches, mut rows) = (0, 0u64);
    for b in reader {
        let b = b.map_err(|e| e.to_string())?;
        batches += 1;
        rows += b.num_rows() as u64;
    }
    Ok((batches, rows))
}

#[test]
fn sigkill_during_localize_never_leaves_a_cache_file_used_with_wrong_data() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    // 24 tiles of 400 cells (last 321), 6 tiles per shard (4 shards), inputs switching at tile 14.
    let s = rt.block_on(write_synth(&tiles(24, 400, 321), 14, 6, 29));
    let n_cells = s.manifest.n_cells();
    let names: Vec<String> = s.schema.columns.iter().map(|c| c.name.clone()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();

    // One uninterrupted run, to spread the kill moments over a whole run (its time is not asserted).
    let calibration = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = spawn_child(&s, calibration.path(), true).wait_with_output().unwrap();
    let full = start.elapsed();
    assert!(
        out.status.success(),
        "the child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("CHILD DONE"), "the child did not finish");

    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().join(&s.manifest.fields.fingerprint).join("obs");
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let mut tally: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut arrow_seen, mut tmp_seen, mut refetched) = (0u64, 0u64, 0u64);
    for trial in 0..TRIALS {
        let delay = full.mul_f64(rng.random_range(0.0..1.1));
        let mut child = spawn_child(&s, cache.path(), false);
        std::thread::sleep(delay);
        let finished = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        let status = child.wait().unwrap();
        *tally.entry(if finished { "finished before the kill" } else { "killed" }).or_default() += 1;
        if finished {
            assert!(status.success(), "trial {trial}: the child failed on its own: {status}");
        }

        // Every .arrow file present is whole and valid.
        let mut present = Vec::new();
        for e in std::fs::read_dir(&dir).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".arrow") {
                let (batches, rows) = read_arrow_file(&e.path())
                    .unwrap_or_else(|m| panic!("trial {trial}: {name} left by the kill is not readable: {m}"));
                assert_eq!((batches, rows), (s.manifest.n_tiles(), n_cells), "trial {trial}: {name}");
                present.push(name);
            } else if name.contains(".tmp.") {
                tmp_seen += 1;
            }
        }
        arrow_seen += present.len() as u64;

        // A new handle (no throttle): nothing to rebuild, the present files are used, the rest fetched; every
        // column equals the truth.
        let obs = Obs::open_blocking(s.store(), s.manifest.clone(), opts(cache.path())).unwrap();
        let report = obs.localize_blocking(&names).unwrap();
        assert!(report.rebuilt.is_empty(), "trial {trial}: invalid cache files after a kill: {report:?}");
        assert_eq!(report.cached.len(), present.len(), "trial {trial}: {report:?} vs {present:?}");
        refetched += report.fetched.len() as u64;
        for c in &s.schema.columns {
            let got = values(obs.column(&c.name).unwrap().as_ref(), c.kind, c.categories.as_deref());
            assert!(got == s.truth(&c.name), "trial {trial}: column {:?} differs from the truth", c.name);
        }
        drop(obs);

        // Next trial: drop most column files (each with probability 0.75); temporary leftovers stay.
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".arrow") && rng.random_bool(0.75) {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
    }
    eprintln!(
        "kill trials: {TRIALS} ({tally:?}); valid .arrow files found after kills: {arrow_seen}; temporary files \
         seen (cumulative; the next fetch of their column removes them): {tmp_seen}; columns re-fetched after kills: {refetched}; invalid or wrong: 0"
    );
    assert!(tally.get("killed").copied().unwrap_or(0) >= TRIALS as u64 / 3, "too few kills landed: {tally:?}");
}
