//! The one-machine conversion's copy of the inputs its plan decoded (`Spill`): the tiles read it back instead of
//! decoding the inputs again, and give the same bytes; its budget bounds it; it is removed at the end; a damaged
//! copy is dropped and the input read instead.

use crate::support;

use support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dct_convert::{
    ConvertOptions, GeneSort, RunOptions, Spill, SpillOptions, SpillStats, convert, finalize, make_plan_with_spill,
    run_part_with_spill,
};
use dct_input::open_input;

fn options(out: &Path) -> ConvertOptions {
    ConvertOptions { tile_size: 48, level: 3, n_chunks: 4, ..ConvertOptions::new(out.to_str().unwrap()) }
}

/// The same 200 cells as `.h5ad` (CSR, read in windows), Matrix Market (parsed whole) and 10x HDF5 (CSC,
/// transposed): 600 cells, tiles crossing every input boundary.
fn inputs() -> Vec<PathBuf> {
    ["inputs/pbmc200/pbmc200.h5ad", "inputs/pbmc200/mtx", "inputs/pbmc200/pbmc200_10x.h5"]
        .iter()
        .map(|p| testdata(p))
        .collect()
}

/// Bytes a copy of `input` takes: 8 per nonzero, counted by its own reader.
fn copy_bytes(input: &Path) -> u64 {
    let mut s = open_input(input).unwrap();
    8 * s.read_rows(0..s.n_cells()).unwrap().nnz() as u64
}

/// Every file of a dataset but the two that name the output URL.
fn dataset_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut f = files(dir);
    f.remove("manifest.json");
    f.remove("convert-plan.json");
    f
}

/// The dataset decoded twice, no copy kept.
fn reference(dir: &Path, sort: GeneSort) -> BTreeMap<String, Vec<u8>> {
    let out = dir.join(format!("reference-{sort:?}"));
    let run = RunOptions { spill: SpillOptions { max_bytes: 0, ..SpillOptions::default() }, ..RunOptions::default() };
    convert(&inputs(), &ConvertOptions { gene_sort: sort, ..options(&out) }, &run, false, |_| {}).unwrap();
    dataset_files(&out)
}

/// Plan with a copy in `spill_dir` (budget `max_bytes`), optionally damage it, write the tiles from it.
fn with_spill(
    dir: &Path,
    name: &str,
    sort: GeneSort,
    max_bytes: u64,
    damage: impl FnOnce(&Path),
) -> (BTreeMap<String, Vec<u8>>, SpillStats, SpillStats) {
    let out = dir.join(name);
    let spill_dir = dir.join(format!("spill-{name}"));
    std::fs::create_dir_all(&spill_dir).unwrap();
    let opts = ConvertOptions { gene_sort: sort, ..options(&out) };
    let run = RunOptions::default();
    let spill = Spill::new(&SpillOptions { dir: Some(spill_dir.clone()), max_bytes }).unwrap();
    let plan = make_plan_with_spill(&inputs(), &opts, &spill).unwrap();
    let kept = spill.stats();
    let private = std::fs::read_dir(&spill_dir).unwrap().next().expect("the spill's own directory").unwrap().path();
    damage(&private);
    run_part_with_spill(&plan, 0, 1, &run, &spill, |_| {}).unwrap();
    let after = spill.stats();
    drop(spill);
    assert_eq!(std::fs::read_dir(&spill_dir).unwrap().count(), 0, "the copy is removed with the spill");
    finalize(&plan, &run).unwrap();
    (dataset_files(&out), kept, after)
}

#[test]
fn kept_inputs_give_the_bytes_of_inputs_decoded_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let sizes: Vec<u64> = inputs().iter().map(|p| copy_bytes(p)).collect();
    let total: u64 = sizes.iter().sum();
    let reference_all = reference(tmp.path(), GeneSort::AllInputs);
    assert!(reference_all.keys().filter(|k| k.starts_with("tiles/")).count() == 13);

    // Every input kept (the plan reads them all), none dropped, same files.
    let (got, kept, after) = with_spill(tmp.path(), "all", GeneSort::AllInputs, u64::MAX, |_| {});
    assert_eq!(kept, SpillStats { inputs: 3, bytes: total, dropped: 0 });
    assert_eq!(after, kept);
    assert_eq!(got, reference_all);

    // A budget for the first input only: the others are decoded twice.
    let (got, kept, _) = with_spill(tmp.path(), "budget", GeneSort::AllInputs, sizes[0] + sizes[1] / 2, |_| {});
    assert_eq!((kept.inputs, kept.bytes), (1, sizes[0]));
    assert_eq!(got, reference_all);

    // Genes sorted over one input: the plan reads (and keeps) only that one.
    let (got, kept, _) = with_spill(tmp.path(), "sample", GeneSort::Sample(1), u64::MAX, |_| {});
    assert_eq!(kept.inputs, 1);
    assert_eq!(got, reference(tmp.path(), GeneSort::Sample(1)));
}

#[test]
fn a_damaged_copy_is_dropped_and_its_input_read_instead() {
    let tmp = tempfile::tempdir().unwrap();
    let reference_all = reference(tmp.path(), GeneSort::AllInputs);
    let flip = |private: &Path| {
        let f = private.join("input-1.bin");
        let mut bytes = std::fs::read(&f).unwrap();
        let n = bytes.len();
        bytes[n / 3] ^= 0x01;
        std::fs::write(&f, bytes).unwrap();
    };
    let (got, kept, after) = with_spill(tmp.path(), "flipped", GeneSort::AllInputs, u64::MAX, flip);
    assert_eq!((kept.inputs, after.inputs, after.dropped), (3, 2, 1));
    assert_eq!(got, reference_all);
    let truncate = |private: &Path| std::fs::write(private.join("input-2.bin"), b"short").unwrap();
    let (got, _, after) = with_spill(tmp.path(), "truncated", GeneSort::AllInputs, u64::MAX, truncate);
    assert_eq!((after.inputs, after.dropped), (2, 1));
    assert_eq!(got, reference_all);
}

#[test]
fn a_one_shot_conversion_removes_its_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let spill_dir = tmp.path().join("spill");
    std::fs::create_dir_all(&spill_dir).unwrap();
    let out = tmp.path().join("out");
    let run = RunOptions {
        spill: SpillOptions { dir: Some(spill_dir.clone()), ..SpillOptions::default() },
        ..RunOptions::default()
    };
    let m = convert(&inputs(), &options(&out), &run, false, |_| {}).unwrap();
    assert_eq!(m.n_cells, 600);
    assert_eq!(std::fs::read_dir(&spill_dir).unwrap().count(), 0);
    assert_eq!(dataset_files(&out), reference(tmp.path(), GeneSort::AllInputs));
    // A spill directory that cannot be used is an error when given, not when defaulted.
    let missing = SpillOptions { dir: Some(tmp.path().join("no/such/dir")), ..SpillOptions::default() };
    assert!(Spill::new(&missing).unwrap_err().to_string().contains("no/such/dir"));
}
