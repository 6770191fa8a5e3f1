//! Schemas over several inputs, conversion to the schema, and the tile cutter.

use arrow_array::{Array, Float64Array, StringArray};
use dct_input::{Column, ColumnData as InputData, Frame};
use dct_obs::{ArrowType, ColumnData, ColumnKind, TileObs};

use super::convert::*;
use super::cutter::*;
use super::schema::*;

fn col(name: &str, stored: &str, data: InputData) -> Column {
    Column { name: name.into(), stored_type: stored.into(), data }
}

fn frame(columns: Vec<Column>, skipped: Vec<(String, String)>) -> Frame {
    let n = columns.first().map_or(0, |c| c.data.len());
    Frame { index_name: "_index".into(), index: (0..n).map(|i| format!("c{i}")).collect(), columns, skipped }
}

fn cat(codes: &[i64], cats: &[&str]) -> InputData {
    InputData::Categorical {
        codes: codes.to_vec(),
        categories: cats.iter().map(|s| s.to_string()).collect(),
        ordered: false,
    }
}

const ALL: Selection<'static> = Selection { columns: None, exclude: &[] };

#[test]
fn schema_is_the_union_in_order_with_widths_and_overflow() {
    let a = frame(
        vec![
            col("ct", "category", cat(&[0, 1, -1], &["T", "B"])),
            col("n", "i32", InputData::Int(vec![1, 2, 3])),
            col("id", "category", cat(&[0, 1, 2], &["x", "y", "z"])),
        ],
        vec![],
    );
    let b = frame(
        vec![
            col("n", "i64", InputData::Int(vec![4, 5])),
            col("ct", "category", cat(&[0, 1], &["NK", "T"])),
            col("id", "category", cat(&[0, 1], &["u", "v"])),
            col("f", "f32", InputData::Float(vec![0.5, f64::NAN])),
        ],
        vec![],
    );
    let (sa, sb) = (summarize(&a, ALL, 4), summarize(&b, ALL, 4));
    let schema = build_schema(&[("a", Some(&sa)), ("b", Some(&sb)), ("c", None)], ALL, 4).unwrap().unwrap();
    let names: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ct", "n", "id", "f", "obs_names"], "the cell names come last");
    let ct = schema.column("ct").unwrap();
    assert_eq!(ct.categories.as_deref().unwrap(), ["T", "B", "NK"]);
    assert_eq!(ct.arrow_type, ArrowType::Int8);
    assert_eq!(schema.column("n").unwrap().arrow_type, ArrowType::Int64);
    // 5 distinct ids > max_categories 4: strings.
    assert_eq!(schema.column("id").unwrap().kind, ColumnKind::String);
    assert_eq!(schema.column("f").unwrap().arrow_type, ArrowType::Float);

    // Selection: order as listed, obs_names only when listed; unknown names are refused with the list.
    let only = ["f".to_string(), "ct".to_string()];
    let sel = Selection { columns: Some(&only), exclude: &[] };
    let (sa, sb) = (summarize(&a, sel, 4), summarize(&b, sel, 4));
    let s = build_schema(&[("a", Some(&sa)), ("b", Some(&sb))], sel, 4).unwrap().unwrap();
    assert_eq!(s.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["f", "ct"]);
    let bad = ["nope".to_string()];
    let sel = Selection { columns: None, exclude: &bad };
    let e = build_schema(&[("a", Some(&summarize(&a, sel, 4)))], sel, 4).unwrap_err().to_string();
    assert!(e.contains("\"nope\"") && e.contains("\"ct\""), "{e}");
    // Everything excluded: no obs.
    let sel = Selection { columns: Some(&[]), exclude: &[] };
    assert!(build_schema(&[("a", Some(&summarize(&a, sel, 4)))], sel, 4).unwrap().is_none());
}

#[test]
fn unsupported_and_conflicting_columns_name_the_file() {
    let a = frame(vec![col("t", "i64", InputData::Int(vec![1]))], vec![("when".into(), "datetime".into())]);
    let e = build_schema(&[("in/a.h5ad", Some(&summarize(&a, ALL, 10)))], ALL, 10).unwrap_err().to_string();
    assert!(e.contains("in/a.h5ad") && e.contains("\"when\"") && e.contains("--obs-exclude when"), "{e}");
    let excl = ["when".to_string()];
    let sel = Selection { columns: None, exclude: &excl };
    assert!(build_schema(&[("a", Some(&summarize(&a, sel, 10)))], sel, 10).is_ok());
    let b = frame(vec![col("t", "category", cat(&[0], &["x"]))], vec![]);
    let sel = Selection { columns: None, exclude: &excl };
    let (sa, sb) = (summarize(&a, sel, 10), summarize(&b, sel, 10));
    let e = build_schema(&[("a", Some(&sa)), ("b.h5ad", Some(&sb))], sel, 10).unwrap_err().to_string();
    assert!(e.contains("b.h5ad") && e.contains("\"t\""), "{e}");
    let c = frame(vec![col(OBS_NAMES, "string", InputData::Str(vec!["x".into()]))], vec![]);
    let e = build_schema(&[("c", Some(&summarize(&c, ALL, 10)))], ALL, 10).unwrap_err().to_string();
    assert!(e.contains("obs_names"), "{e}");
}

#[test]
fn tiles_cross_inputs_with_global_codes_and_missing_columns() {
    let a = frame(
        vec![
            col("ct", "category", cat(&[1, 0, -1], &["B", "T"])),
            col("x", "f64", InputData::Float(vec![1.0, f64::NAN, 3.0])),
        ],
        vec![],
    );
    let b = frame(vec![col("ct", "category", cat(&[0, 1], &["NK", "B"]))], vec![]);
    let (sa, sb) = (summarize(&a, ALL, 10), summarize(&b, ALL, 10));
    let schema = build_schema(&[("a", Some(&sa)), ("b", Some(&sb))], ALL, 10).unwrap().unwrap();
    let plan = SchemaPlan::new(schema);
    let names = |n: usize, p: &str| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
    let ia = InputObs::read(&plan, "a", Some(a), names(3, "a")).unwrap();
    let ib = InputObs::read(&plan, "b", Some(b), names(2, "b")).unwrap();
    let tile_cells = [2u64, 2, 1];
    let mut cutter = TileCutter::new(&plan, &tile_cells);
    let mut tiles = Vec::new();
    for input in [&ia, &ib] {
        cutter
            .push(input, |t, tile| {
                tiles.push((t, tile));
                Ok(())
            })
            .unwrap();
    }
    cutter.finish().unwrap();
    assert_eq!(tiles.iter().map(|(t, _)| *t).collect::<Vec<_>>(), [0, 1, 2]);
    // Global vocabulary B, T, NK: a's [T, B, -] and b's [NK, B].
    let codes: Vec<i32> = tiles
        .iter()
        .flat_map(|(_, tile)| match tile.get("ct").unwrap() {
            ColumnData::Category(c) => c.codes.clone(),
            _ => panic!("codes"),
        })
        .collect();
    assert_eq!(codes, [1, 0, -1, 2, 0]);
    let xs: Vec<Option<f64>> = tiles
        .iter()
        .flat_map(|(_, tile)| match tile.get("x").unwrap() {
            ColumnData::Array(a) => a.as_any().downcast_ref::<Float64Array>().unwrap().iter().collect::<Vec<_>>(),
            _ => panic!("array"),
        })
        .collect();
    assert_eq!(xs, [Some(1.0), None, Some(3.0), None, None]);
    let obs_names: Vec<String> = tiles
        .iter()
        .flat_map(|(_, tile)| match tile.get(OBS_NAMES).unwrap() {
            ColumnData::Array(a) => a
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .iter()
                .map(|s| s.unwrap().to_string())
                .collect::<Vec<_>>(),
            _ => panic!("array"),
        })
        .collect();
    assert_eq!(obs_names, ["a0", "a1", "a2", "b0", "b1"]);
    // A code outside the categories is an error naming the file and column, not a panic.
    let bad = frame(vec![col("ct", "category", cat(&[0, 7], &["B", "T"]))], vec![]);
    let e = InputObs::read(&plan, "bad.h5ad", Some(bad), names(2, "x")).err().unwrap().to_string();
    assert!(e.contains("bad.h5ad") && e.contains("\"ct\"") && e.contains("code 7"), "{e}");
    // Too few cells for the tiles is an error.
    let mut cutter = TileCutter::new(&plan, &tile_cells);
    cutter.push(&ia, |_, _| Ok(())).unwrap();
    assert!(cutter.finish().is_err());
}

fn nullable_str(values: &[Option<&str>]) -> InputData {
    InputData::NullableStr {
        values: values.iter().map(|v| v.unwrap_or("").to_string()).collect(),
        valid: values.iter().map(Option::is_some).collect(),
    }
}

fn strings(tile: &TileObs, name: &str) -> Vec<Option<String>> {
    match tile.get(name).unwrap() {
        ColumnData::Array(a) => {
            a.as_any().downcast_ref::<StringArray>().unwrap().iter().map(|s| s.map(str::to_string)).collect()
        }
        _ => panic!("{name}: not an array"),
    }
}

#[test]
fn nullable_strings_are_string_columns_with_nulls_like_plain_strings() {
    // One input with a nullable string column, one with the column as plain strings, one as a categorical
    // (missing code), one without it: a string column, nulls where pandas had NA or a missing code.
    let a = frame(vec![col("s", "string", nullable_str(&[Some("x"), None, Some(""), Some("é")]))], vec![]);
    let b = frame(vec![col("s", "string", InputData::Str(vec!["y".into(), "x".into()]))], vec![]);
    let c = frame(vec![col("s", "category", cat(&[1, -1], &["x", "z"]))], vec![]);
    let d = frame(vec![col("t", "i64", InputData::Int(vec![1]))], vec![]);
    for order in [[&a, &b, &c, &d], [&c, &a, &d, &b]] {
        let sums: Vec<InputSummary> = order.iter().map(|f| summarize(f, ALL, 10)).collect();
        let inputs: Vec<(&str, Option<&InputSummary>)> = sums.iter().map(|s| ("in", Some(s))).collect();
        let schema = build_schema(&inputs, ALL, 10).unwrap().unwrap();
        let s = schema.column("s").unwrap();
        assert_eq!((s.kind, s.arrow_type, s.categories.is_none()), (ColumnKind::String, ArrowType::String, true));
    }
    // Alone, a nullable string column is a string column too (never a categorical).
    let sa = summarize(&a, ALL, 10);
    let alone = build_schema(&[("a", Some(&sa))], ALL, 10).unwrap().unwrap();
    assert_eq!(alone.column("s").unwrap().kind, ColumnKind::String);

    let sums: Vec<InputSummary> = [&a, &b, &c, &d].iter().map(|f| summarize(f, ALL, 10)).collect();
    let inputs: Vec<(&str, Option<&InputSummary>)> = sums.iter().map(|s| ("in", Some(s))).collect();
    let plan = SchemaPlan::new(build_schema(&inputs, ALL, 10).unwrap().unwrap());
    let names = |n: usize, p: &str| (0..n).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
    let pieces = [(a.clone(), 4, "a"), (b, 2, "b"), (c.clone(), 2, "c"), (d, 1, "d")]
        .into_iter()
        .map(|(f, n, p)| InputObs::read(&plan, p, Some(f), names(n, p)).unwrap())
        .collect::<Vec<_>>();
    let tile_cells = [3u64, 6];
    let mut cutter = TileCutter::new(&plan, &tile_cells);
    let mut got = Vec::new();
    for input in &pieces {
        cutter
            .push(input, |_, tile| {
                got.extend(strings(&tile, "s"));
                Ok(())
            })
            .unwrap();
    }
    cutter.finish().unwrap();
    let want = [Some("x"), None, Some(""), Some("é"), Some("y"), Some("x"), Some("z"), None, None];
    assert_eq!(got, want.map(|s| s.map(str::to_string)));

    // A nullable string column where the plan has a category column is an input that changed.
    let only_cat = summarize(&c, ALL, 10);
    let plan = SchemaPlan::new(build_schema(&[("c", Some(&only_cat))], ALL, 10).unwrap().unwrap());
    let e = InputObs::read(&plan, "a.h5ad", Some(a), names(4, "a")).err().unwrap().to_string();
    assert!(e.contains("a.h5ad") && e.contains("\"s\"") && e.contains("strings"), "{e}");
}
