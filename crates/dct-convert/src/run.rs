//! Writing tiles: one part of a plan, or all of it.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use bytes::Bytes;
use dct_codec::{CanonicalCsr, EncodeOptions, encode_canonical};
use dct_dataset::StoreOptions;
use dct_dataset::manifest::tile_path;
use dct_input::{CountSource, H5adSource, InputKind, RowBlock, open_input_with};

use crate::error::ConvertError;
use crate::io::Output;
use crate::output::{Claim, TileState, check_tile, claim_output};
use crate::plan::Plan;
use crate::remap::{GeneRemap, NO_COLUMN};
use rustc_hash::FxHashMap;

use crate::scan::{input_stamp, keys_digest, matching_keys, open_gene_table};
use crate::spill::{Spill, SpillOptions, SpillReader};

/// How to run parts and finalize.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Threads reading and compressing tiles, one tile each at a time (0: every core).
    pub threads: usize,
    /// Configuration of cloud backends for the output.
    pub store: StoreOptions,
    /// Stop after writing this many tiles (tests of interrupted conversions; `None` in normal use).
    pub stop_after_tiles: Option<usize>,
    /// The copy of decoded inputs that [`convert`](crate::convert) keeps between its plan and its tiles (parts run on their own do
    /// not use it).
    pub spill: SpillOptions,
}

/// Progress of a part, reported after each tile.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Progress {
    /// Tiles of the part done (written or skipped).
    pub tiles_done: usize,
    /// Tiles in the part.
    pub tiles_total: usize,
    /// Cells written so far.
    pub cells_written: u64,
    /// Input bytes read so far (estimated from the share of cells of each input read).
    pub input_bytes: u64,
    /// Index of the input being read.
    pub input: usize,
    /// Seconds since the part started.
    pub seconds: f64,
}

/// What a part did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartReport {
    /// Tiles of the part.
    pub tiles: std::ops::Range<usize>,
    /// Tiles written now.
    pub written: usize,
    /// Tiles found complete and valid, and skipped.
    pub skipped: usize,
    /// Cells written now.
    pub cells: u64,
    /// Nonzeros written now.
    pub nnz: u64,
}

/// Opens input `i` of the plan to read its counts: `.h5ad` inputs without reading their gene and cell names
/// (the plan fixed them; reading them again costs a lookup per name).
fn open_counts(plan: &Plan, i: usize) -> Result<Box<dyn CountSource>, ConvertError> {
    let input = &plan.inputs[i];
    let opts = plan.input_options()?;
    if input.kind == "h5ad" {
        return Ok(Box::new(H5adSource::open_counts_only(std::path::Path::new(&input.path), &opts.matrix)?));
    }
    Ok(open_input_with(PathBuf::from(&input.path), &opts)?)
}

/// A source several tile workers read.
type SharedSource = Arc<Mutex<Box<dyn CountSource>>>;
/// How [`SharedInputs`] holds a source: weakly, so that it drops once no worker reads it.
type HeldSource = Weak<Mutex<Box<dyn CountSource>>>;

/// Inputs that hold their whole matrix in memory (Matrix Market folders, CSC `.h5ad`), opened once and shared by
/// the tile workers: each is parsed or transposed once and held once, however many workers read its cells. Held
/// weakly: an input is dropped when no worker reads it any more. In a gene space, also each input's gene columns.
#[derive(Default)]
struct SharedInputs(Mutex<HashMap<usize, HeldSource>>, Mutex<HashMap<usize, Arc<Vec<u32>>>>);

/// The input a tile worker is reading.
enum OpenInput {
    /// Opened by this worker alone (row windows read straight from the file).
    Own(Box<dyn CountSource>),
    /// Shared with the other workers.
    Shared(SharedSource),
    /// Read back from the copy the plan kept.
    Spilled(SpillReader),
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A worker that panicked while holding a source leaves it usable: reads do not leave it half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SharedInputs {
    /// In a gene space, the output column of each of input `i`'s genes ([`NO_COLUMN`]: left out), worked out by
    /// the first worker that reads the input (its key list read again and checked against the plan's digest).
    fn gene_columns(
        &self,
        plan: &Plan,
        i: usize,
        column_of: &FxHashMap<&str, u32>,
    ) -> Result<Arc<Vec<u32>>, ConvertError> {
        if let Some(c) = lock(&self.1).get(&i) {
            return Ok(c.clone());
        }
        // Read without the lock: other workers go on with other inputs (two that read one input agree).
        let input = &plan.inputs[i];
        let key = plan.genes.as_ref().and_then(|g| g.key.as_deref());
        let source = open_gene_table(&input.path, &plan.input_options()?)?;
        let keys = matching_keys(source.as_ref(), key, &input.path)?;
        if input.keys_sha256.as_deref() != Some(keys_digest(&keys).as_str()) {
            return Err(ConvertError::Inputs(format!(
                "{}: its gene list changed since the plan was made: make a new plan",
                input.path
            )));
        }
        let columns = Arc::new(keys.iter().map(|k| column_of.get(k.as_str()).copied().unwrap_or(NO_COLUMN)).collect());
        Ok(lock(&self.1).entry(i).or_insert(columns).clone())
    }

    /// Input `i`, from the shared ones, or opened now (and shared if it holds its whole matrix).
    fn open(&self, plan: &Plan, i: usize) -> Result<OpenInput, ConvertError> {
        let parsed_at_open = plan.inputs[i].kind == InputKind::MatrixMarket.to_string();
        let mut shared = lock(&self.0);
        if let Some(s) = shared.get(&i).and_then(Weak::upgrade) {
            return Ok(OpenInput::Shared(s));
        }
        let source = if parsed_at_open {
            // The other workers wait here rather than parse it too.
            unchanged(plan, i, open_counts(plan, i)?)?
        } else {
            // Opening is cheap here (the matrix is read window by window, or transposed at the first read).
            drop(shared);
            let source = unchanged(plan, i, open_counts(plan, i)?)?;
            if !source.loads_whole_matrix() {
                return Ok(OpenInput::Own(source));
            }
            shared = lock(&self.0);
            if let Some(s) = shared.get(&i).and_then(Weak::upgrade) {
                // Another worker shared it meanwhile.
                return Ok(OpenInput::Shared(s));
            }
            source
        };
        let s = Arc::new(Mutex::new(source));
        shared.retain(|_, w| w.strong_count() > 0);
        shared.insert(i, Arc::downgrade(&s));
        Ok(OpenInput::Shared(s))
    }
}

/// Reads the cells of tiles in order across input boundaries, renumbering genes into the output order.
struct TileReader<'a> {
    plan: &'a Plan,
    shared: &'a SharedInputs,
    spill: &'a Spill,
    /// Each input's gene renumbering, made when the input is first read (without a gene space, one for all).
    remaps: HashMap<usize, GeneRemap>,
    /// In a gene space: the output column of each matching key.
    space_columns: Option<FxHashMap<&'a str, u32>>,
    input_starts: Vec<u64>,
    current: Option<(usize, OpenInput)>,
    block: RowBlock,
    /// The tile being built.
    csr: CanonicalCsr,
}

/// An encoded tile on its way to the output.
struct WrittenTile {
    tile: usize,
    blob: Vec<u8>,
    nnz: u64,
    /// The last input read for it.
    input: usize,
}

/// Rows read from an input at a time: bounds the input window whatever the tile size.
const WINDOW_ROWS: u64 = 256;

impl<'a> TileReader<'a> {
    fn new(plan: &'a Plan, shared: &'a SharedInputs, spill: &'a Spill) -> Self {
        let mut input_starts = Vec::with_capacity(plan.inputs.len() + 1);
        let mut acc = 0;
        input_starts.push(0);
        for i in &plan.inputs {
            acc += i.n_cells;
            input_starts.push(acc);
        }
        TileReader {
            plan,
            shared,
            spill,
            remaps: HashMap::new(),
            space_columns: plan
                .genes
                .as_ref()
                .map(|g| g.keys.iter().enumerate().map(|(c, k)| (k.as_str(), c as u32)).collect()),
            input_starts,
            current: None,
            block: RowBlock::new(plan.n_genes),
            csr: CanonicalCsr::new(plan.n_genes),
        }
    }

    /// Reads cells `rows` of input `i` into `out`.
    fn read_window(&mut self, i: usize, rows: Range<u64>, out: &mut RowBlock) -> Result<(), ConvertError> {
        if self.current.as_ref().is_none_or(|(j, _)| *j != i) {
            // Let go of the previous input first, so that a shared one can be dropped.
            self.current = None;
            self.current = Some((i, self.open(i)?));
        }
        match &mut self.current.as_mut().expect("just set").1 {
            OpenInput::Own(s) => s.read_rows_into(rows, out)?,
            OpenInput::Shared(s) => lock(s).read_rows_into(rows, out)?,
            OpenInput::Spilled(s) => {
                if s.read_rows_into(rows.clone(), out).is_err() {
                    // The copy is an optimisation: drop it and read the input itself.
                    self.spill.drop_input(i);
                    self.current = None;
                    self.current = Some((i, self.shared.open(self.plan, i)?));
                    return self.read_window(i, rows, out);
                }
            }
        }
        Ok(())
    }

    /// Input `i`: its kept copy if there is one, else the input.
    fn open(&self, i: usize) -> Result<OpenInput, ConvertError> {
        match self.spill.reader(i) {
            Some(r) => Ok(OpenInput::Spilled(r)),
            None => self.shared.open(self.plan, i),
        }
    }

    /// The renumbering of input `i`'s genes into the output's columns: the plan's gene order, or in a gene space
    /// each of the input's genes placed by its matching key ([`SharedInputs::gene_columns`]).
    fn remap(&mut self, i: usize) -> Result<&mut GeneRemap, ConvertError> {
        let key = if self.space_columns.is_some() { i } else { 0 };
        if !self.remaps.contains_key(&key) {
            let remap = match &self.space_columns {
                Some(column_of) => {
                    let columns = match self.spill.gene_columns(i) {
                        Some(kept) => kept,
                        None => self.shared.gene_columns(self.plan, i, column_of)?,
                    };
                    GeneRemap::with_columns(columns.as_ref().clone(), self.plan.n_genes as usize)
                }
                None => GeneRemap::new(&self.plan.gene_order),
            };
            self.remaps.insert(key, remap);
        }
        Ok(self.remaps.get_mut(&key).expect("inserted above"))
    }

    /// Reads tile `t` and encodes it.
    fn read_and_encode(&mut self, t: usize, encode: &EncodeOptions) -> Result<WrittenTile, ConvertError> {
        let (first, end) = self.plan.tile_cells(t);
        let input = self.read(first, end)?;
        let encode_err = |source| ConvertError::Encode { tile: t, first, end, cause: source };
        // Names the global cell and gene of a count version 1 cannot hold, before compressing anything; the gene
        // by its name too, since its column is the output's (after sorting), not the input's.
        self.csr.check_version(encode.version, first).map_err(|e| {
            let column = self.csr.values.iter().position(|&v| v > 65_535).map(|k| self.csr.indices[k] as usize);
            match column.and_then(|c| self.plan.var_names.get(c)) {
                Some(name) => ConvertError::Inputs(format!(
                    "tile {t} (cells {first}..{end}): {e} (gene {name:?}, output column {})",
                    column.unwrap_or_default()
                )),
                None => encode_err(e),
            }
        })?;
        let blob = encode_canonical(&self.csr, encode).map_err(|source| ConvertError::Encode {
            tile: t,
            first,
            end,
            cause: source,
        })?;
        Ok(WrittenTile { tile: t, blob, nnz: self.csr.nnz() as u64, input })
    }

    /// Reads the cells `[first, end)` into `self.csr` (a canonical matrix in output gene order, its buffers reused
    /// from tile to tile); returns the index of the last input read.
    fn read(&mut self, first: u64, end: u64) -> Result<usize, ConvertError> {
        let mut csr = std::mem::replace(&mut self.csr, CanonicalCsr::new(0));
        csr.clear();
        let mut cell = first;
        let mut last_input = 0;
        let mut result = Ok(());
        while cell < end {
            let i = self.input_starts.partition_point(|&s| s <= cell) - 1;
            let (lo, hi) = (self.input_starts[i], self.input_starts[i + 1]);
            let stop = end.min(hi).min(cell + WINDOW_ROWS);
            let mut block = std::mem::take(&mut self.block);
            let read = self.read_window(i, cell - lo..stop - lo, &mut block);
            let read = read.and_then(|()| {
                let remap = self.remap(i)?;
                for r in 0..block.n_rows() {
                    let (genes, counts) = block.row(r);
                    remap.push_row(genes, counts, &mut csr.indices, &mut csr.values);
                    csr.indptr.push(csr.indices.len() as u64);
                }
                Ok(())
            });
            self.block = block;
            if let Err(e) = read {
                result = Err(e);
                break;
            }
            last_input = i;
            cell = stop;
        }
        self.csr = csr;
        result.map(|()| last_input)
    }
}

/// Writes the tiles of part `part` of `parts` (0-based), skipping tiles already complete and valid. Idempotent:
/// running a part twice, or two overlapping runs, writes the same bytes.
///
/// One tile worker per thread of `opts.threads` reads, renumbers and encodes whole tiles. Memory: per worker, the
/// tile being built (8 bytes per nonzero), the encoder's planes (4 bytes per nonzero of a chunk) and a window of
/// 256 cells of its input; encoded tiles (compressed) wait in a channel of one per worker. Inputs that hold their
/// whole matrix in memory (Matrix Market folders, CSC `.h5ad`: about 8 bytes per stored entry of that input) are
/// opened once and shared by the workers, so at most one per worker is held at a time.
pub fn run_part(
    plan: &Plan,
    part: usize,
    parts: usize,
    opts: &RunOptions,
    progress: impl FnMut(&Progress),
) -> Result<PartReport, ConvertError> {
    run_part_with_spill(plan, part, parts, opts, &Spill::disabled(), progress)
}

/// [`run_part`], reading the inputs that `spill` kept (see
/// [`make_plan_with_spill`](crate::make_plan_with_spill)) from there instead of decoding them again. Same bytes.
pub fn run_part_with_spill(
    plan: &Plan,
    part: usize,
    parts: usize,
    opts: &RunOptions,
    spill: &Spill,
    progress: impl FnMut(&Progress),
) -> Result<PartReport, ConvertError> {
    let out = Output::open(&plan.output, &opts.store)?;
    run_part_in(&out, plan, part, parts, opts, spill, progress)
}

/// [`run_part_with_spill`] writing to `out` (the plan's output, opened by the caller).
pub(crate) fn run_part_in(
    out: &Output,
    plan: &Plan,
    part: usize,
    parts: usize,
    opts: &RunOptions,
    spill: &Spill,
    mut progress: impl FnMut(&Progress),
) -> Result<PartReport, ConvertError> {
    if parts == 0 || part >= parts {
        return Err(ConvertError::Inputs(format!("part {part}/{parts}: parts are numbered 0..N-1 of N >= 1")));
    }
    let claim = claim_output(out, plan)?;
    let tiles = plan.part_tiles(part, parts);
    let mut report = PartReport { tiles: tiles.clone(), ..Default::default() };
    if let Claim::Finished(manifest) = claim {
        // The dataset is finished: finalize checked every tile. Each is still there with its size, or the dataset
        // was damaged since (a part would not mend it: the receipts went with finalize).
        for t in tiles.clone() {
            let rel = tile_path(t);
            let size = match out.block_on(out.store.size(&rel))? {
                Ok(size) => Some(size),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e.into()),
            };
            if size != manifest.tile_bytes.get(t).copied() {
                return Err(ConvertError::Output(format!(
                    "{}: the finished dataset's tile {t} is {} where its manifest says {} bytes: it was damaged after \
                     the conversion finished; restore the tile, or convert again with --overwrite",
                    out.store.url(&rel),
                    size.map_or("missing".to_string(), |s| format!("{s} bytes")),
                    manifest.tile_bytes.get(t).copied().unwrap_or(0)
                )));
            }
        }
        report.skipped = tiles.len();
        return Ok(report);
    }
    let mut todo = Vec::new();
    for t in tiles.clone() {
        match check_tile(out, plan, t)? {
            TileState::Valid { .. } => report.skipped += 1,
            TileState::Missing | TileState::Invalid(_) => todo.push(t),
        }
    }
    if let Some(limit) = opts.stop_after_tiles {
        todo.truncate(limit);
    }
    let threads =
        if opts.threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { opts.threads };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("dct-tile-{i}"))
        .build()
        .map_err(|e| ConvertError::Output(format!("cannot start encode threads: {e}")))?;
    let encode = plan.encode_options()?;
    let started = Instant::now();
    let input_bytes_per_cell: Vec<f64> =
        plan.inputs.iter().map(|i| i.size_bytes as f64 / i.n_cells.max(1) as f64).collect();
    let mut prog = Progress { tiles_total: tiles.len(), tiles_done: report.skipped, ..Default::default() };
    progress(&prog);

    // Every pool thread runs a tile worker (read, renumber, encode one whole tile at a time), so reading scales
    // with the cores like compression does; a worker's encode and chunk inflation also spread over the pool when
    // the other workers are idle (the last tiles). This thread stores the tiles and reports progress.
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let shared = SharedInputs::default();
    let (tx, rx) = sync_channel::<Result<WrittenTile, ConvertError>>(threads);
    let mut first_error = None;
    pool.in_place_scope(|scope| {
        for _ in 0..threads {
            let (tx, next, stop, todo, shared) = (tx.clone(), &next, &stop, &todo, &shared);
            scope.spawn(move |_| {
                let mut reader = TileReader::new(plan, shared, spill);
                while !stop.load(Ordering::Relaxed) {
                    let Some(&t) = todo.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                    let item = reader.read_and_encode(t, &encode);
                    let failed = item.is_err();
                    if failed {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if tx.send(item).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        // Drain the channel whatever happens, so that no worker blocks on a full channel.
        for item in rx {
            if first_error.is_some() {
                continue;
            }
            let stored = item.and_then(|mut w| {
                let blob = std::mem::take(&mut w.blob);
                let receipt = crate::output::receipt(&blob);
                // The tile, then its receipt: a tile without one is written again.
                out.put(&tile_path(w.tile), Bytes::from(blob))?;
                out.put(&plan.receipt_path(w.tile), receipt).map(|()| w)
            });
            let w = match stored {
                Ok(w) => w,
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    first_error = Some(e);
                    continue;
                }
            };
            let (first, end) = plan.tile_cells(w.tile);
            report.written += 1;
            report.cells += end - first;
            report.nnz += w.nnz;
            prog.tiles_done += 1;
            prog.cells_written += end - first;
            prog.input = w.input;
            prog.input_bytes += ((end - first) as f64 * input_bytes_per_cell[w.input]) as u64;
            prog.seconds = started.elapsed().as_secs_f64();
            progress(&prog);
        }
    });
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(report)
}

/// Re-opens input `i` of the plan and checks that it still has the plan's cells and genes.
pub(crate) fn reopen_input(plan: &Plan, i: usize) -> Result<Box<dyn CountSource>, ConvertError> {
    let input = &plan.inputs[i];
    unchanged(plan, i, open_input_with(PathBuf::from(&input.path), &plan.input_options()?)?)
}

/// An error if input `i`'s files no longer have the sizes and modification times the plan recorded: its tiles
/// would mix the contents the plan was made from (which earlier parts wrote) with new ones.
pub(crate) fn check_input_files(plan: &Plan, i: usize) -> Result<(), ConvertError> {
    let input = &plan.inputs[i];
    if input.files.is_empty() {
        return Ok(()); // a plan made before inputs' files were recorded
    }
    let now = input_stamp(std::path::Path::new(&input.path))?;
    if now == input.files {
        return Ok(());
    }
    let what = match (now.len() == input.files.len(), now.iter().zip(&input.files).find(|(a, b)| a != b)) {
        (true, Some((a, b))) if a.size != b.size => {
            format!("{} bytes now, {} in the plan", a.size, b.size)
        }
        (true, Some(_)) => "modified since".to_string(),
        _ => format!("{} files now, {} in the plan", now.len(), input.files.len()),
    };
    Err(ConvertError::Inputs(format!(
        "{} changed since the plan was made ({what}): the plan's tiles would mix its old and new contents; make a \
         new plan (convert again with --overwrite)",
        input.path
    )))
}

/// `source` (input `i`, just opened) if it still has the plan's files, cells and genes.
fn unchanged(plan: &Plan, i: usize, source: Box<dyn CountSource>) -> Result<Box<dyn CountSource>, ConvertError> {
    check_input_files(plan, i)?;
    let input = &plan.inputs[i];
    // In a gene space inputs have gene lists of their own, checked by their digest when first read.
    let genes_changed = plan.genes.is_none() && source.n_genes() != plan.n_genes;
    if source.n_cells() != input.n_cells || genes_changed {
        return Err(ConvertError::Inputs(format!(
            "{} changed since the plan was made ({} x {} now, {} x {} in the plan): make a new plan",
            input.path,
            source.n_cells(),
            source.n_genes(),
            input.n_cells,
            plan.n_genes
        )));
    }
    Ok(source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ConvertOptions, make_plan};

    fn fixture(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/inputs").join(rel)
    }

    /// A Matrix Market input is parsed once however many workers read it, and dropped when none does; an h5ad CSR
    /// input is opened by each worker on its own.
    #[test]
    fn whole_matrix_inputs_are_shared_between_workers() {
        let out = std::env::temp_dir().join(format!("dct_shared_inputs_{}", std::process::id()));
        let inputs = [fixture("pbmc200/mtx"), fixture("pbmc200/pbmc200.h5ad")];
        let plan = make_plan(&inputs, &ConvertOptions::new(out.to_str().unwrap())).unwrap();
        let shared = SharedInputs::default();
        let (a, b) = (shared.open(&plan, 0).unwrap(), shared.open(&plan, 0).unwrap());
        match (&a, &b) {
            (OpenInput::Shared(a), OpenInput::Shared(b)) => assert!(Arc::ptr_eq(a, b)),
            _ => panic!("a Matrix Market input must be shared"),
        }
        drop((a, b));
        assert!(lock(&shared.0).get(&0).is_some_and(|w| w.strong_count() == 0), "dropped when unused");
        assert!(matches!(shared.open(&plan, 1).unwrap(), OpenInput::Own(_)));
    }
}
