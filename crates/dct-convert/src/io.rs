//! Blocking access to the output store for the converter (a small tokio runtime of its own).

use std::future::Future;

use bytes::Bytes;
use dct_dataset::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use dct_dataset::{DatasetError, Store, StoreOptions};
use futures::TryStreamExt;

use crate::error::ConvertError;

/// The output dataset's store, with blocking get/put/delete.
pub(crate) struct Output {
    pub(crate) store: Store,
    rt: tokio::runtime::Runtime,
}

impl Output {
    pub(crate) fn open(url: &str, options: &StoreOptions) -> Result<Output, ConvertError> {
        let store = Store::from_url(url, options)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("dct-convert-io")
            .enable_all()
            .build()
            .map_err(|e| ConvertError::Output(format!("cannot start I/O threads: {e}")))?;
        Ok(Output { store, rt })
    }

    /// The whole object at `rel`, or `None` if it does not exist.
    pub(crate) fn get(&self, rel: &str) -> Result<Option<Bytes>, ConvertError> {
        let (os, path) = (self.store.object_store().clone(), self.store.path(rel));
        let result = self.rt.block_on(async move {
            match os.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(dct_dataset::object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        result.map_err(|e| store_error("GET", self.store.url(rel), e).into())
    }

    /// Puts `bytes` at `rel` atomically (local files: temporary file, then rename).
    pub(crate) fn put(&self, rel: &str, bytes: Bytes) -> Result<(), ConvertError> {
        let (os, path) = (self.store.object_store().clone(), self.store.path(rel));
        let result = self.rt.block_on(async move { os.put(&path, PutPayload::from_bytes(bytes)).await });
        result.map(|_| ()).map_err(|e| store_error("PUT", self.store.url(rel), e).into())
    }

    /// Runs `f` on the output's I/O threads and waits for it.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Deletes every object under the folder `rel` (e.g. `obs`), if any.
    pub(crate) fn delete_prefix(&self, rel: &str) -> Result<(), ConvertError> {
        let (os, prefix) = (self.store.object_store().clone(), self.store.path(rel));
        let result = self.rt.block_on(async move {
            let listed: Vec<_> = match os.list(Some(&prefix)).try_collect().await {
                Ok(l) => l,
                Err(dct_dataset::object_store::Error::NotFound { .. }) => Vec::new(),
                Err(e) => return Err(e),
            };
            for meta in listed {
                match os.delete(&meta.location).await {
                    Ok(()) | Err(dct_dataset::object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        result.map_err(|e| store_error("DELETE", self.store.url(rel), e).into())
    }

    /// Deletes `rel` if it exists.
    pub(crate) fn delete(&self, rel: &str) -> Result<(), ConvertError> {
        let (os, path) = (self.store.object_store().clone(), self.store.path(rel));
        let result = self.rt.block_on(async move { os.delete(&path).await });
        match result {
            Ok(()) | Err(dct_dataset::object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error("DELETE", self.store.url(rel), e).into()),
        }
    }
}

fn store_error(operation: &'static str, url: String, e: dct_dataset::object_store::Error) -> DatasetError {
    DatasetError::Store { operation, url, source: std::sync::Arc::new(e) }
}
