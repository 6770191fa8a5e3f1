use crate::header::Version;

/// Location of one compressed frame inside a tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameRef {
    /// Byte offset of the frame in the blob.
    pub offset: u64,
    /// Length of the frame in bytes; `0` for an absent exception frame (its offset is then ignored).
    pub len: u64,
}

impl FrameRef {
    /// Whether the frame is present (non-zero length).
    pub fn is_present(&self) -> bool {
        self.len != 0
    }

    /// The byte range of the frame. Only meaningful after [`crate::TileLayout::parse`] has validated it.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset as usize..(self.offset + self.len) as usize
    }
}

/// The four kinds of frame a chunk can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Gene gaps, byte-planar uint16.
    Gaps,
    /// Counts, byte-planar uint16.
    Vals,
    /// Value exceptions (version 2).
    ValueExceptions,
    /// Gap exceptions (version 2).
    GapExceptions,
}

impl FrameKind {
    /// The name used in the spec (`gaps`, `vals`, `vexc`, `gexc`).
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Gaps => "gaps",
            FrameKind::Vals => "vals",
            FrameKind::ValueExceptions => "vexc",
            FrameKind::GapExceptions => "gexc",
        }
    }
}

impl std::fmt::Display for FrameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Byte offsets of a chunk entry's fields from the start of the entry (FORMAT-v2.md, "Chunk table"); each field
/// is a u64, and version 1 entries end after `vals_len`.
pub mod entry_offset {
    /// `cell_lo`.
    pub const CELL_LO: u64 = 0;
    /// `cell_hi`.
    pub const CELL_HI: u64 = 8;
    /// `nnz_lo`.
    pub const NNZ_LO: u64 = 16;
    /// `nnz_hi`.
    pub const NNZ_HI: u64 = 24;
    /// `gaps_off` (then `gaps_len`).
    pub const GAPS: u64 = 32;
    /// `vals_off` (then `vals_len`).
    pub const VALS: u64 = 48;
    /// `vexc_off` (then `vexc_len`), version 2.
    pub const VEXC: u64 = 64;
    /// `gexc_off` (then `gexc_len`), version 2.
    pub const GEXC: u64 = 80;
}

/// One entry of the chunk table: a run of cells and their nonzeros, and where their frames are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkEntry {
    /// First cell of the chunk.
    pub cell_lo: u64,
    /// One past the last cell.
    pub cell_hi: u64,
    /// First nonzero of the chunk (`indptr[cell_lo]`).
    pub nnz_lo: u64,
    /// One past the last nonzero (`indptr[cell_hi]`).
    pub nnz_hi: u64,
    /// The gaps frame.
    pub gaps: FrameRef,
    /// The vals frame.
    pub vals: FrameRef,
    /// The value-exception frame (absent in version 1 and in most chunks).
    pub vexc: FrameRef,
    /// The gap-exception frame (absent in version 1 and in most chunks).
    pub gexc: FrameRef,
}

impl ChunkEntry {
    /// Nonzeros in the chunk. Only meaningful once validated (`nnz_lo <= nnz_hi`).
    pub fn nnz(&self) -> u64 {
        self.nnz_hi - self.nnz_lo
    }

    /// Cells in the chunk. Only meaningful once validated.
    pub fn n_cells(&self) -> u64 {
        self.cell_hi - self.cell_lo
    }

    /// Offset of the frame of the given kind's `*_off` field from the start of the entry.
    pub fn frame_field_offset(kind: FrameKind) -> u64 {
        match kind {
            FrameKind::Gaps => entry_offset::GAPS,
            FrameKind::Vals => entry_offset::VALS,
            FrameKind::ValueExceptions => entry_offset::VEXC,
            FrameKind::GapExceptions => entry_offset::GEXC,
        }
    }

    /// The frame of the given kind.
    pub fn frame(&self, kind: FrameKind) -> FrameRef {
        match kind {
            FrameKind::Gaps => self.gaps,
            FrameKind::Vals => self.vals,
            FrameKind::ValueExceptions => self.vexc,
            FrameKind::GapExceptions => self.gexc,
        }
    }

    /// Parses an entry of `version.entry_size()` bytes.
    ///
    /// # Panics
    /// If `bytes` is shorter than the entry size (callers slice the validated chunk table).
    pub fn parse(bytes: &[u8], version: Version) -> Self {
        let f = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let mut e = ChunkEntry {
            cell_lo: f(0),
            cell_hi: f(1),
            nnz_lo: f(2),
            nnz_hi: f(3),
            gaps: FrameRef { offset: f(4), len: f(5) },
            vals: FrameRef { offset: f(6), len: f(7) },
            ..Default::default()
        };
        if version.has_exceptions() {
            e.vexc = FrameRef { offset: f(8), len: f(9) };
            e.gexc = FrameRef { offset: f(10), len: f(11) };
        }
        e
    }

    /// Serializes the entry into `out` (exactly `version.entry_size()` bytes). Absent exception frames are
    /// written with offset 0; version 1 has no room for exception frames.
    pub fn write(&self, out: &mut [u8], version: Version) {
        let absent = |r: FrameRef| if r.is_present() { r } else { FrameRef::default() };
        let (v, g) = (absent(self.vexc), absent(self.gexc));
        let fields = [
            self.cell_lo,
            self.cell_hi,
            self.nnz_lo,
            self.nnz_hi,
            self.gaps.offset,
            self.gaps.len,
            self.vals.offset,
            self.vals.len,
            v.offset,
            v.len,
            g.offset,
            g.len,
        ];
        for (i, x) in fields.iter().take(version.entry_size() / 8).enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_both_versions() {
        let e = ChunkEntry {
            cell_lo: 1,
            cell_hi: 2,
            nnz_lo: 3,
            nnz_hi: 4,
            gaps: FrameRef { offset: 8, len: 9 },
            vals: FrameRef { offset: 16, len: 11 },
            vexc: FrameRef { offset: 32, len: 12 },
            gexc: FrameRef { offset: 48, len: 13 },
        };
        let mut b = [0u8; 96];
        e.write(&mut b, Version::V2);
        assert_eq!(ChunkEntry::parse(&b, Version::V2), e);
        let mut b = [0u8; 64];
        e.write(&mut b, Version::V1);
        let v1 = ChunkEntry { vexc: FrameRef::default(), gexc: FrameRef::default(), ..e };
        assert_eq!(ChunkEntry::parse(&b, Version::V1), v1);
    }

    #[test]
    fn absent_frame_offsets_are_written_as_zero() {
        let e = ChunkEntry { vexc: FrameRef { offset: 12345, len: 0 }, ..Default::default() };
        let mut b = [0xffu8; 96];
        e.write(&mut b, Version::V2);
        assert_eq!(ChunkEntry::parse(&b, Version::V2).vexc, FrameRef::default());
    }
}
