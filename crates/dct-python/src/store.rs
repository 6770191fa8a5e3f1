//! A dataset location's objects from Python (`deltacells.StoreBackend`, and `GCSBackend` without a client): whole
//! and ranged reads, sizes and existence through the Rust store layer, retried and capped like every read of
//! the reader.

use dct_store::{Store, StoreError};
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{dataset_error, store_error};
use crate::process::ProcessBound;

/// The largest object `read` returns (a Python `bytes` object is made of it).
const MAX_READ_BYTES: u64 = 1 << 40;

/// The objects under one location (bound to the process that opened it).
#[pyclass(module = "deltacells._core", name = "Store", frozen)]
pub(crate) struct PyStore {
    store: ProcessBound<Store>,
    url: String,
}

impl PyStore {
    /// Runs a request on the storage runtime with the GIL released.
    fn request<T, F>(&self, py: Python<'_>, f: impl FnOnce(Store) -> F) -> PyResult<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let store = self
            .store
            .get()
            .ok_or_else(|| PyRuntimeError::new_err("this store was opened by the parent of this (forked) process"))?
            .clone();
        let request = f(store);
        let got = py.detach(|| dct_store::runtime::block_on(request));
        got.map_err(|e| store_error(&e))?.map_err(|e| store_error(&e))
    }
}

#[pymethods]
impl PyStore {
    /// Opens the location `url` (nothing is read).
    #[new]
    #[pyo3(signature = (url, storage_options = None))]
    fn new(url: &str, storage_options: Option<Bound<'_, PyDict>>) -> PyResult<Self> {
        let options = crate::dataset::store_options(storage_options.as_ref())?;
        let store = Store::from_url(url, &options).map_err(|e| dataset_error(e.into()))?;
        Ok(PyStore { url: store.root().to_string(), store: ProcessBound::new(store) })
    }

    /// The location as given.
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    /// The whole object `name`.
    fn read<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let name = name.to_string();
        let bytes = self.request(py, move |s| async move { s.get_limited(&name, MAX_READ_BYTES).await })?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// `length` bytes of `name` from `offset` (fewer at the end of the object, none past it).
    fn read_range<'py>(&self, py: Python<'py>, name: &str, offset: u64, length: u64) -> PyResult<Bound<'py, PyBytes>> {
        let size = self.size(py, name)?;
        let end = offset.saturating_add(length).min(size);
        if offset >= end {
            return Ok(PyBytes::new(py, b""));
        }
        let name = name.to_string();
        let bytes = self.request(py, move |s| async move { s.get_range(&name, offset..end).await })?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The size of `name` in bytes.
    fn size(&self, py: Python<'_>, name: &str) -> PyResult<u64> {
        let name = name.to_string();
        self.request(py, move |s| async move { s.size(&name).await })
    }

    /// Whether `name` exists.
    fn exists(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        match self.size(py, name) {
            Ok(_) => Ok(true),
            Err(e) if e.is_instance_of::<PyFileNotFoundError>(py) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
