//! A new dataset of some of a dataset's cells, and optionally of some of its genes: the chosen rows read through
//! the reader and written by the dataset writer, their obs with them (the source's obs schema, so category codes
//! keep their meaning), the gene table cut to the kept genes. Its time is in proportion to the cells kept, its
//! memory to one tile of them.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use dct_codec::{CanonicalCsr, Preset};
use dct_corpus::{Condition, Corpus, GeneKey, GeneSpace, Member, ObsValue, member_genes};
use dct_dataset::dct_obs::{
    ColumnData, ColumnKind, ObsOptions, ObsWriteOptions, TileObs, VarTable, encode_var_parquet,
};
use dct_dataset::{Dataset, DatasetWriter, Manifest, ReadOptions, WriterOptions};
use dct_store::StoreOptions;
use serde_json::json;

use crate::error::{ConvertError, dataset_err};
use crate::io::Output;
use crate::remap::{GeneRemap, NO_COLUMN};

/// Which cells and genes a subset keeps, and how it is written.
#[derive(Debug, Clone)]
pub struct SubsetOptions {
    /// Cells to keep (indices of the source; any order, repeats kept once). `None`: every cell that meets
    /// `conditions`.
    pub cells: Option<Vec<u64>>,
    /// Obs conditions the kept cells meet, all of them, as the command line writes them (see
    /// [`parse_condition`]): `tissue=lung,blood`, `n_genes=200:`.
    pub conditions: Vec<String>,
    /// Genes to keep, by their identifier under `gene_key`; kept in the source's column order unless
    /// `listed_gene_order`. `None`: all.
    pub genes: Option<Vec<String>>,
    /// Store the kept genes in the order `genes` lists them rather than in the source's column order: a corpus
    /// whose vocabulary lists genes in that order then reads the new dataset's rows without re-ordering them.
    pub listed_gene_order: bool,
    /// Leave out the genes of `genes` that the source lacks instead of refusing them (at least one must be there).
    pub skip_missing_genes: bool,
    /// How `genes` names genes: the var names (default) or a column of the gene table.
    pub gene_key: GeneKey,
    /// Cells per tile of the new dataset (default: the source's).
    pub tile_size: Option<u64>,
    /// zstd level (default 19) and preset of the new tiles.
    pub level: i32,
    /// How the zstd parameters follow from the level.
    pub preset: Preset,
    /// Replace a dataset already at the output.
    pub overwrite: bool,
    /// Backends of the source and the output.
    pub store: StoreOptions,
    /// Stop with an error after writing this many tiles (tests of interrupted subsets; `None` in normal use).
    pub stop_after_tiles: Option<usize>,
}

impl Default for SubsetOptions {
    fn default() -> Self {
        SubsetOptions {
            cells: None,
            conditions: Vec::new(),
            genes: None,
            listed_gene_order: false,
            skip_missing_genes: false,
            gene_key: GeneKey::VarNames,
            tile_size: None,
            level: 19,
            preset: Preset::default(),
            overwrite: false,
            store: StoreOptions::default(),
            stop_after_tiles: None,
        }
    }
}

/// What a subset wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubsetReport {
    /// Cells kept.
    pub n_cells: u64,
    /// Genes kept.
    pub n_genes: u64,
    /// Tiles written.
    pub n_tiles: usize,
    /// The output already held this subset, finished (by an earlier run): nothing was written.
    pub already_done: bool,
}

/// A condition as the command line gives it: `COLUMN=V1,V2,...` (one of these values: category labels,
/// strings, numbers or `true`/`false`, as the column holds) or `COLUMN=LOW:HIGH` (a number column's values in
/// `LOW ..= HIGH`; either end may be left out). `kind` is the column's kind in the dataset.
pub fn parse_condition(
    spec: &str,
    kind_of: impl Fn(&str) -> Option<ColumnKind>,
) -> Result<(String, Condition), ConvertError> {
    let bad = |why: String| ConvertError::Inputs(format!("condition {spec:?}: {why}"));
    let (column, values) =
        spec.split_once('=').ok_or_else(|| bad("write COLUMN=VALUE,... or COLUMN=LOW:HIGH".into()))?;
    let kind = kind_of(column).ok_or_else(|| bad(format!("the obs has no column {column:?}")))?;
    let number = |s: &str| s.trim().parse::<f64>().map_err(|_| bad(format!("{s:?} is not a number")));
    let condition = match kind {
        ColumnKind::Numeric if values.contains(':') => {
            let (lo, hi) = values.split_once(':').expect("checked");
            let end = |s: &str| if s.trim().is_empty() { Ok(None) } else { number(s).map(Some) };
            Condition::Range(end(lo)?, end(hi)?)
        }
        ColumnKind::Numeric => {
            Condition::OneOf(values.split(',').map(|v| number(v).map(ObsValue::Number)).collect::<Result<_, _>>()?)
        }
        ColumnKind::Bool => Condition::OneOf(
            values
                .split(',')
                .map(|v| match v.trim() {
                    "true" | "True" | "1" => Ok(ObsValue::Bool(true)),
                    "false" | "False" | "0" => Ok(ObsValue::Bool(false)),
                    other => Err(bad(format!("{other:?} is not true or false"))),
                })
                .collect::<Result<_, _>>()?,
        ),
        ColumnKind::Category | ColumnKind::String => {
            Condition::OneOf(values.split(',').map(|v| ObsValue::Text(v.to_string())).collect())
        }
    };
    Ok((column.to_string(), condition))
}

/// Written at the output while a subset runs (the request it runs), removed once its manifest is written.
const SUBSET_MARKER: &str = "subset-in-progress.json";

/// An obs column copied: its name, kind and (for a category column) its vocabulary.
type ObsColumn = (String, ColumnKind, Option<Arc<[String]>>);

fn corpus_err(e: dct_corpus::CorpusError) -> ConvertError {
    ConvertError::Inputs(e.to_string())
}

/// Writes the cells of `source` that `opts` chooses as a new dataset at `output`: the rows in source order, their
/// obs (every column, with the source's vocabularies), the gene table and names of the kept genes, and in the
/// manifest's `metadata.subset` where they came from. Nothing is visible at `output` until its manifest is
/// written, last; a run that stopped before it is replaced by running the same subset again.
pub fn subset(source: &str, output: &str, opts: &SubsetOptions) -> Result<SubsetReport, ConvertError> {
    crate::io::refuse_output_at_a_source(output, &[source.to_string()], "subset")?;
    // Each tile is read once, in order: the tile being read and one decoded ahead are all the cache needs.
    let read = ReadOptions { store: opts.store.clone(), max_cached_tiles: 2, ..ReadOptions::default() };
    let ds = Arc::new(Dataset::open(source, read).map_err(dataset_err(source))?);
    let member = Member { name: source.to_string(), dataset: Arc::clone(&ds) };
    let all = Corpus::open(vec![member.clone()], &GeneKey::VarNames, &GeneSpace::Union).map_err(corpus_err)?;
    let mut chosen = match &opts.cells {
        Some(cells) => all.select(cells).map_err(corpus_err)?,
        None => all,
    };
    let obs =
        if ds.manifest().has_obs { Some(ds.obs(ObsOptions::default()).map_err(dataset_err(source))?) } else { None };
    if !opts.conditions.is_empty() {
        let corpus_obs = chosen.obs(&ObsOptions::default()).map_err(corpus_err)?;
        let kind_of = |name: &str| corpus_obs.column(name).ok().map(|c| c.kind);
        let conditions: Vec<(String, Condition)> =
            opts.conditions.iter().map(|spec| parse_condition(spec, kind_of)).collect::<Result<_, _>>()?;
        chosen = chosen.filter(&corpus_obs, &conditions).map_err(corpus_err)?;
    }
    if chosen.n_cells() == 0 {
        return Err(ConvertError::Inputs(format!("no cell of {source} is chosen: the subset would be empty")));
    }

    // Kept genes: stored columns in source order.
    let n_source = ds.n_genes() as usize;
    let kept: Vec<usize> = match &opts.genes {
        None => (0..n_source).collect(),
        Some(wanted) => {
            let ids = member_genes(&member, &opts.gene_key).map_err(corpus_err)?;
            let column_of: HashMap<&str, usize> = ids.iter().enumerate().map(|(j, g)| (g.as_str(), j)).collect();
            let missing: Vec<&String> = wanted.iter().filter(|g| !column_of.contains_key(g.as_str())).collect();
            if !missing.is_empty() && !opts.skip_missing_genes {
                return Err(ConvertError::Inputs(format!(
                    "{source} has no gene {} (of {} asked for that it lacks); check the gene key",
                    missing.iter().take(10).map(|g| format!("{g:?}")).collect::<Vec<_>>().join(", "),
                    missing.len()
                )));
            }
            let mut kept: Vec<usize> = wanted.iter().filter_map(|g| column_of.get(g.as_str()).copied()).collect();
            if kept.is_empty() {
                return Err(ConvertError::Inputs(format!(
                    "{source} has none of the {} genes asked for: the subset would have no gene; check the gene key",
                    wanted.len()
                )));
            }
            if opts.listed_gene_order {
                // The first listing of each gene places it.
                let mut seen = vec![false; n_source];
                kept.retain(|&j| !std::mem::replace(&mut seen[j], true));
            } else {
                kept.sort_unstable();
                kept.dedup();
            }
            kept
        }
    };
    let mut columns = vec![NO_COLUMN; n_source];
    for (out, &j) in kept.iter().enumerate() {
        columns[j] = out as u32;
    }
    let mut remap = GeneRemap::with_columns(columns, kept.len());

    let manifest = ds.manifest();
    let tile_size = opts.tile_size.unwrap_or(manifest.tile_size).max(1);
    let mut writer_opts = WriterOptions::new(kept.len() as u64);
    writer_opts.tile_size = tile_size;
    writer_opts.n_chunks = manifest.n_chunks.map_or(8, |n| n as usize).max(1);
    writer_opts.zstd_level = opts.level;
    writer_opts.zstd_preset = opts.preset;
    writer_opts.version = dct_format::Version::from_number(manifest.version)
        .ok_or_else(|| ConvertError::Inputs(format!("{source}: format version {} is unknown", manifest.version)))?;
    writer_opts.overwrite = opts.overwrite;
    writer_opts.store = opts.store.clone();
    writer_opts.metadata = json!({
        "subset": {
            "source": source,
            "source_cells": manifest.n_cells,
            "source_genes": manifest.n_genes,
            "cells": chosen.n_cells(),
            "genes": kept.len(),
            "conditions": opts.conditions,
            "tile_size": tile_size,
            "level": opts.level,
            "choice_sha256": choice_digest(&chosen.selection().ranges(), &kept),
            "source_manifest_sha256": sha256_hex(&manifest.to_json_pretty()),
        }
    });
    if opts.listed_gene_order {
        // Only when set, so a subset written before the option existed is still recognised as the same subset.
        writer_opts.metadata["subset"]["listed_gene_order"] = json!(true);
    }
    // A run of this same subset that stopped before its manifest left its marker: it is replaced, so running the
    // command again completes it. The same subset finished is left as it is (its marker removed if a run stopped
    // before that); another dataset, or files of anything else, are refused without --overwrite.
    let out = Output::open(output, &opts.store)?;
    let request = serde_json::to_vec(&json!({ "source": source, "metadata": writer_opts.metadata })).expect("json");
    let manifest = out.get(dct_dataset::manifest::MANIFEST_NAME)?;
    let done = manifest.as_deref().and_then(|m| Manifest::from_json(m).ok());
    if let Some(done) = &done
        && !opts.overwrite
        && same_subset(&done.metadata["subset"], &writer_opts.metadata["subset"])
    {
        out.delete(SUBSET_MARKER)?;
        return Ok(SubsetReport {
            n_cells: done.n_cells,
            n_genes: done.n_genes,
            n_tiles: done.tile_cells.len(),
            already_done: true,
        });
    }
    if let Some(done) = &done
        && !opts.overwrite
        && same_subset(
            &without_source_digest(&done.metadata["subset"]),
            &without_source_digest(&writer_opts.metadata["subset"]),
        )
    {
        return Err(ConvertError::Output(format!(
            "{output} holds this subset of an earlier version of {source} (its manifest has changed since the copy \
             was made): run it again with overwrite to replace the copy"
        )));
    }
    let ours = manifest.is_none() && out.get(SUBSET_MARKER)?.as_deref() == Some(&request[..]);
    writer_opts.overwrite |= ours;
    let mut writer = DatasetWriter::create(output, writer_opts).map_err(dataset_err(output))?;
    out.put(SUBSET_MARKER, request.into())?;
    let obs_columns: Vec<ObsColumn> = match &obs {
        Some(o) => {
            writer.set_obs_schema(o.schema().clone(), &ObsWriteOptions::default()).map_err(dataset_err(output))?;
            // Every column is copied: fetched into the node cache first (as a reader of the obs would).
            let names: Vec<&str> = o.columns().into_iter().map(|(name, _)| name).collect();
            o.localize_blocking(&names).map_err(|e| ConvertError::Obs {
                context: format!("fetching the obs of {source}"),
                cause: Box::new(e),
            })?;
            o.columns()
                .into_iter()
                .map(|(name, kind)| {
                    let cats = o.categories(name).ok().flatten().map(|c| Arc::<[String]>::from(c.to_vec()));
                    (name.to_string(), kind, cats)
                })
                .collect()
        }
        None => Vec::new(),
    };

    // The chosen cells tile by tile, in source order.
    let (starts, ends) = chosen.selection().ranges();
    let mut cells = Vec::with_capacity(tile_size as usize);
    let mut n_tiles = 0;
    // A row's gene indices as the remap takes them, reused from row to row.
    let mut row_genes: Vec<u32> = Vec::new();
    let mut flush = |cells: &mut Vec<u64>| -> Result<(), ConvertError> {
        if cells.is_empty() {
            return Ok(());
        }
        let batch = ds.get_batch_as::<u32>(cells).map_err(dataset_err(source))?;
        let mut tile = CanonicalCsr::new(kept.len() as u64);
        for r in 0..cells.len() {
            let (lo, hi) = (batch.indptr[r] as usize, batch.indptr[r + 1] as usize);
            row_genes.clear();
            row_genes.extend(batch.indices[lo..hi].iter().map(|&g| g as u32));
            remap.push_row(&row_genes, &batch.values[lo..hi], &mut tile.indices, &mut tile.values);
            tile.indptr.push(tile.indices.len() as u64);
        }
        match &obs {
            Some(o) => {
                let mut tile_obs = TileObs::new();
                for (name, kind, cats) in &obs_columns {
                    let values = o.take_column(cells, name).map_err(|e| ConvertError::Obs {
                        context: format!("reading obs column {name:?} of {source}"),
                        cause: Box::new(e),
                    })?;
                    let data = match (kind, cats) {
                        (ColumnKind::Category, Some(cats)) => {
                            // Codes come in the shard's width; the writer takes them as 32-bit.
                            let wide = arrow_cast::cast(&values, &arrow_schema::DataType::Int32).ok();
                            let Some(codes) = wide.as_ref().and_then(|w| w.as_primitive_opt::<Int32Type>()) else {
                                return Err(ConvertError::Inputs(format!(
                                    "{source}: obs column {name:?} is a category column whose codes are {}",
                                    values.data_type()
                                )));
                            };
                            let codes = (0..codes.len()).map(|i| if codes.is_null(i) { -1 } else { codes.value(i) });
                            ColumnData::category(codes.collect(), Arc::clone(cats))
                        }
                        _ => ColumnData::Array(values),
                    };
                    tile_obs.push(name.clone(), data);
                }
                writer.push_tile_with_obs(tile, &tile_obs).map_err(dataset_err(output))?;
            }
            None => {
                writer.push_tile(tile).map_err(dataset_err(output))?;
            }
        }
        n_tiles += 1;
        cells.clear();
        if opts.stop_after_tiles.is_some_and(|stop| n_tiles >= stop) {
            return Err(ConvertError::Output(format!("{output}: stopped after {n_tiles} tiles, as asked")));
        }
        Ok(())
    };
    for (&a, &b) in starts.iter().zip(&ends) {
        for cell in a..b {
            cells.push(cell);
            if cells.len() as u64 == tile_size {
                flush(&mut cells)?;
            }
        }
    }
    flush(&mut cells)?;

    // The kept genes' names, order and table.
    if let Some(names) = ds.var_names().map_err(dataset_err(source))? {
        writer.set_var_names(kept.iter().map(|&j| names[j].clone()).collect()).map_err(dataset_err(output))?;
    }
    if let Some(order) = ds.gene_order().map_err(dataset_err(source))? {
        // The kept genes' source positions, renumbered 0.. in their order (a permutation of the kept genes).
        let mut by_source: Vec<(i32, usize)> = kept.iter().enumerate().map(|(out, &j)| (order[j], out)).collect();
        by_source.sort_unstable();
        let mut renumbered = vec![0i32; kept.len()];
        for (rank, &(_, out)) in by_source.iter().enumerate() {
            renumbered[out] = rank as i32;
        }
        writer.set_gene_order(renumbered).map_err(dataset_err(output))?;
    }
    if let Some(var) = ds.var_table().map_err(dataset_err(source))? {
        let take = arrow_array::UInt32Array::from(kept.iter().map(|&j| j as u32).collect::<Vec<_>>());
        let cut = arrow_select::take::take_record_batch(&var, &take)
            .map_err(|e| ConvertError::Output(format!("{source}: cutting var.parquet: {e}")))?;
        let table = VarTable::from_record_batch(&cut).and_then(|t| encode_var_parquet(&t)).map_err(|e| {
            ConvertError::Obs { context: format!("writing the gene table of {output}"), cause: Box::new(e) }
        })?;
        writer.put_file(dct_dataset::manifest::VAR_TABLE_NAME, table).map_err(dataset_err(output))?;
    }
    let written = writer.finish().map_err(dataset_err(output))?;
    // Finished: the dataset holds only the format's files.
    out.delete(SUBSET_MARKER)?;
    Ok(SubsetReport { n_cells: written.n_cells, n_genes: written.n_genes, n_tiles, already_done: false })
}

/// A digest of the cells (as `(starts, ends)` ranges) and genes a subset keeps: what says that a dataset at the
/// output is this subset.
/// Whether a finished subset's `metadata.subset` (`done`) is the one asked for; one written before subsets recorded
/// their source's manifest digest is compared without it.
fn same_subset(done: &serde_json::Value, asked: &serde_json::Value) -> bool {
    if done.get("source_manifest_sha256").is_some() { done == asked } else { *done == without_source_digest(asked) }
}

fn without_source_digest(subset: &serde_json::Value) -> serde_json::Value {
    let mut v = subset.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("source_manifest_sha256");
    }
    v
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn choice_digest((starts, ends): &(Vec<u64>, Vec<u64>), genes: &[usize]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [starts, ends] {
        h.update((part.len() as u64).to_le_bytes());
        part.iter().for_each(|v| h.update(v.to_le_bytes()));
    }
    h.update((genes.len() as u64).to_le_bytes());
    genes.iter().for_each(|&g| h.update((g as u64).to_le_bytes()));
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
