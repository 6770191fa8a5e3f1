use super::*;

#[test]
fn hex_encoding() {
    assert_eq!(hex(&[0x00, 0xab, 0x10, 0xff]), "00ab10ff");
    assert_eq!(
        hex(Sha256::digest(b"abc").as_slice()),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn the_kept_tail_is_the_end_of_the_stream() {
    let data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    for chunk in [1, 7, 64, 100, 5000] {
        let mut tail = Vec::new();
        for c in data.chunks(chunk) {
            keep_tail(&mut tail, c, 100);
            assert!(tail.len() <= 200 + chunk.min(100));
        }
        assert!(tail.len() >= 100, "chunk {chunk}");
        assert!(data.ends_with(&tail), "chunk {chunk}: the tail is the end of the data");
    }
}

/// Obs checks through dct-obs on copies of the conformance dataset `v2_with_obs`, altered.
#[cfg(feature = "obs")]
mod obs_checks {
    use std::path::{Path, PathBuf};

    use serde_json::Value;

    use super::super::*;

    fn copy_dataset(to: &Path) -> PathBuf {
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/conformance/datasets/v2_with_obs");
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            std::fs::create_dir_all(to.join(&rel)).unwrap();
            for e in std::fs::read_dir(from.join(&rel)).unwrap() {
                let e = e.unwrap();
                let r = rel.join(e.file_name());
                if e.file_type().unwrap().is_dir() {
                    stack.push(r);
                } else {
                    std::fs::copy(e.path(), to.join(&r)).unwrap();
                }
            }
        }
        to.to_path_buf()
    }

    fn edit_manifest(dir: &Path, f: impl FnOnce(&mut Value)) {
        let p = dir.join("manifest.json");
        let mut m: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        f(&mut m);
        std::fs::write(&p, serde_json::to_vec(&m).unwrap()).unwrap();
    }

    fn check(dir: &Path) -> VerifyReport {
        let ds = Dataset::open(dir.to_str().unwrap(), ReadOptions::default()).unwrap();
        verify(&ds, &VerifyOptions::default(), |_, _| {})
    }

    #[test]
    fn an_intact_copy_verifies() {
        let tmp = tempfile::tempdir().unwrap();
        let report = check(&copy_dataset(tmp.path()));
        assert!(report.is_ok(), "{:?}", report.problems);
    }

    #[test]
    fn an_edited_schema_breaks_the_fingerprint_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_dataset(tmp.path());
        let p = dir.join("obs/schema.json");
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("\"T cell\""));
        std::fs::write(&p, text.replace("\"T cell\"", "\"X cell\"")).unwrap();
        let report = check(&dir);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        let p = &report.problems[0];
        assert_eq!(p.category, Category::ObsSha256, "{p}");
        assert!(p.message.contains("manifest.json") && p.message.contains("obs_fingerprint"), "{p}");
    }

    #[test]
    fn a_schema_that_disagrees_with_the_shards_is_a_layout_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_dataset(tmp.path());
        let p = dir.join("obs/schema.json");
        let text = std::fs::read_to_string(&p).unwrap();
        // n_counts is int64 in the shards; claim int32.
        let edited = text.replace(
            "{\"name\": \"n_counts\", \"kind\": \"numeric\", \"arrow_type\": \"int64\"",
            "{\"name\": \"n_counts\", \"kind\": \"numeric\", \"arrow_type\": \"int32\"",
        );
        assert_ne!(edited, text);
        std::fs::write(&p, &edited).unwrap();
        let report = check(&dir);
        let layout: Vec<_> = report.problems.iter().filter(|p| p.category == Category::ObsShard).collect();
        assert_eq!(layout.len(), 2, "one per shard: {:?}", report.problems);
        for p in layout {
            assert!(p.message.contains("n_counts") && p.message.contains("int32"), "{p}");
            assert!(p.message.contains("obs_000"), "names the shard: {p}");
        }
        assert!(report.has(Category::ObsSha256), "and the fingerprint: {:?}", report.problems);
    }

    #[test]
    fn a_shard_with_the_wrong_row_groups_is_found_even_with_matching_hashes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_dataset(tmp.path());
        // Shard 1 (tiles 2, 3: 100 and 50 cells) in place of shard 0 (tiles 0, 1: 100 cells each), with the
        // manifest's size and hash updated to match, as a careless rewrite would.
        let bytes = std::fs::read(dir.join("obs/obs_0001.parquet")).unwrap();
        std::fs::write(dir.join("obs/obs_0000.parquet"), &bytes).unwrap();
        edit_manifest(&dir, |m| {
            m["obs_shard_bytes"][0] = bytes.len().into();
            m["obs_shard_sha256"][0] = hex(Sha256::digest(&bytes).as_slice()).into();
        });
        let report = check(&dir);
        let layout: Vec<_> = report.problems.iter().filter(|p| p.category == Category::ObsShard).collect();
        assert_eq!(layout.len(), 1, "{:?}", report.problems);
        assert!(layout[0].message.contains("row group 1 has 50 rows but tile 1 has 100 cells"), "{}", layout[0]);
        assert!(layout[0].message.contains("obs_0000.parquet"), "{}", layout[0]);
        assert!(report.has(Category::ObsSha256), "the fingerprint changes too: {:?}", report.problems);
    }

    #[test]
    fn a_missing_schema_is_reported_and_shards_still_hashed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_dataset(tmp.path());
        std::fs::remove_file(dir.join("obs/schema.json")).unwrap();
        let report = check(&dir);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].category, Category::ObsShard);
        assert!(report.problems[0].message.contains("schema.json"), "{}", report.problems[0]);
    }

    #[test]
    fn a_footer_longer_than_the_kept_tail_is_fetched() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = copy_dataset(tmp.path());
        let ds = Dataset::open(dir.to_str().unwrap(), ReadOptions::default()).unwrap();
        let core = ds.core().clone();
        let rt = ds.rt();
        let (schema, problems) = {
            let c = core.clone();
            rt.block_on(async move { obs::read_schema(&c).await }).unwrap()
        };
        assert!(problems.is_empty());
        let schema = schema.unwrap();
        let size = core.manifest.obs.shard_bytes[0];
        let c = core.clone();
        let found = rt
            .block_on(async move {
                let shard = stream_shard(&c.store, "obs/obs_0000.parquet", size, 16).await.ok().unwrap();
                assert!(shard.tail.len() < 64, "only a short tail was kept");
                obs::check_layout(&c, 0, "obs_0000", &shard, &schema).await
            })
            .unwrap();
        assert!(found.is_empty(), "{found:?}");
    }
}
