//! A bridge from async code to the rayon pools that decode and encode tiles.

use std::panic::AssertUnwindSafe;

use crate::error::DatasetError;

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

/// The most threads a reader starts for either of its sets (`io_threads`, `decode_threads`): far past any machine's
/// use, and short of the operating system's limits, which refuse threads (and a runtime half started waits
/// forever) long before a count such as 100,000 is reached.
pub const MAX_THREADS: usize = 1024;

/// Refuses a thread count past [`MAX_THREADS`], naming the option.
pub(crate) fn check_threads(option: &str, threads: usize) -> Result<(), DatasetError> {
    if threads > MAX_THREADS {
        return Err(DatasetError::InvalidArgument(format!(
            "{option} = {threads}: at most {MAX_THREADS} threads (a few are enough: requests are asynchronous, and \
             decoding gains nothing past the machine's cores)"
        )));
    }
    Ok(())
}
