//! 10x Genomics HDF5 reader (Cell Ranger 3+ `matrix` group, and Cell Ranger 2 genome groups).
//!
//! The matrix is stored as CSC over features × barcodes: `indptr` has one slice per barcode and `indices` are feature
//! indices. A barcode's slice is therefore one cell's row, i.e. the arrays are already CSR by cell and are read in
//! row windows without any transposition.

use std::ops::Range;
use std::path::Path;

use crate::block::RowBlock;
use crate::csr::CsrH5;
use crate::error::InputError;
use crate::frame::{Column, ColumnData};
use crate::h5::{H5, Node, Values, join};
use crate::{Axes, CountSource, GeneTable, InputKind};

/// Whether an open HDF5 file has a 10x layout (rather than AnnData).
pub(crate) fn looks_like_tenx(h5: &H5) -> Result<bool, InputError> {
    if h5.node("matrix")? == Node::Group && h5.node("matrix/indptr")? == Node::Dataset {
        return Ok(true);
    }
    if h5.node("X")? != Node::Absent {
        return Ok(false);
    }
    // A `matrix` group and no AnnData `X`: a Cell Ranger 3 file missing a part, which its reader names.
    if h5.node("matrix")? == Node::Group {
        return Ok(true);
    }
    Ok(!v2_genome_groups(h5)?.is_empty())
}

/// Top-level groups with the Cell Ranger 2 layout.
fn v2_genome_groups(h5: &H5) -> Result<Vec<String>, InputError> {
    let root = h5.group("")?;
    let mut out = Vec::new();
    for g in h5.guard("/", || root.groups())? {
        if h5.node(&join(&g, "indptr"))? == Node::Dataset && h5.node(&join(&g, "genes"))? == Node::Dataset {
            out.push(g);
        }
    }
    Ok(out)
}

/// Reads a 10x Genomics `.h5` file as cell-major row windows.
///
/// `indptr` is read once (8 bytes per barcode); each window reads only its cells' `indices` and `data`, at most 2^20
/// entries per HDF5 read. With a feature-type filter the kept features are renumbered `0..n_genes` in file order.
#[derive(Debug)]
pub struct TenxH5Source {
    h5: H5,
    group: String,
    n_cells: u64,
    genes: GeneTable,
    src_names: Vec<String>,
    cells: Vec<String>,
    csr: CsrH5,
}

impl TenxH5Source {
    /// Opens the 10x file at `path`. `feature_type`: keep only features of this type (Cell Ranger 3+ files); `None`
    /// keeps all.
    pub fn open(path: &Path, feature_type: Option<&str>) -> Result<Self, InputError> {
        let h5 = H5::open(path)?;
        let v3 = h5.node("matrix")? == Node::Group;
        let group = if v3 {
            "matrix".to_string()
        } else {
            let groups = v2_genome_groups(&h5)?;
            match groups.as_slice() {
                [g] => g.clone(),
                [] => {
                    return Err(InputError::UnknownInput {
                        path: h5.path.clone(),
                        detail: "HDF5 file without a 10x 'matrix' group or genome group".into(),
                    });
                }
                many => {
                    return Err(h5.unsupported(
                        "/",
                        format!(
                            "Cell Ranger 2 file with several genomes {many:?}; split it per genome (e.g. with \
                             scanpy.read_10x_h5(path, genome=...)) and convert each"
                        ),
                    ));
                }
            }
        };
        let shape_obj = join(&group, "shape");
        let shape = match h5.read_values(&shape_obj, Some(2))? {
            Values::Signed(v) if v.iter().all(|&x| x >= 0) => [v[0] as u64, v[1] as u64],
            Values::Unsigned(v) => [v[0], v[1]],
            _ => return Err(h5.malformed(&shape_obj, "expected two non-negative integers")),
        };
        let (n_features, n_cells) = (shape[0], shape[1]);
        if n_features > u64::from(u32::MAX) {
            return Err(h5.unsupported(&shape_obj, format!("{n_features} features: at most 2^32 - 1 are supported")));
        }
        let cells = h5.read_strings(&join(&group, "barcodes"), Some(n_cells))?;
        let (ids_obj, names_obj) = if v3 {
            ("matrix/features/id".to_string(), "matrix/features/name".to_string())
        } else {
            (join(&group, "genes"), join(&group, "gene_names"))
        };
        let ids = h5.read_strings(&ids_obj, Some(n_features))?;
        let names = if h5.node(&names_obj)? == Node::Dataset {
            h5.read_strings(&names_obj, Some(n_features))?
        } else {
            ids.clone()
        };
        let optional = |obj: &str| -> Result<Option<Vec<String>>, InputError> {
            if h5.node(obj)? == Node::Dataset { Ok(Some(h5.read_strings(obj, Some(n_features))?)) } else { Ok(None) }
        };
        let types = if v3 { optional("matrix/features/feature_type")? } else { None };
        let genome = if v3 { optional("matrix/features/genome")? } else { None };

        let keep: Option<Vec<bool>> = match (feature_type, &types) {
            (Some(want), Some(t)) => {
                let keep: Vec<bool> = t.iter().map(|x| x == want).collect();
                if !keep.iter().any(|&k| k) && n_features > 0 {
                    let mut available: Vec<String> = Vec::new();
                    for x in t {
                        if !available.contains(x) {
                            available.push(x.clone());
                        }
                    }
                    return Err(InputError::NoFeatures { path: h5.path.clone(), wanted: want.to_string(), available });
                }
                if keep.iter().all(|&k| k) { None } else { Some(keep) }
            }
            _ => None,
        };
        let (gene_map, genes) = build_genes(keep.as_deref(), &ids, &names, types.as_deref(), genome.as_deref());
        let n_genes = genes.names.len() as u64;
        let csr = CsrH5::open(&h5, &group, n_cells, n_features, gene_map, n_genes)?;
        Ok(TenxH5Source { h5, group, n_cells, genes, src_names: names, cells, csr })
    }
}

/// The kept features' table and the source -> output gene map (`None` when every feature is kept).
pub(crate) fn build_genes(
    keep: Option<&[bool]>,
    ids: &[String],
    names: &[String],
    types: Option<&[String]>,
    genome: Option<&[String]>,
) -> (Option<Vec<u32>>, GeneTable) {
    let pick = |v: &[String]| -> Vec<String> {
        match keep {
            None => v.to_vec(),
            Some(k) => v.iter().zip(k).filter(|(_, k)| **k).map(|(x, _)| x.clone()).collect(),
        }
    };
    let gene_map = keep.map(|k| {
        let mut next = 0u32;
        k.iter()
            .map(|&kept| {
                if kept {
                    next += 1;
                    next - 1
                } else {
                    u32::MAX
                }
            })
            .collect()
    });
    let ids = pick(ids);
    let feature_types = types.map(pick);
    let mut columns =
        vec![Column { name: "gene_ids".into(), stored_type: "string".into(), data: ColumnData::Str(ids.clone()) }];
    if let Some(t) = &feature_types {
        columns.push(Column {
            name: "feature_types".into(),
            stored_type: "string".into(),
            data: ColumnData::Str(t.clone()),
        });
    }
    if let Some(g) = genome {
        columns.push(Column { name: "genome".into(), stored_type: "string".into(), data: ColumnData::Str(pick(g)) });
    }
    let table =
        GeneTable { index_name: "_index".into(), names: pick(names), ids, feature_types, columns, skipped: Vec::new() };
    (gene_map, table)
}

impl CountSource for TenxH5Source {
    fn kind(&self) -> InputKind {
        InputKind::TenxH5
    }

    fn path(&self) -> &Path {
        &self.h5.path
    }

    fn describe(&self) -> String {
        format!(
            "10x h5 {} ({} cells x {} features kept, {})",
            self.group,
            self.n_cells,
            self.genes.len(),
            self.csr.value_type
        )
    }

    fn axes(&self) -> Axes<'_> {
        Axes { genes: &self.genes, cells: &self.cells }
    }

    fn stored_entries(&self, rows: Range<u64>) -> Option<u64> {
        (rows.start <= rows.end && rows.end <= self.n_cells).then(|| self.csr.entries(&rows))
    }

    fn read_rows_into(&mut self, rows: Range<u64>, out: &mut RowBlock) -> Result<(), InputError> {
        if rows.start > rows.end || rows.end > self.n_cells {
            return Err(InputError::BadRequest {
                path: self.h5.path.clone(),
                detail: format!("rows {rows:?} are outside 0..{}", self.n_cells),
            });
        }
        let cells = &self.cells;
        let names = &self.src_names;
        let cell_name = |c: u64| cells.get(c as usize).cloned().unwrap_or_default();
        let gene_name = |g: u64| names.get(g as usize).cloned().unwrap_or_default();
        self.csr.read_rows_into(&self.h5, rows, out, &cell_name, &gene_name)
    }
}
