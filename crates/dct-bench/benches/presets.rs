//! zstd levels and presets: tile size against encode and decode time, on the synthetic benchmark tile and on the
//! tiles of a real dataset.
//!
//! `cargo bench -p dct-bench --bench presets` (env: `DCT_BENCH_DATASET=PATH` a dataset whose first
//! `DCT_BENCH_REAL_TILES` tiles (default 2) are decoded and re-encoded, e.g. the PBMC cells, named
//! `DCT_BENCH_DATASET_NAME` in the table (default: the folder's name); `DCT_BENCH_ROUNDS`
//! (default 3); `DCT_BENCH_ONLY=a,b` runs only the configurations so named (plain 19 always); `DCT_BENCH_OUT=FILE`
//! writes the table as CSV for `benches/plot_presets.py`).
//!
//! Every configuration encodes the same matrices on one thread (the converter runs one tile per core, so this is
//! the per-core cost) and the resulting tiles are decoded on one thread into reused buffers, as the codec bench
//! does (the fastest of 5 decodes per round); the configurations are interleaved round
//! by round so that machine noise hits them alike, and the medians are reported with each configuration's time as
//! a ratio to plain level 19 measured in the same rounds.

use std::time::Instant;

use dct_codec::{CanonicalCsr, DecodeOptions, Decoder, EncodeOptions, Preset, encode_canonical};
use dct_dataset::{Dataset, ReadOptions};
use dct_synth::{Synth, SynthParams};

/// The configurations compared: (name, level, preset).
const CONFIGS: [(&str, i32, Preset); 9] = [
    ("plain 3", 3, Preset::Plain),
    ("plain 9", 9, Preset::Plain),
    ("plain 16", 16, Preset::Plain),
    ("tuned 16", 16, Preset::Tuned),
    ("plain 19", 19, Preset::Plain),
    ("tuned 19 (default)", 19, Preset::Tuned),
    ("fast", 19, Preset::Fast),
    ("plain 22", 22, Preset::Plain),
    ("tuned 22", 22, Preset::Tuned),
];
const BASELINE: &str = "plain 19";

struct Input {
    name: String,
    tiles: Vec<CanonicalCsr>,
}

impl Input {
    fn nnz(&self) -> u64 {
        self.tiles.iter().map(|m| m.values.len() as u64).sum()
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn synthetic() -> Input {
    let synth = Synth::new(&SynthParams::default()).expect("default parameters are valid");
    let m = synth.generate(0..10_000);
    let tile = CanonicalCsr { n_genes: m.n_genes, indptr: m.indptr, indices: m.indices, values: m.values };
    Input { name: "synthetic".into(), tiles: vec![tile] }
}

/// The first `n` tiles of the dataset at `path`, decoded.
fn real(path: &str, n: usize) -> Input {
    let ds = Dataset::open(path, ReadOptions::default()).expect("open the dataset");
    let tiles = (0..n.min(ds.n_tiles()))
        .map(|t| {
            let (lo, hi) = ds.tile_bounds(t).expect("tile bounds");
            let b = ds.get_batch_as::<u32>(&(lo..hi).collect::<Vec<_>>()).expect("read the tile");
            CanonicalCsr {
                n_genes: b.n_genes,
                indptr: b.indptr.iter().map(|&x| x as u64).collect(),
                indices: b.indices.iter().map(|&x| x as u32).collect(),
                values: b.values,
            }
        })
        .collect();
    let name = std::env::var("DCT_BENCH_DATASET_NAME").unwrap_or_else(|_| {
        std::path::Path::new(path).file_name().map_or(path.to_string(), |f| f.to_string_lossy().into_owned())
    });
    Input { name, tiles }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Row {
    bytes: u64,
    encode: Vec<f64>,
    decode: Vec<f64>,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // Only `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it.
        println!("benchmark skipped: run it with `cargo bench -p dct-bench --bench presets`");
        return;
    }
    let rounds = env("DCT_BENCH_ROUNDS", 3).max(1);
    let mut inputs = vec![synthetic()];
    if let Ok(path) = std::env::var("DCT_BENCH_DATASET") {
        inputs.push(real(&path, env("DCT_BENCH_REAL_TILES", 2)));
    }
    let only: Option<Vec<String>> =
        std::env::var("DCT_BENCH_ONLY").ok().map(|v| v.split(',').map(|x| x.trim().to_string()).collect());
    let configs: Vec<(&str, i32, Preset)> = CONFIGS
        .iter()
        .copied()
        .filter(|c| c.0 == BASELINE || only.as_ref().is_none_or(|o| o.iter().any(|n| n == c.0)))
        .collect();
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("one thread");
    let mut decoder = Decoder::new(DecodeOptions { threads: 1, ..DecodeOptions::default() });
    let mut csv =
        String::from("input,config,level,preset,bytes_per_nnz,encode_s,decode_s,encode_vs_plain19,decode_vs_plain19\n");
    for input in &inputs {
        let nnz = input.nnz();
        let mut rows: Vec<Row> =
            configs.iter().map(|_| Row { bytes: 0, encode: Vec::new(), decode: Vec::new() }).collect();
        let mut out = dct_codec::DecodedTile::<u32>::default();
        for round in 0..rounds {
            for ((name, level, preset), row) in configs.iter().zip(&mut rows) {
                let opts = EncodeOptions { level: *level, preset: *preset, ..EncodeOptions::default() };
                let started = Instant::now();
                let tiles: Vec<Vec<u8>> =
                    input.tiles.iter().map(|m| one.install(|| encode_canonical(m, &opts)).expect("encodes")).collect();
                row.encode.push(started.elapsed().as_secs_f64());
                let bytes: u64 = tiles.iter().map(|t| t.len() as u64).sum();
                assert!(round == 0 || bytes == row.bytes, "{name}: the bytes changed between rounds");
                row.bytes = bytes;
                let mut fastest = f64::INFINITY;
                for _ in 0..5 {
                    let started = Instant::now();
                    for (tile, m) in tiles.iter().zip(&input.tiles) {
                        decoder.decode_into(tile, &mut out).expect("decodes");
                        assert_eq!(out.values.len(), m.values.len(), "{name}: decoded nonzeros");
                    }
                    fastest = fastest.min(started.elapsed().as_secs_f64());
                }
                row.decode.push(fastest);
            }
        }
        let base = configs.iter().position(|c| c.0 == BASELINE).expect("baseline configured");
        let ratio = |v: &[f64], b: &[f64]| {
            let mut r: Vec<f64> = v.iter().zip(b).map(|(x, y)| x / y).collect();
            median(&mut r)
        };
        println!(
            "\n{} ({} tiles, {nnz} nonzeros, {rounds} rounds, 1 thread; times as ratios to {BASELINE} in the same rounds)",
            input.name,
            input.tiles.len()
        );
        println!(
            "{:<20} {:>12} {:>10} {:>10} {:>12} {:>12}",
            "config", "bytes/nnz", "encode s", "decode s", "encode/base", "decode/base"
        );
        for ((name, level, preset), row) in configs.iter().zip(&rows) {
            let (enc, dec) = (median(&mut row.encode.clone()), median(&mut row.decode.clone()));
            let (er, dr) = (ratio(&row.encode, &rows[base].encode), ratio(&row.decode, &rows[base].decode));
            let bpn = row.bytes as f64 / nnz as f64;
            println!("{name:<20} {bpn:>12.5} {enc:>10.3} {dec:>10.4} {er:>12.3} {dr:>12.3}");
            csv.push_str(&format!(
                "{},{name},{level},{preset},{bpn:.6},{enc:.4},{dec:.5},{er:.4},{dr:.4}\n",
                input.name
            ));
        }
    }
    if let Ok(out) = std::env::var("DCT_BENCH_OUT") {
        std::fs::write(&out, csv).expect("write the CSV");
        eprintln!("wrote {out}");
    }
}
