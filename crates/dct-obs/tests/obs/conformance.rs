//! The conformance datasets with obs: values, fingerprint, schema serialization, var table, verification.

use crate::common;

use common::*;
use dct_obs::{
    ColumnKind, Obs, ObsOptions, ObsProblemKind, ObsSchema, VarTable, obs_fingerprint, read_var_table, sha256_hex,
    verify_obs,
};

const CASES: [&str; 2] = ["v1_with_obs", "v2_with_obs"];

fn expected(name: &str) -> serde_json::Value {
    let p = conformance_dir(name).with_extension("expected.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn fingerprint_recomputed_from_schema_and_shards_matches_manifest() {
    for case in CASES {
        let dir = conformance_dir(case);
        let m = load_manifest(&dir);
        let schema_text = std::fs::read_to_string(dir.join("obs/schema.json")).unwrap();
        let shards: Vec<String> =
            (0..m.n_shards()).map(|s| sha256_hex(&std::fs::read(dir.join(dct_obs::shard_name(s))).unwrap())).collect();
        assert_eq!(shards, m.fields.shard_sha256, "{case}: shard hashes");
        assert_eq!(obs_fingerprint(&schema_text, &m.tile_cells, &shards), m.fields.fingerprint, "{case}");
        assert_eq!(m.fields.fingerprint, expected(case)["obs_fingerprint"].as_str().unwrap());
    }
}

#[test]
fn schema_reserializes_byte_identical() {
    for case in CASES {
        let bytes = std::fs::read(conformance_dir(case).join("obs/schema.json")).unwrap();
        let schema = ObsSchema::parse(&bytes, "schema.json").unwrap();
        assert_eq!(schema.to_json().as_bytes(), &bytes[..], "{case}");
        // It holds a non-ASCII category, so the escaping is exercised.
        assert!(schema.columns[0].categories.as_ref().unwrap().iter().any(|c| !c.is_ascii()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_obs_value_reads_back_as_expected() {
    for case in CASES {
        let dir = conformance_dir(case);
        let exp = expected(case);
        let cache = tempfile::tempdir().unwrap();
        let (store, counter) = counted(&local_store(&dir));
        let opts = ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() };
        let obs = Obs::open(store.clone(), load_manifest(&dir), opts).await.unwrap();
        let exp_cols = exp["obs"].as_array().unwrap();
        assert_eq!(obs.columns().len(), exp_cols.len());
        let names: Vec<&str> = exp_cols.iter().map(|c| c["name"].as_str().unwrap()).collect();
        let report = obs.localize(&names).await.unwrap();
        assert_eq!(report.fetched.len(), names.len());
        // Only ranged reads, never a whole object.
        assert!(counter.requests().iter().all(|r| r.range.is_some() || r.path.ends_with("schema.json")));
        for c in exp_cols {
            let name = c["name"].as_str().unwrap();
            let col = obs.schema().column(name).unwrap();
            assert_eq!(col.kind.as_str(), c["kind"].as_str().unwrap());
            assert_eq!(col.arrow_type.as_str(), c["arrow_type"].as_str().unwrap());
            let cats: Option<Vec<String>> = serde_json::from_value(c["categories"].clone()).unwrap();
            assert_eq!(obs.categories(name).unwrap().map(|c| c.to_vec()), cats);
            let float = matches!(col.arrow_type.as_str(), "float" | "double");
            let want: Vec<V> = c["values"].as_array().unwrap().iter().map(|v| json_value(v, float)).collect();
            let got = values(obs.column(name).unwrap().as_ref(), col.kind, col.categories.as_deref());
            assert_eq!(got, want, "{case}: column {name}");
            // The same through take, in reverse order, one cell per tile boundary region.
            let cells: Vec<u64> = (0..obs.n_cells()).rev().collect();
            let taken = obs.take_column(&cells, name).unwrap();
            let got = values(taken.as_ref(), col.kind, col.categories.as_deref());
            let want_rev: Vec<V> = want.iter().rev().cloned().collect();
            assert_eq!(got, want_rev, "{case}: take of {name}");
        }
        // A second handle on the same cache reads nothing from the store.
        counter.reset();
        let opts = ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() };
        let again = Obs::open(store.clone(), load_manifest(&dir), opts).await.unwrap();
        let report = again.localize(&names).await.unwrap();
        assert_eq!(report.cached.len(), names.len());
        assert!(counter.requests().iter().all(|r| r.path.ends_with("schema.json")));
        assert!(
            again.cache_dir().starts_with(cache.path().join(load_manifest(&dir).fields.fingerprint)),
            "cache keyed by fingerprint"
        );
        let kinds: Vec<ColumnKind> = again.columns().iter().map(|(_, k)| *k).collect();
        assert!(kinds.contains(&ColumnKind::Category) && kinds.contains(&ColumnKind::String));
    }
}

#[tokio::test]
async fn var_table_reads_back_as_expected() {
    for case in CASES {
        let dir = conformance_dir(case);
        let exp = &expected(case)["var"];
        let batch = read_var_table(&local_store(&dir)).await.unwrap();
        let table = VarTable::from_record_batch(&batch).unwrap();
        assert_eq!(table.index_name.as_deref(), exp["index_name"].as_str());
        let index: Vec<String> = serde_json::from_value(exp["index"].clone()).unwrap();
        assert_eq!(table.index, index);
        let cols = exp["columns"].as_object().unwrap();
        assert_eq!(table.columns.len(), cols.len());
        for (name, a) in &table.columns {
            let float = matches!(a.data_type(), arrow_schema::DataType::Float32 | arrow_schema::DataType::Float64);
            let want: Vec<V> = cols[name].as_array().unwrap().iter().map(|v| json_value(v, float)).collect();
            assert_eq!(values(a.as_ref(), ColumnKind::Numeric, None), want, "{case}: var column {name}");
        }
        // Round trip through our writer keeps the content and the pandas index metadata.
        let bytes = dct_obs::encode_var_parquet(&table).unwrap();
        let back = dct_obs::decode_var_parquet(bytes, "mem").unwrap();
        assert_eq!(dct_obs::index_column(&back).as_deref(), exp["index_name"].as_str());
        let t2 = VarTable::from_record_batch(&back).unwrap();
        assert_eq!(t2.index, table.index);
        assert_eq!(t2.columns.len(), table.columns.len());
        for ((n1, a1), (n2, a2)) in table.columns.iter().zip(&t2.columns) {
            assert_eq!(n1, n2);
            assert_eq!(a1.to_data(), a2.to_data());
        }
    }
}

#[tokio::test]
async fn conformance_obs_verifies_clean_and_broken_hash_is_reported() {
    for case in CASES {
        let dir = conformance_dir(case);
        let r = verify_obs(&local_store(&dir), &load_manifest(&dir), 4).await;
        assert!(r.is_ok(), "{case}: {:?}", r.problems);
        assert_eq!(r.bytes_checked, load_manifest(&dir).fields.shard_bytes.iter().sum::<u64>());
    }
    let dir = conformance_dir("broken_obs_shard_sha256");
    let r = verify_obs(&local_store(&dir), &load_manifest(&dir), 4).await;
    let kinds: Vec<_> = r.problems.iter().map(|p| (p.kind, p.shard)).collect();
    assert_eq!(kinds, vec![(ObsProblemKind::ShardSha256, Some(0))], "{:?}", r.problems);
    // Opening checks the schema against the fingerprint with the manifest's hashes, which were altered.
    let opts = ObsOptions { cache_dir: Some(tempfile::tempdir().unwrap().path().into()), ..Default::default() };
    let store = local_store(&dir);
    assert!(Obs::open(store, load_manifest(&dir), opts).await.is_err());
}
