//! h5ad layouts (CSR with unsorted/repeated/zero entries, CSC, dense, raw/X, layers) and typed var columns, checked
//! against triplets computed with scipy when the fixture was made (testdata/inputs/layouts.expected.json).

use crate::common;

use common::*;
use dct_input::{ColumnData, CountSource, H5adMatrix, H5adSource, InputError, InputOptions, open_input_with};

fn open(matrix: H5adMatrix) -> Result<Box<dyn CountSource>, InputError> {
    open_input_with(input("layouts.h5ad"), &InputOptions { matrix, ..InputOptions::default() })
}

fn layer(name: &str) -> H5adMatrix {
    H5adMatrix::Layer(name.to_string())
}

#[test]
fn x_csr_unsorted_repeated_and_zero_entries_become_canonical() {
    let exp = json(&input("layouts.expected.json"));
    let mut src = open(H5adMatrix::X).unwrap();
    assert!(src.describe().contains("csr_matrix"), "{}", src.describe());
    assert_eq!((src.n_cells(), src.n_genes()), (40, 300));
    for w in [1, 3, 40] {
        assert_eq!(all_triplets(src.as_mut(), w), triplets(&exp["X"]["triplets"]), "window {w}");
    }
    // Cells 0 and 39 are empty; their rows exist.
    let b = src.read_rows(0..1).unwrap();
    assert_eq!((b.n_rows(), b.nnz()), (1, 0));
    // Stored entries count what the file stores (the repeated and zero entries included).
    let stored = src.stored_entries(0..40).unwrap();
    let stats = &exp["X"]["stats"];
    assert!(stored > stats["nnz"].as_u64().unwrap(), "{stored}");
    assert_eq!(src.cell_names(), strs(&exp["cell_names"]).as_slice());
}

#[test]
fn csc_and_dense_layers_equal_the_counts() {
    let exp = json(&input("layouts.expected.json"));
    let want = triplets(&exp["base"]["triplets"]);
    assert!(want.iter().any(|&(_, _, v)| v == i32::MAX as u32), "fixture holds the largest count");
    for name in ["counts_csc", "dense_u32", "dense_f64"] {
        let mut src = open(layer(name)).unwrap();
        assert_eq!(src.stored_entries(0..40), None, "{name}: not known before reading");
        // Only the CSC layer is held whole (transposed at the first read); dense layers stream by windows.
        assert_eq!(src.loads_whole_matrix(), name == "counts_csc", "{name}");
        for w in [1, 7, 40] {
            assert_eq!(all_triplets(src.as_mut(), w), want, "layer {name}, window {w}");
        }
        let described = src.describe();
        assert!(described.contains(&format!("layers/{name}")), "{described}");
    }
    // Once transposed, a CSC matrix knows its entries.
    let mut csc = open(layer("counts_csc")).unwrap();
    csc.read_rows(0..1).unwrap();
    assert_eq!(csc.stored_entries(0..40), Some(want.len() as u64));
}

#[test]
fn raw_x_uses_raw_var() {
    let exp = json(&input("layouts.expected.json"));
    let mut src = open(H5adMatrix::RawX).unwrap();
    assert_eq!((src.n_cells(), src.n_genes()), (40, 320));
    assert_eq!(src.genes().names, strs(&exp["raw_var_index"]));
    assert_eq!(all_triplets(src.as_mut(), 9), triplets(&exp["raw"]["triplets"]));
}

#[test]
fn var_columns_are_typed() {
    let exp = json(&input("layouts.expected.json"));
    let v = &exp["var"];
    let src = open(H5adMatrix::X).unwrap();
    let g = src.genes();
    assert_eq!(g.index_name, "symbol");
    assert_eq!(g.names, strs(&v["index"]));
    assert_eq!(g.ids, strs(&v["gene_ids"]), "ids come from the gene_ids column");
    assert_eq!(g.feature_types.as_ref().unwrap(), &vec!["Gene Expression".to_string(); 300]);
    assert!(g.skipped.is_empty(), "{:?}", g.skipped);
    let col = |n: &str| &g.columns.iter().find(|c| c.name == n).unwrap().data;
    let names: Vec<&str> = g.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["gene_ids", "chrom", "length", "gc", "highly_variable", "n_cells_nullable", "feature_types"],
        "column-order is kept"
    );
    match col("chrom") {
        ColumnData::Categorical { codes, categories, ordered } => {
            assert_eq!(codes.iter().map(|&c| c as u64).collect::<Vec<_>>(), ints(&v["chrom_codes"]));
            assert_eq!(categories, &strs(&v["chrom_categories"]));
            assert!(!ordered);
        }
        other => panic!("chrom: {other:?}"),
    }
    assert_eq!(col("length"), &ColumnData::Int(ints(&v["length"]).into_iter().map(|x| x as i64).collect()));
    // serde_json (without its float_roundtrip feature) may parse the last bit differently: compare within 1e-15.
    let gc: Vec<f64> = v["gc"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    match col("gc") {
        ColumnData::Float(got) => {
            assert_eq!(got.len(), gc.len());
            assert!(got.iter().zip(&gc).all(|(a, b)| (a - b).abs() <= 1e-15 * b.abs()), "gc differs");
        }
        other => panic!("gc: {other:?}"),
    }
    let hv: Vec<bool> = v["highly_variable"].as_array().unwrap().iter().map(|x| x.as_bool().unwrap()).collect();
    assert_eq!(col("highly_variable"), &ColumnData::Bool(hv));
    match col("n_cells_nullable") {
        ColumnData::NullableInt { values, valid } => {
            for (i, e) in v["n_cells_nullable"].as_array().unwrap().iter().enumerate() {
                match e.as_i64() {
                    None => assert!(!valid[i], "row {i} should be missing"),
                    Some(x) => assert!(valid[i] && values[i] == x, "row {i}"),
                }
            }
        }
        other => panic!("n_cells_nullable: {other:?}"),
    }
}

#[test]
fn obs_is_reachable() {
    let src = H5adSource::open(&input("layouts.h5ad"), &H5adMatrix::X).unwrap();
    let obs = src.read_obs().unwrap();
    assert_eq!(obs.index.len(), 40);
    match &obs.column("batch").unwrap().data {
        ColumnData::Categorical { codes, categories, .. } => {
            assert_eq!(categories, &["a", "b"]);
            assert_eq!(codes[..4], [0, 1, 0, 1]);
        }
        other => panic!("{other:?}"),
    }
    let loc = CountSource::obs(&src).unwrap();
    assert!(matches!(loc, dct_input::ObsLocation::H5adGroup { ref group, .. } if group == "obs"));
}

#[test]
fn normalized_values_are_rejected_with_file_cell_and_gene() {
    let mut src = open(layer("normalized")).unwrap();
    let err = src.read_rows(0..40).unwrap_err();
    let msg = err.to_string();
    match &err {
        InputError::NotACount(b) => {
            assert_eq!(b.object, "layers/normalized/data");
            assert_eq!(b.reason, "not an integer");
            assert_eq!(b.cell_name, format!("CELL{:03}-1", b.cell));
            assert_eq!(b.gene_name, format!("Gene{}", b.gene));
        }
        other => panic!("{other:?}"),
    }
    assert!(msg.contains("layouts.h5ad") && msg.contains("raw-count"), "{msg}");
}

#[test]
fn negative_value_is_rejected() {
    let mut src = open(layer("negative")).unwrap();
    src.read_rows(0..10).unwrap();
    match src.read_rows(10..11).unwrap_err() {
        InputError::NotACount(b) => {
            assert_eq!((b.cell, b.gene, b.value.as_str(), b.reason), (10, 20, "-3", "negative"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_layer_lists_the_layers() {
    let msg = open(layer("spliced")).unwrap_err().to_string();
    assert!(msg.contains("layers/spliced") && msg.contains("counts_csc") && msg.contains("dense_u32"), "{msg}");
}

#[test]
fn legacy_h5ad_says_how_to_resave() {
    let err = dct_input::open_input(input("legacy.h5ad")).unwrap_err();
    assert!(matches!(err, InputError::LegacyH5ad { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("anndata.read_h5ad(") && msg.contains(".write_h5ad("), "{msg}");
}

#[test]
fn layer_option_is_refused_for_other_inputs() {
    let err =
        open_input_with(input("mixed_10x.h5"), &InputOptions { matrix: layer("x"), ..Default::default() }).unwrap_err();
    assert!(matches!(err, InputError::BadRequest { .. }), "{err:?}");
}

/// Names edited in place leave a global-heap collection ending in a few bytes of old data, too few for an object
/// header: the HDF5 library (h5py, which wrote the expected names) reads them as free space, and so must we.
#[test]
fn a_heap_collection_ending_in_leftover_bytes_reads_as_h5py_reads_it() {
    let exp = json(&input("heap_tail.expected.json"));
    let mut src = open_input_with(input("heap_tail.h5ad"), &InputOptions::default()).unwrap();
    assert_eq!(src.genes().names, strs(&exp["var_index"]));
    assert_eq!(src.cell_names().to_vec(), strs(&exp["cell_names"]));
    let n = src.n_cells();
    assert_eq!(all_triplets(src.as_mut(), n), triplets(&exp["triplets"]));
}
