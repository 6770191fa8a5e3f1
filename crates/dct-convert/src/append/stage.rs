//! Staging an append: everything new is written under the staging folder, nothing of the dataset changes.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use dct_codec::{CanonicalCsr, EncodeOptions, encode_canonical};
use dct_corpus::{GeneKey, GeneSpace, Member, member_genes};
use dct_dataset::manifest::{MANIFEST_NAME, OBS_SCHEMA_NAME, obs_shard_path, tile_path};
use dct_dataset::{Dataset, Manifest, ReadOptions, TileStats};
use dct_obs::ObsSchema;
use serde_json::{Value, json};

use super::obs::{MergedObs, ObsAppend, merge_schemas};
use super::record::{AppendRequest, now_rfc3339, recorded_appends};
use super::site::{BASE_LAST_TILE, BASE_MANIFEST, JOINED_TILE, Site};
use super::{AppendOptions, AppendReport};
use crate::error::ConvertError;
use crate::options::{ConvertOptions, GeneSort};
use crate::output::{TileState, check_tile};
use crate::plan::{Plan, list_paths, make_plan_with_spill};
use crate::run::{RunOptions, run_part_in};
use crate::scan::reopen_matching_keys;
use crate::spill::{Spill, SpillOptions};

/// Everything an append stages, and what the commit needs to move it into place.
pub(super) struct Staged {
    /// Tiles of the plan, staged as `tiles/tile_NNNNNN.dct` (the first joins the last tile if `lead > 0`).
    pub(super) n_staged: usize,
    /// Cells of the dataset's partial last tile (0: it was full).
    pub(super) lead: u64,
    /// The first tile the append changes.
    pub(super) first_changed: usize,
    /// The dataset's tiles before the append.
    pub(super) n_base_tiles: usize,
    /// Obs shards written into the staging folder.
    pub(super) obs_written: Vec<usize>,
    /// The text of `obs/schema.json` after the append (`None`: no obs).
    pub(super) schema_json: Option<String>,
    /// The manifest after the append.
    pub(super) after: Manifest,
    /// The report, once committed.
    pub(super) report: AppendReport,
}

/// Stages the append: the dataset's genes and the inputs' checked, the plan, the new tiles, the joined last tile
/// and the obs shards, and the manifest after the append. Nothing of the dataset changes here.
pub(super) fn stage(
    site: &Site,
    base: &Manifest,
    request: &mut AppendRequest,
    opts: &AppendOptions,
    level: i32,
    resumed: bool,
) -> Result<Staged, ConvertError> {
    let url = site.out.store.root().to_string();
    site.staging.put(BASE_MANIFEST, Bytes::from(base.to_json_pretty()))?;
    let n_base_tiles = base.tile_cells.len();
    let last_cells = *base.tile_cells.last().unwrap_or(&0);
    let lead = if last_cells > 0 && last_cells < base.tile_size { last_cells } else { 0 };
    let first_changed = if lead > 0 { n_base_tiles - 1 } else { n_base_tiles };
    if lead > 0 {
        site.keep_base(&tile_path(n_base_tiles - 1), BASE_LAST_TILE)?;
    }

    // The dataset's genes, by the gene key; the inputs' genes it lacks are refused or dropped.
    let read = ReadOptions { store: opts.store.clone(), ..ReadOptions::default() };
    let ds = Dataset::open_store(site.out.store.clone(), read)?;
    let key = match &opts.gene_key {
        Some(c) => GeneKey::Column(c.clone()),
        None => GeneKey::VarNames,
    };
    let member = Member { name: url.clone(), dataset: Arc::new(ds) };
    let keys = member_genes(&member, &key).map_err(|e| ConvertError::Inputs(e.to_string()))?;
    let known: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let mut convert = ConvertOptions::new(site.staging.store.root());
    convert.matrix = opts.matrix.clone();
    convert.feature_type = opts.feature_type.clone();
    let input_options = convert.input_options();
    let mut dropped: Vec<String> = Vec::new();
    for input in &request.inputs {
        let theirs = reopen_matching_keys(&input.path, &input_options, opts.gene_key.as_deref())?;
        dropped.extend(theirs.into_iter().filter(|g| !known.contains(g.as_str())));
    }
    dropped.sort_unstable();
    dropped.dedup();
    if !dropped.is_empty() && !opts.drop_new_genes {
        let shown: Vec<String> = dropped.iter().take(20).map(|g| format!("{g:?}")).collect();
        return Err(ConvertError::Inputs(format!(
            "the inputs have {} genes that {url} lacks ({}{}): a dataset's genes are fixed; pass --drop-new-genes \
             (drop_new_genes=True) to drop them, check --gene-key, or convert everything with --genes union. \
             Nothing was written.",
            dropped.len(),
            shown.join(", "),
            if dropped.len() > shown.len() { ", ..." } else { "" }
        )));
    }

    // The plan: the inputs in the dataset's genes (in its order) and tile grid.
    convert.tile_size = base.tile_size;
    convert.level = level;
    convert.preset = opts.preset;
    convert.n_chunks = base.n_chunks.map_or(8, |n| n as usize).max(1);
    convert.gene_sort = GeneSort::Keep;
    convert.write_var = false;
    convert.obs_exclude = opts.obs_exclude.clone();
    convert.obs_tiles_per_file = if base.has_obs { base.obs.tiles_per_file } else { convert.obs_tiles_per_file };
    convert.format_version = dct_format::Version::from_number(base.version)
        .ok_or_else(|| ConvertError::Inputs(format!("{url}: format version {} is unknown", base.version)))?;
    convert.genes = Some(GeneSpace::Given(keys.clone()));
    convert.gene_key = opts.gene_key.clone();
    let spill = Spill::new(&SpillOptions::default())?;
    let paths: Vec<PathBuf> = request.inputs.iter().map(|i| PathBuf::from(&i.path)).collect();
    let plan = make_plan_with_spill(&paths, &convert, &spill).and_then(|p| p.with_lead_cells(lead))?;
    if plan.genes.as_ref().is_none_or(|g| g.keys != keys) {
        return Err(ConvertError::Output("the append's plan did not keep the dataset's gene order".into()));
    }
    for (input, planned) in request.inputs.iter_mut().zip(&plan.inputs) {
        input.n_cells = planned.n_cells;
    }
    if plan.n_cells == 0 {
        site.clear()?;
        let paths: Vec<&str> = plan.inputs.iter().map(|i| i.path.as_str()).collect();
        return Err(ConvertError::Inputs(format!("no cells in {}: nothing to append", list_paths(&paths))));
    }

    // Obs: the grown schema (conflicts refused before any tile is written) and the shards it rewrites.
    let base_schema = match base.has_obs {
        true => {
            let text = site.out.get(OBS_SCHEMA_NAME)?.ok_or_else(|| {
                ConvertError::Output(format!("{url}: the manifest says it has obs but obs/schema.json is missing"))
            })?;
            Some(
                ObsSchema::parse(&text, &site.out.store.url(OBS_SCHEMA_NAME))
                    .map_err(|e| ConvertError::Obs { context: url.clone(), cause: Box::new(e) })?,
            )
        }
        false => None,
    };
    let names: Vec<&str> = request.inputs.iter().map(|i| i.path.as_str()).collect();
    let merged: Option<MergedObs> =
        merge_schemas(base_schema.as_ref(), plan.obs_schema()?.as_ref(), "the dataset", &names.join(", "))?;

    // The new tiles, staged.
    let run_opts = RunOptions {
        threads: opts.threads,
        store: opts.store.clone(),
        stop_after_tiles: opts.stop_after_tiles,
        ..RunOptions::default()
    };
    run_part_in(&site.staging, &plan, 0, 1, &run_opts, &spill, |_| {})?;
    drop(spill);
    let mut staged = Vec::with_capacity(plan.n_tiles);
    for t in 0..plan.n_tiles {
        match check_tile(&site.staging, &plan, t)? {
            TileState::Valid { nnz, bytes } => {
                let (a, b) = plan.tile_cells(t);
                staged.push(TileStats { cells: b - a, nnz, bytes });
            }
            _ => {
                return Err(ConvertError::Output(format!(
                    "{url}: staged tile {t} is missing or invalid: run the same append again"
                )));
            }
        }
    }

    // The partial last tile joined with the first new cells.
    let encode = plan.encode_options()?;
    let mut tiles: Vec<TileStats> = (0..first_changed)
        .map(|t| TileStats { cells: base.tile_cells[t], nnz: base.tile_nnz[t], bytes: base.tile_bytes[t] })
        .collect();
    let mut written_bytes = 0;
    if lead > 0 {
        let joined = join_last_tile(site, base, &plan, &encode)?;
        tiles.push(TileStats { cells: lead + staged[0].cells, nnz: joined.1, bytes: joined.0 });
        written_bytes += joined.0;
        tiles.extend(staged[1..].iter().copied());
    } else {
        tiles.extend(staged.iter().copied());
    }
    written_bytes += staged.iter().skip(usize::from(lead > 0)).map(|t| t.bytes).sum::<u64>();
    let tile_cells: Vec<u64> = tiles.iter().map(|t| t.cells).collect();

    // The obs shards the new tiles join, staged.
    let mut obs_fields = None;
    let mut obs_written = Vec::new();
    let mut schema_json = None;
    if let Some(merged) = &merged {
        let layout = ObsAppend {
            base,
            base_schema: base_schema.as_ref(),
            merged,
            tile_cells: &tile_cells,
            first_changed,
            lead_cells: lead,
            level: 3,
        };
        for s in layout.base_shards_rewritten() {
            site.keep_base(&obs_shard_path(s), &format!("base-{}", obs_shard_path(s)))?;
        }
        let (fields, text, written) = layout.write(&site.staging, &plan, base.version)?;
        obs_fields = Some(fields);
        obs_written = written;
        schema_json = Some(text);
    }

    // The record and the manifest after the append.
    let mut record = json!({
        "id": request.id(base.n_cells),
        "inputs_key": request.inputs_key(),
        "time": now_rfc3339(),
        "inputs": request.inputs,
        "first_cell": base.n_cells,
        "n_cells": plan.n_cells,
        "level": level,
        "gene_key": opts.gene_key,
        "tile_rewritten": (lead > 0).then_some(n_base_tiles - 1),
        "tiles_added": tiles.len() - n_base_tiles,
        "genes_dropped": dropped.len(),
    });
    if let Some(m) = &merged {
        record["obs_shards_written"] = json!(obs_written);
        if !m.rewrite_all.is_empty() {
            record["obs_rewritten_because"] = json!(m.rewrite_all);
        }
        if !m.columns_added.is_empty() {
            record["obs_columns_added"] = json!(m.columns_added);
        }
        if !m.categories_added.is_empty() {
            record["obs_categories_added"] =
                m.categories_added.iter().map(|(c, n)| (c.clone(), json!(n))).collect::<serde_json::Map<_, _>>().into();
        }
    }
    let mut after = base.clone();
    after.n_cells = tile_cells.iter().sum();
    after.tile_cells = tile_cells;
    after.tile_nnz = tiles.iter().map(|t| t.nnz).collect();
    after.tile_bytes = tiles.iter().map(|t| t.bytes).collect();
    if let Some(fields) = obs_fields {
        after.has_obs = true;
        after.obs = fields;
    }
    let mut metadata = match &base.metadata {
        Value::Object(m) => m.clone(),
        _ => serde_json::Map::new(),
    };
    let mut appends = recorded_appends(&base.metadata);
    appends.push(record.clone());
    metadata.insert("appends".into(), Value::Array(appends));
    after.metadata = Value::Object(metadata);
    after.validate().map_err(|cause| {
        ConvertError::from(dct_dataset::DatasetError::Manifest { url: site.out.store.url(MANIFEST_NAME), cause })
    })?;

    let report = AppendReport {
        already_appended: false,
        resumed,
        cells_added: plan.n_cells,
        n_cells: after.n_cells,
        n_tiles: after.tile_cells.len(),
        tile_rewritten: (lead > 0).then_some(n_base_tiles - 1),
        tiles_added: after.tile_cells.len() - n_base_tiles,
        obs_shards_written: obs_written,
        obs_rewrite_reasons: merged.map(|m| m.rewrite_all).unwrap_or_default(),
        genes_dropped: dropped.len(),
        genes_dropped_examples: dropped.into_iter().take(10).collect(),
        tile_bytes_written: written_bytes,
        record,
    };
    Ok(Staged {
        n_staged: staged.len(),
        lead,
        first_changed,
        n_base_tiles,
        obs_written: report.obs_shards_written.clone(),
        schema_json,
        after,
        report,
    })
}

/// Encodes the dataset's partial last tile (its staged copy) followed by the first staged tile's cells into the
/// staging folder's joined tile, unless a valid one is there; returns its bytes and nonzeros.
fn join_last_tile(
    site: &Site,
    base: &Manifest,
    plan: &Plan,
    encode: &EncodeOptions,
) -> Result<(u64, u64), ConvertError> {
    let n_base_tiles = base.tile_cells.len();
    let lead = base.tile_cells[n_base_tiles - 1];
    let (_, first_end) = plan.tile_cells(0);
    let want_cells = lead + first_end;
    // A run that stopped after encoding it left it: kept if whole and of these cells.
    if let Some(blob) = site.staging.get(JOINED_TILE)?
        && let Ok(layout) = dct_format::TileLayout::parse(&blob)
    {
        let h = *layout.header();
        if dct_format::verify_crc(&blob, &h).is_ok() && h.n_cells == want_cells && u64::from(h.n_genes) == plan.n_genes
        {
            return Ok((blob.len() as u64, h.nnz));
        }
    }
    let read = |name: &str| -> Result<dct_codec::DecodedTile<u32>, ConvertError> {
        let blob = site.staging.get(name)?.ok_or_else(|| {
            ConvertError::Output(format!("{} is missing: run the same append again", site.staging.store.url(name)))
        })?;
        dct_codec::decode::<u32>(&blob, true)
            .map_err(|e| ConvertError::Output(format!("{} cannot be decoded: {e}", site.staging.store.url(name))))
    };
    let old = read(BASE_LAST_TILE)?;
    if old.indptr.len() as u64 != lead + 1 {
        return Err(ConvertError::Output(format!(
            "{}: the copy of the last tile holds {} cells where the manifest says {lead}",
            site.staging.store.url(BASE_LAST_TILE),
            old.indptr.len().saturating_sub(1)
        )));
    }
    let new = read(&tile_path(0))?;
    let mut csr = CanonicalCsr::new(plan.n_genes);
    csr.indptr.clear();
    csr.indptr.push(0);
    for part in [&old, &new] {
        for r in 0..part.indptr.len() - 1 {
            let (a, b) = (part.indptr[r] as usize, part.indptr[r + 1] as usize);
            csr.indices.extend(part.indices[a..b].iter().map(|&g| g as u32));
            csr.values.extend_from_slice(&part.values[a..b]);
            csr.indptr.push(csr.indices.len() as u64);
        }
    }
    let first_cell = base.n_cells - lead;
    let t = n_base_tiles - 1;
    let encode_err = |cause| ConvertError::Encode { tile: t, first: first_cell, end: first_cell + want_cells, cause };
    csr.check_version(encode.version, first_cell).map_err(encode_err)?;
    let blob = encode_canonical(&csr, encode).map_err(encode_err)?;
    let (bytes, nnz) = (blob.len() as u64, csr.nnz() as u64);
    site.staging.put(JOINED_TILE, Bytes::from(blob))?;
    Ok((bytes, nnz))
}
