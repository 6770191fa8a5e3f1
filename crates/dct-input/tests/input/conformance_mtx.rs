//! The conformance Matrix Market folders read exactly (testdata/conformance/mtx, see its README).

use crate::common;

use common::*;
use dct_input::{InputKind, MtxSource, open_input, scan};

fn check_case(case: &str) {
    let dir = conformance(&format!("mtx/{case}"));
    let exp = json(&conformance(&format!("mtx/{case}.expected.json")));
    let mut src = open_input(&dir).unwrap();
    assert_eq!(src.kind(), InputKind::MatrixMarket);
    assert_eq!(src.n_genes(), exp["n_genes"].as_u64().unwrap());
    assert_eq!(src.n_cells(), exp["n_cells"].as_u64().unwrap());
    let genes = src.genes();
    assert_eq!(genes.ids, strs(&exp["feature_ids"]));
    assert_eq!(genes.names, strs(&exp["feature_names"]));
    match &exp["feature_types"] {
        serde_json::Value::Null => assert_eq!(genes.feature_types, None),
        v => assert_eq!(genes.feature_types.as_ref().unwrap(), &strs(v)),
    }
    assert_eq!(src.cell_names(), strs(&exp["barcodes"]).as_slice());

    for window in [1, 7, 1000] {
        let s = scan(src.as_mut(), window).unwrap();
        assert_eq!(s.nnz, exp["nnz"].as_u64().unwrap(), "window {window}");
        assert_eq!(s.total, exp["total"].as_u64().unwrap());
        assert_eq!(u64::from(s.max_count), exp["max_count"].as_u64().unwrap());
        assert_eq!(s.gene_totals, ints(&exp["gene_totals"]));
        assert_eq!(s.cell_totals, ints(&exp["cell_totals"]));
        assert_eq!(s.gene_nnz, ints(&exp["gene_nnz"]));
        assert_eq!(s.cell_nnz, ints(&exp["cell_nnz"]));
        let order: Vec<u64> = s.gene_order_by_decreasing_total().into_iter().map(u64::from).collect();
        assert_eq!(order, ints(&exp["gene_order_by_decreasing_total"]));
    }
    // Stored entries per window agree with what is read (before zeros are dropped, the count may be larger).
    let all = src.stored_entries(0..src.n_cells()).unwrap();
    assert!(all >= exp["nnz"].as_u64().unwrap() && all <= exp["entries_listed"].as_u64().unwrap());

    let m = MtxSource::open(&dir, None).unwrap();
    assert_eq!(m.entries_listed(), exp["entries_listed"].as_u64().unwrap());
}

#[test]
fn tenx_v3_gzip_folder_reads_exactly() {
    check_case("tenx_v3");
}

#[test]
fn tenx_v2_plain_folder_reads_exactly() {
    check_case("tenx_v2_plain");
}

#[test]
fn count_70000_comes_back_exactly() {
    let dir = conformance("mtx/tenx_v2_plain");
    let mut src = open_input(&dir).unwrap();
    let t = all_triplets(src.as_mut(), 13);
    let big: Vec<_> = t.iter().filter(|&&(_, _, v)| v > 65535).collect();
    assert_eq!(big.len(), 1, "{big:?}");
    assert_eq!(big[0].2, 70000);
    assert!(t.iter().any(|&(_, _, v)| v == 65535));
    // The row holding it sums to the expected cell total.
    let exp = json(&conformance("mtx/tenx_v2_plain.expected.json"));
    let cell = big[0].0;
    let total: u64 = t.iter().filter(|x| x.0 == cell).map(|x| u64::from(x.2)).sum();
    assert_eq!(total, ints(&exp["cell_totals"])[cell as usize]);
}
