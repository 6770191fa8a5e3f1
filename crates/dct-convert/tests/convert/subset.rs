//! `subset`: an interrupted run leaves no manifest and is completed by running it again; what else is at the
//! output is refused.

use dct_convert::{ConvertOptions, SubsetOptions, SubsetReport, convert, subset};

use crate::support::{files, testdata};

fn source(dir: &std::path::Path) -> String {
    let out = dir.join("source");
    let mut opts = ConvertOptions::new(out.to_str().unwrap());
    opts.tile_size = 64;
    opts.level = 1;
    convert(&[testdata("inputs/pbmc200/pbmc200.h5ad")], &opts, &Default::default(), false, |_| {}).unwrap();
    out.to_str().unwrap().to_string()
}

#[test]
fn an_interrupted_subset_is_completed_by_running_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let src = source(tmp.path());
    let opts = SubsetOptions {
        cells: Some((10..150).collect()),
        conditions: vec!["qc_pass=true".into()],
        tile_size: Some(16),
        level: 1,
        ..SubsetOptions::default()
    };
    let clean = tmp.path().join("clean");
    let whole = subset(&src, clean.to_str().unwrap(), &opts).unwrap();
    assert!(whole.n_tiles > 3 && !files(&clean).contains_key("subset-in-progress.json"));

    let out = tmp.path().join("out");
    let url = out.to_str().unwrap();
    let stopped = subset(&src, url, &SubsetOptions { stop_after_tiles: Some(2), ..opts.clone() });
    assert!(stopped.unwrap_err().to_string().contains("stopped after 2 tiles"));
    let left = files(&out);
    // The tiles it stored and its marker are there, no manifest.
    assert!(!left.contains_key("manifest.json") && left.contains_key("subset-in-progress.json"), "{left:?}");
    assert!(dct_dataset::Dataset::open(url, Default::default()).is_err(), "no dataset that looks complete");

    // Another request does not take over what this one left.
    let other = SubsetOptions { cells: Some(vec![1, 2, 3]), ..opts.clone() };
    assert!(subset(&src, url, &other).is_err());
    // The same one completes it: the dataset of a clean run, file for file.
    assert_eq!(subset(&src, url, &opts).unwrap(), whole);
    assert_eq!(files(&out), files(&clean));
    // The same subset again finds it finished and writes nothing; another is not written over it without
    // overwrite.
    assert_eq!(subset(&src, url, &opts).unwrap(), SubsetReport { already_done: true, ..whole });
    assert_eq!(files(&out), files(&clean));
    assert!(subset(&src, url, &SubsetOptions { level: 2, ..opts.clone() }).is_err());
    assert!(subset(&src, url, &SubsetOptions { overwrite: true, ..opts }).is_ok());
}
