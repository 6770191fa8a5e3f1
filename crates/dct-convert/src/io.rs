//! The output dataset's store from the converter's synchronous code: every request through `dct-store` (retried,
//! capped, atomic PUTs), run on its process-wide runtime.

use std::future::Future;

use bytes::Bytes;
use dct_store::{Store, StoreError, StoreOptions};

use crate::error::ConvertError;

/// The largest object the converter reads back whole: a tile of an interrupted run (checked before resuming),
/// the plan marker or a manifest. Larger objects are not this converter's.
pub(crate) const MAX_READ_BACK_BYTES: u64 = 1 << 32;

/// The output dataset's store, with blocking requests.
pub(crate) struct Output {
    pub(crate) store: Store,
}

impl Output {
    pub(crate) fn open(url: &str, options: &StoreOptions) -> Result<Output, ConvertError> {
        Ok(Output { store: Store::from_url(url, options)? })
    }

    /// Runs `f` with the storage runtime's I/O and waits for it.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> Result<F::Output, ConvertError> {
        Ok(dct_store::runtime::block_on_here(f)?)
    }

    /// The whole object at `rel`, or `None` if it does not exist.
    pub(crate) fn get(&self, rel: &str) -> Result<Option<Bytes>, ConvertError> {
        match self.block_on(self.store.get_limited(rel, MAX_READ_BACK_BYTES))? {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Puts `bytes` at `rel` atomically.
    pub(crate) fn put(&self, rel: &str, bytes: Bytes) -> Result<(), ConvertError> {
        Ok(self.block_on(self.store.put(rel, bytes))??)
    }

    /// Deletes every object under the folder `rel` (e.g. `obs`), if any.
    pub(crate) fn delete_prefix(&self, rel: &str) -> Result<(), ConvertError> {
        self.block_on(self.store.delete_all(rel))??;
        Ok(())
    }

    /// Deletes `rel` if it exists.
    pub(crate) fn delete(&self, rel: &str) -> Result<(), ConvertError> {
        Ok(self.block_on(self.store.delete(rel))??)
    }
}
