//! The order of a training epoch: which cells each batch of each rank and loader worker holds, computed the same way
//! by every process from `(seed, epoch)` alone, so that ranks agree without talking and a resumed run yields the
//! batches an uninterrupted one would have.
//!
//! An epoch, for a dataset's tiles:
//! 1. the tiles in shuffled order (seeded by seed and epoch; in order without `shuffle`);
//! 2. cut into *windows* of `shuffle_tiles` consecutive tiles of that order, and the cells of each window shuffled
//!    (seeded by seed, epoch and window): the global stream, every cell exactly once. Sequential I/O: a window's
//!    tiles are fetched once and its batches draw on all of them;
//! 3. the stream split into `world_size` contiguous, equal shares, one per rank: the remainder (fewer than
//!    `world_size` cells) is dropped ([`Remainder::Drop`]: no cell goes to two ranks) or the stream wraps around to
//!    its start to fill the last shares ([`Remainder::Wrap`]: every cell is served, a few twice);
//! 4. each rank's share cut into batches of `batch_size` consecutive cells (a short last batch unless
//!    `drop_last`); from the rank's batch `first_batch` on (0, or where a resumed run goes on), batch
//!    `first_batch + k` goes to loader worker `k % num_workers`, so a loader that takes one batch from each worker
//!    in turn yields them in order, also after resuming.
//!
//! Memory is one window's cells, whatever the dataset's size: a batch's cells are computed from its window when asked
//! for ([`EpochPlan::batch_into`]).

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::error::DatasetError;

/// What to do with the cells left over when the stream does not split into equal shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Remainder {
    /// Leave out the last `n_cells % world_size` cells of the stream (no cell goes to two ranks).
    #[default]
    Drop,
    /// Continue from the start of the stream to fill the last shares (every cell is served; a few twice).
    Wrap,
}

/// How an epoch is ordered and split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochOptions {
    /// Cells per batch (at least 1).
    pub batch_size: usize,
    /// Shuffle tiles and cells; `false` gives cell order.
    pub shuffle: bool,
    /// Tiles per shuffling window (at least 1): cells are shuffled among this many consecutive tiles of the
    /// shuffled tile order. Larger windows mix better and need that many decoded tiles at once.
    pub shuffle_tiles: usize,
    /// Seed of the shuffles (with the epoch number).
    pub seed: u64,
    /// Leave out each rank's last batch when it is short.
    pub drop_last: bool,
    /// How shares are equalized across ranks.
    pub remainder: Remainder,
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Ranks (at least 1).
    pub world_size: usize,
    /// This loader worker, `0..num_workers`.
    pub worker: usize,
    /// Loader workers of each rank (at least 1; 1 for a loader without worker processes).
    pub num_workers: usize,
    /// The rank's first batch served (0; or the batches a resumed run already yielded).
    pub first_batch: usize,
}

impl EpochOptions {
    /// One rank, one worker, shuffled with windows of 4 tiles, seed 0.
    pub fn new(batch_size: usize) -> Self {
        EpochOptions {
            batch_size,
            shuffle: true,
            shuffle_tiles: 4,
            seed: 0,
            drop_last: false,
            remainder: Remainder::Drop,
            rank: 0,
            world_size: 1,
            worker: 0,
            num_workers: 1,
            first_batch: 0,
        }
    }
}

/// One window of the stream: consecutive tiles of the epoch's tile order and where its cells start in the stream.
#[derive(Debug, Clone)]
struct Window {
    tiles: Vec<usize>,
    start: u64,
    cells: u64,
}

/// The plan of one epoch for one rank and worker (see the module docs).
#[derive(Debug, Clone)]
pub struct EpochPlan {
    opts: EpochOptions,
    epoch: u64,
    /// First global cell of each tile, and one past the last.
    tile_start: Vec<u64>,
    windows: Vec<Window>,
    n_cells: u64,
    /// This rank's share: stream positions `share_lo .. share_lo + share_len` (modulo `n_cells` when wrapping).
    share_lo: u64,
    share_len: u64,
    /// Batches of the rank.
    rank_batches: usize,
    /// The cells of the window last expanded (its index and permutation).
    cached: Option<(usize, Vec<u64>)>,
}

impl EpochPlan {
    /// The plan of epoch `epoch` of a dataset whose tiles hold `tile_cells` cells.
    pub fn new(tile_cells: &[u64], opts: &EpochOptions, epoch: u64) -> Result<EpochPlan, DatasetError> {
        let bad = |m: String| Err(DatasetError::InvalidArgument(format!("epoch plan: {m}")));
        if opts.batch_size == 0 || opts.shuffle_tiles == 0 || opts.world_size == 0 || opts.num_workers == 0 {
            return bad("batch_size, shuffle_tiles, world_size and num_workers must be at least 1".into());
        }
        if opts.rank >= opts.world_size {
            return bad(format!("rank {} is outside 0..{} (world_size)", opts.rank, opts.world_size));
        }
        if opts.worker >= opts.num_workers {
            return bad(format!("worker {} is outside 0..{} (num_workers)", opts.worker, opts.num_workers));
        }
        let mut tile_start = Vec::with_capacity(tile_cells.len() + 1);
        let mut n_cells = 0u64;
        tile_start.push(0);
        for &c in tile_cells {
            n_cells = n_cells.checked_add(c).ok_or_else(|| {
                DatasetError::InvalidArgument("epoch plan: the tiles hold more than 2^64 cells".into())
            })?;
            tile_start.push(n_cells);
        }
        let mut order: Vec<usize> = (0..tile_cells.len()).collect();
        if opts.shuffle {
            order.shuffle(&mut rng(opts.seed, epoch, u64::MAX));
        }
        let mut windows = Vec::new();
        let mut start = 0u64;
        for tiles in order.chunks(opts.shuffle_tiles) {
            let cells: u64 = tiles.iter().map(|&t| tile_cells[t]).sum();
            windows.push(Window { tiles: tiles.to_vec(), start, cells });
            start += cells;
        }
        let w = opts.world_size as u64;
        let share_len = match opts.remainder {
            Remainder::Drop => n_cells / w,
            Remainder::Wrap => n_cells.div_ceil(w),
        };
        let share_lo = opts.rank as u64 * share_len;
        let b = opts.batch_size as u64;
        let rank_batches = if opts.drop_last { share_len / b } else { share_len.div_ceil(b) } as usize;
        Ok(EpochPlan {
            opts: opts.clone(),
            epoch,
            tile_start,
            windows,
            n_cells,
            share_lo,
            share_len,
            rank_batches,
            cached: None,
        })
    }

    /// The epoch number.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The options.
    pub fn options(&self) -> &EpochOptions {
        &self.opts
    }

    /// Batches of this rank (every rank has as many).
    pub fn rank_batches(&self) -> usize {
        self.rank_batches
    }

    /// Batches of this worker: the rank's batches `first_batch + worker`, `first_batch + worker + num_workers`, ...
    pub fn n_batches(&self) -> usize {
        let (first, n) = (self.opts.first_batch + self.opts.worker, self.opts.num_workers);
        if self.rank_batches <= first { 0 } else { (self.rank_batches - first).div_ceil(n) }
    }

    /// Cells this rank serves in the epoch.
    pub fn rank_cells(&self) -> u64 {
        let b = self.opts.batch_size as u64;
        if self.opts.drop_last { self.rank_batches as u64 * b } else { self.share_len }
    }

    /// The index among the rank's batches of this worker's batch `j`.
    pub fn rank_batch_of(&self, j: usize) -> usize {
        self.opts.first_batch + j * self.opts.num_workers + self.opts.worker
    }

    /// Stream positions `[lo, hi)` of the rank's batch `i`.
    fn rank_batch_range(&self, i: usize) -> (u64, u64) {
        let b = self.opts.batch_size as u64;
        let lo = i as u64 * b;
        (self.share_lo + lo, self.share_lo + (lo + b).min(self.share_len))
    }

    /// The cells of this worker's batch `j` (`j < n_batches()`) into `out` (cleared first), in batch order.
    pub fn batch_into(&mut self, j: usize, out: &mut Vec<u64>) -> Result<(), DatasetError> {
        out.clear();
        if j >= self.n_batches() {
            return Err(DatasetError::InvalidArgument(format!(
                "batch {j} of an epoch of {} batches for this worker",
                self.n_batches()
            )));
        }
        let (lo, hi) = self.rank_batch_range(self.rank_batch_of(j));
        out.reserve((hi - lo) as usize);
        for p in lo..hi {
            let cell = self.cell_at(p % self.n_cells.max(1));
            out.push(cell);
        }
        Ok(())
    }

    /// The cells of this worker's batch `j`.
    pub fn batch(&mut self, j: usize) -> Result<Vec<u64>, DatasetError> {
        let mut out = Vec::new();
        self.batch_into(j, &mut out)?;
        Ok(out)
    }

    /// The distinct tiles this worker's batches `j..` read, in the order they are first needed, stopping after
    /// `max_tiles` tiles (for prefetching ahead of the batches).
    pub fn tiles_ahead(&self, j: usize, max_tiles: usize) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        let mut k = j;
        while out.len() < max_tiles && k < self.n_batches() {
            let (lo, hi) = self.rank_batch_range(self.rank_batch_of(k));
            // The windows the batch's stream positions fall in (every tile of a window may be read by any batch of it).
            let (first, last) = (lo % self.n_cells.max(1), (hi - 1) % self.n_cells.max(1));
            let wrapped = hi - lo > 0 && last < first;
            let windows = if wrapped {
                let a = self.window_of(first)..self.windows.len();
                let b = 0..=self.window_of(last);
                a.chain(b).collect::<Vec<_>>()
            } else {
                (self.window_of(first)..=self.window_of(last)).collect()
            };
            for w in windows {
                for &t in &self.windows[w].tiles {
                    if !out.contains(&t) && out.len() < max_tiles {
                        out.push(t);
                    }
                }
            }
            k += 1;
        }
        out
    }

    /// The window holding stream position `p` (`p < n_cells`).
    fn window_of(&self, p: u64) -> usize {
        self.windows.partition_point(|w| w.start + w.cells <= p).min(self.windows.len().saturating_sub(1))
    }

    /// The cell at stream position `p` (`p < n_cells`).
    fn cell_at(&mut self, p: u64) -> u64 {
        let w = self.window_of(p);
        if self.cached.as_ref().is_none_or(|(i, _)| *i != w) {
            let window = &self.windows[w];
            let mut cells: Vec<u64> = Vec::with_capacity(window.cells as usize);
            for &t in &window.tiles {
                cells.extend(self.tile_start[t]..self.tile_start[t + 1]);
            }
            if self.opts.shuffle {
                cells.shuffle(&mut rng(self.opts.seed, self.epoch, w as u64));
            }
            self.cached = Some((w, cells));
        }
        let (_, cells) = self.cached.as_ref().expect("set above");
        cells[(p - self.windows[w].start) as usize]
    }
}

/// The generator of one shuffle of an epoch: `stream` is the window (or `u64::MAX` for the tile order).
fn rng(seed: u64, epoch: u64, stream: u64) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    key[16..24].copy_from_slice(&stream.to_le_bytes());
    key[24..].copy_from_slice(b"dctepoch");
    ChaCha8Rng::from_seed(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_batches(tile_cells: &[u64], opts: &EpochOptions, epoch: u64) -> Vec<Vec<u64>> {
        let mut plan = EpochPlan::new(tile_cells, opts, epoch).unwrap();
        (0..plan.n_batches()).map(|j| plan.batch(j).unwrap()).collect()
    }

    #[test]
    fn one_rank_serves_every_cell_once_in_windows() {
        let tiles = [10, 10, 10, 10, 10, 7];
        let opts = EpochOptions { shuffle_tiles: 2, ..EpochOptions::new(8) };
        let batches = all_batches(&tiles, &opts, 3);
        let mut cells: Vec<u64> = batches.concat();
        assert_eq!(cells.len(), 57);
        assert_eq!(batches.len(), 8);
        // Consecutive runs of 20 (or 17) stream cells come from 2 tiles.
        let starts = [0u64, 10, 20, 30, 40, 50, 57];
        let tile = |c: u64| starts.partition_point(|&s| s <= c) - 1;
        for run in cells.chunks(20).take(2) {
            let mut ts: Vec<usize> = run.iter().map(|&c| tile(c)).collect();
            ts.dedup();
            ts.sort();
            ts.dedup();
            assert!(ts.len() <= 2, "{ts:?}");
        }
        cells.sort();
        assert_eq!(cells, (0..57).collect::<Vec<_>>());
    }

    #[test]
    fn without_shuffle_cells_come_in_order() {
        let opts = EpochOptions { shuffle: false, ..EpochOptions::new(4) };
        assert_eq!(all_batches(&[5, 5], &opts, 9).concat(), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn epochs_differ_and_repeat() {
        let opts = EpochOptions::new(16);
        let a = all_batches(&[40, 40, 40], &opts, 0);
        assert_eq!(a, all_batches(&[40, 40, 40], &opts, 0));
        assert_ne!(a, all_batches(&[40, 40, 40], &opts, 1));
        assert_ne!(a, all_batches(&[40, 40, 40], &EpochOptions { seed: 5, ..opts }, 0));
    }

    #[test]
    fn ranks_and_workers_split_the_stream() {
        let tiles = [30, 30, 30, 13];
        for world in [1usize, 2, 3, 8] {
            for workers in [1usize, 2, 3] {
                for remainder in [Remainder::Drop, Remainder::Wrap] {
                    let mut seen: Vec<u64> = Vec::new();
                    let mut counts = Vec::new();
                    for rank in 0..world {
                        let mut rank_batches: Vec<(usize, Vec<u64>)> = Vec::new();
                        for worker in 0..workers {
                            let opts = EpochOptions {
                                rank,
                                world_size: world,
                                worker,
                                num_workers: workers,
                                remainder,
                                ..EpochOptions::new(7)
                            };
                            let mut plan = EpochPlan::new(&tiles, &opts, 2).unwrap();
                            for j in 0..plan.n_batches() {
                                rank_batches.push((plan.rank_batch_of(j), plan.batch(j).unwrap()));
                            }
                        }
                        rank_batches.sort();
                        assert!(
                            rank_batches.iter().enumerate().all(|(i, (k, _))| i == *k),
                            "worker batches interleave"
                        );
                        counts.push(rank_batches.len());
                        seen.extend(rank_batches.into_iter().flat_map(|(_, b)| b));
                    }
                    assert!(counts.iter().all(|&c| c == counts[0]), "equal batches per rank: {counts:?}");
                    let n = 103u64;
                    let mut sorted = seen.clone();
                    sorted.sort();
                    let unique = {
                        let mut u = sorted.clone();
                        u.dedup();
                        u
                    };
                    match remainder {
                        Remainder::Drop => {
                            assert_eq!(unique.len(), sorted.len(), "no cell twice");
                            assert_eq!(sorted.len() as u64, n / world as u64 * world as u64);
                        }
                        Remainder::Wrap => {
                            assert_eq!(unique, (0..n).collect::<Vec<_>>(), "every cell");
                            assert_eq!(sorted.len() as u64, n.div_ceil(world as u64) * world as u64);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn resuming_yields_the_rest_of_the_epoch() {
        let tiles = [25, 25, 25, 25, 11];
        for workers in [1usize, 2, 3] {
            let whole = all_batches(&tiles, &EpochOptions::new(6), 4);
            for k in [0usize, 1, 5, 13, whole.len()] {
                let mut rest: Vec<(usize, Vec<u64>)> = Vec::new();
                for worker in 0..workers {
                    let opts = EpochOptions { worker, num_workers: workers, first_batch: k, ..EpochOptions::new(6) };
                    let mut plan = EpochPlan::new(&tiles, &opts, 4).unwrap();
                    for j in 0..plan.n_batches() {
                        assert_eq!((plan.rank_batch_of(j) - k) % workers, worker, "round robin from the resume point");
                        rest.push((plan.rank_batch_of(j), plan.batch(j).unwrap()));
                    }
                }
                rest.sort();
                assert_eq!(rest.into_iter().map(|(_, b)| b).collect::<Vec<_>>(), whole[k..].to_vec(), "k = {k}");
            }
        }
    }

    #[test]
    fn drop_last_and_tiles_ahead() {
        let opts = EpochOptions { drop_last: true, shuffle: false, ..EpochOptions::new(6) };
        let plan = EpochPlan::new(&[10, 10, 5], &opts, 0).unwrap();
        assert_eq!(plan.n_batches(), 4);
        assert_eq!(plan.rank_cells(), 24);
        let opts = EpochOptions { shuffle: false, shuffle_tiles: 1, ..EpochOptions::new(6) };
        let plan = EpochPlan::new(&[10, 10, 5], &opts, 0).unwrap();
        assert_eq!(plan.tiles_ahead(0, 8), vec![0, 1, 2]);
        assert_eq!(plan.tiles_ahead(2, 8), vec![1, 2]);
        assert_eq!(plan.tiles_ahead(0, 1), vec![0]);
    }

    #[test]
    fn bad_options_are_refused() {
        for opts in [
            EpochOptions::new(0),
            EpochOptions { rank: 2, world_size: 2, ..EpochOptions::new(4) },
            EpochOptions { worker: 1, ..EpochOptions::new(4) },
            EpochOptions { shuffle_tiles: 0, ..EpochOptions::new(4) },
        ] {
            assert!(EpochPlan::new(&[4], &opts, 0).is_err(), "{opts:?}");
        }
        let mut plan = EpochPlan::new(&[4], &EpochOptions::new(4), 0).unwrap();
        assert!(plan.batch(1).is_err());
    }
}
