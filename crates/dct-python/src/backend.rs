//! A Python `Backend` object (duck-typed: `read(name)`, `read_range(name, offset, length)`, `size(name)`,
//! `describe()`) as a read-only source of a [`Store`](dct_store::Store), so the Rust reader and obs cache read
//! through it, retried and capped like any other location: whole GETs call `read`, ranged GETs `read_range` (plus
//! `size`, for the object's length), HEAD `size`.
//!
//! Each call runs on a blocking thread of the caller's runtime and takes the GIL for the call only; the Rust
//! caller has released it.
//!
//! A call may still be running when the interpreter exits (a prefetch in flight after the last batch). Python then
//! ends a thread that waits for the GIL with `pthread_exit`, whose unwinding through Rust frames aborts the
//! process. So calls are counted, and [`stop_backend_calls`] (run by an `atexit` hook of the package) refuses new
//! ones and waits, the GIL released, for those running.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dct_store::{ReadSource, SourceError};
use pyo3::exceptions::{
    PyAttributeError, PyFileNotFoundError, PyKeyError, PyNotImplementedError, PyPermissionError, PyTypeError,
    PyValueError,
};
use pyo3::prelude::*;

use crate::tile::blob_of;

/// A read-only source over a Python backend object.
pub(crate) struct PyBackend {
    backend: Arc<Py<PyAny>>,
    describe: String,
}

impl PyBackend {
    /// Wraps `backend` (its `describe()` names it in messages).
    pub(crate) fn new(backend: &Bound<'_, PyAny>) -> PyResult<Self> {
        let describe = match backend.call_method0("describe") {
            Ok(d) => d.str()?.to_string(),
            Err(_) => backend.get_type().name()?.to_string(),
        };
        Ok(PyBackend { backend: Arc::new(backend.clone().unbind()), describe })
    }
}

impl fmt::Debug for PyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PyBackend({})", self.describe)
    }
}

impl fmt::Display for PyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe)
    }
}

/// The source error for a Python exception raised by `backend.<method>(name)` (or for what it returned):
/// `FileNotFoundError`, and the `KeyError` of a mapping-like backend, are `NotFound` (so a missing tile or manifest
/// is reported as missing); a `PermissionError`, and the errors of a programming mistake or an answer of the wrong
/// type (`TypeError`, `ValueError`, `AttributeError`, `NotImplementedError`), are final; anything else (a
/// connection reset, a timeout) is a failure another attempt may mend, and is retried.
fn source_error(py: Python<'_>, e: PyErr, method: &str, name: &str) -> SourceError {
    let message = format!(
        "backend.{method}({name:?}) raised {}",
        e.value(py).repr().map_or_else(|_| e.to_string(), |r| r.to_string())
    );
    if e.is_instance_of::<PyFileNotFoundError>(py) || e.is_instance_of::<PyKeyError>(py) {
        SourceError::NotFound(message)
    } else if e.is_instance_of::<PyPermissionError>(py)
        || e.is_instance_of::<PyTypeError>(py)
        || e.is_instance_of::<PyValueError>(py)
        || e.is_instance_of::<PyAttributeError>(py)
        || e.is_instance_of::<PyNotImplementedError>(py)
    {
        SourceError::Refused(message)
    } else {
        SourceError::Failed(message)
    }
}

/// Backend calls running, and whether the interpreter is exiting (no new call starts then).
static RUNNING: Mutex<usize> = Mutex::new(0);
static CALLS_DONE: Condvar = Condvar::new();
static EXITING: AtomicBool = AtomicBool::new(false);

/// One running backend call, counted until it is dropped.
struct RunningCall;

impl RunningCall {
    /// Counts a call, unless the interpreter is exiting.
    fn start() -> Option<RunningCall> {
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        let call = RunningCall;
        // Checked after counting: `stop_backend_calls` sets the flag, then waits for the count.
        (!EXITING.load(Ordering::SeqCst)).then_some(call)
    }
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        *running -= 1;
        if *running == 0 {
            CALLS_DONE.notify_all();
        }
    }
}

/// Refuses new calls into Python backends and waits (the GIL released) up to `timeout_s` seconds for those
/// running to return; returns how many are still running. Called at interpreter exit.
#[pyfunction]
pub(crate) fn stop_backend_calls(py: Python<'_>, timeout_s: f64) -> usize {
    EXITING.store(true, Ordering::SeqCst);
    let timeout = Duration::from_secs_f64(timeout_s.max(0.0));
    py.detach(|| {
        let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        let (running, _) =
            CALLS_DONE.wait_timeout_while(running, timeout, |n| *n > 0).unwrap_or_else(|e| e.into_inner());
        *running
    })
}

/// What one request asks of the backend.
enum Call {
    Whole,
    Range(u64, u64),
    Size,
}

impl PyBackend {
    /// Calls the backend on a blocking thread: the bytes asked for and the object's size.
    async fn call(&self, name: &str, call: Call) -> Result<(Bytes, u64), SourceError> {
        let (backend, name) = (self.backend.clone(), name.to_string());
        let run = move || {
            let Some(_running) = RunningCall::start() else {
                return Err(SourceError::Failed(format!(
                    "backend call for {name:?} refused: the Python interpreter is exiting"
                )));
            };
            Python::attach(|py| {
                let b = backend.bind(py);
                let size = |py: Python<'_>| -> Result<u64, SourceError> {
                    b.call_method1("size", (name.as_str(),))
                        .and_then(|s| s.extract::<u64>())
                        .map_err(|e| source_error(py, e, "size", &name))
                };
                let bytes = |method: &str, got: PyResult<Bound<'_, PyAny>>| {
                    got.and_then(|d| blob_of(&d)).map_err(|e| source_error(py, e, method, &name))
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
                    Call::Size => Ok((Bytes::new(), size(py)?)),
                }
            })
        };
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| SourceError::Failed(format!("the backend call failed: {e}")))?
    }
}

#[async_trait::async_trait]
impl ReadSource for PyBackend {
    async fn read(&self, name: &str) -> Result<Bytes, SourceError> {
        Ok(self.call(name, Call::Whole).await?.0)
    }

    async fn read_range(&self, name: &str, offset: u64, length: u64) -> Result<(Bytes, u64), SourceError> {
        self.call(name, Call::Range(offset, length)).await
    }

    async fn size(&self, name: &str) -> Result<u64, SourceError> {
        Ok(self.call(name, Call::Size).await?.1)
    }
}
