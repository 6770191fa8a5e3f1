//! Writing from Python: [`encode_tile`] (one tile to bytes) and the dataset writer behind
//! `deltacells.DatasetWriter` (tiles one at a time, obs shards as they fill, side files, the manifest last).
//!
//! Matrices arrive as CSR arrays (Python turns any scipy or dense matrix into them): `indptr` int32 or int64,
//! `indices` int32 or int64, `data` of any integer or float dtype holding counts.

use bytes::Bytes;
use dct_codec::{CanonicalCsr, CountLike, CsrMatrix, EncodeOptions, encode_canonical};
use dct_dataset::{DatasetWriter, WriterOptions};
use dct_format::Version;
use dct_obs::{ObsSchema, ObsWriteOptions};
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::{dataset_error, encode_error, obs_error, value_error};
use crate::process::{ProcessBound, available_threads, encode_pool};

/// The format version numbered `n` (1 or 2).
pub(crate) fn version(n: u32) -> PyResult<Version> {
    Version::from_number(n).ok_or_else(|| value_error(format!("format_version must be 1 or 2, not {n}")))
}

/// Checks a zstd level (the range zstd accepts).
pub(crate) fn check_level(level: i32) -> PyResult<()> {
    if (-7..=22).contains(&level) {
        Ok(())
    } else {
        Err(value_error(format!("invalid zstd compression level {level}: zstd accepts -7..=22 (19 is the default)")))
    }
}

/// Canonical rows of a CSR matrix given as numpy arrays, columns renumbered by `new_column` (stored column of each
/// source column) when given; the caller's arrays are not modified.
fn canonical(
    indptr: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    n_rows: usize,
    n_cols: u64,
    new_column: Option<&[u32]>,
) -> PyResult<CanonicalCsr> {
    let py = indptr.py();
    let indptr: Vec<i64> = match indptr.extract::<PyReadonlyArray1<'_, i64>>() {
        Ok(a) => a.as_slice()?.to_vec(),
        Err(_) => indptr.extract::<PyReadonlyArray1<'_, i32>>()?.as_slice()?.iter().map(|&v| i64::from(v)).collect(),
    };
    let mut cols: Vec<i64> = match indices.extract::<PyReadonlyArray1<'_, i64>>() {
        Ok(a) => a.as_slice()?.to_vec(),
        Err(_) => indices.extract::<PyReadonlyArray1<'_, i32>>()?.as_slice()?.iter().map(|&v| i64::from(v)).collect(),
    };
    if let Some(map) = new_column {
        for c in &mut cols {
            // Out-of-range columns are left for the canonicalizer to report.
            if let Some(&m) = usize::try_from(*c).ok().and_then(|i| map.get(i)) {
                *c = i64::from(m);
            }
        }
    }
    fn build<V: CountLike>(
        py: Python<'_>,
        indptr: &[i64],
        cols: &[i64],
        values: &[V],
        n_rows: usize,
        n_cols: u64,
    ) -> PyResult<CanonicalCsr> {
        let m = CsrMatrix { n_rows, n_cols, indptr, indices: cols, values };
        py.detach(|| CanonicalCsr::from_csr(&m)).map_err(|e| encode_error(&e))
    }
    macro_rules! try_values {
        ($($t:ty),*) => {$(
            if let Ok(a) = data.extract::<PyReadonlyArray1<'_, $t>>() {
                return build(py, &indptr, &cols, a.as_slice()?, n_rows, n_cols);
            }
        )*};
    }
    try_values!(f32, f64, i64, i32, u32, u16, u8, i16, i8, u64);
    Err(value_error(format!(
        "unsupported value dtype {}: counts must be integers or floats holding integers",
        data.getattr("dtype").map_or_else(|_| "?".to_string(), |d| d.to_string())
    )))
}

/// Encodes one tile (chunks compressed in parallel, the GIL released); the bytes do not depend on `threads`.
#[pyfunction]
#[pyo3(signature = (indptr, indices, data, n_rows, n_cols, n_chunks, level, threads, format_version))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_tile<'py>(
    py: Python<'py>,
    indptr: Bound<'py, PyAny>,
    indices: Bound<'py, PyAny>,
    data: Bound<'py, PyAny>,
    n_rows: usize,
    n_cols: u64,
    n_chunks: usize,
    level: i32,
    threads: Option<usize>,
    format_version: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    if n_chunks == 0 {
        return Err(value_error("n_chunks must be at least 1"));
    }
    check_level(level)?;
    let version = version(format_version)?;
    let csr = canonical(&indptr, &indices, &data, n_rows, n_cols, None)?;
    let opts = EncodeOptions { n_chunks, level, version, ..EncodeOptions::default() };
    let pool = encode_pool(threads.unwrap_or_else(|| available_threads().min(8))).map_err(value_error)?;
    let blob = py.detach(|| pool.install(|| encode_canonical(&csr, &opts))).map_err(|e| encode_error(&e))?;
    Ok(PyBytes::new(py, &blob))
}

/// Checks that `order` is a permutation of `0..order.len()`.
#[pyfunction]
pub(crate) fn check_gene_order(order: Vec<i64>) -> PyResult<()> {
    let n = order.len();
    let mut seen = vec![false; n];
    for &g in &order {
        match usize::try_from(g).ok().filter(|&g| g < n) {
            Some(g) if !std::mem::replace(&mut seen[g], true) => {}
            _ => return Err(value_error("gene_order must be a permutation of range(n_genes)")),
        }
    }
    Ok(())
}

/// The open writer.
struct Writing {
    writer: DatasetWriter,
    /// Whether the dataset has obs (every tile then comes with its frame).
    has_obs: bool,
    /// Stored column of each source column, once a gene order is set.
    new_column: Option<Vec<u32>>,
}

/// A dataset being written (bound to the process that made it).
#[pyclass(module = "deltacells._core", name = "DatasetWriter")]
pub(crate) struct PyDatasetWriter {
    state: ProcessBound<std::sync::Mutex<Option<Writing>>>,
    n_genes: u64,
}

impl PyDatasetWriter {
    fn with<R>(&self, f: impl FnOnce(&mut Writing) -> PyResult<R>) -> PyResult<R> {
        let state = self.state.get().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("this writer was made by the parent of this (forked) process")
        })?;
        let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
        let w = guard.as_mut().ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("writer is closed"))?;
        f(w)
    }
}

#[pymethods]
impl PyDatasetWriter {
    /// Starts a dataset at `url` (refused if it holds files, unless `overwrite`).
    #[new]
    #[pyo3(signature = (url, n_genes, tile_size, n_chunks, level, threads, metadata_json, overwrite, format_version, obs_schema_json, obs_tiles_per_file, obs_compression_level, storage_options = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: String,
        n_genes: u64,
        tile_size: u64,
        n_chunks: usize,
        level: i32,
        threads: Option<usize>,
        metadata_json: &str,
        overwrite: bool,
        format_version: u32,
        obs_schema_json: Option<String>,
        obs_tiles_per_file: u64,
        obs_compression_level: i32,
        storage_options: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        check_level(level)?;
        let metadata: serde_json::Value =
            serde_json::from_str(metadata_json).map_err(|e| value_error(format!("metadata: {e}")))?;
        let obs_schema = obs_schema_json
            .map(|text| ObsSchema::parse(text.as_bytes(), "obs_schema").map_err(obs_error))
            .transpose()?;
        let options = WriterOptions {
            tile_size,
            n_chunks,
            zstd_level: level,
            version: version(format_version)?,
            overwrite,
            encode_threads: threads.unwrap_or(0),
            metadata,
            store: crate::dataset::store_options(storage_options.as_ref())?,
            ..WriterOptions::new(n_genes)
        };
        let has_obs = obs_schema.is_some();
        let writer = py
            .detach(|| {
                let mut writer = DatasetWriter::create(&url, options)?;
                if let Some(schema) = obs_schema {
                    let options =
                        ObsWriteOptions { tiles_per_file: obs_tiles_per_file, zstd_level: obs_compression_level };
                    writer.set_obs_schema(schema, &options)?;
                }
                Ok(writer)
            })
            .map_err(dataset_error)?;
        let writing = Writing { writer, has_obs, new_column: None };
        Ok(PyDatasetWriter { state: ProcessBound::new(std::sync::Mutex::new(Some(writing))), n_genes })
    }

    /// Records the gene order (stored column `j` is source column `order[j]`); tiles added afterwards are
    /// renumbered by it.
    fn set_gene_order(&self, order: Vec<i32>) -> PyResult<()> {
        let mut new_column = vec![0u32; order.len()];
        for (j, &g) in order.iter().enumerate() {
            if let Some(slot) = usize::try_from(g).ok().and_then(|g| new_column.get_mut(g)) {
                *slot = j as u32;
            }
        }
        self.with(|w| {
            w.writer.set_gene_order(order).map_err(dataset_error)?;
            w.new_column = Some(new_column);
            Ok(())
        })
    }

    /// Records the gene names, in stored column order.
    fn set_var_names(&self, names: Vec<String>) -> PyResult<()> {
        self.with(|w| w.writer.set_var_names(names).map_err(dataset_error))
    }

    /// Stores `var.parquet` (bytes from `encode_var_table`) with the dataset.
    fn put_var_table(&self, data: Vec<u8>) -> PyResult<()> {
        self.with(|w| w.writer.put_file(dct_obs::VAR_TABLE_NAME, Bytes::from(data)).map_err(dataset_error))
    }

    /// Adds the next tile (CSR arrays of `n_rows` cells in source column order) and its obs frame; returns its
    /// index. Everything is checked before anything is stored: a refused tile changes nothing.
    #[pyo3(signature = (indptr, indices, data, n_rows, obs = None))]
    fn add_tile(
        &self,
        py: Python<'_>,
        indptr: Bound<'_, PyAny>,
        indices: Bound<'_, PyAny>,
        data: Bound<'_, PyAny>,
        n_rows: usize,
        obs: Option<Bound<'_, PyList>>,
    ) -> PyResult<usize> {
        let frame = obs.map(|f| crate::obs::tile_obs(&f)).transpose()?;
        let n_genes = self.n_genes;
        self.with(|w| {
            let csr = canonical(&indptr, &indices, &data, n_rows, n_genes, w.new_column.as_deref())?;
            let writer = &mut w.writer;
            match (w.has_obs, frame) {
                (true, Some(frame)) => py.detach(|| writer.push_tile_with_obs(csr, &frame)),
                (false, None) => py.detach(|| writer.push_tile(csr)),
                _ => {
                    return Err(value_error(
                        "obs must be given for every tile if (and only if) the writer was created with an obs_schema",
                    ));
                }
            }
            .map_err(dataset_error)
        })
    }

    /// Cells added so far.
    fn n_cells(&self) -> PyResult<u64> {
        self.with(|w| Ok(w.writer.n_cells()))
    }

    /// Stores the last obs shard, `obs/schema.json`, the side files and then `manifest.json`; returns the
    /// manifest's JSON text. The writer is closed afterwards, whatever happens.
    fn close(&self, py: Python<'_>) -> PyResult<String> {
        let state = self.state.get().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("this writer was made by the parent of this (forked) process")
        })?;
        let taken = {
            let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
            match guard.as_ref() {
                None => return Err(pyo3::exceptions::PyRuntimeError::new_err("writer is already closed")),
                // Still open: the caller may add tiles and close again.
                Some(w) if w.writer.n_tiles() == 0 => return Err(value_error("no tiles were written")),
                Some(_) => guard.take().expect("checked above"),
            }
        };
        let Writing { writer, .. } = taken;
        let manifest = py.detach(move || writer.finish()).map_err(dataset_error)?;
        String::from_utf8(manifest.to_json_pretty()).map_err(|e| value_error(e.to_string()))
    }

    /// Whether the writer is still open.
    fn is_open(&self) -> bool {
        self.state.get().is_some_and(|s| s.lock().unwrap_or_else(|e| e.into_inner()).is_some())
    }
}
