//! `manifest.json` from Python: parsed and validated by the Rust reader's rules, written by its writer.

use dct_dataset::Manifest;
use pyo3::prelude::*;

use crate::errors::{dataset_error, value_error};

/// Parses and validates a manifest's JSON text; returns it re-serialized in canonical form (every key, defaults
/// filled in). `FormatError` naming the key for an invalid one.
#[pyfunction]
pub(crate) fn normalize_manifest(text: &[u8]) -> PyResult<String> {
    let m = Manifest::from_json(text).map_err(|source| {
        dataset_error(dct_dataset::DatasetError::Manifest { url: "manifest.json".into(), cause: source })
    })?;
    String::from_utf8(m.to_json_pretty()).map_err(|e| value_error(e.to_string()))
}
