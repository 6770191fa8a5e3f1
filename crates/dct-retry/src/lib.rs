//! Retries of object-store requests, shared by the dataset reader and writer (`dct-dataset`) and obs
//! localization (`dct-obs`).
//!
//! A request is retried when it fails in a way that another attempt may not: a generic store error (network,
//! throttling, 5xx, a timeout), a body stream that breaks off, or a body whose length differs from the range the
//! store claimed ([`short_or_long_body`]). Missing objects, permission and configuration errors are final at once.
//! Between attempts the caller sleeps for an exponentially growing, fully jittered delay, so that many workers
//! hitting one failing endpoint spread out instead of retrying in lockstep.
//!
//! [`get_whole`] and [`get_range`] are the retried reads the other crates use.
//!
//! `object_store`'s cloud clients already retry HTTP failures underneath (see its `RetryConfig`); this layer adds
//! what they cannot see: faults of local and wrapped stores, and bodies that end early or run long.
//!
//! ```
//! use dct_retry::RetryPolicy;
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let policy = RetryPolicy { initial_backoff: std::time::Duration::from_millis(1), ..RetryPolicy::default() };
//! let mut calls = 0;
//! let got = policy
//!     .run(|| {
//!         calls += 1;
//!         let fail = calls < 3;
//!         async move {
//!             if fail {
//!                 Err(object_store::Error::Generic { store: "demo", source: "connection reset".into() })
//!             } else {
//!                 Ok(42)
//!             }
//!         }
//!     })
//!     .await;
//! assert_eq!(got.unwrap(), 42);
//! assert_eq!(calls, 3);
//! # });
//! ```

use std::future::Future;
use std::hash::BuildHasher;
use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// How often and how patiently a failed request is retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (default 3; 0 disables retrying).
    pub max_retries: u32,
    /// Upper bound of the first delay (default 100 ms); the bound doubles with every retry.
    pub initial_backoff: Duration,
    /// Largest delay bound (default 5 s).
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_retries: 3, initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5) }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn never() -> Self {
        RetryPolicy { max_retries: 0, ..RetryPolicy::default() }
    }

    /// The delay before retry number `retry` (1 for the first retry): uniformly random in
    /// `[0, min(max_backoff, initial_backoff * 2^(retry-1))]` ("full jitter").
    pub fn backoff(&self, retry: u32) -> Duration {
        let doubling = 1u32.checked_shl(retry.saturating_sub(1)).unwrap_or(u32::MAX);
        let bound = self.initial_backoff.saturating_mul(doubling).min(self.max_backoff);
        // A random fraction from std's randomly keyed hasher: no extra dependency for a little noise.
        let r = std::collections::hash_map::RandomState::new().hash_one(retry);
        bound.mul_f64((r >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Runs `op` until it succeeds, fails with an error that is not [transient](is_transient), or has been tried
    /// `1 + max_retries` times; returns the last result.
    pub async fn run<T, F, Fut>(&self, op: F) -> Result<T, object_store::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, object_store::Error>>,
    {
        self.run_when(is_transient, op).await
    }

    /// [`run`](Self::run) for any error type: `transient` says which errors are worth another attempt (for a
    /// layer whose errors wrap store errors, or that finds damaged bodies itself).
    pub async fn run_when<T, E, F, Fut>(&self, transient: impl Fn(&E) -> bool, mut op: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut retry = 0;
        loop {
            match op().await {
                Err(e) if retry < self.max_retries && transient(&e) => {
                    retry += 1;
                    tokio::time::sleep(self.backoff(retry)).await;
                }
                other => return other,
            }
        }
    }
}

/// Whether another attempt of the request that failed with `e` may succeed: generic errors, the variant every
/// backend uses for network failures, timeouts, throttling and server errors, and the one a body stream that
/// breaks off gives. Missing objects, failed preconditions, permission, authentication and configuration errors
/// are final.
pub fn is_transient(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. })
}

/// The (transient) error for a body of `got` bytes where the store announced `expected`: the transfer went
/// wrong, and another attempt may get the right bytes.
pub fn short_or_long_body(expected: u64, got: u64) -> object_store::Error {
    object_store::Error::Generic {
        store: "deltacells",
        source: format!("the response body held {got} bytes where {expected} were announced").into(),
    }
}

/// GETs the whole object at `path` with retries. `accept` sees the object's size before any of its body is read:
/// if it refuses, the result is `Ok(Err(size))` and nothing more is read. A body whose length differs from the
/// size is retried like a transient failure.
pub async fn get_whole(
    store: &dyn ObjectStore,
    path: &Path,
    policy: &RetryPolicy,
    accept: impl Fn(u64) -> bool,
) -> Result<Result<Bytes, u64>, object_store::Error> {
    policy
        .run(|| async {
            let got = store.get(path).await?;
            let size = got.meta.size;
            let announced = got.range.end.saturating_sub(got.range.start);
            if !accept(size) || !accept(announced) {
                return Ok(Err(size));
            }
            let bytes = got.bytes().await?;
            if bytes.len() as u64 != announced {
                return Err(short_or_long_body(announced, bytes.len() as u64));
            }
            Ok(Ok(bytes))
        })
        .await
}

/// GETs `range` of the object at `path` with retries; a body of another length is retried like a transient
/// failure.
pub async fn get_range(
    store: &dyn ObjectStore,
    path: &Path,
    range: Range<u64>,
    policy: &RetryPolicy,
) -> Result<Bytes, object_store::Error> {
    let want = range.end - range.start;
    policy
        .run(|| async {
            let b = store.get_range(path, range.clone()).await?;
            if b.len() as u64 != want {
                return Err(short_or_long_body(want, b.len() as u64));
            }
            Ok(b)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn transient() -> object_store::Error {
        object_store::Error::Generic { store: "test", source: "reset".into() }
    }

    fn fast(max_retries: u32) -> RetryPolicy {
        RetryPolicy { max_retries, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(4) }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_until_success() {
        let calls = Cell::new(0);
        let got = fast(3)
            .run(|| {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move { if n <= 3 { Err(transient()) } else { Ok(n) } }
            })
            .await;
        assert_eq!(got.unwrap(), 4);
        assert_eq!(calls.get(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_retries_with_the_last_error() {
        let calls = Cell::new(0);
        let got: Result<(), _> = fast(2)
            .run(|| {
                calls.set(calls.get() + 1);
                async { Err(transient()) }
            })
            .await;
        assert!(matches!(got, Err(object_store::Error::Generic { .. })));
        assert_eq!(calls.get(), 3);
        let calls = Cell::new(0);
        let _ = RetryPolicy::never()
            .run(|| {
                calls.set(calls.get() + 1);
                async { Err::<(), _>(transient()) }
            })
            .await;
        assert_eq!(calls.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn final_errors_are_not_retried() {
        let calls = Cell::new(0);
        let got: Result<(), _> = fast(5)
            .run(|| {
                calls.set(calls.get() + 1);
                async { Err(object_store::Error::NotFound { path: "x".into(), source: "gone".into() }) }
            })
            .await;
        assert!(matches!(got, Err(object_store::Error::NotFound { .. })));
        assert_eq!(calls.get(), 1);
        assert!(is_transient(&short_or_long_body(10, 9)));
    }

    #[test]
    fn backoff_is_jittered_and_bounded() {
        let p = RetryPolicy {
            max_retries: 40,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        };
        for retry in 1..40 {
            let bound = Duration::from_millis(100).saturating_mul(1 << (retry - 1).min(20)).min(p.max_backoff);
            let d = p.backoff(retry);
            assert!(d <= bound, "retry {retry}: {d:?} > {bound:?}");
        }
        // Jitter: 50 draws of the same retry are not all equal.
        let draws: std::collections::HashSet<Duration> = (0..50).map(|_| p.backoff(3)).collect();
        assert!(draws.len() > 1);
    }
}
