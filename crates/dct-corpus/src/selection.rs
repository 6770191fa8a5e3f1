//! A set of the corpus's cells in blocks of 65,536 base cells, each block kept as sorted runs or as a bitmap,
//! whichever is smaller (as Roaring bitmaps do): a block of few runs costs 8 bytes a run, one of scattered cells
//! 8 KiB (a bit per base cell). Memory stays within about a bit per cell of the corpus, and within 8 bytes a run
//! of selected cells, whichever is less; never one entry per cell. The selected cells before each block (and
//! before each run, or each group of 64 bitmap words) make finding the `i`-th selected cell two binary searches
//! and a short scan.

use dct_format::CellOutOfRange;

/// Base cells a block covers.
const BLOCK: u64 = 1 << 16;
/// 64-bit words of a block's bitmap.
const WORDS: usize = (BLOCK / 64) as usize;
/// Words a bitmap counts its selected cells by.
const GROUP: usize = 64;
/// Runs a block keeps as runs at most (8 bytes each); past that a bitmap (8 KiB) is smaller.
const MAX_RUNS: usize = 1024;
/// The first bytes of [`Selection::to_bytes`].
const MAGIC: &[u8; 8] = b"DCTSEL01";

/// Consecutive selected cells of a block: offsets `first..=last` in it, and the block's selected cells before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: u16,
    last: u16,
    before: u32,
}

/// A bit per base cell of a block, and the block's selected cells before each group of [`GROUP`] words.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bitmap {
    words: [u64; WORDS],
    before: [u32; WORDS / GROUP],
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Cells {
    Runs(Vec<Run>),
    Bits(Box<Bitmap>),
}

/// The selected cells of base cells `key * BLOCK ..` (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    key: u64,
    /// Selected cells in the blocks before.
    before: u64,
    /// Selected cells in this block.
    count: u32,
    cells: Cells,
}

impl Block {
    /// The offset in the block of its `i`-th selected cell (`i < count`).
    fn select(&self, i: u32) -> u64 {
        match &self.cells {
            Cells::Runs(runs) => {
                let r = runs.partition_point(|run| run.before <= i) - 1;
                u64::from(runs[r].first) + u64::from(i - runs[r].before)
            }
            Cells::Bits(bits) => {
                let g = bits.before.partition_point(|&b| b <= i) - 1;
                let mut left = i - bits.before[g];
                for (w, &word) in bits.words[g * GROUP..].iter().enumerate() {
                    let ones = word.count_ones();
                    if left < ones {
                        return ((g * GROUP + w) * 64) as u64 + u64::from(nth_bit(word, left));
                    }
                    left -= ones;
                }
                unreachable!("a bitmap group's count covers its cells")
            }
        }
    }

    /// Selected cells at offsets below `offset` (at most [`BLOCK`]).
    fn rank(&self, offset: u64) -> u64 {
        match &self.cells {
            Cells::Runs(runs) => {
                let r = runs.partition_point(|run| u64::from(run.first) < offset);
                if r == 0 {
                    return 0;
                }
                let run = runs[r - 1];
                u64::from(run.before) + (offset.min(u64::from(run.last) + 1) - u64::from(run.first))
            }
            Cells::Bits(bits) => {
                let w = (offset / 64) as usize;
                let g = w / GROUP;
                let mut n = if g < bits.before.len() { u64::from(bits.before[g]) } else { u64::from(self.count) };
                for &word in &bits.words[(g * GROUP).min(WORDS)..w.min(WORDS)] {
                    n += u64::from(word.count_ones());
                }
                if w < WORDS && !offset.is_multiple_of(64) {
                    n += u64::from((bits.words[w] & ((1u64 << (offset % 64)) - 1)).count_ones());
                }
                n
            }
        }
    }

    /// The block's runs of consecutive selected cells, as offsets `first..=last`.
    fn runs(&self, mut out: impl FnMut(u64, u64)) {
        match &self.cells {
            Cells::Runs(runs) => runs.iter().for_each(|r| out(u64::from(r.first), u64::from(r.last))),
            Cells::Bits(bits) => {
                let mut open: Option<u64> = None;
                for (w, &word) in bits.words.iter().enumerate() {
                    let base = (w * 64) as u64;
                    if word == u64::MAX && open.is_some() {
                        continue;
                    }
                    let mut word = word;
                    let mut at = 0u32;
                    while at < 64 {
                        if open.is_none() {
                            if word == 0 {
                                break;
                            }
                            at = word.trailing_zeros();
                            open = Some(base + u64::from(at));
                        }
                        // Ones from `at`: the run goes on to the first zero.
                        let zeros = (!word) >> at;
                        if zeros == 0 {
                            break; // the run reaches the word's end
                        }
                        let end = at + zeros.trailing_zeros();
                        out(open.take().expect("a run is open"), base + u64::from(end) - 1);
                        word &= if end >= 64 { 0 } else { !((1u64 << end) - 1) };
                        at = end;
                    }
                }
                if let Some(first) = open {
                    out(first, BLOCK - 1);
                }
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        match &self.cells {
            Cells::Runs(runs) => runs.capacity() * std::mem::size_of::<Run>(),
            Cells::Bits(_) => std::mem::size_of::<Bitmap>(),
        }
    }
}

/// The `n`-th set bit (from 0) of `word`, which has more than `n` set bits.
fn nth_bit(mut word: u64, n: u32) -> u32 {
    for _ in 0..n {
        word &= word - 1;
    }
    word.trailing_zeros()
}

/// Cells of the whole corpus (its "base" cells, before any selection). Selected cell `i` is the `i`-th base cell
/// in the set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    blocks: Vec<Block>,
    n_cells: u64,
}

impl Selection {
    /// Every cell of a corpus of `n_cells` cells.
    pub fn all(n_cells: u64) -> Selection {
        let mut b = SelectionBuilder::default();
        b.push_range(0, n_cells);
        b.finish()
    }

    /// The ranges `[starts[i], ends[i])` (sorted, disjoint; adjacent ones are merged).
    pub fn from_ranges(starts: &[u64], ends: &[u64]) -> Result<Selection, String> {
        if starts.len() != ends.len() {
            return Err(format!("{} range starts but {} ends", starts.len(), ends.len()));
        }
        let mut b = SelectionBuilder::default();
        for (&a, &e) in starts.iter().zip(ends) {
            if a > e || b.end.is_some_and(|end| a < end) {
                return Err(format!("range {a}..{e} is empty-backwards or overlaps the one before"));
            }
            b.push_range(a, e);
        }
        Ok(b.finish())
    }

    /// Bytes the selection holds on the heap (its blocks, as allocated).
    pub fn heap_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Block>() + self.blocks.iter().map(Block::heap_bytes).sum::<usize>()
    }

    /// Selected cells.
    pub fn n_cells(&self) -> u64 {
        self.n_cells
    }

    /// Calls `out(start, end)` for each maximal range `start..end` of selected base cells, in order.
    pub fn for_each_range(&self, mut out: impl FnMut(u64, u64)) {
        let mut open: Option<(u64, u64)> = None;
        for block in &self.blocks {
            let base = block.key * BLOCK;
            block.runs(|first, last| {
                let (a, b) = (base + first, base + last + 1);
                match open {
                    Some((s, e)) if e == a => open = Some((s, b)),
                    Some((s, e)) => {
                        out(s, e);
                        open = Some((a, b));
                    }
                    None => open = Some((a, b)),
                }
            });
        }
        if let Some((s, e)) = open {
            out(s, e);
        }
    }

    /// The maximal ranges of selected base cells, as `(starts, ends)` (ends exclusive).
    pub fn ranges(&self) -> (Vec<u64>, Vec<u64>) {
        let (mut starts, mut ends) = (Vec::new(), Vec::new());
        self.for_each_range(|a, b| {
            starts.push(a);
            ends.push(b);
        });
        (starts, ends)
    }

    /// The last selected base cell plus one (0 when nothing is selected).
    pub fn end(&self) -> u64 {
        self.blocks.last().map_or(0, |b| b.key * BLOCK + b.select(b.count - 1) + 1)
    }

    /// The base cell of selected cell `i`, or the out-of-range error naming `i` at `position` of a request.
    pub fn base_cell(&self, i: u64, position: usize) -> Result<u64, CellOutOfRange> {
        if i >= self.n_cells {
            return Err(CellOutOfRange { cell: i128::from(i), position, n_cells: self.n_cells });
        }
        let k = self.blocks.partition_point(|b| b.before <= i) - 1;
        let block = &self.blocks[k];
        Ok(block.key * BLOCK + block.select((i - block.before) as u32))
    }

    /// The selected cells `cells` (indices into this selection, any order, repeats allowed) as a new selection
    /// of base cells, in base order.
    pub fn select(&self, cells: &[u64]) -> Result<Selection, CellOutOfRange> {
        let mut base = cells
            .iter()
            .enumerate()
            .map(|(position, &i)| self.base_cell(i, position))
            .collect::<Result<Vec<u64>, _>>()?;
        base.sort_unstable();
        base.dedup();
        let mut b = SelectionBuilder::default();
        base.into_iter().for_each(|c| b.push(c));
        Ok(b.finish())
    }

    /// The selected cells where `mask` (one entry per selected cell) is true.
    pub fn select_mask(&self, mask: &[bool]) -> Result<Selection, String> {
        if mask.len() as u64 != self.n_cells {
            return Err(format!(
                "a mask selects with one entry per cell: it has {}, the corpus {}",
                mask.len(),
                self.n_cells
            ));
        }
        let mut out = SelectionBuilder::default();
        let mut i = 0usize;
        self.for_each_range(|a, b| {
            let len = (b - a) as usize;
            let mut run: Option<u64> = None;
            for (k, &keep) in mask[i..i + len].iter().enumerate() {
                match (keep, run) {
                    (true, None) => run = Some(a + k as u64),
                    (false, Some(s)) => {
                        out.push_range(s, a + k as u64);
                        run = None;
                    }
                    _ => {}
                }
            }
            if let Some(s) = run {
                out.push_range(s, b);
            }
            i += len;
        });
        Ok(out.finish())
    }

    /// Selected cells below base cell `cell`.
    fn rank(&self, cell: u64) -> u64 {
        let key = cell / BLOCK;
        let k = self.blocks.partition_point(|b| b.key < key);
        match self.blocks.get(k) {
            Some(b) if b.key == key => b.before + b.rank(cell % BLOCK),
            Some(b) => b.before,
            None => self.n_cells,
        }
    }

    /// Selected cells in base cells `lo..hi` (a member's cells, say).
    pub fn count_in(&self, lo: u64, hi: u64) -> u64 {
        if hi <= lo { 0 } else { self.rank(hi) - self.rank(lo) }
    }

    /// The selection as bytes ([`Selection::from_bytes`] reads them back): a short header, then each block's
    /// key and its runs (4 bytes each) or its bitmap (8 KiB).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.heap_bytes());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.blocks.len() as u64).to_le_bytes());
        for block in &self.blocks {
            out.extend_from_slice(&block.key.to_le_bytes());
            match &block.cells {
                Cells::Runs(runs) => {
                    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
                    for r in runs {
                        out.extend_from_slice(&r.first.to_le_bytes());
                        out.extend_from_slice(&r.last.to_le_bytes());
                    }
                }
                Cells::Bits(bits) => {
                    out.extend_from_slice(&u32::MAX.to_le_bytes());
                    bits.words.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
                }
            }
        }
        out
    }

    /// The selection [`Selection::to_bytes`] wrote; anything else (cut short, blocks out of order, runs
    /// overlapping) is an error saying where, and nothing is allocated beyond what the bytes hold.
    pub fn from_bytes(bytes: &[u8]) -> Result<Selection, String> {
        let mut at = 0usize;
        let mut take = |n: usize, what: &str| -> Result<&[u8], String> {
            let got = bytes.get(at..at + n).ok_or_else(|| format!("a selection's bytes end inside {what}"))?;
            at += n;
            Ok(got)
        };
        if take(MAGIC.len(), "its header")? != MAGIC {
            return Err("these bytes are not a deltacells selection (another header)".into());
        }
        let n_blocks = u64::from_le_bytes(take(8, "its header")?.try_into().expect("8 bytes"));
        let mut b = SelectionBuilder::default();
        let mut last_key: Option<u64> = None;
        for k in 0..n_blocks {
            let key = u64::from_le_bytes(take(8, "a block")?.try_into().expect("8 bytes"));
            if last_key.is_some_and(|l| key <= l) || key > u64::MAX / BLOCK - 1 {
                return Err(format!("a selection's block {k} (key {key}) is out of order or out of range"));
            }
            last_key = Some(key);
            let base = key * BLOCK;
            let runs = u32::from_le_bytes(take(4, "a block")?.try_into().expect("4 bytes"));
            if runs == u32::MAX {
                let words = take(8 * WORDS, "a block's bitmap")?;
                let mut bits = Box::new(Bitmap { words: [0; WORDS], before: [0; WORDS / GROUP] });
                for (w, chunk) in bits.words.iter_mut().zip(words.chunks_exact(8)) {
                    *w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                }
                let block = Block { key, before: 0, count: 0, cells: Cells::Bits(bits) };
                block.runs(|first, last| b.push_range(base + first, base + last + 1));
            } else {
                let data = take(4 * runs as usize, "a block's runs")?;
                let mut prev_end: Option<u64> = None;
                for run in data.chunks_exact(4) {
                    let first = u64::from(u16::from_le_bytes([run[0], run[1]]));
                    let last = u64::from(u16::from_le_bytes([run[2], run[3]]));
                    if last < first || prev_end.is_some_and(|e| first < e) {
                        return Err(format!("a selection's block {k} has runs backwards or overlapping"));
                    }
                    prev_end = Some(last + 1);
                    b.push_range(base + first, base + last + 1);
                }
            }
        }
        if at != bytes.len() {
            return Err(format!("a selection's bytes go on past its {n_blocks} blocks"));
        }
        Ok(b.finish())
    }
}

/// Builds a [`Selection`] from base cells (or ranges of them) given in increasing order.
#[derive(Debug, Default)]
pub struct SelectionBuilder {
    done: Selection,
    /// The block being filled: its key and runs (`before` filled when it closes).
    key: u64,
    runs: Vec<Run>,
    /// One past the last cell added.
    end: Option<u64>,
}

impl SelectionBuilder {
    /// Adds base cell `cell`, which must be greater than every cell added before.
    pub fn push(&mut self, cell: u64) {
        self.push_range(cell, cell + 1);
    }

    /// Adds base cells `a..b`, all greater than every cell added before.
    pub fn push_range(&mut self, a: u64, b: u64) {
        debug_assert!(self.end.is_none_or(|e| e <= a), "cells in increasing order");
        let mut a = a;
        while a < b {
            let key = a / BLOCK;
            if key != self.key {
                self.close();
                self.key = key;
            }
            let stop = b.min((key + 1) * BLOCK);
            let (first, last) = ((a % BLOCK) as u16, ((stop - 1) % BLOCK) as u16);
            match self.runs.last_mut() {
                Some(run) if u32::from(run.last) + 1 == u32::from(first) => run.last = last,
                _ => self.runs.push(Run { first, last, before: 0 }),
            }
            a = stop;
            self.end = Some(stop);
        }
    }

    /// Ends the block being filled: as runs when they are few, else as a bitmap.
    fn close(&mut self) {
        if self.runs.is_empty() {
            return;
        }
        let mut runs = std::mem::take(&mut self.runs);
        let mut count = 0u32;
        for run in &mut runs {
            run.before = count;
            count += u32::from(run.last - run.first) + 1;
        }
        let cells = if runs.len() <= MAX_RUNS {
            runs.shrink_to_fit();
            Cells::Runs(runs)
        } else {
            let mut bits = Box::new(Bitmap { words: [0; WORDS], before: [0; WORDS / GROUP] });
            for run in &runs {
                for c in run.first..=run.last {
                    bits.words[usize::from(c) / 64] |= 1u64 << (c % 64);
                }
            }
            let mut n = 0u32;
            for g in 0..WORDS / GROUP {
                bits.before[g] = n;
                n += bits.words[g * GROUP..(g + 1) * GROUP].iter().map(|w| w.count_ones()).sum::<u32>();
            }
            Cells::Bits(bits)
        };
        let before = self.done.n_cells;
        self.done.blocks.push(Block { key: self.key, before, count, cells });
        self.done.n_cells += u64::from(count);
    }

    /// The selection.
    pub fn finish(mut self) -> Selection {
        self.close();
        self.done.blocks.shrink_to_fit();
        self.done
    }
}

#[cfg(test)]
mod tests;
