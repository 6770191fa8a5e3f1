//! Writing a dataset: [`DatasetWriter`].

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use dct_codec::{CanonicalCsr, CountLike, CsrMatrix, EncodeOptions, IndexLike, encode_canonical};
use dct_format::Version;
use dct_format::objects::{APPEND_JOURNAL_NAME, APPEND_STAGING_DIR, is_dataset_object};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::error::DatasetError;
use crate::finish::{SideFiles, finish_dataset};
use crate::manifest::{MANIFEST_NAME, Manifest, ManifestSettings, TileStats, tile_path};
use crate::rt::{default_threads, on_pool};
#[cfg(feature = "obs")]
use crate::writer_obs::ObsShards;
use crate::writer_options::{WriterOptions, check_encoder_settings};
use dct_store::Store;
use dct_store::runtime::Runtime as Rt;

/// Writes a dataset: append CSR blocks of any size; they are re-chunked into tiles of exactly `tile_size`
/// cells, encoded in parallel (at most `max_tiles_in_flight` at a time) and stored as they complete;
/// [`DatasetWriter::finish`] stores the last tile, the side files and then, last, `manifest.json`.
///
/// Atomicity: every object is stored whole or not at all (local files are written to a temporary name and
/// renamed; object stores publish a PUT atomically), and the manifest is stored only after every tile and side
/// file. An error (after which every call fails) or a writer dropped before `finish` leaves no manifest, so
/// readers see an incomplete dataset and refuse it (`manifest_missing`). Either first waits for the tiles still
/// in flight, so that nothing is written into the output once the failing call or the drop has returned.
///
/// The calls block; encoding runs on the writer's own rayon pool and uploads on its own tokio runtime.
pub struct DatasetWriter {
    store: Store,
    opts: WriterOptions,
    rt: Rt,
    pool: Arc<rayon::ThreadPool>,
    encode: EncodeOptions,
    max_in_flight: usize,
    current: CanonicalCsr,
    n_cells: u64,
    pending: VecDeque<JoinHandle<Result<TileStats, DatasetError>>>,
    done: Vec<TileStats>,
    side: SideFiles,
    /// The obs being written with the tiles ([`DatasetWriter::set_obs_schema`]).
    #[cfg(feature = "obs")]
    obs: Option<ObsShards>,
    failed: Option<DatasetError>,
    /// A tile of fewer than `tile_size` cells was pushed ([`DatasetWriter::push_tile`]): no more may follow.
    short_tile_pushed: bool,
}

impl std::fmt::Debug for DatasetWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatasetWriter")
            .field("url", &self.store.root())
            .field("n_cells", &self.n_cells)
            .field("tiles_stored", &self.done.len())
            .finish_non_exhaustive()
    }
}

impl DatasetWriter {
    /// Starts a dataset at `url` (a local path, created if needed, or a URL; see [`dct_store`]).
    ///
    /// A destination that already holds any file is refused unless `overwrite` is set; with it, the old
    /// `manifest.json` is deleted first, then the old tiles, side files and obs files (other files are left).
    pub fn create(url: &str, options: WriterOptions) -> Result<DatasetWriter, DatasetError> {
        let store = Store::from_url(url, &options.store)?;
        DatasetWriter::create_in(store, options)
    }

    /// Starts a dataset at a [`Store`] (e.g. an in-memory store, or one with test layers); the store's own
    /// retries and request cap apply (`options.store` is not used).
    pub fn create_in(store: Store, options: WriterOptions) -> Result<DatasetWriter, DatasetError> {
        let bad = |m: String| Err(DatasetError::InvalidArgument(format!("writer for {}: {m}", store.root())));
        if options.n_genes == 0 || options.n_genes > options.version.max_genes() {
            return bad(format!(
                "n_genes is {}; version {} holds 1..={} genes",
                options.n_genes,
                options.version.number(),
                options.version.max_genes()
            ));
        }
        if let Err(m) = check_encoder_settings(options.tile_size, options.n_chunks, options.zstd_level) {
            return bad(m);
        }
        let threads = if options.encode_threads == 0 { default_threads() } else { options.encode_threads };
        let max_in_flight = if options.max_tiles_in_flight == 0 { threads + 2 } else { options.max_tiles_in_flight };
        let rt = Rt::new(options.io_threads, "dct-write-io")?;
        let pool = Arc::new(crate::rt::pool(threads, "dct-encode")?);
        let s = store.clone();
        let overwrite = options.overwrite;
        rt.block_on(async move { prepare_destination(&s, overwrite).await })??;
        let encode = EncodeOptions {
            n_chunks: options.n_chunks,
            level: options.zstd_level,
            preset: options.zstd_preset,
            exception_policy: options.exception_policy,
            version: options.version,
        };
        Ok(DatasetWriter {
            current: CanonicalCsr::new(options.n_genes),
            store,
            rt,
            pool,
            encode,
            max_in_flight,
            n_cells: 0,
            pending: VecDeque::new(),
            done: Vec::new(),
            side: SideFiles::new(options.n_genes),
            #[cfg(feature = "obs")]
            obs: None,
            failed: None,
            short_tile_pushed: false,
            opts: options,
        })
    }

    /// Where the dataset is being written.
    pub fn url(&self) -> &str {
        self.store.root()
    }

    /// Cells appended so far.
    pub fn n_cells(&self) -> u64 {
        self.n_cells
    }

    /// Tiles stored so far (tiles still being encoded or uploaded are not counted).
    pub fn tiles_stored(&self) -> usize {
        self.done.len()
    }

    fn usable(&self) -> Result<(), DatasetError> {
        if let Some(e) = &self.failed {
            return Err(DatasetError::InvalidArgument(format!(
                "the writer for {} failed earlier and cannot continue ({e}); no manifest was written",
                self.store.root()
            )));
        }
        Ok(())
    }

    fn fail(&mut self, e: DatasetError) -> DatasetError {
        self.settle_pending();
        self.failed = Some(e.clone());
        e
    }

    /// Waits for the tiles still being encoded or stored (at most `max_tiles_in_flight`), their results unused,
    /// so that nothing writes into the output after the writer failed or is dropped: the caller may then list,
    /// clear or resume it. Aborting would not do: a local file's write runs on a blocking thread that an abort
    /// does not stop.
    fn settle_pending(&mut self) {
        for job in self.pending.drain(..) {
            let _ = futures::executor::block_on(job);
        }
    }

    /// Appends the rows of `m` (cells; columns = genes, `m.n_cols` must be `n_genes`). Rows may have unsorted
    /// and repeated columns (repeats are summed) and explicit zeros (dropped); values must be integral counts
    /// in `0 ..= 2^31 - 1`. Blocks while `max_tiles_in_flight` tiles are being encoded or stored.
    ///
    /// A wrong number of columns is refused without changing anything; any other error (invalid data, an
    /// encoding or storage failure) stops the writer.
    pub fn append<P: IndexLike, I: IndexLike, V: CountLike>(
        &mut self,
        m: &CsrMatrix<'_, P, I, V>,
    ) -> Result<(), DatasetError> {
        self.usable()?;
        #[cfg(feature = "obs")]
        if self.obs.is_some() {
            return Err(DatasetError::InvalidArgument(format!(
                "append to {}: the dataset has obs, which goes tile by tile: add tiles with push_tile_with_obs",
                self.store.root()
            )));
        }
        if self.short_tile_pushed {
            return Err(DatasetError::InvalidArgument(format!(
                "append to {}: a tile of fewer than tile_size cells was pushed, so it is the last",
                self.store.root()
            )));
        }
        if m.n_cols != self.opts.n_genes {
            return Err(DatasetError::InvalidArgument(format!(
                "append to {}: the block has {} columns but the dataset has {} genes",
                self.store.root(),
                m.n_cols,
                self.opts.n_genes
            )));
        }
        let base = self.n_cells;
        let mut r = 0usize;
        while r < m.n_rows {
            let room = (self.opts.tile_size - self.current.n_rows() as u64) as usize;
            let take = room.min(m.n_rows - r);
            if let Err(source) = self.current.push_rows(m, r..r + take, base) {
                let e = DatasetError::Encode {
                    context: format!(
                        "append to {}: block rows {}..{} (global cells from {base})",
                        self.store.root(),
                        r,
                        r + take
                    ),
                    cause: source,
                };
                return Err(self.fail(e));
            }
            r += take;
            self.n_cells += take as u64;
            if self.current.n_rows() as u64 == self.opts.tile_size {
                self.submit_tile()?;
            }
        }
        Ok(())
    }

    /// Adds one whole tile of canonical rows (at most `tile_size`; fewer only for the last tile) and returns its
    /// index: for callers that hand over tiles one at a time and must know that a refused tile changed nothing.
    /// Refused without changing anything (the writer stays usable) for the reasons of
    /// [`DatasetWriter::check_tile`].
    pub fn push_tile(&mut self, tile: CanonicalCsr) -> Result<usize, DatasetError> {
        self.check_tile(&tile)?;
        #[cfg(feature = "obs")]
        if self.obs.is_some() {
            return Err(DatasetError::InvalidArgument(format!(
                "tile for {}: the dataset has obs; add each tile with its obs (push_tile_with_obs)",
                self.store.root()
            )));
        }
        self.take_tile(tile)
    }

    fn take_tile(&mut self, tile: CanonicalCsr) -> Result<usize, DatasetError> {
        let t = self.done.len() + self.pending.len();
        let rows = tile.n_rows() as u64;
        self.short_tile_pushed = rows < self.opts.tile_size;
        self.n_cells += rows;
        self.current = tile;
        self.submit_tile()?;
        Ok(t)
    }

    /// Whether [`DatasetWriter::push_tile`] would take `tile`: not when the writer failed, rows from
    /// [`DatasetWriter::append`] are waiting for their tile, a short tile came before, the tile is empty or larger
    /// than `tile_size`, its genes differ, or its counts do not fit the writer's version (the error names the cell
    /// and gene).
    pub fn check_tile(&self, tile: &CanonicalCsr) -> Result<(), DatasetError> {
        self.usable()?;
        let bad = |m: String| Err(DatasetError::InvalidArgument(format!("tile for {}: {m}", self.store.root())));
        let rows = tile.n_rows() as u64;
        if self.current.n_rows() > 0 {
            return bad("rows appended with append() are waiting for their tile; finish that tile first".into());
        }
        if self.short_tile_pushed {
            return bad("only the last tile may hold fewer than tile_size cells".into());
        }
        if rows == 0 || rows > self.opts.tile_size {
            return bad(format!("a tile must hold between 1 and tile_size={} cells, got {rows}", self.opts.tile_size));
        }
        if tile.n_genes != self.opts.n_genes {
            return bad(format!("the tile has {} genes but the dataset has {}", tile.n_genes, self.opts.n_genes));
        }
        let t = self.done.len() + self.pending.len();
        tile.check_version(self.encode.version, self.n_cells).map_err(|source| DatasetError::Encode {
            context: format!("tile {t} of {}", self.store.root()),
            cause: source,
        })
    }

    /// The format version being written.
    pub fn version(&self) -> Version {
        self.encode.version
    }

    /// Tiles added so far (stored, or being encoded or stored).
    pub fn n_tiles(&self) -> usize {
        self.done.len() + self.pending.len()
    }

    /// Stores a side file at `rel` now (not at [`DatasetWriter::finish`] as [`DatasetWriter::put_file`] does), for
    /// large files produced while tiles are added (obs shards), so that they need not stay in memory. The same
    /// paths are allowed; the manifest is still written last.
    pub fn store_file(&mut self, rel: &str, bytes: Bytes) -> Result<(), DatasetError> {
        self.usable()?;
        self.side.add_stored(rel)?;
        let store = self.store.clone();
        let rel = rel.to_string();
        let stored = self.rt.block_on(async move { store.put(&rel, bytes).await }).and_then(|r| r);
        stored.map_err(|e| self.fail(e.into()))
    }

    fn submit_tile(&mut self) -> Result<(), DatasetError> {
        let csr = std::mem::replace(&mut self.current, CanonicalCsr::new(self.opts.n_genes));
        let t = self.done.len() + self.pending.len();
        let first = self.n_cells - csr.n_rows() as u64;
        let job = encode_and_store(self.store.clone(), self.pool.clone(), csr, t, first, self.encode);
        self.pending.push_back(self.rt.handle().spawn(job));
        while self.pending.len() >= self.max_in_flight {
            self.wait_oldest()?;
        }
        Ok(())
    }

    fn wait_oldest(&mut self) -> Result<(), DatasetError> {
        let Some(mut job) = self.pending.pop_front() else { return Ok(()) };
        let waited = match dct_store::interrupt::wait(&mut job) {
            Ok(waited) => waited,
            Err(interrupted) => {
                // Still pending: settled with the others when the writer is dropped.
                self.pending.push_front(job);
                return Err(self.fail(interrupted.into()));
            }
        };
        let result = match waited {
            Ok(r) => r,
            Err(e) => Err(DatasetError::Internal(format!("a tile task of {} failed: {e}", self.store.root()))),
        };
        match result {
            Ok(info) => {
                self.done.push(info);
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Records the gene order (`gene_order.npy`): stored column `j` was column `order[j]` of the source. Must be
    /// a permutation of `0..n_genes`.
    pub fn set_gene_order(&mut self, order: Vec<i32>) -> Result<(), DatasetError> {
        self.usable()?;
        self.side.set_gene_order(order)
    }

    /// Records the gene names (`var_names.txt`, one per line in stored column order). Names may not contain a
    /// line break.
    pub fn set_var_names(&mut self, names: Vec<String>) -> Result<(), DatasetError> {
        self.usable()?;
        self.side.set_var_names(names)
    }

    /// Sets the manifest's free-form `metadata`.
    pub fn set_metadata(&mut self, metadata: Value) {
        self.opts.metadata = metadata;
    }

    /// Stores another file of the dataset at `rel` (e.g. `var.parquet`, `obs/schema.json`,
    /// `obs/obs_0000.parquet`) before the manifest. Storing `var.parquet` sets the manifest's `has_var_table`.
    /// The manifest, tiles and the files with setters of their own are refused.
    pub fn put_file(&mut self, rel: &str, bytes: Bytes) -> Result<(), DatasetError> {
        self.usable()?;
        self.side.add_file(rel, bytes)
    }

    /// Writes obs with the dataset: the columns of `schema`, one row group per tile, in shards of
    /// `options.tiles_per_file` tiles stored as they fill; `obs/schema.json` and the manifest's obs fields follow
    /// at [`DatasetWriter::finish`]. Call it before the first tile; every tile is then added with its obs by
    /// [`DatasetWriter::push_tile_with_obs`] ([`DatasetWriter::append`] and [`DatasetWriter::push_tile`] are
    /// refused, since obs goes tile by tile).
    #[cfg(feature = "obs")]
    pub fn set_obs_schema(
        &mut self,
        schema: dct_obs::ObsSchema,
        options: &dct_obs::ObsWriteOptions,
    ) -> Result<(), DatasetError> {
        self.usable()?;
        let root = self.store.root().to_string();
        if self.n_tiles() > 0 || self.current.n_rows() > 0 {
            return Err(DatasetError::InvalidArgument(format!(
                "obs for {root}: the obs schema must be set before the first tile"
            )));
        }
        let schema = if self.version() == Version::V1 { schema.without_order() } else { schema };
        self.obs = Some(ObsShards::new(schema, options).map_err(|e| crate::reader::obs_error(&root, e))?);
        Ok(())
    }

    /// Adds one whole tile (as [`DatasetWriter::push_tile`]) with its obs: a column per schema column (a missing
    /// column is written as missing values), `tile.n_rows()` values each. Both are checked before anything is
    /// stored: a refused tile changes nothing. Returns the tile's index.
    #[cfg(feature = "obs")]
    pub fn push_tile_with_obs(&mut self, tile: CanonicalCsr, obs: &dct_obs::TileObs) -> Result<usize, DatasetError> {
        self.check_tile(&tile)?;
        let root = self.store.root().to_string();
        let Some(shards) = self.obs.as_mut() else {
            return Err(DatasetError::InvalidArgument(format!(
                "tile for {root}: obs was given but the writer has no obs schema (set_obs_schema)"
            )));
        };
        if let Some(shard) = shards.push(obs, tile.n_rows()).map_err(|e| crate::reader::obs_error(&root, e))? {
            self.store_file(&shard.name, shard.bytes)?;
        }
        self.take_tile(tile)
    }

    /// Adds a tile already encoded (`blob`: a tile of another dataset with these genes and this version, copied
    /// without decoding it) with its obs (`None` exactly when the writer has no obs schema). Checked first
    /// (structure, CRC, genes, version, at most `tile_size` cells, no short tile before): a refused tile changes
    /// nothing. Stored as it is; returns its index.
    #[cfg(feature = "obs")]
    pub fn push_encoded_tile(&mut self, blob: Bytes, obs: Option<&dct_obs::TileObs>) -> Result<usize, DatasetError> {
        self.push_checked_tile(blob, obs, None)
    }

    /// [`DatasetWriter::push_encoded_tile`] of the tile `rel` of the location `source`, whose bytes `blob` are: stored
    /// by a hard link or a server-side copy where the two locations allow it ([`Store::copy_from`]), else by a PUT of
    /// `blob`.
    #[cfg(feature = "obs")]
    pub fn push_copied_tile(
        &mut self,
        source: &Store,
        rel: &str,
        blob: Bytes,
        obs: Option<&dct_obs::TileObs>,
    ) -> Result<usize, DatasetError> {
        self.push_checked_tile(blob, obs, Some((source.clone(), rel.to_string())))
    }

    #[cfg(feature = "obs")]
    fn push_checked_tile(
        &mut self,
        blob: Bytes,
        obs: Option<&dct_obs::TileObs>,
        source: Option<(Store, String)>,
    ) -> Result<usize, DatasetError> {
        self.usable()?;
        let root = self.store.root().to_string();
        let bad = |m: String| Err(DatasetError::InvalidArgument(format!("encoded tile for {root}: {m}")));
        let h = match dct_format::TileLayout::parse(&blob) {
            Ok(layout) => *layout.header(),
            Err(e) => return bad(format!("it is not a valid tile: {e}")),
        };
        if let Err(e) = dct_format::verify_crc(&blob, &h) {
            return bad(e.to_string());
        }
        if self.current.n_rows() > 0 || self.short_tile_pushed {
            return bad("rows appended with append(), or a short tile, come before it".into());
        }
        if u64::from(h.n_genes) != self.opts.n_genes || h.version != self.encode.version {
            return bad(format!(
                "it has {} genes (version {}); the dataset {} (version {})",
                h.n_genes,
                h.version.number(),
                self.opts.n_genes,
                self.encode.version.number()
            ));
        }
        if h.n_cells == 0 || h.n_cells > self.opts.tile_size {
            return bad(format!("it holds {} cells; a tile holds 1 to {}", h.n_cells, self.opts.tile_size));
        }
        match (self.obs.as_mut(), obs) {
            (Some(shards), Some(obs)) => {
                if let Some(shard) =
                    shards.push(obs, h.n_cells as usize).map_err(|e| crate::reader::obs_error(&root, e))?
                {
                    self.store_file(&shard.name, shard.bytes)?;
                }
            }
            (None, None) => {}
            _ => return bad("obs is given exactly when the writer has an obs schema".into()),
        }
        let t = self.done.len() + self.pending.len();
        self.short_tile_pushed = h.n_cells < self.opts.tile_size;
        self.n_cells += h.n_cells;
        let store = self.store.clone();
        let stats = TileStats { cells: h.n_cells, nnz: h.nnz, bytes: blob.len() as u64 };
        let job = async move {
            let name = tile_path(t);
            if let Some((source, rel)) = source
                && store.copy_from(&source, &rel, &name).await?
            {
                return Ok(stats);
            }
            store.put(&name, blob).await.map(|()| stats).map_err(DatasetError::from)
        };
        self.pending.push_back(self.rt.handle().spawn(job));
        while self.pending.len() >= self.max_in_flight {
            self.wait_oldest()?;
        }
        Ok(t)
    }

    /// Stores the last (short) tile, waits for every tile, stores the side files and then `manifest.json`, and
    /// returns the manifest written.
    pub fn finish(mut self) -> Result<Manifest, DatasetError> {
        self.usable()?;
        if self.current.n_rows() > 0 {
            self.submit_tile()?;
        }
        while !self.pending.is_empty() {
            self.wait_oldest()?;
        }
        let obs = self.finish_obs()?;
        let manifest = self.build_manifest(obs);
        let (store, side) = (self.store.clone(), std::mem::take(&mut self.side));
        let finished = self
            .rt
            .block_on(async move { finish_dataset(&store, manifest, side).await })
            .map_err(DatasetError::from)
            .and_then(|r| r);
        finished.map_err(|e| self.fail(e))
    }

    /// Stores the last obs shard and puts `obs/schema.json` with the side files; returns the manifest's obs
    /// fields (`None` without obs).
    #[cfg(feature = "obs")]
    fn finish_obs(&mut self) -> Result<Option<crate::manifest::ObsFields>, DatasetError> {
        let Some(shards) = self.obs.take() else { return Ok(None) };
        let root = self.store.root().to_string();
        if shards.n_tiles() != self.n_tiles() {
            return Err(DatasetError::Internal(format!(
                "{root}: {} tiles but obs for {}",
                self.n_tiles(),
                shards.n_tiles()
            )));
        }
        let (last, summary) = shards.finish().map_err(|e| self.fail(crate::reader::obs_error(&root, e)))?;
        if let Some(shard) = last {
            self.store_file(&shard.name, shard.bytes)?;
        }
        self.side.add_file(crate::manifest::OBS_SCHEMA_NAME, Bytes::from(summary.schema_json.into_bytes()))?;
        Ok(Some(summary.fields))
    }

    #[cfg(not(feature = "obs"))]
    fn finish_obs(&mut self) -> Result<Option<crate::manifest::ObsFields>, DatasetError> {
        Ok(None)
    }

    fn build_manifest(&self, obs: Option<crate::manifest::ObsFields>) -> Manifest {
        let settings = ManifestSettings {
            version: self.encode.version,
            n_genes: self.opts.n_genes,
            tile_size: self.opts.tile_size,
            n_chunks: self.opts.n_chunks as u64,
            zstd_level: i64::from(self.encode.base_level()),
        };
        Manifest::build(settings, &self.done, obs, self.opts.metadata.clone())
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        self.settle_pending();
    }
}

async fn encode_and_store(
    store: Store,
    pool: Arc<rayon::ThreadPool>,
    csr: CanonicalCsr,
    t: usize,
    first: u64,
    encode: EncodeOptions,
) -> Result<TileStats, DatasetError> {
    let cells = csr.n_rows() as u64;
    let nnz = csr.nnz() as u64;
    let context = || format!("tile {t} (cells {first}..{}) of {}", first + cells, store.root());
    let blob = on_pool(&pool, move || encode_canonical(&csr, &encode))
        .await
        .map_err(|m| DatasetError::Internal(format!("{}: {m}", context())))?
        .map_err(|source| DatasetError::Encode { context: context(), cause: source })?;
    let bytes = blob.len() as u64;
    store.put(&tile_path(t), Bytes::from(blob)).await?;
    Ok(TileStats { cells, nnz, bytes })
}

/// Refuses a destination holding files (unless `overwrite`); with `overwrite`, deletes the old manifest first,
/// then the old dataset's files.
async fn prepare_destination(store: &Store, overwrite: bool) -> Result<(), DatasetError> {
    // Temporary files of writes killed before their rename are not objects: they do not refuse the location
    // (`first_object` passes over them), and go once it is ours (only a dataset's own: a refused location is left
    // as it was).
    if let Some(first) = store.first_object().await? {
        if !overwrite {
            return Err(DatasetError::AlreadyExists { url: store.root().to_string(), example: first.path });
        }
        store.delete(MANIFEST_NAME).await?;
        for object in store.list("").await? {
            // The append's objects stay: an append that was under way is resumed or cleared by the converter.
            let ours = is_dataset_object(&object.path)
                && ![APPEND_JOURNAL_NAME, APPEND_STAGING_DIR].iter().any(|a| object.path.starts_with(a));
            if ours {
                store.delete(&object.path).await?;
            }
        }
    }
    store.remove_leftovers("", is_dataset_object).await?;
    Ok(())
}
