//! Input readers for the deltacells converter.
//!
//! Every reader streams a count matrix as **cell-major CSR row windows** ([`RowBlock`]) together with a gene table
//! ([`GeneTable`]) and cell names, behind one trait, [`CountSource`]. [`open_input`] detects the kind of input:
//!
//! | input | layouts | how rows are read |
//! |---|---|---|
//! | AnnData `.h5ad` ([`H5adSource`]) | `X`, `layers/NAME` or `raw/X`; `csr_matrix`, `csc_matrix` or dense `array`; any integer or float dtype | CSR: `indptr` once (8 bytes per cell), then `indices`/`data` for the requested rows only, in bounded reads. CSC: transposed in memory on the first read (about 8 bytes per stored entry plus 8 per cell). Dense: row blocks of the 2-D dataset. |
//! | 10x Genomics `.h5` ([`TenxH5Source`]) | Cell Ranger 3+ (`matrix/…`, `matrix/features/…`) and Cell Ranger 2 (one group per genome) | Each barcode's `indptr` slice is one cell, so the file is CSR by cell: read like h5ad CSR. A feature-type filter (default `Gene Expression`) drops and renumbers features. |
//! | 10x Matrix Market folder ([`MtxSource`]) | `matrix.mtx[.gz]` (genes × cells, `coordinate integer\|real general`), `features.tsv[.gz]` or `genes.tsv[.gz]`, `barcodes.tsv[.gz]` | Transposed to cell-major in two streaming passes (count entries per cell, then fill): about 8 bytes per listed entry plus 8 per cell. |
//!
//! Counts are validated here, where the file name is known: a value that is negative, fractional, not finite or above
//! `2^31 - 1` is an [`InputError::NotACount`] naming the file, dataset, cell and gene. Blocks are canonical (sorted
//! genes, repeats summed, zeros dropped), so the tile encoder's own checks never fail on them.
//!
//! Untrusted inputs never panic the caller (errors from, and panics inside, the HDF5 library become
//! [`InputError::Hdf5`]), and no buffer is sized from a claim alone: HDF5 arrays are checked against what the file
//! could hold, and Matrix Market tables are sized from the entries actually counted in the first pass.
//! [`parse_mtx_text`] runs the Matrix Market banner, size-line and entry parser of [`MtxSource`] on text held in
//! memory (no files), for tests and the `mtx` fuzz target.
//!
//! Obs (per-cell metadata) is a separate concern: [`CountSource::obs`] says where it lives, and
//! [`H5adSource::read_obs`] reads an h5ad obs data frame with the same typed-column reader used for var.
//!
//! # Modules
//!
//! * The sources stream cell-major CSR row windows, plus gene and cell metadata and obs frames, from AnnData
//!   `.h5ad`, 10x `.h5` and Matrix Market folders.
//! * HDF5 is read in pure Rust (`hdf5-pure`), with no libhdf5; gzip goes through `flate2` (Matrix Market) and
//!   `libdeflater` (HDF5 chunks).
//! * `h5.rs`: wraps `hdf5-pure`.
//! * `fast.rs`: reads 1-D chunked `data` / `indices` itself, the chunks inflated and converted to `u32` counts and
//!   genes in rayon tasks.
//! * `vlstr.rs`: reads variable-length strings one global-heap collection at a time. Both `fast.rs` and `vlstr.rs`
//!   fall back to `hdf5-pure` on anything unexpected.
//! * `mtx/`: the Matrix Market folder. `text.rs` is the text parser, also the fuzz target's entry point; `mod.rs` is
//!   the two-pass source.
//! * `cell_major.rs`: `CellMajorBuilder`, for entries listed in another order (Matrix Market's coordinates and
//!   h5ad's CSC): they are placed into the cells a counting pass sized, then each cell is canonicalized by
//!   `canonicalize_row` in `block.rs`.
//! * `CountSource` sources give their `Axes` (gene table, cell names) once.
//! * Counts are validated here, where the file name is known.

#![forbid(unsafe_code)]

mod block;
mod cell_major;
mod csr;
mod error;
mod fast;
mod frame;
mod h5;
mod h5ad;
mod mtx;
mod scan;
mod tenx;
mod vlstr;

use std::ops::Range;
use std::path::{Path, PathBuf};

pub use block::RowBlock;
pub use error::{BadValue, InputError};
pub use frame::{Column, ColumnData, Frame};
pub use h5ad::H5adSource;
pub use mtx::{MtxEntry, MtxField, MtxHeader, MtxSource, MtxText, parse_mtx_text};
pub use scan::{ScanStats, row_windows, scan, scan_observed};
pub use tenx::TenxH5Source;

/// The kind of an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// AnnData `.h5ad`.
    H5ad,
    /// 10x Genomics HDF5 (`.h5`).
    TenxH5,
    /// 10x Genomics Matrix Market folder.
    MatrixMarket,
}

impl std::fmt::Display for InputKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InputKind::H5ad => "h5ad",
            InputKind::TenxH5 => "10x h5",
            InputKind::MatrixMarket => "Matrix Market",
        })
    }
}

/// Which matrix of an `.h5ad` file to read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum H5adMatrix {
    /// `X` (with `var` as the gene table).
    #[default]
    X,
    /// `layers/NAME` (with `var` as the gene table).
    Layer(String),
    /// `raw/X` (with `raw/var` as the gene table).
    RawX,
}

impl std::fmt::Display for H5adMatrix {
    /// The matrix as plans, records and the command line spell it: `X`, `raw` or `layer:NAME`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H5adMatrix::X => f.write_str("X"),
            H5adMatrix::RawX => f.write_str("raw"),
            H5adMatrix::Layer(name) => write!(f, "layer:{name}"),
        }
    }
}

impl std::str::FromStr for H5adMatrix {
    type Err = String;

    /// Parses `X`, `raw` or `layer:NAME` (what [`H5adMatrix`]'s `Display` writes).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "X" => Ok(H5adMatrix::X),
            "raw" => Ok(H5adMatrix::RawX),
            m => match m.strip_prefix("layer:") {
                Some(name) if !name.is_empty() => Ok(H5adMatrix::Layer(name.to_string())),
                _ => Err(format!("matrix {m:?}: use \"X\", \"raw\" or \"layer:NAME\"")),
            },
        }
    }
}

/// Options for [`open_input_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputOptions {
    /// For `.h5ad` inputs: which matrix to read. Anything but [`H5adMatrix::X`] is an error for other kinds.
    pub matrix: H5adMatrix,
    /// For 10x inputs (h5 and Matrix Market) that list feature types: keep only features of this type and renumber
    /// them in source order; `None` keeps every feature. Default: `Some("Gene Expression")`. Inputs without a type
    /// column (Cell Ranger 2) are never filtered.
    pub feature_type: Option<String>,
}

impl Default for InputOptions {
    fn default() -> Self {
        InputOptions { matrix: H5adMatrix::X, feature_type: Some(DEFAULT_FEATURE_TYPE.to_string()) }
    }
}

/// The feature type kept by default from 10x inputs.
pub const DEFAULT_FEATURE_TYPE: &str = "Gene Expression";

/// The genes (columns) of an input, in output column order (after any feature-type filter).
///
/// `names` is what AnnData would show as `var_names`: the h5ad var index, or the 10x feature name (symbol).
/// `ids` is the stable identifier: the 10x feature id, or for h5ad the first of the var columns `gene_ids`,
/// `gene_id`, `feature_id`, `feature_ids`, `ensembl_id` that holds strings, else the var index.
/// `columns` is the rest of the var table as AnnData would build it (for h5ad, every var column verbatim; for 10x
/// inputs `gene_ids`, `feature_types` and `genome` where present), so `ids` and `feature_types` may repeat a column.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneTable {
    /// Name of the var index (`_index`, `index`, `gene_symbols`, ...).
    pub index_name: String,
    /// Gene names (the var index).
    pub names: Vec<String>,
    /// Stable gene identifiers.
    pub ids: Vec<String>,
    /// Feature types, when the input records them.
    pub feature_types: Option<Vec<String>>,
    /// The other var columns, typed.
    pub columns: Vec<Column>,
    /// Var columns that could not be read, with the reason (they are left out of `columns`).
    pub skipped: Vec<(String, String)>,
}

impl GeneTable {
    /// Number of genes.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no genes.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Where an input's per-cell metadata (obs) lives, for the obs reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObsLocation {
    /// An AnnData data frame: `group` in the HDF5 file `path` (read it with [`H5adSource::read_obs`]).
    H5adGroup {
        /// The file.
        path: PathBuf,
        /// The HDF5 group (`obs`).
        group: String,
    },
}

/// The two axes of a [`CountSource`]'s matrix: one gene table entry per column, one name per row.
#[derive(Debug, Clone, Copy)]
pub struct Axes<'a> {
    /// The genes (columns), after any feature-type filter.
    pub genes: &'a GeneTable,
    /// The cell names (rows).
    pub cells: &'a [String],
}

/// A count matrix readable as cell-major CSR row windows.
///
/// Implementations are [`H5adSource`], [`TenxH5Source`] and [`MtxSource`]; [`open_input`] picks one.
pub trait CountSource: Send + std::fmt::Debug {
    /// The kind of input.
    fn kind(&self) -> InputKind;

    /// The path the input was opened from (file, or folder for Matrix Market).
    fn path(&self) -> &Path;

    /// A one-line description for logs, e.g. `h5ad X (csr_matrix, f32)`.
    fn describe(&self) -> String;

    /// The matrix's two axes: its gene table and its cell names.
    fn axes(&self) -> Axes<'_>;

    /// Number of cells (rows).
    fn n_cells(&self) -> u64 {
        self.axes().cells.len() as u64
    }

    /// Number of genes (columns), after any feature-type filter.
    fn n_genes(&self) -> u64 {
        self.axes().genes.names.len() as u64
    }

    /// The gene table, `n_genes()` long.
    fn genes(&self) -> &GeneTable {
        self.axes().genes
    }

    /// Cell names (barcodes / obs index), `n_cells()` long.
    fn cell_names(&self) -> &[String] {
        self.axes().cells
    }

    /// Entries stored for `rows` (before zeros are dropped and repeats summed), when known without reading them;
    /// lets a caller size windows by entries rather than by cells. `None` for dense matrices and for inputs not yet
    /// transposed.
    fn stored_entries(&self, rows: Range<u64>) -> Option<u64>;

    /// Whether the input holds (or will hold, at its first read) its whole matrix in memory: Matrix Market
    /// folders (parsed and transposed at open) and CSC `.h5ad` matrices (transposed at the first read). A caller
    /// reading one input from several threads should share one such source rather than open it per thread.
    fn loads_whole_matrix(&self) -> bool {
        false
    }

    /// Reads cells `rows` into `out` (replacing its content), in canonical form.
    ///
    /// Windows may be read in any order; reading them in increasing order is what the readers are tuned for.
    fn read_rows_into(&mut self, rows: Range<u64>, out: &mut RowBlock) -> Result<(), InputError>;

    /// Reads cells `rows` into a new block. See [`CountSource::read_rows_into`].
    fn read_rows(&mut self, rows: Range<u64>) -> Result<RowBlock, InputError> {
        let mut out = RowBlock::new(self.n_genes());
        self.read_rows_into(rows, &mut out)?;
        Ok(out)
    }

    /// Where the per-cell metadata lives, if the input has any beyond cell names.
    fn obs(&self) -> Option<ObsLocation> {
        None
    }
}

/// Opens `path` with default [`InputOptions`] (h5ad `X`; 10x `Gene Expression` features only).
pub fn open_input(path: impl AsRef<Path>) -> Result<Box<dyn CountSource>, InputError> {
    open_input_with(path, &InputOptions::default())
}

/// Detects the kind of input at `path` and opens it.
///
/// A folder is read as a Matrix Market folder, and so is a path to a `matrix.mtx[.gz]` file (its folder is used).
/// An HDF5 file with a `matrix` group (or a Cell Ranger 2 genome group) is read as 10x h5, any other HDF5 file as h5ad.
pub fn open_input_with(path: impl AsRef<Path>, opts: &InputOptions) -> Result<Box<dyn CountSource>, InputError> {
    let path = path.as_ref();
    let kind = detect_kind(path)?;
    if kind != InputKind::H5ad && opts.matrix != H5adMatrix::X {
        return Err(InputError::BadRequest {
            path: path.to_path_buf(),
            detail: format!("a matrix other than X ({:?}) was requested, but this is a {kind} input", opts.matrix),
        });
    }
    Ok(match kind {
        InputKind::MatrixMarket => {
            let dir = if path.is_dir() { path } else { path.parent().unwrap_or(Path::new(".")) };
            Box::new(MtxSource::open(dir, opts.feature_type.as_deref())?)
        }
        InputKind::TenxH5 => Box::new(TenxH5Source::open(path, opts.feature_type.as_deref())?),
        InputKind::H5ad => Box::new(H5adSource::open(path, &opts.matrix)?),
    })
}

/// The kind of input at `path`, from its type and first bytes (and for HDF5, its top-level groups).
pub fn detect_kind(path: &Path) -> Result<InputKind, InputError> {
    let meta = std::fs::metadata(path).map_err(|source| InputError::Io {
        path: path.to_path_buf(),
        what: "opening".into(),
        cause: source,
    })?;
    if meta.is_dir() {
        return Ok(InputKind::MatrixMarket);
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.ends_with(".mtx") || name.ends_with(".mtx.gz") {
        return Ok(InputKind::MatrixMarket);
    }
    let is_hdf5 = hdf5_pure::is_hdf5(path).map_err(|source| InputError::Io {
        path: path.to_path_buf(),
        what: "reading".into(),
        cause: source,
    })?;
    if !is_hdf5 {
        return Err(InputError::UnknownInput {
            path: path.to_path_buf(),
            detail: "not an HDF5 file, a Matrix Market file or a folder".into(),
        });
    }
    let h5 = h5::H5::open(path)?;
    if tenx::looks_like_tenx(&h5)? { Ok(InputKind::TenxH5) } else { Ok(InputKind::H5ad) }
}
