//! [`Corpus`]: member datasets read as one matrix in the corpus's gene vocabulary.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use dct_dataset::dct_obs::VarTable;
use dct_dataset::{
    Batch, CountValue, Dataset, DatasetError, HeldBatches, Manifest, PassOrder, ReadOptions, SlotChooser, SlotFill,
    SlotValue, TileBudget, read_into_slot,
};

use crate::concurrent::on_each;
use crate::error::CorpusError;
use crate::genes::{GeneKey, GeneMap, GeneSpace, RowScratch};
use crate::recent::RecentTiles;
use crate::selection::Selection;
use crate::spare::SpareBatches;
use rayon::prelude::*;

/// One dataset of a corpus.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its name (unique in the corpus).
    pub name: String,
    /// The dataset.
    pub dataset: Arc<Dataset>,
}

impl Member {
    /// The datasets at `urls` as members named by their URLs, opened at once (up to
    /// [`crate::OPEN_CONCURRENCY`] at a time), all on one set of threads ([`Dataset::open_on`]): a corpus of a
    /// thousand members runs one I/O runtime and one decode pool, not a thousand. The first member (in order)
    /// that cannot be opened is the error, naming it.
    pub fn open_all(urls: &[String], options: &dct_dataset::ReadOptions) -> Result<Vec<Member>, CorpusError> {
        let threads = dct_dataset::ReaderThreads::new(options.io_threads, options.decode_threads)
            .map_err(|e| CorpusError::InvalidArgument(e.to_string()))?;
        on_each(urls, |_, url| {
            let dataset = Dataset::open_on(url, options.clone(), &threads).map_err(|e| CorpusError::member(url, e))?;
            Ok(Member { name: url.clone(), dataset: Arc::new(dataset) })
        })
    }
}

/// Rows of a corpus: a [`Batch`] in the corpus's columns, and the member each row comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusBatch<V = f32> {
    /// The rows, in request order; column indices are corpus columns, increasing within each row.
    pub batch: Batch<V>,
    /// The member index of each row.
    pub member: Vec<u32>,
}

/// Member datasets, each with its own genes, read as one matrix whose columns are the corpus's gene vocabulary,
/// over all their cells (member 0's, then member 1's, ...) or a selection of them.
///
/// Nothing is copied or re-encoded: a read fetches the members' tiles as a read of each member would, then moves
/// each row's genes to the vocabulary's columns (dropping the genes outside it, sorting the row where the member's
/// order differs). Selections ([`Corpus::select`]) are new corpora over the same members, sharing their readers.
#[derive(Debug, Clone)]
pub struct Corpus {
    pub(crate) members: Arc<[Member]>,
    pub(crate) map: Arc<GeneMap>,
    /// First base cell of each member, then the total.
    starts: Arc<[u64]>,
    /// First corpus tile of each member (members' tiles laid end to end), then the total.
    tile_starts: Arc<[usize]>,
    selection: Selection,
    /// Member batches given back by reads, for the next reads to fill again.
    spare: Arc<SpareBatches>,
    /// With [`Corpus::with_tile_cap`]: the tiles reads used last, which the members keep (shared by the corpora
    /// made from this one by choosing cells).
    recent: Option<Arc<RecentTiles>>,
    /// When each corpus tile is next read, as a training loader plans its passes ([`Corpus::plan_passes`]).
    passes: Arc<std::sync::Mutex<PassOrder>>,
}

impl Corpus {
    /// A corpus of `members` (in cell order), genes identified by `key`, with the vocabulary `space`.
    pub fn open(members: Vec<Member>, key: &GeneKey, space: &GeneSpace) -> Result<Corpus, CorpusError> {
        if members.is_empty() {
            return Err(CorpusError::InvalidArgument("a corpus needs at least one member".into()));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(m) = members.iter().find(|m| !seen.insert(m.name.as_str())) {
            return Err(CorpusError::InvalidArgument(format!(
                "two members are named {:?} (the same dataset given twice?): give each dataset once, or (in Python) \
                 each member a name of its own in a mapping",
                m.name
            )));
        }
        let genes = all_member_genes(&members, key)?;
        let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
        let map = GeneMap::build(&names, &genes, space).map_err(|e| match (e, key) {
            // The advice of DuplicateGene is a unique gene-table column: the one in use is not.
            (CorpusError::DuplicateGene { member, gene }, GeneKey::Column(column)) => CorpusError::GeneKey {
                member,
                message: format!(
                    "its gene-table column {column:?} (var.parquet) lists gene {gene:?} in two rows: each gene must \
                     appear once there to be placed in the corpus's genes; write the member again from its source, \
                     or identify genes by another column (or by their names: no gene key)"
                ),
            },
            (e, _) => e,
        })?;
        let mut starts = Vec::with_capacity(members.len() + 1);
        let mut tile_starts = Vec::with_capacity(members.len() + 1);
        let (mut total, mut tiles) = (0u64, 0usize);
        for m in &members {
            starts.push(total);
            tile_starts.push(tiles);
            total += m.dataset.n_cells();
            tiles += m.dataset.n_tiles();
        }
        starts.push(total);
        tile_starts.push(tiles);
        Ok(Corpus {
            members: members.into(),
            map: Arc::new(map),
            starts: starts.into(),
            tile_starts: tile_starts.into(),
            selection: Selection::all(total),
            spare: Arc::default(),
            recent: None,
            passes: Arc::default(),
        })
    }

    /// Tiles of all members, laid end to end: corpus tile `k` is tile `k - first` of the member whose tiles start
    /// at `first`.
    pub fn n_tiles(&self) -> usize {
        *self.tile_starts.last().expect("a corpus has a total")
    }

    /// The corpus tiles of member `m`.
    pub fn member_tiles(&self, m: usize) -> std::ops::Range<usize> {
        self.tile_starts[m]..self.tile_starts[m + 1]
    }

    /// The member and member tile of corpus tile `k`.
    pub fn tile_of(&self, k: usize) -> Option<(usize, usize)> {
        if k >= self.n_tiles() {
            return None;
        }
        let m = self.tile_starts.partition_point(|&s| s <= k) - 1;
        Some((m, k - self.tile_starts[m]))
    }

    /// Selected cells in each corpus tile. A tile's selected cells are consecutive corpus cells, so these counts
    /// describe the corpus to an epoch planner as a dataset's `tile_cells` do (tiles with no selected cell count
    /// 0, and a plan never reads them).
    pub fn tile_cells(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.n_tiles());
        for (m, member) in self.members.iter().enumerate() {
            let base = self.starts[m];
            let mut lo = 0u64;
            for &hi in member.dataset.limits() {
                out.push(self.selection.count_in(base + lo, base + hi));
                lo = hi;
            }
        }
        out
    }

    /// Starts fetching and decoding corpus tiles `tiles` in the background (each member's in the order given;
    /// see [`Dataset::prefetch`]); returns how many loads started.
    pub fn prefetch(&self, tiles: &[usize]) -> Result<usize, CorpusError> {
        let mut by_member: Vec<Vec<usize>> = vec![Vec::new(); self.members.len()];
        for &k in tiles {
            let (m, t) = self.tile_of(k).ok_or_else(|| {
                CorpusError::InvalidArgument(format!("prefetch of tile {k}: the corpus has {} tiles", self.n_tiles()))
            })?;
            by_member[m].push(t);
        }
        let mut started = 0;
        for (m, member_tiles) in by_member.iter().enumerate() {
            if !member_tiles.is_empty() {
                let member = &self.members[m];
                started += member.dataset.prefetch(member_tiles).map_err(|e| CorpusError::member(&member.name, e))?;
            }
        }
        Ok(started)
    }

    /// Drops the cached tiles of every member but corpus tiles `keep` (see [`Dataset::release_tiles_except`]):
    /// a loader moving from one window to the next gives back the tiles of the members it has left, so the members'
    /// caches together hold what the windows ahead need. Returns how many tiles were dropped.
    pub fn release_tiles_except(&self, keep: &[usize]) -> usize {
        let mut by_member: Vec<Vec<usize>> = vec![Vec::new(); self.members.len()];
        for (m, t) in keep.iter().filter_map(|&k| self.tile_of(k)) {
            by_member[m].push(t);
        }
        self.members.iter().zip(&by_member).map(|(member, keep)| member.dataset.release_tiles_except(keep)).sum()
    }

    /// Records the order in which the pass beginning now and the one after it (a training loader's epoch and the
    /// next) first read the corpus tiles, for [`Corpus::release_tiles_for`] (see [`PassOrder`]).
    pub fn plan_passes(&self, this_pass: &[usize], next_pass: &[usize]) {
        *self.lock_passes() = PassOrder::new(this_pass, next_pass);
    }

    /// [`Corpus::release_tiles_except`] for a loader moving to a new window of `window` tiles, whose windows ahead
    /// need corpus tiles `ahead`: the members' caches keep those and, with the passes planned
    /// ([`Corpus::plan_passes`]), of the other tiles they hold, those read soonest, so that with the tiles of one
    /// more window (which the prefetch requests of this window's batches may add, or as many spare buffers that
    /// the tiles given back leave for their decodes) they hold at most the members' cache size
    /// ([`Dataset::max_cached_tiles`], the corpus's budget) in all. So a corpus, like one dataset, keeps tiles for
    /// the next epoch, where otherwise it decodes every tile every epoch. Returns how many tiles were dropped.
    pub fn release_tiles_for(&self, ahead: &[usize], window: usize) -> usize {
        // The tiles given back leave their buffers to the next window's decodes (the room left for them).
        self.members[0].dataset.keep_spare_tiles(window);
        let mut keep = ahead.to_vec();
        {
            let mut passes = self.lock_passes();
            // The windows ahead are being read: once their window is left, a tile is next read in the next pass.
            passes.mark_read(ahead);
            let room = self.members[0].dataset.max_cached_tiles().saturating_sub(ahead.len() + window);
            if !passes.is_empty() && room > 0 {
                let mut held: Vec<(usize, usize)> = Vec::new();
                for (m, member) in self.members.iter().enumerate() {
                    for t in member.dataset.cached_tiles() {
                        let k = self.tile_starts[m] + t;
                        if let Some(next) = passes.next_use(k).filter(|_| !ahead.contains(&k)) {
                            held.push((next, k));
                        }
                    }
                }
                held.sort_unstable();
                keep.extend(held.into_iter().take(room).map(|(_, k)| k));
            }
        }
        self.release_tiles_except(&keep)
    }

    fn lock_passes(&self) -> std::sync::MutexGuard<'_, PassOrder> {
        self.passes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache and prefetch sizes that keep the corpus's readers serving windows of `window` tiles, and a loader
    /// holding `batches`, within `budget` bytes ([`TileBudget::split_sizes_beside`] over every member's tiles; a
    /// batch's nonzeros counted as the members store them, before the genes outside the vocabulary are dropped).
    pub fn tile_budget(&self, budget: u64, window: usize, batches: HeldBatches) -> TileBudget {
        let of = |field: fn(&Manifest) -> &Vec<u64>| -> Vec<u64> {
            self.members.iter().flat_map(|m| field(m.dataset.manifest()).iter().copied()).collect()
        };
        let (cells, nnz, bytes) = (of(|m| &m.tile_cells), of(|m| &m.tile_nnz), of(|m| &m.tile_bytes));
        TileBudget::split_sizes_beside(budget, window, batches, &cells, &nnz, &bytes)
    }

    /// [`TileBudget::check_plan`] over every member's tiles, naming the member with the largest tiles.
    pub fn check_plan(&self, budget: u64, window: usize) -> Result<(), String> {
        let largest = |m: &Member| m.dataset.manifest().tile_cells.iter().copied().max().unwrap_or(0);
        let Some(member) = self.members.iter().max_by_key(|m| largest(m)) else { return Ok(()) };
        TileBudget::check_plan(budget, window, &member.dataset.manifest().tile_cells)
            .map_err(|m| format!("member {}: {m}", member.name))
    }

    /// The corpus with every member's reader reopened with `options` (no request is made; see
    /// [`Dataset::reopened`]), all sharing member 0's new I/O runtime and decode threads, so the threads do not
    /// grow with the number of members. The gene map and the selection are kept.
    pub fn reopened(&self, options: &ReadOptions) -> Result<Corpus, CorpusError> {
        let first = &self.members[0];
        let lead = first.dataset.reopened(options.clone()).map_err(|e| CorpusError::member(&first.name, e))?;
        let lead = Arc::new(lead);
        let mut members = Vec::with_capacity(self.members.len());
        members.push(Member { name: first.name.clone(), dataset: lead.clone() });
        for m in &self.members[1..] {
            let d = m.dataset.reopened_sharing(options.clone(), &lead).map_err(|e| CorpusError::member(&m.name, e))?;
            members.push(Member { name: m.name.clone(), dataset: Arc::new(d) });
        }
        Ok(Corpus { members: members.into(), recent: None, passes: Arc::default(), ..self.clone() })
    }

    /// The corpus whose members keep at most `tiles` decoded tiles together after each read (those the reads used
    /// last), as one dataset's cache would, where each member's reader would keep its own. For random reads over
    /// many members; a loader that prefetches tiles and gives them back window by window
    /// ([`Corpus::release_tiles_except`]) must not use it, as it would drop the tiles fetched ahead.
    pub fn with_tile_cap(&self, tiles: usize) -> Corpus {
        Corpus { recent: Some(Arc::new(RecentTiles::new(tiles))), ..self.clone() }
    }

    /// With a tile cap: records the tiles of `located` as the latest read and gives back, in the members they
    /// belong to, the tiles that fell out of the cap.
    fn keep_recent(&self, located: &[(u32, u64)]) {
        let Some(recent) = &self.recent else { return };
        let mut read: Vec<usize> = located
            .iter()
            .filter_map(|&(m, local)| {
                let m = m as usize;
                self.members[m].dataset.tile_of(local).map(|t| self.tile_starts[m] + t)
            })
            .collect();
        read.sort_unstable();
        read.dedup();
        let (dropped, kept) = recent.record(&read);
        let mut members: Vec<usize> = dropped.iter().filter_map(|&k| self.tile_of(k)).map(|(m, _)| m).collect();
        members.sort_unstable();
        members.dedup();
        for m in members {
            let keep: Vec<usize> =
                kept.iter().filter_map(|&k| self.tile_of(k)).filter(|&(o, _)| o == m).map(|(_, t)| t).collect();
            // Dropped, not kept as the member's spare buffers: those would add up with the number of members.
            self.members[m].dataset.drop_tiles_except(&keep);
        }
    }

    /// Cells (selected).
    pub fn n_cells(&self) -> u64 {
        self.selection.n_cells()
    }

    /// Genes: the vocabulary's length.
    pub fn n_genes(&self) -> usize {
        self.map.genes().len()
    }

    /// The gene identifiers, in column order.
    pub fn genes(&self) -> &[String] {
        self.map.genes()
    }

    /// The members, in cell order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The gene map (each member's columns in the vocabulary).
    pub fn gene_map(&self) -> &GeneMap {
        &self.map
    }

    /// Selected cells of each member.
    pub fn member_cells(&self) -> Vec<u64> {
        self.starts.windows(2).map(|w| self.selection.count_in(w[0], w[1])).collect()
    }

    /// The selection, as ranges of the members' cells laid end to end.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// The corpus over the same members with another selection of their cells (ranges of cells laid end to end).
    pub fn with_selection(&self, selection: Selection) -> Result<Corpus, CorpusError> {
        let total = *self.starts.last().expect("a corpus has a total");
        if selection.end() > total {
            return Err(CorpusError::InvalidArgument(format!("the selection reaches past the corpus's {total} cells")));
        }
        Ok(Corpus { selection, ..self.clone() })
    }

    /// The cells `cells` (indices into this corpus, any order) as a corpus of their own, in corpus order.
    pub fn select(&self, cells: &[u64]) -> Result<Corpus, CorpusError> {
        let selection = self.selection.select(cells)?;
        Ok(Corpus { selection, ..self.clone() })
    }

    /// The cells where `mask` (one entry per cell) is true, as a corpus of their own.
    pub fn select_mask(&self, mask: &[bool]) -> Result<Corpus, CorpusError> {
        let selection = self.selection.select_mask(mask).map_err(CorpusError::InvalidArgument)?;
        Ok(Corpus { selection, ..self.clone() })
    }

    /// The member and the member's own cell index of each of `cells`.
    pub fn locate(&self, cells: &[u64]) -> Result<Vec<(u32, u64)>, CorpusError> {
        cells
            .iter()
            .enumerate()
            .map(|(position, &c)| {
                let base = self.selection.base_cell(c, position)?;
                let m = self.starts.partition_point(|&s| s <= base) - 1;
                Ok((m as u32, base - self.starts[m]))
            })
            .collect()
    }

    /// The member index of each of `cells`.
    pub fn member_of(&self, cells: &[u64]) -> Result<Vec<u32>, CorpusError> {
        Ok(self.locate(cells)?.into_iter().map(|(m, _)| m).collect())
    }

    /// The rows of `cells` (corpus indices, any order, repeats allowed) in the corpus's columns, with counts of
    /// type `V`, and the member of each row. Each member's rows are read with one call of its reader.
    pub fn get_batch_as<V: CountValue>(&self, cells: &[u64]) -> Result<CorpusBatch<V>, CorpusError> {
        let mut out = Batch::<V> { n_genes: self.n_genes() as u64, ..Batch::default() };
        let (indices, values) = (&mut out.indices, &mut out.values);
        let member = self.read_rows(cells, &mut out.indptr, |total| {
            indices.resize(total, 0);
            values.resize(total, V::default());
            Ok((indices.as_mut_slice(), values.as_mut_slice()))
        })?;
        Ok(CorpusBatch { batch: out, member })
    }

    /// The rows of `cells` into the caller's buffers (shared or pinned memory, say), as
    /// [`Dataset::get_batch_to`] does: row offsets into `indptr`, column indices and counts into the first `nnz`
    /// elements of `indices` and `values`, which must hold at least that many ([`Corpus::batch_nnz`] gives a
    /// size that is enough). Returns `nnz` and the member of each row.
    pub fn get_batch_to<V: CountValue>(
        &self,
        cells: &[u64],
        indptr: &mut Vec<i64>,
        indices: &mut [i32],
        values: &mut [V],
    ) -> Result<(usize, Vec<u32>), CorpusError> {
        let members = self.read_rows(cells, indptr, |total| {
            if indices.len() < total || values.len() < total {
                return Err(CorpusError::InvalidArgument(format!(
                    "the output buffers hold {} and {} elements but the batch has {total} nonzeros; pass buffers of \
                     at least batch_nnz elements",
                    indices.len(),
                    values.len()
                )));
            }
            Ok((&mut indices[..total], &mut values[..total]))
        })?;
        Ok((indptr.last().copied().unwrap_or(0) as usize, members))
    }

    /// The rows of `cells` in the vocabulary's columns, read into the first of `slots` that holds them, and the member
    /// of each row: [`Dataset::get_batch_into_slot`] for a corpus (one plan a batch; the slot chosen once the
    /// batch's nonzeros are known).
    pub fn get_batch_into_slot<V>(
        &self,
        cells: &[u64],
        slots: &mut [&mut [u8]],
    ) -> Result<(SlotFill, Vec<u32>), CorpusError>
    where
        V: SlotValue,
    {
        let read = |indptr: &mut Vec<i64>, chooser: SlotChooser<'_, '_, V>| {
            self.read_rows(cells, indptr, |nnz| {
                chooser.room(nnz).map_err(|e| CorpusError::InvalidArgument(e.to_string()))
            })
        };
        let slot_error = |e: DatasetError| CorpusError::InvalidArgument(e.to_string());
        let (fill, members) = read_into_slot(cells, slots, read, slot_error)?;
        Ok((fill, members.unwrap_or_default()))
    }

    /// Enough room for the nonzeros of `cells` ([`Dataset::batch_nnz`] of each member's rows: tiles fetched, not
    /// decoded); exact unless members have genes outside the vocabulary.
    pub fn batch_nnz(&self, cells: &[u64]) -> Result<u64, CorpusError> {
        let (located, member_cells, _) = self.plan_read(cells)?;
        let mut total = Ok(0u64);
        for (m, locals) in member_cells.iter().enumerate() {
            if !locals.is_empty() {
                let member = &self.members[m];
                let nnz = member.dataset.batch_nnz(locals).map_err(|e| CorpusError::member(&member.name, e));
                total = total.and_then(|t| Ok(t + nnz?));
                if total.is_err() {
                    break;
                }
            }
        }
        // The tiles it fetched are kept as a read's are (also when a member failed).
        self.keep_recent(&located);
        total
    }

    /// Where each of `cells` is: its member and local cell, each member's cells in request order, and each
    /// request's row in its member's batch.
    #[allow(clippy::type_complexity)]
    fn plan_read(&self, cells: &[u64]) -> Result<(Vec<(u32, u64)>, Vec<Vec<u64>>, Vec<usize>), CorpusError> {
        let located = self.locate(cells)?;
        let mut member_cells: Vec<Vec<u64>> = vec![Vec::new(); self.members.len()];
        let mut row_in_member = Vec::with_capacity(cells.len());
        for &(m, local) in &located {
            let list = &mut member_cells[m as usize];
            row_in_member.push(list.len());
            list.push(local);
        }
        Ok((located, member_cells, row_in_member))
    }

    /// Reads the rows of `cells`: each member's rows with one call of its reader, each row moved to the corpus's
    /// columns as it is decoded (on the decode threads, while it is in cache) into a member batch at the room the
    /// row stores, then every row copied from there to its place in the output (rows in parallel on the rayon
    /// pool); or, when every member read keeps its rows' lengths, each row decoded at its place in the output
    /// (`Corpus::fill_rows_in_place`). Fills `indptr`, asks `output` for the `nnz`-long slices. Returns the member
    /// of each row.
    fn read_rows<'o, V: CountValue>(
        &self,
        cells: &[u64],
        indptr: &mut Vec<i64>,
        output: impl FnOnce(usize) -> Result<(&'o mut [i32], &'o mut [V]), CorpusError>,
    ) -> Result<Vec<u32>, CorpusError> {
        let (located, member_cells, row_in_member) = self.plan_read(cells)?;
        // Per member: its rows in the corpus's columns, each at the start of its room, and their lengths.
        let mut read: Vec<Option<(Batch<V>, Vec<usize>)>> = (0..self.members.len()).map(|_| None).collect();
        let filled = self.fill_rows(&located, &member_cells, &row_in_member, &mut read, indptr, output);
        // Also after an error: the member batches go back for the next reads, and the tiles this read loaded are
        // kept under the cap as a read's are.
        for (batch, _) in read.into_iter().flatten() {
            self.spare.give(batch);
        }
        self.keep_recent(&located);
        filled.map(|()| located.into_iter().map(|(m, _)| m).collect())
    }

    /// [`Corpus::read_rows`] once the cells are located: each member's rows into `read`, then the output.
    fn fill_rows<'o, V: CountValue>(
        &self,
        located: &[(u32, u64)],
        member_cells: &[Vec<u64>],
        row_in_member: &[usize],
        read: &mut [Option<(Batch<V>, Vec<usize>)>],
        indptr: &mut Vec<i64>,
        output: impl FnOnce(usize) -> Result<(&'o mut [i32], &'o mut [V]), CorpusError>,
    ) -> Result<(), CorpusError> {
        let touched = || member_cells.iter().enumerate().filter(|(_, locals)| !locals.is_empty());
        if touched().nth(1).is_some() {
            self.fetch_missing_tiles_at_once(touched());
        }
        if touched().all(|(m, _)| self.map.member(m).keeps_row_lengths()) {
            return self.fill_rows_in_place(located, member_cells, row_in_member, indptr, output);
        }
        for (m, locals) in member_cells.iter().enumerate() {
            if !locals.is_empty() {
                let member = &self.members[m];
                let columns = self.map.member(m);
                // Into a batch an earlier read gave back: its memory is already faulted in.
                let mut batch = self.spare.take::<V>();
                let kept = member.dataset.map_rows_into(locals, &mut batch, |indices, values, out_i, out_v| {
                    RowScratch::with(|scratch| columns.write_row(indices, values, out_i, out_v, scratch))
                });
                match kept {
                    Ok(kept) => read[m] = Some((batch, kept)),
                    Err(e) => {
                        self.spare.give(batch);
                        return Err(CorpusError::member(&member.name, e));
                    }
                }
            }
        }
        let read = &*read;
        let row = |i: usize| -> (&Batch<V>, usize, usize) {
            let (b, kept) = read[located[i].0 as usize].as_ref().expect("read above");
            let r = row_in_member[i];
            let lo = b.indptr[r] as usize;
            (b, lo, lo + kept[r])
        };
        let n = located.len();
        indptr.clear();
        indptr.reserve(n + 1);
        indptr.push(0);
        let mut total = 0usize;
        for i in 0..n {
            let (_, lo, hi) = row(i);
            total += hi - lo;
            indptr.push(total as i64);
        }
        let (out_indices, out_values) = output(total)?;
        // Each row's own place in the output, then the rows copied in parallel, on the readers' decode threads: not
        // on rayon's global pool, which has no threads in a process forked after it started (a DataLoader worker).
        let mut places: Vec<(usize, Place<'o, V>)> = row_places(indptr, out_indices, out_values).enumerate().collect();
        let copy = |(i, (oi, ov)): &mut (usize, Place<'o, V>)| {
            let (b, lo, hi) = row(*i);
            oi.copy_from_slice(&b.indices[lo..hi]);
            ov.copy_from_slice(&b.values[lo..hi]);
        };
        let first = touched().next().map_or(0, |(m, _)| m);
        self.members[first].dataset.on_decode_threads(|parallel| {
            if parallel {
                places.par_iter_mut().with_min_len(64).for_each(copy);
            } else {
                places.iter_mut().for_each(copy);
            }
        });
        Ok(())
    }

    /// Starts fetching, at once, the tiles of `touched` members' cells that their readers hold neither cached nor
    /// in flight: the reads that follow go member by member, and would otherwise wait for each member's tiles in
    /// turn (a request's latency per member touched, on object storage). A training loader has prefetched them;
    /// errors are the reads' to report.
    fn fetch_missing_tiles_at_once<'a>(&self, touched: impl Iterator<Item = (usize, &'a Vec<u64>)>) {
        for (m, locals) in touched {
            let dataset = &self.members[m].dataset;
            let cached: std::collections::HashSet<usize> = dataset.cached_tiles().into_iter().collect();
            let mut missing: Vec<usize> =
                locals.iter().filter_map(|&c| dataset.tile_of(c)).filter(|t| !cached.contains(t)).collect();
            missing.sort_unstable();
            missing.dedup();
            if !missing.is_empty() {
                let _ = dataset.prefetch(&missing);
            }
        }
    }
}

/// A row's place in a batch's output: its gene indices and its values.
pub(crate) type Place<'o, V> = (&'o mut [i32], &'o mut [V]);

/// The output `indices` / `values` cut into each row's place, in row order, at the offsets of `indptr` (from 0).
pub(crate) fn row_places<'o, V>(
    indptr: &[i64],
    indices: &'o mut [i32],
    values: &'o mut [V],
) -> impl Iterator<Item = Place<'o, V>> {
    let (mut rest_i, mut rest_v) = (indices, values);
    indptr.windows(2).map(move |w| {
        let len = (w[1] - w[0]) as usize;
        let (head_i, tail_i) = std::mem::take(&mut rest_i).split_at_mut(len);
        let (head_v, tail_v) = std::mem::take(&mut rest_v).split_at_mut(len);
        (rest_i, rest_v) = (tail_i, tail_v);
        (head_i, head_v)
    })
}

/// Every member's gene identifiers ([`member_genes`]), read at once ([`on_each`]).
fn all_member_genes(members: &[Member], key: &GeneKey) -> Result<Vec<Vec<String>>, CorpusError> {
    on_each(members, |_, m| member_genes(m, key))
}

/// A member's gene identifiers in stored column order, as `key` names them.
pub fn member_genes(member: &Member, key: &GeneKey) -> Result<Vec<String>, CorpusError> {
    let ds = &member.dataset;
    let fail = |message: String| CorpusError::GeneKey { member: member.name.clone(), message };
    let table = || -> Result<Option<VarTable>, CorpusError> {
        let Some(batch) = ds.var_table().map_err(|e| CorpusError::member(&member.name, e))? else {
            return Ok(None);
        };
        VarTable::from_record_batch(&batch).map(Some).map_err(|e| fail(format!("its var.parquet: {e}")))
    };
    let genes = match key {
        GeneKey::VarNames => match ds.var_names().map_err(|e| CorpusError::member(&member.name, e))? {
            Some(names) => names.as_ref().clone(),
            None => match table()? {
                Some(t) => t.index,
                None => {
                    return Err(fail(
                        "the dataset has no gene names (var_names.txt or var.parquet); convert it with its gene \
                         table, or name the genes by another member's order"
                            .into(),
                    ));
                }
            },
        },
        GeneKey::Column(column) => {
            let Some(t) = table()? else {
                return Err(fail(format!(
                    "the dataset has no gene table (var.parquet), so it has no column {column:?}; identify genes by \
                     their names (no gene key) or convert it with its gene table"
                )));
            };
            if t.index_name.as_deref() == Some(column.as_str()) {
                t.index
            } else {
                let Some((_, array)) = t.columns.iter().find(|(n, _)| n == column) else {
                    let names: Vec<&str> = t.columns.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(fail(format!("its gene table has no column {column:?} (it has {names:?})")));
                };
                strings(array).map_err(|why| fail(format!("gene table column {column:?} {why}")))?
            }
        }
    };
    if genes.len() as u64 != ds.n_genes() {
        return Err(fail(format!("it names {} genes but has {}", genes.len(), ds.n_genes())));
    }
    Ok(genes)
}

/// The values of a gene-table column as strings (categories by their labels); a missing value is refused.
fn strings(array: &ArrayRef) -> Result<Vec<String>, String> {
    let as_text = arrow_cast::cast(array, &DataType::Utf8).map_err(|e| format!("cannot be read as text: {e}"))?;
    let text = as_text.as_string::<i32>();
    if let Some(i) = (0..text.len()).find(|&i| text.is_null(i)) {
        return Err(format!("has no value for gene {i}; every gene needs an identifier"));
    }
    Ok(text.iter().map(|v| v.unwrap_or_default().to_string()).collect())
}
