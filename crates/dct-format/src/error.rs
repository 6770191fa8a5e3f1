use std::fmt;

/// A structural rule of the tile format that a blob breaks.
///
/// Every variant names the field (or frame) concerned and the byte offset in the blob where it is stored, so
/// that a message can be traced back to the bytes. Nothing here has been decompressed: decode-time problems
/// (frame contents, gene ranges, exceptions) are reported by the codec crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The blob is shorter than the 64-byte header.
    #[error("tile is {len} bytes, shorter than the 64-byte header: truncated or not a tile")]
    TooShort {
        /// Length of the blob.
        len: u64,
    },
    /// The first 8 bytes are not `DELTACEL`.
    #[error("bad magic {found} at offset 0 (expected \"DELTACEL\"): not a deltacells tile")]
    BadMagic {
        /// The bytes found, escaped for display.
        found: String,
    },
    /// The header version is neither 1 nor 2.
    #[error("tile version {version} at offset 8 is not supported (this reader knows versions 1 and 2)")]
    UnsupportedVersion {
        /// The version found.
        version: u32,
    },
    /// A header field that must be zero (flags, reserved) is not.
    #[error("header field `{field}` at offset {offset} is {value:#x}; it must be 0 (unknown feature or corruption)")]
    NonZeroField {
        /// `flags` or `reserved`.
        field: &'static str,
        /// Byte offset of the field.
        offset: u64,
        /// The value found.
        value: u32,
    },
    /// `total_size` disagrees with the length of the blob.
    #[error("header total_size (offset 48) is {claimed} but the tile has {actual} bytes: truncated, padded or corrupt")]
    SizeMismatch {
        /// `total_size` from the header.
        claimed: u64,
        /// Length of the blob.
        actual: u64,
    },
    /// `n_genes` is outside the range allowed by the tile version.
    #[error("header n_genes (offset 32) is {n_genes}; version {version} allows 1..={max}")]
    GenesOutOfRange {
        /// `n_genes` from the header.
        n_genes: u32,
        /// Tile version.
        version: u32,
        /// Largest allowed value.
        max: u64,
    },
    /// The stored CRC-32 does not match the bytes it covers.
    #[error("CRC-32 mismatch: header (offset 56) says {stored:#010x} but bytes [64, {end}) give {computed:#010x}")]
    CrcMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed over the blob.
        computed: u32,
        /// End of the covered range.
        end: u64,
    },
    /// A header field, a chunk entry or the indptr breaks a rule of the layout.
    #[error("{field} at offset {offset}: {rule}")]
    Layout {
        /// The field, e.g. `indptr_off`, `chunk 2 cell_hi`, `indptr[17]`.
        field: Field,
        /// Byte offset of the field in the blob.
        offset: u64,
        /// The rule broken, with the values involved.
        rule: String,
    },
}

/// Names a field of a tile for an error message: a header field, an indptr entry or a chunk-table field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A header field, by name.
    Header(&'static str),
    /// Entry `i` of the indptr.
    Indptr(u64),
    /// A field of chunk entry `chunk`, by name.
    Chunk {
        /// Chunk number.
        chunk: u32,
        /// Field name, e.g. `cell_hi` or `gaps_off`.
        name: &'static str,
    },
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Header(name) => write!(f, "header {name}"),
            Field::Indptr(i) => write!(f, "indptr[{i}]"),
            Field::Chunk { chunk, name } => write!(f, "chunk {chunk} {name}"),
        }
    }
}

impl FormatError {
    pub(crate) fn layout(field: Field, offset: u64, rule: impl Into<String>) -> Self {
        FormatError::Layout { field, offset, rule: rule.into() }
    }
}
