//! Appending cells to a dataset without re-encoding what is written (see [`append`]).

mod commit;
mod obs;
mod record;
mod runner;
mod site;
mod stage;

use std::path::PathBuf;

use bytes::Bytes;
use dct_codec::Preset;
use dct_dataset::manifest::{APPEND_JOURNAL_NAME, APPEND_STAGING_DIR, MANIFEST_NAME};
use dct_dataset::{Manifest, StoreOptions};
use dct_input::H5adMatrix;
use dct_store::Store;
use serde_json::Value;

use commit::commit;
pub(crate) use obs::merge_schemas;
pub use record::{AppendJournal, AppendRequest, AppendedInput};
pub use runner::AppendRunner;
use runner::RunningHere;
use site::{BASE_MANIFEST, Site};
use stage::stage;

use crate::error::ConvertError;
use crate::io::Output;
use record::{digest_input, earlier_input, earlier_same, recorded_appends};

/// How to append.
#[derive(Debug, Clone)]
pub struct AppendOptions {
    /// Match the inputs' genes to the dataset's by this gene-table column (e.g. `gene_ids`); `None`: by name.
    pub gene_key: Option<String>,
    /// Drop genes the dataset lacks (their counts are lost; the report counts them) instead of refusing them.
    pub drop_new_genes: bool,
    /// Append inputs an earlier append already added (their cells then appear twice).
    pub allow_repeat: bool,
    /// zstd level of the new tiles (default: the dataset's, else 19).
    pub level: Option<i32>,
    /// How the zstd parameters follow from the level.
    pub preset: Preset,
    /// Which matrix of `.h5ad` inputs.
    pub matrix: H5adMatrix,
    /// Feature type kept from 10x inputs (default `Gene Expression`).
    pub feature_type: Option<String>,
    /// Obs columns of the inputs left out.
    pub obs_exclude: Vec<String>,
    /// Threads encoding tiles (0: every core).
    pub threads: usize,
    /// Backends of the dataset.
    pub store: StoreOptions,
    /// Stop with an error after staging this many new tiles (tests of interrupted appends; `None` normally).
    pub stop_after_tiles: Option<usize>,
    /// Stop with an error after this many objects of the commit are in place (tests; `None` normally).
    pub stop_after_commit_steps: Option<usize>,
}

impl Default for AppendOptions {
    fn default() -> Self {
        AppendOptions {
            gene_key: None,
            drop_new_genes: false,
            allow_repeat: false,
            level: None,
            preset: Preset::default(),
            matrix: H5adMatrix::X,
            feature_type: Some("Gene Expression".into()),
            obs_exclude: Vec::new(),
            threads: 0,
            store: StoreOptions::default(),
            stop_after_tiles: None,
            stop_after_commit_steps: None,
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendReport {
    /// Whether the dataset already held this append (nothing was written).
    pub already_appended: bool,
    /// Whether this run completed an append that had stopped.
    pub resumed: bool,
    /// Cells added.
    pub cells_added: u64,
    /// The dataset's cells after the append.
    pub n_cells: u64,
    /// The dataset's tiles after the append.
    pub n_tiles: usize,
    /// The partial last tile encoded again with the first new cells, if there was one.
    pub tile_rewritten: Option<usize>,
    /// New tile objects.
    pub tiles_added: usize,
    /// Obs shards written (rewritten or new).
    pub obs_shards_written: Vec<usize>,
    /// Why every obs shard was rewritten, if it was (a column added, codes or values widened).
    pub obs_rewrite_reasons: Vec<String>,
    /// Genes of the inputs the dataset lacks, dropped (`--drop-new-genes`): how many, and the first few.
    pub genes_dropped: usize,
    /// Up to 10 of the dropped genes.
    pub genes_dropped_examples: Vec<String>,
    /// Bytes of the new and rewritten tiles.
    pub tile_bytes_written: u64,
    /// The record added to the manifest's `metadata.appends` (or the earlier one, if already appended).
    pub record: Value,
}

impl AppendReport {
    /// The report as JSON (what `deltacells append --json` prints and Python's `AppendReport` holds).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "already_appended": self.already_appended,
            "resumed": self.resumed,
            "cells_added": self.cells_added,
            "n_cells": self.n_cells,
            "n_tiles": self.n_tiles,
            "tile_rewritten": self.tile_rewritten,
            "tiles_added": self.tiles_added,
            "tile_bytes_written": self.tile_bytes_written,
            "obs_shards_written": self.obs_shards_written,
            "obs_rewrite_reasons": self.obs_rewrite_reasons,
            "genes_dropped": self.genes_dropped,
            "genes_dropped_examples": self.genes_dropped_examples,
            "record": self.record,
        })
    }
}

/// Appends the cells of `inputs` to the dataset at `dataset` without re-encoding what is written: the inputs are
/// converted into the dataset's genes (matched by the same gene key) and tile grid, every full tile is left as it
/// is, and only the partial last tile is encoded again, with the first new cells.
///
/// # How it stays safe
///
/// Nothing in the dataset changes until everything new is staged under `append-staging/`:
///
/// 1. The journal `append-in-progress.json` is created at the dataset's root, only if none is there (a second append
///    is refused while one is under way or interrupted; running the interrupted one again completes it).
/// 2. The manifest, the partial last tile and the obs shards the append rewrites are copied into the staging folder
///    (server-side copies, or hard links on local files): a run that stopped after the dataset began to change
///    starts again from these.
/// 3. The inputs are converted there by the converter's own plan and parts, in the dataset's tile grid (the first
///    new tile holds as many cells as the partial last tile lacks), the joined last tile is encoded, and the obs
///    shards the new tiles join are written.
/// 4. Commit: the new tiles and shards are copied into place (names past the dataset's tiles are invisible to its
///    readers until the manifest names them), then the joined last tile, then `obs/schema.json`, then the manifest,
///    last; then the staging folder and the journal go.
///
/// A reader that opened the dataset before the append and reads the rewritten last tile gets
/// [`DatasetError::Changed`](dct_dataset::DatasetError::Changed), never the new tile's rows.
pub fn append(dataset: &str, inputs: &[PathBuf], opts: &AppendOptions) -> Result<AppendReport, ConvertError> {
    let store = Store::from_url(dataset, &opts.store)?;
    append_to(store, inputs, opts)
}

/// [`append`] to the dataset at `store` (every object of the dataset is read and written through it).
pub fn append_to(store: Store, inputs: &[PathBuf], opts: &AppendOptions) -> Result<AppendReport, ConvertError> {
    let url = store.root().to_string();
    let site = Site {
        staging: Output { store: store.child(APPEND_STAGING_DIR.trim_end_matches('/')) },
        out: Output { store: store.clone() },
        base_shards: 0,
    };
    let Some(current) = site.out.get(MANIFEST_NAME)? else {
        return Err(ConvertError::Inputs(format!(
            "there is no dataset at {url} (no manifest.json): append adds cells to a dataset; make one with \
             deltacells convert"
        )));
    };
    let current = Manifest::from_json(&current)
        .map_err(|cause| dct_dataset::DatasetError::Manifest { url: store.url(MANIFEST_NAME), cause })?;
    if inputs.is_empty() {
        return Err(ConvertError::Inputs("no input given to append".into()));
    }

    // The request: what the inputs are (by content) and the options that change what is written.
    let level = opts.level.unwrap_or_else(|| current.zstd_level.map_or(19, |l| l as i32));
    let mut request = AppendRequest {
        inputs: inputs
            .iter()
            .map(|p| {
                let (size_bytes, sha256) = digest_input(p)?;
                Ok(AppendedInput { path: p.display().to_string(), size_bytes, sha256, n_cells: 0 })
            })
            .collect::<Result<_, ConvertError>>()?,
        gene_key: opts.gene_key.clone(),
        drop_new_genes: opts.drop_new_genes,
        matrix: opts.matrix.to_string(),
        level,
    };

    // The journal: take it, or find this same append interrupted.
    let journal = site.journal()?;
    if let Some(journal) = &journal
        && let Some(runner) = &journal.runner
        && runner.is_running(&url)
    {
        return Err(ConvertError::Output(format!(
            "{url}: {} is running now (process {} on this machine): an append runs alone; wait for it to end. \
             Nothing was written.",
            journal.describe(),
            runner.pid
        )));
    }
    // From here on, this process's other threads see this append as running.
    let _running = RunningHere::new(&url);
    let (base, resumed) = match journal {
        Some(journal) => {
            let base = match site.staging.get(BASE_MANIFEST)? {
                Some(b) => Manifest::from_json(&b).map_err(|cause| dct_dataset::DatasetError::Manifest {
                    url: site.staging.store.url(BASE_MANIFEST),
                    cause,
                })?,
                None => current.clone(),
            };
            // The manifest's last record is this append's (the journal's id, and this request onto its first
            // cell): only the clean-up was left, perhaps with the staging, and the base manifest in it, gone.
            if let Some(last) = recorded_appends(&current.metadata).into_iter().last() {
                let first_cell = last.get("first_cell").and_then(Value::as_u64);
                if last.get("id").and_then(Value::as_str) == Some(journal.id.as_str())
                    && first_cell.is_some_and(|c| request.id(c) == journal.id)
                {
                    site.clear()?;
                    return Ok(done_report(&current, last, false, true));
                }
            }
            if journal.id != request.id(base.n_cells) {
                return Err(ConvertError::Output(format!(
                    "{url}: {} is under way or was interrupted ({}): an append runs alone; if it stopped, run it \
                     again to complete it. Nothing was written.",
                    journal.describe(),
                    store.url(APPEND_JOURNAL_NAME)
                )));
            }
            if current != base {
                // The manifest was written: only the clean-up was left.
                let record = recorded_appends(&current.metadata).into_iter().last().unwrap_or(Value::Null);
                site.clear()?;
                return Ok(done_report(&current, record, false, true));
            }
            (base, true)
        }
        None => {
            let records = recorded_appends(&current.metadata);
            if !opts.allow_repeat {
                if let Some(record) = earlier_same(&records, &request) {
                    tidy_staging(&site, AppendJournal::new(request.id(current.n_cells), request.clone()))?;
                    return Ok(done_report(&current, record, true, false));
                }
                if let Some((path, earlier, time)) = earlier_input(&records, &request) {
                    return Err(ConvertError::Inputs(format!(
                        "{path} was appended to {url} already (as {earlier}, {time}): appending it again would hold \
                         its cells twice; pass --allow-repeat (allow_repeat=True) to do it on purpose. Nothing was \
                         written."
                    )));
                }
            }
            let journal = AppendJournal::new(request.id(current.n_cells), request.clone());
            let bytes = Bytes::from(serde_json::to_vec_pretty(&journal).expect("json"));
            if !site.out.block_on(store.put_if_absent(APPEND_JOURNAL_NAME, bytes))?? {
                let other = site.journal()?.map_or_else(|| "another append".into(), |j| j.describe());
                return Err(ConvertError::Output(format!(
                    "{url}: {other} started at the same time: an append runs alone. Nothing was written."
                )));
            }
            // Any staging left by an append that was refused or failed before its journal is stale.
            site.staging.delete_prefix("")?;
            (current, false)
        }
    };
    let site = Site { base_shards: if base.has_obs { base.obs.shard_bytes.len() } else { 0 }, ..site };
    let staged = match stage(&site, &base, &mut request, opts, level, resumed) {
        Ok(staged) => staged,
        Err(e) => {
            if !resumed && opts.stop_after_tiles.is_none() {
                // Nothing of the dataset changed: leave nothing behind either.
                let _ = site.clear();
            }
            return Err(e);
        }
    };
    commit(&site, staged, opts, resumed)
}

/// The report of an append found complete (nothing written now).
fn done_report(m: &Manifest, record: Value, already: bool, resumed: bool) -> AppendReport {
    AppendReport {
        already_appended: already,
        resumed,
        cells_added: record.get("n_cells").and_then(Value::as_u64).unwrap_or(0),
        n_cells: m.n_cells,
        n_tiles: m.tile_cells.len(),
        tile_rewritten: None,
        tiles_added: 0,
        obs_shards_written: Vec::new(),
        obs_rewrite_reasons: Vec::new(),
        genes_dropped: 0,
        genes_dropped_examples: Vec::new(),
        tile_bytes_written: 0,
        record,
    }
}

/// Removes a staging folder that a failed or refused run left behind, under a journal of its own (so that no
/// append starting meanwhile has its staging removed), if no append holds the journal.
fn tidy_staging(site: &Site, journal: AppendJournal) -> Result<(), ConvertError> {
    if site.out.block_on(site.staging.store.list(""))??.is_empty() {
        return Ok(());
    }
    let bytes = Bytes::from(serde_json::to_vec_pretty(&journal).expect("json"));
    if site.out.block_on(site.out.store.put_if_absent(APPEND_JOURNAL_NAME, bytes))?? {
        site.clear()?;
    }
    Ok(())
}
