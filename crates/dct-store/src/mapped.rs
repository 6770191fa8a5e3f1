//! Local tile objects read through memory maps: the decoder reads the page cache in place, with no copy into a
//! buffer of the reader's own.
//!
//! A map is only as stable as its file: if another process truncates a mapped file, touching the lost pages
//! raises `SIGBUS`. Datasets are never modified in place (writers create files beside their destination and
//! rename them into place, which leaves mapped files intact), so only an outside process that truncates tiles
//! under a running reader can cause this; [`LocalReads::Read`](crate::LocalReads::Read) reads with plain reads
//! instead, for directories that others rewrite in place.

#![allow(unsafe_code)]

use std::fs::File;
use std::path::Path;

use bytes::Bytes;

/// The file at `path` mapped into memory if it is exactly `expected` bytes long (`Ok(Err(actual))` if not).
pub(crate) fn map_exact(path: &Path, expected: u64) -> std::io::Result<Result<Bytes, u64>> {
    crate::local::check_regular_file(path)?;
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len != expected {
        return Ok(Err(len));
    }
    if len == 0 {
        return Ok(Ok(Bytes::new()));
    }
    // SAFETY: the map is read-only and private to this process; its contents are untrusted bytes, checked like
    // any fetched tile. What Rust cannot promise is that the file keeps its length: see the module docs for
    // why datasets are not truncated under a reader, and the opt-out.
    // Populated (prefaulted, on Linux): the whole tile is read at once (CRC, then every frame), and mapping every
    // page here, on the fetching thread, spares the decoder a page fault per few pages.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }?;
    if map.len() as u64 != expected {
        return Ok(Err(map.len() as u64));
    }
    Ok(Ok(Bytes::from_owner(map)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_a_file_of_the_expected_size_and_reports_any_other_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.dct");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        assert_eq!(map_exact(&path, data.len() as u64).unwrap().unwrap(), &data[..]);
        assert_eq!(map_exact(&path, 5).unwrap(), Err(data.len() as u64));
        std::fs::write(&path, b"").unwrap();
        assert_eq!(map_exact(&path, 0).unwrap().unwrap(), Bytes::new());
        let missing = map_exact(&dir.path().join("none"), 1).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    }
}
