//! What survives `fork`: a forked child (a `multiprocessing` or `DataLoader` worker started with `fork`) holds a
//! copy of the parent's memory but none of its threads. Runtimes, pools and decoders made by the parent must not be
//! used there (their work would wait forever for threads that do not exist), nor dropped (dropping joins or signals
//! those threads). So everything with threads is bound to the process that made it: the child leaks its copies and
//! makes its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dct_codec::{DecodeOptions, Decoder};
use pyo3::prelude::*;

/// A value with threads, owned by the process that made it ([`ProcessBound::get`] is `None` in a forked child,
/// which leaks the value instead of dropping it).
pub(crate) struct ProcessBound<T> {
    value: Option<T>,
    pid: u32,
}

impl<T> ProcessBound<T> {
    /// Binds `value` to this process.
    pub(crate) fn new(value: T) -> Self {
        ProcessBound { value: Some(value), pid: std::process::id() }
    }

    /// The value, if this is the process that made it.
    pub(crate) fn get(&self) -> Option<&T> {
        if self.pid == std::process::id() { self.value.as_ref() } else { None }
    }
}

impl<T> Drop for ProcessBound<T> {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // A forked copy: its threads are not in this process.
            std::mem::forget(self.value.take());
        }
    }
}

/// Per-process state shared by every call: encoder pools and idle decoders, by thread count.
#[derive(Default)]
struct Shared {
    encode_pools: HashMap<usize, Arc<rayon::ThreadPool>>,
    decoders: HashMap<usize, Vec<Decoder>>,
}

static SHARED: Mutex<Option<ProcessBound<Shared>>> = Mutex::new(None);

fn with_shared<R>(f: impl FnOnce(&mut Shared) -> R) -> R {
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let fresh = slot.as_ref().is_none_or(|b| b.get().is_none());
    if fresh {
        // First use, or the first in a forked child: the parent's copy is leaked by its `ProcessBound`.
        *slot = Some(ProcessBound::new(Shared::default()));
    }
    let bound = slot.as_mut().expect("set above");
    f(bound.value.as_mut().expect("owned by this process"))
}

/// The machine's parallelism (at least 1).
pub(crate) fn available_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// This process's rayon pool of `threads` encode threads (made on first use).
pub(crate) fn encode_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>, String> {
    if threads > dct_dataset::MAX_THREADS {
        return Err(format!(
            "threads = {threads}: at most {} encode threads (the machine's cores are what helps)",
            dct_dataset::MAX_THREADS
        ));
    }
    let threads = threads.max(1);
    with_shared(|s| {
        if let Some(pool) = s.encode_pools.get(&threads) {
            return Ok(pool.clone());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("dct-py-encode-{i}"))
            .build()
            .map(Arc::new)
            .map_err(|e| format!("cannot start {threads} encode threads: {e}"))?;
        s.encode_pools.insert(threads, pool.clone());
        Ok(pool)
    })
}

/// Runs `f` with an idle decoder of `threads` threads (its own helper threads; made on first use, kept for the
/// next call so that its buffers and threads are reused).
pub(crate) fn with_decoder<R>(threads: usize, verify_crc: bool, f: impl FnOnce(&mut Decoder) -> R) -> R {
    let threads = threads.max(1);
    let idle = with_shared(|s| s.decoders.get_mut(&threads).and_then(Vec::pop));
    let mut decoder = idle.unwrap_or_else(|| {
        let opts = DecodeOptions { verify_crc, threads };
        // Without threads of its own (the system refused them) it decodes on the calling thread.
        Decoder::try_with_threads(opts, "dct-py-decode")
            .unwrap_or_else(|_| Decoder::new(DecodeOptions { verify_crc, threads: 1 }))
    });
    decoder.set_verify_crc(verify_crc);
    let out = f(&mut decoder);
    with_shared(|s| {
        let idle = s.decoders.entry(threads).or_default();
        // A few idle decoders per thread count cover the threads decoding at once; more would only hold memory.
        if idle.len() < 4 {
            idle.push(decoder);
        }
    });
    out
}

/// Hands back to the system the memory the C allocator holds free (glibc's `malloc_trim`; elsewhere nothing);
/// returns whether any went back. The loader calls it before its `DataLoader` forks workers: glibc keeps freed tile
/// buffers resident in its heaps, and workers forked from a process holding them spent several times the system
/// time faulting their own memory in (see `dct_codec::return_free_memory`).
#[pyfunction]
pub(crate) fn return_free_memory(py: Python<'_>) -> bool {
    py.detach(dct_codec::return_free_memory)
}
