//! 10x Genomics Matrix Market folders: `matrix.mtx[.gz]`, `features.tsv[.gz]` or `genes.tsv[.gz]`,
//! `barcodes.tsv[.gz]`.
//!
//! The matrix text itself (banner, comments, size line, entries) is parsed by one set of functions, which both the
//! folder reader [`MtxSource`] and the in-memory entry point [`parse_mtx_text`] (used by the fuzz target) run.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use crate::block::{REPEAT_OVERFLOW, RowBlock, count_from_f64, count_from_i64};
use crate::error::{BadValue, InputError};
use crate::tenx::build_genes;
use crate::{CountSource, GeneTable, InputKind};

/// The longest line accepted in any text file of the folder.
const MAX_LINE: u64 = 1 << 20;

/// Opens a text file, decompressing it if it starts with the gzip magic bytes (several concatenated gzip members
/// are read as one stream).
fn open_text(path: &Path) -> Result<Box<dyn BufRead + Send>, InputError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| InputError::Io { path: path.to_path_buf(), what, source }
    };
    let mut f = BufReader::with_capacity(1 << 16, File::open(path).map_err(io("opening"))?);
    let gz = f.fill_buf().map_err(io("reading"))?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz { Box::new(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(f))) } else { Box::new(f) })
}

/// Line-by-line reader with line numbers and a bound on line length.
struct Lines<R> {
    r: R,
    path: PathBuf,
    line: u64,
    buf: Vec<u8>,
}

impl Lines<Box<dyn BufRead + Send>> {
    fn open(path: &Path) -> Result<Self, InputError> {
        Ok(Lines::new(open_text(path)?, path))
    }
}

impl<R: BufRead> Lines<R> {
    /// Reads lines from `r`; `path` names it in errors.
    fn new(r: R, path: &Path) -> Self {
        Lines { r, path: path.to_path_buf(), line: 0, buf: Vec::new() }
    }

    /// The next line (its 1-based number and text without the line ending), or `None` at the end of the file.
    fn next_line(&mut self) -> Result<Option<(u64, &str)>, InputError> {
        self.buf.clear();
        let n = (&mut self.r).take(MAX_LINE + 1).read_until(b'\n', &mut self.buf).map_err(|source| InputError::Io {
            path: self.path.clone(),
            what: format!("reading line {}", self.line + 1),
            source,
        })?;
        if n == 0 {
            return Ok(None);
        }
        self.line += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if n as u64 > MAX_LINE {
            return Err(self.err(format!("line is longer than {MAX_LINE} bytes")));
        }
        let line = self.line;
        std::str::from_utf8(&self.buf).map(|t| Some((line, t))).map_err(|_| InputError::Text {
            path: self.path.clone(),
            line: self.line,
            detail: "line is not valid UTF-8 text".into(),
        })
    }

    fn err(&self, detail: impl Into<String>) -> InputError {
        text_err(&self.path, self.line, detail)
    }
}

fn text_err(path: &Path, line: u64, detail: impl Into<String>) -> InputError {
    InputError::Text { path: path.to_path_buf(), line, detail: detail.into() }
}

/// Reads a TSV file into rows of tab-separated fields; blank lines are allowed only at the end.
fn read_tsv(path: &Path) -> Result<Vec<Vec<String>>, InputError> {
    let mut lines = Lines::open(path)?;
    let mut rows = Vec::new();
    let mut blank_at = None;
    while let Some((n, l)) = lines.next_line()? {
        if l.trim().is_empty() {
            blank_at.get_or_insert(n);
            continue;
        }
        if let Some(b) = blank_at {
            return Err(InputError::Text {
                path: path.to_path_buf(),
                line: b,
                detail: "empty line inside the table".into(),
            });
        }
        rows.push(l.split('\t').map(str::to_string).collect());
    }
    Ok(rows)
}

/// The value type declared on the banner of a coordinate Matrix Market file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MtxField {
    /// `integer`.
    Integer,
    /// `real` or `double`; every value must still be a whole number.
    Real,
}

/// The banner and size line of a Matrix Market file.
///
/// Only `%%MatrixMarket matrix coordinate integer|real|double general` banners are accepted (case-insensitive), so
/// the format is always `coordinate` and the symmetry always `general`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtxHeader {
    /// The value type.
    pub field: MtxField,
    /// Rows declared on the size line (genes, in a 10x file).
    pub n_rows: u64,
    /// Columns declared on the size line (cells, in a 10x file).
    pub n_cols: u64,
    /// Entry lines declared on the size line (explicit zeros and repeats included).
    pub n_entries: u64,
}

/// One entry line of a Matrix Market file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MtxEntry {
    /// 0-based row (the file's 1-based row minus 1): the gene, in a 10x file. Below [`MtxHeader::n_rows`].
    pub row: u64,
    /// 0-based column (the file's 1-based column minus 1): the cell, in a 10x file. Below [`MtxHeader::n_cols`].
    pub col: u64,
    /// The value, a count in `0 ..= 2^31 - 1` (explicit zeros are kept).
    pub count: u32,
}

/// A Matrix Market text parsed in memory by [`parse_mtx_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MtxText {
    /// The banner and size line.
    pub header: MtxHeader,
    /// The entries in file order: exactly [`MtxHeader::n_entries`] of them, each as listed (repeated coordinates
    /// are not summed, explicit zeros are not dropped).
    pub entries: Vec<MtxEntry>,
}

/// Parses a Matrix Market coordinate text held in memory (uncompressed): banner, comment and blank lines, size line
/// and every entry, with the same code [`MtxSource`] runs on `matrix.mtx[.gz]`. `path` only names the text in
/// error messages.
///
/// Accepted: `%%MatrixMarket matrix coordinate integer|real|double general`, then `rows columns entries`, then
/// exactly `entries` lines `row column value` with 1-based coordinates inside the declared shape and values that are
/// counts (whole numbers in `0 ..= 2^31 - 1`, also when written as reals such as `3.0` or `1e3`). Lines may end in
/// `\n` or `\r\n`; lines that are blank or start with `%` are skipped anywhere after the banner. Whitespace, both
/// around and between the numbers, means ASCII whitespace (space, tab, CR, LF, form feed).
///
/// Never panics, and allocates in proportion to `text`, not to the sizes the text declares.
///
/// # Errors
/// [`InputError::Text`] (with the 1-based line number) for a malformed banner, size line or entry line, a coordinate
/// outside the declared shape, more or fewer entries than declared, a line that is not UTF-8 or longer than 1 MiB;
/// [`InputError::NotACount`] (object `line N`) for a value that is not a count.
pub fn parse_mtx_text(text: &[u8], path: &Path) -> Result<MtxText, InputError> {
    let mut lines = Lines::new(text, path);
    let header = read_header(&mut lines, path)?;
    // The shortest entry line ("1 1 1\n") is 6 bytes: never reserve more than the text can hold.
    let cap = usize::try_from(header.n_entries).unwrap_or(usize::MAX).min(text.len() / 6);
    let mut entries = Vec::with_capacity(cap);
    for_each_entry(&mut lines, path, &header, &Names::NONE, |e| entries.push(e))?;
    Ok(MtxText { header, entries })
}

/// Reads the banner, comments and size line, leaving `lines` at the first entry.
fn read_header<R: BufRead>(lines: &mut Lines<R>, path: &Path) -> Result<MtxHeader, InputError> {
    let Some((n, banner)) = lines.next_line()? else {
        return Err(lines.err("the file is empty; expected a %%MatrixMarket banner"));
    };
    let err = |detail: String| text_err(path, n, detail);
    let t: Vec<String> = banner.split_ascii_whitespace().map(str::to_ascii_lowercase).collect();
    if t.first().map(String::as_str) != Some("%%matrixmarket") {
        return Err(err(format!(
            "expected the banner '%%MatrixMarket matrix coordinate integer general', found {:?}",
            truncate(banner)
        )));
    }
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    let field = match t.as_slice() {
        [_, "matrix", "coordinate", field, "general"] => match *field {
            "integer" => MtxField::Integer,
            "real" | "double" => MtxField::Real,
            other => {
                return Err(err(format!(
                    "value type '{other}' is not supported: deltacells needs counts ('integer', or 'real' holding \
                     whole numbers)"
                )));
            }
        },
        [_, "matrix", "coordinate", _, sym] => {
            return Err(err(format!(
                "symmetry '{sym}' is not supported: 10x count matrices are 'general' (rows = genes, columns = cells)"
            )));
        }
        [_, "matrix", "array", ..] => {
            return Err(err(
                "dense 'array' Matrix Market files are not supported; write the counts in 'coordinate' format".into(),
            ));
        }
        _ => {
            return Err(err(format!(
                "unrecognized banner {:?}; expected '%%MatrixMarket matrix coordinate integer general'",
                truncate(banner)
            )));
        }
    };
    loop {
        let Some((n, l)) = lines.next_line()? else {
            return Err(lines.err("the file ends before the size line 'rows columns entries'"));
        };
        // ASCII whitespace only, as between the numbers (see `entry_text`).
        let l = l.trim_ascii();
        if l.is_empty() || l.starts_with('%') {
            continue;
        }
        let nums: Vec<Option<u64>> = l.split_ascii_whitespace().map(|x| x.parse::<u64>().ok()).collect();
        return match nums.as_slice() {
            [Some(r), Some(c), Some(e)] => Ok(MtxHeader { field, n_rows: *r, n_cols: *c, n_entries: *e }),
            _ => Err(text_err(
                path,
                n,
                format!(
                    "expected the size line 'rows columns entries' (three non-negative integers), found {:?}",
                    truncate(l)
                ),
            )),
        };
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The text of an entry line without leading whitespace, or `None` for a blank or comment line (skipped).
///
/// Whitespace is ASCII whitespace (space, tab, CR, LF, form feed), the same set that separates the numbers: a line
/// that starts with another space character (vertical tab, no-break space, ...) is an entry line, and a malformed
/// one, rather than an entry whose first number silently loses a prefix the middle of a line would not.
fn entry_text(l: &str) -> Option<&str> {
    let t = l.trim_ascii_start();
    (!(t.is_empty() || t.starts_with('%'))).then_some(t)
}

/// Reads every entry after the header in file order, checks it against the size line and hands it to `f`. Fails on
/// the first bad line, on an entry beyond the declared count, and if the file ends before the declared count.
fn for_each_entry<R: BufRead>(
    lines: &mut Lines<R>,
    path: &Path,
    h: &MtxHeader,
    names: &Names<'_>,
    mut f: impl FnMut(MtxEntry),
) -> Result<(), InputError> {
    let mut listed = 0u64;
    while let Some((n, l)) = lines.next_line()? {
        let Some(t) = entry_text(l) else { continue };
        if listed == h.n_entries {
            return Err(text_err(path, n, format!("more entries than the {} declared on the size line", h.n_entries)));
        }
        f(parse_entry(path, n, t, h, names)?);
        listed += 1;
    }
    if listed != h.n_entries {
        return Err(InputError::Text {
            path: path.to_path_buf(),
            line: lines.line,
            detail: format!(
                "the file ends after {listed} entries but the size line declares {} (is it truncated?)",
                h.n_entries
            ),
        });
    }
    Ok(())
}

/// Parses an entry line (already known to be non-empty and not a comment).
fn parse_entry(path: &Path, line: u64, l: &str, h: &MtxHeader, names: &Names<'_>) -> Result<MtxEntry, InputError> {
    let mut it = l.split_ascii_whitespace();
    let (Some(r), Some(c), Some(v), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(text_err(path, line, format!("expected 'row column value', found {:?}", truncate(l))));
    };
    let coord = |tok: &str, what: &str, n: u64| -> Result<u64, InputError> {
        match tok.parse::<u64>() {
            Ok(x) if (1..=n).contains(&x) => Ok(x - 1),
            _ => Err(text_err(
                path,
                line,
                format!(
                    "{what} {tok:?} is outside 1..={n} (Matrix Market coordinates are 1-based; the size line says {n})"
                ),
            )),
        }
    };
    let gene = coord(r, "row (gene)", h.n_rows)?;
    let cell = coord(c, "column (cell)", h.n_cols)?;
    let parsed = match h.field {
        MtxField::Integer => match v.parse::<i64>() {
            Ok(x) => count_from_i64(x),
            // Not an i64: a fraction, an exponent or an out-of-range integer; report it as a count problem.
            Err(_) => match v.parse::<f64>() {
                Ok(x) => count_from_f64(x),
                Err(_) => {
                    return Err(text_err(path, line, format!("cannot parse value {:?} as a number", truncate(v))));
                }
            },
        },
        MtxField::Real => match v.parse::<f64>() {
            Ok(x) => count_from_f64(x),
            Err(_) => return Err(text_err(path, line, format!("cannot parse value {:?} as a number", truncate(v)))),
        },
    };
    let count = parsed.map_err(|reason| {
        InputError::NotACount(Box::new(BadValue {
            path: path.to_path_buf(),
            object: format!("line {line}"),
            cell,
            cell_name: names.cell(cell),
            gene,
            gene_name: names.gene(gene),
            value: truncate(v),
            reason,
        }))
    })?;
    Ok(MtxEntry { row: gene, col: cell, count })
}

/// Cell and gene names for error messages.
struct Names<'a> {
    cells: &'a [String],
    genes: &'a [String],
}

impl Names<'_> {
    /// No names (for text parsed without its tables).
    const NONE: Names<'static> = Names { cells: &[], genes: &[] };

    fn cell(&self, c: u64) -> String {
        self.cells.get(c as usize).cloned().unwrap_or_default()
    }
    fn gene(&self, g: u64) -> String {
        self.genes.get(g as usize).cloned().unwrap_or_default()
    }
}

/// The kept entries, cell-major and canonical.
#[derive(Debug)]
struct CellMajor {
    indptr: Vec<u64>,
    indices: Vec<u32>,
    values: Vec<u32>,
}

/// Reads a 10x Matrix Market folder (genes × cells) as cell-major row windows.
///
/// Opening reads the gene and barcode tables and makes a first streaming pass over `matrix.mtx[.gz]` that checks
/// every line and counts the nonzero entries per cell (8 bytes per cell). The first [`CountSource::read_rows_into`]
/// makes a second pass that places each entry in its cell's slot: memory about 8 bytes per nonzero entry (kept by the
/// feature-type filter) plus 8 per cell, e.g. 18 MB for 2.3 M entries. Entries may be in any order; repeated
/// (gene, cell) entries are summed and explicit zeros dropped.
#[derive(Debug)]
pub struct MtxSource {
    dir: PathBuf,
    matrix: PathBuf,
    header: MtxHeader,
    genes: GeneTable,
    src_names: Vec<String>,
    cells: Vec<String>,
    gene_map: Option<Vec<u32>>,
    /// Cumulative nonzero kept entries per cell, from the first pass (`n_cells + 1`).
    cell_ptr: Vec<u64>,
    data: Option<CellMajor>,
}

/// Finds `base` or `base.gz` in `dir`.
fn find(dir: &Path, bases: &[&str]) -> Result<Option<PathBuf>, InputError> {
    let mut found = Vec::new();
    for b in bases {
        for name in [b.to_string(), format!("{b}.gz")] {
            let p = dir.join(&name);
            if p.is_file() {
                found.push(p);
            }
        }
        if !found.is_empty() {
            break;
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(InputError::UnknownInput {
            path: dir.to_path_buf(),
            detail: format!(
                "both {} and {} exist; remove the one that is out of date",
                found[0].display(),
                found[1].display()
            ),
        }),
    }
}

impl MtxSource {
    /// Opens the folder `dir`. `feature_type`: keep only features of this type (files with a type column); `None`
    /// keeps all.
    pub fn open(dir: &Path, feature_type: Option<&str>) -> Result<Self, InputError> {
        if !dir.is_dir() {
            return Err(InputError::UnknownInput { path: dir.to_path_buf(), detail: "not a folder".into() });
        }
        let missing = |what: &str, detail: &str| InputError::MissingFile {
            path: dir.to_path_buf(),
            what: what.to_string(),
            detail: detail.to_string(),
        };
        let matrix = find(dir, &["matrix.mtx"])?.ok_or_else(|| {
            missing("matrix.mtx[.gz]", "a 10x Matrix Market folder holds matrix.mtx or matrix.mtx.gz (genes x cells)")
        })?;
        let features = find(dir, &["features.tsv", "genes.tsv"])?.ok_or_else(|| {
            missing(
                "features.tsv[.gz] (or genes.tsv[.gz])",
                "the gene table must sit next to the matrix: one line per matrix row, 'id<TAB>name[<TAB>type]'",
            )
        })?;
        let barcodes = find(dir, &["barcodes.tsv"])?.ok_or_else(|| {
            missing(
                "barcodes.tsv[.gz]",
                "the cell barcodes must sit next to the matrix: one line per matrix column; copy it from the same \
                 Cell Ranger output folder",
            )
        })?;

        let mut lines = Lines::open(&matrix)?;
        let header = read_header(&mut lines, &matrix)?;

        let feat_rows = read_tsv(&features)?;
        let cells: Vec<String> =
            read_tsv(&barcodes)?.into_iter().map(|mut r| std::mem::take(&mut r[0])).collect::<Vec<_>>();
        if feat_rows.len() as u64 != header.n_rows {
            return Err(InputError::Malformed {
                path: features.clone(),
                object: "rows".into(),
                detail: format!(
                    "{} features listed but {} has {} rows",
                    feat_rows.len(),
                    matrix.display(),
                    header.n_rows
                ),
            });
        }
        if cells.len() as u64 != header.n_cols {
            return Err(InputError::Malformed {
                path: barcodes.clone(),
                object: "rows".into(),
                detail: format!(
                    "{} barcodes listed but {} has {} columns",
                    cells.len(),
                    matrix.display(),
                    header.n_cols
                ),
            });
        }
        if header.n_rows > u64::from(u32::MAX) {
            return Err(InputError::Unsupported {
                path: matrix.clone(),
                object: "size line".into(),
                detail: format!("{} genes: at most 2^32 - 1 are supported", header.n_rows),
            });
        }
        let ids: Vec<String> = feat_rows.iter().map(|r| r[0].clone()).collect();
        let names: Vec<String> = feat_rows.iter().map(|r| r.get(1).unwrap_or(&r[0]).clone()).collect();
        let with_types = feat_rows.iter().all(|r| r.len() >= 3) && !feat_rows.is_empty();
        let types: Option<Vec<String>> = with_types.then(|| feat_rows.iter().map(|r| r[2].clone()).collect());
        drop(feat_rows);
        let keep: Option<Vec<bool>> = match (feature_type, &types) {
            (Some(want), Some(t)) => {
                let keep: Vec<bool> = t.iter().map(|x| x == want).collect();
                if !keep.iter().any(|&k| k) {
                    let mut available: Vec<String> = Vec::new();
                    for x in t {
                        if !available.contains(x) {
                            available.push(x.clone());
                        }
                    }
                    return Err(InputError::NoFeatures { path: features, wanted: want.to_string(), available });
                }
                if keep.iter().all(|&k| k) { None } else { Some(keep) }
            }
            _ => None,
        };
        let (gene_map, genes) = build_genes(keep.as_deref(), &ids, &names, types.as_deref(), None);

        // First pass: check every entry, count kept nonzeros per cell.
        let mut cell_ptr = vec![0u64; cells.len() + 1];
        let nm = Names { cells: &cells, genes: &names };
        for_each_entry(&mut lines, &matrix, &header, &nm, |e| {
            let kept = gene_map.as_ref().is_none_or(|m| m[e.row as usize] != u32::MAX);
            if kept && e.count != 0 {
                cell_ptr[e.col as usize + 1] += 1;
            }
        })?;
        for i in 1..cell_ptr.len() {
            cell_ptr[i] += cell_ptr[i - 1];
        }
        Ok(MtxSource {
            dir: dir.to_path_buf(),
            matrix,
            header,
            genes,
            src_names: names,
            cells,
            gene_map,
            cell_ptr,
            data: None,
        })
    }

    /// The matrix file read (`matrix.mtx` or `matrix.mtx.gz`).
    pub fn matrix_path(&self) -> &Path {
        &self.matrix
    }

    /// Entries listed in the matrix file (including explicit zeros and dropped features).
    pub fn entries_listed(&self) -> u64 {
        self.header.n_entries
    }

    /// Second pass: place every kept nonzero entry in its cell's slot, then sort and sum each cell's entries.
    fn load(&mut self) -> Result<(), InputError> {
        let nnz = *self.cell_ptr.last().expect("n_cells + 1 entries");
        let mut indices = vec![0u32; nnz as usize];
        let mut values = vec![0u32; nnz as usize];
        let mut fill = self.cell_ptr.clone();
        let mut lines = Lines::open(&self.matrix)?;
        let path = self.matrix.as_path();
        let header = read_header(&mut lines, path)?;
        let nm = Names { cells: &self.cells, genes: &self.src_names };
        let changed = |line: u64| text_err(path, line, "the file changed since it was opened; open it again");
        if header.n_rows != self.header.n_rows || header.n_cols != self.header.n_cols {
            return Err(changed(lines.line));
        }
        while let Some((n, l)) = lines.next_line()? {
            let Some(t) = entry_text(l) else { continue };
            let e = parse_entry(path, n, t, &header, &nm)?;
            let gene = match &self.gene_map {
                None => e.row as u32,
                Some(m) => m[e.row as usize],
            };
            if gene == u32::MAX || e.count == 0 {
                continue;
            }
            let slot = &mut fill[e.col as usize];
            if *slot >= self.cell_ptr[e.col as usize + 1] {
                return Err(changed(n));
            }
            indices[*slot as usize] = gene;
            values[*slot as usize] = e.count;
            *slot += 1;
        }
        if fill[..fill.len() - 1] != self.cell_ptr[1..] {
            return Err(changed(lines.line));
        }
        drop(fill);
        // Canonicalize each cell in place (sort by gene, sum repeats), compacting towards the front.
        let mut indptr = Vec::with_capacity(self.cells.len() + 1);
        indptr.push(0u64);
        let mut w = 0usize;
        let mut scratch: Vec<(u32, u32)> = Vec::new();
        for c in 0..self.cells.len() {
            let (lo, hi) = (self.cell_ptr[c] as usize, self.cell_ptr[c + 1] as usize);
            scratch.clear();
            scratch.extend(indices[lo..hi].iter().copied().zip(values[lo..hi].iter().copied()));
            if !scratch.windows(2).all(|p| p[0].0 < p[1].0) {
                scratch.sort_by_key(|&(g, _)| g);
            }
            let row_start = w;
            for &(g, v) in &scratch {
                if w > row_start && indices[w - 1] == g {
                    let sum = u64::from(values[w - 1]) + u64::from(v);
                    if sum > u64::from(dct_format::MAX_COUNT) {
                        let src = self.src_gene(g);
                        return Err(InputError::NotACount(Box::new(BadValue {
                            path: self.matrix.clone(),
                            object: "repeated entries".into(),
                            cell: c as u64,
                            cell_name: self.cells[c].clone(),
                            gene: src,
                            gene_name: self.src_names[src as usize].clone(),
                            value: sum.to_string(),
                            reason: REPEAT_OVERFLOW,
                        })));
                    }
                    values[w - 1] = sum as u32;
                } else {
                    indices[w] = g;
                    values[w] = v;
                    w += 1;
                }
            }
            indptr.push(w as u64);
        }
        indices.truncate(w);
        values.truncate(w);
        self.data = Some(CellMajor { indptr, indices, values });
        Ok(())
    }

    fn src_gene(&self, g: u32) -> u64 {
        match &self.gene_map {
            None => u64::from(g),
            Some(m) => m.iter().position(|&x| x == g).map_or(u64::from(g), |p| p as u64),
        }
    }
}

impl CountSource for MtxSource {
    fn kind(&self) -> InputKind {
        InputKind::MatrixMarket
    }

    fn path(&self) -> &Path {
        &self.dir
    }

    fn describe(&self) -> String {
        format!(
            "Matrix Market {} ({} genes x {} cells listed, {} entries, {})",
            self.matrix.display(),
            self.header.n_rows,
            self.header.n_cols,
            self.header.n_entries,
            match self.header.field {
                MtxField::Integer => "integer",
                MtxField::Real => "real",
            }
        )
    }

    fn n_cells(&self) -> u64 {
        self.cells.len() as u64
    }

    fn n_genes(&self) -> u64 {
        self.genes.names.len() as u64
    }

    fn genes(&self) -> &GeneTable {
        &self.genes
    }

    fn cell_names(&self) -> &[String] {
        &self.cells
    }

    fn loads_whole_matrix(&self) -> bool {
        true
    }

    fn stored_entries(&self, rows: Range<u64>) -> Option<u64> {
        (rows.start <= rows.end && rows.end <= self.n_cells())
            .then(|| self.cell_ptr[rows.end as usize] - self.cell_ptr[rows.start as usize])
    }

    fn read_rows_into(&mut self, rows: Range<u64>, out: &mut RowBlock) -> Result<(), InputError> {
        if rows.start > rows.end || rows.end > self.n_cells() {
            return Err(InputError::BadRequest {
                path: self.dir.clone(),
                detail: format!("rows {rows:?} are outside 0..{}", self.n_cells()),
            });
        }
        if self.data.is_none() {
            self.load()?;
        }
        let d = self.data.as_ref().expect("loaded above");
        out.reset(rows.start, self.n_genes());
        let (lo, hi) = (d.indptr[rows.start as usize], d.indptr[rows.end as usize]);
        out.indices.extend_from_slice(&d.indices[lo as usize..hi as usize]);
        out.values.extend_from_slice(&d.values[lo as usize..hi as usize]);
        out.indptr.extend(d.indptr[rows.start as usize + 1..=rows.end as usize].iter().map(|&p| p - lo));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const BANNER: &str = "%%MatrixMarket matrix coordinate integer general\n";

    fn parse(text: impl AsRef<[u8]>) -> Result<MtxText, InputError> {
        parse_mtx_text(text.as_ref(), Path::new("t.mtx"))
    }

    fn entry(row: u64, col: u64, count: u32) -> MtxEntry {
        MtxEntry { row, col, count }
    }

    /// The line and message of an [`InputError::Text`]; panics on success or on another error.
    fn text_error(r: Result<MtxText, InputError>) -> (u64, String) {
        match r {
            Err(InputError::Text { path, line, detail }) => {
                assert_eq!(path, Path::new("t.mtx"));
                (line, detail)
            }
            other => panic!("expected a text error, got {other:?}"),
        }
    }

    /// The place and reason of an [`InputError::NotACount`]; panics on success or on another error.
    fn count_error(r: Result<MtxText, InputError>) -> (String, u64, u64, &'static str) {
        match r {
            Err(InputError::NotACount(b)) => (b.object, b.gene, b.cell, b.reason),
            other => panic!("expected a count error, got {other:?}"),
        }
    }

    fn repo(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
    }

    /// The file's bytes, gunzipped if it is gzip.
    fn read_text(path: &Path) -> Vec<u8> {
        let mut out = Vec::new();
        open_text(path).unwrap().read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn parses_a_hand_written_text_exactly() {
        // Upper-case banner, CRLF endings, comments and blank lines before and among the entries, leading blanks,
        // an explicit zero, a repeated coordinate, the largest count, and no final line ending.
        let text = "%%MatrixMarket Matrix Coordinate Integer General\r\n% a comment\n\n3 4 6\n1 1 7\n  3 4 0\n\
                    % between entries\n2 2 2147483647\n\n1 1 1\r\n3 2 12\n\t1 4 +5";
        let m = parse(text).unwrap();
        assert_eq!(m.header, MtxHeader { field: MtxField::Integer, n_rows: 3, n_cols: 4, n_entries: 6 });
        assert_eq!(
            m.entries,
            vec![
                entry(0, 0, 7),
                entry(2, 3, 0),
                entry(1, 1, 2_147_483_647),
                entry(0, 0, 1),
                entry(2, 1, 12),
                entry(0, 3, 5)
            ]
        );
    }

    #[test]
    fn whole_numbers_written_as_reals_are_counts() {
        for field in ["real", "double", "REAL"] {
            let text =
                format!("%%MatrixMarket matrix coordinate {field} general\n2 2 4\n1 2 3.0\n2 1 1e3\n2 2 -0.0\n1 1 7\n");
            let m = parse(text).unwrap();
            assert_eq!(m.header, MtxHeader { field: MtxField::Real, n_rows: 2, n_cols: 2, n_entries: 4 });
            assert_eq!(m.entries, vec![entry(0, 1, 3), entry(1, 0, 1000), entry(1, 1, 0), entry(0, 0, 7)]);
        }
        // An integer file may write a count with an exponent or a zero fraction, too.
        let m = parse(format!("{BANNER}1 1 2\n1 1 2e1\n1 1 4.0\n")).unwrap();
        assert_eq!(m.entries, vec![entry(0, 0, 20), entry(0, 0, 4)]);
    }

    #[test]
    fn empty_matrices_and_zero_entries() {
        let m = parse(format!("{BANNER}0 0 0")).unwrap();
        assert_eq!(m.header, MtxHeader { field: MtxField::Integer, n_rows: 0, n_cols: 0, n_entries: 0 });
        assert!(m.entries.is_empty());
        let m = parse(format!("{BANNER}5 6 0\n% nothing\n\n")).unwrap();
        assert_eq!((m.header.n_rows, m.header.n_cols), (5, 6));
        assert!(m.entries.is_empty());
        // With no rows, every coordinate is outside the shape.
        assert_eq!(text_error(parse(format!("{BANNER}0 0 1\n1 1 1\n"))).0, 3);
    }

    #[test]
    fn malformed_headers_are_text_errors_with_line_numbers() {
        let cases: &[(&[u8], u64, &str)] = &[
            (b"", 0, "the file is empty"),
            (b"hello\n", 1, "expected the banner"),
            (b"%%MatrixMarket matrix array integer general\n2 2\n", 1, "dense 'array'"),
            (b"%%MatrixMarket matrix coordinate integer symmetric\n1 1 1\n1 1 1\n", 1, "symmetry 'symmetric'"),
            (b"%%MatrixMarket matrix coordinate pattern general\n1 1 1\n1 1\n", 1, "value type 'pattern'"),
            (b"%%MatrixMarket matrix coordinate complex general\n", 1, "value type 'complex'"),
            (b"%%MatrixMarket vector coordinate integer general\n", 1, "unrecognized banner"),
            (b"%%MatrixMarket matrix coordinate integer general extra\n", 1, "unrecognized banner"),
            (b"%%MatrixMarket matrix coordinate integer general\n% only a comment\n\n", 3, "ends before the size line"),
            (b"%%MatrixMarket matrix coordinate integer general\n%c\n2 2\n", 3, "expected the size line"),
            (b"%%MatrixMarket matrix coordinate integer general\n2 2 1 1\n", 2, "expected the size line"),
            (b"%%MatrixMarket matrix coordinate integer general\n2 -2 1\n", 2, "expected the size line"),
            (
                b"%%MatrixMarket matrix coordinate integer general\n2 2 18446744073709551616\n",
                2,
                "expected the size line",
            ),
            (b"%%MatrixMarket matrix coordinate integer general\n2.0 2 1\n", 2, "expected the size line"),
            (b"%%MatrixMarket \xff\n", 1, "not valid UTF-8"),
            (b"%%MatrixMarket matrix coordinate integer general\n\xc3\x28 1 1\n", 2, "not valid UTF-8"),
        ];
        for &(text, line, what) in cases {
            let (l, detail) = text_error(parse(text));
            assert_eq!(l, line, "{:?}: {detail}", String::from_utf8_lossy(text));
            assert!(detail.contains(what), "{:?}: {detail:?} lacks {what:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn malformed_entries_are_errors_with_line_numbers() {
        let head = "%%MatrixMarket matrix coordinate integer general\n% c\n2 3 2\n";
        let cases: &[(&str, u64, &str)] = &[
            ("1 1\n2 2 2\n", 4, "expected 'row column value'"),
            ("1 1 1 1\n2 2 2\n", 4, "expected 'row column value'"),
            ("0 1 1\n2 2 2\n", 4, "row (gene) \"0\" is outside 1..=2"),
            ("3 1 1\n2 2 2\n", 4, "row (gene) \"3\" is outside 1..=2"),
            ("1 4 1\n2 2 2\n", 4, "column (cell) \"4\" is outside 1..=3"),
            ("-1 1 1\n2 2 2\n", 4, "outside 1..=2"),
            ("1.0 1 1\n2 2 2\n", 4, "outside 1..=2"),
            ("1 1 1\n2 2 x\n", 5, "cannot parse value \"x\""),
            ("1 1 1\n", 4, "ends after 1 entries but the size line declares 2"),
            ("1 1 1\n\n% trailing comment\n", 6, "ends after 1 entries"),
            ("1 1 1\n2 2 2\n\n1 1 1\n", 7, "more entries than the 2 declared"),
            ("1 1 1\n2 2 \u{ff}\n", 5, "cannot parse value"),
            ("1 1 1\n2\u{a0}2 2\n", 5, "expected 'row column value'"),
        ];
        for &(body, line, what) in cases {
            let (l, detail) = text_error(parse(format!("{head}{body}")));
            assert_eq!(l, line, "{body:?}: {detail}");
            assert!(detail.contains(what), "{body:?}: {detail:?} lacks {what:?}");
        }
        let mut bad_utf8 = format!("{head}1 1 1\n").into_bytes();
        bad_utf8.extend_from_slice(b"2 2 \xff\n");
        assert_eq!(text_error(parse(bad_utf8)), (5, "line is not valid UTF-8 text".into()));
    }

    #[test]
    fn only_ascii_whitespace_separates_or_skips() {
        let head = "%%MatrixMarket matrix coordinate integer general\n% c\n2 3 1\n";
        // Leading ASCII whitespace (tab, form feed, CR) is skipped before entries, comments and the size line.
        let m = parse(format!("{BANNER}\t\x0c% c\n \r\n\t2 3 1\n\x0c\t2 3 4\n")).unwrap();
        assert_eq!(m.entries, vec![entry(1, 2, 4)]);
        // Other space characters are not whitespace, wherever they are: at the start of a line (once accepted, found
        // by the fuzz target; input kept in fuzz/regressions/mtx/leading_vertical_tab.mtx) as in the middle.
        let cases: &[(&str, u64, &str)] = &[
            ("\x0b2 1 1\n", 4, "row (gene) \"\\u{b}2\" is outside 1..=2"),
            ("2\x0b1 1\n", 4, "expected 'row column value'"),
            ("\u{a0}2 1 1\n", 4, "outside 1..=2"),
            ("\u{2028}\n2 1 1\n", 4, "expected 'row column value'"),
            ("\x0b% not a comment\n2 1 1\n", 4, "expected 'row column value'"),
        ];
        for &(body, line, what) in cases {
            let (l, detail) = text_error(parse(format!("{head}{body}")));
            assert_eq!(l, line, "{body:?}: {detail}");
            assert!(detail.contains(what), "{body:?}: {detail:?} lacks {what:?}");
        }
        let (l, detail) = text_error(parse(format!("{BANNER}\u{a0}2 3 1\n1 1 1\n")));
        assert_eq!(l, 2);
        assert!(detail.contains("expected the size line"), "{detail}");
        let regression = repo("fuzz/regressions/mtx/leading_vertical_tab.mtx");
        let (l, detail) = text_error(parse(std::fs::read(regression).unwrap()));
        assert_eq!(l, 22);
        assert!(detail.contains("row (gene) \"\\u{b}5\""), "{detail}");
    }

    #[test]
    fn values_that_are_not_counts_are_count_errors() {
        let cases: &[(&str, &str, &str)] = &[
            ("integer", "-3", "negative"),
            ("integer", "2.5", "not an integer"),
            ("integer", "2147483648", "above 2^31 - 1"),
            ("integer", "99999999999999999999", "above 2^31 - 1"),
            ("integer", "inf", "not finite"),
            ("real", "NaN", "not finite"),
            ("real", "-1e-300", "negative"),
            ("real", "0.5", "not an integer"),
            ("real", "3e9", "above 2^31 - 1"),
        ];
        for &(field, value, reason) in cases {
            let text = format!("%%MatrixMarket matrix coordinate {field} general\n4 5 2\n1 1 1\n3 5 {value}\n");
            assert_eq!(count_error(parse(text)), ("line 4".to_string(), 2, 4, reason), "{field} {value}");
        }
    }

    #[test]
    fn declared_sizes_do_not_drive_allocation() {
        // Sizes of 2^64 - 1: reserving for them would abort; the one listed entry parses, then the count is short.
        let max = u64::MAX;
        let m = parse(format!("{BANNER}{max} {max} {max}\n{max} 1 5\n"));
        assert_eq!(
            text_error(m),
            (3, format!("the file ends after 1 entries but the size line declares {max} (is it truncated?)"))
        );
        let m = parse(format!("{BANNER}{max} {max} 1\n{max} {max} 5\n")).unwrap();
        assert_eq!(m.entries, vec![entry(max - 1, max - 1, 5)]);
        // A line longer than the bound is refused without reading it whole.
        let mut long = format!("{BANNER}1 1 1\n").into_bytes();
        long.resize(long.len() + (1 << 20) + 10, b' ');
        let (line, detail) = text_error(parse(&long));
        assert_eq!(line, 3);
        assert!(detail.contains("longer than"), "{detail}");
    }

    /// `parse_mtx_text` on the folder's matrix and the folder reader give the same matrix (the parsed entries with
    /// zeros dropped and repeats summed, cell-major); returns the parsed text.
    fn assert_agrees_with_folder_reader(dir: &Path) -> MtxText {
        let matrix = find(dir, &["matrix.mtx"]).unwrap().unwrap();
        let m = parse_mtx_text(&read_text(&matrix), &matrix).unwrap();
        assert_eq!(m.entries.len() as u64, m.header.n_entries);
        let mut src = MtxSource::open(dir, None).unwrap();
        assert_eq!(src.header, m.header);
        assert_eq!((src.n_genes(), src.n_cells()), (m.header.n_rows, m.header.n_cols));
        let mut cells: Vec<BTreeMap<u32, u32>> = vec![BTreeMap::new(); m.header.n_cols as usize];
        for e in &m.entries {
            if e.count != 0 {
                *cells[e.col as usize].entry(e.row as u32).or_default() += e.count;
            }
        }
        let block = src.read_rows(0..src.n_cells()).unwrap();
        for (c, want) in cells.iter().enumerate() {
            let (genes, counts) = block.row(c);
            let got: BTreeMap<u32, u32> = genes.iter().copied().zip(counts.iter().copied()).collect();
            assert_eq!(&got, want, "{}: cell {c}", dir.display());
        }
        m
    }

    #[test]
    fn pbmc200_matches_expected_totals_and_the_folder_reader() {
        let m = assert_agrees_with_folder_reader(&repo("testdata/inputs/pbmc200/mtx"));
        let exp: serde_json::Value =
            serde_json::from_slice(&std::fs::read(repo("testdata/inputs/pbmc200/expected.json")).unwrap()).unwrap();
        let u = |k: &str| exp[k].as_u64().unwrap();
        let list = |k: &str| -> Vec<u64> { exp[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect() };
        assert_eq!(
            m.header,
            MtxHeader { field: MtxField::Integer, n_rows: u("n_genes"), n_cols: u("n_cells"), n_entries: u("nnz") }
        );
        let (mut cell_totals, mut gene_totals) = (vec![0u64; 200], vec![0u64; 2500]);
        let mut cell_nnz = vec![0u64; 200];
        for e in &m.entries {
            assert!(e.count > 0, "the fixture lists no explicit zeros");
            cell_totals[e.col as usize] += u64::from(e.count);
            gene_totals[e.row as usize] += u64::from(e.count);
            cell_nnz[e.col as usize] += 1;
        }
        assert_eq!(cell_totals.iter().sum::<u64>(), u("total"));
        assert_eq!(cell_totals, list("cell_totals"));
        assert_eq!(gene_totals, list("gene_totals"));
        assert_eq!(cell_nnz, list("cell_nnz"));
        // The first entries, read off the file: "4 1 1", "12 1 1".
        assert_eq!(m.entries[..2], [entry(3, 0, 1), entry(11, 0, 1)]);
    }

    #[test]
    fn the_other_fixtures_match_the_folder_reader() {
        for dir in
            ["testdata/inputs/mixed_mtx", "testdata/conformance/mtx/tenx_v3", "testdata/conformance/mtx/tenx_v2_plain"]
        {
            assert_agrees_with_folder_reader(&repo(dir));
        }
    }
}
