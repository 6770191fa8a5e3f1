//! Shared test helpers: local stores, manifest loading, a synthetic obs dataset with its truth.
#![allow(dead_code)]

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array, StringArray,
    UInt8Array,
};
use arrow_schema::DataType;
use dct_obs::{
    ColumnData, ColumnKind, ObsFields, ObsManifest, ObsSchema, ObsSchemaBuilder, ObsWriteOptions, ObsWriteSummary,
    ObsWriter, TileObs, category_labels,
};
#[allow(unused_imports)]
pub use dct_store::testing::counted;
use dct_store::{Store, StoreOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A local store rooted at `dir`.
pub fn local_store(dir: &FsPath) -> Store {
    Store::from_url(dir.to_str().unwrap(), &StoreOptions::default()).unwrap()
}

/// The conformance dataset directory `name`.
pub fn conformance_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance/datasets").join(name)
}

/// The obs fields of the manifest in `dir`.
pub fn load_manifest(dir: &FsPath) -> ObsManifest {
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let u64s = |k: &str| m[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect::<Vec<_>>();
    ObsManifest {
        tile_cells: u64s("tile_cells"),
        fields: ObsFields {
            tiles_per_file: m["obs_tiles_per_file"].as_u64().unwrap(),
            shard_bytes: u64s("obs_shard_bytes"),
            shard_sha256: m["obs_shard_sha256"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().into())
                .collect(),
            fingerprint: m["obs_fingerprint"].as_str().unwrap().into(),
            shard_footer_crc32: m
                .get("obs_shard_footer_crc32")
                .map(|v| v.as_array().unwrap().iter().map(|x| u32::try_from(x.as_u64().unwrap()).unwrap()).collect()),
        },
    }
}

/// The manifest facts as one line, for handing to a child process (see [`decode_manifest`]).
pub fn encode_manifest(manifest: &ObsManifest) -> String {
    let m = &manifest.fields;
    let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let crcs = m.shard_footer_crc32.as_ref().map(|c| c.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
    format!(
        "{};{};{};{};{};{}",
        join(&manifest.tile_cells),
        m.tiles_per_file,
        join(&m.shard_bytes),
        m.shard_sha256.join(","),
        m.fingerprint,
        crcs.unwrap_or_else(|| "-".into())
    )
}

/// The inverse of [`encode_manifest`].
pub fn decode_manifest(s: &str) -> ObsManifest {
    let m: Vec<&str> = s.split(';').collect();
    let parse = |s: &str| s.split(',').map(|x| x.parse::<u64>().unwrap()).collect::<Vec<_>>();
    ObsManifest {
        tile_cells: parse(m[0]),
        fields: ObsFields {
            tiles_per_file: m[1].parse().unwrap(),
            shard_bytes: parse(m[2]),
            shard_sha256: m[3].split(',').map(str::to_string).collect(),
            fingerprint: m[4].to_string(),
            shard_footer_crc32: (m[5] != "-").then(|| m[5].split(',').map(|x| x.parse::<u32>().unwrap()).collect()),
        },
    }
}

/// A value in the truth tables.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Null,
    I(i64),
    F(f64),
    B(bool),
    S(String),
}

/// The values of `array` (a column of `kind`, with `categories` for a category column) as `V`s, labels for
/// categories.
pub fn values(array: &dyn Array, kind: ColumnKind, categories: Option<&[String]>) -> Vec<V> {
    if kind == ColumnKind::Category {
        let labels = category_labels(array, categories.unwrap()).unwrap();
        return labels.iter().map(|v| v.map_or(V::Null, |s| V::S(s.to_string()))).collect();
    }
    fn prim<T: ArrowPrimitiveType>(a: &dyn Array, f: impl Fn(T::Native) -> V) -> Vec<V> {
        a.as_primitive::<T>().iter().map(|v| v.map_or(V::Null, &f)).collect()
    }
    match array.data_type() {
        DataType::Int8 => prim::<Int8Type>(array, |v| V::I(v.into())),
        DataType::Int16 => prim::<Int16Type>(array, |v| V::I(v.into())),
        DataType::Int32 => prim::<Int32Type>(array, |v| V::I(v.into())),
        DataType::Int64 => prim::<Int64Type>(array, V::I),
        DataType::UInt8 => prim::<UInt8Type>(array, |v| V::I(v.into())),
        DataType::UInt16 => prim::<UInt16Type>(array, |v| V::I(v.into())),
        DataType::UInt32 => prim::<UInt32Type>(array, |v| V::I(v.into())),
        DataType::UInt64 => prim::<UInt64Type>(array, |v| V::I(v as i64)),
        DataType::Float32 => prim::<Float32Type>(array, |v| V::F(v.into())),
        DataType::Float64 => prim::<Float64Type>(array, V::F),
        DataType::Boolean => array.as_boolean().iter().map(|v| v.map_or(V::Null, V::B)).collect(),
        DataType::Utf8 => array.as_string::<i32>().iter().map(|v| v.map_or(V::Null, |s| V::S(s.into()))).collect(),
        t => panic!("unexpected type {t}"),
    }
}

/// A JSON value of the expected files as a `V` (numbers as floats for float columns).
pub fn json_value(v: &serde_json::Value, float: bool) -> V {
    match v {
        serde_json::Value::Null => V::Null,
        serde_json::Value::Bool(b) => V::B(*b),
        serde_json::Value::String(s) => V::S(s.clone()),
        serde_json::Value::Number(n) if float => V::F(n.as_f64().unwrap()),
        serde_json::Value::Number(n) => V::I(n.as_i64().unwrap()),
        other => panic!("unexpected {other}"),
    }
}

/// A synthetic obs dataset written with the crate's writer, and the truth of every column.
pub struct Synth {
    pub dir: tempfile::TempDir,
    pub tile_cells: Vec<u64>,
    pub schema: ObsSchema,
    pub summary: ObsWriteSummary,
    pub manifest: ObsManifest,
    /// Column name -> one value per cell, in global cell order.
    pub truth: Vec<(String, Vec<V>)>,
}

impl Synth {
    pub fn truth(&self, column: &str) -> &[V] {
        &self.truth.iter().find(|(n, _)| n == column).unwrap().1
    }

    pub fn store(&self) -> Store {
        local_store(self.dir.path())
    }

    pub fn shard_path(&self, s: usize) -> PathBuf {
        self.dir.path().join(dct_obs::shard_name(s))
    }
}

fn opt<T>(rng: &mut ChaCha8Rng, p_null: f64, v: T) -> Option<T> {
    if rng.random_bool(p_null) { None } else { Some(v) }
}

/// One input of `n` cells (cells `base..base+n` of the dataset) with its own local vocabularies.
fn input(rng: &mut ChaCha8Rng, n: usize, second: bool) -> TileObs {
    let cell_types: Vec<String> = if second {
        vec!["T cell".into(), "Monocyte".into(), "\u{1F600} odd \"quoted\"".into()]
    } else {
        vec!["B cell".into(), "T cell".into(), "na\u{ef}ve B".into()]
    };
    let donors: Vec<String> = if second {
        (100..250).map(|i| format!("donor_{i:03}")).collect()
    } else {
        (0..150).map(|i| format!("donor_{i:03}")).collect()
    };
    let cell_types: Arc<[String]> = cell_types.into();
    let donors: Arc<[String]> = donors.into();
    let ct: Vec<i32> = (0..n).map(|_| if rng.random_bool(0.1) { -1 } else { rng.random_range(0..3) }).collect();
    let dn: Vec<i32> = (0..n).map(|_| if rng.random_bool(0.05) { -1 } else { rng.random_range(0..150) }).collect();
    let mut t = TileObs::new()
        .with("cell_type", ColumnData::category(ct, cell_types))
        .with("donor", ColumnData::category(dn, donors));
    // n_genes: int32 in the first input, int16 in the second (promoted to int32).
    let genes: ArrayRef = if second {
        Arc::new(Int16Array::from(
            (0..n)
                .map(|_| {
                    let v = rng.random_range(0..30_000i16);
                    opt(rng, 0.05, v)
                })
                .collect::<Vec<_>>(),
        ))
    } else {
        Arc::new(Int32Array::from(
            (0..n)
                .map(|_| {
                    let v = rng.random_range(0..100_000i32);
                    opt(rng, 0.05, v)
                })
                .collect::<Vec<_>>(),
        ))
    };
    t.push("n_genes", genes);
    t.push(
        "pct",
        Arc::new(Float32Array::from(
            (0..n)
                .map(|_| {
                    let v = rng.random_range(0..4096) as f32 / 64.0;
                    opt(rng, 0.05, v)
                })
                .collect::<Vec<_>>(),
        )) as ArrayRef,
    );
    t.push(
        "score",
        Arc::new(Float64Array::from(
            (0..n)
                .map(|_| {
                    let v = rng.random::<f64>() * 2000.0 - 1000.0;
                    opt(rng, 0.05, v)
                })
                .collect::<Vec<_>>(),
        )) as ArrayRef,
    );
    t.push(
        "flag",
        Arc::new(BooleanArray::from(
            (0..n)
                .map(|_| {
                    let v = rng.random_bool(0.2);
                    opt(rng, 0.05, v)
                })
                .collect::<Vec<_>>(),
        )) as ArrayRef,
    );
    let acgt = b"ACGT";
    t.push(
        "barcode",
        Arc::new(StringArray::from_iter_values((0..n).map(|_| {
            let s: String = (0..16).map(|_| acgt[rng.random_range(0..4)] as char).collect();
            format!("{s}-{}", if second { 2 } else { 1 })
        }))) as ArrayRef,
    );
    t.push(
        "batch",
        Arc::new(StringArray::from(
            (0..n)
                .map(|_| {
                    let v = format!("run{}", rng.random_range(1..4));
                    opt(rng, 0.1, v)
                })
                .collect::<Vec<_>>(),
        )) as ArrayRef,
    );
    t.push("u8", Arc::new(UInt8Array::from_iter_values((0..n).map(|_| rng.random::<u8>()))) as ArrayRef);
    t.push(
        "big",
        Arc::new(Int64Array::from(
            (0..n)
                .map(|_| {
                    let v = rng.random::<i64>();
                    opt(rng, 0.05, v)
                })
                .collect::<Vec<_>>(),
        )) as ArrayRef,
    );
    t
}

/// Writes a synthetic dataset: `tile_cells` tiles, two inputs (the second starting at tile `split`), K tiles per
/// shard.
pub async fn write_synth(tile_cells: &[u64], split: usize, k: u64, seed: u64) -> Synth {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n1: u64 = tile_cells[..split].iter().sum();
    let n2: u64 = tile_cells[split..].iter().sum();
    let inputs = [input(&mut rng, n1 as usize, false), input(&mut rng, n2 as usize, true)];
    let mut b = ObsSchemaBuilder::new();
    for i in &inputs {
        b.add_input(i).unwrap();
    }
    let schema = b.finish();
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(dir.path());
    let opts = ObsWriteOptions { tiles_per_file: k, ..Default::default() };
    let mut w = ObsWriter::new(store, schema.clone(), tile_cells, &opts).unwrap();
    let mut offset = 0usize;
    for (t, &n) in tile_cells.iter().enumerate() {
        let (inp, base) = if t < split { (&inputs[0], 0) } else { (&inputs[1], n1 as usize) };
        w.write_tile(&inp.slice(offset - base, n as usize)).await.unwrap();
        offset += n as usize;
    }
    let summary = w.finish().await.unwrap();
    // Truth: each input's values, decoded through its own local vocabularies, concatenated.
    let mut truth = Vec::new();
    for c in &schema.columns {
        let mut vals = Vec::new();
        for i in &inputs {
            match i.get(&c.name).unwrap() {
                ColumnData::Category(cd) => vals.extend(
                    cd.codes.iter().map(|&x| if x < 0 { V::Null } else { V::S(cd.categories[x as usize].clone()) }),
                ),
                ColumnData::Array(a) => vals.extend(values(a.as_ref(), ColumnKind::Numeric, None)),
            }
        }
        truth.push((c.name.clone(), vals));
    }
    let manifest = summary.manifest(tile_cells);
    Synth { dir, tile_cells: tile_cells.to_vec(), schema, summary, manifest, truth }
}

/// `n_tiles` tiles of `size` cells, the last one `last` cells.
pub fn tiles(n_tiles: usize, size: u64, last: u64) -> Vec<u64> {
    let mut v = vec![size; n_tiles];
    *v.last_mut().unwrap() = last;
    v
}
