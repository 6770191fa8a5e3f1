//! Conversion against independent truth: the source rows (read by the input readers), the conformance
//! Matrix Market statistics, and byte-identity across input splits, parts and interrupted runs.

use crate::support;

use support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dct_convert::{ConvertOptions, GeneSort, RunOptions, convert, finalize, make_plan, run_part};
use dct_dataset::{Dataset, ReadOptions, SparseRows};
use dct_input::{CountSource, open_input};
use serde_json::Value;

type Rows = Vec<Vec<(u32, u32)>>;

fn source_rows(source: &mut dyn CountSource) -> Rows {
    let block = source.read_rows(0..source.n_cells()).unwrap();
    (0..block.n_rows())
        .map(|r| {
            let (g, v) = block.row(r);
            g.iter().copied().zip(v.iter().copied()).collect()
        })
        .collect()
}

/// Every row of a dataset, with genes mapped back to source indices through gene_order.npy and re-sorted.
fn dataset_rows_in_source_order(url: &str) -> Rows {
    let ds = Dataset::open(url, ReadOptions::default()).unwrap();
    let order = ds.gene_order().unwrap().expect("gene_order.npy");
    let cells: Vec<u64> = (0..ds.n_cells()).collect();
    let b = ds.get_batch_as::<u32>(&cells).unwrap();
    (0..b.n_rows())
        .map(|r| {
            let (g, v) = b.row(r);
            let mut row: Vec<(u32, u32)> = g.iter().zip(v).map(|(&g, &v)| (order[g as usize] as u32, v)).collect();
            row.sort_unstable();
            row
        })
        .collect()
}

fn tiles_only(f: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    f.iter().filter(|(k, _)| k.starts_with("tiles/")).map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn options(out: &Path, tile_size: u64) -> ConvertOptions {
    ConvertOptions { tile_size, level: 3, n_chunks: 4, ..ConvertOptions::new(out.to_str().unwrap()) }
}

fn run_one(inputs: &[PathBuf], opts: &ConvertOptions) {
    convert(inputs, opts, &RunOptions::default(), false, |_| {}).unwrap();
}

#[test]
fn h5ad_converts_exactly_and_three_formats_give_identical_tiles() {
    let tmp = tempfile::tempdir().unwrap();
    let h5ad = testdata("inputs/pbmc200/pbmc200.h5ad");
    let truth = source_rows(open_input(&h5ad).unwrap().as_mut());
    let mut tiles = Vec::new();
    for (name, input) in [
        ("h5ad", h5ad.clone()),
        ("tenx", testdata("inputs/pbmc200/pbmc200_10x.h5")),
        ("mtx", testdata("inputs/pbmc200/mtx")),
    ] {
        let out = tmp.path().join(name);
        run_one(&[input], &options(&out, 64));
        let url = out.to_str().unwrap();
        assert_eq!(dataset_rows_in_source_order(url), truth, "{name}: cells differ from the source");
        let report = dct_dataset::verify_url(url, ReadOptions::default(), &Default::default(), |_, _| {});
        assert!(report.is_ok(), "{name}: {:?}", report.problems);
        let all = files(&out);
        for side in ["var.parquet", "obs/schema.json", "obs/obs_0000.parquet", "gene_order.npy", "var_names.txt"] {
            assert!(all.contains_key(side), "{name}: {side} is written");
        }
        tiles.push(tiles_only(&all));
    }
    assert_eq!(tiles[0].len(), 4, "200 cells in tiles of 64");
    assert_eq!(tiles[0], tiles[1], "h5ad and 10x h5 give different tiles");
    assert_eq!(tiles[0], tiles[2], "h5ad and Matrix Market give different tiles");
}

#[test]
fn gene_order_is_by_decreasing_total_and_exceptions_survive() {
    let tmp = tempfile::tempdir().unwrap();
    for case in ["tenx_v3", "tenx_v2_plain"] {
        let exp: Value =
            serde_json::from_slice(&std::fs::read(testdata(&format!("conformance/mtx/{case}.expected.json"))).unwrap())
                .unwrap();
        let out = tmp.path().join(case);
        run_one(&[testdata(&format!("conformance/mtx/{case}"))], &options(&out, 7));
        let ds = Dataset::open(out.to_str().unwrap(), ReadOptions::default()).unwrap();
        let order: Vec<u64> = ds.gene_order().unwrap().unwrap().iter().map(|&g| g as u64).collect();
        let want: Vec<u64> =
            exp["gene_order_by_decreasing_total"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(order, want, "{case}: gene order");
        let cells: Vec<u64> = (0..ds.n_cells()).collect();
        let b = ds.get_batch_as::<u64>(&cells).unwrap();
        let n_genes = exp["n_genes"].as_u64().unwrap() as usize;
        let (mut gene_totals, mut gene_nnz) = (vec![0u64; n_genes], vec![0u64; n_genes]);
        let mut cell_totals = Vec::new();
        for r in 0..b.n_rows() {
            let (g, v) = b.row(r);
            for (&g, &v) in g.iter().zip(v) {
                gene_totals[order[g as usize] as usize] += v;
                gene_nnz[order[g as usize] as usize] += 1;
            }
            cell_totals.push(v.iter().sum::<u64>());
        }
        let ints = |k: &str| -> Vec<u64> { exp[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect() };
        assert_eq!(gene_totals, ints("gene_totals"), "{case}");
        assert_eq!(gene_nnz, ints("gene_nnz"), "{case}");
        assert_eq!(cell_totals, ints("cell_totals"), "{case}");
        if case == "tenx_v2_plain" {
            assert!(b.values.contains(&70_000), "the count of 70000 comes back exactly");
        }
        let names = ds.var_names().unwrap().unwrap();
        let src_names: Vec<&str> =
            exp["feature_names"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        for (j, &g) in order.iter().enumerate() {
            assert_eq!(names[j], src_names[g as usize], "{case}: var_names follow the output order");
        }
    }
}

#[test]
fn input_splits_parts_and_resumes_give_identical_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut source = open_input(testdata("inputs/pbmc200/pbmc200.h5ad")).unwrap();
    let rows = source_rows(source.as_mut());
    // The same 200 cells as one file, as an even split, and as a jagged split (one file of a single cell).
    let mut layouts: Vec<Vec<PathBuf>> = Vec::new();
    for (name, cuts) in [("one", vec![0, 200]), ("even", vec![0, 100, 200]), ("jagged", vec![0, 1, 77, 78, 200])] {
        let mut inputs = Vec::new();
        for (i, w) in cuts.windows(2).enumerate() {
            let dir = tmp.path().join(format!("in_{name}/part{}", i + 1));
            write_mtx(&dir, source.as_ref(), &rows[w[0]..w[1]], w[0]);
            inputs.push(dir);
        }
        layouts.push(inputs);
    }
    let mut results = Vec::new();
    for (k, inputs) in layouts.iter().enumerate() {
        let out = tmp.path().join(format!("out{k}"));
        run_one(inputs, &options(&out, 48));
        results.push(tiles_only(&files(&out)));
    }
    assert_eq!(results[0].len(), 5);
    assert_eq!(results[0], results[1], "even split changes the tiles");
    assert_eq!(results[0], results[2], "jagged split changes the tiles");

    // Plan + 3 parts (run out of order) + finalize equals the one-shot conversion, byte for byte.
    let inputs = &layouts[2];
    let one_shot = tmp.path().join("oneshot");
    run_one(inputs, &options(&one_shot, 48));
    let parted = tmp.path().join("parted");
    let plan = make_plan(inputs, &options(&parted, 48)).unwrap();
    let plan_file = tmp.path().join("plan.json");
    plan.save(&plan_file).unwrap();
    let plan = dct_convert::Plan::load(&plan_file).unwrap();
    for part in [2, 0, 1, 0] {
        run_part(&plan, part, 3, &RunOptions::default(), |_| {}).unwrap();
    }
    assert!(!parted.join("manifest.json").exists(), "no manifest before finalize");
    finalize(&plan, &RunOptions::default()).unwrap();
    let (a, b) = (files(&one_shot), files(&parted));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        if k != "manifest.json" && k != "convert-plan.json" {
            assert_eq!(v, &b[k], "{k} differs between one-shot and parts");
        }
    }
    let strip = |bytes: &[u8]| {
        let mut m: Value = serde_json::from_slice(bytes).unwrap();
        m["metadata"] = Value::Null;
        m
    };
    assert_eq!(strip(&a["manifest.json"]), strip(&b["manifest.json"]), "manifests differ beyond the output URL");

    // Interrupted after k tiles: no manifest; finalize refuses; resuming gives the same dataset.
    for k in [0usize, 1, 3] {
        let out = tmp.path().join(format!("interrupted{k}"));
        let opts = options(&out, 48);
        let plan = make_plan(inputs, &opts).unwrap();
        let stop = RunOptions { stop_after_tiles: Some(k), ..RunOptions::default() };
        let report = run_part(&plan, 0, 1, &stop, |_| {}).unwrap();
        assert_eq!(report.written, k);
        assert!(!out.join("manifest.json").exists());
        assert!(finalize(&plan, &RunOptions::default()).is_err(), "finalize must refuse missing tiles");
        // Corrupt one written tile: the resume must rewrite it.
        if k > 0 {
            let t = out.join("tiles/tile_000000.dct");
            let mut bytes = std::fs::read(&t).unwrap();
            let n = bytes.len();
            bytes[n - 1] ^= 0xff;
            std::fs::write(&t, bytes).unwrap();
        }
        let resumed = convert(inputs, &opts, &RunOptions::default(), false, |_| {}).unwrap();
        assert_eq!(resumed.n_cells, 200);
        assert_eq!(tiles_only(&files(&out)), tiles_only(&a), "resume after {k} tiles");
    }
}

#[test]
fn bad_inputs_fail_clearly_and_leave_no_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let check = |inputs: &[PathBuf], opts: ConvertOptions, want: &str| {
        let out = PathBuf::from(&opts.output);
        let err = convert(inputs, &opts, &RunOptions::default(), false, |_| {}).unwrap_err().to_string();
        assert!(err.contains(want), "expected {want:?} in: {err}");
        assert!(!out.join("manifest.json").exists(), "{err}: a manifest was left");
    };
    // Gene lists that differ: name the file and gene.
    let a = testdata("inputs/pbmc200/mtx");
    let b = testdata("conformance/mtx/tenx_v3");
    check(&[a.clone(), b], options(&tmp.path().join("o1"), 64), "genes");
    // Not counts (a normalized layer).
    let layouts = testdata("inputs/layouts.h5ad");
    let opts = ConvertOptions {
        matrix: dct_input::H5adMatrix::Layer("normalized".into()),
        ..options(&tmp.path().join("o2"), 16)
    };
    check(&[layouts], opts, "not a count");
    // A legacy h5ad.
    check(&[testdata("inputs/legacy.h5ad")], options(&tmp.path().join("o3"), 16), "anndata");
    // A truncated gzip and a missing barcodes file.
    let broken = tmp.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["features.tsv.gz", "barcodes.tsv.gz"] {
        std::fs::copy(a.join(f), broken.join(f)).unwrap();
    }
    let gz = std::fs::read(a.join("matrix.mtx.gz")).unwrap();
    std::fs::write(broken.join("matrix.mtx.gz"), &gz[..gz.len() / 2]).unwrap();
    check(std::slice::from_ref(&broken), options(&tmp.path().join("o4"), 16), "truncated");
    std::fs::write(broken.join("matrix.mtx.gz"), &gz).unwrap();
    std::fs::remove_file(broken.join("barcodes.tsv.gz")).unwrap();
    check(&[broken], options(&tmp.path().join("o5"), 16), "barcodes");
    // No cells: the input is named.
    let empty = tmp.path().join("empty_input");
    write_mtx(&empty, open_input(testdata("inputs/pbmc200/mtx")).unwrap().as_ref(), &[], 0);
    check(std::slice::from_ref(&empty), options(&tmp.path().join("o6"), 16), "no cells in");
    let err = convert(
        std::slice::from_ref(&empty),
        &options(&tmp.path().join("o6"), 16),
        &RunOptions::default(),
        false,
        |_| {},
    );
    assert!(err.unwrap_err().to_string().contains("empty_input"));
    // Encoder settings the writer refuses are refused before anything is read or written.
    let mtx = testdata("inputs/pbmc200/mtx");
    for (k, (opts, want)) in [
        (ConvertOptions { tile_size: 5_000_000_000, ..options(&tmp.path().join("s0"), 1) }, "tile_size is 5000000000"),
        (ConvertOptions { tile_size: 0, ..options(&tmp.path().join("s1"), 1) }, "tile_size is 0"),
        (ConvertOptions { n_chunks: 0, ..options(&tmp.path().join("s2"), 16) }, "n_chunks must be at least 1"),
        (ConvertOptions { level: 99, ..options(&tmp.path().join("s3"), 16) }, "zstd_level is 99"),
    ]
    .into_iter()
    .enumerate()
    {
        check(std::slice::from_ref(&mtx), opts, want);
        assert!(!tmp.path().join(format!("s{k}")).exists(), "{want}: the output was created");
    }
}

/// A finished dataset holds only the spec's files (the plan marker is removed after the manifest); converting,
/// running a part or finalizing the same plan again finds it finished and writes nothing.
#[test]
fn a_finished_conversion_leaves_no_plan_marker_and_is_found_finished() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let input = testdata("inputs/pbmc200/mtx");
    let opts = options(&out, 64);
    let first = convert(std::slice::from_ref(&input), &opts, &RunOptions::default(), false, |_| {}).unwrap();
    assert!(!out.join("convert-plan.json").exists(), "the plan marker outlived finalize");
    assert!(!out.join("convert-receipts").exists(), "the receipts' folder outlived finalize");
    let before = files(&out);
    let again = convert(std::slice::from_ref(&input), &opts, &RunOptions::default(), false, |_| {}).unwrap();
    assert_eq!(again.to_json_pretty(), first.to_json_pretty());
    let plan = make_plan(std::slice::from_ref(&input), &opts).unwrap();
    let report = run_part(&plan, 0, 1, &RunOptions::default(), |_| {}).unwrap();
    assert_eq!((report.written, report.skipped), (0, plan.n_tiles));
    assert_eq!(finalize(&plan, &RunOptions::default()).unwrap().to_json_pretty(), first.to_json_pretty());
    assert_eq!(files(&out), before, "a finished dataset was rewritten");
    assert!(!out.join("convert-plan.json").exists());
    // A tile lost after the conversion finished: the part says so rather than report it complete.
    std::fs::remove_file(out.join("tiles/tile_000001.dct")).unwrap();
    let err = run_part(&plan, 0, 1, &RunOptions::default(), |_| {}).unwrap_err().to_string();
    assert!(err.contains("tile 1 is missing") && err.contains("damaged after the conversion finished"), "{err}");
}

#[test]
fn an_output_holding_another_dataset_is_refused_unless_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let input = testdata("inputs/pbmc200/mtx");
    run_one(std::slice::from_ref(&input), &options(&out, 64));
    // Different options: a different plan for the same output.
    let other = ConvertOptions { gene_sort: GeneSort::Keep, ..options(&out, 64) };
    let err = convert(std::slice::from_ref(&input), &other, &RunOptions::default(), false, |_| {}).unwrap_err();
    assert!(err.to_string().contains("already holds a dataset"), "{err}");
    assert!(out.join("obs/obs_0000.parquet").exists() && out.join("var.parquet").exists());
    let other = ConvertOptions { write_obs: false, ..other };
    convert(std::slice::from_ref(&input), &other, &RunOptions::default(), true, |_| {}).unwrap();
    assert!(!out.join("obs/obs_0000.parquet").exists(), "--overwrite removed the old obs");
    assert!(out.join("var.parquet").exists());
    let ds = Dataset::open(out.to_str().unwrap(), ReadOptions::default()).unwrap();
    assert!(!ds.manifest().has_obs);
    let order = ds.gene_order().unwrap().unwrap();
    assert!(order.iter().enumerate().all(|(j, &g)| j as i32 == g), "--no-sort-genes keeps the source order");
}

#[test]
fn an_input_changed_mid_conversion_is_refused_not_mixed_into_the_tiles() {
    let tmp = tempfile::tempdir().unwrap();
    let mut source = open_input(testdata("inputs/pbmc200/pbmc200.h5ad")).unwrap();
    let mut rows = source_rows(source.as_mut());
    let input = tmp.path().join("in");
    write_mtx(&input, source.as_ref(), &rows, 0);
    let out = tmp.path().join("o");
    let opts = options(&out, 48);
    let plan = make_plan(std::slice::from_ref(&input), &opts).unwrap();
    assert_eq!(plan.inputs[0].files.len(), 3, "matrix, barcodes and features");
    let stop = RunOptions { stop_after_tiles: Some(2), ..RunOptions::default() };
    assert_eq!(run_part(&plan, 0, 1, &stop, |_| {}).unwrap().written, 2);

    // The same number of bytes, another count in the last tile's cells: the rest of the plan must not be read
    // from it.
    let entry = rows[190].iter_mut().find(|(_, v)| (1..9).contains(v)).unwrap();
    entry.1 += 1;
    let before = std::fs::metadata(input.join("matrix.mtx")).unwrap().len();
    write_mtx(&input, source.as_ref(), &rows, 0);
    assert_eq!(std::fs::metadata(input.join("matrix.mtx")).unwrap().len(), before);
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(2);
    std::fs::File::options().append(true).open(input.join("matrix.mtx")).unwrap().set_modified(later).unwrap();
    for err in [
        run_part(&plan, 0, 1, &RunOptions::default(), |_| {}).unwrap_err(),
        finalize(&plan, &RunOptions::default()).unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(text.contains("changed since the plan was made (modified since)"), "{text}");
    }
    assert!(!out.join("manifest.json").exists());
    // Converting again makes a new plan, which the output's tiles are not of: refused without --overwrite ...
    let err = convert(std::slice::from_ref(&input), &opts, &RunOptions::default(), false, |_| {}).unwrap_err();
    assert!(err.to_string().contains("belongs to another conversion"), "{err}");
    // ... and with it, every tile is of the input as it is now.
    convert(std::slice::from_ref(&input), &opts, &RunOptions::default(), true, |_| {}).unwrap();
    let fresh = tmp.path().join("fresh");
    run_one(std::slice::from_ref(&input), &options(&fresh, 48));
    assert_eq!(tiles_only(&files(&out)), tiles_only(&files(&fresh)));
}

#[test]
fn a_plan_records_absolute_locations() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/pbmc200/mtx");
    let plan = make_plan(std::slice::from_ref(&input), &options(&tmp.path().join("o"), 64)).unwrap();
    assert!(Path::new(&plan.inputs[0].path).is_absolute() && Path::new(&plan.output).is_absolute());
    let cwd = std::env::current_dir().unwrap();
    let relative = input.strip_prefix(&cwd).map(Path::to_path_buf).unwrap_or_else(|_| input.clone());
    let again = make_plan(&[relative], &options(&tmp.path().join("o"), 64)).unwrap();
    assert_eq!(again.inputs[0].path, std::path::absolute(&input).unwrap().display().to_string());
    let mut url = options(&tmp.path().join("o"), 64);
    url.output = "s3://bucket/atlas".into();
    assert_eq!(make_plan(std::slice::from_ref(&input), &url).unwrap().output, "s3://bucket/atlas");
}

#[test]
fn tiles_another_plan_wrote_into_the_output_are_written_again_not_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let input = testdata("inputs/pbmc200/mtx");
    let inputs = std::slice::from_ref(&input);
    // Two plans whose tiles have the same cells and genes, in other gene orders.
    let unsorted = make_plan(inputs, &ConvertOptions { gene_sort: GeneSort::Keep, ..options(&out, 48) }).unwrap();
    let sorted = make_plan(inputs, &options(&out, 48)).unwrap();
    assert_ne!(unsorted.fingerprint, sorted.fingerprint);
    let all = RunOptions::default();
    assert_eq!(run_part(&unsorted, 0, 1, &all, |_| {}).unwrap().written, unsorted.n_tiles);
    let stale = files(&out);
    // The output emptied of its marker while the first plan's tiles stay (a part of it still running when the
    // operator cleared the output and made the second plan): none of them counts as the second plan's.
    std::fs::remove_file(out.join("convert-plan.json")).unwrap();
    let report = run_part(&sorted, 0, 1, &all, |_| {}).unwrap();
    assert_eq!((report.written, report.skipped), (sorted.n_tiles, 0));
    // A late write of the first plan over one tile: finalize refuses it, the part writes it again.
    std::fs::write(out.join("tiles/tile_000001.dct"), &stale["tiles/tile_000001.dct"]).unwrap();
    let err = finalize(&sorted, &all).unwrap_err().to_string();
    assert!(err.contains("tile 1 is invalid") && err.contains("not written by this conversion"), "{err}");
    assert!(!out.join("manifest.json").exists());
    assert_eq!(run_part(&sorted, 0, 1, &all, |_| {}).unwrap().written, 1);
    finalize(&sorted, &all).unwrap();
    let fresh = tmp.path().join("fresh");
    run_one(inputs, &options(&fresh, 48));
    let written = files(&out);
    assert_eq!(tiles_only(&written), tiles_only(&files(&fresh)), "the tiles of a conversion that nothing disturbed");
    assert!(written.keys().all(|k| !k.starts_with("convert-")), "no marker or receipt left: {:?}", written.keys());
}

#[test]
fn two_plans_started_at_once_on_one_output_are_refused_but_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let input = testdata("inputs/pbmc200/mtx");
    let inputs = std::slice::from_ref(&input);
    let plans = [
        make_plan(inputs, &ConvertOptions { gene_sort: GeneSort::Keep, ..options(&out, 48) }).unwrap(),
        make_plan(inputs, &options(&out, 48)).unwrap(),
    ];
    let results: Vec<_> = std::thread::scope(|s| {
        let running: Vec<_> = plans
            .iter()
            .map(|plan| {
                s.spawn(move || run_part(plan, 0, 1, &RunOptions { threads: 1, ..RunOptions::default() }, |_| {}))
            })
            .collect();
        running.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let won: Vec<usize> = (0..2).filter(|&k| results[k].is_ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    let lost = results[1 - won[0]].as_ref().unwrap_err().to_string();
    assert!(lost.contains("belongs to another conversion"), "{lost}");
    let manifest = finalize(&plans[won[0]], &RunOptions::default()).unwrap();
    assert_eq!(manifest.metadata["convert_plan"], plans[won[0]].fingerprint.as_str());
}

#[test]
fn parts_cover_the_tiles_once_for_any_number_of_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/pbmc200/mtx");
    let plan = make_plan(std::slice::from_ref(&input), &options(&tmp.path().join("o"), 48)).unwrap();
    let n = plan.n_tiles;
    for parts in [1, 2, 3, n, n + 1, 1000, usize::MAX / 3, usize::MAX] {
        let mut next = 0;
        for part in [0, 1, parts / 2, parts.saturating_sub(2), parts - 1].into_iter().filter(|&p| p < parts) {
            let tiles = plan.part_tiles(part, parts);
            assert!(tiles.start <= tiles.end && tiles.end <= n, "{part}/{parts}: {tiles:?}");
            next = next.max(tiles.end);
        }
        assert_eq!(plan.part_tiles(parts - 1, parts).end, n, "the last part ends at the last tile ({parts} parts)");
        assert!(next <= n);
    }
    let covered: Vec<usize> = (0..7).flat_map(|p| plan.part_tiles(p, 7)).collect();
    assert_eq!(covered, (0..n).collect::<Vec<_>>());
}
