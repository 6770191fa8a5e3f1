//! How a decoder runs the chunks of a tile: on the calling thread, on its own helper threads or on a rayon pool,
//! the chunks split between workers in proportion to their nonzeros.

use std::sync::Arc;

use dct_format::ChunkEntry;

use crate::chunk::Ctx;
use crate::error::DecodeError;
use crate::handoff::Helpers;

/// How a decoder runs the chunks of a tile.
pub(crate) enum Threads {
    /// On the calling thread only.
    Caller,
    /// On the calling thread and the decoder's own helper threads.
    Own(Helpers),
    /// On a shared rayon pool.
    Pool(Arc<rayon::ThreadPool>),
}

/// How a split runs its halves: one after the other, the right one on a helper thread, or with `rayon::join`
/// inside the pool.
#[derive(Clone, Copy)]
pub(crate) enum Par<'a> {
    Serial,
    Helpers(&'a Helpers),
    Rayon,
}

impl Threads {
    /// Runs `run` (given how to split) in parallel when there is more than one chunk, else here.
    pub(crate) fn run<R: Send>(&self, n_chunks: usize, run: impl FnOnce(Par<'_>) -> R + Send) -> R {
        match self {
            Threads::Own(helpers) if n_chunks > 1 => run(Par::Helpers(helpers)),
            Threads::Pool(pool) if n_chunks > 1 => pool.install(|| run(Par::Rayon)),
            _ => run(Par::Serial),
        }
    }
}

/// A job over chunks: `job` on every chunk, each with its region of the two outputs (`scale` elements per nonzero),
/// the chunks divided between workers in contiguous runs by recursive splitting (no heap allocation).
pub(crate) struct Split<'a, 'b, F> {
    pub(crate) ctx: &'a Ctx<'b>,
    pub(crate) scale: usize,
    pub(crate) job: &'a F,
    pub(crate) par: Par<'a>,
}

impl<F> Split<'_, '_, F> {
    /// Runs the job on `chunks` (the first of which is number `first`; `a` and `b` start at its `nnz_lo`) with
    /// `workers`, the first of which is worker number `base`. Worker `k > 0` runs on helper `k - 1`.
    pub(crate) fn run<W: Send, A: Send, B: Send>(
        &self,
        workers: &mut [W],
        base: usize,
        chunks: &[ChunkEntry],
        first: u32,
        a: &mut [A],
        b: &mut [B],
    ) -> Result<(), DecodeError>
    where
        F: Fn(&mut W, &Ctx<'_>, u32, &ChunkEntry, &mut [A], &mut [B]) -> Result<(), DecodeError> + Sync,
    {
        let one_worker = workers.len() <= 1 || chunks.len() <= 1;
        if one_worker || matches!(self.par, Par::Serial) {
            let w = &mut workers[0];
            let start = chunks.first().map_or(0, |e| e.nnz_lo);
            for (i, e) in chunks.iter().enumerate() {
                let r = self.scale * (e.nnz_lo - start) as usize..self.scale * (e.nnz_hi - start) as usize;
                (self.job)(w, self.ctx, first + i as u32, e, &mut a[r.clone()], &mut b[r])?;
            }
            return Ok(());
        }
        let (left_workers, right_workers) = workers.split_at_mut(workers.len() / 2);
        let right_base = base + left_workers.len();
        let split = split_chunks(chunks, left_workers.len(), right_workers.len());
        let mid = self.scale * (chunks[split].nnz_lo - chunks[0].nnz_lo) as usize;
        let (la, ra) = a.split_at_mut(mid);
        let (lb, rb) = b.split_at_mut(mid);
        let (lc, rc) = chunks.split_at(split);
        let left = || self.run(left_workers, base, lc, first, la, lb);
        let right = || self.run(right_workers, right_base, rc, first + split as u32, ra, rb);
        let (x, y) = match self.par {
            Par::Helpers(helpers) => helpers.join(right_base - 1, left, right),
            Par::Rayon | Par::Serial => rayon::join(left, right), // Serial returned above
        };
        x.and(y)
    }
}

/// Where to split `chunks` (at least 2) between `left` and `right` workers: in proportion to the workers on each
/// side, weighting each chunk by its nonzeros; both sides get at least one chunk.
pub(crate) fn split_chunks(chunks: &[ChunkEntry], left: usize, right: usize) -> usize {
    let weight = |e: &ChunkEntry| e.nnz() + 1;
    let total: u64 = chunks.iter().map(weight).sum();
    let target = total * left as u64 / (left + right) as u64;
    let mut acc = 0;
    let mut split = 1;
    for (i, e) in chunks.iter().enumerate().take(chunks.len() - 1) {
        acc += weight(e);
        split = i + 1;
        if acc >= target {
            break;
        }
    }
    split
}
