//! Where a dataset lives: one abstraction over the `object_store` crate for local directories and cloud buckets.
//!
//! | location | backend | feature |
//! |---|---|---|
//! | a plain path, `file:///abs/path` | [`object_store::local::LocalFileSystem`] (always available) | — |
//! | `s3://bucket/prefix`, `s3a://`, `https://s3.<region>.amazonaws.com/bucket/...` | Amazon S3 and compatible | `aws` |
//! | `gs://bucket/prefix` | Google Cloud Storage | `gcp` |
//! | `az://container/prefix`, `abfs://`, `abfss://`, `adl://`, `azure://`, `https://<acct>.blob.core.windows.net/...` | Azure Blob Storage | `azure` |
//! | other `http://` and `https://` URLs | plain HTTP(S) with range GETs (WebDAV PUT for writing) | `http` |
//!
//! Cloud backends are configured from each cloud's standard environment variables (`AWS_*`, `GOOGLE_*`,
//! `AZURE_*`, via the builders' `from_env`), then from the URL, then from [`StoreOptions::config`] (keys as
//! `object_store` names them, e.g. `aws_endpoint`, `aws_allow_http`, `google_service_account`,
//! `azure_storage_account_name`; client keys such as `allow_http` and `timeout` work for every backend).
//!
//! Local tiles are read through memory maps (by default; [`LocalReads`]): the decoder reads the page cache in
//! place, without first copying each tile into a buffer. Other local objects (manifest, side files) are read
//! with plain reads. Local writes go through `LocalFileSystem`, which writes a temporary file beside the
//! destination and renames it into place, so every object appears whole or not at all.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use crate::error::DatasetError;
pub use dct_retry::RetryPolicy;

/// How a location is opened and its requests retried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// Extra configuration for cloud backends: `(key, value)` pairs as `object_store`'s builders name them (e.g.
    /// `("aws_endpoint", "http://127.0.0.1:5555")`, `("allow_http", "true")`), applied in order. They override the
    /// environment. An unknown key is an error. Ignored for local paths.
    pub config: Vec<(String, String)>,
    /// Retries of failed requests (transient errors, bodies that break off or have the wrong length) with
    /// exponential backoff; see [`dct_retry`].
    pub retry: RetryPolicy,
    /// How tiles of a local dataset are read (ignored for cloud locations).
    pub local_reads: LocalReads,
}

/// How the tiles of a local dataset are read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LocalReads {
    /// Memory-map each tile file: no copy, the decoder reads the page cache in place. A tile file that another
    /// process truncates while it is mapped makes the reading process fail with `SIGBUS`; datasets are never
    /// rewritten in place (writers rename finished files into place), so this needs an outside process that
    /// truncates tiles under a running reader.
    #[default]
    MemoryMap,
    /// Read each tile file into memory with plain reads (through `object_store`'s `LocalFileSystem`), for
    /// directories that other programs may rewrite in place.
    Read,
}

/// A dataset location: an object store and the prefix (directory) of the dataset inside it. Every request it
/// makes is retried according to its [`RetryPolicy`].
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    prefix: Path,
    root: String,
    retry: RetryPolicy,
    /// The dataset directory, when tiles are memory-mapped from it.
    mapped_dir: Option<Arc<std::path::PathBuf>>,
}

/// Why a bounded GET returned no bytes.
#[derive(Debug)]
pub(crate) enum GetError {
    NotFound,
    TooLarge(u64),
    Store(object_store::Error),
}

impl Store {
    /// Opens the location `url` (a plain path or a URL; see the module docs for the schemes).
    ///
    /// Nothing is read or checked here: a missing local directory shows up as a missing manifest on open, and
    /// a writer creates it.
    pub fn from_url(url: &str, options: &StoreOptions) -> Result<Store, DatasetError> {
        let bad = |message: String| DatasetError::Url { url: url.to_string(), message };
        match url::Url::parse(url) {
            // A one-letter "scheme" is a Windows drive letter.
            Ok(parsed) if parsed.scheme().len() > 1 => {
                if parsed.scheme() == "file" {
                    let path = parsed
                        .to_file_path()
                        .map_err(|()| bad("a file:// URL must hold an absolute local path".into()))?;
                    return Store::local(&path, options).map_err(bad);
                }
                let (inner, prefix) = cloud::open(&parsed, options).map_err(bad)?;
                let root = url.trim_end_matches('/').to_string();
                Ok(Store { inner, prefix, root, retry: options.retry.clone(), mapped_dir: None })
            }
            _ => Store::local(std::path::Path::new(url), options).map_err(bad),
        }
    }

    fn local(path: &std::path::Path, options: &StoreOptions) -> Result<Store, String> {
        let abs = resolve_local(path).map_err(|e| format!("cannot resolve the path: {e}"))?;
        let prefix = Path::from_absolute_path(&abs).map_err(|e| format!("not a usable path: {e}"))?;
        let inner: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new());
        let root = abs.display().to_string().trim_end_matches('/').to_string();
        let mapped_dir = (options.local_reads == LocalReads::MemoryMap).then(|| Arc::new(abs));
        Ok(Store { inner, prefix, root, retry: options.retry.clone(), mapped_dir })
    }

    /// A dataset under `prefix` (`a/b`, no scheme; empty for the store's root) of an existing object store,
    /// e.g. [`object_store::memory::InMemory`], a [`object_store::throttle::ThrottledStore`] or an
    /// [`InstrumentedStore`]. Messages name objects as `<store>/<prefix>/<path>`. Requests are retried with the
    /// default [`RetryPolicy`] (see [`Store::with_retry`]).
    pub fn with_object_store(store: Arc<dyn ObjectStore>, prefix: &str) -> Result<Store, DatasetError> {
        let parsed = Path::parse(prefix)
            .map_err(|e| DatasetError::Url { url: prefix.to_string(), message: format!("not a valid prefix: {e}") })?;
        let root = if parsed.as_ref().is_empty() { format!("{store}") } else { format!("{store}/{parsed}") };
        Ok(Store { inner: store, prefix: parsed, root, retry: RetryPolicy::default(), mapped_dir: None })
    }

    /// This location with requests retried according to `retry`.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Store {
        self.retry = retry;
        self
    }

    /// How requests are retried.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The object store.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// The dataset's prefix inside the object store.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The location as given (a URL, an absolute local path, or `<store>/<prefix>`), without a trailing `/`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The object path of `rel` (a `/`-separated path relative to the dataset root, e.g. `tiles/tile_000000.dct`).
    pub fn path(&self, rel: &str) -> Path {
        rel.split('/').filter(|s| !s.is_empty()).fold(self.prefix.clone(), |p, part| p.join(part))
    }

    /// A URL or path naming `rel` for messages.
    pub fn url(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root)
    }

    /// GETs a whole object of at most `limit` bytes; the size is checked before any buffer is sized. Transient
    /// failures, and bodies whose length differs from what the store announced, are retried.
    pub(crate) async fn get_limited(&self, rel: &str, limit: u64) -> Result<Bytes, GetError> {
        match dct_retry::get_whole(self.inner.as_ref(), &self.path(rel), &self.retry, |n| n <= limit).await {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(size)) => Err(GetError::TooLarge(size)),
            Err(object_store::Error::NotFound { .. }) => Err(GetError::NotFound),
            Err(e) => Err(GetError::Store(e)),
        }
    }

    /// GETs a whole object whose size must be exactly `expected` bytes; `Err(Ok(size))` if it is not. Transient
    /// failures, and bodies whose length differs from what the store announced, are retried.
    /// Tiles of a local dataset are memory-mapped instead (see [`LocalReads`]).
    pub(crate) async fn get_exact(&self, rel: &str, expected: u64) -> Result<Result<Bytes, u64>, GetError> {
        if let Some(dir) = &self.mapped_dir {
            let file = dir.join(rel);
            let mapped = tokio::task::spawn_blocking(move || crate::mapped::map_exact(&file, expected)).await;
            let local_err = |source: Box<dyn std::error::Error + Send + Sync>| {
                GetError::Store(object_store::Error::Generic { store: "LocalFileSystem", source })
            };
            return match mapped {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Err(GetError::NotFound),
                Ok(Err(e)) => Err(local_err(Box::new(e))),
                Err(e) => Err(local_err(Box::new(e))),
            };
        }
        match dct_retry::get_whole(self.inner.as_ref(), &self.path(rel), &self.retry, |n| n == expected).await {
            Ok(r) => Ok(r),
            Err(object_store::Error::NotFound { .. }) => Err(GetError::NotFound),
            Err(e) => Err(GetError::Store(e)),
        }
    }

    /// A [`DatasetError::Store`] for a failed `op` (GET, PUT, ...) on `rel`.
    pub(crate) fn store_error(&self, op: &'static str, rel: &str, e: object_store::Error) -> DatasetError {
        DatasetError::store(op, self.url(rel), e)
    }

    /// Puts `bytes` at `rel` (atomic: the object appears whole or not at all, on every backend).
    /// Transient failures are retried (a PUT replaces the whole object, so repeating one is harmless).
    pub(crate) async fn put(&self, rel: &str, bytes: Bytes) -> Result<(), DatasetError> {
        let path = self.path(rel);
        self.retry
            .run(|| self.inner.put(&path, PutPayload::from_bytes(bytes.clone())))
            .await
            .map(|_| ())
            .map_err(|e| self.store_error("PUT", rel, e))
    }

    /// The first object under the dataset's prefix, if any.
    pub(crate) async fn first_object(&self) -> Result<Option<ObjectMeta>, DatasetError> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let first = self.retry.run(|| async { self.inner.list(prefix).next().await.transpose() }).await;
        match first {
            Ok(meta) => Ok(meta),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(DatasetError::store("LIST", self.root.clone(), e)),
        }
    }

    /// Every object under the dataset's prefix.
    pub(crate) async fn list_all(&self) -> Result<Vec<ObjectMeta>, DatasetError> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        match self.retry.run(|| self.inner.list(prefix).try_collect()).await {
            Ok(v) => Ok(v),
            Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(DatasetError::store("LIST", self.root.clone(), e)),
        }
    }

    /// Deletes `path` (an absolute object path); a missing object is fine.
    pub(crate) async fn delete_path(&self, path: &Path) -> Result<(), DatasetError> {
        match self.retry.run(|| self.inner.delete(path)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(DatasetError::store("DELETE", format!("{}/{path}", self.inner), e)),
        }
    }

    /// The path of `path` relative to the dataset prefix, if it is under it.
    pub(crate) fn relative(&self, path: &Path) -> Option<String> {
        let parts = path.prefix_match(&self.prefix)?;
        Some(parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/"))
    }
}

/// The absolute form of a local path: canonical if it exists, else absolute with `.` and `..` removed
/// lexically (a writer's destination need not exist yet).
fn resolve_local(path: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    if let Ok(p) = std::fs::canonicalize(path) {
        return Ok(p);
    }
    let mut out = std::path::PathBuf::new();
    for c in std::path::absolute(path)?.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Cloud backends, each behind its cargo feature.
mod cloud {
    use super::*;
    #[allow(unused_imports)]
    use object_store::ObjectStoreScheme;

    // With no cloud feature every arm returns early, hence the allows.
    #[allow(unreachable_code, unused_variables)]
    pub(super) fn open(url: &url::Url, options: &StoreOptions) -> Result<(Arc<dyn ObjectStore>, Path), String> {
        let (scheme, path) = ObjectStoreScheme::parse(url).map_err(|e| {
            format!(
                "{e}: use a local path, file://, s3://, gs://, az:// (or abfs://), http:// or https:// \
                 (memory:// is not a dataset location)"
            )
        })?;
        let config = &options.config;
        let store: Arc<dyn ObjectStore> = match scheme {
            #[cfg(feature = "aws")]
            ObjectStoreScheme::AmazonS3 => {
                use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
                let mut b = AmazonS3Builder::from_env().with_url(url.as_str());
                for (k, v) in config {
                    let key: AmazonS3ConfigKey = k.parse().map_err(|_| format!("unknown S3 option {k:?}"))?;
                    b = b.with_config(key, v.clone());
                }
                Arc::new(b.build().map_err(|e| format!("S3 configuration: {e}"))?)
            }
            #[cfg(feature = "gcp")]
            ObjectStoreScheme::GoogleCloudStorage => {
                use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
                let mut b = GoogleCloudStorageBuilder::from_env().with_url(url.as_str());
                for (k, v) in config {
                    let key: GoogleConfigKey = k.parse().map_err(|_| format!("unknown GCS option {k:?}"))?;
                    b = b.with_config(key, v.clone());
                }
                Arc::new(b.build().map_err(|e| format!("GCS configuration: {e}"))?)
            }
            #[cfg(feature = "azure")]
            ObjectStoreScheme::MicrosoftAzure => {
                use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
                let mut b = MicrosoftAzureBuilder::from_env().with_url(url.as_str());
                for (k, v) in config {
                    let key: AzureConfigKey = k.parse().map_err(|_| format!("unknown Azure option {k:?}"))?;
                    b = b.with_config(key, v.clone());
                }
                Arc::new(b.build().map_err(|e| format!("Azure configuration: {e}"))?)
            }
            #[cfg(feature = "http")]
            ObjectStoreScheme::Http => {
                use object_store::ClientConfigKey;
                use object_store::http::HttpBuilder;
                let base = &url[..url::Position::BeforePath];
                let mut b = HttpBuilder::new().with_url(base);
                if url.scheme() == "http" {
                    b = b.with_config(ClientConfigKey::AllowHttp, "true");
                }
                for (k, v) in config {
                    let key: ClientConfigKey = k.parse().map_err(|_| format!("unknown HTTP client option {k:?}"))?;
                    b = b.with_config(key, v.clone());
                }
                Arc::new(b.build().map_err(|e| format!("HTTP configuration: {e}"))?)
            }
            ObjectStoreScheme::Local | ObjectStoreScheme::Memory => {
                return Err("not a dataset location (use a local path or file:// URL)".into());
            }
            #[allow(unreachable_patterns)]
            other => {
                let feature = match other {
                    ObjectStoreScheme::AmazonS3 => "aws",
                    ObjectStoreScheme::GoogleCloudStorage => "gcp",
                    ObjectStoreScheme::MicrosoftAzure => "azure",
                    _ => "http",
                };
                return Err(format!(
                    "this build has no {other:?} backend: enable the `{feature}` feature of dct-dataset \
                     (the deltacells CLI enables every backend)"
                ));
            }
        };
        Ok((store, path))
    }
}

/// Requests an [`InstrumentedStore`] has seen.
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
    /// Objects deleted (or attempted).
    pub deletes: u64,
    /// GET requests per object path.
    pub gets_by_path: BTreeMap<String, u64>,
    /// Paths of the PUT requests, in the order they were issued.
    pub put_paths: Vec<String>,
}

impl RequestCounts {
    /// GET requests of the object whose path ends with `suffix` (e.g. `tiles/tile_000003.dct`).
    pub fn gets_of(&self, suffix: &str) -> u64 {
        self.gets_by_path.iter().filter(|(p, _)| p.ends_with(suffix)).map(|(_, n)| n).sum()
    }
}

#[derive(Debug, Default)]
struct Instruments {
    counts: RequestCounts,
    failures: Vec<(String, u64)>,
}

/// A wrapper around any object store that counts requests and bytes and can inject failures, for tests and
/// benchmarks (e.g. "one GET per tile", "a transient failure is retried").
#[derive(Debug)]
pub struct InstrumentedStore {
    inner: Arc<dyn ObjectStore>,
    state: Mutex<Instruments>,
}

impl InstrumentedStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        InstrumentedStore { inner, state: Mutex::new(Instruments::default()) }
    }

    /// A snapshot of the counters.
    pub fn counts(&self) -> RequestCounts {
        self.lock().counts.clone()
    }

    /// Sets every counter to zero.
    pub fn reset_counts(&self) {
        self.lock().counts = RequestCounts::default();
    }

    /// Makes the next `times` GETs of objects whose path ends with `suffix` fail with a generic (transient)
    /// error, as a flaky network would.
    pub fn fail_next_gets(&self, suffix: &str, times: u64) {
        self.lock().failures.push((suffix.to_string(), times));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Instruments> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Display for InstrumentedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Instrumented({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for InstrumentedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        {
            let mut s = self.lock();
            s.counts.puts += 1;
            s.counts.put_bytes += payload.content_length() as u64;
            s.counts.put_paths.push(location.to_string());
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        let head = options.head;
        let injected = {
            let mut s = self.lock();
            if head {
                s.counts.heads += 1;
                false
            } else {
                s.counts.gets += 1;
                *s.counts.gets_by_path.entry(location.to_string()).or_default() += 1;
                let key = location.to_string();
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
                store: "InstrumentedStore",
                source: format!("injected transient failure of GET {location}").into(),
            });
        }
        let result = self.inner.get_opts(location, options).await?;
        if !head {
            self.lock().counts.get_bytes += result.range.end - result.range.start;
        }
        Ok(result)
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        {
            let mut s = self.lock();
            s.counts.gets += ranges.len() as u64;
            *s.counts.gets_by_path.entry(location.to_string()).or_default() += ranges.len() as u64;
        }
        let out = self.inner.get_ranges(location, ranges).await?;
        self.lock().counts.get_bytes += out.iter().map(|b| b.len() as u64).sum::<u64>();
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.lock().counts.deletes += 1;
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.lock().counts.lists += 1;
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.lock().counts.lists += 1;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_and_urls() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::from_url(dir.path().to_str().unwrap(), &StoreOptions::default()).unwrap();
        assert!(s.url("manifest.json").ends_with("/manifest.json"));
        assert!(s.path("tiles/tile_000000.dct").as_ref().ends_with("tiles/tile_000000.dct"));
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let s2 = Store::from_url(url.as_str(), &StoreOptions::default()).unwrap();
        assert_eq!(s.prefix(), s2.prefix());
        let missing = dir.path().join("not/yet/../there");
        let s3 = Store::from_url(missing.to_str().unwrap(), &StoreOptions::default()).unwrap();
        assert!(s3.root().ends_with("/not/there"), "{}", s3.root());
    }

    #[test]
    fn unknown_schemes_are_refused_with_advice() {
        for url in ["memory:///x", "ftp://host/x"] {
            let e = Store::from_url(url, &StoreOptions::default()).unwrap_err();
            assert_eq!(e.category(), crate::Category::InvalidArgument, "{url}");
        }
        #[cfg(not(feature = "aws"))]
        {
            let e = Store::from_url("s3://bucket/data", &StoreOptions::default()).unwrap_err();
            assert!(e.to_string().contains("`aws` feature"), "{e}");
        }
    }
}
