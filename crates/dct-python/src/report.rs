//! `Dataset.report()`: the page of `deltacells report`, made by `dct_report` with the GIL released.

use pyo3::prelude::*;

use crate::dataset::PyDataset;
use crate::errors::{format_error, value_error};

/// The report of `dataset` (see `dct_report::report`): `(html, facts as JSON text)`. `bench` is the JSON text of
/// `deltacells bench --json`; `cache_dir` is where obs columns are fetched. A corrupt sampled tile is a
/// `FormatError`; benchmark JSON that is not `deltacells bench`'s a `ValueError`.
#[pyfunction]
#[pyo3(signature = (dataset, sample_tiles, bench, title, cache_dir))]
pub(crate) fn dataset_report(
    py: Python<'_>,
    dataset: PyRef<'_, PyDataset>,
    sample_tiles: usize,
    bench: Option<String>,
    title: Option<String>,
    cache_dir: Option<std::path::PathBuf>,
) -> PyResult<(String, String)> {
    let ds = dataset.dataset()?.clone();
    let bench = bench
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| value_error(format!("bench is not JSON ({e}): give the output of `deltacells bench --json`")))?;
    let options = dct_report::ReportOptions {
        sample_tiles: sample_tiles.max(1),
        obs: dct_dataset::dct_obs::ObsOptions { cache_dir, ..Default::default() },
        bench,
        title,
    };
    let made = py.detach(|| dct_report::report(&ds, &options));
    let report = made.map_err(|e| match e {
        dct_report::ReportError::Bench(_) => value_error(e.to_string()),
        dct_report::ReportError::Tile { .. } => format_error(e.to_string()),
        other => pyo3::exceptions::PyRuntimeError::new_err(other.to_string()),
    })?;
    Ok((report.html, report.facts.to_string()))
}
