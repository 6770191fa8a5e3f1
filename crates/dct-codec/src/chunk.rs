//! What both decode paths (whole tiles into CSR in `decode.rs`, planes for rows on demand in `planes.rs`) share
//! about a chunk: the decode context, the errors that name chunk, frame, cell and nonzero, the exception frames and
//! their position checks, and the 64-bit prefix sum of long cells.

use dct_format::{ChunkEntry, FrameKind, FrameRef, IndptrView, TileHeader};
use zstd_safe::DCtx;

use crate::error::DecodeError;
use crate::frame::{decompress_exact, frame_content_size};
use crate::kernels::WriteMode;

/// What the chunks of one tile are decoded against: its bytes, header and indptr, and how output is written.
pub(crate) struct Ctx<'a> {
    pub(crate) blob: &'a [u8],
    pub(crate) header: TileHeader,
    pub(crate) indptr: IndptrView<'a>,
    /// How chunks are written to their output: streaming for a whole tile larger than the caches; cached for row
    /// selections, whose chunk scratch is read again at once.
    pub(crate) mode: WriteMode,
}

impl<'a> Ctx<'a> {
    /// The context of a whole-tile decode into `V` counts: streaming writes when the output outgrows the caches.
    pub(crate) fn whole<V>(blob: &'a [u8], header: TileHeader, indptr: IndptrView<'a>) -> Self {
        let mode = WriteMode::for_output_bytes(header.nnz.saturating_mul(4 + size_of::<V>() as u64));
        Ctx { blob, header, indptr, mode }
    }
}

/// A frame error of chunk `chunk`.
pub(crate) fn frame_err(chunk: usize, kind: FrameKind, frame: FrameRef, problem: String) -> DecodeError {
    DecodeError::Frame { chunk: chunk as u32, kind, offset: frame.offset, problem }
}

/// The local cell holding the chunk's nonzero `pos` (relative to `e.nnz_lo`).
fn cell_of(indptr: &IndptrView<'_>, e: &ChunkEntry, pos: u64) -> u64 {
    let target = e.nnz_lo + pos;
    let (mut lo, mut hi) = (e.cell_lo, e.cell_hi);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if indptr.get(mid as usize) <= target { lo = mid } else { hi = mid }
    }
    // Skip empty cells that share the start offset.
    while lo + 1 < e.cell_hi && indptr.get(lo as usize + 1) <= target {
        lo += 1;
    }
    lo
}

/// A data error in frame `frame` of chunk `chunk` at the chunk's nonzero `pos` (relative to `e.nnz_lo`), naming its
/// cell.
pub(crate) fn data_err(
    indptr: &IndptrView<'_>,
    chunk: u32,
    e: &ChunkEntry,
    frame: FrameKind,
    pos: u64,
    problem: String,
) -> DecodeError {
    let offset = e.frame(frame).offset;
    DecodeError::Data { chunk, frame, offset, cell: cell_of(indptr, e, pos), nonzero: e.nnz_lo + pos, problem }
}

/// Longest cell whose gaps (each at most 65,535) are summed in 32 bits: 65,537 x 65,535 = 2^32 - 1.
pub(crate) const MAX_U32_SUM_LEN: usize = 65_537;

/// [`prefix_sum_u32`](crate::kernels::prefix_sum_u32) for cells too long for 32-bit sums (the indices still fit in
/// `i32` once checked against `n_genes`; a wrapped store is caught by that check).
pub(crate) fn prefix_sum_u64(gl: &[u8], gh: &[u8], row: &mut [i32]) -> (u32, u64) {
    let mut acc = 0u64;
    let mut zeros = 0u32;
    for ((o, &l), &h) in row.iter_mut().zip(gl).zip(gh) {
        let g = u32::from(l) | u32::from(h) << 8;
        zeros += u32::from(g == 0);
        acc += u64::from(g);
        *o = acc as i32;
    }
    (zeros, acc)
}

/// Decompresses an exception frame (already checked: `8k` bytes, `k <= n`) into the worker's buffer.
pub(crate) fn read_exceptions(
    dctx: &mut DCtx<'static>,
    exc: &mut Vec<u8>,
    blob: &[u8],
    c: usize,
    kind: FrameKind,
    frame: FrameRef,
    n: usize,
) -> Result<usize, DecodeError> {
    let src = &blob[frame.range()];
    let size = frame_content_size(src).map_err(|p| frame_err(c, kind, frame, p))?;
    if size % 8 != 0 || size / 8 > n as u64 {
        return Err(frame_err(c, kind, frame, format!("declares {size} bytes; needs 8k bytes with k <= n = {n}")));
    }
    decompress_exact(dctx, src, size as usize, exc).map_err(|p| frame_err(c, kind, frame, p))?;
    Ok(size as usize / 8)
}

/// Checks exception position `p` (after `prev`) against a chunk of `n` nonzeros.
pub(crate) fn check_position(p: u32, prev: Option<u32>, n: usize) -> Result<(), String> {
    if p as usize >= n {
        return Err(format!("exception position {p} is not below n = {n}"));
    }
    if prev.is_some_and(|q| p <= q) {
        return Err(format!("exception positions are not strictly increasing ({} then {p})", prev.unwrap_or(0)));
    }
    Ok(())
}

#[inline]
pub(crate) fn plane(lo: &[u8], hi: &[u8], i: usize) -> u32 {
    u32::from(lo[i]) | u32::from(hi[i]) << 8
}

#[allow(clippy::too_many_arguments)]
/// The data error of a cell whose gaps failed the fast check: the first zero gap or index past `n_genes`.
#[cold]
pub(crate) fn gap_error(
    ctx: &Ctx<'_>,
    chunk: u32,
    e: &ChunkEntry,
    glo: &[u8],
    ghi: &[u8],
    start: usize,
    end: usize,
    n_genes: u64,
) -> DecodeError {
    let mut acc = 0u64;
    for i in start..end {
        let g = u64::from(plane(glo, ghi, i));
        if i > start && g == 0 {
            return data_err(
                &ctx.indptr,
                chunk,
                e,
                FrameKind::Gaps,
                i as u64,
                "gap of 0 repeats the previous gene (indices must strictly increase)".into(),
            );
        }
        acc += g;
        if acc >= n_genes {
            return data_err(
                &ctx.indptr,
                chunk,
                e,
                FrameKind::Gaps,
                i as u64,
                format!("gene index {acc} is not below n_genes = {n_genes}"),
            );
        }
    }
    data_err(&ctx.indptr, chunk, e, FrameKind::Gaps, start as u64, "invalid gaps".into())
}
