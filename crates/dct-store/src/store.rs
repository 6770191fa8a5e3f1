//! [`Store`]: a dataset location, the object store behind it and how its requests are retried and capped.

use std::fmt;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::limit::LimitStore;
use object_store::path::Path;

use crate::open::{LocalReads, StoreOptions};
use crate::{RetryPolicy, StoreError};

/// A dataset location: an object store and the prefix (directory) of the dataset inside it.
///
/// Every request is retried according to its [`RetryPolicy`] and counts against its request cap: at most
/// [`max_requests`](Store::max_requests) requests are in flight at once (a GET holds its slot until its body has
/// been read), shared by every clone of the store, so that thousands of tiles prefetched by many readers of one
/// location do not open thousands of connections. Objects are named by `/`-separated paths relative to the
/// prefix (`manifest.json`, `tiles/tile_000000.dct`).
///
/// Cloning is cheap (the backend and the cap are shared).
#[derive(Clone)]
pub struct Store {
    /// The backend (possibly wrapped by test layers), without the cap.
    pub(crate) base: Arc<dyn ObjectStore>,
    /// `base` behind the request cap: what requests go to.
    pub(crate) inner: Arc<dyn ObjectStore>,
    pub(crate) prefix: Path,
    root: String,
    retry: RetryPolicy,
    max_requests: usize,
    /// The directory, for a local location.
    pub(crate) local_dir: Option<Arc<std::path::PathBuf>>,
    /// Whether tiles of a local location are memory-mapped ([`LocalReads::MemoryMap`]).
    pub(crate) memory_map: bool,
    /// Objects read whole and larger than this are read in concurrent parts of at most this size (0: never).
    part_bytes: u64,
    /// Set once the server answered a range with the whole object: no more parts (shared by clones).
    no_ranges: Arc<std::sync::atomic::AtomicBool>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("root", &self.root)
            .field("backend", &format_args!("{}", self.base))
            .field("max_requests", &self.max_requests)
            .field("part_bytes", &self.part_bytes)
            .field("retry", &self.retry)
            .field("memory_mapped", &(self.memory_map && self.local_dir.is_some()))
            .finish()
    }
}

impl Store {
    /// Opens the location `url`: a plain path or a URL (see the [crate docs](crate) for the schemes and options).
    ///
    /// Nothing is read or checked here: a missing local directory shows up as a missing object on the first
    /// read, and a writer creates it.
    pub fn from_url(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        crate::open::open(url, options)
    }

    /// An empty in-memory store (for examples, tests and scratch work); `name` names it in messages.
    pub fn memory(name: &str) -> Store {
        let inner: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        Store::assemble(inner, Path::default(), format!("memory://{name}"), &StoreOptions::default())
    }

    /// Puts the pieces together: `backend` at `prefix`, named `root` in messages.
    pub(crate) fn assemble(backend: Arc<dyn ObjectStore>, prefix: Path, root: String, options: &StoreOptions) -> Store {
        let mut store = Store {
            inner: backend.clone(),
            base: backend,
            prefix,
            root,
            retry: options.retry.clone(),
            max_requests: 0,
            local_dir: None,
            memory_map: false,
            part_bytes: 0,
            no_ranges: Arc::default(),
        };
        store.set_max_requests(options.max_requests);
        store
    }

    /// The same location marked as the local directory `dir`, read as `reads` says.
    pub(crate) fn with_local_dir(mut self, dir: std::path::PathBuf, reads: LocalReads) -> Store {
        self.local_dir = Some(Arc::new(dir));
        self.memory_map = reads == LocalReads::MemoryMap;
        self
    }

    fn set_max_requests(&mut self, max_requests: usize) {
        self.max_requests = max_requests.max(1);
        self.inner = Arc::new(LimitStore::new(self.base.clone(), self.max_requests));
    }

    /// This location with requests retried according to `retry`.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Store {
        self.retry = retry;
        self
    }

    /// This location with at most `max_requests` requests in flight (at least 1), under a cap of its own: clones
    /// made from here on share it, the store this was made from keeps its own.
    pub fn with_max_requests(mut self, max_requests: usize) -> Store {
        self.set_max_requests(max_requests);
        self
    }

    /// This location with whole-object reads (tiles) larger than `part_bytes` read as concurrent ranged GETs of
    /// parts of at most that size, as object storage is read fast (0: one GET per object). Clones made from here
    /// on share the setting. Set by the store option [`PART_BYTES_KEY`](crate::PART_BYTES_KEY); object storage
    /// and simulated distant stores default to [`DEFAULT_PART_BYTES`](crate::DEFAULT_PART_BYTES), other
    /// locations to 0. Memory-mapped local tiles are never read in parts.
    pub fn with_part_bytes(mut self, part_bytes: u64) -> Store {
        self.part_bytes = part_bytes;
        self
    }

    /// Whole-object reads larger than this many bytes are read in concurrent parts (0: never).
    pub fn part_bytes(&self) -> u64 {
        self.part_bytes
    }

    /// Whether large objects may still be read in parts: false once the server answered a range request with the
    /// whole object.
    pub(crate) fn serves_ranges(&self) -> bool {
        !self.no_ranges.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes that the server does not serve ranges: objects are read in one GET from here on.
    pub(crate) fn ranges_unserved(&self) {
        self.no_ranges.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// How requests are retried.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// At most this many requests are in flight at once.
    pub fn max_requests(&self) -> usize {
        self.max_requests
    }

    /// Whether the location is a local directory.
    pub fn is_local(&self) -> bool {
        self.local_dir.is_some()
    }

    /// The directory of a local location.
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        self.local_dir.as_deref().map(|p| p.as_path())
    }

    /// The location as given (a URL, an absolute local path, or `<store>/<prefix>`), without a trailing `/`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// A URL or path naming `rel` for messages.
    pub fn url(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    /// The location `rel` below this one (e.g. a dataset inside a bucket prefix), sharing the backend, the retry
    /// policy and the request cap.
    pub fn child(&self, rel: &str) -> Store {
        let mut child = self.clone();
        child.prefix = self.path(rel);
        child.root = self.url(rel.trim_matches('/'));
        child.local_dir = self.local_dir.as_ref().map(|d| Arc::new(d.join(rel.trim_matches('/'))));
        child
    }

    /// The object path of `rel`.
    pub(crate) fn path(&self, rel: &str) -> Path {
        rel.split('/').filter(|s| !s.is_empty()).fold(self.prefix.clone(), |p, part| p.join(part))
    }

    /// The path of `path` relative to the prefix, if it is under it.
    pub(crate) fn relative(&self, path: &Path) -> Option<String> {
        let parts = path.prefix_match(&self.prefix)?;
        Some(parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/"))
    }

    /// This location over the backend `wrap` makes of the current one (test layers), with a fresh request cap of
    /// the same size. Tiles are then read through the backend, not memory-mapped, so the layer sees every read.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn layered(&self, wrap: impl FnOnce(Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore>) -> Store {
        let mut store = self.clone();
        store.base = wrap(self.base.clone());
        store.memory_map = false;
        store.set_max_requests(self.max_requests);
        store
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_share_the_backend_and_name_their_objects() {
        let s = Store::memory("m").with_max_requests(3);
        let c = s.child("atlas/ds/");
        assert_eq!(c.url("manifest.json"), "memory://m/atlas/ds/manifest.json");
        assert_eq!(c.path("tiles/t.dct").as_ref(), "atlas/ds/tiles/t.dct");
        assert_eq!(c.relative(&c.path("tiles/t.dct")).as_deref(), Some("tiles/t.dct"));
        assert_eq!(c.relative(&Path::from("elsewhere/x")), None);
        assert_eq!(c.max_requests(), 3);
        assert!(!c.is_local());
        assert_eq!(Store::memory("m").with_max_requests(0).max_requests(), 1);
    }
}
