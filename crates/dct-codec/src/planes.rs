//! Tiles kept as decompressed byte planes, decoded row by row on demand.
//!
//! A random-access reader serves each cell of a tile once or a few times, in batches, in any order. Decoding the
//! whole tile into CSR first and then copying the requested rows out writes and reads every nonzero twice more
//! than needed. [`TilePlanes`] keeps what zstd produced (4 bytes per nonzero: the gap and count planes) plus the
//! validated exceptions, and [`TilePlanes::row_into`] builds one row's gene indices and counts straight into the
//! caller's output: the zstd work is done once per tile, the per-nonzero work once per served row.
//!
//! Checks are split accordingly. [`Decoder::decode_planes_into`](crate::Decoder::decode_planes_into) checks the
//! structure, the CRC (unless turned off), every frame's declared and actual size and every exception (positions,
//! stored 65535s, payload ranges); [`TilePlanes::row_into`] checks what belongs to a row (no zero gap after the
//! first, no stored zero count, every gene index below `n_genes`, with exceptions applied) each time it builds one,
//! and names the cell on failure.

use dct_format::{ChunkEntry, FrameKind, MAX_COUNT, STREAM_MAX, Version};
use zstd_safe::DCtx;

use crate::buffers::resize_large;
use crate::chunk::{Ctx, MAX_U32_SUM_LEN, check_position, data_err, frame_err, prefix_sum_u64, read_exceptions};
use crate::error::DecodeError;
use crate::kernels::{WriteMode, counts_into, prefetch, prefix_sum_u32};
use crate::values::CountValue;

/// One exception: the position of a nonzero in the tile (global) and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exception {
    pub(crate) pos: u64,
    pub(crate) payload: u32,
}

/// A tile's decompressed byte planes, ready for row-by-row decoding (see the module docs). Reuse one across
/// tiles: its buffers are kept.
#[derive(Debug, Clone, PartialEq)]
pub struct TilePlanes {
    pub(crate) version: Version,
    pub(crate) n_genes: u32,
    pub(crate) indptr: Vec<i64>,
    /// Per chunk: its first cell and first nonzero; one more entry for the end.
    pub(crate) chunk_cell_lo: Vec<u64>,
    pub(crate) chunk_nnz_lo: Vec<u64>,
    /// Per chunk: the byte offsets of its gaps and vals frames in the tile, named by errors.
    pub(crate) chunk_frames: Vec<(u64, u64)>,
    /// Chunk `c`'s gap planes at `2 * nnz_lo[c] ..`: `n_c` low bytes, then `n_c` high bytes.
    pub(crate) gaps: Vec<u8>,
    /// The count planes, laid out like `gaps`.
    pub(crate) vals: Vec<u8>,
    pub(crate) value_exceptions: Vec<Exception>,
    pub(crate) gap_exceptions: Vec<Exception>,
}

impl Default for TilePlanes {
    fn default() -> Self {
        TilePlanes {
            version: Version::V2,
            n_genes: 1,
            indptr: vec![0],
            chunk_cell_lo: vec![0],
            chunk_nnz_lo: vec![0],
            chunk_frames: Vec::new(),
            gaps: Vec::new(),
            vals: Vec::new(),
            value_exceptions: Vec::new(),
            gap_exceptions: Vec::new(),
        }
    }
}

impl TilePlanes {
    /// Rows (cells).
    pub fn n_rows(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    /// Stored nonzeros.
    pub fn nnz(&self) -> usize {
        self.indptr.last().copied().unwrap_or(0) as usize
    }

    /// Genes (columns).
    pub fn n_genes(&self) -> u32 {
        self.n_genes
    }

    /// Header version of the tile.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Row offsets (`n_rows + 1` entries from 0 to `nnz`).
    pub fn indptr(&self) -> &[i64] {
        &self.indptr
    }

    /// Nonzeros of row `r` (0 past the last row).
    pub fn row_nnz(&self, r: usize) -> usize {
        match (self.indptr.get(r), self.indptr.get(r + 1)) {
            (Some(&a), Some(&b)) => (b - a) as usize,
            _ => 0,
        }
    }

    /// Starts bringing row `r`'s planes into the caches (a hint: nothing happens for a row out of range). A caller
    /// building rows one after the other calls it for the next row before building this one.
    pub fn prefetch_row(&self, r: usize) {
        let Some((c, a, len)) = self.row_place(r) else { return };
        let Some(&[nnz_lo, nnz_hi]) = self.chunk_nnz_lo.get(c..c + 2) else { return };
        let (nnz_lo, nnz_hi) = (nnz_lo as usize, nnz_hi as usize);
        let (base, n_c) = (nnz_lo.saturating_mul(2), nnz_hi.saturating_sub(nnz_lo));
        for planes in [&self.gaps, &self.vals] {
            for start in [base.saturating_add(a), base.saturating_add(n_c).saturating_add(a)] {
                if let Some(bytes) = start.checked_add(len).and_then(|end| planes.get(start..end)) {
                    prefetch(bytes, PREFETCH_LINES);
                }
            }
        }
    }

    /// Row `r`'s chunk, its first nonzero within the chunk and its nonzeros (`None` out of range or empty).
    fn row_place(&self, r: usize) -> Option<(usize, usize, usize)> {
        let ends = self.indptr.get(r..r.checked_add(2)?)?;
        let (lo, hi) = (ends[0] as u64, ends[1] as u64);
        if hi <= lo || self.chunk_cell_lo.len() < 2 {
            return None;
        }
        // The chunk holding the row: the last one starting at or before it (chunks may hold no cells).
        let c = self.chunk_cell_lo.partition_point(|&cell| cell <= r as u64).saturating_sub(1);
        let c = c.min(self.chunk_cell_lo.len() - 2);
        Some((c, lo.checked_sub(*self.chunk_nnz_lo.get(c)?)? as usize, (hi - lo) as usize))
    }

    /// Appends row `r`'s gene indices (strictly increasing) and counts to `indices` and `values`, checking every
    /// rule that concerns the row. On error both are left as they were.
    pub fn row_into<V: CountValue>(
        &self,
        r: usize,
        indices: &mut Vec<i32>,
        values: &mut Vec<V>,
    ) -> Result<(), DecodeError> {
        if r >= self.n_rows() {
            return Err(DecodeError::RowOutOfRange { row: r as u64, n_cells: self.n_rows() as u64 });
        }
        let len = self.row_nnz(r);
        let (i0, v0) = (indices.len(), values.len());
        resize_large(indices, i0 + len, 0);
        resize_large(values, v0 + len, V::default());
        let result = self.row_to(r, &mut indices[i0..], &mut values[v0..]);
        if result.is_err() {
            indices.truncate(i0);
            values.truncate(v0);
        }
        result
    }

    /// Writes row `r`'s gene indices and counts into `indices` and `values`, which must hold exactly
    /// [`row_nnz(r)`](Self::row_nnz) elements, checking every rule that concerns the row (for filling disjoint
    /// parts of one output from several threads). On error their contents are unspecified.
    pub fn row_to<V: CountValue>(&self, r: usize, indices: &mut [i32], values: &mut [V]) -> Result<(), DecodeError> {
        self.row_to_with(r, indices, values, WriteMode::Cached)
    }

    /// [`row_to`](Self::row_to), storing with `mode`: a caller filling an output much larger than the caches (a
    /// large batch of rows) passes [`WriteMode::Streaming`], or [`WriteMode::for_output_bytes`] of the whole output.
    pub fn row_to_with<V: CountValue>(
        &self,
        r: usize,
        indices: &mut [i32],
        values: &mut [V],
        mode: WriteMode,
    ) -> Result<(), DecodeError> {
        if r >= self.n_rows() {
            return Err(DecodeError::RowOutOfRange { row: r as u64, n_cells: self.n_rows() as u64 });
        }
        let (lo, hi) = (self.indptr[r] as u64, self.indptr[r + 1] as u64);
        let len = (hi - lo) as usize;
        assert!(indices.len() == len && values.len() == len, "row_to: output slices must hold row_nnz(r) elements");
        if len == 0 {
            return Ok(());
        }
        // The decoder lays out every row with nonzeros inside a chunk.
        let (c, a, _) = self.row_place(r).expect("a row with nonzeros lies in a chunk");
        let (nnz_lo, nnz_hi) = (self.chunk_nnz_lo[c], self.chunk_nnz_lo[c + 1]);
        let n_c = (nnz_hi - nnz_lo) as usize;
        let base = 2 * nnz_lo as usize;
        let (gl, gh) = (&self.gaps[base + a..base + a + len], &self.gaps[base + n_c + a..base + n_c + a + len]);
        let (vl, vh) = (&self.vals[base + a..base + a + len], &self.vals[base + n_c + a..base + n_c + a + len]);

        // Counts: recombine the planes; a stored zero is never valid.
        if counts_into(vl, vh, values, mode) {
            let i = vl.iter().zip(vh).position(|(&l, &h)| l == 0 && h == 0).unwrap_or(0);
            let problem = "stored count is 0; zeros are never stored".to_string();
            return Err(self.data_error(c, FrameKind::Vals, r, lo + i as u64, problem));
        }
        for x in exceptions_in(&self.value_exceptions, lo, hi) {
            values[(x.pos - lo) as usize] = V::from_count(x.payload);
        }

        // Gene indices: prefix sums of the gaps, then the gap exceptions.
        let (zeros, last) = if len <= MAX_U32_SUM_LEN {
            prefix_sum_u32(gl, gh, indices, mode)
        } else {
            prefix_sum_u64(gl, gh, indices)
        };
        let zeros = zeros - u32::from(gl[0] == 0 && gh[0] == 0);
        let n_genes = u64::from(self.n_genes);
        let gexc = exceptions_in(&self.gap_exceptions, lo, hi);
        let added: u64 = gexc.iter().map(|x| u64::from(x.payload)).sum();
        if zeros != 0 || last + added >= n_genes {
            return Err(self.row_gap_error(c, r, lo, gl, gh, gexc, n_genes));
        }
        for x in gexc {
            for v in &mut indices[(x.pos - lo) as usize..] {
                *v += x.payload as i32;
            }
        }
        Ok(())
    }

    /// The first rule a row's gaps break (with its exceptions), for the error message.
    #[cold]
    #[allow(clippy::too_many_arguments)]
    fn row_gap_error(
        &self,
        c: usize,
        r: usize,
        lo: u64,
        gl: &[u8],
        gh: &[u8],
        gexc: &[Exception],
        n_genes: u64,
    ) -> DecodeError {
        let mut acc = 0u64;
        let mut k = 0;
        for (i, (&l, &h)) in gl.iter().zip(gh).enumerate() {
            let pos = lo + i as u64;
            let mut g = u64::from(l) | u64::from(h) << 8;
            if k < gexc.len() && gexc[k].pos == pos {
                g += u64::from(gexc[k].payload);
                k += 1;
            }
            let err = |problem: String| self.data_error(c, FrameKind::Gaps, r, pos, problem);
            if i > 0 && g == 0 {
                return err("gap of 0 repeats the previous gene (indices must strictly increase)".into());
            }
            acc += g;
            if acc >= n_genes {
                return err(format!("gene index {acc} is not below n_genes = {n_genes}"));
            }
        }
        self.data_error(c, FrameKind::Gaps, r, lo, "invalid gaps".into())
    }

    /// A data error of row `r` in chunk `c`'s `frame` (gaps or vals) at the tile's nonzero `nonzero`.
    #[cold]
    fn data_error(&self, c: usize, frame: FrameKind, r: usize, nonzero: u64, problem: String) -> DecodeError {
        let (gaps, vals) = self.chunk_frames.get(c).copied().unwrap_or_default();
        let offset = if frame == FrameKind::Vals { vals } else { gaps };
        DecodeError::Data { chunk: c as u32, frame, offset, cell: r as u64, nonzero, problem }
    }
}

/// Cache lines of each of a row's four planes that [`TilePlanes::prefetch_row`] asks for at most: a whole row of
/// up to 4,096 nonzeros. A batch's rows lie at random places of tiles far larger than the caches; asking for the
/// next row's first 4 lines of each plane and leaving the rest to the hardware prefetcher left a third of a warm
/// batch's gathering waiting on memory (`bench_gather.py`: 415-480 against 305-343 µs a batch of 1,024 PBMC cells,
/// rows in cache 177-205; see `docs/BENCHMARKS.md`). Asking two rows ahead gained nothing more.
const PREFETCH_LINES: usize = 64;

/// The exceptions with positions in `lo..hi` (the list is sorted by position).
fn exceptions_in(list: &[Exception], lo: u64, hi: u64) -> &[Exception] {
    if list.is_empty() {
        return list;
    }
    let a = list.partition_point(|x| x.pos < lo);
    let b = a + list[a..].partition_point(|x| x.pos < hi);
    &list[a..b]
}

/// Decompresses one chunk's gap and count frames straight into its regions of the tile's planes, and reads and
/// checks its exceptions (appended to `vexc`/`gexc` with global positions).
#[allow(clippy::too_many_arguments)]
pub(crate) fn decompress_chunk(
    dctx: &mut DCtx<'static>,
    scratch: &mut Vec<u8>,
    ctx: &Ctx<'_>,
    c: usize,
    e: &ChunkEntry,
    gaps: &mut [u8],
    vals: &mut [u8],
    vexc: &mut Vec<Exception>,
    gexc: &mut Vec<Exception>,
) -> Result<(), DecodeError> {
    let n = e.nnz() as usize;
    let blob = ctx.blob;
    decompress_into(dctx, &blob[e.vals.range()], vals).map_err(|p| frame_err(c, FrameKind::Vals, e.vals, p))?;
    decompress_into(dctx, &blob[e.gaps.range()], gaps).map_err(|p| frame_err(c, FrameKind::Gaps, e.gaps, p))?;
    let n_genes = u64::from(ctx.header.n_genes);
    for (kind, frame, planes, out) in [
        (FrameKind::ValueExceptions, e.vexc, &*vals, &mut *vexc),
        (FrameKind::GapExceptions, e.gexc, &*gaps, &mut *gexc),
    ] {
        if !frame.is_present() {
            continue;
        }
        let k = read_exceptions(dctx, scratch, blob, c, kind, frame, n)?;
        let (pos, pay) = scratch.split_at(4 * k);
        let mut prev: Option<u32> = None;
        for (p, q) in pos.chunks_exact(4).zip(pay.chunks_exact(4)) {
            let p = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            let payload = u32::from_le_bytes(q.try_into().expect("4 bytes"));
            check_position(p, prev, n).map_err(|m| frame_err(c, kind, frame, m))?;
            prev = Some(p);
            let at = p as usize;
            let stored = u32::from(planes[at]) | u32::from(planes[n + at]) << 8;
            let global = e.nnz_lo + u64::from(p);
            let data = |problem: String| data_err(&ctx.indptr, c as u32, e, kind, u64::from(p), problem);
            let what = if kind == FrameKind::GapExceptions { "gap" } else { "value" };
            if stored != STREAM_MAX {
                return Err(data(format!("{what} exception at a stored {what} of {stored} (must be 65535)")));
            }
            if kind == FrameKind::ValueExceptions && !(STREAM_MAX + 1..=MAX_COUNT).contains(&payload) {
                return Err(data(format!("value exception payload {payload} is outside 65536..=2147483647")));
            }
            if kind == FrameKind::GapExceptions && (payload == 0 || u64::from(payload) >= n_genes) {
                return Err(data(format!("gap exception payload {payload} is outside 1..{n_genes}")));
            }
            out.push(Exception { pos: global, payload });
        }
    }
    Ok(())
}

/// Decompresses one frame into exactly `dst` (its declared content size was checked against `dst.len()`).
fn decompress_into(dctx: &mut DCtx<'static>, src: &[u8], dst: &mut [u8]) -> Result<(), String> {
    match dctx.decompress(dst, src) {
        Ok(n) if n == dst.len() => Ok(()),
        Ok(n) => Err(format!("decompressed to {n} bytes, expected {}", dst.len())),
        Err(code) => Err(format!("zstd: {}", zstd_safe::get_error_name(code))),
    }
}
