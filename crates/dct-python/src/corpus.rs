//! `deltacells._core.Corpus`: member datasets read as one matrix in a gene vocabulary ([`dct_corpus`]).

use std::sync::Arc;

use dct_corpus::{Condition, Corpus, CorpusError, CorpusObs, GeneKey, GeneSpace, Member, ObsValue, Selection};
use dct_dataset::DatasetError;
use dct_store::StoreError;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::arrays::{Values, owned};
use crate::dataset::PyDataset;
use crate::epoch::{PyEpochUnits, PyStrata};
use crate::errors::{dataset_error, index_error, value_error};
use crate::process::ProcessBound;

/// The Python exception for a corpus error: a member's reader errors as they would be for the dataset, cells out of
/// range `IndexError`, genes that cannot be placed and bad arguments `ValueError`.
pub(crate) fn corpus_error(e: CorpusError) -> PyErr {
    match e {
        CorpusError::Member { ref cause, .. } if matches!(**cause, DatasetError::Store(StoreError::Interrupted)) => {
            crate::interrupt::interrupted()
        }
        CorpusError::Member { ref cause, .. } => {
            let message = e.to_string();
            let typed = dataset_error((**cause).clone());
            // Same class as the dataset's error, with the member named.
            Python::attach(|py| PyErr::from_type(typed.get_type(py), message))
        }
        CorpusError::CellOutOfRange(_) => index_error(e.to_string()),
        CorpusError::UnknownObsColumn { .. } => pyo3::exceptions::PyKeyError::new_err(e.to_string()),
        CorpusError::Obs { .. } => pyo3::exceptions::PyOSError::new_err(e.to_string()),
        CorpusError::GeneKey { .. }
        | CorpusError::DuplicateGene { .. }
        | CorpusError::ObsConflict { .. }
        | CorpusError::InvalidArgument(_) => value_error(e.to_string()),
    }
}

/// A corpus (bound to the process that made it: a forked child builds its own from the members).
#[pyclass(module = "deltacells._core", name = "Corpus")]
pub(crate) struct PyCorpus {
    inner: ProcessBound<Corpus>,
}

impl PyCorpus {
    fn get(&self) -> PyResult<&Corpus> {
        self.inner.get().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("this corpus was made by the parent of this (forked) process")
        })
    }

    fn wrap(corpus: Corpus) -> PyCorpus {
        PyCorpus { inner: ProcessBound::new(corpus) }
    }
}

fn cells_of(cells: &PyReadonlyArray1<'_, i64>, n_cells: u64) -> PyResult<Vec<u64>> {
    crate::arrays::cell_ids(cells, n_cells)
}

/// The gene space a Python caller names: `"union"`, `"intersection"` or a list of gene identifiers (a
/// vocabulary). Corpora and the converter take the same argument.
pub(crate) fn gene_space(genes: &Bound<'_, PyAny>) -> PyResult<GeneSpace> {
    if let Ok(s) = genes.extract::<String>() {
        return match s.as_str() {
            "union" => Ok(GeneSpace::Union),
            "intersection" => Ok(GeneSpace::Intersection),
            other => Err(value_error(format!(
                "genes must be \"union\", \"intersection\" or a list of gene identifiers, not {other:?}"
            ))),
        };
    }
    Ok(GeneSpace::Given(genes.extract::<Vec<String>>().map_err(|_| {
        value_error("genes must be \"union\", \"intersection\" or a list of gene identifiers (strings)")
    })?))
}

#[pymethods]
impl PyCorpus {
    /// A corpus of `datasets` named `names` (in cell order): genes identified by `gene_key` (`None`: var_names;
    /// else a gene-table column), vocabulary `genes` (`"union"`, `"intersection"` or a list of identifiers). The
    /// members' gene tables are read with the GIL released. With `tile_cap`, the members keep at most that many
    /// decoded tiles together after each read (see `Corpus::with_tile_cap`).
    #[new]
    #[pyo3(signature = (datasets, names, gene_key, genes, tile_cap = None))]
    fn new(
        py: Python<'_>,
        datasets: Vec<PyRef<'_, PyDataset>>,
        names: Vec<String>,
        gene_key: Option<String>,
        genes: Bound<'_, PyAny>,
        tile_cap: Option<usize>,
    ) -> PyResult<Self> {
        if datasets.len() != names.len() {
            return Err(value_error(format!("{} datasets but {} names", datasets.len(), names.len())));
        }
        let space = gene_space(&genes)?;
        let key = gene_key.map_or(GeneKey::VarNames, GeneKey::Column);
        let members = datasets
            .iter()
            .zip(names)
            .map(|(d, name)| Ok(Member { name, dataset: Arc::clone(d.dataset()?) }))
            .collect::<PyResult<Vec<_>>>()?;
        let corpus = py.detach(|| Corpus::open(members, &key, &space)).map_err(corpus_error)?;
        Ok(PyCorpus::wrap(match tile_cap {
            Some(cap) => corpus.with_tile_cap(cap),
            None => corpus,
        }))
    }

    /// Selected cells.
    fn n_cells(&self) -> PyResult<u64> {
        Ok(self.get()?.n_cells())
    }

    /// The vocabulary, in column order.
    fn genes(&self) -> PyResult<Vec<String>> {
        Ok(self.get()?.genes().to_vec())
    }

    /// Member names.
    fn members(&self) -> PyResult<Vec<String>> {
        Ok(self.get()?.members().iter().map(|m| m.name.clone()).collect())
    }

    /// Selected cells per member.
    fn member_cells(&self) -> PyResult<Vec<u64>> {
        Ok(self.get()?.member_cells())
    }

    /// Genes of each member in the vocabulary.
    fn member_genes_kept(&self) -> PyResult<Vec<usize>> {
        let c = self.get()?;
        Ok((0..c.members().len()).map(|m| c.gene_map().member(m).kept()).collect())
    }

    /// The member index of each of `cells` (int64 array).
    fn member_of<'py>(
        &self,
        py: Python<'py>,
        cells: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let c = self.get()?;
        let cells = cells_of(&cells, c.n_cells())?;
        let members = py.detach(|| c.member_of(&cells)).map_err(corpus_error)?;
        Ok(owned(py, members.into_iter().map(i64::from).collect()))
    }

    /// `(indptr, indices, values, member)` of the rows of `cells` in the vocabulary's columns, the GIL released.
    /// (A training loader reads into its reused slots instead: `fill_slot`.)
    fn get_batch<'py>(
        &self,
        py: Python<'py>,
        cells: PyReadonlyArray1<'py, i64>,
        values: &str,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let c = self.get()?;
        let cells = cells_of(&cells, c.n_cells())?;
        fn tuple<'py, V: dct_codec::CountValue + numpy::Element>(
            py: Python<'py>,
            c: &Corpus,
            cells: &[u64],
        ) -> PyResult<Bound<'py, PyTuple>> {
            let got = py.detach(|| c.get_batch_as::<V>(cells)).map_err(corpus_error)?;
            let member: Vec<i64> = got.member.into_iter().map(i64::from).collect();
            PyTuple::new(
                py,
                [
                    owned(py, got.batch.indptr).into_any(),
                    owned(py, got.batch.indices).into_any(),
                    owned(py, got.batch.values).into_any(),
                    owned(py, member).into_any(),
                ],
            )
        }
        match Values::parse(values)? {
            Values::Float32 => tuple::<f32>(py, c, &cells),
            Values::Int32 => tuple::<i32>(py, c, &cells),
        }
    }

    /// The rows of `cells` in the vocabulary's columns read into the first of `slots` (uint8 arrays: slots' memory
    /// past their headers) that holds them, planned once, the GIL released: `(slot, nnz, used, member)`; `slot` is
    /// -1 (nothing written, `member` empty) when none does and the batch needs a slot of `used` bytes.
    fn fill_slot<'py>(
        &self,
        py: Python<'py>,
        cells: PyReadonlyArray1<'py, i64>,
        values: &str,
        slots: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<(i64, u64, u64, Bound<'py, PyArray1<i64>>)> {
        let c = self.get()?;
        let cells = cells_of(&cells, c.n_cells())?;
        let values = Values::parse(values)?;
        let mut arrays = crate::slots::slot_arrays(&slots)?;
        let mut bytes = arrays.iter_mut().map(|a| a.as_slice_mut()).collect::<Result<Vec<_>, _>>()?;
        let (fill, members) = py
            .detach(|| match values {
                Values::Float32 => c.get_batch_into_slot::<f32>(&cells, &mut bytes),
                Values::Int32 => c.get_batch_into_slot::<i32>(&cells, &mut bytes),
            })
            .map_err(corpus_error)?;
        let (slot, nnz, used) = crate::slots::fill_result(fill);
        Ok((slot, nnz, used, owned(py, members.into_iter().map(i64::from).collect())))
    }

    /// The members' obs as one set of columns (`cache_dir`: where columns are made local).
    #[pyo3(signature = (cache_dir = None))]
    fn obs(&self, py: Python<'_>, cache_dir: Option<std::path::PathBuf>) -> PyResult<PyCorpusObs> {
        let c = self.get()?.clone();
        let options = dct_dataset::dct_obs::ObsOptions { cache_dir, ..Default::default() };
        let obs = py.detach(|| c.obs(&options)).map_err(corpus_error)?;
        Ok(PyCorpusObs { inner: ProcessBound::new((c, obs)) })
    }

    /// What a weighted epoch draws, for `EpochPlan` (see `dct_corpus::Corpus::weighted_units`).
    fn weighted_units(
        &self,
        py: Python<'_>,
        weights: Vec<f64>,
        epoch_cells: u64,
        seed: u64,
        epoch: u64,
    ) -> PyResult<PyEpochUnits> {
        let c = self.get()?;
        let units = py.detach(|| c.weighted_units(&weights, epoch_cells, seed, epoch)).map_err(corpus_error)?;
        Ok(PyEpochUnits { units, strata: None })
    }

    /// What a stratified epoch draws from `strata` (one class weight per category, or `None` for equal shares), for
    /// `EpochPlan` (see `dct_corpus::Corpus::stratified_units`).
    #[pyo3(signature = (strata, class_weights, epoch_cells, seed, epoch))]
    fn stratified_units(
        &self,
        py: Python<'_>,
        strata: PyRef<'_, PyStrata>,
        class_weights: Option<Vec<f64>>,
        epoch_cells: u64,
        seed: u64,
        epoch: u64,
    ) -> PyResult<PyEpochUnits> {
        let c = self.get()?;
        let strata = &strata.inner;
        let units = py
            .detach(|| c.stratified_units(strata, class_weights.as_deref(), epoch_cells, seed, epoch))
            .map_err(corpus_error)?;
        Ok(PyEpochUnits { units, strata: Some(strata.tiles.clone()) })
    }

    /// Selected cells in each corpus tile (the members' tiles laid end to end), for an epoch plan.
    fn tile_cells(&self) -> PyResult<Vec<u64>> {
        Ok(self.get()?.tile_cells())
    }

    /// Starts loading corpus tiles `tiles` in the background; returns how many loads started.
    fn prefetch(&self, py: Python<'_>, tiles: Vec<usize>) -> PyResult<usize> {
        let c = self.get()?;
        py.detach(|| c.prefetch(&tiles)).map_err(corpus_error)
    }

    /// Drops the members' cached tiles but corpus tiles `keep`; returns how many were dropped.
    fn release_tiles_except(&self, py: Python<'_>, keep: Vec<usize>) -> PyResult<usize> {
        let c = self.get()?;
        Ok(py.detach(|| c.release_tiles_except(&keep)))
    }

    /// Records the order in which this pass and the next first read the corpus tiles (`Corpus::plan_passes`).
    fn plan_passes(&self, this_pass: Vec<usize>, next_pass: Vec<usize>) -> PyResult<()> {
        self.get()?.plan_passes(&this_pass, &next_pass);
        Ok(())
    }

    /// At a new window of `window` tiles: drops the members' cached tiles but corpus tiles `ahead` and, with the
    /// passes planned, those read soonest within the cache size (`Corpus::release_tiles_for`); returns how many
    /// were dropped.
    fn release_tiles_for(&self, py: Python<'_>, ahead: Vec<usize>, window: usize) -> PyResult<usize> {
        let c = self.get()?;
        Ok(py.detach(|| c.release_tiles_for(&ahead, window)))
    }

    /// `(max_cached_tiles, max_prefetch_tiles)` for windows of `window` tiles and a loader holding `held` batches
    /// of `batch_cells` cells (dense ones of `dense_genes` genes, else sparse) within `budget` bytes, over every
    /// member's tiles (`dct_dataset::TileBudget::split_sizes_beside`).
    #[pyo3(signature = (budget, window, batch_cells = 0, held = 0, dense_genes = 0))]
    fn budget_split(
        &self,
        budget: u64,
        window: usize,
        batch_cells: u64,
        held: u64,
        dense_genes: u64,
    ) -> PyResult<(usize, usize)> {
        let corpus = self.get()?;
        corpus.check_plan(budget, window).map_err(value_error)?;
        let split =
            corpus.tile_budget(budget, window, dct_dataset::HeldBatches { cells: batch_cells, held, dense_genes });
        Ok((split.cached, split.ahead))
    }

    /// The corpus with its members' readers reopened with these settings, all on one set of threads.
    fn reopened(
        &self,
        py: Python<'_>,
        max_cached_tiles: usize,
        max_prefetch_tiles: usize,
        io_threads: usize,
        decode_threads: usize,
        verify: bool,
    ) -> PyResult<Self> {
        let options =
            crate::dataset::read_options(max_cached_tiles, max_prefetch_tiles, io_threads, decode_threads, verify);
        let c = self.get()?;
        Ok(PyCorpus::wrap(py.detach(|| c.reopened(&options)).map_err(corpus_error)?))
    }

    /// Each member's reader counters, summed (the keys of `DeltaCellsDataset.stats`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let stats: Vec<_> = self.get()?.members().iter().map(|m| m.dataset.stats()).collect();
        crate::dataset::stats_dict(py, &stats)
    }

    /// The cells `cells` (int64 indices) as a corpus of their own, in corpus order.
    fn select(&self, cells: PyReadonlyArray1<'_, i64>) -> PyResult<Self> {
        let c = self.get()?;
        let cells = cells_of(&cells, c.n_cells())?;
        Ok(PyCorpus::wrap(c.select(&cells).map_err(corpus_error)?))
    }

    /// The cells where `mask` is true, as a corpus of their own.
    fn select_mask(&self, mask: PyReadonlyArray1<'_, bool>) -> PyResult<Self> {
        let c = self.get()?;
        Ok(PyCorpus::wrap(c.select_mask(mask.as_slice()?).map_err(corpus_error)?))
    }

    /// The selection as bytes (`dct_corpus::Selection::to_bytes`: a bitmap or runs per block of cells, so a
    /// corpus pickled for a worker carries its selection compactly).
    fn selection_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let bytes = self.get()?.selection().to_bytes();
        Ok(pyo3::types::PyBytes::new(py, &bytes))
    }

    /// The same members with the selection `selection_bytes` gave.
    fn with_selection_bytes(&self, bytes: &[u8]) -> PyResult<Self> {
        let selection = Selection::from_bytes(bytes).map_err(value_error)?;
        Ok(PyCorpus::wrap(self.get()?.with_selection(selection).map_err(corpus_error)?))
    }
}

/// The obs of a corpus (`Corpus.obs`): one set of columns over the members.
#[pyclass(module = "deltacells._core", name = "CorpusObs")]
pub(crate) struct PyCorpusObs {
    inner: ProcessBound<(Corpus, CorpusObs)>,
}

impl PyCorpusObs {
    fn get(&self) -> PyResult<&(Corpus, CorpusObs)> {
        self.inner.get().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("this corpus obs was opened by the parent of this process")
        })
    }
}

/// The condition on obs column `column` from Python: a list of values ("one of"), or a `(low, high)` pair of
/// numbers or `None`; a `ValueError` naming the column for anything else.
fn condition(column: &str, value: &Bound<'_, PyAny>) -> PyResult<Condition> {
    let refused = |what: String| value_error(format!("condition on obs column {column:?}: {what}"));
    if let Ok(pair) = value.cast::<PyTuple>() {
        if pair.len() != 2 {
            return Err(refused("a range is a pair (low, high), either end None".into()));
        }
        let end = |i: usize| -> PyResult<Option<f64>> {
            let v = pair.get_item(i)?;
            if v.is_none() {
                return Ok(None);
            }
            let number = !v.is_instance_of::<pyo3::types::PyString>() && !v.is_instance_of::<pyo3::types::PyBool>();
            match v.extract::<f64>() {
                Ok(x) if number => Ok(Some(x)),
                _ => Err(refused(format!(
                    "a range (low, high) takes numbers or None, not {}; for labels or strings give a list of \
                     the values",
                    v.repr()?
                ))),
            }
        };
        return Ok(Condition::Range(end(0)?, end(1)?));
    }
    let items: Vec<Bound<'_, PyAny>> = if value.is_instance_of::<pyo3::types::PyString>() {
        vec![value.clone()]
    } else {
        value
            .try_iter()
            .map_err(|_| refused("a condition is a list of values or a (low, high) pair".into()))?
            .collect::<PyResult<_>>()?
    };
    let values = items
        .iter()
        .map(|v| {
            if v.is_instance_of::<pyo3::types::PyBool>() {
                Ok(ObsValue::Bool(v.extract()?))
            } else if let Ok(s) = v.extract::<String>() {
                Ok(ObsValue::Text(s))
            } else if let Some(x) = v.extract::<f64>().ok().filter(|x| !x.is_nan()) {
                // NaN is how pandas spells a missing number: as None, it cannot be chosen (it equals nothing).
                Ok(ObsValue::Number(x))
            } else {
                Err(refused(format!(
                    "{} is not a string, number or boolean (missing values cannot be chosen)",
                    v.repr()?
                )))
            }
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Condition::OneOf(values))
}

#[pymethods]
impl PyCorpusObs {
    /// `(name, kind)` of each column, in order of first appearance.
    fn columns(&self) -> PyResult<Vec<(String, &'static str)>> {
        Ok(self.get()?.1.columns().iter().map(|c| (c.name.clone(), c.kind.as_str())).collect())
    }

    /// `(column, message)` of each column whose kind differs between members (left out of `columns`; the
    /// message names both members).
    fn conflicts(&self) -> PyResult<Vec<(String, String)>> {
        Ok(self
            .get()?
            .1
            .conflicts()
            .iter()
            .map(|e| match e {
                CorpusError::ObsConflict { column, .. } => (column.clone(), e.to_string()),
                other => (String::new(), other.to_string()),
            })
            .collect())
    }

    /// The corpus vocabulary of a category column (`None` for other kinds); `KeyError` for an unknown column.
    fn categories(&self, column: &str) -> PyResult<Option<Vec<String>>> {
        let c = self.get()?.1.column(column).map_err(corpus_error)?;
        Ok(c.categories.clone())
    }

    /// Whether a category column's categories are ordered in every member that has it (`False` for other kinds);
    /// `KeyError` for an unknown column.
    fn ordered(&self, column: &str) -> PyResult<bool> {
        Ok(self.get()?.1.column(column).map_err(corpus_error)?.ordered)
    }

    /// Makes `columns` local in every member that has them (the GIL released); returns those some member fetched
    /// from its shards.
    fn localize(&self, py: Python<'_>, columns: Vec<String>) -> PyResult<Vec<String>> {
        let (corpus, obs) = self.get()?;
        let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        py.detach(|| obs.localize(corpus, &refs)).map_err(corpus_error)
    }

    /// The values of `columns` at corpus `cells`, as `DeltaCellsDataset.obs.take` gives them (category codes into
    /// the corpus vocabulary, -1 missing; numbers with NaN for missing; strings as lists).
    fn take<'py>(
        &self,
        py: Python<'py>,
        cells: PyReadonlyArray1<'py, i64>,
        columns: Vec<String>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let (corpus, obs) = self.get()?;
        let cells = cells_of(&cells, corpus.n_cells())?;
        let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        let got = py.detach(|| obs.take(corpus, &cells, &refs)).map_err(corpus_error)?;
        let out = pyo3::types::PyDict::new(py);
        for (name, array) in got {
            let kind = obs.column(&name).map_err(corpus_error)?.kind;
            let nullable = obs.has_nulls(corpus, &name).map_err(corpus_error)?;
            out.set_item(&name, crate::obs::array_to_py(py, array, kind, nullable)?)?;
        }
        Ok(out)
    }

    /// The cells meeting every condition (`{column: [values] or (low, high)}`), as a corpus.
    fn filter(&self, py: Python<'_>, conditions: Vec<(String, Bound<'_, PyAny>)>) -> PyResult<PyCorpus> {
        let (corpus, obs) = self.get()?;
        let conditions =
            conditions.iter().map(|(k, v)| Ok((k.clone(), condition(k, v)?))).collect::<PyResult<Vec<_>>>()?;
        Ok(PyCorpus::wrap(py.detach(|| corpus.filter(obs, &conditions)).map_err(corpus_error)?))
    }

    /// The corpus's cells grouped by the categories of `column`, for stratified epochs.
    fn strata(&self, py: Python<'_>, column: &str) -> PyResult<PyStrata> {
        let (corpus, obs) = self.get()?;
        Ok(PyStrata { inner: py.detach(|| corpus.strata(obs, column)).map_err(corpus_error)? })
    }

    /// Disjoint parts `[(name, corpus)]` for `fractions` (`[(name, fraction)]`), whole groups of `by` to one part.
    #[pyo3(signature = (fractions, by, seed))]
    fn split(
        &self,
        py: Python<'_>,
        fractions: Vec<(String, f64)>,
        by: Option<String>,
        seed: u64,
    ) -> PyResult<Vec<(String, PyCorpus)>> {
        let (corpus, obs) = self.get()?;
        let parts = py.detach(|| corpus.split(obs, &fractions, by.as_deref(), seed)).map_err(corpus_error)?;
        Ok(parts.into_iter().map(|(name, c)| (name, PyCorpus::wrap(c))).collect())
    }
}
