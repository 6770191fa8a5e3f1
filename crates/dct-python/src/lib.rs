//! `deltacells._core`: the Rust reader, decoder, writer, obs cache and converter of deltacells, for the Python
//! package `deltacells` (its pure-Python modules in `python/deltacells/` give the public API; this module is the
//! engine behind them).
//!
//! Everything that reads, decodes, writes, hashes or caches runs here, with the GIL released; arrays handed to
//! Python are numpy arrays that own the Rust buffers (or views of the caller's). Errors become the Python
//! exceptions the API names (`errors.rs`); nothing here panics on bad input.
//!
//! # Modules
//!
//! * This extension, `deltacells._core`, is built with PyO3 (abi3-py39). Its modules, in `src/`:
//!   * `tile.rs`: parse, decode and gather.
//!   * `slots.rs`: batches read into a training loader's reusable slots.
//!   * `dataset.rs`: the reader.
//!   * `backend.rs`: a Python `Backend` object as a `dct_store::ReadSource`.
//!   * `store.rs`: store reads for `StoreBackend`.
//!   * `writer.rs`: `encode_tile` and the dataset writer.
//!   * `obs.rs`: the obs reader, schema inference and encoding.
//!   * `convert.rs`: the converter and its split form.
//!   * `corpus.rs`: corpora (`dct_corpus`): reads through a gene vocabulary, selections, obs across members,
//!     weighted epochs.
//!   * `cli.rs`: the command line, in-process.
//!   * `errors.rs`: Rust errors as the API's exception classes; `interrupt.rs`: Ctrl-C during storage waits.
//!   * `process.rs`: what survives `fork`.
//! * The pure-Python modules of the original package's API, in `python/deltacells/`, hold the argument checks, the
//!   pandas and scipy conversions and the dataclasses:
//!   * `dataset.py`: the reader, over `_tiles.py` (tiles, batches), `_obs_store.py` (the obs cache reader, over an
//!     `ObsHost` protocol) and `_obs_schema.py` (schemas, frames, the gene table).
//!   * `reader.py` and `obs.py`: the original package's module faces over those and `dataset.py`, so that no module
//!     imports one that imports it.
//!   * `_files.py`: atomic file writes.
//!   * `_indices.py`: cell indices as numpy means them (integers, or a boolean mask of one entry per cell);
//!     `_seeds.py`: seeds as torch takes them (a negative one modulo 2^64), refused when the object is made.
//!   * `torch.py`: the training loader (over a dataset or a corpus); `_batch_slots.py`: the reused memory its
//!     batches are decoded into, shared with the training process when DataLoader workers hand them over.
//!   * `corpus.py`: `open_corpus`, `Corpus` and `CorpusObs` over `_core.Corpus`; `lightning.py`: the Lightning
//!     `DeltaCellsDataModule` (an optional extra).
//! * Arrays cross as numpy arrays owning the Rust vectors, or as views of the caller's buffers; obs columns cross as
//!   numpy arrays and lists (no Arrow C interface).
//! * The crate is outside `default-members`, so a plain `cargo build` needs no Python; `cargo xtask python` builds
//!   the wheel into a venv and runs `tests/`.

#![forbid(unsafe_code)]

mod arrays;
mod backend;
mod cli;
mod convert;
mod corpus;
mod dataset;
mod epoch;
mod errors;
mod interrupt;
mod manifest;
mod obs;
mod process;
mod report;
mod slots;
mod store;
mod tile;
mod writer;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    interrupt::watch_main_thread(py)?;
    m.add("FormatError", py.get_type::<errors::FormatError>())?;
    m.add("DatasetChangedError", py.get_type::<errors::DatasetChangedError>())?;
    m.add("FORMAT_VERSION", dct_format::Version::V2.number())?;
    m.add("CORPUS_OPEN_CONCURRENCY", dct_corpus::OPEN_CONCURRENCY)?;
    m.add("HEADER_SIZE", dct_format::HEADER_LEN)?;
    m.add("CHUNK_ENTRY_SIZE_V1", dct_format::Version::V1.entry_size())?;
    m.add("CHUNK_ENTRY_SIZE_V2", dct_format::Version::V2.entry_size())?;
    m.add("MAX_GENES_V1", dct_format::Version::V1.max_genes())?;
    m.add("MAX_GENES_V2", dct_format::Version::V2.max_genes())?;
    m.add("MAX_VALUE", dct_format::MAX_COUNT)?;
    m.add("MAGIC", pyo3::types::PyBytes::new(py, dct_format::MAGIC))?;
    // The dataset's object names and obs shard arithmetic (`dct_format::objects`), for `deltacells.manifest`.
    {
        use dct_format::objects as o;
        m.add("DATASET_FORMAT_NAME", dct_dataset::manifest::FORMAT_NAME)?;
        m.add("MANIFEST_WRITE_VERSION", dct_dataset::manifest::WRITE_VERSION)?;
        m.add("MANIFEST_NAME", o::MANIFEST_NAME)?;
        m.add("GENE_ORDER_NAME", o::GENE_ORDER_NAME)?;
        m.add("VAR_NAMES_NAME", o::VAR_NAMES_NAME)?;
        m.add("VAR_TABLE_NAME", o::VAR_TABLE_NAME)?;
        m.add("OBS_SCHEMA_NAME", o::OBS_SCHEMA_NAME)?;
        m.add("APPEND_JOURNAL_NAME", o::APPEND_JOURNAL_NAME)?;
        m.add("TILE_NAME_PARTS", (o::TILE_PREFIX, o::TILE_DIGITS, o::TILE_SUFFIX))?;
        m.add("OBS_SHARD_NAME_PARTS", (o::OBS_SHARD_PREFIX, o::OBS_SHARD_DIGITS, o::OBS_SHARD_SUFFIX))?;
        m.add("DEFAULT_OBS_TILES_PER_FILE", o::DEFAULT_OBS_TILES_PER_FILE)?;
    }
    m.add_function(wrap_pyfunction!(manifest::tile_name, m)?)?;
    m.add_function(wrap_pyfunction!(manifest::obs_shard_name, m)?)?;
    m.add_function(wrap_pyfunction!(manifest::n_obs_shards, m)?)?;
    m.add_function(wrap_pyfunction!(manifest::obs_shard_tiles, m)?)?;
    m.add_class::<tile::PyTile>()?;
    m.add_class::<dataset::PyDataset>()?;
    m.add_class::<dataset::PyReaderThreads>()?;
    m.add_class::<corpus::PyCorpus>()?;
    m.add_class::<corpus::PyCorpusObs>()?;
    m.add_class::<obs::PyObs>()?;
    m.add_class::<writer::PyDatasetWriter>()?;
    m.add_class::<store::PyStore>()?;
    m.add_class::<epoch::PyEpochPlan>()?;
    m.add_class::<epoch::PyEpochUnits>()?;
    m.add_class::<epoch::PyStrata>()?;
    m.add_function(wrap_pyfunction!(dataset::batch_slot_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(process::return_free_memory, m)?)?;
    m.add_function(wrap_pyfunction!(interrupt::watch_gathering_thread, m)?)?;
    m.add_function(wrap_pyfunction!(interrupt::stop_gathering, m)?)?;
    m.add_function(wrap_pyfunction!(slots::slot_layout, m)?)?;
    m.add("SLOT_HEADER", slots::HEADER)?;
    m.add_function(wrap_pyfunction!(tile::read_tile_file, m)?)?;
    m.add_function(wrap_pyfunction!(tile::payload_crc32, m)?)?;
    m.add_function(wrap_pyfunction!(tile::row_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(tile::gather, m)?)?;
    m.add_function(wrap_pyfunction!(writer::encode_tile, m)?)?;
    m.add_function(wrap_pyfunction!(writer::check_gene_order, m)?)?;
    m.add_function(wrap_pyfunction!(manifest::normalize_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(manifest::record_side_file, m)?)?;
    m.add_function(wrap_pyfunction!(manifest::same_genes_in_another_order, m)?)?;
    m.add_function(wrap_pyfunction!(obs::infer_schema, m)?)?;
    m.add_function(wrap_pyfunction!(obs::parse_schema, m)?)?;
    m.add_function(wrap_pyfunction!(obs::schema_json, m)?)?;
    m.add_function(wrap_pyfunction!(obs::encode_frame, m)?)?;
    m.add_function(wrap_pyfunction!(obs::obs_fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(obs::cache_root, m)?)?;
    m.add_function(wrap_pyfunction!(obs::column_file_name, m)?)?;
    m.add_function(wrap_pyfunction!(obs::encode_var_table, m)?)?;
    m.add_function(wrap_pyfunction!(report::dataset_report, m)?)?;
    m.add_function(wrap_pyfunction!(convert::resolve_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(convert::natural_cmp, m)?)?;
    m.add_function(wrap_pyfunction!(convert::convert, m)?)?;
    m.add_function(wrap_pyfunction!(convert::make_plan, m)?)?;
    m.add_function(wrap_pyfunction!(convert::scan_part, m)?)?;
    m.add_function(wrap_pyfunction!(convert::run_part, m)?)?;
    m.add_function(wrap_pyfunction!(convert::finalize, m)?)?;
    m.add_function(wrap_pyfunction!(convert::plan_info, m)?)?;
    m.add_function(wrap_pyfunction!(convert::subset, m)?)?;
    m.add_function(wrap_pyfunction!(convert::align_corpus, m)?)?;
    m.add_function(wrap_pyfunction!(convert::append, m)?)?;
    m.add_function(wrap_pyfunction!(convert::merge, m)?)?;
    m.add_function(wrap_pyfunction!(cli::run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(cli::version, m)?)?;
    m.add_function(wrap_pyfunction!(backend::stop_backend_calls, m)?)?;
    Ok(())
}
