//! `append`: full tiles are never written (asserted on a counting store), the result holds the rows a single
//! conversion of all the inputs holds, an append stopped at any step of its commit is completed by running it again
//! (file for file a clean run's), a second append is kept out meanwhile, and a reader opened before gets a typed
//! error for the rewritten tile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dct_convert::{AppendOptions, ConvertOptions, append, append_to, convert};
use dct_dataset::{Dataset, DatasetError, ReadOptions};
use dct_store::testing::counted;
use dct_store::{Store, StoreOptions};

use crate::support::{files, testdata};

fn base(dir: &Path, name: &str) -> String {
    let out = dir.join(name);
    let mut opts = ConvertOptions::new(out.to_str().unwrap());
    opts.tile_size = 64;
    opts.level = 1;
    convert(&[testdata("inputs/pbmc200/pbmc200.h5ad")], &opts, &Default::default(), false, |_| {}).unwrap();
    out.to_str().unwrap().to_string()
}

/// The 10x HDF5 and Matrix Market copies of the base's cells.
fn more() -> Vec<PathBuf> {
    vec![testdata("inputs/pbmc200/pbmc200_10x.h5"), testdata("inputs/pbmc200/mtx")]
}

/// Every row of a dataset as (gene name, count) pairs, in cell order.
fn rows(url: &str) -> Vec<BTreeMap<String, u32>> {
    let ds = Dataset::open(url, ReadOptions::default()).unwrap();
    let names = ds.var_names().unwrap().unwrap();
    let cells: Vec<u64> = (0..ds.n_cells()).collect();
    let batch = ds.get_batch_as::<u32>(&cells).unwrap();
    (0..cells.len())
        .map(|r| {
            let (a, b) = (batch.indptr[r] as usize, batch.indptr[r + 1] as usize);
            (a..b).map(|i| (names[batch.indices[i] as usize].clone(), batch.values[i])).collect()
        })
        .collect()
}

/// A dataset's files, its manifest without the append records' times.
fn comparable(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = files(dir);
    let mut manifest: serde_json::Value = serde_json::from_slice(&all["manifest.json"]).unwrap();
    for record in manifest["metadata"]["appends"].as_array_mut().into_iter().flatten() {
        record.as_object_mut().unwrap().remove("time");
    }
    manifest["metadata"].as_object_mut().unwrap().remove("convert_plan");
    all.insert("manifest.json".into(), serde_json::to_vec(&manifest).unwrap());
    all
}

#[test]
fn full_tiles_are_never_written_and_the_rows_are_a_single_conversions() {
    let tmp = tempfile::tempdir().unwrap();
    let url = base(tmp.path(), "ds");
    let local = Store::from_url(&url, &StoreOptions::default()).unwrap();
    let (store, counter) = counted(&local);
    let report = append_to(store, &more(), &AppendOptions { level: Some(1), ..AppendOptions::default() }).unwrap();
    // 200 cells in tiles of 64: the last held 8; it now holds 64 and six tiles follow.
    assert_eq!((report.cells_added, report.n_cells, report.tile_rewritten, report.tiles_added), (400, 600, Some(3), 6));
    let counts = counter.counts();
    let written: Vec<&String> = counts.put_paths.iter().chain(&counts.copy_paths).collect();
    for t in 0..3 {
        let name = format!("tiles/tile_{t:06}.dct");
        assert!(!written.iter().any(|p| **p == name), "{name} was written: {written:?}");
    }
    assert!(counts.copy_paths.contains(&"tiles/tile_000003.dct".to_string()), "{:?}", counts.copy_paths);

    // The same cells converted at once, by the converter alone.
    let whole = tmp.path().join("whole");
    let mut opts = ConvertOptions::new(whole.to_str().unwrap());
    opts.tile_size = 64;
    opts.level = 1;
    let mut inputs = vec![testdata("inputs/pbmc200/pbmc200.h5ad")];
    inputs.extend(more());
    convert(&inputs, &opts, &Default::default(), false, |_| {}).unwrap();
    assert_eq!(rows(&url), rows(whole.to_str().unwrap()));
}

#[test]
fn an_append_stopped_at_any_step_is_completed_by_running_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = AppendOptions { level: Some(1), ..AppendOptions::default() };
    let clean = base(tmp.path(), "clean");
    append(&clean, &more(), &opts).unwrap();
    let want = comparable(Path::new(&clean));
    // Six new tiles, the obs shard, obs/schema.json, the joined tile, the manifest; the clean-up is the last step.
    let steps = 6 + 1 + 1 + 1 + 1;
    for stop in 0..=steps {
        let url = base(tmp.path(), &format!("stop{stop}"));
        let before = Dataset::open(&url, ReadOptions::default()).unwrap();
        let unread = Dataset::open(&url, ReadOptions::default()).unwrap();
        let stopped = AppendOptions { stop_after_commit_steps: Some(stop), ..opts.clone() };
        let got = append(&url, &more(), &stopped).unwrap_err().to_string();
        assert!(got.contains("run the same append again"), "stop {stop}: {got}");
        // Stopped in the clean-up, after the manifest: the cells are in, and the message says so.
        let says = if stop == steps { "the append is complete" } else { "stopped while moving its tiles into place" };
        assert!(got.contains(says), "stop {stop}: {got}");
        if stop == steps - 1 {
            // Stopped before its manifest: a reader opened now, and verify, meet the rewritten last tile, and are
            // told to run the append again, not to open the dataset again.
            let after = Dataset::open(&url, ReadOptions::default()).unwrap();
            let e = after.get_batch_as::<u32>(&[199]).unwrap_err();
            assert!(matches!(e, DatasetError::Changed { tile: 3, .. }), "{e}");
            assert!(e.to_string().contains("if none is running, run the same append again"), "{e}");
            assert!(!e.to_string().contains("open it again"), "{e}");
            let report = after.verify(&Default::default(), |_, _| {});
            let last = report.problems.last().expect("verify finds the rewritten tile");
            assert!(last.message.contains("run the same append again to complete it"), "{:?}", report.problems);
            let journal = after.append_journal().unwrap().expect("the journal is there, for `info` to say so");
            assert!(journal.ends_with(dct_format::objects::APPEND_JOURNAL_NAME), "{journal}");
        }
        // Meanwhile another append is kept out, and a reader opened before never reads new rows as old ones.
        let other = append(&url, &[testdata("inputs/pbmc200/pbmc200.h5ad")], &opts).unwrap_err().to_string();
        assert!(other.contains("an append runs alone"), "{other}");
        match before.get_batch_as::<u32>(&[195, 199]) {
            Ok(b) => assert_eq!(b.indptr.len(), 3),
            Err(e) => assert!(matches!(e, DatasetError::Changed { tile: 3, .. }), "stop {stop}: {e}"),
        }
        let done = append(&url, &more(), &opts).unwrap();
        assert!(done.resumed, "stop {stop}");
        assert_eq!(Dataset::open(&url, ReadOptions::default()).unwrap().append_journal().unwrap(), None);
        same_files(&comparable(Path::new(&url)), &want, &format!("stop {stop}"));
        // A reader opened before that reads the last tile only now: the typed error (one that read it before keeps
        // the old rows it decoded, which are its dataset's).
        assert!(matches!(unread.get_batch_as::<u32>(&[199]), Err(DatasetError::Changed { tile: 3, .. })));
    }
    // Stopped while staging tiles: the dataset is untouched, and the same append completes it.
    let url = base(tmp.path(), "staging");
    let untouched = files(Path::new(&url));
    let stopped = AppendOptions { stop_after_tiles: Some(2), ..opts.clone() };
    assert!(append(&url, &more(), &stopped).is_err());
    let now = files(Path::new(&url));
    let dataset_files: BTreeMap<_, _> = now.into_iter().filter(|(k, _)| !k.starts_with("append")).collect();
    assert_eq!(dataset_files, untouched);
    assert!(append(&url, &more(), &opts).unwrap().resumed);
    same_files(&comparable(Path::new(&url)), &want, "stopped while staging");
}

#[test]
fn an_append_stopped_in_its_clean_up_with_only_the_journal_left_is_completed_by_running_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = AppendOptions { level: Some(1), ..AppendOptions::default() };
    let clean = base(tmp.path(), "clean");
    append(&clean, &more(), &opts).unwrap();
    let want = comparable(Path::new(&clean));
    // Stopped once the manifest is written, then the clean-up's first half done: the staging (and the base manifest
    // in it) removed, the journal not yet, as a kill between the two leaves it.
    let url = base(tmp.path(), "cleanup");
    let stopped = AppendOptions { stop_after_commit_steps: Some(6 + 1 + 1 + 1 + 1), ..opts.clone() };
    assert!(append(&url, &more(), &stopped).is_err());
    let root = Path::new(&url);
    std::fs::remove_dir_all(root.join(dct_format::objects::APPEND_STAGING_DIR.trim_end_matches('/'))).unwrap();
    assert!(root.join(dct_format::objects::APPEND_JOURNAL_NAME).exists());
    // Another append is still kept out; this one completes.
    let other = append(&url, &[testdata("inputs/pbmc200/pbmc200.h5ad")], &opts).unwrap_err().to_string();
    assert!(other.contains("an append runs alone"), "{other}");
    let done = append(&url, &more(), &opts).unwrap();
    assert!(done.resumed);
    assert!(!root.join(dct_format::objects::APPEND_JOURNAL_NAME).exists());
    same_files(&comparable(root), &want, "only the journal left");
}

/// Asserts two datasets' files are equal, naming those that differ.
fn same_files(got: &BTreeMap<String, Vec<u8>>, want: &BTreeMap<String, Vec<u8>>, what: &str) {
    let differ: Vec<&String> = got.keys().chain(want.keys()).filter(|k| got.get(*k) != want.get(*k)).collect();
    if differ.contains(&&"manifest.json".to_string()) {
        eprintln!(
            "{}\n{}",
            String::from_utf8_lossy(&got["manifest.json"]),
            String::from_utf8_lossy(&want["manifest.json"])
        );
    }
    assert!(differ.is_empty(), "{what}: {differ:?} differ");
}

/// The journal of an append names the process running it: the same append started again while that process lives
/// is refused (two runs would commit over each other), and completes the append once it has ended.
#[cfg(target_os = "linux")]
#[test]
fn the_same_append_started_while_another_process_runs_it_is_refused_until_that_process_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = AppendOptions { level: Some(1), ..AppendOptions::default() };
    let url = base(tmp.path(), "ds");
    let stopped = AppendOptions { stop_after_tiles: Some(2), ..opts.clone() };
    assert!(append(&url, &more(), &stopped).is_err());
    // The journal as another process, still running, would have left it.
    let journal_path = Path::new(&url).join(dct_format::objects::APPEND_JOURNAL_NAME);
    let mut journal: serde_json::Value = serde_json::from_slice(&std::fs::read(&journal_path).unwrap()).unwrap();
    assert_eq!(journal["runner"]["pid"], std::process::id(), "{journal}");
    let mut other = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", other.id())).unwrap();
    let ticks: u64 = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().parse().unwrap();
    journal["runner"]["pid"] = other.id().into();
    journal["runner"]["start_ticks"] = ticks.into();
    std::fs::write(&journal_path, serde_json::to_vec(&journal).unwrap()).unwrap();
    let refused = append(&url, &more(), &opts).unwrap_err().to_string();
    assert!(refused.contains("is running now") && refused.contains(&other.id().to_string()), "{refused}");
    other.kill().unwrap();
    other.wait().unwrap();
    let done = append(&url, &more(), &opts).unwrap();
    assert!(done.resumed);
    let clean = base(tmp.path(), "clean");
    append(&clean, &more(), &opts).unwrap();
    same_files(&comparable(Path::new(&url)), &comparable(Path::new(&clean)), "completed after the other ended");
}
