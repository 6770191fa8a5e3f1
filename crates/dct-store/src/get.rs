//! Reads: whole objects with a size limit or an exact size, byte ranges, tails, sizes and streamed folds, each
//! retried and checked for bodies of the wrong length.

use std::ops::Range;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult, ObjectStoreExt};

use crate::error::{is_transient, request_error, short_or_long_body};
use crate::{Store, StoreError};

impl Store {
    /// GETs a whole object of at most `limit` bytes; the size is checked before any buffer is sized
    /// ([`StoreError::TooLarge`] if it is larger).
    pub async fn get_limited(&self, rel: &str, limit: u64) -> Result<Bytes, StoreError> {
        match self.get_whole(rel, |n| n <= limit).await? {
            Ok(bytes) => Ok(bytes),
            Err(size) => Err(StoreError::TooLarge { url: self.url(rel), size, limit }),
        }
    }

    /// GETs a whole object that must be exactly `expected` bytes ([`StoreError::WrongSize`] if it is not, before
    /// any of it is read). An object larger than [`part_bytes`](Store::part_bytes) is read in concurrent ranged
    /// parts. Tiles of a local dataset are memory-mapped instead (see [`LocalReads`](crate::LocalReads)).
    pub async fn get_exact(&self, rel: &str, expected: u64) -> Result<Bytes, StoreError> {
        if let (Some(dir), true) = (&self.local_dir, self.memory_map) {
            let file = dir.join(rel);
            let mapped = tokio::task::spawn_blocking(move || crate::mapped::map_exact(&file, expected)).await;
            let failed = |message: String| StoreError::Request {
                op: "GET",
                url: self.url(rel),
                message,
                transient: false,
                attempts: 1,
            };
            return match mapped {
                Ok(Ok(Ok(bytes))) => Ok(bytes),
                Ok(Ok(Err(size))) => Err(StoreError::WrongSize { url: self.url(rel), size, expected }),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    Err(StoreError::NotFound { url: self.url(rel) })
                }
                Ok(Err(e)) => Err(failed(format!("cannot map the file: {e}"))),
                Err(e) => Err(failed(format!("the mapping task failed: {e}"))),
            };
        }
        let parts = self.part_bytes() > 0 && expected > self.part_bytes() && self.serves_ranges();
        let got = match if parts { self.get_in_parts(rel, expected).await? } else { None } {
            Some(got) => got,
            None => {
                if parts {
                    // The server answered a range with the whole object: this read and the ones after go whole.
                    self.ranges_unserved();
                }
                self.get_whole(rel, |n| n == expected).await?
            }
        };
        match got {
            Ok(bytes) => Ok(bytes),
            Err(size) => Err(StoreError::WrongSize { url: self.url(rel), size, expected }),
        }
    }

    /// A whole GET; `accept` sees the object's size (and the announced body length) before any of the body is
    /// read (`Ok(Err(size))` if it refuses). A body whose length differs from the announced one is retried like a transient failure.
    async fn get_whole(&self, rel: &str, accept: impl Fn(u64) -> bool) -> Result<Result<Bytes, u64>, StoreError> {
        let path = self.path(rel);
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || async {
                let got = self.inner.get(&path).await?;
                let size = got.meta.size;
                let announced = got.range.end.saturating_sub(got.range.start);
                if !accept(size) || !accept(announced) {
                    return Ok(Err(size));
                }
                Ok(Ok(crate::body::collect(got, announced).await?))
            })
            .await;
        got.map_err(|e| request_error("GET", self.url(rel), e, attempts))
    }

    /// GETs the bytes `range` of an object; a body of another length is retried like a transient failure.
    ///
    /// From a server that does not serve ranges (a plain web server may not) the object is read whole and the range
    /// cut from it: correct, at the cost of the whole object each time.
    pub async fn get_range(&self, rel: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        if !self.serves_ranges() {
            return self.range_of_whole(rel, range, None).await;
        }
        let path = self.path(rel);
        let want = range.end.saturating_sub(range.start);
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || async {
                let b = self.inner.get_range(&path, range.clone()).await?;
                if b.len() as u64 != want {
                    return Err(short_or_long_body(want, b.len() as u64));
                }
                Ok(b)
            })
            .await;
        match got {
            Err(e) if crate::parts::ranges_unserved(&e) => {
                self.ranges_unserved();
                self.range_of_whole(rel, range, None).await
            }
            got => got.map_err(|e| request_error("GET range", self.url(rel), e, attempts)),
        }
    }

    /// `range` of object `rel` read whole (of `expected_size` bytes, if given): for servers without ranges.
    async fn range_of_whole(
        &self,
        rel: &str,
        range: Range<u64>,
        expected_size: Option<u64>,
    ) -> Result<Bytes, StoreError> {
        let whole = match self.get_whole(rel, |n| expected_size.is_none_or(|e| n == e)).await? {
            Ok(whole) => whole,
            Err(size) => {
                let expected = expected_size.unwrap_or(size);
                return Err(StoreError::WrongSize { url: self.url(rel), size, expected });
            }
        };
        if range.end > whole.len() as u64 || range.start > range.end {
            let message = format!("bytes {}..{} asked of an object of {} bytes", range.start, range.end, whole.len());
            return Err(StoreError::Request {
                op: "GET range",
                url: self.url(rel),
                message,
                transient: false,
                attempts: 1,
            });
        }
        Ok(whole.slice(range.start as usize..range.end as usize))
    }

    /// GETs the last `n` bytes (at most the whole) of an object that must be `expected_size` bytes
    /// ([`StoreError::WrongSize`] if it is not). A bounded range request, which every backend serves (Azure
    /// has no suffix requests).
    pub async fn get_tail(&self, rel: &str, n: u64, expected_size: u64) -> Result<Bytes, StoreError> {
        let path = self.path(rel);
        let want = n.min(expected_size);
        let range = expected_size - want..expected_size;
        if !self.serves_ranges() {
            return self.range_of_whole(rel, range, Some(expected_size)).await;
        }
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || async {
                let got = match self.get_sized_range(&path, range.clone(), expected_size).await? {
                    Ok(got) => got,
                    Err(size) => return Ok(Err(size)),
                };
                let tail = got.bytes().await?;
                if tail.len() as u64 != want {
                    return Err(short_or_long_body(want, tail.len() as u64));
                }
                Ok(Ok(tail))
            })
            .await;
        let got = match got {
            Err(e) if crate::parts::ranges_unserved(&e) => {
                self.ranges_unserved();
                return self.range_of_whole(rel, range, Some(expected_size)).await;
            }
            got => got,
        };
        match got.map_err(|e| request_error("GET range", self.url(rel), e, attempts))? {
            Ok(tail) => Ok(tail),
            Err(size) => Err(StoreError::WrongSize { url: self.url(rel), size, expected: expected_size }),
        }
    }

    /// A bounded range GET of an object that must be `expected` bytes (`Ok(Err(size))` if it is not); one attempt.
    pub(crate) async fn get_sized_range(
        &self,
        path: &Path,
        range: Range<u64>,
        expected: u64,
    ) -> object_store::Result<Result<GetResult, u64>> {
        let options = GetOptions { range: Some(GetRange::Bounded(range)), ..Default::default() };
        let got = match self.inner.get_opts(path, options).await {
            Ok(got) => got,
            // An object shorter than expected cannot serve the range: say so by its size.
            Err(e) => {
                return match self.inner.head(path).await {
                    Ok(meta) if meta.size != expected => Ok(Err(meta.size)),
                    _ => Err(e),
                };
            }
        };
        if got.meta.size != expected {
            return Ok(Err(got.meta.size));
        }
        Ok(Ok(got))
    }

    /// The size of an object in bytes (a HEAD request).
    pub async fn size(&self, rel: &str) -> Result<u64, StoreError> {
        let path = self.path(rel);
        let (got, attempts) = self.retry().run_counted(is_transient, || self.inner.head(&path)).await;
        got.map(|meta| meta.size).map_err(|e| request_error("HEAD", self.url(rel), e, attempts))
    }

    /// Whether an object exists (a HEAD request).
    pub async fn exists(&self, rel: &str) -> Result<bool, StoreError> {
        match self.size(rel).await {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Streams a whole object of at most `limit` bytes through `step`, starting from `init()`, without holding
    /// it in memory; returns the state and the object's size. The size is checked before the body and again as
    /// it arrives; an attempt that fails midway (or delivers a body of the wrong length) starts over from
    /// `init()`.
    pub async fn get_fold<S>(
        &self,
        rel: &str,
        limit: u64,
        init: impl Fn() -> S,
        step: impl Fn(&mut S, &[u8]),
    ) -> Result<(S, u64), StoreError> {
        let path = self.path(rel);
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || async {
                let got = self.inner.get(&path).await?;
                let announced = got.range.end.saturating_sub(got.range.start);
                if got.meta.size > limit || announced > limit {
                    return Ok(Err(got.meta.size.max(announced)));
                }
                let mut state = init();
                let mut seen = 0u64;
                let mut body = got.into_stream();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk?;
                    seen += chunk.len() as u64;
                    if seen > announced {
                        return Err(short_or_long_body(announced, seen));
                    }
                    step(&mut state, &chunk);
                }
                if seen != announced {
                    return Err(short_or_long_body(announced, seen));
                }
                Ok(Ok((state, seen)))
            })
            .await;
        match got.map_err(|e| request_error("GET", self.url(rel), e, attempts))? {
            Ok(done) => Ok(done),
            Err(size) => Err(StoreError::TooLarge { url: self.url(rel), size, limit }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn reads_check_sizes_and_name_the_object() {
        block(async {
            let s = Store::memory("t").child("ds");
            let data = Bytes::from((0..1000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
            s.put("tiles/a.dct", data.clone()).await.unwrap();
            assert_eq!(s.get_limited("tiles/a.dct", 1000).await.unwrap(), data);
            assert_eq!(
                s.get_limited("tiles/a.dct", 999).await.unwrap_err(),
                StoreError::TooLarge { url: "memory://t/ds/tiles/a.dct".into(), size: 1000, limit: 999 }
            );
            assert_eq!(s.get_exact("tiles/a.dct", 1000).await.unwrap(), data);
            assert!(matches!(
                s.get_exact("tiles/a.dct", 10).await.unwrap_err(),
                StoreError::WrongSize { size: 1000, expected: 10, .. }
            ));
            assert_eq!(s.get_range("tiles/a.dct", 10..20).await.unwrap(), data.slice(10..20));
            assert_eq!(s.get_tail("tiles/a.dct", 16, 1000).await.unwrap(), data.slice(984..));
            assert_eq!(s.get_tail("tiles/a.dct", 5000, 1000).await.unwrap(), data);
            assert!(matches!(
                s.get_tail("tiles/a.dct", 16, 1200).await.unwrap_err(),
                StoreError::WrongSize { size: 1000, expected: 1200, .. }
            ));
            assert!(matches!(
                s.get_tail("tiles/a.dct", 16, 900).await.unwrap_err(),
                StoreError::WrongSize { size: 1000, expected: 900, .. }
            ));
            assert_eq!(s.size("tiles/a.dct").await.unwrap(), 1000);
            assert!(s.exists("tiles/a.dct").await.unwrap() && !s.exists("tiles/b.dct").await.unwrap());
            let missing = s.get_limited("tiles/b.dct", 10).await.unwrap_err();
            assert_eq!(missing, StoreError::NotFound { url: "memory://t/ds/tiles/b.dct".into() });
            let (sum, size) = s
                .get_fold("tiles/a.dct", 1000, || 0u64, |acc, b| *acc += b.iter().map(|&x| x as u64).sum::<u64>())
                .await
                .unwrap();
            assert_eq!((sum, size), (data.iter().map(|&x| x as u64).sum(), 1000));
            assert!(matches!(
                s.get_fold("tiles/a.dct", 999, || (), |_, _| ()).await.unwrap_err(),
                StoreError::TooLarge { size: 1000, .. }
            ));
        });
    }

    #[test]
    fn local_tiles_are_memory_mapped_and_checked_like_fetched_ones() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tiles")).unwrap();
        std::fs::write(dir.path().join("tiles/a.dct"), b"0123456789").unwrap();
        for reads in [crate::LocalReads::MemoryMap, crate::LocalReads::Read] {
            let options = crate::StoreOptions { local_reads: reads, ..Default::default() };
            let s = Store::from_url(dir.path().to_str().unwrap(), &options).unwrap();
            block(async {
                assert_eq!(&s.get_exact("tiles/a.dct", 10).await.unwrap()[..], b"0123456789");
                assert!(matches!(s.get_exact("tiles/a.dct", 11).await, Err(StoreError::WrongSize { size: 10, .. })));
                assert!(matches!(s.get_exact("tiles/none.dct", 11).await, Err(StoreError::NotFound { .. })));
            });
        }
    }
}
