//! Writing obs shards: a synchronous shard encoder and an async writer that uploads to an object store.

use std::fmt::Write as _;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::convert::TileConverter;
use crate::data::TileObs;
use crate::error::{ObsError, Result};
use crate::fingerprint::{obs_fingerprint, sha256_hex};
use crate::manifest::ObsFields;
use crate::manifest::{DEFAULT_TILES_PER_FILE, ObsManifest, SCHEMA_NAME, n_shards, shard_name, shard_tiles};
use crate::schema::ObsSchema;
use crate::shard::{CHUNK_CRC32_KEY, footer_crc32};
use dct_store::Store;

/// How shards are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsWriteOptions {
    /// Tiles (row groups) per shard, K (default 1000).
    pub tiles_per_file: u64,
    /// zstd level of the shards (default 3).
    pub zstd_level: i32,
}

impl Default for ObsWriteOptions {
    fn default() -> Self {
        ObsWriteOptions { tiles_per_file: DEFAULT_TILES_PER_FILE, zstd_level: 3 }
    }
}

/// One finished shard.
#[derive(Debug, Clone)]
pub struct EncodedShard {
    /// Shard index.
    pub index: usize,
    /// Name relative to the dataset root (`obs/obs_NNNN.parquet`).
    pub name: String,
    /// The parquet file.
    pub bytes: Bytes,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
    /// CRC-32 of its footer (see [`footer_crc32`](crate::footer_crc32)), for `obs_shard_footer_crc32`.
    pub footer_crc32: u32,
}

/// What an obs writer gives the dataset writer: the text of `obs/schema.json` and the manifest's obs fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsWriteSummary {
    /// The exact text written to `obs/schema.json`.
    pub schema_json: String,
    /// The manifest's `obs_*` fields, the fingerprint computed.
    pub fields: ObsFields,
}

impl ObsWriteSummary {
    /// Builds the summary from the schema text, the tile cell counts and the shards' sizes, hashes and footer
    /// checksums (computing the fingerprint).
    pub fn new(
        schema_json: String,
        tiles_per_file: u64,
        tile_cells: &[u64],
        shard_bytes: Vec<u64>,
        shard_sha256: Vec<String>,
        shard_footer_crc32: Vec<u32>,
    ) -> Self {
        let fingerprint = obs_fingerprint(&schema_json, tile_cells, &shard_sha256);
        let fields = ObsFields {
            tiles_per_file,
            fingerprint,
            shard_bytes,
            shard_sha256,
            shard_footer_crc32: Some(shard_footer_crc32),
        };
        ObsWriteSummary { schema_json, fields }
    }

    /// The manifest facts for a reader.
    pub fn manifest(&self, tile_cells: &[u64]) -> ObsManifest {
        ObsManifest { tile_cells: tile_cells.to_vec(), fields: self.fields.clone() }
    }
}

/// Encodes obs shards tile by tile, without I/O: push the tiles in order; every K-th tile (and the last) completes
/// a shard, which is returned for the caller to store. Memory is bounded by one shard.
///
/// Shards hold exactly one row group per tile with `tile_cells[t]` rows, the schema's columns in order with its
/// Arrow types, zstd compression and no column statistics.
pub struct ObsShardEncoder {
    schema: ObsSchema,
    arrow_schema: SchemaRef,
    tile_cells: Vec<u64>,
    tiles_per_file: u64,
    /// Tiles are given one at a time with their cell counts ([`ObsShardEncoder::streaming`]) instead of up front.
    streaming: bool,
    props: WriterProperties,
    converter: TileConverter,
    writer: Option<ArrowWriter<Vec<u8>>>,
    /// CRC-32 of each column chunk of the shard being written, as 8 hex digits each ([`CHUNK_CRC32_KEY`]).
    chunk_crc32: String,
    next_tile: usize,
}

impl std::fmt::Debug for ObsShardEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObsShardEncoder")
            .field("columns", &self.schema.columns.len())
            .field("tiles", &self.tile_cells.len())
            .field("next_tile", &self.next_tile)
            .finish()
    }
}

impl ObsShardEncoder {
    /// An encoder for `tile_cells.len()` tiles (every tile must hold at least one cell).
    pub fn new(schema: ObsSchema, tile_cells: &[u64], options: &ObsWriteOptions) -> Result<Self> {
        let schema = ObsSchema::new(schema.columns)?;
        if options.tiles_per_file == 0 {
            return Err(ObsError::input(None, "tiles_per_file must be at least 1"));
        }
        if let Some(t) = tile_cells.iter().position(|&n| n == 0) {
            return Err(ObsError::input(None, format!("tile {t} has no cells; every tile needs at least one")));
        }
        if tile_cells.iter().any(|&n| usize::try_from(n).is_err()) {
            return Err(ObsError::input(None, "a tile has more cells than this machine can address"));
        }
        let level = ZstdLevel::try_new(options.zstd_level)
            .map_err(|e| ObsError::input(None, format!("zstd level {}: {e}", options.zstd_level)))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_statistics_enabled(EnabledStatistics::None)
            .set_write_page_header_statistics(false)
            .set_max_row_group_row_count(None)
            .set_max_row_group_bytes(None)
            .set_created_by(format!("deltacells dct-obs {}", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(ObsShardEncoder {
            arrow_schema: schema.arrow_schema(),
            converter: TileConverter::new(&schema),
            schema,
            tile_cells: tile_cells.to_vec(),
            tiles_per_file: options.tiles_per_file,
            streaming: false,
            props,
            writer: None,
            chunk_crc32: String::new(),
            next_tile: 0,
        })
    }

    /// The same encoder starting at tile `first_tile`, the first tile of a shard (a multiple of
    /// `tiles_per_file`): the shards before it are left as they are (an append rewrites only the shards from the
    /// one that holds the dataset's last tile). Shards keep their names and indices in the whole dataset.
    pub fn starting_at(mut self, first_tile: usize) -> Result<Self> {
        if self.streaming || self.next_tile != 0 {
            return Err(ObsError::input(None, "starting_at takes a new encoder made with ObsShardEncoder::new"));
        }
        if !(first_tile as u64).is_multiple_of(self.tiles_per_file) || first_tile > self.tile_cells.len() {
            return Err(ObsError::input(
                None,
                format!(
                    "tile {first_tile} does not start a shard of {} tiles within {} tiles",
                    self.tiles_per_file,
                    self.tile_cells.len()
                ),
            ));
        }
        self.next_tile = first_tile;
        Ok(self)
    }

    /// The schema being written.
    pub fn schema(&self) -> &ObsSchema {
        &self.schema
    }

    /// Number of shards the tiles make.
    pub fn n_shards(&self) -> usize {
        n_shards(self.tile_cells.len(), self.tiles_per_file)
    }

    /// The next tile expected.
    pub fn next_tile(&self) -> usize {
        self.next_tile
    }

    /// Whether every tile was pushed.
    pub fn is_complete(&self) -> bool {
        self.next_tile == self.tile_cells.len()
    }

    /// An encoder whose tiles are not known up front: push each with [`push_streaming`](Self::push_streaming) and
    /// its cell count; every `tiles_per_file`-th tile completes a shard, and [`finish_streaming`](Self::finish_streaming)
    /// completes the last one. The shards are byte-identical to those of [`ObsShardEncoder::new`] given every tile's
    /// cell count.
    pub fn streaming(schema: ObsSchema, options: &ObsWriteOptions) -> Result<Self> {
        let mut encoder = ObsShardEncoder::new(schema, &[], options)?;
        encoder.streaming = true;
        Ok(encoder)
    }

    /// The cells of every tile pushed (or, for an encoder made with [`ObsShardEncoder::new`], to push).
    pub fn tile_cells(&self) -> &[u64] {
        &self.tile_cells
    }

    /// Adds the next tile. Every column must have `tile_cells[t]` values; schema columns the tile lacks are written
    /// as missing; columns the schema lacks are an error. Returns the shard this tile completes, if any.
    pub fn push_tile(&mut self, tile: &TileObs) -> Result<Option<EncodedShard>> {
        let t = self.next_tile;
        if self.streaming {
            return Err(ObsError::input(None, "a streaming encoder takes tiles with push_streaming"));
        }
        let Some(&rows) = self.tile_cells.get(t) else {
            return Err(ObsError::input(None, format!("all {} tiles were already written", self.tile_cells.len())));
        };
        self.write_row_group(tile, rows as usize)?;
        self.next_tile += 1;
        let s = t / self.tiles_per_file as usize;
        if self.next_tile < shard_tiles(self.tile_cells.len(), self.tiles_per_file, s).end {
            return Ok(None);
        }
        self.finish_shard(s).map(Some)
    }

    /// Adds the next tile, of `rows` cells (at least 1), to a [streaming](Self::streaming) encoder: checked and
    /// converted first, so a refused tile leaves the encoder as it was. Returns the shard it completes, if any.
    pub fn push_streaming(&mut self, tile: &TileObs, rows: usize) -> Result<Option<EncodedShard>> {
        if !self.streaming {
            return Err(ObsError::input(None, "push_streaming needs an encoder made with ObsShardEncoder::streaming"));
        }
        if rows == 0 {
            return Err(ObsError::input(
                None,
                format!("tile {} has no cells; every tile needs at least one", self.next_tile),
            ));
        }
        let t = self.next_tile;
        self.write_row_group(tile, rows)?;
        self.tile_cells.push(rows as u64);
        self.next_tile += 1;
        if !self.next_tile.is_multiple_of(self.tiles_per_file as usize) {
            return Ok(None);
        }
        self.finish_shard(t / self.tiles_per_file as usize).map(Some)
    }

    /// Completes the last shard of a [streaming](Self::streaming) encoder, if it holds tiles.
    pub fn finish_streaming(&mut self) -> Result<Option<EncodedShard>> {
        if self.writer.is_none() {
            return Ok(None);
        }
        let s = (self.next_tile - 1) / self.tiles_per_file as usize;
        self.finish_shard(s).map(Some)
    }

    /// Converts `tile` and writes it as the next row group of the shard being written.
    fn write_row_group(&mut self, tile: &TileObs, rows: usize) -> Result<()> {
        let t = self.next_tile;
        let batch = self.converter.convert(tile, rows, t)?;
        let name = shard_name(t / self.tiles_per_file as usize);
        let perr = |source| ObsError::Parquet { url: name.clone(), tile: Some(t), column: None, cause: source };
        if self.writer.is_none() {
            let w =
                ArrowWriter::try_new(Vec::new(), self.arrow_schema.clone(), Some(self.props.clone())).map_err(perr)?;
            self.writer = Some(w);
        }
        let w = self.writer.as_mut().expect("writer just created");
        w.write(&batch).map_err(perr)?;
        w.flush().map_err(perr)?;
        // The row group's bytes must reach the Vec before they can be checksummed.
        w.sync().map_err(|e| perr(ParquetError::External(Box::new(e))))?;
        let written = w.inner();
        let rg = w.flushed_row_groups().last().ok_or_else(|| ObsError::Internal("no row group was written".into()))?;
        for c in rg.columns() {
            let (start, len) = c.byte_range();
            let chunk = usize::try_from(start)
                .ok()
                .zip(usize::try_from(start + len).ok())
                .and_then(|(a, b)| written.get(a..b))
                .ok_or_else(|| ObsError::Internal(format!("column chunk {start}+{len} is not in the written bytes")))?;
            write!(self.chunk_crc32, "{:08x}", crc32fast::hash(chunk)).expect("writing to a String");
        }
        Ok(())
    }

    /// Closes shard `s` (the one being written).
    fn finish_shard(&mut self, s: usize) -> Result<EncodedShard> {
        let name = shard_name(s);
        let perr = |source| ObsError::Parquet { url: name.clone(), tile: None, column: None, cause: source };
        let mut w = self.writer.take().ok_or_else(|| ObsError::Internal(format!("{name} has no row group")))?;
        w.append_key_value_metadata(KeyValue::new(CHUNK_CRC32_KEY.to_string(), std::mem::take(&mut self.chunk_crc32)));
        let bytes = Bytes::from(w.into_inner().map_err(perr)?);
        let sha256 = sha256_hex(&bytes);
        let footer_crc32 =
            footer_crc32(&bytes).ok_or_else(|| ObsError::Internal(format!("{name} has no parquet footer")))?;
        Ok(EncodedShard { index: s, name, bytes, sha256, footer_crc32 })
    }
}

/// Writes a dataset's obs to an object store: shards as they complete, then `obs/schema.json`.
///
/// Feed tiles in order with [`write_tile`](Self::write_tile) (streaming: one shard in memory at a time), then call
/// [`finish`](Self::finish) for the manifest fields. The dataset writer writes the manifest last.
pub struct ObsWriter {
    store: Store,
    encoder: ObsShardEncoder,
    shard_bytes: Vec<u64>,
    shard_sha256: Vec<String>,
    shard_footer_crc32: Vec<u32>,
}

impl std::fmt::Debug for ObsWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObsWriter").field("dataset", &self.store.root()).field("encoder", &self.encoder).finish()
    }
}

impl ObsWriter {
    /// A writer for the dataset at `store`.
    pub fn new(store: Store, schema: ObsSchema, tile_cells: &[u64], options: &ObsWriteOptions) -> Result<Self> {
        let encoder = ObsShardEncoder::new(schema, tile_cells, options)?;
        Ok(ObsWriter {
            store,
            encoder,
            shard_bytes: Vec::new(),
            shard_sha256: Vec::new(),
            shard_footer_crc32: Vec::new(),
        })
    }

    /// The encoder (schema, progress).
    pub fn encoder(&self) -> &ObsShardEncoder {
        &self.encoder
    }

    /// Adds the next tile (see [`ObsShardEncoder::push_tile`]); uploads the shard it completes.
    pub async fn write_tile(&mut self, tile: &TileObs) -> Result<()> {
        if let Some(shard) = self.encoder.push_tile(tile)? {
            self.put(&shard.name, shard.bytes.clone()).await?;
            self.shard_bytes.push(shard.bytes.len() as u64);
            self.shard_sha256.push(shard.sha256);
            self.shard_footer_crc32.push(shard.footer_crc32);
        }
        Ok(())
    }

    async fn put(&self, rel: &str, bytes: Bytes) -> Result<()> {
        Ok(self.store.put(rel, bytes).await?)
    }

    /// Writes `obs/schema.json` and returns the manifest fields. Every tile must have been written.
    pub async fn finish(self) -> Result<ObsWriteSummary> {
        if !self.encoder.is_complete() {
            return Err(ObsError::input(
                None,
                format!(
                    "only {} of {} tiles were written before finish",
                    self.encoder.next_tile(),
                    self.encoder.tile_cells.len()
                ),
            ));
        }
        let schema_json = self.encoder.schema().to_json();
        self.put(SCHEMA_NAME, Bytes::from(schema_json.clone().into_bytes())).await?;
        Ok(ObsWriteSummary::new(
            schema_json,
            self.encoder.tiles_per_file,
            &self.encoder.tile_cells,
            self.shard_bytes,
            self.shard_sha256,
            self.shard_footer_crc32,
        ))
    }
}
