//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use dct_input::{CountSource, RowBlock, row_windows};
use serde_json::Value;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// `testdata/inputs/<rel>`.
pub fn input(rel: &str) -> PathBuf {
    root().join("testdata/inputs").join(rel)
}

/// `testdata/conformance/<rel>`.
pub fn conformance(rel: &str) -> PathBuf {
    root().join("testdata/conformance").join(rel)
}

/// Parses a JSON file.
pub fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A JSON array of integers.
pub fn ints(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

/// A JSON array of strings.
pub fn strs(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// JSON `[[cell, gene, count], ...]`.
pub fn triplets(v: &Value) -> Vec<(u64, u32, u32)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let t = ints(t);
            (t[0], t[1] as u32, t[2] as u32)
        })
        .collect()
}

/// Checks the canonical-form guarantees of a block.
pub fn assert_canonical(b: &RowBlock) {
    assert_eq!(b.indptr[0], 0);
    assert_eq!(*b.indptr.last().unwrap() as usize, b.indices.len());
    assert_eq!(b.indices.len(), b.values.len());
    for r in 0..b.n_rows() {
        let (g, v) = b.row(r);
        assert!(g.windows(2).all(|w| w[0] < w[1]), "row {r}: genes not strictly increasing");
        assert!(g.iter().all(|&x| u64::from(x) < b.n_genes), "row {r}: gene out of range");
        assert!(v.iter().all(|&x| (1..=i32::MAX as u32).contains(&x)), "row {r}: count out of range");
    }
}

/// Every stored entry as (cell, gene, count), reading `window` rows at a time.
pub fn all_triplets(src: &mut dyn CountSource, window: u64) -> Vec<(u64, u32, u32)> {
    let mut out = Vec::new();
    let mut b = RowBlock::default();
    for rows in row_windows(src.n_cells(), window) {
        src.read_rows_into(rows.clone(), &mut b).unwrap();
        assert_eq!(b.rows(), rows);
        assert_eq!(b.n_genes, src.n_genes());
        assert_canonical(&b);
        for r in 0..b.n_rows() {
            let (g, v) = b.row(r);
            out.extend(g.iter().zip(v).map(|(&g, &v)| (b.first_row + r as u64, g, v)));
        }
    }
    out
}

/// A fresh, empty scratch folder for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dct-input").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
