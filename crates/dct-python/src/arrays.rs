//! numpy arrays in and out: Rust vectors handed to numpy without a copy, and the value types a caller may ask for.

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

/// Global cell or row indices from an int64 array, refusing negative ones (with the position of the first).
pub(crate) fn indices_u64(indices: &PyReadonlyArray1<'_, i64>, what: &str, bound: u64) -> PyResult<Vec<u64>> {
    let slice = indices.as_slice().map_err(|e| value_error(format!("{what}: {e}")))?;
    let mut out = Vec::with_capacity(slice.len());
    for (position, &i) in slice.iter().enumerate() {
        match u64::try_from(i) {
            Ok(u) if u < bound => out.push(u),
            _ => {
                return Err(crate::errors::index_error(format!(
                    "{what} index {i} (position {position}) out of range [0, {bound})"
                )));
            }
        }
    }
    Ok(out)
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
