//! Tile encoding: canonical CSR to a version-2 (or version-1) tile blob.

use dct_format::{ChunkEntry, FrameRef, HEADER_LEN, STREAM_MAX, TileHeader, Version, align8, compute_crc};
use rayon::prelude::*;
use zstd_safe::{CCtx, CParameter};

use crate::error::EncodeError;
use crate::input::{CanonicalCsr, CountLike, CsrMatrix, IndexLike};
use crate::params::{Plane, Preset};

/// How many exceptions (counts or gaps above 65535) a tile may hold before the encoder refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExceptionPolicy {
    /// The reference writer's policy: at most `max(1024, nnz / 200)` of either kind.
    #[default]
    RawCounts,
    /// At most this many of either kind.
    AtMost(u64),
    /// No limit.
    Unlimited,
}

impl ExceptionPolicy {
    /// The limit for a tile of `nnz` nonzeros.
    pub fn limit(self, nnz: u64) -> u64 {
        match self {
            ExceptionPolicy::RawCounts => (nnz / 200).max(1024),
            ExceptionPolicy::AtMost(n) => n,
            ExceptionPolicy::Unlimited => u64::MAX,
        }
    }
}

/// Encoder settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Chunks requested (default 8); a tile gets `min(n_chunks, n_cells)` or fewer (see the format docs).
    pub n_chunks: usize,
    /// zstd level (default 19; [`Preset::Fast`] ignores it).
    pub level: i32,
    /// How the zstd parameters follow from the level (default [`Preset::Tuned`]).
    pub preset: Preset,
    /// Exception limit (default [`ExceptionPolicy::RawCounts`]).
    pub exception_policy: ExceptionPolicy,
    /// Format version to write (default 2; version 1 only for matrices it can hold, e.g. compatibility tests).
    pub version: Version,
}

impl EncodeOptions {
    /// The zstd level the frames are made at: [`level`](Self::level), or the level a preset that ignores it uses
    /// (what a manifest records as `zstd_level`).
    pub fn base_level(&self) -> i32 {
        self.preset.base_level().unwrap_or(self.level)
    }
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            n_chunks: 8,
            level: 19,
            preset: Preset::default(),
            exception_policy: ExceptionPolicy::default(),
            version: Version::V2,
        }
    }
}

/// Validates, canonicalizes and encodes a CSR matrix as one tile. Chunks compress in parallel on the current
/// rayon pool; the bytes do not depend on the number of threads.
pub fn encode_tile<P: IndexLike, I: IndexLike, V: CountLike>(
    m: &CsrMatrix<'_, P, I, V>,
    opts: &EncodeOptions,
) -> Result<Vec<u8>, EncodeError> {
    encode_canonical(&CanonicalCsr::from_csr(m)?, opts)
}

/// Chunk boundaries as the reference writer chooses them: `k = min(requested, n_cells)` (at least 1), boundary
/// `i` at the first row where the cumulative nonzero count reaches `i * nnz / k`, de-duplicated.
pub fn chunk_boundaries(indptr: &[u64], requested: usize) -> Vec<u64> {
    let n_cells = indptr.len() as u64 - 1;
    if n_cells == 0 {
        return vec![0];
    }
    let k = (requested.max(1) as u64).min(n_cells);
    let nnz = indptr[n_cells as usize];
    let mut bounds = vec![0u64];
    for i in 1..k {
        // First r with indptr[r] >= i * nnz / k, compared exactly as indptr[r] * k >= i * nnz.
        let target = u128::from(i) * u128::from(nnz);
        let r = indptr.partition_point(|&p| u128::from(p) * u128::from(k) < target) as u64;
        if r > *bounds.last().expect("non-empty") && r < n_cells {
            bounds.push(r);
        }
    }
    bounds.push(n_cells);
    bounds
}

struct EncodedChunk {
    entry: ChunkEntry,
    frames: [Vec<u8>; 4],
    exceptions: [u64; 2],
}

/// Encodes a canonical matrix as one tile.
pub fn encode_canonical(m: &CanonicalCsr, opts: &EncodeOptions) -> Result<Vec<u8>, EncodeError> {
    let version = opts.version;
    let n_cells = m.n_rows() as u64;
    let nnz = m.nnz() as u64;
    m.validate()?;
    // Before any compression: a version-1 tile cannot hold counts above 65535 (it has no exceptions).
    m.check_version(version, 0)?;
    let bounds = if n_cells == 0 { Vec::new() } else { chunk_boundaries(&m.indptr, opts.n_chunks) };
    let ranges: Vec<(u64, u64)> = bounds.windows(2).map(|w| (w[0], w[1])).collect();
    for &(lo, hi) in &ranges {
        if m.indptr[hi as usize] - m.indptr[lo as usize] > u64::from(u32::MAX) {
            return Err(EncodeError::Unrepresentable {
                version: version.number(),
                reason: "a chunk would hold 2^32 or more nonzeros; request more chunks".into(),
            });
        }
    }
    let chunks: Vec<EncodedChunk> = ranges
        .par_iter()
        .map(|&(lo, hi)| {
            SCRATCH.with(|cell| {
                let mut slot = cell.borrow_mut();
                let scratch = slot.get_or_insert_with(|| EncodeScratch {
                    cctx: CCtx::create(),
                    gaps: Vec::new(),
                    vals: Vec::new(),
                });
                encode_chunk(scratch, m, lo, hi, opts)
            })
        })
        .collect::<Result<_, _>>()?;

    let limit = opts.exception_policy.limit(nnz);
    for (i, kind) in ["value", "gap"].into_iter().enumerate() {
        let count: u64 = chunks.iter().map(|c| c.exceptions[i]).sum();
        if count > 0 && version == Version::V1 {
            return Err(EncodeError::Unrepresentable {
                version: 1,
                reason: format!("{count} {kind}s above 65535 need exceptions, which version 1 lacks"),
            });
        }
        if count > limit {
            return Err(EncodeError::TooManyExceptions { kind, count, limit });
        }
    }

    // Layout: header, chunk table, indptr, then per chunk gaps, vals, vexc, gexc, each 8-aligned.
    let table_end = (HEADER_LEN + chunks.len() * version.entry_size()) as u64;
    let indptr_off = align8(table_end);
    let mut pos = indptr_off + 8 * (n_cells + 1);
    let mut entries = Vec::with_capacity(chunks.len());
    for c in &chunks {
        let mut e = c.entry;
        let mut refs = [FrameRef::default(); 4];
        for (r, f) in refs.iter_mut().zip(&c.frames) {
            if !f.is_empty() {
                pos = align8(pos);
                *r = FrameRef { offset: pos, len: f.len() as u64 };
                pos += f.len() as u64;
            }
        }
        [e.gaps, e.vals, e.vexc, e.gexc] = refs;
        entries.push(e);
    }
    let total = pos as usize;
    let mut blob = vec![0u8; total];
    let entry_size = version.entry_size();
    for (i, e) in entries.iter().enumerate() {
        let at = HEADER_LEN + i * entry_size;
        e.write(&mut blob[at..at + entry_size], version);
    }
    for (i, p) in m.indptr.iter().enumerate() {
        let at = indptr_off as usize + 8 * i;
        blob[at..at + 8].copy_from_slice(&p.to_le_bytes());
    }
    for (c, e) in chunks.iter().zip(&entries) {
        for (f, r) in c.frames.iter().zip([e.gaps, e.vals, e.vexc, e.gexc]) {
            if !f.is_empty() {
                blob[r.range()].copy_from_slice(f);
            }
        }
    }
    let mut header = TileHeader {
        version,
        n_cells,
        nnz,
        n_genes: m.n_genes as u32,
        n_chunks: entries.len() as u32,
        indptr_off,
        total_size: total as u64,
        crc32: 0,
    };
    header.crc32 = compute_crc(&blob);
    blob[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    Ok(blob)
}

/// A thread's encoder state, reused from chunk to chunk: the zstd context (whose tables cost a megabyte or more
/// to set up at low levels) and the two plane buffers (every byte is overwritten, so they are never cleared).
struct EncodeScratch {
    cctx: CCtx<'static>,
    gaps: Vec<u8>,
    vals: Vec<u8>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Option<EncodeScratch>> = const { std::cell::RefCell::new(None) };
}

fn encode_chunk(
    scratch: &mut EncodeScratch,
    m: &CanonicalCsr,
    lo: u64,
    hi: u64,
    opts: &EncodeOptions,
) -> Result<EncodedChunk, EncodeError> {
    let (nnz_lo, nnz_hi) = (m.indptr[lo as usize], m.indptr[hi as usize]);
    let n = (nnz_hi - nnz_lo) as usize;
    let EncodeScratch { cctx, gaps, vals } = scratch;
    // Every byte of both planes is written below (the rows of the chunk cover its nonzeros).
    gaps.resize(2 * n, 0);
    vals.resize(2 * n, 0);
    let (mut vexc_pos, mut vexc_pay) = (Vec::new(), Vec::new());
    let (mut gexc_pos, mut gexc_pay) = (Vec::new(), Vec::new());
    let values = &m.values[nnz_lo as usize..nnz_hi as usize];
    let (vlo, vhi) = vals.split_at_mut(n);
    // The planes are written by straight loops the compiler vectorises; a stretch holding a value or gap above
    // STREAM_MAX (rare in counts) is written again by the loop that records exceptions.
    if split_planes(values.iter().copied(), vlo, vhi) > STREAM_MAX {
        let exceptions = (&mut vexc_pos, &mut vexc_pay);
        split_planes_with_exceptions(values.iter().copied(), vlo, vhi, 0, exceptions, |v| v);
    }
    let indices = &m.indices[nnz_lo as usize..nnz_hi as usize];
    let (glo, ghi) = gaps.split_at_mut(n);
    for r in lo..hi {
        let (a, b) = ((m.indptr[r as usize] - nnz_lo) as usize, (m.indptr[r as usize + 1] - nnz_lo) as usize);
        if a == b {
            continue;
        }
        let row = &indices[a..b];
        // The first gap of a row is its first gene; then differences (the row is strictly increasing).
        let steps = || row[1..].iter().zip(row).map(|(&g, &prev)| g - prev);
        (glo[a], ghi[a]) = (row[0] as u8, (row[0] >> 8) as u8);
        if split_planes(steps(), &mut glo[a + 1..b], &mut ghi[a + 1..b]).max(row[0]) > STREAM_MAX {
            let row_gaps = std::iter::once(row[0]).chain(steps());
            let exceptions = (&mut gexc_pos, &mut gexc_pay);
            split_planes_with_exceptions(row_gaps, &mut glo[a..b], &mut ghi[a..b], a, exceptions, |g| g - STREAM_MAX);
        }
    }
    let exc_bytes =
        |pos: &[u32], pay: &[u32]| -> Vec<u8> { pos.iter().chain(pay).flat_map(|x| x.to_le_bytes()).collect() };
    let exceptions = [vexc_pos.len() as u64, gexc_pos.len() as u64];
    let params = |plane| opts.preset.parameters(opts.level, plane);
    let mut frames = [
        compress(cctx, gaps, &params(Plane::Gaps))?,
        compress(cctx, vals, &params(Plane::Counts))?,
        Vec::new(),
        Vec::new(),
    ];
    if !vexc_pos.is_empty() {
        frames[2] = compress(cctx, &exc_bytes(&vexc_pos, &vexc_pay), &params(Plane::Exceptions))?;
    }
    if !gexc_pos.is_empty() {
        frames[3] = compress(cctx, &exc_bytes(&gexc_pos, &gexc_pay), &params(Plane::Exceptions))?;
    }
    let entry = ChunkEntry { cell_lo: lo, cell_hi: hi, nnz_lo, nnz_hi, ..Default::default() };
    Ok(EncodedChunk { entry, frames, exceptions })
}

/// Writes the low and high bytes of each of `words` to `lo` and `hi` (as long as the shorter of the three) and
/// returns the largest word.
fn split_planes(words: impl Iterator<Item = u32>, lo: &mut [u8], hi: &mut [u8]) -> u32 {
    let mut max = 0;
    for ((w, l), h) in words.zip(lo.iter_mut()).zip(hi.iter_mut()) {
        *l = w as u8;
        *h = (w >> 8) as u8;
        max = max.max(w);
    }
    max
}

/// [`split_planes`] with every word above STREAM_MAX stored as STREAM_MAX and listed as an exception: its
/// position (`first` + its index) and `payload(word)`.
fn split_planes_with_exceptions(
    words: impl Iterator<Item = u32>,
    lo: &mut [u8],
    hi: &mut [u8],
    first: usize,
    (positions, payloads): (&mut Vec<u32>, &mut Vec<u32>),
    payload: impl Fn(u32) -> u32,
) {
    for (k, ((w, l), h)) in words.zip(lo.iter_mut()).zip(hi.iter_mut()).enumerate() {
        let stored = w.min(STREAM_MAX);
        (*l, *h) = (stored as u8, (stored >> 8) as u8);
        if w > STREAM_MAX {
            positions.push((first + k) as u32);
            payloads.push(payload(w));
        }
    }
}

/// One standard zstd frame of `src` with its content size, no checksum; `params` (the level first) are set after a
/// full reset, so nothing carries over from the previous frame.
fn compress(cctx: &mut CCtx<'static>, src: &[u8], params: &[CParameter]) -> Result<Vec<u8>, EncodeError> {
    let err = |code| EncodeError::Zstd(zstd_safe::get_error_name(code).to_string());
    cctx.reset(zstd_safe::ResetDirective::SessionAndParameters).map_err(err)?;
    for &p in params {
        cctx.set_parameter(p).map_err(err)?;
    }
    cctx.set_parameter(CParameter::ContentSizeFlag(true)).map_err(err)?;
    cctx.set_parameter(CParameter::ChecksumFlag(false)).map_err(err)?;
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(src.len()));
    cctx.compress2(&mut out, src).map_err(err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_follow_the_reference_writer() {
        // 12 cells: cell 0 has 1 nonzero, cell 1 has 30, the rest none; 3 requested -> 2 chunks.
        let mut indptr = vec![0u64, 1];
        indptr.extend(std::iter::repeat_n(31, 11));
        assert_eq!(chunk_boundaries(&indptr, 3), vec![0, 2, 12]);
        // All empty: one chunk.
        assert_eq!(chunk_boundaries(&[0, 0, 0, 0], 8), vec![0, 3]);
        // Never more chunks than cells.
        assert_eq!(chunk_boundaries(&[0, 5, 10], 8), vec![0, 1, 2]);
    }
}
