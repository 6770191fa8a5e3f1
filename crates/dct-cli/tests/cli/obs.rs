//! `deltacells convert` with obs and `deltacells obs info|localize|show`, against independent truth: the source obs
//! read through dct-input, and the conformance datasets' expected values.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dct_input::{ColumnData, H5adMatrix, H5adSource};
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_deltacells")).args(args).output().expect("run deltacells")
}

fn ok(args: &[&str]) -> Output {
    let o = run(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The source column as `show --json` must print it: labels, nulls for missing codes and NaN.
fn source_json(data: &ColumnData) -> Vec<Value> {
    let f = |x: f64| if x.is_nan() { Value::Null } else { serde_json::json!(x) };
    match data {
        ColumnData::Str(v) => v.iter().map(|x| serde_json::json!(x)).collect(),
        ColumnData::Int(v) => v.iter().map(|x| serde_json::json!(x)).collect(),
        ColumnData::UInt(v) => v.iter().map(|x| serde_json::json!(x)).collect(),
        ColumnData::Float(v) => v.iter().map(|&x| f(x)).collect(),
        ColumnData::Bool(v) => v.iter().map(|x| serde_json::json!(x)).collect(),
        ColumnData::Categorical { codes, categories, .. } => {
            codes.iter().map(|&c| if c < 0 { Value::Null } else { serde_json::json!(categories[c as usize]) }).collect()
        }
        ColumnData::NullableInt { values, valid } => {
            values.iter().zip(valid).map(|(x, &v)| if v { serde_json::json!(x) } else { Value::Null }).collect()
        }
        ColumnData::NullableUInt { values, valid } => {
            values.iter().zip(valid).map(|(x, &v)| if v { serde_json::json!(x) } else { Value::Null }).collect()
        }
        ColumnData::NullableBool { values, valid } => {
            values.iter().zip(valid).map(|(x, &v)| if v { serde_json::json!(x) } else { Value::Null }).collect()
        }
        ColumnData::NullableStr { values, valid } => {
            values.iter().zip(valid).map(|(x, &v)| if v { serde_json::json!(x) } else { Value::Null }).collect()
        }
    }
}

#[test]
fn converted_wu2020_obs_info_localize_and_show_match_the_source() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/wu2020_200.h5ad");
    let out = tmp.path().join("wu");
    let cache = tmp.path().join("cache");
    ok(&["convert", s(&input), "--output", s(&out), "--tile-size", "64", "--level", "3", "--obs-tiles-per-file", "3"]);
    ok(&["verify", s(&out)]);
    let frame = H5adSource::open(&input, &H5adMatrix::X).unwrap().read_obs().unwrap();

    // info: every column with its kind and sizes; bytes per 100M cells from the real cell count.
    let info = json(&ok(&["obs", "info", s(&out), "--json", "--cache-dir", s(&cache)]));
    assert_eq!(info["n_cells"], 200);
    assert_eq!((info["shards"].as_u64(), info["tiles_per_file"].as_u64()), (Some(2), Some(3)));
    let cols = info["columns"].as_array().unwrap();
    assert_eq!(cols.len(), frame.columns.len() + 1);
    assert_eq!(cols[cols.len() - 1]["name"], "obs_names");
    let mut stored_sum = 0;
    for (c, src) in cols.iter().zip(&frame.columns) {
        assert_eq!(c["name"], src.name.as_str());
        let stored = c["stored_bytes"].as_u64().unwrap();
        assert!(stored > 0, "{c}");
        stored_sum += stored;
        assert_eq!(c["bytes_per_100m_cells"].as_u64().unwrap(), (stored as f64 * 1e8 / 200.0).round() as u64);
        match &src.data {
            ColumnData::Categorical { categories, .. } => {
                assert_eq!(c["kind"], "category");
                assert_eq!(c["categories"].as_u64(), Some(categories.len() as u64), "{c}");
            }
            _ => assert!(c["categories"].is_null(), "{c}"),
        }
    }
    stored_sum += cols[cols.len() - 1]["stored_bytes"].as_u64().unwrap();
    assert_eq!(info["stored_bytes"].as_u64(), Some(stored_sum));
    assert!(stored_sum < info["shard_bytes"].as_u64().unwrap(), "column chunks are part of the shards");
    let text = String::from_utf8(ok(&["obs", "info", s(&out), "--cache-dir", s(&cache)]).stdout).unwrap();
    assert!(text.contains("clonotype_orig") && text.contains("int16"), "{text}");

    // localize: the columns' cache files appear under the fingerprint.
    let fp = info["fingerprint"].as_str().unwrap();
    let dir = cache.join(fp).join("obs");
    ok(&["obs", "localize", s(&out), "--columns", "patient,IR_VJ_1_duplicate_count", "--cache-dir", s(&cache)]);
    assert!(dir.join("patient.arrow").exists() && dir.join("IR_VJ_1_duplicate_count.arrow").exists());
    assert!(!dir.join("source.arrow").exists());
    let o = ok(&["obs", "localize", s(&out), "--all", "--cache-dir", s(&cache)]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("2 already cached"), "{}", String::from_utf8_lossy(&o.stdout));
    let arrow_files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "arrow"));
    assert_eq!(arrow_files.count(), frame.columns.len() + 1);

    // show --json: every column, every cell, as the source has them.
    let shown = json(&ok(&["obs", "show", s(&out), "--cells", "0:200", "--json", "--cache-dir", s(&cache)]));
    let obj = shown.as_object().unwrap();
    assert_eq!(obj.len(), frame.columns.len() + 1);
    let names: Vec<Value> = frame.index.iter().map(|n| serde_json::json!(n)).collect();
    assert_eq!(obj["obs_names"].as_array().unwrap(), &names);
    for c in &frame.columns {
        assert_eq!(obj[&c.name].as_array().unwrap(), &source_json(&c.data), "column {}", c.name);
    }
    // A selection of cells and columns, in the order asked for.
    let o = ok(&[
        "obs",
        "show",
        s(&out),
        "--cells",
        "199,3,64",
        "--columns",
        "source,obs_names",
        "--json",
        "--cache-dir",
        s(&cache),
    ]);
    let text = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(text.find("\"source\"").unwrap() < text.find("\"obs_names\"").unwrap(), "column order kept: {text}");
    let sel = json(&o);
    let src = source_json(&frame.column("source").unwrap().data);
    assert_eq!(sel["source"], Value::Array(vec![src[199].clone(), src[3].clone(), src[64].clone()]));
    assert_eq!(sel["obs_names"][0], frame.index[199].as_str());
    // CSV: a header, one line per cell, missing values empty.
    let csv = String::from_utf8(
        ok(&[
            "obs",
            "show",
            s(&out),
            "--cells",
            "0:2",
            "--columns",
            "IR_VJ_1_duplicate_count,patient",
            "--csv",
            "--cache-dir",
            s(&cache),
        ])
        .stdout,
    )
    .unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "cell,IR_VJ_1_duplicate_count,patient");
    let dup = source_json(&frame.column("IR_VJ_1_duplicate_count").unwrap().data);
    let patient = source_json(&frame.column("patient").unwrap().data);
    for r in 0..2 {
        let f: Vec<&str> = lines[r + 1].split(',').collect();
        assert_eq!(f[0], r.to_string());
        match dup[r].as_f64() {
            Some(x) => assert_eq!(f[1].parse::<f64>().unwrap(), x),
            None => assert_eq!(f[1], ""),
        }
        assert_eq!(f[2], patient[r].as_str().unwrap());
    }
}

#[test]
fn conformance_obs_show_json_equals_the_expected_values() {
    for case in ["v1_with_obs", "v2_with_obs"] {
        let tmp = tempfile::tempdir().unwrap();
        let ds = testdata(&format!("conformance/datasets/{case}"));
        let exp: Value = serde_json::from_slice(
            &std::fs::read(testdata(&format!("conformance/datasets/{case}.expected.json"))).unwrap(),
        )
        .unwrap();
        let cache = tmp.path().join("cache");
        let n = exp["n_cells"].as_u64().unwrap();
        let info = json(&ok(&["obs", "info", s(&ds), "--json", "--cache-dir", s(&cache)]));
        let exp_cols = exp["obs"].as_array().unwrap();
        for (got, want) in info["columns"].as_array().unwrap().iter().zip(exp_cols) {
            assert_eq!(got["name"], want["name"]);
            assert_eq!(got["kind"], want["kind"]);
            assert_eq!(got["arrow_type"], want["arrow_type"]);
            assert_eq!(got["categories"].as_u64(), want["categories"].as_array().map(|c| c.len() as u64));
        }
        ok(&["obs", "localize", s(&ds), "--all", "--cache-dir", s(&cache)]);
        let shown =
            json(&ok(&["obs", "show", s(&ds), "--cells", &format!("0:{n}"), "--json", "--cache-dir", s(&cache)]));
        assert_eq!(shown.as_object().unwrap().len(), exp_cols.len(), "{case}");
        for c in exp_cols {
            let name = c["name"].as_str().unwrap();
            let (got, want) = (shown[name].as_array().unwrap(), c["values"].as_array().unwrap());
            assert_eq!(got.len(), want.len(), "{case}: {name}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                // Numbers compare by value (1.0 and 1 are the same number).
                let same = match (g.as_f64(), w.as_f64()) {
                    (Some(a), Some(b)) => a == b,
                    _ => g == w,
                };
                assert!(same, "{case}: {name}[{i}]: {g} != {w}");
            }
        }
    }
}

#[test]
fn obs_usage_and_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let ds = testdata("conformance/datasets/v2_with_obs");
    // Neither --columns nor --all: a usage error.
    assert_eq!(run(&["obs", "localize", s(&ds), "--cache-dir", s(&cache)]).status.code(), Some(2));
    // An unknown column names itself and the available ones.
    let o = run(&["obs", "show", s(&ds), "--columns", "nope", "--cache-dir", s(&cache)]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("\"nope\"") && err.contains("cell_type"), "{err}");
    // Cells out of range.
    assert_eq!(run(&["obs", "show", s(&ds), "--cells", "0:351", "--cache-dir", s(&cache)]).status.code(), Some(1));
    // A dataset without obs.
    let o = run(&["obs", "info", s(&testdata("conformance/datasets/v2_exceptions_wide")), "--cache-dir", s(&cache)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no obs"), "{}", String::from_utf8_lossy(&o.stderr));
    // Text output of show: a header and one line per cell.
    let text =
        String::from_utf8(ok(&["obs", "show", s(&ds), "--cells", "0:3", "--cache-dir", s(&cache)]).stdout).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(text.lines().next().unwrap().starts_with("cell  cell_type"), "{text}");
}

#[test]
fn convert_obs_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/wu2020_200.h5ad");
    let cache = tmp.path().join("cache");
    let base = |out: &Path| -> Vec<String> {
        ["convert", s(&input), "--output", s(out), "--tile-size", "100", "--level", "1"]
            .iter()
            .map(|x| x.to_string())
            .collect()
    };
    let with = |out: &Path, extra: &[&str]| {
        let mut a = base(out);
        a.extend(extra.iter().map(|x| x.to_string()));
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&refs)
    };
    let out = tmp.path().join("cols");
    assert_eq!(with(&out, &["--obs-columns", "source,obs_names"]).status.code(), Some(0));
    let info = json(&ok(&["obs", "info", s(&out), "--json", "--cache-dir", s(&cache)]));
    let names: Vec<&str> = info["columns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["source", "obs_names"]);

    let out = tmp.path().join("excl");
    assert_eq!(
        with(&out, &["--obs-exclude", "obs_names,clonotype_orig", "--max-categories", "10"]).status.code(),
        Some(0)
    );
    let info = json(&ok(&["obs", "info", s(&out), "--json", "--cache-dir", s(&cache)]));
    let cols = info["columns"].as_array().unwrap();
    assert!(cols.iter().all(|c| c["name"] != "obs_names" && c["name"] != "clonotype_orig"));
    let patient = cols.iter().find(|c| c["name"] == "patient").unwrap();
    assert_eq!(
        (patient["kind"].as_str(), patient["categories"].as_u64()),
        (Some("string"), None),
        "14 > 10 categories"
    );

    let out = tmp.path().join("none");
    assert_eq!(with(&out, &["--no-obs"]).status.code(), Some(0));
    let info = json(&ok(&["info", s(&out), "--json"]));
    assert_eq!((info["has_obs"].as_bool(), info["has_var_table"].as_bool()), (Some(false), Some(true)));

    let o = with(&tmp.path().join("bad"), &["--obs-columns", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"nope\""), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(with(&tmp.path().join("bad2"), &["--no-obs", "--obs-exclude", "x"]).status.code(), Some(2));
    assert_eq!(with(&tmp.path().join("bad3"), &["--obs-tiles-per-file", "0"]).status.code(), Some(2));
}

#[test]
fn convert_keeps_pandas_nullable_columns_and_show_prints_nulls() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/nullable_obs.h5ad");
    let exp: Value =
        serde_json::from_slice(&std::fs::read(testdata("inputs/nullable_obs.expected.json")).unwrap()).unwrap();
    let out = tmp.path().join("nullable");
    let cache = tmp.path().join("cache");
    ok(&["convert", s(&input), "--output", s(&out), "--tile-size", "8", "--level", "1"]);
    ok(&["verify", s(&out)]);
    let info = json(&ok(&["obs", "info", s(&out), "--json", "--cache-dir", s(&cache)]));
    let kinds: Vec<(&str, &str)> = info["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("note", "string"),
            ("all_present", "string"),
            ("label", "string"),
            ("n_nullable", "numeric"),
            ("flag", "bool"),
            ("cell_type", "category"),
            ("obs_names", "string")
        ]
    );
    // show --json: every column as pandas had it, null where missing (pd.NA, NaN category).
    let shown = json(&ok(&["obs", "show", s(&out), "--cells", "0:30", "--json", "--cache-dir", s(&cache)]));
    assert_eq!(shown["obs_names"], exp["cell_names"]);
    for name in exp["obs_columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()) {
        assert_eq!(shown[name], exp["obs"][name], "column {name}");
    }
    // The frame the converter read agrees too.
    let frame = H5adSource::open(&input, &H5adMatrix::X).unwrap().read_obs().unwrap();
    let note = frame.column("note").unwrap();
    assert_eq!(Value::Array(source_json(&note.data)), exp["obs"]["note"]);
}
