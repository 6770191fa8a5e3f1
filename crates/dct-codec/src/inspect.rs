use dct_format::{ChunkEntry, FrameKind, TileHeader, TileLayout};

use crate::error::DecodeError;
use crate::frame::frame_content_size;

/// One chunk of a tile, as [`inspect`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSummary {
    /// The chunk-table entry.
    pub entry: ChunkEntry,
    /// Value exceptions (from the vexc frame's declared size).
    pub value_exceptions: u64,
    /// Gap exceptions (from the gexc frame's declared size).
    pub gap_exceptions: u64,
}

/// What a tile holds, from its header, chunk table and frame headers; nothing is decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileSummary {
    /// The header.
    pub header: TileHeader,
    /// One entry per chunk.
    pub chunks: Vec<ChunkSummary>,
}

/// Validates a tile's structure and reads its chunk table and exception counts.
pub fn inspect(blob: &[u8]) -> Result<TileSummary, DecodeError> {
    let layout = TileLayout::parse(blob)?;
    let mut chunks = Vec::with_capacity(layout.chunks().len());
    for (c, e) in layout.chunks().iter().enumerate() {
        let count = |kind: FrameKind| -> Result<u64, DecodeError> {
            let f = e.frame(kind);
            if !f.is_present() {
                return Ok(0);
            }
            let err = |problem| DecodeError::Frame { chunk: c as u32, kind, offset: f.offset, problem };
            let size = frame_content_size(&blob[f.range()]).map_err(err)?;
            if size % 8 != 0 || size / 8 > e.nnz() {
                return Err(err(format!("declares {size} bytes; needs 8k bytes with k <= n = {}", e.nnz())));
            }
            Ok(size / 8)
        };
        chunks.push(ChunkSummary {
            entry: *e,
            value_exceptions: count(FrameKind::ValueExceptions)?,
            gap_exceptions: count(FrameKind::GapExceptions)?,
        });
    }
    Ok(TileSummary { header: *layout.header(), chunks })
}
