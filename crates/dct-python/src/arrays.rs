//! numpy arrays in and out: Rust vectors handed to numpy without a copy, and the value types a caller may ask for.

use arrow_buffer::{ArrowNativeType, ScalarBuffer};
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::errors::value_error;

/// The count type of decoded values: what `values_dtype` / `values` name (the original package's two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Values {
    Int32,
    Float32,
}

impl Values {
    /// Parses numpy's name of the dtype (`str(np.dtype(x))`).
    pub(crate) fn parse(name: &str) -> PyResult<Values> {
        match name {
            "int32" => Ok(Values::Int32),
            "float32" => Ok(Values::Float32),
            other => Err(value_error(format!("values dtype must be int32 or float32, got {other}"))),
        }
    }
}

/// A Rust vector as a 1-D numpy array that owns it (no copy).
pub(crate) fn owned<T: numpy::Element>(py: Python<'_>, v: Vec<T>) -> Bound<'_, PyArray1<T>> {
    v.into_pyarray(py)
}

/// Arrow values as a 1-D numpy array: handed over without a copy when they are a Rust vector nothing else holds
/// (the columns the obs reader's takes and joins build), copied otherwise (a view of the memory-mapped cache), so
/// the array is writable and never aliases the cache.
pub(crate) fn from_arrow<T>(py: Python<'_>, values: ScalarBuffer<T>) -> Bound<'_, PyArray1<T>>
where
    T: numpy::Element + ArrowNativeType,
{
    match values.into_inner().into_vec::<T>() {
        Ok(v) => owned(py, v),
        Err(shared) => PyArray1::from_slice(py, shared.typed_data::<T>()),
    }
}

/// Global cell indices from an int64 array, as the readers take them. A negative one is the readers' own
/// out-of-range error ([`dct_format::CellOutOfRange`], an `IndexError`); the readers check the rest, once.
pub(crate) fn cell_ids(indices: &PyReadonlyArray1<'_, i64>, n_cells: u64) -> PyResult<Vec<u64>> {
    let slice = indices.as_slice().map_err(|e| value_error(format!("cell indices: {e}")))?;
    dct_format::CellOutOfRange::unsigned(slice, n_cells)
        .map_err(|e| crate::errors::dataset_error(dct_dataset::DatasetError::from(e)))
}

/// A batch read's output buffers: column indices and values.
pub(crate) type OutBuffers<'py, V> = (Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<V>>);

/// The caller's output buffers of a batch read (`out_indices` int32, `out_values` of `V`, named `dtype` in
/// messages), writable and contiguous, or the original package's message.
pub(crate) fn out_buffers<'py, V: numpy::Element>(
    out_indices: Bound<'py, PyAny>,
    out_values: Bound<'py, PyAny>,
    dtype: &str,
) -> PyResult<OutBuffers<'py, V>> {
    let bad = |name: &str, t: &str| value_error(format!("{name} must be a writable contiguous 1-D {t} numpy array"));
    let oi = out_indices.cast_into::<PyArray1<i32>>().map_err(|_| bad("out_indices", "int32"))?;
    let ov = out_values.cast_into::<PyArray1<V>>().map_err(|_| bad("out_values", dtype))?;
    Ok((oi, ov))
}

/// Mutable access to a caller's contiguous output buffer, with the original package's message when it is not one.
pub(crate) fn writable<'py, T: numpy::Element>(
    array: &'py Bound<'py, PyArray1<T>>,
    name: &str,
    dtype: &str,
) -> PyResult<numpy::PyReadwriteArray1<'py, T>> {
    let bad = || value_error(format!("{name} must be a writable contiguous 1-D {dtype} numpy array"));
    if !array.is_contiguous() {
        return Err(bad());
    }
    array.try_readwrite().map_err(|_| bad())
}
