//! The objects of a dataset: their names relative to the dataset root, and which tiles each obs shard holds.
//! Defined here once for every layer (the reader and writer, the obs layer, the converter, the Python package).
//!
//! ```
//! use dct_format::objects::{is_dataset_object, obs_shard_path, obs_shard_tiles, tile_path};
//!
//! assert_eq!(tile_path(3), "tiles/tile_000003.dct");
//! assert!(is_dataset_object(&tile_path(3)) && is_dataset_object("manifest.json") && !is_dataset_object("notes.txt"));
//! assert_eq!(obs_shard_path(1), "obs/obs_0001.parquet");
//! assert_eq!(obs_shard_tiles(25, 10, 2), 20..25);
//! ```

use std::ops::Range;

/// The manifest: it describes the dataset, and is written last.
pub const MANIFEST_NAME: &str = "manifest.json";
/// The gene-order side file (stored column `j` is source column `gene_order[j]`).
pub const GENE_ORDER_NAME: &str = "gene_order.npy";
/// The gene-name side file, one name a line.
pub const VAR_NAMES_NAME: &str = "var_names.txt";
/// The gene table side file.
pub const VAR_TABLE_NAME: &str = "var.parquet";
/// The obs schema.
pub const OBS_SCHEMA_NAME: &str = "obs/schema.json";
/// The folder of the tiles (every object under it is a tile).
pub const TILES_DIR: &str = "tiles/";
/// The folder of the obs files (the schema and the shards).
pub const OBS_DIR: &str = "obs/";
/// Tile names: this prefix, the tile index with at least [`TILE_DIGITS`] digits, then [`TILE_SUFFIX`].
pub const TILE_PREFIX: &str = "tiles/tile_"; // in TILES_DIR
/// Least digits of a tile index in its name (zero-padded).
pub const TILE_DIGITS: usize = 6;
/// The end of a tile's name.
pub const TILE_SUFFIX: &str = ".dct";
/// Obs shard names: this prefix, the shard index with at least [`OBS_SHARD_DIGITS`] digits, then
/// [`OBS_SHARD_SUFFIX`].
pub const OBS_SHARD_PREFIX: &str = "obs/obs_"; // in OBS_DIR
/// Least digits of a shard index in its name (zero-padded).
pub const OBS_SHARD_DIGITS: usize = 4;
/// The end of an obs shard's name.
pub const OBS_SHARD_SUFFIX: &str = ".parquet";
/// Written at a dataset's root while an append runs (the request it runs; removed once its manifest is written):
/// it keeps a second append out, and tells a reader whose tile changed under it why.
pub const APPEND_JOURNAL_NAME: &str = "append-in-progress.json";
/// The folder where an append stages its tiles and obs before moving them into place (removed when it finishes).
pub const APPEND_STAGING_DIR: &str = "append-staging/";
/// Tiles per obs shard (K, the manifest's `obs_tiles_per_file`) unless the writer is told otherwise.
pub const DEFAULT_OBS_TILES_PER_FILE: u64 = 1000;

/// Whether `rel` (a path relative to a dataset's root) is an object that a dataset, or an append to it, is made of:
/// the manifest, the side files, anything under [`TILES_DIR`], [`OBS_DIR`] or [`APPEND_STAGING_DIR`], and the
/// append journal. Writers clear only these (and their temporary files) from a location they take over.
pub fn is_dataset_object(rel: &str) -> bool {
    [TILES_DIR, OBS_DIR, APPEND_STAGING_DIR].iter().any(|dir| rel.starts_with(dir))
        || [MANIFEST_NAME, GENE_ORDER_NAME, VAR_NAMES_NAME, VAR_TABLE_NAME, APPEND_JOURNAL_NAME].contains(&rel)
}

/// The name of tile `tile`: `tiles/tile_NNNNNN.dct`.
pub fn tile_path(tile: usize) -> String {
    format!("{TILE_PREFIX}{tile:0TILE_DIGITS$}{TILE_SUFFIX}")
}

/// The name of obs shard `shard`: `obs/obs_NNNN.parquet`.
pub fn obs_shard_path(shard: usize) -> String {
    format!("{OBS_SHARD_PREFIX}{shard:0OBS_SHARD_DIGITS$}{OBS_SHARD_SUFFIX}")
}

/// Obs shards of a dataset of `n_tiles` tiles at `tiles_per_file` (K) tiles a shard: `ceil(n_tiles / K)` (0 for
/// K = 0).
pub fn n_obs_shards(n_tiles: usize, tiles_per_file: u64) -> usize {
    if tiles_per_file == 0 {
        return 0;
    }
    n_tiles.div_ceil(usize::try_from(tiles_per_file).unwrap_or(usize::MAX))
}

/// The tiles obs shard `shard` holds, one row group each: `shard*K .. min((shard+1)*K, n_tiles)`.
pub fn obs_shard_tiles(n_tiles: usize, tiles_per_file: u64, shard: usize) -> Range<usize> {
    let k = usize::try_from(tiles_per_file.max(1)).unwrap_or(usize::MAX);
    let lo = shard.saturating_mul(k).min(n_tiles);
    let hi = shard.saturating_add(1).saturating_mul(k).min(n_tiles);
    lo..hi
}

/// The shard holding tile `tile`, and its row group there.
pub fn obs_shard_of(tile: usize, tiles_per_file: u64) -> (usize, usize) {
    let k = usize::try_from(tiles_per_file.max(1)).unwrap_or(usize::MAX);
    (tile / k, tile % k)
}

/// The manifest's obs fields (`obs_tiles_per_file`, `obs_fingerprint`, `obs_shard_bytes`, `obs_shard_sha256` and
/// `obs_shard_footer_crc32`): one type for every layer. The dataset's `Manifest` embeds it, the obs layer reads
/// shards by it and its writers return it.
///
/// They describe the shards only when the manifest's `has_obs` is true; a dataset without obs has the default
/// (every field empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObsFields {
    /// Tiles (row groups) per shard: K, `obs_tiles_per_file`.
    pub tiles_per_file: u64,
    /// The obs fingerprint, 24 hex digits (`obs_fingerprint`).
    pub fingerprint: String,
    /// Size of each shard in bytes (`obs_shard_bytes`).
    pub shard_bytes: Vec<u64>,
    /// SHA-256 of each shard, 64 hex digits (`obs_shard_sha256`).
    pub shard_sha256: Vec<String>,
    /// CRC-32 of each shard's footer (`obs_shard_footer_crc32`): a key beyond the spec's, written by this project
    /// in version-2 manifests so that obs localization, which reads shards by range, can check what it fetched.
    /// Absent from datasets of the original implementation and from version-1 manifests.
    pub shard_footer_crc32: Option<Vec<u32>>,
}

impl ObsFields {
    /// Shards of a dataset of `n_tiles` tiles ([`n_obs_shards`] at this K).
    pub fn n_shards(&self, n_tiles: usize) -> usize {
        n_obs_shards(n_tiles, self.tiles_per_file)
    }

    /// The tiles shard `shard` holds ([`obs_shard_tiles`] at this K).
    pub fn shard_tiles(&self, n_tiles: usize, shard: usize) -> Range<usize> {
        obs_shard_tiles(n_tiles, self.tiles_per_file, shard)
    }

    /// The shard holding tile `tile` and its row group there ([`obs_shard_of`] at this K).
    pub fn shard_of(&self, tile: usize) -> (usize, usize) {
        obs_shard_of(tile, self.tiles_per_file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_in_their_folders() {
        assert!(TILE_PREFIX.starts_with(TILES_DIR) && OBS_SHARD_PREFIX.starts_with(OBS_DIR));
        assert!(OBS_SCHEMA_NAME.starts_with(OBS_DIR));
    }

    #[test]
    fn names_grow_past_their_padding() {
        assert_eq!(tile_path(0), "tiles/tile_000000.dct");
        assert_eq!(tile_path(1_234_567), "tiles/tile_1234567.dct");
        assert_eq!(obs_shard_path(3), "obs/obs_0003.parquet");
        assert_eq!(obs_shard_path(12345), "obs/obs_12345.parquet");
    }

    #[test]
    fn every_tile_is_in_exactly_one_shard() {
        for (n, k) in [(0, 3), (1, 1), (7, 3), (9, 3), (10, 1000)] {
            let shards = n_obs_shards(n, k);
            let tiles: Vec<usize> = (0..shards).flat_map(|s| obs_shard_tiles(n, k, s)).collect();
            assert_eq!(tiles, (0..n).collect::<Vec<_>>(), "n={n} k={k}");
            for t in 0..n {
                let (s, g) = obs_shard_of(t, k);
                assert_eq!(obs_shard_tiles(n, k, s).nth(g), Some(t));
            }
        }
        assert_eq!(n_obs_shards(5, 0), 0);
    }
}
