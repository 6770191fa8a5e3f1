//! Ctrl-C while the interpreter's main thread waits for storage.
//!
//! Python runs signal handlers only between bytecodes, so a read blocked on a silent server (with the GIL
//! released) held Ctrl-C until the request timed out and its retry gave up. The main thread's waits in
//! `dct_store` ask [`python_asked_to_stop`] at every quiet interval; it runs the interpreter's pending signal
//! handlers, and when one raises (`KeyboardInterrupt` for Ctrl-C, or whatever a handler of the user's raises),
//! keeps that exception and gives up the wait. The storage error that comes up in its place becomes that same
//! exception again ([`interrupted`]). A handler that does not raise lets the wait go on, as it would let Python.
//!
//! The training loader gathers its next batch on a thread of its own while the main thread waits for it in
//! Python (where Ctrl-C arrives). A loop left by an exception stops that gather too ([`stop_gathering`]) rather
//! than wait for its read to time out.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;

thread_local! {
    /// The exception a signal handler raised during the thread's current wait.
    static RAISED: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Runs the interpreter's pending signal handlers; whether one raised (its exception is kept for [`interrupted`]).
fn python_asked_to_stop() -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(raised) => {
            RAISED.with(|r| *r.borrow_mut() = Some(raised));
            true
        }
    })
}

/// Makes the storage waits of the calling thread interruptible, if it is the interpreter's main thread (the only
/// one that runs signal handlers).
pub(crate) fn watch_main_thread(py: Python<'_>) -> PyResult<()> {
    let threading = py.import("threading")?;
    let main = threading.call_method0("main_thread")?.getattr("ident")?;
    if main.eq(threading.call_method0("get_ident")?)? {
        dct_store::interrupt::watch_this_thread(Some(python_asked_to_stop));
    }
    Ok(())
}

/// Whether the gathering thread's waits are to give up.
static GATHERING_STOPPED: AtomicBool = AtomicBool::new(false);

fn gathering_stopped() -> bool {
    GATHERING_STOPPED.load(Ordering::SeqCst)
}

/// Makes the storage waits of the calling thread (the loader's gathering thread) give up while
/// [`stop_gathering`] says so.
#[pyfunction]
pub(crate) fn watch_gathering_thread() {
    dct_store::interrupt::watch_this_thread(Some(gathering_stopped));
}

/// Makes the gathering thread's storage waits give up (`stop`), or wait again (`not stop`), as the training loader
/// does around leaving a loop on an exception: the gather under way fails with `KeyboardInterrupt` instead of
/// waiting for a read that may not end.
#[pyfunction]
pub(crate) fn stop_gathering(stop: bool) {
    GATHERING_STOPPED.store(stop, Ordering::SeqCst);
}

/// The exception for a wait given up at the caller's request: the one its signal handler raised.
pub(crate) fn interrupted() -> PyErr {
    RAISED
        .with(|r| r.borrow_mut().take())
        .unwrap_or_else(|| PyKeyboardInterrupt::new_err("interrupted while waiting for storage"))
}
