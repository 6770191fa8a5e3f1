//! A dataset location's objects from Python (`deltacells.StoreBackend`, and `GCSBackend` without a client): whole
//! and ranged reads, sizes and existence through the Rust stores, retried like every read of the reader.

use dct_dataset::object_store::{self, ObjectStoreExt};
use dct_dataset::{RetryPolicy, Store};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{dataset_error, value_error};
use crate::process::ProcessBound;

/// The objects under one location (bound to the process that opened it).
#[pyclass(module = "deltacells._core", name = "Store", frozen)]
pub(crate) struct PyStore {
    store: Store,
    rt: ProcessBound<tokio::runtime::Runtime>,
}

fn store_err(e: object_store::Error, what: &str, url: String) -> PyErr {
    let message = format!("{what} {url} failed: {e}");
    if matches!(e, object_store::Error::NotFound { .. }) {
        PyFileNotFoundError::new_err(message)
    } else {
        PyOSError::new_err(message)
    }
}

impl PyStore {
    fn block_on<F>(&self, py: Python<'_>, f: F) -> PyResult<F::Output>
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        let rt = self.rt.get().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("this store was opened by the parent of this (forked) process")
        })?;
        Ok(py.detach(|| rt.block_on(f)))
    }

    fn policy(&self) -> &RetryPolicy {
        self.store.retry()
    }
}

#[pymethods]
impl PyStore {
    /// Opens the location `url` (nothing is read).
    #[new]
    #[pyo3(signature = (url, storage_options = None))]
    fn new(url: &str, storage_options: Option<Bound<'_, PyDict>>) -> PyResult<Self> {
        let options = crate::dataset::store_options(storage_options.as_ref())?;
        let store = Store::from_url(url, &options).map_err(dataset_error)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| value_error(format!("cannot start the I/O runtime: {e}")))?;
        Ok(PyStore { store, rt: ProcessBound::new(rt) })
    }

    /// The location as given.
    #[getter]
    fn url(&self) -> String {
        self.store.root().to_string()
    }

    /// The whole object `name`.
    fn read<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let path = self.store.path(name);
        let (inner, policy) = (self.store.object_store().clone(), self.policy().clone());
        let got =
            self.block_on(py, async move { dct_retry::get_whole(inner.as_ref(), &path, &policy, |_| true).await })?;
        match got {
            Ok(Ok(bytes)) => Ok(PyBytes::new(py, &bytes)),
            Ok(Err(size)) => {
                Err(PyOSError::new_err(format!("GET {}: a body of {size} bytes was refused", self.store.url(name))))
            }
            Err(e) => Err(store_err(e, "GET", self.store.url(name))),
        }
    }

    /// `length` bytes of `name` from `offset` (fewer at the end of the object, none past it).
    fn read_range<'py>(&self, py: Python<'py>, name: &str, offset: u64, length: u64) -> PyResult<Bound<'py, PyBytes>> {
        let size = self.size(py, name)?;
        let end = offset.saturating_add(length).min(size);
        if offset >= end {
            return Ok(PyBytes::new(py, b""));
        }
        let path = self.store.path(name);
        let (inner, policy) = (self.store.object_store().clone(), self.policy().clone());
        let got = self.block_on(py, async move { policy.run(|| inner.get_range(&path, offset..end)).await })?;
        let bytes = got.map_err(|e| store_err(e, "GET range of", self.store.url(name)))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The size of `name` in bytes.
    fn size(&self, py: Python<'_>, name: &str) -> PyResult<u64> {
        let path = self.store.path(name);
        let (inner, policy) = (self.store.object_store().clone(), self.policy().clone());
        let got = self.block_on(py, async move { policy.run(|| inner.head(&path)).await })?;
        Ok(got.map_err(|e| store_err(e, "HEAD", self.store.url(name)))?.size)
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
