//! The internal tokio runtime behind the synchronous API, and a bridge from async code to the rayon pool.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use crate::error::DatasetError;

/// An owned multi-threaded tokio runtime that is shut down without blocking when dropped (so a reader or writer
/// may be dropped anywhere, even inside another runtime).
pub(crate) struct Rt {
    rt: Option<tokio::runtime::Runtime>,
}

impl Rt {
    pub(crate) fn new(threads: usize, name: &str) -> Result<Self, DatasetError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| DatasetError::Internal(format!("cannot start the I/O threads: {e}")))?;
        Ok(Rt { rt: Some(rt) })
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.as_ref().expect("runtime lives until drop").handle()
    }

    /// Runs `f` on the runtime and blocks the calling thread until it finishes. Works from any thread, including
    /// one inside another tokio runtime (which it then blocks). A panic in `f` is resumed here.
    pub(crate) fn block_on<F>(&self, f: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = self.handle().spawn(f);
        match futures::executor::block_on(handle) {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("internal task cancelled: {e}"),
        }
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `f` on the rayon pool and awaits its result; a panic in `f` becomes an error message.
pub(crate) async fn on_pool<T, F>(pool: &rayon::ThreadPool, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    pool.spawn(move || {
        let r = std::panic::catch_unwind(AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(panic)) => Err(panic_message(&panic)),
        Err(_) => Err("the worker pool shut down".into()),
    }
}

pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error (panic: {msg}); please report it")
}

/// A rayon pool of `threads` threads named `name-N`.
pub(crate) fn pool(threads: usize, name: &'static str) -> Result<rayon::ThreadPool, DatasetError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .map_err(|e| DatasetError::Internal(format!("cannot start the {name} threads: {e}")))
}

/// Threads to use when the caller says 0: the machine's parallelism.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
