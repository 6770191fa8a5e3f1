//! Opening a location: URL → backend, with options from the environment, the URL and the caller.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;

use crate::{RetryPolicy, Store, StoreError};

/// Requests in flight per store when the caller does not say ([`StoreOptions::max_requests`]).
pub const DEFAULT_MAX_REQUESTS: usize = 64;

/// The option key (in [`StoreOptions::config`], `--store-option`) that sets [`StoreOptions::max_requests`].
pub const MAX_REQUESTS_KEY: &str = "max_requests";

/// How a location is opened and its requests retried and capped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Extra configuration for cloud backends: `(key, value)` pairs as `object_store`'s builders name them (e.g.
    /// `("aws_endpoint", "http://127.0.0.1:5555")`, `("allow_http", "true")`), applied in order after the
    /// environment, which they override. An unknown key is an error. For every kind of location, `max_requests`
    /// sets [`max_requests`](Self::max_requests), `part_bytes` the size of the concurrent ranged GETs a large object
    /// is read in ([`Store::with_part_bytes`]), and the `simulate_*` keys ([`crate::Throttle`]) delay every
    /// request as a distant store would; other keys are ignored for local paths.
    pub config: Vec<(String, String)>,
    /// Retries of failed requests (transient errors, bodies that break off or have the wrong length) with
    /// exponential backoff.
    pub retry: RetryPolicy,
    /// How tiles of a local dataset are read (ignored for cloud locations).
    pub local_reads: LocalReads,
    /// At most this many requests in flight at once per store (default [`DEFAULT_MAX_REQUESTS`]).
    pub max_requests: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            config: Vec::new(),
            retry: RetryPolicy::default(),
            local_reads: LocalReads::default(),
            max_requests: DEFAULT_MAX_REQUESTS,
        }
    }
}

impl StoreOptions {
    /// These options with `key=value` added to [`config`](Self::config) (`--store-option key=value`).
    pub fn with_option(mut self, key: &str, value: &str) -> StoreOptions {
        self.config.push((key.to_string(), value.to_string()));
        self
    }
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
    /// Read each tile file into memory with plain reads, for directories that other programs may rewrite in
    /// place.
    Read,
}

/// [`Store::from_url`].
pub(crate) fn open(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
    let bad = |message: String| StoreError::Url { url: url.to_string(), message };
    let mut options = options.clone();
    let mut config = Vec::with_capacity(options.config.len());
    let mut part_bytes = None;
    for (k, v) in std::mem::take(&mut options.config) {
        if k == MAX_REQUESTS_KEY {
            options.max_requests = v
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(format!("{MAX_REQUESTS_KEY} must be a positive whole number, not {v:?}")))?;
        } else if k == crate::PART_BYTES_KEY {
            part_bytes = Some(v.parse::<u64>().map_err(|_| {
                bad(format!("{} must be a whole number of bytes >= 0 (0: one GET per object), not {v:?}", k))
            })?);
        } else {
            config.push((k, v));
        }
    }
    let throttle = crate::Throttle::take_from(&mut config).map_err(&bad)?;
    options.config = config;
    let store = opened(url, &options, bad)?;
    // Object storage, and a store simulating one, is read in parts; local files and memory whole.
    let distant = !store.is_local() || !throttle.is_none();
    let store = if throttle.is_none() { store } else { crate::throttled(&store, throttle) };
    let default = if distant { crate::DEFAULT_PART_BYTES } else { 0 };
    Ok(store.with_part_bytes(part_bytes.unwrap_or(default)))
}

/// The location `url` with `options` (the keys this crate reads taken out).
fn opened(url: &str, options: &StoreOptions, bad: impl Fn(String) -> StoreError) -> Result<Store, StoreError> {
    match url::Url::parse(url) {
        // A one-letter "scheme" is a Windows drive letter.
        Ok(parsed) if parsed.scheme().len() > 1 => {
            if parsed.scheme() == "file" {
                let path =
                    parsed.to_file_path().map_err(|()| bad("a file:// URL must hold an absolute local path".into()))?;
                return local(&path, options).map_err(bad);
            }
            let (backend, prefix) = crate::cloud::open(&parsed, &options.config).map_err(bad)?;
            Ok(Store::assemble(backend, prefix, url.trim_end_matches('/').to_string(), options))
        }
        _ => local(std::path::Path::new(url), options).map_err(bad),
    }
}

fn local(path: &std::path::Path, options: &StoreOptions) -> Result<Store, String> {
    let abs = resolve_local(path).map_err(|e| format!("cannot resolve the path: {e}"))?;
    let prefix = Path::from_absolute_path(&abs).map_err(|e| format!("not a usable path: {e}"))?;
    // Writes go to a temporary file beside the destination, renamed into place: every object appears whole or
    // not at all.
    let backend: Arc<dyn ObjectStore> = Arc::new(crate::local::LocalFiles::new());
    let root = abs.display().to_string().trim_end_matches('/').to_string();
    Ok(Store::assemble(backend, prefix, root, options).with_local_dir(abs, options.local_reads))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_and_urls() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::from_url(dir.path().to_str().unwrap(), &StoreOptions::default()).unwrap();
        assert!(s.is_local());
        assert!(s.url("manifest.json").ends_with("/manifest.json"));
        assert!(s.path("tiles/tile_000000.dct").as_ref().ends_with("tiles/tile_000000.dct"));
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let s2 = Store::from_url(url.as_str(), &StoreOptions::default()).unwrap();
        assert_eq!(s.prefix, s2.prefix);
        let missing = dir.path().join("not/yet/../there");
        let s3 = Store::from_url(missing.to_str().unwrap(), &StoreOptions::default()).unwrap();
        assert!(s3.root().ends_with("/not/there"), "{}", s3.root());
    }

    #[test]
    fn the_request_cap_is_an_option_for_every_location() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        let s = Store::from_url(path, &StoreOptions::default().with_option("max_requests", "5")).unwrap();
        assert_eq!(s.max_requests(), 5);
        assert_eq!(Store::from_url(path, &StoreOptions::default()).unwrap().max_requests(), DEFAULT_MAX_REQUESTS);
        for bad in ["0", "-1", "many"] {
            let e = Store::from_url(path, &StoreOptions::default().with_option("max_requests", bad)).unwrap_err();
            assert!(matches!(e, StoreError::Url { .. }), "{e}");
            assert!(e.to_string().contains("max_requests must be a positive whole number"), "{e}");
        }
    }

    #[test]
    fn unknown_schemes_are_refused_with_advice() {
        for url in ["memory:///x", "ftp://host/x"] {
            let e = Store::from_url(url, &StoreOptions::default()).unwrap_err();
            assert!(matches!(e, StoreError::Url { .. }), "{url}: {e}");
        }
        #[cfg(not(feature = "aws"))]
        {
            let e = Store::from_url("s3://bucket/data", &StoreOptions::default()).unwrap_err();
            assert!(e.to_string().contains("`aws` feature"), "{e}");
        }
    }

    /// A query (a signature) would not go with the requests for the objects under the URL; an empty segment is
    /// named as such, not taken for a wrong scheme.
    #[test]
    fn urls_whose_parts_would_not_reach_the_requests_are_refused() {
        for (url, says) in [
            ("https://host/ds?sig=secret", "query or fragment"),
            ("https://host/ds#v2", "query or fragment"),
            ("https://host/ds//", "empty segment"),
            ("s3://bucket/a//b", "empty segment"),
        ] {
            let e = Store::from_url(url, &StoreOptions::default()).unwrap_err();
            assert!(matches!(e, StoreError::Url { .. }) && e.to_string().contains(says), "{url}: {e}");
            assert!(!e.to_string().contains("use a local path"), "{url}: {e}");
        }
    }

    /// One set of options reaches members on every store (a corpus, a command): options of another backend are
    /// left out, options no backend knows are refused.
    #[cfg(all(feature = "http", feature = "aws", feature = "azure"))]
    #[test]
    fn options_of_other_backends_are_left_out_and_unknown_ones_refused() {
        let mixed = StoreOptions::default()
            .with_option("aws_endpoint", "http://127.0.0.1:9")
            .with_option("azure_storage_use_emulator", "true")
            .with_option("timeout", "5s");
        for url in ["http://127.0.0.1:9/ds", "s3://bucket/ds", "az://container/ds"] {
            Store::from_url(url, &mixed).unwrap_or_else(|e| panic!("{url}: {e}"));
            let e = Store::from_url(url, &mixed.clone().with_option("aws_endpont", "x")).unwrap_err();
            assert!(e.to_string().contains("unknown") && e.to_string().contains("aws_endpont"), "{url}: {e}");
        }
    }
}
