//! deltacells datasets: the manifest, where datasets live (local directories and cloud buckets), a
//! random-access reader, a verifier and a writer.
//!
//! A dataset is a directory (or bucket prefix) holding `manifest.json`, one object per tile
//! (`tiles/tile_NNNNNN.dct`) and optional side files (`gene_order.npy`, `var_names.txt`, `var.parquet`, `obs/`);
//! see FORMAT-v2.md.
//!
//! * [`Manifest`]: typed model of `manifest.json`, validation with [`Category`]-classified errors.
//! * [`Store`] (from `dct-store`): a local path or `file://`, `s3://`, `gs://`, `az://`/`abfs://`, `http(s)://`
//!   URL (cloud backends behind the cargo features `aws`, `gcp`, `azure`, `http`, all off by default), through
//!   which every request is made, retried and capped.
//! * [`Dataset`]: open, read any cells as CSR batches, prefetch, cache, counters.
//! * [`verify`]: check every tile, side file and obs shard, reporting every problem.
//! * `Dataset::obs` (feature `obs`): the per-cell metadata through `dct-obs` (localize columns, then take cells).
//! * [`EpochPlan`]: the batches of a training epoch for one rank and loader worker (tiles shuffled, cells shuffled
//!   within windows of consecutive tiles, equal shares per rank), the same in every process.
//! * [`DatasetWriter`]: append CSR blocks of any size, re-chunked into tiles encoded in parallel; the manifest
//!   is written last.
//!
//! # Cargo features
//!
//! | feature | enables |
//! |---|---|
//! | `aws` | `s3://`, `s3a://` and `https://…amazonaws.com` locations (Amazon S3 and S3-compatible stores) |
//! | `gcp` | `gs://` locations (Google Cloud Storage) |
//! | `azure` | `az://`, `abfs://`, `abfss://`, `adl://`, `azure://` and `https://…blob.core.windows.net` |
//! | `http` | other `http://` / `https://` locations (static files served with range GETs) |
//! | `cloud` | all four |
//! | `obs` (default) | `Dataset::obs`, and shard layout and fingerprint checks in `verify`, through `dct-obs` (parquet) |
//!
//! The cloud features are off by default, so a crate that only decodes tiles never compiles an HTTP client or TLS;
//! the deltacells CLI enables them. `obs` is on by default; a reader that needs only X can turn it off
//! (`default-features = false`) and compiles no parquet. Local paths and `file://` URLs always work.
//!
//! ```
//! # fn main() -> Result<(), dct_dataset::DatasetError> {
//! use dct_codec::CsrMatrix;
//! use dct_dataset::{Dataset, DatasetWriter, ReadOptions, SparseRows, WriterOptions};
//! let dir = tempfile::tempdir().unwrap();
//! let url = dir.path().join("ds");
//! let url = url.to_str().unwrap();
//! let mut w = DatasetWriter::create(url, WriterOptions { tile_size: 2, ..WriterOptions::new(4) })?;
//! // 3 cells x 4 genes, in a block of any size
//! w.append(&CsrMatrix { n_rows: 3, n_cols: 4, indptr: &[0u32, 2, 2, 3], indices: &[3u32, 0, 1], values: &[5u32, 1, 2] })?;
//! w.finish()?;
//! let ds = Dataset::open(url, ReadOptions::default())?;
//! assert_eq!(ds.n_tiles(), 2); // tiles of 2 cells and 1 cell
//! let b = ds.get_batch_as::<u32>(&[2, 0])?;
//! assert_eq!(b.row(0), (&[1][..], &[2][..]));
//! assert_eq!(b.row(1), (&[0, 3][..], &[1, 5][..])); // sorted by gene
//! # Ok(()) }
//! ```
//!
//! # Modules
//!
//! * `manifest.json`: parse, validate and write.
//! * Opening datasets by URL or `Store`; the cloud backends are behind the features `aws`, `gcp`, `azure` and
//!   `http`, passed on to `dct-store`.
//! * The writer, which re-blocks rows into tiles.
//! * `finish.rs`: the one way a dataset is finished, by the writer and the converter alike: `SideFiles` are checked
//!   as they are set, and `finish_dataset` stores them, then the manifest, last.
//! * `reader/`: the random-access reader.
//!   * `mod.rs`: the `Dataset` API and batch planning (cell → tile via `CellIndex`).
//!   * `open.rs`: opening (the manifest is fetched once) and `Dataset::reopened`.
//!   * `options.rs`: settings and counters.
//!   * `batch.rs`: the rows a read hands out.
//!   * `cache.rs`: the LRU of tiles kept as decompressed planes, and its eviction order (`Keepness`).
//!   * `load.rs`: the state shared with background tasks, and loading tiles (`Requester::Read` / `Prefetch`,
//!     `Keep::Decoded` / `Raw`).
//!   * `decode.rs`: decoding on the caller's threads or in the background, and buffer reuse.
//!   * `obs.rs`: the bridge to `dct-obs`.
//! * `side_files.rs`: `var_names.txt` and `gene_order.npy`: limits, parsing, and the permutation check shared by
//!   the reader, the verifier and the writer.
//! * `verify/`: the verifier, which reports every problem, not only the first.
//! * Feature `obs` (default): links `dct-obs` for obs verification and `Dataset::obs`.

#![forbid(unsafe_code)]

mod epoch;
mod error;
mod facts;
mod finish;
pub mod manifest;
pub mod npy;
mod reader;
mod rt;
mod side_files;
mod verify;
mod writer;
#[cfg(feature = "obs")]
mod writer_obs;
mod writer_options;

pub use dct_codec::{CountValue, CsrMatrix, SparseRows};
#[cfg(feature = "obs")]
pub use dct_obs;
pub use dct_store::{LocalReads, RetryPolicy, Store, StoreError, StoreOptions};
pub use epoch::{EpochOptions, EpochPlan, EpochUnit, PassOrder, Remainder, TileStrata};
pub use error::{Category, DatasetError, ManifestError, names_location};
pub use facts::dataset_facts;
pub use finish::{SideFiles, finish_dataset};
pub use manifest::{Manifest, ManifestSettings, ObsFields, TileStats};
pub use reader::{
    BATCH_BYTES_PER_CELL, BATCH_BYTES_PER_NONZERO, BATCH_SLOT_GRANULE, Batch, DECODED_BYTES_PER_NONZERO, Dataset,
    HeldBatches, PLAN_BYTES_ALWAYS_ALLOWED, PLAN_BYTES_PER_CELL, ReadOptions, ReadStats, ReaderThreads, SLOT_HEADER,
    SlotChooser, SlotFill, SlotLayout, SlotValue, TileBudget, batch_slot_bytes, read_into_slot,
};
pub use rt::MAX_THREADS;
pub use side_files::same_genes_in_another_order;
#[cfg(feature = "obs")]
pub use verify::obs_fingerprint;
pub use verify::{Problem, VerifyOptions, VerifyReport, verify, verify_url};
pub use writer::DatasetWriter;
pub use writer_options::{WriterOptions, check_encoder_settings};
