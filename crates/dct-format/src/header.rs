use crate::error::FormatError;

/// The 8 magic bytes at the start of every tile.
pub const MAGIC: &[u8; 8] = b"DELTACEL";
/// Size of the tile header in bytes.
pub const HEADER_LEN: usize = 64;

/// Byte offsets of the header's fields (FORMAT-v2.md, "Tile header"), for parsing, writing and error locations.
pub mod header_offset {
    /// `magic`, 8 bytes.
    pub const MAGIC: usize = 0;
    /// `version`, u32.
    pub const VERSION: usize = 8;
    /// `flags`, u32 (must be 0).
    pub const FLAGS: usize = 12;
    /// `n_cells`, u64.
    pub const N_CELLS: usize = 16;
    /// `nnz`, u64.
    pub const NNZ: usize = 24;
    /// `n_genes`, u32.
    pub const N_GENES: usize = 32;
    /// `n_chunks`, u32.
    pub const N_CHUNKS: usize = 36;
    /// `indptr_off`, u64.
    pub const INDPTR_OFF: usize = 40;
    /// `total_size`, u64.
    pub const TOTAL_SIZE: usize = 48;
    /// `crc32`, u32.
    pub const CRC32: usize = 56;
    /// `reserved`, u32 (must be 0).
    pub const RESERVED: usize = 60;
}
use header_offset as off;

/// Tile format version. Version 1 has 64-byte chunk entries and no exceptions; version 2 adds exception frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// Version 1: written by the original implementation; at most 65536 genes, counts at most 65535.
    V1,
    /// Version 2: what this project writes.
    V2,
}

impl Version {
    /// The version number stored in headers and manifests.
    pub fn number(self) -> u32 {
        match self {
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }

    /// The version for a stored number, if known.
    pub fn from_number(n: u32) -> Option<Self> {
        match n {
            1 => Some(Version::V1),
            2 => Some(Version::V2),
            _ => None,
        }
    }

    /// Size of one chunk-table entry in bytes.
    pub fn entry_size(self) -> usize {
        match self {
            Version::V1 => 64,
            Version::V2 => 96,
        }
    }

    /// Largest `n_genes` a tile of this version may declare.
    pub fn max_genes(self) -> u64 {
        match self {
            Version::V1 => 1 << 16,
            Version::V2 => 1 << 31,
        }
    }

    /// Whether chunks of this version may carry exception frames.
    pub fn has_exceptions(self) -> bool {
        self == Version::V2
    }
}

/// The 64-byte tile header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileHeader {
    /// Format version (offset 8).
    pub version: Version,
    /// Cells (rows) in the tile (offset 16).
    pub n_cells: u64,
    /// Stored nonzeros (offset 24).
    pub nnz: u64,
    /// Genes (columns), `1 ..= version.max_genes()` (offset 32).
    pub n_genes: u32,
    /// Entries in the chunk table (offset 36).
    pub n_chunks: u32,
    /// Offset of the indptr, a multiple of 8 at or after the chunk table (offset 40).
    pub indptr_off: u64,
    /// Size of the whole blob (offset 48).
    pub total_size: u64,
    /// CRC-32 (IEEE) of bytes `[64, total_size)` (offset 56).
    pub crc32: u32,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl TileHeader {
    /// Parses the header at the start of `blob` and checks the rules that need only the header: magic, known
    /// version, `flags == 0`, `reserved == 0` and the `n_genes` range. `total_size` is not compared with the blob
    /// here (see [`crate::TileLayout::parse`]), so a header can be read from the first 64 bytes of an object.
    pub fn parse(blob: &[u8]) -> Result<Self, FormatError> {
        if blob.len() < HEADER_LEN {
            return Err(FormatError::TooShort { len: blob.len() as u64 });
        }
        let magic = &blob[off::MAGIC..off::MAGIC + MAGIC.len()];
        if magic != MAGIC {
            return Err(FormatError::BadMagic { found: magic.escape_ascii().to_string() });
        }
        let number = u32_at(blob, off::VERSION);
        let version = Version::from_number(number).ok_or(FormatError::UnsupportedVersion { version: number })?;
        let flags = u32_at(blob, off::FLAGS);
        if flags != 0 {
            return Err(FormatError::NonZeroField { field: "flags", offset: off::FLAGS as u64, value: flags });
        }
        let reserved = u32_at(blob, off::RESERVED);
        if reserved != 0 {
            return Err(FormatError::NonZeroField { field: "reserved", offset: off::RESERVED as u64, value: reserved });
        }
        let n_genes = u32_at(blob, off::N_GENES);
        if n_genes == 0 || u64::from(n_genes) > version.max_genes() {
            return Err(FormatError::GenesOutOfRange { n_genes, version: number, max: version.max_genes() });
        }
        Ok(TileHeader {
            version,
            n_cells: u64_at(blob, off::N_CELLS),
            nnz: u64_at(blob, off::NNZ),
            n_genes,
            n_chunks: u32_at(blob, off::N_CHUNKS),
            indptr_off: u64_at(blob, off::INDPTR_OFF),
            total_size: u64_at(blob, off::TOTAL_SIZE),
            crc32: u32_at(blob, off::CRC32),
        })
    }

    /// Serializes the header (flags and reserved are written as 0).
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
        put(off::MAGIC, MAGIC);
        put(off::VERSION, &self.version.number().to_le_bytes());
        put(off::N_CELLS, &self.n_cells.to_le_bytes());
        put(off::NNZ, &self.nnz.to_le_bytes());
        put(off::N_GENES, &self.n_genes.to_le_bytes());
        put(off::N_CHUNKS, &self.n_chunks.to_le_bytes());
        put(off::INDPTR_OFF, &self.indptr_off.to_le_bytes());
        put(off::TOTAL_SIZE, &self.total_size.to_le_bytes());
        put(off::CRC32, &self.crc32.to_le_bytes());
        b
    }

    /// Offset of the first byte after the chunk table, or `None` if it overflows 64 bits.
    pub fn chunk_table_end(&self) -> Option<u64> {
        u64::from(self.n_chunks).checked_mul(self.version.entry_size() as u64)?.checked_add(HEADER_LEN as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TileHeader {
        TileHeader {
            version: Version::V2,
            n_cells: 3,
            nnz: 7,
            n_genes: 1 << 31,
            n_chunks: 1,
            indptr_off: 160,
            total_size: 300,
            crc32: 0xdead_beef,
        }
    }

    #[test]
    fn round_trips() {
        let h = sample();
        assert_eq!(TileHeader::parse(&h.to_bytes()).unwrap(), h);
    }

    #[test]
    fn rejects_nonzero_reserved_and_flags() {
        let mut b = sample().to_bytes();
        b[60] = 1;
        assert!(matches!(TileHeader::parse(&b), Err(FormatError::NonZeroField { field: "reserved", .. })));
        let mut b = sample().to_bytes();
        b[15] = 0x80;
        assert!(matches!(TileHeader::parse(&b), Err(FormatError::NonZeroField { field: "flags", .. })));
    }

    #[test]
    fn gene_range_depends_on_version() {
        let mut h = sample();
        h.version = Version::V1;
        h.n_genes = 65537;
        assert!(matches!(TileHeader::parse(&h.to_bytes()), Err(FormatError::GenesOutOfRange { .. })));
        h.n_genes = 65536;
        assert!(TileHeader::parse(&h.to_bytes()).is_ok());
        h.version = Version::V2;
        h.n_genes = (1 << 31) + 1;
        assert!(TileHeader::parse(&h.to_bytes()).is_err());
        h.n_genes = 0;
        assert!(TileHeader::parse(&h.to_bytes()).is_err());
    }
}
