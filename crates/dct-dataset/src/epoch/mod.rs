//! The order of a training epoch: which cells each batch of each rank and loader worker holds, computed the same way
//! by every process from `(seed, epoch)` and the job's shape (`world_size`, `num_workers`) alone, so that ranks
//! agree without talking and a resumed run yields the batches an uninterrupted one would have.
//!
//! An epoch, for a dataset's tiles (or a corpus's, some of which may hold no selected cell: those are left out):
//! 1. the tiles in shuffled order (seeded by seed and epoch; in order without `shuffle`). Shuffled with several
//!    ranks or workers, and tiles enough for every group to fill two windows, the tiles are first dealt into
//!    `world_size × num_workers` *groups* of nearly equal cells, the same groups every epoch (seeded by seed alone),
//!    and the order is each group's tiles in shuffled order, one group after another. Group `g` is then about the
//!    share of rank `g / num_workers`'s worker `g % num_workers` (step 4 cuts the parts where the groups start), so
//!    that each worker reads the same tiles every epoch and the tiles its cache kept from one epoch serve the next
//!    (the way MosaicML Streaming keeps shards on their nodes); the order within a group, its windows and their
//!    cells change every epoch. Only about the same tiles: a rank's share ends at equal cells and a group's within
//!    half a tile of it, so a worker at the edge of a rank's share also reads the neighbour's tiles there (those
//!    within half the largest tile of the edge); and a weighted or stratified epoch draws other cells from each
//!    group than its tiles hold, so its parts follow the groups only roughly. The stream then depends on
//!    `world_size × num_workers`: every rank must use the same `num_workers`;
//! 2. cut into *windows* of `shuffle_tiles` consecutive tiles of that order (the last one shorter), or, with
//!    groups, each group into as many windows of at most `shuffle_tiles` tiles as it needs, of nearly equal sizes;
//!    and the cells of each window shuffled (seeded by seed, epoch and window): the global stream, every cell
//!    exactly once. Sequential I/O: a window's tiles are fetched once and its batches draw on all of them;
//! 3. the stream split into `world_size` contiguous, equal shares, one per rank: the remainder (fewer than
//!    `world_size` cells) is dropped ([`Remainder::Drop`]: no cell goes to two ranks) or the stream wraps around to
//!    its start to fill the last shares ([`Remainder::Wrap`]: every cell is served, a few twice);
//! 4. each rank's share split among its `num_workers` loader workers in contiguous *parts* cut at window boundaries
//!    (where the workers' groups start, when that is within a quarter of a part of equal shares; otherwise nearest
//!    to equal shares), so that each tile is fetched and decoded by one worker of the rank (see `parts.rs`); in cell
//!    order (without `shuffle`) the share is one part instead, its batches taken by the workers in turn, so that
//!    the loader yields them in cell order (a tile may then be fetched by several workers);
//! 5. each part cut into batches of `batch_size` consecutive cells. Every rank has the same number of batches in
//!    every epoch: for a share of `S` cells and `W` workers, `ceil(S / batch_size) + W - 1` (at most `S`), or with
//!    `drop_last` `floor(S / batch_size) - (W - 1)` (at least 0), since each cut between parts adds at most one
//!    short batch (loses at most one full one); a rank whose parts make fewer (more) splits a few batches further
//!    (leaves a few out). In cell order the count is `ceil(S / batch_size)` (`floor` with `drop_last`). The rank's order is the one a `DataLoader` yields: one batch of each worker in turn,
//!    skipping workers that have finished ([`EpochPlan::rank_batch_of`]). With one worker (or none) the part is
//!    the share itself and the batches are its consecutive runs.
//!
//! Resuming after the rank yielded `first_batch` batches: each worker starts after the batches it had yielded, and
//! worker `s` serves the part of worker `(s + next) % num_workers` of the interrupted run, where `next` is the worker
//! whose turn it was, so that the new loader's interleave continues the old one batch for batch. The parts depend on
//! `num_workers`, so a resume must keep it.
//!
//! A weighted or stratified epoch draws *units* instead of whole tiles ([`EpochUnit`]: some cells of a tile, of one
//! stratum or of any); the units take the tiles' place in steps 1 and 2. Units of one tile and pass given one after
//! another (a stratified epoch's draws of several strata from one tile) share one place in the shuffle and one
//! window, so the tile is fetched once for all of them.
//!
//! Memory is one window's cells, whatever the dataset's size: a batch's cells are computed from its window when asked
//! for ([`EpochPlan::batch_into`]).

mod parts;
mod passes;
mod strata;
mod streams;
#[cfg(test)]
mod tests;

pub use passes::PassOrder;
pub use strata::TileStrata;

use std::sync::Arc;

use rand::seq::SliceRandom;

use crate::error::DatasetError;
use parts::Part;
use streams::{rng, sample_rng, tile_groups};

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
    /// Batches are all of `batch_size` cells: cells that would make a short batch are left out.
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
    /// The rank's batches already yielded (0; or where a resumed run goes on, with the same `num_workers`).
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

/// What an epoch draws from one tile: `take` of its cells (of stratum `stratum`, or of any), all of them or a seeded
/// sample of that many, in the `pass`-th pass over them. A dataset's epoch draws each tile whole once; a weighted
/// epoch over a corpus draws a member's tiles as many times as its share asks, and part of a tile to make the share
/// exact; a stratified epoch draws each stratum's cells of a tile likewise ([`TileStrata`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochUnit {
    /// The tile.
    pub tile: usize,
    /// Cells drawn from it (at most its cells, or its cells of `stratum`).
    pub take: u64,
    /// Which pass over the tile this is (seeds the sample when `take` is less than the cells drawn from).
    pub pass: u64,
    /// The stratum whose cells are drawn (`None`: any cell of the tile).
    pub stratum: Option<u32>,
}

impl EpochUnit {
    /// `take` cells of any stratum of tile `tile` in pass `pass`.
    pub fn of_tile(tile: usize, take: u64, pass: u64) -> EpochUnit {
        EpochUnit { tile, take, pass, stratum: None }
    }
}

/// One window of the stream: consecutive units of the epoch's unit order and where its cells start in the stream.
#[derive(Debug, Clone)]
struct Window {
    units: Vec<EpochUnit>,
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
    /// Batches of each part of this rank.
    part_batches: Vec<u64>,
    /// The part this worker serves, and the first of its batches it serves.
    part: Part,
    part_index: usize,
    part_first: u64,
    /// Batches of the part between this worker's consecutive batches: 1, or `num_workers` in cell order, where the
    /// rank's share is one part whose batches the workers take in turn.
    stride: u64,
    /// Cells the rank's batches hold.
    rank_cells: u64,
    /// The cells of the window last expanded (its index and permutation).
    cached: Option<(usize, Vec<u64>)>,
    /// The strata units of a stratified epoch draw from.
    strata: Option<Arc<TileStrata>>,
    /// Where each group of tiles starts in the stream (empty when the tiles are not grouped: see step 1).
    group_start: Vec<u64>,
}

impl EpochPlan {
    /// The plan of epoch `epoch` of a dataset whose tiles hold `tile_cells` cells: every cell once.
    pub fn new(tile_cells: &[u64], opts: &EpochOptions, epoch: u64) -> Result<EpochPlan, DatasetError> {
        let units: Vec<EpochUnit> =
            tile_cells.iter().enumerate().map(|(tile, &take)| EpochUnit::of_tile(tile, take, 0)).collect();
        EpochPlan::with_units(tile_cells, units, opts, epoch)
    }

    /// The plan of epoch `epoch` drawing `units` from tiles of `tile_cells` cells (a weighted epoch over a corpus:
    /// see [`EpochUnit`]); the units are shuffled, windowed and split as a dataset's tiles are.
    pub fn with_units(
        tile_cells: &[u64],
        units: Vec<EpochUnit>,
        opts: &EpochOptions,
        epoch: u64,
    ) -> Result<EpochPlan, DatasetError> {
        EpochPlan::build(tile_cells, units, None, opts, epoch)
    }

    /// The plan of epoch `epoch` drawing `units`, some of one stratum of `strata`, from tiles of `tile_cells` cells
    /// (a stratified epoch: see [`EpochUnit`] and the module docs).
    pub fn stratified(
        tile_cells: &[u64],
        units: Vec<EpochUnit>,
        strata: Arc<TileStrata>,
        opts: &EpochOptions,
        epoch: u64,
    ) -> Result<EpochPlan, DatasetError> {
        EpochPlan::build(tile_cells, units, Some(strata), opts, epoch)
    }

    fn build(
        tile_cells: &[u64],
        units: Vec<EpochUnit>,
        strata: Option<Arc<TileStrata>>,
        opts: &EpochOptions,
        epoch: u64,
    ) -> Result<EpochPlan, DatasetError> {
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
        let mut total = 0u64;
        tile_start.push(0);
        for &c in tile_cells {
            total = total.checked_add(c).ok_or_else(|| {
                DatasetError::InvalidArgument("epoch plan: the tiles hold more than 2^64 cells".into())
            })?;
            tile_start.push(total);
        }
        if let Some(s) = &strata
            && s.n_tiles() != tile_cells.len()
        {
            return bad(format!("strata of {} tiles for {} tiles", s.n_tiles(), tile_cells.len()));
        }
        let room = |u: &EpochUnit| match (u.stratum, &strata) {
            (None, _) => tile_cells.get(u.tile).copied(),
            (Some(s), Some(strata)) if u.tile < tile_cells.len() => Some(strata.cells(u.tile, s).len() as u64),
            (Some(_), _) => None,
        };
        if let Some(u) = units.iter().find(|u| room(u).is_none_or(|c| u.take > c)) {
            return bad(format!(
                "a unit draws {} cells of tile {} of {} tiles (stratum {:?}, {} strata)",
                u.take,
                u.tile,
                tile_cells.len(),
                u.stratum,
                strata.as_ref().map_or(0, |s| s.n_strata())
            ));
        }
        // Slots: runs of units of one tile and pass, each one place in the shuffle.
        let mut slots: Vec<std::ops::Range<usize>> = Vec::with_capacity(units.len());
        for (i, u) in units.iter().enumerate() {
            match slots.last_mut() {
                Some(last) if units[last.start].tile == u.tile && units[last.start].pass == u.pass => last.end = i + 1,
                _ => slots.push(i..i + 1),
            }
        }
        let mut order: Vec<usize> = (0..slots.len()).collect();
        if opts.shuffle {
            order.shuffle(&mut rng(opts.seed, epoch, u64::MAX));
        }
        let slot_cells = |s: usize| -> u64 { units[slots[s].clone()].iter().map(|u| u.take).sum() };
        // Slots without cells (a selection's tiles, never a dataset's) take no place in a window: a window's tiles
        // are all fetched, and these hold nothing to read.
        order.retain(|&s| slot_cells(s) > 0);
        // Each tile's group, the same every epoch (step 1 of the module docs): a stable sort keeps the shuffled
        // order within each group, and windows are cut within groups, of nearly equal sizes.
        let groups = opts.world_size.saturating_mul(opts.num_workers);
        let least = opts.shuffle_tiles.saturating_mul(MIN_GROUP_WINDOWS);
        let tiles_with_cells = tile_cells.iter().filter(|&&c| c > 0).count();
        let group_of: Vec<u32> = if opts.shuffle && groups > 1 && tiles_with_cells >= groups.saturating_mul(least) {
            // Groups hold equal cells, not equal tiles: each must still hold tiles for two windows.
            let group_of = tile_groups(tile_cells, groups, opts.seed);
            let mut tiles_of = vec![0usize; groups];
            for (t, &g) in group_of.iter().enumerate() {
                tiles_of[g as usize] += usize::from(tile_cells[t] > 0);
            }
            if tiles_of.iter().all(|&n| n >= least) { group_of } else { Vec::new() }
        } else {
            Vec::new()
        };
        let grouped = !group_of.is_empty();
        let group = |s: usize| group_of.get(units[slots[s].start].tile).copied().unwrap_or(0);
        if grouped {
            order.sort_by_key(|&s| group(s));
        }
        let mut windows = Vec::new();
        let mut group_start = if grouped { vec![u64::MAX; groups] } else { Vec::new() };
        let mut start = 0u64;
        for run in order.chunk_by(|&a, &b| group(a) == group(b)) {
            if grouped {
                group_start[group(run[0]) as usize] = start;
            }
            // Without groups, windows of `shuffle_tiles` (the last one shorter); within a group, as many windows
            // and as nearly equal as that takes, so that no group ends on a window of one tile.
            let n_windows = run.len().div_ceil(opts.shuffle_tiles);
            let (size, longer) =
                if grouped { (run.len() / n_windows, run.len() % n_windows) } else { (opts.shuffle_tiles, 0) };
            let mut at = 0usize;
            for i in 0..n_windows {
                let len = (size + usize::from(i < longer)).min(run.len() - at);
                let chunk = &run[at..at + len];
                at += len;
                let cells: u64 = chunk.iter().map(|&s| slot_cells(s)).sum();
                let window_units = chunk.iter().flat_map(|&s| units[slots[s].clone()].iter().copied()).collect();
                windows.push(Window { units: window_units, start, cells });
                start = start.checked_add(cells).ok_or_else(|| {
                    DatasetError::InvalidArgument("epoch plan: the epoch draws more than 2^64 cells".into())
                })?;
            }
        }
        // A group without cells this epoch starts where the next one does.
        for g in (0..group_start.len()).rev() {
            if group_start[g] == u64::MAX {
                group_start[g] = group_start.get(g + 1).copied().unwrap_or(start);
            }
        }
        let n_cells = start;
        let mut plan = EpochPlan {
            opts: opts.clone(),
            epoch,
            tile_start,
            windows,
            n_cells,
            part_batches: Vec::new(),
            part: Part::default(),
            part_index: 0,
            part_first: 0,
            stride: 1,
            rank_cells: 0,
            cached: None,
            strata,
            group_start,
        };
        plan.place(opts);
        Ok(plan)
    }

    /// Cuts this rank's share into parts and batches, and finds this worker's part and first batch.
    fn place(&mut self, opts: &EpochOptions) {
        let (b, drop_last, w) = (opts.batch_size as u64, opts.drop_last, opts.num_workers);
        let (lo, len) = self.share(opts.rank);
        if !opts.shuffle && w > 1 {
            return self.place_in_turns(opts, lo, len);
        }
        // Grouped tiles: worker `s` of the rank starts where its group does, when that is near its equal share.
        let first_group = opts.rank * w;
        let runs = parts::cut_share(
            lo,
            len,
            w,
            |p| self.boundary_around(p),
            |s| self.group_start.get(first_group + s).copied(),
        );
        // Every rank (and every epoch) the same number of batches, whatever falls where: each cut between two
        // parts adds at most one short batch (or, with `drop_last`, loses at most one full one), so every rank can
        // meet this by splitting (or leaving out) a few batches.
        let extra = w as u64 - 1;
        let target = if drop_last { (len / b).saturating_sub(extra) } else { (len.div_ceil(b) + extra).min(len) };
        let layout = parts::layout(&runs, b, drop_last, target);
        self.part_batches = layout.iter().map(|p| p.batches).collect();
        self.rank_cells =
            layout.iter().map(|p| if p.batches == 0 { 0 } else { p.batch_range(p.batches - 1, b).1 - p.start }).sum();
        let (starts, next) = parts::resume(&self.part_batches, opts.first_batch as u64);
        self.part_index = (opts.worker + next) % w;
        self.part = layout[self.part_index];
        self.part_first = starts[self.part_index];
    }

    /// Cell order with several workers: a `DataLoader` takes one batch of each worker in turn, so the rank's share
    /// is one part cut into consecutive batches and worker `s` serves the rank's batches `first + s`, `first + s +
    /// W`, ...: the loader yields them in cell order. A tile's batches then go to several workers, each of which
    /// fetches it (at most `W` fetches a tile, against one for shuffled windows); cell order asks for it.
    fn place_in_turns(&mut self, opts: &EpochOptions, lo: u64, len: u64) {
        let (b, w) = (opts.batch_size as u64, opts.num_workers as u64);
        let target = if opts.drop_last { len / b } else { len.div_ceil(b) };
        let part = parts::layout(&[(lo, len)], b, opts.drop_last, target)[0];
        self.part_batches = (0..w).map(|s| part.batches.saturating_sub(s).div_ceil(w)).collect();
        self.rank_cells = if part.batches == 0 { 0 } else { part.batch_range(part.batches - 1, b).1 - part.start };
        self.part = part;
        self.part_index = opts.worker;
        self.part_first = opts.first_batch as u64 + opts.worker as u64;
        self.stride = w;
    }

    /// Rank `rank`'s share of the stream: `(first position, cells)`, unrolled (positions past the end wrap).
    fn share(&self, rank: usize) -> (u64, u64) {
        let w = self.opts.world_size as u64;
        let len = match self.opts.remainder {
            Remainder::Drop => self.n_cells / w,
            Remainder::Wrap => self.n_cells.div_ceil(w),
        };
        (rank as u64 * len, len)
    }

    /// The window boundaries at or before, and after, unrolled stream position `p`.
    fn boundary_around(&self, p: u64) -> (u64, u64) {
        if self.n_cells == 0 {
            return (p, p);
        }
        let lap = p / self.n_cells * self.n_cells;
        let w = &self.windows[self.window_of(p % self.n_cells)];
        (lap + w.start, lap + w.start + w.cells)
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
        self.part_batches.iter().sum::<u64>() as usize
    }

    /// Batches of each worker's part of this rank (workers of the interrupted run, when resuming).
    pub fn part_batches(&self) -> &[u64] {
        &self.part_batches
    }

    /// Batches this worker serves (from the resume point on).
    pub fn n_batches(&self) -> usize {
        self.part.batches.saturating_sub(self.part_first).div_ceil(self.stride) as usize
    }

    /// Cells this rank serves in the epoch.
    pub fn rank_cells(&self) -> u64 {
        self.rank_cells
    }

    /// The place of this worker's batch `j` in the rank's order (0 for the rank's first batch of the epoch, also
    /// when resuming).
    pub fn rank_batch_of(&self, j: usize) -> usize {
        if self.stride > 1 {
            return (self.part_first + j as u64 * self.stride) as usize;
        }
        parts::yield_position(&self.part_batches, self.part_index, self.part_first + j as u64) as usize
    }

    /// Stream positions `[lo, hi)` (unrolled) of this worker's batch `j`.
    fn batch_range(&self, j: usize) -> (u64, u64) {
        self.part.batch_range(self.part_first + j as u64 * self.stride, self.opts.batch_size as u64)
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
        let (lo, hi) = self.batch_range(j);
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
        self.first_reads(j, max_tiles)
    }

    /// Every tile this worker's batches read, in the order they are first needed: for a reader's cache, the order
    /// in which a pass asks for the tiles a cache holds (see `Dataset::plan_passes`).
    pub fn tile_order(&self) -> Vec<usize> {
        self.first_reads(0, usize::MAX)
    }

    fn first_reads(&self, j: usize, max_tiles: usize) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut last: Option<[std::ops::Range<usize>; 2]> = None;
        for k in j..self.n_batches() {
            if out.len() >= max_tiles {
                break;
            }
            // Consecutive batches mostly fall in the same windows: each set of windows is walked once.
            let windows = self.windows_of_batch(k);
            if last.as_ref() == Some(&windows) {
                continue;
            }
            for w in windows.iter().flat_map(|r| r.clone()) {
                for u in &self.windows[w].units {
                    if out.len() < max_tiles && seen.insert(u.tile) {
                        out.push(u.tile);
                    }
                }
            }
            last = Some(windows);
        }
        out
    }

    /// The windows batch `k`'s stream positions fall in (every tile of a window may be read by any batch of it),
    /// in stream order: one range, or two when the batch wraps past the end of the stream.
    fn windows_of_batch(&self, k: usize) -> [std::ops::Range<usize>; 2] {
        let (lo, hi) = self.batch_range(k);
        let n = self.n_cells.max(1);
        let (first, last) = (lo % n, (hi - 1) % n);
        if hi - lo > 0 && last < first {
            [self.window_of(first)..self.windows.len(), 0..self.window_of(last) + 1]
        } else {
            [self.window_of(first)..self.window_of(last) + 1, 0..0]
        }
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
            for u in &window.units {
                let (lo, hi) = (self.tile_start[u.tile], self.tile_start[u.tile + 1]);
                let mut pool: Vec<u64> = match (u.stratum, &self.strata) {
                    (Some(s), Some(strata)) => strata.cells(u.tile, s).iter().map(|&o| lo + u64::from(o)).collect(),
                    _ if u.take == hi - lo => {
                        cells.extend(lo..hi);
                        continue;
                    }
                    _ => (lo..hi).collect(),
                };
                if u.take < pool.len() as u64 {
                    // Part of the tile's cells: a sample of `take`, seeded by the tile, the stratum and the pass.
                    let stream = u.tile as u64 | u.stratum.map_or(0, |s| (u64::from(s) + 1) << 40);
                    let mut sampler = sample_rng(self.opts.seed, self.epoch, stream, u.pass);
                    let (picked, _) = pool.partial_shuffle(&mut sampler, u.take as usize);
                    cells.extend_from_slice(picked);
                } else {
                    cells.append(&mut pool);
                }
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

/// The fewest windows of `shuffle_tiles` tiles each group must be able to fill for the tiles to be grouped: fewer,
/// and a group would be one window, the same tiles in every batch of a worker epoch after epoch.
const MIN_GROUP_WINDOWS: usize = 2;
