//! `merge`: an interrupted run leaves no manifest and is completed by running it again, file for file a clean
//! run's; another merge does not take over what it left.

use dct_convert::{ConvertOptions, MergeOptions, convert, merge};

use crate::support::{files, testdata};

fn source(dir: &std::path::Path, name: &str, input: &str) -> String {
    let out = dir.join(name);
    let mut opts = ConvertOptions::new(out.to_str().unwrap());
    opts.tile_size = 48;
    opts.level = 1;
    opts.gene_sort = dct_convert::GeneSort::Keep;
    convert(&[testdata(input)], &opts, &Default::default(), false, |_| {}).unwrap();
    out.to_str().unwrap().to_string()
}

#[test]
fn an_interrupted_merge_is_completed_by_running_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let a = source(tmp.path(), "a", "inputs/pbmc200/pbmc200.h5ad");
    let b = source(tmp.path(), "b", "inputs/pbmc200/pbmc200_10x.h5");
    let sources = vec![a.clone(), b.clone()];
    let clean = tmp.path().join("clean");
    let whole = merge(&sources, clean.to_str().unwrap(), &MergeOptions::default()).unwrap();
    // 200 cells in tiles of 48: A's last tile holds 8, so B's cells are cut anew.
    assert_eq!((whole.n_cells, whole.tiles_copied, whole.tiles_encoded), (400, 4, 5));

    let out = tmp.path().join("out");
    let url = out.to_str().unwrap();
    let stopped = merge(&sources, url, &MergeOptions { stop_after_tiles: Some(3), ..MergeOptions::default() });
    assert!(stopped.unwrap_err().to_string().contains("stopped after 3 tiles"));
    assert!(!files(&out).contains_key("manifest.json") && files(&out).contains_key("merge-in-progress.json"));
    assert!(dct_dataset::Dataset::open(url, Default::default()).is_err(), "no dataset that looks complete");
    // Another merge does not take over what this one left; the same one completes it.
    assert!(merge(&[b.clone(), a.clone()], url, &MergeOptions::default()).is_err());
    assert_eq!(merge(&sources, url, &MergeOptions::default()).unwrap(), whole);
    assert_eq!(files(&out), files(&clean));
}
