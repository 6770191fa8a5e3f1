//! When each tile is next read, from the tile orders of the current pass over the data and the next one.

use std::collections::{HashMap, HashSet};

/// The order in which the pass beginning now and the one after it (a training loop's epoch and the next) first read
/// their tiles ([`crate::EpochPlan::tile_order`]), and the tiles read since the pass began: a cache that must evict
/// asks it which tile is read last from now on. A tile not read yet in this pass is next read at its place in it; one
/// read already (each tile belongs to one window an epoch) at its place in the next. Among tiles read once an epoch
/// each, evicting the one read last keeps the most for later reads, so a cache holding `C` of `N` tiles decodes about
/// `N - C` an epoch, where evicting the least recently used leaves mostly tiles the next epoch reads late.
#[derive(Debug, Clone, Default)]
pub struct PassOrder {
    this_pass: HashMap<usize, usize>,
    next_pass: HashMap<usize, usize>,
    read: HashSet<usize>,
}

impl PassOrder {
    /// The orders of this pass and the next (a tile listed twice keeps its first place).
    pub fn new(this_pass: &[usize], next_pass: &[usize]) -> PassOrder {
        let places = |tiles: &[usize]| {
            let mut at = HashMap::with_capacity(tiles.len());
            for (p, &t) in tiles.iter().enumerate() {
                at.entry(t).or_insert(p);
            }
            at
        };
        PassOrder { this_pass: places(this_pass), next_pass: places(next_pass), read: HashSet::new() }
    }

    /// Whether no order was given.
    pub fn is_empty(&self) -> bool {
        self.this_pass.is_empty() && self.next_pass.is_empty()
    }

    /// Records `tiles` as read in this pass.
    pub fn mark_read(&mut self, tiles: &[usize]) {
        if !self.is_empty() {
            self.read.extend(tiles);
        }
    }

    /// When tile `t` is next read, as a place in the two passes (`None`: neither reads it).
    pub fn next_use(&self, t: usize) -> Option<usize> {
        match self.this_pass.get(&t) {
            Some(&p) if !self.read.contains(&t) => Some(p),
            _ => self.next_pass.get(&t).map(|&p| self.this_pass.len() + p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tile_is_next_read_in_this_pass_until_read_then_in_the_next() {
        let mut o = PassOrder::new(&[6, 0, 5], &[3, 1, 5, 3, 0, 2, 6]);
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 6].map(|t| o.next_use(t)),
            [Some(1), Some(4), Some(8), Some(3), None, Some(2), Some(0)]
        );
        o.mark_read(&[6, 0]);
        assert_eq!(o.next_use(0), Some(3 + 4));
        assert_eq!(o.next_use(6), Some(3 + 6));
        assert_eq!(o.next_use(5), Some(2));
        let mut none = PassOrder::default();
        none.mark_read(&[1]);
        assert!(none.is_empty() && none.next_use(1).is_none());
    }
}
