//! A layer that injects faults on a seeded schedule: errors, timeouts, slow first bytes, bodies that break off,
//! run short or long, come from the wrong range or have a flipped bit, failed PUTs and permanent refusals.
//!
//! Whether a request is faulted, and how, depends only on the seed, the request (object and range) and how many
//! times the same request was made before, not on the order of concurrent requests: runs are reproducible.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    Attributes, Extensions, GetOptions, GetRange, GetResult, GetResultPayload, ObjectStore, ObjectStoreExt, PutOptions,
    PutPayload, PutResult,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What can go wrong with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The request fails at once with a generic (transient) error.
    Error,
    /// The request hangs for a while, then fails with a timeout.
    Timeout,
    /// The first bytes come late ([`SLOW_START`]); the response is right.
    SlowStart,
    /// The body stream breaks off with an error after part of the bytes (a reset connection).
    BodyError,
    /// The body ends early; the result still claims the full range.
    Truncate,
    /// Extra bytes follow the body; the result still claims the requested range.
    Extend,
    /// The body holds bytes of another range of the object (whole-object GETs: the object rotated).
    WrongRange,
    /// One bit of the body is flipped.
    BitFlip,
    /// The request is refused as not permitted: a permanent failure, not retried.
    Denied,
}

/// The transient faults (all but [`Fault::Denied`]): what a flaky network or service does.
pub const ALL_FAULTS: [Fault; 8] = [
    Fault::Error,
    Fault::Timeout,
    Fault::SlowStart,
    Fault::BodyError,
    Fault::Truncate,
    Fault::Extend,
    Fault::WrongRange,
    Fault::BitFlip,
];

/// The transient faults that the store itself sees and outlasts by retrying: failed or slow requests and bodies of
/// the wrong length. The other two, [`Fault::WrongRange`] and [`Fault::BitFlip`], deliver well-formed bytes of the
/// right length that only the reader's checks (tile CRC-32, obs chunk CRC-32) can tell from the real ones.
pub const TRANSPORT_FAULTS: [Fault; 6] =
    [Fault::Error, Fault::Timeout, Fault::SlowStart, Fault::BodyError, Fault::Truncate, Fault::Extend];

/// How long a [`Fault::Timeout`] hangs before failing.
pub const TIMEOUT_SLEEP: Duration = Duration::from_millis(15);

/// How late the first bytes of a [`Fault::SlowStart`] response come.
pub const SLOW_START: Duration = Duration::from_millis(25);

#[derive(Debug)]
struct FaultState {
    seed: u64,
    /// Requests seen so far, by object and range.
    attempts: std::collections::HashMap<String, u64>,
    /// Probability that a GET of a matching object gets a fault.
    get_rate: f64,
    /// Fault kinds drawn from (uniformly).
    kinds: Vec<Fault>,
    /// Only objects whose path contains this are faulted.
    only: String,
    /// When set, GETs of matching objects are faulted on exactly their first `n` attempts (the rate is ignored).
    first_attempts: Option<u64>,
    /// PUTs (in order, counting from 0) that fail: `(index, stored anyway)`.
    fail_puts: Vec<(u64, bool)>,
    puts: u64,
    /// Faults injected since the last `take_log`: kind and object path.
    log: Vec<(Fault, String)>,
}

/// The handle of a fault-injecting layer ([`faulty`](super::faulty)): what to inject, and a log of what was.
/// Nothing is injected until a schedule is set.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<FaultState>,
}

/// The object store layer behind [`Faults`].
#[derive(Debug)]
pub(crate) struct FaultStore {
    pub(crate) inner: Arc<dyn ObjectStore>,
    pub(crate) faults: Arc<Faults>,
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Arc<Self> {
        Arc::new(Faults {
            state: Mutex::new(FaultState {
                seed,
                attempts: std::collections::HashMap::new(),
                get_rate: 0.0,
                kinds: ALL_FAULTS.to_vec(),
                only: String::new(),
                first_attempts: None,
                fail_puts: Vec::new(),
                puts: 0,
                log: Vec::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Faults GETs of objects whose path contains `only` with probability `rate`, drawing from `kinds`.
    pub fn set_gets(&self, rate: f64, kinds: &[Fault], only: &str) {
        let mut s = self.lock();
        s.get_rate = rate;
        s.kinds = kinds.to_vec();
        s.only = only.to_string();
        s.first_attempts = None;
    }

    /// Faults the next `n` attempts of every GET of objects whose path contains `only` (then lets them through),
    /// drawing from `kinds`: a fault that a retry outlasts. Attempts are counted afresh from here.
    pub fn set_first_gets(&self, n: u64, kinds: &[Fault], only: &str) {
        self.set_gets(1.0, kinds, only);
        let mut s = self.lock();
        s.first_attempts = Some(n);
        s.attempts.clear();
    }

    /// Stops injecting GET faults.
    pub fn clear_gets(&self) {
        self.set_gets(0.0, &[], "");
    }

    /// Makes the PUTs numbered `index` (counting every PUT through the layer from 0) fail: `(index, stored)`,
    /// where `stored` says whether the object is stored anyway (the response was lost) or not at all.
    pub fn fail_puts(&self, puts: &[(u64, bool)]) {
        self.lock().fail_puts = puts.to_vec();
    }

    /// PUTs seen so far.
    pub fn puts(&self) -> u64 {
        self.lock().puts
    }

    /// The faults injected since the last call: kind and object path.
    pub fn take_log(&self) -> Vec<(Fault, String)> {
        std::mem::take(&mut self.lock().log)
    }

    /// The fault (if any) for a GET of `location` (`range` as asked). The decision depends only on the seed, the
    /// request and how many times the same request was made before, not on the order of concurrent requests, so
    /// runs are reproducible.
    fn draw(&self, location: &Path, range: &Option<GetRange>) -> Option<(Fault, u64)> {
        let mut s = self.lock();
        let path = location.to_string();
        if s.get_rate <= 0.0 || s.kinds.is_empty() || !path.contains(s.only.as_str()) {
            return None;
        }
        let key = format!("{path} {range:?}");
        let attempt = {
            let n = s.attempts.entry(key.clone()).or_default();
            *n += 1;
            *n
        };
        let mut rng = ChaCha8Rng::seed_from_u64(fnv1a(s.seed, &format!("{key} #{attempt}")));
        let faulted = match s.first_attempts {
            Some(n) => attempt <= n,
            None => rng.random_bool(s.get_rate),
        };
        if !faulted {
            return None;
        }
        let kind = s.kinds[rng.random_range(0..s.kinds.len())];
        s.log.push((kind, path));
        Some((kind, rng.random::<u64>()))
    }
}

/// FNV-1a of `text`, started from `seed`.
fn fnv1a(seed: u64, text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn injected(what: String) -> object_store::Error {
    object_store::Error::Generic { store: "FaultStore", source: what.into() }
}

/// A body that yields `bytes` (in two pieces, then an error, if `break_off`).
fn body(bytes: Bytes, break_off: Option<String>) -> GetResultPayload {
    match break_off {
        None => GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed()),
        Some(msg) => {
            let items: Vec<object_store::Result<Bytes>> = vec![Ok(bytes), Err(injected(msg))];
            GetResultPayload::Stream(futures::stream::iter(items).boxed())
        }
    }
}

/// `bytes` changed by `fault` (a body fault), with `salt` choosing where. `other` yields the object's bytes in
/// another range of the same length, if there is one.
fn alter(fault: Fault, bytes: Bytes, salt: u64, other: Option<Bytes>) -> (Bytes, Option<String>) {
    let n = bytes.len();
    let mut rng = ChaCha8Rng::seed_from_u64(salt);
    match fault {
        Fault::BodyError => {
            let keep = if n == 0 { 0 } else { rng.random_range(0..n) };
            (bytes.slice(..keep), Some("injected: connection reset while reading the body".into()))
        }
        Fault::Truncate => {
            let keep = if n == 0 { 0 } else { rng.random_range(0..n) };
            (bytes.slice(..keep), None)
        }
        Fault::Extend => {
            let mut v = bytes.to_vec();
            let extra = rng.random_range(1..=64);
            v.extend((0..extra).map(|_| rng.random::<u8>()));
            (Bytes::from(v), None)
        }
        Fault::WrongRange => match other {
            Some(o) => (o, None),
            None if n > 1 => {
                // A whole-object GET: the bytes rotated by k, as if read from the wrong offset with wrap-around.
                let k = rng.random_range(1..n);
                let mut v = bytes[k..].to_vec();
                v.extend_from_slice(&bytes[..k]);
                (Bytes::from(v), None)
            }
            None => (bytes, None),
        },
        Fault::BitFlip => {
            if n == 0 {
                return (bytes, None);
            }
            let mut v = bytes.to_vec();
            let i = rng.random_range(0..n);
            v[i] ^= 1 << rng.random_range(0..8);
            (Bytes::from(v), None)
        }
        Fault::Error | Fault::Timeout | Fault::SlowStart | Fault::Denied => (bytes, None),
    }
}

object_store_layer!(FaultStore, forward: [put_multipart_opts, delete_stream, list, list_with_delimiter, copy_opts, rename_opts], {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        let fail = {
            let mut s = self.faults.lock();
            let i = s.puts;
            s.puts += 1;
            s.fail_puts.iter().find(|(k, _)| *k == i).copied()
        };
        match fail {
            None => self.inner.put_opts(location, payload, opts).await,
            Some((_, false)) => Err(injected(format!("injected failure of PUT {location}"))),
            Some((_, true)) => {
                // Stored, but the response is lost.
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected(format!("injected: response to PUT {location} lost")))
            }
        }
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        if options.head {
            return self.inner.get_opts(location, options).await;
        }
        let Some((fault, salt)) = self.faults.draw(location, &options.range) else {
            return self.inner.get_opts(location, options).await;
        };
        match fault {
            Fault::Error => return Err(injected(format!("injected transient failure of GET {location}"))),
            Fault::Timeout => {
                tokio::time::sleep(TIMEOUT_SLEEP).await;
                return Err(injected(format!("injected: GET {location} timed out")));
            }
            Fault::Denied => {
                return Err(object_store::Error::PermissionDenied {
                    path: location.to_string(),
                    source: "injected: 403 Forbidden".into(),
                });
            }
            Fault::SlowStart => {
                tokio::time::sleep(SLOW_START).await;
                return self.inner.get_opts(location, options).await;
            }
            _ => {}
        }
        let ranged = options.range.is_some();
        let GetResult { payload, meta, range, attributes, extensions } = self.inner.get_opts(location, options).await?;
        let whole = GetResult {
            payload,
            meta: meta.clone(),
            range: range.clone(),
            attributes: Attributes::default(),
            extensions: Extensions::default(),
        };
        let bytes = whole.bytes().await?;
        let len = range.end - range.start;
        let other = if fault == Fault::WrongRange && ranged && meta.size > len {
            let mut rng = ChaCha8Rng::seed_from_u64(salt ^ 0x5eed);
            let mut start = rng.random_range(0..=meta.size - len);
            if start == range.start {
                start = if start > 0 { start - 1 } else { start + 1 };
            }
            Some(self.inner.get_range(location, start..start + len).await?)
        } else {
            None
        };
        let (bytes, break_off) = alter(fault, bytes, salt, other);
        Ok(GetResult { payload: body(bytes, break_off), meta, range, attributes, extensions })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        // Each range through `get_opts`, so that each can be faulted.
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            out.push(self.get_range(location, r.clone()).await?);
        }
        Ok(out)
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The schedule faults at the rate asked, and a request's attempts are drawn independently: a retried fetch
    /// fails twice in a row at about rate², which is what retry budgets in tests are sized by.
    #[test]
    fn attempts_are_faulted_independently_at_the_rate() {
        let faults = Faults::new(11);
        faults.set_gets(0.05, &TRANSPORT_FAULTS, "tiles/");
        let (keys, attempts) = (20_000, 4);
        let (mut faulted, mut twice) = (0u32, 0u32);
        for k in 0..keys {
            let path = Path::from(format!("run-{k}/ds/tiles/tile_{:06}.dct", k % 37));
            let hits: Vec<bool> = (0..attempts).map(|_| faults.draw(&path, &None).is_some()).collect();
            faulted += hits.iter().filter(|&&h| h).count() as u32;
            twice += hits.windows(2).filter(|w| w[0] && w[1]).count() as u32;
        }
        let rate = f64::from(faulted) / f64::from(keys * attempts);
        let pair_rate = f64::from(twice) / f64::from(keys * (attempts - 1));
        assert!((0.045..0.055).contains(&rate), "fault rate {rate}");
        assert!((0.0015..0.0035).contains(&pair_rate), "two faults in a row at {pair_rate}, not ~0.0025");
    }
}
