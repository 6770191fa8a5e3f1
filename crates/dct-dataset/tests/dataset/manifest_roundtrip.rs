//! Regression (fuzz target `manifest`): numbers in `metadata` and in unknown keys must survive
//! `Manifest::from_json` → `to_json_pretty` → `from_json` exactly. Before the workspace enabled serde_json's
//! `float_roundtrip` feature, integers beyond 64 bits and some floats moved by one ULP on a rewrite.

use dct_dataset::Manifest;
use serde_json::{Value, json};

/// A valid manifest (two tiles) with `metadata` and the unknown keys spliced in as raw JSON text, so that the
/// numbers are parsed from exactly the digits written here.
fn manifest_text(metadata: &str, unknown: &[(&str, &str)]) -> String {
    let mut s = String::from(
        r#"{"format": "deltacells-dataset", "version": 2, "n_cells": 5, "n_genes": 10, "tile_size": 3,
            "tile_cells": [3, 2], "tile_nnz": [4, 1], "tile_bytes": [200, 150], "metadata": "#,
    );
    s.push_str(metadata);
    for (k, v) in unknown {
        s.push_str(&format!(", {k:?}: {v}"));
    }
    s.push('}');
    s
}

/// Parses, rewrites and parses again; the metadata and unknown keys must be identical, and the second rewrite
/// must be byte-identical to the first.
fn round_trip(text: &[u8]) -> (Manifest, Manifest) {
    let first = Manifest::from_json(text).unwrap_or_else(|e| panic!("{e}"));
    let json1 = first.to_json_pretty();
    let second = Manifest::from_json(&json1).unwrap();
    assert_eq!(second.metadata, first.metadata, "metadata changed on rewrite");
    assert_eq!(second.extra, first.extra, "unknown keys changed on rewrite");
    assert_eq!(second, first);
    assert_eq!(second.to_json_pretty(), json1, "a second rewrite differs from the first");
    (first, second)
}

/// The numbers of `v`, depth first, as f64 bit patterns (integers as themselves).
fn numbers(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Number(n) => out.push(match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => format!("u{u}"),
            (None, Some(i), _) => format!("i{i}"),
            (None, None, Some(f)) => format!("f{:016x}", f.to_bits()),
            _ => unreachable!(),
        }),
        Value::Array(a) => a.iter().for_each(|x| numbers(x, out)),
        Value::Object(m) => m.values().for_each(|x| numbers(x, out)),
        _ => {}
    }
}

const LITERALS: &[&str] = &[
    "1e308",
    "1.7976931348623157e308",
    "-1.7976931348623157e308",
    "5e-324",
    "-5e-324",
    "2.2250738585072014e-308",
    "2.225073858507201e-308",
    "0.1",
    "0.30000000000000004",
    "-0.0",
    "1.0",
    "123456789.123456789",
    "3.141592653589793238462643383279",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "340282366920938463463374607431768211457",
    "13333333333333333333333333333333333333333333333333333333333333333339",
    "9007199254740993",
    "4.9406564584124654e-324",
    "2.4703282292062328e-324",
    "1e-400",
    "8.98846567431158e307",
];

#[test]
fn numbers_in_metadata_and_unknown_keys_survive_a_rewrite_exactly() {
    let list = format!("[{}]", LITERALS.join(", "));
    let nested = format!(
        r#"{{"a": {{"b": [{{"c": 1e308}}, [5e-324, [0.1, 18446744073709551617]]], "d": -0.0}}, "list": {list}, "s": "x"}}"#
    );
    let text = manifest_text(
        &nested,
        &[
            ("zstd_leweL", "13333333333333333333333333333333333333333333333333333333333333333339"),
            ("x_float", "0.1"),
            ("x_tiny", "5e-324"),
            ("x_list", &list),
            ("x_nested", &nested),
        ],
    );
    let (first, _) = round_trip(text.as_bytes());

    // Each literal is read as Rust's correctly rounded parse of it (so the rewrite, which prints the shortest
    // form that reads back the same f64, reads back exactly).
    let got = first.extra["x_list"].as_array().unwrap();
    assert_eq!(got.len(), LITERALS.len());
    for (lit, v) in LITERALS.iter().zip(got) {
        match (lit.parse::<u64>(), lit.parse::<i64>()) {
            (Ok(u), _) => assert_eq!(v.as_u64(), Some(u), "{lit}"),
            (_, Ok(i)) => assert_eq!(v.as_i64(), Some(i), "{lit}"),
            _ => {
                let want: f64 = lit.parse().unwrap();
                let have = v.as_f64().unwrap();
                assert_eq!(have.to_bits(), want.to_bits(), "{lit} read as {have:e}, correctly rounded is {want:e}");
            }
        }
    }
    let mut a = Vec::new();
    numbers(&first.metadata, &mut a);
    let mut b = Vec::new();
    numbers(&Manifest::from_json(&first.to_json_pretty()).unwrap().metadata, &mut b);
    assert_eq!(a, b);
    assert!(a.len() > LITERALS.len());
}

#[test]
fn seeded_random_floats_survive_a_rewrite_exactly() {
    // xorshift64*: random bit patterns as f64 (finite only), written with Rust's shortest round-trip form and
    // in 17 significant digits, plus random big integers.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut floats = Vec::new();
    let mut texts = Vec::new();
    while floats.len() < 2000 {
        let f = f64::from_bits(next());
        if !f.is_finite() {
            continue;
        }
        floats.push(f);
        texts.push(if floats.len() % 2 == 0 { format!("{f:e}") } else { format!("{f:.16e}") });
    }
    let bigs: Vec<String> = (0..200).map(|_| format!("{}{:020}", next() % 1000 + 1, next())).collect();
    let meta = format!(r#"{{"floats": [{}], "bigs": [{}]}}"#, texts.join(","), bigs.join(","));
    let text = manifest_text(&meta, &[("unknown", &meta)]);
    let (first, _) = round_trip(text.as_bytes());
    for key in [&first.metadata, &first.extra["unknown"]] {
        let got = key["floats"].as_array().unwrap();
        for ((f, t), v) in floats.iter().zip(&texts).zip(got) {
            let have = v.as_f64().unwrap();
            assert_eq!(have.to_bits(), f.to_bits(), "{t} read as {have:e}");
        }
        for (b, v) in bigs.iter().zip(key["bigs"].as_array().unwrap()) {
            assert_eq!(v.as_f64().unwrap().to_bits(), b.parse::<f64>().unwrap().to_bits(), "{b}");
        }
    }
}

#[test]
fn the_fuzz_regression_input_round_trips_exactly() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/regressions/manifest");
    let mut n = 0;
    for entry in std::fs::read_dir(path).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let (first, _) = round_trip(&bytes);
        n += 1;
        if path.file_name().unwrap() == "float_not_roundtripped.json" {
            let v = &first.extra["zstd_leweL"];
            let want: f64 = "13333333333333333333333333333333333333333333333333333333333333333339".parse().unwrap();
            assert_eq!(v.as_f64().unwrap().to_bits(), want.to_bits());
            assert_eq!(v, &json!(want));
        }
    }
    assert!(n >= 1, "no regression input in {path}");
}
