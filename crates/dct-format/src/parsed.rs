//! A tile's bytes paired with the layout parsed from them, so that a tile read once is parsed once, however many
//! times it is decoded later.

use crate::error::FormatError;
use crate::header::TileHeader;
use crate::layout::{IndptrView, TileLayout, verify_crc};

/// A tile blob and the [`TileLayout`] parsed from exactly those bytes.
///
/// Only [`ParsedTile::parse`] makes one, so the layout always describes the blob it travels with, and a decoder
/// handed a `ParsedTile` skips the parse (see [`TileBytes`]). `B` must return the same bytes from every
/// `as_ref` call, as `Vec<u8>`, `&[u8]`, `Box<[u8]>`, `Arc<[u8]>` and `bytes::Bytes` do.
///
/// ```
/// use dct_format::{ParsedTile, TileHeader, Version};
/// // The smallest tile: no cells, no chunks, an indptr of one 0.
/// let header = TileHeader {
///     version: Version::V2, n_cells: 0, nnz: 0, n_genes: 1, n_chunks: 0, indptr_off: 64, total_size: 72, crc32: 0,
/// };
/// let mut blob = header.to_bytes().to_vec();
/// blob.extend_from_slice(&0i64.to_le_bytes());
/// let tile = ParsedTile::parse(blob)?;
/// assert_eq!((tile.header().n_cells, tile.indptr().get(0)), (0, 0));
/// assert!(tile.verify_crc().is_err()); // the CRC of these 8 bytes is not 0
/// # Ok::<(), dct_format::FormatError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ParsedTile<B> {
    blob: B,
    layout: TileLayout,
}

impl<B: AsRef<[u8]>> ParsedTile<B> {
    /// Parses and validates `blob` (the whole tile; see [`TileLayout::parse`]). The CRC is not checked: call
    /// [`ParsedTile::verify_crc`] for that.
    pub fn parse(blob: B) -> Result<Self, FormatError> {
        let layout = TileLayout::parse(blob.as_ref())?;
        Ok(ParsedTile { blob, layout })
    }

    /// The tile's bytes.
    pub fn blob(&self) -> &[u8] {
        self.blob.as_ref()
    }

    /// The validated layout.
    pub fn layout(&self) -> &TileLayout {
        &self.layout
    }

    /// The header.
    pub fn header(&self) -> &TileHeader {
        self.layout.header()
    }

    /// The indptr.
    pub fn indptr(&self) -> IndptrView<'_> {
        self.layout.indptr(self.blob.as_ref())
    }

    /// Checks the header's CRC-32 against the payload.
    pub fn verify_crc(&self) -> Result<(), FormatError> {
        verify_crc(self.blob.as_ref(), self.layout.header())
    }

    /// The bytes, giving up the layout.
    pub fn into_blob(self) -> B {
        self.blob
    }
}

/// What a decoder reads a tile from: plain bytes, which it parses, or a [`ParsedTile`], whose layout it reuses.
pub trait TileBytes {
    /// The whole tile.
    fn tile_bytes(&self) -> &[u8];
    /// The layout already parsed from [`TileBytes::tile_bytes`], if there is one.
    fn parsed_layout(&self) -> Option<&TileLayout>;
}

impl<T: AsRef<[u8]> + ?Sized> TileBytes for T {
    fn tile_bytes(&self) -> &[u8] {
        self.as_ref()
    }

    fn parsed_layout(&self) -> Option<&TileLayout> {
        None
    }
}

impl<B: AsRef<[u8]>> TileBytes for ParsedTile<B> {
    fn tile_bytes(&self) -> &[u8] {
        self.blob.as_ref()
    }

    fn parsed_layout(&self) -> Option<&TileLayout> {
        Some(&self.layout)
    }
}
