//! Schema inference (kinds, code widths, max_categories, vocabulary union, promotion) and write/read round trips of
//! every kind with missing values.

use crate::common;

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int8Array, Int16Array, Int32Array, Int64Array, StringArray,
    UInt8Array, UInt16Array, UInt32Array, UInt64Array,
};
use common::*;
use dct_obs::{
    ArrowType, ColumnData, ColumnKind, Obs, ObsError, ObsOptions, ObsSchema, ObsSchemaBuilder, ObsWriteOptions,
    ObsWriter, TileObs, VocabularyBuilder,
};

fn labels(n: usize) -> Arc<[String]> {
    (0..n).map(|i| format!("c{i}")).collect::<Vec<_>>().into()
}

fn infer(inputs: &[TileObs], max_categories: usize) -> ObsSchema {
    let mut b = ObsSchemaBuilder::with_max_categories(max_categories);
    for i in inputs {
        b.add_input(i).unwrap();
    }
    b.finish()
}

/// Writes `tiles` (one TileObs per tile) with `schema`, opens the result and returns every column's values.
async fn round_trip(
    schema: &ObsSchema,
    tiles: &[TileObs],
    k: u64,
) -> (Obs, Vec<(String, Vec<V>)>, [tempfile::TempDir; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let tile_cells: Vec<u64> = tiles.iter().map(|t| t.columns.first().map_or(1, |(_, d)| d.len()) as u64).collect();
    let store = local_store(dir.path());
    let opts = ObsWriteOptions { tiles_per_file: k, ..Default::default() };
    let mut w = ObsWriter::new(store.clone(), schema.clone(), &tile_cells, &opts).unwrap();
    for t in tiles {
        w.write_tile(t).await.unwrap();
    }
    let summary = w.finish().await.unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("obs/schema.json")).unwrap(), schema.to_json());
    let opts = ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() };
    let obs = Obs::open(store, summary.manifest(&tile_cells), opts).await.unwrap();
    let names: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
    obs.localize(&names).await.unwrap();
    let vals = schema
        .columns
        .iter()
        .map(|c| (c.name.clone(), values(obs.column(&c.name).unwrap().as_ref(), c.kind, c.categories.as_deref())))
        .collect();
    (obs, vals, [dir, cache])
}

#[test]
fn kinds_and_types_from_inputs() {
    let t = TileObs::new()
        .with("cat", ColumnData::category(vec![0, -1], labels(2)))
        .with("i8", Arc::new(Int8Array::from(vec![1, 2])) as ArrayRef)
        .with("u64", Arc::new(UInt64Array::from(vec![1, 2])) as ArrayRef)
        .with("f", Arc::new(Float32Array::from(vec![1.0, 2.0])) as ArrayRef)
        .with("b", Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef)
        .with("s", Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef);
    let s = infer(&[t], 20_000);
    let got: Vec<(&str, ColumnKind, ArrowType)> =
        s.columns.iter().map(|c| (c.name.as_str(), c.kind, c.arrow_type)).collect();
    assert_eq!(
        got,
        vec![
            ("cat", ColumnKind::Category, ArrowType::Int8),
            ("i8", ColumnKind::Numeric, ArrowType::Int8),
            ("u64", ColumnKind::Numeric, ArrowType::UInt64),
            ("f", ColumnKind::Numeric, ArrowType::Float),
            ("b", ColumnKind::Bool, ArrowType::Bool),
            ("s", ColumnKind::String, ArrowType::String),
        ]
    );
    let bad = TileObs::new().with("d", Arc::new(arrow_array::Date32Array::from(vec![1])) as ArrayRef);
    assert!(matches!(ObsSchemaBuilder::new().add_input(&bad), Err(ObsError::Input { .. })));
}

#[tokio::test]
async fn code_width_boundaries_round_trip() {
    // (vocabulary size, expected code type): codes 0..n-1 plus -1 must fit.
    for (n, want) in [
        (127, ArrowType::Int8),
        (128, ArrowType::Int8),
        (129, ArrowType::Int16),
        (32_767, ArrowType::Int16),
        (32_768, ArrowType::Int16),
        (32_769, ArrowType::Int32),
    ] {
        let cats = labels(n);
        let top = n as i32 - 1;
        let codes = vec![0, top, -1, top - 1, top];
        let t = TileObs::new().with("c", ColumnData::category(codes.clone(), cats.clone()));
        let s = infer(std::slice::from_ref(&t), 40_000);
        assert_eq!(s.columns[0].arrow_type, want, "{n} categories");
        assert_eq!(s.columns[0].kind, ColumnKind::Category);
        let (obs, vals, _d) = round_trip(&s, &[t], 10).await;
        let want_vals: Vec<V> = codes.iter().map(|&c| if c < 0 { V::Null } else { V::S(format!("c{c}")) }).collect();
        assert_eq!(vals[0].1, want_vals, "{n} categories");
        assert_eq!(obs.column("c").unwrap().data_type(), &want.data_type());
        // Stored codes are the raw codes, -1 for missing.
        let raw = values(obs.column("c").unwrap().as_ref(), ColumnKind::Numeric, None);
        assert_eq!(raw, codes.iter().map(|&c| V::I(c.into())).collect::<Vec<_>>());
    }
}

#[tokio::test]
async fn max_categories_threshold() {
    let max = 50;
    for (n, kind) in [(max, ColumnKind::Category), (max + 1, ColumnKind::String)] {
        // Two inputs whose union has n labels.
        let half = n / 2;
        let a: Arc<[String]> = (0..half).map(|i| format!("bc{i}")).collect::<Vec<_>>().into();
        let b: Arc<[String]> = (half / 2..n).map(|i| format!("bc{i}")).collect::<Vec<_>>().into();
        let ta = TileObs::new().with("barcode", ColumnData::category(vec![0, 1, -1], a.clone()));
        let tb = TileObs::new().with("barcode", ColumnData::category(vec![(b.len() - 1) as i32, -1], b.clone()));
        let s = infer(&[ta.clone(), tb.clone()], max);
        assert_eq!(s.columns[0].kind, kind, "{n} labels with max {max}");
        let (_, vals, _d) = round_trip(&s, &[ta, tb], 1).await;
        let last = format!("bc{}", n - 1);
        assert_eq!(vals[0].1, vec![V::S("bc0".into()), V::S("bc1".into()), V::Null, V::S(last), V::Null], "{n} labels");
    }
    // The default threshold is 20,000.
    let t = TileObs::new().with("x", ColumnData::category(vec![0], labels(20_001)));
    assert_eq!(infer(std::slice::from_ref(&t), dct_obs::DEFAULT_MAX_CATEGORIES).columns[0].kind, ColumnKind::String);
    let t = TileObs::new().with("x", ColumnData::category(vec![0], labels(20_000)));
    assert_eq!(infer(std::slice::from_ref(&t), dct_obs::DEFAULT_MAX_CATEGORIES).columns[0].kind, ColumnKind::Category);
}

#[tokio::test]
async fn vocabulary_union_in_order_of_first_appearance() {
    let a: Arc<[String]> = vec!["b".to_string(), "a".to_string()].into();
    let b: Arc<[String]> = vec!["c".to_string(), "a".to_string(), "d".to_string()].into();
    let mut v = VocabularyBuilder::new();
    v.add(&a);
    v.add(&b);
    assert_eq!(v.categories(), ["b", "a", "c", "d"]);
    assert_eq!(v.remap(&b), Some(vec![2, 1, 3]));
    let ta = TileObs::new().with("k", ColumnData::category(vec![0, 1, -1], a));
    let tb = TileObs::new().with("k", ColumnData::category(vec![2, 1, 0, -1], b));
    let s = infer(&[ta.clone(), tb.clone()], 100);
    assert_eq!(s.columns[0].categories.as_deref().unwrap(), ["b", "a", "c", "d"]);
    let (obs, vals, _d) = round_trip(&s, &[ta, tb], 2).await;
    let want = ["b", "a", "", "d", "a", "c", ""].map(|s| if s.is_empty() { V::Null } else { V::S(s.into()) });
    assert_eq!(vals[0].1, want);
    // Global codes: a tile from the second input stores codes of the union.
    let raw = values(obs.column_chunks("k").unwrap()[1].as_ref(), ColumnKind::Numeric, None);
    assert_eq!(raw, [3, 1, 2, -1].map(V::I));
}

/// A column is ordered when every input with categories gives it ordered and keeps the first one's order (some of
/// its categories, in its order); an input of no value says nothing.
#[tokio::test]
async fn an_ordered_category_stays_ordered_only_when_every_input_agrees() {
    let stages: Arc<[String]> = vec!["low".to_string(), "mid".to_string(), "high".to_string()].into();
    let other: Arc<[String]> = vec!["high".to_string(), "low".to_string()].into();
    let none: Arc<[String]> = Vec::<String>::new().into();
    let ordered = |codes: Vec<i32>, c: &Arc<[String]>| {
        TileObs::new().with("stage", ColumnData::category_ordered(codes, c.clone(), true))
    };
    let plain =
        |codes: Vec<i32>, c: &Arc<[String]>| TileObs::new().with("stage", ColumnData::category(codes, c.clone()));
    let is_ordered = |inputs: &[TileObs]| infer(inputs, 100).columns[0].ordered;
    assert!(is_ordered(&[ordered(vec![0, 2], &stages), ordered(vec![1], &stages)]));
    assert!(is_ordered(&[ordered(vec![-1], &none), ordered(vec![1], &stages), plain(vec![-1], &none)]));
    assert!(!is_ordered(&[ordered(vec![0], &stages), plain(vec![1], &stages)]));
    assert!(!is_ordered(&[plain(vec![0], &stages), ordered(vec![1], &stages)]));
    assert!(!is_ordered(&[ordered(vec![0], &stages), ordered(vec![1], &other)]));
    // Some of the categories, in the first input's order, keep it; one more category does not.
    let some: Arc<[String]> = vec!["low".to_string(), "high".to_string()].into();
    let more: Arc<[String]> = vec!["low".to_string(), "mid".to_string(), "high".to_string(), "top".to_string()].into();
    assert!(is_ordered(&[ordered(vec![0], &stages), ordered(vec![1], &some)]));
    assert!(!is_ordered(&[ordered(vec![0], &stages), ordered(vec![3], &more)]));
    assert!(dct_obs::keeps_order(&["a".to_string(), "b".to_string()], &["a", "b"]));
    assert!(!dct_obs::keeps_order(&["a".to_string(), "b".to_string()], &["b", "a"]));
    assert!(!dct_obs::keeps_order(&["a".to_string()], &["a", "a"]), "a category listed twice is no order");
    assert!(!is_ordered(&[plain(vec![0], &stages)]));
    // Written and read back, the schema keeps the order.
    let tiles = [ordered(vec![0, 2], &stages), ordered(vec![1, -1], &stages)];
    let s = infer(&tiles, 100);
    let (obs, vals, _d) = round_trip(&s, &tiles, 2).await;
    assert!(obs.schema().columns[0].ordered);
    assert_eq!(obs.schema().columns[0].categories.as_deref().unwrap(), ["low", "mid", "high"]);
    assert_eq!(vals[0].1, [V::S("low".into()), V::S("high".into()), V::S("mid".into()), V::Null]);
}

#[tokio::test]
async fn missing_values_of_every_kind() {
    let t = TileObs::new()
        .with("cat", ColumnData::category(vec![-1, 0, -1], vec!["x".to_string()].into()))
        .with("i8", Arc::new(Int8Array::from(vec![None, Some(-128), Some(127)])) as ArrayRef)
        .with("i16", Arc::new(Int16Array::from(vec![Some(i16::MIN), None, Some(i16::MAX)])) as ArrayRef)
        .with("i32", Arc::new(Int32Array::from(vec![Some(i32::MIN), Some(i32::MAX), None])) as ArrayRef)
        .with("i64", Arc::new(Int64Array::from(vec![None, Some(i64::MIN), Some(i64::MAX)])) as ArrayRef)
        .with("u8", Arc::new(UInt8Array::from(vec![Some(255), None, Some(0)])) as ArrayRef)
        .with("u16", Arc::new(UInt16Array::from(vec![Some(65_535), None, Some(0)])) as ArrayRef)
        .with("u32", Arc::new(UInt32Array::from(vec![None, Some(u32::MAX), Some(0)])) as ArrayRef)
        .with("u64", Arc::new(UInt64Array::from(vec![None, Some(7), Some(0)])) as ArrayRef)
        .with("f32", Arc::new(Float32Array::from(vec![Some(1.5), None, Some(-0.25)])) as ArrayRef)
        .with("f64", Arc::new(Float64Array::from(vec![None, Some(1e300), Some(-2.5)])) as ArrayRef)
        .with("b", Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])) as ArrayRef)
        .with("s", Arc::new(StringArray::from(vec![None, Some("na\u{ef}ve"), Some("")])) as ArrayRef);
    let s = infer(std::slice::from_ref(&t), 100);
    let (_, vals, _d) = round_trip(&s, std::slice::from_ref(&t), 1).await;
    for (name, got) in &vals {
        let want = match t.get(name).unwrap() {
            ColumnData::Category(_) => vec![V::Null, V::S("x".into()), V::Null],
            ColumnData::Array(a) => values(a.as_ref(), ColumnKind::Numeric, None),
        };
        assert_eq!(got, &want, "column {name}");
        assert!(got.contains(&V::Null), "column {name} has a missing value");
    }
}

#[tokio::test]
async fn promotion_and_columns_absent_from_an_input() {
    let ta = TileObs::new()
        .with("n", Arc::new(Int16Array::from(vec![Some(1), None])) as ArrayRef)
        .with("only_a", Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef)
        .with("k", ColumnData::category(vec![0, 0], vec!["p".to_string()].into()));
    let tb = TileObs::new()
        .with("n", Arc::new(Int32Array::from(vec![Some(70_000), Some(-3)])) as ArrayRef)
        .with("k", Arc::new(StringArray::from(vec![Some("q"), None])) as ArrayRef);
    let s = infer(&[ta.clone(), tb.clone()], 100);
    assert_eq!(s.column("n").unwrap().arrow_type, ArrowType::Int32);
    // A categorical column that is a plain string column in another input is stored as strings.
    assert_eq!(s.column("k").unwrap().kind, ColumnKind::String);
    let (_, vals, _d) = round_trip(&s, &[ta, tb], 1).await;
    let get = |n: &str| vals.iter().find(|(c, _)| c == n).unwrap().1.clone();
    assert_eq!(get("n"), vec![V::I(1), V::Null, V::I(70_000), V::I(-3)]);
    assert_eq!(get("only_a"), vec![V::B(true), V::B(false), V::Null, V::Null]);
    assert_eq!(get("k"), vec![V::S("p".into()), V::S("p".into()), V::S("q".into()), V::Null]);

    let mut b = ObsSchemaBuilder::new();
    b.add_category("x", &["a"]).unwrap();
    assert!(b.add_plain("x", ArrowType::Double).is_err());
    let mut b = ObsSchemaBuilder::new();
    b.add_plain("x", ArrowType::Bool).unwrap();
    assert!(b.add_plain("x", ArrowType::Int8).is_err());
    let mut b = ObsSchemaBuilder::new();
    b.add_plain("x", ArrowType::UInt64).unwrap();
    assert!(b.add_plain("x", ArrowType::Int64).is_err());
}

#[tokio::test]
async fn writer_rejects_bad_tiles() {
    let cats: Arc<[String]> = vec!["a".to_string(), "b".to_string()].into();
    let s = infer(&[TileObs::new().with("k", ColumnData::category(vec![0], cats.clone()))], 100);
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(dir.path());
    let mk = || ObsWriter::new(store.clone(), s.clone(), &[2, 1], &ObsWriteOptions::default()).unwrap();
    let bad_tiles = [
        TileObs::new().with("k", ColumnData::category(vec![0], cats.clone())),
        TileObs::new().with("k", ColumnData::category(vec![0, 2], cats.clone())),
        TileObs::new().with("k", ColumnData::category(vec![0, -2], cats.clone())),
        TileObs::new().with("k", ColumnData::category(vec![0, 0], vec!["zzz".to_string()].into())),
        TileObs::new().with("k", Arc::new(StringArray::from(vec!["a", "zzz"])) as ArrayRef),
        TileObs::new().with("k", Arc::new(Int32Array::from(vec![0, 1])) as ArrayRef),
        TileObs::new().with("other", Arc::new(Int32Array::from(vec![0, 1])) as ArrayRef),
    ];
    for t in &bad_tiles {
        let err = mk().write_tile(t).await.unwrap_err();
        assert!(matches!(err, ObsError::Input { .. }), "{err}");
        assert!(err.to_string().contains("tile 0"), "{err}");
    }
    // Labels are accepted for a category column; finishing early is refused.
    let mut w = mk();
    w.write_tile(&TileObs::new().with("k", Arc::new(StringArray::from(vec![Some("b"), None])) as ArrayRef))
        .await
        .unwrap();
    assert!(w.finish().await.is_err());
    assert!(ObsWriter::new(store.clone(), s.clone(), &[2, 0], &ObsWriteOptions::default()).is_err());
}
