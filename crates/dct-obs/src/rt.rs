//! Running async code from synchronous callers, and task helpers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use crate::error::{ObsError, Result};

/// The process-wide runtime behind the `*_blocking` methods (kept alive so that HTTP connection pools of cloud
/// stores stay usable between calls). One per process: a forked child (a Python `multiprocessing` or data-loader
/// worker) has a copy of the parent's runtime but none of its threads, so it makes its own (the copy is leaked:
/// shutting it down would signal threads that are not there).
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RT: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = *slot
        && owner == pid
    {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("dct-obs-io")
        .enable_all()
        .build()
        .map_err(|e| ObsError::Internal(format!("cannot start the obs I/O runtime: {e}")))?;
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// Runs `f` on the internal runtime and blocks until it finishes; works from any thread, including one inside
/// another runtime (which it then blocks). A panic in `f` is resumed here.
pub(crate) fn block_on<T, F>(f: F) -> Result<T>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let handle = runtime()?.spawn(f);
    match futures::executor::block_on(handle) {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(ObsError::Internal(format!("task cancelled: {e}"))),
    }
}

/// A spawned task that is aborted when dropped (so an early error stops the fetches still in flight).
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = std::result::Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
