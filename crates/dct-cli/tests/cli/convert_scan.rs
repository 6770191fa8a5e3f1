//! `deltacells convert --scan-part I/N`: the plan's first pass split over invocations (as a batch array would run
//! it), then the plain `--plan` merges the scan files into the plan a one-shot `--plan` gives.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_deltacells")).args(args).output().expect("run deltacells")
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn scan_parts_then_plan_equals_the_one_shot_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let mut inputs = Vec::new();
    for (name, src) in [
        ("a1.h5ad", "inputs/pbmc200/pbmc200.h5ad"),
        ("a2.h5", "inputs/pbmc200/pbmc200_10x.h5"),
        ("a3.h5ad", "inputs/pbmc200/pbmc200.h5ad"),
    ] {
        let p = tmp.path().join(name);
        std::fs::copy(testdata(src), &p).unwrap();
        inputs.push(p);
    }
    let out = tmp.path().join("out");
    let common = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = inputs.iter().map(|p| s(p).to_string()).collect();
        v.extend(["--output", s(&out), "--level", "3", "--tile-size", "128"].map(String::from));
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let one = tmp.path().join("one.json");
    let args = common(&["--plan", s(&one)]);
    let mut argv = vec!["convert"];
    argv.extend(args.iter().map(String::as_str));
    ok(&run(&argv), "one-shot plan");

    let split = tmp.path().join("split.json");
    for part in ["1/2", "0/2"] {
        let args = common(&["--plan", s(&split), "--scan-part", part]);
        let mut argv = vec!["convert"];
        argv.extend(args.iter().map(String::as_str));
        let o = run(&argv);
        ok(&o, part);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(stdout.contains(&format!("scan part {part}")), "{stdout}");
        assert!(!split.exists(), "a scan part writes no plan");
    }
    for i in 0..3 {
        assert!(tmp.path().join(format!("split.json.d/scan-{i}.json")).exists(), "scan file {i}");
    }
    // Corrupt one scan file: the merge notes it on stderr and scans that input itself.
    std::fs::write(tmp.path().join("split.json.d/scan-2.json"), b"{").unwrap();
    let args = common(&["--plan", s(&split)]);
    let mut argv = vec!["convert"];
    argv.extend(args.iter().map(String::as_str));
    let o = run(&argv);
    ok(&o, "merge");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("scan-2.json") && stderr.contains("scanning"), "{stderr}");
    assert_eq!(std::fs::read(&one).unwrap(), std::fs::read(&split).unwrap(), "plans differ");

    // The plan then runs as usual.
    ok(&run(&["convert", "--plan", s(&split), "--part", "0/1"]), "part");
    ok(&run(&["convert", "--plan", s(&split), "--finalize"]), "finalize");
    assert!(out.join("manifest.json").exists());

    // Usage errors exit 2.
    let o = run(&["convert", s(&inputs[0]), "--plan", s(&split), "--scan-part", "2/2"]);
    assert!(!o.status.success(), "part 2 of 2 is refused");
    assert!(String::from_utf8_lossy(&o.stderr).contains("0..N-1"));
    let o = run(&["convert", s(&inputs[0]), "--scan-part", "0/2"]);
    assert_eq!(o.status.code(), Some(2), "--scan-part requires --plan");
}
