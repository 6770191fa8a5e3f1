//! The plan's first pass split over "machines": `scan_inputs_part` in 2 and 3 parts, then `make_plan_with_scans`,
//! gives the one-shot plan byte for byte and the same dataset; stale, corrupt and differently made scan files are
//! scanned again (with a note), never merged into a wrong plan.

use crate::support;

use support::*;

use std::path::{Path, PathBuf};

use dct_convert::{
    ConvertOptions, GeneSort, RunOptions, convert, finalize, make_plan, make_plan_with_scans, run_part, scan_dir,
    scan_inputs_part,
};
use dct_input::open_input;
use serde_json::Value;

/// Five inputs of three kinds (h5ad with obs, 10x h5, Matrix Market), copied into `dir` so they can be changed.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let h5ad = testdata("inputs/pbmc200/pbmc200.h5ad");
    let mut source = open_input(&h5ad).unwrap();
    let mut out = Vec::new();
    for (i, name) in ["in1.h5ad", "in2.h5", "in3", "in4.h5ad", "in5"].iter().enumerate() {
        let p = dir.join(name);
        match i {
            0 | 3 => drop(std::fs::copy(&h5ad, &p).unwrap()),
            1 => drop(std::fs::copy(testdata("inputs/pbmc200/pbmc200_10x.h5"), &p).unwrap()),
            2 => write_mtx_cells(&p, source.as_mut(), 0..120),
            _ => write_mtx_cells(&p, source.as_mut(), 37..200),
        }
        out.push(p);
    }
    out
}

fn options(out: &Path, sort: GeneSort) -> ConvertOptions {
    ConvertOptions {
        tile_size: 96,
        level: 3,
        n_chunks: 4,
        gene_sort: sort,
        ..ConvertOptions::new(out.to_str().unwrap())
    }
}

fn merged(inputs: &[PathBuf], opts: &ConvertOptions, dir: &Path) -> (dct_convert::Plan, Vec<String>) {
    let mut notes = Vec::new();
    let plan = make_plan_with_scans(inputs, opts, dir, |n| notes.push(n.to_string())).unwrap();
    (plan, notes)
}

#[test]
fn scans_in_parts_merge_into_the_one_shot_plan_and_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = inputs(tmp.path());
    for sort in [GeneSort::AllInputs, GeneSort::Sample(2), GeneSort::Keep] {
        let opts = options(&tmp.path().join("out"), sort);
        let one_shot = make_plan(&inputs, &opts).unwrap();
        for parts in [2usize, 3] {
            let dir = tmp.path().join(format!("plan-{sort:?}-{parts}.json.d"));
            // Parts run out of order, one twice (the second run keeps the files).
            let mut scanned = 0;
            for part in (0..parts).rev().chain([0]) {
                let report = scan_inputs_part(&inputs, &opts, &dir, part, parts).unwrap();
                assert!(report.notes.is_empty(), "{:?}", report.notes);
                scanned += report.scanned;
            }
            assert_eq!(scanned, inputs.len(), "every input scanned once");
            let n_files = std::fs::read_dir(&dir).unwrap().count();
            assert_eq!(n_files, inputs.len(), "one scan file per input, no temporary files left");
            let (plan, notes) = merged(&inputs, &opts, &dir);
            assert!(notes.is_empty(), "{notes:?}");
            assert!(plan.to_json() == one_shot.to_json(), "{sort:?}, {parts} parts: plan differs from one-shot");
        }
        // Only some inputs scanned: the merge scans the rest itself, silently.
        let dir = tmp.path().join(format!("partial-{sort:?}.d"));
        scan_inputs_part(&inputs, &opts, &dir, 1, 3).unwrap();
        let (plan, notes) = merged(&inputs, &opts, &dir);
        assert!(notes.is_empty(), "{notes:?}");
        assert!(plan.to_json() == one_shot.to_json());
    }

    // The dataset written from the merged plan equals the one-shot conversion, byte for byte.
    let a = tmp.path().join("a");
    convert(&inputs, &options(&a, GeneSort::AllInputs), &RunOptions::default(), false, |_| {}).unwrap();
    let b = tmp.path().join("b");
    let opts_b = options(&b, GeneSort::AllInputs);
    let dir = tmp.path().join("b-plan.json.d");
    for part in 0..3 {
        scan_inputs_part(&inputs, &opts_b, &dir, part, 3).unwrap();
    }
    let (plan, _) = merged(&inputs, &opts_b, &dir);
    for part in 0..2 {
        run_part(&plan, part, 2, &RunOptions::default(), |_| {}).unwrap();
    }
    finalize(&plan, &RunOptions::default()).unwrap();
    let (fa, fb) = (files(&a), files(&b));
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (k, v) in &fa {
        if k != "manifest.json" && k != "convert-plan.json" {
            assert_eq!(v, &fb[k], "{k} differs between the one-shot and the split-scan conversion");
        }
    }
    let strip = |bytes: &[u8]| {
        let mut m: Value = serde_json::from_slice(bytes).unwrap();
        m["metadata"] = Value::Null;
        m
    };
    assert_eq!(strip(&fa["manifest.json"]), strip(&fb["manifest.json"]));
}

#[test]
fn stale_corrupt_and_mismatched_scan_files_are_scanned_again() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = inputs(tmp.path());
    let opts = options(&tmp.path().join("out"), GeneSort::AllInputs);
    let plan_file = tmp.path().join("plan.json");
    let dir = scan_dir(&plan_file);
    assert_eq!(dir, tmp.path().join("plan.json.d"));
    scan_inputs_part(&inputs, &opts, &dir, 0, 1).unwrap();

    // An input changed after its scan (fewer cells, other counts): recomputed, and the plan is the fresh one.
    let mut source = open_input(testdata("inputs/pbmc200/pbmc200.h5ad")).unwrap();
    std::fs::remove_dir_all(&inputs[4]).unwrap();
    write_mtx_cells(&inputs[4], source.as_mut(), 150..200);
    let fresh = make_plan(&inputs, &opts).unwrap();
    assert_eq!(fresh.inputs[4].n_cells, 50);
    let (plan, notes) = merged(&inputs, &opts, &dir);
    assert!(plan.to_json() == fresh.to_json(), "a stale scan file must not reach the plan");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("scan-4.json") && notes[0].contains("changed"), "{}", notes[0]);

    // A file touched without a change of content: still recomputed (size and mtime are the stamp).
    let f = std::fs::File::options().append(true).open(&inputs[0]).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5)).unwrap();
    drop(f);
    let (plan, notes) = merged(&inputs, &opts, &dir);
    let touched = make_plan(&inputs, &opts).unwrap();
    assert_ne!(touched.fingerprint, fresh.fingerprint, "the plan records its inputs' modification times");
    assert!(plan.to_json() == touched.to_json(), "a stale scan file must not reach the plan");
    assert!(notes.iter().any(|n| n.contains("scan-0.json")), "{notes:?}");

    // Re-scanning refreshes the stale files; then nothing is noted.
    let report = scan_inputs_part(&inputs, &opts, &dir, 0, 1).unwrap();
    assert_eq!((report.scanned, report.kept), (2, 3), "{:?}", report.notes);
    let (plan, notes) = merged(&inputs, &opts, &dir);
    assert!(notes.is_empty(), "{notes:?}");
    assert!(plan.to_json() == touched.to_json());

    // Corrupt files: truncated, edited (valid JSON, wrong totals), garbage, and another input's scan.
    let path = |i: usize| dir.join(format!("scan-{i}.json"));
    let bytes = std::fs::read(path(1)).unwrap();
    std::fs::write(path(1), &bytes[..bytes.len() / 2]).unwrap();
    let mut v: Value = serde_json::from_slice(&std::fs::read(path(2)).unwrap()).unwrap();
    v["totals"][0] = Value::from(v["totals"][0].as_u64().unwrap() + 1_000_000);
    std::fs::write(path(2), serde_json::to_vec(&v).unwrap()).unwrap();
    std::fs::write(path(3), b"\x00\xffnot json").unwrap();
    std::fs::copy(path(0), path(4)).unwrap();
    let (plan, notes) = merged(&inputs, &opts, &dir);
    assert!(plan.to_json() == touched.to_json(), "a corrupt scan file must not reach the plan");
    assert_eq!(notes.len(), 4, "{notes:?}");
    for (i, what) in [(1, "not a valid scan file"), (2, "checksum"), (3, "not a valid scan file"), (4, "not of this")] {
        assert!(notes.iter().any(|n| n.contains(&format!("scan-{i}.json")) && n.contains(what)), "{i}: {notes:?}");
    }

    // Other options (another category limit, another gene sort without totals): scanned again, never mixed.
    let dir2 = tmp.path().join("keep.json.d");
    let keep = options(&tmp.path().join("out"), GeneSort::Keep);
    scan_inputs_part(&inputs, &keep, &dir2, 0, 1).unwrap();
    let (plan, notes) = merged(&inputs, &opts, &dir2);
    assert!(plan.to_json() == touched.to_json());
    assert_eq!(notes.len(), inputs.len(), "{notes:?}");
    assert!(notes.iter().all(|n| n.contains("no gene totals")), "{notes:?}");
    let other = ConvertOptions { max_categories: 3, ..opts.clone() };
    let (plan, notes) = merged(&inputs, &other, &dir2);
    assert_eq!(plan.to_json(), make_plan(&inputs, &other).unwrap().to_json());
    assert!(notes.iter().all(|n| n.contains("other options")) && notes.len() == inputs.len(), "{notes:?}");

    // Different gene lists are still an error naming the genes, scan files or not.
    let wu = tmp.path().join("wu.h5ad");
    std::fs::copy(testdata("inputs/wu2020_200.h5ad"), &wu).unwrap();
    let mixed = vec![inputs[0].clone(), wu];
    let dir3 = tmp.path().join("mixed.json.d");
    scan_inputs_part(&mixed, &opts, &dir3, 0, 2).unwrap();
    scan_inputs_part(&mixed, &opts, &dir3, 1, 2).unwrap();
    let a = make_plan(&mixed, &opts).unwrap_err().to_string();
    let b = make_plan_with_scans(&mixed, &opts, &dir3, |_| {}).unwrap_err().to_string();
    assert_eq!(a, b);
    assert!(a.contains("genes"), "{a}");
}
