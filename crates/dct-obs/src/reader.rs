//! Reading obs: open a dataset's obs, localize columns into the local cache, and look values up.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::Schema;
use dct_format::{CellIndex, CellOutOfRange};
use dct_store::Store;
use dct_store::runtime::AbortOnDrop;
use futures::StreamExt;

use crate::cache::{CacheFileWriter, Cached, CachedColumn, FileLock, cache_root, column_file_name, open_cached};
use crate::error::{ObsError, Result};
use crate::fingerprint::obs_fingerprint;
use crate::manifest::{ObsManifest, SCHEMA_NAME, shard_name};
use crate::schema::{ColumnKind, MAX_SCHEMA_BYTES, ObsColumn, ObsSchema};
use crate::shard::{ShardMeta, check_layout, fetch_metadata, read_column_chunk};

/// How obs is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObsOptions {
    /// The cache directory; `None` uses `$DELTACELLS_CACHE`, `$XDG_CACHE_HOME/deltacells` or
    /// `~/.cache/deltacells` (see [`cache_root`](crate::cache_root)).
    pub cache_dir: Option<PathBuf>,
    /// Column chunks fetched at once while localizing (default 16).
    pub concurrency: usize,
    /// Bytes of a shard's end fetched by the first footer request (default 64 KiB, but never more than 1/16 of
    /// the shard). Longer footers take a second request.
    pub footer_prefetch: u64,
}

impl Default for ObsOptions {
    fn default() -> Self {
        ObsOptions { cache_dir: None, concurrency: 16, footer_prefetch: 64 << 10 }
    }
}

/// Runs `f` on the storage layer's process-wide runtime ([`dct_store::runtime`]) and waits for it.
pub(crate) fn block_on<T: Send + 'static>(f: impl Future<Output = Result<T>> + Send + 'static) -> Result<T> {
    dct_store::runtime::block_on(f)?
}

/// The stored size of one column over every shard: the sums of its column chunks' sizes from the shard footers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnSize {
    /// The column.
    pub name: String,
    /// Bytes stored in the shards (compressed column chunks, page headers included).
    pub compressed_bytes: u64,
    /// Bytes once decompressed (still parquet-encoded).
    pub uncompressed_bytes: u64,
}

/// What [`Obs::localize`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalizeReport {
    /// Columns fetched from the shards by this call.
    pub fetched: Vec<String>,
    /// Columns found valid in the cache (or already open).
    pub cached: Vec<String>,
    /// Columns whose cache file was invalid (truncated, corrupt, wrong layout) and was rebuilt.
    pub rebuilt: Vec<String>,
}

/// A dataset's obs: the schema, and the columns localized so far (memory-mapped from the local cache).
///
/// Cheap to clone (shared state); all methods take `&self`.
#[derive(Clone)]
pub struct Obs {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    manifest: ObsManifest,
    schema: ObsSchema,
    schema_text: String,
    cells: CellIndex,
    /// The tile size when every tile but the last holds exactly that many cells (always so in datasets): cells are
    /// then located by a division instead of a search.
    uniform_tile: Option<u64>,
    dir: PathBuf,
    options: ObsOptions,
    columns: RwLock<HashMap<String, Arc<CachedColumn>>>,
}

impl std::fmt::Debug for Obs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Obs")
            .field("dataset", &self.inner.store.root())
            .field("fingerprint", &self.inner.manifest.fields.fingerprint)
            .field("columns", &self.inner.schema.columns.len())
            .field("cache", &self.inner.dir)
            .finish()
    }
}

/// Reads and parses `obs/schema.json` of the dataset at `store`; returns the parsed schema and its exact text.
pub async fn read_schema(store: &Store) -> Result<(ObsSchema, String)> {
    let url = store.url(SCHEMA_NAME);
    let bytes = store.get_limited(SCHEMA_NAME, MAX_SCHEMA_BYTES).await?;
    let schema = ObsSchema::parse(&bytes, &url)?;
    let text =
        String::from_utf8(bytes.to_vec()).map_err(|_| ObsError::Schema { url, message: "not UTF-8 text".into() })?;
    Ok((schema, text))
}

impl Obs {
    /// Opens the obs of the dataset at `store`, described by the manifest fields in `manifest`: reads
    /// `obs/schema.json` and checks it against the fingerprint (recomputed from the schema text, `tile_cells` and
    /// the manifest's shard hashes). Nothing else is read until columns are localized.
    pub async fn open(store: Store, mut manifest: ObsManifest, options: ObsOptions) -> Result<Obs> {
        manifest.validate()?;
        let cells = CellIndex::from_tile_cells(&manifest.tile_cells).map_err(|e| ObsError::Manifest(e.to_string()))?;
        let (schema, schema_text) = read_schema(&store).await?;
        let fp = obs_fingerprint(&schema_text, &manifest.tile_cells, &manifest.fields.shard_sha256);
        if fp != manifest.fields.fingerprint {
            return Err(ObsError::Fingerprint {
                url: store.url(SCHEMA_NAME),
                computed: fp,
                expected: manifest.fields.fingerprint.clone(),
            });
        }
        let dir = cache_root(options.cache_dir.as_deref())?.join(&manifest.fields.fingerprint).join("obs");
        let uniform_tile = uniform_tile(&manifest.tile_cells);
        Ok(Obs {
            inner: Arc::new(Inner {
                store,
                manifest,
                schema,
                schema_text,
                cells,
                uniform_tile,
                dir,
                options,
                columns: RwLock::new(HashMap::new()),
            }),
        })
    }

    /// [`open`](Self::open) from synchronous code (runs on an internal runtime; fine to call from any thread).
    pub fn open_blocking(store: Store, manifest: ObsManifest, options: ObsOptions) -> Result<Obs> {
        block_on(Obs::open(store, manifest, options))
    }

    /// The schema.
    pub fn schema(&self) -> &ObsSchema {
        &self.inner.schema
    }

    /// The exact text of `obs/schema.json`.
    pub fn schema_text(&self) -> &str {
        &self.inner.schema_text
    }

    /// The manifest fields this was opened with.
    pub fn manifest(&self) -> &ObsManifest {
        &self.inner.manifest
    }

    /// The columns with their kinds, in schema order.
    pub fn columns(&self) -> Vec<(&str, ColumnKind)> {
        self.inner.schema.columns.iter().map(|c| (c.name.as_str(), c.kind)).collect()
    }

    /// The global categories of a category column (`None` for other kinds).
    pub fn categories(&self, column: &str) -> Result<Option<&[String]>> {
        Ok(self.inner.schema.require(column)?.1.categories.as_deref())
    }

    /// Total cells.
    pub fn n_cells(&self) -> u64 {
        self.inner.cells.n_cells()
    }

    /// This dataset's cache directory (`<cache>/<fingerprint>/obs`).
    pub fn cache_dir(&self) -> &std::path::Path {
        &self.inner.dir
    }

    /// Whether `column` is localized (open in this handle).
    pub fn is_localized(&self, column: &str) -> bool {
        self.inner.columns.read().expect("column map lock").contains_key(column)
    }

    /// Makes `columns` available locally: each column already valid in the cache is memory-mapped; others (and
    /// invalid cache files, which are deleted) are fetched from the shards (only their column chunks, by ranged
    /// requests, many at once), written to a temporary file, renamed into place and mapped. Each column is
    /// fetched under a lock file, so concurrent threads and processes on a node fetch it once.
    pub async fn localize(&self, columns: &[&str]) -> Result<LocalizeReport> {
        let mut report = LocalizeReport::default();
        let mut seen = HashSet::new();
        let mut pending: Vec<(usize, ObsColumn)> = Vec::new();
        for &name in columns {
            let (pos, column) = self.inner.schema.require(name)?;
            if seen.insert(name) {
                pending.push((pos, column.clone()));
            }
        }
        // Files removed while they were written (another process cleaning the cache): once more from the start.
        let outcome = match self.inner.clone().localize_columns(pending.clone(), &self.inner.columns).await {
            Err(e) if removed_meanwhile(&e) => {
                match self.inner.clone().localize_columns(pending, &self.inner.columns).await {
                    Err(e) if removed_meanwhile(&e) => {
                        return Err(ObsError::CacheRemoved { dir: self.inner.dir.clone() });
                    }
                    other => other?,
                }
            }
            other => other?,
        };
        for (name, how) in outcome {
            match how {
                How::Cached => report.cached.push(name),
                How::Fetched => report.fetched.push(name),
                How::Rebuilt => report.rebuilt.push(name),
            }
        }
        Ok(report)
    }

    /// [`localize`](Self::localize) from synchronous code.
    pub fn localize_blocking(&self, columns: &[&str]) -> Result<LocalizeReport> {
        let this = self.clone();
        let columns: Vec<String> = columns.iter().map(|s| s.to_string()).collect();
        block_on(async move {
            let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
            this.localize(&refs).await
        })
    }

    /// The stored size of every column, in schema order: reads each shard's footer (a ranged request, `concurrency`
    /// shards at a time; the footer is checked against the manifest and the schema) and sums each column's column
    /// chunk sizes. No column data is read.
    pub async fn column_sizes(&self) -> Result<Vec<ColumnSize>> {
        let inner = &self.inner;
        let mut out: Vec<ColumnSize> =
            inner.schema.columns.iter().map(|c| ColumnSize { name: c.name.clone(), ..Default::default() }).collect();
        let mut metas = futures::stream::iter(0..inner.manifest.n_shards())
            .map(|s| inner.load_shard_meta(s))
            .buffered(inner.options.concurrency.max(1));
        while let Some(meta) = metas.next().await {
            for rg in meta?.metadata.row_groups() {
                // The layout check made leaf columns and schema columns agree one to one.
                for (size, chunk) in out.iter_mut().zip(rg.columns()) {
                    size.compressed_bytes += u64::try_from(chunk.compressed_size()).unwrap_or(0);
                    size.uncompressed_bytes += u64::try_from(chunk.uncompressed_size()).unwrap_or(0);
                }
            }
        }
        Ok(out)
    }

    /// [`column_sizes`](Self::column_sizes) from synchronous code.
    pub fn column_sizes_blocking(&self) -> Result<Vec<ColumnSize>> {
        let this = self.clone();
        block_on(async move { this.column_sizes().await })
    }

    fn cached(&self, column: &str) -> Result<(&ObsColumn, Arc<CachedColumn>)> {
        let (_, c) = self.inner.schema.require(column)?;
        let got = self.inner.columns.read().expect("column map lock").get(column).cloned();
        got.map(|g| (c, g)).ok_or_else(|| ObsError::NotLocalized(column.to_string()))
    }

    /// A localized column's arrays, one per tile: zero-copy views of the memory-mapped cache file (category
    /// columns as their integer codes).
    pub fn column_chunks(&self, column: &str) -> Result<Vec<ArrayRef>> {
        Ok(self.cached(column)?.1.arrays.clone())
    }

    /// Whether a localized column has a missing value in some cell: what decides how its values reach a caller
    /// whose arrays have no nulls (numbers as float64 with NaN, say) the same way for every batch of cells.
    pub fn has_nulls(&self, column: &str) -> Result<bool> {
        Ok(self.cached(column)?.1.has_nulls)
    }

    /// A localized column, all cells in global order (one copy, into a vector a caller may take over).
    pub fn column(&self, column: &str) -> Result<ArrayRef> {
        let (c, col) = self.cached(column)?;
        concat_or_empty(&col.arrays, c)
    }

    /// Several localized columns, all cells, as a record batch (fields named and typed as in the schema).
    pub fn table(&self, columns: &[&str]) -> Result<RecordBatch> {
        let mut fields = Vec::with_capacity(columns.len());
        let mut arrays = Vec::with_capacity(columns.len());
        for &name in columns {
            let (c, col) = self.cached(name)?;
            fields.push(c.field());
            arrays.push(concat_or_empty(&col.arrays, c)?);
        }
        batch(fields, arrays, self.n_cells())
    }

    /// The values of `columns` (localized) at global `cells`, in the order given (any order, repeats allowed):
    /// one array per column, category columns as their integer codes (see [`categories`](Self::categories) and
    /// [`category_labels`](crate::category_labels)).
    pub fn take(&self, cells: &[u64], columns: &[&str]) -> Result<RecordBatch> {
        let mut cols = Vec::with_capacity(columns.len());
        for &name in columns {
            cols.push(self.cached(name)?);
        }
        let idx = self.locate(cells)?;
        let mut fields = Vec::with_capacity(cols.len());
        let mut arrays = Vec::with_capacity(cols.len());
        for (c, col) in cols {
            fields.push(c.field());
            arrays.push(take_located(&col.arrays, &idx, c)?);
        }
        batch(fields, arrays, cells.len() as u64)
    }

    /// One localized column at global `cells` (see [`take`](Self::take)).
    pub fn take_column(&self, cells: &[u64], column: &str) -> Result<ArrayRef> {
        let (c, col) = self.cached(column)?;
        take_located(&col.arrays, &self.locate(cells)?, c)
    }

    fn locate(&self, cells: &[u64]) -> Result<Vec<(usize, usize)>> {
        let n_cells = self.n_cells();
        let out_of_range =
            |position, cell| ObsError::from(CellOutOfRange { cell: i128::from(cell), position, n_cells });
        match self.inner.uniform_tile {
            Some(k) => cells
                .iter()
                .enumerate()
                .map(|(position, &cell)| {
                    if cell < n_cells {
                        Ok(((cell / k) as usize, (cell % k) as usize))
                    } else {
                        Err(out_of_range(position, cell))
                    }
                })
                .collect(),
            None => cells
                .iter()
                .enumerate()
                .map(|(position, &cell)| {
                    let located = self.inner.cells.locate(cell).map(|(t, r)| (t, r as usize));
                    located.ok_or_else(|| out_of_range(position, cell))
                })
                .collect(),
        }
    }
}

/// `Some(k)` when every tile but the last holds `k` cells and the last at most `k`.
fn uniform_tile(tile_cells: &[u64]) -> Option<u64> {
    let (&k, rest) = tile_cells.split_first()?;
    let all_but_last = rest.len().saturating_sub(1);
    let uniform = k > 0 && rest[..all_but_last].iter().all(|&n| n == k) && rest.last().is_none_or(|&n| n <= k);
    uniform.then_some(k)
}

fn batch(fields: Vec<arrow_schema::Field>, arrays: Vec<ArrayRef>, rows: u64) -> Result<RecordBatch> {
    let opts = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows as usize));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), arrays, &opts)
        .map_err(|e| ObsError::arrow("assembling obs columns", e))
}

fn concat_or_empty(arrays: &[ArrayRef], c: &ObsColumn) -> Result<ArrayRef> {
    if arrays.is_empty() {
        return Ok(arrow_array::new_empty_array(&c.arrow_type.data_type()));
    }
    let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
    arrow_select::concat::concat(&refs).map_err(|e| ObsError::arrow(format!("joining column {:?}", c.name), e))
}

fn take_located(arrays: &[ArrayRef], idx: &[(usize, usize)], c: &ObsColumn) -> Result<ArrayRef> {
    if idx.is_empty() {
        return Ok(arrow_array::new_empty_array(&c.arrow_type.data_type()));
    }
    let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
    arrow_select::interleave::interleave(&refs, idx)
        .map_err(|e| ObsError::arrow(format!("taking cells of column {:?}", c.name), e))
}

/// Requests retry their own transient failures; what is left worth another attempt is damaged bytes (a checksum
/// that does not match), which takes fetching again.
fn is_damaged(e: &ObsError) -> bool {
    matches!(e, ObsError::Damaged { .. })
}

enum How {
    Cached,
    Fetched,
    Rebuilt,
}

impl Inner {
    fn shard_url(&self, s: usize) -> (String, String) {
        let rel = shard_name(s);
        let url = self.store.url(&rel);
        (rel, url)
    }

    async fn load_shard_meta(&self, s: usize) -> Result<Arc<ShardMeta>> {
        let (path, url) = self.shard_url(s);
        let size = self.manifest.fields.shard_bytes[s];
        let footer_crc = self.manifest.fields.shard_footer_crc32.as_ref().and_then(|c| c.get(s).copied());
        let md = self
            .store
            .retry()
            .run_when(is_damaged, || {
                fetch_metadata(&self.store, &path, &url, size, self.options.footer_prefetch, footer_crc)
            })
            .await?;
        let tiles = self.manifest.shard_tiles(s);
        let (problems, arrow) = check_layout(&md, size, tiles, &self.manifest.tile_cells, &self.schema);
        if let Some((tile, column, message)) = problems.first().cloned() {
            let more = problems.len() - 1;
            let message = if more > 0 { format!("{message} (and {more} more problems)") } else { message };
            return Err(ObsError::Shard { url, tile, column, message });
        }
        let arrow = arrow.ok_or_else(|| ObsError::Internal("layout check gave no schema".into()))?;
        let meta = ShardMeta::new(md, arrow, footer_crc.is_some()).map_err(|message| ObsError::Shard {
            url,
            tile: None,
            column: None,
            message,
        })?;
        Ok(Arc::new(meta))
    }

    /// Fetches tile `t` of every column in `columns` (schema position and column).
    async fn fetch_tile(
        self: Arc<Self>,
        metas: Arc<MetaCache>,
        t: usize,
        columns: Arc<Vec<(usize, ObsColumn)>>,
    ) -> Result<Vec<ArrayRef>> {
        let (s, rg) = self.manifest.shard_of(t);
        let meta = metas.get(&self, s).await?;
        let (path, url) = self.shard_url(s);
        let rows = self.manifest.tile_cells[t] as usize;
        let (this, path, url, meta) = (&self, &path, &url, &meta);
        let reads = columns.iter().map(|(pos, column)| {
            this.store.retry().run_when(is_damaged, move || {
                read_column_chunk(&this.store, path, url, meta, rg, t, *pos, column, rows)
            })
        });
        futures::future::try_join_all(reads).await
    }

    /// Localizes `columns`: those valid in the cache are mapped; the others are fetched in one pass over the tiles
    /// (each shard footer read once, and dropped once its tiles are done), under their lock files (taken in name
    /// order, so that processes never deadlock).
    async fn localize_columns(
        self: Arc<Self>,
        columns: Vec<(usize, ObsColumn)>,
        open: &RwLock<HashMap<String, Arc<CachedColumn>>>,
    ) -> Result<Vec<(String, How)>> {
        let register = |name: &str, c: CachedColumn| {
            open.write().expect("column map lock").insert(name.to_string(), Arc::new(c));
        };
        let mut done = Vec::new();
        let mut missing = Vec::new();
        for (pos, column) in columns {
            if open.read().expect("column map lock").contains_key(&column.name) {
                done.push((column.name.clone(), How::Cached));
                continue;
            }
            let path = self.dir.join(column_file_name(&column.name));
            match open_cached(&path, &column, &self.manifest.tile_cells)? {
                Cached::Valid(c) => {
                    register(&column.name, c);
                    done.push((column.name.clone(), How::Cached));
                }
                _ => missing.push((pos, column)),
            }
        }
        if missing.is_empty() {
            return Ok(done);
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| ObsError::cache(&self.dir, "cannot create", e))?;
        missing.sort_by_key(|(_, c)| column_file_name(&c.name));
        let mut locks = Vec::with_capacity(missing.len());
        let mut fetch: Vec<(usize, ObsColumn)> = Vec::new();
        let mut how = Vec::new();
        for (pos, column) in missing {
            let file_name = column_file_name(&column.name);
            locks.push(FileLock::acquire(self.dir.join(format!("{file_name}.lock"))).await?);
            // Another thread or process may have built it while this one waited.
            let path = self.dir.join(&file_name);
            match open_cached(&path, &column, &self.manifest.tile_cells)? {
                Cached::Valid(c) => {
                    register(&column.name, c);
                    done.push((column.name.clone(), How::Cached));
                }
                Cached::Missing => {
                    how.push(How::Fetched);
                    fetch.push((pos, column));
                }
                Cached::Invalid(_) => {
                    match std::fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(ObsError::cache(&path, "cannot delete the invalid cache file", e)),
                    }
                    how.push(How::Rebuilt);
                    fetch.push((pos, column));
                }
            }
        }
        if fetch.is_empty() {
            return Ok(done);
        }
        let mut writers = fetch
            .iter()
            .map(|(_, c)| CacheFileWriter::create(&self.dir, &column_file_name(&c.name), c))
            .collect::<Result<Vec<_>>>()?;
        let fetch = Arc::new(fetch);
        let metas = Arc::new(MetaCache::default());
        let handle = tokio::runtime::Handle::current();
        let mut tiles = futures::stream::iter(0..self.manifest.n_tiles())
            .map(|t| AbortOnDrop(handle.spawn(self.clone().fetch_tile(metas.clone(), t, fetch.clone()))))
            .buffered(self.options.concurrency.max(1));
        let mut t = 0;
        while let Some(joined) = tiles.next().await {
            let arrays = joined.map_err(|e| ObsError::Internal(format!("a fetch task failed: {e}")))??;
            for (w, a) in writers.iter_mut().zip(arrays) {
                w.write(a)?;
            }
            let (s, _) = self.manifest.shard_of(t);
            if t + 1 == self.manifest.shard_tiles(s).end {
                metas.evict(s);
            }
            t += 1;
        }
        drop(tiles);
        for ((w, (_, column)), how) in writers.into_iter().zip(fetch.iter()).zip(how) {
            w.commit()?;
            let path = self.dir.join(column_file_name(&column.name));
            match open_cached(&path, column, &self.manifest.tile_cells)? {
                Cached::Valid(c) => register(&column.name, c),
                Cached::Missing => {
                    return Err(ObsError::CacheCorrupt {
                        path,
                        message: "it vanished right after being written".into(),
                    });
                }
                Cached::Invalid(message) => return Err(ObsError::CacheCorrupt { path, message }),
            }
            done.push((column.name.clone(), how));
        }
        drop(locks);
        Ok(done)
    }
}

/// Whether `e` says that cache files (or their directory) went away while a localize wrote them.
fn removed_meanwhile(e: &ObsError) -> bool {
    match e {
        ObsError::Cache { cause, .. } => cause.kind() == std::io::ErrorKind::NotFound,
        ObsError::CacheCorrupt { message, .. } => message.contains("vanished"),
        _ => false,
    }
}

/// Shard footers of one localize call, each fetched once and dropped when its tiles are done.
#[derive(Default)]
struct MetaCache {
    cells: Mutex<HashMap<usize, Arc<tokio::sync::OnceCell<Arc<ShardMeta>>>>>,
}

impl MetaCache {
    async fn get(&self, inner: &Inner, s: usize) -> Result<Arc<ShardMeta>> {
        let cell = self.cells.lock().expect("footer cache lock").entry(s).or_default().clone();
        cell.get_or_try_init(|| inner.load_shard_meta(s)).await.cloned()
    }

    fn evict(&self, s: usize) {
        self.cells.lock().expect("footer cache lock").remove(&s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_tiles_locate_by_division_like_the_search() {
        assert_eq!(uniform_tile(&[100, 100, 100, 50]), Some(100));
        assert_eq!(uniform_tile(&[100, 100]), Some(100));
        assert_eq!(uniform_tile(&[7]), Some(7));
        assert_eq!(uniform_tile(&[]), None);
        assert_eq!(uniform_tile(&[100, 50, 100]), None);
        assert_eq!(uniform_tile(&[100, 100, 101]), None);
        assert_eq!(uniform_tile(&[0, 0]), None);
        for tiles in [&[4u64, 4, 4, 1][..], &[4, 4, 4, 4], &[3]] {
            let k = uniform_tile(tiles).unwrap();
            let idx = CellIndex::from_tile_cells(tiles).unwrap();
            for cell in 0..idx.n_cells() {
                assert_eq!(idx.locate(cell), Some(((cell / k) as usize, cell % k)), "{tiles:?} cell {cell}");
            }
        }
    }

    /// Joins and takes of numbers and codes build their buffers as Rust vectors nothing else holds, which the
    /// Python binding hands to numpy whole (`Buffer::into_vec`) rather than copying.
    #[test]
    fn joined_and_taken_numbers_are_vectors_a_caller_can_take_over() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::Int16Type;
        let tiles: Vec<ArrayRef> = vec![
            Arc::new(arrow_array::Int16Array::from(vec![1, 2, 3])),
            Arc::new(arrow_array::Int16Array::from(vec![Some(-4), None])),
        ];
        let c = ObsColumn {
            name: "n".into(),
            kind: ColumnKind::Numeric,
            arrow_type: crate::schema::ArrowType::Int16,
            categories: None,
            ordered: false,
        };
        let vector = |a: ArrayRef| {
            let values = a.as_primitive::<Int16Type>().values().clone();
            drop(a);
            values.into_inner().into_vec::<i16>().is_ok()
        };
        assert!(vector(concat_or_empty(&tiles, &c).unwrap()));
        assert!(vector(take_located(&tiles, &[(1, 0), (0, 2), (0, 2)], &c).unwrap()));
    }
}

#[cfg(test)]
mod removed_tests {
    use super::*;

    #[test]
    fn files_gone_while_written_are_told_from_other_cache_failures() {
        let gone = |kind| ObsError::Cache { path: "/c/x.arrow".into(), message: "cannot lock".into(), cause: kind };
        assert!(removed_meanwhile(&gone(std::io::Error::from(std::io::ErrorKind::NotFound))));
        assert!(!removed_meanwhile(&gone(std::io::Error::from(std::io::ErrorKind::PermissionDenied))));
        let vanished = ObsError::CacheCorrupt {
            path: "/c/x.arrow".into(),
            message: "it vanished right after being written".into(),
        };
        assert!(removed_meanwhile(&vanished));
        assert!(!removed_meanwhile(&ObsError::CacheCorrupt {
            path: "/c/x.arrow".into(),
            message: "bad footer".into()
        }));
        let said = ObsError::CacheRemoved { dir: "/c".into() }.to_string();
        assert!(said.contains("removed meanwhile") && !said.contains("writable"), "{said}");
    }
}
