//! The error type of every reader in this crate.

use std::path::PathBuf;

/// Why an input could not be opened or read.
///
/// Every variant names the file (`path`), and where it applies the HDF5 object or field (`object`), the line, the cell
/// and the gene; each message ends with what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The operating system could not read a file, or a gzip stream is corrupt or truncated.
    #[error("{path}: {what}: {cause}{hint}", path = path.display(), hint = io_hint(cause))]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done ("reading", "opening", ...).
        what: String,
        /// The underlying error.
        cause: std::io::Error,
    },
    /// The HDF5 library could not read an object (corrupt file, unsupported HDF5 feature, ...).
    #[error(
        "{path}: HDF5 object '{object}': {message}; the file may be corrupt or use an HDF5 feature this reader lacks \
         (check that it opens with h5py)",
        path = path.display()
    )]
    Hdf5 {
        /// The file.
        path: PathBuf,
        /// The dataset, group or attribute being read.
        object: String,
        /// The library's message.
        message: String,
    },
    /// The path is not a recognized input (h5ad, 10x .h5, Matrix Market folder).
    #[error(
        "{path}: {detail}; expected an AnnData .h5ad file, a 10x Genomics .h5 file, or a Matrix Market folder holding \
         matrix.mtx[.gz], features.tsv[.gz] (or genes.tsv[.gz]) and barcodes.tsv[.gz]",
        path = path.display()
    )]
    UnknownInput {
        /// The path given.
        path: PathBuf,
        /// What was found instead.
        detail: String,
    },
    /// A file that an input needs is absent.
    #[error("{path}: {what} is missing ({detail})", path = path.display())]
    MissingFile {
        /// The folder or file where it was looked for.
        path: PathBuf,
        /// Which file ("barcodes.tsv[.gz]", ...).
        what: String,
        /// What to do.
        detail: String,
    },
    /// An AnnData file written by anndata < 0.7 (X a group with `h5sparse_format`, compound obs/var).
    #[error(
        "{path}: legacy AnnData layout ({detail}); re-save it with a current anndata: \
         python -c \"import anndata; anndata.read_h5ad('{path}').write_h5ad('converted.h5ad')\" \
         and convert converted.h5ad",
        path = path.display()
    )]
    LegacyH5ad {
        /// The file.
        path: PathBuf,
        /// What marks it as legacy.
        detail: String,
    },
    /// A well-formed input that uses something this reader does not support.
    #[error("{path}: '{object}': {detail}", path = path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The HDF5 object or file section.
        object: String,
        /// What is unsupported and what to do.
        detail: String,
    },
    /// An input whose parts are inconsistent (array lengths, shapes, offsets, table sizes).
    #[error("{path}: '{object}': {detail}; the file is corrupt or was not written by a standard tool", path = path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The HDF5 object, field or file section.
        object: String,
        /// The inconsistency.
        detail: String,
    },
    /// A syntax or content error in a Matrix Market or TSV text file.
    #[error("{path}, line {line}: {detail}", path = path.display())]
    Text {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The problem and what was expected.
        detail: String,
    },
    /// A stored value that is not a raw count (negative, fractional, not finite, above 2^31 - 1).
    #[error("{0}")]
    NotACount(Box<BadValue>),
    /// The file claims sizes it cannot hold; refused before allocating for them.
    #[error("{path}: '{object}': {detail}; refusing to allocate for it (the file is corrupt or hostile)", path = path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The object making the claim.
        object: String,
        /// The claim and the bound.
        detail: String,
    },
    /// The feature-type filter selected no feature.
    #[error(
        "{path}: no feature has type {wanted:?} (types present: {available:?}); choose one of those types or read all \
         features",
        path = path.display()
    )]
    NoFeatures {
        /// The file.
        path: PathBuf,
        /// The requested feature type.
        wanted: String,
        /// The types in the file.
        available: Vec<String>,
    },
    /// The caller asked for something impossible (rows outside the matrix, a zero window).
    #[error("{path}: {detail}", path = path.display())]
    BadRequest {
        /// The file.
        path: PathBuf,
        /// What was wrong with the request.
        detail: String,
    },
}

/// Where a value that is not a count was found, and why it was rejected ([`InputError::NotACount`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{path}: '{object}': cell {cell} ({cell_name:?}), gene {gene} ({gene_name:?}): value {value} is not a count \
     ({reason}); deltacells stores raw integer counts in 0..=2147483647: give the raw-count matrix \
     (for an .h5ad often a layer such as 'counts', or raw/X) rather than normalized or scaled data",
    path = path.display()
)]
pub struct BadValue {
    /// The file.
    pub path: PathBuf,
    /// The dataset or place holding the value (`X/data`, `line 12`, ...).
    pub object: String,
    /// 0-based cell (row) index in the source.
    pub cell: u64,
    /// The cell's name (barcode), if known.
    pub cell_name: String,
    /// 0-based gene index in the source (before any feature-type filter).
    pub gene: u64,
    /// The gene's name, if known.
    pub gene_name: String,
    /// The value as stored.
    pub value: String,
    /// Why it is rejected.
    pub reason: &'static str,
}

fn io_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => " (the file is truncated: copy or download it again)",
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
            " (the compressed data is corrupt: copy or download the file again)"
        }
        std::io::ErrorKind::NotFound => " (check the path)",
        _ => "",
    }
}
