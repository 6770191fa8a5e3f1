//! A layer that counts and records requests, and can fail chosen GETs.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetRange, GetResult, ListResult, ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult,
};

/// One read request a [`Counter`] has seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The object's path, relative to the counted store's location.
    pub path: String,
    /// `None` for a whole-object GET, else the byte range returned.
    pub range: Option<Range<u64>>,
    /// Whether it was a suffix request.
    pub suffix: bool,
    /// Bytes returned.
    pub bytes: u64,
}

/// Requests a [`Counter`] has seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// GET requests (not HEAD), including failed and injected-failure ones.
    pub gets: u64,
    /// Bytes returned by successful GETs (the length of the returned ranges).
    pub get_bytes: u64,
    /// HEAD requests.
    pub heads: u64,
    /// PUT requests (single-part).
    pub puts: u64,
    /// Bytes sent by PUTs.
    pub put_bytes: u64,
    /// LIST requests.
    pub lists: u64,
    /// Delete requests.
    pub deletes: u64,
    /// GET requests per object path (relative to the counted store's location).
    pub gets_by_path: BTreeMap<String, u64>,
    /// Paths of the PUT requests (relative to the counted store's location), in the order they were issued.
    pub put_paths: Vec<String>,
    /// COPY requests (server-side copies; hard links on local files).
    pub copies: u64,
    /// Destination paths of the COPY requests, in the order they were issued.
    pub copy_paths: Vec<String>,
    /// The most GET and PUT requests that were waiting for the backend at once.
    pub max_in_flight: u64,
}

impl RequestCounts {
    /// GET requests of the objects whose path ends with `suffix` (e.g. `tiles/tile_000003.dct`).
    pub fn gets_of(&self, suffix: &str) -> u64 {
        self.gets_by_path.iter().filter(|(p, _)| p.ends_with(suffix)).map(|(_, n)| n).sum()
    }
}

#[derive(Debug, Default)]
struct State {
    counts: RequestCounts,
    log: Vec<Request>,
    failures: Vec<(String, u64)>,
    in_flight: u64,
}

/// The handle of a counting layer ([`counted`](super::counted)): its counters, its log of reads, and failures
/// to inject.
#[derive(Debug, Default)]
pub struct Counter {
    state: Mutex<State>,
}

impl Counter {
    /// A snapshot of the counters.
    pub fn counts(&self) -> RequestCounts {
        self.lock().counts.clone()
    }

    /// Every read (GET and ranged GET) since the last [`reset`](Self::reset), in order.
    pub fn requests(&self) -> Vec<Request> {
        self.lock().log.clone()
    }

    /// Bytes returned by the reads in [`requests`](Self::requests).
    pub fn total_bytes(&self) -> u64 {
        self.lock().log.iter().map(|r| r.bytes).sum()
    }

    /// Sets every counter to zero and clears the log.
    pub fn reset(&self) {
        let mut s = self.lock();
        s.counts = RequestCounts::default();
        s.log.clear();
    }

    /// Makes the next `times` GETs of objects whose path ends with `suffix` fail with a generic (transient)
    /// error, as a flaky network would.
    pub fn fail_next_gets(&self, suffix: &str, times: u64) {
        self.lock().failures.push((suffix.to_string(), times));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enter(&self) {
        let mut s = self.lock();
        s.in_flight += 1;
        s.counts.max_in_flight = s.counts.max_in_flight.max(s.in_flight);
    }

    fn leave(&self) {
        self.lock().in_flight -= 1;
    }
}

/// The object store layer behind a [`Counter`].
#[derive(Debug)]
pub(crate) struct CountingStore {
    pub(crate) inner: Arc<dyn ObjectStore>,
    pub(crate) counter: Arc<Counter>,
    /// The counted store's prefix: paths are recorded relative to it.
    pub(crate) prefix: Path,
}

impl CountingStore {
    fn name(&self, location: &Path) -> String {
        match location.prefix_match(&self.prefix) {
            Some(parts) => parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/"),
            None => location.to_string(),
        }
    }
}

object_store_layer!(CountingStore, forward: [put_multipart_opts, rename_opts], {
    async fn copy_opts(&self, from: &Path, to: &Path, options: object_store::CopyOptions) -> object_store::Result<()> {
        {
            let mut s = self.counter.lock();
            s.counts.copies += 1;
            s.counts.copy_paths.push(self.name(to));
        }
        self.counter.enter();
        let got = self.inner.copy_opts(from, to, options).await;
        self.counter.leave();
        got
    }


    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        {
            let mut s = self.counter.lock();
            s.counts.puts += 1;
            s.counts.put_bytes += payload.content_length() as u64;
            s.counts.put_paths.push(self.name(location));
        }
        self.counter.enter();
        let got = self.inner.put_opts(location, payload, opts).await;
        self.counter.leave();
        got
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        let head = options.head;
        let suffix = matches!(options.range, Some(GetRange::Suffix(_)));
        let ranged = options.range.is_some();
        let injected = {
            let mut s = self.counter.lock();
            if head {
                s.counts.heads += 1;
                false
            } else {
                s.counts.gets += 1;
                let key = self.name(location);
                *s.counts.gets_by_path.entry(key.clone()).or_default() += 1;
                match s.failures.iter_mut().find(|(suffix, n)| *n > 0 && key.ends_with(suffix.as_str())) {
                    Some((_, n)) => {
                        *n -= 1;
                        true
                    }
                    None => false,
                }
            }
        };
        if injected {
            return Err(object_store::Error::Generic {
                store: "Counter",
                source: format!("injected transient failure of GET {location}").into(),
            });
        }
        self.counter.enter();
        let result = self.inner.get_opts(location, options).await;
        self.counter.leave();
        let result = result?;
        if !head {
            let bytes = result.range.end - result.range.start;
            let mut s = self.counter.lock();
            s.counts.get_bytes += bytes;
            s.log.push(Request {
                path: self.name(location),
                range: ranged.then(|| result.range.clone()),
                suffix,
                bytes,
            });
        }
        Ok(result)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        {
            let mut s = self.counter.lock();
            s.counts.gets += ranges.len() as u64;
            *s.counts.gets_by_path.entry(self.name(location)).or_default() += ranges.len() as u64;
        }
        let out = self.inner.get_ranges(location, ranges).await?;
        let mut s = self.counter.lock();
        for (r, b) in ranges.iter().zip(&out) {
            s.counts.get_bytes += b.len() as u64;
            let request =
                Request { path: self.name(location), range: Some(r.clone()), suffix: false, bytes: b.len() as u64 };
            s.log.push(request);
        }
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.counter.lock().counts.deletes += 1;
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counter.lock().counts.lists += 1;
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.counter.lock().counts.lists += 1;
        self.inner.list_with_delimiter(prefix).await
    }
});
