//! Crash safety of `deltacells convert`: the process is killed (SIGKILL) at seeded random moments. Every time the
//! output either has no manifest or is a complete dataset that verifies, every tile present is whole, and running
//! the same command again completes the dataset to the same bytes as an uninterrupted conversion.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_deltacells"))
}

fn input() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/inputs/pbmc200/pbmc200.h5ad")
}

fn convert(out: &Path) -> Command {
    let mut c = bin();
    c.args(["convert", input().to_str().unwrap(), "--output", out.to_str().unwrap()]);
    c.args(["--tile-size", "8", "--level", "19", "--chunks", "2", "--threads", "1"]);
    c
}

/// Tiles and side files (not the manifest's metadata, which names the output) of a dataset.
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for sub in ["", "tiles"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_file() && (name.ends_with(".dct") || name.ends_with(".npy") || name.ends_with(".txt")) {
                out.insert(format!("{sub}/{name}"), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn manifest_without_metadata(dir: &Path) -> serde_json::Value {
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    m["metadata"] = serde_json::Value::Null;
    m
}

#[test]
fn killed_conversions_never_look_complete_and_resume_to_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("reference");
    let start = Instant::now();
    let status = convert(&reference).output().unwrap();
    let full = start.elapsed();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let want = contents(&reference);
    assert_eq!(want.keys().filter(|k| k.ends_with(".dct")).count(), 25, "200 cells in tiles of 8");

    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let (mut with_manifest, mut without, mut tiles_seen) = (0, 0, 0);
    for trial in 0..20 {
        let out = tmp.path().join(format!("trial{trial}"));
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Anywhere from the start to a little past the uninterrupted run's length.
        let delay = Duration::from_micros(state % (full.as_micros() as u64 * 11 / 10 + 1));
        let mut child =
            convert(&out).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL on Unix; the process may already have finished.
        let _ = child.wait();

        if out.join("manifest.json").exists() {
            with_manifest += 1;
            let v = bin().args(["verify", out.to_str().unwrap()]).output().unwrap();
            assert!(v.status.success(), "trial {trial}: a manifest was left but the dataset does not verify");
        } else {
            without += 1;
        }
        // Every tile file that exists is whole (written to a temporary name, then renamed).
        if let Ok(entries) = std::fs::read_dir(out.join("tiles")) {
            for e in entries {
                let p = e.unwrap().path();
                if p.extension().and_then(|x| x.to_str()) == Some("dct") {
                    let blob = std::fs::read(&p).unwrap();
                    let layout = dct_format::TileLayout::parse(&blob)
                        .unwrap_or_else(|e| panic!("trial {trial}: partial tile {}: {e}", p.display()));
                    dct_format::verify_crc(&blob, layout.header()).unwrap();
                    tiles_seen += 1;
                }
            }
        }
        // The same command again completes the dataset to the reference bytes.
        let again = convert(&out).output().unwrap();
        assert!(again.status.success(), "trial {trial}: resume failed: {}", String::from_utf8_lossy(&again.stderr));
        assert_eq!(contents(&out), want, "trial {trial}: resumed dataset differs");
        assert_eq!(manifest_without_metadata(&out), manifest_without_metadata(&reference), "trial {trial}");
    }
    eprintln!("20 kills: {with_manifest} left a complete dataset, {without} left none; {tiles_seen} whole tiles found");
    assert!(without > 0, "no kill landed before the manifest: the test did not exercise interruption");
}
