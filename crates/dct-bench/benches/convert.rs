//! Conversion throughput: `pbmc3k_raw.h5ad` (2,700 real cells x 32,738 genes, 2.29M nonzeros) given as
//! input N times, converted at several zstd levels; cells/s, input MB/s, output size, CPU use (cores busy) and peak
//! memory, each configuration in a child process of its own so that its peak RSS is its own.
//!
//! `cargo bench -p dct-bench --bench convert` (env: DCT_BENCH_H5AD, the input; default
//! ../shared/data/pbmc3k_raw.h5ad beside the repository; DCT_BENCH_QUICK=1 for a short run).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use dct_bench::data_dir;
use dct_convert::{ConvertOptions, GeneSort, RunOptions};
use serde_json::{Value, json};

fn input() -> Option<PathBuf> {
    let p = std::env::var("DCT_BENCH_H5AD")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/pbmc3k_raw.h5ad"));
    p.exists().then_some(p)
}

/// Peak resident memory (VmHWM) and CPU seconds (user + system) of this process so far.
fn self_usage() -> (u64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hwm_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of /proc/pid/stat, i.e. 11 and 12 after the command name.
    (hwm_kb * 1024, (ticks(11) + ticks(12)) / 100.0)
}

/// One conversion, in this (child) process; prints one JSON line.
fn child(spec: &Value) {
    let input = PathBuf::from(spec["input"].as_str().unwrap());
    let repeat = spec["repeat"].as_u64().unwrap() as usize;
    let out = data_dir().join(format!("convert_out_{}", std::process::id()));
    let mut opts = ConvertOptions::new(out.to_str().unwrap());
    opts.level = spec["level"].as_i64().unwrap() as i32;
    // `"preset"`: plain, tuned (the default) or fast.
    if let Some(p) = spec["preset"].as_str() {
        opts.preset = p.parse().expect("preset");
    }
    opts.tile_size = spec["tile_size"].as_u64().unwrap();
    opts.gene_sort = match spec["sort"].as_str().unwrap() {
        "all" => GeneSort::AllInputs,
        _ => GeneSort::Sample(1),
    };
    let inputs = vec![input; repeat];
    let run = RunOptions::default();
    let start = Instant::now();
    // What `deltacells convert` does on one machine: keep the inputs the plan decodes for the tiles.
    let spill = if spec["spill"].as_bool().unwrap_or(true) {
        dct_convert::Spill::new(&run.spill).expect("spill")
    } else {
        dct_convert::Spill::disabled()
    };
    let plan = dct_convert::make_plan_with_spill(&inputs, &opts, &spill).expect("plan");
    let plan_secs = start.elapsed().as_secs_f64();
    let kept = spill.stats();
    dct_convert::clear_output(&plan.output, &run.store).expect("clear");
    dct_convert::run_part_with_spill(&plan, 0, 1, &run, &spill, |_| {}).expect("convert");
    assert_eq!(spill.stats().dropped, 0, "a kept input failed to read back");
    drop(spill);
    let finalize_start = Instant::now();
    let m = dct_convert::finalize(&plan, &run).expect("finalize");
    let finalize_secs = finalize_start.elapsed().as_secs_f64();
    let secs = start.elapsed().as_secs_f64();
    let (rss, cpu) = self_usage();
    let bytes: u64 = m.tile_bytes.iter().sum();
    let input_bytes: u64 = plan.inputs.iter().map(|i| i.size_bytes).sum();
    println!(
        "{}",
        json!({"cells": m.n_cells, "nnz": m.nnz(), "bytes": bytes, "seconds": secs, "plan_seconds": plan_secs,
               "finalize_seconds": finalize_secs, "spilled_inputs": kept.inputs, "spilled_bytes": kept.bytes,
               "input_bytes": input_bytes, "peak_rss": rss, "cpu_seconds": cpu})
    );
    let _ = std::fs::remove_dir_all(&out);
}

fn main() {
    if let Ok(spec) = std::env::var("DCT_BENCH_CHILD") {
        child(&serde_json::from_str(&spec).expect("spec"));
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        // Only `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it.
        println!("benchmark skipped: run it with `cargo bench -p dct-bench`");
        return;
    }
    let Some(input) = input() else {
        println!("skipped: no input (set DCT_BENCH_H5AD or put shared/data/pbmc3k_raw.h5ad beside the repository)");
        return;
    };
    let quick = std::env::var("DCT_BENCH_QUICK").is_ok();
    let r = if quick { 4 } else { 40 };
    // (what, level, repeat, tile size, gene sort, keep the decoded inputs for the tiles, zstd preset)
    let mut configs = vec![
        ("level 3, genes sorted over all inputs", 3, r, 10_000, "all", true, "tuned"),
        ("level 3, all inputs, decoded twice", 3, r, 10_000, "all", false, "tuned"),
        ("level 3, genes sorted over 1 input", 3, r, 10_000, "sample", true, "tuned"),
        ("level 9", 9, r, 10_000, "sample", true, "tuned"),
        ("level 12", 12, r, 10_000, "sample", true, "tuned"),
        ("level 16", 16, r, 10_000, "sample", true, "tuned"),
        ("level 19 (default preset: tuned)", 19, r, 10_000, "sample", true, "tuned"),
        ("level 19, preset plain", 19, r, 10_000, "sample", true, "plain"),
        ("preset fast", 19, r, 10_000, "sample", true, "fast"),
    ];
    if !quick {
        // ~1M cells; tiles of 38,000 of these ~850-nonzero cells hold as many nonzeros (32M) as 10,000-cell tiles
        // of ~3.2k-nonzero cells, so the memory of a tile in flight is the same as in that configuration.
        configs.push(("1M cells, 32M-nonzero tiles, level 3", 3, 370, 38_000, "sample", true, "tuned"));
    }
    println!("input: {} x N\n", input.display());
    println!(
        "{:<40} {:>8} {:>9} {:>9} {:>9} {:>8} {:>9} {:>10} {:>9} {:>10} {:>8}",
        "configuration",
        "cells",
        "seconds",
        "cells/s",
        "in MB/s",
        "cores",
        "bytes/nz",
        "peak RSS",
        "plan s",
        "finalize s",
        "kept MB"
    );
    for (what, level, repeat, tile, sort, spill, preset) in configs {
        let spec = json!({
            "input": input, "level": level, "repeat": repeat, "tile_size": tile, "sort": sort, "spill": spill,
            "preset": preset,
        });
        let out = Command::new(std::env::current_exe().unwrap())
            .env("DCT_BENCH_CHILD", spec.to_string())
            .output()
            .expect("run child");
        let line = String::from_utf8_lossy(&out.stdout);
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else {
            println!("{what}: failed: {}", String::from_utf8_lossy(&out.stderr));
            continue;
        };
        let f = |k: &str| v[k].as_f64().unwrap();
        println!(
            "{:<40} {:>8} {:>9.2} {:>9.0} {:>9.1} {:>8.2} {:>9.3} {:>7.0} MB {:>9.2} {:>10.2} {:>8.0}",
            what,
            f("cells"),
            f("seconds"),
            f("cells") / f("seconds"),
            f("input_bytes") / f("seconds") / 1e6,
            f("cpu_seconds") / f("seconds"),
            f("bytes") / f("nnz"),
            f("peak_rss") / 1e6,
            f("plan_seconds"),
            f("finalize_seconds"),
            f("spilled_bytes") / 1e6
        );
    }
}
