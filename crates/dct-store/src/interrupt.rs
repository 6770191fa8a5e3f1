//! Waits that an interactive caller can interrupt (Ctrl-C in Python).
//!
//! Why: a read from a server that stops answering holds its caller until the request times out and its retry
//! gives up (minutes). A Python interpreter runs its signal handlers only between bytecodes, so while its main
//! thread waits here with the GIL released, Ctrl-C does nothing until the wait ends. A caller that can tell
//! whether its user has asked to stop (the Python binding: `PyErr_CheckSignals` on the main thread) registers a
//! check for its thread with [`watch_this_thread`]; every wait of this crate on that thread then wakes at least
//! every [`CHECK_EVERY`] and gives up with [`StoreError::Interrupted`] once the check says so. What was waited
//! for is abandoned, not undone: a request in flight is dropped, a spawned task aborted; a dataset's tile load
//! finishes in the background and is used by the next read.
//!
//! Threads without a check (the CLI, Rust programs, decoding threads) wait as before, without waking.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::thread::Thread;
use std::time::Duration;

use crate::StoreError;

/// How often a watched wait asks its check.
pub const CHECK_EVERY: Duration = Duration::from_millis(50);

/// A check for whether the thread's caller has asked to stop; it may do the caller's own bookkeeping (the Python
/// binding keeps the exception its signal handler raised, to give it back in place of the error).
pub type InterruptCheck = fn() -> bool;

thread_local! {
    static CHECK: Cell<Option<InterruptCheck>> = const { Cell::new(None) };
}

/// Makes every later wait of this crate on the calling thread interruptible by `check` (`None`: not any more).
pub fn watch_this_thread(check: Option<InterruptCheck>) {
    CHECK.with(|c| c.set(check));
}

/// The calling thread's check, if it has one.
fn this_thread_check() -> Option<InterruptCheck> {
    CHECK.with(Cell::get)
}

/// Wakes the waiting thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` to completion on the calling thread (as `futures::executor::block_on` does), giving up with
/// [`StoreError::Interrupted`] when the thread's check (see [`watch_this_thread`]) says its caller asked to stop.
/// Without a check it never gives up.
pub fn wait<F: Future>(f: F) -> Result<F::Output, StoreError> {
    let Some(check) = this_thread_check() else {
        return Ok(futures::executor::block_on(f));
    };
    let mut f = pin!(f);
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut asked = std::time::Instant::now();
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        // A wake-up (or a spurious one) polls again; the check is asked once every interval of waiting, however
        // often the future wakes (a wait that ends within one interval never asks it: in Python it takes the GIL).
        std::thread::park_timeout(CHECK_EVERY);
        if asked.elapsed() >= CHECK_EVERY {
            asked = std::time::Instant::now();
            if check() {
                return Err(StoreError::Interrupted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    static STOP: AtomicBool = AtomicBool::new(false);

    fn stop_asked() -> bool {
        STOP.load(Ordering::SeqCst)
    }

    #[test]
    fn a_watched_wait_gives_up_when_asked_and_not_before() {
        assert_eq!(wait(async { 3 }).unwrap(), 3, "unwatched");
        let (first_done, first_ended) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            watch_this_thread(Some(stop_asked));
            // Woken from another thread after several check intervals with nothing asked: its value.
            let (tx, rx) = futures::channel::oneshot::channel();
            std::thread::spawn(move || {
                std::thread::sleep(4 * CHECK_EVERY);
                tx.send(4).unwrap();
            });
            let woken = wait(rx).map(Result::ok);
            first_done.send(()).unwrap();
            // A future that never ends: given up once asked.
            let never = wait(std::future::pending::<()>());
            // Nor one that wakes its waiter more often than the interval without ending.
            let busy = wait(std::future::poll_fn(|cx: &mut Context<'_>| {
                let waker = cx.waker().clone();
                std::thread::spawn(move || {
                    std::thread::sleep(CHECK_EVERY / 5);
                    waker.wake();
                });
                Poll::<()>::Pending
            }));
            watch_this_thread(None);
            (woken, never, busy)
        });
        first_ended.recv().unwrap();
        STOP.store(true, Ordering::SeqCst);
        let (woken, never, busy) = waiter.join().unwrap();
        assert_eq!(woken.unwrap(), Some(4));
        assert!(matches!(never, Err(StoreError::Interrupted)), "{never:?}");
        assert!(matches!(busy, Err(StoreError::Interrupted)), "{busy:?}");
    }
}
