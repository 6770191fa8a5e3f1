//! Tile decoding: whole tiles (in parallel across chunks) or selected rows, into fresh or reused buffers.

use std::sync::Arc;

use dct_format::{
    ChunkEntry, FrameKind, IndptrView, MAX_COUNT, STREAM_MAX, TileHeader, TileLayout, Version, verify_crc,
};
use zstd_safe::DCtx;

use crate::buffers::resize_for_overwrite;
use crate::chunk::{
    Ctx, MAX_U32_SUM_LEN, check_position, data_err, frame_err, gap_error, plane, prefix_sum_u64, read_exceptions,
};
use crate::error::DecodeError;
use crate::frame::{MAX_RATIO, SINK_LEN, decompress_exact, frame_content_size, verify_content_size};
use crate::handoff::Helpers;
use crate::kernels::{WriteMode, counts_into, prefix_sum_u32};
use crate::planes::{Exception, TilePlanes, decompress_chunk};
use crate::split::{Split, Threads};
use crate::values::CountValue;

/// Memory a tile may make the decoder allocate on the strength of its claims alone: 1 MiB plus 64 times the blob
/// size. A tile claiming more is first proven by streaming every frame through a fixed window (see
/// [`Decoder::decode_into`]).
fn trust_budget(blob_len: usize) -> u64 {
    (1 << 20) + 64 * blob_len as u64
}

/// A decoded tile (or a selection of its rows) in CSR form.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedTile<V> {
    /// Header version of the tile.
    pub version: Version,
    /// Genes (columns).
    pub n_genes: u32,
    /// Row offsets, `n_rows + 1` entries starting at 0.
    pub indptr: Vec<i64>,
    /// Gene indices, strictly increasing within each row.
    pub indices: Vec<i32>,
    /// Counts, in the same order as `indices`.
    pub values: Vec<V>,
}

impl<V> Default for DecodedTile<V> {
    fn default() -> Self {
        DecodedTile { version: Version::V2, n_genes: 1, indptr: vec![0], indices: Vec::new(), values: Vec::new() }
    }
}

impl<V> DecodedTile<V> {
    /// Rows (cells).
    pub fn n_rows(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    /// Stored nonzeros.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The gene indices and counts of row `r`.
    pub fn row(&self, r: usize) -> (&[i32], &[V]) {
        let (lo, hi) = (self.indptr[r] as usize, self.indptr[r + 1] as usize);
        (&self.indices[lo..hi], &self.values[lo..hi])
    }
}

/// Decoder settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Check the header's CRC-32 before decoding (default `true`).
    pub verify_crc: bool,
    /// Threads that decode the chunks of one tile (default 1: decode on the calling thread).
    pub threads: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { verify_crc: true, threads: 1 }
    }
}

/// Per-thread decoding state: a zstd context and scratch buffers, reused across chunks and tiles.
struct Worker {
    dctx: DCtx<'static>,
    gaps: Vec<u8>,
    vals: Vec<u8>,
    exc: Vec<u8>,
    chunk_indices: Vec<i32>,
    chunk_values: Vec<u32>,
    /// Exceptions read by [`Decoder::decode_planes_into`] from this worker's chunks, in chunk order.
    vexc_out: Vec<Exception>,
    gexc_out: Vec<Exception>,
}

impl Worker {
    fn new() -> Self {
        Worker {
            dctx: DCtx::create(),
            gaps: Vec::new(),
            vals: Vec::new(),
            exc: Vec::new(),
            chunk_indices: Vec::new(),
            chunk_values: Vec::new(),
            vexc_out: Vec::new(),
            gexc_out: Vec::new(),
        }
    }
}

/// Decodes tiles of versions 1 and 2. Reuse one decoder: its zstd contexts, scratch buffers and thread pool are
/// kept, so decoding into a reused [`DecodedTile`] allocates nothing once buffers have grown to size.
///
/// ```
/// use dct_codec::{CsrMatrix, DecodeOptions, DecodedTile, Decoder, EncodeOptions, encode_tile};
/// let m = CsrMatrix { n_rows: 2, n_cols: 5, indptr: &[0u32, 2, 3], indices: &[4u32, 1, 0], values: &[7u32, 1, 3] };
/// let tile = encode_tile(&m, &EncodeOptions::default())?;
/// let mut decoder = Decoder::new(DecodeOptions::default());
/// let mut out = DecodedTile::<f32>::default();
/// decoder.decode_into(&tile, &mut out)?;
/// assert_eq!(out.row(0), (&[1, 4][..], &[1.0, 7.0][..])); // unsorted input comes back sorted
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Decoder {
    opts: DecodeOptions,
    layout: TileLayout,
    workers: Vec<Worker>,
    threads: Threads,
    sink: Vec<u8>,
    proof_dctx: Option<DCtx<'static>>,
    plan: Vec<(u32, u32)>,
    needed: Vec<bool>,
    parsed: bool,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder").field("opts", &self.opts).finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder that decodes on the calling thread plus `opts.threads - 1` helper threads of its own (named
    /// `dct-decode-1`, ...), which sleep between tiles. Handing chunks to them allocates nothing, so with reused
    /// buffers a decode allocates nothing on any thread count.
    ///
    /// # Panics
    /// If the operating system refuses to start a thread; [`Decoder::try_with_threads`] returns the error instead.
    pub fn new(opts: DecodeOptions) -> Self {
        Self::try_with_threads(opts, "dct-decode").expect("failed to start decode threads")
    }

    /// [`Decoder::new`] with helper threads named `{name}-1`, ...; an error if a thread cannot be started.
    pub fn try_with_threads(opts: DecodeOptions, name: &str) -> std::io::Result<Self> {
        let threads = opts.threads.max(1);
        let threads = if threads > 1 { Threads::Own(Helpers::start(threads - 1, name)?) } else { Threads::Caller };
        Ok(Self::build(opts, threads))
    }

    /// A decoder that runs its chunks on a shared rayon pool (`opts.threads` workers' worth of scratch): for callers
    /// that already run on that pool. Called from a thread outside the pool, each decode enters it through rayon's
    /// global queue, which allocates a block every 63 entries.
    pub fn with_pool(opts: DecodeOptions, pool: Arc<rayon::ThreadPool>) -> Self {
        Self::build(opts, Threads::Pool(pool))
    }

    fn build(mut opts: DecodeOptions, threads: Threads) -> Self {
        opts.threads = opts.threads.max(1);
        Decoder {
            opts,
            layout: TileLayout::default(),
            workers: (0..opts.threads).map(|_| Worker::new()).collect(),
            threads,
            sink: Vec::new(),
            proof_dctx: None,
            plan: Vec::new(),
            needed: Vec::new(),
            parsed: false,
        }
    }

    /// The options this decoder was built with (and the CRC setting last given to
    /// [`set_verify_crc`](Self::set_verify_crc)).
    pub fn options(&self) -> DecodeOptions {
        self.opts
    }

    /// Turns the CRC check of the following decodes on or off: for a caller that checked a tile's CRC already
    /// (with [`dct_format::verify_crc`]) and keeps one decoder for several purposes.
    pub fn set_verify_crc(&mut self, verify_crc: bool) {
        self.opts.verify_crc = verify_crc;
    }

    /// The layout of the tile most recently parsed, if its structure (and CRC, when checked) was valid.
    pub fn layout(&self) -> Option<&TileLayout> {
        self.parsed.then_some(&self.layout)
    }

    /// Decodes a whole tile into fresh buffers.
    pub fn decode<V: CountValue>(&mut self, blob: &[u8]) -> Result<DecodedTile<V>, DecodeError> {
        let mut out = DecodedTile::default();
        self.decode_into(blob, &mut out)?;
        Ok(out)
    }

    /// Decodes a whole tile into `out`, reusing its allocations.
    ///
    /// Order of checks: structure ([`TileLayout::parse`]), CRC if enabled, every frame header against the chunk
    /// table (exactly one frame, declared content size `2n` or `8k` with `k <= n`, no more than the compressed
    /// bytes can produce); if the memory those claims imply exceeds 1 MiB + 64 x the blob size, every frame is
    /// first streamed through a fixed 128 KiB window to prove it; then the chunks are decoded (in parallel) with
    /// every data rule checked.
    pub fn decode_into<V: CountValue>(&mut self, blob: &[u8], out: &mut DecodedTile<V>) -> Result<(), DecodeError> {
        let (header, indptr) = self.begin_whole(blob, 4 + size_of::<V>() as u64, &mut out.indptr)?;
        out.version = header.version;
        out.n_genes = header.n_genes;
        resize_for_overwrite(&mut out.indices, header.nnz as usize, 0);
        resize_for_overwrite(&mut out.values, header.nnz as usize, V::default());
        self.decode_chunks(blob, header, indptr, &mut out.indices, &mut out.values)
    }

    /// Decodes a whole tile into the caller's buffers (shared or pinned memory, say): the row offsets into
    /// `indptr` (resized to `n_cells + 1`), the gene indices and counts into the first `nnz` elements of
    /// `indices` and `values`, which must hold at least that many (a shorter buffer is
    /// [`DecodeError::BufferTooSmall`], found before anything is decompressed). Elements past `nnz` are left as
    /// they were. Returns the header. The checks are those of [`decode_into`](Self::decode_into).
    pub fn decode_to<V: CountValue>(
        &mut self,
        blob: &[u8],
        indptr: &mut Vec<i64>,
        indices: &mut [i32],
        values: &mut [V],
    ) -> Result<TileHeader, DecodeError> {
        let (header, view) = self.begin_whole(blob, 4 + size_of::<V>() as u64, indptr)?;
        let nnz = header.nnz;
        let short = [(indices.len() as u64, "indices"), (values.len() as u64, "values")];
        if let Some(&(len, buffer)) = short.iter().find(|(len, _)| *len < nnz) {
            return Err(DecodeError::BufferTooSmall { buffer, len, needed: nnz });
        }
        let nnz = nnz as usize;
        self.decode_chunks(blob, header, view, &mut indices[..nnz], &mut values[..nnz])?;
        Ok(header)
    }

    /// Decodes every chunk of the tile parsed by [`Decoder::begin_whole`] into `indices` and `values` (exactly
    /// `nnz` long).
    fn decode_chunks<V: CountValue>(
        &mut self,
        blob: &[u8],
        header: TileHeader,
        indptr: IndptrView<'_>,
        indices: &mut [i32],
        values: &mut [V],
    ) -> Result<(), DecodeError> {
        let (n_chunks, nnz) = (self.layout.chunks().len(), header.nnz);
        if n_chunks == 0 {
            return Ok(());
        }
        let ctx = Ctx {
            blob,
            header,
            indptr,
            mode: WriteMode::for_output_bytes(nnz.saturating_mul(4 + size_of::<V>() as u64)),
        };
        let (workers, layout) = (&mut self.workers, &self.layout);
        self.threads.run(n_chunks, |par| {
            let job = |w: &mut Worker, ctx: &Ctx<'_>, c, e: &ChunkEntry, i: &mut [i32], v: &mut [V]| {
                decode_chunk(w, ctx, c, e, i, v)
            };
            let split = Split { ctx: &ctx, scale: 1, job: &job, par };
            split.run(workers, 0, layout.chunks(), 0, indices, values)
        })
    }

    /// Decompresses a tile into `out` for row-by-row decoding with [`TilePlanes::row_into`] (chunks in parallel,
    /// like [`decode_into`](Self::decode_into)). Checked here: the structure, the CRC (if on), every frame's size and
    /// every exception; each row's own rules are checked when it is decoded. Reusing `out` allocates nothing once
    /// its buffers have grown to size.
    pub fn decode_planes_into(&mut self, blob: &[u8], out: &mut TilePlanes) -> Result<(), DecodeError> {
        let (header, indptr) = self.begin_whole(blob, 4, &mut out.indptr)?;
        let (n_chunks, nnz) = (self.layout.chunks().len(), header.nnz);
        out.version = header.version;
        out.n_genes = header.n_genes;
        out.chunk_cell_lo.clear();
        out.chunk_nnz_lo.clear();
        for e in self.layout.chunks() {
            out.chunk_cell_lo.push(e.cell_lo);
            out.chunk_nnz_lo.push(e.nnz_lo);
        }
        out.chunk_cell_lo.push(header.n_cells);
        out.chunk_nnz_lo.push(nnz);
        resize_for_overwrite(&mut out.gaps, 2 * nnz as usize, 0);
        resize_for_overwrite(&mut out.vals, 2 * nnz as usize, 0);
        out.value_exceptions.clear();
        out.gap_exceptions.clear();
        for w in &mut self.workers {
            w.vexc_out.clear();
            w.gexc_out.clear();
        }
        if n_chunks == 0 {
            return Ok(());
        }
        let ctx = Ctx { blob, header, indptr, mode: WriteMode::Cached };
        let (workers, layout) = (&mut self.workers, &self.layout);
        self.threads.run(n_chunks, |par| {
            // Chunks' planes (two bytes per nonzero) into their regions; exceptions into each worker's lists.
            let job = |w: &mut Worker, ctx: &Ctx<'_>, c: u32, e: &ChunkEntry, g: &mut [u8], v: &mut [u8]| {
                let (vexc, gexc) = (&mut w.vexc_out, &mut w.gexc_out);
                decompress_chunk(&mut w.dctx, &mut w.exc, ctx, c as usize, e, g, v, vexc, gexc)
            };
            let split = Split { ctx: &ctx, scale: 2, job: &job, par };
            split.run(workers, 0, layout.chunks(), 0, &mut out.gaps, &mut out.vals)
        })?;
        // Workers hold consecutive runs of chunks, in order: their lists concatenate in position order.
        for w in &self.workers {
            out.value_exceptions.extend_from_slice(&w.vexc_out);
            out.gap_exceptions.extend_from_slice(&w.gexc_out);
        }
        Ok(())
    }

    /// Decodes only the rows `rows` (local indices, any order, repeats allowed) into `out`, in request order,
    /// decompressing only the chunks that hold them.
    pub fn decode_rows_into<V: CountValue>(
        &mut self,
        blob: &[u8],
        rows: &[u64],
        out: &mut DecodedTile<V>,
    ) -> Result<(), DecodeError> {
        self.parse(blob)?;
        let header = *self.layout.header();
        let indptr = self.layout.indptr(blob);
        out.version = header.version;
        out.n_genes = header.n_genes;
        out.indptr.clear();
        out.indptr.push(0);
        self.plan.clear();
        self.needed.clear();
        self.needed.resize(self.layout.chunks().len(), false);
        let mut total = 0u64;
        for (j, &row) in rows.iter().enumerate() {
            if row >= header.n_cells {
                return Err(DecodeError::RowOutOfRange { row, n_cells: header.n_cells });
            }
            total += indptr.get(row as usize + 1) - indptr.get(row as usize);
            out.indptr.push(total as i64);
            let chunk = self.layout.chunk_of_row(row).expect("validated chunks cover every row");
            self.needed[chunk] = true;
            self.plan.push((chunk as u32, j as u32));
        }
        self.check_claims(blob, total.saturating_mul(4 + size_of::<V>() as u64))?;
        self.plan.sort_unstable();
        resize_for_overwrite(&mut out.indices, total as usize, 0);
        resize_for_overwrite(&mut out.values, total as usize, V::default());
        let ctx = Ctx { blob, header, indptr, mode: WriteMode::Cached };
        let w = &mut self.workers[0];
        let mut chunk_indices = std::mem::take(&mut w.chunk_indices);
        let mut chunk_values = std::mem::take(&mut w.chunk_values);
        let mut result = Ok(());
        let mut i = 0;
        while i < self.plan.len() {
            let c = self.plan[i].0 as usize;
            let e = self.layout.chunks()[c];
            let n = e.nnz() as usize;
            chunk_indices.resize(n, 0);
            chunk_values.resize(n, 0);
            if let Err(err) = decode_chunk(w, &ctx, c as u32, &e, &mut chunk_indices, &mut chunk_values) {
                result = Err(err);
                break;
            }
            while i < self.plan.len() && self.plan[i].0 as usize == c {
                let j = self.plan[i].1 as usize;
                let row = rows[j] as usize;
                let src = (indptr.get(row) - e.nnz_lo) as usize..(indptr.get(row + 1) - e.nnz_lo) as usize;
                let dst = out.indptr[j] as usize..out.indptr[j + 1] as usize;
                out.indices[dst.clone()].copy_from_slice(&chunk_indices[src.clone()]);
                for (o, &v) in out.values[dst].iter_mut().zip(&chunk_values[src]) {
                    *o = V::from_count(v);
                }
                i += 1;
            }
        }
        w.chunk_indices = chunk_indices;
        w.chunk_values = chunk_values;
        result
    }

    /// The common start of a whole-tile decode: parse (and CRC), check the claims of every chunk for an output of
    /// `bytes_per_nnz` bytes per nonzero, copy the indptr into `indptr_out`.
    fn begin_whole<'a>(
        &mut self,
        blob: &'a [u8],
        bytes_per_nnz: u64,
        indptr_out: &mut Vec<i64>,
    ) -> Result<(TileHeader, IndptrView<'a>), DecodeError> {
        self.parse(blob)?;
        let header = *self.layout.header();
        self.needed.clear();
        self.needed.resize(self.layout.chunks().len(), true);
        self.check_claims(blob, header.nnz.saturating_mul(bytes_per_nnz))?;
        let indptr = self.layout.indptr(blob);
        indptr.copy_range_into(0, header.n_cells as usize, indptr_out);
        Ok((header, indptr))
    }

    fn parse(&mut self, blob: &[u8]) -> Result<(), DecodeError> {
        self.parsed = false;
        self.layout.parse_from(blob)?;
        if self.opts.verify_crc {
            verify_crc(blob, self.layout.header())?;
        }
        self.parsed = true;
        Ok(())
    }

    /// Checks the frame headers of the chunks marked in `self.needed` against the chunk table, then, if the
    /// output (`out_bytes`) and scratch those claims imply exceed the trust budget, proves every such frame's
    /// content size by streaming it through a fixed window.
    fn check_claims(&mut self, blob: &[u8], out_bytes: u64) -> Result<(), DecodeError> {
        let version = self.layout.version();
        let mut max_scratch = 0u64;
        // Frames may legally share bytes, so bound the sum of all claims by what the whole blob could produce:
        // without this, many chunks pointing at one frame would multiply the work and memory.
        let mut total_claimed = 0u64;
        for (c, e) in self.layout.chunks().iter().enumerate() {
            if !self.needed[c] {
                continue;
            }
            let n = e.nnz();
            for kind in [FrameKind::Gaps, FrameKind::Vals, FrameKind::ValueExceptions, FrameKind::GapExceptions] {
                let frame = e.frame(kind);
                if !frame.is_present() {
                    continue;
                }
                let size = frame_content_size(&blob[frame.range()]).map_err(|p| frame_err(c, kind, frame, p))?;
                total_claimed = total_claimed.saturating_add(size);
                let ok = match kind {
                    FrameKind::Gaps | FrameKind::Vals => size == 2 * n,
                    _ => version == Version::V2 && size % 8 == 0 && size / 8 <= n,
                };
                if !ok {
                    let want = match kind {
                        FrameKind::Gaps | FrameKind::Vals => format!("exactly 2n = {} bytes", 2 * n),
                        _ => format!("8k bytes with k <= n = {n}"),
                    };
                    return Err(frame_err(
                        c,
                        kind,
                        frame,
                        format!("declares {size} bytes of content, the chunk needs {want}"),
                    ));
                }
            }
            // gaps + vals + exceptions (4n) and, for row selections, the chunk's decoded rows (8n).
            max_scratch = max_scratch.max(16 * n);
        }
        if total_claimed > (blob.len() as u64).saturating_mul(MAX_RATIO) {
            return Err(DecodeError::Format(dct_format::FormatError::Layout {
                field: dct_format::Field::Header("n_chunks"),
                offset: 36,
                rule: format!(
                    "the frames claim {total_claimed} decompressed bytes in all, more than a {}-byte tile can hold",
                    blob.len()
                ),
            }));
        }
        let claimed = out_bytes.saturating_add(max_scratch.saturating_mul(self.opts.threads as u64));
        if usize::try_from(claimed).is_err() || claimed > isize::MAX as u64 {
            return Err(DecodeError::TooLarge { bytes: claimed });
        }
        if claimed <= trust_budget(blob.len()) {
            return Ok(());
        }
        if self.sink.is_empty() {
            self.sink = vec![0; SINK_LEN];
        }
        // A separate context whose window (which libzstd allocates itself, sized from the frame header) is
        // capped by the trust budget, so proving a claim never allocates for the claim.
        let budget = trust_budget(blob.len());
        let window_log = (63 - budget.leading_zeros()).clamp(20, 30);
        let dctx = self.proof_dctx.get_or_insert_with(|| {
            let mut d = DCtx::create();
            let _ = d.set_parameter(zstd_safe::DParameter::WindowLogMax(window_log));
            d
        });
        let _ = dctx.set_parameter(zstd_safe::DParameter::WindowLogMax(window_log));
        for (c, e) in self.layout.chunks().iter().enumerate() {
            if !self.needed[c] {
                continue;
            }
            for kind in [FrameKind::Gaps, FrameKind::Vals, FrameKind::ValueExceptions, FrameKind::GapExceptions] {
                let frame = e.frame(kind);
                if frame.is_present() {
                    let src = &blob[frame.range()];
                    let size = frame_content_size(src).map_err(|p| frame_err(c, kind, frame, p))?;
                    verify_content_size(dctx, src, size, &mut self.sink).map_err(|p| frame_err(c, kind, frame, p))?;
                }
            }
        }
        Ok(())
    }
}

/// Decodes one chunk into `indices`/`values` (exactly the chunk's `n` nonzeros).
fn decode_chunk<V: CountValue>(
    w: &mut Worker,
    ctx: &Ctx<'_>,
    chunk: u32,
    e: &ChunkEntry,
    indices: &mut [i32],
    values: &mut [V],
) -> Result<(), DecodeError> {
    let n = e.nnz() as usize;
    let blob = ctx.blob;
    let c = chunk as usize;
    // Each stream is post-processed right after it is decompressed, while its planes are still in cache.
    decompress_exact(&mut w.dctx, &blob[e.vals.range()], 2 * n, &mut w.vals)
        .map_err(|p| frame_err(c, FrameKind::Vals, e.vals, p))?;

    // Counts: recombine the byte planes; a stored zero is never valid.
    let (vlo, vhi) = w.vals.split_at(n);
    if counts_into(vlo, vhi, values, ctx.mode) {
        let pos = (0..n).find(|&i| plane(vlo, vhi, i) == 0).expect("a zero was seen");
        return Err(data_err(&ctx.indptr, chunk, e, pos as u64, "stored count is 0; zeros are never stored".into()));
    }

    decompress_exact(&mut w.dctx, &blob[e.gaps.range()], 2 * n, &mut w.gaps)
        .map_err(|p| frame_err(c, FrameKind::Gaps, e.gaps, p))?;
    // Gene indices: prefix sums of the gaps, restarting at each cell, in one pass per cell (see prefix_sum_u32).
    let (glo, ghi) = w.gaps.split_at(n);
    let n_genes = u64::from(ctx.header.n_genes);
    let mut start = 0usize;
    for cell in e.cell_lo..e.cell_hi {
        let end = (ctx.indptr.get(cell as usize + 1) - e.nnz_lo) as usize;
        if end > start {
            let (gl, gh, row) = (&glo[start..end], &ghi[start..end], &mut indices[start..end]);
            let (zeros, last) = if row.len() <= MAX_U32_SUM_LEN {
                // At most 65,537 gaps of at most 65,535: every sum fits in 32 bits and cannot wrap.
                prefix_sum_u32(gl, gh, row, ctx.mode)
            } else {
                prefix_sum_u64(gl, gh, row)
            };
            // A cell's first gap is its first gene index and may be 0; any later zero repeats a gene.
            let zeros = zeros - u32::from(gl[0] == 0 && gh[0] == 0);
            if zeros != 0 || last >= n_genes {
                return Err(gap_error(ctx, chunk, e, glo, ghi, start, end, n_genes));
            }
        }
        start = end;
    }

    if e.vexc.is_present() {
        let frame = e.vexc;
        let k = read_exceptions(&mut w.dctx, &mut w.exc, blob, c, FrameKind::ValueExceptions, frame, n)?;
        let (pos, pay) = w.exc.split_at(4 * k);
        let (vlo, vhi) = w.vals.split_at(n);
        let mut prev: Option<u32> = None;
        for (p, q) in pos.chunks_exact(4).zip(pay.chunks_exact(4)) {
            let p = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            let payload = u32::from_le_bytes(q.try_into().expect("4 bytes"));
            check_position(p, prev, n).map_err(|m| frame_err(c, FrameKind::ValueExceptions, frame, m))?;
            prev = Some(p);
            let at = p as usize;
            let fail = |m: String| data_err(&ctx.indptr, chunk, e, p.into(), m);
            if plane(vlo, vhi, at) != STREAM_MAX {
                return Err(fail(format!(
                    "value exception at a stored count of {} (must be 65535)",
                    plane(vlo, vhi, at)
                )));
            }
            if !(STREAM_MAX + 1..=MAX_COUNT).contains(&payload) {
                return Err(fail(format!("value exception payload {payload} is outside 65536..=2147483647")));
            }
            values[at] = V::from_count(payload);
        }
    }

    if e.gexc.is_present() {
        let frame = e.gexc;
        let k = read_exceptions(&mut w.dctx, &mut w.exc, blob, c, FrameKind::GapExceptions, frame, n)?;
        let (pos, pay) = w.exc.split_at(4 * k);
        let mut prev: Option<u32> = None;
        // `next_cell` is the first cell not yet passed; `cell_end` the end of the cell before it. Positions are
        // below n, so the walk stops inside the chunk (and never starts for a chunk without nonzeros).
        let mut next_cell = e.cell_lo;
        let mut cell_end = 0usize;
        for (p, q) in pos.chunks_exact(4).zip(pay.chunks_exact(4)) {
            let p = u32::from_le_bytes(p.try_into().expect("4 bytes"));
            let payload = u64::from(u32::from_le_bytes(q.try_into().expect("4 bytes")));
            check_position(p, prev, n).map_err(|m| frame_err(c, FrameKind::GapExceptions, frame, m))?;
            prev = Some(p);
            let at = p as usize;
            let fail = |m: String| data_err(&ctx.indptr, chunk, e, p.into(), m);
            if plane(glo, ghi, at) != STREAM_MAX {
                return Err(fail(format!("gap exception at a stored gap of {} (must be 65535)", plane(glo, ghi, at))));
            }
            if payload == 0 || payload >= n_genes {
                return Err(fail(format!("gap exception payload {payload} is outside 1..{n_genes}")));
            }
            while at >= cell_end {
                cell_end = (ctx.indptr.get(next_cell as usize + 1) - e.nnz_lo) as usize;
                next_cell += 1;
            }
            // Indices only grow, so the cell's last index is its largest: check it first, then add.
            let last = u64::from(indices[cell_end - 1] as u32) + payload;
            if last >= n_genes {
                return Err(fail(format!("gap exception makes gene index {last}, not below n_genes = {n_genes}")));
            }
            for x in &mut indices[at..cell_end] {
                *x += payload as i32;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{WriteMode, prefix_sum_u32, prefix_sum_u64};

    /// The obvious serial model: running sums and the count of zero gaps.
    fn model(gaps: &[u32]) -> (Vec<i32>, u32, u64) {
        let mut acc = 0u64;
        let sums = gaps
            .iter()
            .map(|&g| {
                acc += u64::from(g);
                acc as i32
            })
            .collect();
        (sums, gaps.iter().filter(|&&g| g == 0).count() as u32, acc)
    }

    #[test]
    fn block_prefix_sums_match_the_serial_model() {
        // Lengths around the block size, gaps of every byte pattern (zeros inside blocks and in the tail).
        let mut x = 0x9e37_79b9u32;
        for len in 0..70usize {
            for round in 0..20 {
                let gaps: Vec<u32> = (0..len)
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        match (x % 7, round % 3) {
                            (0, _) => 0,
                            (1, _) => 65_535,
                            (_, 0) => x % 3,
                            _ => (x >> 8) % 65_536 + (i as u32 % 2),
                        }
                        .min(65_535)
                    })
                    .collect();
                let lo: Vec<u8> = gaps.iter().map(|&g| g as u8).collect();
                let hi: Vec<u8> = gaps.iter().map(|&g| (g >> 8) as u8).collect();
                let (want, zeros, last) = model(&gaps);
                let mut row = vec![-1i32; len];
                assert_eq!(prefix_sum_u32(&lo, &hi, &mut row, WriteMode::Streaming), (zeros, last), "len {len}");
                assert_eq!(row, want, "len {len}");
                let mut row = vec![-1i32; len];
                assert_eq!(prefix_sum_u64(&lo, &hi, &mut row), (zeros, last), "len {len}");
                assert_eq!(row, want, "len {len}");
            }
        }
    }

    #[test]
    fn the_longest_32_bit_cell_does_not_wrap() {
        let n = super::MAX_U32_SUM_LEN;
        let (lo, hi) = (vec![0xffu8; n], vec![0xffu8; n]);
        let mut row = vec![0i32; n];
        let (zeros, last) = prefix_sum_u32(&lo, &hi, &mut row, WriteMode::Streaming);
        assert_eq!((zeros, last), (0, 65_535 * n as u64));
        assert_eq!(last, u64::from(u32::MAX));
    }
}
