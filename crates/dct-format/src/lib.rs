//! The deltacells tile format, without I/O and without compression.
//!
//! A tile is one self-contained blob holding a block of consecutive cells of a count matrix in CSR form:
//! a 64-byte [`TileHeader`], a table of [`ChunkEntry`]s, an uncompressed `int64` indptr and, per chunk, zstd
//! frames for the gene gaps, the counts and (version 2) exception lists. This crate parses and serializes the
//! header and the chunk table and validates the structure of a blob ([`TileLayout::parse`]) without
//! decompressing anything, so every offset and length that a decoder later trusts has been checked here.
//!
//! It also holds the dataset-level cell arithmetic ([`CellIndex`]): which tile, and which row in it, holds a
//! global cell index.
//!
//! ```
//! use dct_format::{CellIndex, FormatError};
//! let index = CellIndex::from_tile_cells(&[100, 100, 50])?;
//! assert_eq!(index.locate(150), Some((1, 50)));
//! assert_eq!(index.locate(250), None);
//! # Ok::<(), dct_format::CellIndexError>(())
//! ```
//!
//! # Modules
//!
//! * Tile header: `TileHeader` and `Version`.
//! * Chunk table: `ChunkEntry`, `FrameRef` and `FrameKind`.
//! * `layout.rs`: structural validation with `TileLayout::parse` / `parse_from` (the header regions first, then each
//!   chunk entry), and `IndptrView`.
//! * `parsed.rs`: `ParsedTile`, a blob paired with the layout parsed from it, so that a tile is parsed once;
//!   `TileBytes` lets a decoder take either bytes or a parsed tile.
//! * Field offsets (`header_offset`, `entry_offset`), the CRC (`compute_crc`, `verify_crc`) and `align8`.
//! * Cell→tile arithmetic: `CellIndex`.
//! * `objects.rs`: the dataset's layout, that is the object names (manifest, tiles, side files, obs schema and obs
//!   shards) and which tiles each obs shard holds. They are defined here once, for `dct-dataset`, `dct-obs`, the
//!   converter and the Python package's `manifest.py`.
//! * Errors: `FormatError`, naming the field and the byte offset.
//! * No unsafe code: the crate root declares `#![forbid(unsafe_code)]`.

#![forbid(unsafe_code)]

#[cfg(target_endian = "big")]
compile_error!("deltacells tiles are little-endian; big-endian hosts must not load them (see FORMAT-v2.md)");

mod cells;
mod chunk;
mod error;
mod header;
mod layout;
pub mod objects;
mod parsed;

pub use cells::{CellIndex, CellIndexError, CellOutOfRange};
pub use chunk::{ChunkEntry, FrameKind, FrameRef, entry_offset};
pub use error::{Field, FormatError};
pub use header::{HEADER_LEN, MAGIC, TileHeader, Version, header_offset};
pub use layout::{IndptrView, TileLayout, align8, compute_crc, verify_crc};
pub use parsed::{ParsedTile, TileBytes};

/// Largest count a tile can hold (`2^31 - 1`); counts are stored as positive int32.
pub const MAX_COUNT: u32 = i32::MAX as u32;
/// Largest value a uint16 stream element holds directly; a larger count or gap is an exception (version 2).
pub const STREAM_MAX: u32 = u16::MAX as u32;
