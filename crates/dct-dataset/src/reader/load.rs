//! The state a [`Dataset`](super::Dataset) shares with its background tasks, and loading tiles into the cache:
//! who asks ([`Requester`]), joining loads in flight, fetching with the size and header checks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

use bytes::Bytes;
use dct_codec::{DecodeError, Decoder, TilePlanes};
use dct_format::{CellIndex, ParsedTile, TileHeader};
use futures::FutureExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::cache::{Cache, LoadFuture, Slot, Tile, TileData};
use super::options::{Counters, add, nanos};
use crate::error::{Category, DatasetError};
use crate::manifest::{APPEND_JOURNAL_NAME, DEFAULT_MAX_MANIFEST_BYTES, MANIFEST_NAME, Manifest, tile_path};
use crate::rt::on_pool;
use dct_store::{Store, StoreError};

/// Who asks for a tile. A read waits for it and marks it read in the cache; a prefetch fills the cache ahead of
/// reads (taking a prefetch permit) and leaves the decode to the background decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Requester {
    Read,
    Prefetch,
}

/// What a load leaves in the cache: the tile's decoded planes, or only its checked bytes and indptr (what
/// [`Dataset::batch_nnz`](super::Dataset::batch_nnz) needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    Decoded,
    Raw,
}

pub(super) enum Acquired {
    /// Cached.
    Ready(Arc<Tile>),
    /// Being loaded already (by a read or a prefetch).
    Pending(LoadFuture),
    /// Its load was started by this call.
    Started(LoadFuture),
}

/// What decoding reuses from tile to tile, shared by readers that share their threads
/// ([`Dataset::reopened_sharing`](super::Dataset::reopened_sharing): a corpus's members), so that one member's
/// decode takes the buffers another member's evicted tile left instead of touching fresh pages.
#[derive(Default)]
pub(super) struct DecodeScratch {
    /// Decoders on the decode pool, idle.
    pub(super) decoders: Mutex<Vec<Decoder>>,
    /// Buffers of decoded tiles that left the cache, reused by the next decodes: a decoded tile is about 4 bytes
    /// per nonzero (over 100 MB for 10,000 cells), and fresh memory costs a page fault per 4 KiB on first touch.
    pub(super) spare: Mutex<Vec<TilePlanes>>,
    /// Spare buffers kept at most, when more than the readers' own `max_spare`
    /// ([`Dataset::keep_spare_tiles`](super::Dataset::keep_spare_tiles)).
    pub(super) spare_room: AtomicUsize,
    /// The background decoder's own decoder, with its own `decode_threads - 1` helper threads rather than the
    /// pool: a read that starts while a background decode runs shares the cores with it instead of queueing
    /// behind all of the tile's chunks on the pool.
    pub(super) background_decoder: Mutex<Option<Decoder>>,
}

/// State shared by a [`Dataset`] and its background tasks.
pub(crate) struct Core {
    pub(crate) store: Store,
    pub(crate) manifest: Manifest,
    pub(crate) index: CellIndex,
    pub(crate) pool: Arc<rayon::ThreadPool>,
    pub(crate) decode_threads: usize,
    pub(super) verify_crc: bool,
    pub(super) max_cached: usize,
    pub(crate) max_side_file_bytes: u64,
    pub(super) cache: Mutex<Cache>,
    /// Decoders and spare buffers, shared with the readers that share this one's threads.
    pub(super) scratch: Arc<DecodeScratch>,
    /// At most this many spare buffers ([`super::open::MAX_SPARE`]).
    pub(super) max_spare: usize,
    pub(super) prefetch_sem: Arc<Semaphore>,
    /// Prefetched tiles waiting to be decoded in the background, in the order they were requested (by load id).
    /// One background decode runs at a time (see [`Core::decode_in_background`]).
    pub(super) to_decode: Mutex<BTreeMap<u64, (usize, Weak<Tile>)>>,
    pub(super) decoding_in_background: AtomicBool,
    /// Reads decoding or filling a batch right now; the background decoder starts no tile while there are any
    /// (see [`Core::decode_in_background`]), and `readers_done` wakes it when the count drops to 0.
    pub(super) busy_readers: Mutex<usize>,
    pub(super) readers_done: Condvar,
    pub(super) counters: Counters,
    pub(super) handle: tokio::runtime::Handle,
    pub(super) var_names: Mutex<Option<Arc<Vec<String>>>>,
    pub(super) gene_order: Mutex<Option<Arc<Vec<i32>>>>,
}

/// How [`Core::change_since_open`]'s message for an append's journal begins.
const APPEND_UNDER_WAY: &str = "an append is under way, or stopped before its manifest";

impl Core {
    pub(super) fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tile `t` if cached, else the future of its load (joining one in flight or starting one).
    pub(super) fn acquire(self: &Arc<Self>, t: usize, keep: Keep, by: Requester) -> Acquired {
        let mut cache = self.lock_cache();
        match cache.slots.get(&t) {
            Some(Slot::Ready { tile, .. }) => {
                let tile = tile.clone();
                if by == Requester::Read {
                    cache.touch(t);
                    add(&self.counters.cache_hits, 1);
                }
                return Acquired::Ready(tile);
            }
            Some(Slot::Loading { fut, urgent, .. }) => {
                if by == Requester::Read {
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
        let permit = if by == Requester::Prefetch { self.prefetch_sem.clone().try_acquire_owned().ok() } else { None };
        let handle = self.handle.spawn(async move { core.load_task(t, id, keep, by, permit, task_urgent).await });
        let fut = async move {
            match handle.await {
                Ok(r) => r,
                Err(e) => Err(DatasetError::Internal(format!("tile {t}: the loading task failed: {e}"))),
            }
        }
        .boxed()
        .shared();
        cache.slots.insert(t, Slot::Loading { id, fut: fut.clone(), urgent });
        add(if by == Requester::Prefetch { &self.counters.prefetched } else { &self.counters.cache_misses }, 1);
        Acquired::Started(fut)
    }

    pub(super) async fn load_task(
        self: Arc<Self>,
        t: usize,
        id: u64,
        keep: Keep,
        by: Requester,
        permit: Option<OwnedSemaphorePermit>,
        urgent: Arc<Notify>,
    ) -> Result<Arc<Tile>, DatasetError> {
        let mut permit = match permit {
            None if by == Requester::Prefetch => tokio::select! {
                p = self.prefetch_sem.clone().acquire_owned() => p.ok(),
                () = urgent.notified() => None,
            },
            given => given,
        };
        // A prefetched tile is fetched and checked here but decoded by the background queue, one tile at a time in
        // request order: decodes started here would share the pool in arrival order, and a reader waiting for one
        // tile would wait for all of them.
        let waits_for_decode = by == Requester::Prefetch && keep == Keep::Decoded;
        let result = self.load(t, if by == Requester::Read { keep } else { Keep::Raw }).await;
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
                    evicted =
                        cache.insert_ready(t, tile.clone(), self.max_cached, by == Requester::Read, !waits_for_decode);
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

    pub(super) async fn load(self: &Arc<Self>, t: usize, keep: Keep) -> Result<Arc<Tile>, DatasetError> {
        let blob = self.fetch_checked(t).await?;
        let core = self.clone();
        let parse = move || core.parse_blob(t, blob, keep);
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
    pub(crate) fn on_decode_threads<R: Send>(&self, f: impl FnOnce(bool) -> R + Send) -> R {
        if self.decode_threads == 1 { f(false) } else { self.pool.install(|| f(true)) }
    }

    /// Checks a fetched tile's structure and CRC (if on), then decodes it or keeps it raw. Every tile is parsed
    /// here, once: its decode later reuses the layout and skips the CRC.
    pub(super) fn parse_blob(&self, t: usize, blob: Bytes, keep: Keep) -> Result<TileData, DatasetError> {
        let err = |e: dct_format::FormatError| self.decode_error(t, DecodeError::Format(e));
        let started = Instant::now();
        let tile = ParsedTile::parse(blob).map_err(err)?;
        if self.verify_crc {
            tile.verify_crc().map_err(err)?;
        }
        add(&self.counters.check_nanos, nanos(started.elapsed()));
        if keep == Keep::Decoded {
            return Ok(TileData::Decoded(Arc::new(self.decode_planes(t, &tile)?)));
        }
        let mut indptr = Vec::new();
        tile.indptr().copy_range_into(0, tile.header().n_cells as usize, &mut indptr);
        Ok(TileData::Raw { tile, indptr, permit: None })
    }

    /// GETs tile `t` and checks its size and header against the manifest. A tile that disagrees with it because
    /// the dataset changed since it was opened is [`DatasetError::Changed`] (see [`Self::changed_since_open`]).
    pub(crate) async fn fetch_checked(&self, t: usize) -> Result<Bytes, DatasetError> {
        let checked = async {
            let blob = self.fetch_checked_size(t).await?;
            let started = Instant::now();
            self.check_header(t, &blob)?;
            add(&self.counters.check_nanos, nanos(started.elapsed()));
            Ok(blob)
        };
        match checked.await {
            Err(e @ DatasetError::Tile { .. }) => Err(self.changed_since_open(t, e).await),
            other => other,
        }
    }

    /// `e` (tile `t` is missing, or its size or header disagrees with the manifest), or, if the reason is that the
    /// dataset changed after this reader opened it, [`DatasetError::Changed`]: the manifest now in the store is
    /// another, or an append is under way (its journal is there). An append rewrites the last tile in place, so a
    /// reader opened before it must not take the new tile's rows for the old ones.
    async fn changed_since_open(&self, t: usize, e: DatasetError) -> DatasetError {
        let url = self.store.url(&tile_path(t));
        match self.change_since_open(true).await {
            // Opening again reads the dataset as it is now, unless an append is still half done.
            Some(message) if message.starts_with(APPEND_UNDER_WAY) => DatasetError::Changed { tile: t, url, message },
            Some(message) => {
                DatasetError::Changed { tile: t, url, message: format!("{message}; open it again to read it") }
            }
            None => e,
        }
    }

    /// How the dataset in the store differs from the one this reader opened, if it does: its manifest is another
    /// (appended to, or written again), gone (being rewritten or deleted), or (with `append_counts`) an append is
    /// under way, which rewrites the last tile in place but no side file. `None` when the manifest is the same, or
    /// cannot be read for another reason (a request failing says nothing of that).
    pub(crate) async fn change_since_open(&self, append_counts: bool) -> Option<String> {
        let now = match self.store.get_limited(MANIFEST_NAME, DEFAULT_MAX_MANIFEST_BYTES).await {
            Ok(bytes) => Manifest::from_json(&bytes).ok(),
            Err(StoreError::NotFound { .. }) => {
                return Some("its manifest is gone: it is being written again, or was deleted".into());
            }
            Err(_) => None,
        };
        if let Some(now) = now.filter(|now| *now != self.manifest) {
            let old = &self.manifest;
            // An append keeps every tile but the last as it was.
            let kept = old.tile_bytes.len().saturating_sub(1);
            let appended = now.n_cells >= old.n_cells
                && now.tile_bytes.len() >= old.tile_bytes.len()
                && now.tile_bytes[..kept] == old.tile_bytes[..kept]
                && now.tile_cells[..kept] == old.tile_cells[..kept];
            return Some(format!(
                "{}: it now holds {} cells in {} tiles, {} in {} when it was opened",
                if appended { "it was appended to" } else { "it was written again" },
                now.n_cells,
                now.tile_cells.len(),
                old.n_cells,
                old.tile_cells.len()
            ));
        }
        if append_counts && matches!(self.store.exists(APPEND_JOURNAL_NAME).await, Ok(true)) {
            // Also what a reader opened after an append stopped between its tiles and its manifest meets.
            return Some(format!(
                "{APPEND_UNDER_WAY} ({}): read it once the append ends; if none is running, run the same append \
                 again to complete it",
                self.store.url(APPEND_JOURNAL_NAME)
            ));
        }
        None
    }

    /// GETs tile `t` and checks its size against the manifest.
    pub(crate) async fn fetch_checked_size(&self, t: usize) -> Result<Bytes, DatasetError> {
        let rel = tile_path(t);
        let expected = self.manifest.tile_bytes[t];
        add(&self.counters.tiles_fetched, 1);
        let started = Instant::now();
        let mut got = self.store.get_exact(&rel, expected).await;
        if matches!(got, Err(StoreError::WrongSize { .. })) && !self.store.is_local() {
            // A response of another length than the object's (a proxy's or server's fault) is read once more before
            // the tile is taken for replaced or truncated.
            got = self.store.get_exact(&rel, expected).await;
        }
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
            Err(source) => Err(DatasetError::TileFetch { tile: t, cause: source }),
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
    pub(super) fn wait_tiles(self: &Arc<Self>, tiles: &[usize], keep: Keep) -> Result<Vec<Arc<Tile>>, DatasetError> {
        let acquired: Vec<Acquired> = tiles.iter().map(|&t| self.acquire(t, keep, Requester::Read)).collect();
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
            // Given up when an interactive caller asks to stop; the loads go on and fill the cache.
            let r = dct_store::interrupt::wait(futures::future::join_all(pending))?;
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
}
