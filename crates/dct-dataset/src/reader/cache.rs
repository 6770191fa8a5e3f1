//! The cache of fetched and decoded tiles: slots by tile, least recently used first out.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use dct_codec::TilePlanes;
use dct_format::ParsedTile;
use futures::future::{BoxFuture, Shared};
use tokio::sync::{Notify, OwnedSemaphorePermit};

use crate::epoch::PassOrder;
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
    /// The tiles of the latest batch, sorted (see [`Cache::mark_read`]).
    pub(super) last_read: Vec<usize>,
    /// Tiles the latest prefetch requests asked for and no batch has read since, with their place in those
    /// requests (see [`Cache::want`]).
    pub(super) wanted: HashMap<usize, usize>,
    /// Set by a batch: the next prefetch request replaces `wanted` instead of adding to it.
    pub(super) wanted_stale: bool,
    /// When each tile is next read, once the loader has given the passes' orders (see [`Cache::plan_passes`]).
    pub(super) passes: PassOrder,
}

/// How readily a cached tile is evicted, the first variant first (see [`Cache::evict_over`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Keepness {
    /// Read by an earlier batch, and not asked for again.
    Done,
    /// Needed by the batches to come: decoded ahead and not read yet, or read before and asked for again (a tile
    /// of the window being read that the latest batch happened to miss). Of these, the one the latest prefetch
    /// requests need last goes first.
    Wanted,
    /// Read by the latest batch (and named by the prefetch requests since, if any).
    Latest,
}

impl Cache {
    /// Caches `tile` as ready (`used` unless it was prefetched; `counted` unless it is a prefetched tile waiting
    /// to be decoded); returns the tiles evicted to stay within `capacity` (to be recycled by the caller, outside
    /// the cache lock; see [`Cache::evict_over`], where a tile a read loaded, `used`, makes room as a read does).
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
        self.evict_over(capacity, None, used)
    }

    /// Counts tile `t`, whose decode is starting, toward the capacity, and returns the tiles evicted to make room
    /// for it: evicting before the decode lets it reuse their buffers instead of touching fresh memory.
    /// `for_read`: the decode is for a read waiting on it, not ahead (see [`Cache::most_evictable`]).
    pub(super) fn count_for_decode(&mut self, t: usize, capacity: usize, for_read: bool) -> Vec<Arc<Tile>> {
        if let Some(Slot::Ready { counted, .. }) = self.slots.get_mut(&t)
            && !*counted
        {
            *counted = true;
            self.counted += 1;
        }
        self.evict_over(capacity, Some(t), for_read)
    }

    /// [`Cache::count_for_decode`] for a decode ahead, if it fits as [`Cache::has_room_to_decode_ahead`] says,
    /// decided under the same lock as the count: batches read between the background decoder's look and its
    /// decode may have changed which tiles are done with. `None`: no room, nothing changed.
    pub(super) fn count_for_decode_ahead(&mut self, t: usize, capacity: usize) -> Option<Vec<Arc<Tile>>> {
        let counted = matches!(self.slots.get(&t), Some(Slot::Ready { counted: true, .. }));
        (counted || self.room_ahead(capacity, Some(t))).then(|| self.count_for_decode(t, capacity, false))
    }

    /// Evicts counted tiles (never `keep`) until at most `capacity` count, in the order of [`Keepness`]: tiles
    /// done with first (the least recently used first), tiles wanted next (the one needed last first), tiles read
    /// by the latest batch last. So a prefetch running ahead does not evict
    /// the tiles it fetched for the next batches while older ones are left, nor the tiles being read (with cells
    /// shuffled across a window of tiles, every batch reads most of the window's), which would be fetched again
    /// at once.
    pub(super) fn evict_over(&mut self, capacity: usize, keep: Option<usize>, for_read: bool) -> Vec<Arc<Tile>> {
        let mut evicted = Vec::new();
        while self.counted > capacity {
            let Some((_, old)) = self.most_evictable(keep, for_read) else { break };
            if let Some(tile) = self.remove_slot(old) {
                evicted.push(tile);
            }
        }
        evicted
    }

    /// Removes every ready tile (decoded, or fetched and waiting) but those of `keep`; returns them, to be
    /// recycled by the caller. Tiles being loaded stay.
    pub(super) fn release_except(&mut self, keep: &[usize]) -> Vec<Arc<Tile>> {
        let gone: Vec<usize> = self
            .slots
            .iter()
            .filter(|(t, slot)| matches!(slot, Slot::Ready { .. }) && !keep.contains(t))
            .map(|(&t, _)| t)
            .collect();
        gone.into_iter().filter_map(|t| self.remove_slot(t)).collect()
    }

    /// How readily counted tile `t` is evicted (`None` if it is not a counted tile); `for_read`: to make room for a
    /// read.
    fn keepness(&self, t: usize, for_read: bool) -> Option<Keepness> {
        let Some(Slot::Ready { counted: true, used, .. }) = self.slots.get(&t) else { return None };
        // For a read's decode, a prefetch request made since the latest batch says which tiles are needed
        // next: a tile of that batch it does not name is done with (at a window's start, the last window's
        // tiles), and the read's own window goes first. Otherwise (a decode ahead, or no such request) the
        // latest batch's tiles are kept above all.
        let fresh_request = for_read && !self.wanted_stale && !self.wanted.is_empty();
        Some(match (self.last_read.binary_search(&t).is_ok(), *used, self.wanted.get(&t)) {
            (true, _, None) if fresh_request => Keepness::Done,
            (true, _, _) => Keepness::Latest,
            (false, true, None) => Keepness::Done,
            (false, _, _) => Keepness::Wanted,
        })
    }

    /// The counted tile (not `keep`) to evict first, with its [`Keepness`]; `for_read`: to make room for a read.
    fn most_evictable(&self, keep: Option<usize>, for_read: bool) -> Option<(Keepness, usize)> {
        let mut best: Option<(Keepness, (u8, usize), usize)> = None; // (keepness, order within it, tile)
        for (rank, &t) in self.lru.values().enumerate() {
            if Some(t) == keep {
                continue;
            }
            let Some(kind) = self.keepness(t, for_read) else { continue };
            let wanted = self.wanted.get(&t);
            // Least recently used first; of the tiles wanted, the one needed last first, whether it was decoded
            // ahead or read before (a window's tiles come before the next window's in a request). A tile decoded
            // ahead that the latest requests no longer name was asked for before them: needed soonest. Of the
            // tiles done with, when the next pass's order is known: those it does not read (least recently used
            // first), then the one it reads last.
            let order = match (kind, self.passes.next_use(t)) {
                (Keepness::Wanted, _) => (0, usize::MAX - wanted.map_or(0, |&p| p + 1)),
                (Keepness::Done, Some(p)) => (1, usize::MAX - p),
                _ => (0, rank),
            };
            if best.is_none_or(|(k, o, _)| (kind, order) < (k, o)) {
                best = Some((kind, order, t));
            }
        }
        best.map(|(kind, _, t)| (kind, t))
    }

    /// Whether a background decode fits in a free place or in that of a tile done with (read before and not
    /// asked for again): a decode ahead never takes the place of the tiles being read or of those decoded for
    /// the next batches, nor the places the tiles being read will take when their fetches end.
    pub(super) fn has_room_to_decode_ahead(&self, capacity: usize) -> bool {
        self.room_ahead(capacity, None)
    }

    /// A place for tile `ahead` (any tile with `None`): free, or one of a tile done with; and, once it is taken,
    /// places left (free, or of tiles a read may evict) for the tiles needed before it that do not count yet: the
    /// latest batch's (a read waiting on their fetches decodes them next) and, for `ahead`, those the latest
    /// requests want sooner. Fetches end in any order: without the second condition a tile fetched early could be
    /// decoded ahead into the place the window's last tile needs, and be evicted (its bytes with it, to be
    /// fetched again) when the read decodes that tile.
    fn room_ahead(&self, capacity: usize, ahead: Option<usize>) -> bool {
        let soonest = ahead.and_then(|t| self.wanted.get(&t).copied());
        let wanted_sooner = self.wanted.iter().filter(|(_, p)| soonest.is_some_and(|s| **p < s)).map(|(t, _)| *t);
        let set_aside = self
            .last_read
            .iter()
            .copied()
            .chain(wanted_sooner)
            .filter(|t| Some(*t) != ahead && !matches!(self.slots.get(t), Some(Slot::Ready { counted: true, .. })))
            .count();
        let free = capacity.saturating_sub(self.counted);
        let done = |for_read: bool| {
            self.lru
                .values()
                .filter(|&&t| Some(t) != ahead && self.keepness(t, for_read) == Some(Keepness::Done))
                .count()
        };
        free + done(false) >= 1 && free + done(true) > set_aside
    }

    /// Records `tiles` as those of the latest batch: they are no longer wanted ahead, and the next prefetch
    /// request says afresh which tiles are.
    pub(super) fn mark_read(&mut self, tiles: &[usize]) {
        self.last_read.clear();
        self.last_read.extend_from_slice(tiles);
        self.last_read.sort_unstable();
        for t in tiles {
            self.wanted.remove(t);
        }
        self.passes.mark_read(tiles);
        self.wanted_stale = true;
    }

    /// Records a prefetch request for `tiles`, the soonest needed first: the first request after a batch replaces
    /// the tiles wanted ahead, later ones (before the next batch) add to them.
    pub(super) fn want(&mut self, tiles: &[usize]) {
        if std::mem::take(&mut self.wanted_stale) {
            self.wanted.clear();
        }
        for &t in tiles {
            let next = self.wanted.len();
            self.wanted.entry(t).or_insert(next);
        }
    }

    /// Records the order in which the pass beginning now and the one after it (a training loop's epoch and the
    /// next) first read their tiles, replacing the orders recorded before: among the tiles done with, the one read
    /// last from now on is evicted first, tiles neither pass reads before it (see [`PassOrder`]).
    pub(super) fn plan_passes(&mut self, this_pass: &[usize], next_pass: &[usize]) {
        self.passes = PassOrder::new(this_pass, next_pass);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded() -> Arc<Tile> {
        Arc::new(Tile { data: Mutex::new(TileData::Decoded(Arc::new(TilePlanes::default()))) })
    }

    /// Tiles 0..4 read by the window that ended (the latest batch read 2 and 3), 4 and 5 decoded ahead, a fresh
    /// request for the new window 4..8 and beyond; five places.
    fn at_a_window_start() -> Cache {
        let mut c = Cache::default();
        for t in 0..4 {
            assert!(c.insert_ready(t, decoded(), 5, true, true).is_empty());
        }
        c.mark_read(&[2, 3]);
        c.insert_ready(4, decoded(), 6, false, true);
        c.insert_ready(5, decoded(), 6, false, true); // 6 counted: tile 0 or 1 leaves below
        c.want(&(4..12).collect::<Vec<_>>());
        c
    }

    fn cached(c: &Cache) -> Vec<usize> {
        let mut v: Vec<usize> = c.slots.keys().copied().collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn releasing_keeps_only_the_tiles_named() {
        let mut c = at_a_window_start();
        let before = cached(&c);
        assert!(before.len() >= 3, "{before:?}");
        let keep = [before[1]];
        let released = c.release_except(&keep);
        assert_eq!(released.len(), before.len() - 1);
        assert_eq!(cached(&c), keep);
        assert_eq!(c.counted, 1, "the capacity count follows");
    }

    #[test]
    fn a_read_makes_room_from_the_last_window_before_the_tiles_of_its_own() {
        let mut c = at_a_window_start();
        assert_eq!(c.evict_over(5, None, true).len(), 1);
        // The read loads and decodes tiles 6 and 7 of its window: the last window's tiles go, the latest batch's
        // included, since the request made since that batch does not name them; 4 and 5, decoded ahead for this
        // window, stay.
        for t in [6, 7] {
            c.insert_ready(t, decoded(), 5, true, true);
        }
        let left = cached(&c);
        assert!([4, 5, 6, 7].iter().all(|t| left.contains(t)), "{left:?}");
    }

    #[test]
    fn a_decode_ahead_keeps_the_latest_batch_s_tiles() {
        let mut c = at_a_window_start();
        c.evict_over(5, None, true);
        // Tiles 8 and 9 prefetched, waiting (uncounted) to be decoded ahead.
        for t in [8, 9] {
            assert!(c.insert_ready(t, decoded(), 5, false, false).is_empty());
        }
        // Room for a decode ahead only in the place of a tile done with and not read by the latest batch.
        let room = c.count_for_decode_ahead(8, 5);
        assert!(room.is_some(), "tile 0 or 1 is done with");
        let left = cached(&c);
        assert!([2, 3, 4, 5].iter().all(|t| left.contains(t)), "{left:?}");
        assert!(c.count_for_decode_ahead(9, 5).is_none(), "only the latest batch's and wanted tiles are left");
    }

    #[test]
    fn a_decode_ahead_leaves_the_places_of_the_window_s_tiles_still_on_their_way() {
        // The first batch of the window 0..4 waits on tile 3's fetch: 0, 1 and 2 decoded, 4 decoded ahead, 5
        // fetched early and waiting.
        let mut c = Cache::default();
        c.want(&(0..12).collect::<Vec<_>>());
        c.mark_read(&[0, 1, 2, 3]);
        for t in [0, 1, 2, 4] {
            assert!(c.insert_ready(t, decoded(), 5, false, true).is_empty());
        }
        assert!(c.insert_ready(5, decoded(), 5, false, false).is_empty());
        assert!(c.count_for_decode_ahead(5, 5).is_none(), "the last place is tile 3's");
        // Tile 3 arrives and the read decodes it: nothing leaves, and 5 waits to be decoded (not fetched again).
        assert!(c.insert_ready(3, decoded(), 5, true, true).is_empty());
        assert!(cached(&c).contains(&5));
    }

    #[test]
    fn tiles_done_with_go_in_the_next_pass_s_order_the_last_read_first() {
        // Six tiles read by earlier windows (0 the least recently used), the latest batch reading tile 6.
        let read = || {
            let mut c = Cache::default();
            for t in 0..7 {
                c.insert_ready(t, decoded(), 7, true, true);
            }
            c.mark_read(&[6]);
            c
        };
        let evicted_in_turn = |c: &mut Cache| -> Vec<usize> {
            let mut out = Vec::new();
            while let Some((Keepness::Done, t)) = c.most_evictable(None, false) {
                c.remove_slot(t);
                out.push(t);
            }
            out
        };
        // Without the next pass's order: least recently used first.
        assert_eq!(evicted_in_turn(&mut read()), [0, 1, 2, 3, 4, 5]);
        // The next pass reads 3, 1, 5, 0, 2 (not 4): 4 goes first, then the one it reads last.
        let mut c = read();
        c.plan_passes(&[], &[3, 1, 5, 3, 0, 2, 6]);
        assert_eq!(evicted_in_turn(&mut c), [4, 2, 0, 5, 1, 3]);
        // A pass beginning with tiles 0 and 5 still to read (in that order), the next as above; once the pass has
        // read 0, it is next read in the next pass.
        for (read_first, evicted) in [(vec![], [4, 2, 1, 3, 5, 0]), (vec![0], [4, 2, 0, 1, 3, 5])] {
            let mut c = read();
            c.plan_passes(&[6, 0, 5], &[3, 1, 5, 3, 0, 2, 6]);
            c.mark_read(&read_first);
            c.mark_read(&[6]);
            assert_eq!(evicted_in_turn(&mut c), evicted, "{read_first:?} read");
        }
        assert_eq!(cached(&c), [6], "the latest batch's tile stays");
    }
}
