//! Where an append works: the dataset's store, its staging folder and its journal.

use dct_dataset::manifest::{APPEND_JOURNAL_NAME, APPEND_STAGING_DIR};

use super::record::AppendJournal;
use crate::error::ConvertError;
use crate::io::Output;

/// The dataset's manifest when the append started, kept in the staging folder.
pub(super) const BASE_MANIFEST: &str = "base-manifest.json";
/// A copy of the dataset's partial last tile, kept in the staging folder.
pub(super) const BASE_LAST_TILE: &str = "base-last-tile.dct";
/// The last tile joined with the first new cells, in the staging folder.
pub(super) const JOINED_TILE: &str = "joined-last-tile.dct";

/// Where an append stands for the dataset: the journal, the staging folder and the dataset's store.
pub(super) struct Site {
    pub(super) out: Output,
    pub(super) staging: Output,
    /// Obs shards of the dataset when the append started (shards from here on are new names).
    pub(super) base_shards: usize,
}

impl Site {
    pub(super) fn journal(&self) -> Result<Option<AppendJournal>, ConvertError> {
        match self.out.get(APPEND_JOURNAL_NAME)? {
            Some(bytes) => AppendJournal::parse(&bytes, &self.out.store.url(APPEND_JOURNAL_NAME)).map(Some),
            None => Ok(None),
        }
    }

    /// Copies `rel` of the dataset to `name` in the staging folder once (a later run keeps the first copy: the
    /// dataset's object may have been replaced since).
    pub(super) fn keep_base(&self, rel: &str, name: &str) -> Result<(), ConvertError> {
        if self.out.block_on(self.staging.store.exists(name))?? {
            return Ok(());
        }
        let to = format!("{}{name}", APPEND_STAGING_DIR);
        Ok(self.out.block_on(self.out.store.copy(rel, &to))??)
    }

    /// Removes the staging folder and temporary files that writes of an interrupted run left (an append runs
    /// alone), then the journal.
    pub(super) fn clear(&self) -> Result<(), ConvertError> {
        // The objects, and locally the emptied folder too.
        self.out.delete_prefix(APPEND_STAGING_DIR.trim_end_matches('/'))?;
        self.out.block_on(self.out.store.remove_leftovers("", dct_format::objects::is_dataset_object))??;
        self.out.delete(APPEND_JOURNAL_NAME)
    }
}
