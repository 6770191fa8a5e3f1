//! Row-window reads of a CSR matrix stored as three HDF5 datasets (`data`, `indices`, `indptr`), shared by the h5ad
//! CSR reader and the 10x h5 reader (whose per-barcode slices are cells).

use std::ops::Range;

use hdf5_pure::Dataset;

use crate::block::{REPEAT_OVERFLOW, RowBlock};
use crate::error::{BadValue, InputError};
use crate::fast::{FastChunks, ToU32};
use crate::h5::{ElemKind, H5, READ_STEP, Values};

/// Entries converted per step: the step's gene and count arrays (512 KiB each) stay close to the cache.
const STEP_ENTRIES: u64 = READ_STEP / 8;

/// How errors name cells and genes (source indices).
#[derive(Clone, Copy)]
struct Names<'a> {
    cell_name: &'a dyn Fn(u64) -> String,
    gene_name: &'a dyn Fn(u64) -> String,
}

/// The rows being filled while entries stream in: the block, the row being filled (its index and the entry where
/// it ends) and the names errors give.
struct Filling<'a> {
    out: &'a mut RowBlock,
    row: u64,
    row_end: u64,
    names: Names<'a>,
}

/// A CSR matrix in an HDF5 file: `indptr` is held in memory (8 bytes per row), `data` and `indices` are read per
/// window in bounded steps.
#[derive(Debug)]
pub(crate) struct CsrH5 {
    data: Dataset,
    indices: Dataset,
    data_obj: String,
    indices_obj: String,
    pub(crate) indptr: Vec<u64>,
    pub(crate) value_kind: ElemKind,
    pub(crate) value_type: String,
    n_src_genes: u64,
    /// Source gene -> output gene; `u32::MAX` drops the gene.
    gene_map: Option<Vec<u32>>,
    n_out_genes: u64,
    vbuf: Values,
    ibuf: Values,
    /// Fast chunk readers of `data` and `indices`, when they qualify.
    fast_data: Option<FastChunks>,
    fast_indices: Option<FastChunks>,
    /// Gene indices and counts of one step, converted by the fast readers.
    genes: Vec<u32>,
    counts: Vec<u32>,
}

impl CsrH5 {
    /// Opens the CSR arrays under `group` (`data`, `indices`, `indptr`) for a matrix of `n_rows` rows over
    /// `n_src_genes` genes, checking the arrays against each other.
    pub(crate) fn open(
        h5: &H5,
        group: &str,
        n_rows: u64,
        n_src_genes: u64,
        gene_map: Option<Vec<u32>>,
        n_out_genes: u64,
    ) -> Result<Self, InputError> {
        let data_obj = crate::h5::join(group, "data");
        let indices_obj = crate::h5::join(group, "indices");
        let indptr_obj = crate::h5::join(group, "indptr");
        let data = h5.dataset(&data_obj)?;
        let indices = h5.dataset(&indices_obj)?;
        let nnz = h5.len_1d(&data, &data_obj)?;
        let n_idx = h5.len_1d(&indices, &indices_obj)?;
        if nnz != n_idx {
            return Err(h5.malformed(&indices_obj, format!("has {n_idx} entries but {data_obj} has {nnz}")));
        }
        let vsize = h5.guard(&data_obj, || data.element_size())?;
        let isize = h5.guard(&indices_obj, || indices.element_size())?;
        h5.check_claim(&data_obj, nnz, vsize)?;
        h5.check_claim(&indices_obj, nnz, isize)?;
        let indptr = h5.read_index_array(&indptr_obj, n_rows.checked_add(1))?;
        if indptr.first() != Some(&0) {
            return Err(h5.malformed(&indptr_obj, "does not start at 0"));
        }
        if let Some(i) = indptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(h5.malformed(&indptr_obj, format!("decreases at entry {}", i + 1)));
        }
        let last = *indptr.last().expect("n_rows + 1 >= 1 entries");
        if last != nnz {
            return Err(h5.malformed(&indptr_obj, format!("ends at {last} but {data_obj} has {nnz} entries")));
        }
        let value_kind = h5.elem_kind(&data, &data_obj)?;
        let value_type = h5.guard(&data_obj, || data.dtype())?.to_string();
        let index_kind = h5.elem_kind(&indices, &indices_obj)?;
        if index_kind == ElemKind::Float {
            return Err(h5.unsupported(&indices_obj, "gene indices are floating point; expected integers"));
        }
        let (fast_data, fast_indices) = (h5.fast_chunks(&data), h5.fast_chunks(&indices));
        Ok(CsrH5 {
            data,
            indices,
            data_obj,
            indices_obj,
            indptr,
            value_kind,
            value_type,
            n_src_genes,
            gene_map,
            n_out_genes,
            vbuf: Values::new(value_kind),
            ibuf: Values::new(index_kind),
            fast_data,
            fast_indices,
            genes: Vec::new(),
            counts: Vec::new(),
        })
    }

    /// Stored entries in rows `rows` (which must be in range).
    pub(crate) fn entries(&self, rows: &Range<u64>) -> u64 {
        self.indptr[rows.end as usize] - self.indptr[rows.start as usize]
    }

    /// Reads rows `rows` (checked by the caller to be in range) into `out`. `cell_name` and `gene_name` give names
    /// for error messages (source indices).
    pub(crate) fn read_rows_into(
        &mut self,
        h5: &H5,
        rows: Range<u64>,
        out: &mut RowBlock,
        cell_name: &dyn Fn(u64) -> String,
        gene_name: &dyn Fn(u64) -> String,
    ) -> Result<(), InputError> {
        out.reset(rows.start, self.n_out_genes);
        if rows.is_empty() {
            return Ok(());
        }
        let lo = self.indptr[rows.start as usize];
        let hi = self.indptr[rows.end as usize];
        let names = Names { cell_name, gene_name };
        let mut to = Filling { out, row: rows.start, row_end: self.indptr[rows.start as usize + 1], names };
        let mut pos = lo;
        while pos < hi {
            let step = STEP_ENTRIES.min(hi - pos);
            if !self.read_step_fast(h5, (pos, step), &mut to)? {
                self.read_step(h5, (pos, step), &mut to)?;
            }
            pos += step;
        }
        while to.row < rows.end {
            self.close_row(h5, &mut to)?;
            to.row += 1;
        }
        Ok(())
    }

    /// Closes the rows that end at or before `entry`, so that `entry` belongs to `to.row`.
    fn advance(&self, h5: &H5, to: &mut Filling<'_>, entry: u64) -> Result<(), InputError> {
        while entry >= to.row_end {
            self.close_row(h5, to)?;
            to.row += 1;
            to.row_end = self.indptr[to.row as usize + 1];
        }
        Ok(())
    }

    /// Entries `pos .. pos + step` through the fast chunk readers, converted to gene indices and counts inside the
    /// chunk tasks and appended a row segment at a time. `Ok(false)` (nothing appended) when the fast readers do
    /// not apply or some entry is bad: [`Self::read_step`] then handles the step and names the bad entry.
    fn read_step_fast(&mut self, h5: &H5, (pos, step): (u64, u64), to: &mut Filling<'_>) -> Result<bool, InputError> {
        let (Some(fi), Some(fd)) = (&self.fast_indices, &self.fast_data) else { return Ok(false) };
        let genes_ok =
            h5.read_fast_u32(fi, &self.indices_obj, pos, step, ToU32::Gene(self.n_src_genes), &mut self.genes)?;
        if !genes_ok || !h5.read_fast_u32(fd, &self.data_obj, pos, step, ToU32::Count, &mut self.counts)? {
            return Ok(false);
        }
        let (genes, counts) = (std::mem::take(&mut self.genes), std::mem::take(&mut self.counts));
        let mut k = 0usize;
        let mut result = Ok(());
        while k < step as usize {
            if let Err(e) = self.advance(h5, to, pos + k as u64) {
                result = Err(e);
                break;
            }
            let seg_end = (to.row_end.min(pos + step) - pos) as usize;
            match &self.gene_map {
                None => to.out.push_entries(&genes[k..seg_end], &counts[k..seg_end]),
                Some(m) => {
                    for (&g, &c) in genes[k..seg_end].iter().zip(&counts[k..seg_end]) {
                        if let Some(&mapped) = m.get(g as usize).filter(|&&x| x != u32::MAX) {
                            to.out.push_entry(mapped, c);
                        }
                    }
                }
            }
            k = seg_end;
        }
        (self.genes, self.counts) = (genes, counts);
        result.map(|()| true)
    }

    /// Entries `pos .. pos + step`, one at a time through [`Values`]: the general path, and the one that names
    /// the first bad entry.
    fn read_step(&mut self, h5: &H5, (pos, step): (u64, u64), to: &mut Filling<'_>) -> Result<(), InputError> {
        let Names { cell_name, gene_name } = to.names;
        self.ibuf.clear();
        self.vbuf.clear();
        match &self.fast_indices {
            Some(f) => h5.read_fast(f, &self.indices_obj, pos, step, &mut self.ibuf)?,
            None => h5.read_rows_append(&self.indices, &self.indices_obj, pos, step, &mut self.ibuf)?,
        }
        match &self.fast_data {
            Some(f) => h5.read_fast(f, &self.data_obj, pos, step, &mut self.vbuf)?,
            None => h5.read_rows_append(&self.data, &self.data_obj, pos, step, &mut self.vbuf)?,
        }
        if self.ibuf.len() as u64 != step || self.vbuf.len() as u64 != step {
            return Err(h5.malformed(
                &self.data_obj,
                format!(
                    "read {} indices and {} values at entry {pos}, expected {step}",
                    self.ibuf.len(),
                    self.vbuf.len()
                ),
            ));
        }
        for k in 0..step as usize {
            let entry = pos + k as u64;
            self.advance(h5, to, entry)?;
            let row = to.row;
            let src_gene = match &self.ibuf {
                Values::Signed(v) => u64::try_from(v[k]).unwrap_or(u64::MAX),
                Values::Unsigned(v) => v[k],
                Values::Float(_) => unreachable!("rejected at open"),
            };
            if src_gene >= self.n_src_genes {
                return Err(h5.malformed(
                    &self.indices_obj,
                    format!(
                        "cell {row} ({:?}): gene index {} at entry {entry} is outside 0..{}",
                        cell_name(row),
                        match &self.ibuf {
                            Values::Signed(v) => v[k].to_string(),
                            _ => src_gene.to_string(),
                        },
                        self.n_src_genes
                    ),
                ));
            }
            let gene = match &self.gene_map {
                None => src_gene as u32,
                Some(m) => match m[src_gene as usize] {
                    u32::MAX => continue,
                    g => g,
                },
            };
            let count = self.vbuf.count(k).map_err(|(value, reason)| {
                InputError::NotACount(Box::new(BadValue {
                    path: h5.path.clone(),
                    object: self.data_obj.clone(),
                    cell: row,
                    cell_name: cell_name(row),
                    gene: src_gene,
                    gene_name: gene_name(src_gene),
                    value,
                    reason,
                }))
            })?;
            to.out.push_entry(gene, count);
        }
        Ok(())
    }

    /// Finishes row `to.row` (sums its repeats), naming a sum that is not a count.
    fn close_row(&self, h5: &H5, to: &mut Filling<'_>) -> Result<(), InputError> {
        let (row, Names { cell_name, gene_name }) = (to.row, to.names);
        to.out.finish_row().map_err(|(gene, sum)| {
            let src = self.src_gene(gene);
            InputError::NotACount(Box::new(BadValue {
                path: h5.path.clone(),
                object: self.data_obj.clone(),
                cell: row,
                cell_name: cell_name(row),
                gene: src,
                gene_name: gene_name(src),
                value: sum.to_string(),
                reason: REPEAT_OVERFLOW,
            }))
        })
    }

    fn src_gene(&self, out_gene: u32) -> u64 {
        match &self.gene_map {
            None => u64::from(out_gene),
            Some(m) => m.iter().position(|&g| g == out_gene).map_or(u64::from(out_gene), |p| p as u64),
        }
    }
}
