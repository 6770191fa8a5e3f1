//! The settings of a [`DatasetWriter`](crate::DatasetWriter): [`WriterOptions`].

use dct_codec::{ExceptionPolicy, Preset};
use dct_format::Version;
use dct_store::StoreOptions;
use serde_json::Value;

/// Settings of a [`DatasetWriter`](crate::DatasetWriter). Start from [`WriterOptions::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct WriterOptions {
    /// Genes (columns) of every appended block, `1 ..= 2^31`.
    pub n_genes: u64,
    /// Cells per tile (default 4096); the last tile holds the remainder.
    pub tile_size: u64,
    /// Chunks per tile (default 8): the unit of parallel decoding.
    pub n_chunks: usize,
    /// zstd level (default 19; higher is smaller and decodes as fast, it only costs encoding time).
    pub zstd_level: i32,
    /// How the zstd parameters follow from the level (default [`Preset::Tuned`]; [`Preset::Fast`] ignores the
    /// level).
    pub zstd_preset: Preset,
    /// Format version of the tiles and the manifest (default 2). Version 1 is for readers that know only it:
    /// at most 65,536 genes and counts of at most 65,535 (a tile holding a larger count is refused before it is
    /// stored, naming the cell and gene).
    pub version: Version,
    /// How many counts or gaps above 65535 a tile may hold (default: the reference writer's policy).
    pub exception_policy: ExceptionPolicy,
    /// Replace a dataset already at the destination (default `false`: a destination holding any file is
    /// refused).
    pub overwrite: bool,
    /// Tiles being encoded or uploaded at once (default 0 = encode threads + 2); bounds memory, since each
    /// holds a tile's rows and bytes. [`DatasetWriter::append`](crate::DatasetWriter::append) blocks while
    /// this many are in flight.
    pub max_tiles_in_flight: usize,
    /// Threads encoding tiles (default 0 = the machine's parallelism).
    pub encode_threads: usize,
    /// Threads running object-store requests (default 2).
    pub io_threads: usize,
    /// The manifest's free-form `metadata` (default `{}`).
    pub metadata: Value,
    /// Configuration of cloud backends.
    pub store: StoreOptions,
}

impl WriterOptions {
    /// Defaults for a dataset of `n_genes` genes.
    pub fn new(n_genes: u64) -> Self {
        WriterOptions {
            n_genes,
            tile_size: 4096,
            n_chunks: 8,
            zstd_level: 19,
            zstd_preset: Preset::default(),
            version: Version::V2,
            exception_policy: ExceptionPolicy::default(),
            overwrite: false,
            max_tiles_in_flight: 0,
            encode_threads: 0,
            io_threads: 2,
            metadata: Value::Object(serde_json::Map::new()),
            store: StoreOptions::default(),
        }
    }
}

/// The encoder settings every writer accepts: `tile_size` in 1..=2^32-1 cells (a tile header counts its cells in
/// 32 bits), at least one chunk per tile, and a zstd level in -7..=22. The message names the setting.
pub fn check_encoder_settings(tile_size: u64, n_chunks: usize, zstd_level: i32) -> Result<(), String> {
    if tile_size == 0 || tile_size > u64::from(u32::MAX) {
        return Err(format!("tile_size is {tile_size}; it must be in 1..=2^32-1"));
    }
    if n_chunks == 0 {
        return Err("n_chunks must be at least 1".into());
    }
    if !(-7..=22).contains(&zstd_level) {
        return Err(format!("zstd_level is {zstd_level}; zstd accepts -7..=22"));
    }
    Ok(())
}
