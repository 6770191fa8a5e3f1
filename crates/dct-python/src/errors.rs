//! Rust errors as Python exceptions: each Rust error becomes the class the Python API names for it, with the
//! Rust message (what, where, what to do) as its text, said once.

use dct_dataset::{Category, DatasetError};
use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyIndexError, PyKeyError, PyOSError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;

pyo3::create_exception!(
    deltacells._core,
    FormatError,
    PyValueError,
    "A tile, manifest, side file, obs shard or cache file breaks the deltacells format (the message names the file, \
     the tile or column, the rule and the byte offset). A subclass of ValueError."
);

pyo3::create_exception!(
    deltacells._core,
    DatasetChangedError,
    PyRuntimeError,
    "The dataset was changed (appended to or written again) after it was opened, and a tile or side file read now \
     belongs to the new version: open the dataset again. A subclass of RuntimeError."
);

/// A `ValueError` with `message`.
pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// An `IndexError` with `message`.
pub(crate) fn index_error(message: impl Into<String>) -> PyErr {
    PyIndexError::new_err(message.into())
}

/// A `FormatError` with `message`.
pub(crate) fn format_error(message: impl Into<String>) -> PyErr {
    FormatError::new_err(message.into())
}

/// The Python exception for a storage error: a missing object is `FileNotFoundError`, a wait given up at the
/// user's request the exception its signal handler raised (`KeyboardInterrupt`), anything else `OSError`.
pub(crate) fn store_error(e: &dct_store::StoreError) -> PyErr {
    if matches!(e, dct_store::StoreError::Interrupted) {
        return crate::interrupt::interrupted();
    }
    if e.is_not_found() { PyFileNotFoundError::new_err(e.to_string()) } else { PyOSError::new_err(e.to_string()) }
}

/// The Python exception for a dataset error: missing objects are `FileNotFoundError`, data that breaks the format
/// is `FormatError`, cells out of range `IndexError`, bad arguments `ValueError`, an occupied destination
/// `FileExistsError`, storage failures `OSError`.
pub(crate) fn dataset_error(e: DatasetError) -> PyErr {
    let message = e.to_string();
    if let DatasetError::Store(e) = &e {
        return store_error(e);
    }
    if let DatasetError::TileFetch { cause: source, .. } = &e {
        return if source.is_not_found() { PyFileNotFoundError::new_err(message) } else { PyOSError::new_err(message) };
    }
    match e {
        DatasetError::CellOutOfRange(_) => return PyIndexError::new_err(message),
        DatasetError::Internal(_) => return PyRuntimeError::new_err(message),
        DatasetError::SideFileMissing { .. } => return PyFileNotFoundError::new_err(message),
        _ => {}
    }
    match e.category() {
        Category::ManifestMissing | Category::TileMissing => PyFileNotFoundError::new_err(message),
        Category::AlreadyExists => PyFileExistsError::new_err(message),
        Category::DatasetChanged => DatasetChangedError::new_err(message),
        Category::InvalidArgument => PyValueError::new_err(message),
        Category::Io => PyOSError::new_err(message),
        Category::ManifestFormat
        | Category::ManifestVersion
        | Category::ManifestCounts
        | Category::ManifestLists
        | Category::ManifestTileCells
        | Category::ManifestInvalid
        | Category::TileBytes
        | Category::TileHeader
        | Category::TileCrc
        | Category::TileDecode
        | Category::SideFile
        | Category::ObsShard
        | Category::ObsSha256
        | Category::ObsFields => FormatError::new_err(message),
    }
}

/// The Python exception for an obs error: unknown columns are `KeyError`, cells out of range `IndexError`, missing
/// objects `FileNotFoundError`, damaged shards, schemas and cache files `FormatError`, bad input `ValueError`.
pub(crate) fn obs_error(e: dct_obs::ObsError) -> PyErr {
    use dct_obs::ObsError;
    let message = e.to_string();
    match &e {
        ObsError::UnknownColumn { .. } => PyKeyError::new_err(message),
        ObsError::CellOutOfRange(_) => PyIndexError::new_err(message),
        ObsError::NotFound { .. } => PyFileNotFoundError::new_err(message),
        ObsError::Store(e) => store_error(e),
        ObsError::Cache { .. } | ObsError::CacheRemoved { .. } | ObsError::NoCacheDir => PyOSError::new_err(message),
        ObsError::Internal(_) => PyRuntimeError::new_err(message),
        ObsError::Input { .. } | ObsError::NotLocalized(_) => PyValueError::new_err(message),
        _ => FormatError::new_err(message),
    }
}

/// The Python exception for a converter error: unreadable inputs and tiles are `FormatError` or `OSError` as their
/// cause says, inconsistent inputs and options `ValueError`, an occupied output `FileExistsError`.
pub(crate) fn convert_error(e: dct_convert::ConvertError) -> PyErr {
    use dct_convert::ConvertError;
    match e {
        ConvertError::Dataset(d) => dataset_error(d),
        ConvertError::Obs { cause: ref source, .. } if matches!(**source, dct_obs::ObsError::Input { .. }) => {
            PyValueError::new_err(e.to_string())
        }
        ConvertError::Io { cause: ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(e.to_string())
        }
        ConvertError::Io { .. } => PyOSError::new_err(e.to_string()),
        ConvertError::Input(ref input) => input_error(input, e.to_string()),
        ConvertError::Output(_) => PyFileExistsError::new_err(e.to_string()),
        ConvertError::Inputs(_) | ConvertError::Encode { .. } => PyValueError::new_err(e.to_string()),
        ConvertError::Plan { .. } | ConvertError::Incomplete { .. } | ConvertError::Obs { .. } => {
            FormatError::new_err(e.to_string())
        }
    }
}

fn input_error(e: &dct_input::InputError, message: String) -> PyErr {
    use dct_input::InputError;
    match e {
        InputError::Io { cause: source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(message)
        }
        InputError::MissingFile { .. } => PyFileNotFoundError::new_err(message),
        InputError::Io { .. } => PyOSError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

/// The Python exception for a tile that cannot be decoded: always `FormatError`, the message saying what is
/// corrupt and where.
pub(crate) fn decode_error(e: &dct_codec::DecodeError) -> PyErr {
    match e {
        dct_codec::DecodeError::RowOutOfRange { .. } => PyIndexError::new_err(e.to_string()),
        dct_codec::DecodeError::TooLarge { .. } | dct_codec::DecodeError::BufferTooSmall { .. } => {
            PyValueError::new_err(e.to_string())
        }
        _ => FormatError::new_err(format!("corrupt tile: {e}")),
    }
}

/// The Python exception for a matrix the encoder refuses (not counts, out of range, not representable).
pub(crate) fn encode_error(e: &dct_codec::EncodeError) -> PyErr {
    PyValueError::new_err(e.to_string())
}
