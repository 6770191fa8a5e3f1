//! One dataset from several with the same genes: their tiles copied as they are (no decoding) wherever they
//! fall whole on the new dataset's tiles, and re-encoded only where they do not (after a source whose last tile is
//! partial, the following cells are cut into tiles anew, as the format wants every tile but the last full). Obs
//! is combined as for an append: one vocabulary per category column (the first source's codes first), columns a
//! source lacks missing for its cells, conflicting kinds refused.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, new_null_array};
use dct_codec::{CanonicalCsr, Preset};
use dct_dataset::dct_obs::{
    ColumnData, ColumnKind, ObsSchema, ObsWriteOptions, TileObs, category_labels, shard_tile_obs,
};
use dct_dataset::manifest::{OBS_SCHEMA_NAME, VAR_TABLE_NAME, obs_shard_path};
use dct_dataset::{Dataset, DatasetWriter, Manifest, ReadOptions, WriterOptions};
use dct_format::objects::obs_shard_of;
use dct_store::StoreOptions;
use serde_json::json;

use crate::append::merge_schemas;
use crate::error::{ConvertError, dataset_err};
use crate::io::Output;

/// Written at the output while a merge runs (the request it runs), removed once its manifest is written.
const MERGE_MARKER: &str = "merge-in-progress.json";

/// How to merge.
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    /// zstd level of the tiles that are encoded again (default: the first source's, else 19).
    pub level: Option<i32>,
    /// How the zstd parameters follow from the level.
    pub preset: Preset,
    /// Replace a dataset already at the output.
    pub overwrite: bool,
    /// Backends of the sources and the output.
    pub store: StoreOptions,
    /// Put the cells of every source's partial last tile after all the full tiles, so that every full tile is
    /// copied and only those cells are encoded again (otherwise, after a partial last tile the following cells are
    /// cut into tiles anew). The cells are then not in source order: the manifest's `metadata.merge.segments` says
    /// where each source's cells went.
    pub tails_last: bool,
    /// Stop with an error after this many tiles (tests of interrupted merges; `None` in normal use).
    pub stop_after_tiles: Option<usize>,
}

/// What a merge wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeReport {
    /// Cells of the new dataset.
    pub n_cells: u64,
    /// Its tiles.
    pub n_tiles: usize,
    /// Tiles copied from the sources as they were.
    pub tiles_copied: usize,
    /// Tiles encoded again (cut anew after a source's partial last tile).
    pub tiles_encoded: usize,
    /// The output already held this merge, finished (by an earlier run): nothing was written.
    pub already_done: bool,
}

fn obs_err(url: &str) -> impl Fn(dct_dataset::dct_obs::ObsError) -> ConvertError + '_ {
    move |e| ConvertError::Obs { context: format!("reading the obs of {url}"), cause: Box::new(e) }
}

/// One source: its reader, its obs schema and the shard of obs being read.
struct Source {
    url: String,
    ds: Dataset,
    schema: Option<ObsSchema>,
    shard: Option<(usize, Vec<TileObs>)>,
}

impl Source {
    /// The obs of tile `t` (`None` without obs).
    fn tile_obs(&mut self, t: usize) -> Result<Option<TileObs>, ConvertError> {
        let Some(schema) = &self.schema else { return Ok(None) };
        let m = self.ds.manifest();
        let (s, _) = obs_shard_of(t, m.obs.tiles_per_file);
        if self.shard.as_ref().is_none_or(|(i, _)| *i != s) {
            let store = self.ds.store().clone();
            let name = obs_shard_path(s);
            let bytes = dct_store::runtime::block_on_here(store.get_exact(&name, m.obs.shard_bytes[s]))?
                .map_err(|e| ConvertError::Output(format!("{}: {e}", store.url(&name))))?;
            let tiles = dct_format::objects::obs_shard_tiles(m.tile_cells.len(), m.obs.tiles_per_file, s);
            let obs =
                shard_tile_obs(bytes, schema, &m.tile_cells[tiles], &store.url(&name)).map_err(obs_err(&self.url))?;
            self.shard = Some((s, obs));
        }
        // Each tile is read once, in order: its obs is moved out, not copied.
        let (s, tiles) = self.shard.as_mut().expect("just read");
        Ok(Some(std::mem::take(&mut tiles[t - *s * m.obs.tiles_per_file as usize])))
    }
}

/// Rows waiting for a tile that is encoded again, with their obs (category columns as labels, so rows of
/// sources with different vocabularies join).
struct Pending {
    rows: CanonicalCsr,
    obs: Vec<(TileObs, usize)>,
}

impl Pending {
    fn n_rows(&self) -> usize {
        self.rows.n_rows()
    }
}

/// `tile`'s category columns as their labels.
fn as_labels(tile: TileObs) -> Result<TileObs, ConvertError> {
    let mut out = TileObs::new();
    for (name, data) in tile.columns {
        let data = match data {
            ColumnData::Category(c) => {
                let codes = arrow_array::Int32Array::from(c.codes);
                let labels = category_labels(&codes, &c.categories)
                    .map_err(|e| ConvertError::Obs { context: format!("obs column {name:?}"), cause: Box::new(e) })?;
                ColumnData::Array(Arc::new(labels))
            }
            other => other,
        };
        out.push(name, data);
    }
    Ok(out)
}

/// The first `n` rows of `parts` as one tile's obs in `schema` (columns a part lacks are missing); the rest stay.
fn take_obs(schema: &ObsSchema, parts: &mut Vec<(TileObs, usize)>, n: usize) -> Result<TileObs, ConvertError> {
    let mut taken: Vec<(TileObs, usize)> = Vec::new();
    let mut need = n;
    while need > 0 {
        let (tile, len) = parts.remove(0);
        if len <= need {
            need -= len;
            taken.push((tile, len));
        } else {
            taken.push((tile.slice(0, need), need));
            parts.insert(0, (tile.slice(need, len - need), len - need));
            need = 0;
        }
    }
    let mut out = TileObs::new();
    for column in &schema.columns {
        let t = match column.kind {
            ColumnKind::Category => arrow_schema::DataType::Utf8,
            _ => column.arrow_type.data_type(),
        };
        let arrays: Vec<ArrayRef> = taken
            .iter()
            .map(|(tile, len)| match tile.get(&column.name) {
                Some(ColumnData::Array(a)) => arrow_cast::cast(a, &t)
                    .map_err(|e| ConvertError::Inputs(format!("obs column {:?}: joining sources: {e}", column.name))),
                _ => Ok(new_null_array(&t, *len)),
            })
            .collect::<Result<_, _>>()?;
        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
        let joined = arrow_select::concat::concat(&refs)
            .map_err(|e| ConvertError::Inputs(format!("obs column {:?}: joining sources: {e}", column.name)))?;
        out.push(column.name.clone(), ColumnData::Array(joined));
    }
    Ok(out)
}

/// Refuses sources that do not have the same genes in the same order, or the same format version.
fn check_same_columns(sources: &[Source]) -> Result<(), ConvertError> {
    let first = &sources[0];
    let names = first.ds.var_names().map_err(dataset_err(&first.url))?;
    for other in &sources[1..] {
        if other.ds.manifest().version != first.ds.manifest().version {
            return Err(ConvertError::Inputs(format!(
                "cannot merge: {} is format version {}, {} version {}. A merge copies tiles, so its sources need \
                 one format version; convert the version-1 sources again (deltacells convert writes version 2)",
                first.url,
                first.ds.manifest().version,
                other.url,
                other.ds.manifest().version
            )));
        }
        let why = if other.ds.n_genes() != first.ds.n_genes() {
            Some(format!("{} has {} genes, {} has {}", first.url, first.ds.n_genes(), other.url, other.ds.n_genes()))
        } else {
            let theirs = other.ds.var_names().map_err(dataset_err(&other.url))?;
            match (&names, &theirs) {
                (Some(a), Some(b)) => a
                    .iter()
                    .zip(b.iter())
                    .position(|(x, y)| x != y)
                    .map(|j| format!("column {j} is {:?} in {} but {:?} in {}", a[j], first.url, b[j], other.url)),
                (None, None) => None,
                _ => Some("one names its genes (var_names.txt) and the other does not".into()),
            }
        };
        if let Some(why) = why {
            return Err(ConvertError::Inputs(format!(
                "cannot merge: {why}. A merge copies tiles, so its sources need the same genes in the same order; \
                 read datasets with different genes together as a corpus (deltacells.open_corpus, with a gene \
                 vocabulary), or convert their sources into one dataset with --genes union"
            )));
        }
    }
    Ok(())
}

/// Writes the cells of `sources`, in order, as one dataset at `output`: their tiles copied as they are (hard links
/// between local directories, server-side copies within one bucket, else their bytes) wherever they fall whole on
/// the new dataset's tiles, re-encoded after a source whose last tile is partial (or, with
/// [`MergeOptions::tails_last`], every full tile copied and the partial ones' cells written after them); obs
/// combined as for an append. Sources with other genes, or another format version, are refused. The manifest is
/// written last; a merge that stopped before it leaves its marker, and running the same merge again replaces what
/// it left (or, finished, leaves it as it is).
pub fn merge(sources: &[String], output: &str, opts: &MergeOptions) -> Result<MergeReport, ConvertError> {
    if sources.len() < 2 {
        return Err(ConvertError::Inputs("merge takes two or more datasets".into()));
    }
    crate::io::refuse_output_at_a_source(output, sources, "merge")?;
    // Each tile is read once, in order: the tile being read and one decoded ahead are all the cache needs.
    let read = ReadOptions { store: opts.store.clone(), max_cached_tiles: 2, ..ReadOptions::default() };
    let mut opened = Vec::with_capacity(sources.len());
    for url in sources {
        let ds = Dataset::open(url, read.clone()).map_err(dataset_err(url))?;
        let schema = if ds.manifest().has_obs {
            let out = Output { store: ds.store().clone() };
            let text = out.get(OBS_SCHEMA_NAME)?.ok_or_else(|| {
                ConvertError::Output(format!("{url}: the manifest says it has obs but obs/schema.json is missing"))
            })?;
            Some(ObsSchema::parse(&text, &ds.store().url(OBS_SCHEMA_NAME)).map_err(obs_err(url))?)
        } else {
            None
        };
        opened.push(Source { url: url.clone(), ds, schema, shard: None });
    }
    check_same_columns(&opened)?;
    let mut schema: Option<ObsSchema> = None;
    for (k, s) in opened.iter().enumerate() {
        let before: Vec<&str> = opened[..k].iter().map(|o| o.url.as_str()).collect();
        let merged = merge_schemas(schema.as_ref(), s.schema.as_ref(), &before.join(", "), &s.url)?;
        schema = merged.map(|m| m.schema);
    }

    let first = opened[0].ds.manifest().clone();
    let tile_size = first.tile_size;
    let mut w = WriterOptions::new(first.n_genes);
    w.tile_size = tile_size;
    w.n_chunks = first.n_chunks.map_or(8, |n| n as usize).max(1);
    let level = opts.level.unwrap_or_else(|| first.zstd_level.map_or(19, |l| l as i32));
    w.zstd_level = level;
    w.zstd_preset = opts.preset;
    w.version = dct_format::Version::from_number(first.version)
        .ok_or_else(|| ConvertError::Inputs(format!("{}: format version {} is unknown", sources[0], first.version)))?;
    w.overwrite = opts.overwrite;
    w.store = opts.store.clone();
    // A run of this same merge that stopped before its manifest left its marker: it is replaced, so running the
    // command again completes it. The same merge finished is left as it is; another dataset, or files of anything
    // else, are refused without overwrite.
    let out = Output::open(output, &opts.store)?;
    // What this merge is: its marker's content, and the manifest's `metadata.merge` once finished (with counts).
    let asked = json!({
        "sources": opened.iter().map(|s| json!({"url": s.url, "n_cells": s.ds.n_cells()})).collect::<Vec<_>>(),
        "level": level,
        "tails_last": opts.tails_last,
    });
    let request = serde_json::to_vec(&asked).expect("json");
    // The same merge, finished by an earlier run (perhaps stopped before it removed its marker): nothing to do.
    let manifest = out.get(dct_dataset::manifest::MANIFEST_NAME)?;
    if let Some(done) = manifest.as_deref().and_then(|m| Manifest::from_json(m).ok()) {
        let record = &done.metadata["merge"];
        let same = ["sources", "level", "tails_last"].iter().all(|k| record[k] == asked[k]);
        if !opts.overwrite && same {
            out.delete(MERGE_MARKER)?;
            return Ok(MergeReport {
                n_cells: done.n_cells,
                n_tiles: done.tile_cells.len(),
                tiles_copied: record["tiles_copied"].as_u64().unwrap_or(0) as usize,
                tiles_encoded: record["tiles_encoded"].as_u64().unwrap_or(0) as usize,
                already_done: true,
            });
        }
    }
    let ours = manifest.is_none() && out.get(MERGE_MARKER)?.as_deref() == Some(&request[..]);
    w.overwrite |= ours;
    let mut writer = DatasetWriter::create(output, w).map_err(dataset_err(output))?;
    out.put(MERGE_MARKER, request.into())?;
    if let Some(schema) = &schema {
        let options = ObsWriteOptions {
            tiles_per_file: if first.has_obs {
                first.obs.tiles_per_file
            } else {
                ObsWriteOptions::default().tiles_per_file
            },
            ..ObsWriteOptions::default()
        };
        writer.set_obs_schema(schema.clone(), &options).map_err(dataset_err(output))?;
    }

    let mut pending = Pending { rows: CanonicalCsr::new(first.n_genes), obs: Vec::new() };
    let (mut copied, mut encoded) = (0usize, 0usize);
    // The tiles in the order their cells are written: (source, tile, its first cell, its cells).
    let mut order: Vec<(usize, usize, u64, u64)> = Vec::new();
    let mut tails = Vec::new();
    for (i, source) in opened.iter().enumerate() {
        let mut first_cell = 0u64;
        for (t, &n) in source.ds.manifest().tile_cells.iter().enumerate() {
            if opts.tails_last && n < tile_size {
                tails.push((i, t, first_cell, n));
            } else {
                order.push((i, t, first_cell, n));
            }
            first_cell += n;
        }
    }
    order.extend(tails);
    // Where each source's cells went: (source, first cell, end, first cell in the output), runs joined.
    let mut segments: Vec<(usize, u64, u64, u64)> = Vec::new();
    let mut cursor = 0u64;
    for &(i, _, first_cell, n) in &order {
        match segments.last_mut() {
            Some(last) if last.0 == i && last.2 == first_cell => last.2 += n,
            _ => segments.push((i, first_cell, first_cell + n, cursor)),
        }
        cursor += n;
    }
    let n_items = order.len();
    for (k, &(i, t, first_cell, n)) in order.iter().enumerate() {
        let source = &mut opened[i];
        {
            let obs = source.tile_obs(t)?;
            // Category columns travel as labels: the sources' vocabularies differ, the writer codes them anew.
            let obs = match (&schema, obs) {
                (Some(_), Some(o)) => Some(as_labels(o)?),
                (Some(_), None) => Some(TileObs::new()),
                (None, _) => None,
            };
            let last_of_all = k + 1 == n_items;
            if pending.n_rows() == 0 && (n == tile_size || last_of_all) {
                // Checked here (structure, CRC, genes) from its bytes, then linked or copied server-side.
                let blob = source.ds.fetch_tile_bytes(t).map_err(dataset_err(&source.url))?;
                let (store, rel) = (source.ds.store().clone(), dct_dataset::manifest::tile_path(t));
                writer.push_copied_tile(&store, &rel, blob, obs.as_ref()).map_err(dataset_err(output))?;
                copied += 1;
            } else {
                let ids: Vec<u64> = (first_cell..first_cell + n).collect();
                let batch = source.ds.get_batch_as::<u32>(&ids).map_err(dataset_err(&source.url))?;
                for r in 0..ids.len() {
                    let (a, b) = (batch.indptr[r] as usize, batch.indptr[r + 1] as usize);
                    pending.rows.indices.extend(batch.indices[a..b].iter().map(|&g| g as u32));
                    pending.rows.values.extend_from_slice(&batch.values[a..b]);
                    pending.rows.indptr.push(pending.rows.indices.len() as u64);
                }
                if let Some(o) = obs {
                    pending.obs.push((o, n as usize));
                }
                while pending.n_rows() as u64 >= tile_size || (last_of_all && pending.n_rows() > 0) {
                    let take = pending.n_rows().min(tile_size as usize);
                    let tile = split_rows(&mut pending.rows, take);
                    match &schema {
                        Some(schema) => {
                            let tile_obs = take_obs(schema, &mut pending.obs, take)?;
                            writer.push_tile_with_obs(tile, &tile_obs).map_err(dataset_err(output))?;
                        }
                        None => {
                            writer.push_tile(tile).map_err(dataset_err(output))?;
                        }
                    }
                    encoded += 1;
                }
            }
            if opts.stop_after_tiles.is_some_and(|stop| copied + encoded >= stop) {
                return Err(ConvertError::Output(format!(
                    "{output}: stopped after {} tiles, as asked",
                    copied + encoded
                )));
            }
        }
    }

    // The first source's genes: their names, order and table.
    let lead = &opened[0];
    if let Some(names) = lead.ds.var_names().map_err(dataset_err(&lead.url))? {
        writer.set_var_names(names.as_ref().clone()).map_err(dataset_err(output))?;
    }
    if let Some(order) = lead.ds.gene_order().map_err(dataset_err(&lead.url))? {
        writer.set_gene_order(order.as_ref().clone()).map_err(dataset_err(output))?;
    }
    if first.has_var_table {
        let out = Output { store: lead.ds.store().clone() };
        if let Some(bytes) = out.get(VAR_TABLE_NAME)? {
            // Copied as stored, so checked as a reader checks it: a damaged table is not passed on as sound.
            lead.ds.manifest().check_side_file(VAR_TABLE_NAME, &bytes).map_err(|message| {
                ConvertError::Dataset(dct_dataset::DatasetError::SideFile {
                    url: lead.ds.store().url(VAR_TABLE_NAME),
                    message,
                })
            })?;
            writer.put_file(VAR_TABLE_NAME, bytes).map_err(dataset_err(output))?;
        }
    }
    let mut record = asked;
    record["tiles_copied"] = json!(copied);
    record["tiles_encoded"] = json!(encoded);
    record["segments"] =
        segments.iter().map(|&(i, a, b, at)| json!({"source": i, "cells": [a, b], "at": at})).collect();
    let metadata = json!({ "merge": record });
    writer.set_metadata(metadata);
    let manifest = writer.finish().map_err(dataset_err(output))?;
    out.delete(MERGE_MARKER)?;
    Ok(MergeReport {
        n_cells: manifest.n_cells,
        n_tiles: manifest.tile_cells.len(),
        tiles_copied: copied,
        tiles_encoded: encoded,
        already_done: false,
    })
}

/// The first `n` rows of `rows` as a tile; `rows` keeps the rest.
fn split_rows(rows: &mut CanonicalCsr, n: usize) -> CanonicalCsr {
    let cut = rows.indptr[n] as usize;
    let mut tile = CanonicalCsr::new(rows.n_genes);
    tile.indptr = rows.indptr[..=n].to_vec();
    tile.indices = rows.indices[..cut].to_vec();
    tile.values = rows.values[..cut].to_vec();
    let rest_ptr: Vec<u64> = rows.indptr[n..].iter().map(|&p| p - cut as u64).collect();
    rows.indices.drain(..cut);
    rows.values.drain(..cut);
    rows.indptr = rest_ptr;
    tile
}
