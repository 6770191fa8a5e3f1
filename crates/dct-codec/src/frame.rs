//! Checks and decompression of single zstd frames, sized by the chunk table and never by the frame's claims.

use zstd_safe::{DCtx, InBuffer, OutBuffer};

/// Magic number at the start of every (non-skippable) zstd frame.
const ZSTD_MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();

/// The most a zstd frame can produce per input byte: a block needs at least 4 bytes (3-byte header and one RLE
/// byte) and yields at most 128 KiB.
pub(crate) const MAX_RATIO: u64 = 128 * 1024 / 4;

/// Size of the window used to prove a frame's content size without allocating for it.
pub(crate) const SINK_LEN: usize = 128 * 1024;

/// Checks that `src` is exactly one zstd frame (no skippable frame, nothing after it) that declares its content
/// size, and returns that size. Nothing is decompressed.
pub(crate) fn frame_content_size(src: &[u8]) -> Result<u64, String> {
    if src.len() < 4 || src[..4] != ZSTD_MAGIC {
        return Err("does not start with a zstd frame (bad magic or skippable frame)".into());
    }
    let size = match zstd_safe::get_frame_content_size(src) {
        Ok(Some(size)) => size,
        Ok(None) => return Err("the zstd frame header does not declare its content size".into()),
        Err(_) => return Err("the zstd frame header is malformed".into()),
    };
    match zstd_safe::find_frame_compressed_size(src) {
        Ok(n) if n == src.len() => {}
        Ok(n) => return Err(format!("holds {} bytes after its single zstd frame of {n} bytes", src.len() - n)),
        Err(code) => return Err(format!("is not a complete zstd frame ({})", zstd_safe::get_error_name(code))),
    }
    if size > (src.len() as u64).saturating_mul(MAX_RATIO) {
        return Err(format!("claims {size} bytes, more than {} compressed bytes can hold", src.len()));
    }
    Ok(size)
}

/// Decompresses the single frame `src` into `buf` (replacing its contents, reusing its allocation). The caller
/// has checked the content size with [`frame_content_size`] and decided it may allocate `expected` bytes.
pub(crate) fn decompress_exact(
    dctx: &mut DCtx<'static>,
    src: &[u8],
    expected: usize,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    buf.clear();
    buf.reserve(expected);
    match dctx.decompress(buf, src) {
        Ok(n) if n == expected => Ok(()),
        Ok(n) => Err(format!("decompressed to {n} bytes, expected {expected}")),
        Err(code) => Err(format!("zstd: {}", zstd_safe::get_error_name(code))),
    }
}

/// Decompresses `src` through the fixed window `sink`, only counting the bytes it yields: proves a content size
/// without allocating for it.
pub(crate) fn verify_content_size(
    dctx: &mut DCtx<'static>,
    src: &[u8],
    expected: u64,
    sink: &mut [u8],
) -> Result<(), String> {
    let _ = dctx.reset(zstd_safe::ResetDirective::SessionOnly);
    let mut input = InBuffer::around(src);
    let mut produced = 0u64;
    loop {
        let mut out = OutBuffer::around(&mut *sink);
        let hint = dctx
            .decompress_stream(&mut out, &mut input)
            .map_err(|code| format!("zstd: {}", zstd_safe::get_error_name(code)))?;
        produced += out.pos() as u64;
        if produced > expected {
            return Err(format!("decompresses to more than the expected {expected} bytes"));
        }
        if hint == 0 {
            break;
        }
        if out.pos() == 0 && input.pos() == src.len() {
            let _ = dctx.reset(zstd_safe::ResetDirective::SessionOnly);
            return Err("the zstd frame is truncated".into());
        }
    }
    if produced != expected || input.pos() != src.len() {
        return Err(format!("decompressed to {produced} bytes, expected {expected}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
        zstd_safe::compress(&mut out, data, 3).unwrap();
        out
    }

    #[test]
    fn accepts_one_frame_with_content_size() {
        let f = frame(&[1, 2, 3, 4]);
        assert_eq!(frame_content_size(&f), Ok(4));
        let mut dctx = DCtx::create();
        let mut buf = Vec::new();
        decompress_exact(&mut dctx, &f, 4, &mut buf).unwrap();
        assert_eq!(buf, [1, 2, 3, 4]);
        verify_content_size(&mut dctx, &f, 4, &mut [0u8; 16]).unwrap();
        assert!(verify_content_size(&mut dctx, &f, 5, &mut [0u8; 16]).is_err());
    }

    #[test]
    fn rejects_trailing_bytes_and_two_frames() {
        let mut f = frame(&[7; 100]);
        f.extend_from_slice(&[0; 8]);
        assert!(frame_content_size(&f).is_err());
        let mut two = frame(&[7; 10]);
        two.extend_from_slice(&frame(&[7; 10]));
        assert!(frame_content_size(&two).is_err());
    }

    #[test]
    fn rejects_skippable_and_truncated() {
        let mut skip = vec![0x50, 0x2A, 0x4D, 0x18, 0, 0, 0, 0];
        skip.extend_from_slice(&frame(&[1; 10]));
        assert!(frame_content_size(&skip).is_err());
        let f = frame(&[3; 1000]);
        assert!(frame_content_size(&f[..f.len() - 2]).is_err());
    }
}
