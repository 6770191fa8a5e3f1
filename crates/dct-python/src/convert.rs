//! The Rust converter from Python: one-machine conversion, and its split form (plan, scan parts, tile parts,
//! finalize) for engines such as Dask, Slurm arrays or Kubernetes jobs. Progress goes to a Python callable.

use std::path::PathBuf;

use dct_codec::Preset;
use dct_convert::{ConvertOptions, GeneSort, Plan, Progress, RunOptions};
use dct_input::H5adMatrix;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{convert_error, value_error};
use crate::process::{available_threads, encode_pool};
use crate::writer::{check_level, version};

/// Converter options from the keyword arguments Python passes (every one given).
fn options(output: &str, kw: &Bound<'_, PyDict>) -> PyResult<ConvertOptions> {
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        kw.get_item(k)?.ok_or_else(|| value_error(format!("missing converter option {k}")))
    };
    let level: i32 = get("level")?.extract()?;
    check_level(level)?;
    let tile_size: u64 = get("tile_size")?.extract()?;
    let n_chunks: usize = get("n_chunks")?.extract()?;
    if tile_size == 0 || n_chunks == 0 {
        return Err(value_error("tile_size and n_chunks must be at least 1"));
    }
    let sort_genes: bool = get("sort_genes")?.extract()?;
    let max_files: Option<usize> = get("sort_genes_max_files")?.extract()?;
    let layer: Option<String> = get("layer")?.extract()?;
    let raw: bool = get("raw")?.extract()?;
    let obs_columns: Option<Vec<String>> = get("obs_columns")?.extract()?;
    let preset = match kw.get_item("preset")? {
        Some(p) if !p.is_none() => p.extract::<String>()?.parse::<Preset>().map_err(value_error)?,
        _ => Preset::default(),
    };
    Ok(ConvertOptions {
        output: output.to_string(),
        tile_size,
        level,
        preset,
        n_chunks,
        matrix: match (layer, raw) {
            (Some(l), _) => H5adMatrix::Layer(l),
            (None, true) => H5adMatrix::RawX,
            (None, false) => H5adMatrix::X,
        },
        feature_type: get("feature_type")?.extract()?,
        gene_sort: match (sort_genes, max_files) {
            (false, _) => GeneSort::Keep,
            (true, Some(n)) => GeneSort::Sample(n),
            (true, None) => GeneSort::AllInputs,
        },
        write_obs: get("obs")?.extract()?,
        write_var: get("var")?.extract()?,
        obs_columns,
        obs_exclude: get("obs_exclude")?.extract()?,
        obs_tiles_per_file: get("obs_tiles_per_file")?.extract()?,
        max_categories: get("max_categories")?.extract()?,
        format_version: version(get("format_version")?.extract()?)?,
        genes: match kw.get_item("genes")? {
            Some(g) if !g.is_none() => Some(crate::corpus::gene_space(&g)?),
            _ => None,
        },
        gene_key: kw.get_item("gene_key")?.map(|k| k.extract()).transpose()?.flatten(),
    })
}

fn run_options(kw: &Bound<'_, PyDict>) -> PyResult<RunOptions> {
    let threads: Option<usize> = kw.get_item("threads")?.map(|t| t.extract()).transpose()?.flatten();
    let storage = kw.get_item("storage_options")?.and_then(|s| s.cast_into::<PyDict>().ok());
    Ok(RunOptions {
        threads: threads.unwrap_or(0),
        store: crate::dataset::store_options(storage.as_ref())?,
        ..RunOptions::default()
    })
}

/// Runs `f` on this process's pool of `threads` threads (every core by default), the GIL released, reporting
/// progress to `log` (a callable taking one dict, or `None`) at most every half second and at the end.
fn with_progress<R: Send>(
    py: Python<'_>,
    threads: usize,
    log: Option<Py<PyAny>>,
    f: impl FnOnce(&mut dyn FnMut(&Progress)) -> R + Send,
) -> PyResult<R> {
    let pool = encode_pool(if threads == 0 { available_threads() } else { threads }).map_err(value_error)?;
    let mut last = std::time::Instant::now();
    let mut report = |p: &Progress| {
        let Some(log) = &log else { return };
        let done = p.tiles_done == p.tiles_total;
        if !done && last.elapsed().as_secs_f64() < 0.5 {
            return;
        }
        last = std::time::Instant::now();
        Python::attach(|py| {
            let d = PyDict::new(py);
            let _ = d.set_item("tiles_done", p.tiles_done);
            let _ = d.set_item("tiles_total", p.tiles_total);
            let _ = d.set_item("cells_written", p.cells_written);
            let _ = d.set_item("input", p.input);
            let _ = d.set_item("seconds", p.seconds);
            // A logging callback that fails must not stop the conversion.
            let _ = log.call1(py, (d,));
        });
    };
    Ok(py.detach(|| pool.install(|| f(&mut report))))
}

/// Converts `inputs` (paths; globs expanded by the caller) into a dataset at `output` on this machine; returns the
/// manifest's JSON text.
/// The input paths that `patterns` (paths and glob patterns) name, by the converter's one rule
/// (`dct_convert::resolve_inputs`): the same for the CLI and Python.
#[pyfunction]
#[pyo3(signature = (patterns, sort = true))]
pub(crate) fn resolve_inputs(patterns: Vec<String>, sort: bool) -> PyResult<Vec<String>> {
    dct_convert::resolve_inputs(&patterns, sort).map_err(convert_error)
}

/// The natural order of two paths (-1, 0 or 1): digit runs by value, so `part2` comes before `part10`.
#[pyfunction]
pub(crate) fn natural_cmp(a: &str, b: &str) -> i32 {
    dct_convert::natural_cmp(a, b) as i32
}

#[pyfunction]
#[pyo3(signature = (inputs, output, overwrite, log, **kw))]
pub(crate) fn convert(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    output: &str,
    overwrite: bool,
    log: Option<Py<PyAny>>,
    kw: Option<Bound<'_, PyDict>>,
) -> PyResult<String> {
    let kw = kw.ok_or_else(|| value_error("missing converter options"))?;
    let opts = options(output, &kw)?;
    let run = run_options(&kw)?;
    let manifest = with_progress(py, run.threads, log, |p| dct_convert::convert(&inputs, &opts, &run, overwrite, p))?
        .map_err(convert_error)?;
    String::from_utf8(manifest.to_json_pretty()).map_err(|e| value_error(e.to_string()))
}

/// Makes the conversion plan of `inputs` into `output` and saves it at `plan_path` (reusing scan files of
/// `scan_part` runs); with `overwrite`, clears what the output holds first. Returns `(n_cells, n_genes, n_tiles)`.
#[pyfunction]
#[pyo3(signature = (inputs, output, plan_path, overwrite = false, **kw))]
pub(crate) fn make_plan(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    output: &str,
    plan_path: PathBuf,
    overwrite: bool,
    kw: Option<Bound<'_, PyDict>>,
) -> PyResult<(u64, u64, usize)> {
    let kw = kw.ok_or_else(|| value_error("missing converter options"))?;
    let opts = options(output, &kw)?;
    let run = run_options(&kw)?;
    let plan = with_progress(py, run.threads, None, |_| -> Result<Plan, dct_convert::ConvertError> {
        let dir = dct_convert::scan_dir(&plan_path);
        let plan = dct_convert::make_plan_with_scans(&inputs, &opts, &dir, |_| {})?;
        if overwrite {
            dct_convert::clear_output(&plan.output, &run.store)?;
        }
        plan.save(&plan_path)?;
        Ok(plan)
    })?
    .map_err(convert_error)?;
    Ok((plan.n_cells, plan.n_genes, plan.n_tiles))
}

/// Scans part `part` of `parts` of the inputs (the plan's first pass), writing scan files beside `plan_path`;
/// returns `(scanned, already scanned)`.
#[pyfunction]
#[pyo3(signature = (inputs, plan_path, part, parts, **kw))]
pub(crate) fn scan_part(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    plan_path: PathBuf,
    part: usize,
    parts: usize,
    kw: Option<Bound<'_, PyDict>>,
) -> PyResult<(usize, usize)> {
    let kw = kw.ok_or_else(|| value_error("missing converter options"))?;
    let opts = options("", &kw)?;
    let threads = run_options(&kw)?.threads;
    let dir = dct_convert::scan_dir(&plan_path);
    let report =
        with_progress(py, threads, None, |_| dct_convert::scan_inputs_part(&inputs, &opts, &dir, part, parts))?
            .map_err(convert_error)?;
    Ok((report.scanned, report.kept))
}

/// Writes part `part` of `parts` of the plan's tiles (complete ones are kept); returns `(written, skipped)`.
#[pyfunction]
#[pyo3(signature = (plan_path, part, parts, log = None, **kw))]
pub(crate) fn run_part(
    py: Python<'_>,
    plan_path: PathBuf,
    part: usize,
    parts: usize,
    log: Option<Py<PyAny>>,
    kw: Option<Bound<'_, PyDict>>,
) -> PyResult<(usize, usize)> {
    let plan = Plan::load(&plan_path).map_err(convert_error)?;
    let run = match &kw {
        Some(kw) => run_options(kw)?,
        None => RunOptions::default(),
    };
    let report = with_progress(py, run.threads, log, |p| dct_convert::run_part(&plan, part, parts, &run, p))?
        .map_err(convert_error)?;
    Ok((report.written, report.skipped))
}

/// Checks every tile of the plan and writes the side files, the obs and, last, the manifest; returns its JSON
/// text.
#[pyfunction]
#[pyo3(signature = (plan_path, **kw))]
pub(crate) fn finalize(py: Python<'_>, plan_path: PathBuf, kw: Option<Bound<'_, PyDict>>) -> PyResult<String> {
    let plan = Plan::load(&plan_path).map_err(convert_error)?;
    let run = match &kw {
        Some(kw) => run_options(kw)?,
        None => RunOptions::default(),
    };
    let manifest =
        with_progress(py, run.threads, None, |_| dct_convert::finalize(&plan, &run))?.map_err(convert_error)?;
    String::from_utf8(manifest.to_json_pretty()).map_err(|e| value_error(e.to_string()))
}

/// The inputs of a plan file, in conversion order, and its output.
#[pyfunction]
pub(crate) fn plan_info(plan_path: PathBuf) -> PyResult<(Vec<String>, String, usize)> {
    let plan = Plan::load(&plan_path).map_err(convert_error)?;
    Ok((plan.inputs.iter().map(|i| i.path.clone()).collect(), plan.output.clone(), plan.n_tiles))
}

/// Writes the chosen cells and genes of `source` as a new dataset at `output` (see `dct_convert::subset`), the GIL
/// released; returns the new manifest's JSON text.
#[pyfunction]
#[pyo3(signature = (source, output, cells, conditions, genes, gene_key, tile_size, level, overwrite, storage_options,
                    listed_gene_order=false, skip_missing_genes=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn subset(
    py: Python<'_>,
    source: &str,
    output: &str,
    cells: Option<Vec<u64>>,
    conditions: Vec<String>,
    genes: Option<Vec<String>>,
    gene_key: Option<String>,
    tile_size: Option<u64>,
    level: i32,
    overwrite: bool,
    storage_options: Option<Bound<'_, PyDict>>,
    listed_gene_order: bool,
    skip_missing_genes: bool,
) -> PyResult<String> {
    let options = dct_convert::SubsetOptions {
        cells,
        conditions,
        genes,
        listed_gene_order,
        skip_missing_genes,
        gene_key: gene_key.map_or(dct_corpus::GeneKey::VarNames, dct_corpus::GeneKey::Column),
        tile_size,
        level,
        overwrite,
        store: crate::dataset::store_options(storage_options.as_ref())?,
        ..dct_convert::SubsetOptions::default()
    };
    let store = options.store.clone();
    let manifest = py
        .detach(|| -> Result<_, dct_convert::ConvertError> {
            dct_convert::subset(source, output, &options)?;
            let read = dct_dataset::ReadOptions { store, ..dct_dataset::ReadOptions::default() };
            let written = dct_dataset::Dataset::open(output, read)
                .map_err(|e| dct_convert::ConvertError::Output(format!("{output}: {e}")))?;
            Ok(written.manifest().to_json_pretty())
        })
        .map_err(convert_error)?;
    String::from_utf8(manifest).map_err(|e| value_error(e.to_string()))
}

/// Writes each of `members` into `output` with its genes in the vocabulary's order (see
/// `dct_convert::align_members`), the GIL released; returns `(member, output, already_done)` for each.
#[pyfunction]
#[pyo3(signature = (members, output, genes, gene_key, level, overwrite, storage_options))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn align_corpus(
    py: Python<'_>,
    members: Vec<String>,
    output: &str,
    genes: &Bound<'_, PyAny>,
    gene_key: Option<String>,
    level: i32,
    overwrite: bool,
    storage_options: Option<Bound<'_, PyDict>>,
) -> PyResult<Vec<(String, String, bool)>> {
    let options = dct_convert::AlignOptions {
        genes: crate::corpus::gene_space(genes)?,
        gene_key: gene_key.map_or(dct_corpus::GeneKey::VarNames, dct_corpus::GeneKey::Column),
        level,
        overwrite,
        store: crate::dataset::store_options(storage_options.as_ref())?,
        ..dct_convert::AlignOptions::default()
    };
    let written = py.detach(|| dct_convert::align_members(&members, output, &options)).map_err(convert_error)?;
    Ok(written.into_iter().map(|w| (w.source, w.output, w.report.already_done)).collect())
}

/// Appends the cells of `inputs` to the dataset at `dataset` (see `dct_convert::append`), the GIL released; returns
/// the report as JSON text.
#[pyfunction]
#[pyo3(signature = (dataset, inputs, gene_key, drop_new_genes, allow_repeat, level, matrix, obs_exclude, threads, storage_options))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn append(
    py: Python<'_>,
    dataset: &str,
    inputs: Vec<String>,
    gene_key: Option<String>,
    drop_new_genes: bool,
    allow_repeat: bool,
    level: Option<i32>,
    matrix: &str,
    obs_exclude: Vec<String>,
    threads: usize,
    storage_options: Option<Bound<'_, PyDict>>,
) -> PyResult<String> {
    let matrix: dct_input::H5adMatrix = matrix.parse().map_err(value_error)?;
    let options = dct_convert::AppendOptions {
        gene_key,
        drop_new_genes,
        allow_repeat,
        level,
        matrix,
        obs_exclude,
        threads,
        store: crate::dataset::store_options(storage_options.as_ref())?,
        ..dct_convert::AppendOptions::default()
    };
    let paths: Vec<std::path::PathBuf> = inputs.into_iter().map(std::path::PathBuf::from).collect();
    let r = py.detach(|| dct_convert::append(dataset, &paths, &options)).map_err(convert_error)?;
    Ok(r.to_json().to_string())
}

/// Merges the datasets `sources` into a new one at `output` (see `dct_convert::merge`), the GIL released; returns
/// the report as JSON text.
#[pyfunction]
#[pyo3(signature = (sources, output, level, tails_last, overwrite, storage_options))]
pub(crate) fn merge(
    py: Python<'_>,
    sources: Vec<String>,
    output: &str,
    level: Option<i32>,
    tails_last: bool,
    overwrite: bool,
    storage_options: Option<Bound<'_, PyDict>>,
) -> PyResult<String> {
    let options = dct_convert::MergeOptions {
        level,
        tails_last,
        overwrite,
        store: crate::dataset::store_options(storage_options.as_ref())?,
        ..dct_convert::MergeOptions::default()
    };
    let r = py.detach(|| dct_convert::merge(&sources, output, &options)).map_err(convert_error)?;
    let report = serde_json::json!({"n_cells": r.n_cells, "n_tiles": r.n_tiles, "tiles_copied": r.tiles_copied,
                                    "tiles_encoded": r.tiles_encoded, "already_done": r.already_done});
    Ok(report.to_string())
}
