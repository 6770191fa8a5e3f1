//! The Matrix Market text: banner, comments, size line and entries, parsed line by line with the line numbers in
//! every error, plus the tab-separated gene and barcode tables beside it. No allocation follows a declared size.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use crate::block::{count_from_f64, count_from_i64};
use crate::error::{BadValue, InputError};

/// The longest line accepted in any text file of the folder.
pub(super) const MAX_LINE: u64 = 1 << 20;

/// Opens a text file, decompressing it if it starts with the gzip magic bytes (several concatenated gzip members
/// are read as one stream).
pub(super) fn open_text(path: &Path) -> Result<Box<dyn BufRead + Send>, InputError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| InputError::Io { path: path.to_path_buf(), what, cause: source }
    };
    let mut f = BufReader::with_capacity(1 << 16, File::open(path).map_err(io("opening"))?);
    let gz = f.fill_buf().map_err(io("reading"))?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz { Box::new(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(f))) } else { Box::new(f) })
}

/// Line-by-line reader with line numbers and a bound on line length.
pub(super) struct Lines<R> {
    r: R,
    path: PathBuf,
    pub(super) line: u64,
    buf: Vec<u8>,
}

impl Lines<Box<dyn BufRead + Send>> {
    pub(super) fn open(path: &Path) -> Result<Self, InputError> {
        Ok(Lines::new(open_text(path)?, path))
    }
}

impl<R: BufRead> Lines<R> {
    /// Reads lines from `r`; `path` names it in errors.
    fn new(r: R, path: &Path) -> Self {
        Lines { r, path: path.to_path_buf(), line: 0, buf: Vec::new() }
    }

    /// The next line (its 1-based number and text without the line ending), or `None` at the end of the file.
    pub(super) fn next_line(&mut self) -> Result<Option<(u64, &str)>, InputError> {
        self.buf.clear();
        let n = (&mut self.r).take(MAX_LINE + 1).read_until(b'\n', &mut self.buf).map_err(|source| InputError::Io {
            path: self.path.clone(),
            what: format!("reading line {}", self.line + 1),
            cause: source,
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

pub(super) fn text_err(path: &Path, line: u64, detail: impl Into<String>) -> InputError {
    InputError::Text { path: path.to_path_buf(), line, detail: detail.into() }
}

/// Reads a TSV file into rows of tab-separated fields; blank lines are allowed only at the end.
pub(super) fn read_tsv(path: &Path) -> Result<Vec<Vec<String>>, InputError> {
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
/// and every entry, with the same code [`MtxSource`](crate::MtxSource) runs on `matrix.mtx[.gz]`. `path` only names the text in
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
pub(super) fn read_header<R: BufRead>(lines: &mut Lines<R>, path: &Path) -> Result<MtxHeader, InputError> {
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

pub(super) fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The text of an entry line without leading whitespace, or `None` for a blank or comment line (skipped).
///
/// Whitespace is ASCII whitespace (space, tab, CR, LF, form feed), the same set that separates the numbers: a line
/// that starts with another space character (vertical tab, no-break space, ...) is an entry line, and a malformed
/// one, rather than an entry whose first number silently loses a prefix the middle of a line would not.
pub(super) fn entry_text(l: &str) -> Option<&str> {
    let t = l.trim_ascii_start();
    (!(t.is_empty() || t.starts_with('%'))).then_some(t)
}

/// Reads every entry after the header in file order, checks it against the size line and hands it to `f`. Fails on
/// the first bad line, on an entry beyond the declared count, and if the file ends before the declared count.
pub(super) fn for_each_entry<R: BufRead>(
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
pub(super) fn parse_entry(
    path: &Path,
    line: u64,
    l: &str,
    h: &MtxHeader,
    names: &Names<'_>,
) -> Result<MtxEntry, InputError> {
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
pub(super) struct Names<'a> {
    pub(super) cells: &'a [String],
    pub(super) genes: &'a [String],
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
