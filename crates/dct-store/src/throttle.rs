//! A store as a distant object store would be: a latency per request, with a seeded random tail, and a bandwidth per
//! response body. It wraps every kind of location, local directories included (whose bodies are files), so a
//! reader can be measured locally as it reads object storage: set with the store options
//! [`SIMULATE_LATENCY_MS_KEY`], [`SIMULATE_JITTER_MS_KEY`], [`SIMULATE_MB_PER_S_KEY`] and [`SIMULATE_SEED_KEY`],
//! or with [`throttled`]. Unlike `object_store`'s `ThrottledStore`, a body is handed over whole once its transfer
//! time has passed, so a body read in many small chunks takes the time its size says, not a timer's tick a chunk.

use std::num::NonZeroU32;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ListResult, ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::Store;

/// Store option: milliseconds before every request's first byte (a simulated distance; default none).
pub const SIMULATE_LATENCY_MS_KEY: &str = "simulate_latency_ms";
/// Store option: the mean, in milliseconds, of an exponentially distributed delay added to each request's latency
/// (object stores' long tail).
pub const SIMULATE_JITTER_MS_KEY: &str = "simulate_jitter_ms";
/// Store option: each response body's bandwidth in MB (10^6 bytes) a second (up to 4,294; more is taken as that).
pub const SIMULATE_MB_PER_S_KEY: &str = "simulate_mb_per_s";
/// Store option: the seed of the jitter's draws (default 0).
pub const SIMULATE_SEED_KEY: &str = "simulate_seed";

/// How a [`throttled`] store delays requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttle {
    /// Time to first byte of every GET (and the time of every PUT and LIST).
    pub latency: Duration,
    /// Bandwidth of each GET body, in bytes per second (`None`: unlimited).
    pub bytes_per_second: Option<NonZeroU32>,
    /// The mean of an exponentially distributed delay added to each request's latency (zero: none).
    pub jitter: Duration,
    /// The seed of the jitter's draws, shared by all requests in the order they start.
    pub seed: u64,
}

impl Throttle {
    /// Whether it delays anything.
    pub fn is_none(&self) -> bool {
        self.latency.is_zero() && self.jitter.is_zero() && self.bytes_per_second.is_none()
    }

    /// Takes the simulation's keys out of `config` (store options) into a throttle; an unusable value is an error
    /// naming its key.
    pub(crate) fn take_from(config: &mut Vec<(String, String)>) -> Result<Throttle, String> {
        let mut throttle = Throttle::default();
        let mut error = None;
        config.retain(|(k, v)| {
            let ms = || {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0 && *x < 1e9)
                    .map(|x| Duration::from_secs_f64(x / 1e3))
                    .ok_or_else(|| format!("{k} must be a number of milliseconds >= 0, not {v:?}"))
            };
            let got = match k.as_str() {
                SIMULATE_LATENCY_MS_KEY => ms().map(|d| throttle.latency = d),
                SIMULATE_JITTER_MS_KEY => ms().map(|d| throttle.jitter = d),
                SIMULATE_MB_PER_S_KEY => v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .and_then(|x| NonZeroU32::new((x * 1e6).round().min(f64::from(u32::MAX)) as u32))
                    .map(|b| throttle.bytes_per_second = Some(b))
                    .ok_or_else(|| format!("{k} must be a positive number of MB a second, not {v:?}")),
                SIMULATE_SEED_KEY => v
                    .parse::<u64>()
                    .map(|s| throttle.seed = s)
                    .map_err(|_| format!("{k} must be a whole number >= 0, not {v:?}")),
                _ => return true,
            };
            if let Err(e) = got {
                error.get_or_insert(e);
            }
            false
        });
        error.map_or(Ok(throttle), Err)
    }
}

/// `store` with every request delayed as `throttle` says (an object store seen over a network). Works over
/// every backend, local directories included (read through the backend, not memory-mapped). A PUT, once sent,
/// lands even if its caller stops waiting for it.
pub fn throttled(store: &Store, throttle: Throttle) -> Store {
    let jitter = Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(throttle.seed)));
    store.layered(|inner| Arc::new(ThrottleStore { inner, throttle, jitter }) as Arc<dyn ObjectStore>)
}

#[derive(Debug)]
struct ThrottleStore {
    inner: Arc<dyn ObjectStore>,
    throttle: Throttle,
    jitter: Arc<Mutex<ChaCha8Rng>>,
}

impl ThrottleStore {
    /// A request's time to first byte: the latency and a draw of the jitter.
    fn first_byte(&self) -> Duration {
        let mean = self.throttle.jitter.as_secs_f64();
        if mean <= 0.0 {
            return self.throttle.latency;
        }
        // An exponential draw by inversion: -mean ln(1 - u), u in [0, 1).
        let u: f64 = self.jitter.lock().unwrap_or_else(|e| e.into_inner()).random();
        self.throttle.latency + Duration::from_secs_f64(-mean * (1.0 - u).ln())
    }
}

async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// The time `n` body bytes take at `bytes_per_second`.
fn transfer(bytes_per_second: Option<NonZeroU32>, n: usize) -> Duration {
    match bytes_per_second {
        Some(bps) => Duration::from_secs_f64(n as f64 / f64::from(bps.get())),
        None => Duration::ZERO,
    }
}

object_store_layer!(ThrottleStore, forward: [put_multipart_opts, delete_stream, copy_opts, rename_opts], {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        // A PUT once sent lands even if its caller stops waiting (a server commits the body it received; a local
        // write runs on a blocking thread), so it runs as a task of its own that dropping this future leaves be.
        let (inner, location, latency) = (self.inner.clone(), location.clone(), self.first_byte());
        let put = tokio::spawn(async move {
            sleep(latency).await;
            inner.put_opts(&location, payload, opts).await
        });
        put.await.map_err(|e| object_store::Error::Generic { store: "throttle", source: Box::new(e) })?
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        sleep(self.first_byte()).await;
        let got = self.inner.get_opts(location, options).await?;
        // The body is handed over once its transfer time has passed, whole (as the last of its bytes would arrive):
        // pacing each chunk instead would add a timer's tick to each small chunk of a file.
        sleep(transfer(self.throttle.bytes_per_second, (got.range.end - got.range.start) as usize)).await;
        Ok(got)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        sleep(self.first_byte()).await;
        let got = self.inner.get_ranges(location, ranges).await?;
        sleep(transfer(self.throttle.bytes_per_second, got.iter().map(Bytes::len).sum())).await;
        Ok(got)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let latency = self.first_byte();
        let listed = self.inner.list(prefix);
        futures::stream::once(async move {
            sleep(latency).await;
            listed
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        sleep(self.first_byte()).await;
        self.inner.list_with_delimiter(prefix).await
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreOptions;

    fn simulated(dir: &std::path::Path, options: &[(&str, &str)]) -> Result<Store, crate::StoreError> {
        let options = options.iter().fold(StoreOptions::default(), |o, (k, v)| o.with_option(k, v));
        Store::from_url(dir.to_str().unwrap(), &options)
    }

    #[tokio::test(start_paused = true)]
    async fn store_options_delay_a_local_read_by_the_latency_and_the_body_s_size_over_the_bandwidth() {
        let dir = tempfile::tempdir().unwrap();
        let body = vec![7u8; 1_000_000];
        std::fs::write(dir.path().join("tile.dct"), &body).unwrap();
        let store = simulated(dir.path(), &[("simulate_latency_ms", "30"), ("simulate_mb_per_s", "100")]).unwrap();
        // Virtual time: the clock moves only by the layer's sleeps. 30 ms, then 1 MB at 100 MB/s: 10 ms.
        let start = tokio::time::Instant::now();
        let got = store.get_exact("tile.dct", body.len() as u64).await.unwrap();
        let took = start.elapsed();
        assert_eq!(&got[..], &body[..]);
        assert!(took >= Duration::from_millis(40) && took < Duration::from_millis(41), "{took:?}");
        // The same directory without the options is memory-mapped and not delayed.
        let plain = simulated(dir.path(), &[]).unwrap();
        let start = tokio::time::Instant::now();
        assert_eq!(&plain.get_exact("tile.dct", body.len() as u64).await.unwrap()[..], &body[..]);
        assert!(start.elapsed() < Duration::from_millis(1));
    }

    #[test]
    fn the_jitter_is_exponential_and_seeded() {
        let draws = |seed: u64| {
            let throttle = Throttle { jitter: Duration::from_millis(10), seed, ..Throttle::default() };
            let inner: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
            let store =
                ThrottleStore { inner, throttle, jitter: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))) };
            (0..2_000).map(|_| store.first_byte().as_secs_f64()).collect::<Vec<_>>()
        };
        let (a, b, c) = (draws(1), draws(1), draws(2));
        assert_eq!(a, b, "the same seed draws the same delays");
        assert_ne!(a, c);
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        // Seeded; an exponential's mean over 2,000 draws is within 3 standard errors (6.7%) of 10 ms.
        assert!((mean - 0.010).abs() < 0.0007, "{mean}");
        let over = a.iter().filter(|&&x| x > 0.030).count() as f64 / a.len() as f64;
        assert!((over - (-3.0f64).exp()).abs() < 0.015, "a tail: P(> 3 means) = e^-3, got {over}");
    }

    #[test]
    fn unusable_simulation_options_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        for (key, value) in [
            ("simulate_latency_ms", "-1"),
            ("simulate_jitter_ms", "often"),
            ("simulate_mb_per_s", "0"),
            ("simulate_seed", "1.5"),
        ] {
            let e = simulated(dir.path(), &[(key, value)]).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(value), "{e}");
        }
        let ok = simulated(dir.path(), &[("simulate_latency_ms", "0.5"), ("simulate_seed", "3")]).unwrap();
        assert!(
            format!("{ok:?}").contains("memory_mapped: false"),
            "a simulated store reads through the layer: {ok:?}"
        );
    }
}
