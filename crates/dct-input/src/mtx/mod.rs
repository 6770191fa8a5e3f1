//! 10x Genomics Matrix Market folders: `matrix.mtx[.gz]`, `features.tsv[.gz]` or `genes.tsv[.gz]`,
//! `barcodes.tsv[.gz]`.
//!
//! The matrix text itself (banner, comments, size line, entries) is parsed by one set of functions, which both the
//! folder reader [`MtxSource`] and the in-memory entry point [`parse_mtx_text`] (used by the fuzz target) run.
//!
//! Files: `text.rs` (the text parser and the tables), this file (the folder as a [`CountSource`]: two passes over
//! the entries, then cell-major rows).

#[cfg(test)]
mod tests;
mod text;

pub use text::{MtxEntry, MtxField, MtxHeader, MtxText, parse_mtx_text};

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::block::RowBlock;
use crate::cell_major::{CellMajor, CellMajorBuilder, offsets_from_counts};
use crate::error::InputError;
use crate::tenx::build_genes;
use crate::{Axes, CountSource, GeneTable, InputKind};
use text::*;

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
        offsets_from_counts(&mut cell_ptr);
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
        let mut placed = CellMajorBuilder::new(&self.cell_ptr);
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
            if !placed.place(e.col as usize, gene, e.count) {
                return Err(changed(n));
            }
        }
        if !placed.is_full() {
            return Err(changed(lines.line));
        }
        // Each cell sorted by gene and its repeats summed, compacted towards the front.
        let matrix = placed.finish(
            (&self.matrix, "repeated entries"),
            |c| self.cells[c].clone(),
            |g| {
                let src = self.src_gene(g);
                (src, self.src_names[src as usize].clone())
            },
        )?;
        self.data = Some(matrix);
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

    fn axes(&self) -> Axes<'_> {
        Axes { genes: &self.genes, cells: &self.cells }
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
