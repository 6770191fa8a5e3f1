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
    // And those found after parsing the command line: options that exclude each other, values of the wrong form.
    let (ds, csv) = (s(&out), tmp.path().join("cells.csv"));
    for args in [
        vec!["convert"],
        vec!["convert", s(&inputs[0])],
        vec!["convert", "--plan", s(&split)],
        vec!["convert", "--plan", s(&split), "--part", "1/x"],
        vec!["convert", "--plan", s(&split), "--part", "0/1", "--output", ds],
        vec!["export", ds, "--cells", "5:abc", "--format", "csv", "--output", s(&csv)],
        vec!["bench", ds, "--pattern", "bogus"],
    ] {
        let o = run(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.lines().count() == 1, "{args:?}: {stderr}");
    }
}

/// Scan parts run with absolute paths, the plan with the same files named relative to the working directory (or
/// through `./` patterns): every scan file is used, none scanned again.
#[test]
fn scan_files_are_matched_to_their_inputs_however_the_paths_are_spelled() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("in")).unwrap();
    for name in ["a1.h5ad", "a2.h5ad"] {
        std::fs::copy(testdata("inputs/pbmc200/pbmc200.h5ad"), tmp.path().join("in").join(name)).unwrap();
    }
    let absolute = [tmp.path().join("in/a1.h5ad"), tmp.path().join("in/a2.h5ad")];
    for part in ["0/2", "1/2"] {
        ok(
            &run(&[
                "convert",
                s(&absolute[0]),
                s(&absolute[1]),
                "--plan",
                s(&tmp.path().join("p.json")),
                "--scan-part",
                part,
            ]),
            "scan part",
        );
    }
    let planned = Command::new(env!("CARGO_BIN_EXE_deltacells"))
        .current_dir(tmp.path())
        .args(["convert", "./in/*.h5ad", "--output", "out", "--plan", "p.json", "--level", "3"])
        .output()
        .unwrap();
    ok(&planned, "plan from relative paths");
    let stderr = String::from_utf8_lossy(&planned.stderr);
    assert!(!stderr.contains("again"), "scan files were not used: {stderr}");
}

/// The split steps given options they do not take are refused (a Slurm task with the inputs left on its command
/// line made a new plan and wrote nothing), and `--overwrite` with `--plan` clears the output for the new plan.
#[test]
fn split_steps_refuse_what_they_do_not_take_and_overwrite_clears_the_output_for_a_new_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/pbmc200/pbmc200.h5ad");
    let (plan, out) = (tmp.path().join("p.json"), tmp.path().join("out"));
    ok(
        &run(&["convert", s(&input), "--output", s(&out), "--plan", s(&plan), "--tile-size", "64", "--level", "3"]),
        "plan",
    );
    let planned = std::fs::read(&plan).unwrap();
    for (args, says) in [
        (vec!["convert", s(&input), "--plan", s(&plan), "--part", "0/2"], "take no inputs"),
        (vec!["convert", s(&input), "--plan", s(&plan), "--finalize"], "take no inputs"),
        (vec!["convert", "--plan", s(&plan), "--part", "0/2", "--output", "elsewhere"], "the plan names its output"),
    ] {
        let o = run(&args);
        assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains(says), "{args:?}: {o:?}");
    }
    assert_eq!(std::fs::read(&plan).unwrap(), planned, "the plan file is as it was");
    ok(&run(&["convert", "--plan", s(&plan), "--part", "0/1"]), "part");
    ok(&run(&["convert", "--plan", s(&plan), "--finalize"]), "finalize");
    // Another plan for the same output: its parts are refused until the plan is made with --overwrite.
    let other = tmp.path().join("q.json");
    let new_plan = |extra: &[&str]| {
        let mut args = vec!["convert", s(&input), "--output", s(&out), "--plan", s(&other), "--tile-size", "32"];
        args.extend(extra);
        ok(&run(&args), "another plan");
    };
    new_plan(&[]);
    let refused = run(&["convert", "--plan", s(&other), "--part", "0/1"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("already holds a dataset"), "{refused:?}");
    new_plan(&["--overwrite"]);
    assert!(!out.join("manifest.json").exists(), "the old dataset is gone");
    ok(&run(&["convert", "--plan", s(&other), "--part", "0/1"]), "part of the new plan");
    ok(&run(&["convert", "--plan", s(&other), "--finalize"]), "finalize of the new plan");
    let info = run(&["info", s(&out), "--json"]);
    let facts: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(facts["tile_size"], 32);
}
