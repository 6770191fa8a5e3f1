//! Encode and decode deltacells tiles.
//!
//! A decoder needs nothing but this crate and [`dct_format`]: no I/O, no async runtime, no cloud SDK. Decoding
//! checks every rule of the format, never panics on any input, and never sizes a buffer from a claim the blob
//! cannot back (see [`Decoder::decode_into`]).
//!
//! * [`Decoder`]: whole tiles or selected rows, into fresh or reused buffers, chunks decoded in parallel.
//! * [`encode_tile`] / [`encode_canonical`]: a CSR matrix of any index and value type to a version-2 tile.
//! * [`inspect`]: header, chunk table and per-chunk exception counts without decompressing the streams.

#![deny(unsafe_code)] // allowed in `kernels`, `handoff` and `buffers` only

mod buffers;
mod chunk;
mod claims;
mod csr_chunk;
mod decode;
mod encode;
mod error;
mod frame;
mod handoff;
mod input;
mod inspect;
mod kernels;
mod params;
mod planes;
mod rows;
mod split;
mod values;
mod worker;

pub use buffers::{HUGE_PAGE_MIN_BYTES, resize_for_overwrite, resize_large};
pub use decode::{DecodeOptions, DecodedTile, Decoder};
pub use encode::{EncodeOptions, ExceptionPolicy, chunk_boundaries, encode_canonical, encode_tile};
pub use error::{DecodeError, EncodeError};
pub use input::{CanonicalCsr, CountLike, CsrMatrix, IndexLike};
pub use inspect::{ChunkSummary, TileSummary, inspect};
pub use kernels::WriteMode;
pub use params::Preset;
pub use planes::TilePlanes;
pub use rows::SparseRows;
pub use values::CountValue;

pub use dct_format;

/// Decodes a whole tile into fresh buffers on the calling thread.
pub fn decode<V: CountValue>(blob: &[u8], verify_crc: bool) -> Result<DecodedTile<V>, DecodeError> {
    Decoder::new(DecodeOptions { verify_crc, threads: 1 }).decode(blob)
}
