//! Large objects read as concurrent ranged GETs of their parts, as object storage is read fast.
//!
//! One GET stream from object storage carries about 100 MB/s (S3's guidance: byte-range requests of 8-16 MB, in
//! parallel, to go beyond what one connection gives). A tile of 20-40 MB read in one GET takes 0.2-0.4 s however
//! many tiles are fetched at once: the first batch of an epoch, which waits for the first window's tiles, waits that
//! long. Read in parts of [`DEFAULT_PART_BYTES`], concurrently, the same tile arrives in the time of one part.
//!
//! The parts land in one mapping sized for the object ([`crate::body`]), each at its offset. Each part is retried
//! on its own; every response must say the object's expected size, and parts whose entity tags differ (the object
//! replaced while it was read) are refused rather than stitched together. The expected size comes from a manifest,
//! which may lie: the mapping holds no memory until bodies fill it, at most 16 parts of an object are asked for at
//! once, and the first responses refuse an object of another size. Objects no larger than one part, local
//! directories (memory-mapped) and sources outside this crate ([`crate::ReadSource`]) are read whole, and so is
//! every object of a location whose server answered a range with the whole object (a plain web server without
//! range support): that read goes on in one GET, and the location is not asked for parts again.

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

/// At most this many parts of one object are requested at once (the store's request cap bounds all requests), so
/// that the futures of an object's parts stay few however large a manifest says it is.
const MAX_PARTS_IN_FLIGHT: usize = 16;

/// At most this many parts of one object: a part size far below an object's (`part_bytes=1`, say) would otherwise
/// take one request for every few bytes; the parts of such an object are larger instead.
pub const MAX_PARTS_PER_OBJECT: u64 = 256;

/// The ranges of the `k = ceil(size / part_bytes)` parts (at most [`MAX_PARTS_PER_OBJECT`]) of a `size`-byte
/// object, as equal as whole bytes allow (parts of equal size finish together), made as they are asked for.
pub(crate) fn part_ranges(
    size: u64,
    part_bytes: u64,
) -> impl ExactSizeIterator<Item = Range<u64>> + DoubleEndedIterator {
    let k = if part_bytes == 0 || size <= part_bytes { 1 } else { size.div_ceil(part_bytes).min(MAX_PARTS_PER_OBJECT) };
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    let (size, kk) = (u128::from(size), k as u128);
    (0..k).map(move |i| {
        let at = |j: u128| (size * j / kk) as u64;
        at(i as u128)..at(i as u128 + 1)
    })
}

/// What one part's GET found.
enum Part {
    /// The part is in place; the object's entity tag, if the store gives one.
    Read(Option<String>),
    /// The object has this size, not the expected one.
    Size(u64),
    /// The server answered the range with the whole object, or without saying which range: it does not serve
    /// ranges (a plain web server may not).
    NoRanges,
}

/// Why reading the parts stopped early.
enum Stop {
    /// The object has this size, not the expected one.
    Size(u64),
    /// The server does not serve ranges.
    NoRanges,
    /// A part failed.
    Failed(StoreError),
}

/// Whether `e`, the error of a range request, says the server does not serve ranges: `object_store` reports a
/// response of the whole object as `NotSupported`, and one without `Content-Range` in its own words.
pub(crate) fn ranges_unserved(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotSupported { .. }) || {
        let message = e.to_string();
        message.contains("non-partial response") || message.contains("Content-Range header not present")
    }
}

impl Store {
    /// Reads the `expected`-byte object `rel` as concurrent GETs of its parts (`Ok(Some(Err(size)))` if the object
    /// has another size, `Ok(None)` if the server does not serve ranges). The buffer is a mapping of `expected` bytes that only the parts' bodies fill (untouched, it
    /// holds no memory), and at most [`MAX_PARTS_IN_FLIGHT`] parts are asked for at once: an object of another
    /// size than the manifest says is refused by the first responses, before memory follows the claim.
    pub(crate) async fn get_in_parts(
        &self,
        rel: &str,
        expected: u64,
    ) -> Result<Option<Result<Bytes, u64>>, StoreError> {
        use futures::{StreamExt, TryStreamExt};
        let failed = |message: String, transient: bool| StoreError::Request {
            op: "GET range",
            url: self.url(rel),
            message,
            transient,
            attempts: 1,
        };
        let map = match usize::try_from(expected)
            .map_err(|e| e.to_string())
            .and_then(|len| crate::body::mapping(len).map_err(|e| e.to_string()))
        {
            Ok(map) => Arc::new(Mutex::new(map)),
            // A size no mapping can hold: if the object is not that size (a corrupt manifest), say so by its size.
            Err(e) => {
                return match self.size(rel).await? {
                    size if size != expected => Ok(Some(Err(size))),
                    _ => Err(failed(format!("cannot map {expected} bytes: {e}"), false)),
                };
            }
        };
        let ranges = part_ranges(expected, self.part_bytes());
        let parts = ranges.len();
        let tags = futures::stream::iter(ranges)
            .map(|r| async {
                match self.get_part(rel, r, expected, &map).await {
                    Ok(Part::Read(tag)) => Ok(tag),
                    Ok(Part::Size(size)) => Err(Stop::Size(size)),
                    Ok(Part::NoRanges) => Err(Stop::NoRanges),
                    Err(e) => Err(Stop::Failed(e)),
                }
            })
            .buffer_unordered(MAX_PARTS_IN_FLIGHT)
            .try_fold((None::<String>, false), |(first, differ), tag| async move {
                Ok(match (first, tag) {
                    (Some(a), Some(b)) => {
                        let differ = differ || a != b;
                        (Some(a), differ)
                    }
                    (first, tag) => (first.or(tag), differ),
                })
            })
            .await;
        match tags {
            Err(Stop::Size(size)) => return Ok(Some(Err(size))),
            Err(Stop::NoRanges) => return Ok(None),
            Err(Stop::Failed(e)) => return Err(e),
            Ok((_, true)) => {
                return Err(failed(
                    format!(
                        "the object changed while its {parts} parts were read (their entity tags differ); read it again"
                    ),
                    true,
                ));
            }
            Ok((_, false)) => {}
        }
        let bytes = crate::body::finished(map)
            .ok_or_else(|| failed("a part's read still holds the object's buffer".into(), true))?;
        Ok(Some(Ok(bytes)))
    }

    /// GETs the bytes `range` of the `expected`-byte object `rel` into `map`, retried on its own (a server that
    /// does not serve ranges is not asked again).
    async fn get_part(
        &self,
        rel: &str,
        range: Range<u64>,
        expected: u64,
        map: &crate::body::SharedMapping,
    ) -> Result<Part, StoreError> {
        let path = self.path(rel);
        let (got, attempts) = self
            .retry()
            .run_counted(is_transient, || async {
                let got = match self.get_sized_range(&path, range.clone(), expected).await {
                    Ok(Ok(got)) => got,
                    Ok(Err(size)) => return Ok(Part::Size(size)),
                    Err(e) if ranges_unserved(&e) => return Ok(Part::NoRanges),
                    Err(e) => return Err(e),
                };
                let tag = got.meta.e_tag.clone();
                crate::body::fill(got, range.clone(), map, range.start).await?;
                Ok(Part::Read(tag))
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
        let all = |size: u64, part: u64| part_ranges(size, part).collect::<Vec<_>>();
        let whole = |size: u64| std::iter::once(0..size).collect::<Vec<_>>();
        assert_eq!(all(10, 0), whole(10));
        assert_eq!(all(10, 10), whole(10));
        assert_eq!(all(0, 4), whole(0));
        assert_eq!(all(10, 4), [0..3, 3..6, 6..10]);
        // A claim of 2^64 - 1 bytes: its parts are counted, not made, and no more than the most an object has.
        assert_eq!(part_ranges(u64::MAX, DEFAULT_PART_BYTES).len() as u64, MAX_PARTS_PER_OBJECT);
        // Parts of a byte asked for a tile of 180 kB: the most an object has, larger.
        let tiny = all(180_234, 1);
        assert_eq!(tiny.len() as u64, MAX_PARTS_PER_OBJECT);
        assert!(tiny.windows(2).all(|w| w[0].end == w[1].start) && tiny[255].end == 180_234);
        assert!(tiny.iter().all(|p| (704..=705).contains(&(p.end - p.start))), "{tiny:?}");
        let mut huge = part_ranges(u64::MAX, DEFAULT_PART_BYTES);
        assert_eq!((huge.next().unwrap().start, huge.next_back().unwrap().end), (0, u64::MAX));
        for (size, part) in [(21_802_983u64, DEFAULT_PART_BYTES), (1 << 30, DEFAULT_PART_BYTES), (1001, 7)] {
            let r = all(size, part);
            assert_eq!(r.len() as u64, size.div_ceil(part));
            assert_eq!((r[0].start, r[r.len() - 1].end), (0, size));
            assert!(r.windows(2).all(|w| w[0].end == w[1].start));
            assert!(r.iter().all(|p| p.end - p.start <= part && p.end - p.start + 1 >= size / r.len() as u64));
        }
    }
}
