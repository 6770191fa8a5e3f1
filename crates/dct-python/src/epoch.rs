//! The epoch planner from Python ([`dct_dataset::EpochPlan`]): which cells each batch of this rank and loader worker
//! holds, the same in every process, for `deltacells.torch`.

use std::sync::Mutex;

use dct_dataset::{EpochOptions, EpochPlan, EpochUnit, Remainder};
use numpy::PyArray1;
use pyo3::prelude::*;

use crate::arrays::owned;
use crate::errors::{dataset_error, value_error};

/// One epoch's batches for one rank and worker.
#[pyclass(module = "deltacells._core", name = "EpochPlan", frozen)]
pub(crate) struct PyEpochPlan {
    plan: Mutex<EpochPlan>,
}

#[pymethods]
impl PyEpochPlan {
    /// The plan of `epoch` over tiles of `tile_cells` cells (see `dct_dataset::EpochPlan`); `remainder` is `"drop"`
    /// or `"wrap"`; `units` (`(tile, take, pass)` triples, from `Corpus.weighted_units`) for a weighted epoch.
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
        units: Option<Vec<(usize, u64, u64)>>,
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
            Some(units) => {
                let units = units.into_iter().map(|(tile, take, pass)| EpochUnit { tile, take, pass }).collect();
                EpochPlan::with_units(&tile_cells, units, &opts, epoch)
            }
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
}

impl PyEpochPlan {
    fn lock(&self) -> std::sync::MutexGuard<'_, EpochPlan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }
}
