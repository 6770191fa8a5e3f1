//! Row-window reads of a CSR matrix stored as three HDF5 datasets (`data`, `indices`, `indptr`), shared by the h5ad
//! CSR reader and the 10x h5 reader (whose per-barcode slices are cells).

use std::ops::Range;

use hdf5_pure::Dataset;

use crate::block::{REPEAT_OVERFLOW, RowBlock};
use crate::error::{BadValue, InputError};
use crate::h5::{ElemKind, FastChunks, H5, READ_STEP, Values};

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
        let mut row = rows.start;
        // Close rows that end at or before `lo` (leading empty rows).
        let mut row_end = self.indptr[row as usize + 1];
        let mut pos = lo;
        while pos < hi {
            let step = READ_STEP.min(hi - pos);
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
                while entry >= row_end {
                    self.close_row(h5, out, row, cell_name, gene_name)?;
                    row += 1;
                    row_end = self.indptr[row as usize + 1];
                }
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
                out.push_entry(gene, count);
            }
            pos += step;
        }
        while row < rows.end {
            self.close_row(h5, out, row, cell_name, gene_name)?;
            row += 1;
        }
        Ok(())
    }

    fn close_row(
        &self,
        h5: &H5,
        out: &mut RowBlock,
        row: u64,
        cell_name: &dyn Fn(u64) -> String,
        gene_name: &dyn Fn(u64) -> String,
    ) -> Result<(), InputError> {
        out.finish_row().map_err(|(gene, sum)| {
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
