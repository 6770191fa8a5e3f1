//! Reading obs shards with ranged requests: the footer (a suffix read, then the rest of the metadata if needed) and
//! single column chunks of single row groups.

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use parquet::errors::ParquetError;
use parquet::file::metadata::{FooterTail, ParquetMetaData, ParquetMetaDataReader};

use crate::error::{ObsError, Result};
use crate::schema::{ObsColumn, ObsSchema};

/// Largest parquet footer (metadata) accepted: 256 MiB.
pub const MAX_FOOTER_BYTES: u64 = 256 << 20;
/// Largest uncompressed column chunk accepted (one column of one tile): 1 GiB.
pub const MAX_CHUNK_UNCOMPRESSED_BYTES: i64 = 1 << 30;
/// Parquet magic at both ends of a file.
const MAGIC: &[u8; 4] = b"PAR1";

/// A shard's decoded footer, checked against the manifest and the schema.
#[derive(Debug, Clone)]
pub(crate) struct ShardMeta {
    pub(crate) metadata: Arc<ParquetMetaData>,
    pub(crate) arrow: ArrowReaderMetadata,
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

/// Fetches and decodes a shard's footer with a suffix request of `prefetch` bytes but at most 1/16 of the file (so a
/// small shard is never read whole), then one more ranged request if the metadata is longer. The object must be
/// `expected_size` bytes.
pub(crate) async fn fetch_metadata(
    store: &dyn ObjectStore,
    path: &Path,
    url: &str,
    expected_size: u64,
    prefetch: u64,
) -> Result<Arc<ParquetMetaData>> {
    let shard_err = |m: String| ObsError::shard(url, None, None, m);
    if expected_size < 12 {
        return Err(shard_err(format!("the manifest gives it {expected_size} bytes, too small for a parquet file")));
    }
    let suffix = prefetch.min(expected_size / 16).max(8);
    let opts = GetOptions { range: Some(GetRange::Suffix(suffix)), ..Default::default() };
    let got = store.get_opts(path, opts).await.map_err(|e| store_err("GET suffix", url, e))?;
    let size = got.meta.size;
    if size != expected_size {
        return Err(shard_err(format!(
            "it is {size} bytes but the manifest says {expected_size}: the shard changed after the manifest was written"
        )));
    }
    let tail = got.bytes().await.map_err(|e| store_err("GET suffix", url, e))?;
    if tail.len() as u64 != suffix {
        return Err(shard_err(format!("a {suffix}-byte suffix request returned {} bytes", tail.len())));
    }
    let len = metadata_length(&tail, size).map_err(shard_err)?;
    if len > MAX_FOOTER_BYTES {
        return Err(ObsError::TooLarge { url: format!("{url} footer"), size: len, limit: MAX_FOOTER_BYTES });
    }
    let have = tail.len() as u64 - 8;
    let buf: Bytes = if len <= have {
        tail.slice((have - len) as usize..have as usize)
    } else {
        let start = size - 8 - len;
        let rest =
            store.get_range(path, start..size - tail.len() as u64).await.map_err(|e| store_err("GET range", url, e))?;
        if rest.len() as u64 != len - have {
            return Err(shard_err(format!("a ranged request for {} bytes returned {}", len - have, rest.len())));
        }
        let mut b = BytesMut::with_capacity(len as usize);
        b.extend_from_slice(&rest);
        b.extend_from_slice(&tail[..have as usize]);
        b.freeze()
    };
    let md = decode_metadata(&buf).map_err(|source| ObsError::Parquet {
        url: url.to_string(),
        tile: None,
        column: None,
        source,
    })?;
    Ok(Arc::new(md))
}

fn store_err(op: &'static str, url: &str, e: object_store::Error) -> ObsError {
    match e {
        object_store::Error::NotFound { .. } => ObsError::NotFound { url: url.to_string() },
        source => ObsError::Store { op, url: url.to_string(), source },
    }
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
    std::panic::catch_unwind(AssertUnwindSafe(|| check_layout_inner(metadata, size, tiles, tile_cells, schema)))
        .unwrap_or_else(|_| (vec![(None, None, "its metadata is malformed (the decoder failed)".into())], None))
}

fn check_layout_inner(
    metadata: &Arc<ParquetMetaData>,
    size: u64,
    tiles: Range<usize>,
    tile_cells: &[u64],
    schema: &ObsSchema,
) -> (Vec<LayoutProblem>, Option<ArrowReaderMetadata>) {
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
    let arrow = match ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::new()) {
        Ok(a) => a,
        Err(e) => {
            problems.push((None, None, format!("its schema cannot be read as Arrow: {e}")));
            return (problems, None);
        }
    };
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
    (problems, Some(arrow))
}

/// An [`AsyncFileReader`] over an object store path with pre-fetched metadata: every read is a ranged request.
struct RangedReader {
    store: Arc<dyn ObjectStore>,
    path: Path,
    metadata: Arc<ParquetMetaData>,
}

impl AsyncFileReader for RangedReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move { self.store.get_range(&self.path, range).await.map_err(|e| ParquetError::External(Box::new(e))) }
            .boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move { self.store.get_ranges(&self.path, &ranges).await.map_err(|e| ParquetError::External(Box::new(e))) }
            .boxed()
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
/// fetched. The array is checked for type and length.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn read_column_chunk(
    store: Arc<dyn ObjectStore>,
    path: Path,
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
        source,
    };
    let reader = RangedReader { store, path, metadata: meta.metadata.clone() };
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
    Ok(array)
}

/// Whether `bytes` start with the parquet magic.
pub(crate) fn has_leading_magic(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && &bytes[..4] == MAGIC
}
