//! A Python `Backend` object (duck-typed: `read(name)`, `read_range(name, offset, length)`, `size(name)`,
//! `describe()`) as an object store, so the Rust reader and obs cache read through it: whole GETs call `read`,
//! ranged GETs `read_range` (plus `size`, for the object's length), HEAD `size`. Read-only.
//!
//! Each call runs on a blocking thread of the caller's runtime and takes the GIL for the call only; the Rust
//! caller has released it.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use dct_dataset::object_store::path::Path;
use dct_dataset::object_store::{
    self, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use futures::stream::{self, BoxStream, StreamExt};
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;

use crate::tile::blob_of;

const STORE: &str = "Python backend";

/// An object store over a Python backend object.
pub(crate) struct PyBackendStore {
    backend: Arc<Py<PyAny>>,
    describe: String,
}

impl PyBackendStore {
    /// Wraps `backend` (its `describe()` names it in messages).
    pub(crate) fn new(backend: &Bound<'_, PyAny>) -> PyResult<Self> {
        let describe = match backend.call_method0("describe") {
            Ok(d) => d.str()?.to_string(),
            Err(_) => backend.get_type().name()?.to_string(),
        };
        Ok(PyBackendStore { backend: Arc::new(backend.clone().unbind()), describe })
    }
}

impl fmt::Debug for PyBackendStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PyBackendStore({})", self.describe)
    }
}

impl fmt::Display for PyBackendStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe)
    }
}

/// The object store error for a Python exception raised by `backend.<method>(name)`: `FileNotFoundError` is
/// `NotFound` (so a missing tile or manifest is reported as missing), anything else a generic (retried) failure.
fn store_error(py: Python<'_>, e: PyErr, method: &str, name: &str) -> object_store::Error {
    let source = format!(
        "backend.{method}({name:?}) raised {}",
        e.value(py).repr().map_or_else(|_| e.to_string(), |r| r.to_string())
    );
    if e.is_instance_of::<PyFileNotFoundError>(py) {
        object_store::Error::NotFound { path: name.to_string(), source: source.into() }
    } else {
        object_store::Error::Generic { store: STORE, source: source.into() }
    }
}

/// What one GET asks of the backend.
enum Call {
    Whole,
    Range(u64, u64),
    Head,
}

impl PyBackendStore {
    /// Calls the backend on a blocking thread: the bytes asked for and the object's size.
    async fn call(&self, name: String, call: Call) -> object_store::Result<(Bytes, u64)> {
        let backend = self.backend.clone();
        let run = move || {
            Python::attach(|py| {
                let b = backend.bind(py);
                let size = |py: Python<'_>| -> object_store::Result<u64> {
                    b.call_method1("size", (name.as_str(),))
                        .and_then(|s| s.extract::<u64>())
                        .map_err(|e| store_error(py, e, "size", &name))
                };
                let bytes = |method: &str, got: PyResult<Bound<'_, PyAny>>| {
                    got.and_then(|d| blob_of(&d)).map_err(|e| store_error(py, e, method, &name))
                };
                match call {
                    Call::Whole => {
                        let data = bytes("read", b.call_method1("read", (name.as_str(),)))?;
                        let n = data.len() as u64;
                        Ok((data, n))
                    }
                    Call::Range(offset, length) => {
                        let data = bytes("read_range", b.call_method1("read_range", (name.as_str(), offset, length)))?;
                        Ok((data, size(py)?))
                    }
                    Call::Head => Ok((Bytes::new(), size(py)?)),
                }
            })
        };
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| object_store::Error::Generic { store: STORE, source: Box::new(e) })?
    }
}

fn read_only(what: &str) -> object_store::Error {
    object_store::Error::NotSupported {
        source: format!("{what}: a Python Backend is read-only; write datasets to a path or store URL").into(),
    }
}

#[async_trait::async_trait]
impl ObjectStore for PyBackendStore {
    async fn put_opts(&self, location: &Path, _: PutPayload, _: PutOptions) -> object_store::Result<PutResult> {
        Err(read_only(&format!("PUT {location}")))
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(read_only(&format!("PUT {location}")))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        let name = location.to_string();
        let (bytes, size, range) = if options.head {
            let (_, size) = self.call(name, Call::Head).await?;
            (Bytes::new(), size, 0..size)
        } else {
            match options.range {
                None => {
                    let (bytes, size) = self.call(name, Call::Whole).await?;
                    (bytes, size, 0..size)
                }
                Some(range) => {
                    let (offset, length) = match range {
                        GetRange::Bounded(r) => (r.start, r.end.saturating_sub(r.start)),
                        GetRange::Offset(o) => {
                            let (_, size) = self.call(name.clone(), Call::Head).await?;
                            (o, size.saturating_sub(o))
                        }
                        GetRange::Suffix(n) => {
                            let (_, size) = self.call(name.clone(), Call::Head).await?;
                            (size.saturating_sub(n), n.min(size))
                        }
                    };
                    let (bytes, size) = self.call(name, Call::Range(offset, length)).await?;
                    let end = offset + bytes.len() as u64;
                    (bytes, size, offset..end)
                }
            }
        };
        let meta = ObjectMeta {
            location: location.clone(),
            last_modified: Default::default(),
            size,
            e_tag: None,
            version: None,
        };
        let payload = if options.head {
            GetResultPayload::Stream(stream::empty().boxed())
        } else {
            GetResultPayload::Stream(stream::once(async move { Ok(bytes) }).boxed())
        };
        Ok(GetResult { payload, meta, range, attributes: Default::default(), extensions: Default::default() })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            let (bytes, _) =
                self.call(location.to_string(), Call::Range(r.start, r.end.saturating_sub(r.start))).await?;
            out.push(bytes);
        }
        Ok(out)
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        stream::once(async { Err(read_only("DELETE")) }).boxed()
    }

    fn list(&self, _: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        stream::once(async { Err(read_only("LIST")) }).boxed()
    }

    async fn list_with_delimiter(&self, _: Option<&Path>) -> object_store::Result<ListResult> {
        Err(read_only("LIST"))
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> object_store::Result<()> {
        Err(read_only("COPY"))
    }
}
