//! The benchmark section: what `deltacells bench --json` measured on this dataset, and its batches over time.

use serde_json::Value;

use crate::ReportError;
use crate::html::Page;
use crate::plots;

/// Keys every `deltacells bench --json` output has.
const REQUIRED: [&str; 4] = ["tile_fetch_seconds", "tile_decode_seconds", "batch_cells_per_second", "batch_seconds"];

/// Whether `bench` is a loader's timeline (Python's `deltacells.Timeline`) rather than `deltacells bench`'s output.
fn from_loader(bench: &Value) -> bool {
    bench.get("source").and_then(Value::as_str) == Some("loader")
}

/// Refuses JSON that is neither a `deltacells bench --json` output nor a loader's timeline (`batch_timeline`, as
/// `deltacells.Timeline` saves it), naming what it lacks.
pub(crate) fn check(bench: &Value) -> Result<(), ReportError> {
    if let Some(rows) = bench.get("batch_timeline") {
        let row_ok = |r: &Value| r.as_array().is_some_and(|r| r.len() >= 3 && r[..3].iter().all(Value::is_number));
        if !rows.as_array().is_some_and(|rows| rows.iter().all(row_ok)) {
            return Err(ReportError::Bench(
                "have a batch_timeline that is not a list of [end seconds, seconds, cells] rows".into(),
            ));
        }
    }
    if from_loader(bench) {
        return match bench.get("batch_timeline") {
            Some(Value::Array(_)) => Ok(()),
            _ => Err(ReportError::Bench("lack batch_timeline: save a loader's with deltacells.Timeline".into())),
        };
    }
    let missing: Vec<&str> =
        REQUIRED.iter().copied().filter(|k| !bench.get(*k).is_some_and(Value::is_number)).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ReportError::Bench(format!(
            "lack {}: give the output of `deltacells bench DATASET --json` (or a loader's timeline saved by \
             deltacells.Timeline)",
            missing.join(", ")
        )))
    }
}

/// `(end of batch in seconds, its seconds, its cells)` of the timed read, if the output has them.
fn timeline(bench: &Value) -> Vec<(f64, f64, f64)> {
    let Some(rows) = bench.get("batch_timeline").and_then(Value::as_array) else { return Vec::new() };
    rows.iter()
        .filter_map(|r| {
            let r = r.as_array()?;
            Some((r.first()?.as_f64()?, r.get(1)?.as_f64()?, r.get(2)?.as_f64()?))
        })
        .collect()
}

/// Adds the section.
pub(crate) fn section(page: &mut Page, bench: &Value) {
    page.section("bench", "Reading it");
    if from_loader(bench) {
        page.note("A loader's batches as the loop over it received them (deltacells.Timeline).");
    }
    let f = |k: &str| bench.get(k).cloned().unwrap_or(Value::Null);
    page.facts(&[
        ("bench.dataset", "measured on", f("dataset")),
        ("bench.batch_cells_per_second", "cells per second (batches)", f("batch_cells_per_second")),
        ("bench.decode_cells_per_second", "cells per second (decode alone)", f("decode_cells_per_second")),
        ("bench.stall_seconds", "seconds waiting for tiles", f("stall_seconds")),
        ("bench.batch_seconds", "seconds of the read", f("batch_seconds")),
        ("bench.pattern", "order", f("pattern")),
        ("bench.batch_size", "cells per batch", f("batch_size")),
        ("bench.threads", "decode threads", f("threads")),
    ]);
    let us = |k: &str| (bench.get(k).and_then(Value::as_f64).unwrap_or(0.0) * 1e6).round() as u64;
    let per_tile = vec![
        ("fetch".to_string(), us("tile_fetch_seconds")),
        ("decode".to_string(), us("tile_decode_seconds")),
        ("reader: fetch".to_string(), us("tile_reader_fetch_seconds")),
        ("reader: checks".to_string(), us("tile_reader_checks_seconds")),
        ("reader: planes".to_string(), us("tile_reader_planes_seconds")),
        ("reader: rows".to_string(), us("tile_reader_rows_seconds")),
    ];
    let mut svgs =
        if from_loader(bench) { Vec::new() } else { vec![plots::bars("One tile, microseconds", "µs", &per_tile)] };
    let batches = timeline(bench);
    if batches.is_empty() {
        page.note("No batch timeline in these results (older `deltacells bench`): totals only.");
    } else {
        let rate: Vec<(f64, f64)> = batches.iter().map(|&(t, s, c)| (t, c / s.max(1e-9))).collect();
        let latency: Vec<(f64, f64)> = batches.iter().map(|&(t, s, _)| (t, s * 1e3)).collect();
        svgs.push(plots::lines("Throughput", "seconds", "cells per second", &[("batch", rate)], false));
        svgs.push(plots::lines("Batch time (stalls show as peaks)", "seconds", "ms", &[("batch", latency)], false));
    }
    page.plots(&svgs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_bench_output_is_taken() {
        let ok = json!({"tile_fetch_seconds": 0.1, "tile_decode_seconds": 0.2, "batch_cells_per_second": 9.0,
                        "batch_seconds": 1.0, "batch_timeline": [[0.5, 0.5, 10], [1.0, 0.5, 10]]});
        assert!(check(&ok).is_ok());
        assert_eq!(timeline(&ok), [(0.5, 0.5, 10.0), (1.0, 0.5, 10.0)]);
        assert!(check(&json!({"source": "loader", "batch_timeline": [[0.1, 0.1, 5]]})).is_ok());
        assert!(check(&json!({"source": "loader"})).is_err());
        let e = check(&json!({"tile_fetch_seconds": 1})).unwrap_err().to_string();
        assert!(e.contains("tile_decode_seconds") && e.contains("deltacells bench"), "{e}");
        for timeline in [json!("x"), json!([[1, 2]]), json!([[1, "a", 3]]), json!([1, 2, 3])] {
            let mut bad = ok.clone();
            bad["batch_timeline"] = timeline.clone();
            let e = check(&bad).expect_err("a malformed timeline").to_string();
            assert!(e.contains("[end seconds, seconds, cells]"), "{timeline}: {e}");
        }
    }
}
