use crate::chunk::entry_offset::{CELL_HI, CELL_LO, NNZ_HI, NNZ_LO};
use crate::chunk::{ChunkEntry, FrameKind, FrameRef};
use crate::error::{Field, FormatError};
use crate::header::{HEADER_LEN, TileHeader, Version, header_offset as off};

/// Rounds `x` up to the next multiple of 8.
pub fn align8(x: u64) -> u64 {
    x.div_ceil(8) * 8
}

/// CRC-32 (IEEE, as zlib computes it) of `blob[64..]`, the bytes a tile header's `crc32` covers.
pub fn compute_crc(blob: &[u8]) -> u32 {
    crc32fast::hash(blob.get(HEADER_LEN..).unwrap_or(&[]))
}

/// Checks the header's CRC-32 against bytes `[64, len)` of `blob`.
pub fn verify_crc(blob: &[u8], header: &TileHeader) -> Result<(), FormatError> {
    let computed = compute_crc(blob);
    if computed != header.crc32 {
        return Err(FormatError::CrcMismatch { stored: header.crc32, computed, end: blob.len() as u64 });
    }
    Ok(())
}

/// A read-only view of a tile's indptr (`n_cells + 1` little-endian int64 values, stored unaligned).
#[derive(Debug, Clone, Copy)]
pub struct IndptrView<'a> {
    bytes: &'a [u8],
}

impl<'a> IndptrView<'a> {
    /// Entries in the indptr (`n_cells + 1`).
    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    /// Whether the view is empty (never the case for a parsed tile, which has at least `indptr[0]`).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Entry `i`, as stored (an `int64` reinterpreted as `u64`; validated tiles hold values in `0..=nnz`).
    ///
    /// # Panics
    /// If `i >= self.len()`.
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
    }

    /// Copies entries `lo..=hi` into `out` as i64 (replacing its contents), reusing its allocation.
    pub fn copy_range_into(&self, lo: usize, hi: usize, out: &mut Vec<i64>) {
        out.clear();
        out.extend(
            self.bytes[lo * 8..(hi + 1) * 8]
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))),
        );
    }

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// The validated structure of a tile: its header and chunk table, checked against each other, against the
/// indptr and against the size of the blob.
///
/// After [`TileLayout::parse`] succeeds, every frame range lies inside the blob (so slicing with
/// [`FrameRef::range`] cannot panic), the chunks tile `0..n_cells` and `0..nnz` contiguously, and the indptr is
/// non-decreasing from 0 to `nnz` and agrees with every chunk boundary. Nothing has been decompressed, and
/// nothing has been allocated beyond the chunk table (whose size is bounded by the blob).
#[derive(Debug, Clone, Default)]
pub struct TileLayout {
    header: Option<TileHeader>,
    chunks: Vec<ChunkEntry>,
}

impl TileLayout {
    /// Parses and validates `blob` (the whole tile).
    pub fn parse(blob: &[u8]) -> Result<Self, FormatError> {
        let mut layout = TileLayout::default();
        layout.parse_from(blob)?;
        Ok(layout)
    }

    /// Like [`TileLayout::parse`], reusing this layout's chunk-table allocation.
    pub fn parse_from(&mut self, blob: &[u8]) -> Result<(), FormatError> {
        self.header = None;
        self.chunks.clear();
        let header = TileHeader::parse(blob)?;
        let indptr_end = check_regions(&header, blob.len() as u64)?;
        let indptr = IndptrView { bytes: &blob[header.indptr_off as usize..indptr_end as usize] };
        validate_indptr(&indptr, &header)?;

        let entry_size = header.version.entry_size();
        self.chunks.reserve(header.n_chunks as usize);
        let (mut cell, mut nnz) = (0u64, 0u64);
        for c in 0..header.n_chunks {
            let at = HEADER_LEN + c as usize * entry_size;
            let e = ChunkEntry::parse(&blob[at..at + entry_size], header.version);
            let place = EntryPlace { chunk: c, at: at as u64, data_start: indptr_end, len: blob.len() as u64 };
            check_entry(&e, place, (cell, nnz), &header, &indptr)?;
            (cell, nnz) = (e.cell_hi, e.nnz_hi);
            self.chunks.push(e);
        }
        if cell != header.n_cells || nnz != header.nnz {
            let last = header.n_chunks.saturating_sub(1);
            return Err(FormatError::layout(
                Field::Chunk { chunk: last, name: "cell_hi" },
                (HEADER_LEN + last as usize * entry_size) as u64,
                format!(
                    "the chunks end at cell {cell} and nonzero {nnz}, not at n_cells = {} and nnz = {}",
                    header.n_cells, header.nnz
                ),
            ));
        }
        self.header = Some(header);
        Ok(())
    }

    /// The header. Panics if called on a layout whose last parse failed.
    pub fn header(&self) -> &TileHeader {
        self.header.as_ref().expect("TileLayout used after a failed parse")
    }

    /// The tile version.
    pub fn version(&self) -> Version {
        self.header().version
    }

    /// The validated chunk table.
    pub fn chunks(&self) -> &[ChunkEntry] {
        &self.chunks
    }

    /// The indptr of `blob` (the blob this layout was parsed from).
    pub fn indptr<'a>(&self, blob: &'a [u8]) -> IndptrView<'a> {
        let h = self.header();
        let lo = h.indptr_off as usize;
        IndptrView { bytes: &blob[lo..lo + (h.n_cells as usize + 1) * 8] }
    }

    /// The bytes of a validated frame of `blob`.
    pub fn frame<'a>(&self, blob: &'a [u8], frame: FrameRef) -> &'a [u8] {
        &blob[frame.range()]
    }

    /// The chunk holding local row `row`, by binary search over `cell_hi`.
    pub fn chunk_of_row(&self, row: u64) -> Option<usize> {
        let i = self.chunks.partition_point(|c| c.cell_hi <= row);
        (i < self.chunks.len()).then_some(i)
    }
}

/// Checks that the blob is `total_size` long and that the chunk table and the indptr fit, in that order, before
/// the end; returns where the indptr ends (where frames may start).
fn check_regions(header: &TileHeader, len: u64) -> Result<u64, FormatError> {
    if header.total_size != len {
        return Err(FormatError::SizeMismatch { claimed: header.total_size, actual: len });
    }
    let n_chunks_err = |rule: String| FormatError::layout(Field::Header("n_chunks"), off::N_CHUNKS as u64, rule);
    let table_end = header.chunk_table_end().filter(|&end| end <= len).ok_or_else(|| {
        n_chunks_err(format!(
            "a table of {} entries of {} bytes does not fit in the {len}-byte tile",
            header.n_chunks,
            header.version.entry_size()
        ))
    })?;
    if header.n_cells == 0 && header.n_chunks != 0 {
        return Err(n_chunks_err(format!("a tile with 0 cells has 0 chunks, not {}", header.n_chunks)));
    }
    if header.n_cells > 0 && header.n_chunks == 0 {
        return Err(n_chunks_err(format!("0 chunks cannot cover {} cells", header.n_cells)));
    }
    let indptr_off = header.indptr_off;
    let indptr_err = |rule: String| FormatError::layout(Field::Header("indptr_off"), off::INDPTR_OFF as u64, rule);
    if !indptr_off.is_multiple_of(8) {
        return Err(indptr_err(format!("{indptr_off} is not a multiple of 8")));
    }
    if indptr_off < table_end {
        return Err(indptr_err(format!("{indptr_off} lies before the end of the chunk table at {table_end}")));
    }
    header
        .n_cells
        .checked_add(1)
        .and_then(|n| n.checked_mul(8))
        .and_then(|b| b.checked_add(indptr_off))
        .filter(|&end| end <= len)
        .ok_or_else(|| {
            FormatError::layout(
                Field::Header("n_cells"),
                off::N_CELLS as u64,
                format!(
                    "an indptr of {} + 1 entries at offset {indptr_off} does not fit in the {len}-byte tile",
                    header.n_cells
                ),
            )
        })
}

/// Where a chunk entry is: its index, its offset in the blob, where frames may start and the blob's size.
#[derive(Clone, Copy)]
struct EntryPlace {
    chunk: u32,
    at: u64,
    data_start: u64,
    len: u64,
}

/// Checks one chunk entry: it starts where the previous chunk ended (`(cell, nnz)`), stays inside the tile's
/// cells and nonzeros, agrees with the indptr at both ends, and its frames lie inside the data region.
fn check_entry(
    e: &ChunkEntry,
    place: EntryPlace,
    (cell, nnz): (u64, u64),
    header: &TileHeader,
    indptr: &IndptrView<'_>,
) -> Result<(), FormatError> {
    let err = |name, field_at: u64, rule: String| {
        FormatError::layout(Field::Chunk { chunk: place.chunk, name }, place.at + field_at, rule)
    };
    if e.cell_lo != cell {
        return Err(err("cell_lo", CELL_LO, format!("{} but the previous chunk ends at cell {cell}", e.cell_lo)));
    }
    if e.nnz_lo != nnz {
        return Err(err("nnz_lo", NNZ_LO, format!("{} but the previous chunk ends at nonzero {nnz}", e.nnz_lo)));
    }
    if e.cell_hi < e.cell_lo || e.cell_hi > header.n_cells {
        return Err(err("cell_hi", CELL_HI, format!("{} is outside {}..={}", e.cell_hi, e.cell_lo, header.n_cells)));
    }
    if e.nnz_hi < e.nnz_lo || e.nnz_hi > header.nnz {
        return Err(err("nnz_hi", NNZ_HI, format!("{} is outside {}..={}", e.nnz_hi, e.nnz_lo, header.nnz)));
    }
    if e.nnz() > u64::from(u32::MAX) {
        let rule = format!("the chunk holds {} nonzeros; a chunk holds fewer than 2^32", e.nnz());
        return Err(err("nnz_hi", NNZ_HI, rule));
    }
    for (cell, nnz, name, field_at) in
        [(e.cell_lo, e.nnz_lo, "nnz_lo", NNZ_LO), (e.cell_hi, e.nnz_hi, "nnz_hi", NNZ_HI)]
    {
        let stored = indptr.get(cell as usize);
        if stored != nnz {
            return Err(err(name, field_at, format!("{nnz} but indptr[{cell}] is {stored}")));
        }
    }
    for kind in [FrameKind::Gaps, FrameKind::Vals, FrameKind::ValueExceptions, FrameKind::GapExceptions] {
        let frame = e.frame(kind);
        let required = matches!(kind, FrameKind::Gaps | FrameKind::Vals);
        if required || frame.is_present() {
            let at = place.at + ChunkEntry::frame_field_offset(kind);
            check_frame(frame, kind, place.chunk, at, place.data_start, place.len)?;
        }
    }
    Ok(())
}

fn validate_indptr(indptr: &IndptrView<'_>, header: &TileHeader) -> Result<(), FormatError> {
    let at = |i: usize| header.indptr_off + 8 * i as u64;
    let first = indptr.get(0);
    if first != 0 {
        return Err(FormatError::layout(Field::Indptr(0), at(0), format!("is {} but must be 0", first as i64)));
    }
    let mut prev = 0u64;
    for (i, chunk) in indptr.bytes().chunks_exact(8).enumerate().skip(1) {
        let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        // Compared as u64, a negative int64 is a huge value and so fails the `<= nnz` test below.
        if v < prev {
            return Err(FormatError::layout(
                Field::Indptr(i as u64),
                at(i),
                format!("{} is below indptr[{}] = {prev}: the indptr must not decrease", v as i64, i - 1),
            ));
        }
        if v > header.nnz {
            return Err(FormatError::layout(
                Field::Indptr(i as u64),
                at(i),
                format!("{} exceeds nnz = {}", v as i64, header.nnz),
            ));
        }
        prev = v;
    }
    if prev != header.nnz {
        let n = header.n_cells;
        return Err(FormatError::layout(
            Field::Indptr(n),
            at(n as usize),
            format!("is {prev} but must equal nnz = {}", header.nnz),
        ));
    }
    Ok(())
}

fn check_frame(
    frame: FrameRef,
    kind: FrameKind,
    chunk: u32,
    at: u64,
    data_start: u64,
    len: u64,
) -> Result<(), FormatError> {
    let name = match kind {
        FrameKind::Gaps => "gaps_off",
        FrameKind::Vals => "vals_off",
        FrameKind::ValueExceptions => "vexc_off",
        FrameKind::GapExceptions => "gexc_off",
    };
    let err = |rule: String| Err(FormatError::layout(Field::Chunk { chunk, name }, at, rule));
    if frame.len == 0 {
        return err(format!("the {kind} frame is empty; every chunk has a gaps and a vals frame"));
    }
    if !frame.offset.is_multiple_of(8) {
        return err(format!("the {kind} frame at {} does not start on an 8-byte boundary", frame.offset));
    }
    if frame.offset < data_start {
        return err(format!(
            "the {kind} frame at {} starts before the end of the indptr at {data_start}",
            frame.offset
        ));
    }
    match frame.offset.checked_add(frame.len) {
        Some(end) if end <= len => Ok(()),
        _ => err(format!(
            "the {kind} frame at {} of {} bytes runs past the end of the {len}-byte tile",
            frame.offset, frame.len
        )),
    }
}
