//! Per-cell metadata ("obs") of deltacells datasets: the schema (`obs/schema.json`), the parquet shards
//! (`obs/obs_NNNN.parquet`, one row group per tile), the fingerprint, the local column cache and the gene table
//! (`var.parquet`). See the "Obs" section of the format specification.
//!
//! This crate sits below the dataset layer: it takes the dataset's [`Store`] (every request goes through it) and
//! the manifest's obs fields ([`ObsManifest`]); it never reads the manifest itself.
//!
//! * Writing: infer a schema with [`ObsSchemaBuilder`] over every input (global vocabularies, code widths, the
//!   `max_categories` threshold), then feed tiles in order to an [`ObsWriter`] (or the I/O-free
//!   [`ObsShardEncoder`]); [`ObsWriteSummary`] holds the manifest fields. An append rewrites the shards its new
//!   tiles join: [`shard_tile_obs`] reads one back as the encoder's input, [`ObsShardEncoder::starting_at`]
//!   starts there.
//! * Reading: [`Obs::open`], [`Obs::localize`] (ranged reads of single column chunks into
//!   `<cache>/<fingerprint>/obs/<column>.arrow`, memory-mapped), then [`Obs::take`], [`Obs::column`],
//!   [`Obs::table`].
//! * Verifying: [`verify_obs`], or [`check_shard_bytes`] and [`check_fingerprint`] for callers that fetch the
//!   shards themselves.
//!
//! # Modules
//!
//! * Obs parquet shards and `obs/schema.json`, kept byte-exact with the original.
//! * The fingerprint, the vocabularies and the code widths.
//! * The node-local Arrow IPC column cache: a ranged-read localize with one GET per column chunk, the footer and
//!   column-chunk CRC-32s checked before decoding, and atomic per-column files written under a lock, CRC-checked
//!   and memory-mapped.
//! * `take`, `var.parquet` and obs verification.
//! * Everything takes a store, a prefix and facts from the manifest.

#![deny(unsafe_code)] // allowed in `cache` only (memory-mapping cached columns)

mod cache;
mod convert;
mod data;
mod error;
mod fingerprint;
mod infer;
mod labels;
mod manifest;
pub mod pyjson;
mod reader;
mod reread;
mod schema;
mod shard;
mod var;
mod verify;
mod write;

pub use cache::{CACHE_ENV, cache_root, column_file_name, quote_column_name, resolve_cache_root};
pub use convert::encode_obs;
pub use data::{CategoryData, ColumnData, TileObs};
pub use dct_store::{RetryPolicy, Store};
pub use error::{ObsError, Result};
pub use fingerprint::{FINGERPRINT_LEN, fingerprint_json, is_fingerprint, obs_fingerprint, sha256_hex, to_hex};
pub use infer::{DEFAULT_MAX_CATEGORIES, ObsSchemaBuilder, VocabularyBuilder, arrow_type_of, keeps_order, promote};
pub use labels::category_labels;
pub use manifest::{
    DEFAULT_TILES_PER_FILE, ObsFields, ObsManifest, SCHEMA_NAME, VAR_TABLE_NAME, n_shards, shard_name, shard_tiles,
};
pub use reader::{ColumnSize, LocalizeReport, Obs, ObsOptions, read_schema};
pub use reread::shard_tile_obs;
pub use schema::{
    ArrowType, ColumnKind, MAX_SCHEMA_BYTES, ObsColumn, ObsSchema, SCHEMA_FORMAT, SCHEMA_VERSION, code_type_for,
};
pub use shard::{CHUNK_CRC32_KEY, MAX_CHUNK_UNCOMPRESSED_BYTES, MAX_FOOTER_BYTES, footer_crc32};
pub use var::{
    CATEGORIES_METADATA_KEY, MAX_VAR_BYTES, PANDAS_METADATA_KEY, VarTable, categorical_array, categorical_parts,
    decode_var_parquet, encode_var_parquet, index_column, read_var_table, write_var_table,
};
pub use verify::{
    ObsProblem, ObsProblemKind, ObsVerifyReport, check_fingerprint, check_shard_bytes, check_shard_tail, verify_obs,
    verify_obs_blocking,
};
pub use write::{EncodedShard, ObsShardEncoder, ObsWriteOptions, ObsWriteSummary, ObsWriter};

/// The Arrow crates this API uses, re-exported so callers use the same versions.
pub mod arrow {
    pub use arrow_array as array;
    pub use arrow_schema as schema;
}
