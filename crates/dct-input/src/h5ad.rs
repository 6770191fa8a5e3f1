//! AnnData `.h5ad` reader (current on-disk encoding, anndata >= 0.7).

use std::ops::Range;
use std::path::Path;

use hdf5_pure::Dataset;

use crate::block::RowBlock;
use crate::cell_major::{CellMajor, CellMajorBuilder, offsets_from_counts};
use crate::csr::CsrH5;
use crate::error::{BadValue, InputError};
use crate::frame::{Frame, read_dataframe};
use crate::h5::{H5, Node, READ_STEP, Values, attr_ints, join};
use crate::{Axes, CountSource, GeneTable, H5adMatrix, InputKind, ObsLocation};

/// Var columns tried, in order, for [`GeneTable::ids`].
const ID_COLUMNS: [&str; 5] = ["gene_ids", "gene_id", "feature_id", "feature_ids", "ensembl_id"];

/// How the chosen matrix is stored, and the state needed to read it.
#[derive(Debug)]
enum Layout {
    /// `csr_matrix`: rows are cells; read per window.
    Csr(Box<CsrH5>),
    /// `csc_matrix`: transposed to CSR in memory on the first read.
    Csc { group: String, transposed: Option<CellMajor> },
    /// A dense 2-D `array`: read per block of rows.
    Dense { ds: Dataset, type_name: String, buf: Values },
}

/// Reads `X`, a layer or `raw/X` of an AnnData `.h5ad` file as cell-major row windows.
///
/// * `csr_matrix`: `indptr` is read once (8 bytes per cell); each window reads only its rows' `indices` and `data`,
///   at most 2^20 entries per HDF5 read.
/// * `csc_matrix`: rows of a CSC matrix are scattered through the whole file, so the matrix is transposed on the first
///   read, in two passes over the file: memory about 8 bytes per stored entry plus 8 per cell (an 80 M-entry matrix
///   needs about 640 MB). Re-save such files as CSR to stream them in bounded memory.
/// * dense `array`: rows are read in blocks of about 2^20 values; memory is bounded, but every stored zero is read.
///
/// Values may have any integer or float dtype; each must be a count (see [`InputError::NotACount`]).
#[derive(Debug)]
pub struct H5adSource {
    h5: H5,
    matrix_obj: String,
    encoding: String,
    n_cells: u64,
    n_genes: u64,
    genes: GeneTable,
    cells: Vec<String>,
    layout: Layout,
}

fn legacy(h5: &H5, detail: impl Into<String>) -> InputError {
    InputError::LegacyH5ad { path: h5.path.clone(), detail: detail.into() }
}

impl H5adSource {
    /// Opens `matrix` of the `.h5ad` file at `path`, reading its gene table and cell names.
    pub fn open(path: &Path, matrix: &H5adMatrix) -> Result<Self, InputError> {
        Self::open_with(path, matrix, Names::All)
    }

    /// Opens `matrix` reading, of the names, only the gene keys: the first gene-id column of `var`
    /// (`gene_ids`, `gene_id`, `feature_id`, `feature_ids`, `ensembl_id`) that holds strings, else the var index.
    /// [`CountSource::genes`] then has those keys as `ids` and empty `names` (and no other columns), and the cell
    /// names are empty strings: what checking that inputs list the same genes needs, at a fraction of the cost of
    /// [`H5adSource::open`] (every variable-length string costs a lookup in the file).
    pub fn open_gene_keys_only(path: &Path, matrix: &H5adMatrix) -> Result<Self, InputError> {
        Self::open_with(path, matrix, Names::GeneKeys)
    }

    /// Opens `matrix` reading its whole gene table (names, ids and every var column) but not the cell names.
    pub fn open_gene_table(path: &Path, matrix: &H5adMatrix) -> Result<Self, InputError> {
        Self::open_with(path, matrix, Names::Genes)
    }

    /// Opens `matrix` reading of the names only the gene names (the var index) and, given `column`, that var
    /// column, as the only column of [`CountSource::genes`]: what matching genes across inputs by their names or
    /// by one column needs, at the cost of those strings alone. A `column` the gene table does not have is an
    /// error that lists the columns it has.
    pub fn open_gene_names(path: &Path, matrix: &H5adMatrix, column: Option<&str>) -> Result<Self, InputError> {
        Self::open_with(path, matrix, Names::VarIndex(column.map(str::to_string)))
    }

    /// Opens `matrix` for its counts only: the gene table and the cell names are not read (each of their
    /// variable-length strings costs a lookup in the file), so [`CountSource::genes`] and
    /// [`CountSource::cell_names`] give empty strings (still `n_genes()` and `n_cells()` long) and errors name
    /// cells and genes by index only. For a second pass over an input whose names are already known (the
    /// converter's tile writer). [`H5adSource::read_obs`] still reads the obs, cell names included.
    pub fn open_counts_only(path: &Path, matrix: &H5adMatrix) -> Result<Self, InputError> {
        Self::open_with(path, matrix, Names::None)
    }

    fn open_with(path: &Path, matrix: &H5adMatrix, names: Names) -> Result<Self, InputError> {
        let h5 = H5::open(path)?;
        // Legacy files: compound obs/var, or an X group marked by h5sparse attributes.
        for df in ["obs", "var"] {
            if h5.node(df)? == Node::Dataset {
                return Err(legacy(&h5, format!("'{df}' is a compound dataset, not a data-frame group")));
            }
        }
        let (matrix_obj, var_obj) = match matrix {
            H5adMatrix::X => ("X".to_string(), "var"),
            H5adMatrix::Layer(name) => {
                if name.is_empty() || name.contains('/') {
                    return Err(InputError::BadRequest {
                        path: h5.path.clone(),
                        detail: format!("invalid layer name {name:?}"),
                    });
                }
                (join("layers", name), "var")
            }
            H5adMatrix::RawX => ("raw/X".to_string(), "raw/var"),
        };
        let node = h5.node(&matrix_obj)?;
        if node == Node::Absent {
            let available = if h5.node("layers")? == Node::Group {
                let g = h5.group("layers")?;
                let mut names = h5.guard("layers", || g.groups())?;
                names.extend(h5.guard("layers", || g.datasets())?);
                format!("; layers present: {names:?} (choose one as the matrix)")
            } else {
                String::new()
            };
            return Err(h5.unsupported(&matrix_obj, format!("matrix not found in this file{available}")));
        }
        let attrs = h5.attrs(&matrix_obj)?;
        let encoding = attrs.get("encoding-type").and_then(crate::h5::attr_string);
        let encoding = match encoding {
            Some(e) => e,
            None if attrs.contains_key("h5sparse_format") => {
                return Err(legacy(&h5, format!("'{matrix_obj}' is an h5sparse group without 'encoding-type'")));
            }
            None if node == Node::Dataset && h5.node(var_obj)? == Node::Group => "array".to_string(),
            None => {
                return Err(legacy(&h5, format!("'{matrix_obj}' has no 'encoding-type' attribute")));
            }
        };
        if h5.node(var_obj)? != Node::Group {
            return Err(h5.malformed(var_obj, "the gene table (var data frame) is missing"));
        }
        if h5.node("obs")? != Node::Group {
            return Err(h5.malformed("obs", "the cell table (obs data frame) is missing"));
        }

        let (n_cells, n_genes) = match (encoding.as_str(), node) {
            ("csr_matrix" | "csc_matrix", Node::Group) => {
                let shape = attrs.get("shape").and_then(attr_ints).unwrap_or_default();
                match shape.as_slice() {
                    [r, c] if *r >= 0 && *c >= 0 && *r <= i128::from(u64::MAX) && *c <= i128::from(u64::MAX) => {
                        (*r as u64, *c as u64)
                    }
                    _ => return Err(h5.malformed(&matrix_obj, format!("bad or missing 'shape' attribute {shape:?}"))),
                }
            }
            ("array", Node::Dataset) => {
                let ds = h5.dataset(&matrix_obj)?;
                match h5.shape(&ds, &matrix_obj)?.as_slice() {
                    [r, c] => (*r, *c),
                    other => return Err(h5.malformed(&matrix_obj, format!("dense matrix has shape {other:?}"))),
                }
            }
            (other, _) => {
                return Err(h5.unsupported(
                    &matrix_obj,
                    format!(
                        "matrix encoding '{other}' is not supported (expected csr_matrix, csc_matrix or a dense \
                         array); convert it with anndata (e.g. adata.X = scipy.sparse.csr_matrix(adata.X))"
                    ),
                ));
            }
        };
        if n_genes > u64::from(u32::MAX) {
            return Err(h5.unsupported(&matrix_obj, format!("{n_genes} genes: at most 2^32 - 1 are supported")));
        }

        // Sizes come from the matrix's shape, so they are checked against the file like any claim.
        let unnamed = |h5: &H5| -> Result<(GeneTable, Vec<String>), InputError> {
            h5.check_claim(&matrix_obj, n_genes.saturating_add(n_cells), 24)?;
            let empty = vec![String::new(); n_genes as usize];
            let genes = GeneTable {
                index_name: "_index".into(),
                names: empty.clone(),
                ids: empty,
                feature_types: None,
                columns: Vec::new(),
                skipped: Vec::new(),
            };
            Ok((genes, vec![String::new(); n_cells as usize]))
        };
        let (genes, cells) = match names {
            Names::All => {
                let var = read_dataframe(&h5, var_obj, Some(n_genes))?;
                let cells = crate::frame::read_index(&h5, "obs", Some(n_cells))?;
                (gene_table(var), cells)
            }
            Names::GeneKeys => {
                let (mut genes, cells) = unnamed(&h5)?;
                genes.ids = read_gene_keys(&h5, var_obj, n_genes)?;
                (genes, cells)
            }
            Names::Genes => {
                let (_, cells) = unnamed(&h5)?;
                (gene_table(read_dataframe(&h5, var_obj, Some(n_genes))?), cells)
            }
            Names::VarIndex(column) => {
                let (mut genes, cells) = unnamed(&h5)?;
                genes.index_name = crate::frame::index_name(&h5, var_obj)?;
                genes.names = crate::frame::read_index(&h5, var_obj, Some(n_genes))?;
                genes.ids = genes.names.clone();
                if let Some(name) = column.filter(|c| *c != genes.index_name) {
                    let listed = crate::frame::column_order(&h5, var_obj)?;
                    if !listed.contains(&name) {
                        return Err(InputError::BadRequest {
                            path: h5.path.clone(),
                            detail: format!(
                                "the gene table ({var_obj}) has no column {name:?}; it has the index {:?} and the \
                                 columns {listed:?}",
                                genes.index_name
                            ),
                        });
                    }
                    let read = crate::frame::read_column(&h5, var_obj, &join(var_obj, &name), &name, n_genes)?;
                    genes.columns.extend(read);
                }
                (genes, cells)
            }
            Names::None => unnamed(&h5)?,
        };

        let layout = match encoding.as_str() {
            "csr_matrix" => Layout::Csr(Box::new(CsrH5::open(&h5, &matrix_obj, n_cells, n_genes, None, n_genes)?)),
            "csc_matrix" => Layout::Csc { group: matrix_obj.clone(), transposed: None },
            _ => {
                let ds = h5.dataset(&matrix_obj)?;
                let size = h5.guard(&matrix_obj, || ds.element_size())?;
                h5.check_claim(&matrix_obj, n_cells.saturating_mul(n_genes), size)?;
                let kind = h5.elem_kind(&ds, &matrix_obj)?;
                let type_name = h5.guard(&matrix_obj, || ds.dtype())?.to_string();
                Layout::Dense { ds, type_name, buf: Values::new(kind) }
            }
        };
        Ok(H5adSource { h5, matrix_obj, encoding, n_cells, n_genes, genes, cells, layout })
    }

    /// Reads the obs data frame (per-cell metadata) with typed columns; unsupported column encodings are listed in
    /// [`Frame::skipped`].
    pub fn read_obs(&self) -> Result<Frame, InputError> {
        read_dataframe(&self.h5, "obs", Some(self.n_cells))
    }

    /// The HDF5 object read as the matrix (`X`, `layers/NAME`, `raw/X`).
    pub fn matrix_object(&self) -> &str {
        &self.matrix_obj
    }

    fn transpose(&mut self) -> Result<(), InputError> {
        let Layout::Csc { group, transposed } = &mut self.layout else { return Ok(()) };
        if transposed.is_some() {
            return Ok(());
        }
        let h5 = &self.h5;
        let (n_cells, n_genes) = (self.n_cells, self.n_genes);
        let cells = &self.cells;
        let genes = &self.genes;
        // The CSC arrays: indptr over genes, indices are cells.
        let csc = CsrH5::open(h5, group, n_genes, n_cells, None, n_cells)?;
        let (gene_ptr, value_kind) = (csc.indptr, csc.value_kind);
        let nnz = *gene_ptr.last().expect("non-empty");
        let data_obj = join(group, "data");
        let indices_obj = join(group, "indices");
        let data = h5.dataset(&data_obj)?;
        let indices = h5.dataset(&indices_obj)?;
        let ikind = h5.elem_kind(&indices, &indices_obj)?;
        // Pass 1: entries per cell.
        h5.check_claim(group, n_cells, 8)?;
        let mut counts = vec![0u64; n_cells as usize + 1];
        let mut ibuf = Values::new(ikind);
        let mut pos = 0;
        while pos < nnz {
            let step = READ_STEP.min(nnz - pos);
            ibuf.clear();
            h5.read_rows_append(&indices, &indices_obj, pos, step, &mut ibuf)?;
            if ibuf.len() as u64 != step {
                return Err(h5.malformed(&indices_obj, format!("short read at entry {pos}")));
            }
            for k in 0..step as usize {
                let cell = cell_index(&ibuf, k);
                if cell >= n_cells {
                    return Err(h5.malformed(
                        &indices_obj,
                        format!(
                            "cell index {} at entry {} is outside 0..{n_cells}",
                            cell_text(&ibuf, k),
                            pos + k as u64
                        ),
                    ));
                }
                counts[cell as usize + 1] += 1;
            }
            pos += step;
        }
        offsets_from_counts(&mut counts);
        let mut placed = CellMajorBuilder::new(&counts);
        // Pass 2: scatter, gene by gene, so each cell's entries arrive in non-decreasing gene order.
        let mut vbuf = Values::new(value_kind);
        let mut gene = 0u64;
        let mut pos = 0;
        while pos < nnz {
            let step = READ_STEP.min(nnz - pos);
            ibuf.clear();
            vbuf.clear();
            h5.read_rows_append(&indices, &indices_obj, pos, step, &mut ibuf)?;
            h5.read_rows_append(&data, &data_obj, pos, step, &mut vbuf)?;
            if ibuf.len() as u64 != step || vbuf.len() as u64 != step {
                return Err(h5.malformed(&data_obj, format!("short read at entry {pos}")));
            }
            for k in 0..step as usize {
                let entry = pos + k as u64;
                while entry >= gene_ptr[gene as usize + 1] {
                    gene += 1;
                }
                let cell = cell_index(&ibuf, k);
                // Pass 1 checked every cell index; one out of range now means the file changed.
                if cell >= n_cells {
                    return Err(h5.malformed(&indices_obj, "the file changed while it was being read"));
                }
                let count = vbuf.count(k).map_err(|(value, reason)| {
                    InputError::NotACount(Box::new(BadValue {
                        path: h5.path.clone(),
                        object: data_obj.clone(),
                        cell,
                        cell_name: cells[cell as usize].clone(),
                        gene,
                        gene_name: genes.names[gene as usize].clone(),
                        value,
                        reason,
                    }))
                })?;
                if !placed.place(cell as usize, gene as u32, count) {
                    return Err(h5.malformed(&indices_obj, "the file changed while it was being read"));
                }
            }
            pos += step;
        }
        drop(gene_ptr);
        // Canonicalize in place: drop zeros, sum repeats (adjacent, since genes are non-decreasing per cell).
        let mut matrix = placed.finish(
            (&h5.path, &data_obj),
            |c| cells[c].clone(),
            |g| (u64::from(g), genes.names[g as usize].clone()),
        )?;
        matrix.indices.shrink_to_fit();
        matrix.values.shrink_to_fit();
        *transposed = Some(matrix);
        Ok(())
    }
}

fn cell_index(buf: &Values, k: usize) -> u64 {
    match buf {
        Values::Signed(v) => u64::try_from(v[k]).unwrap_or(u64::MAX),
        Values::Unsigned(v) => v[k],
        Values::Float(_) => u64::MAX,
    }
}

fn cell_text(buf: &Values, k: usize) -> String {
    match buf {
        Values::Signed(v) => v[k].to_string(),
        Values::Unsigned(v) => v[k].to_string(),
        Values::Float(v) => v[k].to_string(),
    }
}

/// Which names [`H5adSource::open_with`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Names {
    /// The whole gene table and the cell names.
    All,
    /// The gene keys only (what [`gene_table`] takes as `ids`).
    GeneKeys,
    /// The whole gene table, no cell names.
    Genes,
    /// The gene names and, if named, one var column; no cell names.
    VarIndex(Option<String>),
    /// None.
    None,
}

/// The gene keys of the `var` frame at `var_obj` exactly as [`gene_table`] picks them from the whole frame: the
/// first [`ID_COLUMNS`] column listed in `column-order` that reads as strings, else the index.
fn read_gene_keys(h5: &H5, var_obj: &str, n_genes: u64) -> Result<Vec<String>, InputError> {
    let listed = crate::frame::column_order(h5, var_obj)?;
    for name in ID_COLUMNS.iter().filter(|name| listed.iter().any(|l| l == *name)) {
        // Columns that fail to read are skipped by the whole-frame read too (except these two errors).
        match crate::frame::read_column(h5, var_obj, &join(var_obj, name), name, n_genes) {
            Ok(Some(c)) => {
                if let Some(ids) = c.data.as_strings() {
                    return Ok(ids);
                }
            }
            Ok(None) => {}
            Err(e @ (InputError::TooLarge { .. } | InputError::Malformed { .. })) => return Err(e),
            Err(_) => {}
        }
    }
    crate::frame::read_index(h5, var_obj, Some(n_genes))
}

/// Builds the gene table from the var data frame.
fn gene_table(var: Frame) -> GeneTable {
    let ids = ID_COLUMNS
        .iter()
        .find_map(|name| var.column(name).and_then(|c| c.data.as_strings()))
        .unwrap_or_else(|| var.index.clone());
    let feature_types =
        ["feature_types", "feature_type"].iter().find_map(|name| var.column(name).and_then(|c| c.data.as_strings()));
    GeneTable {
        index_name: var.index_name,
        names: var.index,
        ids,
        feature_types,
        columns: var.columns,
        skipped: var.skipped,
    }
}

impl CountSource for H5adSource {
    fn kind(&self) -> InputKind {
        InputKind::H5ad
    }

    fn path(&self) -> &Path {
        &self.h5.path
    }

    fn describe(&self) -> String {
        let dtype = match &self.layout {
            Layout::Csr(c) => c.value_type.clone(),
            Layout::Dense { type_name, .. } => type_name.clone(),
            Layout::Csc { .. } => self
                .h5
                .dataset(&join(&self.matrix_obj, "data"))
                .ok()
                .and_then(|d| d.dtype().ok())
                .map_or_else(|| "?".to_string(), |t| t.to_string()),
        };
        format!("h5ad {} ({}, {dtype})", self.matrix_obj, self.encoding)
    }

    fn axes(&self) -> Axes<'_> {
        Axes { genes: &self.genes, cells: &self.cells }
    }

    fn loads_whole_matrix(&self) -> bool {
        matches!(self.layout, Layout::Csc { .. })
    }

    fn stored_entries(&self, rows: Range<u64>) -> Option<u64> {
        if rows.start > rows.end || rows.end > self.n_cells {
            return None;
        }
        match &self.layout {
            Layout::Csr(c) => Some(c.entries(&rows)),
            Layout::Csc { transposed: Some(t), .. } => {
                Some(t.indptr[rows.end as usize] - t.indptr[rows.start as usize])
            }
            _ => None,
        }
    }

    fn read_rows_into(&mut self, rows: Range<u64>, out: &mut RowBlock) -> Result<(), InputError> {
        if rows.start > rows.end || rows.end > self.n_cells {
            return Err(InputError::BadRequest {
                path: self.h5.path.clone(),
                detail: format!("rows {rows:?} are outside 0..{}", self.n_cells),
            });
        }
        if matches!(self.layout, Layout::Csc { transposed: None, .. }) {
            self.transpose()?;
        }
        let cells = &self.cells;
        let genes = &self.genes;
        let cell_name = |c: u64| cells.get(c as usize).cloned().unwrap_or_default();
        let gene_name = |g: u64| genes.names.get(g as usize).cloned().unwrap_or_default();
        match &mut self.layout {
            Layout::Csr(csr) => csr.read_rows_into(&self.h5, rows, out, &cell_name, &gene_name),
            Layout::Csc { transposed, .. } => {
                let t = transposed.as_ref().expect("transposed above");
                out.reset(rows.start, self.n_genes);
                let (lo, hi) = (t.indptr[rows.start as usize] as usize, t.indptr[rows.end as usize] as usize);
                out.indices.extend_from_slice(&t.indices[lo..hi]);
                out.values.extend_from_slice(&t.values[lo..hi]);
                out.indptr.extend(t.indptr[rows.start as usize + 1..=rows.end as usize].iter().map(|&p| p - lo as u64));
                Ok(())
            }
            Layout::Dense { ds, buf, .. } => {
                out.reset(rows.start, self.n_genes);
                let n_genes = self.n_genes;
                let per_read = (READ_STEP / n_genes.max(1)).max(1);
                let mut row = rows.start;
                while row < rows.end {
                    let take = per_read.min(rows.end - row);
                    buf.clear();
                    self.h5.read_rows_append(ds, &self.matrix_obj, row, take, buf)?;
                    if buf.len() as u64 != take * n_genes {
                        return Err(self.h5.malformed(
                            &self.matrix_obj,
                            format!("read {} values for {take} rows of {n_genes}", buf.len()),
                        ));
                    }
                    for r in 0..take {
                        let cell = row + r;
                        for g in 0..n_genes {
                            let k = (r * n_genes + g) as usize;
                            let count = buf.count(k).map_err(|(value, reason)| {
                                InputError::NotACount(Box::new(BadValue {
                                    path: self.h5.path.clone(),
                                    object: self.matrix_obj.clone(),
                                    cell,
                                    cell_name: cell_name(cell),
                                    gene: g,
                                    gene_name: gene_name(g),
                                    value,
                                    reason,
                                }))
                            })?;
                            out.push_entry(g as u32, count);
                        }
                        out.finish_row().map_err(|_| self.h5.malformed(&self.matrix_obj, "unsorted dense row"))?;
                    }
                    row += take;
                }
                Ok(())
            }
        }
    }

    fn obs(&self) -> Option<ObsLocation> {
        Some(ObsLocation::H5adGroup { path: self.h5.path.clone(), group: "obs".to_string() })
    }
}
