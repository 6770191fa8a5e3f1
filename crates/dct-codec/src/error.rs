use dct_format::{FormatError, FrameKind};

/// Why a tile could not be decoded. Every variant says where: the chunk, the frame and its byte offset, or the
/// cell and nonzero concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The tile's structure (header, chunk table, indptr, frame bounds, CRC) is invalid.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A compressed frame is malformed, or does not decompress to the size the chunk table requires.
    #[error("chunk {chunk} {kind} frame at offset {offset}: {problem}")]
    Frame {
        /// Chunk number.
        chunk: u32,
        /// Which frame.
        kind: FrameKind,
        /// Byte offset of the frame in the tile.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// The decompressed data breaks a rule of the data model (gene range, repeated gene, zero count, exceptions).
    #[error("chunk {chunk}, cell {cell}, nonzero {nonzero} of the tile ({frame} frame at offset {offset}): {problem}")]
    Data {
        /// Chunk number.
        chunk: u32,
        /// The frame whose decompressed content breaks the rule.
        frame: FrameKind,
        /// Byte offset of that frame in the tile.
        offset: u64,
        /// Local row (cell) in the tile.
        cell: u64,
        /// Index of the nonzero in the tile (`indptr` units).
        nonzero: u64,
        /// What is wrong.
        problem: String,
    },
    /// Decoding would need more memory than this platform can address.
    #[error("decoding needs {bytes} bytes, more than this platform can address")]
    TooLarge {
        /// Bytes needed.
        bytes: u64,
    },
    /// A caller's output buffer is shorter than the tile's nonzeros.
    #[error("the {buffer} buffer holds {len} elements but the tile has {needed} nonzeros; pass one at least that long")]
    BufferTooSmall {
        /// Which buffer (`indices` or `values`).
        buffer: &'static str,
        /// Its length.
        len: u64,
        /// Elements needed.
        needed: u64,
    },
    /// A requested row is not in the tile.
    #[error("row {row} requested from a tile of {n_cells} cells")]
    RowOutOfRange {
        /// The row asked for.
        row: u64,
        /// Cells in the tile.
        n_cells: u64,
    },
}

/// Why a matrix could not be encoded as a tile. Data problems name the row (cell) and column (gene).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The CSR arrays are inconsistent with each other or with the declared shape.
    #[error("malformed CSR input: {0}")]
    Shape(String),
    /// A column index is negative or not below the number of genes.
    #[error("row {row}: column index {col} is outside 0..{n_genes}")]
    ColumnOutOfRange {
        /// Row of the entry.
        row: u64,
        /// The column index, as given.
        col: i128,
        /// Number of genes (columns).
        n_genes: u64,
    },
    /// A value is not a count: negative, not an integer, not finite, or above 2^31 - 1.
    #[error(
        "row {row}, column {col}: value {value} is not a count ({reason}); deltacells stores raw integer counts in 0..=2147483647"
    )]
    NotACount {
        /// Row of the entry.
        row: u64,
        /// Column of the entry.
        col: u64,
        /// The value, formatted.
        value: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// More exceptions (counts or gaps above 65535) than the exception policy allows.
    #[error(
        "the tile needs {count} {kind} exceptions (limit {limit}): the data does not look like raw counts; \
             raise the limit with the exception policy if it really is"
    )]
    TooManyExceptions {
        /// `value` or `gap`.
        kind: &'static str,
        /// Exceptions needed.
        count: u64,
        /// The policy's limit.
        limit: u64,
    },
    /// The matrix cannot be represented in the requested format version.
    #[error("cannot encode as version {version}: {reason}")]
    Unrepresentable {
        /// Requested version.
        version: u32,
        /// Why not.
        reason: String,
    },
    /// zstd failed to compress (should not happen with valid parameters).
    #[error("zstd compression failed: {0}")]
    Zstd(String),
}
