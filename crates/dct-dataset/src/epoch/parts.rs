//! How a rank's share of the epoch stream is divided among its loader workers, cut into batches, and interleaved
//! back into the rank's order: pure arithmetic on stream positions, shared by every rank and worker.
//!
//! * Each worker gets one *part*: a contiguous run of the share cut at window boundaries, so that a window's tiles
//!   are fetched and decoded by one worker only (a window that straddles two ranks' shares is read by both ranks).
//! * A part is cut into batches of `batch_size` consecutive positions. Parts end at window boundaries, not batch
//!   boundaries, so their last batches are short and the natural batch count depends on where the windows fall.
//!   Ranks must agree on it (a DDP step waits for every rank), so each meets a target all can reach ([`layout`]):
//!   a rank below it splits a few batches further, so every cell is still served once; with `drop_last` a rank
//!   above it leaves out whole batches.
//! * A `DataLoader` takes one batch from each worker in turn, skipping workers that have finished; the rank's order
//!   is that interleave ([`yield_position`]), and a resumed loader rotates which worker serves which part so that
//!   its own interleave continues the interrupted one exactly ([`resume`]).

/// One worker's part of a rank's share: stream positions `start..start + cells` (unrolled: positions past the end
/// of the stream wrap around to its start), cut into `batches` batches, the first `full` of them of `batch_size`
/// cells and the cells left spread as evenly as possible over the rest (each at least one cell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Part {
    pub start: u64,
    pub cells: u64,
    pub batches: u64,
    pub full: u64,
}

impl Part {
    /// Stream positions `[lo, hi)` (unrolled) of the part's batch `i < batches`.
    pub fn batch_range(&self, i: u64, batch_size: u64) -> (u64, u64) {
        if i < self.full {
            let lo = self.start + i * batch_size;
            return (lo, lo + batch_size);
        }
        let rest_batches = self.batches - self.full;
        let rest_cells = self.cells - self.full * batch_size;
        let (q, r) = (rest_cells / rest_batches, rest_cells % rest_batches);
        let j = i - self.full;
        let lo = self.start + self.full * batch_size + j * q + j.min(r);
        (lo, lo + q + u64::from(j < r))
    }
}

/// Batches a part of `cells` cells makes on its own.
fn natural_batches(cells: u64, batch_size: u64, drop_last: bool) -> u64 {
    if drop_last { cells / batch_size } else { cells.div_ceil(batch_size) }
}

/// The rank's share `lo..lo + len` (unrolled) cut into `n_parts` contiguous runs at the window boundaries nearest to
/// equal shares; `boundary_around(p)` gives the window boundaries at or before and after unrolled position `p`, and
/// `preferred(w)` a window boundary to cut part `w` at instead (where its group of tiles starts), taken when it is
/// within a quarter of a part of the equal share. Returns each run as `(start, cells)`; runs may be empty.
pub(crate) fn cut_share(
    lo: u64,
    len: u64,
    n_parts: usize,
    boundary_around: impl Fn(u64) -> (u64, u64),
    preferred: impl Fn(usize) -> Option<u64>,
) -> Vec<(u64, u64)> {
    let hi = lo + len;
    let slack = len / (4 * n_parts as u64);
    let mut cuts = Vec::with_capacity(n_parts + 1);
    cuts.push(lo);
    for w in 1..n_parts {
        let target = lo + (len as u128 * w as u128 / n_parts as u128) as u64;
        let cut = match preferred(w).map(|c| c.clamp(lo, hi)) {
            Some(c) if c.abs_diff(target) <= slack => c,
            _ => {
                let (before, after) = boundary_around(target);
                let (before, after) = (before.clamp(lo, hi), after.clamp(lo, hi));
                if target - before <= after.saturating_sub(target) { before } else { after }
            }
        };
        let prev = *cuts.last().expect("starts with lo");
        cuts.push(cut.max(prev));
    }
    cuts.push(hi);
    cuts.windows(2).map(|c| (c[0], c[1] - c[0])).collect()
}

/// The parts of a rank whose runs are `runs`, cut into exactly `target` batches in all (see the module docs):
/// `target` is at least the natural total without `drop_last` (and at most the share's cells), at most it with.
/// Without `drop_last` the extra batches go one at a time to each part in turn that has a cell to spare; with it,
/// the batches left out are the last of the part with the most.
pub(crate) fn layout(runs: &[(u64, u64)], batch_size: u64, drop_last: bool, target: u64) -> Vec<Part> {
    let mut parts: Vec<Part> = runs
        .iter()
        .map(|&(start, cells)| Part { start, cells, batches: natural_batches(cells, batch_size, drop_last), full: 0 })
        .collect();
    let mut total: u64 = parts.iter().map(|p| p.batches).sum();
    // More batches: one more in turn to each part that has cells to spare (each batch keeps at least one cell).
    while total < target {
        let before = total;
        for p in parts.iter_mut() {
            if total < target && p.batches < p.cells {
                p.batches += 1;
                total += 1;
            }
        }
        if total == before {
            break; // the target exceeds the cells: the caller caps it
        }
    }
    // Fewer batches: the last batch of the part with the most, the latest such part first.
    while total > target {
        let p = parts.iter_mut().rev().max_by_key(|p| p.batches).expect("total > 0 means a part");
        p.batches -= 1;
        total -= 1;
    }
    for p in parts.iter_mut() {
        p.full = if drop_last || batch_size == 1 || p.batches == 0 {
            p.batches
        } else {
            // As many batches of `batch_size` as leave at least one cell for each of the others.
            (p.cells.saturating_sub(p.batches) / (batch_size - 1)).min(p.batches)
        };
    }
    parts
}

/// The place in the rank's order of part `part`'s batch `i`, when a loader takes one batch from each part in turn
/// and skips parts that have finished.
pub(crate) fn yield_position(batches: &[u64], part: usize, i: u64) -> u64 {
    let before_round: u64 = batches.iter().map(|&k| k.min(i)).sum();
    before_round + batches[..part].iter().filter(|&&k| k > i).count() as u64
}

/// Where each part stands after the rank has yielded its first `done` batches, and which part comes next: `(starts,
/// next)`, `starts[p]` the batches part `p` has yielded. A loader that starts again with its worker `s` serving part
/// `(s + next) % n_parts` continues the interrupted order exactly.
pub(crate) fn resume(batches: &[u64], done: u64) -> (Vec<u64>, usize) {
    let total: u64 = batches.iter().sum();
    if done >= total {
        return (batches.to_vec(), 0);
    }
    let yielded_before = |round: u64| -> u64 { batches.iter().map(|&k| k.min(round)).sum() };
    // The round that batch `done` belongs to: the last whose start is at or before it.
    let (mut lo, mut hi) = (0u64, batches.iter().copied().max().unwrap_or(0));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if yielded_before(mid) <= done { lo = mid } else { hi = mid - 1 }
    }
    let round = lo;
    let mut left = done - yielded_before(round);
    let mut starts: Vec<u64> = batches.iter().map(|&k| k.min(round)).collect();
    let mut next = 0;
    for (p, &k) in batches.iter().enumerate() {
        if k > round {
            if left == 0 {
                next = p;
                break;
            }
            starts[p] += 1;
            left -= 1;
        }
    }
    (starts, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order a DataLoader yields: one batch of each part in turn, from part `first`, skipping finished parts.
    fn round_robin(counts: &[u64], first: usize) -> Vec<(usize, u64)> {
        let n = counts.len();
        let mut next = vec![0u64; n];
        let mut out = Vec::new();
        while (0..n).any(|p| next[p] < counts[p]) {
            for s in 0..n {
                let p = (s + first) % n;
                if next[p] < counts[p] {
                    out.push((p, next[p]));
                    next[p] += 1;
                }
            }
        }
        out
    }

    #[test]
    fn batches_cover_each_part_once_and_meet_the_target() {
        for b in [1u64, 3, 7] {
            for cells in [0u64, 1, 5, 7, 20, 21] {
                for drop_last in [false, true] {
                    let natural = natural_batches(cells, b, drop_last);
                    let targets: Vec<u64> =
                        if drop_last { (0..=natural).collect() } else { (natural..=cells).collect() };
                    for target in targets {
                        let parts = layout(&[(10, cells)], b, drop_last, target);
                        let p = parts[0];
                        assert_eq!(p.batches, target);
                        let mut at = 10;
                        for i in 0..p.batches {
                            let (lo, hi) = p.batch_range(i, b);
                            assert_eq!(lo, at, "contiguous");
                            assert!(hi > lo && hi - lo <= b, "1..=b cells: {lo}..{hi} (b {b})");
                            if drop_last {
                                assert_eq!(hi - lo, b);
                            }
                            at = hi;
                        }
                        if !drop_last {
                            assert_eq!(at, 10 + cells, "every cell");
                        }
                        if target == natural && !drop_last && cells > 0 {
                            assert_eq!(p.full, natural - 1 + u64::from(cells % b == 0), "natural cut");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn shares_are_cut_at_the_nearest_boundaries() {
        // Windows every 10 positions.
        let around = |p: u64| (p / 10 * 10, p / 10 * 10 + 10);
        let none = |_| None;
        assert_eq!(cut_share(3, 40, 2, around, none), vec![(3, 17), (20, 23)]);
        assert_eq!(cut_share(0, 40, 3, around, none), vec![(0, 10), (10, 20), (30, 10)]);
        assert_eq!(cut_share(2, 5, 3, around, none), vec![(2, 0), (2, 5), (7, 0)]);
        assert_eq!(cut_share(0, 0, 2, around, none), vec![(0, 0), (0, 0)]);
        // A preferred cut within a quarter of a part (40 / 8 = 5 cells) of the equal share wins; farther, not.
        assert_eq!(cut_share(0, 40, 2, around, |_| Some(24)), vec![(0, 24), (24, 16)]);
        assert_eq!(cut_share(0, 40, 2, around, |_| Some(26)), vec![(0, 20), (20, 20)]);
        assert_eq!(cut_share(10, 40, 2, around, |_| Some(0)), vec![(10, 20), (30, 20)]);
    }

    #[test]
    fn the_interleave_and_the_resume_point_agree_with_a_round_robin() {
        for counts in [vec![3u64, 3], vec![1, 4, 2], vec![0, 2, 5], vec![4], vec![2, 0, 0, 3]] {
            let whole = round_robin(&counts, 0);
            for (pos, &(p, i)) in whole.iter().enumerate() {
                assert_eq!(yield_position(&counts, p, i), pos as u64, "{counts:?}");
            }
            for done in 0..=whole.len() {
                let (starts, next) = resume(&counts, done as u64);
                let rest: Vec<u64> = counts.iter().zip(&starts).map(|(k, s)| k - s).collect();
                let resumed: Vec<(usize, u64)> =
                    round_robin(&rest, next).into_iter().map(|(p, i)| (p, i + starts[p])).collect();
                assert_eq!(resumed, whole[done..].to_vec(), "{counts:?} after {done}");
            }
        }
    }
}
