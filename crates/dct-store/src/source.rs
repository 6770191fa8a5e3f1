//! Read-only sources that `object_store` does not cover (a Python backend object, a custom service), behind the
//! same [`Store`] as every other location: retried, capped and checked the same way.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

#[cfg(test)]
use crate::StoreError;
use crate::{Store, StoreOptions};

/// Why a [`ReadSource`] call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    /// The object does not exist (final).
    NotFound(String),
    /// Anything else; treated as transient (retried).
    Failed(String),
    /// The source refused the call, or answered it with something unusable, in a way another attempt would not
    /// mend (a permission denied, a programming error, an answer of the wrong type): final, not retried.
    Refused(String),
}

/// A read-only source of named objects. Names are `/`-separated paths below the source's root
/// (`manifest.json`, `tiles/tile_000000.dct`).
#[async_trait::async_trait]
pub trait ReadSource: fmt::Display + fmt::Debug + Send + Sync + 'static {
    /// The whole object `name`.
    async fn read(&self, name: &str) -> Result<Bytes, SourceError>;
    /// `length` bytes of `name` from `offset` (fewer at the end of the object), and the object's size.
    async fn read_range(&self, name: &str, offset: u64, length: u64) -> Result<(Bytes, u64), SourceError>;
    /// The size of `name` in bytes.
    async fn size(&self, name: &str) -> Result<u64, SourceError>;
}

impl Store {
    /// A read-only location over `source` (writes fail with a message saying so); `options` set the retries and
    /// the request cap.
    pub fn from_source(source: Arc<dyn ReadSource>, options: &StoreOptions) -> Store {
        let root = source.to_string();
        let backend: Arc<dyn ObjectStore> = Arc::new(SourceStore { source });
        Store::assemble(backend, Path::default(), root, options)
    }
}

/// A [`ReadSource`] as an object store.
#[derive(Debug)]
struct SourceStore {
    source: Arc<dyn ReadSource>,
}

impl fmt::Display for SourceStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

fn source_error(e: SourceError, name: &str) -> object_store::Error {
    match e {
        SourceError::NotFound(message) => {
            object_store::Error::NotFound { path: name.to_string(), source: message.into() }
        }
        SourceError::Failed(message) => object_store::Error::Generic { store: "source", source: message.into() },
        SourceError::Refused(message) => {
            object_store::Error::PermissionDenied { path: name.to_string(), source: message.into() }
        }
    }
}

fn read_only(what: &str) -> object_store::Error {
    object_store::Error::NotSupported {
        source: format!("{what}: this location is read-only; write datasets to a path or store URL").into(),
    }
}

#[async_trait::async_trait]
impl ObjectStore for SourceStore {
    async fn put_opts(&self, location: &Path, _: PutPayload, _: PutOptions) -> object_store::Result<PutResult> {
        Err(read_only(&format!("PUT {location}")))
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(read_only(&format!("PUT {location}")))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        let name = location.as_ref();
        let err = |e| source_error(e, name);
        let (bytes, size, range) = if options.head {
            let size = self.source.size(name).await.map_err(err)?;
            (Bytes::new(), size, 0..size)
        } else {
            match options.range {
                None => {
                    let bytes = self.source.read(name).await.map_err(err)?;
                    let size = bytes.len() as u64;
                    (bytes, size, 0..size)
                }
                Some(range) => {
                    let (offset, length) = match range {
                        GetRange::Bounded(r) => (r.start, r.end.saturating_sub(r.start)),
                        GetRange::Offset(o) => (o, self.source.size(name).await.map_err(err)?.saturating_sub(o)),
                        GetRange::Suffix(n) => {
                            let size = self.source.size(name).await.map_err(err)?;
                            (size.saturating_sub(n), n.min(size))
                        }
                    };
                    let (bytes, size) = self.source.read_range(name, offset, length).await.map_err(err)?;
                    let end = offset + bytes.len() as u64;
                    (bytes, size, offset..end)
                }
            }
        };
        let meta = ObjectMeta {
            location: location.clone(),
            last_modified: Default::default(),
            size,
            e_tag: None,
            version: None,
        };
        let payload = if options.head {
            GetResultPayload::Stream(stream::empty().boxed())
        } else {
            GetResultPayload::Stream(stream::once(async move { Ok(bytes) }).boxed())
        };
        Ok(GetResult { payload, meta, range, attributes: Default::default(), extensions: Default::default() })
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            let got = self.source.read_range(location.as_ref(), r.start, r.end.saturating_sub(r.start)).await;
            out.push(got.map_err(|e| source_error(e, location.as_ref()))?.0);
        }
        Ok(out)
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        stream::once(async { Err(read_only("DELETE")) }).boxed()
    }

    fn list(&self, _: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        stream::once(async { Err(read_only("LIST")) }).boxed()
    }

    async fn list_with_delimiter(&self, _: Option<&Path>) -> object_store::Result<ListResult> {
        Err(read_only("LIST"))
    }

    async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> object_store::Result<()> {
        Err(read_only("COPY"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// Objects in a map; the first read of `flaky` fails.
    #[derive(Debug, Default)]
    struct MapSource {
        objects: BTreeMap<String, Bytes>,
        failed_once: Mutex<bool>,
    }

    impl fmt::Display for MapSource {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("map-source")
        }
    }

    impl MapSource {
        fn get(&self, name: &str) -> Result<&Bytes, SourceError> {
            if name == "flaky" {
                let mut failed = self.failed_once.lock().unwrap();
                if !*failed {
                    *failed = true;
                    return Err(SourceError::Failed("connection reset".into()));
                }
            }
            self.objects.get(name).ok_or_else(|| SourceError::NotFound(format!("no {name}")))
        }
    }

    #[async_trait::async_trait]
    impl ReadSource for MapSource {
        async fn read(&self, name: &str) -> Result<Bytes, SourceError> {
            self.get(name).cloned()
        }
        async fn read_range(&self, name: &str, offset: u64, length: u64) -> Result<(Bytes, u64), SourceError> {
            let b = self.get(name)?;
            let start = (offset as usize).min(b.len());
            let end = (offset.saturating_add(length) as usize).min(b.len());
            Ok((b.slice(start..end), b.len() as u64))
        }
        async fn size(&self, name: &str) -> Result<u64, SourceError> {
            Ok(self.get(name)?.len() as u64)
        }
    }

    #[test]
    fn a_source_reads_like_any_store_and_refuses_writes() {
        let mut objects = BTreeMap::new();
        objects.insert("a".to_string(), Bytes::from_static(b"0123456789"));
        objects.insert("flaky".to_string(), Bytes::from_static(b"xyz"));
        let retry = crate::RetryPolicy { initial_backoff: std::time::Duration::from_millis(1), ..Default::default() };
        let s = Store::from_source(
            Arc::new(MapSource { objects, ..Default::default() }),
            &StoreOptions { retry, ..Default::default() },
        );
        assert_eq!(s.root(), "map-source");
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            assert_eq!(&s.get_limited("a", 100).await.unwrap()[..], b"0123456789");
            assert_eq!(&s.get_range("a", 2..5).await.unwrap()[..], b"234");
            assert_eq!(&s.get_tail("a", 3, 10).await.unwrap()[..], b"789");
            assert_eq!(s.size("a").await.unwrap(), 10);
            assert!(matches!(s.get_exact("a", 11).await, Err(StoreError::WrongSize { size: 10, .. })));
            assert_eq!(s.get_limited("b", 100).await.unwrap_err(), StoreError::NotFound { url: "map-source/b".into() });
            // A failed read is retried.
            assert_eq!(&s.get_limited("flaky", 100).await.unwrap()[..], b"xyz");
            let e = s.put("a", Bytes::new()).await.unwrap_err();
            assert!(!e.is_transient() && e.to_string().contains("read-only"), "{e}");
        });
    }
}
