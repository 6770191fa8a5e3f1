//! Settings of a [`Dataset`](super::Dataset) and its counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::manifest::DEFAULT_MAX_MANIFEST_BYTES;
use dct_store::StoreOptions;

/// Settings of a [`Dataset`](crate::Dataset).
///
/// Three sets of defaults exist, each for its callers: [`ReadOptions::default`] here (the CLI and Rust callers);
/// the Python `DeltaCellsDataset`'s keyword defaults, which are the original Python package's documented values
/// (`python/deltacells/dataset.py`); and the training loader's, which sizes the cache and prefetch from its memory
/// budget through [`TileBudget`](crate::TileBudget) and [`ReadOptions::with_budget`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Decoded tiles kept in the LRU cache (default 16; 0 disables caching). Prefetched tiles waiting to be
    /// decoded do not count (`max_prefetch_tiles` bounds them); tiles [`Dataset::batch_nnz`](crate::Dataset::batch_nnz) loaded without
    /// decoding do. For an epoch that reads each tile by consecutive batches, 2 is enough (the tile being read
    /// and one decoded ahead); a larger cache pays off when batches come back to tiles.
    pub max_cached_tiles: usize,
    /// Prefetched tiles being fetched or waiting, fetched, to be decoded (default 4; 0 counts as 1); more wait
    /// their turn, in the order they were asked for. They wait compressed: a prefetched tile is decoded in the
    /// background only into a place of the cache that is free or held by a tile done with (see the `Dataset`
    /// docs, "Caching").
    /// Memory peaks at about `max_cached_tiles + 2` decoded tiles (about 4 bytes per nonzero each, the decompressed
    /// planes; 2 spare buffers are kept for reuse) plus `max_prefetch_tiles` compressed ones.
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

/// Counters of a [`Dataset`](crate::Dataset) since it was opened (or since [`Dataset::reset_stats`](crate::Dataset::reset_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Tile GET requests issued (by reads, prefetches and [`Dataset::fetch_tile_bytes`](crate::Dataset::fetch_tile_bytes)).
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
    /// Wall time spent checking fetched tiles (header against the manifest, structure, CRC when on), summed over
    /// tiles.
    pub check_time: Duration,
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
pub(super) struct Counters {
    pub(super) tiles_fetched: AtomicU64,
    pub(super) bytes_fetched: AtomicU64,
    pub(super) failed_loads: AtomicU64,
    pub(super) cache_hits: AtomicU64,
    pub(super) inflight_joins: AtomicU64,
    pub(super) cache_misses: AtomicU64,
    pub(super) prefetched: AtomicU64,
    pub(super) tiles_decoded: AtomicU64,
    pub(super) fetch_nanos: AtomicU64,
    pub(super) decode_nanos: AtomicU64,
    pub(super) check_nanos: AtomicU64,
    pub(super) stall_nanos: AtomicU64,
}

pub(super) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
