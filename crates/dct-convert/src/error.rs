use dct_dataset::DatasetError;
use dct_input::InputError;

/// A dataset error about `url`: as it is (its kind kept) when its message names `url` already, as most do;
/// otherwise with `url` put first, so that the location is said once.
pub(crate) fn dataset_err(url: &str) -> impl Fn(DatasetError) -> ConvertError + '_ {
    move |e| {
        let message = e.to_string();
        if dct_dataset::names_location(&message, url) {
            ConvertError::Dataset(e)
        } else {
            ConvertError::Output(format!("{url}: {message}"))
        }
    }
}

impl From<dct_store::StoreError> for ConvertError {
    fn from(e: dct_store::StoreError) -> Self {
        ConvertError::Dataset(e.into())
    }
}

/// Why a conversion step failed. Each variant says which input, tile or file, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// An input could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The output dataset could not be written or read back.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The inputs do not describe one matrix (different gene lists, no inputs, no cells).
    #[error("{0}")]
    Inputs(String),
    /// A tile could not be encoded.
    #[error("tile {tile} (cells {first}..{end}): {cause}")]
    Encode {
        /// Tile index.
        tile: usize,
        /// First global cell.
        first: u64,
        /// One past the last global cell.
        end: u64,
        /// The encoder's error.
        cause: dct_codec::EncodeError,
    },
    /// The plan file is unreadable, or belongs to another conversion.
    #[error("plan {path}: {message}")]
    Plan {
        /// Where the plan is.
        path: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// Finalize found tiles missing or invalid.
    #[error("{} tile(s) missing or invalid in {output}: {}; run the parts that write them (or the plain convert again), \
             then finalize", problems.len(), problems.iter().take(5).cloned().collect::<Vec<_>>().join("; "))]
    Incomplete {
        /// The output URL.
        output: String,
        /// One message per bad tile.
        problems: Vec<String>,
    },
    /// The output already holds a different dataset or conversion.
    #[error("{0}")]
    Output(String),
    /// The obs shards, `obs/schema.json` or `var.parquet` could not be built or written.
    #[error("{context}: {cause}")]
    Obs {
        /// What was being written, and where.
        context: String,
        /// The obs layer's error.
        cause: Box<dct_obs::ObsError>,
    },
    /// A local file could not be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        cause: std::io::Error,
    },
}
