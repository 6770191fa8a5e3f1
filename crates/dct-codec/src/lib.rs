//! Encode and decode deltacells tiles.
//!
//! A decoder needs nothing but this crate and [`dct_format`]: no I/O, no async runtime, no cloud SDK. Decoding
//! checks every rule of the format, never panics on any input, and never sizes a buffer from a claim the blob
//! cannot back (see [`Decoder::decode_into`]).
//!
//! * [`Decoder`]: whole tiles or selected rows, into fresh or reused buffers, chunks decoded in parallel.
//! * [`encode_tile`] / [`encode_canonical`]: a CSR matrix of any index and value type to a version-2 tile.
//! * [`inspect`]: header, chunk table and per-chunk exception counts without decompressing the streams.
//!
//! # Modules
//!
//! * Encoding: zstd byte planes, delta gaps and exception frames; `encode_tile` / `encode_canonical`,
//!   `chunk_boundaries` and `ExceptionPolicy`.
//! * `params.rs`: `Preset`, the zstd parameters of each frame derived from the level: `tuned`, the default, sets the
//!   shortest match per plane at levels 16 and above; the others are `plain` and `fast`.
//! * Input canonicalization: `CsrMatrix`, `CanonicalCsr`, `IndexLike` and `CountLike`.
//! * `decode.rs`: the `Decoder`, for whole tiles or selected rows, into reused buffers, with chunks decoded in
//!   parallel; it takes bytes or a `ParsedTile`.
//! * `claims.rs`: frame claims, checked before anything is allocated, and proven past the trust budget.
//! * `csr_chunk.rs`: one chunk's frames into gene indices and counts.
//! * `worker.rs`: a decode thread's scratch.
//! * `TilePlanes`: decompressed planes, with rows decoded on demand.
//! * `rows.rs`: `SparseRows` (`n_rows`, `nnz`, `row`) of any CSR result, a `DecodedTile` or the reader's `Batch`.
//! * `chunk.rs`: what both decode paths share about a chunk: its context, errors naming the chunk, cell and nonzero,
//!   and the exception frames and their checks.
//! * `split.rs`: running a tile's chunks on the caller, the decoder's helper threads or a pool, split by nonzeros.
//! * `inspect`: a tile's structure without decompressing the streams.
//! * Errors: `DecodeError` and `EncodeError`.
//! * Unsafe code: the crate root declares `#![deny(unsafe_code)]`, and unsafe code is allowed in three modules only:
//!   * `kernels/`: the per-nonzero decode loops. `mod.rs` holds the dispatch and the portable loops (used elsewhere
//!     and under Miri), `avx512.rs` the loops for processors that have AVX-512 (detected at run time), and `x86.rs`
//!     SSE2 loops with non-temporal stores on x86-64.
//!   * `handoff.rs`: the decoder's allocation-free helper threads.
//!   * `buffers.rs`: `resize_for_overwrite` / `resize_large`, large decode buffers grown by a fresh zeroed
//!     allocation rather than a copy, advised for transparent huge pages on Linux; the reader's batches use them too.

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

pub use buffers::{HUGE_PAGE_MIN_BYTES, resize_for_overwrite, resize_large, return_free_memory};
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
