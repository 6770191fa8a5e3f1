//! A dataset opened for reading, from Python: the Rust reader ([`dct_dataset::Dataset`]) behind
//! `deltacells.DeltaCellsDataset`. Every call that fetches, decodes or gathers releases the GIL, so one dataset
//! serves many Python threads at once.

use std::sync::Arc;

use dct_dataset::{Dataset, HeldBatches, ReadOptions, StoreOptions, TileBudget};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::arrays::{Values, cell_ids, out_buffers, owned, writable};
use crate::backend::PyBackend;
use crate::errors::{dataset_error, index_error, value_error};
use crate::obs::PyObs;
use crate::process::ProcessBound;
use crate::tile::PyTile;

/// The Rust reader of one dataset (bound to the process that opened it: a forked child opens its own).
#[pyclass(module = "deltacells._core", name = "Dataset", frozen)]
pub(crate) struct PyDataset {
    inner: ProcessBound<Arc<Dataset>>,
}

/// Threads readers run on (an I/O runtime and a decode pool), shared by the readers opened on them: the members
/// of a corpus (bound to the process that made them: a forked child makes its own).
#[pyclass(module = "deltacells._core", name = "ReaderThreads", frozen)]
pub(crate) struct PyReaderThreads {
    inner: ProcessBound<dct_dataset::ReaderThreads>,
}

#[pymethods]
impl PyReaderThreads {
    /// `io_threads` threads for requests and `decode_threads` (0: the default) for decoding.
    #[new]
    fn new(io_threads: usize, decode_threads: usize) -> PyResult<Self> {
        let threads = dct_dataset::ReaderThreads::new(io_threads, decode_threads).map_err(dataset_error)?;
        Ok(PyReaderThreads { inner: ProcessBound::new(threads) })
    }
}

/// `(key, value)` store options from a Python mapping (`None`: none).
pub(crate) fn store_options(options: Option<&Bound<'_, PyDict>>) -> PyResult<StoreOptions> {
    let mut store = StoreOptions::default();
    if let Some(d) = options {
        for (k, v) in d.iter() {
            store.config.push((k.str()?.to_string(), v.str()?.to_string()));
        }
    }
    Ok(store)
}

impl PyDataset {
    /// The reader (refused in a forked child of the process that opened it).
    pub(crate) fn dataset(&self) -> PyResult<&Arc<Dataset>> {
        self.get()
    }

    fn get(&self) -> PyResult<&Arc<Dataset>> {
        self.inner.get().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err(
                "this dataset was opened by the parent of this (forked) process; reopen it here",
            )
        })
    }
}

/// The reader's settings from the arguments the Python wrapper passes.
/// Reader counters as the Python API names them, summed over `stats` (one reader's, or a corpus's members').
pub(crate) fn stats_dict<'py>(py: Python<'py>, stats: &[dct_dataset::ReadStats]) -> PyResult<Bound<'py, PyDict>> {
    let sum = |f: fn(&dct_dataset::ReadStats) -> u64| stats.iter().map(f).sum::<u64>();
    let secs = |f: fn(&dct_dataset::ReadStats) -> std::time::Duration| {
        stats.iter().map(f).sum::<std::time::Duration>().as_secs_f64()
    };
    let d = PyDict::new(py);
    let counts = [
        ("tiles_fetched", sum(|s| s.tiles_fetched)),
        ("tiles_decoded", sum(|s| s.tiles_decoded)),
        ("tile_cache_hits", sum(|s| s.inflight_joins)),
        ("decoded_cache_hits", sum(|s| s.cache_hits)),
        ("bytes_fetched", sum(|s| s.bytes_fetched)),
        ("failed_loads", sum(|s| s.failed_loads)),
        ("cache_misses", sum(|s| s.cache_misses)),
        ("prefetched", sum(|s| s.prefetched)),
    ];
    let times = [
        ("fetch_seconds", secs(|s| s.fetch_time)),
        ("stall_seconds", secs(|s| s.stall_time)),
        ("decode_seconds", secs(|s| s.decode_time)),
    ];
    for (key, n) in counts {
        d.set_item(key, n)?;
    }
    for (key, t) in times {
        d.set_item(key, t)?;
    }
    Ok(d)
}

pub(crate) fn read_options(
    max_cached_tiles: usize,
    max_prefetch_tiles: usize,
    io_threads: usize,
    decode_threads: usize,
    verify: bool,
) -> ReadOptions {
    ReadOptions {
        max_cached_tiles,
        max_prefetch_tiles,
        io_threads,
        decode_threads,
        verify_crc: verify,
        ..ReadOptions::default()
    }
}

#[pymethods]
impl PyDataset {
    /// Opens the dataset at `url` (a path or store URL), or read through the Python `backend` object; reads and
    /// validates the manifest (the GIL released). With `threads` (made in this process), on them rather than
    /// threads of its own (`io_threads` and `decode_threads` then unused).
    #[new]
    #[pyo3(signature = (url, backend, max_cached_tiles, max_prefetch_tiles, io_threads, decode_threads, verify, storage_options = None, threads = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: Option<String>,
        backend: Option<Bound<'_, PyAny>>,
        max_cached_tiles: usize,
        max_prefetch_tiles: usize,
        io_threads: usize,
        decode_threads: usize,
        verify: bool,
        storage_options: Option<Bound<'_, PyDict>>,
        threads: Option<PyRef<'_, PyReaderThreads>>,
    ) -> PyResult<Self> {
        let options = ReadOptions {
            store: store_options(storage_options.as_ref())?,
            ..read_options(max_cached_tiles, max_prefetch_tiles, io_threads, decode_threads, verify)
        };
        let sharing = match threads {
            Some(t) => Some(t.inner.get().cloned().ok_or_else(|| {
                pyo3::exceptions::PyRuntimeError::new_err("these reader threads were made by another process")
            })?),
            None => None,
        };
        let opened = match (url, backend) {
            (Some(url), None) => py.detach(|| match &sharing {
                Some(threads) => Dataset::open_on(&url, options, threads),
                None => Dataset::open(&url, options),
            }),
            (None, Some(b)) => {
                let store = dct_store::Store::from_source(Arc::new(PyBackend::new(&b)?), &options.store);
                py.detach(|| match &sharing {
                    Some(threads) => Dataset::open_store_on(store, options, threads),
                    None => Dataset::open_store(store, options),
                })
            }
            _ => return Err(value_error("give a URL or a backend")),
        };
        Ok(PyDataset { inner: ProcessBound::new(Arc::new(opened.map_err(dataset_error)?)) })
    }

    /// Another reader of the same dataset with these settings, on the manifest already read: no request.
    fn reopened(
        &self,
        py: Python<'_>,
        max_cached_tiles: usize,
        max_prefetch_tiles: usize,
        io_threads: usize,
        decode_threads: usize,
        verify: bool,
    ) -> PyResult<Self> {
        let options = read_options(max_cached_tiles, max_prefetch_tiles, io_threads, decode_threads, verify);
        let this = self.get()?.clone();
        let opened = py.detach(|| this.reopened(options)).map_err(dataset_error)?;
        Ok(PyDataset { inner: ProcessBound::new(Arc::new(opened)) })
    }

    /// `(max_cached_tiles, max_prefetch_tiles)` that keep a reader of this dataset serving windows of `window`
    /// tiles, and a loader holding `held` batches of `batch_cells` cells (dense ones of `dense_genes` genes, else
    /// sparse), within `budget` bytes (the reader's memory model, `dct_dataset::TileBudget::split_beside`);
    /// `ValueError` if the epoch plan's windows cannot fit the budget (`TileBudget::check_plan`).
    #[pyo3(signature = (budget, window, batch_cells = 0, held = 0, dense_genes = 0))]
    fn budget_split(
        &self,
        budget: u64,
        window: usize,
        batch_cells: u64,
        held: u64,
        dense_genes: u64,
    ) -> PyResult<(usize, usize)> {
        let batches = HeldBatches { cells: batch_cells, held, dense_genes };
        let ds = self.get()?;
        let manifest = ds.manifest();
        TileBudget::check_plan(budget, window, &manifest.tile_cells)
            .map_err(|m| value_error(format!("{}: {m}", ds.url())))?;
        let split = TileBudget::split_beside(budget, window, batches, manifest);
        Ok((split.cached, split.ahead))
    }

    /// The manifest as its JSON text.
    fn manifest_json(&self) -> PyResult<String> {
        let json = self.get()?.manifest().to_json_pretty();
        String::from_utf8(json).map_err(|e| value_error(e.to_string()))
    }

    /// Where the dataset is.
    fn url(&self) -> PyResult<String> {
        Ok(self.get()?.url().to_string())
    }

    /// Cumulative cells per tile (int64).
    fn limits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        Ok(owned(py, self.get()?.limits().iter().map(|&l| l as i64).collect()))
    }

    /// The rows of `indices` (int64 global cell indices, any order, repeats allowed), the GIL released. Without
    /// output buffers: `(indptr, indices, values)`, arrays owning the Rust buffers. With both: fills their first
    /// `nnz` elements and returns `(indptr, nnz)`.
    #[pyo3(signature = (indices, values, out_indices = None, out_values = None))]
    fn get_batch<'py>(
        &self,
        py: Python<'py>,
        indices: PyReadonlyArray1<'py, i64>,
        values: &str,
        out_indices: Option<Bound<'py, PyAny>>,
        out_values: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let ds = self.get()?.clone();
        let cells = cell_ids(&indices, ds.n_cells())?;
        drop(indices);
        match Values::parse(values)? {
            Values::Float32 => batch_as::<f32>(py, &ds, &cells, out_indices, out_values, "float32"),
            Values::Int32 => batch_as::<i32>(py, &ds, &cells, out_indices, out_values, "int32"),
        }
    }

    /// The rows of `indices` read into the first of `slots` (uint8 arrays: slots' memory past their headers) that
    /// holds them, planned once, the GIL released: `(slot, nnz, used)`; `slot` is -1 (nothing written) when none
    /// does and the batch needs a slot of `used` bytes.
    fn fill_slot(
        &self,
        py: Python<'_>,
        indices: PyReadonlyArray1<'_, i64>,
        values: &str,
        slots: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<(i64, u64, u64)> {
        let ds = self.get()?.clone();
        let cells = cell_ids(&indices, ds.n_cells())?;
        drop(indices);
        let values = Values::parse(values)?;
        let mut arrays = crate::slots::slot_arrays(&slots)?;
        let mut bytes = arrays.iter_mut().map(|a| a.as_slice_mut()).collect::<Result<Vec<_>, _>>()?;
        let fill = py
            .detach(|| match values {
                Values::Float32 => ds.get_batch_into_slot::<f32>(&cells, &mut bytes),
                Values::Int32 => ds.get_batch_into_slot::<i32>(&cells, &mut bytes),
            })
            .map_err(dataset_error)?;
        Ok(crate::slots::fill_result(fill))
    }

    /// The nonzeros `get_batch` would return for `indices` (tiles fetched, not decoded).
    fn batch_nnz(&self, py: Python<'_>, indices: PyReadonlyArray1<'_, i64>) -> PyResult<u64> {
        let ds = self.get()?.clone();
        let cells = cell_ids(&indices, ds.n_cells())?;
        py.detach(|| ds.batch_nnz(&cells)).map_err(dataset_error)
    }

    /// Starts loading `tiles` in the background; returns how many loads it started.
    fn prefetch(&self, tiles: Vec<i64>) -> PyResult<usize> {
        let ds = self.get()?;
        let ids = tile_ids(&tiles, ds.n_tiles())?;
        ds.prefetch(&ids).map_err(dataset_error)
    }

    /// Tells the cache the order in which this pass and the next first read the tiles (see `Dataset::plan_passes`).
    fn plan_passes(&self, this_pass: Vec<i64>, next_pass: Vec<i64>) -> PyResult<()> {
        let ds = self.get()?;
        let (this_pass, next_pass) = (tile_ids(&this_pass, ds.n_tiles())?, tile_ids(&next_pass, ds.n_tiles())?);
        ds.plan_passes(&this_pass, &next_pass);
        Ok(())
    }

    /// The parsed, still compressed tile `tile` (fetched now, checked against the manifest).
    fn get_tile(&self, py: Python<'_>, tile: i64, verify: bool) -> PyResult<PyTile> {
        let ds = self.get()?.clone();
        let t = usize::try_from(tile)
            .ok()
            .filter(|&t| t < ds.n_tiles())
            .ok_or_else(|| index_error(format!("tile {tile} out of range")))?;
        let bytes = py.detach(|| ds.fetch_tile_bytes(t)).map_err(dataset_error)?;
        PyTile::parse(bytes, verify)
    }

    /// Gene names (`None` if the dataset has none).
    fn var_names(&self, py: Python<'_>) -> PyResult<Option<Vec<String>>> {
        let ds = self.get()?.clone();
        let names = py.detach(|| ds.var_names()).map_err(dataset_error)?;
        Ok(names.map(|n| n.as_ref().clone()))
    }

    /// The gene order (int32; `None` if the dataset has none).
    fn gene_order<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyArray1<i32>>>> {
        let ds = self.get()?.clone();
        let order = py.detach(|| ds.gene_order()).map_err(dataset_error)?;
        Ok(order.map(|o| owned(py, o.as_ref().clone())))
    }

    /// The counters as a dict (the original package's keys plus ours).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &[self.get()?.stats()])
    }

    /// Sets every counter to zero.
    fn reset_stats(&self) -> PyResult<()> {
        self.get()?.reset_stats();
        Ok(())
    }

    /// Opens the obs (reads `obs/schema.json`, checks the fingerprint), the GIL released.
    #[pyo3(signature = (cache_dir = None))]
    fn obs(&self, py: Python<'_>, cache_dir: Option<std::path::PathBuf>) -> PyResult<PyObs> {
        let ds = self.get()?.clone();
        let options = dct_dataset::dct_obs::ObsOptions { cache_dir, ..Default::default() };
        let obs = py.detach(|| ds.obs(options)).map_err(dataset_error)?;
        Ok(PyObs::new(obs, ds.store().clone(), Some(ds)))
    }

    /// The gene table as `(columns, schema metadata)` (see `obs.batch_to_py`), or `None`.
    fn var_table<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let ds = self.get()?.clone();
        let batch = py.detach(|| ds.var_table()).map_err(dataset_error)?;
        batch.map(|b| crate::obs::batch_to_py(py, &b)).transpose()
    }
}

fn batch_as<'py, V: dct_codec::CountValue + numpy::Element>(
    py: Python<'py>,
    ds: &Arc<Dataset>,
    cells: &[u64],
    out_indices: Option<Bound<'py, PyAny>>,
    out_values: Option<Bound<'py, PyAny>>,
    dtype: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    match (out_indices, out_values) {
        (Some(oi), Some(ov)) => {
            let (oi, ov) = out_buffers::<V>(oi, ov, dtype)?;
            let mut wi = writable(&oi, "out_indices", "int32")?;
            let mut wv = writable(&ov, "out_values", dtype)?;
            let (si, sv) = (wi.as_slice_mut()?, wv.as_slice_mut()?);
            let mut indptr = Vec::new();
            let nnz = py.detach(|| ds.get_batch_to(cells, &mut indptr, si, sv)).map_err(dataset_error)?;
            PyTuple::new(py, [owned(py, indptr).into_any(), nnz.into_pyobject(py)?.into_any()])
        }
        (None, None) => {
            let batch = py.detach(|| ds.get_batch_as::<V>(cells)).map_err(dataset_error)?;
            PyTuple::new(
                py,
                [
                    owned(py, batch.indptr).into_any(),
                    owned(py, batch.indices).into_any(),
                    owned(py, batch.values).into_any(),
                ],
            )
        }
        _ => Err(value_error("pass both out_indices and out_values, or neither")),
    }
}

/// Bytes of the slot a loader makes for a batch that needs `used` bytes (`dct_dataset::batch_slot_bytes`: a
/// quarter spare, in whole granules), which its memory budget sets aside for each batch it holds.
#[pyfunction]
pub(crate) fn batch_slot_bytes(used: u64) -> u64 {
    dct_dataset::batch_slot_bytes(used)
}

/// Tile numbers from Python, each checked to be below `n`.
fn tile_ids(tiles: &[i64], n: usize) -> PyResult<Vec<usize>> {
    tiles
        .iter()
        .map(|&t| {
            usize::try_from(t).ok().filter(|&t| t < n).ok_or_else(|| index_error(format!("tile {t} out of range")))
        })
        .collect()
}
