//! Tile decoding: whole tiles (in parallel across chunks) or selected rows, into fresh or reused buffers.

use std::sync::Arc;

use dct_format::{ChunkEntry, IndptrView, TileBytes, TileHeader, TileLayout, Version, verify_crc};

use crate::buffers::resize_for_overwrite;
use crate::chunk::Ctx;
use crate::claims::ClaimCheck;
use crate::csr_chunk::decode_chunk;
use crate::error::DecodeError;
use crate::handoff::Helpers;
use crate::kernels::WriteMode;
use crate::planes::{TilePlanes, decompress_chunk};
use crate::rows::SparseRows;
use crate::split::{Split, Threads};
use crate::values::CountValue;
use crate::worker::Worker;

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

impl<V> SparseRows for DecodedTile<V> {
    type Value = V;

    fn csr(&self) -> (&[i64], &[i32], &[V]) {
        (&self.indptr, &self.indices, &self.values)
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

/// Decodes tiles of versions 1 and 2. Reuse one decoder: its zstd contexts, scratch buffers and thread pool are
/// kept, so decoding into a reused [`DecodedTile`] allocates nothing once buffers have grown to size.
///
/// ```
/// use dct_codec::{CsrMatrix, DecodeOptions, DecodedTile, Decoder, EncodeOptions, SparseRows, encode_tile};
/// let m = CsrMatrix { n_rows: 2, n_cols: 5, indptr: &[0u32, 2, 3], indices: &[4u32, 1, 0], values: &[7u32, 1, 3] };
/// let tile = encode_tile(&m, &EncodeOptions::default())?;
/// let mut decoder = Decoder::new(DecodeOptions::default());
/// let mut out = DecodedTile::<f32>::default();
/// decoder.decode_into(&tile, &mut out)?;
/// assert_eq!(out.row(0), (&[1, 4][..], &[1.0, 7.0][..])); // unsorted input comes back sorted
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Decoder {
    /// The layout of a tile handed over as plain bytes, parsed here (its chunk table's allocation reused).
    layout: TileLayout,
    engine: Engine,
}

/// Everything of a decoder but the parsed layout, so a decode can borrow a layout from the caller's
/// [`dct_format::ParsedTile`] or from the decoder while it uses the rest.
struct Engine {
    opts: DecodeOptions,
    workers: Vec<Worker>,
    threads: Threads,
    claims: ClaimCheck,
    plan: Vec<(u32, u32)>,
    needed: Vec<bool>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder").field("opts", &self.engine.opts).finish_non_exhaustive()
    }
}

/// The bytes of `tile` and their layout: the one it carries, or one parsed into `scratch`; the CRC is checked
/// too when `verify_crc`.
fn layout_of<'a, T: TileBytes + ?Sized>(
    scratch: &'a mut TileLayout,
    verify: bool,
    tile: &'a T,
) -> Result<(&'a [u8], &'a TileLayout), DecodeError> {
    let blob = tile.tile_bytes();
    let layout = match tile.parsed_layout() {
        Some(layout) => layout,
        None => {
            scratch.parse_from(blob)?;
            &*scratch
        }
    };
    if verify {
        verify_crc(blob, layout.header())?;
    }
    Ok((blob, layout))
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
        let engine = Engine {
            opts,
            workers: (0..opts.threads).map(|_| Worker::new()).collect(),
            threads,
            claims: ClaimCheck::default(),
            plan: Vec::new(),
            needed: Vec::new(),
        };
        Decoder { layout: TileLayout::default(), engine }
    }

    /// The options this decoder was built with (and the CRC setting last given to
    /// [`set_verify_crc`](Self::set_verify_crc)).
    pub fn options(&self) -> DecodeOptions {
        self.engine.opts
    }

    /// Turns the CRC check of the following decodes on or off: for a caller that checked a tile's CRC already
    /// (with [`dct_format::verify_crc`]) and keeps one decoder for several purposes.
    pub fn set_verify_crc(&mut self, verify_crc: bool) {
        self.engine.opts.verify_crc = verify_crc;
    }

    /// Decodes a whole tile into fresh buffers.
    ///
    /// Every decode takes the tile as bytes (`&[u8]`, `Vec<u8>`, `bytes::Bytes`...), which it parses, or as a
    /// [`dct_format::ParsedTile`], whose layout it uses as it is.
    pub fn decode<V: CountValue>(&mut self, tile: &(impl TileBytes + ?Sized)) -> Result<DecodedTile<V>, DecodeError> {
        let mut out = DecodedTile::default();
        self.decode_into(tile, &mut out)?;
        Ok(out)
    }

    /// Decodes a whole tile into `out`, reusing its allocations.
    ///
    /// Order of checks: structure ([`TileLayout::parse`], unless the tile comes parsed), CRC if enabled, every
    /// frame header against the chunk table (exactly one frame, declared content size `2n` or `8k` with `k <= n`,
    /// no more than the compressed bytes can produce); if the memory those claims imply exceeds 1 MiB + 64 x the
    /// blob size, every frame is first streamed through a fixed 128 KiB window to prove it; then the chunks are
    /// decoded (in parallel) with every data rule checked.
    pub fn decode_into<V: CountValue>(
        &mut self,
        tile: &(impl TileBytes + ?Sized),
        out: &mut DecodedTile<V>,
    ) -> Result<(), DecodeError> {
        let (blob, layout) = layout_of(&mut self.layout, self.engine.opts.verify_crc, tile)?;
        let engine = &mut self.engine;
        let (header, indptr) = engine.begin_whole(blob, layout, 4 + size_of::<V>() as u64, &mut out.indptr)?;
        out.version = header.version;
        out.n_genes = header.n_genes;
        resize_for_overwrite(&mut out.indices, header.nnz as usize, 0);
        resize_for_overwrite(&mut out.values, header.nnz as usize, V::default());
        engine.decode_chunks(&Ctx::whole::<V>(blob, header, indptr), layout, &mut out.indices, &mut out.values)
    }

    /// Decodes a whole tile into the caller's buffers (shared or pinned memory, say): the row offsets into
    /// `indptr` (resized to `n_cells + 1`), the gene indices and counts into the first `nnz` elements of
    /// `indices` and `values`, which must hold at least that many (a shorter buffer is
    /// [`DecodeError::BufferTooSmall`], found before anything is decompressed). Elements past `nnz` are left as
    /// they were. Returns the header. The checks are those of [`decode_into`](Self::decode_into).
    pub fn decode_to<V: CountValue>(
        &mut self,
        tile: &(impl TileBytes + ?Sized),
        indptr: &mut Vec<i64>,
        indices: &mut [i32],
        values: &mut [V],
    ) -> Result<TileHeader, DecodeError> {
        let (blob, layout) = layout_of(&mut self.layout, self.engine.opts.verify_crc, tile)?;
        let engine = &mut self.engine;
        let (header, view) = engine.begin_whole(blob, layout, 4 + size_of::<V>() as u64, indptr)?;
        let nnz = header.nnz;
        let short = [(indices.len() as u64, "indices"), (values.len() as u64, "values")];
        if let Some(&(len, buffer)) = short.iter().find(|(len, _)| *len < nnz) {
            return Err(DecodeError::BufferTooSmall { buffer, len, needed: nnz });
        }
        let nnz = nnz as usize;
        let ctx = Ctx::whole::<V>(blob, header, view);
        engine.decode_chunks(&ctx, layout, &mut indices[..nnz], &mut values[..nnz])?;
        Ok(header)
    }

    /// Decompresses a tile into `out` for row-by-row decoding with [`TilePlanes::row_into`] (chunks in parallel,
    /// like [`decode_into`](Self::decode_into)). Checked here: the structure (unless the tile comes parsed), the
    /// CRC (if on), every frame's size and every exception; each row's own rules are checked when it is decoded.
    /// Reusing `out` allocates nothing once its buffers have grown to size.
    pub fn decode_planes_into(
        &mut self,
        tile: &(impl TileBytes + ?Sized),
        out: &mut TilePlanes,
    ) -> Result<(), DecodeError> {
        let (blob, layout) = layout_of(&mut self.layout, self.engine.opts.verify_crc, tile)?;
        self.engine.planes_into(blob, layout, out)
    }

    /// Decodes only the rows `rows` (local indices, any order, repeats allowed) into `out`, in request order,
    /// decompressing only the chunks that hold them.
    pub fn decode_rows_into<V: CountValue>(
        &mut self,
        tile: &(impl TileBytes + ?Sized),
        rows: &[u64],
        out: &mut DecodedTile<V>,
    ) -> Result<(), DecodeError> {
        let (blob, layout) = layout_of(&mut self.layout, self.engine.opts.verify_crc, tile)?;
        self.engine.rows_into(blob, layout, rows, out)
    }
}

impl Engine {
    /// The common start of a whole-tile decode: check the claims of every chunk for an output of `bytes_per_nnz`
    /// bytes per nonzero, copy the indptr into `indptr_out`.
    fn begin_whole<'a>(
        &mut self,
        blob: &'a [u8],
        layout: &TileLayout,
        bytes_per_nnz: u64,
        indptr_out: &mut Vec<i64>,
    ) -> Result<(TileHeader, IndptrView<'a>), DecodeError> {
        let header = *layout.header();
        self.needed.clear();
        self.needed.resize(layout.chunks().len(), true);
        let out_bytes = header.nnz.saturating_mul(bytes_per_nnz);
        self.claims.check(blob, layout, &self.needed, out_bytes, self.opts.threads)?;
        let indptr = layout.indptr(blob);
        indptr.copy_range_into(0, header.n_cells as usize, indptr_out);
        Ok((header, indptr))
    }

    /// Decodes every chunk of the tile into `indices` and `values` (exactly `nnz` long).
    fn decode_chunks<V: CountValue>(
        &mut self,
        ctx: &Ctx<'_>,
        layout: &TileLayout,
        indices: &mut [i32],
        values: &mut [V],
    ) -> Result<(), DecodeError> {
        let n_chunks = layout.chunks().len();
        if n_chunks == 0 {
            return Ok(());
        }
        let workers = &mut self.workers;
        self.threads.run(n_chunks, |par| {
            let job = |w: &mut Worker, ctx: &Ctx<'_>, c, e: &ChunkEntry, i: &mut [i32], v: &mut [V]| {
                decode_chunk(w, ctx, c, e, i, v)
            };
            let split = Split { ctx, scale: 1, job: &job, par };
            split.run(workers, 0, layout.chunks(), 0, indices, values)
        })
    }

    fn planes_into(&mut self, blob: &[u8], layout: &TileLayout, out: &mut TilePlanes) -> Result<(), DecodeError> {
        let (header, indptr) = self.begin_whole(blob, layout, 4, &mut out.indptr)?;
        let (n_chunks, nnz) = (layout.chunks().len(), header.nnz);
        out.version = header.version;
        out.n_genes = header.n_genes;
        out.chunk_cell_lo.clear();
        out.chunk_nnz_lo.clear();
        out.chunk_frames.clear();
        for e in layout.chunks() {
            out.chunk_cell_lo.push(e.cell_lo);
            out.chunk_nnz_lo.push(e.nnz_lo);
            out.chunk_frames.push((e.gaps.offset, e.vals.offset));
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
        let workers = &mut self.workers;
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

    fn rows_into<V: CountValue>(
        &mut self,
        blob: &[u8],
        layout: &TileLayout,
        rows: &[u64],
        out: &mut DecodedTile<V>,
    ) -> Result<(), DecodeError> {
        let header = *layout.header();
        let indptr = layout.indptr(blob);
        out.version = header.version;
        out.n_genes = header.n_genes;
        out.indptr.clear();
        out.indptr.push(0);
        self.plan.clear();
        self.needed.clear();
        self.needed.resize(layout.chunks().len(), false);
        let mut total = 0u64;
        for (j, &row) in rows.iter().enumerate() {
            if row >= header.n_cells {
                return Err(DecodeError::RowOutOfRange { row, n_cells: header.n_cells });
            }
            total += indptr.get(row as usize + 1) - indptr.get(row as usize);
            out.indptr.push(total as i64);
            let chunk = layout.chunk_of_row(row).expect("validated chunks cover every row");
            self.needed[chunk] = true;
            self.plan.push((chunk as u32, j as u32));
        }
        let out_bytes = total.saturating_mul(4 + size_of::<V>() as u64);
        self.claims.check(blob, layout, &self.needed, out_bytes, self.opts.threads)?;
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
            let e = layout.chunks()[c];
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
}
