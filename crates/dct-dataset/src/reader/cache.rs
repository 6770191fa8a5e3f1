//! The cache of fetched and decoded tiles: slots by tile, least recently used first out.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use dct_codec::TilePlanes;
use dct_format::ParsedTile;
use futures::future::{BoxFuture, Shared};
use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::error::DatasetError;

/// A fetched tile: its bytes and their parsed layout until it is decoded, then its decoded contents.
pub(crate) struct Tile {
    pub(super) data: Mutex<TileData>,
}

pub(super) enum TileData {
    /// Fetched and checked, not decoded. A prefetched tile holds its prefetch permit until it is decoded or
    /// dropped: prefetched tiles waiting to be decoded do not count toward the cache's capacity, and this is what
    /// bounds them (`max_prefetch_tiles`).
    Raw { tile: ParsedTile<Bytes>, indptr: Vec<i64>, permit: Option<OwnedSemaphorePermit> },
    /// Decompressed byte planes: rows are decoded from them as batches ask for them.
    Decoded(Arc<TilePlanes>),
}

impl Tile {
    pub(super) fn lock(&self) -> MutexGuard<'_, TileData> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) type LoadFuture = Shared<BoxFuture<'static, Result<Arc<Tile>, DatasetError>>>;

pub(super) enum Slot {
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
pub(super) struct Cache {
    pub(super) slots: HashMap<usize, Slot>,
    /// Every ready tile, by the tick of its last use.
    pub(super) lru: BTreeMap<u64, usize>,
    /// Ready tiles that count toward the capacity.
    pub(super) counted: usize,
    pub(super) tick: u64,
    pub(super) next_id: u64,
}

impl Cache {
    /// Caches `tile` as ready (`used` unless it was prefetched; `counted` unless it is a prefetched tile waiting
    /// to be decoded); returns the tiles evicted to stay within `capacity` (to be recycled by the caller, outside
    /// the cache lock; see [`Cache::evict_over`]).
    pub(super) fn insert_ready(
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
    pub(super) fn count_for_decode(&mut self, t: usize, capacity: usize) -> Vec<Arc<Tile>> {
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
    pub(super) fn evict_over(&mut self, capacity: usize, keep: Option<usize>) -> Vec<Arc<Tile>> {
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
    pub(super) fn has_room_to_decode_ahead(&self, capacity: usize) -> bool {
        let read = self
            .lru
            .values()
            .filter(|t| matches!(self.slots.get(t), Some(Slot::Ready { counted: true, used: true, .. })));
        self.counted < capacity || read.count() >= 2
    }

    /// Marks tile `t` as just read by a batch.
    pub(super) fn touch(&mut self, t: usize) {
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
    pub(super) fn remove_slot(&mut self, t: usize) -> Option<Arc<Tile>> {
        let Some(&Slot::Ready { tick, counted, .. }) = self.slots.get(&t) else { return None };
        self.lru.remove(&tick);
        self.counted -= usize::from(counted);
        match self.slots.remove(&t) {
            Some(Slot::Ready { tile, .. }) => Some(tile),
            _ => None,
        }
    }

    pub(super) fn remove_ready(&mut self, t: usize, tile: &Arc<Tile>) {
        if let Some(Slot::Ready { tile: cached, .. }) = self.slots.get(&t)
            && Arc::ptr_eq(cached, tile)
        {
            self.remove_slot(t);
        }
    }
}
