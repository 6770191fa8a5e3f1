//! Retries with exponential backoff and full jitter.
//!
//! A request is retried when it fails in a way that another attempt may not: a generic store error (network,
//! throttling, 5xx, a timeout), a body stream that breaks off, or a body whose length differs from the range the
//! store announced. Missing objects, permission and configuration errors are final at once. Between attempts the
//! caller sleeps for an exponentially growing, fully jittered delay, so that many workers hitting one failing
//! endpoint spread out instead of retrying in lockstep.
//!
//! `object_store`'s cloud clients retry an HTTP failure once underneath (within 30 s; see `cloud.rs`), so the two
//! layers together make at most 8 attempts; this layer adds what they cannot see: faults of local and wrapped
//! stores, and bodies that end early or run long.
//!
//! ```
//! use dct_store::RetryPolicy;
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let policy = RetryPolicy { initial_backoff: std::time::Duration::from_millis(1), ..RetryPolicy::default() };
//! let mut calls = 0;
//! let got: Result<u32, &str> = policy
//!     .run_when(|e| *e == "connection reset", || {
//!         calls += 1;
//!         let fail = calls < 3;
//!         async move { if fail { Err("connection reset") } else { Ok(42) } }
//!     })
//!     .await;
//! assert_eq!(got, Ok(42));
//! assert_eq!(calls, 3);
//! # });
//! ```

use std::future::Future;
use std::hash::BuildHasher;
use std::time::Duration;

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

    /// The longest time all backoffs of one request can take (the sum of the delay bounds).
    pub fn max_total_backoff(&self) -> Duration {
        (1..=self.max_retries)
            .map(|retry| {
                let doubling = 1u32.checked_shl(retry - 1).unwrap_or(u32::MAX);
                self.initial_backoff.saturating_mul(doubling).min(self.max_backoff)
            })
            .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// Runs `op` until it succeeds, fails with an error that `transient` does not accept, or has been tried
    /// `1 + max_retries` times; returns the last result.
    pub async fn run_when<T, E, F, Fut>(&self, transient: impl Fn(&E) -> bool, op: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_counted(transient, op).await.0
    }

    /// [`run_when`](Self::run_when), also returning how many attempts were made.
    pub(crate) async fn run_counted<T, E, F, Fut>(
        &self,
        transient: impl Fn(&E) -> bool,
        mut op: F,
    ) -> (Result<T, E>, u32)
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
                other => return (other, retry + 1),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn fast(max_retries: u32) -> RetryPolicy {
        RetryPolicy { max_retries, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(4) }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_until_success() {
        let calls = Cell::new(0);
        let (got, attempts) = fast(3)
            .run_counted(
                |_: &&str| true,
                || {
                    calls.set(calls.get() + 1);
                    let n = calls.get();
                    async move { if n <= 3 { Err("reset") } else { Ok(n) } }
                },
            )
            .await;
        assert_eq!(got, Ok(4));
        assert_eq!((calls.get(), attempts), (4, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_retries_with_the_last_error() {
        let calls = Cell::new(0);
        let (got, attempts) = fast(2)
            .run_counted(
                |_: &String| true,
                || {
                    calls.set(calls.get() + 1);
                    let n = calls.get();
                    async move { Err::<(), _>(format!("failure {n}")) }
                },
            )
            .await;
        assert_eq!(got, Err("failure 3".to_string()));
        assert_eq!((calls.get(), attempts), (3, 3));
        let calls = Cell::new(0);
        let _ = RetryPolicy::never()
            .run_when(
                |_: &&str| true,
                || {
                    calls.set(calls.get() + 1);
                    async { Err::<(), _>("reset") }
                },
            )
            .await;
        assert_eq!(calls.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn final_errors_are_not_retried() {
        let calls = Cell::new(0);
        let (got, attempts) = fast(5)
            .run_counted(
                |e: &&str| *e != "not found",
                || {
                    calls.set(calls.get() + 1);
                    async { Err::<(), _>("not found") }
                },
            )
            .await;
        assert_eq!(got, Err("not found"));
        assert_eq!((calls.get(), attempts), (1, 1));
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
        // 100 + 200 + 400 + 800 + 1600 + 2000 * 35 ms.
        assert_eq!(p.max_total_backoff(), Duration::from_millis(3100 + 2000 * 35));
    }
}
