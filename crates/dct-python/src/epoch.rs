//! The epoch planner from Python ([`dct_dataset::EpochPlan`]): which cells each batch of this rank and loader worker
//! holds, the same in every process, for `deltacells.torch`.

use std::sync::{Arc, Mutex};

use dct_dataset::{EpochOptions, EpochPlan, EpochUnit, Remainder, TileStrata};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::arrays::owned;
use crate::errors::{dataset_error, value_error};

/// What a weighted or stratified epoch over a corpus draws (`Corpus.weighted_units`, `Corpus.stratified_units`),
/// for `EpochPlan`: units of tiles, and the strata stratified units draw from.
#[pyclass(module = "deltacells._core", name = "EpochUnits", frozen)]
pub(crate) struct PyEpochUnits {
    pub(crate) units: Vec<EpochUnit>,
    pub(crate) strata: Option<Arc<TileStrata>>,
}

#[pymethods]
impl PyEpochUnits {
    /// Units.
    fn __len__(&self) -> usize {
        self.units.len()
    }

    /// Cells the units draw.
    fn cells(&self) -> u64 {
        self.units.iter().map(|u| u.take).sum()
    }
}

/// A corpus's cells grouped by the categories of an obs column (`CorpusObs.strata`), for stratified epochs.
#[pyclass(module = "deltacells._core", name = "Strata", frozen)]
pub(crate) struct PyStrata {
    pub(crate) inner: dct_corpus::Strata,
}

#[pymethods]
impl PyStrata {
    /// The column.
    #[getter]
    fn column(&self) -> String {
        self.inner.column.clone()
    }

    /// Its categories (stratum `s` is `categories[s]`).
    #[getter]
    fn categories(&self) -> Vec<String> {
        self.inner.categories.clone()
    }

    /// Selected cells of each category.
    fn category_cells(&self) -> Vec<u64> {
        self.inner.tiles.stratum_cells().to_vec()
    }
}

/// One epoch's batches for one rank and worker.
#[pyclass(module = "deltacells._core", name = "EpochPlan", frozen)]
pub(crate) struct PyEpochPlan {
    plan: Mutex<EpochPlan>,
}

#[pymethods]
impl PyEpochPlan {
    /// The plan of `epoch` over tiles of `tile_cells` cells (see `dct_dataset::EpochPlan`); `remainder` is `"drop"`
    /// or `"wrap"`; `units` (from `Corpus.weighted_units` or `Corpus.stratified_units`) for a weighted or
    /// stratified epoch.
    #[new]
    #[pyo3(signature = (tile_cells, batch_size, shuffle, shuffle_tiles, seed, drop_last, remainder, rank, world_size, worker, num_workers, first_batch, epoch, units = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        tile_cells: Vec<u64>,
        batch_size: usize,
        shuffle: bool,
        shuffle_tiles: usize,
        seed: u64,
        drop_last: bool,
        remainder: &str,
        rank: usize,
        world_size: usize,
        worker: usize,
        num_workers: usize,
        first_batch: usize,
        epoch: u64,
        units: Option<PyRef<'_, PyEpochUnits>>,
    ) -> PyResult<Self> {
        let remainder = match remainder {
            "drop" => Remainder::Drop,
            "wrap" => Remainder::Wrap,
            other => return Err(value_error(format!("remainder must be \"drop\" or \"wrap\", not {other:?}"))),
        };
        let opts = EpochOptions {
            batch_size,
            shuffle,
            shuffle_tiles,
            seed,
            drop_last,
            remainder,
            rank,
            world_size,
            worker,
            num_workers,
            first_batch,
        };
        let plan = match units {
            None => EpochPlan::new(&tile_cells, &opts, epoch),
            Some(u) => match &u.strata {
                None => EpochPlan::with_units(&tile_cells, u.units.clone(), &opts, epoch),
                Some(strata) => EpochPlan::stratified(&tile_cells, u.units.clone(), strata.clone(), &opts, epoch),
            },
        }
        .map_err(dataset_error)?;
        Ok(PyEpochPlan { plan: Mutex::new(plan) })
    }

    /// Batches of this worker.
    fn n_batches(&self) -> usize {
        self.lock().n_batches()
    }

    /// Batches of the rank (all workers).
    fn rank_batches(&self) -> usize {
        self.lock().rank_batches()
    }

    /// Cells the rank serves.
    fn rank_cells(&self) -> u64 {
        self.lock().rank_cells()
    }

    /// The rank's index of this worker's batch `j`.
    fn rank_batch_of(&self, j: usize) -> usize {
        self.lock().rank_batch_of(j)
    }

    /// The cells (int64) of this worker's batch `j`.
    fn batch<'py>(&self, py: Python<'py>, j: usize) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let mut out = Vec::new();
        py.detach(|| self.lock().batch_into(j, &mut out)).map_err(dataset_error)?;
        Ok(owned(py, out.into_iter().map(|c| c as i64).collect()))
    }

    /// The distinct tiles this worker's batches `j..` read, in order of first need, at most `max_tiles`.
    fn tiles_ahead(&self, j: usize, max_tiles: usize) -> Vec<usize> {
        self.lock().tiles_ahead(j, max_tiles)
    }

    /// Every tile this worker's batches read, in order of first need.
    fn tile_order(&self, py: Python<'_>) -> Vec<usize> {
        py.detach(|| self.lock().tile_order())
    }
}

impl PyEpochPlan {
    fn lock(&self) -> std::sync::MutexGuard<'_, EpochPlan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }
}
