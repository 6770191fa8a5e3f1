//! Random access to the cells of a dataset: [`Dataset`] (see its docs for threading, caching and checks).
//!
//! The reader's parts, one per file: [`options`] (settings and counters), [`open`] (the manifest fetched once,
//! and reopening with other options), [`batch`] (the rows handed out), [`slot`] (batches read into a caller's
//! reusable memory), [`cache`] (the decoded-tile LRU), [`load`] (the state shared with background tasks, and
//! fetching and checking tiles), [`decode`] (decoding tiles, on the caller's threads or in the background, and
//! reusing their buffers), and `obs` (the bridge to `dct-obs`). Side
//! files (`var_names.txt`, `gene_order.npy`) are parsed by [`crate::side_files`].

mod batch;
mod budget;
mod cache;
mod decode;
mod load;
mod mapped;
#[cfg(feature = "obs")]
mod obs;
mod open;
mod options;
mod slot;

pub use batch::Batch;
pub use budget::{
    BATCH_BYTES_PER_CELL, BATCH_BYTES_PER_NONZERO, BATCH_SLOT_GRANULE, DECODED_BYTES_PER_NONZERO, HeldBatches,
    PLAN_BYTES_ALWAYS_ALLOWED, PLAN_BYTES_PER_CELL, TileBudget, batch_slot_bytes,
};
pub(crate) use load::Core;
#[cfg(feature = "obs")]
pub(crate) use obs::{decode_var_table, obs_error, obs_manifest};
pub use open::ReaderThreads;
pub use options::{ReadOptions, ReadStats};
pub use slot::{SLOT_HEADER, SlotChooser, SlotFill, SlotLayout, SlotValue, read_into_slot};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dct_codec::{CountValue, DecodeError, TilePlanes, WriteMode};
use dct_format::{CellIndex, CellOutOfRange};

use crate::error::DatasetError;
use crate::manifest::{GENE_ORDER_NAME, Manifest, VAR_NAMES_NAME};
use crate::side_files::{checked_side_file, gene_order_limit, parse_gene_order, parse_var_names};
use dct_store::Store;
use dct_store::runtime::Runtime as Rt;
use load::{Acquired, Keep, Requester};

/// Distinct tiles of a request, and `(index in that list, local row)` per requested cell.
type Plan = (Vec<usize>, Vec<(u32, u64)>);

/// A dataset opened for reading.
///
/// # Threading model
///
/// * A [`Dataset`] owns a small tokio runtime (`io_threads` workers, named `dct-io`) on which every object-store
///   request runs, a rayon pool (`decode_threads` workers, named `dct-decode`) on which reads decode tiles (the
///   chunks of one tile in parallel) and fill batches (with `decode_threads = 1`, reads do both on their calling
///   thread, and loads check tiles on the runtime's blocking threads), and, once something is prefetched, a
///   background decoder (one blocking task of the runtime plus `decode_threads - 1` helpers named
///   `dct-decode-bg-N`).
/// * Every public method is synchronous: it blocks the calling thread until its result is ready. It may be
///   called from any thread, from many threads at once (`Dataset: Send + Sync`; share it with an `Arc`), and
///   from inside another async runtime (it then blocks that runtime's thread, so prefer `spawn_blocking` there).
///   Concurrent [`Dataset::get_batch`] calls run in parallel: they share the tile cache and never fetch the same
///   tile twice at the same time.
/// * [`Dataset::prefetch`] returns at once; the tiles are fetched (at most `max_prefetch_tiles` at a time) and
///   decoded in the background, one at a time in the order they were asked for, then kept in the cache for the
///   next batch. Background decodes run while no read is decoding or filling a batch (between batches, and while
///   reads wait for fetches): a read that needs a prefetched tile not yet decoded decodes it itself, so it waits
///   for at most the one background decode in progress.
///
/// # Caching
///
/// Tiles are kept decompressed, as their byte planes ([`TilePlanes`], about 4 bytes per nonzero), in an LRU cache
/// of at most `max_cached_tiles` tiles (0 disables it: every batch then fetches its tiles); each requested row is
/// decoded from them straight into the batch, so the per-nonzero work is done once per served row and zstd once
/// per tile. A tile whose decode starts in a full cache first evicts a tile, and the decode reuses its buffers:
/// the tiles done with go first (read by an earlier batch and not named by the latest [`Dataset::prefetch`]
/// request, least recently used first), then read tiles that request names again, then tiles decoded ahead and
/// not read yet (the one asked for last first), and the latest batch's tiles last. Prefetched tiles wait, fetched
/// and checked but compressed, outside that count; the background decoder decodes them ahead only into free
/// places or the places of tiles done with, so a prefetch running ahead never evicts the tiles being read (with
/// cells shuffled across a window of tiles, each batch reads most of the window's; name the window's tiles first
/// in each prefetch request). A tile being fetched is shared by every caller that needs it. A failed fetch or
/// decode is never cached: the next request tries again.
///
/// # Checks
///
/// Every fetched tile is checked against the manifest before use: object size equal to `tile_bytes`, header
/// version, `n_cells`, `nnz` and `n_genes` equal to the manifest's; then it is decoded with every rule of the
/// format checked (and the CRC, unless `verify_crc` is off): the structure, frames and exceptions when it is
/// decompressed, each row's gaps and counts when the row is decoded (a tile with a bad row then leaves the cache).
/// Errors name the tile index and the object's URL.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), dct_dataset::DatasetError> {
/// use dct_dataset::{Dataset, ReadOptions, SparseRows};
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/conformance/datasets/v2_with_obs");
/// let ds = Dataset::open(dir, ReadOptions::default())?;
/// let batch = ds.get_batch(&[349, 0, 150, 0])?; // any cells, any order, repeats allowed
/// assert_eq!(batch.n_rows(), 4);
/// assert_eq!(batch.row(1), batch.row(3));
/// # Ok(()) }
/// ```
pub struct Dataset {
    core: Arc<Core>,
    /// The I/O runtime, shared by the readers made with [`Dataset::reopened_sharing`].
    rt: Arc<Rt>,
}

impl Drop for Dataset {
    fn drop(&mut self) {
        // The background decoder holds the core: without this it would decode every queued prefetch for a reader
        // that is gone. It stops after the tile in progress, which dropping the runtime does not wait for (it only
        // reads: the core, and the tiles it maps, go when that tile is done).
        self.core.lock_to_decode().clear();
    }
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("url", &self.core.store.root())
            .field("n_cells", &self.core.manifest.n_cells)
            .field("n_genes", &self.core.manifest.n_genes)
            .field("n_tiles", &self.core.manifest.n_tiles())
            .finish_non_exhaustive()
    }
}

impl Dataset {
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    pub(crate) fn rt(&self) -> &Rt {
        &self.rt
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.core.manifest
    }

    /// Where the dataset is (the URL or absolute path it was opened with).
    pub fn url(&self) -> &str {
        self.core.store.root()
    }

    /// The store the dataset is read from.
    pub fn store(&self) -> &Store {
        &self.core.store
    }

    /// Cells (rows).
    pub fn n_cells(&self) -> u64 {
        self.core.manifest.n_cells
    }

    /// Genes (columns).
    pub fn n_genes(&self) -> u64 {
        self.core.manifest.n_genes
    }

    /// Tiles.
    pub fn n_tiles(&self) -> usize {
        self.core.manifest.n_tiles()
    }

    /// The cell index (cumulative cell counts per tile).
    pub fn cell_index(&self) -> &CellIndex {
        &self.core.index
    }

    /// Cumulative cell counts, one per tile (`limits[i]` = cells in tiles `0..=i`).
    pub fn limits(&self) -> &[u64] {
        self.core.index.limits()
    }

    /// Global cell range `[lo, hi)` of tile `tile`, or `None` past the last tile.
    pub fn tile_bounds(&self, tile: usize) -> Option<(u64, u64)> {
        self.core.index.tile_bounds(tile)
    }

    /// `(tile, local row)` of global cell `cell`, or `None` if it does not exist.
    pub fn locate(&self, cell: u64) -> Option<(usize, u64)> {
        self.core.index.locate(cell)
    }

    /// The tile holding global cell `cell`, or `None` if it does not exist.
    pub fn tile_of(&self, cell: u64) -> Option<usize> {
        self.core.index.locate(cell).map(|(t, _)| t)
    }

    /// The counters so far.
    pub fn stats(&self) -> ReadStats {
        let c = &self.core.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReadStats {
            tiles_fetched: get(&c.tiles_fetched),
            bytes_fetched: get(&c.bytes_fetched),
            failed_loads: get(&c.failed_loads),
            cache_hits: get(&c.cache_hits),
            inflight_joins: get(&c.inflight_joins),
            cache_misses: get(&c.cache_misses),
            prefetched: get(&c.prefetched),
            fetch_time: Duration::from_nanos(get(&c.fetch_nanos)),
            check_time: Duration::from_nanos(get(&c.check_nanos)),
            tiles_decoded: get(&c.tiles_decoded),
            decode_time: Duration::from_nanos(get(&c.decode_nanos)),
            stall_time: Duration::from_nanos(get(&c.stall_nanos)),
        }
    }

    /// Sets every counter to zero.
    pub fn reset_stats(&self) {
        let c = &self.core.counters;
        for a in [
            &c.tiles_fetched,
            &c.bytes_fetched,
            &c.failed_loads,
            &c.cache_hits,
            &c.inflight_joins,
            &c.cache_misses,
            &c.prefetched,
            &c.tiles_decoded,
            &c.fetch_nanos,
            &c.decode_nanos,
            &c.check_nanos,
            &c.stall_nanos,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// The rows of `cells` (global indices, any order, repeats allowed) with `f32` counts.
    pub fn get_batch(&self, cells: &[u64]) -> Result<Batch<f32>, DatasetError> {
        self.get_batch_as(cells)
    }

    /// The rows of `cells` with counts of type `V` (e.g. `ds.get_batch_as::<u32>(&cells)`).
    pub fn get_batch_as<V: CountValue>(&self, cells: &[u64]) -> Result<Batch<V>, DatasetError> {
        let mut out = Batch::default();
        self.get_batch_into(cells, &mut out)?;
        Ok(out)
    }

    /// The rows of `cells` into `out`, reusing its allocations. On error `out` is left empty or partly
    /// filled.
    pub fn get_batch_into<V: CountValue>(&self, cells: &[u64], out: &mut Batch<V>) -> Result<(), DatasetError> {
        out.n_genes = self.core.manifest.n_genes;
        let (indices, values) = (&mut out.indices, &mut out.values);
        let filled = self.read_rows(cells, &mut out.indptr, |total| {
            // Sized without clearing first: only a batch larger than any before writes the fill values.
            dct_codec::resize_for_overwrite(indices, total, 0);
            dct_codec::resize_for_overwrite(values, total, V::default());
            Ok((indices.as_mut_slice(), values.as_mut_slice()))
        });
        if filled.is_err() {
            out.indptr.truncate(1);
            out.indices.clear();
            out.values.clear();
        }
        filled.map(|_| ())
    }

    /// The rows of `cells` into the caller's buffers (shared or pinned memory, say): row offsets into `indptr`
    /// (`cells.len() + 1` entries from 0), gene indices and counts into the first `nnz` elements of `indices` and
    /// `values`, which must hold at least that many (else [`DatasetError::InvalidArgument`], before anything is
    /// decoded; [`Dataset::batch_nnz`] gives the size beforehand). Elements past `nnz` are left as they were.
    /// Returns `nnz`.
    pub fn get_batch_to<V: CountValue>(
        &self,
        cells: &[u64],
        indptr: &mut Vec<i64>,
        indices: &mut [i32],
        values: &mut [V],
    ) -> Result<usize, DatasetError> {
        self.read_rows(cells, indptr, |total| {
            let short = [(indices.len(), "indices"), (values.len(), "values")];
            if let Some((len, name)) = short.into_iter().find(|&(len, _)| len < total) {
                return Err(DatasetError::InvalidArgument(format!(
                    "the {name} buffer holds {len} elements but the batch has {total} nonzeros ({}); pass one at \
                     least that long (batch_nnz gives the size)",
                    self.url()
                )));
            }
            Ok((&mut indices[..total], &mut values[..total]))
        })
    }

    /// Reads the rows of `cells`: fills `indptr`, asks `output` for the `nnz`-long index and value slices to fill,
    /// fills them; returns `nnz`.
    fn read_rows<'o, V: CountValue>(
        &self,
        cells: &[u64],
        indptr: &mut Vec<i64>,
        output: impl FnOnce(usize) -> Result<(&'o mut [i32], &'o mut [V]), DatasetError>,
    ) -> Result<usize, DatasetError> {
        self.with_decoded_rows(cells, |decoded, rows| {
            let total = stored_offsets(decoded, rows, indptr);
            let (indices, values) = output(total).map_err(RowFailure::Read)?;
            // Each row is decoded from its tile's planes straight into its place in the batch (and checked as it
            // is), rows split between the decode threads.
            // A batch larger than the caches is written with streaming stores (see `WriteMode`).
            let mode = WriteMode::for_output_bytes((total * (4 + size_of::<V>())) as u64);
            self.core
                .on_decode_threads(|parallel| fill_rows(decoded, rows, indptr, indices, values, mode, parallel))
                .map_err(|(s, e)| RowFailure::Row(s, e))?;
            Ok(total)
        })
    }

    /// Waits for the tiles of `cells` decoded and runs `body` over them and each cell's `(index in them, local
    /// row)`, with the decode threads to itself. A bad row's tile leaves the cache (the next read fetches it
    /// again) and is named in the error.
    pub(super) fn with_decoded_rows<R>(
        &self,
        cells: &[u64],
        body: impl FnOnce(&[Arc<TilePlanes>], &[(u32, u64)]) -> Result<R, RowFailure>,
    ) -> Result<R, DatasetError> {
        let (tiles, rows) = self.plan(cells)?;
        // Marked before they are waited for: tiles loaded meanwhile make room with the previous batches' tiles.
        self.core.lock_cache().mark_read(&tiles);
        let loaded = self.core.wait_tiles(&tiles, Keep::Decoded)?;
        // From here until the batch is filled this read has the decode threads to itself: background decodes of
        // tiles needed later wait (a read that needs a queued tile decodes it itself).
        let busy = self.core.busy_reader();
        let decoded: Vec<Arc<TilePlanes>> =
            loaded.iter().zip(&tiles).map(|(tile, &t)| self.core.ensure_decoded(t, tile)).collect::<Result<_, _>>()?;
        let result = match body(&decoded, &rows) {
            Ok(result) => Ok(result),
            // The read itself stopped (a caller's buffer too small, say): the tiles are as good as after a batch.
            Err(RowFailure::Read(e)) => Err(e),
            Err(RowFailure::Row(s, e)) => {
                self.core.lock_cache().remove_ready(tiles[s], &loaded[s]);
                return Err(self.core.decode_error(tiles[s], e));
            }
        };
        // Tiles that left the cache while this batch used them end here: keep their buffers.
        drop(loaded);
        decoded.into_iter().for_each(|d| self.core.recycle_decoded(d));
        drop(busy);
        // This batch may have made room to decode ahead (see `Core::decode_in_background`).
        if !self.core.lock_to_decode().is_empty() {
            self.core.decode_in_background();
        }
        result
    }

    /// Total stored nonzeros of the rows of `cells` (with repeats), from the tiles' indptrs: tiles not yet
    /// loaded are fetched (and kept in the cache) but not decoded.
    pub fn batch_nnz(&self, cells: &[u64]) -> Result<u64, DatasetError> {
        let mut lengths = Vec::new();
        self.row_nnz_into(cells, &mut lengths)?;
        Ok(lengths.iter().sum())
    }

    /// Starts fetching and decoding `tiles` in the background and returns at once, with the number of tiles whose
    /// loading it started. Tiles already cached or being fetched are skipped; at most `max_prefetch_tiles` are
    /// fetched at a time (the rest wait their turn, unless a read needs them first). Prefetched tiles enter the
    /// cache, so prefetch at most `max_cached_tiles` ahead. The first request after a batch says which tiles are
    /// wanted, the soonest needed first (later requests before the next batch add to it): those the batches read
    /// are kept before the tiles done with (see "Caching").
    pub fn prefetch(&self, tiles: &[usize]) -> Result<usize, DatasetError> {
        let n = self.n_tiles();
        if let Some(&t) = tiles.iter().find(|&&t| t >= n) {
            return Err(DatasetError::InvalidArgument(format!(
                "prefetch of tile {t}: the dataset has {n} tiles ({})",
                self.url()
            )));
        }
        self.core.lock_cache().want(tiles);
        let started = tiles
            .iter()
            .filter(|&&t| matches!(self.core.acquire(t, Keep::Decoded, Requester::Prefetch), Acquired::Started(_)));
        Ok(started.count())
    }

    /// Drops every cached tile (decoded, or fetched and waiting to be decoded) but those of `keep`, and returns how
    /// many it dropped; loads in flight go on. For a caller that reads many datasets in turn (a corpus's loader)
    /// and so knows which tiles of this one it will not need soon: their memory is given back now instead of when
    /// this reader next needs the room.
    pub fn release_tiles_except(&self, keep: &[usize]) -> usize {
        let released = self.core.lock_cache().release_except(keep);
        let n = released.len();
        released.into_iter().for_each(|tile| self.core.recycle_tile(tile));
        n
    }

    /// Tells the cache the order in which the pass beginning now and the one after it (a training loop's epoch
    /// and the next) first read their tiles, replacing any orders given before. When the cache is full, of the
    /// tiles no batch still needs it evicts first those neither pass reads, then the one read last from now on,
    /// instead of the least recently used: with a new shuffle each epoch, a cache holding `C` of `N` tiles then
    /// decodes about `N - C` tiles an epoch instead of nearly `N`. Each tile is taken to be read in one stretch of
    /// a pass (one window an epoch), as [`crate::EpochPlan::tile_order`] lists them; a wrong order costs only
    /// cache hits.
    pub fn plan_passes(&self, this_pass: &[usize], next_pass: &[usize]) {
        self.core.lock_cache().plan_passes(this_pass, next_pass);
    }

    /// The tiles the cache holds (decoded, or fetched and waiting to be decoded), in no particular order.
    pub fn cached_tiles(&self) -> Vec<usize> {
        self.core.lock_cache().lru.values().copied().collect()
    }

    /// Keeps the buffers of up to `tiles` decoded tiles given back ([`Dataset::release_tiles_except`]) for the next
    /// decodes, shared with the readers this one shares its threads with, instead of the 2 a reader keeps: for a
    /// caller that gives back a window's tiles at once and decodes the next window's, which would otherwise touch
    /// as much fresh memory. The caller counts them within its budget.
    pub fn keep_spare_tiles(&self, tiles: usize) {
        self.core.scratch.spare_room.store(tiles, Ordering::Relaxed);
    }

    /// Runs `f` on this reader's decode threads (where rayon's parallel iterators in `f` then run), or on the
    /// calling thread with one decode thread; `f` is told whether it may split its work. For callers that split
    /// work of their own over what they read: rayon's global pool has no threads in a process forked after it
    /// started (a DataLoader worker), so work given to it there never runs, while a reader opened in the worker
    /// has threads of its own.
    pub fn on_decode_threads<R: Send>(&self, f: impl FnOnce(bool) -> R + Send) -> R {
        self.core.on_decode_threads(f)
    }

    /// The decoded tiles the cache holds at most ([`ReadOptions::max_cached_tiles`]).
    pub fn max_cached_tiles(&self) -> usize {
        self.core.max_cached
    }

    /// [`Dataset::release_tiles_except`], without keeping the released tiles' buffers for this reader's next
    /// decodes: for a caller that bounds the decoded tiles many readers hold together (a corpus's tile cap), where
    /// each reader's spare buffers would add up with the number of readers.
    pub fn drop_tiles_except(&self, keep: &[usize]) -> usize {
        let released = self.core.lock_cache().release_except(keep);
        released.len()
    }

    /// Starts fetching the tiles holding `cells` (see [`Dataset::prefetch`]); returns the number of tiles whose
    /// loading it started.
    pub fn prefetch_cells(&self, cells: &[u64]) -> Result<usize, DatasetError> {
        let (tiles, _) = self.plan(cells)?;
        self.prefetch(&tiles)
    }

    /// The raw bytes of tile `tile`, fetched now (not cached), after the size and header checks against the
    /// manifest (but not decoded).
    pub fn fetch_tile_bytes(&self, tile: usize) -> Result<Bytes, DatasetError> {
        self.check_tile(tile)?;
        let core = self.core.clone();
        self.rt.block_on(async move { core.fetch_checked(tile).await })?
    }

    /// The gene names (`var_names.txt`, one per gene in stored column order), or `None` if the dataset has
    /// none. Read once, then kept.
    pub fn var_names(&self) -> Result<Option<Arc<Vec<String>>>, DatasetError> {
        if !self.core.manifest.has_var_names {
            return Ok(None);
        }
        let mut slot = self.core.var_names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = &*slot {
            return Ok(Some(v.clone()));
        }
        let bytes = self.side_file(VAR_NAMES_NAME, self.core.max_side_file_bytes)?;
        let names = parse_var_names(&bytes, self.n_genes())
            .map_err(|message| DatasetError::SideFile { url: self.core.store.url(VAR_NAMES_NAME), message })?;
        let names = Arc::new(names);
        *slot = Some(names.clone());
        Ok(Some(names))
    }

    /// The gene order (`gene_order.npy`: stored column `j` was column `gene_order[j]` of the source), or `None`
    /// if the dataset has none. Checked to be a permutation of `0..n_genes`. Read once, then kept.
    pub fn gene_order(&self) -> Result<Option<Arc<Vec<i32>>>, DatasetError> {
        if !self.core.manifest.has_gene_order {
            return Ok(None);
        }
        let mut slot = self.core.gene_order.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = &*slot {
            return Ok(Some(v.clone()));
        }
        let bytes = self.side_file(GENE_ORDER_NAME, gene_order_limit(self.n_genes()))?;
        let order = parse_gene_order(&bytes, self.n_genes())
            .map_err(|message| DatasetError::SideFile { url: self.core.store.url(GENE_ORDER_NAME), message })?;
        let order = Arc::new(order);
        *slot = Some(order.clone());
        Ok(Some(order))
    }

    /// How the dataset differs from the one this reader opened (its manifest read again now; an append under way
    /// counts), or `None` if it does not. For a caller that failed to read an object of the dataset (an obs shard
    /// whose size or contents disagree with the manifest) and wants to tell a dataset changed since it was opened
    /// from a damaged one.
    pub fn change_since_open(&self) -> Result<Option<String>, DatasetError> {
        let core = self.core.clone();
        Ok(self.rt.block_on(async move { core.change_since_open(true).await })?)
    }

    /// The URL of the journal of an append under way, or stopped before its manifest (one HEAD request), if there
    /// is one: until that append ends, or is run again to completion, its last tile may not match the manifest.
    pub fn append_journal(&self) -> Result<Option<String>, DatasetError> {
        let core = self.core.clone();
        let found = self.rt.block_on(async move { core.store.exists(crate::manifest::APPEND_JOURNAL_NAME).await })?;
        Ok(found?.then(|| self.core.store.url(crate::manifest::APPEND_JOURNAL_NAME)))
    }

    /// Reads side file `rel` (at most `limit` bytes), then checks that the dataset is still the one this reader
    /// opened (its manifest read again): side files are read when first asked for, and a dataset written again
    /// since would give names or a table of other genes than its tiles. [`DatasetError::FileChanged`] if not.
    fn side_file(&self, rel: &'static str, limit: u64) -> Result<Bytes, DatasetError> {
        let core = self.core.clone();
        let (got, change) = self.rt.block_on(async move {
            let got = core.store.get_limited(rel, limit).await;
            let change = if got.is_ok() { core.change_since_open(false).await } else { None };
            (got, change)
        })?;
        if let Some(message) = change {
            return Err(DatasetError::FileChanged { url: self.core.store.url(rel), message });
        }
        checked_side_file(&self.core.store, &self.core.manifest, rel, limit, got)
    }

    fn check_tile(&self, tile: usize) -> Result<(), DatasetError> {
        if tile >= self.n_tiles() {
            return Err(DatasetError::InvalidArgument(format!(
                "tile {tile} does not exist: {} has {} tiles",
                self.url(),
                self.n_tiles()
            )));
        }
        Ok(())
    }

    /// Distinct tiles in order of first use, and `(slot in that list, local row)` per requested cell.
    fn plan(&self, cells: &[u64]) -> Result<Plan, DatasetError> {
        let index = &self.core.index;
        let mut tiles = Vec::new();
        // A batch of a shuffled window touches a few tiles: a scan of those is several times faster than hashing
        // each cell's tile. Past `SCANNED_TILES` (one window over every tile) the tiles go into a map.
        let mut slot_of: HashMap<usize, u32> = HashMap::new();
        let mut rows = Vec::with_capacity(cells.len());
        for (position, &cell) in cells.iter().enumerate() {
            let out_of_range = || CellOutOfRange { cell: i128::from(cell), position, n_cells: index.n_cells() };
            let (t, r) = index.locate(cell).ok_or_else(out_of_range)?;
            let s = if tiles.len() <= SCANNED_TILES {
                match tiles.iter().position(|&u| u == t) {
                    Some(s) => s as u32,
                    None => {
                        tiles.push(t);
                        if tiles.len() > SCANNED_TILES {
                            slot_of.extend(tiles.iter().enumerate().map(|(s, &u)| (u, s as u32)));
                        }
                        (tiles.len() - 1) as u32
                    }
                }
            } else {
                *slot_of.entry(t).or_insert_with(|| {
                    tiles.push(t);
                    (tiles.len() - 1) as u32
                })
            };
            rows.push((s, r));
        }
        Ok((tiles, rows))
    }
}

/// The distinct tiles of a batch [`Dataset::plan`] finds by scanning them; past this many it keeps a map.
const SCANNED_TILES: usize = 16;

/// Why a read over decoded tiles stopped: an error of the read itself, or a bad row of tile `.0` (an index in the
/// decoded tiles).
pub(super) enum RowFailure {
    Read(DatasetError),
    Row(usize, DecodeError),
}

/// Fills `indptr` with the offsets of `rows` laid end to end at their stored nonzeros; returns the total.
pub(super) fn stored_offsets(decoded: &[Arc<TilePlanes>], rows: &[(u32, u64)], indptr: &mut Vec<i64>) -> usize {
    indptr.clear();
    indptr.reserve(rows.len() + 1);
    indptr.push(0);
    let mut total = 0usize;
    for &(s, r) in rows {
        total += decoded[s as usize].row_nnz(r as usize);
        indptr.push(total as i64);
    }
    total
}

/// Decodes the requested rows (`(index in decoded, local row)`) into `indices`/`values` at the offsets of `indptr`
/// (one more entry than rows, starting at the first row's offset); `parallel`: splitting the rows in halves with
/// `rayon::join` down to a few hundred rows each. The error names the tile (index in `decoded`) of a bad row.
fn fill_rows<V: CountValue>(
    decoded: &[Arc<TilePlanes>],
    rows: &[(u32, u64)],
    indptr: &[i64],
    indices: &mut [i32],
    values: &mut [V],
    mode: WriteMode,
    parallel: bool,
) -> Result<(), (usize, DecodeError)> {
    const MIN_ROWS: usize = 256;
    if !parallel || rows.len() <= MIN_ROWS {
        let base = indptr[0];
        for (j, &(s, r)) in rows.iter().enumerate() {
            if let Some(&(s, r)) = rows.get(j + 1) {
                decoded[s as usize].prefetch_row(r as usize);
            }
            let (a, b) = ((indptr[j] - base) as usize, (indptr[j + 1] - base) as usize);
            decoded[s as usize]
                .row_to_with(r as usize, &mut indices[a..b], &mut values[a..b], mode)
                .map_err(|e| (s as usize, e))?;
        }
        return Ok(());
    }
    let mid = rows.len() / 2;
    let cut = (indptr[mid] - indptr[0]) as usize;
    let (li, ri) = indices.split_at_mut(cut);
    let (lv, rv) = values.split_at_mut(cut);
    let (a, b) = rayon::join(
        || fill_rows(decoded, &rows[..mid], &indptr[..=mid], li, lv, mode, true),
        || fill_rows(decoded, &rows[mid..], &indptr[mid..], ri, rv, mode, true),
    );
    a.and(b)
}

#[cfg(test)]
pub(super) mod tests;
