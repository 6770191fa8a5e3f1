//! Finalizing a conversion: every tile checked, the side files (gene order, names, `var.parquet`), the obs shards
//! cut from every input's obs, and the manifest, last.

use bytes::Bytes;
use dct_dataset::manifest::VAR_TABLE_NAME;
use dct_dataset::{Manifest, ManifestSettings, SideFiles, TileStats, finish_dataset};
use dct_input::H5adSource;
use dct_obs::{ObsWriteOptions, ObsWriteSummary, ObsWriter, encode_var_parquet};
use rayon::prelude::*;
use serde_json::json;

use crate::error::ConvertError;
use crate::io::Output;
use crate::obs::{InputObs, InputVar, SchemaPlan, TileCutter, combined_var_table, var_table};
use crate::options::{GeneSort, sample_flags};
use crate::output::{TileState, check_tile, finished_dataset};
use crate::plan::{PLAN_MARKER, Plan, RECEIPTS_DIR};
use crate::remap::NO_COLUMN;
use crate::run::{RunOptions, check_input_files, reopen_input};
use crate::scan::{matching_keys, open_gene_table};

/// `var.parquet`: the first input's gene table in stored column order, or in a gene space every input's combined
/// ([`combined_var_table`]).
fn var_table_file(out: &Output, plan: &Plan) -> Result<VarFile, ConvertError> {
    let (table, skipped, disagreeing) = match &plan.genes {
        None => {
            let source = reopen_input(plan, 0)?;
            let (table, skipped) = var_table(source.genes(), Some(&plan.gene_order), true, source.path())?;
            (table, skipped, 0)
        }
        Some(genes) => {
            let column_of: rustc_hash::FxHashMap<&str, u32> =
                genes.keys.iter().enumerate().map(|(c, k)| (k.as_str(), c as u32)).collect();
            let options = plan.input_options()?;
            // Every input's gene table, read in parallel (the strings cost a lookup each).
            let read: Vec<(InputVar, Vec<(String, String)>)> = plan
                .inputs
                .par_iter()
                .map(|input| {
                    let source = open_gene_table(&input.path, &options)?;
                    let keys = matching_keys(source.as_ref(), genes.key.as_deref(), &input.path)?;
                    let (table, left_out) = var_table(source.genes(), None, false, source.path())?;
                    let left_out = left_out.into_iter().map(|(c, why)| (format!("{}: {c}", input.path), why)).collect();
                    let columns =
                        keys.iter().map(|k| column_of.get(k.as_str()).copied().unwrap_or(NO_COLUMN)).collect();
                    Ok((InputVar { table, columns }, left_out))
                })
                .collect::<Result<_, ConvertError>>()?;
            let mut inputs = Vec::with_capacity(read.len());
            let mut skipped = Vec::new();
            for (input, left_out) in read {
                inputs.push(input);
                skipped.extend(left_out);
            }
            let (table, disagreeing) = combined_var_table(&inputs, plan.var_names.clone())?;
            (table, skipped, disagreeing)
        }
    };
    let bytes = encode_var_parquet(&table).map_err(|source| ConvertError::Obs {
        context: format!("encoding {}", out.store.url(VAR_TABLE_NAME)),
        cause: Box::new(source),
    })?;
    Ok(VarFile { bytes, left_out: skipped, described_differently: disagreeing })
}

/// `var.parquet`, the var columns left out of it (with the reason), and in a gene space how many genes a later
/// input describes differently from the kept description.
struct VarFile {
    bytes: Bytes,
    left_out: Vec<(String, String)>,
    described_differently: u64,
}

/// The obs of input `i`, read and converted to the plan's schema.
pub(crate) fn read_input_obs(plan: &Plan, schema: &SchemaPlan, i: usize) -> Result<InputObs, ConvertError> {
    let input = &plan.inputs[i];
    let (frame, names) = if input.kind == "h5ad" && schema.needs_frame() {
        let h5ad = H5adSource::open_counts_only(std::path::Path::new(&input.path), &plan.input_options()?.matrix)?;
        let frame = h5ad.read_obs()?;
        let names = frame.index.clone();
        (Some(frame), names)
    } else {
        (None, reopen_input(plan, i)?.cell_names().to_vec())
    };
    if names.len() as u64 != input.n_cells {
        return Err(ConvertError::Inputs(format!(
            "{} has {} cell names but {} cells in the plan: the input changed since the plan was made; make a new \
             plan",
            input.path,
            names.len(),
            input.n_cells
        )));
    }
    let converted = InputObs::read(schema, &input.path, frame, names)?;
    debug_assert_eq!(converted.n_cells() as u64, input.n_cells);
    Ok(converted)
}

/// Writes the obs shards and `obs/schema.json` (see [`finalize`]).
fn write_obs(out: &Output, plan: &Plan, tile_cells: &[u64]) -> Result<Option<ObsWriteSummary>, ConvertError> {
    let (Some(obs), Some(schema)) = (&plan.obs, plan.obs_schema()?) else { return Ok(None) };
    let schema = SchemaPlan::new(schema);
    let context = || format!("writing the obs of {}", out.store.root());
    let options = ObsWriteOptions { tiles_per_file: obs.tiles_per_file, zstd_level: plan.zstd_level.clamp(1, 22) };
    let mut writer = ObsWriter::new(out.store.clone(), schema.schema().clone(), tile_cells, &options)
        .map_err(|source| ConvertError::Obs { context: context(), cause: Box::new(source) })?;
    let mut cutter = TileCutter::new(&schema, tile_cells);
    // Inputs are read and converted a few at a time in parallel (one per thread), then cut in order.
    let batch = rayon::current_num_threads().max(1);
    let indices: Vec<usize> = (0..plan.inputs.len()).collect();
    for group in indices.chunks(batch) {
        let converted: Vec<InputObs> =
            group.par_iter().map(|&i| read_input_obs(plan, &schema, i)).collect::<Result<_, _>>()?;
        for input_obs in &converted {
            cutter.push(input_obs, |t, tile| {
                out.block_on(writer.write_tile(&tile))?.map_err(|source| ConvertError::Obs {
                    context: format!("{} (tile {t})", context()),
                    cause: Box::new(source),
                })
            })?;
        }
    }
    cutter.finish()?;
    let summary = out
        .block_on(writer.finish())?
        .map_err(|source| ConvertError::Obs { context: context(), cause: Box::new(source) })?;
    Ok(Some(summary))
}

/// Checks every tile of the plan (present, structure, CRC, cells and genes) and writes `gene_order.npy`,
/// `var_names.txt`, `var.parquet`, the obs (shards, then `obs/schema.json`) and, last, `manifest.json`.
///
/// `var.parquet` is the gene table of the first input (h5ad `var`, or id, name and feature type of 10x inputs) in
/// output column order, its index (the gene names) kept with pandas metadata.
///
/// # Obs
///
/// Obs is written here, once, rather than by the parts: it is small next to X (tens of bytes per cell against
/// kilobytes), and one writer gives shards of whole tiles without coordination between parts. Each input's obs is
/// read again, converted to the plan's schema (categorical codes remapped to the global vocabulary, NaN floats as
/// nulls, numeric types widened), and cut into tiles of the plan's cells that cross input boundaries: exactly one
/// row group per tile. Inputs are read a few at a time in parallel (as many as the rayon pool has threads). Memory:
/// that many inputs' obs at a time, each read whole (about its decoded size twice over while it is converted: 8
/// bytes per value of numeric columns, 4 per categorical code, the bytes of strings), one tile, and
/// the shard being encoded (compressed, up to `tiles_per_file` tiles). Re-running finalize rewrites the same bytes.
pub fn finalize(plan: &Plan, opts: &RunOptions) -> Result<Manifest, ConvertError> {
    let out = Output::open(&plan.output, &opts.store)?;
    match out.get(PLAN_MARKER)? {
        Some(bytes) if Plan::from_json(&bytes, &out.store.url(PLAN_MARKER))?.fingerprint == plan.fingerprint => {}
        Some(_) => {
            return Err(ConvertError::Output(format!("{} belongs to another conversion", out.store.root())));
        }
        None => {
            if let Some(manifest) = finished_dataset(&out, plan)? {
                out.delete_prefix(RECEIPTS_DIR)?; // left by a finalize stopped just after the manifest
                return Ok(manifest);
            }
            return Err(ConvertError::Output(format!(
                "{} holds no tiles of this plan: run its parts first",
                out.store.root()
            )));
        }
    }
    // Finalize reads every input's genes, cell names and obs: all must be what the parts read.
    for i in 0..plan.inputs.len() {
        check_input_files(plan, i)?;
    }
    let mut tiles = Vec::with_capacity(plan.n_tiles);
    let mut problems = Vec::new();
    for t in 0..plan.n_tiles {
        match check_tile(&out, plan, t)? {
            TileState::Valid { nnz, bytes } => {
                let (first, end) = plan.tile_cells(t);
                tiles.push(TileStats { cells: end - first, nnz, bytes });
            }
            TileState::Missing => problems.push(format!("tile {t} is missing")),
            TileState::Invalid(why) => problems.push(format!("tile {t} is invalid: {why}")),
        }
    }
    if !problems.is_empty() {
        return Err(ConvertError::Incomplete { output: out.store.root().to_string(), problems });
    }
    let tile_cells: Vec<u64> = tiles.iter().map(|t| t.cells).collect();
    let mut side = SideFiles::new(plan.n_genes);
    side.set_gene_order(plan.gene_order.iter().map(|&g| g as i32).collect())?;
    side.set_var_names(plan.var_names.clone())?;
    let mut var_skipped = Vec::new();
    let mut var_disagreeing = 0;
    if plan.write_var {
        let var = var_table_file(&out, plan)?;
        side.add_file(VAR_TABLE_NAME, var.bytes)?;
        var_skipped = var.left_out;
        var_disagreeing = var.described_differently;
    }
    let obs = write_obs(&out, plan, &tile_cells)?.map(|summary| summary.fields);
    let mut metadata = json!({
        "converter": format!("deltacells {}", env!("CARGO_PKG_VERSION")),
        "inputs": plan.inputs.iter().map(|i| &i.path).collect::<Vec<_>>(),
        "matrix": plan.matrix,
        "gene_sort": plan.gene_sort,
        "convert_plan": plan.fingerprint,
        // The keys the original converter records, for scripts that read them.
        "sort_genes": plan.gene_sort != "keep",
        "sort_genes_n_files": genes_sorted_over(&plan.gene_sort, plan.inputs.len()),
        "n_files": plan.inputs.len(),
        "tile_size": plan.tile_size,
        "n_chunks": plan.n_chunks,
        "level": plan.zstd_level,
    });
    if !var_skipped.is_empty() {
        metadata["var_columns_left_out"] = json!(var_skipped);
    }
    if let Some(genes) = &plan.genes {
        // What the gene space was made of, and how many genes' descriptions in var.parquet are the first input's
        // where a later input said otherwise.
        metadata["genes"] = json!({
            "space": genes.space,
            "key": genes.key,
            "var_genes_described_differently": var_disagreeing,
        });
    }
    let settings = ManifestSettings {
        version: plan.tile_version()?,
        n_genes: plan.n_genes,
        tile_size: plan.tile_size,
        n_chunks: plan.n_chunks as u64,
        zstd_level: i64::from(plan.zstd_level),
    };
    let manifest = Manifest::build(settings, &tiles, obs, metadata);
    // The side files, then the manifest, last: it makes the dataset visible. Then the marker goes: a finished
    // dataset holds only the spec's files, and its manifest's `metadata.convert_plan` still ties it to the plan (a
    // re-run finds it finished).
    let manifest = out.block_on(finish_dataset(&out.store, manifest, side))??;
    out.delete(PLAN_MARKER).and_then(|()| out.delete_prefix(RECEIPTS_DIR)).map_err(|e| {
        ConvertError::Output(format!(
            "{} is complete (readers and verify read it), but the conversion's own files ({PLAN_MARKER}, \
             {RECEIPTS_DIR}/) could not be removed ({e}); run the conversion again where objects may be deleted, or \
             remove them",
            out.store.root()
        ))
    })?;
    Ok(manifest)
}

/// How many inputs the gene order was summed over, from the plan's `gene_sort` ("all", "sample:N", "keep").
fn genes_sorted_over(gene_sort: &str, n_inputs: usize) -> usize {
    let sort = match gene_sort {
        "all" => GeneSort::AllInputs,
        "keep" => GeneSort::Keep,
        other => GeneSort::Sample(other.strip_prefix("sample:").and_then(|k| k.parse().ok()).unwrap_or(n_inputs)),
    };
    sample_flags(sort, n_inputs).into_iter().filter(|&f| f).count()
}
