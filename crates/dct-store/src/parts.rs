//! Large objects read as concurrent ranged GETs of their parts, as object storage is read fast.
//!
//! One GET stream from object storage carries about 100 MB/s (S3's guidance: byte-range requests of 8-16 MB, in
//! parallel, to go beyond what one connection gives). A tile of 20-40 MB read in one GET takes 0.2-0.4 s however
//! many tiles are fetched at once: the first batch of an epoch, which waits for the first window's tiles, waits that
//! long. Read in parts of [`DEFAULT_PART_BYTES`], concurrently, the same tile arrives in the time of one part.
//!
//! The parts land in one mapping sized for the object ([`crate::body`]), each at its offset. Each part is retried
//! on its own; every response must say the object's expected size, and parts whose entity tags differ (the object
//! replaced while it was read) are refused rather than stitched together. Objects no larger than one part, local
//! directories (memory-mapped) and sources outside this crate ([`crate::ReadSource`]) are read whole.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::error::{is_transient, request_error};
use crate::{Store, StoreError};

/// The option key (in [`StoreOptions::config`](crate::StoreOptions::config), `--store-option`) that sets the
/// part size of an object store's reads in bytes ([`Store::part_bytes`]; 0 reads every object in one GET).
pub const PART_BYTES_KEY: &str = "part_bytes";

/// The part size of reads from object storage (cloud and HTTP locations, and simulated distant stores) when the
/// caller does not say: 8 MiB, the size AWS suggests for byte-range requests.
pub const DEFAULT_PART_BYTES: u64 = 8 << 20;

/// The ranges of the `k = ceil(size / part_bytes)` parts of a `size`-byte object, as equal as whole bytes allow
/// (parts of equal size finish together).
pub(crate) fn part_ranges(size: u64, part_bytes: u64) -> Vec<Range<u64>> {
    if part_bytes == 0 || size <= part_bytes {
        return std::iter::once(0..size).collect();
    }
    let k = size.div_ceil(part_bytes);
    (0..k).map(|i| size * i / k..size * (i + 1) / k).collect()
}

impl Store {
    /// Reads the `expected`-byte object `rel` as concurrent GETs of its parts (`Ok(Err(size))` if the object has
    /// another size).
    pub(crate) async fn get_in_parts(&self, rel: &str, expected: u64) -> Result<Result<Bytes, u64>, StoreError> {
        let failed = |message: String, transient: bool| StoreError::Request {
            op: "GET range",
            url: self.url(rel),
            message,
            transient,
            attempts: 1,
        };
        let len = usize::try_from(expected).map_err(|_| failed(format!("{expected} bytes cannot be held"), false))?;
        let map = crate::body::mapping(len).map_err(|e| failed(format!("cannot map {expected} bytes: {e}"), false))?;
        let map = Arc::new(Mutex::new(map));
        let ranges = part_ranges(expected, self.part_bytes());
        let tags =
            futures::future::try_join_all(ranges.iter().map(|r| self.get_part(rel, r.clone(), expected, &map))).await?;
        let mut sizes = tags.iter().filter_map(|t| t.as_ref().err());
        if let Some(&size) = sizes.next() {
            return Ok(Err(size));
        }
        let tags: Vec<&String> = tags.iter().filter_map(|t| t.as_ref().ok().and_then(Option::as_ref)).collect();
        if tags.windows(2).any(|w| w[0] != w[1]) {
            return Err(failed(
                format!(
                    "the object changed while its {} parts were read (their entity tags differ); read it again",
                    ranges.len()
                ),
                true,
            ));
        }
        let map = Arc::try_unwrap(map)
            .map_err(|_| failed("a part's read still holds the object's buffer".into(), true))?
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        Ok(Ok(Bytes::from_owner(map)))
    }

    /// GETs the bytes `range` of the `expected`-byte object `rel` into `map`, retried on its own; returns the
    /// object's entity tag, or `Err(size)` if the object has another size.
    async fn get_part(
        &self,
        rel: &str,
        range: Range<u64>,
        expected: u64,
        map: &crate::body::SharedMapping,
    ) -> Result<Result<Option<String>, u64>, StoreError> {
        let path = self.path(rel);
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || async {
                let got = match self.get_sized_range(&path, range.clone(), expected).await? {
                    Ok(got) => got,
                    Err(size) => return Ok(Err(size)),
                };
                let tag = got.meta.e_tag.clone();
                crate::body::fill(got, range.clone(), map).await?;
                Ok(Ok(tag))
            })
            .await;
        got.map_err(|e| request_error("GET range", self.url(rel), e, attempts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_object_once_in_near_equal_ranges() {
        let whole = |size: u64| std::iter::once(0..size).collect::<Vec<_>>();
        assert_eq!(part_ranges(10, 0), whole(10));
        assert_eq!(part_ranges(10, 10), whole(10));
        assert_eq!(part_ranges(0, 4), whole(0));
        assert_eq!(part_ranges(10, 4), [0..3, 3..6, 6..10]);
        for (size, part) in [(21_802_983u64, DEFAULT_PART_BYTES), (1 << 30, DEFAULT_PART_BYTES), (1001, 7)] {
            let r = part_ranges(size, part);
            assert_eq!(r.len() as u64, size.div_ceil(part));
            assert_eq!((r[0].start, r[r.len() - 1].end), (0, size));
            assert!(r.windows(2).all(|w| w[0].end == w[1].start));
            assert!(r.iter().all(|p| p.end - p.start <= part && p.end - p.start + 1 >= size / r.len() as u64));
        }
    }
}
