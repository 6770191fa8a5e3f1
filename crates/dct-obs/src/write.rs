//! Writing obs shards: a synchronous shard encoder and an async writer that uploads to an object store.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int8Array, Int16Array, Int32Array, RecordBatch, new_null_array};
use arrow_schema::{DataType, SchemaRef};
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::data::{CategoryData, ColumnData, TileObs};
use crate::error::{ObsError, Result};
use crate::fingerprint::{obs_fingerprint, sha256_hex};
use crate::infer::{arrow_type_of, promote};
use crate::manifest::{
    DEFAULT_TILES_PER_FILE, ObsManifest, SCHEMA_NAME, child_path, n_shards, shard_name, shard_tiles,
};
use crate::schema::{ArrowType, ColumnKind, ObsColumn, ObsSchema};
use crate::shard::{CHUNK_CRC32_KEY, footer_crc32};
use dct_retry::RetryPolicy;

/// How shards are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsWriteOptions {
    /// Tiles (row groups) per shard, K (default 1000).
    pub tiles_per_file: u64,
    /// zstd level of the shards (default 3).
    pub zstd_level: i32,
    /// Retries of failed PUTs (a PUT replaces the whole object, so repeating one is harmless).
    pub retry: RetryPolicy,
}

impl Default for ObsWriteOptions {
    fn default() -> Self {
        ObsWriteOptions { tiles_per_file: DEFAULT_TILES_PER_FILE, zstd_level: 3, retry: RetryPolicy::default() }
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

/// What the dataset writer puts in the manifest (and `schema.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsWriteSummary {
    /// The exact text written to `obs/schema.json`.
    pub schema_json: String,
    /// Tiles per shard (`obs_tiles_per_file`).
    pub tiles_per_file: u64,
    /// Size of each shard (`obs_shard_bytes`).
    pub shard_bytes: Vec<u64>,
    /// SHA-256 of each shard (`obs_shard_sha256`).
    pub shard_sha256: Vec<String>,
    /// CRC-32 of each shard's footer (`obs_shard_footer_crc32`, an extra manifest key).
    pub shard_footer_crc32: Vec<u32>,
    /// The fingerprint (`obs_fingerprint`).
    pub fingerprint: String,
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
        ObsWriteSummary { schema_json, tiles_per_file, shard_bytes, shard_sha256, shard_footer_crc32, fingerprint }
    }

    /// The manifest facts for a reader.
    pub fn manifest(&self, tile_cells: &[u64]) -> ObsManifest {
        ObsManifest {
            tile_cells: tile_cells.to_vec(),
            tiles_per_file: self.tiles_per_file,
            shard_bytes: self.shard_bytes.clone(),
            shard_sha256: self.shard_sha256.clone(),
            fingerprint: self.fingerprint.clone(),
            shard_footer_crc32: Some(self.shard_footer_crc32.clone()),
        }
    }
}

/// Translates one column's inputs to its stored form.
#[derive(Debug)]
struct Converter {
    column: ObsColumn,
    /// Global code of each label, for a category column.
    index: HashMap<String, i32>,
    /// The last local vocabulary seen and its translation to global codes.
    last: Option<(Arc<[String]>, Vec<i32>)>,
}

impl Converter {
    fn new(column: ObsColumn) -> Self {
        let index = column
            .categories
            .as_deref()
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, c)| (c.clone(), i as i32))
            .collect();
        Converter { column, index, last: None }
    }

    fn name(&self) -> &str {
        &self.column.name
    }

    fn err(&self, message: impl Into<String>) -> ObsError {
        ObsError::input(Some(&self.column.name), message)
    }

    fn convert(&mut self, data: Option<&ColumnData>, rows: usize) -> Result<ArrayRef> {
        let Some(data) = data else {
            return Ok(match self.column.kind {
                ColumnKind::Category => codes_array(self.column.arrow_type, &vec![-1; rows]),
                _ => new_null_array(&self.column.arrow_type.data_type(), rows),
            });
        };
        if data.len() != rows {
            return Err(self.err(format!("has {} values but the tile has {rows} cells", data.len())));
        }
        match (self.column.kind, data) {
            (ColumnKind::Category, ColumnData::Category(c)) => {
                let map = self.local_to_global(c)?;
                let codes = translate(&c.codes, &map).map_err(|code| {
                    self.err(format!("code {code} is outside its {} categories (and is not -1)", c.categories.len()))
                })?;
                Ok(codes_array(self.column.arrow_type, &codes))
            }
            (ColumnKind::Category, ColumnData::Array(a)) if arrow_type_of(a.data_type()) == Some(ArrowType::String) => {
                let a = to_utf8(a).map_err(|e| ObsError::arrow(format!("column {:?}", self.name()), e))?;
                let a = a.as_string::<i32>();
                let mut codes = Vec::with_capacity(a.len());
                for v in a.iter() {
                    codes.push(match v {
                        None => -1,
                        Some(label) => *self
                            .index
                            .get(label)
                            .ok_or_else(|| self.err(format!("label {label:?} is not in the schema's categories")))?,
                    });
                }
                Ok(codes_array(self.column.arrow_type, &codes))
            }
            (ColumnKind::String, ColumnData::Category(c)) => {
                let mut b = StringBuilder::with_capacity(c.codes.len(), 16 * c.codes.len());
                for &code in &c.codes {
                    match usize::try_from(code).ok().and_then(|i| c.categories.get(i)) {
                        Some(label) => b.append_value(label),
                        None if code == -1 => b.append_null(),
                        None => {
                            return Err(self.err(format!(
                                "code {code} is outside its {} categories (and is not -1)",
                                c.categories.len()
                            )));
                        }
                    }
                }
                Ok(Arc::new(b.finish()))
            }
            (ColumnKind::String, ColumnData::Array(a)) if arrow_type_of(a.data_type()) == Some(ArrowType::String) => {
                to_utf8(a).map_err(|e| ObsError::arrow(format!("column {:?}", self.name()), e))
            }
            (ColumnKind::Numeric | ColumnKind::Bool, ColumnData::Array(a)) => {
                let target = self.column.arrow_type;
                let from = arrow_type_of(a.data_type());
                if from == Some(target) {
                    return Ok(a.clone());
                }
                match from {
                    Some(f) if promote(f, target) == Some(target) => arrow_cast::cast(a, &target.data_type())
                        .map_err(|e| ObsError::arrow(format!("widening column {:?} to {target}", self.name()), e)),
                    _ => Err(self.err(format!("is stored as {target} but a tile gives {}", a.data_type()))),
                }
            }
            (kind, data) => Err(self.err(format!(
                "is a {kind} column but a tile gives {}",
                data.data_type().map_or("categorical codes".to_string(), |t| t.to_string())
            ))),
        }
    }

    fn local_to_global(&mut self, c: &CategoryData) -> Result<Vec<i32>> {
        if let Some((cats, map)) = &self.last
            && Arc::ptr_eq(cats, &c.categories)
        {
            return Ok(map.clone());
        }
        let map = c
            .categories
            .iter()
            .map(|l| {
                self.index.get(l.as_str()).copied().ok_or_else(|| {
                    self.err(format!(
                        "category {l:?} is not in the schema's vocabulary; build the schema from every input first"
                    ))
                })
            })
            .collect::<Result<Vec<i32>>>()?;
        self.last = Some((c.categories.clone(), map.clone()));
        Ok(map)
    }
}

/// Global codes from local ones; `Err(code)` for a code that is neither -1 nor a local category.
fn translate(codes: &[i32], map: &[i32]) -> std::result::Result<Vec<i32>, i32> {
    codes
        .iter()
        .map(|&c| match usize::try_from(c) {
            Ok(i) => map.get(i).copied().ok_or(c),
            Err(_) if c == -1 => Ok(-1),
            Err(_) => Err(c),
        })
        .collect()
}

/// A code array of the code type `t` (int8 / int16 / int32); the codes fit by construction of the schema.
fn codes_array(t: ArrowType, codes: &[i32]) -> ArrayRef {
    match t {
        ArrowType::Int8 => Arc::new(Int8Array::from_iter_values(codes.iter().map(|&c| c as i8))),
        ArrowType::Int16 => Arc::new(Int16Array::from_iter_values(codes.iter().map(|&c| c as i16))),
        _ => Arc::new(Int32Array::from_iter_values(codes.iter().copied())),
    }
}

fn to_utf8(a: &ArrayRef) -> std::result::Result<ArrayRef, arrow_schema::ArrowError> {
    if a.data_type() == &DataType::Utf8 { Ok(a.clone()) } else { arrow_cast::cast(a, &DataType::Utf8) }
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
    props: WriterProperties,
    converters: Vec<Converter>,
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
        let converters = schema.columns.iter().cloned().map(Converter::new).collect();
        Ok(ObsShardEncoder {
            arrow_schema: schema.arrow_schema(),
            schema,
            tile_cells: tile_cells.to_vec(),
            tiles_per_file: options.tiles_per_file,
            props,
            converters,
            writer: None,
            chunk_crc32: String::new(),
            next_tile: 0,
        })
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

    /// Adds the next tile. Every column must have `tile_cells[t]` values; schema columns the tile lacks are written
    /// as missing; columns the schema lacks are an error. Returns the shard this tile completes, if any.
    pub fn push_tile(&mut self, tile: &TileObs) -> Result<Option<EncodedShard>> {
        let t = self.next_tile;
        let Some(&rows) = self.tile_cells.get(t) else {
            return Err(ObsError::input(None, format!("all {} tiles were already written", self.tile_cells.len())));
        };
        let rows = rows as usize;
        for (name, _) in &tile.columns {
            if self.schema.column(name).is_none() {
                return Err(ObsError::input(
                    Some(name),
                    format!("tile {t} has a column the schema lacks; add every input to the schema builder"),
                ));
            }
        }
        let arrays = self
            .converters
            .iter_mut()
            .map(|c| {
                let data = tile.get(&c.column.name);
                c.convert(data, rows).map_err(|e| match e {
                    ObsError::Input { column, message } => {
                        ObsError::Input { column, message: format!("tile {t}: {message}") }
                    }
                    e => e,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(self.arrow_schema.clone(), arrays)
            .map_err(|e| ObsError::arrow(format!("assembling obs tile {t}"), e))?;
        let s = t / self.tiles_per_file as usize;
        let name = shard_name(s);
        let perr = |source| ObsError::Parquet { url: name.clone(), tile: Some(t), column: None, source };
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
        self.next_tile += 1;
        if self.next_tile < shard_tiles(self.tile_cells.len(), self.tiles_per_file, s).end {
            return Ok(None);
        }
        let mut w = self.writer.take().expect("writer exists");
        w.append_key_value_metadata(KeyValue::new(CHUNK_CRC32_KEY.to_string(), std::mem::take(&mut self.chunk_crc32)));
        let bytes = Bytes::from(w.into_inner().map_err(perr)?);
        let sha256 = sha256_hex(&bytes);
        let footer_crc32 =
            footer_crc32(&bytes).ok_or_else(|| ObsError::Internal(format!("{name} has no parquet footer")))?;
        Ok(Some(EncodedShard { index: s, name, bytes, sha256, footer_crc32 }))
    }
}

/// Writes a dataset's obs to an object store: shards as they complete, then `obs/schema.json`.
///
/// Feed tiles in order with [`write_tile`](Self::write_tile) (streaming: one shard in memory at a time), then call
/// [`finish`](Self::finish) for the manifest fields. The dataset writer writes the manifest last.
pub struct ObsWriter {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    encoder: ObsShardEncoder,
    shard_bytes: Vec<u64>,
    shard_sha256: Vec<String>,
    shard_footer_crc32: Vec<u32>,
    retry: RetryPolicy,
}

impl std::fmt::Debug for ObsWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObsWriter").field("prefix", &self.prefix).field("encoder", &self.encoder).finish()
    }
}

impl ObsWriter {
    /// A writer for the dataset at `prefix` in `store`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        schema: ObsSchema,
        tile_cells: &[u64],
        options: &ObsWriteOptions,
    ) -> Result<Self> {
        let encoder = ObsShardEncoder::new(schema, tile_cells, options)?;
        Ok(ObsWriter {
            store,
            prefix,
            encoder,
            shard_bytes: Vec::new(),
            shard_sha256: Vec::new(),
            shard_footer_crc32: Vec::new(),
            retry: options.retry.clone(),
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
        let path = child_path(&self.prefix, rel);
        let put = || self.store.put(&path, PutPayload::from_bytes(bytes.clone()));
        self.retry.run(put).await.map_err(|source| ObsError::Store {
            op: "PUT",
            url: crate::util::object_url(self.store.as_ref(), &path),
            source,
        })?;
        Ok(())
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
