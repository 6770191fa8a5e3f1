//! Decoding tiles: by the read that needs them or by the background decoder, with pooled decoders and the
//! buffers of tiles that left the cache reused.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, Weak};
use std::time::Instant;

use bytes::Bytes;
use dct_codec::{DecodeError, DecodeOptions, DecodedTile, Decoder, TilePlanes};
use dct_format::ParsedTile;

use super::cache::{Tile, TileData};
use super::load::Core;
use super::options::{add, nanos};
use crate::error::DatasetError;
use crate::manifest::tile_path;

/// Where a tile is decoded: by the read that needs it (its thread and the decode pool), or by the background
/// decoder (its own decoder and helper threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DecodeOn {
    Caller,
    Background,
}

/// A read busy decoding or filling a batch (see [`Core::busy_reader`]).
pub(super) struct BusyReader<'a>(&'a Core);

impl Drop for BusyReader<'_> {
    fn drop(&mut self) {
        let mut busy = self.0.busy_readers.lock().unwrap_or_else(|e| e.into_inner());
        *busy -= 1;
        if *busy == 0 {
            self.0.readers_done.notify_all();
        }
    }
}

impl Core {
    /// Marks a read as busy decoding or filling a batch until the guard is dropped.
    pub(super) fn busy_reader(&self) -> BusyReader<'_> {
        *self.busy_readers.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        BusyReader(self)
    }

    /// Blocks until no read is busy (see [`Core::busy_reader`]).
    pub(super) fn wait_for_idle_readers(&self) {
        let busy = self.busy_readers.lock().unwrap_or_else(|e| e.into_inner());
        drop(self.readers_done.wait_while(busy, |n| *n > 0).unwrap_or_else(|e| e.into_inner()));
    }

    pub(super) fn lock_to_decode(&self) -> MutexGuard<'_, BTreeMap<u64, (usize, Weak<Tile>)>> {
        self.to_decode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the background decoder unless it is running: one blocking task (off the decode pool) that decodes
    /// queued prefetched tiles, the earliest requested first, until the queue is empty. A reader that needs a
    /// queued tile decodes it itself ([`Core::ensure_decoded`]; the tile's lock keeps the two from decoding it
    /// twice), so it waits for at most the one background decode in progress, never for the whole queue. No tile
    /// is started while a read is decoding or filling a batch. Tiles that left the cache, or that a reader holds,
    /// are skipped.
    pub(super) fn decode_in_background(self: &Arc<Self>) {
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
                    Some((order, (t, weak))) => {
                        if let Some(tile) = weak.upgrade()
                            && !core.decode_if_unlocked(t, &tile)
                        {
                            // No room after all (batches read since the look above): the tile waits in the queue.
                            core.lock_to_decode().insert(order, (t, weak));
                            core.decoding_in_background.store(false, Ordering::Release);
                            return;
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

    pub(crate) fn decode_error(&self, t: usize, source: DecodeError) -> DatasetError {
        DatasetError::Decode { tile: t, url: self.store.url(&tile_path(t)), cause: source }
    }

    /// A decoder from the pool (or a new one) with `verify_crc`; [`Core::put_decoder`] returns it.
    pub(super) fn take_decoder(&self, verify_crc: bool) -> Decoder {
        let pooled = self.scratch.decoders.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut decoder = pooled.unwrap_or_else(|| {
            let opts = DecodeOptions { verify_crc, threads: self.decode_threads };
            // One thread: decode on the calling thread rather than hop to the pool's only thread.
            if self.decode_threads == 1 { Decoder::new(opts) } else { Decoder::with_pool(opts, self.pool.clone()) }
        });
        decoder.set_verify_crc(verify_crc);
        decoder
    }

    pub(super) fn put_decoder(&self, decoder: Decoder) {
        self.scratch.decoders.lock().unwrap_or_else(|e| e.into_inner()).push(decoder);
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
    pub(super) fn decode_planes(&self, t: usize, tile: &ParsedTile<Bytes>) -> Result<TilePlanes, DatasetError> {
        let mut decoder = self.take_decoder(false);
        let result = self.decode_planes_with(&mut decoder, t, tile);
        self.put_decoder(decoder);
        result
    }

    /// [`Core::decode_planes`] with the background decoder's own decoder.
    pub(super) fn decode_planes_in_background(
        &self,
        t: usize,
        tile: &ParsedTile<Bytes>,
    ) -> Result<TilePlanes, DatasetError> {
        let mut slot = self.scratch.background_decoder.lock().unwrap_or_else(|e| e.into_inner());
        let decoder = slot.get_or_insert_with(|| {
            // The CRC was checked when the tile was parsed. Without threads of its own (the system refused them),
            // the background decoder shares the pool.
            let opts = DecodeOptions { verify_crc: false, threads: self.decode_threads };
            Decoder::try_with_threads(opts, "dct-decode-bg")
                .unwrap_or_else(|_| Decoder::with_pool(opts, self.pool.clone()))
        });
        self.decode_planes_with(decoder, t, tile)
    }

    pub(super) fn decode_planes_with(
        &self,
        decoder: &mut Decoder,
        t: usize,
        tile: &ParsedTile<Bytes>,
    ) -> Result<TilePlanes, DatasetError> {
        let start = Instant::now();
        let mut out = self.scratch.spare.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
        let result = decoder.decode_planes_into(tile, &mut out);
        add(&self.counters.decode_nanos, nanos(start.elapsed()));
        add(&self.counters.tiles_decoded, 1);
        if let Err(e) = result {
            self.recycle(out);
            return Err(self.decode_error(t, e));
        }
        Ok(out)
    }

    /// Keeps the buffers of a decoded tile nobody else holds for the next decode (at most `max_spare`, or the
    /// room asked for with [`Dataset::keep_spare_tiles`](super::Dataset::keep_spare_tiles)).
    pub(super) fn recycle(&self, tile: TilePlanes) {
        let room = self.max_spare.max(self.scratch.spare_room.load(std::sync::atomic::Ordering::Relaxed));
        let mut spare = self.scratch.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < room {
            spare.push(tile);
        }
    }

    /// Recycles the decoded contents of a tile that left the cache, if this was the last reference to them.
    pub(super) fn recycle_tile(&self, tile: Arc<Tile>) {
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

    /// The decoded contents of `tile`, decoding it now (on the calling thread and the pool) if it was loaded
    /// without decoding. A tile that fails to decode is dropped from the cache.
    pub(super) fn ensure_decoded(&self, t: usize, tile: &Arc<Tile>) -> Result<Arc<TilePlanes>, DatasetError> {
        self.decode_locked(t, tile, tile.lock(), DecodeOn::Caller)
    }

    /// [`Core::ensure_decoded`] for the background decoder: a tile whose lock is held (by a reader decoding or
    /// reading it) is left to its holder rather than waited for. `false` if the tile no longer fits without
    /// taking the place of a tile being read or wanted next (it is left undecoded).
    pub(super) fn decode_if_unlocked(&self, t: usize, tile: &Arc<Tile>) -> bool {
        let data = match tile.data.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return true,
        };
        if !matches!(&*data, TileData::Raw { .. }) {
            return true;
        }
        let Some(evicted) = self.lock_cache().count_for_decode_ahead(t, self.max_cached) else { return false };
        evicted.into_iter().for_each(|old| self.recycle_tile(old));
        // A failure drops the tile from the cache; the next read fetches it again and reports.
        let _ = self.decode_counted(t, tile, data, DecodeOn::Background);
        true
    }

    pub(super) fn decode_locked(
        &self,
        t: usize,
        tile: &Arc<Tile>,
        data: MutexGuard<'_, TileData>,
        on: DecodeOn,
    ) -> Result<Arc<TilePlanes>, DatasetError> {
        if let TileData::Decoded(d) = &*data {
            return Ok(d.clone());
        }
        // The tile now counts toward the cache's capacity: the tiles that leave for it leave first, so that this
        // decode can reuse their buffers.
        let evicted = self.lock_cache().count_for_decode(t, self.max_cached, on == DecodeOn::Caller);
        evicted.into_iter().for_each(|old| self.recycle_tile(old));
        self.decode_counted(t, tile, data, on)
    }

    /// Decodes a tile already counted toward the cache's capacity.
    fn decode_counted(
        &self,
        t: usize,
        tile: &Arc<Tile>,
        mut data: MutexGuard<'_, TileData>,
        on: DecodeOn,
    ) -> Result<Arc<TilePlanes>, DatasetError> {
        let parsed = match &*data {
            TileData::Decoded(d) => return Ok(d.clone()),
            TileData::Raw { tile, .. } => tile,
        };
        let decoded = match on {
            DecodeOn::Caller => self.decode_planes(t, parsed),
            DecodeOn::Background => self.decode_planes_in_background(t, parsed),
        };
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
