//! Helper threads for fork-join without heap allocation: what a [`Decoder`](crate::Decoder) with its own threads
//! uses to decode chunks in parallel.
//!
//! Entering a rayon pool from a thread outside it (`ThreadPool::install`) pushes a job onto the pool's global
//! queue, whose blocks are allocated every 63 pushes; a decoder called from the caller's own threads would then
//! allocate once every 63 tiles. Here each helper thread owns a slot (a mutex and a condition variable, which
//! allocate nothing on Linux) into which [`Helpers::join`] posts one closure that lives on the caller's stack; the
//! caller runs its own half meanwhile and does not return, or unwind, before the helper has finished. That
//! guarantee is what makes lending a stack closure to another thread sound, and it is the only unsafe code here.

#![allow(unsafe_code)]

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// A closure posted to a helper: a pointer to a [`StackJob`] on the poster's stack and the function that runs it.
#[derive(Clone, Copy)]
struct JobRef {
    job: *const (),
    run: unsafe fn(*const ()),
}

// SAFETY: a `JobRef` is only created from a `StackJob` whose closure and result are `Send`, and the poster keeps the
// job alive until the helper reports it done (see `Helpers::join`).
unsafe impl Send for JobRef {}

#[derive(Default)]
struct SlotState {
    job: Option<JobRef>,
    /// The posted job has run (its result or panic is in the job).
    done: bool,
    shutdown: bool,
}

/// One helper's mailbox.
#[derive(Default)]
struct Slot {
    state: Mutex<SlotState>,
    changed: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // No code panics while holding the lock, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, SlotState>) -> MutexGuard<'a, SlotState> {
        self.changed.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }
}

/// A closure and its result slot, on the stack of the thread that posts it.
struct StackJob<F, R> {
    f: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<std::thread::Result<R>>>,
}

impl<F: FnOnce() -> R + Send, R: Send> StackJob<F, R> {
    fn new(f: F) -> Self {
        StackJob { f: UnsafeCell::new(Some(f)), result: UnsafeCell::new(None) }
    }

    fn as_job_ref(&self) -> JobRef {
        JobRef { job: (self as *const Self).cast(), run: Self::run }
    }

    /// Runs the closure, storing its result or panic.
    ///
    /// # Safety
    /// `job` points to a live `StackJob<F, R>` that no other thread accesses until this returns.
    unsafe fn run(job: *const ()) {
        // SAFETY: the caller guarantees the pointee and exclusive access.
        let job = unsafe { &*job.cast::<Self>() };
        // SAFETY: exclusive access (above).
        let f = unsafe { (*job.f.get()).take() };
        if let Some(f) = f {
            let result = catch_unwind(AssertUnwindSafe(f));
            // SAFETY: exclusive access (above).
            unsafe { *job.result.get() = Some(result) };
        }
    }

    /// The result, once the job has run (on whichever thread).
    fn into_result(self) -> R {
        match self.result.into_inner() {
            Some(Ok(r)) => r,
            Some(Err(panic)) => resume_unwind(panic),
            None => unreachable!("a posted job runs before its poster reads the result"),
        }
    }
}

/// Waits, when dropped, until the helper behind `slot` has finished the posted job: also while unwinding, so the
/// job's stack frame outlives every use of it.
struct AwaitHelper<'a> {
    slot: &'a Slot,
}

impl Drop for AwaitHelper<'_> {
    fn drop(&mut self) {
        let mut state = self.slot.lock();
        while !state.done {
            state = self.slot.wait(state);
        }
        state.done = false;
    }
}

/// A fixed set of helper threads, each taking one job at a time (see the module docs).
pub(crate) struct Helpers {
    slots: Vec<Arc<Slot>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Helpers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Helpers").field("threads", &self.threads.len()).finish()
    }
}

impl Helpers {
    /// Starts `n` helper threads named `{name}-1` ... `{name}-n`.
    pub(crate) fn start(n: usize, name: &str) -> std::io::Result<Self> {
        let mut helpers = Helpers { slots: Vec::with_capacity(n), threads: Vec::with_capacity(n) };
        for i in 1..=n {
            let slot = Arc::new(Slot::default());
            let theirs = Arc::clone(&slot);
            let handle = std::thread::Builder::new().name(format!("{name}-{i}")).spawn(move || serve(&theirs))?;
            helpers.slots.push(slot);
            helpers.threads.push(handle);
        }
        Ok(helpers)
    }

    /// Runs `a` on this thread and `b` on helper `helper` at the same time, and returns both results once both
    /// have finished. If that helper is busy (or does not exist), `b` runs here after `a`. A panic in either is
    /// resumed here, after both have finished (`a`'s if both panicked).
    pub(crate) fn join<A, B, RA, RB>(&self, helper: usize, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA,
        B: FnOnce() -> RB + Send,
        RB: Send,
    {
        let job = StackJob::new(b);
        let Some(slot) = self.slots.get(helper).filter(|slot| post(slot, job.as_job_ref())) else {
            let ra = a();
            // SAFETY: the job was not posted, so this thread has it to itself.
            unsafe { StackJob::<B, RB>::run((&job as *const StackJob<B, RB>).cast()) };
            return (ra, job.into_result());
        };
        let wait = AwaitHelper { slot };
        let ra = catch_unwind(AssertUnwindSafe(a));
        drop(wait);
        // The helper is done with `job` (and the slot's mutex ordered its writes before this read). If both sides
        // panicked, `a`'s panic is the one resumed (as with `rayon::join`); `b`'s is dropped with the job.
        match ra {
            Ok(ra) => (ra, job.into_result()),
            Err(panic) => {
                drop(job);
                resume_unwind(panic)
            }
        }
    }
}

/// Posts `job` if the slot is idle.
fn post(slot: &Slot, job: JobRef) -> bool {
    let mut state = slot.lock();
    if state.job.is_some() || state.done || state.shutdown {
        return false;
    }
    state.job = Some(job);
    drop(state);
    slot.changed.notify_all();
    true
}

/// A helper thread's loop: run each posted job, report it done, until shut down.
fn serve(slot: &Slot) {
    let mut state = slot.lock();
    loop {
        if let Some(job) = state.job {
            drop(state);
            // SAFETY: the poster keeps the job alive and untouched until `done` is set below (`AwaitHelper`).
            unsafe { (job.run)(job.job) };
            state = slot.lock();
            state.job = None;
            state.done = true;
            slot.changed.notify_all();
        } else if state.shutdown {
            return;
        } else {
            state = slot.wait(state);
        }
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        for slot in &self.slots {
            slot.lock().shutdown = true;
            slot.changed.notify_all();
        }
        for handle in self.threads.drain(..) {
            // A helper cannot panic (jobs run under `catch_unwind`); nothing to report if it somehow did.
            let _: Result<(), Box<dyn Any + Send>> = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn join_runs_both_sides_and_returns_their_results() {
        let helpers = Helpers::start(2, "test-helper").expect("threads start");
        let mut left = vec![0u64; 1000];
        let mut right = vec![0u64; 1000];
        for round in 0..200u64 {
            let (a, b) = helpers.join(
                (round % 3) as usize, // 2 is out of range: runs inline
                || {
                    left.iter_mut().for_each(|x| *x += round);
                    left.iter().sum::<u64>()
                },
                || {
                    right.iter_mut().for_each(|x| *x += 2 * round);
                    std::thread::current().name().map(str::to_owned)
                },
            );
            assert_eq!(a, 1000 * (0..=round).sum::<u64>());
            match round % 3 {
                0 => assert_eq!(b.as_deref(), Some("test-helper-1")),
                1 => assert_eq!(b.as_deref(), Some("test-helper-2")),
                _ => assert_ne!(b.as_deref(), Some("test-helper-1")),
            }
        }
        assert!(right.iter().all(|&x| x == 2 * (0..200u64).sum::<u64>()));
    }

    #[test]
    fn nested_joins_use_different_helpers() {
        let helpers = Helpers::start(3, "nested").expect("threads start");
        let count = AtomicUsize::new(0);
        let leaf = || {
            count.fetch_add(1, Ordering::Relaxed);
        };
        helpers.join(0, || helpers.join(1, leaf, leaf), || helpers.join(2, leaf, leaf));
        // Helper 0 is busy with the right half when it posts to 2; helper 1 serves the left half's post.
        helpers.join(0, || helpers.join(0, leaf, leaf), leaf);
        assert_eq!(count.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn a_panic_on_either_side_reaches_the_caller_after_both_finish() {
        let helpers = Helpers::start(1, "panics").expect("threads start");
        let finished = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            helpers.join(
                0,
                || {
                    finished.fetch_add(1, Ordering::SeqCst);
                },
                || -> () { panic!("right side") },
            )
        }));
        assert!(r.is_err());
        let r = catch_unwind(AssertUnwindSafe(|| {
            helpers.join(
                0,
                || -> () { panic!("left side") },
                || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    finished.fetch_add(1, Ordering::SeqCst);
                },
            )
        }));
        assert!(r.is_err());
        assert_eq!(finished.load(Ordering::SeqCst), 2, "the helper's side finished before the panic was resumed");
        let both = catch_unwind(AssertUnwindSafe(|| {
            helpers.join(0, || -> () { std::panic::panic_any("left") }, || -> () { std::panic::panic_any("right") })
        }));
        let payload = both.expect_err("both sides panicked");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"left"), "the caller's own panic wins");
        // The helper still serves jobs.
        assert_eq!(helpers.join(0, || 1, || 2), (1, 2));
    }
}
