//! The manifest facts obs needs, and the object paths of a dataset's obs files.

use std::ops::Range;

use crate::error::{ObsError, Result};
use crate::fingerprint::{is_fingerprint, is_sha256_hex};

/// Default number of tiles (row groups) per obs shard.
pub const DEFAULT_TILES_PER_FILE: u64 = dct_format::objects::DEFAULT_OBS_TILES_PER_FILE;

/// What obs needs of a dataset's manifest: `tile_cells` and the obs fields, handed in by the dataset layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsManifest {
    /// Cells per tile (`tile_cells`).
    pub tile_cells: Vec<u64>,
    /// The manifest's `obs_*` fields. With `shard_footer_crc32`, localize trusts neither a footer nor a column
    /// chunk it fetched until the checksums agree (see [`footer_crc32`](crate::footer_crc32)); without it
    /// (datasets of the original implementation) only the layout is checked.
    pub fields: ObsFields,
}

impl ObsManifest {
    /// Number of tiles.
    pub fn n_tiles(&self) -> usize {
        self.tile_cells.len()
    }

    /// Number of shards implied by the tile count and K: `ceil(n_tiles / K)`.
    pub fn n_shards(&self) -> usize {
        self.fields.n_shards(self.tile_cells.len())
    }

    /// Total cells.
    pub fn n_cells(&self) -> u64 {
        self.tile_cells.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The tiles of shard `s`.
    pub fn shard_tiles(&self, s: usize) -> Range<usize> {
        self.fields.shard_tiles(self.tile_cells.len(), s)
    }

    /// The shard holding tile `t` and its row group in that shard.
    pub fn shard_of(&self, t: usize) -> (usize, usize) {
        self.fields.shard_of(t)
    }

    /// Checks that the fields agree (K ≥ 1, one size and hash per shard, hex formats, a cell count that fits
    /// 64 bits); the fingerprint is lowercased.
    pub fn validate(&mut self) -> Result<()> {
        if self.fields.tiles_per_file == 0 {
            return Err(ObsError::Manifest("obs_tiles_per_file is 0".into()));
        }
        self.tile_cells
            .iter()
            .try_fold(0u64, |a, &b| a.checked_add(b))
            .ok_or_else(|| ObsError::Manifest("tile_cells add up to more than 2^64 - 1".into()))?;
        let n = self.n_shards();
        if self.fields.shard_bytes.len() != n || self.fields.shard_sha256.len() != n {
            return Err(ObsError::Manifest(format!(
                "{} tiles in shards of {} need {n} shards, but obs_shard_bytes has {} entries and obs_shard_sha256 {}",
                self.tile_cells.len(),
                self.fields.tiles_per_file,
                self.fields.shard_bytes.len(),
                self.fields.shard_sha256.len()
            )));
        }
        if let Some(crcs) = &self.fields.shard_footer_crc32
            && crcs.len() != n
        {
            return Err(ObsError::Manifest(format!(
                "{n} shards but obs_shard_footer_crc32 has {} entries",
                crcs.len()
            )));
        }
        if let Some((i, h)) = self.fields.shard_sha256.iter().enumerate().find(|(_, h)| !is_sha256_hex(h)) {
            return Err(ObsError::Manifest(format!("obs_shard_sha256[{i}] = {h:?} is not 64 hex digits")));
        }
        if !is_fingerprint(&self.fields.fingerprint) {
            return Err(ObsError::Manifest(format!(
                "obs_fingerprint {:?} is not 24 hex digits",
                self.fields.fingerprint
            )));
        }
        self.fields.fingerprint.make_ascii_lowercase();
        for h in &mut self.fields.shard_sha256 {
            h.make_ascii_lowercase();
        }
        Ok(())
    }
}

// The names and the shard arithmetic are the dataset's (`dct_format::objects`), under this crate's names.
pub use dct_format::objects::{
    OBS_SCHEMA_NAME as SCHEMA_NAME, ObsFields, VAR_TABLE_NAME, n_obs_shards as n_shards, obs_shard_path as shard_name,
    obs_shard_tiles as shard_tiles,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_arithmetic() {
        assert_eq!(n_shards(4, 2), 2);
        assert_eq!(n_shards(5, 2), 3);
        assert_eq!(n_shards(0, 2), 0);
        assert_eq!(shard_tiles(5, 2, 2), 4..5);
        assert_eq!(shard_tiles(5, 2, 3), 5..5);
        assert_eq!(shard_name(3), "obs/obs_0003.parquet");
        assert_eq!(shard_name(12345), "obs/obs_12345.parquet");
    }
}
