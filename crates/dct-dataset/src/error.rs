//! Typed errors and their categories.

use std::fmt;

use dct_codec::{DecodeError, EncodeError};
use dct_format::FormatError;
use dct_store::StoreError;

/// What kind of problem an error or a verification finding is.
///
/// The first twelve are the categories of the conformance suite (`testdata/conformance/README.md`, "datasets"),
/// with the same names ([`Category::as_str`]); the rest are this crate's extensions for problems the suite does
/// not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// There is no `manifest.json`: not a dataset, or one whose writer did not finish.
    ManifestMissing,
    /// `format` is missing or is not `"deltacells-dataset"`.
    ManifestFormat,
    /// `version` is missing or not one this reader knows (1 or 2).
    ManifestVersion,
    /// `n_cells`, `n_genes` or `tile_size` is missing, out of range or inconsistent with the tile lists.
    ManifestCounts,
    /// A per-tile list is missing, malformed or of a different length than the others.
    ManifestLists,
    /// A tile other than the last holds other than `tile_size` cells, or the last holds 0 or more.
    ManifestTileCells,
    /// A tile object named by the manifest does not exist.
    TileMissing,
    /// A tile object's size differs from the manifest's `tile_bytes`.
    TileBytes,
    /// A tile's header is invalid or disagrees with the manifest (version, cells, nonzeros, genes).
    TileHeader,
    /// A tile's CRC-32 does not match its bytes.
    TileCrc,
    /// An obs shard's SHA-256 differs from the manifest's, or the obs fingerprint does not match.
    ObsSha256,
    /// The manifest's obs fields are missing or inconsistent.
    ObsFields,
    /// Extension: `manifest.json` is not a JSON object, is too large, or has a key of the wrong type.
    ManifestInvalid,
    /// Extension: a tile's structure or contents break the format (anything but the CRC and the header checks).
    TileDecode,
    /// Extension: `gene_order.npy`, `var_names.txt` or `var.parquet` is missing or malformed.
    SideFile,
    /// Extension: an obs shard or `obs/schema.json` is missing or has the wrong size.
    ObsShard,
    /// Extension: the storage backend failed (network, permissions, throttling); retrying may succeed.
    Io,
    /// Extension: the caller passed something invalid (a cell out of range, a bad URL or option, bad input data).
    InvalidArgument,
    /// Extension: the writer's destination already holds files and `overwrite` is off.
    AlreadyExists,
    /// Extension: the dataset was changed (appended to) after this reader opened it: open it again.
    DatasetChanged,
}

impl Category {
    /// Every category, conformance categories first.
    pub const ALL: [Category; 20] = [
        Category::ManifestMissing,
        Category::ManifestFormat,
        Category::ManifestVersion,
        Category::ManifestCounts,
        Category::ManifestLists,
        Category::ManifestTileCells,
        Category::TileMissing,
        Category::TileBytes,
        Category::TileHeader,
        Category::TileCrc,
        Category::ObsSha256,
        Category::ObsFields,
        Category::ManifestInvalid,
        Category::TileDecode,
        Category::SideFile,
        Category::ObsShard,
        Category::Io,
        Category::InvalidArgument,
        Category::AlreadyExists,
        Category::DatasetChanged,
    ];

    /// The snake-case name, as the conformance files spell it (e.g. `manifest_tile_cells`).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::ManifestMissing => "manifest_missing",
            Category::ManifestFormat => "manifest_format",
            Category::ManifestVersion => "manifest_version",
            Category::ManifestCounts => "manifest_counts",
            Category::ManifestLists => "manifest_lists",
            Category::ManifestTileCells => "manifest_tile_cells",
            Category::TileMissing => "tile_missing",
            Category::TileBytes => "tile_bytes",
            Category::TileHeader => "tile_header",
            Category::TileCrc => "tile_crc",
            Category::ObsSha256 => "obs_sha256",
            Category::ObsFields => "obs_fields",
            Category::ManifestInvalid => "manifest_invalid",
            Category::TileDecode => "tile_decode",
            Category::SideFile => "side_file",
            Category::ObsShard => "obs_shard",
            Category::Io => "io",
            Category::InvalidArgument => "invalid_argument",
            Category::AlreadyExists => "already_exists",
            Category::DatasetChanged => "dataset_changed",
        }
    }

    /// The category with this name, if any.
    pub fn from_name(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A manifest that cannot be used: which key, what is wrong, and the category.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ManifestError {
    /// The kind of problem.
    pub category: Category,
    /// The key concerned, if one is.
    pub key: Option<String>,
    /// What is wrong, with the values involved.
    pub message: String,
}

impl ManifestError {
    pub(crate) fn new(category: Category, key: Option<&str>, message: impl Into<String>) -> Self {
        ManifestError { category, key: key.map(str::to_owned), message: message.into() }
    }
}

/// Every error of this crate. Each says what (file or object URL, tile, field) and, where it helps, what to do;
/// [`DatasetError::category`] classifies it.
///
/// Errors are `Clone` (sources are shared) so that one failed fetch can be reported to every caller waiting on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DatasetError {
    /// The manifest is missing, unreadable or invalid.
    #[error("{url}: {cause}")]
    Manifest {
        /// URL of `manifest.json`.
        url: String,
        /// What is wrong.
        cause: ManifestError,
    },
    /// A tile object is missing, has the wrong size, or its header disagrees with the manifest.
    #[error("tile {tile} ({url}): {message}")]
    Tile {
        /// The kind of problem ([`Category::TileMissing`], [`Category::TileBytes`] or [`Category::TileHeader`]).
        category: Category,
        /// Tile index.
        tile: usize,
        /// URL of the tile object.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// A tile no longer matches the manifest this reader opened because the dataset changed since (reopen it), or
    /// because an append is rewriting its last tile, or stopped before its manifest (run it again to complete it).
    #[error("tile {tile} ({url}) no longer matches the manifest the dataset was opened with: {message}")]
    Changed {
        /// Tile index.
        tile: usize,
        /// URL of the tile object.
        url: String,
        /// What differs, or that an append is under way, and what to do.
        message: String,
    },
    /// A side file (`var_names.txt`, `gene_order.npy`, `var.parquet`) was read after the dataset changed since this
    /// reader opened it: it may describe other genes than the tiles read. Reopen the dataset.
    #[error(
        "{url} was read after the dataset changed since it was opened ({message}), so it may not describe the \
             tiles read; open the dataset again to read it as it is now"
    )]
    FileChanged {
        /// URL of the side file.
        url: String,
        /// How the dataset differs now.
        message: String,
    },
    /// A tile's bytes are corrupt (CRC, structure or compressed contents).
    #[error("tile {tile} ({url}) is corrupt: {cause}; re-create the dataset or restore the tile")]
    Decode {
        /// Tile index.
        tile: usize,
        /// URL of the tile object.
        url: String,
        /// What the decoder found.
        cause: DecodeError,
    },
    /// A side file (`gene_order.npy`, `var_names.txt`, `var.parquet`) the manifest names does not exist.
    #[error("{url}: the manifest says this file exists, but it does not: the dataset is incomplete")]
    SideFileMissing {
        /// URL of the file.
        url: String,
    },
    /// A side file (`gene_order.npy`, `var_names.txt`, `var.parquet`) is malformed or too large.
    #[error("{url}: {message}")]
    SideFile {
        /// URL of the file.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// An obs file (shard or schema) is missing, has the wrong size or hash. The URL comes first unless the
    /// message names it already (the obs reader's messages name the file, which is under it).
    #[error("{}", if names_location(message, url) { message.clone() } else { format!("{url}: {message}") })]
    Obs {
        /// [`Category::ObsShard`], [`Category::ObsSha256`] or [`Category::ObsFields`].
        category: Category,
        /// URL of the file.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// A storage request failed (after its retries), or an object has another size than the caller allows.
    /// Transient failures (network, throttling) may succeed on a later attempt ([`StoreError::is_transient`]).
    #[error(transparent)]
    Store(StoreError),
    /// Fetching a tile failed (after its retries) for a reason other than its absence or size: the network, the
    /// service, permissions. The store error names the object, the attempts and what to do.
    #[error("tile {tile}: {cause}")]
    TileFetch {
        /// Tile index.
        tile: usize,
        /// The failed request.
        cause: StoreError,
    },
    /// A URL or path that cannot be opened (unknown scheme, backend not compiled in, bad option).
    #[error("cannot use {url}: {message}")]
    Url {
        /// The URL as given.
        url: String,
        /// Why not, and what to do.
        message: String,
    },
    /// A requested cell does not exist.
    #[error(transparent)]
    CellOutOfRange(#[from] dct_format::CellOutOfRange),
    /// The writer's input cannot be stored (bad shape, not counts, too many exceptions).
    #[error("{context}: {cause}")]
    Encode {
        /// Where: the tile and its global cell range.
        context: String,
        /// The encoder's error.
        cause: EncodeError,
    },
    /// The destination of a writer already holds files.
    #[error(
        "{url} already holds files ({example}); pass overwrite (--overwrite on the command line) to replace the \
         dataset there"
    )]
    AlreadyExists {
        /// The destination.
        url: String,
        /// One of the objects found.
        example: String,
    },
    /// An argument or option is invalid, or the object is in a state where the call is not allowed.
    #[error("{0}")]
    InvalidArgument(String),
    /// A background task failed unexpectedly (cancelled at shutdown, or a bug); retrying may succeed.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Whether `message` names `url` as its location: a file under it (`url/...`), or `url` itself opening a sentence
/// or a clause (`url: ...`, `url already holds ...`). So a location is put first only where the message lacks it.
pub fn names_location(message: &str, url: &str) -> bool {
    !url.is_empty()
        && (message.contains(&format!("{url}/"))
            || message.contains(&format!("{url}:"))
            || message.starts_with(&format!("{url} ")))
}

impl DatasetError {
    /// The category of this error.
    pub fn category(&self) -> Category {
        match self {
            DatasetError::Manifest { cause: source, .. } => source.category,
            DatasetError::Tile { category, .. } | DatasetError::Obs { category, .. } => *category,
            DatasetError::Decode { cause: source, .. } => decode_category(source),
            DatasetError::SideFile { .. } | DatasetError::SideFileMissing { .. } => Category::SideFile,
            DatasetError::Store(_) | DatasetError::TileFetch { .. } | DatasetError::Internal(_) => Category::Io,
            DatasetError::Url { .. }
            | DatasetError::CellOutOfRange(_)
            | DatasetError::Encode { .. }
            | DatasetError::InvalidArgument(_) => Category::InvalidArgument,
            DatasetError::AlreadyExists { .. } => Category::AlreadyExists,
            DatasetError::Changed { .. } | DatasetError::FileChanged { .. } => Category::DatasetChanged,
        }
    }

    /// The tile concerned, if one is.
    pub fn tile(&self) -> Option<usize> {
        match self {
            DatasetError::Tile { tile, .. }
            | DatasetError::Changed { tile, .. }
            | DatasetError::Decode { tile, .. }
            | DatasetError::TileFetch { tile, .. } => Some(*tile),
            _ => None,
        }
    }
}

impl From<StoreError> for DatasetError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Url { url, message } => DatasetError::Url { url, message },
            e => DatasetError::Store(e),
        }
    }
}

/// The category of a decoding failure: a CRC mismatch, a header problem, or anything else.
pub(crate) fn decode_category(e: &DecodeError) -> Category {
    match e {
        DecodeError::Format(FormatError::CrcMismatch { .. }) => Category::TileCrc,
        DecodeError::Format(
            FormatError::TooShort { .. }
            | FormatError::BadMagic { .. }
            | FormatError::UnsupportedVersion { .. }
            | FormatError::NonZeroField { .. }
            | FormatError::GenesOutOfRange { .. }
            | FormatError::SizeMismatch { .. },
        ) => Category::TileHeader,
        _ => Category::TileDecode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Category::ALL {
            assert_eq!(Category::from_name(c.as_str()), Some(c));
        }
        assert_eq!(Category::from_name("nope"), None);
    }

    /// An obs error names its file, under the dataset: the dataset's URL is not put before it again.
    #[cfg(feature = "obs")]
    #[test]
    fn an_obs_error_says_its_location_once() {
        let ds = "/data/ds";
        let schema = dct_obs::ObsError::Schema { url: format!("{ds}/obs/schema.json"), message: "not JSON".into() };
        let text = crate::reader::obs_error(ds, schema).to_string();
        assert_eq!(text.matches(ds).count(), 1, "{text}");
        assert!(text.starts_with("/data/ds/obs/schema.json: invalid obs schema"), "{text}");
        let bare = DatasetError::Obs { category: Category::ObsFields, url: ds.into(), message: "no shards".into() };
        assert_eq!(bare.to_string(), "/data/ds: no shards");
    }
}
