//! The manifest's parsing, validation and rewriting against hand-made documents.

use super::*;

fn base() -> Value {
    serde_json::json!({
        "format": "deltacells-dataset", "version": 2, "n_cells": 250, "n_genes": 10, "tile_size": 100,
        "tile_cells": [100, 100, 50], "tile_nnz": [5, 6, 7], "tile_bytes": [2000, 2100, 1500],
        "n_chunks": 8, "zstd_level": 19, "has_gene_order": false, "has_var_names": false,
        "has_var_table": false, "metadata": {"a": 1}, "has_obs": false, "obs_tiles_per_file": 0,
        "obs_fingerprint": "", "obs_shard_bytes": [], "obs_shard_sha256": []
    })
}

fn parse(v: &Value) -> Result<Manifest, ManifestError> {
    Manifest::from_json(&serde_json::to_vec(v).unwrap())
}

fn category_with(edit: impl FnOnce(&mut Map<String, Value>)) -> Category {
    let mut v = base();
    edit(v.as_object_mut().unwrap());
    parse(&v).unwrap_err().category
}

#[test]
fn parses_and_round_trips_with_unknown_keys() {
    let mut v = base();
    v["future"] = serde_json::json!({"x": [1, 2]});
    let m = parse(&v).unwrap();
    assert_eq!(m.n_tiles(), 3);
    assert_eq!(m.nnz(), 18);
    assert_eq!(m.extra["future"], serde_json::json!({"x": [1, 2]}));
    let again = Manifest::from_json(&m.to_json_pretty()).unwrap();
    assert_eq!(again, m);
    let text = String::from_utf8(m.to_json_pretty()).unwrap();
    assert!(text.contains("\n  \"future\": {"), "{text}");
}

#[test]
fn categories() {
    use Category::*;
    assert_eq!(category_with(|m| drop(m.insert("format".into(), "x".into()))), ManifestFormat);
    assert_eq!(category_with(|m| drop(m.remove("format"))), ManifestFormat);
    assert_eq!(category_with(|m| drop(m.insert("version".into(), 3.into()))), ManifestVersion);
    assert_eq!(category_with(|m| drop(m.insert("version".into(), "2".into()))), ManifestVersion);
    assert_eq!(category_with(|m| drop(m.insert("n_cells".into(), 251.into()))), ManifestCounts);
    assert_eq!(category_with(|m| drop(m.insert("n_cells".into(), (-1).into()))), ManifestCounts);
    assert_eq!(category_with(|m| drop(m.insert("n_genes".into(), 0.into()))), ManifestCounts);
    assert_eq!(category_with(|m| drop(m.insert("tile_size".into(), 0.into()))), ManifestCounts);
    assert_eq!(category_with(|m| drop(m.insert("tile_nnz".into(), serde_json::json!([1, 2])))), ManifestLists);
    assert_eq!(category_with(|m| drop(m.insert("tile_nnz".into(), serde_json::json!([1, 2, 1001])))), ManifestLists);
    assert_eq!(category_with(|m| drop(m.remove("tile_bytes"))), ManifestLists);
    // Tiles too small for the cells claimed (a 50-cell tile takes at least 64 + 51 * 8 bytes), or too large a tile.
    let mut least = base();
    least["tile_bytes"] = serde_json::json!([2000, 2100, 472]);
    assert!(parse(&least).is_ok());
    assert_eq!(
        category_with(|m| drop(m.insert("tile_bytes".into(), serde_json::json!([2000, 2100, 471])))),
        ManifestLists
    );
    let claim = |m: &mut Map<String, Value>| {
        for (k, v) in [
            ("n_cells", serde_json::json!(1_000_000_000_000u64)),
            ("tile_size", 1_000_000_000_000u64.into()),
            ("tile_cells", serde_json::json!([1_000_000_000_000u64])),
            ("tile_nnz", serde_json::json!([5])),
            ("tile_bytes", serde_json::json!([44_000])),
        ] {
            m.insert(k.into(), v);
        }
    };
    assert_eq!(category_with(claim), ManifestCounts, "a tile_size past 2^32-1");
    let wrap = serde_json::json!([1u64 << 63, 1u64 << 63, 1u64 << 63]);
    assert_eq!(category_with(|m| drop(m.insert("tile_bytes".into(), wrap.clone()))), ManifestLists, "a sum past 2^64");
    assert_eq!(
        category_with(|m| {
            claim(m);
            m.insert("tile_size".into(), u32::MAX.into());
            m.insert("n_cells".into(), u32::MAX.into());
            m.insert("tile_cells".into(), serde_json::json!([u32::MAX]));
        }),
        ManifestLists,
        "4 billion cells in 44 kB of tile"
    );
    assert_eq!(
        category_with(|m| drop(m.insert("tile_cells".into(), serde_json::json!([50, 100, 100])))),
        ManifestTileCells
    );
    assert_eq!(
        category_with(|m| {
            m.insert("tile_cells".into(), serde_json::json!([100, 100, 0, 50]));
            m.insert("tile_nnz".into(), serde_json::json!([1, 1, 0, 1]));
            m.insert("tile_bytes".into(), serde_json::json!([1, 1, 1, 1]));
        }),
        ManifestTileCells
    );
    assert_eq!(category_with(|m| drop(m.insert("has_obs".into(), true.into()))), ObsFields);
    assert_eq!(category_with(|m| drop(m.insert("has_gene_order".into(), 1.into()))), ManifestInvalid);
    assert_eq!(parse(&Value::Array(vec![])).unwrap_err().category, ManifestInvalid);
    assert_eq!(Manifest::from_json(b"{").unwrap_err().category, ManifestInvalid);
}

#[test]
fn obs_fields() {
    let with_obs = |edit: &dyn Fn(&mut Value)| {
        let mut v = base();
        v["has_obs"] = true.into();
        v["obs_tiles_per_file"] = 2.into();
        v["obs_fingerprint"] = "0123456789abcdef01234567".into();
        v["obs_shard_bytes"] = serde_json::json!([10, 20]);
        v["obs_shard_sha256"] = serde_json::json!(["a".repeat(64), "B".repeat(64)]);
        edit(&mut v);
        parse(&v)
    };
    assert!(with_obs(&|_| {}).is_ok());
    for edit in [
        &(|v: &mut Value| v["obs_tiles_per_file"] = 0.into()) as &dyn Fn(&mut Value),
        &|v| v["obs_tiles_per_file"] = 3.into(),
        &|v| v["obs_fingerprint"] = "0123".into(),
        &|v| drop(v.as_object_mut().unwrap().remove("obs_fingerprint")),
        &|v| v["obs_shard_bytes"] = serde_json::json!([10]),
        &|v| v["obs_shard_sha256"] = serde_json::json!(["a".repeat(64), "g".repeat(64)]),
        &|v| v["obs_shard_bytes"] = serde_json::json!("x"),
    ] {
        assert_eq!(with_obs(edit).unwrap_err().category, Category::ObsFields);
    }
}

#[test]
fn empty_dataset_is_valid_and_versions_bound_genes() {
    let m = Manifest::new(5, 10);
    m.validate().unwrap();
    let mut m = Manifest::new(65537, 10);
    m.validate().unwrap();
    m.version = 1;
    assert_eq!(m.validate().unwrap_err().category, Category::ManifestCounts);
}

#[test]
fn paths() {
    assert_eq!(tile_path(7), "tiles/tile_000007.dct");
    assert_eq!(tile_path(1234567), "tiles/tile_1234567.dct");
    assert_eq!(obs_shard_path(3), "obs/obs_0003.parquet");
}
