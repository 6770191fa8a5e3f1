//! pandas nullable columns in obs and var (`string` stored as `nullable-string-array`, `Int64`, `boolean`) next to
//! plain strings and a categorical with NaN, checked against the values pandas had before anndata wrote them
//! (testdata/inputs/nullable_obs.expected.json, written by make_fixtures.py).

use crate::common;

use common::*;
use dct_input::{ColumnData, H5adMatrix, H5adSource, InputError, open_input};
use serde_json::Value;

/// A column's values as JSON, `null` where missing: what the expected file holds.
fn as_json(data: &ColumnData) -> Vec<Value> {
    let opt = |v: Value, ok: bool| if ok { v } else { Value::Null };
    match data {
        ColumnData::Str(v) => v.iter().map(|s| Value::from(s.as_str())).collect(),
        ColumnData::NullableStr { values, valid } => {
            values.iter().zip(valid).map(|(s, &ok)| opt(Value::from(s.as_str()), ok)).collect()
        }
        ColumnData::NullableInt { values, valid } => {
            values.iter().zip(valid).map(|(&x, &ok)| opt(Value::from(x), ok)).collect()
        }
        ColumnData::NullableBool { values, valid } => {
            values.iter().zip(valid).map(|(&x, &ok)| opt(Value::from(x), ok)).collect()
        }
        ColumnData::Categorical { codes, categories, .. } => codes
            .iter()
            .map(|&c| usize::try_from(c).map_or(Value::Null, |c| Value::from(categories[c].as_str())))
            .collect(),
        other => panic!("unexpected column type {other:?}"),
    }
}

#[test]
fn obs_nullable_columns_are_read_with_values_and_validity() {
    let exp = json(&input("nullable_obs.expected.json"));
    let src = H5adSource::open(&input("nullable_obs.h5ad"), &H5adMatrix::X).unwrap();
    let obs = src.read_obs().unwrap();
    assert!(obs.skipped.is_empty(), "no obs column is skipped: {:?}", obs.skipped);
    assert_eq!(obs.index, strs(&exp["cell_names"]));
    let names: Vec<&str> = obs.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, strs(&exp["obs_columns"]), "every column, in column-order");
    for c in &obs.columns {
        let want = exp["obs"][&c.name].as_array().unwrap();
        assert_eq!(c.data.len(), want.len(), "{}", c.name);
        assert_eq!(&as_json(&c.data), want, "obs column {}", c.name);
    }

    // The string dtype column: a nullable string column, "" kept apart from missing, non-ASCII intact.
    let note = obs.column("note").unwrap();
    assert_eq!(note.stored_type, "string");
    match &note.data {
        ColumnData::NullableStr { values, valid } => {
            let missing: Vec<usize> = (0..valid.len()).filter(|&i| !valid[i]).collect();
            assert_eq!(missing, [1, 6, 7, 20, 29]);
            assert!(values.iter().zip(valid).any(|(v, &ok)| ok && v.is_empty()), "a present empty string");
            assert!(values.iter().zip(valid).any(|(v, &ok)| ok && v == "é"));
            assert!(values.iter().zip(valid).any(|(v, &ok)| ok && v == "mixed Ünïcode ✓"));
        }
        other => panic!("note: {other:?}"),
    }
    assert_eq!(note.data.as_strings(), None, "with missing values it has no plain string form");
    // Without missing values it has one.
    let all = &obs.column("all_present").unwrap().data;
    assert!(matches!(all, ColumnData::NullableStr { .. }), "{all:?}");
    assert_eq!(all.as_strings(), Some(strs(&exp["obs"]["all_present"])));
    // The other kinds keep their own variants.
    assert!(matches!(obs.column("label").unwrap().data, ColumnData::Str(_)));
    assert!(matches!(obs.column("n_nullable").unwrap().data, ColumnData::NullableInt { .. }));
    assert!(matches!(obs.column("flag").unwrap().data, ColumnData::NullableBool { .. }));
    match &obs.column("cell_type").unwrap().data {
        ColumnData::Categorical { codes, categories, .. } => {
            assert_eq!(categories, &strs(&exp["cell_type_categories"]));
            assert_eq!(codes.iter().filter(|&&c| c == -1).count(), 2);
        }
        other => panic!("cell_type: {other:?}"),
    }
}

#[test]
fn var_nullable_string_column_and_counts() {
    let exp = json(&input("nullable_obs.expected.json"));
    let mut src = open_input(input("nullable_obs.h5ad")).unwrap();
    let g = src.genes();
    assert!(g.skipped.is_empty(), "{:?}", g.skipped);
    assert_eq!(g.names, strs(&exp["var_index"]));
    assert_eq!(g.ids, strs(&exp["var"]["gene_ids"]));
    let note = g.columns.iter().find(|c| c.name == "gene_note").unwrap();
    assert!(matches!(note.data, ColumnData::NullableStr { .. }), "{:?}", note.data);
    assert_eq!(&as_json(&note.data), exp["var"]["gene_note"].as_array().unwrap());
    assert_eq!((src.n_cells(), src.n_genes()), (30, 20));
    assert_eq!(all_triplets(src.as_mut(), 7), triplets(&exp["triplets"]));
}

/// A copy of the fixture whose `obs/note/<dataset>` is replaced by what `build` makes.
fn with_replaced(name: &str, dataset: &str, build: impl FnOnce(&mut hdf5_pure::DatasetBuilder)) -> std::path::PathBuf {
    let path = scratch(name).join("nullable_obs.h5ad");
    std::fs::copy(input("nullable_obs.h5ad"), &path).unwrap();
    let file = hdf5_pure::File::open_rw(&path).unwrap();
    let group = file.group("obs/note").unwrap();
    group.delete(dataset).unwrap();
    group.create_dataset(dataset, build).unwrap();
    file.commit().unwrap();
    path
}

#[test]
fn malformed_nullable_string_columns_are_refused() {
    // A mask one entry short.
    let path = with_replaced("nullable_short_mask", "mask", |b| {
        b.with_u8_data(&[0; 29]);
    });
    let err = H5adSource::open(&path, &H5adMatrix::X).unwrap().read_obs().unwrap_err();
    match &err {
        InputError::Malformed { object, detail, .. } => {
            assert_eq!(object, "obs/note/mask", "{err}");
            assert!(detail.contains("29") && detail.contains("30"), "{err}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    // Values that are not strings.
    let path = with_replaced("nullable_int_values", "values", |b| {
        b.with_i64_data(&[7; 30]);
    });
    let err = H5adSource::open(&path, &H5adMatrix::X).unwrap().read_obs().unwrap_err();
    match &err {
        InputError::Malformed { object, .. } => assert_eq!(object, "obs/note/values", "{err}"),
        other => panic!("expected Malformed, got {other:?}"),
    }
}
