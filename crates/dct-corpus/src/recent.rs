//! A corpus-wide bound on the decoded tiles its members keep between random reads: each member's reader keeps
//! its own few tiles, so a corpus of a thousand members read at random would otherwise hold a thousand times a
//! dataset's cache. A training loader does not use it: it gives tiles back window by window itself, and must keep
//! the tiles it fetched ahead.

use std::sync::Mutex;

/// The corpus tiles that reads used last (the most recent last), and how many the members may keep together.
#[derive(Debug)]
pub(crate) struct RecentTiles {
    cap: usize,
    tiles: Mutex<Vec<usize>>,
}

impl RecentTiles {
    /// At most `cap` tiles (at least 1) kept between reads.
    pub(crate) fn new(cap: usize) -> RecentTiles {
        RecentTiles { cap: cap.max(1), tiles: Mutex::new(Vec::new()) }
    }

    /// Records `read` (the corpus tiles of a read just done, each once, in any order) as the most recent, the
    /// last of them the latest; returns the tiles that fell out of the `cap` most recent and the tiles kept.
    pub(crate) fn record(&self, read: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let mut fresh = read.to_vec();
        fresh.sort_unstable();
        let mut tiles = self.tiles.lock().unwrap_or_else(|e| e.into_inner());
        tiles.retain(|t| fresh.binary_search(t).is_err());
        tiles.extend_from_slice(read);
        let excess = tiles.len().saturating_sub(self.cap);
        let dropped: Vec<usize> = tiles.drain(..excess).collect();
        (dropped, tiles.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_tiles_and_names_those_that_fall_out() {
        let recent = RecentTiles::new(3);
        assert_eq!(recent.record(&[5, 1]), (vec![], vec![5, 1]));
        assert_eq!(recent.record(&[7]), (vec![], vec![5, 1, 7]));
        // 5 is read again: it becomes the most recent, and 1 (the oldest) falls out with the new 9.
        assert_eq!(recent.record(&[5, 9]), (vec![1], vec![7, 5, 9]));
        // A read of more tiles than the cap keeps its last ones.
        assert_eq!(recent.record(&[2, 3, 4, 6]), (vec![7, 5, 9, 2], vec![3, 4, 6]));
        let one = RecentTiles::new(0);
        assert_eq!(one.record(&[4, 8]), (vec![4], vec![8]));
    }
}
