//! Obs and var.parquet written by the converter, against independent truth: the inputs read through dct-input's
//! own readers (`read_obs`, the gene tables), the fingerprint recomputed from the files, and byte-identity of obs
//! shards across input splits.

use crate::support;

use support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use dct_convert::{ConvertOptions, RunOptions, convert};
use dct_dataset::dct_obs::{self, ColumnKind, ObsOptions, VarTable, category_labels};
use dct_dataset::{Dataset, ReadOptions, Store, StoreOptions};
use dct_input::{ColumnData, CountSource, H5adMatrix, H5adSource, open_input};

fn options(out: &Path, tile_size: u64) -> ConvertOptions {
    ConvertOptions { tile_size, level: 3, n_chunks: 2, ..ConvertOptions::new(out.to_str().unwrap()) }
}

fn run(inputs: &[PathBuf], opts: &ConvertOptions) -> dct_dataset::Manifest {
    convert(inputs, opts, &RunOptions::default(), false, |_| {}).unwrap()
}

/// A value as both sides can express it.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Null,
    Str(String),
    Int(i128),
    Float(f64),
    Bool(bool),
}

/// The source column's values as pandas sees them: categorical labels (code -1 missing), NaN floats missing.
fn source_values(data: &ColumnData) -> Vec<V> {
    match data {
        ColumnData::Str(v) => v.iter().map(|s| V::Str(s.clone())).collect(),
        ColumnData::Int(v) => v.iter().map(|&x| V::Int(x.into())).collect(),
        ColumnData::UInt(v) => v.iter().map(|&x| V::Int(x.into())).collect(),
        ColumnData::Float(v) => v.iter().map(|&x| if x.is_nan() { V::Null } else { V::Float(x) }).collect(),
        ColumnData::Bool(v) => v.iter().map(|&x| V::Bool(x)).collect(),
        ColumnData::Categorical { codes, categories, .. } => {
            codes.iter().map(|&c| if c < 0 { V::Null } else { V::Str(categories[c as usize].clone()) }).collect()
        }
        ColumnData::NullableInt { values, valid } => {
            values.iter().zip(valid).map(|(&x, &ok)| if ok { V::Int(x.into()) } else { V::Null }).collect()
        }
        ColumnData::NullableUInt { values, valid } => {
            values.iter().zip(valid).map(|(&x, &ok)| if ok { V::Int(x.into()) } else { V::Null }).collect()
        }
        ColumnData::NullableBool { values, valid } => {
            values.iter().zip(valid).map(|(&x, &ok)| if ok { V::Bool(x) } else { V::Null }).collect()
        }
        ColumnData::NullableStr { values, valid } => {
            values.iter().zip(valid).map(|(x, &ok)| if ok { V::Str(x.clone()) } else { V::Null }).collect()
        }
    }
}

/// An Arrow array's values (category codes through `categories` to labels).
fn arrow_values(a: &dyn Array, categories: Option<&[String]>) -> Vec<V> {
    if let Some(cats) = categories {
        return category_labels(a, cats).unwrap().iter().map(|v| v.map_or(V::Null, |s| V::Str(s.into()))).collect();
    }
    let nullable = |i: usize, v: V| if a.is_null(i) { V::Null } else { v };
    match a.data_type() {
        DataType::Dictionary(..) => {
            let (codes, cats) = dct_obs::categorical_parts(a).unwrap();
            codes.iter().map(|&k| if k < 0 { V::Null } else { V::Str(cats[k as usize].clone()) }).collect()
        }
        DataType::Utf8 => a.as_string::<i32>().iter().map(|v| v.map_or(V::Null, |s| V::Str(s.into()))).collect(),
        DataType::Boolean => a.as_boolean().iter().map(|v| v.map_or(V::Null, V::Bool)).collect(),
        DataType::Float32 | DataType::Float64 => {
            let f = arrow_cast::cast(a, &DataType::Float64).unwrap();
            let f = f.as_primitive::<Float64Type>();
            (0..f.len()).map(|i| nullable(i, V::Float(f.value(i)))).collect()
        }
        DataType::UInt64 => {
            let u = a.as_primitive::<arrow_array::types::UInt64Type>();
            (0..u.len()).map(|i| nullable(i, V::Int(u.value(i).into()))).collect()
        }
        _ => {
            let x = arrow_cast::cast(a, &DataType::Int64).unwrap();
            let x = x.as_primitive::<Int64Type>();
            (0..x.len()).map(|i| nullable(i, V::Int(x.value(i).into()))).collect()
        }
    }
}

/// Every obs column of a dataset, read back through `Dataset::obs` (localize, then whole columns).
fn dataset_obs(url: &str, cache: &Path) -> (dct_obs::Obs, BTreeMap<String, Vec<V>>) {
    let ds = Dataset::open(url, ReadOptions::default()).unwrap();
    let obs = ds.obs(ObsOptions { cache_dir: Some(cache.into()), ..Default::default() }).unwrap();
    let names: Vec<String> = obs.columns().iter().map(|(n, _)| n.to_string()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    obs.localize_blocking(&refs).unwrap();
    let mut out = BTreeMap::new();
    for name in &names {
        let col = obs.column(name).unwrap();
        out.insert(name.clone(), arrow_values(col.as_ref(), obs.categories(name).unwrap()));
    }
    (obs, out)
}

/// `var.parquet` of a dataset, read with dct-obs.
fn read_var(dir: &Path) -> VarTable {
    let store = Store::from_url(dir.to_str().unwrap(), &StoreOptions::default()).unwrap();
    let batch = dct_store::runtime::block_on(async move { dct_obs::read_var_table(&store).await }).unwrap().unwrap();
    VarTable::from_record_batch(&batch).unwrap()
}

fn recomputed_fingerprint(dir: &Path, m: &dct_dataset::Manifest) -> String {
    let schema = std::fs::read_to_string(dir.join("obs/schema.json")).unwrap();
    let shards: Vec<String> = (0..m.obs.shard_bytes.len())
        .map(|s| dct_obs::sha256_hex(&std::fs::read(dir.join(dct_obs::shard_name(s))).unwrap()))
        .collect();
    assert_eq!(shards, m.obs.shard_sha256, "the manifest lists the shards' hashes");
    dct_obs::obs_fingerprint(&schema, &m.tile_cells, &shards)
}

/// Checks a dataset's var.parquet against the source gene table, in output order.
fn check_var(dir: &Path, source: &dyn CountSource) {
    let ds = Dataset::open(dir.to_str().unwrap(), ReadOptions::default()).unwrap();
    assert!(ds.manifest().has_var_table);
    let order = ds.gene_order().unwrap().unwrap();
    let var = read_var(dir);
    let genes = source.genes();
    let want_index: Vec<String> = order.iter().map(|&g| genes.names[g as usize].clone()).collect();
    assert_eq!(var.index, want_index, "the index is the gene names in output order");
    assert_eq!(*ds.var_names().unwrap().unwrap(), want_index, "and agrees with var_names.txt");
    let want_name = (genes.index_name != "_index").then(|| genes.index_name.clone());
    assert_eq!(var.index_name, want_name);
    assert_eq!(
        var.columns.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        genes.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        "every var column, in order"
    );
    for (c, (_, got)) in genes.columns.iter().zip(&var.columns) {
        let src = source_values(&c.data);
        let want: Vec<V> = order.iter().map(|&g| src[g as usize].clone()).collect();
        assert_eq!(arrow_values(got.as_ref(), None), want, "var column {}", c.name);
    }
}

#[test]
fn wu2020_obs_and_var_match_the_source() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/wu2020_200.h5ad");
    let source = H5adSource::open(&input, &H5adMatrix::X).unwrap();
    let frame = source.read_obs().unwrap();
    assert!(frame.columns.len() >= 40 && frame.skipped.is_empty());
    // 200 cells in tiles of 64 (4 tiles, the last of 8), 3 tiles per shard: shards of 3 and 1 tiles.
    let out = tmp.path().join("wu");
    let opts = ConvertOptions { obs_tiles_per_file: 3, ..options(&out, 64) };
    let m = run(std::slice::from_ref(&input), &opts);
    assert!(m.has_obs && m.has_var_table);
    assert_eq!(m.tile_cells, [64, 64, 64, 8]);
    assert_eq!((m.obs.tiles_per_file, m.obs.shard_bytes.len()), (3, 2));
    assert_eq!(recomputed_fingerprint(&out, &m), m.obs.fingerprint);
    let url = out.to_str().unwrap();
    let report = dct_dataset::verify_url(url, ReadOptions::default(), &Default::default(), |_, _| {});
    assert!(report.is_ok(), "{:?}", report.problems);

    let (obs, got) = dataset_obs(url, tmp.path().join("cache").as_path());
    let schema = obs.schema();
    assert_eq!(schema.columns.len(), frame.columns.len() + 1);
    assert_eq!(schema.columns.last().unwrap().name, "obs_names", "the cell names come last, as in the original");
    assert_eq!(got["obs_names"], frame.index.iter().map(|s| V::Str(s.clone())).collect::<Vec<_>>());
    for c in &frame.columns {
        let col = schema.column(&c.name).unwrap_or_else(|| panic!("column {} is missing", c.name));
        assert_eq!(got[&c.name], source_values(&c.data), "column {}", c.name);
        if let ColumnData::Categorical { categories, .. } = &c.data {
            // One input: the global vocabulary is the input's, in its order; codes as narrow as they can be.
            assert_eq!(col.kind, ColumnKind::Category, "{}", c.name);
            assert_eq!(col.categories.as_deref(), Some(categories.as_slice()), "{}", c.name);
            assert_eq!(col.arrow_type, dct_obs::code_type_for(categories.len()), "{}", c.name);
        }
    }
    let kind = |n: &str| (schema.column(n).unwrap().kind, schema.column(n).unwrap().arrow_type.as_str());
    assert_eq!(kind("clonotype_orig"), (ColumnKind::Category, "int16"), "197 categories need int16 codes");
    assert_eq!(kind("source"), (ColumnKind::Category, "int8"));
    assert_eq!(kind("IR_VJ_1_duplicate_count"), (ColumnKind::Numeric, "double"));
    assert_eq!(kind("extra_chains"), (ColumnKind::Category, "int8"), "no categories, every value missing");
    assert!(got["IR_VJ_1_duplicate_count"].iter().filter(|v| **v == V::Null).count() == 74, "NaN are nulls");
    assert!(got["IR_VJ_1_d_call"].contains(&V::Null), "missing categorical values survive");

    // take: random cells, in any order, across tiles and shards.
    let cells = [199u64, 0, 64, 63, 191, 192, 5, 199];
    let batch = obs.take(&cells, &["cluster_orig", "IR_VDJ_1_duplicate_count"]).unwrap();
    for (j, name) in ["cluster_orig", "IR_VDJ_1_duplicate_count"].iter().enumerate() {
        let vals = arrow_values(batch.column(j).as_ref(), obs.categories(name).unwrap());
        let want: Vec<V> = cells.iter().map(|&c| got[*name][c as usize].clone()).collect();
        assert_eq!(vals, want, "take of {name}");
    }

    check_var(&out, &source);
    let var = read_var(&out);
    assert_eq!(var.index_name, None, "an index stored as _index has no name in pandas");

    // Above max_categories a categorical becomes a string column with the same values.
    let out2 = tmp.path().join("wu_max150");
    let m2 = run(std::slice::from_ref(&input), &ConvertOptions { max_categories: 150, ..options(&out2, 64) });
    assert_eq!(recomputed_fingerprint(&out2, &m2), m2.obs.fingerprint);
    let (obs2, got2) = dataset_obs(out2.to_str().unwrap(), tmp.path().join("cache").as_path());
    for name in ["clonotype_orig", "IR_VDJ_1_junction_aa", "IR_VDJ_1_junction"] {
        let c = obs2.schema().column(name).unwrap();
        assert_eq!((c.kind, c.categories.is_none()), (ColumnKind::String, true), "{name}");
        assert_eq!(got2[name], got[name], "{name}");
    }
    assert_eq!(obs2.schema().column("IR_VJ_1_junction_aa").unwrap().kind, ColumnKind::Category, "123 <= 150");
    assert_ne!(m2.obs.fingerprint, m.obs.fingerprint);
}

#[test]
fn obs_column_selection_and_no_obs() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/wu2020_200.h5ad");
    let out = tmp.path().join("sel");
    let cols = vec!["patient".to_string(), "obs_names".to_string(), "IR_VJ_1_duplicate_count".to_string()];
    let m =
        run(std::slice::from_ref(&input), &ConvertOptions { obs_columns: Some(cols.clone()), ..options(&out, 100) });
    assert_eq!(recomputed_fingerprint(&out, &m), m.obs.fingerprint);
    let (obs, _) = dataset_obs(out.to_str().unwrap(), tmp.path().join("cache").as_path());
    assert_eq!(obs.columns().iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>(), cols, "exactly these, in order");

    let out = tmp.path().join("excl");
    let excl = vec!["obs_names".to_string(), "patient".to_string()];
    run(std::slice::from_ref(&input), &ConvertOptions { obs_exclude: excl, ..options(&out, 100) });
    let (obs, _) = dataset_obs(out.to_str().unwrap(), tmp.path().join("cache").as_path());
    let names: Vec<&str> = obs.columns().iter().map(|(n, _)| *n).collect();
    assert_eq!(names[0], "cluster_orig");
    assert!(!names.contains(&"patient") && !names.contains(&"obs_names"));

    let out = tmp.path().join("none");
    let m = run(std::slice::from_ref(&input), &ConvertOptions { write_obs: false, ..options(&out, 100) });
    assert!(!m.has_obs && m.has_var_table);
    assert!(!out.join("obs").exists());

    let bad = ConvertOptions { obs_columns: Some(vec!["no_such".into()]), ..options(&tmp.path().join("bad"), 100) };
    let err = convert(std::slice::from_ref(&input), &bad, &RunOptions::default(), false, |_| {}).unwrap_err();
    let err = err.to_string();
    assert!(err.contains("\"no_such\"") && err.contains("\"patient\""), "names the column and the choices: {err}");
}

fn obs_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir.join("obs"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect()
}

#[test]
fn obs_shards_are_identical_however_the_cells_are_split() {
    let tmp = tempfile::tempdir().unwrap();
    let mut source = open_input(testdata("inputs/pbmc200/pbmc200.h5ad")).unwrap();
    let mut results = Vec::new();
    for (name, cuts) in [("one", vec![0, 200]), ("even", vec![0, 100, 200]), ("jagged", vec![0, 1, 77, 78, 200])] {
        let inputs: Vec<PathBuf> = cuts
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let dir = tmp.path().join(format!("in_{name}/part{}", i + 1));
                write_mtx_cells(&dir, source.as_mut(), w[0]..w[1]);
                dir
            })
            .collect();
        let out = tmp.path().join(format!("out_{name}"));
        // Tiles of 48 cells, 2 per shard: 5 tiles in 3 shards, tiles crossing every cut.
        let m = run(&inputs, &ConvertOptions { obs_tiles_per_file: 2, ..options(&out, 48) });
        assert_eq!(m.obs.shard_bytes.len(), 3);
        assert_eq!(recomputed_fingerprint(&out, &m), m.obs.fingerprint, "{name}");
        let (obs, got) = dataset_obs(out.to_str().unwrap(), tmp.path().join("cache").as_path());
        assert_eq!(obs.columns(), [("obs_names", ColumnKind::String)], "Matrix Market inputs: cell names only");
        let want: Vec<V> = (0..200).map(|c| V::Str(format!("cell{c}"))).collect();
        assert_eq!(got["obs_names"], want, "{name}");
        check_var(&out, open_input(&inputs[0]).unwrap().as_ref());
        results.push((m.obs.fingerprint.clone(), obs_files(&out)));
    }
    assert_eq!(results[0], results[1], "an even split changes the obs");
    assert_eq!(results[0], results[2], "a jagged split changes the obs");
}

#[test]
fn inputs_with_and_without_obs_columns_mix() {
    let tmp = tempfile::tempdir().unwrap();
    let h5ad = testdata("inputs/pbmc200/pbmc200.h5ad");
    let tenx = testdata("inputs/pbmc200/pbmc200_10x.h5");
    let out = tmp.path().join("mixed");
    // Tiles of 64 cells: tile 3 holds cells 192..256, across the two inputs.
    let m = run(&[h5ad.clone(), tenx.clone()], &options(&out, 64));
    assert_eq!(m.n_cells, 400);
    assert_eq!(recomputed_fingerprint(&out, &m), m.obs.fingerprint);
    let report = dct_dataset::verify_url(out.to_str().unwrap(), ReadOptions::default(), &Default::default(), |_, _| {});
    assert!(report.is_ok(), "{:?}", report.problems);
    let (obs, got) = dataset_obs(out.to_str().unwrap(), tmp.path().join("cache").as_path());
    let frame = H5adSource::open(&h5ad, &H5adMatrix::X).unwrap().read_obs().unwrap();
    let tenx_source = open_input(&tenx).unwrap();
    let names: Vec<V> = frame.index.iter().chain(tenx_source.cell_names()).map(|s| V::Str(s.clone())).collect();
    assert_eq!(got["obs_names"], names);
    for c in &frame.columns {
        let mut want = source_values(&c.data);
        want.extend(std::iter::repeat_n(V::Null, 200));
        assert_eq!(got[&c.name], want, "{}: the 10x cells have no value", c.name);
    }
    assert_eq!(obs.schema().columns.len(), 1 + frame.columns.len());
    // var.parquet is the first input's gene table.
    check_var(&out, open_input(&h5ad).unwrap().as_ref());
}

#[test]
fn var_parquet_keeps_typed_columns_and_the_index_name() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/layouts.h5ad");
    let out = tmp.path().join("layouts");
    run(std::slice::from_ref(&input), &options(&out, 16));
    let source = open_input(&input).unwrap();
    check_var(&out, source.as_ref());
    let var = read_var(&out);
    assert_eq!(var.index_name.as_deref(), Some("symbol"));
    let types: Vec<(String, DataType)> =
        var.columns.iter().map(|(n, a): &(String, ArrayRef)| (n.clone(), a.data_type().clone())).collect();
    for (c, (_, t)) in source.genes().columns.iter().zip(&types) {
        let want = match &c.data {
            ColumnData::Categorical { .. } => DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            ColumnData::Str(_) | ColumnData::NullableStr { .. } => DataType::Utf8,
            ColumnData::Bool(_) | ColumnData::NullableBool { .. } => DataType::Boolean,
            ColumnData::Float(_) if c.stored_type == "f32" => DataType::Float32,
            ColumnData::Float(_) => DataType::Float64,
            ColumnData::Int(_) | ColumnData::NullableInt { .. } => match c.stored_type.as_str() {
                "i32" => DataType::Int32,
                "i16" => DataType::Int16,
                "i8" => DataType::Int8,
                _ => DataType::Int64,
            },
            ColumnData::UInt(_) | ColumnData::NullableUInt { .. } => match c.stored_type.as_str() {
                "u32" => DataType::UInt32,
                "u16" => DataType::UInt16,
                "u8" => DataType::UInt8,
                _ => DataType::UInt64,
            },
        };
        assert_eq!(t, &want, "var column {} keeps its stored type", c.name);
    }
    assert!(var.columns.iter().any(|(_, a)| a.null_count() > 0), "a nullable column keeps its missing values");
}

/// `testdata/inputs/nullable_obs.expected.json`: the values pandas had before anndata wrote the fixture.
fn nullable_expected() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(testdata("inputs/nullable_obs.expected.json")).unwrap()).unwrap()
}

/// A JSON array of the expected file as values (`null` where missing).
fn json_values(v: &serde_json::Value) -> Vec<V> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| match x {
            serde_json::Value::Null => V::Null,
            serde_json::Value::String(s) => V::Str(s.clone()),
            serde_json::Value::Bool(b) => V::Bool(*b),
            serde_json::Value::Number(n) => V::Int(n.as_i64().unwrap().into()),
            other => panic!("unexpected value {other}"),
        })
        .collect()
}

#[test]
fn nullable_string_and_other_nullable_obs_columns_convert_with_nulls() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/nullable_obs.h5ad");
    let exp = nullable_expected();
    let columns: Vec<String> =
        exp["obs_columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    let frame = H5adSource::open(&input, &H5adMatrix::X).unwrap().read_obs().unwrap();
    assert!(frame.skipped.is_empty(), "no column is skipped: {:?}", frame.skipped);

    // 30 cells in tiles of 8 (the last of 6), 2 tiles per shard.
    let out = tmp.path().join("nullable");
    let m = run(std::slice::from_ref(&input), &ConvertOptions { obs_tiles_per_file: 2, ..options(&out, 8) });
    assert!(m.has_obs && m.has_var_table);
    assert_eq!(m.tile_cells, [8, 8, 8, 6]);
    assert_eq!(recomputed_fingerprint(&out, &m), m.obs.fingerprint);
    let url = out.to_str().unwrap();
    let report = dct_dataset::verify_url(url, ReadOptions::default(), &Default::default(), |_, _| {});
    assert!(report.is_ok(), "{:?}", report.problems);

    // Whole columns: every column kept, values and missing values as pandas had them.
    let (obs, got) = dataset_obs(url, tmp.path().join("cache").as_path());
    let names: Vec<&str> = obs.columns().iter().map(|(n, _)| *n).collect();
    let mut want_names: Vec<&str> = columns.iter().map(String::as_str).collect();
    want_names.push("obs_names");
    assert_eq!(names, want_names, "every column, none skipped");
    assert_eq!(got["obs_names"], json_values(&exp["cell_names"]));
    for name in &columns {
        assert_eq!(got[name], json_values(&exp["obs"][name]), "column {name}");
    }
    let note = &got["note"];
    assert_eq!(note.iter().filter(|v| **v == V::Null).count(), 5, "pd.NA are nulls");
    assert!(note.contains(&V::Str(String::new())) && note.contains(&V::Str("é".into())), "{note:?}");
    let schema = obs.schema();
    let kind = |n: &str| (schema.column(n).unwrap().kind, schema.column(n).unwrap().arrow_type.as_str());
    assert_eq!(kind("note"), (ColumnKind::String, "string"), "a string dtype column is a string column");
    assert_eq!(kind("all_present"), (ColumnKind::String, "string"));
    assert_eq!(kind("label"), (ColumnKind::String, "string"));
    assert_eq!(kind("n_nullable"), (ColumnKind::Numeric, "int64"));
    assert_eq!(kind("flag"), (ColumnKind::Bool, "bool"));
    assert_eq!(kind("cell_type"), (ColumnKind::Category, "int8"));
    let cats = schema.column("cell_type").unwrap().categories.clone().unwrap();
    assert_eq!(json_values(&exp["cell_type_categories"]), cats.into_iter().map(V::Str).collect::<Vec<_>>());

    // take: cells in any order, repeated, across tiles and shards, missing values included.
    let cells = [29u64, 0, 1, 20, 7, 6, 15, 2, 29, 11];
    let cols = ["note", "n_nullable", "flag", "cell_type"];
    let batch = obs.take(&cells, &cols).unwrap();
    for (j, name) in cols.iter().enumerate() {
        let vals = arrow_values(batch.column(j).as_ref(), obs.categories(name).unwrap());
        let all = json_values(&exp["obs"][*name]);
        let want: Vec<V> = cells.iter().map(|&c| all[c as usize].clone()).collect();
        assert_eq!(vals, want, "take of {name}");
    }

    // var.parquet: the nullable string var column keeps its values and nulls, in output gene order.
    let source = open_input(&input).unwrap();
    check_var(&out, source.as_ref());
    let ds = Dataset::open(url, ReadOptions::default()).unwrap();
    let order = ds.gene_order().unwrap().unwrap();
    let var = read_var(&out);
    let (_, gene_note) = var.columns.iter().find(|(n, _)| n == "gene_note").unwrap();
    assert_eq!(gene_note.data_type(), &DataType::Utf8);
    let all = json_values(&exp["var"]["gene_note"]);
    let want: Vec<V> = order.iter().map(|&g| all[g as usize].clone()).collect();
    assert_eq!(arrow_values(gene_note.as_ref(), None), want);
    assert_eq!(gene_note.null_count(), 2);
}

#[test]
fn nullable_string_columns_across_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let input = testdata("inputs/nullable_obs.h5ad");
    let exp = nullable_expected();
    // The fixture twice (a copy under another name) and a Matrix Market folder (no obs) of its first 10 cells.
    let copy = tmp.path().join("copy.h5ad");
    std::fs::copy(&input, &copy).unwrap();
    let mtx = tmp.path().join("mtx");
    write_mtx_cells(&mtx, open_input(&input).unwrap().as_mut(), 0..10);
    let out = tmp.path().join("three");
    // Tiles of 16 cells cross both input boundaries (30 and 60).
    let m = run(&[input.clone(), mtx, copy], &options(&out, 16));
    assert_eq!(m.n_cells, 70);
    assert_eq!(recomputed_fingerprint(&out, &m), m.obs.fingerprint);
    let (obs, got) = dataset_obs(out.to_str().unwrap(), tmp.path().join("cache").as_path());
    for name in exp["obs_columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()) {
        let one = json_values(&exp["obs"][name]);
        let mut want = one.clone();
        want.extend(std::iter::repeat_n(V::Null, 10));
        want.extend(one);
        assert_eq!(got[name], want, "column {name}: the Matrix Market cells have no value");
    }
    assert_eq!(obs.schema().column("note").unwrap().kind, ColumnKind::String);
    assert_eq!(obs.schema().column("cell_type").unwrap().kind, ColumnKind::Category);
}
