//! The reader's memory model for a training loader: how a memory budget becomes the cache and prefetch sizes of
//! [`ReadOptions`], for a reader that serves shuffled windows of consecutive tiles.

use super::options::ReadOptions;
use crate::manifest::Manifest;

/// Bytes a decoded tile takes per nonzero: its decompressed planes (two bytes of gap and two of count).
pub const DECODED_BYTES_PER_NONZERO: f64 = 4.0;

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
    fn an_empty_dataset_gets_the_minimum() {
        assert_eq!(TileBudget::split_sizes(0, 1, &[], &[]), TileBudget { cached: 2, ahead: 1 });
        let o = ReadOptions::default().with_budget(TileBudget { cached: 7, ahead: 3 });
        assert_eq!((o.max_cached_tiles, o.max_prefetch_tiles, o.verify_crc), (7, 3, true));
    }
}
