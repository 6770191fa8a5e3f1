//! Opening a [`Dataset`]: `manifest.json` fetched and validated once, then the reader's state built around it;
//! [`Dataset::reopened`] builds another reader on the same manifest without fetching it again.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};

use dct_store::runtime::Runtime as Rt;
use dct_store::{Store, StoreError};
use tokio::sync::Semaphore;

use super::cache::Cache;
use super::load::DecodeScratch;
use super::options::Counters;
use super::{Core, Dataset, ReadOptions};
use crate::error::{Category, DatasetError, ManifestError};
use crate::manifest::{MANIFEST_NAME, Manifest};
use crate::rt::{check_threads, default_threads};

/// Spare buffers of decoded tiles kept for reuse: a tile evicted to make room for a decode hands its buffers to
/// that decode, so a few cover the background decoder and a read decoding at the same time. Tiles prefetched
/// ahead wait compressed and take no spare buffer.
pub(super) const MAX_SPARE: usize = 2;

/// Threads readers run on: an I/O runtime, a decode pool, and the buffers of decoded tiles and the decoders they
/// share. Readers opened on one set ([`Dataset::open_on`]) run requests on its runtime and decode on its pool, and
/// reuse each other's tile buffers; the threads live as long as a reader or a clone of this does.
#[derive(Clone)]
pub struct ReaderThreads {
    rt: Arc<Rt>,
    pool: Arc<rayon::ThreadPool>,
    scratch: Arc<DecodeScratch>,
}

impl std::fmt::Debug for ReaderThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderThreads").field("decode_threads", &self.pool.current_num_threads()).finish()
    }
}

impl ReaderThreads {
    /// `io_threads` threads for requests and `decode_threads` (0: the default) for decoding.
    pub fn new(io_threads: usize, decode_threads: usize) -> Result<Self, DatasetError> {
        check_threads("io_threads", io_threads)?;
        check_threads("decode_threads", decode_threads)?;
        let rt = Arc::new(Rt::new(io_threads, "dct-io")?);
        let decode_threads = if decode_threads == 0 { default_threads() } else { decode_threads };
        let pool = Arc::new(crate::rt::pool(decode_threads, "dct-decode")?);
        Ok(ReaderThreads { rt, pool, scratch: Arc::default() })
    }
}

impl Dataset {
    /// Opens the dataset at `url` (a local path, `file://`, `s3://`, `gs://`, `az://`, `http(s)://`; see
    /// [`dct_store`]): reads and validates `manifest.json`. Tiles are fetched when needed.
    pub fn open(url: &str, options: ReadOptions) -> Result<Dataset, DatasetError> {
        let store = Store::from_url(url, &options.store)?;
        Dataset::open_store(store, options)
    }

    /// Opens the dataset at a [`Store`] (e.g. an in-memory store, or one with test layers); the store's own
    /// retries and request cap apply (`options.store` is not used).
    pub fn open_store(store: Store, options: ReadOptions) -> Result<Dataset, DatasetError> {
        check_threads("io_threads", options.io_threads)?;
        check_threads("decode_threads", options.decode_threads)?;
        let rt = Rt::new(options.io_threads, "dct-io")?;
        let manifest = fetch_manifest(&rt, &store, options.max_manifest_bytes)?;
        let decode_threads = if options.decode_threads == 0 { default_threads() } else { options.decode_threads };
        let pool = Arc::new(crate::rt::pool(decode_threads, "dct-decode")?);
        Dataset::from_parts(store, manifest, Arc::new(rt), pool, Arc::default(), &options)
    }

    /// [`Dataset::open`] on `threads` (an I/O runtime, a decode pool and the buffers of decoded tiles) rather than
    /// threads of its own: for a caller opening many datasets side by side (a corpus of hundreds of members),
    /// whose threads would otherwise grow by a runtime and a decode pool per dataset. `options.io_threads` and
    /// `options.decode_threads` are not used.
    pub fn open_on(url: &str, options: ReadOptions, threads: &ReaderThreads) -> Result<Dataset, DatasetError> {
        let store = Store::from_url(url, &options.store)?;
        Dataset::open_store_on(store, options, threads)
    }

    /// [`Dataset::open_store`] on `threads`, as [`Dataset::open_on`].
    pub fn open_store_on(store: Store, options: ReadOptions, threads: &ReaderThreads) -> Result<Dataset, DatasetError> {
        let manifest = fetch_manifest(&threads.rt, &store, options.max_manifest_bytes)?;
        let ReaderThreads { rt, pool, scratch } = threads.clone();
        Dataset::from_parts(store, manifest, rt, pool, scratch, &options)
    }

    /// The threads this reader runs on, for other readers to open on ([`Dataset::open_on`]).
    pub fn threads(&self) -> ReaderThreads {
        ReaderThreads { rt: self.rt.clone(), pool: self.core.pool.clone(), scratch: self.core.scratch.clone() }
    }

    /// Another reader of this dataset with other `options` (cache, prefetch, threads, CRC checks), on the same
    /// store and manifest: nothing is fetched, so it costs no request. A caller that sizes the cache from the
    /// manifest (tiles' nonzeros against a memory budget) opens once, reads the manifest, and reopens with the
    /// sizes, instead of paying the manifest's round trip twice. The new reader has its own cache and counters;
    /// `options.store` and `options.max_manifest_bytes` are not used.
    pub fn reopened(&self, options: ReadOptions) -> Result<Dataset, DatasetError> {
        check_threads("io_threads", options.io_threads)?;
        check_threads("decode_threads", options.decode_threads)?;
        let rt = Rt::new(options.io_threads, "dct-io")?;
        let decode_threads = if options.decode_threads == 0 { default_threads() } else { options.decode_threads };
        let pool = Arc::new(crate::rt::pool(decode_threads, "dct-decode")?);
        let scratch = Arc::default();
        Dataset::from_parts(self.core.store.clone(), self.core.manifest.clone(), Arc::new(rt), pool, scratch, &options)
    }

    /// [`Dataset::reopened`] with the I/O runtime and the decode threads of `threads_of` (another dataset's
    /// reader, or this one's) instead of threads of its own: for a caller reading many datasets side by side (a
    /// corpus), whose threads would otherwise grow with the number of datasets. The readers also share their
    /// decoders and the buffers of decoded tiles, so that memory one leaves is reused by the next decode of any.
    /// `options.io_threads` and `options.decode_threads` are not used.
    pub fn reopened_sharing(&self, options: ReadOptions, threads_of: &Dataset) -> Result<Dataset, DatasetError> {
        Dataset::from_parts(
            self.core.store.clone(),
            self.core.manifest.clone(),
            threads_of.rt.clone(),
            threads_of.core.pool.clone(),
            threads_of.core.scratch.clone(),
            &options,
        )
    }

    fn from_parts(
        store: Store,
        manifest: Manifest,
        rt: Arc<Rt>,
        pool: Arc<rayon::ThreadPool>,
        scratch: Arc<DecodeScratch>,
        options: &ReadOptions,
    ) -> Result<Dataset, DatasetError> {
        let decode_threads = pool.current_num_threads();
        let core = Core {
            index: manifest.cell_index(),
            manifest,
            store,
            pool,
            decode_threads,
            verify_crc: options.verify_crc,
            max_cached: options.max_cached_tiles,
            max_side_file_bytes: options.max_side_file_bytes,
            cache: Mutex::new(Cache::default()),
            scratch,
            max_spare: MAX_SPARE,
            prefetch_sem: Arc::new(Semaphore::new(options.max_prefetch_tiles.max(1))),
            to_decode: Mutex::new(BTreeMap::new()),
            decoding_in_background: AtomicBool::new(false),
            busy_readers: Mutex::new(0),
            readers_done: Condvar::new(),
            counters: Counters::default(),
            handle: rt.handle().clone(),
            var_names: Mutex::new(None),
            gene_order: Mutex::new(None),
        };
        Ok(Dataset { core: Arc::new(core), rt })
    }
}

/// `manifest.json` of `store`, at most `limit` bytes, parsed and validated.
fn fetch_manifest(rt: &Rt, store: &Store, limit: u64) -> Result<Manifest, DatasetError> {
    let s = store.clone();
    let got = rt.block_on(async move { s.get_limited(MANIFEST_NAME, limit).await })?;
    let url = store.url(MANIFEST_NAME);
    let manifest_err = |category, message: String| DatasetError::Manifest {
        url: url.clone(),
        cause: ManifestError::new(category, None, message),
    };
    let bytes = match got {
        Ok(b) => b,
        Err(StoreError::NotFound { .. }) => {
            return Err(manifest_err(
                Category::ManifestMissing,
                "there is no manifest.json: this is not a deltacells dataset, or its writer did not finish \
                 (the manifest is written last)"
                    .into(),
            ));
        }
        Err(StoreError::TooLarge { size: n, .. }) => {
            return Err(manifest_err(
                Category::ManifestInvalid,
                format!(
                    "manifest.json is {n} bytes, more than the limit of {limit} (ReadOptions::max_manifest_bytes): \
                     not a manifest, or raise the limit"
                ),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    Manifest::from_json(&bytes).map_err(|source| DatasetError::Manifest { url, cause: source })
}
