//! Where deltacells bytes meet storage: local directories and cloud object stores behind one request layer.
//!
//! Every request of the dataset reader and writer, the verifier, the obs cache and the converter goes through a
//! [`Store`]: retried with backoff ([`RetryPolicy`]), checked for bodies of the wrong length, capped in flight
//! ([`Store::max_requests`]), and failed with a [`StoreError`] that names the object. This is the only crate that
//! speaks to [`object_store`](https://docs.rs/object_store) directly.
//!
//! | location | backend | feature |
//! |---|---|---|
//! | a plain path, `file:///abs/path` | the local file system (always available) | — |
//! | `s3://bucket/prefix`, `s3a://`, `https://s3.<region>.amazonaws.com/bucket/...` | Amazon S3 and compatible | `aws` |
//! | `gs://bucket/prefix` | Google Cloud Storage | `gcp` |
//! | `az://container/prefix`, `abfs://`, `abfss://`, `adl://`, `azure://`, `https://<acct>.blob.core.windows.net/...` | Azure Blob Storage | `azure` |
//! | other `http://` and `https://` URLs | plain HTTP(S) with range GETs (WebDAV PUT for writing) | `http` |
//!
//! Cloud backends are configured from each cloud's standard environment variables (`AWS_*`, `GOOGLE_*`,
//! `AZURE_*`), then from the URL, then from [`StoreOptions::config`] (keys as `object_store` names them, e.g.
//! `aws_endpoint`, `aws_allow_http`, `google_service_account`, `azure_storage_account_name`; client keys such as
//! `allow_http` and `timeout` work for every backend; `max_requests` sets the request cap everywhere, and
//! `part_bytes` the size of the parts that large objects are read in).
//!
//! Local tiles are read through memory maps (by default; [`LocalReads`]): the decoder reads the page cache in
//! place. Writes are atomic on every backend ([`Store::put`]).
//!
//! Synchronous callers run requests on [`runtime`]'s runtimes; [`ReadSource`] puts any read-only source (a Python
//! object) behind a `Store`; the `testing` feature adds request-counting, fault-injecting and throttling layers.
//!
//! ```
//! use dct_store::{Store, StoreOptions};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::from_url(dir.path().to_str().unwrap(), &StoreOptions::default()).unwrap();
//! let got = dct_store::runtime::block_on(async move {
//!     store.put("tiles/tile_000000.dct", bytes::Bytes::from_static(b"bytes")).await?;
//!     store.get_limited("tiles/tile_000000.dct", 1 << 20).await
//! });
//! assert_eq!(&got.unwrap().unwrap()[..], b"bytes");
//! ```
//!
//! # Modules
//!
//! * `Store`: a location on a backend (local files, memory, S3, GCS, Azure, HTTP), opened by URL with
//!   `StoreOptions` and the `key=value` settings of `object_store`, plus `max_requests`. It is the one I/O layer
//!   every crate reads and writes objects through, and this is the only crate that names `object_store`.
//! * Retries: every request is retried (`RetryPolicy`, full-jitter exponential backoff) on transient failures and on
//!   bodies of the wrong length.
//! * Request cap: requests in flight are capped by `max_requests` (default 64), with one semaphore per backend
//!   shared by all its children.
//! * Sizes: an object is sized before any buffer is (`get_limited`, `get_exact`, and a bounded `get_tail` for
//!   footers).
//! * `parts.rs`: tiles larger than `part_bytes` (8 MiB on object storage) read as concurrent ranged GETs into one
//!   buffer, each part retried on its own, so one connection's bandwidth does not bound a tile's time.
//! * `mapped.rs`: local tiles, memory-mapped; this is the crate's only unsafe code.
//! * `StoreError`: what failed, the URL, the cause (once) and what to do; whether it is transient, and the attempts.
//! * `runtime`: the shared, fork-aware tokio runtime and `block_on`.
//! * `interrupt`: waits that an interactive caller (Python's Ctrl-C) can give up.
//! * `ReadSource`: a read-only backend implemented outside this crate, e.g. a Python object.
//! * Feature `testing`: the layers the tests and benchmarks share (`counted`, `faulty`, `throttled`); each
//!   implements `ObjectStore` through `object_store_layer!`, which writes the methods it passes on unchanged.
//! * Cloud backends are behind the features `aws`, `gcp`, `azure` and `http`.

#![deny(unsafe_code)] // allowed in `mapped` only (memory-mapping local tiles)

#[macro_use]
mod layer;
mod body;
mod cloud;
mod error;
mod get;
pub mod interrupt;
mod local;
mod mapped;
mod open;
mod parts;
mod retry;
pub mod runtime;
mod source;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod throttle;
mod write;

pub use error::StoreError;
pub use local::check_regular_file;
pub use open::{DEFAULT_MAX_REQUESTS, LocalReads, MAX_REQUESTS_KEY, StoreOptions};
pub use parts::{DEFAULT_PART_BYTES, PART_BYTES_KEY};
pub use retry::RetryPolicy;
pub use source::{ReadSource, SourceError};
pub use store::Store;
pub use throttle::{
    SIMULATE_JITTER_MS_KEY, SIMULATE_LATENCY_MS_KEY, SIMULATE_MB_PER_S_KEY, SIMULATE_SEED_KEY, Throttle, throttled,
};
pub use write::ObjectInfo;
