//! The obs of a dataset a [`DatasetWriter`](crate::DatasetWriter) writes: one row group per tile, encoded as the
//! tiles arrive, each shard stored once full, and the schema and the manifest's obs fields at the end.

use dct_obs::{EncodedShard, ObsError, ObsSchema, ObsShardEncoder, ObsWriteOptions, ObsWriteSummary, TileObs};

/// The obs encoder of a dataset being written, and what the manifest needs of the shards already stored.
#[derive(Debug)]
pub(crate) struct ObsShards {
    encoder: ObsShardEncoder,
    tiles_per_file: u64,
    bytes: Vec<u64>,
    sha256: Vec<String>,
    footer_crc32: Vec<u32>,
}

impl ObsShards {
    /// Shards of `options.tiles_per_file` tiles in `schema`.
    pub(crate) fn new(schema: ObsSchema, options: &ObsWriteOptions) -> Result<Self, ObsError> {
        Ok(ObsShards {
            encoder: ObsShardEncoder::streaming(schema, options)?,
            tiles_per_file: options.tiles_per_file,
            bytes: Vec::new(),
            sha256: Vec::new(),
            footer_crc32: Vec::new(),
        })
    }

    /// Adds the next tile's obs (`rows` cells): checked and converted first, so a refused tile leaves the shards as
    /// they were. Returns the shard it completes, to be stored.
    pub(crate) fn push(&mut self, tile: &TileObs, rows: usize) -> Result<Option<EncodedShard>, ObsError> {
        let shard = self.encoder.push_streaming(tile, rows)?;
        if let Some(shard) = &shard {
            self.record(shard);
        }
        Ok(shard)
    }

    fn record(&mut self, shard: &EncodedShard) {
        self.bytes.push(shard.bytes.len() as u64);
        self.sha256.push(shard.sha256.clone());
        self.footer_crc32.push(shard.footer_crc32);
    }

    /// Tiles whose obs was added.
    pub(crate) fn n_tiles(&self) -> usize {
        self.encoder.tile_cells().len()
    }

    /// Completes the last shard (returned to be stored, if the tiles did not fill the previous one exactly) and
    /// returns the schema text and the manifest's obs fields.
    pub(crate) fn finish(mut self) -> Result<(Option<EncodedShard>, ObsWriteSummary), ObsError> {
        let last = self.encoder.finish_streaming()?;
        if let Some(shard) = &last {
            self.record(shard);
        }
        let summary = ObsWriteSummary::new(
            self.encoder.schema().to_json(),
            self.tiles_per_file,
            self.encoder.tile_cells(),
            self.bytes,
            self.sha256,
            self.footer_crc32,
        );
        Ok((last, summary))
    }
}
