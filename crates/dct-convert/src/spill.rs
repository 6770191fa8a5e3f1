//! The one-machine conversion's copy of the inputs it decoded while planning, read back by the tile pass instead
//! of decoding those inputs a second time.
//!
//! Why: with genes ordered by total counts over all inputs (the default), the plan reads every input in full
//! before the first tile can be written, and the tiles then read every input again. Decoding (gzip inflation of
//! HDF5 chunks, Matrix Market parsing) is the largest cost of a fast conversion; reading back 8 bytes per nonzero
//! from a local file that is usually still in the page cache costs a fraction of it.
//!
//! The copy is an optimisation only, and the tiles are the same bytes with or without it:
//! * it is written by this process into a fresh private directory, removed when the [`Spill`] is dropped; the
//!   directory's name holds the host and process id, so that a later conversion removes what a killed one left
//!   (only for dead processes of the same host: a shared directory on a network file system stays safe);
//! * it never exceeds its budget ([`SpillOptions::max_bytes`], and at most a quarter of the free space where it
//!   lives): an input that does not fit, or whose copy cannot be written (disk full), is simply read twice;
//! * every window of cells carries a CRC-32 checked when it is read back: a copy that cannot be read, or fails
//!   its check, is dropped and the input itself is read instead (counted in [`SpillStats::dropped`]).
//!
//! Layout of one input's file: for each window the plan read (256 cells), the window's gene indices, then its
//! counts, as `u32` in the machine's byte order (the file never leaves the process that wrote it). Row offsets,
//! window boundaries and checksums stay in memory (8 bytes per cell).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dct_input::RowBlock;
use zerocopy::IntoBytes;

use crate::error::ConvertError;

/// Where the one-machine conversion keeps its copy of the decoded inputs, and how much it may keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillOptions {
    /// Directory to keep the copy in (a private subdirectory is made there and removed at the end). `None`: the
    /// system's temporary directory (`TMPDIR`, else `/tmp`). On a memory-backed file system (tmpfs) the copy
    /// uses memory: point this at a disk then.
    pub dir: Option<PathBuf>,
    /// Most bytes kept (8 per nonzero of the inputs kept); inputs beyond it are read twice. 0 turns the copy off.
    /// At most a quarter of the free space of the directory is used whatever this says.
    pub max_bytes: u64,
}

impl Default for SpillOptions {
    fn default() -> Self {
        SpillOptions { dir: None, max_bytes: DEFAULT_MAX_BYTES }
    }
}

/// Default budget: 4 GiB, about 500M nonzeros (e.g. 500,000 cells of 1,000 nonzeros).
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;

/// What a [`Spill`] holds, and what it gave up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Inputs kept whole.
    pub inputs: usize,
    /// Bytes kept.
    pub bytes: u64,
    /// Copies dropped when read back (unreadable, or failing their checksum); those inputs were read instead.
    pub dropped: usize,
}

/// The decoded inputs a one-machine conversion keeps between its plan and its tiles (see the module docs).
///
/// Made by [`Spill::new`] (or [`Spill::disabled`]), filled by
/// [`make_plan_with_spill`](crate::make_plan_with_spill), read by
/// [`run_part_with_spill`](crate::run_part_with_spill); dropping it removes the copy.
#[derive(Debug)]
pub struct Spill {
    /// The private directory (none when disabled).
    dir: Option<tempfile::TempDir>,
    /// Bytes of budget left.
    remaining: AtomicU64,
    inputs: Mutex<HashMap<usize, Arc<SpilledInput>>>,
    dropped: AtomicUsize,
    /// In a gene space, each input's output column per gene as the plan placed them (kept in memory, charged to
    /// the budget), so the tiles need not read the inputs' gene lists again.
    gene_columns: Mutex<HashMap<usize, Arc<Vec<u32>>>>,
}

/// One input kept whole.
#[derive(Debug)]
struct SpilledInput {
    file: PathBuf,
    n_genes: u64,
    /// Entry offset of each cell, `n_cells + 1` of them.
    row_starts: Vec<u64>,
    /// First cell of each window, then `n_cells`.
    windows: Vec<u64>,
    /// CRC-32 of each window's bytes.
    crcs: Vec<u32>,
}

impl Spill {
    /// A spill that keeps nothing: every input is read twice.
    pub fn disabled() -> Spill {
        Spill {
            dir: None,
            remaining: AtomicU64::new(0),
            inputs: Mutex::default(),
            dropped: AtomicUsize::new(0),
            gene_columns: Mutex::default(),
        }
    }

    /// A spill with the budget of `opts`, in a new private directory. With no directory given and the temporary
    /// directory unusable, the spill is disabled (the conversion only gets slower); a directory given that cannot
    /// be used is an error.
    pub fn new(opts: &SpillOptions) -> Result<Spill, ConvertError> {
        if opts.max_bytes == 0 {
            return Ok(Spill::disabled());
        }
        let base = opts.dir.clone().unwrap_or_else(std::env::temp_dir);
        remove_abandoned(&base);
        let prefix = format!("{}{}-", owner_prefix(), std::process::id());
        let dir = match tempfile::Builder::new().prefix(&prefix).tempdir_in(&base) {
            Ok(d) => d,
            Err(_) if opts.dir.is_none() => return Ok(Spill::disabled()),
            Err(source) => return Err(ConvertError::Io { path: base.display().to_string(), cause: source }),
        };
        let budget = opts.max_bytes.min(free_bytes(dir.path()).map_or(u64::MAX, |f| f / 4));
        Ok(Spill { dir: Some(dir), remaining: AtomicU64::new(budget), ..Spill::disabled() })
    }

    /// What the spill holds now.
    pub fn stats(&self) -> SpillStats {
        let inputs = lock(&self.inputs);
        SpillStats {
            inputs: inputs.len(),
            bytes: inputs.values().map(|s| 8 * s.row_starts.last().copied().unwrap_or(0)).sum(),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// Whether anything may be kept at all.
    fn enabled(&self) -> bool {
        self.dir.is_some() && self.remaining.load(Ordering::Relaxed) > 0
    }

    /// Takes `bytes` of the budget, if that much is left.
    fn reserve(&self, bytes: u64) -> bool {
        self.remaining.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(bytes)).is_ok()
    }

    fn release(&self, bytes: u64) {
        self.remaining.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A writer for input `index` as the plan reads it, or `None` if nothing can be kept.
    pub(crate) fn writer(&self, index: usize, n_genes: u64) -> Option<SpillWriter<'_>> {
        if !self.enabled() {
            return None;
        }
        let path = self.dir.as_ref()?.path().join(format!("input-{index}.bin"));
        let file = File::create(&path).ok()?;
        Some(SpillWriter {
            spill: self,
            index,
            n_genes,
            path,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            reserved: 0,
            row_starts: vec![0],
            windows: Vec::new(),
            crcs: Vec::new(),
        })
    }

    /// Keeps input `index`'s output column of each of its genes (see [`Spill::gene_columns`]), if the budget has
    /// room for it.
    pub(crate) fn keep_gene_columns(&self, index: usize, columns: Vec<u32>) {
        if self.enabled() && self.reserve(4 * columns.len() as u64) {
            lock(&self.gene_columns).insert(index, Arc::new(columns));
        }
    }

    /// Input `index`'s output column of each of its genes, if the plan kept them.
    pub(crate) fn gene_columns(&self, index: usize) -> Option<Arc<Vec<u32>>> {
        lock(&self.gene_columns).get(&index).cloned()
    }

    /// A reader of input `index`, if it is kept.
    pub(crate) fn reader(&self, index: usize) -> Option<SpillReader> {
        let input = lock(&self.inputs).get(&index).cloned()?;
        let file = File::open(&input.file).ok()?;
        Some(SpillReader { input, file, words: Vec::new(), window: None })
    }

    /// Drops the copy of input `index` (it failed when read back): later reads go to the input.
    pub(crate) fn drop_input(&self, index: usize) {
        if let Some(s) = lock(&self.inputs).remove(&index) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            // Readers that still hold it keep reading the open file; the name goes now.
            let _ = std::fs::remove_file(&s.file);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `deltacells-spill-<host>-`: what the spill directories of this host's processes start with (then the process
/// id, a dash and a random suffix).
fn owner_prefix() -> String {
    format!("deltacells-spill-{}-", host_name().replace(['-', '/'], "_"))
}

#[cfg(unix)]
fn host_name() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

#[cfg(not(unix))]
fn host_name() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_default()
}

/// Whether process `pid` of this host may still be running (when in doubt, yes).
#[cfg(unix)]
fn may_be_running(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return true };
    rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH)
}

#[cfg(not(unix))]
fn may_be_running(_pid: u32) -> bool {
    true
}

/// Removes the spill directories in `base` that processes of this host left when they were killed (best effort:
/// anything unreadable, or of a process that may still run, stays).
fn remove_abandoned(base: &Path) {
    let prefix = owner_prefix();
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)).and_then(|rest| rest.split_once('-'))
        else {
            continue;
        };
        let Ok(pid) = pid.0.parse::<u32>() else { continue };
        if pid != std::process::id() && !may_be_running(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Free bytes for an unprivileged writer in the file system holding `path`.
#[cfg(unix)]
fn free_bytes(path: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(not(unix))]
fn free_bytes(_path: &Path) -> Option<u64> {
    None
}

/// Keeps one input's windows as the plan reads them; [`SpillWriter::finish`] makes the copy readable. A writer
/// dropped unfinished (the scan failed) or that failed (budget, disk) removes its file and returns its budget.
pub(crate) struct SpillWriter<'a> {
    spill: &'a Spill,
    index: usize,
    n_genes: u64,
    path: PathBuf,
    /// `None` once the copy was given up.
    file: Option<BufWriter<File>>,
    reserved: u64,
    row_starts: Vec<u64>,
    windows: Vec<u64>,
    crcs: Vec<u32>,
}

impl SpillWriter<'_> {
    /// Appends the next window of the input (windows must come in row order, each row once).
    pub(crate) fn observe(&mut self, block: &RowBlock) {
        let Some(file) = self.file.as_mut() else { return };
        let cells = (self.row_starts.len() - 1) as u64;
        let n = block.nnz();
        let size = 8 * n as u64;
        if block.first_row != cells || block.n_genes != self.n_genes || !self.spill.reserve(size) {
            return self.give_up();
        }
        self.reserved += size;
        let (genes, counts) = (block.indices.as_bytes(), block.values.as_bytes());
        if file.write_all(genes).and_then(|()| file.write_all(counts)).is_err() {
            return self.give_up();
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(genes);
        crc.update(counts);
        self.crcs.push(crc.finalize());
        self.windows.push(cells);
        let base = *self.row_starts.last().expect("starts at 0");
        self.row_starts.extend(block.indptr[1..].iter().map(|&e| base + e));
    }

    /// Makes the copy readable if it holds all `n_cells` cells of the input; otherwise drops it.
    pub(crate) fn finish(mut self, n_cells: u64) {
        let complete = (self.row_starts.len() - 1) as u64 == n_cells;
        let flushed = self.file.take().is_some_and(|mut f| f.flush().is_ok());
        if !(complete && flushed) {
            return self.give_up();
        }
        let mut windows = std::mem::take(&mut self.windows);
        windows.push(n_cells);
        let input = SpilledInput {
            file: self.path.clone(),
            n_genes: self.n_genes,
            row_starts: std::mem::take(&mut self.row_starts),
            windows,
            crcs: std::mem::take(&mut self.crcs),
        };
        lock(&self.spill.inputs).insert(self.index, Arc::new(input));
        // Kept: the budget stays taken and the file stays.
        self.reserved = 0;
    }

    fn give_up(&mut self) {
        self.file = None;
        self.spill.release(std::mem::take(&mut self.reserved));
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for SpillWriter<'_> {
    fn drop(&mut self) {
        if self.reserved > 0 || self.file.is_some() {
            self.give_up();
        }
    }
}

/// Reads cells of one kept input back, a window at a time (the last window read is held, so consecutive reads
/// read and check each window once).
pub(crate) struct SpillReader {
    input: Arc<SpilledInput>,
    file: File,
    /// Window `window` (its genes, then its counts), checked.
    words: Vec<u32>,
    window: Option<usize>,
}

impl SpillReader {
    /// Reads cells `rows` into `out` (as the input's own reader would). The error says what failed; the caller
    /// drops the copy and reads the input instead.
    pub(crate) fn read_rows_into(&mut self, rows: Range<u64>, out: &mut RowBlock) -> Result<(), String> {
        let input = Arc::clone(&self.input);
        let n_cells = *input.windows.last().expect("ends with n_cells");
        if rows.start > rows.end || rows.end > n_cells {
            return Err(format!("cells {rows:?} are beyond the {n_cells} cells kept"));
        }
        out.reset(rows.start, input.n_genes);
        let mut row = rows.start;
        while row < rows.end {
            let w = input.windows.partition_point(|&first| first <= row) - 1;
            self.load(w)?;
            let (first, stop) = (input.windows[w], input.windows[w + 1].min(rows.end));
            let base = input.row_starts[first as usize];
            let n = (input.row_starts[input.windows[w + 1] as usize] - base) as usize;
            let (lo, hi) =
                ((input.row_starts[row as usize] - base) as usize, (input.row_starts[stop as usize] - base) as usize);
            out.indices.extend_from_slice(&self.words[lo..hi]);
            out.values.extend_from_slice(&self.words[n + lo..n + hi]);
            let end = *out.indptr.last().expect("starts at 0");
            let starts = &input.row_starts[row as usize..=stop as usize];
            out.indptr.extend(starts.windows(2).scan(end, |e, s| {
                *e += s[1] - s[0];
                Some(*e)
            }));
            row = stop;
        }
        Ok(())
    }

    /// Reads and checks window `w`.
    fn load(&mut self, w: usize) -> Result<(), String> {
        if self.window == Some(w) {
            return Ok(());
        }
        self.window = None;
        let input = &self.input;
        let (first, end) = (input.windows[w], input.windows[w + 1]);
        let (lo, hi) = (input.row_starts[first as usize], input.row_starts[end as usize]);
        self.words.resize(2 * (hi - lo) as usize, 0);
        let shown = input.file.display();
        let bytes = self.words.as_mut_bytes();
        let read = self.file.seek(SeekFrom::Start(8 * lo)).and_then(|_| self.file.read_exact(bytes));
        read.map_err(|e| format!("{shown}: cells {first}..{end}: {e}"))?;
        if crc32fast::hash(bytes) != input.crcs[w] {
            return Err(format!("{shown}: cells {first}..{end} fail their checksum"));
        }
        self.window = Some(w);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows as (genes, counts).
    type Rows = Vec<(Vec<u32>, Vec<u32>)>;

    /// `n` rows of a 5,000-gene matrix, some empty, as windows of `window` rows.
    fn windows(n: u64, window: u64) -> Vec<RowBlock> {
        let mut seed = 11u64;
        let mut next = move |m: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        dct_input::row_windows(n, window)
            .map(|rows| {
                let mut b = RowBlock::new(5000);
                b.reset(rows.start, 5000);
                for _ in rows {
                    let mut g = 0;
                    for _ in 0..next(40) {
                        g += 1 + next(200) as u32;
                        b.indices.push(g);
                        b.values.push(1 + next(70_000) as u32);
                    }
                    b.indptr.push(b.indices.len() as u64);
                }
                b
            })
            .collect()
    }

    fn rows_of(blocks: &[RowBlock], rows: Range<u64>) -> Vec<(Vec<u32>, Vec<u32>)> {
        let all: Vec<(Vec<u32>, Vec<u32>)> =
            blocks.iter().flat_map(|b| (0..b.n_rows()).map(|r| (b.row(r).0.to_vec(), b.row(r).1.to_vec()))).collect();
        all[rows.start as usize..rows.end as usize].to_vec()
    }

    fn read(r: &mut SpillReader, rows: Range<u64>) -> Result<Rows, String> {
        let mut out = RowBlock::new(0);
        r.read_rows_into(rows.clone(), &mut out)?;
        assert_eq!(out.first_row, rows.start);
        assert_eq!(out.n_genes, 5000);
        Ok((0..out.n_rows()).map(|i| (out.row(i).0.to_vec(), out.row(i).1.to_vec())).collect())
    }

    fn spill_in(dir: &Path, max_bytes: u64) -> Spill {
        Spill::new(&SpillOptions { dir: Some(dir.to_path_buf()), max_bytes }).unwrap()
    }

    fn keep(spill: &Spill, index: usize, blocks: &[RowBlock]) {
        let mut w = spill.writer(index, 5000).expect("enabled");
        for b in blocks {
            w.observe(b);
        }
        w.finish(blocks.iter().map(|b| b.n_rows() as u64).sum());
    }

    #[test]
    fn rows_read_back_across_windows_equal_the_rows_written() {
        let tmp = tempfile::tempdir().unwrap();
        let spill = spill_in(tmp.path(), u64::MAX);
        let blocks = windows(1000, 256);
        keep(&spill, 3, &blocks);
        let nnz: usize = blocks.iter().map(RowBlock::nnz).sum();
        assert_eq!(spill.stats(), SpillStats { inputs: 1, bytes: 8 * nnz as u64, dropped: 0 });
        let mut r = spill.reader(3).unwrap();
        // Forward runs that straddle windows, a jump back, empty ranges, the whole input.
        for rows in [0..10, 10..300, 300..300, 250..770, 5..6, 768..1000, 0..1000, 999..1000] {
            assert_eq!(read(&mut r, rows.clone()).unwrap(), rows_of(&blocks, rows.clone()), "{rows:?}");
        }
        assert!(read(&mut r, 990..1001).unwrap_err().contains("beyond the 1000 cells"));
        assert!(spill.reader(2).is_none(), "input 2 was not kept");
    }

    #[test]
    fn a_corrupt_or_truncated_copy_fails_its_read_and_can_be_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let spill = spill_in(tmp.path(), u64::MAX);
        let blocks = windows(600, 256);
        keep(&spill, 0, &blocks);
        keep(&spill, 1, &blocks);
        let file = |i: usize| lock(&spill.inputs)[&i].file.clone();
        let mut bytes = std::fs::read(file(0)).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x40;
        std::fs::write(file(0), &bytes).unwrap();
        let mut r = spill.reader(0).unwrap();
        assert_eq!(read(&mut r, 0..10).unwrap(), rows_of(&blocks, 0..10), "the first window is intact");
        let err = read(&mut r, 0..600).unwrap_err();
        assert!(err.contains("fail their checksum") && err.contains("input-0.bin"), "{err}");
        std::fs::write(file(1), &bytes[..middle]).unwrap();
        let err = read(&mut spill.reader(1).unwrap(), 500..600).unwrap_err();
        assert!(err.contains("input-1.bin: cells 256..512"), "{err}");
        let path = file(0);
        spill.drop_input(0);
        assert!(spill.reader(0).is_none() && !path.exists());
        assert_eq!(spill.stats().dropped, 1);
    }

    #[test]
    fn the_budget_bounds_what_is_kept_and_failed_copies_give_it_back() {
        let tmp = tempfile::tempdir().unwrap();
        let blocks = windows(600, 256);
        let size = 8 * blocks.iter().map(RowBlock::nnz).sum::<usize>() as u64;
        let spill = spill_in(tmp.path(), size + size / 2);
        keep(&spill, 0, &blocks);
        // The second copy runs out of budget part way: not kept, and what it had taken is returned.
        keep(&spill, 1, &blocks);
        assert_eq!(spill.stats(), SpillStats { inputs: 1, bytes: size, dropped: 0 });
        assert_eq!(spill.remaining.load(Ordering::Relaxed), size / 2);
        // A writer dropped before it finished (the scan failed) and one that saw too few cells keep nothing.
        let mut w = spill.writer(2, 5000).unwrap();
        w.observe(&blocks[0]);
        drop(w);
        let mut w = spill.writer(3, 5000).unwrap();
        w.observe(&blocks[0]);
        w.finish(600);
        // Windows out of order are refused.
        let mut w = spill.writer(4, 5000).unwrap();
        w.observe(&blocks[1]);
        w.finish(600);
        assert_eq!(spill.stats().inputs, 1);
        assert_eq!(spill.remaining.load(Ordering::Relaxed), size / 2);
        let names: Vec<_> =
            std::fs::read_dir(spill.dir.as_ref().unwrap().path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["input-0.bin"]);
        // Dropping the spill removes its directory; a zero budget keeps nothing at all.
        drop(spill);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
        assert!(spill_in(tmp.path(), 0).writer(0, 5000).is_none());
        assert!(Spill::disabled().writer(0, 5000).is_none());
    }

    /// What killed conversions of this host left is removed by the next one; what live processes or other hosts
    /// own stays.
    #[test]
    fn abandoned_spill_directories_of_dead_processes_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let names = [
            format!("{}{dead}-aB3x", owner_prefix()),
            format!("{}{me}-zz9Q", owner_prefix()),
            format!("deltacells-spill-elsewhere-{dead}-q1w2"),
            "deltacells-spill-notapid-x".to_string(),
            "unrelated".to_string(),
        ];
        for n in &names {
            std::fs::create_dir_all(tmp.path().join(n).join("inner")).unwrap();
            std::fs::write(tmp.path().join(n).join("inner/input-0.bin"), b"x").unwrap();
        }
        let spill = spill_in(tmp.path(), u64::MAX);
        let own = spill.dir.as_ref().unwrap().path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(own.starts_with(&format!("{}{me}-", owner_prefix())), "{own}");
        let mut left: Vec<String> =
            std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        let mut want: Vec<String> = names[1..].iter().cloned().chain([own]).collect();
        want.sort();
        assert_eq!(left, want);
    }
}
