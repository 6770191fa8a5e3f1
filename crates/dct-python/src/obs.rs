//! Per-cell metadata from Python: the Rust obs reader and node cache ([`dct_obs::Obs`]) behind
//! `deltacells.obs.ObsStore`, schema inference and encoding for writers, and Arrow columns handed to numpy.
//!
//! Columns cross the boundary as plain pieces, so the package needs neither pyarrow nor Arrow's C interface:
//! Python → Rust as `(kind, name, values, extra)` tuples (a *frame*; a category's tuple may add a fifth item, whether
//! its categories are ordered), Rust → Python as numpy arrays (numbers, codes,
//! booleans without missing values) or lists (strings, booleans with missing values).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, BooleanArray, PrimitiveArray, RecordBatch, StringArray};
use arrow_buffer::NullBuffer;
use arrow_schema::DataType;
use dct_obs::{ColumnData, ColumnKind, Obs, ObsSchema, ObsSchemaBuilder, TileObs};
use dct_store::Store;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::arrays::{cell_ids, from_arrow, owned};
use crate::errors::{format_error, obs_error, value_error};

/// A dataset's obs opened for reading (bound to the dataset's store).
#[pyclass(module = "deltacells._core", name = "Obs", frozen)]
pub(crate) struct PyObs {
    obs: Obs,
    store: Store,
    /// The dataset the obs are of, asked whether it changed when reading its shards fails.
    dataset: Option<Arc<dct_dataset::Dataset>>,
}

impl PyObs {
    pub(crate) fn new(obs: Obs, store: Store, dataset: Option<Arc<dct_dataset::Dataset>>) -> Self {
        PyObs { obs, store, dataset }
    }

    /// The exception for `e`; an error about the stored shards (missing, of another size, damaged) of a dataset
    /// changed since it was opened (appended to, written again) is `DatasetChangedError`, not a damaged dataset.
    fn failed(&self, py: Python<'_>, e: dct_obs::ObsError) -> PyErr {
        use dct_obs::ObsError as E;
        let about_shards = matches!(
            e,
            E::NotFound { .. } | E::Shard { .. } | E::Damaged { .. } | E::Fingerprint { .. } | E::Schema { .. }
        );
        if about_shards
            && let Some(ds) = &self.dataset
            && let Ok(Some(how)) = py.detach(|| ds.change_since_open())
        {
            let url = format!("{}/obs", ds.url().trim_end_matches('/'));
            return crate::errors::dataset_error(dct_dataset::DatasetError::FileChanged { url, message: how });
        }
        obs_error(e)
    }

    fn kind_of(&self, name: &str) -> PyResult<ColumnKind> {
        Ok(self.obs.schema().require(name).map_err(obs_error)?.1.kind)
    }

    /// `batch`'s columns as Python values (see the module docs), keyed by name in order.
    fn columns_to_py<'py>(&self, py: Python<'py>, batch: RecordBatch) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let (schema, columns, _) = batch.into_parts();
        for (field, array) in schema.fields().iter().zip(columns) {
            let kind = self.kind_of(field.name())?;
            let nullable = self.obs.has_nulls(field.name()).map_err(obs_error)?;
            out.set_item(field.name(), array_to_py(py, array, kind, nullable)?)?;
        }
        Ok(out)
    }
}

#[pymethods]
impl PyObs {
    /// The exact text of `obs/schema.json`.
    fn schema_json(&self) -> String {
        self.obs.schema_text().to_string()
    }

    /// Column names, in schema order.
    fn columns(&self) -> Vec<String> {
        self.obs.columns().into_iter().map(|(n, _)| n.to_string()).collect()
    }

    /// The kind of a column (`category`, `numeric`, `bool`, `string`); `KeyError` for an unknown one.
    fn kind(&self, column: &str) -> PyResult<&'static str> {
        Ok(self.kind_of(column)?.as_str())
    }

    /// The global categories of a column (`None` unless it is a category column).
    fn categories(&self, column: &str) -> PyResult<Option<Vec<String>>> {
        Ok(self.obs.categories(column).map_err(obs_error)?.map(<[String]>::to_vec))
    }

    /// Cells.
    fn n_cells(&self) -> u64 {
        self.obs.n_cells()
    }

    /// The node-local directory of this dataset's cached columns.
    fn cache_dir(&self) -> std::path::PathBuf {
        self.obs.cache_dir().to_path_buf()
    }

    /// Whether this reader has the column mapped (localized in this process).
    fn is_localized(&self, column: &str) -> bool {
        self.obs.is_localized(column)
    }

    /// Makes `columns` local (ranged reads of their column chunks into the cache, under a lock; columns already
    /// cached are mapped), the GIL released. Returns `(fetched, cached, rebuilt)` column lists.
    fn localize(&self, py: Python<'_>, columns: Vec<String>) -> PyResult<(Vec<String>, Vec<String>, Vec<String>)> {
        let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        let report = py.detach(|| self.obs.localize_blocking(&refs)).map_err(|e| self.failed(py, e))?;
        Ok((report.fetched, report.cached, report.rebuilt))
    }

    /// The values of localized `columns` at `cells` (int64), in request order, the GIL released.
    fn take<'py>(
        &self,
        py: Python<'py>,
        cells: PyReadonlyArray1<'py, i64>,
        columns: Vec<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let cells = cell_ids(&cells, self.obs.n_cells())?;
        let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        let batch = py.detach(|| self.obs.take(&cells, &refs)).map_err(|e| self.failed(py, e))?;
        self.columns_to_py(py, batch)
    }

    /// Every cell of localized `columns`.
    fn table<'py>(&self, py: Python<'py>, columns: Vec<String>) -> PyResult<Bound<'py, PyDict>> {
        let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        let batch = py.detach(|| self.obs.table(&refs)).map_err(|e| self.failed(py, e))?;
        self.columns_to_py(py, batch)
    }

    /// Stored bytes per column: `(name, compressed, uncompressed)` summed over the shards (reads their footers).
    fn column_sizes(&self, py: Python<'_>) -> PyResult<Vec<(String, u64, u64)>> {
        let sizes = py.detach(|| self.obs.column_sizes_blocking()).map_err(|e| self.failed(py, e))?;
        Ok(sizes.into_iter().map(|s| (s.name, s.compressed_bytes, s.uncompressed_bytes)).collect())
    }

    /// Reads every shard whole and checks sizes, SHA-256s, layouts and the fingerprint. `FileNotFoundError` for a
    /// missing shard, `FormatError` naming every other problem.
    fn verify(&self, py: Python<'_>) -> PyResult<u64> {
        let (store, manifest) = (&self.store, self.obs.manifest());
        let report = py.detach(|| dct_obs::verify_obs_blocking(store, manifest, 8));
        if report.is_ok() {
            return Ok(report.bytes_checked);
        }
        let text = report.problems.iter().map(|p| p.message.clone()).collect::<Vec<_>>().join("; ");
        if report.problems.iter().any(|p| p.kind == dct_obs::ObsProblemKind::ShardMissing) {
            return Err(pyo3::exceptions::PyFileNotFoundError::new_err(text));
        }
        Err(format_error(text))
    }
}

/// One Arrow column as Python values: numbers and category codes as numpy arrays (missing codes as -1, missing
/// numbers as NaN in float64), booleans as a bool array (a list with `None` when some are missing), strings as a
/// list of `str` / `None`.
pub(crate) fn array_to_py<'py>(
    py: Python<'py>,
    a: ArrayRef,
    kind: ColumnKind,
    nullable: bool,
) -> PyResult<Bound<'py, PyAny>> {
    fn primitive<'py, T: ArrowPrimitiveType>(
        py: Python<'py>,
        a: ArrayRef,
        kind: ColumnKind,
        nullable: bool,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T::Native: numpy::Element + num_like::AsF64 + num_like::MinusOne,
    {
        use num_like::{AsF64, MinusOne};
        // Its own handle on the values, then `a` dropped: a column only this call holds goes to numpy uncopied.
        let (_, values, nulls) = a.as_primitive::<T>().clone().into_parts();
        drop(a);
        Ok(match nulls.filter(|n| n.null_count() > 0) {
            // A column with missing values elsewhere comes as float64 in every batch, not only in those with some.
            None if nullable && kind != ColumnKind::Category => {
                owned(py, values.iter().map(|&v| v.as_f64()).collect::<Vec<f64>>()).into_any()
            }
            None => from_arrow(py, values).into_any(),
            Some(nulls) if kind == ColumnKind::Category => {
                let v = values.iter().zip(nulls.iter()).map(|(&v, ok)| if ok { v } else { T::Native::MINUS_ONE });
                owned(py, v.collect()).into_any()
            }
            Some(nulls) => {
                let v = values.iter().zip(nulls.iter()).map(|(&v, ok)| if ok { v.as_f64() } else { f64::NAN });
                owned(py, v.collect::<Vec<f64>>()).into_any()
            }
        })
    }
    Ok(match a.data_type() {
        DataType::Int8 => primitive::<Int8Type>(py, a, kind, nullable)?,
        DataType::Int16 => primitive::<Int16Type>(py, a, kind, nullable)?,
        DataType::Int32 => primitive::<Int32Type>(py, a, kind, nullable)?,
        DataType::Int64 => primitive::<Int64Type>(py, a, kind, nullable)?,
        DataType::UInt8 => primitive::<UInt8Type>(py, a, kind, nullable)?,
        DataType::UInt16 => primitive::<UInt16Type>(py, a, kind, nullable)?,
        DataType::UInt32 => primitive::<UInt32Type>(py, a, kind, nullable)?,
        DataType::UInt64 => primitive::<UInt64Type>(py, a, kind, nullable)?,
        DataType::Float32 => primitive::<Float32Type>(py, a, kind, nullable)?,
        DataType::Float64 => primitive::<Float64Type>(py, a, kind, nullable)?,
        DataType::Boolean => {
            let b = a.as_boolean();
            if b.null_count() == 0 && !nullable {
                owned(py, b.values().iter().collect::<Vec<bool>>()).into_any()
            } else {
                PyList::new(py, b.iter())?.into_any()
            }
        }
        DataType::Utf8 => PyList::new(py, a.as_string::<i32>().iter())?.into_any(),
        DataType::LargeUtf8 => PyList::new(py, a.as_string::<i64>().iter())?.into_any(),
        other => return Err(format_error(format!("obs column of Arrow type {other} cannot be read"))),
    })
}

/// Small numeric helpers for [`array_to_py`].
mod num_like {
    /// Conversion to `f64` (for missing values as NaN).
    pub(super) trait AsF64: Copy {
        fn as_f64(self) -> f64;
    }
    /// The missing-category code.
    pub(super) trait MinusOne: Copy {
        const MINUS_ONE: Self;
    }
    macro_rules! impls {
        ($($t:ty => $m:expr),*) => {$(
            impl AsF64 for $t { fn as_f64(self) -> f64 { self as f64 } }
            impl MinusOne for $t { const MINUS_ONE: Self = $m; }
        )*};
    }
    impls!(i8 => -1, i16 => -1, i32 => -1, i64 => -1, u8 => u8::MAX, u16 => u16::MAX, u32 => u32::MAX,
        u64 => u64::MAX, f32 => -1.0, f64 => -1.0);
}

/// A numeric numpy array (any integer or float dtype) as an Arrow array, `mask` (true = missing) as nulls.
fn numeric_array(values: &Bound<'_, PyAny>, mask: Option<&[bool]>) -> PyResult<ArrayRef> {
    fn prim<T: ArrowPrimitiveType>(v: &[T::Native], nulls: Option<NullBuffer>) -> ArrayRef
    where
        T::Native: numpy::Element,
    {
        Arc::new(PrimitiveArray::<T>::new(v.to_vec().into(), nulls))
    }
    let nulls = mask.map(|m| NullBuffer::from(m.iter().map(|&missing| !missing).collect::<Vec<bool>>()));
    macro_rules! try_as {
        ($($native:ty => $arrow:ty),*) => {$(
            if let Ok(a) = values.extract::<PyReadonlyArray1<'_, $native>>() {
                let v = a.as_slice().map_err(|e| value_error(e.to_string()))?;
                return Ok(prim::<$arrow>(v, nulls));
            }
        )*};
    }
    try_as!(i8 => Int8Type, i16 => Int16Type, i32 => Int32Type, i64 => Int64Type, u8 => UInt8Type,
        u16 => UInt16Type, u32 => UInt32Type, u64 => UInt64Type, f32 => Float32Type, f64 => Float64Type);
    Err(value_error("a numeric obs column must be a contiguous 1-D integer or float numpy array"))
}

/// A frame (a list of `(kind, name, values, extra)` tuples; see the module docs) as Rust obs input.
pub(crate) fn tile_obs(frame: &Bound<'_, PyList>) -> PyResult<TileObs> {
    let mut out = TileObs::new();
    for item in frame.iter() {
        let t = item.cast::<PyTuple>().map_err(|_| value_error("an obs frame item must be a tuple"))?;
        let kind: String = t.get_item(0)?.extract()?;
        let name: String = t.get_item(1)?.extract()?;
        let values = t.get_item(2)?;
        let extra = t.get_item(3)?;
        let data = match kind.as_str() {
            "category" => {
                let codes: PyReadonlyArray1<'_, i32> = values.extract()?;
                let categories: Vec<String> = extra.extract()?;
                // An optional fifth item says whether the categories are ordered.
                let ordered = if t.len() > 4 { t.get_item(4)?.extract()? } else { false };
                ColumnData::category_ordered(codes.as_slice()?.to_vec(), categories.into(), ordered)
            }
            "numeric" | "bool" => {
                let mask: Option<PyReadonlyArray1<'_, bool>> = extra.extract()?;
                let mask = mask.as_ref().map(|m| m.as_slice()).transpose()?;
                if kind == "bool" {
                    let v: PyReadonlyArray1<'_, bool> = values.extract()?;
                    let v = v.as_slice()?;
                    let array: BooleanArray = match mask {
                        Some(m) => v.iter().zip(m).map(|(&v, &missing)| (!missing).then_some(v)).collect(),
                        None => v.iter().map(|&v| Some(v)).collect(),
                    };
                    ColumnData::Array(Arc::new(array))
                } else {
                    ColumnData::Array(numeric_array(&values, mask)?)
                }
            }
            "string" => {
                let v: Vec<Option<String>> = values.extract()?;
                ColumnData::Array(Arc::new(StringArray::from(v)))
            }
            other => return Err(value_error(format!("unknown obs column kind {other:?} in a frame"))),
        };
        out.push(name, data);
    }
    Ok(out)
}

/// The schema (as `obs/schema.json` text) of obs columns over `frames`: one vocabulary per category column, the
/// union over frames in order of first appearance (strings above `max_categories`), numbers widened.
#[pyfunction]
pub(crate) fn infer_schema(frames: Vec<Bound<'_, PyList>>, max_categories: usize) -> PyResult<String> {
    let mut builder = ObsSchemaBuilder::with_max_categories(max_categories);
    for frame in &frames {
        builder.add_input(&tile_obs(frame)?).map_err(obs_error)?;
    }
    Ok(builder.finish().to_json())
}

/// A schema column as Python sees it: `(name, kind, arrow_type, categories, ordered)`.
type ColumnTuple = (String, String, String, Option<Vec<String>>, bool);

/// Checks an obs schema's JSON text; returns it re-serialized canonically and its columns as `(name, kind,
/// arrow_type, categories, ordered)` tuples.
#[pyfunction]
pub(crate) fn parse_schema(text: &str) -> PyResult<(String, Vec<ColumnTuple>)> {
    let schema = ObsSchema::parse(text.as_bytes(), "obs schema").map_err(|e| value_error(e.to_string()))?;
    Ok((schema.to_json(), schema_columns(&schema)))
}

/// A schema from `(name, kind, arrow_type, categories, ordered)` tuples, as its JSON text (`ValueError` if invalid).
#[pyfunction]
pub(crate) fn schema_json(columns: Vec<ColumnTuple>) -> PyResult<String> {
    let cols = columns
        .into_iter()
        .map(|(name, kind, arrow_type, categories, ordered)| {
            let kind = ColumnKind::parse(&kind).ok_or_else(|| value_error(format!("unknown column kind {kind:?}")))?;
            let arrow_type = dct_obs::ArrowType::parse(&arrow_type)
                .ok_or_else(|| value_error(format!("column {name:?}: unknown arrow type {arrow_type:?}")))?;
            Ok(dct_obs::ObsColumn { name, kind, arrow_type, categories, ordered })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let schema = ObsSchema::new(cols).map_err(|e| value_error(e.to_string()))?;
    Ok(schema.to_json())
}

fn schema_columns(schema: &ObsSchema) -> Vec<ColumnTuple> {
    schema
        .columns
        .iter()
        .map(|c| {
            let (kind, arrow_type) = (c.kind.as_str().to_string(), c.arrow_type.as_str().to_string());
            (c.name.clone(), kind, arrow_type, c.categories.clone(), c.ordered)
        })
        .collect()
}

/// `frame` (of `rows` cells) in the stored form of the schema `schema_text`: `{name: values}` as [`PyObs::take`]
/// gives them, in schema order, category columns as global codes.
#[pyfunction]
pub(crate) fn encode_frame<'py>(
    py: Python<'py>,
    schema_text: &str,
    frame: Bound<'py, PyList>,
    rows: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let schema = ObsSchema::parse(schema_text.as_bytes(), "obs schema").map_err(|e| value_error(e.to_string()))?;
    let batch = dct_obs::encode_obs(&schema, &tile_obs(&frame)?, rows).map_err(obs_error)?;
    let out = PyDict::new(py);
    for (c, array) in schema.columns.iter().zip(batch.into_parts().1) {
        out.set_item(&c.name, array_to_py(py, array, c.kind, false)?)?;
    }
    Ok(out)
}

/// The obs fingerprint of a schema text, the tiles' cell counts and the shards' SHA-256s (24 hex digits).
#[pyfunction]
pub(crate) fn obs_fingerprint(schema_json: &str, tile_cells: Vec<u64>, shard_sha256: Vec<String>) -> String {
    dct_obs::obs_fingerprint(schema_json, &tile_cells, &shard_sha256)
}

/// The cache root: `cache_dir`, else `$DELTACELLS_CACHE`, `$XDG_CACHE_HOME/deltacells`, `~/.cache/deltacells`.
#[pyfunction]
#[pyo3(signature = (cache_dir = None))]
pub(crate) fn cache_root(cache_dir: Option<std::path::PathBuf>) -> PyResult<std::path::PathBuf> {
    dct_obs::cache_root(cache_dir.as_deref()).map_err(obs_error)
}

/// The cache file name of a column (`<quoted name>.arrow`).
#[pyfunction]
pub(crate) fn column_file_name(name: &str) -> String {
    dct_obs::column_file_name(name)
}

/// A record batch's columns as `[(name, values)]` (see [`array_to_py`]; kinds from the Arrow types), and its
/// schema metadata: how a gene table reaches Python.
pub(crate) fn batch_to_py<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyTuple>> {
    let columns = PyList::empty(py);
    for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
        // A categorical: ("categorical", codes with -1 for missing, categories, ordered), for
        // pandas.Categorical.from_codes.
        if let Some((codes, categories)) = dct_obs::categorical_parts(array.as_ref()) {
            let ordered = field.dict_is_ordered() == Some(true);
            let parts = ("categorical", owned(py, codes), categories, ordered).into_pyobject(py)?;
            columns.append((field.name(), parts))?;
            continue;
        }
        if let Some(floats) = array.as_primitive_opt::<Float32Type>().filter(|a| a.null_count() > 0) {
            // float32 with gaps stays float32, NaN for missing, as pandas reads the file (obs take's rule of float64
            // for numbers with missing values is for integers, which have no NaN).
            let v: Vec<f32> = floats.iter().map(|x| x.unwrap_or(f32::NAN)).collect();
            columns.append((field.name(), owned(py, v)))?;
            continue;
        }
        let kind = match field.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 => ColumnKind::String,
            DataType::Boolean => ColumnKind::Bool,
            _ => ColumnKind::Numeric,
        };
        let values = array_to_py(py, Arc::clone(array), kind, false).map_err(|_| {
            format_error(format!(
                "var.parquet: column {:?} is of Arrow type {}, which a gene table cannot hold (strings, numbers, \
                 booleans and categoricals); write the gene table without it",
                field.name(),
                field.data_type()
            ))
        })?;
        columns.append((field.name(), values))?;
    }
    let metadata = PyDict::new(py);
    for (k, v) in batch.schema().metadata() {
        metadata.set_item(k, v)?;
    }
    PyTuple::new(py, [columns.into_any(), metadata.into_any()])
}

/// A gene table from Python: the index name (`None`: unnamed), the index values, `(kind, name, values, mask)`
/// columns (a frame) and the names of its ordered categorical columns, encoded as `var.parquet` bytes.
#[pyfunction]
#[pyo3(signature = (index_name, index, columns, ordered = Vec::new()))]
pub(crate) fn encode_var_table<'py>(
    py: Python<'py>,
    index_name: Option<String>,
    index: Vec<String>,
    columns: Bound<'py, PyList>,
    ordered: Vec<String>,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    let frame = tile_obs(&columns)?;
    let mut cols = Vec::with_capacity(frame.columns.len());
    for (name, data) in frame.columns {
        match data {
            ColumnData::Array(a) => cols.push((name, a)),
            ColumnData::Category(c) => {
                cols.push((name, dct_obs::categorical_array(&c.codes, &c.categories).map_err(obs_error)?))
            }
        }
    }
    let table = dct_obs::VarTable { index_name, index, columns: cols, ordered };
    let bytes = dct_obs::encode_var_parquet(&table).map_err(obs_error)?;
    Ok(pyo3::types::PyBytes::new(py, &bytes))
}
