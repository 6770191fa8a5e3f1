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
        if let Some(dir) = self.store.local_dir().filter(|_| !rel.is_empty()) {
            // Local files leave their emptied folders behind, which object stores do not have.
            let folder = dir.join(rel.trim_end_matches('/'));
            match std::fs::remove_dir_all(&folder) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(ConvertError::Io { path: folder.display().to_string(), cause: e });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Deletes `rel` if it exists.
    pub(crate) fn delete(&self, rel: &str) -> Result<(), ConvertError> {
        Ok(self.block_on(self.store.delete(rel))??)
    }
}

/// Refuses an output at the location of a dataset it is made from (`what`: "subset", "merge"): writing there
/// (with overwrite, clearing it first) would destroy the source while it is read. Local paths are compared as the
/// files they resolve to (`.`, `..`, symbolic links), URLs as written, without trailing slashes.
pub(crate) fn refuse_output_at_a_source(output: &str, sources: &[String], what: &str) -> Result<(), ConvertError> {
    let out = location_key(output);
    match sources.iter().find(|s| location_key(s) == out) {
        Some(source) => Err(ConvertError::Inputs(format!(
            "the output {output} is the dataset {source} that this {what} reads: write it to another location"
        ))),
        None => Ok(()),
    }
}

/// What `url` names, for comparing locations: a local path resolved (its deepest existing ancestor, with the rest
/// appended), or a URL without trailing slashes.
fn location_key(url: &str) -> String {
    let local = url.strip_prefix("file://").unwrap_or(url);
    if local.contains("://") {
        return url.trim_end_matches('/').to_string();
    }
    let path = std::path::absolute(local).unwrap_or_else(|_| std::path::PathBuf::from(local));
    let mut rest = Vec::new();
    let mut base = path.as_path();
    loop {
        if let Ok(resolved) = base.canonicalize() {
            let mut key = resolved;
            key.extend(rest.iter().rev());
            return key.to_string_lossy().into_owned();
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                base = parent;
            }
            _ => return path.to_string_lossy().into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_naming_a_source_in_another_spelling_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("ds");
        std::fs::create_dir(&source).unwrap();
        std::os::unix::fs::symlink(&source, dir.path().join("link")).unwrap();
        let sources = vec![source.to_string_lossy().into_owned()];
        let d = dir.path().to_string_lossy().into_owned();
        for same in [format!("{d}/ds"), format!("{d}/ds/"), format!("{d}/./ds"), format!("{d}/link")] {
            let got = refuse_output_at_a_source(&same, &sources, "subset").unwrap_err().to_string();
            assert!(got.contains("that this subset reads"), "{same}: {got}");
        }
        for other in [format!("{d}/ds2"), format!("{d}/ds/inner"), format!("{d}/new/ds"), d.clone()] {
            refuse_output_at_a_source(&other, &sources, "subset").unwrap();
        }
        let urls = vec!["s3://b/atlas/ds".to_string()];
        assert!(refuse_output_at_a_source("s3://b/atlas/ds/", &urls, "merge").is_err());
        refuse_output_at_a_source("s3://b/atlas/ds2", &urls, "merge").unwrap();
    }
}
