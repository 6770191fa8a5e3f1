//! 10x h5 (Cell Ranger 3 and 2) and Matrix Market with mixed feature types: the feature-type filter keeps the
//! requested features and renumbers them.

use crate::common;

use common::*;
use dct_input::{InputError, InputKind, InputOptions, open_input, open_input_with};

fn opts(feature_type: Option<&str>) -> InputOptions {
    InputOptions { feature_type: feature_type.map(str::to_string), ..InputOptions::default() }
}

/// Expected triplets restricted to features of `keep` type, renumbered in source order.
fn filtered(exp: &serde_json::Value, keep: Option<&str>) -> (Vec<(u64, u32, u32)>, Vec<usize>) {
    let types = strs(&exp["types"]);
    let kept: Vec<usize> = (0..types.len()).filter(|&i| keep.is_none_or(|k| types[i] == k)).collect();
    let t = triplets(&exp["triplets"])
        .into_iter()
        .filter_map(|(c, g, v)| kept.iter().position(|&k| k == g as usize).map(|p| (c, p as u32, v)))
        .collect();
    (t, kept)
}

fn check(path: &std::path::Path, kind: InputKind) {
    let exp = json(&input("mixed.expected.json"));
    for keep in [Some("Gene Expression"), Some("Antibody Capture"), None] {
        let mut src = open_input_with(path, &opts(keep)).unwrap();
        assert_eq!(src.kind(), kind);
        let (want, kept) = filtered(&exp, keep);
        assert_eq!(src.n_genes(), kept.len() as u64);
        let ids = strs(&exp["ids"]);
        assert_eq!(src.genes().ids, kept.iter().map(|&i| ids[i].clone()).collect::<Vec<_>>());
        let types = strs(&exp["types"]);
        assert_eq!(
            src.genes().feature_types.as_ref().unwrap(),
            &kept.iter().map(|&i| types[i].clone()).collect::<Vec<_>>()
        );
        assert_eq!(src.cell_names(), strs(&exp["barcodes"]).as_slice());
        for w in [1, 4, 30] {
            assert_eq!(all_triplets(src.as_mut(), w), want, "{path:?} {keep:?} window {w}");
        }
    }
    // The default keeps gene expression.
    assert_eq!(open_input(path).unwrap().n_genes(), 55);
    let err = open_input_with(path, &opts(Some("CRISPR Guide Capture"))).unwrap_err();
    match &err {
        InputError::NoFeatures { available, .. } => assert_eq!(available, &["Gene Expression", "Antibody Capture"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn tenx_h5_feature_filter() {
    check(&input("mixed_10x.h5"), InputKind::TenxH5);
}

#[test]
fn mtx_feature_filter() {
    check(&input("mixed_mtx"), InputKind::MatrixMarket);
    // A path to the matrix file itself opens its folder.
    assert_eq!(open_input(input("mixed_mtx/matrix.mtx")).unwrap().n_cells(), 30);
}

#[test]
fn tenx_v2_h5_genome_group() {
    let exp = json(&input("mixed.expected.json"));
    let mut src = open_input(input("tenx_v2.h5")).unwrap();
    assert_eq!(src.kind(), InputKind::TenxH5);
    let (want, kept) = filtered(&exp, Some("Gene Expression"));
    assert_eq!(src.n_genes(), kept.len() as u64);
    assert_eq!(src.genes().feature_types, None);
    let names = strs(&exp["names"]);
    assert_eq!(src.genes().names, kept.iter().map(|&i| names[i].clone()).collect::<Vec<_>>());
    assert_eq!(all_triplets(src.as_mut(), 8), want);
    assert!(src.describe().contains("GRCh38"), "{}", src.describe());
}

#[test]
fn gene_tables_of_10x_inputs_have_anndata_columns() {
    let src = open_input(input("mixed_10x.h5")).unwrap();
    let names: Vec<&str> = src.genes().columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["gene_ids", "feature_types", "genome"]);
    let src = open_input(input("mixed_mtx")).unwrap();
    let names: Vec<&str> = src.genes().columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["gene_ids", "feature_types"]);
}
