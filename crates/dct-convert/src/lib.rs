//! Convert count matrices (AnnData `.h5ad`, 10x Genomics HDF5, 10x Matrix Market) into deltacells datasets.
//!
//! A conversion is three steps, so it can run on one machine or be split over many by the batch scheduler at
//! hand (a Slurm array, a Kubernetes indexed Job, a cloud batch array):
//!
//! 1. [`make_plan`]: open every input, check that their gene lists agree (or, with [`ConvertOptions::genes`],
//!    combine different lists into one gene space: a union, an intersection or a vocabulary, each input's genes
//!    matched by name or a gene-table column; a gene an input lacks is zero for its cells), sum gene totals (inputs scanned in
//!    parallel) and fix the gene order (by decreasing total) and the tiles. The [`Plan`] is a JSON file. This
//!    pass can itself be split: [`scan_inputs_part`] scans a share of the inputs and writes one scan file per
//!    input (cells, gene list fingerprint, gene totals, obs summary) into [`scan_dir`] of the plan file, and
//!    [`make_plan_with_scans`] merges them (scanning whatever is missing, stale or corrupt) into the same plan.
//! 2. [`run_part`]: write one contiguous share of the tiles to the output URL. Tiles are written atomically and
//!    a part skips tiles that are already complete and valid, so parts are idempotent and an interrupted part
//!    resumes where it stopped. Memory is bounded by the tile being built, the tile being compressed and one input
//!    window, not by the inputs' size.
//! 3. [`finalize`]: check every tile and write the side files (`gene_order.npy`, `var_names.txt`, `var.parquet`)
//!    and the obs, then `manifest.json` last.
//!
//! [`convert`] does all three on one machine, keeping a copy of the inputs the plan decoded (a [`Spill`],
//! within a budget) so that the tiles read them back instead of decoding them again. Tiles hold `tile_size` consecutive cells across input
//! boundaries, so the same cells split into files differently give byte-identical tiles, and a plan's parts
//! give the same bytes as a one-shot conversion.
//!
//! # Obs
//!
//! Per-cell metadata goes into obs shards beside the tiles (FORMAT-v2.md, "Obs"): the obs columns of `.h5ad`
//! inputs, then the cell names as `obs_names` (string), last, as the original converter orders them (inputs
//! without obs, 10x HDF5 and Matrix Market, give `obs_names` from their barcodes, and missing values in the other
//! columns). [`make_plan`] fixes ONE schema for
//! all inputs: one vocabulary per categorical column, the union over inputs in order of first appearance, coded
//! int8 / int16 / int32 by its size, or stored as strings above [`ConvertOptions::max_categories`]; numeric types
//! widened to hold every input's values; NaN floats become nulls. Columns are chosen with
//! [`ConvertOptions::obs_columns`] / [`ConvertOptions::obs_exclude`]; a selected column the reader cannot convert
//! (datetimes, nested data) is an error naming it and its file. The schema's exact `obs/schema.json` text is part of
//! the [`Plan`] (so its fingerprint covers it). [`finalize`] writes the shards, one row group per tile, tiles
//! crossing input boundaries (memory and reasons: see [`finalize`]).
//!
//! # Modules
//!
//! * `inputs.rs`: `resolve_inputs`, which files the arguments name (globs with `**`, hidden names left out, each
//!   path once, in natural order by `natural_cmp`), for the CLI and Python alike.
//! * `make_plan`: scans the inputs in parallel, checks the gene lists, and fixes the gene order and the obs schema.
//! * `scan_inputs_part` and `make_plan_with_scans`: the same first pass split over machines, with one checked
//!   per-input scan file each in `PLAN.json.d/scan-<i>.json`, merged into the same plan; stale or corrupt files are
//!   scanned again.
//! * `run.rs`: `run_part`, a contiguous share of the tiles, skipping complete ones; one tile worker per core reads,
//!   renumbers and encodes whole tiles.
//! * `finalize.rs`: `finalize` checks the tiles, then the obs shards, then calls `dct_dataset::finish_dataset` for
//!   the side files, `var.parquet` and the manifest, last; then the plan marker `convert-plan.json` is removed, and
//!   a re-run finds the dataset finished by the manifest's `metadata.convert_plan`.
//! * `output.rs`: tile checks, the plan marker, a finished dataset, and clearing.
//! * `oneshot.rs`: `convert` / `convert_with`, all three steps; `convert_with` reports each `Stage` and returns a
//!   `ConvertReport`, which the CLI prints.
//! * `spill.rs`: the `Spill`, the inputs the plan decoded, kept in a private temporary folder within a budget and
//!   read back by the tiles instead of decoding the inputs twice.
//! * `append/`: `append`, cells added to a dataset: the inputs converted by a plan in the dataset's genes and tile
//!   grid into a staging folder, the partial last tile joined with the first new cells, the obs shards they join
//!   rewritten with the grown schema, then everything moved into place and the manifest written last; a journal
//!   keeps appends apart and lets an interrupted one be completed; the manifest's `metadata.appends` records each.
//! * `merge.rs`: `merge`, one dataset from several with the same genes: tiles copied as they are where they fall
//!   whole on the new tiles, re-encoded after a source whose last tile is partial; obs combined as for an append.
//! * `subset.rs`: `subset`, a new dataset of some of a dataset's cells (by index or obs conditions) and genes,
//!   with their obs and gene table.
//! * `align.rs`: `align_members`, a corpus's members written again as subsets with their genes in the vocabulary's
//!   order, so that a corpus over them reads rows without re-ordering them.

#![forbid(unsafe_code)]

mod align;
mod append;
mod error;
mod finalize;
mod inputs;
mod io;
mod merge;
mod obs;
mod oneshot;
mod options;
mod output;
mod plan;
mod remap;
mod run;
mod scan;
mod spill;
mod subset;

pub use align::{AlignOptions, AlignedMember, align_members};
pub use append::{
    AppendJournal, AppendOptions, AppendReport, AppendRequest, AppendRunner, AppendedInput, append, append_to,
};
pub use error::ConvertError;
pub use finalize::finalize;
pub use inputs::{natural_cmp, resolve_inputs};
pub use merge::{MergeOptions, MergeReport, merge};
pub use obs::OBS_NAMES;
pub use oneshot::{ConvertReport, Stage, convert, convert_with};
pub use output::clear_output;
pub use plan::{
    ConvertOptions, FileStamp, GeneSort, GeneSpace, PLAN_FORMAT, PLAN_MARKER, Plan, PlanGenes, PlanInput, PlanObs,
    make_plan, make_plan_with_scans, make_plan_with_spill,
};
pub use remap::{GeneRemap, NO_COLUMN};
pub use run::{PartReport, Progress, RunOptions, run_part, run_part_with_spill};
pub use scan::{ScanReport, scan_dir, scan_inputs_part};
pub use spill::{DEFAULT_MAX_BYTES as DEFAULT_SPILL_MAX_BYTES, Spill, SpillOptions, SpillStats};
pub use subset::{SubsetOptions, SubsetReport, parse_condition, subset};
