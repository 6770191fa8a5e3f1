//! The reader's memory model for a training loader: how a memory budget becomes the cache and prefetch sizes of
//! [`ReadOptions`], for a reader that serves shuffled windows of consecutive tiles.

use super::options::ReadOptions;
use crate::manifest::Manifest;

/// Bytes a decoded tile takes per nonzero: its decompressed planes (two bytes of gap and two of count).
pub const DECODED_BYTES_PER_NONZERO: f64 = 4.0;

/// Bytes a sparse batch takes per nonzero: a column index and a count, four bytes each.
pub const BATCH_BYTES_PER_NONZERO: u64 = 8;

/// Bytes a sparse batch takes per cell besides its nonzeros: the cell's index (8) and its row offset (4).
pub const BATCH_BYTES_PER_CELL: u64 = 12;

/// The granularity of the memory a loader lays its batches out in (its slots are whole multiples of it).
pub const BATCH_SLOT_GRANULE: u64 = 1 << 16;

/// Bytes of the slot a loader makes for a batch that needs `used` bytes: a quarter more, so that a later batch of
/// a few more nonzeros fits too, in whole [`BATCH_SLOT_GRANULE`]s.
pub fn batch_slot_bytes(used: u64) -> u64 {
    let room = used.saturating_add(used / 4).max(1);
    let granules = room.div_ceil(BATCH_SLOT_GRANULE);
    granules.checked_mul(BATCH_SLOT_GRANULE).unwrap_or(u64::MAX / BATCH_SLOT_GRANULE * BATCH_SLOT_GRANULE)
}

/// The batches a training loader holds beside its tiles, which a memory budget covers too: `held` batches of
/// `cells` cells each (the one the caller holds, the next one gathered, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldBatches {
    /// Cells a batch.
    pub cells: u64,
    /// Batches held at once.
    pub held: u64,
    /// Genes of a dense batch (its every gene as a 4-byte count), or 0 for sparse batches.
    pub dense_genes: u64,
}

impl HeldBatches {
    /// Bytes the batches take, at the mean nonzeros a cell of tiles of `tile_cells` cells and `tile_nnz` nonzeros:
    /// a sparse batch in its slot ([`batch_slot_bytes`] of its cells and nonzeros), a dense one as its matrix.
    pub fn bytes(&self, tile_cells: &[u64], tile_nnz: &[u64]) -> u64 {
        if self.held == 0 || self.cells == 0 {
            return 0;
        }
        let one = if self.dense_genes > 0 {
            self.cells.saturating_mul(self.dense_genes.saturating_mul(4).saturating_add(BATCH_BYTES_PER_CELL))
        } else {
            let cells = tile_cells.iter().fold(0u64, |a, &b| a.saturating_add(b)).max(1) as f64;
            let mean_nnz = tile_nnz.iter().map(|&x| x as f64).sum::<f64>() / cells;
            let nnz = (mean_nnz * self.cells as f64).ceil();
            let nnz = if nnz >= u64::MAX as f64 { u64::MAX } else { nnz as u64 };
            batch_slot_bytes(
                self.cells
                    .saturating_mul(BATCH_BYTES_PER_CELL)
                    .saturating_add(nnz.saturating_mul(BATCH_BYTES_PER_NONZERO)),
            )
        };
        one.saturating_mul(self.held)
    }
}

/// The cache and prefetch sizes that keep a reader within a memory budget ([`TileBudget::split`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileBudget {
    /// Decoded tiles the cache holds ([`ReadOptions::max_cached_tiles`]).
    pub cached: usize,
    /// Tiles fetched ahead, waiting compressed ([`ReadOptions::max_prefetch_tiles`]).
    pub ahead: usize,
}

impl TileBudget {
    /// Splits `budget` bytes for a reader serving windows of `window` tiles of this dataset (a decoded tile at
    /// [`DECODED_BYTES_PER_NONZERO`] of its mean nonzeros, a prefetched one at its mean compressed size). In this
    /// order: the window's tiles and one decoded ahead; tiles fetched ahead, up to two windows or 8 tiles (on object
    /// storage they hide the requests' latency, and cost only their compressed size); decoded places up to a whole
    /// next window; the rest as more decoded places (a cache that can hold a small dataset across epochs). At
    /// least the window and one tile ahead, whatever the budget.
    pub fn split(budget: u64, window: usize, manifest: &Manifest) -> TileBudget {
        TileBudget::split_sizes(budget, window, &manifest.tile_nnz, &manifest.tile_bytes)
    }

    /// [`TileBudget::split`] of what `budget` leaves once the loader's `batches` are set aside: the budget then
    /// covers the tiles and the batches made of them.
    pub fn split_beside(budget: u64, window: usize, batches: HeldBatches, manifest: &Manifest) -> TileBudget {
        let m = manifest;
        TileBudget::split_sizes_beside(budget, window, batches, &m.tile_cells, &m.tile_nnz, &m.tile_bytes)
    }

    /// [`TileBudget::split_beside`] from the tiles' cells, nonzeros and compressed sizes.
    pub fn split_sizes_beside(
        budget: u64,
        window: usize,
        batches: HeldBatches,
        tile_cells: &[u64],
        tile_nnz: &[u64],
        tile_bytes: &[u64],
    ) -> TileBudget {
        let left = budget.saturating_sub(batches.bytes(tile_cells, tile_nnz));
        TileBudget::split_sizes(left, window, tile_nnz, tile_bytes)
    }

    /// [`TileBudget::split`] from the tiles' nonzeros and compressed sizes.
    pub fn split_sizes(budget: u64, window: usize, tile_nnz: &[u64], tile_bytes: &[u64]) -> TileBudget {
        let n = tile_nnz.len().max(1) as f64;
        let decoded = (DECODED_BYTES_PER_NONZERO * tile_nnz.iter().map(|&x| x as f64).sum::<f64>() / n).max(1.0);
        let compressed = (tile_bytes.iter().map(|&x| x as f64).sum::<f64>() / n).max(1.0);
        let fits = |left: f64, each: f64| if left > 0.0 { (left / each).floor() as usize } else { 0 };
        let mut places = window + 1;
        let mut left = budget as f64 - places as f64 * decoded;
        let ahead = fits(left, compressed).min((2 * window).max(8)).max(1);
        left -= ahead as f64 * compressed;
        let more = fits(left, decoded).min(window.saturating_sub(1));
        places += more;
        left -= more as f64 * decoded;
        TileBudget { cached: places + fits(left, decoded), ahead }
    }
}

/// Bytes an epoch plan holds per cell of a window whose cells it has laid out (their indices, shuffled).
pub const PLAN_BYTES_PER_CELL: u64 = 8;

/// Epoch plan bytes a loader allows whatever its budget, as it holds a window's tiles whatever its budget: 64 MiB,
/// windows of four million cells (two held).
pub const PLAN_BYTES_ALWAYS_ALLOWED: u64 = 64 << 20;

impl TileBudget {
    /// An error (saying what to change) if a loader's epoch plans could not lay out a window of `window` tiles of
    /// up to the largest of `tile_cells` cells within `budget` bytes (or [`PLAN_BYTES_ALWAYS_ALLOWED`], if more): a
    /// plan holds one window's cells, and the next epoch's plan one more. A window's cells are laid out before its
    /// tiles are read, so a manifest claiming more cells than its tiles hold is refused here rather than met with
    /// an allocation of its claim.
    pub fn check_plan(budget: u64, window: usize, tile_cells: &[u64]) -> Result<(), String> {
        let largest = tile_cells.iter().copied().max().unwrap_or(0);
        let cells = largest.saturating_mul(window as u64);
        let bytes = cells.saturating_mul(PLAN_BYTES_PER_CELL).saturating_mul(2);
        if bytes > budget.max(PLAN_BYTES_ALWAYS_ALLOWED) {
            return Err(format!(
                "a window of {window} tiles of up to {largest} cells (as the manifest says) takes {bytes} bytes of \
                 epoch plan, more than the memory budget of {budget} bytes: use fewer tiles a window (shuffle_tiles) \
                 or a larger memory_budget; if the tiles cannot be that large, the manifest is damaged (verify the \
                 dataset)"
            ));
        }
        Ok(())
    }
}

impl ReadOptions {
    /// These options with the cache and prefetch sizes of `budget`.
    pub fn with_budget(self, budget: TileBudget) -> ReadOptions {
        ReadOptions { max_cached_tiles: budget.cached, max_prefetch_tiles: budget.ahead, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn a_window_s_plan_must_fit_the_budget() {
        let tiles = [10_000, 10_000, 2_000];
        assert!(TileBudget::check_plan(1, 4, &tiles).is_ok(), "640 kB of plan: allowed whatever the budget");
        let big = [5_000_000, 5_000_000];
        assert!(TileBudget::check_plan(512 * MB, 4, &big).is_ok(), "4 x 5M cells x 8 bytes x 2 is 320 MB");
        let err = TileBudget::check_plan(256 * MB, 4, &big).unwrap_err();
        assert!(err.contains("320000000 bytes") && err.contains("shuffle_tiles"), "{err}");
        // A claim of 2^32 - 1 cells in one tile: refused, not allocated.
        assert!(TileBudget::check_plan(8 << 30, 1, &[u64::from(u32::MAX)]).is_err());
        assert!(TileBudget::check_plan(0, 4, &[]).is_ok());
    }

    #[test]
    fn the_window_and_one_ahead_come_first_whatever_the_budget() {
        // 1 MB decoded (250,000 nonzeros), 0.1 MB compressed a tile.
        let (nnz, bytes) = (vec![250_000; 10], vec![MB / 10; 10]);
        assert_eq!(TileBudget::split_sizes(0, 3, &nnz, &bytes), TileBudget { cached: 4, ahead: 1 });
        // 4 places take 4 MB; 1 MB more: fetched ahead first (up to 8 = max(2 x 3, 8)), then decoded places.
        let b = TileBudget::split_sizes(5 * MB, 3, &nnz, &bytes);
        assert_eq!(b, TileBudget { cached: 4, ahead: 8 });
        // Enough for a whole next window (2 more places beyond the one ahead), then a cache.
        let b = TileBudget::split_sizes(4 * MB + 8 * MB / 10 + 2 * MB + 5 * MB, 3, &nnz, &bytes);
        assert_eq!(b, TileBudget { cached: 4 + 2 + 5, ahead: 8 });
    }

    #[test]
    fn fetches_ahead_reach_two_windows_when_windows_are_large() {
        let (nnz, bytes) = (vec![1_000; 100], vec![1_000; 100]);
        let b = TileBudget::split_sizes(u64::MAX / 2, 6, &nnz, &bytes);
        assert_eq!(b.ahead, 12);
        assert!(b.cached > 1_000_000, "a large budget is a large cache");
    }

    #[test]
    fn held_batches_come_out_of_the_budget() {
        // Tiles of 1,000 cells with 500 nonzeros a cell: a sparse batch of 1,000 cells needs 12,000 + 4,000,000
        // bytes, and its slot a quarter more in whole granules.
        let (cells, nnz) = (vec![1_000; 4], vec![500_000; 4]);
        let sparse = HeldBatches { cells: 1_000, held: 4, dense_genes: 0 };
        let slot = 4_012_000u64 * 5 / 4;
        let slot = slot.div_ceil(BATCH_SLOT_GRANULE) * BATCH_SLOT_GRANULE;
        assert_eq!(batch_slot_bytes(4_012_000), slot);
        assert_eq!(sparse.bytes(&cells, &nnz), 4 * slot);
        assert_eq!(batch_slot_bytes(1), BATCH_SLOT_GRANULE, "a small batch takes a whole granule");
        assert_eq!(batch_slot_bytes(u64::MAX) % BATCH_SLOT_GRANULE, 0);
        let dense = HeldBatches { cells: 100, held: 3, dense_genes: 2_000 };
        assert_eq!(dense.bytes(&cells, &nnz), 8_012 * 300);
        assert_eq!(HeldBatches::default().bytes(&cells, &nnz), 0);
        assert_eq!(HeldBatches { cells: 1, held: 1, dense_genes: 0 }.bytes(&[], &[]), BATCH_SLOT_GRANULE);
        let huge = HeldBatches { cells: u64::MAX, held: u64::MAX, dense_genes: u64::MAX };
        assert_eq!(huge.bytes(&cells, &nnz), u64::MAX);
        // The tiles get what the batches leave: 4 places of 2 MB, then tiles fetched ahead of 0.5 MB.
        let bytes = vec![MB / 2; 4];
        let sparse = HeldBatches { cells: 10, held: 4, dense_genes: 0 };
        let budget = 8 * MB + 2 * MB + sparse.bytes(&cells, &nnz);
        let split = TileBudget::split_sizes_beside(budget, 3, sparse, &cells, &nnz, &bytes);
        assert_eq!(split, TileBudget::split_sizes(10 * MB, 3, &nnz, &bytes));
        assert_eq!(split, TileBudget { cached: 4, ahead: 4 });
        let starved = TileBudget::split_sizes_beside(MB, 3, huge, &cells, &nnz, &bytes);
        assert_eq!(starved, TileBudget { cached: 4, ahead: 1 }, "the window and one ahead, whatever the batches");
    }

    #[test]
    fn an_empty_dataset_gets_the_minimum() {
        assert_eq!(TileBudget::split_sizes(0, 1, &[], &[]), TileBudget { cached: 2, ahead: 1 });
        let o = ReadOptions::default().with_budget(TileBudget { cached: 7, ahead: 3 });
        assert_eq!((o.max_cached_tiles, o.max_prefetch_tiles, o.verify_crc), (7, 3, true));
    }
}
