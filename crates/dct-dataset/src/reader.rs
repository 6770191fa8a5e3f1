//! Random access to the cells of a dataset: [`Dataset`] (see its docs for threading, caching and checks).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dct_codec::{CountValue, DecodeError, DecodeOptions, DecodedTile, Decoder, TilePlanes, WriteMode};
use dct_format::{CellIndex, TileHeader, TileLayout};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::{Category, DatasetError, ManifestError};
use crate::manifest::{
    DEFAULT_MAX_MANIFEST_BYTES, GENE_ORDER_NAME, MANIFEST_NAME, Manifest, VAR_NAMES_NAME, tile_path,
};
use crate::rt::{default_threads, on_pool};
use dct_store::runtime::Runtime as Rt;
use dct_store::{Store, StoreError, StoreOptions};

/// Settings of a [`Dataset`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Decoded tiles kept in the LRU cache (default 16; 0 disables caching). Prefetched tiles waiting to be
    /// decoded do not count (`max_prefetch_tiles` bounds them); tiles [`Dataset::batch_nnz`] loaded without
    /// decoding do. For an epoch that reads each tile by consecutive batches, 2 is enough (the tile being read
    /// and one decoded ahead); a larger cache pays off when batches come back to tiles.
    pub max_cached_tiles: usize,
    /// Prefetched tiles being fetched or waiting, fetched, to be decoded (default 4; 0 counts as 1); more wait
    /// their turn, in the order they were asked for. As many buffers of decoded tiles that left the cache are kept
    /// for reuse, so memory peaks at about `max_cached_tiles + max_prefetch_tiles + 2` decoded tiles (about 4 bytes
    /// per nonzero each, the decompressed planes) plus `max_prefetch_tiles` compressed ones.
    pub max_prefetch_tiles: usize,
    /// Threads decoding tiles (default 0 = the machine's parallelism): the pool on which reads decode and fill
    /// batches. With 1, each read decodes on its calling thread instead, so reads from several threads (say, one
    /// per data-loading thread) run in parallel, a core each. The background decoder of prefetched tiles has as
    /// many threads of its own; it starts a tile only while no read is decoding or filling a batch.
    pub decode_threads: usize,
    /// Threads running object-store requests (default 2; requests are async, so a few threads keep many in
    /// flight).
    pub io_threads: usize,
    /// Check each tile's CRC-32 before decoding it (default `true`).
    pub verify_crc: bool,
    /// Largest `manifest.json` read (default [`DEFAULT_MAX_MANIFEST_BYTES`], 256 MiB).
    pub max_manifest_bytes: u64,
    /// Largest `var_names.txt` read (default 256 MiB).
    pub max_side_file_bytes: u64,
    /// Configuration of cloud backends.
    pub store: StoreOptions,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_cached_tiles: 16,
            max_prefetch_tiles: 4,
            decode_threads: 0,
            io_threads: 2,
            verify_crc: true,
            max_manifest_bytes: DEFAULT_MAX_MANIFEST_BYTES,
            max_side_file_bytes: 256 << 20,
            store: StoreOptions::default(),
        }
    }
}

/// Counters of a [`Dataset`] since it was opened (or since [`Dataset::reset_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Tile GET requests issued (by reads, prefetches and [`Dataset::fetch_tile_bytes`]).
    pub tiles_fetched: u64,
    /// Bytes of tile objects received.
    pub bytes_fetched: u64,
    /// Tile loads that failed (missing, wrong size or header, corrupt, I/O error).
    pub failed_loads: u64,
    /// Tiles a read found ready in the cache.
    pub cache_hits: u64,
    /// Tiles a read found being loaded (usually by a prefetch) and waited for.
    pub inflight_joins: u64,
    /// Tiles a read had to start loading itself.
    pub cache_misses: u64,
    /// Tiles a prefetch started loading.
    pub prefetched: u64,
    /// Wall time of tile GET requests, summed over requests (requests in flight at the same time each count in
    /// full).
    pub fetch_time: Duration,
    /// Tiles decoded (decompressed into their byte planes for the cache).
    pub tiles_decoded: u64,
    /// Wall time spent decompressing tiles, summed over tiles (loads running at the same time each count in
    /// full). Decoding the requested rows into batches is not included: it is part of each `get_batch` call.
    pub decode_time: Duration,
    /// Time reads spent blocked waiting for tiles to arrive (fetch and background decode), summed over calling
    /// threads. Prefetching early enough brings this towards zero.
    pub stall_time: Duration,
}

#[derive(Debug, Default)]
struct Counters {
    tiles_fetched: AtomicU64,
    bytes_fetched: AtomicU64,
    failed_loads: AtomicU64,
    cache_hits: AtomicU64,
    inflight_joins: AtomicU64,
    cache_misses: AtomicU64,
    prefetched: AtomicU64,
    tiles_decoded: AtomicU64,
    fetch_nanos: AtomicU64,
    decode_nanos: AtomicU64,
    stall_nanos: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Rows of a dataset in CSR form, in the order they were requested.
///
/// `V` is the count type: `f32` (the default, what training pipelines want), `u32`, `i32`, `u64`, `i64` or
/// `f64` ([`CountValue`]). Counts above 2^24 are not exact in `f32`.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<V = f32> {
    /// Genes (columns).
    pub n_genes: u64,
    /// Row offsets, `n_rows + 1` entries starting at 0.
    pub indptr: Vec<i64>,
    /// Gene indices (stored column order), strictly increasing within each row.
    pub indices: Vec<i32>,
    /// Counts.
    pub values: Vec<V>,
}

impl<V> Default for Batch<V> {
    fn default() -> Self {
        Batch { n_genes: 0, indptr: vec![0], indices: Vec::new(), values: Vec::new() }
    }
}

impl<V> Batch<V> {
    /// Rows.
    pub fn n_rows(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    /// Stored nonzeros.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The gene indices and counts of row `r`.
    ///
    /// # Panics
    /// If `r >= self.n_rows()`.
    pub fn row(&self, r: usize) -> (&[i32], &[V]) {
        let (lo, hi) = (self.indptr[r] as usize, self.indptr[r + 1] as usize);
        (&self.indices[lo..hi], &self.values[lo..hi])
    }
}

/// A fetched tile: its bytes until it is decoded, then its decoded contents.
pub(crate) struct Tile {
    data: Mutex<TileData>,
}

enum TileData {
    /// Fetched and checked, not decoded. A prefetched tile holds its prefetch permit until it is decoded or
    /// dropped: prefetched tiles waiting to be decoded do not count toward the cache's capacity, and this is what
    /// bounds them (`max_prefetch_tiles`).
    Raw { blob: Bytes, indptr: Vec<i64>, permit: Option<OwnedSemaphorePermit> },
    /// Decompressed byte planes: rows are decoded from them as batches ask for them.
    Decoded(Arc<TilePlanes>),
}

impl Tile {
    fn lock(&self) -> MutexGuard<'_, TileData> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Distinct tiles of a request, and `(index in that list, local row)` per requested cell.
type Plan = (Vec<usize>, Vec<(u32, u64)>);

type LoadFuture = Shared<BoxFuture<'static, Result<Arc<Tile>, DatasetError>>>;

enum Slot {
    Loading {
        id: u64,
        fut: LoadFuture,
        urgent: Arc<Notify>,
    },
    /// `used`: a batch has read the tile since it was cached (prefetched tiles start unused). `counted`: the tile
    /// counts toward the capacity: decoded tiles, and tiles reads loaded without decoding; prefetched tiles
    /// waiting to be decoded do not (their prefetch permits bound them) until their decode starts.
    Ready {
        tile: Arc<Tile>,
        tick: u64,
        used: bool,
        counted: bool,
    },
}

#[derive(Default)]
struct Cache {
    slots: HashMap<usize, Slot>,
    /// Every ready tile, by the tick of its last use.
    lru: BTreeMap<u64, usize>,
    /// Ready tiles that count toward the capacity.
    counted: usize,
    tick: u64,
    next_id: u64,
}

impl Cache {
    /// Caches `tile` as ready (`used` unless it was prefetched; `counted` unless it is a prefetched tile waiting
    /// to be decoded); returns the tiles evicted to stay within `capacity` (to be recycled by the caller, outside
    /// the cache lock; see [`Cache::evict_over`]).
    fn insert_ready(
        &mut self,
        t: usize,
        tile: Arc<Tile>,
        capacity: usize,
        used: bool,
        counted: bool,
    ) -> Vec<Arc<Tile>> {
        self.remove_slot(t);
        self.tick += 1;
        self.slots.insert(t, Slot::Ready { tile, tick: self.tick, used, counted });
        self.lru.insert(self.tick, t);
        self.counted += usize::from(counted);
        self.evict_over(capacity, None)
    }

    /// Counts tile `t`, whose decode is starting, toward the capacity, and returns the tiles evicted to make room
    /// for it: evicting before the decode lets it reuse their buffers instead of touching fresh memory.
    fn count_for_decode(&mut self, t: usize, capacity: usize) -> Vec<Arc<Tile>> {
        if let Some(Slot::Ready { counted, .. }) = self.slots.get_mut(&t)
            && !*counted
        {
            *counted = true;
            self.counted += 1;
        }
        self.evict_over(capacity, Some(t))
    }

    /// Evicts counted tiles (never `keep`) until at most `capacity` count. The least recently used tile that a
    /// batch has read goes first; prefetched tiles no batch has read yet go only when no other is left, so that
    /// a prefetch running ahead never evicts the tiles it fetched for the next batches.
    fn evict_over(&mut self, capacity: usize, keep: Option<usize>) -> Vec<Arc<Tile>> {
        let mut evicted = Vec::new();
        while self.counted > capacity {
            let candidate = |read_only: bool| {
                self.lru.iter().find_map(|(&tick, &old)| match self.slots.get(&old) {
                    Some(Slot::Ready { counted: true, used, .. }) if Some(old) != keep && (*used || !read_only) => {
                        Some((tick, old))
                    }
                    _ => None,
                })
            };
            let Some((_, old)) = candidate(true).or_else(|| candidate(false)) else { break };
            if let Some(tile) = self.remove_slot(old) {
                evicted.push(tile);
            }
        }
        evicted
    }

    /// Whether a background decode fits without evicting a decoded tile no batch has read yet, or the tile
    /// batches read last (a decode ahead must not take the place of the tile being read).
    fn has_room_to_decode_ahead(&self, capacity: usize) -> bool {
        let read = self
            .lru
            .values()
            .filter(|t| matches!(self.slots.get(t), Some(Slot::Ready { counted: true, used: true, .. })));
        self.counted < capacity || read.count() >= 2
    }

    /// Marks tile `t` as just read by a batch.
    fn touch(&mut self, t: usize) {
        self.tick += 1;
        let now = self.tick;
        if let Some(Slot::Ready { tick, used, .. }) = self.slots.get_mut(&t) {
            self.lru.remove(tick);
            *tick = now;
            *used = true;
            self.lru.insert(now, t);
        }
    }

    /// Removes tile `t` if it is ready (a loading slot is left alone); returns it.
    fn remove_slot(&mut self, t: usize) -> Option<Arc<Tile>> {
        let Some(&Slot::Ready { tick, counted, .. }) = self.slots.get(&t) else { return None };
        self.lru.remove(&tick);
        self.counted -= usize::from(counted);
        match self.slots.remove(&t) {
            Some(Slot::Ready { tile, .. }) => Some(tile),
            _ => None,
        }
    }

    fn remove_ready(&mut self, t: usize, tile: &Arc<Tile>) {
        if let Some(Slot::Ready { tile: cached, .. }) = self.slots.get(&t)
            && Arc::ptr_eq(cached, tile)
        {
            self.remove_slot(t);
        }
    }
}

/// A read busy decoding or filling a batch (see [`Core::busy_reader`]).
struct BusyReader<'a>(&'a Core);

impl Drop for BusyReader<'_> {
    fn drop(&mut self) {
        let mut busy = self.0.busy_readers.lock().unwrap_or_else(|e| e.into_inner());
        *busy -= 1;
        if *busy == 0 {
            self.0.readers_done.notify_all();
        }
    }
}

enum Acquired {
    /// Cached.
    Ready(Arc<Tile>),
    /// Being loaded already (by a read or a prefetch).
    Pending(LoadFuture),
    /// Its load was started by this call.
    Started(LoadFuture),
}

/// State shared by a [`Dataset`] and its background tasks.
pub(crate) struct Core {
    pub(crate) store: Store,
    pub(crate) manifest: Manifest,
    pub(crate) index: CellIndex,
    pub(crate) pool: Arc<rayon::ThreadPool>,
    pub(crate) decode_threads: usize,
    verify_crc: bool,
    max_cached: usize,
    pub(crate) max_side_file_bytes: u64,
    cache: Mutex<Cache>,
    decoders: Mutex<Vec<Decoder>>,
    /// Buffers of decoded tiles that left the cache, reused by the next decodes: a decoded tile is about 4 bytes
    /// per nonzero (over 100 MB for 10,000 cells), and fresh memory costs a page fault per 4 KiB on first touch.
    spare: Mutex<Vec<TilePlanes>>,
    /// At most this many spare buffers: as many as decodes that prefetches can start at once.
    max_spare: usize,
    prefetch_sem: Arc<Semaphore>,
    /// Prefetched tiles waiting to be decoded in the background, in the order they were requested (by load id).
    /// One background decode runs at a time (see [`Core::decode_in_background`]).
    to_decode: Mutex<BTreeMap<u64, (usize, Weak<Tile>)>>,
    decoding_in_background: AtomicBool,
    /// Reads decoding or filling a batch right now; the background decoder starts no tile while there are any
    /// (see [`Core::decode_in_background`]), and `readers_done` wakes it when the count drops to 0.
    busy_readers: Mutex<usize>,
    readers_done: Condvar,
    /// The background decoder's own decoder, with its own `decode_threads - 1` helper threads rather than the
    /// pool: a read that starts while a background decode runs shares the cores with it instead of queueing
    /// behind all of the tile's chunks on the pool.
    background_decoder: Mutex<Option<Decoder>>,
    counters: Counters,
    handle: tokio::runtime::Handle,
    var_names: Mutex<Option<Arc<Vec<String>>>>,
    gene_order: Mutex<Option<Arc<Vec<i32>>>>,
}

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
/// per tile. A tile whose decode starts in a full cache first evicts the tile batches read least recently (then,
/// if none is left, the least recently prefetched), and the decode reuses its buffers. Prefetched tiles wait,
/// fetched and checked, outside that count; the background decoder decodes them ahead only into free places or
/// the places of tiles read before the one read last. A tile being fetched is shared by every caller that needs
/// it. A failed fetch or decode is never cached: the next request tries again.
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
/// use dct_dataset::{Dataset, ReadOptions};
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/conformance/datasets/v2_with_obs");
/// let ds = Dataset::open(dir, ReadOptions::default())?;
/// let batch = ds.get_batch(&[349, 0, 150, 0])?; // any cells, any order, repeats allowed
/// assert_eq!(batch.n_rows(), 4);
/// assert_eq!(batch.row(1), batch.row(3));
/// # Ok(()) }
/// ```
pub struct Dataset {
    core: Arc<Core>,
    rt: Rt,
}

impl Drop for Dataset {
    fn drop(&mut self) {
        // The background decoder holds the core: without this it would decode every queued prefetch for a reader
        // that is gone (and dropping the runtime waits for it). It stops after the tile in progress.
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
    /// Opens the dataset at `url` (a local path, `file://`, `s3://`, `gs://`, `az://`, `http(s)://`; see
    /// [`dct_store`]): reads and validates `manifest.json`. Tiles are fetched when needed.
    pub fn open(url: &str, options: ReadOptions) -> Result<Dataset, DatasetError> {
        let store = Store::from_url(url, &options.store)?;
        Dataset::open_store(store, options)
    }

    /// Opens the dataset at a [`Store`] (e.g. an in-memory store, or one with test layers); the store's own
    /// retries and request cap apply (`options.store` is not used).
    pub fn open_store(store: Store, options: ReadOptions) -> Result<Dataset, DatasetError> {
        let rt = Rt::new(options.io_threads, "dct-io")?;
        let limit = options.max_manifest_bytes;
        let s = store.clone();
        let got = rt.block_on(async move { s.get_limited(MANIFEST_NAME, limit).await });
        let url = store.url(MANIFEST_NAME);
        let manifest_err = |category, message: String| DatasetError::Manifest {
            url: url.clone(),
            source: ManifestError::new(category, None, message),
        };
        let bytes = match got {
            Ok(b) => b,
            Err(StoreError::NotFound { .. }) => {
                return Err(manifest_err(
                    Category::ManifestMissing,
                    "there is no manifest.json: this is not a deltacells dataset, or its writer did not finish \
                     (the manifest is written last)"
                        .into(),
                ));
            }
            Err(StoreError::TooLarge { size: n, .. }) => {
                return Err(manifest_err(
                    Category::ManifestInvalid,
                    format!(
                        "manifest.json is {n} bytes, more than the limit of {limit} (ReadOptions::max_manifest_bytes): \
                         not a manifest, or raise the limit"
                    ),
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let manifest = Manifest::from_json(&bytes).map_err(|source| DatasetError::Manifest { url, source })?;
        let decode_threads = if options.decode_threads == 0 { default_threads() } else { options.decode_threads };
        let pool = Arc::new(crate::rt::pool(decode_threads, "dct-decode")?);
        let core = Core {
            index: manifest.cell_index(),
            manifest,
            store,
            pool,
            decode_threads,
            verify_crc: options.verify_crc,
            max_cached: options.max_cached_tiles,
            max_side_file_bytes: options.max_side_file_bytes,
            cache: Mutex::new(Cache::default()),
            decoders: Mutex::new(Vec::new()),
            spare: Mutex::new(Vec::new()),
            max_spare: options.max_prefetch_tiles.max(1),
            prefetch_sem: Arc::new(Semaphore::new(options.max_prefetch_tiles.max(1))),
            to_decode: Mutex::new(BTreeMap::new()),
            decoding_in_background: AtomicBool::new(false),
            busy_readers: Mutex::new(0),
            readers_done: Condvar::new(),
            background_decoder: Mutex::new(None),
            counters: Counters::default(),
            handle: rt.handle().clone(),
            var_names: Mutex::new(None),
            gene_order: Mutex::new(None),
        };
        Ok(Dataset { core: Arc::new(core), rt })
    }

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
        let (tiles, rows) = self.plan(cells)?;
        let loaded = self.core.wait_tiles(&tiles, true)?;
        // From here until the batch is filled this read has the decode threads to itself: background decodes of
        // tiles needed later wait (a read that needs a queued tile decodes it itself).
        let busy = self.core.busy_reader();
        let decoded: Vec<Arc<TilePlanes>> =
            loaded.iter().zip(&tiles).map(|(tile, &t)| self.core.ensure_decoded(t, tile)).collect::<Result<_, _>>()?;
        indptr.clear();
        indptr.reserve(rows.len() + 1);
        indptr.push(0);
        let mut total = 0usize;
        for &(s, r) in &rows {
            total += decoded[s as usize].row_nnz(r as usize);
            indptr.push(total as i64);
        }
        let (indices, values) = output(total)?;
        // Each row is decoded from its tile's planes straight into its place in the batch (and checked as it is),
        // rows split between the decode threads.
        // A batch larger than the caches is written with streaming stores (see `WriteMode`).
        let mode = WriteMode::for_output_bytes((total * (4 + size_of::<V>())) as u64);
        let filled =
            self.core.on_decode_threads(|parallel| fill_rows(&decoded, &rows, indptr, indices, values, mode, parallel));
        if let Err((s, e)) = filled {
            // A tile with a bad row leaves the cache: the next read fetches it again.
            self.core.lock_cache().remove_ready(tiles[s], &loaded[s]);
            return Err(self.core.decode_error(tiles[s], e));
        }
        // Tiles that left the cache while this batch used them end here: keep their buffers.
        drop(loaded);
        decoded.into_iter().for_each(|d| self.core.recycle_decoded(d));
        drop(busy);
        // This batch may have made room to decode ahead (see `Core::decode_in_background`).
        if !self.core.lock_to_decode().is_empty() {
            self.core.decode_in_background();
        }
        Ok(total)
    }

    /// Total stored nonzeros of the rows of `cells` (with repeats), from the tiles' indptrs: tiles not yet
    /// loaded are fetched (and kept in the cache) but not decoded.
    pub fn batch_nnz(&self, cells: &[u64]) -> Result<u64, DatasetError> {
        let (tiles, rows) = self.plan(cells)?;
        let loaded = self.core.wait_tiles(&tiles, false)?;
        // One tile locked at a time (never two: concurrent calls could otherwise lock them in opposite orders).
        let mut rows_of: Vec<Vec<u64>> = vec![Vec::new(); tiles.len()];
        for &(s, r) in &rows {
            rows_of[s as usize].push(r);
        }
        let mut total = 0u64;
        for (tile, tile_rows) in loaded.iter().zip(&rows_of) {
            let data = tile.lock();
            let ip = match &*data {
                TileData::Raw { indptr, .. } => indptr.as_slice(),
                TileData::Decoded(d) => d.indptr(),
            };
            total += tile_rows.iter().map(|&r| (ip[r as usize + 1] - ip[r as usize]) as u64).sum::<u64>();
        }
        Ok(total)
    }

    /// Starts fetching and decoding `tiles` in the background and returns at once, with the number of tiles whose
    /// loading it started. Tiles already cached or being fetched are skipped; at most `max_prefetch_tiles` are
    /// fetched at a time (the rest wait their turn, unless a read needs them first). Prefetched tiles enter the
    /// cache, so prefetch at most `max_cached_tiles` ahead.
    pub fn prefetch(&self, tiles: &[usize]) -> Result<usize, DatasetError> {
        let n = self.n_tiles();
        if let Some(&t) = tiles.iter().find(|&&t| t >= n) {
            return Err(DatasetError::InvalidArgument(format!(
                "prefetch of tile {t}: the dataset has {n} tiles ({})",
                self.url()
            )));
        }
        let started = tiles.iter().filter(|&&t| matches!(self.core.acquire(t, true, true), Acquired::Started(_)));
        Ok(started.count())
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
        self.rt.block_on(async move { core.fetch_checked(tile).await })
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

    fn side_file(&self, rel: &'static str, limit: u64) -> Result<Bytes, DatasetError> {
        let store = self.core.store.clone();
        let got = self.rt.block_on(async move { store.get_limited(rel, limit).await });
        side_file_result(&self.core.store, rel, limit, got)
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
        let mut slot_of: HashMap<usize, u32> = HashMap::new();
        let mut rows = Vec::with_capacity(cells.len());
        for (position, &cell) in cells.iter().enumerate() {
            let (t, r) =
                index.locate(cell).ok_or(DatasetError::CellOutOfRange { cell, position, n_cells: index.n_cells() })?;
            let s = *slot_of.entry(t).or_insert_with(|| {
                tiles.push(t);
                (tiles.len() - 1) as u32
            });
            rows.push((s, r));
        }
        Ok((tiles, rows))
    }
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

/// The obs facts of a manifest, as `dct-obs` takes them.
#[cfg(feature = "obs")]
pub(crate) fn obs_manifest(m: &Manifest) -> dct_obs::ObsManifest {
    dct_obs::ObsManifest {
        tile_cells: m.tile_cells.clone(),
        tiles_per_file: m.obs_tiles_per_file,
        shard_bytes: m.obs_shard_bytes.clone(),
        shard_sha256: m.obs_shard_sha256.clone(),
        fingerprint: m.obs_fingerprint.clone(),
        shard_footer_crc32: m.obs_shard_footer_crc32.clone(),
    }
}

#[cfg(feature = "obs")]
impl Dataset {
    /// Opens this dataset's obs (per-cell metadata) for a training job: reads `obs/schema.json` and checks it
    /// against the manifest's obs fingerprint. Then [`localize`](dct_obs::Obs::localize) the columns needed (ranged
    /// reads of their column chunks into the node-local cache, once per node) and look cells up with
    /// [`take`](dct_obs::Obs::take). Needs the `obs` feature (on by default).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use dct_dataset::{Dataset, ReadOptions};
    /// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/conformance/datasets/v2_with_obs");
    /// let ds = Dataset::open(dir, ReadOptions::default())?;
    /// let cache = tempfile::tempdir()?;
    /// let obs = ds.obs(dct_dataset::dct_obs::ObsOptions { cache_dir: Some(cache.path().into()), ..Default::default() })?;
    /// obs.localize_blocking(&["cell_type"])?;
    /// let batch = obs.take(&[349, 0], &["cell_type"])?; // category codes; labels via obs.categories("cell_type")
    /// assert_eq!(batch.num_rows(), 2);
    /// # Ok(()) }
    /// ```
    pub fn obs(&self, options: dct_obs::ObsOptions) -> Result<dct_obs::Obs, DatasetError> {
        let m = &self.core.manifest;
        if !m.has_obs {
            return Err(DatasetError::InvalidArgument(format!(
                "{} has no obs (has_obs is false in its manifest); convert it again with obs to get per-cell metadata",
                self.url()
            )));
        }
        let store = self.core.store.clone();
        let manifest = obs_manifest(m);
        let opened = self.rt.block_on(async move { dct_obs::Obs::open(store, manifest, options).await });
        opened.map_err(|e| obs_error(self.url(), e))
    }
}

#[cfg(feature = "obs")]
impl Dataset {
    /// The gene table (`var.parquet`: one row per gene in stored column order, the pandas index and columns), or
    /// `None` if the dataset has none. Read whole (at most [`dct_obs::MAX_VAR_BYTES`]) and decoded each call.
    pub fn var_table(&self) -> Result<Option<dct_obs::arrow::array::RecordBatch>, DatasetError> {
        if !self.core.manifest.has_var_table {
            return Ok(None);
        }
        let rel = crate::manifest::VAR_TABLE_NAME;
        let bytes = self.side_file(rel, dct_obs::MAX_VAR_BYTES)?;
        let url = self.core.store.url(rel);
        dct_obs::decode_var_parquet(bytes, &url)
            .map(Some)
            .map_err(|e| DatasetError::SideFile { url, message: e.to_string() })
    }
}

/// A `dct-obs` error as a dataset error (storage failures keep their kind; the rest name the dataset).
#[cfg(feature = "obs")]
pub(crate) fn obs_error(dataset: &str, e: dct_obs::ObsError) -> DatasetError {
    use dct_obs::ObsError;
    if let ObsError::Store(e) = e {
        return e.into();
    }
    let category = match &e {
        ObsError::Manifest(_) => Category::ObsFields,
        ObsError::Schema { message, .. } if message.contains("fingerprint") => Category::ObsSha256,
        ObsError::Cache { .. } | ObsError::NoCacheDir | ObsError::Internal(_) => Category::Io,
        ObsError::UnknownColumn { .. } | ObsError::NotLocalized(_) | ObsError::CellOutOfRange { .. } => {
            Category::InvalidArgument
        }
        _ => Category::ObsShard,
    };
    DatasetError::Obs { category, url: dataset.to_string(), message: e.to_string() }
}

pub(crate) fn gene_order_limit(n_genes: u64) -> u64 {
    n_genes.saturating_mul(4).saturating_add(crate::npy::MAX_HEADER_LEN as u64 + 12)
}

pub(crate) fn side_file_result(
    store: &Store,
    rel: &str,
    limit: u64,
    got: Result<Bytes, StoreError>,
) -> Result<Bytes, DatasetError> {
    let url = store.url(rel);
    match got {
        Ok(b) => Ok(b),
        Err(StoreError::NotFound { .. }) => Err(DatasetError::SideFile {
            url,
            message: "the manifest says this file exists, but it does not: the dataset is incomplete".into(),
        }),
        Err(StoreError::TooLarge { size, .. }) => Err(DatasetError::SideFile {
            url,
            message: format!("the file is {size} bytes, more than the {limit} bytes accepted"),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Parses `var_names.txt`: UTF-8, one name per line (`\n`, an optional `\r` before it is dropped), exactly
/// `n_genes` lines.
pub(crate) fn parse_var_names(bytes: &[u8], n_genes: u64) -> Result<Vec<String>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let body = text.strip_suffix('\n').unwrap_or(text);
    let lines = if text.is_empty() { 0 } else { body.split('\n').count() as u64 };
    if lines != n_genes {
        return Err(format!("holds {lines} names but the dataset has {n_genes} genes (one name per line expected)"));
    }
    Ok(body.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l).to_string()).collect())
}

/// Parses `gene_order.npy` and checks it is a permutation of `0..n_genes`.
pub(crate) fn parse_gene_order(bytes: &[u8], n_genes: u64) -> Result<Vec<i32>, String> {
    let order = crate::npy::parse_i32(bytes)?;
    if order.len() as u64 != n_genes {
        return Err(format!("holds {} entries but the dataset has {n_genes} genes", order.len()));
    }
    check_permutation(&order)?;
    Ok(order)
}

pub(crate) fn check_permutation(order: &[i32]) -> Result<(), String> {
    let n = order.len();
    let mut seen = vec![false; n];
    for (j, &g) in order.iter().enumerate() {
        let ok = usize::try_from(g).ok().filter(|&g| g < n);
        let Some(g) = ok else {
            return Err(format!("entry {j} is {g}, outside 0..{n}: not a permutation of the genes"));
        };
        if std::mem::replace(&mut seen[g], true) {
            return Err(format!("gene {g} appears twice (again at entry {j}): not a permutation of the genes"));
        }
    }
    Ok(())
}

impl Core {
    fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tile `t` if cached, else the future of its load (joining one in flight or starting one).
    fn acquire(self: &Arc<Self>, t: usize, decode: bool, prefetch: bool) -> Acquired {
        let mut cache = self.lock_cache();
        match cache.slots.get(&t) {
            Some(Slot::Ready { tile, .. }) => {
                let tile = tile.clone();
                if !prefetch {
                    cache.touch(t);
                    add(&self.counters.cache_hits, 1);
                }
                return Acquired::Ready(tile);
            }
            Some(Slot::Loading { fut, urgent, .. }) => {
                if !prefetch {
                    // A queued prefetch of this tile skips the queue.
                    urgent.notify_one();
                    add(&self.counters.inflight_joins, 1);
                }
                return Acquired::Pending(fut.clone());
            }
            None => {}
        }
        let id = cache.next_id;
        cache.next_id += 1;
        let urgent = Arc::new(Notify::new());
        let core = self.clone();
        let task_urgent = urgent.clone();
        // A free prefetch permit is taken here, so that prefetched tiles start fetching in the order they were
        // asked for (tasks would take them in whatever order the runtime polls them).
        let permit = if prefetch { self.prefetch_sem.clone().try_acquire_owned().ok() } else { None };
        let handle =
            self.handle.spawn(async move { core.load_task(t, id, decode, prefetch, permit, task_urgent).await });
        let fut = async move {
            match handle.await {
                Ok(r) => r,
                Err(e) => Err(DatasetError::Internal(format!("tile {t}: the loading task failed: {e}"))),
            }
        }
        .boxed()
        .shared();
        cache.slots.insert(t, Slot::Loading { id, fut: fut.clone(), urgent });
        add(if prefetch { &self.counters.prefetched } else { &self.counters.cache_misses }, 1);
        Acquired::Started(fut)
    }

    async fn load_task(
        self: Arc<Self>,
        t: usize,
        id: u64,
        decode: bool,
        prefetch: bool,
        permit: Option<OwnedSemaphorePermit>,
        urgent: Arc<Notify>,
    ) -> Result<Arc<Tile>, DatasetError> {
        let mut permit = match permit {
            None if prefetch => tokio::select! {
                p = self.prefetch_sem.clone().acquire_owned() => p.ok(),
                () = urgent.notified() => None,
            },
            given => given,
        };
        // A prefetched tile is fetched and checked here but decoded by the background queue, one tile at a time in
        // request order: decodes started here would share the pool in arrival order, and a reader waiting for one
        // tile would wait for all of them.
        let waits_for_decode = prefetch && decode;
        let result = self.load(t, decode && !prefetch).await;
        if result.is_err() {
            add(&self.counters.failed_loads, 1);
        }
        // A prefetched tile keeps its permit until it is decoded or dropped (see `TileData::Raw`).
        if let Ok(tile) = &result
            && let TileData::Raw { permit: held, .. } = &mut *tile.lock()
        {
            *held = permit.take();
        }
        let mut cache = self.lock_cache();
        let mut evicted = Vec::new();
        if let Some(Slot::Loading { id: current, .. }) = cache.slots.get(&t)
            && *current == id
        {
            match &result {
                Ok(tile) if self.max_cached > 0 => {
                    evicted = cache.insert_ready(t, tile.clone(), self.max_cached, !prefetch, !waits_for_decode);
                    if waits_for_decode {
                        self.lock_to_decode().insert(id, (t, Arc::downgrade(tile)));
                    }
                }
                _ => {
                    cache.slots.remove(&t);
                }
            }
        }
        drop(cache);
        evicted.into_iter().for_each(|tile| self.recycle_tile(tile));
        if waits_for_decode {
            self.decode_in_background();
        }
        result
    }

    /// Marks a read as busy decoding or filling a batch until the guard is dropped.
    fn busy_reader(&self) -> BusyReader<'_> {
        *self.busy_readers.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        BusyReader(self)
    }

    /// Blocks until no read is busy (see [`Core::busy_reader`]).
    fn wait_for_idle_readers(&self) {
        let busy = self.busy_readers.lock().unwrap_or_else(|e| e.into_inner());
        drop(self.readers_done.wait_while(busy, |n| *n > 0).unwrap_or_else(|e| e.into_inner()));
    }

    fn lock_to_decode(&self) -> MutexGuard<'_, BTreeMap<u64, (usize, Weak<Tile>)>> {
        self.to_decode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the background decoder unless it is running: one blocking task (off the decode pool) that decodes
    /// queued prefetched tiles, the earliest requested first, until the queue is empty. A reader that needs a
    /// queued tile decodes it itself ([`Core::ensure_decoded`]; the tile's lock keeps the two from decoding it
    /// twice), so it waits for at most the one background decode in progress, never for the whole queue. No tile
    /// is started while a read is decoding or filling a batch. Tiles that left the cache, or that a reader holds,
    /// are skipped.
    fn decode_in_background(self: &Arc<Self>) {
        if self.decoding_in_background.swap(true, Ordering::AcqRel) {
            return;
        }
        let core = self.clone();
        // Off the pool, with a decoder of its own (`decode_planes_in_background`): a read never queues behind the
        // chunks of a background tile.
        drop(self.handle.spawn_blocking(move || {
            loop {
                // Reads come first: a batch being filled needs the decode threads now, and a background decode
                // started meanwhile would delay it by a whole tile (and, at the start of an epoch, by every
                // prefetched tile at once). Between reads, and while reads wait for fetches, decoding goes on.
                core.wait_for_idle_readers();
                // Decoding ahead stops where it would evict a decoded tile no batch has read yet; the next read
                // (or prefetch) starts it again.
                if !core.lock_cache().has_room_to_decode_ahead(core.max_cached) {
                    core.decoding_in_background.store(false, Ordering::Release);
                    return;
                }
                let next = core.lock_to_decode().pop_first();
                match next {
                    Some((_, (t, tile))) => {
                        if let Some(tile) = tile.upgrade() {
                            core.decode_if_unlocked(t, &tile);
                        }
                    }
                    None => {
                        core.decoding_in_background.store(false, Ordering::Release);
                        // A tile queued after the pop above but before the store would otherwise wait for the
                        // next prefetch.
                        if core.lock_to_decode().is_empty() || core.decoding_in_background.swap(true, Ordering::AcqRel)
                        {
                            return;
                        }
                    }
                }
            }
        }));
    }

    async fn load(self: &Arc<Self>, t: usize, decode: bool) -> Result<Arc<Tile>, DatasetError> {
        let blob = self.fetch_checked(t).await?;
        let core = self.clone();
        let parse = move || core.parse_blob(t, blob, decode);
        let data = if self.decode_threads == 1 {
            // One decode thread per read: each load checks (and decodes) on a thread of its own, so reads from
            // several threads run side by side instead of queueing for one pool thread.
            tokio::task::spawn_blocking(parse).await.map_err(|e| e.to_string())
        } else {
            on_pool(&self.pool, parse).await
        }
        .map_err(|m| DatasetError::Internal(format!("tile {t}: {m}")))??;
        Ok(Arc::new(Tile { data: Mutex::new(data) }))
    }

    /// Runs `f` where reads decode: on the calling thread with one decode thread (so that reads from several
    /// threads run in parallel), else in the decode pool; `f` is told whether it may split its work.
    fn on_decode_threads<R: Send>(&self, f: impl FnOnce(bool) -> R + Send) -> R {
        if self.decode_threads == 1 { f(false) } else { self.pool.install(|| f(true)) }
    }

    /// Checks a fetched tile's structure and CRC (if on), then decodes it or keeps it raw. Every tile passes here
    /// once, so the decodes of its planes later skip the CRC.
    fn parse_blob(&self, t: usize, blob: Bytes, decode: bool) -> Result<TileData, DatasetError> {
        let err = |e: dct_format::FormatError| self.decode_error(t, DecodeError::Format(e));
        let layout = TileLayout::parse(&blob).map_err(err)?;
        if self.verify_crc {
            dct_format::verify_crc(&blob, layout.header()).map_err(err)?;
        }
        if decode {
            return Ok(TileData::Decoded(Arc::new(self.decode_planes(t, &blob)?)));
        }
        let mut indptr = Vec::new();
        layout.indptr(&blob).copy_range_into(0, layout.header().n_cells as usize, &mut indptr);
        Ok(TileData::Raw { blob, indptr, permit: None })
    }

    pub(crate) fn decode_error(&self, t: usize, source: DecodeError) -> DatasetError {
        DatasetError::Decode { tile: t, url: self.store.url(&tile_path(t)), source }
    }

    /// A decoder from the pool (or a new one) with `verify_crc`; [`Core::put_decoder`] returns it.
    fn take_decoder(&self, verify_crc: bool) -> Decoder {
        let pooled = self.decoders.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut decoder = pooled.unwrap_or_else(|| {
            let opts = DecodeOptions { verify_crc, threads: self.decode_threads };
            // One thread: decode on the calling thread rather than hop to the pool's only thread.
            if self.decode_threads == 1 { Decoder::new(opts) } else { Decoder::with_pool(opts, self.pool.clone()) }
        });
        decoder.set_verify_crc(verify_crc);
        decoder
    }

    fn put_decoder(&self, decoder: Decoder) {
        self.decoders.lock().unwrap_or_else(|e| e.into_inner()).push(decoder);
    }

    /// Decodes a whole tile (chunks in parallel on the pool), for verification.
    pub(crate) fn decode_blob(
        &self,
        t: usize,
        blob: &[u8],
        verify_crc: bool,
    ) -> Result<DecodedTile<u32>, DatasetError> {
        let mut decoder = self.take_decoder(verify_crc);
        let result = decoder.decode(blob);
        self.put_decoder(decoder);
        result.map_err(|e| self.decode_error(t, e))
    }

    /// Decompresses a tile into its planes for the cache (chunks in parallel on the pool), into spare buffers when
    /// there are some. Its CRC was checked when it was parsed ([`Core::parse_blob`]).
    fn decode_planes(&self, t: usize, blob: &[u8]) -> Result<TilePlanes, DatasetError> {
        let mut decoder = self.take_decoder(false);
        let result = self.decode_planes_with(&mut decoder, t, blob);
        self.put_decoder(decoder);
        result
    }

    /// [`Core::decode_planes`] with the background decoder's own decoder.
    fn decode_planes_in_background(&self, t: usize, blob: &[u8]) -> Result<TilePlanes, DatasetError> {
        let mut slot = self.background_decoder.lock().unwrap_or_else(|e| e.into_inner());
        let decoder = slot.get_or_insert_with(|| {
            // The CRC was checked when the tile was parsed. Without threads of its own (the system refused them),
            // the background decoder shares the pool.
            let opts = DecodeOptions { verify_crc: false, threads: self.decode_threads };
            Decoder::try_with_threads(opts, "dct-decode-bg")
                .unwrap_or_else(|_| Decoder::with_pool(opts, self.pool.clone()))
        });
        self.decode_planes_with(decoder, t, blob)
    }

    fn decode_planes_with(&self, decoder: &mut Decoder, t: usize, blob: &[u8]) -> Result<TilePlanes, DatasetError> {
        let start = Instant::now();
        let mut out = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
        let result = decoder.decode_planes_into(blob, &mut out);
        add(&self.counters.decode_nanos, nanos(start.elapsed()));
        add(&self.counters.tiles_decoded, 1);
        if let Err(e) = result {
            self.recycle(out);
            return Err(self.decode_error(t, e));
        }
        Ok(out)
    }

    /// Keeps the buffers of a decoded tile nobody else holds for the next decode (at most `max_spare`).
    fn recycle(&self, tile: TilePlanes) {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < self.max_spare {
            spare.push(tile);
        }
    }

    /// Recycles the decoded contents of a tile that left the cache, if this was the last reference to them.
    fn recycle_tile(&self, tile: Arc<Tile>) {
        if let Ok(tile) = Arc::try_unwrap(tile)
            && let TileData::Decoded(d) = tile.data.into_inner().unwrap_or_else(|e| e.into_inner())
        {
            self.recycle_decoded(d);
        }
    }

    /// Recycles decoded contents if `d` is the last reference to them.
    pub(crate) fn recycle_decoded(&self, d: Arc<TilePlanes>) {
        if let Ok(d) = Arc::try_unwrap(d) {
            self.recycle(d);
        }
    }

    /// GETs tile `t` and checks its size and header against the manifest.
    pub(crate) async fn fetch_checked(&self, t: usize) -> Result<Bytes, DatasetError> {
        let blob = self.fetch_checked_size(t).await?;
        self.check_header(t, &blob)?;
        Ok(blob)
    }

    /// GETs tile `t` and checks its size against the manifest.
    pub(crate) async fn fetch_checked_size(&self, t: usize) -> Result<Bytes, DatasetError> {
        let rel = tile_path(t);
        let expected = self.manifest.tile_bytes[t];
        add(&self.counters.tiles_fetched, 1);
        let started = Instant::now();
        let got = self.store.get_exact(&rel, expected).await;
        add(&self.counters.fetch_nanos, nanos(started.elapsed()));
        let tile_err =
            |category, message: String| DatasetError::Tile { category, tile: t, url: self.store.url(&rel), message };
        match got {
            Err(StoreError::NotFound { .. }) => Err(tile_err(
                Category::TileMissing,
                "the tile object does not exist: the dataset is incomplete or was partly deleted".into(),
            )),
            Err(StoreError::WrongSize { size, .. } | StoreError::TooLarge { size, .. }) => Err(tile_err(
                Category::TileBytes,
                format!(
                    "the object is {size} bytes but the manifest's tile_bytes[{t}] is {expected}: the tile was \
                     replaced or truncated, or the manifest is stale; re-create the dataset"
                ),
            )),
            Err(StoreError::Url { url, message }) => Err(DatasetError::Url { url, message }),
            Err(source) => Err(DatasetError::TileFetch { tile: t, source }),
            Ok(blob) => {
                add(&self.counters.bytes_fetched, blob.len() as u64);
                Ok(blob)
            }
        }
    }

    /// Checks the header of tile `t` against the manifest: version, cells, nonzeros, genes.
    pub(crate) fn check_header(&self, t: usize, blob: &[u8]) -> Result<TileHeader, DatasetError> {
        let tile_err = |message: String| DatasetError::Tile {
            category: Category::TileHeader,
            tile: t,
            url: self.store.url(&tile_path(t)),
            message,
        };
        let h = TileHeader::parse(blob).map_err(|e| tile_err(format!("invalid tile header: {e}")))?;
        let m = &self.manifest;
        let mut problems = Vec::new();
        if h.version.number() != m.version {
            problems.push(format!(
                "the tile is version {} but the manifest says version {} (a dataset's tiles all have its version)",
                h.version.number(),
                m.version
            ));
        }
        if h.n_cells != m.tile_cells[t] {
            problems.push(format!("header n_cells is {} but tile_cells[{t}] is {}", h.n_cells, m.tile_cells[t]));
        }
        if h.nnz != m.tile_nnz[t] {
            problems.push(format!("header nnz is {} but tile_nnz[{t}] is {}", h.nnz, m.tile_nnz[t]));
        }
        if u64::from(h.n_genes) != m.n_genes {
            problems.push(format!("header n_genes is {} but the manifest's n_genes is {}", h.n_genes, m.n_genes));
        }
        if problems.is_empty() {
            Ok(h)
        } else {
            Err(tile_err(format!("{}: the tile does not belong to this manifest", problems.join("; "))))
        }
    }

    /// Waits until every tile of `tiles` is loaded (`decode`: loads started here decode in the background too).
    fn wait_tiles(self: &Arc<Self>, tiles: &[usize], decode: bool) -> Result<Vec<Arc<Tile>>, DatasetError> {
        let acquired: Vec<Acquired> = tiles.iter().map(|&t| self.acquire(t, decode, false)).collect();
        let pending: Vec<LoadFuture> = acquired
            .iter()
            .filter_map(|a| match a {
                Acquired::Pending(f) | Acquired::Started(f) => Some(f.clone()),
                Acquired::Ready(_) => None,
            })
            .collect();
        let mut results = if pending.is_empty() {
            Vec::new()
        } else {
            let start = Instant::now();
            let r = futures::executor::block_on(futures::future::join_all(pending));
            add(&self.counters.stall_nanos, nanos(start.elapsed()));
            r
        }
        .into_iter();
        acquired
            .into_iter()
            .map(|a| match a {
                Acquired::Ready(tile) => Ok(tile),
                Acquired::Pending(_) | Acquired::Started(_) => results.next().expect("one result per pending load"),
            })
            .collect()
    }

    /// The decoded contents of `tile`, decoding it now (on the calling thread and the pool) if it was loaded
    /// without decoding. A tile that fails to decode is dropped from the cache.
    fn ensure_decoded(&self, t: usize, tile: &Arc<Tile>) -> Result<Arc<TilePlanes>, DatasetError> {
        self.decode_locked(t, tile, tile.lock(), false)
    }

    /// [`Core::ensure_decoded`] for the background decoder: a tile whose lock is held (by a reader decoding or
    /// reading it) is left to its holder rather than waited for.
    fn decode_if_unlocked(&self, t: usize, tile: &Arc<Tile>) {
        let data = match tile.data.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        // A failure drops the tile from the cache; the next read fetches it again and reports.
        let _ = self.decode_locked(t, tile, data, true);
    }

    fn decode_locked(
        &self,
        t: usize,
        tile: &Arc<Tile>,
        mut data: MutexGuard<'_, TileData>,
        background: bool,
    ) -> Result<Arc<TilePlanes>, DatasetError> {
        let blob = match &*data {
            TileData::Decoded(d) => return Ok(d.clone()),
            TileData::Raw { blob, .. } => blob.clone(),
        };
        // The tile now counts toward the cache's capacity: the tiles that leave for it leave first, so that this
        // decode can reuse their buffers.
        let evicted = self.lock_cache().count_for_decode(t, self.max_cached);
        evicted.into_iter().for_each(|old| self.recycle_tile(old));
        let decoded =
            if background { self.decode_planes_in_background(t, &blob) } else { self.decode_planes(t, &blob) };
        match decoded {
            Ok(d) => {
                let d = Arc::new(d);
                *data = TileData::Decoded(d.clone());
                Ok(d)
            }
            Err(e) => {
                drop(data);
                self.lock_cache().remove_ready(t, tile);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Dataset>();
        check::<Batch<f32>>();
    }

    #[test]
    fn var_names_parsing() {
        assert_eq!(parse_var_names(b"a\nb\n", 2).unwrap(), vec!["a", "b"]);
        assert_eq!(parse_var_names(b"a\r\nb", 2).unwrap(), vec!["a", "b"]);
        assert_eq!(parse_var_names(b"\n", 1).unwrap(), vec![""]);
        assert!(parse_var_names(b"a\nb\n", 3).is_err());
        assert!(parse_var_names(b"", 1).is_err());
        assert!(parse_var_names(b"\xff\n", 1).is_err());
    }

    #[test]
    fn permutation_check() {
        assert!(check_permutation(&[2, 0, 1]).is_ok());
        assert!(check_permutation(&[2, 0, 0]).is_err());
        assert!(check_permutation(&[3, 0, 1]).is_err());
        assert!(check_permutation(&[-1, 0, 1]).is_err());
    }
}
