//! The error type of this crate.

use std::path::PathBuf;

use dct_store::{Store, StoreError};

/// Everything that can go wrong reading, writing, caching or verifying obs.
///
/// Every variant names the object (URL or local path) involved and, where it applies, the tile and the column, and its
/// message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ObsError {
    /// A storage request failed after its retries (network, permissions, ...), or an object has another size
    /// than the manifest says.
    #[error(transparent)]
    Store(StoreError),
    /// A required object does not exist.
    #[error(
        "{url} does not exist; the dataset is incomplete or the manifest does not belong to it (re-run the conversion)"
    )]
    NotFound {
        /// The object's URL.
        url: String,
    },
    /// `obs/schema.json` is not a valid obs schema.
    #[error("{url}: invalid obs schema: {message}; regenerate the dataset's obs with a deltacells writer")]
    Schema {
        /// Where the schema came from.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// The schema, the manifest's `tile_cells` and its shard hashes give another fingerprint than the manifest's
    /// `obs_fingerprint`: the schema or the manifest changed after the dataset was written.
    #[error(
        "{url}: with the manifest's tile_cells and obs_shard_sha256 this schema gives fingerprint {computed}, but \
         the manifest says {expected}: the schema or the manifest changed after the dataset was written; \
         regenerate the dataset's obs with a deltacells writer"
    )]
    Fingerprint {
        /// The schema's URL.
        url: String,
        /// The fingerprint recomputed from the schema and the manifest.
        computed: String,
        /// The manifest's `obs_fingerprint`.
        expected: String,
    },
    /// An object is larger than this reader accepts for its kind.
    #[error("{url} is {size} bytes, more than the {limit} accepted for it; the file is not what the manifest says")]
    TooLarge {
        /// The object's URL.
        url: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The manifest facts handed to this crate are inconsistent.
    #[error("invalid obs manifest fields: {0}; the manifest is damaged or was written by an incompatible writer")]
    Manifest(String),
    /// An obs shard does not match the manifest or the schema (layout, row counts, types, sizes).
    #[error("{url}{}{}: {message}; the obs shards do not match the manifest, re-run the conversion",
        tile.map(|t| format!(" (tile {t})")).unwrap_or_default(),
        column.as_ref().map(|c| format!(" (column {c:?})")).unwrap_or_default())]
    Shard {
        /// The shard's URL.
        url: String,
        /// The tile (row group) concerned, if any.
        tile: Option<usize>,
        /// The column concerned, if any.
        column: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// Bytes read from a shard differ from what its footer or the manifest recorded (a checksum): they were altered
    /// after they were written, in storage or (from a remote store) in transit. Retried like a transient failure; if
    /// it persists the stored object is damaged.
    #[error("{url}{}{}: {message}; {}",
        tile.map(|t| format!(" (tile {t})")).unwrap_or_default(),
        column.as_ref().map(|c| format!(" (column {c:?})")).unwrap_or_default(),
        if *local {
            "the file changed after it was written; run `deltacells verify` on the dataset and rewrite it"
        } else {
            "the bytes were altered in storage or in transit (retried); if this persists, run `deltacells verify` \
             on the dataset"
        })]
    Damaged {
        /// The shard's URL.
        url: String,
        /// Whether the shard is a local file (then nothing was in transit).
        local: bool,
        /// The tile (row group) concerned, if any.
        tile: Option<usize>,
        /// The column concerned, if any.
        column: Option<String>,
        /// What differs.
        message: String,
    },
    /// The parquet library could not decode (or encode) a file (an obs shard, `var.parquet`).
    #[error("{url}{}{}: parquet error: {}; the file is corrupt or not written by a compatible writer",
        tile.map(|t| format!(" (tile {t})")).unwrap_or_default(),
        column.as_ref().map(|c| format!(" (column {c:?})")).unwrap_or_default(),
        parquet_cause(cause))]
    Parquet {
        /// The file's URL.
        url: String,
        /// The tile (row group) concerned, if any.
        tile: Option<usize>,
        /// The column concerned, if any.
        column: Option<String>,
        /// The parquet error.
        cause: parquet::errors::ParquetError,
    },
    /// An Arrow operation failed.
    #[error("{context}: {cause}")]
    Arrow {
        /// What was being done.
        context: String,
        /// The Arrow error.
        cause: arrow_schema::ArrowError,
    },
    /// A column name that the schema does not have.
    #[error("obs has no column {name:?}; available columns: {available}")]
    UnknownColumn {
        /// The requested name.
        name: String,
        /// The schema's column names, comma separated.
        available: String,
    },
    /// A column was used before being localized.
    #[error("obs column {0:?} is not localized yet; call localize([{0:?}]) first")]
    NotLocalized(String),
    /// A cell index at or past the number of cells.
    #[error(transparent)]
    CellOutOfRange(#[from] dct_format::CellOutOfRange),
    /// Input handed to the writer or the schema builder is unusable.
    #[error("invalid obs input{}: {message}", column.as_ref().map(|c| format!(" (column {c:?})")).unwrap_or_default())]
    Input {
        /// The column concerned, if any.
        column: Option<String>,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A stored gene table (`var.parquet`) cannot serve as one: no string index naming the genes.
    #[error("the gene table{}: {message}; rewrite it from a pandas DataFrame indexed by the gene names",
        column.as_ref().map(|c| format!(" (column {c:?})")).unwrap_or_default())]
    VarTable {
        /// The column concerned, if any.
        column: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// Local cache I/O failed.
    #[error("obs cache {}: {message}: {cause}; check that the cache directory is writable \
             (set DELTACELLS_CACHE or pass cache_dir to use another one)", path.display())]
    Cache {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        message: String,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// A cached column file is unusable even after being rebuilt.
    #[error("obs cache file {} is invalid: {message}; delete the cache directory and retry", path.display())]
    CacheCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The cache directory, or files in it, went away while columns were being written to it, twice in a row.
    #[error(
        "obs cache {}: files being written there were removed meanwhile (by another process cleaning the cache?), \
         twice; localize again when nothing removes them, or use another cache directory",
        dir.display()
    )]
    CacheRemoved {
        /// The dataset's cache directory.
        dir: PathBuf,
    },
    /// No cache directory could be chosen.
    #[error("no obs cache directory: pass cache_dir, or set DELTACELLS_CACHE, XDG_CACHE_HOME or HOME")]
    NoCacheDir,
    /// An internal task failed (panicked or was cancelled).
    #[error("internal error: {0}; please report it")]
    Internal(String),
}

impl ObsError {
    /// Whether another attempt may succeed: a transient store failure, or bytes damaged on the way.
    pub fn is_transient(&self) -> bool {
        match self {
            ObsError::Store(e) => e.is_transient(),
            ObsError::Damaged { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn damaged(
        store: &Store,
        url: &str,
        tile: Option<usize>,
        column: Option<&str>,
        message: String,
    ) -> Self {
        let (url, local, column) = (url.to_string(), store.is_local(), column.map(str::to_string));
        ObsError::Damaged { url, local, tile, column, message }
    }

    pub(crate) fn input(column: Option<&str>, message: impl Into<String>) -> Self {
        ObsError::Input { column: column.map(str::to_string), message: message.into() }
    }

    pub(crate) fn shard(url: &str, tile: Option<usize>, column: Option<&str>, message: impl Into<String>) -> Self {
        ObsError::Shard { url: url.to_string(), tile, column: column.map(str::to_string), message: message.into() }
    }

    pub(crate) fn cache(path: impl Into<PathBuf>, message: impl Into<String>, source: std::io::Error) -> Self {
        ObsError::Cache { path: path.into(), message: message.into(), cause: source }
    }

    pub(crate) fn arrow(context: impl Into<String>, source: arrow_schema::ArrowError) -> Self {
        ObsError::Arrow { context: context.into(), cause: source }
    }
}

impl From<StoreError> for ObsError {
    /// Missing and oversized objects become [`ObsError::NotFound`] and [`ObsError::TooLarge`] (which say what
    /// they mean for obs); every other failure stays a [`ObsError::Store`].
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { url } => ObsError::NotFound { url },
            StoreError::TooLarge { url, size, limit } => ObsError::TooLarge { url, size, limit },
            e => ObsError::Store(e),
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = ObsError> = std::result::Result<T, E>;

/// A parquet error's text without the "Parquet error: " its general errors start with (the message says
/// "parquet error" once).
fn parquet_cause(cause: &parquet::errors::ParquetError) -> String {
    let text = cause.to_string();
    match text.strip_prefix("Parquet error: ") {
        Some(rest) => rest.to_string(),
        None => text,
    }
}
