//! Response bodies collected into memory of their own: a large body that arrives in pieces (an object store's
//! response, a local file) is read into an anonymous mapping sized for it, which goes back to the system when the
//! last reference to it is dropped. A body that arrives whole in one buffer is kept as it is.
//!
//! Why: collected the usual way, a body of a tile (several MB) is a buffer of the C allocator, taken on the
//! runtime thread that read it. Once glibc has freed one such buffer it serves the next ones from that thread's
//! heap and keeps them resident after they are freed, in every thread that read a body, beyond the memory budget
//! a training loader holds its tiles to (docs/BENCHMARKS.md, "Scale": an epoch over a simulated object store held
//! 1,263-1,384 MiB under a 1,024 MiB budget). Small bodies (manifests, obs shards, ranges of a few KB) are
//! collected as before.

use std::io::{Read, Seek, SeekFrom};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use memmap2::MmapMut;
use object_store::{GetResult, GetResultPayload};

use crate::error::short_or_long_body;

/// Bodies of at least this many bytes are read into a mapping of their own.
pub(crate) const MAPPED_BODY_MIN: u64 = 1 << 20;

fn generic(e: impl std::fmt::Display) -> object_store::Error {
    object_store::Error::Generic { store: "deltacells", source: e.to_string().into() }
}

/// The body of `got`, which must be `announced` bytes (a body of another length is an error, retried like a
/// transient failure).
pub(crate) async fn collect(got: GetResult, announced: u64) -> object_store::Result<Bytes> {
    if announced < MAPPED_BODY_MIN {
        let bytes = got.bytes().await?;
        if bytes.len() as u64 != announced {
            return Err(short_or_long_body(announced, bytes.len() as u64));
        }
        return Ok(bytes);
    }
    let len = usize::try_from(announced).map_err(generic)?;
    let GetResult { payload, meta, range, attributes, extensions } = got;
    let payload = match payload {
        GetResultPayload::Stream(mut stream) => {
            let first = match stream.next().await {
                Some(chunk) => chunk?,
                None => return Err(short_or_long_body(announced, 0)),
            };
            if first.len() >= len {
                // The whole body in one buffer the source made (a Python backend's, an in-memory object): kept.
                let rest = match stream.next().await {
                    Some(chunk) => chunk?.len(),
                    None => 0,
                };
                if first.len() + rest != len {
                    return Err(short_or_long_body(announced, (first.len() + rest) as u64));
                }
                return Ok(first);
            }
            GetResultPayload::Stream(futures::stream::once(async { Ok(first) }).chain(stream).boxed())
        }
        // A local file (the backend read by the reader through a store layer): read straight into the mapping.
        file => file,
    };
    let map = Arc::new(Mutex::new(mapping(len).map_err(generic)?));
    let want = range.start..range.start.saturating_add(announced);
    fill(GetResult { payload, meta, range, attributes, extensions }, want, &map, 0).await?;
    finished(map).ok_or_else(|| generic("a read still holds the body's buffer"))
}

/// The bytes of a filled mapping (`None` if a read still holds it).
pub(crate) fn finished(map: SharedMapping) -> Option<Bytes> {
    let map = Arc::try_unwrap(map).ok()?;
    Some(Bytes::from_owner(map.into_inner().unwrap_or_else(|e| e.into_inner())))
}

/// One mapping that a body fills, or the concurrent ranged GETs of an object's parts, each its own range of it.
pub(crate) type SharedMapping = Arc<Mutex<MmapMut>>;

/// Copies the body of `got`, a GET of the bytes `want`, into `map` from the offset `at`. A response for another
/// range, or a body of another length, is an error, retried like a transient failure.
pub(crate) async fn fill(
    got: GetResult,
    want: std::ops::Range<u64>,
    map: &SharedMapping,
    at: u64,
) -> object_store::Result<()> {
    let len = want.end.saturating_sub(want.start);
    if got.range != want {
        return Err(short_or_long_body(len, got.range.end.saturating_sub(got.range.start)));
    }
    let start = usize::try_from(at).map_err(generic)?;
    let end = usize::try_from(at.saturating_add(len)).map_err(generic)?;
    let held = |map: &SharedMapping| map.lock().unwrap_or_else(|e| e.into_inner()).len();
    if end > held(map) {
        return Err(generic(format!("the range {want:?} lies beyond the object's {} bytes", held(map))));
    }
    match got.payload {
        GetResultPayload::File(mut file, _) => {
            // A local file's parts are copied one at a time under the lock: copies from the page cache, each on
            // a blocking thread of its own.
            let map = map.clone();
            let read = tokio::task::spawn_blocking(move || -> std::io::Result<usize> {
                file.seek(SeekFrom::Start(want.start))?;
                let mut dest = map.lock().unwrap_or_else(|e| e.into_inner());
                let mut filled = start;
                while filled < end {
                    match file.read(&mut dest[filled..end])? {
                        0 => break,
                        n => filled += n,
                    }
                }
                Ok(filled - start)
            });
            let filled = read.await.map_err(generic)?.map_err(generic)?;
            if filled as u64 != len {
                return Err(short_or_long_body(len, filled as u64));
            }
        }
        GetResultPayload::Stream(mut stream) => {
            let mut filled = start;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                let to = filled.saturating_add(chunk.len());
                if to > end {
                    return Err(short_or_long_body(len, (to - start) as u64));
                }
                map.lock().unwrap_or_else(|e| e.into_inner())[filled..to].copy_from_slice(&chunk);
                filled = to;
            }
            if filled != end {
                return Err(short_or_long_body(len, (filled - start) as u64));
            }
        }
    }
    Ok(())
}

/// An anonymous mapping of `len` bytes, backed by huge pages where the kernel has them: fewer page faults to fill
/// it, as the decoder's buffers (`dct_codec::resize_large`); a kernel without them refuses the advice, and the
/// mapping is used as it is.
pub(crate) fn mapping(len: usize) -> std::io::Result<MmapMut> {
    let map = MmapMut::map_anon(len)?;
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    Ok(map)
}

#[cfg(test)]
mod tests {
    use object_store::ObjectStoreExt;
    use object_store::local::LocalFileSystem;

    use super::*;

    /// The 3 MB file of `dir` as a GET result whose body arrives in 8 KiB chunks (an object store's stream).
    async fn streamed(dir: &std::path::Path) -> GetResult {
        let fs = LocalFileSystem::new_with_prefix(dir).unwrap();
        let got = fs.get(&"big.bin".into()).await.unwrap();
        let (meta, range, attributes) = (got.meta.clone(), got.range.clone(), got.attributes.clone());
        let payload = GetResultPayload::Stream(got.into_stream());
        GetResult { payload, meta, range, attributes, extensions: Default::default() }
    }

    #[tokio::test]
    async fn a_body_in_many_chunks_comes_whole_into_a_mapping_and_of_the_announced_length_only() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|b| (b % 253) as u8).collect();
        std::fs::write(dir.path().join("big.bin"), &big).unwrap();
        let got = collect(streamed(dir.path()).await, 3_000_000).await.unwrap();
        assert_eq!(&got[..], &big[..]);
        for announced in [2_999_999, 3_000_001] {
            let e = collect(streamed(dir.path()).await, announced).await.unwrap_err().to_string();
            assert!(e.contains(&format!("where {announced} were announced")), "{e}");
        }
        // A small body is collected as before, and checked the same way.
        std::fs::write(dir.path().join("big.bin"), &big[..1000]).unwrap();
        assert_eq!(&collect(streamed(dir.path()).await, 1000).await.unwrap()[..], &big[..1000]);
        assert!(collect(streamed(dir.path()).await, 999).await.is_err());
    }
}
