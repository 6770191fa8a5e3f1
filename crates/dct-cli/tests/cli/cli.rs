//! The `deltacells` binary against the conformance set in testdata/ (the same checks as the public
//! conformance harness, so CI needs nothing outside the repository), plus exit-code and output contracts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_deltacells"))
}

fn conformance() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance")
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run deltacells")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally, not by a signal")
}

fn assert_no_panic(o: &Output, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked at") && code(o) != 101, "{what}: panicked: {err}");
}

/// `(row, col, value)`, 1-based.
type Triple = (u64, u64, u64);

/// The size line and the sorted entries of a Matrix Market file.
fn read_mtx(path: &Path) -> (Triple, Vec<Triple>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('%') && !l.trim().is_empty());
    let n = |s: &str| s.parse::<u64>().unwrap();
    let head: Vec<u64> = lines.next().unwrap().split_whitespace().map(n).collect();
    let mut entries: Vec<Triple> = lines
        .map(|l| {
            let p: Vec<u64> = l.split_whitespace().map(n).collect();
            (p[0], p[1], p[2])
        })
        .collect();
    entries.sort_unstable();
    ((head[0], head[1], head[2]), entries)
}

fn expected_entries(exp: &Value) -> Vec<Triple> {
    let ints = |k: &str| -> Vec<u64> { exp[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect() };
    let (ip, ix, v) = (ints("indptr"), ints("indices"), ints("values"));
    let mut out = Vec::new();
    for r in 0..ip.len() - 1 {
        for k in ip[r] as usize..ip[r + 1] as usize {
            out.push((r as u64 + 1, ix[k] + 1, v[k]));
        }
    }
    out.sort_unstable();
    out
}

fn check_export(dataset: &Path, exp: &Value, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.mtx");
    let n = exp["n_cells"].as_u64().unwrap();
    let o = run(&[
        "export",
        dataset.to_str().unwrap(),
        "--cells",
        &format!("0:{n}"),
        "--format",
        "mtx",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_no_panic(&o, name);
    assert_eq!(code(&o), 0, "{name}: export failed: {}", String::from_utf8_lossy(&o.stderr));
    let ((rows, cols, nnz), got) = read_mtx(&out);
    let want = expected_entries(exp);
    assert_eq!((rows, cols, nnz), (n, exp["n_genes"].as_u64().unwrap(), want.len() as u64), "{name}: header");
    assert_eq!(got, want, "{name}: exported entries");
}

/// A one-tile dataset around a conformance tile, as the public harness builds it.
fn wrap_tile(tile: &Path, exp: &Value, root: &Path) {
    std::fs::create_dir_all(root.join("tiles")).unwrap();
    std::fs::copy(tile, root.join("tiles/tile_000000.dct")).unwrap();
    let n = exp["n_cells"].as_u64().unwrap();
    let manifest = serde_json::json!({
        "format": "deltacells-dataset", "version": exp["version"], "n_cells": n, "n_genes": exp["n_genes"],
        "tile_size": n, "tile_cells": [n], "tile_nnz": [exp["nnz"]], "tile_bytes": [std::fs::metadata(tile).unwrap().len()],
        "n_chunks": exp["n_chunks"], "zstd_level": 19, "has_gene_order": false, "has_var_names": false,
        "has_var_table": false, "has_obs": false, "metadata": {},
    });
    std::fs::write(root.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
}

#[test]
fn good_tiles_inspect_verify_and_export_exactly() {
    let good = conformance().join("tiles/good");
    let mut n = 0;
    for entry in std::fs::read_dir(&good).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("dct") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let exp: Value =
            serde_json::from_slice(&std::fs::read(good.join(format!("{name}.expected.json"))).unwrap()).unwrap();
        for extra in [&[][..], &["--no-crc"][..]] {
            let mut args = vec!["inspect-tile", path.to_str().unwrap(), "--decode"];
            args.extend_from_slice(extra);
            let o = run(&args);
            assert_no_panic(&o, &name);
            assert_eq!(code(&o), 0, "{name} {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        }
        if exp["n_cells"].as_u64().unwrap() > 0 {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().join("ds");
            wrap_tile(&path, &exp, &root);
            let o = run(&["verify", root.to_str().unwrap()]);
            assert_eq!(code(&o), 0, "{name}: verify: {}", String::from_utf8_lossy(&o.stdout));
            check_export(&root, &exp, &name);
        }
        n += 1;
    }
    assert_eq!(n, 36);
}

#[test]
fn bad_tiles_exit_1_without_panics() {
    let bad = conformance().join("tiles/bad");
    let cases: Vec<Value> = serde_json::from_slice(&std::fs::read(bad.join("cases.json")).unwrap()).unwrap();
    for case in &cases {
        let file = bad.join(case["file"].as_str().unwrap());
        let o = run(&["inspect-tile", file.to_str().unwrap(), "--decode"]);
        assert_no_panic(&o, case["file"].as_str().unwrap());
        assert_eq!(code(&o), 1, "{}: with CRC", case["file"]);
        let o = run(&["inspect-tile", file.to_str().unwrap(), "--decode", "--no-crc"]);
        assert_no_panic(&o, case["file"].as_str().unwrap());
        if case["expect"] == "error" {
            assert_eq!(code(&o), 1, "{}: without CRC", case["file"]);
        } else {
            assert!(matches!(code(&o), 0 | 1), "{}", case["file"]);
        }
    }
}

#[test]
fn datasets_verify_and_export_or_fail_cleanly() {
    let dir = conformance().join("datasets");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(case) = path.file_name().unwrap().to_str().unwrap().strip_suffix(".expected.json") else { continue };
        let exp: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let ds = dir.join(case);
        let o = run(&["verify", ds.to_str().unwrap()]);
        assert_no_panic(&o, case);
        if exp["expect"] == "error" {
            assert_eq!(code(&o), 1, "{case}: verify should fail");
            let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            assert!(!text.trim().is_empty(), "{case}: a failure says what is wrong");
        } else {
            assert_eq!(code(&o), 0, "{case}: {}", String::from_utf8_lossy(&o.stdout));
            check_export(&ds, &exp, case);
        }
        n += 1;
    }
    assert_eq!(n, 18);
}

/// Output into a pipe whose reader has gone (`deltacells info DATASET | head -1`, the reader done first): each
/// command stops writing and ends with status 0, without a panic, plain and `--json` alike.
#[test]
fn output_into_a_closed_pipe_ends_the_command_quietly() {
    let (dataset, other) = (conformance().join("datasets/v2_with_obs"), conformance().join("datasets/v1_with_obs"));
    let (dataset, other) = (dataset.to_str().unwrap(), other.to_str().unwrap());
    let tile = conformance().join("tiles/good");
    let tile = std::fs::read_dir(&tile)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "dct"))
        .unwrap();
    let tile = tile.to_str().unwrap();
    for args in [
        vec!["info", dataset],
        vec!["info", "--json", dataset],
        vec!["verify", dataset],
        vec!["obs", "info", dataset],
        vec!["corpus", "info", dataset, other, "--json"],
        vec!["inspect-tile", tile],
    ] {
        // The reader is gone before the command writes its first byte: every write fails with a broken pipe.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = bin().args(&args).stdout(writer).output().expect("run deltacells");
        assert_no_panic(&o, &args.join(" "));
        assert_eq!(code(&o), 0, "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(o.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn usage_errors_exit_2_and_json_output_parses() {
    assert_eq!(code(&run(&["no-such-command"])), 2);
    assert_eq!(code(&run(&["export"])), 2);
    let ds = conformance().join("datasets/v2_with_obs");
    // A --where without COLUMN=...: the command line's form, refused before the dataset is read.
    let out = tempfile::tempdir().unwrap();
    let o = run(&["subset", ds.to_str().unwrap(), "--output", out.path().join("s").to_str().unwrap(), "--where", "x"]);
    assert_eq!(code(&o), 2, "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("COLUMN=VALUE"));
    let o = run(&["info", ds.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 0);
    let info: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(info["n_cells"], 350);
    assert_eq!(info["n_tiles"], 4);
    let o = run(&["verify", ds.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    let broken = conformance().join("datasets/broken_tile_missing");
    let o = run(&["verify", broken.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 1);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["problems"].as_array().unwrap().iter().any(|p| p["category"] == "tile_missing"), "{v}");
}

#[test]
fn errors_say_their_cause_once() {
    let empty = tempfile::tempdir().unwrap();
    let o = run(&["info", empty.path().to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.matches("there is no manifest.json").count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains("manifest.json"), "{err}");
    let o = run(&["convert", "/nonexistent/input.h5ad", "--output", empty.path().join("x").to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.matches("does not exist").count(), 1, "{err}");
    assert_eq!(err.matches("/nonexistent/input.h5ad").count(), 1, "{err}");
    // A manifest that is not JSON: the dataset error carries the parser's message, and says it once.
    std::fs::write(empty.path().join("manifest.json"), b"{\"version\": 2,").unwrap();
    let o = run(&["info", empty.path().to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.matches("EOF while parsing").count(), 1, "{err}");
    // The input layer's I/O errors: a truncated .h5ad names the file once and the cause once.
    let truncated = empty.path().join("cut.h5ad");
    std::fs::write(&truncated, &std::fs::read(conformance().join("../inputs/pbmc200/pbmc200.h5ad")).unwrap()[..4096])
        .unwrap();
    let o = run(&["convert", truncated.to_str().unwrap(), "--output", empty.path().join("y").to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(err.matches("cut.h5ad").count(), 1, "{err}");
    // A corrupt tile under `bench` is named, with its object, and said to be corrupt once (with the CRC checked, and
    // without it: the decoder's finding instead).
    let damaged = empty.path().join("damaged");
    let source = conformance().join("datasets/v2_exceptions_wide");
    std::fs::create_dir_all(damaged.join("tiles")).unwrap();
    for entry in walk(&source) {
        let to = damaged.join(entry.strip_prefix(&source).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &to).unwrap();
    }
    let tile = damaged.join("tiles/tile_000000.dct");
    let mut bytes = std::fs::read(&tile).unwrap();
    let at = bytes.len() - 20;
    bytes[at] ^= 0x5a;
    std::fs::write(&tile, bytes).unwrap();
    for crc in [true, false] {
        let mut args = vec!["bench", damaged.to_str().unwrap(), "--tiles", "0", "--threads", "1"];
        if !crc {
            args.push("--no-crc");
        }
        let o = run(&args);
        assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(err.contains("tile 0 (") && err.contains("tile_000000.dct"), "crc {crc}: {err}");
        assert_eq!(err.matches("corrupt").count(), 1, "crc {crc}: {err}");
    }
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out
}

#[test]
fn store_options_are_checked_before_anything_is_read() {
    let ds = conformance().join("datasets/v2_with_obs");
    let ds = ds.to_str().unwrap();
    // Not KEY=VALUE: a usage error.
    let o = run(&["info", ds, "--store-option", "allow_http"]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected KEY=VALUE"));
    // A request cap that is not a positive number: refused, naming the location and the option.
    let o = run(&["info", ds, "--store-option", "max_requests=0"]);
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("max_requests must be a positive whole number") && err.contains("v2_with_obs"), "{err}");
    // A valid cap, after the subcommand or before it: the dataset opens.
    assert_eq!(code(&run(&["info", ds, "--store-option", "max_requests=2"])), 0);
    assert_eq!(code(&run(&["--store-option", "max_requests=2", "verify", ds])), 0);
    // A simulated distance on a local dataset: every tile read through the delayed store layer, whole and checked;
    // an unusable value refused, naming the option and the value.
    let far = ["--store-option", "simulate_latency_ms=2", "--store-option", "simulate_jitter_ms=1"];
    assert_eq!(code(&run(&[&["verify", ds][..], &far[..]].concat())), 0);
    let o = run(&["info", ds, "--store-option", "simulate_mb_per_s=0"]);
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("simulate_mb_per_s must be a positive number") && err.contains("\"0\""), "{err}");
    // Tiles read as ranged parts of 64 bytes, every tile's CRC checked; a part size that is not a number refused.
    let parts = ["--store-option", "part_bytes=64"];
    assert_eq!(code(&run(&[&["verify", ds][..], &far[..], &parts[..]].concat())), 0);
    let o = run(&["info", ds, "--store-option", "part_bytes=8MiB"]);
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("part_bytes must be a whole number of bytes") && err.contains("\"8MiB\""), "{err}");
    // An unknown key of a cloud backend is refused (no server is asked).
    let o = run(&["info", "s3://bucket/atlas", "--store-option", "no_such_key=1"]);
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown S3 option \"no_such_key\""), "{o:?}");
}

#[test]
fn export_csv_uses_source_gene_order_and_names() {
    let ds = conformance().join("datasets/v1_with_obs");
    let exp: Value =
        serde_json::from_slice(&std::fs::read(conformance().join("datasets/v1_with_obs.expected.json")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.csv");
    let o = run(&[
        "export",
        ds.to_str().unwrap(),
        "--cells",
        "3,1",
        "--format",
        "csv",
        "--output",
        out.to_str().unwrap(),
        "--source-gene-order",
    ]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("cell,gene,gene_name,count"));
    let order: Vec<u64> = exp["gene_order"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let names: Vec<&str> = exp["var_names"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    let ip: Vec<u64> = exp["indptr"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let ix: Vec<u64> = exp["indices"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let vals: Vec<u64> = exp["values"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let mut want = Vec::new();
    for cell in [3usize, 1] {
        for k in ip[cell] as usize..ip[cell + 1] as usize {
            want.push(format!("{cell},{},{},{}", order[ix[k] as usize], names[ix[k] as usize], vals[k]));
        }
    }
    assert_eq!(lines.map(str::to_string).collect::<Vec<_>>(), want);
}

#[test]
fn bench_patterns_read_every_cell_and_a_global_order_decodes_more_tiles() {
    let ds = conformance().join("datasets/v2_exceptions_wide");
    let ds = ds.to_str().unwrap();
    let bench = |pattern: &str| -> Value {
        let o = run(&[
            "bench",
            ds,
            "--pattern",
            pattern,
            "--batch-size",
            "10",
            "--threads",
            "1",
            "--json",
            "--prefetch",
            "1",
        ]);
        assert_eq!(code(&o), 0, "{pattern}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let decoded: Vec<u64> = ["cells", "tiles", "window:2", "global"]
        .iter()
        .map(|p| {
            let v = bench(p);
            assert_eq!(v["batch_cells"], 105, "{p}: every cell once");
            assert_eq!(v["pattern"], *p);
            // The reader's cold read of a tile is at least its parts measured inside it (fetch and planes).
            let secs = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{p}: no {k}"));
            let (total, fetch, planes) =
                (secs("tile_reader_seconds"), secs("tile_reader_fetch_seconds"), secs("tile_reader_planes_seconds"));
            assert!(planes > 0.0 && secs("tile_reader_rows_seconds") > 0.0, "{p}: {v}");
            assert!(secs("tile_reader_checks_seconds") > 0.0, "{p}: {v}");
            assert!(total >= fetch + planes + secs("tile_reader_checks_seconds"), "{p}: {v}");
            assert!(total >= fetch + planes, "{p}: {v}");
            v["tiles_decoded"].as_u64().unwrap()
        })
        .collect();
    // 3 tiles of 40, 40 and 25 cells: sequential patterns decode each once; random batches of 10 over a cache
    // of 2 decoded tiles come back to evicted tiles.
    assert_eq!(&decoded[..3], &[3, 3, 3], "{decoded:?}");
    assert!(decoded[3] > 3, "{decoded:?}");
    let o = run(&["bench", ds, "--no-crc", "--json", "--threads", "1"]);
    assert_eq!(code(&o), 0, "--no-crc: {}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["bench", ds, "--pattern", "window:0"]);
    assert_eq!(code(&o), 2, "a usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("window:K"));
}
