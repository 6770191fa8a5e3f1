//! `deltacells corpus info` and `corpus align` against what the members' own files say: their gene names
//! (var_names.txt), counted, intersected and ordered here.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

fn deltacells(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_deltacells")).args(args).output().expect("run deltacells")
}

fn convert(input: &Path, out: &Path) {
    let o = deltacells(&["convert", input.to_str().unwrap(), "--output", out.to_str().unwrap(), "--level", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn genes(dataset: &Path) -> Vec<String> {
    std::fs::read_to_string(dataset.join("var_names.txt")).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn corpus_info_counts_cells_shared_genes_and_coverage() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("wu"), tmp.path().join("pbmc"));
    convert(&testdata("inputs/wu2020_200.h5ad"), &a);
    convert(&testdata("inputs/pbmc200/pbmc200.h5ad"), &b);
    let (ga, gb) = (genes(&a), genes(&b));
    let union: HashSet<&String> = ga.iter().chain(&gb).collect();
    let shared = ga.iter().filter(|g| gb.contains(g)).count();
    let o = deltacells(&["corpus", "info", a.to_str().unwrap(), b.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["members"], 2);
    assert_eq!(report["cells"], 400);
    assert_eq!(report["vocabulary"], union.len());
    assert_eq!(report["genes_shared_by_all"], shared);
    assert_eq!(report["per_member"][0]["genes_in_vocabulary"], ga.len());
    assert_eq!(report["per_member"][1]["genes"], gb.len());
    let columns: Vec<&str> =
        report["obs_columns"].as_array().unwrap().iter().map(|c| c["column"].as_str().unwrap()).collect();
    assert!(columns.contains(&"obs_names") && columns.contains(&"depth_bin"), "{columns:?}");
    let obs_names = report["obs_columns"].as_array().unwrap().iter().find(|c| c["column"] == "obs_names").unwrap();
    assert_eq!(obs_names["members"], 2, "both members name their cells");

    let vocabulary = tmp.path().join("vocabulary.txt");
    std::fs::write(&vocabulary, format!("{}\nNOT_A_GENE\n{}\n", ga[0], gb[1])).unwrap();
    let o = deltacells(&[
        "corpus",
        "info",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--genes",
        vocabulary.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("vocabulary 3 genes"), "{text}");
    let o = deltacells(&["corpus", "info", a.to_str().unwrap(), "--gene-key", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"nope\""));
}

#[test]
fn bench_corpus_reads_an_epoch_through_the_corpus_and_member_by_member() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("wu"), tmp.path().join("pbmc"));
    convert(&testdata("inputs/wu2020_200.h5ad"), &a);
    convert(&testdata("inputs/pbmc200/pbmc200.h5ad"), &b);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = deltacells(&["bench", "--corpus", a, b, "--json", "--batch-size", "64", "--pattern", "window:2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["members"], 2);
    assert_eq!(report["corpus_cells"], 400, "every cell of the epoch");
    assert_eq!(report["window"], 2);
    assert_eq!(report["corpus_nnz"], report["members_nnz"], "the union vocabulary keeps every nonzero");
    assert!(report["ratio"].as_f64().unwrap() > 0.0);
    let o = deltacells(&["bench", "--corpus", a, b, "--max-cells", "100", "--genes", "intersection"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("100 cells"));
    // Two datasets without --corpus, and --genes without it, are refused.
    let o = deltacells(&["bench", a, b]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--corpus"));
    assert!(!deltacells(&["bench", a, "--genes", "union"]).status.success());
}

#[test]
fn corpus_align_writes_each_member_in_the_vocabulary_order_that_corpus_info_then_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("wu"), tmp.path().join("pbmc"));
    convert(&testdata("inputs/wu2020_200.h5ad"), &a);
    convert(&testdata("inputs/pbmc200/pbmc200.h5ad"), &b);
    // A vocabulary in name order, which neither member stores its genes in (the converter orders them by total),
    // and a gene neither has.
    let mut vocabulary: Vec<String> =
        genes(&a).into_iter().chain(genes(&b)).collect::<HashSet<_>>().into_iter().collect();
    vocabulary.sort();
    vocabulary.insert(1, "NOT_A_GENE".into());
    let list = tmp.path().join("vocabulary.txt");
    std::fs::write(&list, vocabulary.join("\n") + "\n").unwrap();
    let info = |members: &[&Path]| -> serde_json::Value {
        let mut args = vec!["corpus", "info"];
        args.extend(members.iter().map(|m| m.to_str().unwrap()));
        args.extend(["--genes", list.to_str().unwrap(), "--json"]);
        let o = deltacells(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let before = info(&[&a, &b]);
    assert!(before["per_member"].as_array().unwrap().iter().all(|m| m["in_vocabulary_order"] == false), "{before}");
    let o = deltacells(&["corpus", "info", a.to_str().unwrap(), "--genes", list.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("deltacells corpus align"));

    let out = tmp.path().join("aligned");
    let align = || {
        let o = deltacells(&[
            "corpus",
            "align",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--genes",
            list.to_str().unwrap(),
            "--level",
            "1",
            "--output",
            out.to_str().unwrap(),
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let written = align();
    let members = written["members"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    for (m, source) in members.iter().zip([&a, &b]) {
        assert_eq!(m["already_done"], false);
        assert_eq!(m["cells"], 200);
        let own = genes(source);
        let want: Vec<&String> = vocabulary.iter().filter(|g| own.contains(g)).collect();
        let got = genes(Path::new(m["output"].as_str().unwrap()));
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "its genes in the vocabulary's order");
    }
    let after = info(&[&out.join("wu"), &out.join("pbmc")]);
    assert!(after["per_member"].as_array().unwrap().iter().all(|m| m["in_vocabulary_order"] == true), "{after}");
    assert_eq!(after["per_member"][1]["genes_in_vocabulary"], before["per_member"][1]["genes_in_vocabulary"]);
    // Again: found written.
    assert!(align()["members"].as_array().unwrap().iter().all(|m| m["already_done"] == true));
}

#[test]
fn corpus_align_refuses_to_write_over_a_member_and_does_not_keep_a_copy_of_a_changed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let members = tmp.path().join("members");
    let a = members.join("wu");
    convert(&testdata("inputs/wu2020_200.h5ad"), &a);
    let manifest = std::fs::read(a.join("manifest.json")).unwrap();
    // The output folder holding the member itself: the member's copy would be written over the member.
    for output in [members.clone(), members.join("."), tmp.path().join("x/../members")] {
        std::fs::create_dir_all(tmp.path().join("x")).unwrap();
        let o =
            deltacells(&["corpus", "align", a.to_str().unwrap(), "--output", output.to_str().unwrap(), "--overwrite"]);
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("that this alignment reads"), "{o:?}");
        assert_eq!(std::fs::read(a.join("manifest.json")).unwrap(), manifest, "the member is as it was");
    }
    let o = deltacells(&["subset", a.to_str().unwrap(), "--output", a.to_str().unwrap(), "--overwrite"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("that this subset reads"), "{o:?}");
    let o = deltacells(&["verify", a.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));

    // A member written again after its copy was made: its copy is not taken as done.
    let out = tmp.path().join("aligned");
    let align = |extra: &[&str]| {
        let mut args = vec!["corpus", "align", a.to_str().unwrap(), "--output", out.to_str().unwrap(), "--json"];
        args.extend(extra);
        deltacells(&args)
    };
    let first = align(&[]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let o = deltacells(&[
        "convert",
        testdata("inputs/wu2020_200.h5ad").to_str().unwrap(),
        "--output",
        a.to_str().unwrap(),
        "--level",
        "1",
        "--overwrite",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again = align(&[]);
    assert!(!again.status.success(), "a copy of the earlier version is not reported as done");
    assert!(String::from_utf8_lossy(&again.stderr).contains("an earlier version of"), "{again:?}");
    let replaced = align(&["--overwrite"]);
    assert!(replaced.status.success(), "{}", String::from_utf8_lossy(&replaced.stderr));
    let written: serde_json::Value = serde_json::from_slice(&replaced.stdout).unwrap();
    assert_eq!(written["members"][0]["already_done"], false);
    assert!(align(&[]).status.success(), "and the new copy is found done");
}
