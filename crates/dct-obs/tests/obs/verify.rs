//! Verification (every problem reported) and robustness of opening and localizing damaged obs.

use crate::common;

use common::*;
use dct_obs::{Obs, ObsError, ObsOptions, ObsProblemKind, ObsSchema, verify_obs};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn kinds(r: &dct_obs::ObsVerifyReport) -> Vec<(ObsProblemKind, Option<usize>)> {
    r.problems.iter().map(|p| (p.kind, p.shard)).collect()
}

async fn small() -> Synth {
    // 7 tiles, 3 per shard: shards of 3, 3 and 1 tiles.
    write_synth(&tiles(7, 120, 33), 4, 3, 21).await
}

#[tokio::test]
async fn clean_dataset_verifies_and_fingerprint_is_the_writers() {
    let s = small().await;
    let r = verify_obs(&s.store(), &s.manifest, 2).await;
    assert!(r.is_ok(), "{:?}", r.problems);
    assert_eq!(r.shard_sha256.iter().flatten().cloned().collect::<Vec<_>>(), s.summary.fields.shard_sha256);
    assert_eq!(
        dct_obs::obs_fingerprint(&s.summary.schema_json, &s.tile_cells, &s.summary.fields.shard_sha256),
        s.summary.fields.fingerprint
    );
    for (i, b) in s.summary.fields.shard_bytes.iter().enumerate() {
        assert_eq!(std::fs::metadata(s.shard_path(i)).unwrap().len(), *b);
    }
    // The shards have one row group per tile, no statistics and zstd compression.
    for shard in 0..3 {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let r = SerializedFileReader::new(std::fs::File::open(s.shard_path(shard)).unwrap()).unwrap();
        let rgs = r.metadata().row_groups();
        let want: Vec<i64> = s.manifest.shard_tiles(shard).map(|t| s.tile_cells[t] as i64).collect();
        assert_eq!(rgs.iter().map(|g| g.num_rows()).collect::<Vec<_>>(), want);
        for g in rgs {
            for c in g.columns() {
                assert!(c.statistics().is_none(), "statistics in {}", c.column_path());
                assert!(matches!(c.compression(), parquet::basic::Compression::ZSTD(_)));
            }
        }
    }
}

#[tokio::test]
async fn every_problem_is_reported() {
    let s = small().await;
    // Shard 0: one byte changed (same size); shard 1: missing; shard 2: truncated.
    let p0 = s.shard_path(0);
    let mut b = std::fs::read(&p0).unwrap();
    b[10] ^= 1;
    std::fs::write(&p0, b).unwrap();
    std::fs::remove_file(s.shard_path(1)).unwrap();
    let p2 = s.shard_path(2);
    let b = std::fs::read(&p2).unwrap();
    std::fs::write(&p2, &b[..b.len() - 3]).unwrap();
    let r = verify_obs(&s.store(), &s.manifest, 3).await;
    let mut k = kinds(&r);
    k.sort_by_key(|(_, s)| *s);
    assert_eq!(
        k,
        vec![
            (ObsProblemKind::ShardSha256, Some(0)),
            (ObsProblemKind::ShardMissing, Some(1)),
            (ObsProblemKind::ShardSize, Some(2)),
        ],
        "{:?}",
        r.problems
    );
    assert!(r.problems.iter().all(|p| p.message.contains("obs_000")), "{:?}", r.problems);
}

#[tokio::test]
async fn layout_and_schema_mismatches_are_reported() {
    let s = small().await;
    // The manifest claims other tile sizes and another K: row counts and row group counts disagree.
    let mut m = s.manifest.clone();
    m.tile_cells[1] += 1;
    let r = verify_obs(&s.store(), &m, 2).await;
    let k = kinds(&r);
    assert!(k.contains(&(ObsProblemKind::ShardLayout, Some(0))), "{:?}", r.problems);
    assert!(k.contains(&(ObsProblemKind::Fingerprint, None)), "{:?}", r.problems);
    let p = r.problems.iter().find(|p| p.kind == ObsProblemKind::ShardLayout).unwrap();
    assert_eq!(p.tile, Some(1));

    // A schema.json whose types disagree with the parquet files (rewritten with "flag" as int8 numeric).
    let text = std::fs::read_to_string(s.dir.path().join("obs/schema.json")).unwrap();
    let mut schema = ObsSchema::parse(text.as_bytes(), "x").unwrap();
    let flag = schema.columns.iter_mut().find(|c| c.name == "flag").unwrap();
    flag.kind = dct_obs::ColumnKind::Numeric;
    flag.arrow_type = dct_obs::ArrowType::Int8;
    std::fs::write(s.dir.path().join("obs/schema.json"), schema.to_json()).unwrap();
    let r = verify_obs(&s.store(), &s.manifest, 2).await;
    let layout: Vec<_> = r.problems.iter().filter(|p| p.kind == ObsProblemKind::ShardLayout).collect();
    assert_eq!(layout.len(), 3, "one per shard: {:?}", r.problems);
    assert!(layout.iter().all(|p| p.column.as_deref() == Some("flag")));
    assert!(kinds(&r).contains(&(ObsProblemKind::Fingerprint, None)));
    // Opening refuses a schema that does not match the fingerprint.
    let cache = tempfile::tempdir().unwrap();
    let o = ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() };
    assert!(matches!(Obs::open(s.store(), s.manifest.clone(), o.clone()).await, Err(ObsError::Fingerprint { .. })));
    std::fs::remove_file(s.dir.path().join("obs/schema.json")).unwrap();
    let r = verify_obs(&s.store(), &s.manifest, 2).await;
    assert_eq!(kinds(&r), vec![(ObsProblemKind::Schema, None)], "{:?}", r.problems);
    assert!(matches!(Obs::open(s.store(), s.manifest.clone(), o).await, Err(ObsError::NotFound { .. })));
}

#[tokio::test]
async fn invalid_manifest_fields_are_refused() {
    let s = small().await;
    let cache = tempfile::tempdir().unwrap();
    let o = ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() };
    let mut bad = Vec::new();
    let mut m = s.manifest.clone();
    m.fields.fingerprint = "../../../../etc/passwd00".into();
    bad.push(m);
    let mut m = s.manifest.clone();
    m.fields.tiles_per_file = 0;
    bad.push(m);
    let mut m = s.manifest.clone();
    m.fields.shard_bytes.pop();
    bad.push(m);
    let mut m = s.manifest.clone();
    m.fields.shard_sha256[0] = "xyz".into();
    bad.push(m);
    let mut m = s.manifest.clone();
    m.tile_cells.push(u64::MAX);
    bad.push(m);
    for m in bad {
        let e = Obs::open(s.store(), m.clone(), o.clone()).await.unwrap_err();
        assert!(matches!(e, ObsError::Manifest(_)), "{e}");
        let r = verify_obs(&s.store(), &m, 2).await;
        assert!(kinds(&r).contains(&(ObsProblemKind::Manifest, None)));
    }
    assert!(std::fs::read_dir(cache.path()).unwrap().next().is_none(), "nothing written to the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_shards_give_errors_not_panics() {
    let s = small().await;
    let good = std::fs::read(s.shard_path(0)).unwrap();
    let names: Vec<String> = s.schema.columns.iter().map(|c| c.name.clone()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    // Random positions, many of them in the footer where the metadata decoder runs.
    let mut positions: Vec<usize> = (0..60).map(|_| rng.random_range(0..good.len())).collect();
    positions.extend((0..60).map(|_| rng.random_range(good.len() - 2000.min(good.len())..good.len())));
    let (mut ok, mut failed) = (0, 0);
    for (i, &p) in positions.iter().enumerate() {
        let mut b = good.clone();
        b[p] = b[p].wrapping_add(1 + (i % 250) as u8);
        std::fs::write(s.shard_path(0), &b).unwrap();
        let cache = tempfile::tempdir().unwrap();
        let o = ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() };
        let obs = Obs::open(s.store(), s.manifest.clone(), o).await.unwrap();
        match obs.localize(&names).await {
            Ok(_) => ok += 1,
            Err(e) => {
                failed += 1;
                let msg = e.to_string();
                assert!(msg.contains("obs_0000.parquet"), "error names the shard: {msg}");
            }
        }
        let r = verify_obs(&s.store(), &s.manifest, 2).await;
        assert!(kinds(&r).contains(&(ObsProblemKind::ShardSha256, Some(0))), "byte {p}: {:?}", r.problems);
    }
    assert!(failed > 0, "some damage must be detected while reading ({ok} ok)");
    // A shard whose size differs from the manifest is refused while reading.
    std::fs::write(s.shard_path(0), &good[..good.len() - 1]).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let o = ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() };
    let obs = Obs::open(s.store(), s.manifest.clone(), o).await.unwrap();
    let e = obs.localize(&["flag"]).await.unwrap_err();
    assert!(matches!(e, ObsError::Shard { .. }) && e.to_string().contains("manifest says"), "{e}");
}

#[tokio::test]
async fn the_layout_check_from_the_shard_ends_agrees_with_the_whole_file_check() {
    let s = small().await;
    let schema = ObsSchema::parse(s.summary.schema_json.as_bytes(), "schema.json").unwrap();
    // Shard 1 holds tiles 3..6; a wrong manifest row count for tile 4 is a layout problem.
    let mut m = s.manifest.clone();
    m.tile_cells[4] += 1;
    let bytes = std::fs::read(s.shard_path(1)).unwrap();
    let size = bytes.len() as u64;
    let (whole, _) = dct_obs::check_shard_bytes(1, &bytes, "obs_0001", &m, Some(&schema));
    let layout: Vec<_> = whole.iter().filter(|p| p.kind == ObsProblemKind::ShardLayout).cloned().collect();
    assert_eq!(layout.len(), 1, "{whole:?}");
    assert_eq!(layout[0].tile, Some(4));
    // Too short a tail: the function says how many bytes the footer needs, and with those it finds the same.
    let needed = dct_obs::check_shard_tail(1, &bytes[..4], &bytes[bytes.len() - 8..], size, "obs_0001", &m, &schema)
        .expect_err("8 bytes hold no footer");
    assert!(needed > 8 && needed < size, "{needed}");
    let tail = &bytes[bytes.len() - needed as usize..];
    let found = dct_obs::check_shard_tail(1, &bytes[..4], tail, size, "obs_0001", &m, &schema).unwrap();
    assert_eq!(found, layout);
    // The intact manifest gives no problem; a head without the magic is one.
    assert_eq!(dct_obs::check_shard_tail(1, &bytes[..4], tail, size, "obs_0001", &s.manifest, &schema), Ok(vec![]));
    let bad = dct_obs::check_shard_tail(1, b"PAR0", tail, size, "obs_0001", &s.manifest, &schema).unwrap();
    assert_eq!(bad.len(), 1);
    assert!(bad[0].message.contains("magic"), "{}", bad[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_sizes_are_the_sums_of_the_column_chunks() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let s = small().await;
    let cache = tempfile::tempdir().unwrap();
    let opts = ObsOptions { cache_dir: Some(cache.path().into()), concurrency: 2, ..Default::default() };
    let obs = Obs::open(s.store(), s.manifest.clone(), opts).await.unwrap();
    let sizes = obs.column_sizes().await.unwrap();
    assert_eq!(
        sizes.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        obs.columns().iter().map(|c| c.0).collect::<Vec<_>>()
    );
    let mut want = vec![(0u64, 0u64); sizes.len()];
    for shard in 0..s.manifest.n_shards() {
        let r = SerializedFileReader::new(std::fs::File::open(s.shard_path(shard)).unwrap()).unwrap();
        for g in r.metadata().row_groups() {
            for (w, c) in want.iter_mut().zip(g.columns()) {
                w.0 += c.compressed_size() as u64;
                w.1 += c.uncompressed_size() as u64;
            }
        }
    }
    let got: Vec<(u64, u64)> = sizes.iter().map(|c| (c.compressed_bytes, c.uncompressed_bytes)).collect();
    assert_eq!(got, want);
    assert!(got.iter().all(|&(c, _)| c > 0));
    // Nothing was localized.
    assert!(obs.columns().iter().all(|(name, _)| !obs.is_localized(name)));
}
