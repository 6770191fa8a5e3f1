//! Committing a staged append: new names first (invisible to readers until the manifest names them), then the
//! objects readers know, then the manifest, last; each step can be repeated by a run that completes a stopped one.

use bytes::Bytes;
use dct_dataset::manifest::{APPEND_STAGING_DIR, MANIFEST_NAME, OBS_SCHEMA_NAME, obs_shard_path, tile_path};

use super::site::{JOINED_TILE, Site};
use super::stage::Staged;
use super::{AppendOptions, AppendReport};
use crate::error::ConvertError;

/// Moves a staged append into place (see [`append`](super::append)). `resumed`: a run that stopped may have moved
/// some objects already.
pub(super) fn commit(
    site: &Site,
    staged: Staged,
    opts: &AppendOptions,
    resumed: bool,
) -> Result<AppendReport, ConvertError> {
    let Staged { n_staged, lead, first_changed, n_base_tiles, obs_written, schema_json, after, report } = staged;
    let base_shards = site.base_shards;
    let url = site.out.store.root();
    let mut steps = 0usize;
    let manifest_written = std::cell::Cell::new(false);
    let mut step = |f: &dyn Fn() -> Result<(), ConvertError>| -> Result<(), ConvertError> {
        let done = if opts.stop_after_commit_steps.is_some_and(|n| steps >= n) {
            Err(ConvertError::Output(format!("stopped after {steps} commit steps, as asked")))
        } else {
            f()
        };
        steps += 1;
        done.map_err(|e| {
            ConvertError::Output(if manifest_written.get() {
                format!(
                    "{url}: the append is complete (readers see the new cells), but its staging could not be \
                     removed ({e}); another append is refused until it is: run the same append again (where \
                     objects may be deleted) to remove it"
                )
            } else {
                format!(
                    "{url}: the append stopped while moving its tiles into place ({e}); run the same append again \
                     to complete it (readers see an error, never wrong rows, until then)"
                )
            })
        })
    };
    let move_in = |from: String, to: String| {
        let store = site.out.store.clone();
        move || -> Result<(), ConvertError> {
            let from = format!("{APPEND_STAGING_DIR}{from}");
            if resumed && site.out.get(&to)?.is_some_and(|there| site.out.get(&from).ok().flatten() == Some(there)) {
                // Moved in by the run that stopped. (Copying a local file onto a hard link of itself would
                // leave the copy's temporary link behind: POSIX renames do nothing between links of one file.)
                return Ok(());
            }
            Ok(dct_store::runtime::block_on_here(store.copy(&from, &to))??)
        }
    };
    for j in usize::from(lead > 0)..n_staged {
        step(&move_in(tile_path(j), tile_path(first_changed + j)))?;
    }
    for &s in &obs_written {
        if s >= base_shards {
            step(&move_in(obs_shard_path(s), obs_shard_path(s)))?;
        }
    }
    // From here readers of the dataset as it was may see a changed object (and get a typed error).
    for &s in &obs_written {
        if s < base_shards {
            step(&move_in(obs_shard_path(s), obs_shard_path(s)))?;
        }
    }
    if let Some(text) = &schema_json {
        step(&|| site.out.put(OBS_SCHEMA_NAME, Bytes::from(text.clone())))?;
    }
    if lead > 0 {
        step(&move_in(JOINED_TILE.into(), tile_path(n_base_tiles - 1)))?;
    }
    step(&|| site.out.put(MANIFEST_NAME, Bytes::from(after.to_json_pretty())))?;
    manifest_written.set(true);
    step(&|| site.clear())?;

    Ok(report)
}
