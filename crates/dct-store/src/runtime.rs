//! The blocking-over-async bridge: tokio runtimes that synchronous callers (the CLI, the Python binding, the
//! converter) run store requests on.
//!
//! * [`Runtime`] is owned: a reader or writer starts one with its own I/O threads and shuts it down (without
//!   blocking) when it is dropped.
//! * [`block_on`] runs on one process-wide runtime, kept alive so that HTTP connection pools stay usable between
//!   calls. A forked child (a Python `multiprocessing` or data-loader worker) has a copy of its parent's runtime
//!   but none of its threads, so it makes its own; the copy is leaked, as shutting it down would signal threads
//!   that are not there.
//!
//! Both work from any thread, including one inside another tokio runtime (which they then block);
//! [`block_on_here`] runs a future that borrows from its caller on the caller's thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use crate::StoreError;

/// An owned multi-threaded tokio runtime that is shut down without blocking when dropped (so its owner may be
/// dropped anywhere, even inside another runtime).
#[derive(Debug)]
pub struct Runtime {
    rt: Option<tokio::runtime::Runtime>,
}

impl Runtime {
    /// A runtime of `threads` worker threads (at least one) named `name`.
    pub fn new(threads: usize, name: &str) -> Result<Self, StoreError> {
        Ok(Runtime { rt: Some(build(threads, name)?) })
    }

    /// The handle to spawn tasks with.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.as_ref().expect("the runtime lives until drop").handle()
    }

    /// Runs `f` on the runtime and blocks the calling thread until it finishes. A panic in `f` is resumed here.
    /// Fails only when the thread's caller asks to stop ([`interrupt`](crate::interrupt)): `f` is then aborted.
    pub fn block_on<F>(&self, f: F) -> Result<F::Output, StoreError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        wait(self.handle().spawn(f))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn build(threads: usize, name: &str) -> Result<tokio::runtime::Runtime, StoreError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| StoreError::Runtime(e.to_string()))
}

fn wait<T>(handle: tokio::task::JoinHandle<T>) -> Result<T, StoreError> {
    let task = AbortOnDrop(handle);
    match crate::interrupt::wait(task)? {
        Ok(v) => Ok(v),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Tasks of a live runtime are cancelled only by its shutdown, which happens when its owner is dropped.
        Err(e) => panic!("a storage task was cancelled while its caller waited: {e}"),
    }
}

/// The process-wide runtime (two I/O threads), started on first use and again in a forked child.
pub fn shared() -> Result<&'static tokio::runtime::Handle, StoreError> {
    static RT: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, rt)) = *slot
        && owner == pid
    {
        return Ok(rt.handle());
    }
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(build(2, "dct-store-io")?));
    *slot = Some((pid, rt));
    Ok(rt.handle())
}

/// Runs `f` on the [process-wide runtime](shared) and blocks until it finishes. A panic in `f` is resumed here.
/// Fails when the runtime cannot start, or when the thread's caller asks to stop ([`interrupt`](crate::interrupt)):
/// `f` is then aborted.
pub fn block_on<F>(f: F) -> Result<F::Output, StoreError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    wait(shared()?.spawn(f))
}

/// Runs `f` to completion on the calling thread with the [process-wide runtime](shared)'s I/O and timers, for
/// futures that borrow from the caller and so cannot be spawned. Blocks the thread: call it from synchronous code.
/// Fails as [`block_on`] does; `f` is then dropped.
pub fn block_on_here<F: Future>(f: F) -> Result<F::Output, StoreError> {
    let _context = shared()?.enter();
    crate::interrupt::wait(f)
}

/// A spawned task that is aborted when dropped (so an early error stops the requests still in flight).
#[derive(Debug)]
pub struct AbortOnDrop<T>(pub tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_from_plain_threads_and_from_inside_another_runtime() {
        let rt = Runtime::new(1, "test-io").unwrap();
        assert_eq!(rt.block_on(async { 7 }).unwrap(), 7);
        assert_eq!(block_on(async { 8 }).unwrap(), 8);
        let borrowed = String::from("borrowed");
        let slept = block_on_here(async {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            borrowed.len()
        });
        assert_eq!(slept.unwrap(), 8);
        let outer = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let inner = outer.block_on(async { block_on(async { 9 }).unwrap() + rt.block_on(async { 1 }).unwrap() });
        assert_eq!(inner, 10);
        // Dropping an owned runtime inside another runtime does not panic.
        outer.block_on(async move { drop(rt) });
    }

    #[test]
    fn a_panic_in_the_task_is_resumed_in_the_caller() {
        let got = std::panic::catch_unwind(|| block_on(async { panic!("boom") }));
        let payload = got.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    }
}
