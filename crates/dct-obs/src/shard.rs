//! Reading obs shards with ranged requests: the footer (a suffix read, then the rest of the metadata if needed) and
//! single column chunks of single row groups.

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{FooterTail, ParquetMetaData, ParquetMetaDataReader};

use crate::error::{ObsError, Result};
use crate::schema::{ObsColumn, ObsSchema};
use dct_store::{Store, StoreError};

/// Largest parquet footer (metadata) accepted: 256 MiB.
pub const MAX_FOOTER_BYTES: u64 = 256 << 20;
/// Largest uncompressed column chunk accepted (one column of one tile): 1 GiB.
pub const MAX_CHUNK_UNCOMPRESSED_BYTES: i64 = 1 << 30;
/// Parquet magic at both ends of a file.
const MAGIC: &[u8; 4] = b"PAR1";

/// The footer key-value entry in which this project's shards record the CRC-32 of every column chunk: 8 lowercase
/// hex digits per chunk, row group by row group, columns in schema order. Parquet-rs writes no page checksums, and
/// localize reads column chunks by range (so it cannot check the shard's SHA-256); these checksums, with the footer's
/// own CRC in the manifest, are what keep a corrupted read out of the cache.
pub const CHUNK_CRC32_KEY: &str = "deltacells.column_chunk_crc32";

/// CRC-32 of a shard's footer as recorded in the manifest's `obs_shard_footer_crc32`: over the metadata and the
/// final 8 bytes (metadata length and magic), i.e. the file's last `metadata length + 8` bytes. `None` when `file`
/// does not end with a parquet footer.
pub fn footer_crc32(file: &[u8]) -> Option<u32> {
    let len = metadata_length(file, file.len() as u64).ok()?;
    let start = file.len().checked_sub(8 + usize::try_from(len).ok()?)?;
    Some(crc32fast::hash(&file[start..]))
}

/// A shard's decoded footer, checked against the manifest and the schema.
#[derive(Debug, Clone)]
pub(crate) struct ShardMeta {
    pub(crate) metadata: Arc<ParquetMetaData>,
    pub(crate) arrow: ArrowReaderMetadata,
    /// CRC-32 of each column chunk (row group major), from [`CHUNK_CRC32_KEY`], when the shard has them.
    pub(crate) chunk_crc32: Option<Vec<u32>>,
}

impl ShardMeta {
    /// Bundles a checked footer with its column-chunk checksums (see [`chunk_checksums`]).
    pub(crate) fn new(
        metadata: Arc<ParquetMetaData>,
        arrow: ArrowReaderMetadata,
        required: bool,
    ) -> std::result::Result<Self, String> {
        let chunk_crc32 = chunk_checksums(&metadata)?;
        if required && chunk_crc32.is_none() {
            return Err(format!(
                "its footer has no {CHUNK_CRC32_KEY} entry although the manifest records footer checksums"
            ));
        }
        Ok(ShardMeta { metadata, arrow, chunk_crc32 })
    }
}

/// The column-chunk checksums of [`CHUNK_CRC32_KEY`]: `Ok(None)` without the entry, an error when it is malformed
/// or does not hold one checksum per column chunk.
pub(crate) fn chunk_checksums(md: &ParquetMetaData) -> std::result::Result<Option<Vec<u32>>, String> {
    let Some(kv) = md.file_metadata().key_value_metadata() else { return Ok(None) };
    let Some(entry) = kv.iter().find(|e| e.key == CHUNK_CRC32_KEY) else { return Ok(None) };
    let text = entry.value.as_deref().unwrap_or("").as_bytes();
    let n_chunks = md.row_groups().iter().map(|rg| rg.num_columns()).sum::<usize>();
    if text.len() != n_chunks.saturating_mul(8) {
        return Err(format!(
            "its {CHUNK_CRC32_KEY} entry holds {} characters for {n_chunks} column chunks (8 each)",
            text.len()
        ));
    }
    text.chunks_exact(8)
        .map(|h| {
            std::str::from_utf8(h).ok().and_then(|h| u32::from_str_radix(h, 16).ok()).ok_or_else(|| {
                format!("its {CHUNK_CRC32_KEY} entry holds {:?}, which is not 8 hex digits", String::from_utf8_lossy(h))
            })
        })
        .collect::<std::result::Result<Vec<u32>, String>>()
        .map(Some)
}

/// The byte range of column `col` of row group `rg` in the file (dictionary page included).
pub(crate) fn chunk_range(md: &ParquetMetaData, rg: usize, col: usize) -> Range<u64> {
    let c = md.row_group(rg).column(col);
    let start = c.dictionary_page_offset().unwrap_or(c.data_page_offset()).max(0) as u64;
    start..start.saturating_add(c.compressed_size().max(0) as u64)
}

/// A problem found in a shard's layout: tile, column and message.
pub(crate) type LayoutProblem = (Option<usize>, Option<String>, String);

/// Decodes a footer from the file's last bytes: `tail` must end at the end of the file and hold the metadata and
/// the 8-byte footer. Returns the metadata length when `tail` is too short (`Err(Ok(len))`).
pub(crate) fn metadata_length(tail: &[u8], size: u64) -> std::result::Result<u64, String> {
    if size < 12 || tail.len() < 8 {
        return Err(format!("{size} bytes is too small for a parquet file"));
    }
    let footer: &[u8; 8] = tail[tail.len() - 8..].try_into().expect("8 bytes");
    let ft = FooterTail::try_new(footer).map_err(|e| format!("no parquet footer at the end of the file ({e})"))?;
    if ft.is_encrypted_footer() {
        return Err("the footer is encrypted, which obs shards never are".into());
    }
    let len = ft.metadata_length() as u64;
    if len + 8 > size - 4 {
        return Err(format!("the footer claims {len} bytes of metadata in a {size}-byte file"));
    }
    Ok(len)
}

/// Decodes metadata bytes (a panic of the decoder on malformed input becomes an error).
pub(crate) fn decode_metadata(buf: &[u8]) -> std::result::Result<ParquetMetaData, ParquetError> {
    std::panic::catch_unwind(|| ParquetMetaDataReader::decode_metadata(buf))
        .unwrap_or_else(|_| Err(ParquetError::General("the metadata decoder failed on malformed input".into())))
}

/// Fetches and decodes a shard's footer with a request for its last `prefetch` bytes but at most 1/16 of the file
/// (so a small shard is never read whole), then one more ranged request if the metadata is longer. The object
/// must be `expected_size` bytes.
pub(crate) async fn fetch_metadata(
    store: &Store,
    rel: &str,
    url: &str,
    expected_size: u64,
    prefetch: u64,
    expected_footer_crc32: Option<u32>,
) -> Result<Arc<ParquetMetaData>> {
    let shard_err = |m: String| ObsError::shard(url, None, None, m);
    let damaged = |m: String| ObsError::damaged(store, url, None, None, m);
    if expected_size < 12 {
        return Err(shard_err(format!("the manifest gives it {expected_size} bytes, too small for a parquet file")));
    }
    let suffix = prefetch.min(expected_size / 16).max(8);
    let tail = match store.get_tail(rel, suffix, expected_size).await {
        Ok(tail) => tail,
        Err(StoreError::WrongSize { size, .. }) => {
            return Err(shard_err(format!("it is {size} bytes but the manifest says {expected_size}")));
        }
        Err(e) => return Err(e.into()),
    };
    let size = expected_size;
    // With a footer checksum on record the file was written with a valid footer, so a bad one here is damage.
    let bad_footer = |m: String| if expected_footer_crc32.is_some() { damaged(m) } else { shard_err(m) };
    let len = metadata_length(&tail, size).map_err(bad_footer)?;
    if len > MAX_FOOTER_BYTES {
        return Err(ObsError::TooLarge { url: format!("{url} footer"), size: len, limit: MAX_FOOTER_BYTES });
    }
    let have = tail.len() as u64 - 8;
    let buf: Bytes = if len <= have {
        tail.slice((have - len) as usize..have as usize)
    } else {
        let range = size - 8 - len..size - tail.len() as u64;
        let rest = store.get_range(rel, range).await?;
        let mut b = BytesMut::with_capacity(len as usize);
        b.extend_from_slice(&rest);
        b.extend_from_slice(&tail[..have as usize]);
        b.freeze()
    };
    if let Some(expected) = expected_footer_crc32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&buf);
        h.update(&tail[tail.len() - 8..]);
        let crc = h.finalize();
        if crc != expected {
            return Err(damaged(format!(
                "its footer has CRC-32 {crc:08x} but the manifest's obs_shard_footer_crc32 says {expected:08x}"
            )));
        }
    }
    let md = decode_metadata(&buf).map_err(|source| ObsError::Parquet {
        url: url.to_string(),
        tile: None,
        column: None,
        cause: source,
    })?;
    Ok(Arc::new(md))
}

/// Checks a shard's metadata against the manifest (`tiles` are its tiles, `tile_cells` all tiles' cell counts)
/// and the schema: one row group per tile with the right row counts, the schema's columns in order with the named
/// Arrow types, column chunks inside the data part of the file. Returns every problem, and the Arrow view of the
/// metadata when the schema could be derived.
pub(crate) fn check_layout(
    metadata: &Arc<ParquetMetaData>,
    size: u64,
    tiles: Range<usize>,
    tile_cells: &[u64],
    schema: &ObsSchema,
) -> (Vec<LayoutProblem>, Option<ArrowReaderMetadata>) {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut problems = row_group_problems(metadata, size, tiles, tile_cells);
        let arrow = arrow_view(metadata, schema, &mut problems);
        (problems, arrow)
    }))
    .unwrap_or_else(|_| (vec![(None, None, "its metadata is malformed (the decoder failed)".into())], None))
}

/// The row groups' problems: one per tile of `tiles`, with its cell count, every column chunk inside the data
/// part of a file of `size` bytes.
fn row_group_problems(
    metadata: &ParquetMetaData,
    size: u64,
    tiles: Range<usize>,
    tile_cells: &[u64],
) -> Vec<LayoutProblem> {
    let mut problems: Vec<LayoutProblem> = Vec::new();
    let n_rg = metadata.num_row_groups();
    if n_rg != tiles.len() {
        problems.push((
            None,
            None,
            format!(
                "{n_rg} row groups, but it should hold tiles {}..{} (one row group per tile)",
                tiles.start, tiles.end
            ),
        ));
    }
    let data_end = size.saturating_sub(8 + 4);
    let n_cols = metadata.file_metadata().schema_descr().num_columns();
    for (i, t) in tiles.clone().enumerate().take(n_rg) {
        let rg = metadata.row_group(i);
        if u64::try_from(rg.num_rows()).ok() != Some(tile_cells[t]) {
            problems.push((
                Some(t),
                None,
                format!("row group {i} has {} rows but tile {t} has {} cells", rg.num_rows(), tile_cells[t]),
            ));
        }
        if rg.num_columns() != n_cols {
            problems.push((
                Some(t),
                None,
                format!("row group {i} has {} column chunks, not {n_cols}", rg.num_columns()),
            ));
            continue;
        }
        for c in 0..rg.num_columns() {
            let col = rg.column(c);
            let start = col.dictionary_page_offset().unwrap_or(col.data_page_offset());
            let len = col.compressed_size();
            let name = col.column_path().string();
            let ok = start >= 4
                && len >= 0
                && (start as u64).checked_add(len as u64).is_some_and(|end| end <= data_end)
                && (0..=MAX_CHUNK_UNCOMPRESSED_BYTES).contains(&col.uncompressed_size());
            if !ok {
                problems.push((
                    Some(t),
                    Some(name),
                    format!(
                        "column chunk at offset {start}, {len} bytes ({} uncompressed) is outside the file's data",
                        col.uncompressed_size()
                    ),
                ));
            }
        }
    }
    problems
}

/// The Arrow view of the metadata, if its schema can be derived, with the problems of its columns against the
/// schema's added to `problems`.
fn arrow_view(
    metadata: &Arc<ParquetMetaData>,
    schema: &ObsSchema,
    problems: &mut Vec<LayoutProblem>,
) -> Option<ArrowReaderMetadata> {
    let arrow = match ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::new()) {
        Ok(a) => a,
        Err(e) => {
            problems.push((None, None, format!("its schema cannot be read as Arrow: {e}")));
            return None;
        }
    };
    let n_cols = metadata.file_metadata().schema_descr().num_columns();
    let fields = arrow.schema().fields();
    let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    let expected: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
    if names != expected {
        problems.push((None, None, format!("its columns are {names:?} but the schema lists {expected:?}")));
    } else {
        for (f, c) in fields.iter().zip(&schema.columns) {
            if f.data_type() != &c.arrow_type.data_type() {
                problems.push((
                    None,
                    Some(c.name.clone()),
                    format!("stored as {} but the schema says {}", f.data_type(), c.arrow_type),
                ));
            }
        }
    }
    // Nested columns would make leaf and root indices differ.
    if n_cols != fields.len() {
        problems.push((None, None, format!("{n_cols} leaf columns for {} fields (nested types)", fields.len())));
    }
    Some(arrow)
}

/// An [`AsyncFileReader`] over one column chunk already fetched (and checked) plus the shard's metadata: the
/// decoder's reads are served from memory, and a read outside the chunk is an error.
struct ChunkReader {
    chunk_start: u64,
    chunk: Bytes,
    metadata: Arc<ParquetMetaData>,
}

impl ChunkReader {
    fn slice(&self, range: &Range<u64>) -> parquet::errors::Result<Bytes> {
        let end = self.chunk_start + self.chunk.len() as u64;
        if range.start < self.chunk_start || range.end > end || range.start > range.end {
            return Err(ParquetError::General(format!(
                "the decoder asked for bytes {}..{} outside the column chunk {}..{end}",
                range.start, range.end, self.chunk_start
            )));
        }
        Ok(self.chunk.slice((range.start - self.chunk_start) as usize..(range.end - self.chunk_start) as usize))
    }
}

impl AsyncFileReader for ChunkReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        let got = self.slice(&range);
        async move { got }.boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        let got = ranges.iter().map(|r| self.slice(r)).collect();
        async move { got }.boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        let md = self.metadata.clone();
        async move { Ok(md) }.boxed()
    }
}

/// Reads column `col` (schema position) of row group `rg` (tile `tile`, `rows` cells): only that column chunk is
/// fetched, with one ranged GET, and checked against its CRC-32 when the shard records one before anything decodes
/// it. The array is checked for type and length, and category codes for lying in the vocabulary.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn read_column_chunk(
    store: &Store,
    rel: &str,
    url: &str,
    meta: &ShardMeta,
    rg: usize,
    tile: usize,
    col: usize,
    column: &ObsColumn,
    rows: usize,
) -> Result<ArrayRef> {
    let perr = |source| ObsError::Parquet {
        url: url.to_string(),
        tile: Some(tile),
        column: Some(column.name.clone()),
        cause: source,
    };
    let range = chunk_range(&meta.metadata, rg, col);
    let chunk = store.get_range(rel, range.clone()).await?;
    let chunk_err = |m: String| ObsError::shard(url, Some(tile), Some(&column.name), m);
    let damaged = |m: String| ObsError::damaged(store, url, Some(tile), Some(&column.name), m);
    if let Some(crcs) = &meta.chunk_crc32 {
        let n_cols = meta.metadata.row_group(rg).num_columns();
        let expected = crcs.get(rg * n_cols + col).copied();
        let crc = crc32fast::hash(&chunk);
        if expected != Some(crc) {
            return Err(damaged(format!(
                "the column chunk at bytes {}..{} has CRC-32 {crc:08x} but the footer records {}",
                range.start,
                range.end,
                expected.map(|e| format!("{e:08x}")).unwrap_or_else(|| "none".into())
            )));
        }
    }
    let reader = ChunkReader { chunk_start: range.start, chunk, metadata: meta.metadata.clone() };
    let fut = async {
        let mask = ProjectionMask::roots(meta.metadata.file_metadata().schema_descr(), [col]);
        let mut stream = ParquetRecordBatchStreamBuilder::new_with_metadata(reader, meta.arrow.clone())
            .with_projection(mask)
            .with_row_groups(vec![rg])
            .with_batch_size(rows.max(1))
            .build()
            .map_err(perr)?;
        let mut parts: Vec<ArrayRef> = Vec::with_capacity(1);
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(perr)?;
            if batch.num_columns() != 1 {
                return Err(ObsError::shard(
                    url,
                    Some(tile),
                    Some(&column.name),
                    "projection returned several columns",
                ));
            }
            parts.push(batch.column(0).clone());
        }
        let array = match parts.len() {
            1 => parts.pop().expect("one part"),
            0 => arrow_array::new_empty_array(&column.arrow_type.data_type()),
            _ => {
                let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                arrow_select::concat::concat(&refs).map_err(|e| {
                    ObsError::arrow(format!("{url}: joining tile {tile} of column {:?}", column.name), e)
                })?
            }
        };
        Ok(array)
    };
    let array = AssertUnwindSafe(fut).catch_unwind().await.map_err(|_| {
        ObsError::shard(
            url,
            Some(tile),
            Some(&column.name),
            "the parquet decoder failed on this column chunk (corrupt data)",
        )
    })??;
    if array.len() != rows {
        return Err(ObsError::shard(
            url,
            Some(tile),
            Some(&column.name),
            format!("decoded {} values for {rows} cells", array.len()),
        ));
    }
    if array.data_type() != &column.arrow_type.data_type() {
        return Err(ObsError::shard(
            url,
            Some(tile),
            Some(&column.name),
            format!("decoded as {} but the schema says {}", array.data_type(), column.arrow_type),
        ));
    }
    if let Some(categories) = &column.categories {
        crate::labels::category_labels(array.as_ref(), categories).map_err(|e| {
            let why = match e {
                ObsError::Input { message, .. } => message,
                other => other.to_string(),
            };
            chunk_err(format!("its category codes do not fit the vocabulary: {why}"))
        })?;
    }
    Ok(array)
}

/// Whether `bytes` start with the parquet magic.
pub(crate) fn has_leading_magic(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && &bytes[..4] == MAGIC
}
